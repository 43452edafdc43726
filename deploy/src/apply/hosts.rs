//! The instances of a run: server hosts (with their allow lists), the two gateways of each VPN
//! path (made as a pair, since the boot scripts hold matching keys: each other's WireGuard
//! public key, or the IPsec tunnel's one pre-shared key),
//! client hosts; launching one with its boot script and the SSM-only instance profile, and
//! waiting until it runs.

use std::net::Ipv4Addr;

use aws_sdk_ec2::types::{
    AttributeBooleanValue, HttpTokensState, IamInstanceProfileSpecification,
    InstanceMetadataOptionsRequest, InstanceNetworkInterfaceSpecification, InstanceType, Placement,
    ResourceType, ShutdownBehavior,
};
use tracing::info;

use super::{Build, HostIds, missing};
use crate::aws::ec2::tag_spec;
use crate::aws::{RegionClients, aws_error};
use crate::error::{Error, not_found_is_none};
use crate::ipsec::IpsecPsk;
use crate::plan::{GroupKind, HostPlan, HostRole, IngressSource, PathClient, VpnEnd};
use crate::scenario::VpnFlavour;
use crate::state::{RunId, client_command};
use crate::userdata::{self, HostBoot, WgKeys};

/// The matching secrets of one tunnel's two gateways, made when the pair is launched.
enum TunnelKeys {
    WireGuard { server: WgKeys, client: WgKeys },
    Ipsec(IpsecPsk),
}

impl TunnelKeys {
    fn generate(flavour: VpnFlavour) -> Result<Self, Error> {
        Ok(match flavour {
            VpnFlavour::WireGuard => TunnelKeys::WireGuard {
                server: WgKeys::generate()?,
                client: WgKeys::generate()?,
            },
            VpnFlavour::Ipsec => TunnelKeys::Ipsec(IpsecPsk::generate()?),
        })
    }

    /// The boot script of gateway `h`, which dials `peer` (the client side does).
    fn script(
        &self,
        run: &RunId,
        due: &str,
        h: &HostPlan,
        vpn: &VpnEnd,
        peer: Option<Ipv4Addr>,
    ) -> String {
        match self {
            TunnelKeys::WireGuard { server, client } => {
                let (own, other) = if vpn.initiator {
                    (client, server)
                } else {
                    (server, client)
                };
                userdata::wireguard_gateway(run, &h.key, due, vpn, own, &other.public, peer)
            }
            TunnelKeys::Ipsec(psk) => userdata::ipsec_gateway(run, &h.key, due, vpn, psk, peer),
        }
    }
}

/// What a host is launched into.
struct LaunchInputs {
    subnet: String,
    group: String,
    ami: String,
    zone: String,
    placement_group: Option<String>,
    profile: String,
}

/// How long IAM may take before a new instance profile is usable by RunInstances.
const PROFILE_PROPAGATION: std::time::Duration = std::time::Duration::from_secs(120);

impl Build<'_> {
    pub(super) fn host_ids(&self, key: &str) -> Result<HostIds, Error> {
        self.ids()
            .hosts
            .get(key)
            .cloned()
            .ok_or_else(|| Error::Internal(format!("host {key} not launched yet")))
    }

    /// The boot inputs of xbench host `h`.
    fn boot<T>(&self, h: &HostPlan, f: impl FnOnce(&HostBoot<'_>) -> T) -> Result<T, Error> {
        let region = self.d.region_of(self.plan, &h.vpc)?;
        let fetch = self
            .ids()
            .fetch
            .clone()
            .ok_or_else(|| Error::Internal("the binary's source is not known yet".into()))?;
        Ok(f(&HostBoot {
            run: &self.tags.run,
            host: &h.key,
            region: &region,
            fetch: &fetch,
            deletion_due: &self.tags.deletion_due,
        }))
    }

    pub(super) async fn servers(&self) -> Result<(), Error> {
        for h in self
            .plan
            .hosts
            .iter()
            .filter(|h| h.role == HostRole::Server)
        {
            // Client hosts' public addresses are not known yet; `ready` adds them.
            let allow = self.plan.allow_for(&h.key).known_or_nobody();
            let script = self.boot(h, |b| userdata::server(self.s, b, &allow))?;
            self.host(h, script).await?;
        }
        Ok(())
    }

    pub(super) async fn clients(&self) -> Result<(), Error> {
        for h in self
            .plan
            .hosts
            .iter()
            .filter(|h| h.role == HostRole::Client)
        {
            let commands: Vec<String> = self
                .plan
                .paths
                .iter()
                .filter(|p| p.client == PathClient::Host(h.key.clone()) || p.fleet.contains(&h.key))
                .map(|p| {
                    Ok(client_command(
                        self.target(&p.target)?,
                        self.s.port,
                        &p.label,
                        p.server_host.is_some(),
                    ))
                })
                .collect::<Result<_, Error>>()?;
            let script = self.boot(h, |b| userdata::client(self.s, b, &commands))?;
            self.host(h, script).await?;
        }
        Ok(())
    }

    pub(super) async fn vpn_gateways(&self) -> Result<(), Error> {
        // A gateway facing your own VPN end has no partner here: `home.rs` makes it.
        let server_sides = self.plan.hosts.iter().filter(|h| {
            h.role == HostRole::Gateway
                && h.vpn
                    .as_ref()
                    .is_some_and(|v| !v.initiator && self.plan.home_vpn(&v.path).is_none())
        });
        for server_side in server_sides {
            let Some(vpn) = &server_side.vpn else {
                continue;
            };
            let client_side = self
                .plan
                .host(&vpn.peer_host)
                .ok_or_else(|| Error::Internal(format!("no host {}", vpn.peer_host)))?;
            let Some(client_vpn) = &client_side.vpn else {
                continue;
            };
            self.gateway_pair((server_side, vpn), (client_side, client_vpn))
                .await?;
            for h in [server_side, client_side] {
                self.no_source_dest_check(h).await?;
            }
            // The rules that let each gateway's public address in to the other, now rather
            // than after every host: the client side dials as soon as its VPN daemon is up.
            // (It would get through later anyway: its IKE retries without end.)
            let pair = [&server_side.key, &client_side.key];
            for rule in self.plan.ingress.iter().filter(
                |r| matches!(&r.source, IngressSource::HostPublicIp(h) if pair.contains(&h)),
            ) {
                self.ingress(rule).await?;
            }
        }
        Ok(())
    }

    /// Both gateways of one tunnel: adopted when both survive from an earlier attempt, else
    /// (re)made together with fresh keys.
    async fn gateway_pair(
        &self,
        (server_side, vpn): (&HostPlan, &VpnEnd),
        (client_side, client_vpn): (&HostPlan, &VpnEnd),
    ) -> Result<(), Error> {
        let rs = self.region(&server_side.vpc)?;
        let rc = self.region(&client_side.vpc)?;
        let find = |r: &RegionClients, h: &HostPlan| {
            self.existing(&r.region, |i| &i.instances, &format!("host/{}", h.key))
        };
        let (have_server, have_client) = (find(&rs, server_side), find(&rc, client_side));
        if have_server.is_some() && have_client.is_some() {
            // Both exist from an earlier attempt: their keys match already.
            self.adopt(server_side).await?;
            return self.adopt(client_side).await;
        }
        // Keys live only in the two boot scripts, so a lone survivor of an earlier attempt
        // cannot be paired with a new peer: replace it.
        for (found, r) in [(have_server, &rs), (have_client, &rc)] {
            if let Some(f) = found {
                info!("replacing lone vpn gateway {} in {}", f.id, r.region);
                crate::teardown::terminate_and_wait(r, std::slice::from_ref(&f.id), &self.d.timing)
                    .await?;
                if let Some(inv) = self.ids().inventory.get_mut(&r.region) {
                    inv.instances.retain(|i| i.id != f.id);
                }
            }
        }
        let keys = TunnelKeys::generate(vpn.flavour)?;
        let due = &self.tags.deletion_due;
        let script = keys.script(&self.tags.run, due, server_side, vpn, None);
        self.host(server_side, script).await?;
        let endpoint = self.host_ids(&server_side.key)?.public_ip.ok_or_else(|| {
            Error::Internal(format!(
                "vpn gateway {} got no public address",
                server_side.key
            ))
        })?;
        let script = keys.script(&self.tags.run, due, client_side, client_vpn, Some(endpoint));
        self.host(client_side, script).await
    }

    /// Gateways forward packets that are neither from nor to themselves.
    pub(super) async fn no_source_dest_check(&self, h: &HostPlan) -> Result<(), Error> {
        let ids = self.host_ids(&h.key)?;
        let r = self.d.aws.region(&ids.region);
        r.ec2
            .modify_instance_attribute()
            .instance_id(&ids.instance)
            .source_dest_check(AttributeBooleanValue::builder().value(false).build())
            .send()
            .await
            .map_err(|e| aws_error("ModifyInstanceAttribute", &r.region, e))?;
        Ok(())
    }

    /// Records an existing host's ids (it must be running).
    pub(super) async fn adopt(&self, h: &HostPlan) -> Result<(), Error> {
        let r = self.region(&h.vpc)?;
        let found = self
            .existing(&r.region, |i| &i.instances, &format!("host/{}", h.key))
            .ok_or_else(|| Error::Internal(format!("host {} vanished", h.key)))?;
        let ids = self.wait_running(&r, &found.id).await?;
        self.ids().hosts.insert(h.key.clone(), ids);
        Ok(())
    }

    /// Launches host `h` with boot script `script` (or adopts the one a resumed run has).
    pub(super) async fn host(&self, h: &HostPlan, script: String) -> Result<(), Error> {
        let r = self.region(&h.vpc)?;
        let key = format!("host/{}", h.key);
        if self.existing(&r.region, |i| &i.instances, &key).is_some() {
            return self.adopt(h).await;
        }
        let id = self.launch(&r, h, &key, &script).await?;
        self.record(&r.region, &format!("instance {} ({})", h.key, h.role), &id)?;
        let ids = self.wait_running(&r, &id).await?;
        self.ids().hosts.insert(h.key.clone(), ids);
        Ok(())
    }

    /// RunInstances for `h`, retried while IAM has not yet made the new instance profile
    /// visible to EC2 (seconds, on AWS).
    async fn launch(
        &self,
        r: &RegionClients,
        h: &HostPlan,
        key: &str,
        script: &str,
    ) -> Result<String, Error> {
        let region = r.region.as_str();
        let start = std::time::Instant::now();
        loop {
            let out = self.run_instances(r, h, key, script)?.send().await;
            match out {
                Ok(out) => {
                    return out
                        .instances()
                        .first()
                        .and_then(|i| i.instance_id())
                        .map(str::to_owned)
                        .ok_or_else(|| missing("RunInstances", region, "instance id"));
                }
                Err(e) => {
                    let e = aws_error("RunInstances", region, e);
                    let profile_not_ready = e.aws_code() == Some("InvalidParameterValue")
                        && e.to_string().contains("iamInstanceProfile");
                    if !profile_not_ready || start.elapsed() > PROFILE_PROPAGATION {
                        return Err(e);
                    }
                    tokio::time::sleep(self.d.timing.poll).await;
                }
            }
        }
    }

    /// What RunInstances needs for `h` that earlier steps made.
    fn launch_inputs(&self, region: &str, h: &HostPlan) -> Result<LaunchInputs, Error> {
        let v = self.vpc_ids(&h.vpc)?;
        let (subnet, _) = v
            .subnets
            .get(&h.subnet)
            .cloned()
            .ok_or_else(|| Error::Internal(format!("no subnet {}", h.subnet)))?;
        let group_kind = if h.role == HostRole::Gateway {
            GroupKind::Gateways
        } else {
            GroupKind::Hosts
        };
        let group = v
            .groups
            .get(&group_kind)
            .cloned()
            .ok_or_else(|| Error::Internal(format!("no security group for {}", h.key)))?;
        let amis = if h.is_ipsec_gateway() {
            &self.pre.gateway_amis
        } else {
            &self.pre.amis
        };
        let ami = amis
            .get(&(region.to_owned(), h.instance_type.clone()))
            .cloned()
            .ok_or_else(|| {
                Error::Internal(format!("no AMI for {} in {region}", h.instance_type))
            })?;
        let placement_group = self
            .plan
            .vpc(&h.vpc)
            .and_then(|p| p.placement_group.as_ref())
            .and_then(|k| self.ids().placement_groups.get(k).cloned());
        let profile = self
            .ids()
            .profile
            .clone()
            .ok_or_else(|| Error::Internal("no instance profile yet".into()))?;
        Ok(LaunchInputs {
            subnet,
            group,
            ami,
            zone: v.zone,
            placement_group,
            profile,
        })
    }

    fn run_instances(
        &self,
        r: &RegionClients,
        h: &HostPlan,
        key: &str,
        script: &str,
    ) -> Result<aws_sdk_ec2::operation::run_instances::builders::RunInstancesFluentBuilder, Error>
    {
        let i = self.launch_inputs(&r.region, h)?;
        Ok(r.ec2
            .run_instances()
            .image_id(i.ami)
            .instance_type(InstanceType::from(h.instance_type.as_str()))
            .min_count(1)
            .max_count(1)
            .network_interfaces(
                InstanceNetworkInterfaceSpecification::builder()
                    .device_index(0)
                    .subnet_id(i.subnet)
                    .groups(i.group)
                    .associate_public_ip_address(true)
                    .delete_on_termination(true)
                    .build(),
            )
            .placement(
                Placement::builder()
                    .availability_zone(i.zone)
                    .set_group_name(i.placement_group)
                    .build(),
            )
            // The SSM agent's permissions, nothing else.
            .iam_instance_profile(
                IamInstanceProfileSpecification::builder()
                    .name(i.profile)
                    .build(),
            )
            // Powering off terminates: the boot script's timer powers the host off at the
            // run's deletion-due time, so a run nobody tears down stops billing then.
            .instance_initiated_shutdown_behavior(ShutdownBehavior::Terminate)
            // IMDSv2 only: the profile's credentials are reachable through it.
            .metadata_options(
                InstanceMetadataOptionsRequest::builder()
                    .http_tokens(HttpTokensState::Required)
                    .build(),
            )
            .user_data(userdata::encode(script))
            .tag_specifications(tag_spec(ResourceType::Instance, self.tags, key))
            .tag_specifications(tag_spec(ResourceType::Volume, self.tags, key))
            .tag_specifications(tag_spec(ResourceType::NetworkInterface, self.tags, key))
            .set_key_name(self.s.key_name.clone()))
    }

    async fn wait_running(&self, r: &RegionClients, id: &str) -> Result<HostIds, Error> {
        self.d
            .timing
            .wait(&format!("instance {id} to run"), &r.region, || async {
                let out = r.ec2.describe_instances().instance_ids(id).send().await;
                let out = match out {
                    Ok(o) => o,
                    // A just-launched instance can be briefly unknown to Describe calls.
                    Err(e) => {
                        return not_found_is_none(aws_error("DescribeInstances", &r.region, e));
                    }
                };
                let Some(i) = out.reservations().iter().flat_map(|r| r.instances()).next() else {
                    return Ok(None);
                };
                running_ids(r, id, i)
            })
            .await
    }
}

/// The ids of instance `i` once it runs with its addresses; `None` while it starts; an error
/// when it stopped or terminated instead.
fn running_ids(
    r: &RegionClients,
    id: &str,
    i: &aws_sdk_ec2::types::Instance,
) -> Result<Option<HostIds>, Error> {
    match i.state().and_then(|s| s.name()).map(|n| n.as_str()) {
        Some("running") => {}
        Some(s @ ("terminated" | "shutting-down" | "stopped" | "stopping")) => {
            return Err(Error::Aws {
                operation: "RunInstances",
                region: r.region.clone(),
                code: i.state_reason().and_then(|s| s.code()).map(str::to_owned),
                message: format!(
                    "instance {id} is {s}: {}",
                    i.state_reason()
                        .and_then(|s| s.message())
                        .unwrap_or("no reason given")
                ),
            });
        }
        _ => return Ok(None),
    }
    let eni = i
        .network_interfaces()
        .iter()
        .find(|n| n.attachment().and_then(|a| a.device_index()) == Some(0))
        .or_else(|| i.network_interfaces().first())
        .and_then(|n| n.network_interface_id());
    let private_ip: Option<Ipv4Addr> = i.private_ip_address().and_then(|a| a.parse().ok());
    let public_ip: Option<Ipv4Addr> = i.public_ip_address().and_then(|a| a.parse().ok());
    Ok(match (eni, private_ip) {
        (Some(eni), Some(private_ip)) if public_ip.is_some() => Some(HostIds {
            region: r.region.clone(),
            instance: id.to_owned(),
            eni: eni.to_owned(),
            private_ip,
            public_ip,
        }),
        _ => None,
    })
}
