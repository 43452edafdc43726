//! Text for people: the plan listing with its cost, and the per-path commands after `up`.
//! Pure formatting into strings; `commands` decides where they go.

use std::fmt::Write as _;

use xbench_deploy::Plan;
use xbench_deploy::apply::Preflight;
use xbench_deploy::state::Outputs;
use xbench_deploy::teardown::{DownReport, GcReport};

pub(crate) fn plan(plan: &Plan, pre: Option<&Preflight>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scenario {}: {} path(s)",
        plan.scenario,
        plan.paths.len()
    );
    for (region, lines) in plan.listing() {
        let _ = writeln!(out, "\n{region}");
        for l in lines {
            let _ = writeln!(out, "  {l}");
        }
    }
    let _ = writeln!(out, "\npaths");
    for p in &plan.paths {
        let _ = writeln!(
            out,
            "  {:<16} {:<12} {}",
            p.label,
            p.kind.to_string(),
            describe_path(p)
        );
    }
    if let Some(pre) = pre {
        let _ = writeln!(out, "\nchecked with AWS");
        let mut nets: Vec<_> = pre.network_performance.iter().collect();
        nets.sort();
        for ((region, ty), perf) in nets {
            let ami = pre
                .amis
                .get(&(region.clone(), ty.clone()))
                .map(String::as_str)
                .unwrap_or("?");
            let _ = writeln!(
                out,
                "  {ty} in {region}: ENA yes, network {}, AMI {ami}",
                perf.as_deref().unwrap_or("unknown")
            );
        }
        let mut zones: Vec<_> = pre.zones.iter().collect();
        zones.sort();
        for (vpc, zone) in zones {
            let _ = writeln!(out, "  vpc {vpc} in zone {zone}");
        }
    }
    let c = &plan.cost;
    let _ = writeln!(out, "\nestimated cost (price table of {})", c.table_date);
    for l in &c.lines {
        let unit = l
            .unit_hourly
            .map(|u| format!("${u:.4}/h"))
            .unwrap_or_else(|| "unknown".into());
        let note = l
            .note
            .as_ref()
            .map(|n| format!("  ({n})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<16} {} x {:<28} {unit}{note}",
            l.region, l.quantity, l.item
        );
    }
    let _ = writeln!(
        out,
        "  total {}${:.3} per hour, ${:.2} per 8-hour day",
        if c.incomplete { "at least " } else { "" },
        c.total_hourly,
        c.total_hourly * 8.0
    );
    let _ = writeln!(out, "  plus per-GB charges: {}", c.per_gb_notes.join("; "));
    out
}

fn describe_path(p: &xbench_deploy::plan::PathPlan) -> String {
    use xbench_deploy::plan::{PathClient, PathTarget};
    let from = match &p.client {
        PathClient::Host(h) => h.clone(),
        PathClient::Address(a) => format!("your host {a}"),
    };
    let to = match &p.target {
        PathTarget::PrivateIp(h) => format!("private IP of {h}"),
        PathTarget::PublicIp(h) => format!("public IP of {h}"),
        PathTarget::Accelerator(k) => format!("static IP of accelerator {k}"),
        PathTarget::Address(a) => format!("{a}"),
    };
    format!("{from} -> {to}")
}

pub(crate) fn outputs(o: &Outputs, file: &std::path::Path) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {} is up (gc may delete it after {})",
        o.run_id, o.deletion_due
    );
    let _ = writeln!(out, "\nhosts");
    for h in &o.hosts {
        let _ = writeln!(
            out,
            "  {:<24} {:<8} {:<16} {} private {} public {}",
            h.key,
            h.role,
            h.region,
            h.instance_id,
            h.private_ip.map(|i| i.to_string()).unwrap_or_default(),
            h.public_ip.map(|i| i.to_string()).unwrap_or_default()
        );
    }
    let _ = writeln!(
        out,
        "\nmeasure each path (servers start `xbench server` at boot):"
    );
    for p in &o.paths {
        let on = match (&p.client_host, p.run_on) {
            (Some(h), Some(ip)) => format!("on {h} ({ip})"),
            (Some(h), None) => format!("on {h}"),
            (None, Some(ip)) => format!("on your host {ip}"),
            (None, None) => "on the client".into(),
        };
        let _ = writeln!(out, "  [{}] {on}:\n      {}", p.label, p.command);
    }
    let _ = writeln!(out, "\noutputs: {}", file.display());
    let _ = writeln!(out, "delete with: xbench-deploy down {}", o.run_id);
    out
}

pub(crate) fn down(run: &str, d: &DownReport) -> String {
    if d.deleted.is_empty() {
        format!(
            "run {run}: nothing left to delete (searched {})\n",
            d.regions.join(", ")
        )
    } else {
        format!("run {run}: deleted {} resource(s)\n", d.deleted.len())
    }
}

pub(crate) fn gc(g: &GcReport, dry_run: bool) -> String {
    let mut out = String::new();
    if g.runs.is_empty() {
        let _ = writeln!(out, "no xbench runs found in {} region(s)", g.regions.len());
    }
    for r in &g.runs {
        let verdict = match (r.expired, dry_run) {
            (true, true) => "expired: would delete",
            (true, false) => "expired: deleted",
            (false, _) => "kept",
        };
        let _ = writeln!(
            out,
            "{} due {} in {}: {verdict}",
            r.run_id,
            r.deletion_due.as_deref().unwrap_or("?"),
            r.regions.join(", ")
        );
    }
    out
}
