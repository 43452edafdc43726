//! What xbench writes and reads on disk, against the paths an attacker or an accident puts in
//! its way (issue 30): a device node, a FIFO, a symbolic link, a directory that does not
//! exist, a huge file, figures that cannot be true. The rule is `xbench::file`'s; these tests
//! run the binary as a user would.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::{TempDir, root_or_skip, xbench};

fn mknod(p: &Path, mode: libc::mode_t, dev: libc::dev_t) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::mknod(c.as_ptr(), mode, dev) };
    assert_eq!(rc, 0, "mknod {}", p.display());
}

fn mkfifo(p: &Path) {
    mknod(p, libc::S_IFIFO | 0o600, 0);
}

fn file_type(p: &Path) -> fs::FileType {
    fs::symlink_metadata(p).unwrap().file_type()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `cmd` to its end, or kills it after `limit` and fails: the old code blocked for ever
/// on a FIFO, and a test must not.
fn run_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?} (blocked?); stderr: {}",
                text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A short loopback test against the in-process server, writing its report to `json_file`.
fn client_to(json_file: &Path) -> Output {
    xbench()
        .args(["client", "-t", "0.3", "--json-file"])
        .arg(json_file)
        .output()
        .unwrap()
}

/// A port on loopback where nothing listens: a test against it cannot start.
fn dead_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port().to_string()
}

#[test]
fn root_json_file_to_a_device_node_writes_through_it_and_leaves_the_device() {
    if !root_or_skip("root_json_file_to_a_device_node_writes_through_it_and_leaves_the_device") {
        return;
    }
    let d = TempDir::new("files-device");
    // Our own null (1, 3) and full (1, 7) devices, never the system's.
    let null = d.0.join("null");
    mknod(&null, libc::S_IFCHR | 0o666, libc::makedev(1, 3));
    let out = client_to(&null);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(file_type(&null).is_char_device(), "/dev/null replaced");

    // /dev/full: the write fails, is reported, and the device stays.
    let full = d.0.join("full");
    mknod(&full, libc::S_IFCHR | 0o666, libc::makedev(1, 7));
    let out = client_to(&full);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    // The results are still printed.
    assert!(text(&out.stdout).contains("bit/s"), "{}", text(&out.stdout));
    assert!(file_type(&full).is_char_device(), "/dev/full replaced");
    let mut names: Vec<_> = fs::read_dir(&d.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["full", "null"], "temporary files left");
}

#[test]
fn json_file_to_a_fifo_reaches_its_reader_and_stays_a_fifo() {
    let d = TempDir::new("files-fifo");
    let fifo = d.0.join("report.json");
    mkfifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::read(&fifo).unwrap())
    };
    let out = client_to(&fifo);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&reader.join().unwrap()).unwrap();
    assert_eq!(doc["outcome"]["status"], "completed", "{doc}");
    assert!(file_type(&fifo).is_fifo(), "the FIFO was replaced");
}

#[test]
fn json_file_through_a_symlink_writes_the_target_and_keeps_the_link() {
    let d = TempDir::new("files-symlink");
    fs::create_dir(d.0.join("shared")).unwrap();
    let target = d.0.join("shared/report.json");
    fs::write(&target, "stale").unwrap();
    let link = d.0.join("report.json");
    symlink("shared/report.json", &link).unwrap();
    let out = client_to(&link);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(file_type(&link).is_symlink(), "the link was replaced");
    let doc: Value = serde_json::from_slice(&fs::read(&target).unwrap()).unwrap();
    assert_eq!(doc["outcome"]["status"], "completed");

    // A link to nothing: refused before the test, nothing created.
    let dangling = d.0.join("dangling.json");
    symlink("nowhere/report.json", &dangling).unwrap();
    let out = xbench()
        .args(["client", "127.0.0.1", "-p", &dead_port(), "--json-file"])
        .arg(&dangling)
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("which does not exist"), "{err}");
    assert!(!d.0.join("nowhere").exists());
}

#[test]
fn json_file_dash_is_standard_output() {
    let d = TempDir::new("files-dash");
    let out = xbench()
        .current_dir(&d.0)
        .args([
            "client",
            "-t",
            "0.3",
            "--json-file",
            "-",
            "--fields",
            "throughput",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("\"schema_version\""), "{stdout}");
    assert!(!d.0.join("-").exists(), "a file named - was written");
}

#[test]
fn an_output_that_cannot_be_written_fails_before_the_test_with_exit_2() {
    let d = TempDir::new("files-precheck");
    let port = dead_port();
    fs::write(d.0.join("plain"), "").unwrap();
    // Each against a port where nothing listens: the old code tried the test first and
    // failed with exit 1 on the connection, saying nothing of the file.
    let client = |args: &[&str]| {
        xbench()
            .args(["client", "127.0.0.1", "-p", &port])
            .args(args)
            .output()
            .unwrap()
    };
    let missing = d.0.join("no/such/dir/x.json");
    let under_a_file = d.0.join("plain/x.json");
    for (args, needle) in [
        (
            vec!["--json-file", missing.to_str().unwrap()],
            "does not exist",
        ),
        (vec!["--json-file", d.0.to_str().unwrap()], "is a directory"),
        (
            vec!["--rr", "--hist", under_a_file.to_str().unwrap()],
            "--hist",
        ),
        (vec!["--rr", "--hist", "-"], "give a file name, not -"),
    ] {
        let out = client(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("connect"), "{args:?} tried the test: {err}");
    }
    // A sweep's --save: before the first run.
    let out = client(&["-P", "1,2", "--save", under_a_file.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot save runs in"), "{err}");
    // report --plot: before reading anything.
    let out = xbench()
        .args(["report"])
        .arg(&d.0)
        .arg("--plot")
        .arg(d.0.join("no/such/dir/chart.svg"))
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--plot") && err.contains("does not exist"),
        "{err}"
    );
}

/// Two saved runs of a real sweep, `DIR/lo/<cell>/run-{1,2}.json`; returns the cell directory.
fn saved_runs(dir: &Path) -> PathBuf {
    let out = xbench()
        .args([
            "client", "-t", "0.3", "--repeat", "2", "--label", "lo", "--save",
        ])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let cell = fs::read_dir(dir.join("lo"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(cell.join("run-2.json").is_file());
    cell
}

/// `xbench report DIR --html PAGE`, run to its end.
fn report_html(dir: &Path, page: &Path) -> Output {
    let mut cmd = xbench();
    cmd.arg("report").arg(dir).arg("--html").arg(page);
    run_within(cmd, Duration::from_secs(120))
}

#[test]
fn report_html_through_a_symlink_writes_the_target_and_refuses_what_it_cannot_write() {
    let d = TempDir::new("files-html");
    let runs = d.0.join("runs");
    saved_runs(&runs);
    // A link to a page: the target gets the page, the link stays a link.
    fs::create_dir(d.0.join("shared")).unwrap();
    let target = d.0.join("shared/report.html");
    fs::write(&target, "stale").unwrap();
    let link = d.0.join("report.html");
    symlink("shared/report.html", &link).unwrap();
    let out = report_html(&runs, &link);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(file_type(&link).is_symlink(), "the link was replaced");
    let page = fs::read_to_string(&target).unwrap();
    assert!(
        page.starts_with("<!DOCTYPE html>") && page.contains("run-2.json"),
        "{page:.200}"
    );
    let mut names: Vec<_> = fs::read_dir(d.0.join("shared"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["report.html"], "temporary files left");

    // Refused before any run is read, exit 2, the flag named, nothing created: a link to
    // nothing, a directory, and `-` (standard output carries the table).
    let dangling = d.0.join("dangling.html");
    symlink("nowhere/report.html", &dangling).unwrap();
    for (page, needle) in [
        (dangling.as_path(), "which does not exist"),
        (d.0.as_path(), "is a directory"),
        (Path::new("-"), "give the page a file name"),
    ] {
        let out = report_html(&runs, page);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", page.display());
        assert!(
            err.contains("--html") && err.contains(needle),
            "{}: {err}",
            page.display()
        );
        assert!(text(&out.stdout).is_empty(), "the runs were read: {err}");
    }
    assert!(!d.0.join("nowhere").exists());
    assert!(file_type(&dangling).is_symlink());
}

#[test]
fn root_report_html_to_a_device_node_writes_through_it_and_leaves_the_device() {
    if !root_or_skip("root_report_html_to_a_device_node_writes_through_it_and_leaves_the_device") {
        return;
    }
    let d = TempDir::new("files-html-device");
    let runs = d.0.join("runs");
    saved_runs(&runs);
    // Our own null (1, 3) device, never the system's, named directly and through a link.
    let null = d.0.join("null");
    mknod(&null, libc::S_IFCHR | 0o666, libc::makedev(1, 3));
    let link = d.0.join("page.html");
    symlink("null", &link).unwrap();
    for page in [&null, &link] {
        let out = report_html(&runs, page);
        assert!(
            out.status.success(),
            "{}: {}",
            page.display(),
            text(&out.stderr)
        );
        assert!(file_type(&null).is_char_device(), "the device was replaced");
        assert!(file_type(&link).is_symlink(), "the link was replaced");
    }
    let mut names: Vec<_> = fs::read_dir(&d.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["null", "page.html", "runs"], "temporary files left");
}

#[test]
fn report_and_compare_skip_fifos_and_device_links_naming_each() {
    let d = TempDir::new("files-readers");
    let cell = saved_runs(&d.0);
    mkfifo(&cell.join("run-3.json"));
    symlink("/dev/zero", cell.join("run-4.json")).unwrap();
    let expected = [
        ("run-3.json", "not a regular file (a FIFO)"),
        ("run-4.json", "a symbolic link to a character device"),
    ];

    let mut report = xbench();
    report.arg("report").arg(&d.0);
    let out = run_within(report, Duration::from_secs(120));
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    for (file, why) in expected {
        assert!(
            err.lines().any(|l| l.contains(file) && l.contains(why)),
            "no warning naming {file} ({why}): {err}"
        );
    }
    let table = text(&out.stdout);
    assert!(
        table.contains("lo"),
        "the two good runs are reported: {table}"
    );

    let mut compare = xbench();
    compare.arg("compare").arg(&d.0).arg(&d.0);
    let out = run_within(compare, Duration::from_secs(120));
    let err = text(&out.stderr);
    for (file, why) in expected {
        assert!(
            err.lines().any(|l| l.contains(file) && l.contains(why)),
            "no warning naming {file} ({why}): {err}"
        );
    }
    assert!(matches!(out.status.code(), Some(0 | 3)), "{err}");
}

#[test]
fn report_skips_a_file_over_max_file_size_naming_its_size() {
    let d = TempDir::new("files-limit");
    let cell = saved_runs(&d.0);
    // A valid run padded past the limit given below.
    let mut big = fs::read(cell.join("run-1.json")).unwrap();
    let limit = big.len() * 2;
    big.extend(std::iter::repeat_n(b' ', limit));
    fs::write(cell.join("run-3.json"), &big).unwrap();
    let out = xbench()
        .arg("report")
        .arg(&d.0)
        .args(["--max-file-size", &limit.to_string()])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let size = big.len();
    assert!(
        err.lines().any(|l| l.contains("run-3.json")
            && l.contains(&format!(
                "{size} bytes, more than the limit of {limit} bytes"
            ))),
        "{err}"
    );
}

#[test]
fn resume_refuses_a_fifo_run_file_naming_it_without_blocking() {
    let d = TempDir::new("files-resume");
    let cell = saved_runs(&d.0);
    fs::remove_file(cell.join("run-2.json")).unwrap();
    mkfifo(&cell.join("run-2.json"));
    let mut resume = xbench();
    resume
        .args([
            "client", "-t", "0.3", "--repeat", "2", "--label", "lo", "--resume", "--save",
        ])
        .arg(&d.0);
    let out = run_within(resume, Duration::from_secs(120));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("run-2.json") && err.contains("not a regular file (a FIFO)"),
        "{err}"
    );
    assert!(file_type(&cell.join("run-2.json")).is_fifo());
}

/// A saved run with one figure changed by `edit`.
fn edited(from: &Path, to: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&fs::read(from).unwrap()).unwrap();
    edit(&mut v);
    fs::write(to, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

#[test]
fn report_and_compare_refuse_impossible_figures_naming_file_and_field() {
    let d = TempDir::new("files-figures");
    let base = d.0.join("base");
    let cell = saved_runs(&base);
    let good = cell.join("run-1.json");
    let bad = d.0.join("bad/lo/cell");
    fs::create_dir_all(&bad).unwrap();
    let rx = "/summary/directions/0/receiver/bits_per_second";
    edited(&good, &bad.join("run-1.json"), |v| {
        *v.pointer_mut(rx).unwrap() = (-9.4e9).into()
    });
    // Two of 1.7e308 sum past f64::MAX: the old report printed a mean of inf and a CI of NaN.
    edited(&good, &bad.join("run-2.json"), |v| {
        *v.pointer_mut(rx).unwrap() = 1.7e308.into()
    });
    edited(&good, &bad.join("run-3.json"), |v| {
        *v.pointer_mut(rx).unwrap() = 1.7e308.into()
    });
    edited(&good, &bad.join("run-4.json"), |v| {
        *v.pointer_mut("/summary/directions/0/retransmits").unwrap() = (-5).into()
    });

    let out = xbench()
        .arg("report")
        .arg(d.0.join("bad"))
        .output()
        .unwrap();
    let err = text(&out.stderr);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "no usable run: {err}{stdout}");
    for (file, field) in [
        (
            "run-1.json",
            "client→server receiver bits_per_second is -9400000000 (negative)",
        ),
        (
            "run-2.json",
            "client→server receiver bits_per_second is 1.7e308",
        ),
        ("run-3.json", "more than 1 Pbit/s"),
        ("run-4.json", "summary.directions[0].retransmits"),
    ] {
        assert!(
            err.lines().any(|l| l.contains(file) && l.contains(field)),
            "{file}: no warning naming {field}: {err}"
        );
    }
    assert!(
        !stdout.contains("inf") && !stdout.contains("NaN"),
        "{stdout}"
    );

    // compare never passes over them: the candidate has no usable run, so it cannot decide.
    let out = xbench()
        .arg("compare")
        .arg(&base)
        .arg(d.0.join("bad"))
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}{}", text(&out.stdout));
    assert!(err.contains("impossible figure"), "{err}");
    assert!(!text(&out.stdout).contains(" ok"), "{}", text(&out.stdout));
}

#[test]
fn root_lab_run_out_that_cannot_be_written_fails_before_the_lab_is_built() {
    if !root_or_skip("root_lab_run_out_that_cannot_be_written_fails_before_the_lab_is_built") {
        return;
    }
    let d = TempDir::new("files-lab-out");
    fs::write(d.0.join("plain"), "").unwrap();
    let prefix = format!("xbf{}-", std::process::id() % 100_000);
    let out = xbench()
        .args(["lab", "run", "--paths", "direct", "--prefix", &prefix])
        .arg("--state-dir")
        .arg(d.0.join("state"))
        .arg("--out")
        .arg(d.0.join("plain/results"))
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--out"), "{err}");
    let namespaces = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !text(&namespaces.stdout).contains(&prefix),
        "a lab was built: {}",
        text(&namespaces.stdout)
    );
}
