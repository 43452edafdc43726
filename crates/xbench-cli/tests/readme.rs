//! The README's front door stays true: its two commands are the ones CI runs
//! (scripts/readme-command reads them for .ci/run and scripts/test-all), and the first one,
//! `cargo run --release -- client`, names exactly one binary on a fresh clone.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The README's command `n` as scripts/readme-command reads it.
fn readme_command(n: u32) -> String {
    let out = Command::new(workspace().join("scripts/readme-command"))
        .arg(n.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The regression of issue 31: the instruction-count gate added a second binary to a default
/// member, and `cargo run --release -- client` stopped at "could not determine which binary to
/// run". `cargo run` with no `--bin` or `-p` picks the one `default-run` of the default members,
/// or their one binary; either must be `xbench`.
#[test]
fn the_readmes_first_command_runs_the_xbench_binary() {
    let first = readme_command(1);
    let words: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(
        words.get(..2),
        Some(&["cargo", "run"][..]),
        "the README's first command is no longer `cargo run …`: {first}; update this test"
    );
    let picks_a_binary = words
        .iter()
        .any(|w| matches!(*w, "--bin" | "-p" | "--package"));
    // cargo's own reading of the workspace, as a fresh clone has it.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace())
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    let default_members: Vec<&Value> = m["workspace_default_members"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    let members: Vec<&Value> = m["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| default_members.contains(&&p["id"]))
        .collect();
    let default_runs: Vec<&str> = members
        .iter()
        .filter_map(|p| p["default_run"].as_str())
        .collect();
    let bins: Vec<&str> = members
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    if !picks_a_binary {
        let chosen = match (&default_runs[..], &bins[..]) {
            ([one], _) | ([], [one]) => *one,
            _ => panic!(
                "`{first}` cannot run on a fresh clone: the default members build the binaries \
                 {bins:?} and name {default_runs:?} as default-run"
            ),
        };
        assert_eq!(chosen, "xbench", "`{first}` would run {chosen}");
    }
}

/// The second command is the whole suite, an executable script of the checkout, and .ci/run
/// runs what the README names rather than a copy of it.
#[test]
fn the_readmes_test_command_is_what_ci_runs() {
    let second = readme_command(2);
    let script = second.split_whitespace().next().unwrap();
    let path = workspace().join(script);
    let mode = std::fs::metadata(&path)
        .unwrap_or_else(|e| panic!("{second}: {e}"))
        .permissions();
    assert!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o111 != 0,
        "{script} is not executable"
    );
    let ci = std::fs::read_to_string(workspace().join(".ci/run")).unwrap();
    assert!(ci.contains("scripts/readme-command 2"), "{ci}");
    let all = std::fs::read_to_string(workspace().join("scripts/test-all")).unwrap();
    assert!(all.contains("scripts/readme-command 1"), "{all}");
}
