//! `run` on "AWS": the run is brought up against moto (bucket, key, profile and all), then
//! each path's client is this machine — the Run Command fake hands every script to `bash`
//! here, the script runs the real `xbench client` against a real `xbench server` with the
//! run's kind of key and allow list, and uploads its report with a presigned PUT to moto's S3;
//! `run` downloads it into the results layout. One path points at a port where nothing
//! listens: it must be given up while the other completes, and the report must say so.
//! Then `--resume` collects nothing twice, and `down` leaves nothing. Plus the Run Command
//! calls moto has (SendCommand, GetCommandInvocation) made through the real SDK.

#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::future::pending;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use xbench_deploy::aws::ssm::{self, AwsRunCommand, CommandStatus, FakeRunCommand, RunCommandApi};
use xbench_deploy::cost::PriceTable;
use xbench_deploy::run::remote::{HostLayout, SsmExecutor};
use xbench_deploy::run::{self, RunEvent, RunOptions, report};
use xbench_deploy::{Plan, Scenario};

use common::{TempDir, one_region, up_options, xbench_bin};

const SUITE: &str = "[suite]\ntime = 1\nrepeat = 2\n[[suite.test]]\nparallel = [1, 2]\n";

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `xbench server` as on a host: the key, and only 127.0.0.1 allowed.
fn server(psk: &std::path::Path, port: u16) -> Server {
    let argv = xbench_deploy::command::server_argv(
        port,
        Some("127.0.0.1"),
        &psk.display().to_string(),
        &["127.0.0.1/32".parse().unwrap()],
    );
    let server = Server(
        Command::new(xbench_bin())
            .args(&argv)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    for _ in 0..100 {
        if std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return server;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("xbench server did not start on {port}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_collects_through_ssm_and_the_bucket_and_marks_a_failing_path() {
    let moto = moto_or_skip!();
    let state = TempDir::new("state");
    let work = TempDir::new("work");
    let psk = work.path().join("psk");
    std::fs::write(&psk, "0123456789abcdef0123456789abcdef\n").unwrap();
    let port = free_port();
    let _server = server(&psk, port);

    let text = format!(
        "{}{SUITE}",
        one_region(
            "runssm",
            "[[path]]\nkind = \"peering\"\nclient = \"a\"\nserver = \"b\"\n[[path]]\nkind = \"tgw\"\nclient = \"a\"\nserver = \"b\"\n",
        )
    );
    let scenario = Scenario::from_toml(&text).unwrap();
    let suite = scenario.suite.clone().unwrap();
    let plan = Plan::build(&scenario, &PriceTable::shipped()).unwrap();
    let (d, _, _) = moto.deployer(state.path()).await;
    let mut outputs = d
        .up(&scenario, &plan, &up_options(state.path()), pending())
        .await
        .unwrap();
    assert!(
        outputs.bucket.is_some(),
        "an uploaded binary means a bucket"
    );

    // The hosts are this machine: the peering path reaches the server, the tgw path a port
    // where nothing listens.
    let dead = free_port();
    for p in &mut outputs.paths {
        p.target = Ipv4Addr::LOCALHOST;
        p.port = if p.label == "peering" { port } else { dead };
    }
    let hosts = Arc::new(FakeRunCommand::local_shell());
    let (d_run, _, _) = moto.deployer_with(state.path(), hosts.clone()).await;
    let (exec, paths) = SsmExecutor::new(&d_run, &outputs).unwrap();
    let exec = exec.with_layout(HostLayout {
        xbench: xbench_bin().display().to_string(),
        psk: psk.display().to_string(),
    });
    let out = work.path().join("results");
    let opts = RunOptions::new(&out);
    let mut events = Vec::new();
    let summary = run::run(
        &suite,
        &paths,
        &exec,
        &opts,
        &mut |e| events.push(format!("{e:?}")),
        pending(),
    )
    .await
    .unwrap();
    let by = |l: &str| summary.paths.iter().find(|p| p.label == l).unwrap().clone();
    assert_eq!(
        (by("peering").collected, by("peering").planned),
        (4, 4),
        "{events:#?}"
    );
    assert_eq!(by("tgw").collected, 0);
    assert_eq!(
        by("tgw").failed,
        3,
        "given up after three failures in a row"
    );
    assert!(by("tgw").given_up.is_some());
    for cell in ["tcp-up-P1", "tcp-up-P2"] {
        for n in [1, 2] {
            let f = out.join("peering").join(cell).join(format!("run-{n}.json"));
            let r: xbench::report::TestReport =
                serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
            assert_eq!(r.label.as_deref(), Some("peering"), "{}", f.display());
        }
    }
    // Every script went through Run Command, with the command line `run` built.
    let sent = hosts.sent();
    let clients = |sent: &[(String, String)]| {
        sent.iter()
            .filter(|(_, s)| s.contains(" client 127.0.0.1 -p "))
            .count()
    };
    assert_eq!(clients(&sent), 4 + 3, "{sent:#?}");
    // Then each path's client was asked about MTU, once: here the loopback interface.
    assert_eq!(sent.len(), 4 + 3 + 2, "{sent:#?}");
    assert!(sent[0].1.contains("curl -fsS --retry 3"), "{}", sent[0].1);
    let mtu: xbench_deploy::run::mtu::PathMtu =
        serde_json::from_slice(&std::fs::read(out.join("peering").join(run::MTU_FILE)).unwrap())
            .unwrap();
    assert_eq!(
        (mtu.interface.as_deref(), mtu.interface_mtu),
        (Some("lo"), Some(65536)),
        "{mtu:?}"
    );
    // The reports came through the bucket, and none is left there.
    let bucket = outputs.bucket.clone().unwrap();
    let left = moto
        .s3(&bucket.region)
        .await
        .list_objects_v2()
        .bucket(&bucket.name)
        .prefix("results/")
        .send()
        .await
        .unwrap();
    assert_eq!(left.key_count(), Some(0));

    let r = report::write(&out, &summary, xbench_report::ThroughputUnit::Mbits).unwrap();
    assert!(r.text.contains("peering"), "{}", r.text);
    assert!(
        r.text.contains("tgw") && r.text.contains("FAILED, given up"),
        "{}",
        r.text
    );
    assert!(out.join("chart-streams.svg").is_file(), "{:?}", r.files);
    // `xbench report DIR` reads the same tree.
    let loaded = xbench_report::load(std::slice::from_ref(&out)).unwrap();
    assert_eq!(loaded.runs.len(), 4);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);

    // Without --resume the directory is refused; with it nothing is collected twice.
    let again = run::run(&suite, &paths[..1], &exec, &opts, &mut |_| {}, pending()).await;
    assert!(matches!(
        again,
        Err(xbench_deploy::Error::OutputHoldsRuns { .. })
    ));
    let mut resume = opts.clone();
    resume.resume = true;
    let mut skipped = 0;
    let s = run::run(
        &suite,
        &paths[..1],
        &exec,
        &resume,
        &mut |e| {
            if matches!(e, RunEvent::Skipped(_)) {
                skipped += 1;
            }
        },
        pending(),
    )
    .await
    .unwrap();
    assert_eq!((s.collected_now, s.skipped, skipped), (0, 4, 4));
    assert_eq!(clients(&hosts.sent()), 7, "nothing ran again");

    d.down(&outputs.run_id, &[]).await.unwrap();
    let left = moto.leftovers().await;
    assert!(left.is_empty(), "left after down: {left:#?}");
}

/// The Run Command calls moto implements, through the real SDK: a command is accepted and
/// its invocation read back. moto runs nothing (the invocation is always `Success` with no
/// output) and has no DescribeInstanceInformation; those are the fake's.
#[tokio::test]
async fn run_command_calls_against_moto() {
    let moto = moto_or_skip!();
    let aws = xbench_deploy::aws::Aws::connect(&moto.settings())
        .await
        .unwrap();
    let r = aws.region("us-east-1");
    let api = AwsRunCommand;
    let instance = "i-0123456789abcdef0";
    let id = api
        .send(&r, instance, "echo hello", Duration::from_secs(60), "test")
        .await
        .unwrap();
    let inv = ssm::run_script(
        &api,
        &r,
        instance,
        "echo hello",
        Duration::from_secs(5),
        Duration::from_millis(20),
        "test",
    )
    .await
    .unwrap();
    assert_eq!(inv.status, CommandStatus::Success);
    let first = api.invocation(&r, &id, instance).await.unwrap();
    assert!(first.is_some_and(|i| i.status == CommandStatus::Success));
    let missing = api
        .invocation(&r, "00000000-0000-0000-0000-000000000000", instance)
        .await;
    assert!(
        missing.is_err(),
        "an unknown command id is an error, not a wait"
    );
    // If this starts to pass, moto gained the call: test readiness against it and say so in
    // the README.
    let online = api.online(&r, &[instance.to_owned()]).await;
    assert!(
        online
            .as_ref()
            .is_err_and(|e| e.to_string().contains("DescribeInstanceInformation")),
        "{online:?}"
    );
}

/// `run --here` (issue 32, field reports 003 and 004): a path whose client is your own host
/// (`client_address`) runs on this machine, with the run's key fetched from Parameter Store,
/// beside a path whose client is a host of the run, which still goes through Run Command.
/// Without it the path is only printed as a command to run by hand. The key file exists
/// while the executor does, readable by its owner only, and is gone after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn here_runs_your_own_hosts_paths_on_this_machine_with_the_runs_key() {
    use std::os::unix::fs::PermissionsExt as _;
    use xbench_deploy::run::here::{self, Here, HereOptions};

    let moto = moto_or_skip!();
    let state = TempDir::new("state");
    let work = TempDir::new("work");
    let text = format!(
        "{}{SUITE}",
        one_region(
            "runhere",
            "[[path]]\nkind = \"peering\"\nclient = \"a\"\nserver = \"b\"\n[[path]]\nkind = \"existing\"\nlabel = \"from-campus\"\nclient_address = \"198.51.100.20\"\nserver = \"b\"\n",
        )
    );
    let scenario = Scenario::from_toml(&text).unwrap();
    let suite = scenario.suite.clone().unwrap();
    let plan = Plan::build(&scenario, &PriceTable::shipped()).unwrap();
    let (d, _, _) = moto.deployer(state.path()).await;
    let mut outputs = d
        .up(&scenario, &plan, &up_options(state.path()), pending())
        .await
        .unwrap();
    // The server of both paths is an xbench server here, with the run's own key.
    let key = here::run_key(&d, &outputs)
        .await
        .unwrap()
        .expect("up stored the key");
    let psk = work.path().join("psk");
    std::fs::write(&psk, &key).unwrap();
    let port = free_port();
    let _server = server(&psk, port);
    for p in &mut outputs.paths {
        p.target = Ipv4Addr::LOCALHOST;
        p.port = port;
    }
    let hosts = Arc::new(FakeRunCommand::local_shell());
    let (d_run, _, _) = moto.deployer_with(state.path(), hosts.clone()).await;
    let (exec, paths) = SsmExecutor::new(&d_run, &outputs).unwrap();
    let exec = exec.with_layout(HostLayout {
        xbench: xbench_bin().display().to_string(),
        psk: psk.display().to_string(),
    });
    let campus = |ps: &[run::RunPath]| ps.iter().find(|p| p.label == "from-campus").cloned();
    let without = campus(&paths).unwrap();
    assert!(
        without
            .unavailable
            .as_deref()
            .unwrap()
            .contains("your host"),
        "{without:?}"
    );

    let dir = state.path().join("here");
    let opts = HereOptions {
        xbench: xbench_bin(),
        dir: dir.clone(),
        key: Some(key),
    };
    let (local, paths) = Here::new(&exec, &outputs, paths, opts).unwrap();
    let notes = local.notes();
    assert_eq!(campus(&paths).unwrap().unavailable, None);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].1.contains("not an address of this machine"),
        "198.51.100.20 is not ours: {notes:?}"
    );
    // A directory of this process's own.
    let key_file = dir.join(std::process::id().to_string()).join("here.psk");
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let out = work.path().join("results");
    let mut events = Vec::new();
    let summary = run::run(
        &suite,
        &paths,
        &local,
        &RunOptions::new(&out),
        &mut |e| events.push(format!("{e:?}")),
        pending(),
    )
    .await
    .unwrap();
    for p in &summary.paths {
        assert_eq!((p.collected, p.planned), (4, 4), "{}: {events:#?}", p.label);
    }
    let r: xbench::report::TestReport = serde_json::from_slice(
        &std::fs::read(out.join("from-campus").join("tcp-up-P2").join("run-2.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(r.label.as_deref(), Some("from-campus"));
    // Only the peering path's runs (and its MTU question) went through Run Command; the
    // campus path's MTU was read here.
    let sent = hosts.sent();
    assert_eq!(sent.len(), 4 + 1, "{sent:#?}");
    let mtu: xbench_deploy::run::mtu::PathMtu = serde_json::from_slice(
        &std::fs::read(out.join("from-campus").join(run::MTU_FILE)).unwrap(),
    )
    .unwrap();
    assert_eq!(mtu.interface.as_deref(), Some("lo"), "{mtu:?}");
    drop(local);
    assert!(!key_file.exists(), "the key is removed with the executor");

    // A run without a path of yours is refused with --here, naming why.
    let (exec, paths) = SsmExecutor::new(&d_run, &outputs).unwrap();
    let mine: Vec<_> = paths.into_iter().filter(|p| p.label == "peering").collect();
    let mut only = outputs.clone();
    only.paths.retain(|p| p.label == "peering");
    let opts = HereOptions {
        xbench: xbench_bin(),
        dir,
        key: None,
    };
    let e = Here::new(&exec, &only, mine, opts).unwrap_err();
    assert!(e.to_string().contains("no path of this run"), "{e}");
    assert!(e.is_bad_input());

    d.down(&outputs.run_id, &[]).await.unwrap();
    let left = moto.leftovers().await;
    assert!(left.is_empty(), "left after down: {left:#?}");
}
