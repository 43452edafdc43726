//! Text for people: the plan listing with its binary, suite and cost, the per-path commands
//! after `up`, a run's progress lines. Pure formatting into strings; `commands` decides where
//! they go.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use xbench_deploy::apply::Preflight;
use xbench_deploy::binary::XbenchBinary;
use xbench_deploy::run::{RunEvent, RunPath};
use xbench_deploy::scenario::kind_label;
use xbench_deploy::state::Outputs;
use xbench_deploy::teardown::{DownReport, GcReport};
use xbench_deploy::{Plan, Scenario, Suite};

/// Where the hosts' xbench comes from, as `plan` shows it.
#[derive(Debug)]
pub(crate) enum BinaryNote {
    /// Uploaded from this machine; with why it would not run on the image, if so.
    Upload(XbenchBinary, Option<String>),
    /// To be uploaded, but not there yet.
    Missing(PathBuf),
    /// The scenario's URL.
    Url(String),
    /// Built on the hosts.
    Cargo(String),
}

pub(crate) fn plan(
    plan: &Plan,
    pre: Option<&Preflight>,
    scenario: &Scenario,
    binary: &BinaryNote,
) -> String {
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
            "  {:<16} {:<16} {}",
            p.label,
            Plan::kind_label(p),
            describe_path(p)
        );
    }
    let _ = writeln!(out, "\nxbench on the hosts\n  {}", describe_binary(binary));
    let _ = writeln!(
        out,
        "\nsuite\n{}",
        describe_suite(scenario.suite.as_ref(), plan)
    );
    if let Some(pre) = pre {
        out.push_str(&checked_with_aws(pre, scenario));
    }
    let aws_bandwidth = pre.map(|p| p.bandwidth.clone()).unwrap_or_default();
    out.push_str(&cost(plan, scenario, &aws_bandwidth));
    let _ = writeln!(
        out,
        "\nself-stop\n  every instance powers itself off at the run's deletion-due time (up + ttl_hours = {} h) on its own clock, and is launched with InstanceInitiatedShutdownBehavior=terminate: a run nobody tears down (a laptop asleep during `all`, a lost state directory) stops billing then; what bills without an instance (Transit Gateway attachments, accelerators) waits for `down` or `gc`",
        scenario.ttl_hours
    );
    out
}

/// The section of what AWS answered (`plan --check`): per instance type its networking and
/// AMI, the IPsec gateways' AMIs, each VPC's zone and the vCPU quotas.
fn checked_with_aws(pre: &Preflight, scenario: &Scenario) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\nchecked with AWS");
    let mut nets: Vec<_> = pre.network_performance.iter().collect();
    nets.sort();
    for ((region, ty), perf) in nets {
        let ami = pre
            .amis
            .get(&(region.clone(), ty.clone()))
            .map(String::as_str)
            .unwrap_or("?");
        let enhanced = pre
            .enhanced_networking
            .get(&(region.clone(), ty.clone()))
            .copied()
            .unwrap_or("ENA");
        let _ = writeln!(
            out,
            "  {ty} in {region}: enhanced networking {enhanced}, network {}, AMI {ami}",
            perf.as_deref().unwrap_or("unknown")
        );
    }
    let mut gateways: Vec<_> = pre.gateway_amis.iter().collect();
    gateways.sort();
    for ((region, ty), ami) in gateways {
        let _ = writeln!(
            out,
            "  IPsec gateways: {ami} ({ty} in {region}; gateway_ami = {})",
            match &scenario.gateway_ami {
                xbench_deploy::scenario::AmiChoice::Ubuntu2404 => "ubuntu-24.04".to_owned(),
                xbench_deploy::scenario::AmiChoice::AmazonLinux2023 => "al2023".to_owned(),
                xbench_deploy::scenario::AmiChoice::SsmParameter(p) => format!("ssm:{p}"),
                xbench_deploy::scenario::AmiChoice::Id(id) => id.clone(),
            }
        );
    }
    let mut zones: Vec<_> = pre.zones.iter().collect();
    zones.sort();
    for (vpc, zone) in zones {
        let _ = writeln!(out, "  vpc {vpc} in zone {zone}");
    }
    for q in &pre.quotas {
        let _ = writeln!(out, "  vCPUs in {}", q.line());
    }
    out
}

/// The cost section: every priced line, the hourly total, over `ttl_hours`, and one run of
/// the suite.
fn cost(
    plan: &Plan,
    scenario: &Scenario,
    aws_bandwidth: &std::collections::BTreeMap<String, xbench_deploy::transfer::Bandwidth>,
) -> String {
    let mut out = String::new();
    let c = &plan.cost;
    let _ = writeln!(out, "\nestimated cost (price table of {})", c.table_date);
    for l in &c.lines {
        let each = l.unit_hourly.map_or_else(
            || "at an unknown price".to_owned(),
            |u| format!("at ${u:.4}/h = ${:.3}/h", u * f64::from(l.quantity)),
        );
        let note = l
            .note
            .as_ref()
            .map(|n| format!("  ({n})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<16} {} x {} {each}{note}",
            l.region, l.quantity, l.item
        );
    }
    let at_least = if c.incomplete { "at least " } else { "" };
    let ttl = f64::from(scenario.ttl_hours);
    let _ = writeln!(
        out,
        "  total {at_least}${:.3} per hour; {at_least}${:.2} over ttl_hours = {} (the longest the hosts can live: see below)",
        c.total_hourly,
        c.total_hourly * ttl,
        scenario.ttl_hours
    );
    if let Some(suite) = &scenario.suite {
        let paths = runnable(plan);
        let t = suite.expected(paths);
        let hosts = c.total_hourly * t.as_secs_f64() / 3600.0;
        let _ = writeln!(
            out,
            "  one `run` of the suite: {} runs over {paths} path(s), about {}: hosts {at_least}${hosts:.2} (up meanwhile; `up` and `down` add a quarter of an hour or so)",
            suite.runs_per_path() * paths,
            hms(t),
        );
        match yours(plan) {
            0 => {}
            n => {
                let _ = writeln!(
                    out,
                    "  {n} of the {paths} paths {} your host as client: `run --here` (or `all --here`) on that host measures {}; without it {} printed as a command, not run",
                    if n == 1 { "has" } else { "have" },
                    if n == 1 { "it" } else { "them" },
                    if n == 1 { "it is" } else { "they are" },
                );
            }
        }
        out.push_str(&data(plan, scenario, suite, aws_bandwidth, hosts));
    }
    out
}

/// The data section: what each path moves in one `run` and the per-GB charges it incurs.
fn data(
    plan: &Plan,
    scenario: &Scenario,
    suite: &Suite,
    aws_bandwidth: &std::collections::BTreeMap<String, xbench_deploy::transfer::Bandwidth>,
    hosts: f64,
) -> String {
    use xbench_deploy::transfer;
    let table = xbench_deploy::cost::PriceTable::shipped().with_overrides(&scenario.prices);
    let d = transfer::estimate(plan, scenario, suite, &table, aws_bandwidth);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  data one `run` moves (each path at its instances' baseline bandwidth; burst in brackets):"
    );
    for p in &d.paths {
        let scale = if p.rate_gbps.0 > 0.0 {
            p.rate_gbps.1 / p.rate_gbps.0
        } else {
            1.0
        };
        let gb = p.client_to_server_gb + p.server_to_client_gb;
        let _ = writeln!(
            out,
            "    {:<16} {:.1} GB (client->server {:.1}, server->client {:.1}) at {:.3} Gbit/s, {} [{:.1} GB at {:.1} Gbit/s]",
            p.path,
            gb,
            p.client_to_server_gb,
            p.server_to_client_gb,
            p.rate_gbps.0,
            p.basis,
            gb * scale,
            p.rate_gbps.1
        );
    }
    for l in &d.lines {
        let _ = writeln!(
            out,
            "    {:<16} {}: {:.1} GB x ${:.4}/GB = ${:.2}",
            l.path,
            l.what,
            l.gb,
            l.per_gb,
            l.total()
        );
    }
    for n in &d.notes {
        let _ = writeln!(out, "    note: {n}");
    }
    let _ = writeln!(
        out,
        "  one `run` in total: hosts ${hosts:.2} + data ${:.2} = ${:.2} [data up to ${:.2} at burst]",
        d.total,
        hosts + d.total,
        d.total_at_burst
    );
    if d.total > hosts {
        let _ = writeln!(
            out,
            "  WARNING: the data costs more than the hosts (${:.2} against ${hosts:.2}): fewer repeats, shorter tests or fewer streams cut it",
            d.total
        );
    } else if d.total_at_burst > hosts {
        let _ = writeln!(
            out,
            "  WARNING: at burst rates the data would cost more than the hosts (up to ${:.2} against ${hosts:.2})",
            d.total_at_burst
        );
    }
    let sending = d.paths.iter().map(|p| p.seconds).fold(0.0_f64, f64::max);
    out.push_str(&burst_warnings(plan, sending, &table, aws_bandwidth));
    out
}

/// "Up to" instance types: their baseline and burst, and a warning when the suite keeps one
/// sending longer than the shortest burst AWS documents (5 minutes of network I/O credits).
fn burst_warnings(
    plan: &Plan,
    sending_secs: f64,
    table: &xbench_deploy::cost::PriceTable,
    aws_bandwidth: &std::collections::BTreeMap<String, xbench_deploy::transfer::Bandwidth>,
) -> String {
    const SHORTEST_BURST: Duration = Duration::from_secs(5 * 60);
    let mut out = String::new();
    let mut seen = Vec::new();
    let per_path = Duration::from_secs_f64(sending_secs.max(0.0));
    for h in &plan.hosts {
        if seen.contains(&h.instance_type) {
            continue;
        }
        seen.push(h.instance_type.clone());
        let b = xbench_deploy::transfer::bandwidth(&h.instance_type, table, aws_bandwidth);
        if !b.bursts() {
            continue;
        }
        let _ = writeln!(
            out,
            "  {} is an \"up to\" type: {:.3} Gbit/s baseline, {:.1} Gbit/s burst while its network I/O credits last ({}; AWS documents 5 to 60 minutes, not per type)",
            h.instance_type, b.baseline, b.burst, b.source
        );
        if per_path > SHORTEST_BURST {
            let _ = writeln!(
                out,
                "  WARNING: the suite has each path's hosts send for about {} in all, more than a 5-minute burst: later runs may measure the {:.3} Gbit/s baseline, not the path (a type without \"up to\" has no burst to run out of)",
                hms(per_path),
                b.baseline
            );
        }
    }
    out
}

/// Paths `run` measures: every path, those whose client is your own host included (they run
/// there with `--here`, [`yours`]).
fn runnable(plan: &Plan) -> usize {
    plan.paths.len()
}

/// Paths whose client is your own host: measured only by `run --here` on that host.
fn yours(plan: &Plan) -> usize {
    plan.paths
        .iter()
        .filter(|p| !matches!(p.client, xbench_deploy::plan::PathClient::Host(_)))
        .count()
}

fn describe_binary(b: &BinaryNote) -> String {
    match b {
        BinaryNote::Upload(bin, problem) => format!(
            "{} ({}, {}, {:.1} MiB, sha256 {}): uploaded to the run's private bucket, copied by the hosts with their instance profile{}",
            bin.path.display(),
            bin.arch,
            match bin.glibc {
                None => "static".to_owned(),
                Some((a, b)) => format!("needs glibc {a}.{b}"),
            },
            bin.size as f64 / (1024.0 * 1024.0),
            bin.sha256,
            problem
                .as_ref()
                .map(|p| format!("\n  WILL NOT RUN, `up` refuses it: {p}"))
                .unwrap_or_default()
        ),
        BinaryNote::Missing(p) => format!(
            "{}: NOT FOUND; `up` needs it. Looked in: {}. Build one (cargo build --release -p xbench-cli; a static one for any image: --target x86_64-unknown-linux-musl), or give --xbench PATH",
            p.display(),
            xbench_deploy::binary::candidates()
                .iter()
                .take(5)
                .map(|c| c.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        BinaryNote::Url(u) => format!("downloaded from {u} (sha256 checked)"),
        BinaryNote::Cargo(g) => format!("built on each host from {g} (slow)"),
    }
}

fn describe_suite(suite: Option<&Suite>, plan: &Plan) -> String {
    let Some(s) = suite else {
        return "  none: `run` needs a [suite] in the scenario or --suite FILE".into();
    };
    let mut out = String::new();
    let cells = s.cells();
    let _ = writeln!(
        out,
        "  {} cell(s) x {} repeat(s) per path{}",
        cells.len(),
        s.repeat,
        if s.pause.is_zero() {
            String::new()
        } else {
            format!(", {} between runs", hms(s.pause))
        }
    );
    for c in &cells {
        let _ = writeln!(
            out,
            "    {:<24} {}",
            xbench_report::cell::CellKey::of_spec(c).slug(),
            hms(xbench_deploy::suite::expected_run(c))
        );
    }
    let _ = write!(
        out,
        "  about {} per path, {} for the {} path(s) run one at a time",
        hms(s.expected_per_path()),
        hms(s.expected(runnable(plan))),
        runnable(plan)
    );
    out
}

/// `1 h 02 min`, `3 min 10 s`, `12 s`.
pub(crate) fn hms(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{} h {:02} min", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{} s", s)
    }
}

/// What `run` is about to do.
pub(crate) fn run_intro(suite: &Suite, paths: &[RunPath], out: &Path) -> String {
    let runnable = paths.iter().filter(|p| p.unavailable.is_none()).count();
    format!(
        "running {} run(s) per path on {runnable} path(s) ({}), about {}; results in {}",
        suite.runs_per_path(),
        paths
            .iter()
            .map(|p| p.label.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        hms(suite.expected(runnable)),
        out.display()
    )
}

/// A run's progress lines.
pub(crate) struct Progress {
    unit: xbench_report::ThroughputUnit,
    /// The last Started event's position and timing, shown with its outcome.
    at: String,
}

impl Progress {
    pub(crate) fn new(unit: xbench_report::ThroughputUnit) -> Self {
        Progress {
            unit,
            at: String::new(),
        }
    }

    #[allow(clippy::print_stdout)] // progress is the command's output
    pub(crate) fn event(&mut self, e: &RunEvent<'_>) {
        let line = match e {
            RunEvent::Started {
                planned,
                done,
                total,
                elapsed,
                eta,
            } => {
                self.at = format!(
                    "[{:>w$}/{total} {} elapsed, ETA {}]",
                    done + 1,
                    hms(*elapsed),
                    hms(*eta),
                    w = total.to_string().len()
                );
                let _ = planned;
                return;
            }
            RunEvent::Collected { planned, run } => format!(
                "{} {} {} run {}: {}",
                self.at,
                planned.config.label.as_deref().unwrap_or_default(),
                planned.cell,
                planned.repeat,
                run.one_line(self.unit)
            ),
            RunEvent::Failed { planned, reason } => format!(
                "{} {} {} run {}: FAILED, not kept: {reason}",
                self.at,
                planned.config.label.as_deref().unwrap_or_default(),
                planned.cell,
                planned.repeat
            ),
            RunEvent::PathGivenUp { label, reason } => {
                format!("path {label}: given up, its other runs are skipped: {reason}")
            }
            RunEvent::FleetNote { label, note } | RunEvent::PathNote { label, note } => {
                format!("path {label}: {note}")
            }
            RunEvent::Waiting { repeat, of, until } => format!(
                "waiting until {} for repeat {repeat} of {of} (the suite's `every`; Ctrl-C stops: `run ... --resume` continues on the schedule, under `all` only with --keep)",
                xbench_deploy::state::format_time(*until)
            ),
            RunEvent::Skipped(_) | RunEvent::Pausing(_) => return,
            _ => return,
        };
        println!("{line}");
    }
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

pub(crate) fn outputs(o: &Outputs, file: &std::path::Path, checked: bool) -> String {
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
        "\n{}; measure with `xbench-deploy run SCENARIO --out DIR`, or by hand on each client host:",
        if checked {
            "every server answered its clients"
        } else {
            "the hosts were not checked (--skip-ready)"
        }
    );
    for p in &o.paths {
        let on = match (&p.client_host, p.run_on) {
            (Some(h), Some(ip)) => format!("on {h} ({ip})"),
            (Some(h), None) => format!("on {h}"),
            (None, Some(ip)) => format!("on your host {ip}"),
            (None, None) => "on the client".into(),
        };
        let through = p
            .vpn
            .map(|f| format!(", through {}", kind_label(p.kind, Some(f))))
            .unwrap_or_default();
        let _ = writeln!(out, "  [{}] {on}{through}:\n      {}", p.label, p.command);
    }
    if !o.notes.is_empty() {
        let _ = writeln!(
            out,
            "\nyour gateways (xbench-deploy changes nothing of yours):"
        );
        for n in &o.notes {
            let _ = writeln!(out, "  {n}");
        }
    }
    for h in &o.home_ends {
        home_end(&mut out, h);
    }
    let _ = writeln!(out, "\noutputs: {}", file.display());
    let _ = writeln!(out, "delete with: xbench-deploy down {}", o.run_id);
    out
}

/// Your end of a VPN path: where it dials, the file to install, and the file itself with the
/// key left out (terminals and CI logs are kept; the key stays in the mode-0600 file).
fn home_end(out: &mut String, h: &xbench_deploy::state::HomeEndOutput) {
    let front = match h.accelerator_ip {
        Some(a) => format!(
            "accelerator {a} in front of {} ({})",
            h.gateway, h.gateway_ip
        ),
        None => format!("{} ({})", h.gateway, h.gateway_ip),
    };
    let _ = writeln!(
        out,
        "\nyour VPN end of [{}]: it dials {front} from {}; {} (yours) <-> {}",
        h.path, h.public_ip, h.on_prem_cidr, h.aws_subnet
    );
    let _ = writeln!(
        out,
        "  its swanctl file, with the key (mode 0600): {}\n  put it in /etc/swanctl/conf.d/ (mode 0600) and run `swanctl --load-all`; the file, key left out:",
        h.config.display()
    );
    match std::fs::read_to_string(&h.config) {
        Ok(text) => {
            for line in text.lines() {
                let shown = match line.split_once("secret = ") {
                    Some((indent, _)) => format!("{indent}secret = <in {}>", h.config.display()),
                    None => line.to_owned(),
                };
                let _ = writeln!(out, "    {shown}");
            }
        }
        Err(e) => {
            let _ = writeln!(out, "    (cannot read it: {e})");
        }
    }
}

pub(crate) fn down(run: &str, d: &DownReport) -> String {
    let mut out = if d.deleted.is_empty() && d.left.is_empty() {
        format!(
            "run {run}: nothing left to delete (searched {})\n",
            d.regions.join(", ")
        )
    } else {
        format!("run {run}: deleted {} resource(s)\n", d.deleted.len())
    };
    for n in d.notes.iter().filter(|n| !n.starts_with("failed: ")) {
        let _ = writeln!(out, "note: {n}");
    }
    if !d.left.is_empty() {
        let _ = writeln!(
            out,
            "LEFT after the teardown ({}; region, what, id):",
            d.left.len()
        );
        for l in &d.left {
            let _ = writeln!(out, "  {l}");
        }
    }
    out
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
    if !g.left.is_empty() {
        let _ = writeln!(
            out,
            "LEFT after the teardowns ({}; run, region, what, id):",
            g.left.len()
        );
        for l in &g.left {
            let _ = writeln!(out, "  {l}");
        }
    }
    out
}
