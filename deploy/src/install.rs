//! `xbench-deploy completions SHELL` and `xbench-deploy man`: the completion script
//! (clap_complete) and the manual pages (clap_mangen), generated from the same clap definitions
//! as `--help`, as `xbench completions` and `xbench man` are. Only printing and writing them;
//! the README says where they go.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result};
use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::exit::{BadInput, Exit};

pub(crate) fn completions(a: CompletionsArgs) -> Result<Exit> {
    // Into memory first: clap_complete panics on a failed write, a closed pipe must not.
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut Cli::command(), "xbench-deploy", &mut buf);
    print(&buf).context("writing the completion script")?;
    Ok(Exit::Success)
}

pub(crate) fn man(a: ManArgs) -> Result<Exit> {
    match &a.dir {
        Some(dir) => {
            if !a.command.is_empty() {
                return Err(BadInput(
                    "--dir writes every page; leave out the subcommand, or drop --dir to print \
                     one page"
                        .into(),
                )
                .into());
            }
            write_all(dir)?;
            eprintln!("manual pages written to {}", dir.display());
        }
        None => {
            let page = page(&a.command).map_err(BadInput)?;
            print(&page).context("writing the manual page")?;
        }
    }
    Ok(Exit::Success)
}

/// The page of `xbench-deploy` or of one of its subcommands.
fn page(path: &[String]) -> Result<Vec<u8>, String> {
    let mut cmd = root();
    for (depth, name) in path.iter().enumerate() {
        let Some(sub) = cmd
            .get_subcommands()
            .find(|s| s.get_name() == name && !s.is_hide_set())
        else {
            let known: Vec<&str> = cmd
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| s.get_name())
                .collect();
            return Err(format!(
                "no manual page for `xbench-deploy {}`; pages exist for: {}",
                path[..=depth].join(" "),
                known.join(", ")
            ));
        };
        cmd = sub.clone();
    }
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut buf)
        .map_err(|e| format!("cannot render the page: {e}"))?;
    Ok(buf)
}

fn write_all(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    clap_mangen::generate_to(root(), dir)
        .with_context(|| format!("cannot write the manual pages to {}", dir.display()))
}

/// Built, so subcommand pages carry their full names and the global flags.
fn root() -> clap::Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// Writes to stdout; a closed pipe (`… | head`) is not an error.
fn print(bytes: &[u8]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
