//! What installing xbench uses: `xbench completions SHELL` and `xbench man`, run as a packager
//! or a user would, and their output checked by the shells and by groff themselves.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};

use common::{TempDir, assert_usage_errors, xbench};

fn stdout_of(args: &[&str]) -> String {
    let out = xbench().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Whether `tool` runs here. In CI (CI=true) scripts/test-all installs every tool these tests
/// use, so a missing one fails there instead of skipping.
#[allow(clippy::print_stderr)] // a skipped check says so
fn have(tool: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        found || std::env::var("CI").as_deref() != Ok("true"),
        "{tool} is missing; scripts/test-all installs it"
    );
    if !found {
        eprintln!("note: {tool} not installed, its check skipped");
    }
    found
}

/// Runs `tool ARGS` with `input` on stdin; fails on a non-zero status, returns stderr.
fn check_with(tool: &str, args: &[&str], input: &str) -> String {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{tool} {args:?} refused it: {err}");
    err
}

#[test]
fn completion_scripts_name_the_subcommands_and_parse_in_their_shell() {
    for (shell, checker) in [
        ("bash", Some(("bash", &["-n"][..]))),
        ("zsh", Some(("zsh", &["-n"][..]))),
        ("fish", Some(("fish", &["--no-execute"][..]))),
        ("elvish", None),
        ("powershell", None),
    ] {
        let s = stdout_of(&["completions", shell]);
        for word in ["client", "server", "report", "psk-file", "json-stream"] {
            assert!(s.contains(word), "{shell}: no `{word}`");
        }
        if let Some((tool, args)) = checker
            && have(tool)
        {
            check_with(tool, args, &s);
        }
    }
}

#[test]
fn bash_completes_client_flags_after_the_subcommand() {
    if !have("bash") {
        return;
    }
    let script = stdout_of(&["completions", "bash"]);
    // What bash does on `xbench client --ps<TAB>`: source the script, call its function.
    let driver = format!(
        "{script}\nCOMP_WORDS=(xbench client --ps); COMP_CWORD=2; COMP_LINE='xbench client --ps'; \
         COMP_POINT=${{#COMP_LINE}}; _xbench xbench --ps client; printf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
    );
    let out = Command::new("bash")
        .args(["--norc", "-c", &driver])
        .output()
        .unwrap();
    let got = String::from_utf8_lossy(&out.stdout);
    assert!(
        got.lines().any(|l| l == "--psk-file"),
        "completions of `xbench client --ps`: {got:?}; stderr {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn man_prints_the_main_page_and_writes_every_page() {
    let main = stdout_of(&["man"]);
    for section in [
        ".TH xbench 1",
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH SUBCOMMANDS",
    ] {
        assert!(main.contains(section), "no {section}");
    }
    let client = stdout_of(&["man", "client"]);
    assert!(client.contains("\\-\\-psk\\-file"));

    let dir = TempDir::new("man-pages");
    let out = xbench()
        .args(["man", "--dir"])
        .arg(&dir.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for page in [
        "xbench.1",
        "xbench-client.1",
        "xbench-server.1",
        "xbench-lab-run.1",
        "xbench-man.1",
    ] {
        assert!(names.iter().any(|n| n == page), "no {page} in {names:?}");
    }
    assert!(
        !names
            .iter()
            .any(|n| n.contains("delay-line") || n.contains("help")),
        "a hidden or help page was written: {names:?}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.0.join("xbench.1")).unwrap(),
        main,
        "the printed page and the written one differ"
    );

    // groff reads every page without a warning: -ww all of them but `break` (a line that
    // cannot be justified, layout only); -k runs preconv on the UTF-8 text, as man does.
    if have("groff") {
        for name in &names {
            let page = std::fs::read_to_string(dir.0.join(name)).unwrap();
            let warnings = check_with(
                "groff",
                &["-k", "-man", "-Tutf8", "-z", "-ww", "-Wbreak"],
                &page,
            );
            assert!(warnings.trim().is_empty(), "{name}: {warnings}");
        }
    }
}

#[test]
fn completions_and_man_refuse_what_they_cannot_do() {
    assert_usage_errors(
        &["completions"],
        &[(&["tcsh"], "invalid value 'tcsh'"), (&[], "<SHELL>")],
    );
    assert_usage_errors(
        &["man"],
        &[
            (&["clint"], "no manual page for `xbench clint`"),
            (&["lab", "delay-line"], "pages exist for: up, run"),
            (&["client", "--dir", "/tmp"], "--dir writes every page"),
        ],
    );
}
