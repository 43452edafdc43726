//! A teardown always finishes: `down` through the binary against moto behind a fault-injecting
//! proxy (`fault_proxy.py`) — no Global Accelerator permission at all, throttling, a region
//! that does not answer, an instance stuck in `shutting-down` — each followed by what `down`
//! listed as left, then a second `down` without the fault, and an independent check (straight
//! to moto, not through the code under test) that nothing of the run is left.

// Helpers outside #[test] fns unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{FaultProxy, Moto, TEST_KEY_ID, TEST_SECRET, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_xbench-deploy");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// The binary against `endpoint`, polling fast; `wait_secs` bounds each wait for AWS.
fn cmd(home: &Path, endpoint: &str, wait_secs: u32, args: &[&str]) -> Run {
    let out = Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ACCESS_KEY_ID", TEST_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", TEST_SECRET)
        .stdin(Stdio::null())
        .args([
            "--state-dir",
            &home.join("state").display().to_string(),
            "--endpoint-url",
            endpoint,
            "--poll-ms",
            "20",
            "--retry-backoff-ms",
            "10",
            "--wait-secs",
            &wait_secs.to_string(),
        ])
        .args(args)
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A peering between two regions, with the binary uploaded (so the run has a bucket, a role and
/// a key in each region besides its network).
const SCENARIO: &str = r#"
name = "faults"
instance_type = "m5.large"
ttl_hours = 2
[[vpc]]
region = "us-east-1"
cidr = "10.10.0.0/16"
[[vpc]]
region = "ap-southeast-2"
cidr = "10.20.0.0/16"
[[path]]
kind = "peering"
client = "us-east-1"
server = "ap-southeast-2"
"#;

/// Brings a run up through the proxy (no fault yet); returns its id.
fn up(dir: &TempDir, proxy: &FaultProxy) -> String {
    let file = dir.path().join("s.toml");
    std::fs::write(&file, SCENARIO).unwrap();
    let xbench = common::fake_xbench(dir.path());
    let r = cmd(
        dir.path(),
        &proxy.endpoint,
        30,
        &[
            "up",
            "--yes",
            "--skip-ready",
            "--xbench",
            &xbench.path.display().to_string(),
            &file.display().to_string(),
        ],
    );
    assert_eq!(r.code, 0, "up: {}\n{}", r.stdout, r.stderr);
    let state = dir.path().join("state");
    std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("xb-"))
        .unwrap()
}

/// The lines `down` printed under "LEFT after the teardown".
fn left(r: &Run) -> Vec<String> {
    r.stdout
        .lines()
        .skip_while(|l| !l.starts_with("LEFT after the teardown"))
        .skip(1)
        .map(|l| l.trim().to_owned())
        .collect()
}

/// Runs `down` under `fault`, then again without; checks both and that moto holds nothing.
/// `first_ok`: whether the first `down` must already finish the job.
async fn fault_then_again(
    name: &str,
    fault: impl FnOnce(&Moto, &FaultProxy) -> String,
    wait_secs: u32,
    first_ok: bool,
    expect_left: &[&str],
) {
    let moto = moto_or_skip!();
    let proxy = FaultProxy::start(&moto);
    let dir = TempDir::new("faults");
    let run = tokio::task::block_in_place(|| up(&dir, &proxy));
    let faults = fault(&moto, &proxy);
    proxy.set(&faults);
    let first = tokio::task::block_in_place(|| {
        cmd(dir.path(), &proxy.endpoint, wait_secs, &["down", &run])
    });
    let left_first = left(&first);
    eprintln!(
        "FAULT {name}: {faults}\n  first down: exit {}, left {left_first:#?}\n  stderr: {}",
        first.code, first.stderr
    );
    if first_ok {
        assert_eq!(first.code, 0, "{}\n{}", first.stdout, first.stderr);
        assert!(left_first.is_empty(), "{}", first.stdout);
    } else {
        assert_eq!(first.code, 1, "{}\n{}", first.stdout, first.stderr);
        for want in expect_left {
            assert!(
                left_first.iter().any(|l| l.contains(want)),
                "{want:?} not listed as left:\n{}",
                first.stdout
            );
        }
        assert!(
            first
                .stderr
                .contains(&format!("xbench-deploy down {run}` again")),
            "{}",
            first.stderr
        );
    }
    proxy.set("{}");
    let second =
        tokio::task::block_in_place(|| cmd(dir.path(), &proxy.endpoint, 30, &["down", &run]));
    eprintln!(
        "  second down: exit {}, left {:#?}",
        second.code,
        left(&second)
    );
    assert_eq!(second.code, 0, "{}\n{}", second.stdout, second.stderr);
    assert!(left(&second).is_empty(), "{}", second.stdout);
    let leftovers = moto.leftovers().await;
    assert!(leftovers.is_empty(), "left in moto: {leftovers:#?}");
}

/// AccessDenied on every Global Accelerator call: a run that made no accelerator is still
/// torn down completely by the first `down` (before, `down` failed on its first call, before
/// terminating anything).
#[tokio::test(flavor = "multi_thread")]
async fn down_finishes_without_any_global_accelerator_permission() {
    fault_then_again(
        "no globalaccelerator:*",
        |_, _| r#"{"deny": ["globalaccelerator:*"]}"#.into(),
        30,
        true,
        &[],
    )
    .await;
}

/// Three calls of every four throttled (the SDK's default of three attempts would give up on
/// most of them): the first `down` still finishes.
#[tokio::test(flavor = "multi_thread")]
async fn down_finishes_through_throttling() {
    fault_then_again(
        "throttling",
        |_, _| r#"{"throttle": [3, 4]}"#.into(),
        30,
        true,
        &[],
    )
    .await;
}

/// ap-southeast-2 does not answer: everything in us-east-1 is deleted, the region is listed
/// as not searched (with its key parameter), and a second `down` finishes the job.
#[tokio::test(flavor = "multi_thread")]
async fn down_goes_on_past_a_region_that_does_not_answer() {
    fault_then_again(
        "region down",
        |_, _| r#"{"down_regions": ["ap-southeast-2"]}"#.into(),
        30,
        false,
        &["ap-southeast-2 not searched: the region"],
    )
    .await;
}

/// The client instance stays `shutting-down` and AWS refuses to delete what its interface
/// holds: `down` gives up on them within its deadline (one deadline for the whole teardown,
/// not one timeout per dependent resource), deletes everything else, lists the instance (with
/// its state), its subnet, group, internet gateway and VPC, and exits 1; the second `down`
/// (the instance gone) finishes.
#[tokio::test(flavor = "multi_thread")]
async fn down_lists_an_instance_stuck_shutting_down_and_what_it_holds() {
    fault_then_again(
        "stuck instance",
        |moto, _| {
            let (instance, holds) = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(client_and_holds(moto))
            });
            serde_json::json!({ "stuck_instances": [instance], "dependency": holds }).to_string()
        },
        3,
        false,
        &[
            "instance i-",
            "shutting-down",
            "subnet subnet-",
            "security group sg-",
            "internet gateway igw-",
            "vpc vpc-",
        ],
    )
    .await;
}

/// The us-east-1 instance and the ids AWS would refuse to delete while it shuts down.
async fn client_and_holds(moto: &Moto) -> (String, Vec<String>) {
    let ec2 = moto.ec2("us-east-1").await;
    let out = ec2.describe_instances().send().await.unwrap();
    let i = out
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .find(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) == Some("running"))
        .unwrap();
    let vpc = i.vpc_id().unwrap().to_owned();
    let mut holds = vec![vpc.clone(), i.subnet_id().unwrap().to_owned()];
    for n in i.network_interfaces() {
        holds.extend(
            n.groups()
                .iter()
                .filter_map(|g| g.group_id().map(str::to_owned)),
        );
    }
    for g in ec2
        .describe_internet_gateways()
        .send()
        .await
        .unwrap()
        .internet_gateways()
    {
        if g.attachments().iter().any(|a| a.vpc_id() == Some(&vpc)) {
            holds.push(g.internet_gateway_id().unwrap().to_owned());
        }
    }
    (i.instance_id().unwrap().to_owned(), holds)
}
