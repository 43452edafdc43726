//! The `xbench-deploy` binary: plan output per path kind, bad input and its exit codes, and a
//! full up/down against moto, with a check that credentials never reach any output.

// Helpers outside #[test] fns unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{Moto, TEST_KEY_ID, TEST_SECRET, TempDir, one_region, two_regions};

const BIN: &str = env!("CARGO_BIN_EXE_xbench-deploy");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn finish(out: Output) -> Run {
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    for text in [&run.stdout, &run.stderr] {
        assert!(
            !text.contains(TEST_KEY_ID),
            "access key id printed:\n{text}"
        );
        assert!(!text.contains(TEST_SECRET), "secret printed:\n{text}");
    }
    run
}

/// The binary with a clean environment: no credentials unless `moto` is given.
fn cmd(home: &Path, moto: Option<&Moto>, args: &[&str]) -> Run {
    let mut c = Command::new(BIN);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        // Never ask the instance metadata service: these tests run on no EC2 instance.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::null());
    let mut all: Vec<String> = vec![
        "--state-dir".into(),
        home.join("state").display().to_string(),
    ];
    if let Some(m) = moto {
        c.env("AWS_ACCESS_KEY_ID", TEST_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", TEST_SECRET)
            .env("RUST_LOG", "trace");
        all.extend(
            [
                "--endpoint-url",
                &m.endpoint,
                "--skip-accelerators",
                "--poll-ms",
                "20",
                "--wait-secs",
                "30",
            ]
            .map(String::from),
        );
    }
    all.extend(args.iter().map(|s| s.to_string()));
    finish(c.args(&all).output().unwrap())
}

fn write(dir: &TempDir, name: &str, text: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn plan(text: &str) -> Run {
    let dir = TempDir::new("plan");
    let file = write(&dir, "s.toml", text);
    cmd(dir.path(), None, &["plan", &file])
}

fn plan_ok(text: &str) -> String {
    let r = plan(text);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert!(
        r.stdout.contains("estimated cost (price table of "),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("per hour"), "{}", r.stdout);
    r.stdout
}

const PCX: &str =
    "[[path]]\nkind = \"peering\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n";

#[test]
fn plan_peering() {
    let out = plan_ok(&two_regions("p", PCX));
    assert!(out.contains("vpc peering       pcx-us-east-1-ap-southeast-2 (us-east-1 -> ap-southeast-2, accepted in ap-southeast-2)"), "{out}");
    assert!(out.contains("10.20.0.0/24 -> peering"), "{out}");
    assert!(out.contains("10.10.1.0/24 -> peering"), "{out}");
    assert!(
        out.contains("instance          server-ap-southeast-2 (server, m5.large"),
        "{out}"
    );
    assert!(!out.contains("tcp 22"), "no SSH by default:\n{out}");
}

#[test]
fn plan_tgw_one_region_and_cross_region() {
    let out = plan_ok(&one_region(
        "t",
        "[[path]]\nkind = \"tgw\"\nclient = \"a\"\nserver = \"b\"\n",
    ));
    assert!(out.contains("transit gateway   attachments: a, b"), "{out}");
    assert!(!out.contains("tgw peering"), "{out}");
    let out = plan_ok(&two_regions("t", &PCX.replace("peering", "tgw")));
    assert!(
        out.contains("tgw peering       tgwpeer-us-east-1-ap-southeast-2"),
        "{out}"
    );
    assert!(out.contains("Transit Gateway attachment"), "{out}");
}

#[test]
fn plan_vpn() {
    let out = plan_ok(&two_regions("v", &PCX.replace("peering", "vpn")));
    assert!(out.contains("gw-vpn-client (vpn gateway"), "{out}");
    assert!(out.contains("source/dest check off, WireGuard"), "{out}");
    assert!(
        out.contains("udp 51820 from public IP of gw-vpn-server"),
        "{out}"
    );
    assert!(
        out.contains("10.20.0.0/24 -> vpn gateway gw-vpn-client"),
        "{out}"
    );
}

#[test]
fn plan_public() {
    let out = plan_ok(&two_regions("u", &PCX.replace("peering", "public")));
    assert!(
        out.contains("tcp 5201 from public IP of client-public"),
        "{out}"
    );
    assert!(
        out.contains("client-public -> public IP of server-ap-southeast-2"),
        "{out}"
    );
}

#[test]
fn plan_accelerator() {
    let out = plan_ok(&two_regions(
        "g",
        "[[path]]\nkind = \"accelerator\"\nclient_address = \"203.0.113.7\"\nserver = \"us-east-1\"\n",
    ));
    assert!(out.contains("global (API in us-west-2)"), "{out}");
    assert!(
        out.contains(
            "accelerator       accelerator (TCP+UDP 5201 -> server-us-east-1 in us-east-1)"
        ),
        "{out}"
    );
    assert!(out.contains("tcp 5201 from 203.0.113.7/32"), "{out}");
    assert!(out.contains("Global Accelerator"), "{out}");
}

#[test]
fn plan_existing() {
    let out = plan_ok(&two_regions(
        "e",
        "[[path]]\nkind = \"existing\"\nlabel = \"dx\"\nclient = \"us-east-1\"\nserver_address = \"192.0.2.44\"\n",
    ));
    assert!(out.contains("client-dx -> 192.0.2.44"), "{out}");
}

#[test]
fn plan_json_and_ssh_opt_in() {
    let dir = TempDir::new("plan");
    let text = two_regions("j", PCX).replace(
        "ttl_hours = 2",
        "ttl_hours = 2\nssh_from = [\"198.51.100.0/24\"]",
    );
    let file = write(&dir, "s.toml", &text);
    let r = cmd(dir.path(), None, &["plan", "--json", &file]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["paths"][0]["kind"], "peering");
    assert!(r.stdout.contains("198.51.100.0/24"));
}

fn refused(text: &str, expect: &[&str]) {
    let r = plan(text);
    assert_eq!(r.code, 2, "stdout {} stderr {}", r.stdout, r.stderr);
    for e in expect {
        assert!(r.stderr.contains(e), "expected {e:?} in: {}", r.stderr);
    }
}

#[test]
fn bad_input_overlapping_cidrs() {
    refused(
        &two_regions("o", PCX).replace("10.20.0.0/16", "10.10.128.0/17"),
        &["overlap", "10.10.0.0/16", "10.10.128.0/17"],
    );
}

#[test]
fn bad_input_unknown_region() {
    refused(
        &two_regions("r", PCX).replace(
            "region = \"ap-southeast-2\"",
            "region = \"ap-sootheast-2\"\nname = \"ap-southeast-2\"",
        ),
        &[
            "unknown region 'ap-sootheast-2'",
            "did you mean 'ap-southeast-2'",
        ],
    );
}

#[test]
fn bad_input_path_needs_two_regions() {
    refused(
        &two_regions(
            "n",
            "[[path]]\nkind = \"peering\"\nclient = \"us-east-1\"\nserver = \"us-east-1\"\n",
        ),
        &["joins two VPCs", "add a second [[vpc]]"],
    );
}

#[test]
fn bad_input_syntax_and_run_id() {
    refused(
        &two_regions("s", PCX).replace("kind = \"peering\"", "kind = \"carrier-pigeon\""),
        &["carrier-pigeon"],
    );
    let dir = TempDir::new("down");
    let r = cmd(dir.path(), None, &["down", "not-a-run"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("is not a run id"), "{}", r.stderr);
}

#[test]
fn bad_input_missing_credentials() {
    let dir = TempDir::new("nocreds");
    let file = write(&dir, "s.toml", &two_regions("c", PCX));
    let r = cmd(dir.path(), None, &["up", "--yes", &file]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("no AWS credentials"), "{}", r.stderr);
    assert!(
        r.stderr.contains("AWS_ACCESS_KEY_ID"),
        "says where the SDK looks: {}",
        r.stderr
    );
    assert!(r.stderr.contains("~/.aws/credentials"), "{}", r.stderr);
}

#[test]
fn up_needs_confirmation() {
    let dir = TempDir::new("confirm");
    let file = write(&dir, "s.toml", &two_regions("c", PCX));
    let r = cmd(dir.path(), None, &["up", &file]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("pass --yes"), "{}", r.stderr);
}

#[test]
fn up_and_down_through_the_binary() {
    let moto = moto_or_skip!();
    let dir = TempDir::new("cli");
    let file = write(
        &dir,
        "s.toml",
        &two_regions("cli", &format!("{PCX}{}", PCX.replace("peering", "vpn"))),
    );
    let outputs = dir.path().join("out.json");
    let up = cmd(
        dir.path(),
        Some(&moto),
        &[
            "up",
            "--yes",
            "--skip-ready",
            &file,
            "--outputs",
            &outputs.display().to_string(),
        ],
    );
    assert_eq!(up.code, 0, "stderr: {}", up.stderr);
    assert!(
        up.stdout.contains("xbench client 10.20.0."),
        "{}",
        up.stdout
    );
    assert!(up.stdout.contains("--label vpn"), "{}", up.stdout);
    let o: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&outputs).unwrap()).unwrap();
    assert_eq!(o["format"], "xbench-deploy-outputs/1");
    let run = o["run_id"].as_str().unwrap().to_owned();
    assert_eq!(o["paths"].as_array().unwrap().len(), 2);

    let down = cmd(dir.path(), Some(&moto), &["down", &run]);
    assert_eq!(down.code, 0, "{}", down.stderr);
    assert!(down.stdout.contains("deleted"), "{}", down.stdout);
    let again = cmd(dir.path(), Some(&moto), &["down", &run]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stdout.contains("nothing left to delete"),
        "{}",
        again.stdout
    );

    let gc = cmd(
        dir.path(),
        Some(&moto),
        &["gc", "--region", "us-east-1", "--dry-run"],
    );
    assert_eq!(gc.code, 0, "{}", gc.stderr);
    assert!(moto.leftovers().await_blocking().is_empty());
}

#[test]
fn bad_input_instance_type_without_ena() {
    let moto = moto_or_skip!();
    let dir = TempDir::new("ena");
    let file = write(
        &dir,
        "s.toml",
        &two_regions("ena", PCX).replace("m5.large", "t2.micro"),
    );
    let r = cmd(dir.path(), Some(&moto), &["up", "--yes", &file]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("t2.micro has no enhanced networking"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("Use t3.micro"),
        "suggests a replacement: {}",
        r.stderr
    );
    let plan = cmd(dir.path(), Some(&moto), &["plan", "--check", &file]);
    assert_eq!(plan.code, 2, "{}", plan.stderr);
    assert!(
        moto.leftovers().await_blocking().is_empty(),
        "nothing was created"
    );
}

#[test]
fn aws_error_is_explained_then_torn_down() {
    let moto = moto_or_skip!();
    let dir = TempDir::new("awserr");
    let text = two_regions("err", PCX).replace(
        "cidr = \"10.20.0.0/16\"",
        "cidr = \"10.20.0.0/16\"\naz = \"ap-southeast-2x\"",
    );
    let file = write(&dir, "s.toml", &text);
    let r = cmd(dir.path(), Some(&moto), &["up", "--yes", &file]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("CreateSubnet in ap-southeast-2 failed"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("ap-southeast-2x"),
        "AWS's message: {}",
        r.stderr
    );
    assert!(r.stderr.contains("was deleted again"), "{}", r.stderr);
    assert!(moto.leftovers().await_blocking().is_empty());
}

#[test]
fn plan_check_with_aws() {
    let moto = moto_or_skip!();
    let dir = TempDir::new("check");
    let file = write(&dir, "s.toml", &two_regions("chk", PCX));
    let r = cmd(dir.path(), Some(&moto), &["plan", "--check", &file]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("m5.large in us-east-1: ENA yes, network Up to 10 Gigabit, AMI ami-"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("vpc ap-southeast-2 in zone ap-southeast-2a"),
        "{}",
        r.stdout
    );
}

/// Runs an async check from a plain test.
trait Blocking: std::future::Future + Sized {
    fn await_blocking(self) -> Self::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(self)
    }
}

impl<F: std::future::Future> Blocking for F {}

#[test]
fn shipped_examples_plan() {
    let dir = TempDir::new("examples");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let r = cmd(dir.path(), None, &["plan", &path.display().to_string()]);
            assert_eq!(r.code, 0, "{}: {}", path.display(), r.stderr);
            seen += 1;
        }
    }
    assert!(seen >= 2);
}

#[test]
fn ctrl_c_during_up_tears_down() {
    let moto = moto_or_skip!();
    let dir = TempDir::new("sigint");
    let file = write(
        &dir,
        "s.toml",
        &two_regions("sigint", &format!("{PCX}{}", PCX.replace("peering", "tgw"))),
    );
    let state = dir.path().join("state");
    let mut child = Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ACCESS_KEY_ID", TEST_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", TEST_SECRET)
        .args([
            "--state-dir",
            &state.display().to_string(),
            "--endpoint-url",
            &moto.endpoint,
        ])
        .args([
            "--skip-accelerators",
            "--poll-ms",
            "20",
            "--wait-secs",
            "30",
            "up",
            "--yes",
            &file,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the run has created a few resources, then press Ctrl-C.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let created = std::fs::read_dir(&state)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("state.json")).ok())
            .map(|t| t.matches("/vpc-").count() + t.matches("/subnet-").count())
            .max()
            .unwrap_or(0);
        if created >= 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "up created nothing");
        assert!(
            child.try_wait().unwrap().is_none(),
            "up ended before it could be interrupted"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let r = finish(child.wait_with_output().unwrap());
    assert_eq!(r.code, 130, "{}", r.stderr);
    assert!(r.stderr.contains("interrupted"), "{}", r.stderr);
    assert!(r.stderr.contains("was deleted again"), "{}", r.stderr);
    assert!(moto.leftovers().await_blocking().is_empty());
}
