//! The manual stays true: every ```` ```sh runnable ```` block of README.md and docs/*.md is run
//! against a local server, line by line, as a user would type it.
//!
//! What the test changes, so that a few seconds cover every block: `HOST` (and `HOST2`)
//! become this test's server (`127.0.0.1 -p PORT`), `-t` becomes 0.3 s, `-O` and `--pause` are
//! dropped and `--repeat` is at most 2. Lines run through `sh -c` with this build's `xbench`
//! first on `PATH`, in a fresh directory per block (what one line saves, the next reads), and
//! `xbench server` lines are left out: the test's own server stands in for them. Each line
//! must exit 0 and must not panic. Blocks that need root, a second host or minutes are not
//! marked runnable.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ServerProc, TempDir};

/// One runnable block: where it is, and its lines.
#[derive(Debug)]
struct Block {
    place: String,
    lines: Vec<String>,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The runnable blocks of one Markdown file.
fn blocks(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    let mut current: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim_end() == "```sh runnable" => {
                current = Some(Block {
                    place: format!("{}:{}", path.display(), i + 1),
                    lines: Vec::new(),
                });
            }
            Some(b) if line.starts_with("```") => {
                out.push(std::mem::replace(
                    b,
                    Block {
                        place: String::new(),
                        lines: Vec::new(),
                    },
                ));
                current = None;
            }
            Some(b) => {
                // A trailing comment explains; it is not part of the command.
                let cmd = line.split("  #").next().unwrap_or_default().trim();
                if !cmd.is_empty() && !cmd.starts_with('#') {
                    b.lines.push(cmd.to_owned());
                }
            }
            None => {}
        }
    }
    assert!(
        current.is_none(),
        "{}: a runnable block is not closed",
        path.display()
    );
    out
}

/// Every Markdown page of the manual, and the README.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![workspace().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(workspace().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// `line` as this test runs it: against `port`, short (see the module's comment).
fn shortened(line: &str, port: u16) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        match w {
            "HOST" | "HOST2" => {
                out.push("127.0.0.1".into());
                out.push("-p".into());
                out.push(port.to_string());
            }
            "-t" => {
                words.next();
                out.extend(["-t".into(), "0.3".into()]);
            }
            "-O" | "--pause" => {
                words.next();
            }
            "--repeat" => {
                let n: u32 = words.next().and_then(|n| n.parse().ok()).unwrap_or(1);
                out.extend(["--repeat".into(), n.min(2).to_string()]);
            }
            _ => out.push(w.to_owned()),
        }
    }
    // A client line without -t would run 10 s: the same shortening.
    let client = out.get(1).is_some_and(|w| w == "client");
    let bounded = out.iter().any(|w| w == "-t" || w == "-n" || w == "--bytes");
    if client && !bounded {
        out.extend(["-t".into(), "0.3".into()]);
    }
    out.join(" ")
}

#[test]
fn shortening_keeps_the_command_and_bounds_its_time() {
    assert_eq!(
        shortened(
            "xbench client HOST -P 4 -t 30 -O 3 --repeat 15 --pause 5m",
            5999
        ),
        "xbench client 127.0.0.1 -p 5999 -P 4 -t 0.3 --repeat 2"
    );
    assert_eq!(
        shortened("xbench client HOST2 --rr", 1),
        "xbench client 127.0.0.1 -p 1 --rr -t 0.3"
    );
    assert_eq!(
        shortened("xbench report runs/ --plot s.svg", 1),
        "xbench report runs/ --plot s.svg"
    );
}

#[test]
fn every_runnable_example_of_the_manual_runs() {
    let server = ServerProc::start(&[]);
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_xbench")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let all: Vec<Block> = pages().iter().flat_map(|p| blocks(p)).collect();
    // The README's tour and the pages' examples: if none are found, the marking broke.
    assert!(all.len() >= 4, "runnable blocks: {all:#?}");
    for (n, block) in all.iter().enumerate() {
        let dir = TempDir::new(&format!("docs-{n}"));
        for line in &block.lines {
            assert!(
                line.starts_with("xbench "),
                "{}: a runnable line runs xbench: {line}",
                block.place
            );
            if line.starts_with("xbench server") {
                continue;
            }
            let cmd = shortened(line, server.port);
            let out = Command::new("sh")
                .args(["-c", &cmd])
                .current_dir(&dir.0)
                .env("PATH", &path)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && !err.contains("panicked"),
                "{}: `{line}` (run as `{cmd}`) failed, {}:\n{err}\n{}",
                block.place,
                out.status,
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
}
