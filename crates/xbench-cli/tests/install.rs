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

/// contrib/xbench-server.service with ExecStart pointing at this build's binary.
fn service_unit() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../contrib/xbench-server.service"
    );
    std::fs::read_to_string(path)
        .unwrap()
        .replace("/usr/local/bin/xbench", env!("CARGO_BIN_EXE_xbench"))
}

/// systemd's own checks of the unit: `verify` (directives, the ExecStart binary, and that
/// `man:xbench-server(1)` is a page `xbench man --dir` writes), and `security`, whose
/// exposure score (0 best, 100 worst) must stay under 20: a hardening line removed by mistake
/// raises it.
#[test]
fn the_service_unit_passes_systemd_analyze() {
    if !have("systemd-analyze") {
        return;
    }
    let dir = TempDir::new("service-unit");
    let unit = dir.0.join("xbench-server.service");
    std::fs::write(&unit, service_unit()).unwrap();
    let man = dir.0.join("man");
    let out = xbench()
        .args(["man", "--dir"])
        .arg(man.join("man1"))
        .output()
        .unwrap();
    assert!(out.status.success());

    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .env("MANPATH", &man)
        .output()
        .unwrap();
    // `verify` also loads the machine's other units and warns about them (irtt's Debian
    // package: "/lib/systemd/system/irtt.service:9: Special user nobody configured"): only
    // what it says of this unit counts.
    let err = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !l.starts_with('/') || l.starts_with(unit.to_str().unwrap()))
        .collect();
    assert!(out.status.success() && ours.is_empty(), "verify: {err}");

    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--threshold=20", "--no-pager"])
        .arg(&unit)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "exposure above 2.0:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The unit's ExecStart, run as systemd would (%d the credentials directory holding the key),
/// serves a test to a client with the key and refuses one without.
#[test]
fn the_service_command_line_serves_a_client_with_the_key() {
    let dir = TempDir::new("service-exec");
    let key = dir.0.join("xbench.key");
    std::fs::write(&key, "a key of at least sixteen bytes\n").unwrap();
    let unit = service_unit();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart= line");
    let argv: Vec<String> = exec
        .split_whitespace()
        .map(|w| w.replace("%d", dir.0.to_str().unwrap()))
        .collect();
    assert!(
        !argv.iter().any(|a| a.contains('%')),
        "unhandled specifier: {exec}"
    );
    let mut server = Command::new(&argv[0])
        .args(&argv[1..])
        .args(["-B", "127.0.0.1", "-p", "0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(server.stderr.take().unwrap());
    let mut lines = std::io::BufRead::lines(stderr);
    let port = loop {
        let line = lines.next().expect("the server logs its address").unwrap();
        // --log-format json: one object per line.
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            panic!("not a JSON log line ({e}): {line}");
        });
        if let Some(addr) = v["message"]
            .as_str()
            .and_then(|m| m.split("listening on ").nth(1))
        {
            break addr.rsplit(':').next().unwrap().to_owned();
        }
    };
    let client = |with_key: bool| {
        let mut c = xbench();
        c.args([
            "client",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "0.3",
            "-i",
            "0",
            "--json",
        ]);
        if with_key {
            c.arg("--psk-file").arg(&key);
        }
        c.output().unwrap()
    };
    let with = client(true);
    let without = client(false);
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        with.status.success(),
        "{}",
        String::from_utf8_lossy(&with.stderr)
    );
    assert_eq!(without.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&without.stderr).contains("key"),
        "{}",
        String::from_utf8_lossy(&without.stderr)
    );
}
