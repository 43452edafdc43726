//! `up`'s end, against moto with the Run Command fake standing in for the hosts: an instance
//! whose SSM agent never registers, a boot script that reports a failure, a server that does
//! not answer its client's probe. Each must fail `up` naming the host (or path) and the usual
//! causes, and leave nothing behind; a healthy run must get its servers' allow lists and a
//! probe per path through SSM.

#![allow(clippy::unwrap_used)]

mod common;

use std::future::pending;
use std::sync::Arc;

use xbench_deploy::aws::ssm::FakeRunCommand;
use xbench_deploy::cost::PriceTable;
use xbench_deploy::{Error, Plan, Scenario};

use common::{Moto, TempDir, booted_hosts, two_regions, up_options};

const PCX_AND_PUBLIC: &str = "[[path]]\nkind = \"peering\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n[[path]]\nkind = \"public\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n";

async fn up_with(
    moto: &Moto,
    hosts: Arc<FakeRunCommand>,
) -> Result<xbench_deploy::state::Outputs, Error> {
    up_paths(moto, hosts, PCX_AND_PUBLIC).await
}

async fn up_paths(
    moto: &Moto,
    hosts: Arc<FakeRunCommand>,
    paths: &str,
) -> Result<xbench_deploy::state::Outputs, Error> {
    let state = TempDir::new("state");
    let (d, _, _) = moto.deployer_with(state.path(), hosts).await;
    let s = Scenario::from_toml(&two_regions("ready", paths)).unwrap();
    let p = Plan::build(&s, &PriceTable::shipped()).unwrap();
    let out = d.up(&s, &p, &up_options(state.path()), pending()).await;
    if let Ok(o) = &out {
        d.down(&o.run_id, &[]).await.unwrap();
    }
    out
}

fn cause(e: &Error) -> &Error {
    match e {
        Error::UpFailed {
            cause,
            teardown: None,
            kept: false,
            ..
        } => cause,
        other => panic!("expected a failed up that was torn down, got {other}"),
    }
}

#[tokio::test]
async fn an_instance_that_never_registers_with_ssm_is_named() {
    let moto = moto_or_skip!();
    let hosts = Arc::new(booted_hosts());
    hosts.set_none_online();
    let e = up_with(&moto, hosts).await.unwrap_err();
    let text = e.to_string();
    match cause(&e) {
        Error::NotRegistered { hosts, .. } => {
            for h in ["server-ap-southeast-2", "client-peering", "client-public"] {
                assert!(hosts.contains(h), "{hosts}");
            }
        }
        other => panic!("{other}"),
    }
    for hint in ["SSM endpoints", "instance profile", "get-console-output"] {
        assert!(text.contains(hint), "{text}");
    }
    let left = moto.leftovers().await;
    assert!(left.is_empty(), "left after a failed up: {left:#?}");
}

#[tokio::test]
async fn a_failed_boot_is_reported_with_the_host_and_its_reason() {
    let moto = moto_or_skip!();
    // Every host reports a failed boot: the first one asked (a server) is named.
    let failing = Arc::new(FakeRunCommand::new(|_, script| {
        if script.contains("boot-status") {
            (
                0,
                "failed: the downloaded xbench binary has sha256 abc, expected def\n".into(),
                String::new(),
            )
        } else {
            (0, String::new(), String::new())
        }
    }));
    let e = up_with(&moto, failing).await.unwrap_err();
    match cause(&e) {
        Error::BootFailed { host, reason, .. } => {
            assert!(
                host.starts_with("server-") || host.starts_with("client-"),
                "{host}"
            );
            assert_eq!(
                reason,
                "the downloaded xbench binary has sha256 abc, expected def"
            );
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("get-console-output"), "{e}");
    assert!(moto.leftovers().await.is_empty());
}

#[tokio::test]
async fn a_server_that_does_not_answer_its_client_fails_up_naming_the_path() {
    let moto = moto_or_skip!();
    let hosts = Arc::new(FakeRunCommand::new(|_, script| {
        if script.contains("boot-status") {
            (0, "ok\n".into(), String::new())
        } else if script.contains(" client ") {
            (1, String::new(), "xbench: connection refused\n".into())
        } else {
            (0, String::new(), String::new())
        }
    }));
    let e = up_with(&moto, hosts).await.unwrap_err();
    match cause(&e) {
        Error::ServerUnreachable { path, detail, .. } => {
            assert_eq!(path, "peering");
            assert!(detail.contains("connection refused"), "{detail}");
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("--allow"), "{e}");
    assert!(moto.leftovers().await.is_empty());
}

/// `clients = 3`: every instance of the fleet probes the server, not only the first, and
/// those that cannot reach it are all named (here the two that probe last).
#[tokio::test]
async fn fleet_instances_that_cannot_reach_the_server_are_named() {
    let moto = moto_or_skip!();
    let probed = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = Arc::clone(&probed);
    let hosts = Arc::new(FakeRunCommand::new(move |instance, script| {
        if script.contains("boot-status") {
            (0, "ok\n".into(), String::new())
        } else if script.contains(" client ") {
            let mut seen = seen.lock().unwrap();
            if !seen.iter().any(|i| i == instance) {
                seen.push(instance.to_owned());
            }
            if seen.first().is_some_and(|i| i == instance) {
                (0, "ok\n".into(), String::new())
            } else {
                (1, String::new(), "xbench: connection timed out\n".into())
            }
        } else {
            (0, String::new(), String::new())
        }
    }));
    let fleet = "[[path]]\nkind = \"public\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\nclients = 3\n";
    let e = up_paths(&moto, hosts, fleet).await.unwrap_err();
    assert_eq!(probed.lock().unwrap().len(), 3, "each instance probes");
    match cause(&e) {
        Error::ServerUnreachable { path, client, .. } => {
            assert_eq!(path, "public");
            let named: std::collections::BTreeSet<&str> = client.split(", ").collect();
            assert_eq!(named.len(), 2, "{client}");
            for n in named {
                assert!(
                    ["client-public", "client-public.2", "client-public.3"].contains(&n),
                    "{client}"
                );
            }
        }
        other => panic!("{other}"),
    }
    assert!(moto.leftovers().await.is_empty());
}

#[tokio::test]
async fn a_healthy_run_gets_allow_lists_and_a_probe_per_path() {
    let moto = moto_or_skip!();
    let hosts = Arc::new(booted_hosts());
    let out = up_with(&moto, hosts.clone()).await.unwrap();
    let sent = hosts.sent();
    let server = out.hosts.iter().find(|h| h.role == "server").unwrap();
    let client_public = out.hosts.iter().find(|h| h.key == "client-public").unwrap();
    // The public path's client reaches the server from its public address: added to the
    // server's --allow once known, next to the peering client's subnet.
    let allow = sent
        .iter()
        .find(|(i, s)| *i == server.instance_id && s.contains("ExecStart="))
        .map(|(_, s)| s.clone())
        .expect("an allow-list update of the server");
    assert!(
        allow.contains(&format!("{}/32", client_public.public_ip.unwrap())),
        "{allow}"
    );
    assert!(allow.contains("10.10.1.0/24"), "{allow}");
    let probes: Vec<&String> = sent
        .iter()
        .filter(|(_, s)| s.contains(" client ") && s.contains("--psk-file=/etc/xbench-deploy/psk"))
        .map(|(_, s)| s)
        .collect();
    assert_eq!(probes.len(), 2, "{sent:#?}");
    assert!(moto.leftovers().await.is_empty());
}

/// A VPN gateway whose strongSwan could not be installed fails `up` naming the gateway and its
/// boot's own words (before, gateways' boot status was never read: the path's probe timed out
/// "unreachable" instead).
#[tokio::test]
async fn a_gateway_whose_vpn_daemon_is_missing_fails_up_with_its_reason() {
    let moto = moto_or_skip!();
    let hosts = Arc::new(FakeRunCommand::new(|_, script| {
        if script.contains("boot status of gw-") {
            (
                0,
                "failed: cannot install strongSwan with dnf on Amazon Linux 2023: No match for argument: strongswan\n".into(),
                String::new(),
            )
        } else if script.contains("boot-status") {
            (0, "ok\n".into(), String::new())
        } else {
            (0, String::new(), String::new())
        }
    }));
    let e = up_paths(
        &moto,
        hosts,
        "[[path]]\nkind = \"vpn\"\nvpn = \"ipsec\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n",
    )
    .await
    .unwrap_err();
    match cause(&e) {
        Error::BootFailed { host, reason, .. } => {
            assert!(host.starts_with("gw-vpn-ipsec-"), "{host}");
            assert!(reason.contains("cannot install strongSwan"), "{reason}");
        }
        other => panic!("{other}"),
    }
    assert!(moto.leftovers().await.is_empty());
}
