//! `xbench-deploy completions SHELL` and `xbench-deploy man`, run as a packager would. No AWS.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_xbench-deploy");

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn completions_name_every_subcommand_in_every_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, out, err) = run(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        for word in ["plan", "up", "down", "gc", "state-dir", "skip-accelerators"] {
            assert!(out.contains(word), "{shell}: no `{word}`");
        }
    }
    let (code, _, err) = run(&["completions", "tcsh"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn man_pages_have_name_synopsis_and_subcommands() {
    let (code, page, err) = run(&["man"]);
    assert_eq!(code, 0, "{err}");
    for section in [
        ".TH xbench-deploy 1",
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH SUBCOMMANDS",
    ] {
        assert!(page.contains(section), "no {section}");
    }
    assert!(page.contains("xbench\\-deploy\\-up(1)"));
    let (code, up, err) = run(&["man", "up"]);
    assert_eq!(code, 0, "{err}");
    assert!(up.contains("\\-\\-yes"));

    let dir = std::env::temp_dir().join(format!("xbench-deploy-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, _, err) = run(&["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for name in [
        "xbench-deploy.1",
        "xbench-deploy-up.1",
        "xbench-deploy-gc.1",
    ] {
        assert!(dir.join(name).is_file(), "no {name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();

    let (code, _, err) = run(&["man", "upp"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("pages exist for: plan, up"), "{err}");
}
