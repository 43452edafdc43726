//! Least privilege, against moto: every AWS call the binary makes for a scenario (`plan
//! --check`, `up`, `run`, `down`, `gc`), recorded by the proxy in front of moto, is allowed by
//! what `xbench-deploy policy` prints for that scenario; the hosts' role carries only its
//! inline policy (its own key, its own binary, the SSM agent); IPsec gateways boot the Ubuntu
//! image; and the run's bucket refuses requests that do not come over TLS.

#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use xbench_deploy::aws::{Aws, s3};
use xbench_deploy::policy;
use xbench_deploy::state::{RunId, RunTags};

use common::{FaultProxy, TEST_KEY_ID, TEST_SECRET, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_xbench-deploy");

/// The id fault_proxy.py answers for Canonical's Ubuntu parameters.
const UBUNTU_AMI: &str = "ami-0c0ffee0123456789";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn cmd(home: &Path, endpoint: Option<&str>, args: &[&str]) -> Run {
    let mut c = Command::new(BIN);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ACCESS_KEY_ID", TEST_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", TEST_SECRET)
        .stdin(Stdio::null())
        .args(["--state-dir", &home.join("state").display().to_string()]);
    if let Some(e) = endpoint {
        c.args([
            "--endpoint-url",
            e,
            "--poll-ms",
            "20",
            "--retry-backoff-ms",
            "10",
            "--wait-secs",
            "20",
        ]);
    }
    let out = c.args(args).output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Peering, a Transit Gateway, an IPsec VPN and a public path between two regions, the binary
/// uploaded, a one-run suite: most of what the code can call (Global Accelerator and
/// placement groups have no moto API and are exercised against fakes elsewhere).
const SCENARIO: &str = r#"
name = "leastpriv"
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
[[path]]
kind = "tgw"
client = "us-east-1"
server = "ap-southeast-2"
[[path]]
kind = "vpn"
vpn = "ipsec"
client = "us-east-1"
server = "ap-southeast-2"
[[path]]
kind = "public"
client = "us-east-1"
server = "ap-southeast-2"
[suite]
time = 1
omit = 0
repeat = 1
[[suite.test]]
parallel = 1
"#;

/// The Allow actions of a printed policy.
fn allowed(doc: &serde_json::Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for s in doc["Statement"].as_array().unwrap() {
        assert_eq!(s["Effect"], "Allow");
        match &s["Action"] {
            serde_json::Value::String(a) => {
                out.insert(a.clone());
            }
            serde_json::Value::Array(list) => {
                out.extend(list.iter().map(|a| a.as_str().unwrap().to_owned()));
            }
            other => panic!("{other}"),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn every_call_of_a_moto_run_is_allowed_by_the_printed_policy() {
    let moto = moto_or_skip!();
    let proxy = FaultProxy::start(&moto);
    let dir = TempDir::new("leastpriv");
    let file = dir.path().join("s.toml");
    std::fs::write(&file, SCENARIO).unwrap();
    let file = file.display().to_string();
    let xbench = common::fake_xbench(dir.path());
    let xbench = xbench.path.display().to_string();
    let home = dir.path().to_owned();
    let endpoint = proxy.endpoint.clone();
    let run = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let (home, endpoint) = (home.clone(), endpoint.clone());
        tokio::task::block_in_place(move || {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            cmd(&home, Some(&endpoint), &a)
        })
    };
    let check = run(&["plan", "--check", "--xbench", &xbench, &file]);
    assert_eq!(check.code, 0, "{}\n{}", check.stdout, check.stderr);
    assert!(
        check
            .stdout
            .contains(&format!("IPsec gateways: {UBUNTU_AMI}")),
        "plan --check resolves the gateways' Ubuntu image:\n{}",
        check.stdout
    );
    let up = run(&["up", "--yes", "--skip-ready", "--xbench", &xbench, &file]);
    assert_eq!(up.code, 0, "{}\n{}", up.stdout, up.stderr);
    // The gateways boot Ubuntu; the xbench hosts Amazon Linux.
    for region in ["us-east-1", "ap-southeast-2"] {
        let out = moto
            .ec2(region)
            .await
            .describe_instances()
            .send()
            .await
            .unwrap();
        for i in out.reservations().iter().flat_map(|r| r.instances()) {
            let name = i
                .tags()
                .iter()
                .find(|t| t.key() == Some("xbench:key"))
                .and_then(|t| t.value())
                .unwrap_or_default()
                .to_owned();
            let ubuntu = i.image_id() == Some(UBUNTU_AMI);
            assert_eq!(
                name.starts_with("host/gw-"),
                ubuntu,
                "{name}: {:?}",
                i.image_id()
            );
        }
    }
    // The hosts' role: one inline policy, its own key and binary only; no managed policy.
    let iam = moto.iam().await;
    let role = iam
        .list_roles()
        .path_prefix("/xbench/")
        .send()
        .await
        .unwrap()
        .roles()[0]
        .role_name()
        .to_owned();
    let run_id = role.trim_start_matches("xbench-").to_owned();
    let attached = iam
        .list_attached_role_policies()
        .role_name(&role)
        .send()
        .await
        .unwrap();
    assert!(attached.attached_policies().is_empty(), "{attached:?}");
    let inline = iam
        .get_role_policy()
        .role_name(&role)
        .policy_name("xbench-host")
        .send()
        .await
        .unwrap();
    let text = urlencoding_decode(inline.policy_document());
    assert!(
        text.contains(&format!("parameter/xbench/{run_id}/*")),
        "{text}"
    );
    assert!(
        text.contains(&format!("xbench-{run_id}-*/xbench/xbench")),
        "{text}"
    );

    let out = dir.path().join("results").display().to_string();
    let measured = run(&["run", &file, "--out", &out]);
    // moto runs no command, so nothing is collected; the calls are what counts here.
    assert_eq!(measured.code, 1, "{}\n{}", measured.stdout, measured.stderr);
    let down = run(&["down", &run_id]);
    assert_eq!(down.code, 0, "{}\n{}", down.stdout, down.stderr);
    let gc = run(&["gc", "--dry-run", "--region", "us-east-1"]);
    assert_eq!(gc.code, 0, "{}\n{}", gc.stdout, gc.stderr);

    let printed = tokio::task::block_in_place(|| cmd(dir.path(), None, &["policy", &file]));
    assert_eq!(printed.code, 0, "{}", printed.stderr);
    let doc: serde_json::Value = serde_json::from_str(&printed.stdout).unwrap();
    let allowed = allowed(&doc);
    let calls: BTreeSet<(String, String)> = proxy
        .calls()
        .into_iter()
        .map(|(service, action, _)| (service, action))
        .collect();
    assert!(calls.len() > 50, "only {} distinct calls seen", calls.len());
    let mut missing = Vec::new();
    for (service, action) in &calls {
        match policy::call(service, action) {
            None => missing.push(format!("{service}:{action} (not in policy::CALLS)")),
            Some(c) => {
                for a in c.actions {
                    if !allowed.contains(*a) {
                        missing.push(format!("{service}:{action} needs {a}"));
                    }
                }
            }
        }
    }
    eprintln!(
        "{} distinct calls, {} actions in the printed policy",
        calls.len(),
        allowed.len()
    );
    assert!(
        missing.is_empty(),
        "calls the printed policy does not allow: {missing:#?}"
    );
    assert!(moto.leftovers().await.is_empty());
}

/// IAM documents come back URL-encoded.
fn urlencoding_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The run's bucket refuses what does not come over TLS: with the policy on (as on AWS), moto's
/// own policy evaluation refuses an upload over its plain-http endpoint.
#[tokio::test]
async fn the_bucket_refuses_requests_without_tls() {
    let moto = moto_or_skip!();
    let mut settings = moto.settings();
    settings.tls_only_buckets = Some(true);
    let aws = Aws::connect(&settings).await.unwrap();
    let run = RunId::generate(SystemTime::now()).unwrap();
    let tags = RunTags::new(
        run,
        "tls",
        SystemTime::now(),
        Duration::from_secs(3600),
        &["us-east-1".into()],
    );
    let bucket = s3::ensure(&aws, "us-east-1", &tags).await.unwrap();
    let policy = moto
        .s3("us-east-1")
        .await
        .get_bucket_policy()
        .bucket(&bucket.name)
        .send()
        .await
        .unwrap();
    assert!(
        policy
            .policy()
            .unwrap()
            .contains("\"aws:SecureTransport\":\"false\""),
        "{policy:?}"
    );
    let dir = TempDir::new("tls");
    let file = dir.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let refused = s3::upload(&aws, &bucket, "k", &file).await.unwrap_err();
    assert!(refused.to_string().contains("PutObject"), "{refused}");
    s3::delete_bucket(&aws, &bucket).await.unwrap_or_else(|e| {
        // The policy refuses the cleanup over http too: remove it first.
        eprintln!("{e}");
    });
    let c = moto.s3("us-east-1").await;
    let _ = c.delete_bucket_policy().bucket(&bucket.name).send().await;
    let _ = c.delete_bucket().bucket(&bucket.name).send().await;
}
