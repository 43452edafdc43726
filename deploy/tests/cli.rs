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
    assert!(out.contains(" vpn (wireguard) "), "{out}");
}

#[test]
fn plan_vpn_ipsec() {
    let text = two_regions("i", &PCX.replace("peering", "vpn"));
    let out = plan_ok(&format!("{text}vpn = \"ipsec\"\n"));
    assert!(
        out.contains("source/dest check off, IPsec (strongSwan, IKEv2)"),
        "{out}"
    );
    for peer in ["gw-vpn-ipsec-server", "gw-vpn-ipsec-client"] {
        for rule in ["udp 500", "udp 4500", "esp (50)"] {
            assert!(
                out.contains(&format!("{rule} from public IP of {peer}")),
                "{rule} from {peer}:\n{out}"
            );
        }
    }
    assert!(!out.contains("51820"), "no WireGuard port:\n{out}");
    assert!(
        out.contains("10.20.0.0/24 -> vpn gateway gw-vpn-ipsec-client"),
        "{out}"
    );
    assert!(out.contains("  vpn-ipsec        vpn (ipsec) "), "{out}");
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
fn bad_input_unknown_vpn_flavour() {
    let text = two_regions("f", &PCX.replace("peering", "vpn"));
    refused(
        &format!("{text}vpn = \"openswan\"\n"),
        &[
            "path 'vpn': vpn = \"openswan\" is not a VPN flavour",
            "\"wireguard\", \"ipsec\"",
        ],
    );
}

/// A `vpn` path to your own VPN end: planned with its gateway, accelerator and your end, and
/// refused (exit 2, naming what to write) with a block that overlaps a VPC, without your
/// public address, or with a flavour that has no configuration for your end.
#[test]
fn vpn_to_your_own_end_plans_and_bad_ones_are_refused() {
    let home = "[[path]]\nkind = \"vpn\"\nvpn = \"ipsec\"\nlabel = \"home\"\nclient_address = \"192.168.1.20\"\nserver = \"us-east-1\"\non_prem_cidr = \"192.168.1.0/24\"\non_prem_public_ip = \"198.51.100.7\"\naccelerator = true\n";
    let out = plan_ok(&two_regions("h", home));
    for want in [
        "instance          gw-home (vpn gateway, m5.large, in us-east-1/base, source/dest check off, IPsec (strongSwan, IKEv2))",
        "route           192.168.1.0/24 -> vpn gateway gw-home",
        "allow in        udp 4500 from 198.51.100.7/32",
        "your vpn end      home-home from 198.51.100.7: dials accelerator home in front of gw-home",
        "accelerator       home (UDP 500, UDP 4500 -> gw-home in us-east-1)",
    ] {
        assert!(out.contains(want), "{want:?} missing:\n{out}");
    }
    refused(
        &two_regions(
            "h",
            &home
                .replace("192.168.1.0/24", "10.20.0.0/20")
                .replace("192.168.1.20", "10.20.3.4"),
        ),
        &["on_prem_cidr 10.20.0.0/20 overlaps vpc 'ap-southeast-2' (10.20.0.0/16)"],
    );
    refused(
        &two_regions(
            "h",
            &home.replace("on_prem_public_ip = \"198.51.100.7\"\n", ""),
        ),
        &["path 'home' (vpn): needs on_prem_public_ip"],
    );
    refused(
        &two_regions("h", &home.replace("vpn = \"ipsec\"", "vpn = \"wireguard\"")),
        &["vpn = \"ipsec\" only", "not \"wireguard\""],
    );
    refused(
        &two_regions("h", &home.replace("vpn = \"ipsec\"", "vpn = \"l2tp\"")),
        &["vpn = \"l2tp\" is not a VPN flavour"],
    );
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

/// A vpn path from your host (behind your own VPN end) to the second region's server.
const HOME_VPN: &str = "[[path]]\nkind = \"vpn\"\nvpn = \"ipsec\"\nlabel = \"home\"\nclient_address = \"192.168.1.20\"\nserver = \"ap-southeast-2\"\non_prem_cidr = \"192.168.1.0/24\"\non_prem_public_ip = \"198.51.100.7\"\n";

#[test]
fn up_and_down_through_the_binary() {
    let moto = moto_or_skip!();
    let dir = TempDir::new("cli");
    let file = write(
        &dir,
        "s.toml",
        &two_regions(
            "cli",
            &format!("{PCX}{}{HOME_VPN}", PCX.replace("peering", "vpn")),
        ),
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
    assert_eq!(o["paths"].as_array().unwrap().len(), 3);
    // Your VPN end's file is printed, its key is not (it is in the mode-0600 file only).
    let config = o["home_ends"][0]["config"].as_str().unwrap();
    let text = std::fs::read_to_string(config).unwrap();
    let secret = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("secret = "))
        .unwrap();
    assert!(secret.starts_with("0s") && secret.len() > 40, "{secret}");
    assert!(!up.stdout.contains(secret) && !up.stderr.contains(secret));
    for want in [
        "your VPN end of [home]: it dials gw-home (",
        "remote_addrs = ",
        &format!("secret = <in {config}>"),
        "swanctl --load-all",
    ] {
        assert!(up.stdout.contains(want), "{want:?} missing:\n{}", up.stdout);
    }

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
        r.stdout.contains(
            "m5.large in us-east-1: enhanced networking ENA, network Up to 10 Gigabit, AMI ami-"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("vpc ap-southeast-2 in zone ap-southeast-2a"),
        "{}",
        r.stdout
    );
    // moto's Service Quotas knows only VPC quotas: the EC2 vCPU quota is not readable, which
    // is a note (with AWS's words), not an error. One m5.large (2 vCPUs) per region.
    for region in ["us-east-1", "ap-southeast-2"] {
        assert!(
            r.stdout
                .contains(&format!("vCPUs in {region}: 2 vCPUs; quota not readable: ")),
            "{}",
            r.stdout
        );
    }
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
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            // Issue 32: the home and campus ends are measured (with --here), not "0 runs
            // over 0 path(s)".
            let yours = match name.as_str() {
                "report-003-home-over-ipsec-with-accelerator.toml" => {
                    Some("20 runs over 2 path(s)")
                }
                "report-004-campus-existing-host.toml" => Some("24 runs over 2 path(s)"),
                _ => None,
            };
            if let Some(runs) = yours {
                assert!(r.stdout.contains(runs), "{name}: {}", r.stdout);
                assert!(r.stdout.contains("`run --here`"), "{name}: {}", r.stdout);
            }
            seen += 1;
        }
    }
    assert!(seen >= 7);
}

/// Repeats spread over time (issue 32, report 000's 15 runs over 3 days): `every` makes the
/// suite span (repeat - 1) x every, priced as hours the hosts are up; a schedule that outlives
/// the hosts' ttl_hours is refused naming the ttl it needs.
#[test]
fn plan_prices_repeats_spread_over_time_and_refuses_what_outlives_the_hosts() {
    let suite =
        "[suite]\ntime = 10\nrepeat = 3\nevery = \"2h\"\n[[suite.test]]\nparallel = [1, 2]\n";
    let text = format!(
        "{}{suite}",
        two_regions("every", PCX).replace("ttl_hours = 2", "ttl_hours = 6")
    );
    let out = plan_ok(&text);
    // Two repeats later than the first by 2 h each, plus the last repeat's 28 s.
    assert!(
        out.contains("one `run` of the suite: 6 runs over 1 path(s), about 4 h 00 min"),
        "{out}"
    );
    let short = format!("{}{suite}", two_regions("every", PCX));
    refused(
        &short,
        &[
            "3 repeats, one every 2 h 00 min",
            "ttl_hours = 2",
            // 4 h 00 min 28 s and a quarter of an hour for `up`.
            "set ttl_hours to at least 5",
        ],
    );
}

/// `--xbench` on `run` is for a client on this machine: with neither `--lab` nor `--here` it
/// is refused rather than ignored, and the two cannot be combined.
#[test]
fn run_xbench_needs_lab_or_here() {
    let dir = TempDir::new("here-flags");
    let file = write(&dir, "s.toml", &two_regions("k", PCX));
    for args in [
        &["run", &file, "--out", "o", "--xbench", "/bin/true"][..],
        &["run", &file, "--out", "o", "--lab", "--here"][..],
    ] {
        let r = cmd(dir.path(), None, args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("--lab") && r.stderr.contains("--here"),
            "{args:?}: {}",
            r.stderr
        );
    }
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

#[test]
fn bad_input_suite_names_a_flag_xbench_does_not_have() {
    let text = format!(
        "{}[suite]\nrepeat = 2\n[[suite.test]]\nparallel = [1, 2]\nzero-copy = true\n",
        two_regions("k", PCX)
    );
    refused(
        &text,
        &["zero-copy", "suite keys are xbench client's long flags"],
    );
    let text = format!(
        "{}[suite]\n[[suite.test]]\nrr = true\nparallel = 4\n",
        two_regions("k", PCX)
    );
    refused(&text, &["suite test 1: parallel", "throughput"]);
    // A --suite file goes through the same checks.
    let dir = TempDir::new("suite");
    let file = write(&dir, "s.toml", &two_regions("k", PCX));
    let suite = write(&dir, "suite.toml", "[[test]]\nparalel = [1]\n");
    let r = cmd(dir.path(), None, &["plan", &file, "--suite", &suite]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("paralel"), "{}", r.stderr);
}

#[test]
fn bad_input_binary_of_the_wrong_architecture() {
    let dir = TempDir::new("arch");
    // An arm64 (Graviton) static binary for m5.large (x86_64) hosts.
    let mut elf = vec![0u8; 64 + 56];
    elf[..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2;
    elf[5] = 1;
    elf[18..20].copy_from_slice(&183u16.to_le_bytes());
    elf[32..40].copy_from_slice(&64u64.to_le_bytes());
    elf[54..56].copy_from_slice(&56u16.to_le_bytes());
    elf[56..58].copy_from_slice(&1u16.to_le_bytes());
    elf[64..68].copy_from_slice(&1u32.to_le_bytes());
    let bin = dir.path().join("xbench-arm64");
    std::fs::write(&bin, elf).unwrap();
    let file = write(
        &dir,
        "s.toml",
        &one_region(
            "arch",
            "[[path]]\nkind = \"peering\"\nclient = \"a\"\nserver = \"b\"\n",
        ),
    );
    let bin = bin.display().to_string();
    let r = cmd(dir.path(), None, &["plan", &file, "--xbench", &bin]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("is an arm64 binary, but m7i.large"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("x86_64-unknown-linux-musl"),
        "{}",
        r.stderr
    );
    // On Graviton hosts the same binary is fine.
    let graviton = write(
        &dir,
        "g.toml",
        &one_region(
            "arch",
            "[[path]]\nkind = \"peering\"\nclient = \"a\"\nserver = \"b\"\n",
        )
        .replace("m7i.large", "m7g.large"),
    );
    let r = cmd(dir.path(), None, &["plan", &graviton, "--xbench", &bin]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("(arm64, static"), "{}", r.stdout);
    // `up` refuses before asking AWS anything.
    let r = cmd(dir.path(), None, &["up", "--yes", &file, "--xbench", &bin]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("arm64"), "{}", r.stderr);
}

#[test]
fn bad_input_run_of_a_run_that_does_not_exist() {
    let dir = TempDir::new("norun");
    let text = format!(
        "{}[suite]\n[[suite.test]]\nparallel = 1\n",
        two_regions("norun", PCX)
    );
    let file = write(&dir, "s.toml", &text);
    let out = dir.path().join("out").display().to_string();
    let r = cmd(
        dir.path(),
        None,
        &[
            "run",
            &file,
            "--out",
            &out,
            "--run-id",
            "xb-20990101-abcdef",
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("no run xb-20990101-abcdef is up"),
        "{}",
        r.stderr
    );
    let r = cmd(dir.path(), None, &["run", &file, "--out", &out]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("start one with `xbench-deploy up`"),
        "{}",
        r.stderr
    );
    let r = cmd(
        dir.path(),
        None,
        &["run", &file, "--out", &out, "--run-id", "bogus"],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("is not a run id"), "{}", r.stderr);
    // And a scenario without a suite.
    let bare = write(&dir, "bare.toml", &two_regions("bare", PCX));
    let r = cmd(dir.path(), None, &["run", &bare, "--out", &out]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("has no [suite]"), "{}", r.stderr);
}

#[test]
fn plan_prices_the_ttl_and_one_run_of_the_suite() {
    // 80 hours: the estimate follows ttl_hours, not an 8-hour day.
    let text = format!(
        "{}[suite]\ntime = 10\nrepeat = 3\n[[suite.test]]\nparallel = [1, 2]\n",
        two_regions("cost", PCX).replace("ttl_hours = 2", "ttl_hours = 80")
    );
    let out = plan_ok(&text);
    let hourly: f64 = out
        .split("total $")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    let ttl: f64 = out
        .split("per hour; $")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    // The hourly figure is shown to 3 decimals: 80 times its rounding is at most 0.04.
    assert!((ttl - hourly * 80.0).abs() < 0.05, "{out}");
    assert!(out.contains("over ttl_hours = 80"), "{out}");
    // 2 cells x 3 repeats x 1 path, 14 s each (10 s test + 4 s of overhead) = 84 s.
    assert!(
        out.contains("one `run` of the suite: 6 runs over 1 path(s), about 1 min 24 s"),
        "{out}"
    );
}

/// `all` against moto: up (no hosts to wait for), run (moto runs no command, so every run
/// fails and both paths are given up), the report marking them, and down — after a failed
/// run and after Ctrl-C alike, nothing is left.
#[test]
fn all_tears_down_after_a_failed_run_and_after_ctrl_c() {
    let moto = moto_or_skip!();
    let dir = TempDir::new("all");
    let text = format!(
        "{}[suite]\ntime = 1\nrepeat = 2\n[[suite.test]]\nparallel = [1, 2]\n",
        one_region(
            "all",
            "[[path]]\nkind = \"peering\"\nclient = \"a\"\nserver = \"b\"\n[[path]]\nkind = \"tgw\"\nclient = \"a\"\nserver = \"b\"\n"
        )
    );
    let file = write(&dir, "s.toml", &text);
    let bin = write_fake_xbench(&dir);
    let out = dir.path().join("results").display().to_string();
    let r = cmd(
        dir.path(),
        Some(&moto),
        &[
            "all",
            "--yes",
            "--skip-ready",
            &file,
            "--out",
            &out,
            "--xbench",
            &bin,
        ],
    );
    assert_eq!(r.code, 1, "stdout {}\nstderr {}", r.stdout, r.stderr);
    assert!(r.stdout.contains("FAILED, given up"), "{}", r.stdout);
    assert!(
        r.stdout.contains("running 4 run(s) per path"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("deleting run xb-"), "{}", r.stdout);
    assert!(Path::new(&out).join("report.txt").is_file());
    let left = moto.leftovers().await_blocking();
    assert!(left.is_empty(), "left after all: {left:#?}");

    // Ctrl-C while it runs (in a pause between runs): stops, deletes, exits 130.
    let out2 = dir.path().join("results2").display().to_string();
    let slow = write(
        &dir,
        "slow.toml",
        "time = 1\npause = \"30s\"\n[[test]]\nparallel = [1, 2]\n",
    );
    let mut child = Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ACCESS_KEY_ID", TEST_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", TEST_SECRET)
        .args([
            "--state-dir",
            &dir.path().join("state").display().to_string(),
            "--endpoint-url",
            &moto.endpoint,
            "--skip-accelerators",
            "--poll-ms",
            "20",
            "--wait-secs",
            "30",
            "all",
            "--yes",
            "--skip-ready",
            &file,
            "--out",
            &out2,
            "--suite",
            &slow,
            "--xbench",
            &bin,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once the run has started (the results directory exists).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !Path::new(&out2).exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: kill(2) on the child's pid, which has not been waited for yet.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let mut stdout = String::new();
    let mut stderr = String::new();
    use std::io::Read as _;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "stdout {stdout}\nstderr {stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(stdout.contains("deleting run xb-"), "{stdout}");
    let left = moto.leftovers().await_blocking();
    assert!(left.is_empty(), "left after an interrupted all: {left:#?}");
}

/// A static x86_64 ELF header: enough for `up` to check and upload (moto runs nothing).
fn write_fake_xbench(dir: &TempDir) -> String {
    let mut elf = vec![0u8; 64 + 56];
    elf[..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2;
    elf[5] = 1;
    elf[18..20].copy_from_slice(&62u16.to_le_bytes());
    elf[32..40].copy_from_slice(&64u64.to_le_bytes());
    elf[54..56].copy_from_slice(&56u16.to_le_bytes());
    elf[56..58].copy_from_slice(&1u16.to_le_bytes());
    elf[64..68].copy_from_slice(&1u32.to_le_bytes());
    let p = dir.path().join("xbench");
    std::fs::write(&p, elf).unwrap();
    p.display().to_string()
}

#[tokio::test]
async fn gc_goes_on_past_a_region_that_fails() {
    let moto = moto_or_skip!();
    let dir = TempDir::new("gcfail");
    let r = tokio::task::spawn_blocking({
        let moto_endpoint = moto.endpoint.clone();
        let home = dir.path().to_owned();
        move || {
            let mut c = Command::new(BIN);
            c.env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", &home)
                .env("AWS_EC2_METADATA_DISABLED", "true")
                .env("AWS_ACCESS_KEY_ID", TEST_KEY_ID)
                .env("AWS_SECRET_ACCESS_KEY", TEST_SECRET)
                .args([
                    "--state-dir",
                    &home.join("state").display().to_string(),
                    "--endpoint-url",
                    &moto_endpoint,
                    "--skip-accelerators",
                    "gc",
                    "--region",
                    "nowhere-1",
                    "--region",
                    "us-east-1",
                ])
                .stdin(Stdio::null());
            finish(c.output().unwrap())
        }
    })
    .await
    .unwrap();
    assert_eq!(r.code, 1, "stdout {}\nstderr {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("region nowhere-1"), "{}", r.stderr);
    assert!(r.stderr.contains("went on past"), "{}", r.stderr);
    assert!(r.stdout.contains("2 region(s)"), "{}", r.stdout);
}

/// `plan` prices the data the suite moves, by kind, with each unit price beside its total, lists
/// only the charges the paths incur (no Transit Gateway processing without a Transit Gateway,
/// as report 001's example had), and warns when the data costs more than the hosts.
#[test]
fn plan_prices_the_data_the_suite_moves_by_kind() {
    let out = plan_ok(&two_regions(
        "data",
        &format!(
            "{PCX}[suite]\ntime = 10\nomit = 0\nrepeat = 15\n[[suite.test]]\nparallel = [1, 2, 4, 8, 16]\n"
        ),
    ));
    for want in [
        "1 x m5.large instance at $0.0960/h = $0.096/h",
        "peering          70.3 GB (client->server 70.3, server->client 0.0) at 0.750 Gbit/s, m5.large client [937.5 GB at 10.0 Gbit/s]",
        "peering          inter-region us-east-1 -> ap-southeast-2: 70.3 GB x $0.0200/GB = $1.41",
        "WARNING: the data costs more than the hosts",
        "m5.large is an \"up to\" type: 0.750 Gbit/s baseline, 10.0 Gbit/s burst",
    ] {
        assert!(out.contains(want), "{want:?} missing:\n{out}");
    }
    assert!(!out.contains("Transit Gateway data processing"), "{out}");
    assert!(!out.contains("plus per-GB charges"), "{out}");
}
