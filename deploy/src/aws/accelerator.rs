//! AWS Global Accelerator: an accelerator with its plan's listeners (TCP and UDP on the xbench
//! port in front of a server; UDP 500 and 4500 in front of the IPsec gateway of a VPN path to
//! your own end), each with an endpoint group holding the instance, created idempotently and deleted the way AWS
//! requires (disable, wait until deployed, remove endpoint groups and listeners, delete).
//!
//! The moto emulator has no Global Accelerator, so the API calls sit behind
//! [`AcceleratorApi`]: [`GlobalAccelerator`] calls AWS (in us-west-2, where the API lives),
//! [`FakeAccelerators`] is an in-memory stand-in for tests that enforces the same ordering rules.
//! The orchestration ([`ensure`], [`delete`], [`find`]) is shared, so the tests exercise it.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use aws_config::{Region, SdkConfig};
use aws_sdk_globalaccelerator::types::{
    ClientAffinity, EndpointConfiguration, PortRange, Protocol as GaProtocol, Tag,
};

use crate::aws::ec2::Selector;
use crate::aws::{BoxFuture, Timing, aws_error};
use crate::error::{Error, ignore_missing, not_found_is_none};
use crate::plan::{AcceleratorPlan, Protocol};
use crate::regions::ACCELERATOR_API_REGION;
use crate::state::{RunTags, TAG_KEY};

/// An accelerator as the API reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceleratorInfo {
    /// ARN.
    pub arn: String,
    /// Name.
    pub name: String,
    /// Whether it accepts traffic.
    pub enabled: bool,
    /// Whether the last change has finished (status `DEPLOYED`).
    pub deployed: bool,
    /// Static IPv4 addresses.
    pub ips: Vec<Ipv4Addr>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

/// A listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerInfo {
    /// ARN.
    pub arn: String,
    /// Protocol.
    pub protocol: Protocol,
    /// Port.
    pub port: u16,
}

/// An endpoint group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointGroupInfo {
    /// ARN.
    pub arn: String,
    /// Region of its endpoints.
    pub region: String,
    /// Endpoint ids (instance ids).
    pub endpoints: Vec<String>,
}

/// The Global Accelerator calls this tool makes.
pub trait AcceleratorApi: Send + Sync + std::fmt::Debug {
    /// Every accelerator in the account, with its tags.
    fn list_accelerators(&self) -> BoxFuture<'_, Result<Vec<AcceleratorInfo>, Error>>;
    /// One accelerator, or `None` if it does not exist.
    fn describe_accelerator<'a>(
        &'a self,
        arn: &'a str,
    ) -> BoxFuture<'a, Result<Option<AcceleratorInfo>, Error>>;
    /// Creates an enabled accelerator. The same `token` returns the same accelerator.
    fn create_accelerator<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
        tags: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<AcceleratorInfo, Error>>;
    /// Sets `Enabled=false`.
    fn disable_accelerator<'a>(&'a self, arn: &'a str) -> BoxFuture<'a, Result<(), Error>>;
    /// Deletes a disabled accelerator with no listeners.
    fn delete_accelerator<'a>(&'a self, arn: &'a str) -> BoxFuture<'a, Result<(), Error>>;
    /// An accelerator's listeners.
    fn list_listeners<'a>(
        &'a self,
        arn: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ListenerInfo>, Error>>;
    /// Adds a listener for one port.
    fn create_listener<'a>(
        &'a self,
        arn: &'a str,
        protocol: Protocol,
        port: u16,
        token: &'a str,
    ) -> BoxFuture<'a, Result<ListenerInfo, Error>>;
    /// Deletes a listener with no endpoint groups.
    fn delete_listener<'a>(&'a self, arn: &'a str) -> BoxFuture<'a, Result<(), Error>>;
    /// A listener's endpoint groups.
    fn list_endpoint_groups<'a>(
        &'a self,
        listener: &'a str,
    ) -> BoxFuture<'a, Result<Vec<EndpointGroupInfo>, Error>>;
    /// Adds an endpoint group in `region` holding `instance_id`, with client IP preservation.
    fn create_endpoint_group<'a>(
        &'a self,
        listener: &'a str,
        region: &'a str,
        instance_id: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<EndpointGroupInfo, Error>>;
    /// Deletes an endpoint group.
    fn delete_endpoint_group<'a>(&'a self, arn: &'a str) -> BoxFuture<'a, Result<(), Error>>;
}

/// The plan key tag value of an accelerator.
fn key_of(plan: &AcceleratorPlan) -> String {
    format!("accelerator/{}", plan.key)
}

/// Accelerators `sel` selects.
pub async fn find(api: &dyn AcceleratorApi, sel: &Selector) -> Result<Vec<AcceleratorInfo>, Error> {
    Ok(api
        .list_accelerators()
        .await?
        .into_iter()
        .filter(|a| sel.selects(&a.tags))
        .collect())
}

/// Makes (or finds) the accelerator for `plan` in front of `instance_id`, waits until it is
/// deployed, and returns it.
pub async fn ensure(
    api: &dyn AcceleratorApi,
    plan: &AcceleratorPlan,
    tags: &RunTags,
    instance_id: &str,
    timing: &Timing,
) -> Result<AcceleratorInfo, Error> {
    let key = key_of(plan);
    let existing = find(api, &Selector::Run(tags.run.clone()))
        .await?
        .into_iter()
        .find(|a| a.tags.get(TAG_KEY) == Some(&key));
    // The token makes a retried create return the first accelerator instead of a second one.
    let token = format!("{}-{}", tags.run, plan.key);
    let accelerator = match existing {
        Some(a) => a,
        None => {
            let name = format!("xbench-{}-{}", tags.run, plan.key);
            let name: String = name.chars().take(64).collect();
            api.create_accelerator(&name, &token, &tags.for_resource(&key))
                .await?
        }
    };
    let listeners = api.list_listeners(&accelerator.arn).await?;
    for &(protocol, port) in &plan.listeners {
        let listener = match listeners
            .iter()
            .find(|l| l.protocol == protocol && l.port == port)
        {
            Some(l) => l.clone(),
            None => {
                let t = format!("{token}-{}-{port}", protocol.as_str());
                api.create_listener(&accelerator.arn, protocol, port, &t)
                    .await?
            }
        };
        let groups = api.list_endpoint_groups(&listener.arn).await?;
        if !groups.iter().any(|g| g.region == plan.endpoint_region) {
            let t = format!("{token}-{}-{port}-eg", protocol.as_str());
            api.create_endpoint_group(&listener.arn, &plan.endpoint_region, instance_id, &t)
                .await?;
        }
    }
    timing
        .wait(
            "the accelerator to deploy",
            ACCELERATOR_API_REGION,
            || async {
                Ok(api
                    .describe_accelerator(&accelerator.arn)
                    .await?
                    .filter(|a| a.deployed))
            },
        )
        .await
}

/// Deletes an accelerator and what hangs off it. Deleting one that is gone succeeds.
pub async fn delete(api: &dyn AcceleratorApi, arn: &str, timing: &Timing) -> Result<(), Error> {
    let Some(a) = api.describe_accelerator(arn).await? else {
        return Ok(());
    };
    if a.enabled {
        ignore_missing(api.disable_accelerator(arn).await)?;
    }
    // AWS refuses to delete until the disable has been deployed.
    let settled = timing
        .wait(
            "the accelerator to be disabled",
            ACCELERATOR_API_REGION,
            || async {
                Ok(match api.describe_accelerator(arn).await? {
                    None => Some(false),
                    Some(a) if !a.enabled && a.deployed => Some(true),
                    Some(_) => None,
                })
            },
        )
        .await?;
    if !settled {
        return Ok(());
    }
    for l in api.list_listeners(arn).await? {
        for g in api.list_endpoint_groups(&l.arn).await? {
            ignore_missing(api.delete_endpoint_group(&g.arn).await)?;
        }
        ignore_missing(api.delete_listener(&l.arn).await)?;
    }
    ignore_missing(api.delete_accelerator(arn).await)
}

/// [`AcceleratorApi`] against AWS.
#[derive(Debug, Clone)]
pub struct GlobalAccelerator {
    client: aws_sdk_globalaccelerator::Client,
}

impl GlobalAccelerator {
    /// A client for the API region, from the shared SDK configuration.
    pub fn new(config: &SdkConfig) -> Self {
        let conf = aws_sdk_globalaccelerator::config::Builder::from(config)
            .region(Region::new(ACCELERATOR_API_REGION))
            .build();
        GlobalAccelerator {
            client: aws_sdk_globalaccelerator::Client::from_conf(conf),
        }
    }
}

fn info(
    a: &aws_sdk_globalaccelerator::types::Accelerator,
    tags: BTreeMap<String, String>,
) -> AcceleratorInfo {
    AcceleratorInfo {
        arn: a.accelerator_arn().unwrap_or_default().to_owned(),
        name: a.name().unwrap_or_default().to_owned(),
        enabled: a.enabled().unwrap_or(false),
        deployed: a.status().map(|s| s.as_str()) == Some("DEPLOYED"),
        ips: a
            .ip_sets()
            .iter()
            .flat_map(|s| s.ip_addresses())
            .filter_map(|ip| ip.parse().ok())
            .collect(),
        tags,
    }
}

fn ga_err<E>(
    op: &'static str,
) -> impl FnOnce(aws_sdk_ec2::error::SdkError<E, aws_sdk_ec2::config::http::HttpResponse>) -> Error
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    move |e| aws_error(op, ACCELERATOR_API_REGION, e)
}

fn ga_protocol(p: Protocol) -> GaProtocol {
    match p {
        Protocol::Udp => GaProtocol::Udp,
        _ => GaProtocol::Tcp,
    }
}

impl AcceleratorApi for GlobalAccelerator {
    fn list_accelerators(&self) -> BoxFuture<'_, Result<Vec<AcceleratorInfo>, Error>> {
        Box::pin(async move {
            let all = self
                .client
                .list_accelerators()
                .into_paginator()
                .items()
                .send()
                .try_collect()
                .await
                .map_err(ga_err("ListAccelerators"))?;
            let mut out = Vec::new();
            for a in all {
                let arn = a.accelerator_arn().unwrap_or_default();
                let tags = self
                    .client
                    .list_tags_for_resource()
                    .resource_arn(arn)
                    .send()
                    .await
                    .map_err(ga_err("ListTagsForResource"))?;
                let tags = tags
                    .tags()
                    .iter()
                    .map(|t| (t.key().to_owned(), t.value().to_owned()))
                    .collect();
                out.push(info(&a, tags));
            }
            Ok(out)
        })
    }

    fn describe_accelerator<'a>(
        &'a self,
        arn: &'a str,
    ) -> BoxFuture<'a, Result<Option<AcceleratorInfo>, Error>> {
        Box::pin(async move {
            match self
                .client
                .describe_accelerator()
                .accelerator_arn(arn)
                .send()
                .await
            {
                Ok(out) => Ok(out.accelerator().map(|a| info(a, BTreeMap::new()))),
                Err(e) => {
                    not_found_is_none(aws_error("DescribeAccelerator", ACCELERATOR_API_REGION, e))
                }
            }
        })
    }

    fn create_accelerator<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
        tags: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<AcceleratorInfo, Error>> {
        Box::pin(async move {
            let mut req = self
                .client
                .create_accelerator()
                .name(name)
                .idempotency_token(token)
                .enabled(true);
            for (k, v) in tags {
                let tag = Tag::builder()
                    .key(k)
                    .value(v)
                    .build()
                    .map_err(|e| Error::Internal(e.to_string()))?;
                req = req.tags(tag);
            }
            let out = req.send().await.map_err(ga_err("CreateAccelerator"))?;
            let a = out.accelerator().ok_or(Error::Incomplete {
                operation: "CreateAccelerator",
                region: ACCELERATOR_API_REGION.into(),
                missing: "accelerator",
            })?;
            Ok(info(a, tags.iter().cloned().collect()))
        })
    }

    fn disable_accelerator<'a>(&'a self, arn: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            self.client
                .update_accelerator()
                .accelerator_arn(arn)
                .enabled(false)
                .send()
                .await
                .map_err(ga_err("UpdateAccelerator"))?;
            Ok(())
        })
    }

    fn delete_accelerator<'a>(&'a self, arn: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            self.client
                .delete_accelerator()
                .accelerator_arn(arn)
                .send()
                .await
                .map_err(ga_err("DeleteAccelerator"))?;
            Ok(())
        })
    }

    fn list_listeners<'a>(
        &'a self,
        arn: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ListenerInfo>, Error>> {
        Box::pin(async move {
            let all = self
                .client
                .list_listeners()
                .accelerator_arn(arn)
                .into_paginator()
                .items()
                .send()
                .try_collect()
                .await
                .map_err(ga_err("ListListeners"))?;
            Ok(all
                .iter()
                .map(|l| ListenerInfo {
                    arn: l.listener_arn().unwrap_or_default().to_owned(),
                    protocol: match l.protocol() {
                        Some(GaProtocol::Udp) => Protocol::Udp,
                        _ => Protocol::Tcp,
                    },
                    port: l
                        .port_ranges()
                        .first()
                        .and_then(|r| r.from_port())
                        .and_then(|p| u16::try_from(p).ok())
                        .unwrap_or(0),
                })
                .collect())
        })
    }

    fn create_listener<'a>(
        &'a self,
        arn: &'a str,
        protocol: Protocol,
        port: u16,
        token: &'a str,
    ) -> BoxFuture<'a, Result<ListenerInfo, Error>> {
        Box::pin(async move {
            let out = self
                .client
                .create_listener()
                .accelerator_arn(arn)
                .protocol(ga_protocol(protocol))
                .port_ranges(
                    PortRange::builder()
                        .from_port(i32::from(port))
                        .to_port(i32::from(port))
                        .build(),
                )
                // xbench opens several connections per test; keep them on one endpoint.
                .client_affinity(ClientAffinity::SourceIp)
                .idempotency_token(token)
                .send()
                .await
                .map_err(ga_err("CreateListener"))?;
            Ok(ListenerInfo {
                arn: out
                    .listener()
                    .and_then(|l| l.listener_arn())
                    .unwrap_or_default()
                    .to_owned(),
                protocol,
                port,
            })
        })
    }

    fn delete_listener<'a>(&'a self, arn: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            self.client
                .delete_listener()
                .listener_arn(arn)
                .send()
                .await
                .map_err(ga_err("DeleteListener"))?;
            Ok(())
        })
    }

    fn list_endpoint_groups<'a>(
        &'a self,
        listener: &'a str,
    ) -> BoxFuture<'a, Result<Vec<EndpointGroupInfo>, Error>> {
        Box::pin(async move {
            let all = self
                .client
                .list_endpoint_groups()
                .listener_arn(listener)
                .into_paginator()
                .items()
                .send()
                .try_collect()
                .await
                .map_err(ga_err("ListEndpointGroups"))?;
            Ok(all
                .iter()
                .map(|g| EndpointGroupInfo {
                    arn: g.endpoint_group_arn().unwrap_or_default().to_owned(),
                    region: g.endpoint_group_region().unwrap_or_default().to_owned(),
                    endpoints: g
                        .endpoint_descriptions()
                        .iter()
                        .filter_map(|d| d.endpoint_id().map(str::to_owned))
                        .collect(),
                })
                .collect())
        })
    }

    fn create_endpoint_group<'a>(
        &'a self,
        listener: &'a str,
        region: &'a str,
        instance_id: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<EndpointGroupInfo, Error>> {
        Box::pin(async move {
            let out = self
                .client
                .create_endpoint_group()
                .listener_arn(listener)
                .endpoint_group_region(region)
                .endpoint_configurations(
                    EndpointConfiguration::builder()
                        .endpoint_id(instance_id)
                        .weight(128)
                        .client_ip_preservation_enabled(true)
                        .build(),
                )
                .idempotency_token(token)
                .send()
                .await
                .map_err(ga_err("CreateEndpointGroup"))?;
            Ok(EndpointGroupInfo {
                arn: out
                    .endpoint_group()
                    .and_then(|g| g.endpoint_group_arn())
                    .unwrap_or_default()
                    .to_owned(),
                region: region.to_owned(),
                endpoints: vec![instance_id.to_owned()],
            })
        })
    }

    fn delete_endpoint_group<'a>(&'a self, arn: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            self.client
                .delete_endpoint_group()
                .endpoint_group_arn(arn)
                .send()
                .await
                .map_err(ga_err("DeleteEndpointGroup"))?;
            Ok(())
        })
    }
}

/// An [`AcceleratorApi`] for places without Global Accelerator (an emulator, or an account
/// without its permissions): lists nothing and refuses to create.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoAccelerators;

impl NoAccelerators {
    fn refuse() -> Error {
        Error::Aws {
            operation: "CreateAccelerator",
            region: ACCELERATOR_API_REGION.into(),
            code: None,
            message: "Global Accelerator is switched off (--skip-accelerators); drop the accelerator paths or the flag".into(),
        }
    }
}

impl AcceleratorApi for NoAccelerators {
    fn list_accelerators(&self) -> BoxFuture<'_, Result<Vec<AcceleratorInfo>, Error>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn describe_accelerator<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<AcceleratorInfo>, Error>> {
        Box::pin(async { Ok(None) })
    }
    fn create_accelerator<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<AcceleratorInfo, Error>> {
        Box::pin(async { Err(Self::refuse()) })
    }
    fn disable_accelerator<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }
    fn delete_accelerator<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }
    fn list_listeners<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Vec<ListenerInfo>, Error>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn create_listener<'a>(
        &'a self,
        _: &'a str,
        _: Protocol,
        _: u16,
        _: &'a str,
    ) -> BoxFuture<'a, Result<ListenerInfo, Error>> {
        Box::pin(async { Err(Self::refuse()) })
    }
    fn delete_listener<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }
    fn list_endpoint_groups<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Vec<EndpointGroupInfo>, Error>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn create_endpoint_group<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<EndpointGroupInfo, Error>> {
        Box::pin(async { Err(Self::refuse()) })
    }
    fn delete_endpoint_group<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }
}

/// An in-memory [`AcceleratorApi`] for tests, enforcing AWS's rules: an accelerator must be
/// disabled, its change deployed, and its listeners gone before it can be deleted; a listener
/// must have no endpoint groups. Each change stays `IN_PROGRESS` for `polls_per_change`
/// describes, so callers must wait as they would on AWS.
#[derive(Debug, Default)]
pub struct FakeAccelerators {
    inner: Mutex<FakeState>,
    polls_per_change: u32,
}

#[derive(Debug, Default)]
struct FakeState {
    next: u32,
    accelerators: BTreeMap<String, FakeAccelerator>,
    tokens: BTreeMap<String, String>,
    calls: Vec<String>,
}

#[derive(Debug, Clone)]
struct FakeAccelerator {
    info: AcceleratorInfo,
    pending: u32,
    listeners: BTreeMap<String, (ListenerInfo, Vec<EndpointGroupInfo>)>,
}

impl FakeAccelerators {
    /// A fake where each change needs `polls_per_change` describes to deploy.
    pub fn new(polls_per_change: u32) -> Self {
        FakeAccelerators {
            inner: Mutex::new(FakeState::default()),
            polls_per_change,
        }
    }

    /// ARNs of the accelerators that exist.
    pub fn arns(&self) -> Vec<String> {
        self.lock().accelerators.keys().cloned().collect()
    }

    /// Listener count over all accelerators.
    pub fn listener_count(&self) -> usize {
        self.lock()
            .accelerators
            .values()
            .map(|a| a.listeners.len())
            .sum()
    }

    /// The names of the calls made, in order.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The fake's state, with the call `op` recorded first: every call is, in order, so a test
    /// can check what was asked.
    fn call(&self, op: &str) -> std::sync::MutexGuard<'_, FakeState> {
        let mut s = self.lock();
        s.calls.push(op.into());
        s
    }

    /// `op`'s refusal for an accelerator the fake does not have.
    fn no_accelerator(op: &'static str) -> Error {
        Self::refuse(op, "AcceleratorNotFoundException", "no such accelerator")
    }

    fn refuse(op: &'static str, code: &str, message: &str) -> Error {
        Error::Aws {
            operation: op,
            region: ACCELERATOR_API_REGION.into(),
            code: Some(code.into()),
            message: message.into(),
        }
    }
}

impl AcceleratorApi for FakeAccelerators {
    fn list_accelerators(&self) -> BoxFuture<'_, Result<Vec<AcceleratorInfo>, Error>> {
        Box::pin(async move {
            let s = self.call("ListAccelerators");
            Ok(s.accelerators.values().map(|a| a.info.clone()).collect())
        })
    }

    fn describe_accelerator<'a>(
        &'a self,
        arn: &'a str,
    ) -> BoxFuture<'a, Result<Option<AcceleratorInfo>, Error>> {
        Box::pin(async move {
            let mut s = self.call("DescribeAccelerator");
            Ok(s.accelerators.get_mut(arn).map(|a| {
                if a.pending > 0 {
                    a.pending -= 1;
                }
                a.info.deployed = a.pending == 0;
                a.info.clone()
            }))
        })
    }

    fn create_accelerator<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
        tags: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<AcceleratorInfo, Error>> {
        Box::pin(async move {
            let mut s = self.call("CreateAccelerator");
            if let Some(arn) = s.tokens.get(token).cloned()
                && let Some(a) = s.accelerators.get(&arn)
            {
                return Ok(a.info.clone());
            }
            s.next += 1;
            let n = s.next;
            let arn = format!("arn:aws:globalaccelerator::123456789012:accelerator/fake-{n}");
            let info = AcceleratorInfo {
                arn: arn.clone(),
                name: name.to_owned(),
                enabled: true,
                deployed: self.polls_per_change == 0,
                // 198.18.0.0/15 is reserved for benchmarking; nothing routes to it.
                ips: vec![
                    Ipv4Addr::new(198, 18, (n % 256) as u8, 1),
                    Ipv4Addr::new(198, 19, (n % 256) as u8, 1),
                ],
                tags: tags.iter().cloned().collect(),
            };
            s.tokens.insert(token.to_owned(), arn.clone());
            s.accelerators.insert(
                arn,
                FakeAccelerator {
                    info: info.clone(),
                    pending: self.polls_per_change,
                    listeners: BTreeMap::new(),
                },
            );
            Ok(info)
        })
    }

    fn disable_accelerator<'a>(&'a self, arn: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let mut s = self.call("UpdateAccelerator");
            let polls = self.polls_per_change;
            let a = s
                .accelerators
                .get_mut(arn)
                .ok_or_else(|| Self::no_accelerator("UpdateAccelerator"))?;
            a.info.enabled = false;
            a.pending = polls;
            a.info.deployed = polls == 0;
            Ok(())
        })
    }

    fn delete_accelerator<'a>(&'a self, arn: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let mut s = self.call("DeleteAccelerator");
            let a = s
                .accelerators
                .get(arn)
                .ok_or_else(|| Self::no_accelerator("DeleteAccelerator"))?;
            if a.info.enabled || a.pending > 0 {
                return Err(Self::refuse(
                    "DeleteAccelerator",
                    "AcceleratorNotDisabledException",
                    "The accelerator must be disabled and its change deployed before it can be deleted",
                ));
            }
            if !a.listeners.is_empty() {
                return Err(Self::refuse(
                    "DeleteAccelerator",
                    "AssociatedListenerFoundException",
                    "The accelerator still has listeners",
                ));
            }
            s.accelerators.remove(arn);
            Ok(())
        })
    }

    fn list_listeners<'a>(
        &'a self,
        arn: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ListenerInfo>, Error>> {
        Box::pin(async move {
            let s = self.call("ListListeners");
            Ok(s.accelerators
                .get(arn)
                .map(|a| a.listeners.values().map(|(l, _)| l.clone()).collect())
                .unwrap_or_default())
        })
    }

    fn create_listener<'a>(
        &'a self,
        arn: &'a str,
        protocol: Protocol,
        port: u16,
        _token: &'a str,
    ) -> BoxFuture<'a, Result<ListenerInfo, Error>> {
        Box::pin(async move {
            let mut s = self.call("CreateListener");
            s.next += 1;
            let n = s.next;
            let polls = self.polls_per_change;
            let a = s
                .accelerators
                .get_mut(arn)
                .ok_or_else(|| Self::no_accelerator("CreateListener"))?;
            let l = ListenerInfo {
                arn: format!("{arn}/listener/l-{n}"),
                protocol,
                port,
            };
            a.listeners.insert(l.arn.clone(), (l.clone(), Vec::new()));
            a.pending = polls;
            Ok(l)
        })
    }

    fn delete_listener<'a>(&'a self, arn: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let mut s = self.call("DeleteListener");
            for a in s.accelerators.values_mut() {
                if let Some((_, groups)) = a.listeners.get(arn) {
                    if !groups.is_empty() {
                        return Err(Self::refuse(
                            "DeleteListener",
                            "AssociatedEndpointGroupFoundException",
                            "The listener still has endpoint groups",
                        ));
                    }
                    a.listeners.remove(arn);
                    return Ok(());
                }
            }
            Err(Self::refuse(
                "DeleteListener",
                "ListenerNotFoundException",
                "no such listener",
            ))
        })
    }

    fn list_endpoint_groups<'a>(
        &'a self,
        listener: &'a str,
    ) -> BoxFuture<'a, Result<Vec<EndpointGroupInfo>, Error>> {
        Box::pin(async move {
            let s = self.call("ListEndpointGroups");
            Ok(s.accelerators
                .values()
                .find_map(|a| a.listeners.get(listener).map(|(_, g)| g.clone()))
                .unwrap_or_default())
        })
    }

    fn create_endpoint_group<'a>(
        &'a self,
        listener: &'a str,
        region: &'a str,
        instance_id: &'a str,
        _token: &'a str,
    ) -> BoxFuture<'a, Result<EndpointGroupInfo, Error>> {
        Box::pin(async move {
            let mut s = self.call("CreateEndpointGroup");
            s.next += 1;
            let n = s.next;
            for a in s.accelerators.values_mut() {
                if let Some((_, groups)) = a.listeners.get_mut(listener) {
                    let g = EndpointGroupInfo {
                        arn: format!("{listener}/endpoint-group/eg-{n}"),
                        region: region.to_owned(),
                        endpoints: vec![instance_id.to_owned()],
                    };
                    groups.push(g.clone());
                    return Ok(g);
                }
            }
            Err(Self::refuse(
                "CreateEndpointGroup",
                "ListenerNotFoundException",
                "no such listener",
            ))
        })
    }

    fn delete_endpoint_group<'a>(&'a self, arn: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let mut s = self.call("DeleteEndpointGroup");
            for a in s.accelerators.values_mut() {
                for (_, groups) in a.listeners.values_mut() {
                    if let Some(i) = groups.iter().position(|g| g.arn == arn) {
                        groups.remove(i);
                        return Ok(());
                    }
                }
            }
            Err(Self::refuse(
                "DeleteEndpointGroup",
                "EndpointGroupNotFoundException",
                "no such endpoint group",
            ))
        })
    }
}
