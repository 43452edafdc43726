//! The end of `up`: it returns only when every server answers. In order: the SSM agent of
//! every host (VPN gateways too) has registered (so `run` can reach it); every host's boot
//! script has finished (its boot-status file, read through SSM, says `ok`, or why not); servers that
//! accept clients over public addresses learn those addresses (their `--allow`); and from each
//! path's client host, a one-second `xbench client` test against its server succeeds — the
//! route, the security groups, the key and the allow list, all at once.
//!
//! Each step has a deadline ([`crate::deployer::Deployer::with_ready_timeout`]) and fails
//! naming the host and the usual causes.

use std::collections::BTreeMap;
use std::time::Duration;

use tracing::{info, warn};
use xbench::ClientConfig;

use crate::aws::ssm::{self, CommandStatus};
use crate::cidr::Ipv4Cidr;
use crate::command;
use crate::deployer::Deployer;
use crate::error::Error;
use crate::plan::Plan;
use crate::scenario::Scenario;
use crate::state::{HostOutput, Outputs};
use crate::userdata::{self, BOOT_STATUS_PATH, PSK_PATH, XBENCH_PATH};

/// Waits until every server of `out` answers its paths' clients.
pub(super) async fn wait(
    d: &Deployer,
    s: &Scenario,
    plan: &Plan,
    out: &Outputs,
) -> Result<(), Error> {
    // Gateways too: a gateway whose VPN daemon is missing or fails says so in its boot status,
    // rather than as a probe that times out "unreachable".
    let hosts: Vec<&HostOutput> = out.hosts.iter().collect();
    registered(d, &hosts).await?;
    for h in &hosts {
        booted(d, h).await?;
    }
    for h in out.hosts.iter().filter(|h| h.role == "server") {
        let allow = plan.allow_for(&h.key);
        if !allow.host_public_ips.is_empty() {
            update_allow(d, s, out, h, &allow.cidrs, &allow.host_public_ips).await?;
        }
    }
    for p in &out.paths {
        if plan.home_vpn(&p.label).is_some() {
            info!(
                "[{}] through your VPN end: not probed (the tunnel comes up when your end loads its configuration)",
                p.label
            );
            continue;
        }
        let Some(first) = p.client_host.as_ref().and_then(|c| host(out, c)) else {
            info!("[{}] the client is your host: not probed", p.label);
            continue;
        };
        // Every instance of a fleet is probed (at once): each has its own public address in
        // the server's allow list and its own agent, and one that cannot reach the server
        // would fail every run of the path, so it is named here rather than at the first run.
        let mut clients = vec![first];
        for key in &p.fleet {
            clients.push(host(out, key).ok_or_else(|| {
                Error::Internal(format!("path {}: fleet host {key} not recorded", p.label))
            })?);
        }
        let probes = clients
            .iter()
            .map(|c| Box::pin(probe(d, p, c)) as crate::aws::BoxFuture<'_, _>)
            .collect();
        unreachable_named(crate::run::join_all(probes).await)?;
    }
    Ok(())
}

/// The first failed probe, naming every instance of the fleet that failed (the detail is
/// the first one's: a fleet shares its subnet, groups and server, so one cause is usual).
fn unreachable_named(results: Vec<Result<(), Error>>) -> Result<(), Error> {
    let mut failed = results.into_iter().filter_map(Result::err);
    let Some(mut first) = failed.next() else {
        return Ok(());
    };
    let others: Vec<String> = failed
        .filter_map(|e| match e {
            Error::ServerUnreachable { client, .. } => Some(client),
            _ => None,
        })
        .collect();
    if let Error::ServerUnreachable { client, .. } = &mut first
        && !others.is_empty()
    {
        *client = format!("{client}, {}", others.join(", "));
    }
    Err(first)
}

fn host<'a>(out: &'a Outputs, key: &str) -> Option<&'a HostOutput> {
    out.hosts.iter().find(|h| h.key == key)
}

/// Every host's SSM agent is online, or the timeout names those that are not.
async fn registered(d: &Deployer, hosts: &[&HostOutput]) -> Result<(), Error> {
    let mut by_region: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for h in hosts {
        by_region
            .entry(h.region.as_str())
            .or_default()
            .push(h.instance_id.clone());
    }
    let start = tokio::time::Instant::now();
    loop {
        let mut waiting: Vec<&HostOutput> = Vec::new();
        for (region, ids) in &by_region {
            let r = d.aws.region(region);
            let online = d.run_command.online(&r, ids).await?;
            waiting.extend(
                hosts
                    .iter()
                    .copied()
                    .filter(|h| h.region == *region && !online.contains(&h.instance_id)),
            );
        }
        if waiting.is_empty() {
            info!("the SSM agent of every host is online");
            return Ok(());
        }
        if start.elapsed() >= d.ready_timeout {
            return Err(Error::NotRegistered {
                hosts: waiting
                    .iter()
                    .map(|h| format!("{} ({}, {})", h.key, h.instance_id, h.region))
                    .collect::<Vec<_>>()
                    .join(", "),
                seconds: d.ready_timeout.as_secs(),
            });
        }
        tokio::time::sleep(d.timing.poll).await;
    }
}

/// The host's boot script finished with `ok`, or its own words for why not.
async fn booted(d: &Deployer, h: &HostOutput) -> Result<(), Error> {
    let wait_secs = d.ready_timeout.as_secs().max(1);
    let script = format!(
        "# xbench-deploy: the boot status of {key}\n\
         for i in $(seq 1 {wait_secs}); do [ -s {BOOT_STATUS_PATH} ] && break; sleep 1; done\n\
         cat {BOOT_STATUS_PATH} 2>/dev/null || echo 'pending: no boot status yet'\n",
        key = h.key
    );
    let r = d.aws.region(&h.region);
    let inv = ssm::run_script(
        d.run_command.as_ref(),
        &r,
        &h.instance_id,
        &script,
        d.ready_timeout + Duration::from_secs(30),
        d.timing.poll,
        &format!("xbench-deploy: boot status of {}", h.key),
    )
    .await?;
    let status = inv.stdout.trim();
    let fail = |reason: String| Error::BootFailed {
        host: h.key.clone(),
        instance: h.instance_id.clone(),
        region: h.region.clone(),
        reason,
    };
    match inv.status {
        CommandStatus::Success if status == "ok" => {
            info!("{} booted", h.key);
            Ok(())
        }
        CommandStatus::Success => Err(fail(
            status.strip_prefix("failed: ").unwrap_or(status).to_owned(),
        )),
        other => Err(fail(format!(
            "reading its boot status through SSM ended {other:?}: {}",
            inv.stderr.trim()
        ))),
    }
}

/// Rewrites a server's unit with the public addresses of its client hosts, and restarts it.
async fn update_allow(
    d: &Deployer,
    s: &Scenario,
    out: &Outputs,
    server: &HostOutput,
    known: &[Ipv4Cidr],
    clients: &[String],
) -> Result<(), Error> {
    let mut allow = known.to_vec();
    for c in clients {
        let ip = host(out, c)
            .and_then(|h| h.public_ip)
            .ok_or_else(|| Error::Internal(format!("client host {c} has no public address")))?;
        allow.push(Ipv4Cidr::host(ip));
    }
    let script = format!(
        "set -euo pipefail\nUNIT={}\nfail() {{ echo \"$*\" >&2; exit 1; }}\n{}",
        userdata::SERVER_UNIT_PATH,
        userdata::install_server_unit(&out.run_id, s.port, &allow)
    );
    let r = d.aws.region(&server.region);
    let inv = ssm::run_script(
        d.run_command.as_ref(),
        &r,
        &server.instance_id,
        &script,
        Duration::from_secs(60),
        d.timing.poll,
        &format!("xbench-deploy: allow list of {}", server.key),
    )
    .await?;
    if inv.status != CommandStatus::Success {
        return Err(Error::BootFailed {
            host: server.key.clone(),
            instance: server.instance_id.clone(),
            region: server.region.clone(),
            reason: format!(
                "updating the xbench server's allow list failed: {}",
                inv.stderr.trim()
            ),
        });
    }
    info!(
        "{} allows {}",
        server.key,
        allow
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// A one-second test from the path's client host, retried while the server may still be
/// starting; the command line is built like every run's.
async fn probe(
    d: &Deployer,
    p: &crate::state::PathOutput,
    client: &HostOutput,
) -> Result<(), Error> {
    let mut config = ClientConfig::new(p.target.to_string());
    config.port = p.port;
    config.label = Some(p.label.clone());
    config.spec.end = xbench::config::EndCondition::Duration(Duration::from_secs(1));
    config.spec.interval = None;
    let argv = command::client_argv(&config, p.authenticated.then_some(PSK_PATH)).map_err(|e| {
        Error::Internal(format!(
            "path {}: the readiness probe as a command: {e}",
            p.label
        ))
    })?;
    let line = command::shell_line(XBENCH_PATH, &argv);
    let attempts = (d.ready_timeout.as_secs() / 5).clamp(1, 60);
    let script = format!(
        "for i in $(seq 1 {attempts}); do\n\
         \x20 if {line} > /dev/null 2> /tmp/xbench-probe.err; then echo ok; exit 0; fi\n\
         \x20 sleep 5\n\
         done\n\
         tail -n 3 /tmp/xbench-probe.err >&2\n\
         exit 1\n"
    );
    let r = d.aws.region(&client.region);
    let inv = ssm::run_script(
        d.run_command.as_ref(),
        &r,
        &client.instance_id,
        &script,
        Duration::from_secs(attempts * 20),
        d.timing.poll,
        &format!("xbench-deploy: probe of path {}", p.label),
    )
    .await?;
    if inv.status == CommandStatus::Success {
        info!(
            "[{}] {} answers {}:{} from {}",
            p.label, p.target, p.target, p.port, client.key
        );
        return Ok(());
    }
    let e = Error::ServerUnreachable {
        path: p.label.clone(),
        client: client.key.clone(),
        target: p.target.to_string(),
        port: p.port,
        detail: inv.stderr.trim().to_owned(),
        seconds: attempts * 5,
    };
    if p.authenticated {
        Err(e)
    } else {
        // Your own server: perhaps not started yet. Said, not fatal.
        warn!("{e}");
        Ok(())
    }
}
