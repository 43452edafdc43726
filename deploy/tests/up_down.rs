//! `up` then `down` for each path kind against the moto emulator (Global Accelerator and
//! placement groups against the in-memory fakes), checking the outputs and that nothing is
//! left in any region afterwards.

// Helpers outside #[test] fns unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::future::pending;

use xbench_deploy::apply::UpOptions;
use xbench_deploy::aws::accelerator::FakeAccelerators;
use xbench_deploy::aws::placement::FakePlacementGroups;
use xbench_deploy::cost::PriceTable;
use xbench_deploy::scenario::{PathKind, VpnFlavour};
use xbench_deploy::state::Outputs;
use xbench_deploy::{Plan, Scenario};

use common::{Moto, TempDir, one_region, two_regions, up_options};

async fn up_then_down(moto: &Moto, text: &str) -> Outputs {
    up_then_down_checked(moto, text, |_, _| {}).await
}

async fn up_then_down_checked(
    moto: &Moto,
    text: &str,
    check: impl Fn(&FakeAccelerators, &FakePlacementGroups),
) -> Outputs {
    let state = TempDir::new("state");
    let (d, accel, pg) = moto.deployer(state.path()).await;
    let scenario = Scenario::from_toml(text).unwrap();
    let plan = Plan::build(&scenario, &PriceTable::shipped()).unwrap();
    let out = d
        .up(&scenario, &plan, &up_options(state.path()), pending())
        .await
        .unwrap_or_else(|e| panic!("up failed: {e}"));
    assert_eq!(out.paths.len(), scenario.paths.len());
    let written = std::fs::read_to_string(d.state_dir().outputs_file(&out.run_id)).unwrap();
    let parsed: Outputs = serde_json::from_str(&written).unwrap();
    assert_eq!(parsed, out);
    // A second `up` of the same run finds everything and creates nothing new.
    let again = d
        .up(
            &scenario,
            &plan,
            &UpOptions {
                run_id: Some(out.run_id.clone()),
                ..up_options(state.path())
            },
            pending(),
        )
        .await
        .unwrap();
    assert_eq!(again.hosts, out.hosts, "re-running up must reuse the hosts");

    check(&accel, &pg);
    every_host_stops_itself(moto, &out).await;
    let report = d.down(&out.run_id, &[]).await.unwrap();
    assert!(!report.deleted.is_empty());
    let left = moto.leftovers().await;
    assert!(left.is_empty(), "left after down: {left:#?}");
    assert!(
        accel.arns().is_empty(),
        "accelerators left: {:?}",
        accel.arns()
    );
    assert!(
        pg.names().is_empty(),
        "placement groups left: {:?}",
        pg.names()
    );
    out
}

/// Every instance (servers, clients, gateways) powers itself off at the run's deletion-due
/// time and terminates when it does: read back from EC2 directly, not through the code under
/// test.
async fn every_host_stops_itself(moto: &Moto, out: &Outputs) {
    use aws_sdk_ec2::types::InstanceAttributeName;
    let when = xbench_deploy::userdata::calendar_time(&out.deletion_due).unwrap();
    for h in &out.hosts {
        let ec2 = moto.ec2(&h.region).await;
        let attr = |name| {
            ec2.describe_instance_attribute()
                .instance_id(&h.instance_id)
                .attribute(name)
                .send()
        };
        let behaviour = attr(InstanceAttributeName::InstanceInitiatedShutdownBehavior)
            .await
            .unwrap();
        assert_eq!(
            behaviour
                .instance_initiated_shutdown_behavior()
                .and_then(|v| v.value()),
            Some("terminate"),
            "{}",
            h.key
        );
        let user_data = attr(InstanceAttributeName::UserData).await.unwrap();
        let script = aws_smithy_types::base64::decode(
            user_data.user_data().and_then(|v| v.value()).unwrap(),
        )
        .unwrap();
        let script = String::from_utf8(script).unwrap();
        assert!(
            script.contains(&format!("OnCalendar={when}\n"))
                && script.contains("systemctl enable --now xbench-deletion-due.timer"),
            "{} has no power-off at {when}",
            h.key
        );
    }
}

fn host_ip(out: &Outputs, key: &str, public: bool) -> std::net::Ipv4Addr {
    let h = out.hosts.iter().find(|h| h.key == key).unwrap();
    if public {
        h.public_ip.unwrap()
    } else {
        h.private_ip.unwrap()
    }
}

#[tokio::test]
async fn peering_cross_region() {
    let moto = moto_or_skip!();
    let out = up_then_down(
        &moto,
        &two_regions(
            "pcx",
            "[[path]]\nkind = \"peering\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n",
        ),
    )
    .await;
    let p = &out.paths[0];
    assert_eq!(p.kind, PathKind::Peering);
    assert_eq!(p.target, host_ip(&out, "server-ap-southeast-2", false));
    assert!(p.target.to_string().starts_with("10.20.0."));
    assert_eq!(
        p.command,
        format!(
            "xbench client {} --label peering --psk-file /etc/xbench-deploy/psk",
            p.target
        )
    );
}

#[tokio::test]
async fn peering_and_tgw_in_one_region() {
    let moto = moto_or_skip!();
    let out = up_then_down(
        &moto,
        &one_region(
            "r002",
            "[[path]]\nkind = \"peering\"\nclient = \"a\"\nserver = \"b\"\n[[path]]\nkind = \"tgw\"\nclient = \"a\"\nserver = \"b\"\n",
        ),
    )
    .await;
    let server = host_ip(&out, "server-b", false);
    assert!(out.paths.iter().all(|p| p.target == server));
}

#[tokio::test]
async fn tgw_cross_region_with_peering() {
    let moto = moto_or_skip!();
    up_then_down(
        &moto,
        &two_regions(
            "tgw",
            "[[path]]\nkind = \"tgw\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n",
        ),
    )
    .await;
}

#[tokio::test]
async fn vpn_between_gateways() {
    let moto = moto_or_skip!();
    let out = up_then_down(
        &moto,
        &two_regions(
            "vpn",
            "[[path]]\nkind = \"vpn\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n",
        ),
    )
    .await;
    assert_eq!(out.hosts.iter().filter(|h| h.role == "gateway").count(), 2);
    assert_eq!(
        out.paths[0].target,
        host_ip(&out, "server-ap-southeast-2", false)
    );
}

/// An IPsec path: the gateways' groups let in IKE (UDP 500 and 4500) and ESP from the peer's
/// public address only, not WireGuard's port; source/destination checks are off; the outputs
/// name the flavour; `down` leaves nothing.
#[tokio::test]
async fn vpn_ipsec_between_gateways() {
    let moto = moto_or_skip!();
    let text = two_regions(
        "ipsec",
        "[[path]]\nkind = \"vpn\"\nvpn = \"ipsec\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n",
    );
    let state = TempDir::new("state");
    let (d, _, _) = moto.deployer(state.path()).await;
    let scenario = Scenario::from_toml(&text).unwrap();
    let plan = Plan::build(&scenario, &PriceTable::shipped()).unwrap();
    let out = d
        .up(&scenario, &plan, &up_options(state.path()), pending())
        .await
        .unwrap_or_else(|e| panic!("up failed: {e}"));
    assert_eq!(out.paths[0].vpn, Some(VpnFlavour::Ipsec));
    for (region, gw, peer) in [
        ("us-east-1", "gw-vpn-ipsec-client", "gw-vpn-ipsec-server"),
        (
            "ap-southeast-2",
            "gw-vpn-ipsec-server",
            "gw-vpn-ipsec-client",
        ),
    ] {
        let ec2 = moto.ec2(region).await;
        let peer_ip = format!("{}/32", host_ip(&out, peer, true));
        let groups = ec2.describe_security_groups().send().await.unwrap();
        let group = groups
            .security_groups()
            .iter()
            .find(|g| g.group_name().is_some_and(|n| n.ends_with("vpn-gateways")))
            .unwrap_or_else(|| panic!("no vpn-gateways group in {region}"));
        let mut from_peer: Vec<(String, Option<i32>)> = group
            .ip_permissions()
            .iter()
            .filter(|p| p.ip_ranges().iter().any(|r| r.cidr_ip() == Some(&peer_ip)))
            .map(|p| (p.ip_protocol().unwrap_or("").to_owned(), p.from_port()))
            .collect();
        from_peer.sort();
        assert_eq!(
            from_peer,
            [
                ("50".to_owned(), Some(-1)),
                ("udp".to_owned(), Some(500)),
                ("udp".to_owned(), Some(4500)),
            ],
            "{region}: {group:#?}"
        );
        let id = &out.hosts.iter().find(|h| h.key == gw).unwrap().instance_id;
        let attr = ec2
            .describe_instance_attribute()
            .instance_id(id)
            .attribute(aws_sdk_ec2::types::InstanceAttributeName::SourceDestCheck)
            .send()
            .await
            .unwrap();
        assert_eq!(
            attr.source_dest_check().and_then(|v| v.value()),
            Some(false),
            "{gw}"
        );
    }
    d.down(&out.run_id, &[]).await.unwrap();
    let left = moto.leftovers().await;
    assert!(left.is_empty(), "left after down: {left:#?}");
}

#[tokio::test]
async fn public_and_existing() {
    let moto = moto_or_skip!();
    let out = up_then_down(
        &moto,
        &two_regions(
            "pub",
            "[[path]]\nkind = \"public\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n\
             [[path]]\nkind = \"existing\"\nlabel = \"campus\"\nclient = \"us-east-1\"\nserver_address = \"198.51.100.20\"\n\
             [[path]]\nkind = \"existing\"\nlabel = \"home\"\nclient_address = \"203.0.113.7\"\nserver = \"ap-southeast-2\"\n",
        ),
    )
    .await;
    let server_public = host_ip(&out, "server-ap-southeast-2", true);
    let by = |l: &str| out.paths.iter().find(|p| p.label == l).unwrap();
    assert_eq!(by("public").target, server_public);
    assert_eq!(by("campus").target.to_string(), "198.51.100.20");
    assert_eq!(by("home").target, server_public);
    assert_eq!(by("home").run_on.unwrap().to_string(), "203.0.113.7");
}

/// Global Accelerator is not in moto: the accelerator itself is the in-memory fake (which
/// enforces disable-before-delete); its server host is real EC2 in moto.
#[tokio::test]
async fn accelerator_against_fake() {
    let moto = moto_or_skip!();
    let out = up_then_down_checked(
        &moto,
        &two_regions("ga", "[[path]]\nkind = \"accelerator\"\nclient = \"ap-southeast-2\"\nserver = \"us-east-1\"\n"),
        |accel, _| {
            assert_eq!(accel.arns().len(), 1);
            assert_eq!(accel.listener_count(), 2, "a TCP and a UDP listener");
        },
    )
    .await;
    assert!(out.paths[0].target.to_string().starts_with("198.18."));
}

/// Placement groups are not in moto: created and deleted through the in-memory fake.
#[tokio::test]
async fn placement_group_against_fake() {
    let moto = moto_or_skip!();
    let text = one_region(
        "pg",
        "[[path]]\nkind = \"peering\"\nclient = \"a\"\nserver = \"b\"\n",
    )
    .replace(
        "cidr = \"10.100.0.0/16\"",
        "cidr = \"10.100.0.0/16\"\nplacement = \"cluster\"",
    )
    .replace(
        "cidr = \"10.101.0.0/16\"",
        "cidr = \"10.101.0.0/16\"\nplacement = \"cluster\"",
    );
    up_then_down_checked(&moto, &text, |_, pg| {
        assert_eq!(
            pg.names().len(),
            1,
            "one cluster group shared by the region's VPCs"
        );
    })
    .await;
}

/// Global Accelerator leaves a security group named "GlobalAccelerator" in the endpoint's VPC
/// (untagged); `down` must find it through the VPC, or the VPC cannot be deleted.
#[tokio::test]
async fn down_removes_the_group_global_accelerator_leaves() {
    let moto = moto_or_skip!();
    let state = TempDir::new("state");
    let (d, _, _) = moto.deployer(state.path()).await;
    let scenario = Scenario::from_toml(&two_regions(
        "gasg",
        "[[path]]\nkind = \"accelerator\"\nclient_address = \"203.0.113.7\"\nserver = \"us-east-1\"\n",
    ))
    .unwrap();
    let plan = Plan::build(&scenario, &PriceTable::shipped()).unwrap();
    let out = d
        .up(&scenario, &plan, &up_options(state.path()), pending())
        .await
        .unwrap();
    let server = out
        .hosts
        .iter()
        .find(|h| h.key == "server-us-east-1")
        .unwrap();
    let ec2 = moto.ec2("us-east-1").await;
    let vpc = ec2
        .describe_instances()
        .instance_ids(&server.instance_id)
        .send()
        .await
        .unwrap()
        .reservations()[0]
        .instances()[0]
        .vpc_id()
        .unwrap()
        .to_owned();
    // What Global Accelerator would do on AWS.
    ec2.create_security_group()
        .group_name("GlobalAccelerator")
        .description("made by Global Accelerator")
        .vpc_id(&vpc)
        .send()
        .await
        .unwrap();
    d.down(&out.run_id, &[]).await.unwrap();
    let left = moto.leftovers().await;
    assert!(left.is_empty(), "left after down: {left:#?}");
}

/// `clients = 3`: three client instances in the path's subnet and the VPC's cluster
/// placement group, each allowed at the server (a public path), recorded in the outputs as
/// the path's fleet, and all removed by `down`.
#[tokio::test]
async fn fleet_of_three_clients_in_a_placement_group() {
    let moto = moto_or_skip!();
    let text = r#"
name = "fleet"
instance_type = "m5.large"
[xbench]
url = "https://example.com/xbench"
sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
[[vpc]]
region = "us-east-1"
cidr = "10.10.0.0/16"
placement = "cluster"
[[vpc]]
region = "ap-southeast-2"
cidr = "10.20.0.0/16"
[[path]]
kind = "public"
client = "us-east-1"
server = "ap-southeast-2"
clients = 3
"#;
    let out = up_then_down_checked(&moto, text, |_, pg| {
        assert_eq!(pg.names().len(), 1, "{:?}", pg.names());
    })
    .await;
    let p = &out.paths[0];
    assert_eq!(p.client_host.as_deref(), Some("client-public"));
    assert_eq!(p.fleet, ["client-public.2", "client-public.3"]);
    let clients: Vec<_> = out.hosts.iter().filter(|h| h.role == "client").collect();
    assert_eq!(clients.len(), 3);
    let ids: std::collections::BTreeSet<_> = clients.iter().map(|h| &h.instance_id).collect();
    assert_eq!(ids.len(), 3, "three distinct instances");
    for h in &clients {
        assert!(h.public_ip.is_some(), "{h:?}");
        assert!(
            h.private_ip.unwrap().to_string().starts_with("10.10."),
            "{h:?}"
        );
    }
}
