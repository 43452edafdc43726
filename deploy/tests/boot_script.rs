//! The server boot script run for real, as root, in a network namespace of its own, against
//! a local HTTP server that serves the real xbench binary: a good download (xbench installed
//! and checked, the key read, the unit written; then the unit's own command line serves a
//! test with the key and the allow list), a wrong sha256, and a server that cannot be
//! reached. Each must end as the boot's contract says: `ok`, or `failed: <why>` in the
//! boot-status file, a line on the console, and a non-zero exit; and each, good or failed,
//! leaves the host a persistent timer that powers it off at the run's deletion-due time.
//!
//! Only what a test machine has not is faked, on PATH: `aws` (prints the key, as
//! `aws ssm get-parameter` would), `systemctl` and `journalctl`. Paths go under a scratch
//! root (`XB_ROOT`).

#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use xbench::ClientConfig;
use xbench_deploy::Scenario;
use xbench_deploy::binary::sha256_file;
use xbench_deploy::command;
use xbench_deploy::state::RunId;
use xbench_deploy::userdata::{self, Fetch, HostBoot};
use xbench_lab::sys::netns::{self, Detach};

use common::{TempDir, root_or_skip, serial, xbench_bin};

/// The run's deletion-due time the scripts are made with: the host powers off then.
const DUE: &str = "2031-07-04T17:30:05Z";

const KEY: &str = "6b65792d6f662d746869732d72756e2d666f722d746865207465737473212121";

/// A namespace with loopback up, deleted on drop.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("xbdboot-{tag}");
        let _ = netns::delete(&name);
        netns::add(&name).unwrap();
        let ok = Command::new("ip")
            .args(["-n", &name, "link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(ok.success());
        Netns(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = netns::delete(&self.0);
    }
}

/// Serves `file` at any path over HTTP/1.0 on 127.0.0.1 inside `ns`, from a thread.
fn serve(ns: &str, file: PathBuf) -> u16 {
    let listener =
        netns::run_in(ns, || TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap()).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { continue };
            let mut line = String::new();
            let _ = BufReader::new(&c).read_line(&mut line);
            let body = std::fs::read(&file).unwrap();
            let head = format!(
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = c.write_all(head.as_bytes());
            let _ = c.write_all(&body);
        }
    });
    port
}

/// Fake `aws`, `systemctl`, `journalctl` in `dir`; `systemctl` logs its arguments.
fn fake_tools(dir: &Path) {
    let tools = [
        // `aws ssm get-parameter` prints the key; `aws s3 cp ... s3://B/K DEST` copies the
        // xbench built beside this test (what the run's object holds) to DEST.
        (
            "aws",
            format!(
                "#!/bin/sh\necho \"$*\" >> '{log}/aws.log'\nif [ \"$1\" = s3 ]; then for a; do last=$a; done; exec cp '{object}' \"$last\"; fi\necho '{KEY}'\n",
                log = dir.display(),
                object = xbench_bin().display()
            ),
        ),
        (
            "systemctl",
            format!(
                "#!/bin/sh\necho \"$*\" >> '{}/systemctl.log'\n",
                dir.display()
            ),
        ),
        (
            "journalctl",
            "#!/bin/sh\necho 'no journal here'\n".to_owned(),
        ),
    ];
    for (name, body) in tools {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
}

struct Boot {
    status: String,
    console: String,
    code: i32,
    root: TempDir,
}

/// Runs the server boot script for `fetch` in `ns` under a scratch root.
fn boot(ns: &str, fetch: &Fetch) -> Boot {
    let root = TempDir::new("boot");
    let bin = root.path().join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    fake_tools(&bin);
    let scenario = Scenario::from_toml(
        "name='b'\ninstance_type='m5.large'\n[[vpc]]\nregion='us-east-1'\ncidr='10.1.0.0/16'\n[[vpc]]\nname='b'\nregion='us-east-1'\ncidr='10.2.0.0/16'\n[[path]]\nkind='peering'\nclient='us-east-1'\nserver='b'\n",
    )
    .unwrap();
    let run = RunId::generate(SystemTime::now()).unwrap();
    let b = HostBoot {
        run: &run,
        host: "server-b",
        region: "us-east-1",
        fetch,
        deletion_due: DUE,
    };
    let allow = ["127.0.0.1/32".parse().unwrap()];
    let script = root.path().join("user-data.sh");
    std::fs::write(&script, userdata::server(&scenario, &b, &allow)).unwrap();
    let console = root.path().join("console");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new("bash");
    c.arg(&script)
        .env("PATH", path)
        .env("XB_ROOT", root.path())
        .env("XB_CONSOLE", &console)
        .env("XB_FETCH_ATTEMPTS", "2")
        .env("XB_FETCH_PAUSE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = netns::spawn_in(ns, &mut c, Detach::No).unwrap();
    let out = child.wait_with_output().unwrap();
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    let status = read(root.path().join("var/lib/xbench-deploy/boot-status"));
    eprintln!(
        "boot script: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Boot {
        status: status.trim().to_owned(),
        console: read(console),
        code: out.status.code().unwrap_or(-1),
        root,
    }
}

#[test]
fn root_boot_script_good_download_wrong_sha256_and_unreachable_server() {
    if !root_or_skip("root_boot_script_good_download_wrong_sha256_and_unreachable_server") {
        return;
    }
    let _serial = serial();
    let xbench = xbench_bin();
    let ns = Netns::new("a");
    let port = serve(&ns.0, xbench.clone());
    let url = format!("http://127.0.0.1:{port}/xbench?X-Amz-Signature=abc&X-Amz-Expires=60");
    let good = Fetch::Url {
        url: url.clone(),
        sha256: sha256_file(&xbench).unwrap(),
    };

    // A good download: ok, and the unit's own command line serves a keyed test.
    let b = boot(&ns.0, &good);
    assert_eq!(
        (b.code, b.status.as_str()),
        (0, "ok"),
        "console: {}",
        b.console
    );
    assert!(
        b.console.contains("boot complete on server-b"),
        "{}",
        b.console
    );
    let installed = b.root.path().join("usr/local/bin/xbench");
    assert_eq!(
        sha256_file(&installed).unwrap(),
        sha256_file(&xbench).unwrap()
    );
    let psk = b.root.path().join("etc/xbench-deploy/psk");
    assert_eq!(std::fs::read_to_string(&psk).unwrap().trim(), KEY);
    let mode = std::fs::metadata(&psk).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    let log = std::fs::read_to_string(b.root.path().join("fake-bin/systemctl.log")).unwrap();
    assert!(log.contains("restart xbench-server.service"), "{log}");
    serve_with_the_unit(&ns.0, &b.root);
    powers_off_at_the_deletion_due_time(&b.root);

    // A wrong sha256: refused, nothing installed.
    let bad = Fetch::Url {
        url,
        sha256: "0".repeat(64),
    };
    let b = boot(&ns.0, &bad);
    assert_ne!(b.code, 0);
    assert!(
        b.status
            .starts_with("failed: the downloaded xbench binary has sha256"),
        "{}",
        b.status
    );
    assert!(
        b.console.contains("xbench-deploy: boot FAILED on server-b"),
        "{}",
        b.console
    );
    assert!(!b.root.path().join("usr/local/bin/xbench").exists());
    // The power-off was armed before the download: a host whose boot failed stops too.
    powers_off_at_the_deletion_due_time(&b.root);

    // The run's own object, copied with the instance profile (no presigned URL).
    let s3 = Fetch::S3 {
        bucket: "xbench-xb-20250601-3fa9c0-1a2b3c4d".into(),
        key: "xbench/xbench".into(),
        region: "eu-west-2".into(),
        sha256: sha256_file(&xbench).unwrap(),
    };
    let b = boot(&ns.0, &s3);
    assert_eq!((b.code, b.status.as_str()), (0, "ok"), "{}", b.console);
    let aws = std::fs::read_to_string(b.root.path().join("fake-bin/aws.log")).unwrap();
    assert!(
        aws.contains("s3 cp --only-show-errors --region eu-west-2 s3://xbench-xb-20250601-3fa9c0-1a2b3c4d/xbench/xbench "),
        "{aws}"
    );
    assert_eq!(
        sha256_file(&b.root.path().join("usr/local/bin/xbench")).unwrap(),
        sha256_file(&xbench).unwrap()
    );

    // Nothing listens: every attempt fails, then the boot does.
    let dead = Fetch::Url {
        url: "http://127.0.0.1:1/xbench".into(),
        sha256: "0".repeat(64),
    };
    let b = boot(&ns.0, &dead);
    assert_ne!(b.code, 0);
    assert!(
        b.status
            .starts_with("failed: cannot download the xbench binary after 2 attempts"),
        "{}",
        b.status
    );
    assert!(b.console.contains("boot FAILED"), "{}", b.console);
}

/// The boot armed a persistent timer that powers the host off at the run's deletion-due time
/// ([`DUE`]), which systemd reads as that very instant, and enabled it.
fn powers_off_at_the_deletion_due_time(root: &TempDir) {
    let dir = root.path().join("etc/systemd/system");
    let timer = std::fs::read_to_string(dir.join("xbench-deletion-due.timer")).unwrap();
    let service = std::fs::read_to_string(dir.join("xbench-deletion-due.service")).unwrap();
    assert!(timer.contains("Persistent=true\n"), "{timer}");
    assert!(
        service.contains("ExecStart=/usr/bin/systemctl poweroff\n"),
        "{service}"
    );
    let when = timer
        .lines()
        .find_map(|l| l.strip_prefix("OnCalendar="))
        .unwrap();
    let out = Command::new("systemd-analyze")
        .args(["calendar", "--iterations=1", when])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{when}: {text}");
    // "Next elapse: Fri 2031-07-04 17:30:05 UTC" (or, off UTC, its "(in UTC: …)" line).
    let due = DUE.replace('T', " ").replace('Z', " UTC");
    assert!(
        text.lines()
            .any(|l| (l.contains("Next elapse:") || l.contains("in UTC:")) && l.contains(&due)),
        "systemd reads {when:?} as:\n{text}"
    );
    let log = std::fs::read_to_string(root.path().join("fake-bin/systemctl.log")).unwrap();
    assert!(
        log.contains("enable --now xbench-deletion-due.timer"),
        "{log}"
    );
}

/// Starts `xbench server` with the ExecStart the boot wrote (`%d`, systemd's credential
/// directory, standing for the key's directory) and runs a one-second keyed test against it.
fn serve_with_the_unit(ns: &str, root: &TempDir) {
    let unit =
        std::fs::read_to_string(root.path().join("etc/systemd/system/xbench-server.service"))
            .unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    let etc = root.path().join("etc/xbench-deploy");
    let exec = exec.replace("%d", &etc.display().to_string());
    let mut words = exec.split_whitespace();
    let program = words.next().unwrap();
    assert_eq!(program, "/usr/local/bin/xbench");
    let installed = root.path().join("usr/local/bin/xbench");
    let mut c = Command::new(&installed);
    c.args(words).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut server = netns::spawn_in(ns, &mut c, Detach::No).unwrap();
    let target = SocketAddr::from((Ipv4Addr::LOCALHOST, 5201));
    let mut ready = false;
    for _ in 0..100 {
        let up = netns::run_in(ns, || {
            std::net::TcpStream::connect_timeout(&target, Duration::from_millis(200)).is_ok()
        })
        .unwrap();
        if up {
            ready = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut config = ClientConfig::new("127.0.0.1");
    config.spec.end = xbench::config::EndCondition::Duration(Duration::from_secs(1));
    let argv = command::client_argv(&config, Some(&etc.join("psk").display().to_string()))
        .expect("the probe as a command");
    let mut c = Command::new(&installed);
    c.args(&argv).stdout(Stdio::piped()).stderr(Stdio::piped());
    let client = netns::spawn_in(ns, &mut c, Detach::No).unwrap();
    let out = client.wait_with_output().unwrap();
    let _ = server.kill();
    let mut err = String::new();
    if let Some(mut e) = server.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let _ = server.wait();
    assert!(ready, "the unit's server did not listen: {err}");
    assert!(
        out.status.success(),
        "a keyed test against the unit's server: {}\nserver: {err}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: xbench::report::TestReport = serde_json::from_slice(&out.stdout).unwrap();
    assert!(matches!(report.outcome, xbench::report::Outcome::Completed));
}
