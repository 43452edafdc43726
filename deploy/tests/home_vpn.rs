//! A `vpn` path to your own VPN end against the moto emulator (Global Accelerator against the
//! in-memory fake: moto has none): `up` makes one IPsec gateway with source/destination check
//! off, its group open to IKE and ESP from your public address only, the route to your block
//! through it, an accelerator with UDP 500 and 4500 listeners whose endpoint groups hold the
//! gateway, and writes your end's swanctl file (mode 0600, dialling the accelerator, the key
//! in it and nowhere in the outputs). A second `up` of the run keeps the gateway and its key;
//! one whose kept key is lost replaces the gateway. `down` leaves nothing, the key file
//! included. Whether the file works is `ipsec_netns.rs`'s job: it runs it.

// Helpers outside #[test] fns unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::future::pending;
use std::os::unix::fs::PermissionsExt as _;

use aws_sdk_ec2::types::Filter;
use xbench_deploy::apply::UpOptions;
use xbench_deploy::aws::accelerator::AcceleratorApi as _;
use xbench_deploy::cost::PriceTable;
use xbench_deploy::plan::Protocol;
use xbench_deploy::state::Outputs;
use xbench_deploy::{Plan, Scenario};

use common::{TempDir, up_options};

const REGION: &str = "eu-west-1";

const SCENARIO: &str = r#"
name = "home-vpn"
instance_type = "m5.large"
# moto has none of Canonical's public parameters (the default ubuntu-24.04); no instance runs.
gateway_ami = "al2023"
[[vpc]]
name = "aws"
region = "eu-west-1"
cidr = "10.70.0.0/16"
[[path]]
kind = "vpn"
vpn = "ipsec"
label = "home"
client_address = "192.168.1.20"
server = "aws"
on_prem_cidr = "192.168.1.0/24"
on_prem_public_ip = "198.51.100.7"
accelerator = true
"#;

fn tag(name: &str, value: &str) -> Filter {
    Filter::builder()
        .name(format!("tag:{name}"))
        .values(value)
        .build()
}

fn instance_of(out: &Outputs, key: &str) -> String {
    out.hosts
        .iter()
        .find(|h| h.key == key)
        .unwrap_or_else(|| panic!("no host {key}"))
        .instance_id
        .clone()
}

#[tokio::test]
async fn your_vpn_end_gets_a_gateway_an_ike_accelerator_and_its_config() {
    let moto = moto_or_skip!();
    let c = moto.ec2(REGION).await;
    let state = TempDir::new("state");
    let (d, accel, _) = moto.deployer(state.path()).await;
    let scenario = Scenario::from_toml(SCENARIO).unwrap();
    let plan = Plan::build(&scenario, &PriceTable::shipped()).unwrap();
    let out = d
        .up(&scenario, &plan, &up_options(state.path()), pending())
        .await
        .unwrap_or_else(|e| panic!("up failed: {e}"));
    let run = out.run_id.to_string();
    let gw = instance_of(&out, "gw-home");

    // Gateway: forwards for others, and only your public address may speak IKE or ESP to it.
    let attr = c
        .describe_instance_attribute()
        .instance_id(&gw)
        .attribute(aws_sdk_ec2::types::InstanceAttributeName::SourceDestCheck)
        .send()
        .await
        .unwrap();
    assert_eq!(
        attr.source_dest_check().and_then(|v| v.value()),
        Some(false)
    );
    let groups = c
        .describe_security_groups()
        .filters(tag("xbench:run-id", &run))
        .send()
        .await
        .unwrap();
    let gw_group = groups
        .security_groups()
        .iter()
        .find(|g| g.group_name().is_some_and(|n| n.ends_with("vpn-gateways")))
        .expect("a vpn-gateways group");
    let mut from_you: Vec<(String, Option<i32>)> = gw_group
        .ip_permissions()
        .iter()
        .filter(|p| {
            p.ip_ranges()
                .iter()
                .any(|r| r.cidr_ip() == Some("198.51.100.7/32"))
        })
        .map(|p| (p.ip_protocol().unwrap_or("").to_owned(), p.from_port()))
        .collect();
    from_you.sort();
    assert_eq!(
        from_you,
        [
            ("50".to_owned(), Some(-1)),
            ("udp".to_owned(), Some(500)),
            ("udp".to_owned(), Some(4500)),
        ]
    );
    // No IKE from anywhere else.
    assert!(
        !gw_group
            .ip_permissions()
            .iter()
            .any(|p| p.from_port() == Some(500)
                && p.ip_ranges()
                    .iter()
                    .any(|r| r.cidr_ip() != Some("198.51.100.7/32"))),
        "{gw_group:#?}"
    );

    // The server's subnet routes your block to the gateway's interface.
    let eni = c
        .describe_instances()
        .instance_ids(&gw)
        .send()
        .await
        .unwrap()
        .reservations()[0]
        .instances()[0]
        .network_interfaces()[0]
        .network_interface_id()
        .unwrap()
        .to_owned();
    let tables = c
        .describe_route_tables()
        .filters(tag("xbench:run-id", &run))
        .filters(tag("xbench:key", "rtb/aws/base"))
        .send()
        .await
        .unwrap();
    let to_you: Vec<_> = tables.route_tables()[0]
        .routes()
        .iter()
        .filter(|r| r.destination_cidr_block() == Some("192.168.1.0/24"))
        .map(|r| r.network_interface_id().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(to_you, [eni]);

    // The accelerator: UDP 500 and 4500, each to the gateway, nothing on the xbench port.
    let accelerators = accel.list_accelerators().await.unwrap();
    assert_eq!(accelerators.len(), 1);
    let mut listeners = Vec::new();
    for l in accel.list_listeners(&accelerators[0].arn).await.unwrap() {
        let groups = accel.list_endpoint_groups(&l.arn).await.unwrap();
        let endpoints: Vec<(String, Vec<String>)> = groups
            .into_iter()
            .map(|g| (g.region, g.endpoints))
            .collect();
        assert_eq!(endpoints, [(REGION.to_owned(), vec![gw.clone()])], "{l:?}");
        listeners.push((l.protocol, l.port));
    }
    listeners.sort();
    assert_eq!(listeners, [(Protocol::Udp, 500), (Protocol::Udp, 4500)]);

    // Your end's file: it dials the accelerator; the key is in it, mode 0600, and in no output.
    let home = &out.home_ends[0];
    let gw_public = out
        .hosts
        .iter()
        .find(|h| h.key == "gw-home")
        .unwrap()
        .public_ip;
    assert_eq!(Some(home.gateway_ip), gw_public);
    assert_eq!(Some(home.dial), home.accelerator_ip);
    assert_eq!(home.accelerator_ip, accelerators[0].ips.first().copied());
    let conf = std::fs::read_to_string(&home.config).unwrap();
    assert!(
        conf.contains(&format!("remote_addrs = {}", home.dial))
            && conf.contains("encap = yes")
            && conf.contains("local_ts = 192.168.1.0/24")
            && conf.contains(&format!("remote_ts = {}", home.aws_subnet)),
        "{conf}"
    );
    let mode = std::fs::metadata(&home.config)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let key_file = d.state_dir().home_key_file(&out.run_id, "home");
    let key = std::fs::read_to_string(&key_file).unwrap();
    assert!(conf.contains(&format!("secret = {key}")), "{conf}");
    let outputs_json = std::fs::read_to_string(d.state_dir().outputs_file(&out.run_id)).unwrap();
    assert!(
        !outputs_json.contains(&key[2..]),
        "the key is in outputs.json"
    );
    assert_eq!(serde_json::from_str::<Outputs>(&outputs_json).unwrap(), out);

    // Again: the same gateway, the same key, the same file.
    let again_opts = || UpOptions {
        run_id: Some(out.run_id.clone()),
        ..up_options(state.path())
    };
    let again = d
        .up(&scenario, &plan, &again_opts(), pending())
        .await
        .unwrap();
    assert_eq!(instance_of(&again, "gw-home"), gw);
    assert_eq!(std::fs::read_to_string(&home.config).unwrap(), conf);

    // A kept key lost: the gateway holding it is replaced, and your file gets the new key.
    std::fs::remove_file(&key_file).unwrap();
    let third = d
        .up(&scenario, &plan, &again_opts(), pending())
        .await
        .unwrap();
    assert_ne!(instance_of(&third, "gw-home"), gw);
    let new_key = std::fs::read_to_string(&key_file).unwrap();
    assert_ne!(new_key, key);
    let new_conf = std::fs::read_to_string(&third.home_ends[0].config).unwrap();
    assert!(new_conf.contains(&format!("secret = {new_key}")));

    d.down(&out.run_id, &[]).await.unwrap();
    let left = moto.leftovers().await;
    assert!(left.is_empty(), "left after down: {left:#?}");
    assert!(accel.arns().is_empty(), "accelerators left");
    assert!(
        !key_file.exists() && !home.config.exists(),
        "your end's key left"
    );
}

/// The same path without an accelerator: your end dials the gateway's public address.
#[tokio::test]
async fn without_an_accelerator_your_end_dials_the_gateway() {
    let moto = moto_or_skip!();
    let state = TempDir::new("state");
    let (d, accel, _) = moto.deployer(state.path()).await;
    let scenario = Scenario::from_toml(&SCENARIO.replace("accelerator = true\n", "")).unwrap();
    let plan = Plan::build(&scenario, &PriceTable::shipped()).unwrap();
    let out = d
        .up(&scenario, &plan, &up_options(state.path()), pending())
        .await
        .unwrap_or_else(|e| panic!("up failed: {e}"));
    let home = &out.home_ends[0];
    assert_eq!(home.accelerator_ip, None);
    assert_eq!(home.dial, home.gateway_ip);
    assert!(accel.calls().is_empty(), "{:?}", accel.calls());
    // Your host is the client: the server lets its private address in, and its command
    // dials the server's private address through the tunnel.
    let server_private = out
        .hosts
        .iter()
        .find(|h| h.key == "server-aws")
        .unwrap()
        .private_ip
        .unwrap();
    assert_eq!(out.paths[0].target, server_private);
    assert_eq!(out.paths[0].client_host, None);
    d.down(&out.run_id, &[]).await.unwrap();
    let left = moto.leftovers().await;
    assert!(left.is_empty(), "left after down: {left:#?}");
}
