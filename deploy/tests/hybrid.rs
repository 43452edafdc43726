//! Hybrid `existing` paths against the moto emulator: the run's VPC joined to "your" virtual
//! private gateway and Transit Gateway (made here directly through the SDK, as a user's would
//! exist before the run), routes and rules towards the on-premises blocks, and after `down`
//! nothing of the run left while both gateways still exist, unchanged. Then the refusals `up`
//! makes before creating anything: a gateway that does not exist, one in another region, a VGW
//! already attached to another VPC.

// Helpers outside #[test] fns unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::future::pending;

use aws_sdk_ec2::types::Filter;
use xbench_deploy::apply::UpOptions;
use xbench_deploy::cost::PriceTable;
use xbench_deploy::error::Error;
use xbench_deploy::{Plan, Scenario};

use common::{Moto, TempDir, up_options};

const REGION: &str = "ap-northeast-1";

fn scenario(vgw: &str, tgw: &str) -> String {
    format!(
        r#"
name = "hybrid"
instance_type = "m7i.large"
[[vpc]]
name = "a"
region = "{REGION}"
cidr = "10.100.0.0/16"
[[path]]
kind = "existing"
label = "to-dc"
client = "a"
server_address = "192.168.10.5"
via = "{vgw}"
on_prem_cidr = "192.168.0.0/16"
[[path]]
kind = "existing"
label = "from-campus"
client_address = "172.16.3.4"
server = "a"
via = "{tgw}"
on_prem_cidr = "172.16.0.0/20"
"#
    )
}

/// "Your" gateways, made before the run: (vgw id, tgw id).
async fn user_gateways(moto: &Moto, region: &str) -> (String, String) {
    let c = moto.ec2(region).await;
    let vgw = c
        .create_vpn_gateway()
        .r#type(aws_sdk_ec2::types::GatewayType::Ipsec1)
        .send()
        .await
        .unwrap()
        .vpn_gateway()
        .unwrap()
        .vpn_gateway_id()
        .unwrap()
        .to_owned();
    let tgw = c
        .create_transit_gateway()
        .description("the user's")
        .send()
        .await
        .unwrap()
        .transit_gateway()
        .unwrap()
        .transit_gateway_id()
        .unwrap()
        .to_owned();
    (vgw, tgw)
}

fn tag(name: &str, value: &str) -> Filter {
    Filter::builder()
        .name(format!("tag:{name}"))
        .values(value)
        .build()
}

/// (state, attached VPCs not detached) of VGW `id`.
async fn vgw_facts(c: &aws_sdk_ec2::Client, id: &str) -> (String, Vec<String>) {
    let out = c
        .describe_vpn_gateways()
        .vpn_gateway_ids(id)
        .send()
        .await
        .unwrap();
    let g = &out.vpn_gateways()[0];
    let attached = g
        .vpc_attachments()
        .iter()
        .filter(|a| a.state().map(|s| s.as_str()) != Some("detached"))
        .map(|a| a.vpc_id().unwrap().to_owned())
        .collect();
    (g.state().unwrap().as_str().to_owned(), attached)
}

/// (attachment id, state) of every TGW VPC attachment of `tgw` not deleted.
async fn tgw_attachments(c: &aws_sdk_ec2::Client, tgw: &str) -> Vec<(String, String, String)> {
    let out = c
        .describe_transit_gateway_vpc_attachments()
        .send()
        .await
        .unwrap();
    out.transit_gateway_vpc_attachments()
        .iter()
        .filter(|a| a.transit_gateway_id() == Some(tgw))
        .filter(|a| a.state().map(|s| s.as_str()) != Some("deleted"))
        .map(|a| {
            (
                a.transit_gateway_attachment_id().unwrap().to_owned(),
                a.vpc_id().unwrap().to_owned(),
                a.state().unwrap().as_str().to_owned(),
            )
        })
        .collect()
}

/// The routes of the run's route table with plan key `key`: (destination, target id).
async fn routes(c: &aws_sdk_ec2::Client, run: &str, key: &str) -> Vec<(String, String)> {
    let out = c
        .describe_route_tables()
        .filters(tag("xbench:run-id", run))
        .filters(tag("xbench:key", key))
        .send()
        .await
        .unwrap();
    assert_eq!(out.route_tables().len(), 1, "one route table {key}");
    out.route_tables()[0]
        .routes()
        .iter()
        .map(|r| {
            let target = r
                .gateway_id()
                .or(r.transit_gateway_id())
                .or(r.network_interface_id())
                .unwrap_or_default();
            (
                r.destination_cidr_block().unwrap_or_default().to_owned(),
                target.to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn vgw_and_tgw_joined_for_the_run_then_released_and_left_standing() {
    let moto = moto_or_skip!();
    let (vgw, tgw) = user_gateways(&moto, REGION).await;
    let c = moto.ec2(REGION).await;
    let state = TempDir::new("state");
    let (d, _, _) = moto.deployer(state.path()).await;
    let scenario = Scenario::from_toml(&scenario(&vgw, &tgw)).unwrap();
    let plan = Plan::build(&scenario, &PriceTable::shipped()).unwrap();
    let out = d
        .up(&scenario, &plan, &up_options(state.path()), pending())
        .await
        .unwrap_or_else(|e| panic!("up failed: {e}"));
    let run = out.run_id.to_string();
    let vpc = c
        .describe_vpcs()
        .filters(tag("xbench:run-id", &run))
        .send()
        .await
        .unwrap()
        .vpcs()[0]
        .vpc_id()
        .unwrap()
        .to_owned();

    // The VGW is attached to the run's VPC; the client's subnet routes your block to it.
    assert_eq!(
        vgw_facts(&c, &vgw).await,
        ("available".into(), vec![vpc.clone()])
    );
    let client_routes = routes(&c, &run, "rtb/a/client-to-dc").await;
    assert!(
        client_routes.contains(&("192.168.0.0/16".into(), vgw.clone())),
        "{client_routes:?}"
    );
    // Your TGW has one attachment, the run's VPC's; the server's subnet routes to it.
    let attachments = tgw_attachments(&c, &tgw).await;
    assert_eq!(attachments.len(), 1, "{attachments:?}");
    let (attachment, attached_vpc, attachment_state) = attachments[0].clone();
    assert_eq!(
        (attached_vpc.as_str(), attachment_state.as_str()),
        (vpc.as_str(), "available")
    );
    let base_routes = routes(&c, &run, "rtb/a/base").await;
    assert!(
        base_routes.contains(&("172.16.0.0/20".into(), tgw.clone())),
        "{base_routes:?}"
    );
    // Only the server's group opens to the campus block: the xbench port and ICMP.
    let groups = c
        .describe_security_groups()
        .filters(tag("xbench:run-id", &run))
        .send()
        .await
        .unwrap();
    let mut from_campus: Vec<String> = Vec::new();
    for g in groups.security_groups() {
        for p in g.ip_permissions() {
            for range in p.ip_ranges() {
                match range.cidr_ip() {
                    Some("172.16.0.0/20") => from_campus.push(format!(
                        "{} {}",
                        p.ip_protocol().unwrap(),
                        p.from_port().unwrap_or(-1)
                    )),
                    Some("192.168.0.0/16") => panic!("no rule needed from the DC block: {p:?}"),
                    _ => {}
                }
            }
        }
    }
    from_campus.sort();
    assert_eq!(from_campus, ["icmp -1", "tcp 5201", "udp 5201"]);
    // Targets: your server by its private address; our server by its private address.
    assert_eq!(out.paths[0].target.to_string(), "192.168.10.5");
    let server = out.hosts.iter().find(|h| h.key == "server-a").unwrap();
    assert_eq!(Some(out.paths[1].target), server.private_ip);
    assert_eq!(out.paths[1].run_on.unwrap().to_string(), "172.16.3.4");
    // What your side needs, printed and kept in the outputs.
    assert_eq!(out.notes.len(), 2, "{:?}", out.notes);
    assert!(out.notes[0].contains(&format!("{vgw} is attached to a ({vpc})")));
    assert!(
        out.notes[1].contains(&format!(
            "--destination-cidr-block 10.100.0.0/16 --transit-gateway-attachment-id {attachment}"
        )),
        "{}",
        out.notes[1]
    );
    let local = std::fs::read_to_string(state.path().join(&run).join("state.json")).unwrap();
    assert!(local.contains(&format!("{REGION}/{vgw}/{vpc}")), "{local}");
    assert!(local.contains(&format!("{REGION}/{attachment}")), "{local}");

    // Again with the same run: reused, nothing doubled.
    d.up(
        &scenario,
        &plan,
        &UpOptions {
            run_id: Some(out.run_id.clone()),
            ..up_options(state.path())
        },
        pending(),
    )
    .await
    .unwrap_or_else(|e| panic!("second up failed: {e}"));
    assert_eq!(tgw_attachments(&c, &tgw).await.len(), 1);
    assert_eq!(vgw_facts(&c, &vgw).await.1, vec![vpc.clone()]);

    let report = d.down(&out.run_id, &[]).await.unwrap();
    assert!(
        report
            .deleted
            .contains(&format!("{REGION} vgw attachment {vgw}/{vpc}")),
        "{:?}",
        report.deleted
    );
    // Both gateways are still there and available, joined to nothing of the run.
    assert_eq!(vgw_facts(&c, &vgw).await, ("available".into(), vec![]));
    assert!(tgw_attachments(&c, &tgw).await.is_empty());
    let left = moto.leftovers().await;
    assert_eq!(
        left,
        [format!("{REGION} transit gateway {tgw}")],
        "only your transit gateway may be left"
    );
}

#[tokio::test]
async fn gateways_that_cannot_be_used_are_refused_before_anything_is_created() {
    let moto = moto_or_skip!();
    let (vgw, tgw) = user_gateways(&moto, REGION).await;
    let (vgw_elsewhere, tgw_elsewhere) = user_gateways(&moto, "us-east-1").await;
    let state = TempDir::new("state");
    let (d, _, _) = moto.deployer(state.path()).await;
    let refused = |text: String| {
        let d = &d;
        let state = &state;
        async move {
            let scenario = Scenario::from_toml(&text).unwrap();
            let plan = Plan::build(&scenario, &PriceTable::shipped()).unwrap();
            let e = d
                .up(&scenario, &plan, &up_options(state.path()), pending())
                .await
                .unwrap_err();
            assert!(matches!(e, Error::YourGateway { .. }), "{e}");
            assert!(e.is_bad_input(), "{e}: exit code 2");
            e.to_string()
        }
    };
    let e = refused(scenario("vgw-0123456789abcdef0", &tgw)).await;
    assert!(
        e.contains("via = \"vgw-0123456789abcdef0\" for vpc 'a' in ap-northeast-1: no such virtual private gateway in ap-northeast-1"),
        "{e}"
    );
    let e = refused(scenario(&vgw, "tgw-0123456789abcdef0")).await;
    assert!(e.contains("no such transit gateway"), "{e}");
    let e = refused(scenario(&vgw_elsewhere, &tgw)).await;
    assert!(
        e.contains("no such virtual private gateway in ap-northeast-1"),
        "{e}"
    );

    // A VGW already on a VPC of yours.
    let c = moto.ec2(REGION).await;
    let yours = c
        .create_vpc()
        .cidr_block("10.200.0.0/16")
        .send()
        .await
        .unwrap()
        .vpc()
        .unwrap()
        .vpc_id()
        .unwrap()
        .to_owned();
    c.attach_vpn_gateway()
        .vpn_gateway_id(&vgw)
        .vpc_id(&yours)
        .send()
        .await
        .unwrap();
    let e = refused(scenario(&vgw, &tgw)).await;
    assert!(
        e.contains(&format!("attached to {yours} (not made by xbench-deploy)"))
            && e.contains("detach it there first"),
        "{e}"
    );
    // Still attached where it was; nothing of a run exists.
    assert_eq!(vgw_facts(&c, &vgw).await.1, vec![yours.clone()]);
    let mut left = moto.leftovers().await;
    left.sort();
    let mut expected = vec![
        format!("{REGION} transit gateway {tgw}"),
        format!("{REGION} vpc {yours}"),
        format!("us-east-1 transit gateway {tgw_elsewhere}"),
    ];
    expected.sort();
    let left: Vec<String> = left
        .into_iter()
        .filter(|l| !l.contains("route table") && !l.contains("security group"))
        .collect();
    assert_eq!(left, expected);
}
