//! `xbench client`'s flags resolved once into what to run, as ripgrep's `HiArgs`: raw clap
//! values (`cli`) → a checked [`Plan`] → `cmd::client` (one test) or `cmd::sweep` (a sweep).
//! Every decision about what the flags mean together is made here and nowhere else: single
//! test or sweep, the test and its bounds, the label of a sweep, which outputs a sweep refuses.
//! What clap can check on its own (conflicts, flags that need `--rr`) it checks in `cli`.

use std::num::{NonZeroU16, NonZeroU32};
use std::path::PathBuf;
use std::time::Duration;

use xbench::auth::Psk;
use xbench::client::{AddressFamily, ServerProtocol};
use xbench::config::{
    Direction, EndCondition, FlowCount, ReceiveMode, RrSpec, SocketOptions, TestSpec,
    ThroughputSpec, UdpRrSpec, UdpSpec, Workload,
};
use xbench::under_load::UnderLoadSpec;
use xbench_report::{ThroughputUnit, layout};
use xbench_sweep::{SweepPlan, Target};

use crate::cli::{ClientArgs, JsonFormat};
use crate::exit::UsageError;
use crate::parse::Bitrates;
use crate::render::netperf;

/// What `xbench client` was asked to do.
#[derive(Debug)]
pub(crate) enum Plan {
    /// One test, printed as it runs.
    Single(Single),
    /// Cells × repeats: a line per run as it finishes, then the summary table.
    Sweep(Sweep),
}

/// One test.
#[derive(Debug)]
pub(crate) struct Single {
    /// The server; no host is an in-process one.
    pub(crate) target: Target,
    /// The test.
    pub(crate) spec: TestSpec,
    /// `--label`, carried into the report.
    pub(crate) label: Option<String>,
    /// The key of `--psk-file`, read.
    pub(crate) psk: Option<Psk>,
    /// How the test is printed.
    pub(crate) style: Style,
    /// `--json-file`: the report, also written here.
    pub(crate) json_file: Option<PathBuf>,
    /// `--hist`: the latency histograms, written here.
    pub(crate) hist: Option<PathBuf>,
    /// `--start-at`: wait until this instant before connecting.
    pub(crate) start_at: Option<std::time::SystemTime>,
    /// `-f`/`--unit`: every rate in this unit; without, each in the unit that suits it.
    pub(crate) unit: Option<ThroughputUnit>,
}

/// How a single test is printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Style {
    /// Lines per interval, then the summary.
    Text,
    /// One JSON document at the end (`--json`).
    Json,
    /// One JSON document at the end in iperf3's `-J` shape (`--json --json-format iperf3`).
    Iperf3Json,
    /// One JSON event per line as the test runs (`--json-stream`).
    JsonStream,
    /// Nothing live, the selected figures at the end (`--fields`).
    Fields(netperf::FieldList, netperf::Format),
}

/// A sweep.
#[derive(Debug)]
pub(crate) struct Sweep {
    /// What runs: the plan deploy and the lab write as commands too.
    pub(crate) plan: SweepPlan,
    /// The key of `--psk-file`, read (for the in-process server; the sweep reads its own).
    pub(crate) psk: Option<Psk>,
    /// `--json`: one document at the end instead of lines and a table.
    pub(crate) json: bool,
    /// `--unit` of the lines and the summary table; without, each in the unit that suits it.
    pub(crate) unit: Option<ThroughputUnit>,
}

/// Resolves the flags of `xbench client`. Every error is a usage error (exit status 2).
pub(crate) fn resolve(mut a: ClientArgs) -> Result<Plan, UsageError> {
    // A connection-rate test is a request/response test whose held flows are --rr's; from
    // here on every check of --rr applies to it too.
    if a.openers.is_some() && !a.connections_only {
        // clap's `requires` is met by any member of the `latency` group, --rr among them.
        return Err(UsageError(
            "--openers applies to --connections-only: add it, or leave out --openers".into(),
        ));
    }
    a.rr |= a.connections_only;
    let sweep = wants_sweep(&a);
    refuse_conflicts(&a, sweep)?;
    let target = target(&a);
    let spec = spec(&a)?;
    if a.iperf3 {
        iperf3_fits(&spec)?;
    }
    let psk = target.read_key().map_err(|e| UsageError(e.to_string()))?;
    if sweep && a.start_at.is_some() {
        return Err(UsageError(
            "--start-at starts one test; a sweep (lists, --repeat) runs many: give one value \
             per flag"
                .into(),
        ));
    }
    if !sweep {
        check_outputs(&a)?;
        return Ok(Plan::Single(Single {
            start_at: a.start_at,
            target,
            spec,
            psk,
            style: style(&a),
            label: a.label,
            json_file: a.json_file,
            hist: a.hist,
            unit: a.unit,
        }));
    }
    sweep_plan(a, target, spec, psk)
}

/// Refuses what cannot run together: a sweep of a single connection-rate test or of UDP
/// request/response, UDP lists without -u, a unit without rates, the iperf3 JSON shape for
/// what it cannot hold, -b with --rr -u, and bind lists that cannot be used.
fn refuse_conflicts(a: &ClientArgs, sweep: bool) -> Result<(), UsageError> {
    if sweep && a.connections_only {
        return Err(UsageError(
            "--connections-only runs one test: give one value of --flows and -w, without \
             --repeat or --save"
                .into(),
        ));
    }
    if sweep {
        refuse_single_test_outputs(a)?;
        if a.udp && a.rr {
            return Err(UsageError(
                "UDP request/response tests (--rr -u) cannot be swept yet: give one value of -P, \
                 -w, -r and --flows"
                    .into(),
            ));
        }
    }
    if !a.udp {
        refuse_udp_lists(a)?;
    }
    refuse_unit_without_rates(a)?;
    refuse_iperf3_json_without_its_shape(a)?;
    if a.rr && a.udp && a.bitrate.is_some() {
        return Err(UsageError(
            "-b sets a UDP throughput test's rate; --rr -u runs transactions: pace them with \
             --rate"
                .into(),
        ));
    }
    refuse_unusable_bind_lists(a)?;
    Ok(())
}

/// The sweep's plan from the arguments (lists, --repeat, --save), labelled by --label or
/// the host, and checked.
fn sweep_plan(
    a: ClientArgs,
    target: Target,
    spec: TestSpec,
    psk: Option<Psk>,
) -> Result<Plan, UsageError> {
    let label = match (a.label, &target.host) {
        (Some(l), _) => l,
        (None, None) => "local".to_owned(),
        (None, Some(host)) => host.clone(),
    };
    layout::check_label(&label).map_err(|e| UsageError(format!("--label: {e}")))?;
    let plan = SweepPlan {
        streams: a.parallel.map(|l| l.0).unwrap_or_default(),
        windows: a
            .window
            .map(|l| l.0.iter().map(|w| w.0).collect())
            .unwrap_or_default(),
        rr_sizes: a.rr_size,
        flows: a.flows.map(|l| l.0).unwrap_or_default(),
        bitrates: match (&a.bitrate, a.udp) {
            (Some(b), true) => b.rates.0.clone(),
            _ => Vec::new(),
        },
        bitrate_per_stream: a.udp && a.bitrate.as_ref().is_some_and(|b| b.per_stream),
        datagram_lens: match (&a.length, a.udp) {
            (Some(l), true) => l.0.iter().map(|l| l.get()).collect(),
            _ => Vec::new(),
        },
        repeat: a.sweep.repeat.unwrap_or(NonZeroU32::MIN),
        pause: a.sweep.pause.unwrap_or(Duration::ZERO),
        save: a.sweep.save,
        resume: a.sweep.resume,
        ..SweepPlan::new(target, spec, label)
    }
    .normalized();
    plan.check().map_err(|e| UsageError(e.to_string()))?;
    Ok(Plan::Sweep(Sweep {
        plan,
        psk,
        json: a.json,
        unit: a.unit,
    }))
}

/// `--json-file` and `--hist` (and its `.hgrm`) checked before the test, so that a path that
/// cannot be written fails now rather than after the whole test: writing there later follows
/// the same rule ([`xbench::file::write_atomically`]).
fn check_outputs(a: &ClientArgs) -> Result<(), UsageError> {
    let check = |flag: &str, path: &std::path::Path| {
        xbench::file::check_writable(path)
            .map_err(|e| UsageError(format!("{flag} {}: {e}", path.display())))
    };
    if let Some(p) = &a.json_file {
        check("--json-file", p)?;
    }
    if let Some(p) = &a.hist {
        if p.as_os_str() == "-" {
            return Err(UsageError(
                "--hist writes two files, FILE and FILE.hgrm: give a file name, not -".into(),
            ));
        }
        check("--hist", p)?;
        check("--hist", &hgrm_path(p))?;
    }
    Ok(())
}

/// Where `--hist FILE` puts the percentile distribution: FILE.hgrm.
pub(crate) fn hgrm_path(hist: &std::path::Path) -> PathBuf {
    let mut p = hist.as_os_str().to_owned();
    p.push(".hgrm");
    PathBuf::from(p)
}

/// iperf3's parameter exchange carries `-t` and `-O` in whole seconds.
fn iperf3_fits(spec: &TestSpec) -> Result<(), UsageError> {
    let whole = |d: Duration| d.subsec_nanos() == 0;
    if let EndCondition::Duration(d) = spec.end
        && !whole(d)
    {
        return Err(UsageError(format!(
            "-t {d:?}: an iperf3 server (--iperf3) takes whole seconds"
        )));
    }
    if !whole(spec.omit) {
        return Err(UsageError(format!(
            "-O {:?}: an iperf3 server (--iperf3) takes whole seconds",
            spec.omit
        )));
    }
    Ok(())
}

/// A list of more than one value, `--repeat` or `--save` make a sweep; a one-value list alone
/// is a single test.
fn wants_sweep(a: &ClientArgs) -> bool {
    let many = |n: Option<usize>| n.is_some_and(|n| n > 1);
    many(a.parallel.as_ref().map(|l| l.0.len()))
        || many(a.window.as_ref().map(|l| l.0.len()))
        || many(a.flows.as_ref().map(|l| l.0.len()))
        || many(a.bitrate.as_ref().map(|b| b.rates.0.len()))
        || many(a.length.as_ref().map(|l| l.0.len()))
        || a.rr_size.len() > 1
        || a.sweep.repeat.is_some()
        || a.sweep.save.is_some()
}

/// `-b` and `-l` lists sweep UDP tests only: a TCP cell has no rate or block length in its
/// key (TCP sweeps stream counts and windows).
fn refuse_udp_lists(a: &ClientArgs) -> Result<(), UsageError> {
    for (flag, n) in [
        ("-b", a.bitrate.as_ref().map_or(0, |b| b.rates.0.len())),
        ("-l", a.length.as_ref().map_or(0, |l| l.0.len())),
    ] {
        if n > 1 {
            return Err(UsageError(format!(
                "a list of {flag} values sweeps UDP tests only; add -u, or give one value"
            )));
        }
    }
    Ok(())
}

/// Outputs that describe one test have no meaning for a sweep.
fn refuse_single_test_outputs(a: &ClientArgs) -> Result<(), UsageError> {
    for (flag, given) in [
        ("--json-stream", a.json_stream),
        ("--json-file", a.json_file.is_some()),
        ("--hist", a.hist.is_some()),
        ("--fields", a.fields.is_some()),
    ] {
        if given {
            return Err(UsageError(format!(
                "{flag} describes a single test; a sweep prints one line per run and a summary \
                 (--json for one document; --save DIR keeps every run's full report)"
            )));
        }
    }
    Ok(())
}

/// `--json-format iperf3` where iperf3's `-J` document has nothing to describe, or where no
/// `--json` document is printed: refused, not ignored.
fn refuse_iperf3_json_without_its_shape(a: &ClientArgs) -> Result<(), UsageError> {
    if a.json_format != JsonFormat::Iperf3 {
        return Ok(());
    }
    if a.rr || a.crr {
        return Err(UsageError(
            "--json-format iperf3: iperf3 has no request/response tests, so its JSON has no \
             shape for --rr or --crr; leave out --json-format"
                .into(),
        ));
    }
    if a.under_load.is_some() {
        return Err(UsageError(
            "--json-format iperf3: iperf3's JSON has no shape for latency under load; leave \
             out --json-format"
                .into(),
        ));
    }
    if wants_sweep(a) {
        return Err(UsageError(
            "--json-format iperf3 describes a single test; a sweep's --json and --save keep \
             xbench's layout (give one value of -P and -w, without --repeat or --save)"
                .into(),
        ));
    }
    if !a.json {
        return Err(UsageError(
            "--json-format applies to --json (-J): add -J (--json-file and --json-stream keep \
             xbench's layout)"
                .into(),
        ));
    }
    Ok(())
}

/// A `-B` list every mode spreads its data over, except where it cannot be: an address twice
/// or two families, or an iperf3 UDP test. Refused, not narrowed to its first address.
fn refuse_unusable_bind_lists(a: &ClientArgs) -> Result<(), UsageError> {
    if a.bind.len() < 2 {
        return Ok(());
    }
    xbench::client::flow_plan::BindList::check(&a.bind).map_err(|e| UsageError(e.to_string()))?;
    if a.iperf3 && a.udp {
        let e = xbench::client::flow_plan::BindList::iperf3_udp(&a.bind);
        return Err(UsageError(e.to_string()));
    }
    Ok(())
}

/// `-f`/`--unit` where no rate it could apply to is printed: refused, not ignored.
fn refuse_unit_without_rates(a: &ClientArgs) -> Result<(), UsageError> {
    if a.unit.is_none() {
        return Ok(());
    }
    if a.rr || a.crr {
        return Err(UsageError(
            "-f/--unit applies to throughput; a request/response test reports transactions \
             per second and latency"
                .into(),
        ));
    }
    if a.json || a.json_stream {
        return Err(UsageError(format!(
            "-f/--unit does not apply to {}: JSON gives every rate in bits per second; \
             leave out -f, or convert when reading the JSON",
            if a.json { "--json" } else { "--json-stream" }
        )));
    }
    Ok(())
}

/// The server the flags name; `--local` or no host is an in-process one.
fn target(a: &ClientArgs) -> Target {
    Target {
        host: if a.local {
            None
        } else {
            a.host.clone().or_else(|| a.client.clone())
        },
        port: a.port,
        family: if a.ipv4 {
            AddressFamily::V4
        } else if a.ipv6 {
            AddressFamily::V6
        } else {
            AddressFamily::Any
        },
        bind: a.bind.first().copied(),
        // One address is `bind` alone; a list spreads the flows over all of it.
        flow_binds: if a.bind.len() > 1 {
            a.bind.clone()
        } else {
            Vec::new()
        },
        max_connecting: a.max_connecting,
        connect_timeout: a.connect_timeout,
        response_timeout: a.response_timeout,
        per_flow: a.per_flow,
        allow_partial_flows: a.allow_partial_flows,
        trace: a.trace,
        connections_only: a.connections_only.then(|| {
            NonZeroU16::new(a.openers.unwrap_or(xbench::client::DEFAULT_OPENERS))
                .unwrap_or(NonZeroU16::MIN)
        }),
        psk_file: a.psk_file.clone(),
        protocol: match a.iperf3 {
            true => ServerProtocol::Iperf3,
            false => ServerProtocol::Detect,
        },
    }
}

/// How a single test is printed.
fn style(a: &ClientArgs) -> Style {
    if a.json && a.json_format == JsonFormat::Iperf3 {
        Style::Iperf3Json
    } else if a.json {
        Style::Json
    } else if a.json_stream {
        Style::JsonStream
    } else if let Some(fields) = &a.fields {
        Style::Fields(fields.clone(), a.fields_format)
    } else {
        Style::Text
    }
}

/// The test the flags describe; a list's first value stands for the list (a sweep sets each
/// cell's).
fn spec(a: &ClientArgs) -> Result<TestSpec, UsageError> {
    let end = match (a.time, a.bytes) {
        (_, Some(b)) => EndCondition::Bytes(b.0),
        (Some(t), None) => EndCondition::Duration(t),
        (None, None) => EndCondition::Duration(Duration::from_secs(10)),
    };
    let workload = if a.rr || a.crr {
        rr_workload(a)
    } else {
        throughput_workload(a)
    };
    let spec = TestSpec {
        workload,
        end,
        omit: a.omit,
        interval: (!a.interval.is_zero()).then_some(a.interval),
        socket: SocketOptions {
            window: a.window.as_ref().and_then(|l| l.first()).map(|w| w.0),
            mss: a.mss,
            nodelay: a.no_delay,
            congestion: a.congestion.clone(),
        },
    };
    // Flags are typed already; this catches combinations and bounds clap cannot see.
    spec.validate()
        .map_err(|e| UsageError(format!("invalid value for {}: {}", e.field, e.reason)))?;
    Ok(spec)
}

/// The request/response workload (--rr, --crr, --connections-only): sizes, flows, burst and
/// pacing, over UDP with -u.
fn rr_workload(a: &ClientArgs) -> Workload {
    // A UDP request or response holds at least xbench's header.
    let least = if a.udp {
        NonZeroU32::new(xbench::config::UDP_HEADER_LEN).unwrap_or(NonZeroU32::MIN)
    } else {
        NonZeroU32::MIN
    };
    let (request_len, response_len) = a.rr_size.first().copied().unwrap_or((least, least));
    Workload::RequestResponse(RrSpec {
        request_len,
        response_len,
        flows: a
            .flows
            .as_ref()
            .and_then(|l| l.first())
            .unwrap_or(FlowCount::MIN),
        burst: a.burst.unwrap_or(NonZeroU32::MIN),
        connect_per_transaction: a.crr,
        rate_per_flow: a.rate,
        udp: a.udp.then(|| UdpRrSpec {
            timeout: a.rr_timeout.unwrap_or(UdpRrSpec::default().timeout),
        }),
    })
}

/// The throughput workload (TCP, UDP with -u, or the bulk load of --under-load) in the
/// direction the flags ask for.
fn throughput_workload(a: &ClientArgs) -> Workload {
    let direction = if let Some(d) = a.under_load {
        d.direction()
    } else if a.bidir {
        Direction::Bidir
    } else if a.reverse {
        Direction::ServerToClient
    } else {
        Direction::ClientToServer
    };
    let mut tp = ThroughputSpec {
        streams: a
            .parallel
            .as_ref()
            .and_then(|l| l.first())
            .unwrap_or(match a.under_load {
                // A load of one stream is no load for most paths: flent's RRUL runs four
                // each way.
                Some(_) => UNDER_LOAD_STREAMS,
                None => NonZeroU16::MIN,
            }),
        direction,
        zerocopy: a.zerocopy,
        // TCP's -b is per stream already: RATE/stream means the same.
        bitrate: a
            .bitrate
            .as_ref()
            .map(Bitrates::first)
            .filter(|b| *b > 0 && !a.udp),
        receive: if a.recv_copy {
            ReceiveMode::Copy
        } else {
            ReceiveMode::Discard
        },
        ..ThroughputSpec::default()
    };
    if let Some(l) = a.length.as_ref().and_then(|l| l.first()) {
        tp.block_len = l;
    }
    if a.udp {
        tp.udp = Some(udp_spec(a, tp.streams));
    }
    if a.under_load.is_some() {
        tp.under_load = Some(under_load_spec(a));
    }
    Workload::Throughput(tp)
}

/// `--under-load`'s phases and probes: the flags given, the defaults for the rest.
fn under_load_spec(a: &ClientArgs) -> UnderLoadSpec {
    let d = UnderLoadSpec::default();
    UnderLoadSpec {
        idle: a.idle.unwrap_or(d.idle),
        probe_rate: a.probe_rate.unwrap_or(d.probe_rate),
        probe_timeout: a.probe_timeout.unwrap_or(d.probe_timeout),
        tcp_probe: a.tcp_probe,
    }
}

/// Bulk streams per direction of `--under-load` without `-P`.
const UNDER_LOAD_STREAMS: NonZeroU16 = NonZeroU16::MIN.saturating_add(3);

/// `-u`'s datagrams: `-l` (iperf3's 1448 by default) at `-b` for all streams (1 Mbit/s by
/// default, as iperf3; 0 unpaced), or `-b RATE/stream` times the streams. A list's first
/// value stands for the list.
fn udp_spec(a: &ClientArgs, streams: NonZeroU16) -> UdpSpec {
    let d = UdpSpec::default();
    UdpSpec {
        datagram_len: a
            .length
            .as_ref()
            .and_then(|l| l.first())
            .map_or(d.datagram_len, NonZeroU32::get),
        bitrate: match &a.bitrate {
            None => d.bitrate,
            Some(b) => {
                let total = if b.per_stream {
                    b.first().saturating_mul(u64::from(streams.get()))
                } else {
                    b.first()
                };
                (total > 0).then_some(total)
            }
        },
    }
}

/// `xbench ARGS` through the real command line and [`resolve`], for tests of what other code
/// writes as `xbench client` arguments.
#[cfg(test)]
pub(crate) fn resolve_args(args: &[String]) -> Result<Plan, String> {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    let cli = Cli::try_parse_from(std::iter::once("xbench".to_owned()).chain(args.to_vec()))
        .map_err(|e| e.to_string())?;
    let Command::Client(a) = cli.command else {
        return Err("not `xbench client`".into());
    };
    resolve(*a).map_err(|e| e.0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use xbench::config::MAX_DURATION;

    use super::*;

    /// The round trip: `plan` written as arguments, parsed and resolved, is `plan` again
    /// (written one way), or, for a plan of one test, that test.
    #[track_caller]
    fn round_trip(plan: &SweepPlan) {
        let args = plan.client_args().unwrap();
        let resolved = resolve_args(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        match resolved {
            Plan::Sweep(s) => {
                assert!(plan.is_sweep(), "{args:?} ran as a sweep");
                assert_eq!(s.plan, plan.normalized(), "{args:?}");
                assert_eq!(s.plan.cells(), plan.cells(), "{args:?}");
            }
            Plan::Single(s) => {
                assert!(!plan.is_sweep(), "{args:?} ran as one test");
                assert_eq!(s.target, plan.target, "{args:?}");
                assert_eq!([s.spec], plan.cells()[..], "{args:?}");
                assert_eq!(s.label.as_deref(), Some(plan.label.as_str()), "{args:?}");
            }
        }
    }

    fn nz16(v: &[u16]) -> Vec<NonZeroU16> {
        v.iter().map(|&n| NonZeroU16::new(n).unwrap()).collect()
    }

    fn flow_counts(v: &[u32]) -> Vec<FlowCount> {
        v.iter().map(|&n| FlowCount::new(n).unwrap()).collect()
    }

    fn nz32(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    fn key_file() -> PathBuf {
        let p = std::env::temp_dir().join(format!("xbench-plan-key-{}", std::process::id()));
        std::fs::write(&p, "a key of at least sixteen bytes\n").unwrap();
        p
    }

    #[test]
    fn the_defaults_of_the_command_line_are_the_librarys() {
        let Plan::Single(s) = resolve_args(&["client".into()]).unwrap() else {
            panic!("a single test");
        };
        assert_eq!(s.target, Target::local());
        assert_eq!(s.spec, TestSpec::throughput());
        let Plan::Single(s) = resolve_args(&["client".into(), "--rr".into()]).unwrap() else {
            panic!("a single test");
        };
        assert_eq!(s.spec, TestSpec::request_response());
    }

    #[test]
    fn a_plan_written_as_arguments_resolves_to_the_same_plan() {
        let mut every = TestSpec::throughput();
        every.end = EndCondition::Duration(Duration::new(2, 500_000_000));
        every.omit = Duration::from_millis(250);
        every.interval = None;
        every.socket = SocketOptions {
            window: Some(1500),
            mss: Some(1400),
            nodelay: true,
            congestion: Some("bbr".into()),
        };
        every.workload = Workload::Throughput(ThroughputSpec {
            streams: NonZeroU16::new(3).unwrap(),
            direction: Direction::Bidir,
            block_len: nz32(9000),
            zerocopy: true,
            receive: ReceiveMode::Copy,
            bitrate: Some(123_456_789),
            udp: None,
            under_load: None,
        });
        let target = Target {
            host: Some("198.18.0.2".into()),
            port: 5999,
            family: AddressFamily::V4,
            bind: Some("198.18.0.1".parse().unwrap()),
            flow_binds: vec!["198.18.0.1".parse().unwrap(), "198.18.0.3".parse().unwrap()],
            max_connecting: std::num::NonZeroUsize::new(100).unwrap(),
            connect_timeout: Duration::from_millis(1500),
            response_timeout: Duration::from_secs(30),
            psk_file: Some(key_file()),
            protocol: ServerProtocol::Detect,
            per_flow: false,
            allow_partial_flows: false,
            connections_only: None,
            trace: false,
        };
        let mut plans = vec![SweepPlan::new(target.clone(), every.clone(), "path one")];
        // The lab's suite: a stream sweep saved and resumed, and latency.
        let mut p = SweepPlan::new(target.clone(), TestSpec::throughput(), "direct");
        p.streams = nz16(&[1, 2, 4, 8]);
        p.windows = vec![256 << 10];
        p.repeat = nz32(3);
        p.save = Some("/tmp/out dir".into());
        p.resume = true;
        plans.push(p.clone());
        // The same against an iperf3 server (which takes no key).
        p.target.psk_file = None;
        p.target.protocol = ServerProtocol::Iperf3;
        plans.push(p);
        let mut rr = SweepPlan::new(Target::local(), TestSpec::request_response(), "-odd'label");
        rr.repeat = nz32(2);
        rr.pause = Duration::from_secs(30);
        rr.target.per_flow = true;
        plans.push(rr.clone());
        // Every request/response setting, and lists of sizes, flows and windows.
        let mut r = RrSpec {
            request_len: nz32(64),
            response_len: nz32(16 << 10),
            flows: xbench::config::FlowCount::new(4).unwrap(),
            burst: nz32(8),
            connect_per_transaction: false,
            rate_per_flow: Some(333.3),
            udp: None,
        };
        rr.spec.workload = Workload::RequestResponse(r.clone());
        rr.spec.end = EndCondition::Duration(MAX_DURATION);
        rr.rr_sizes = vec![(nz32(1), nz32(1)), (nz32(100), nz32(3 << 20))];
        rr.flows = flow_counts(&[1, 16]);
        rr.windows = vec![64 << 10, 1 << 20];
        plans.push(rr.clone());
        r.connect_per_transaction = true;
        r.burst = NonZeroU32::MIN;
        rr.spec.workload = Workload::RequestResponse(r);
        rr.rr_sizes.clear();
        plans.push(rr);
        // A connection-rate test: held flows, paced openers, a count of openers and the
        // default one.
        let mut c = SweepPlan::new(
            Target::new("nat.example"),
            TestSpec::request_response(),
            "c",
        );
        c.spec.workload = Workload::RequestResponse(RrSpec {
            flows: xbench::config::FlowCount::new(4000).unwrap(),
            rate_per_flow: Some(50.0),
            ..RrSpec::default()
        });
        c.target.connections_only = NonZeroU16::new(64);
        plans.push(c.clone());
        c.target.connections_only = NonZeroU16::new(xbench::client::DEFAULT_OPENERS);
        c.windows = vec![1 << 20];
        plans.push(c);
        // Byte counts, reverse, and one-value lists that are still single tests.
        let mut n = SweepPlan::new(Target::new("h6.example"), TestSpec::throughput(), "n");
        n.spec.end = EndCondition::Bytes(5 << 30);
        if let Workload::Throughput(t) = &mut n.spec.workload {
            t.direction = Direction::ServerToClient;
        }
        n.target.family = AddressFamily::V6;
        n.streams = nz16(&[16]);
        n.windows = vec![4 << 20];
        plans.push(n.clone());
        n.save = Some("runs".into());
        plans.push(n);
        // UDP: lists of rates and datagram sizes, per-stream rates, unpaced, one-value lists.
        let mut u = SweepPlan::new(Target::new("h"), TestSpec::throughput(), "udp");
        if let Workload::Throughput(t) = &mut u.spec.workload {
            t.udp = Some(UdpSpec::default());
            t.direction = Direction::ServerToClient;
        }
        plans.push(u.clone());
        u.bitrates = vec![100_000_000, 200_000_000, 500_000_000];
        u.datagram_lens = vec![64, 1400];
        u.repeat = nz32(5);
        u.save = Some("runs".into());
        plans.push(u.clone());
        u.bitrate_per_stream = true;
        u.streams = nz16(&[1, 4]);
        u.datagram_lens = vec![1400];
        plans.push(u.clone());
        u.bitrates = vec![0, 8_000_000];
        u.bitrate_per_stream = false;
        plans.push(u.clone());
        u.bitrates = vec![10_000_000];
        u.bitrate_per_stream = true;
        u.streams = nz16(&[3]);
        u.repeat = NonZeroU32::MIN;
        u.save = None;
        plans.push(u);

        for plan in &plans {
            round_trip(plan);
            for c in 0..plan.cells().len() {
                round_trip(&plan.cell(c).unwrap());
            }
        }
    }

    /// Many plans made from a fixed seed: every value the flags can hold, mixed.
    #[test]
    fn generated_plans_round_trip() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..300 {
            let mut spec = if next(3) == 0 {
                TestSpec::request_response()
            } else {
                TestSpec::throughput()
            };
            spec.end = EndCondition::Duration(Duration::from_nanos(1 + next(1 << 40)));
            spec.omit = Duration::from_micros(next(10_000_000));
            spec.interval = match next(3) {
                0 => None,
                _ => Some(Duration::from_millis(100 + next(5000))),
            };
            spec.socket.window = (next(2) == 0).then(|| 1024 + next(1 << 29));
            spec.socket.mss = (next(4) == 0).then(|| 88 + next(60_000) as u32);
            spec.socket.nodelay = next(2) == 0;
            let mut plan = SweepPlan::new(Target::new("10.1.2.3"), spec, "gen");
            match &mut plan.spec.workload {
                Workload::Throughput(t) => {
                    t.streams = NonZeroU16::new(1 + next(64) as u16).unwrap();
                    t.block_len = nz32(1 + next(1 << 22) as u32);
                    t.bitrate = (next(2) == 0).then(|| 8_000 + next(1 << 40));
                    t.direction = [
                        Direction::ClientToServer,
                        Direction::ServerToClient,
                        Direction::Bidir,
                    ][next(3) as usize];
                    if next(2) == 0 {
                        plan.streams = nz16(&[1, 1 + next(9) as u16 + 1]);
                    }
                    if next(3) == 0 {
                        plan.spec.end = EndCondition::Bytes(1 + next(1 << 50));
                    }
                }
                Workload::RequestResponse(r) => {
                    r.request_len = nz32(1 + next(1 << 24) as u32);
                    r.response_len = nz32(1 + next(1 << 24) as u32);
                    r.flows = xbench::config::FlowCount::new(1 + next(4096) as u32).unwrap();
                    r.rate_per_flow = (next(2) == 0).then(|| (1 + next(1 << 20)) as f64 / 7.0);
                    r.connect_per_transaction = next(4) == 0;
                    if !r.connect_per_transaction {
                        r.burst = nz32(1 + next(1024) as u32);
                    }
                    if next(2) == 0 {
                        plan.flows = flow_counts(&[2, 3]);
                    }
                }
                _ => unreachable!(),
            }
            plan.repeat = nz32(1 + next(3) as u32);
            plan.pause = Duration::from_millis(next(3) * 1500);
            if next(2) == 0 {
                plan.save = Some("d".into());
                plan.resume = next(2) == 0;
            }
            round_trip(&plan);
        }
    }

    fn resolve(args: &str) -> Result<Plan, String> {
        let args: Vec<String> = args.split_whitespace().map(str::to_owned).collect();
        resolve_args(&args)
    }

    /// `-b RATE/stream` is iperf3's per-stream rate: four streams offer four times as much.
    #[test]
    fn a_per_stream_rate_offers_the_rate_times_the_streams() {
        let Ok(Plan::Single(s)) = resolve("client h -u -P 4 -b 100M/stream") else {
            panic!("a single test");
        };
        let t = s.spec.as_throughput().unwrap();
        assert_eq!(t.udp.unwrap().bitrate, Some(400_000_000));
        let Ok(Plan::Single(s)) = resolve("client h -u -P 4 -b 100M") else {
            panic!("a single test");
        };
        assert_eq!(
            s.spec.as_throughput().unwrap().udp.unwrap().bitrate,
            Some(100_000_000),
            "without /stream, -b is the total"
        );
        // TCP's -b is per stream already.
        let Ok(Plan::Single(s)) = resolve("client h -P 4 -b 100M/stream") else {
            panic!("a single test");
        };
        assert_eq!(s.spec.as_throughput().unwrap().bitrate, Some(100_000_000));
        let Ok(Plan::Sweep(s)) = resolve("client h -u -P 1,2 -b 50M,100M/stream") else {
            panic!("a sweep");
        };
        let totals: Vec<Option<u64>> = s
            .plan
            .cells()
            .iter()
            .map(|c| c.as_throughput().unwrap().udp.unwrap().bitrate)
            .collect();
        assert_eq!(
            totals,
            [
                Some(50_000_000),
                Some(100_000_000),
                Some(100_000_000),
                Some(200_000_000)
            ]
        );
    }

    #[test]
    fn udp_lists_and_bad_rates_are_usage_errors() {
        for (args, words) in [
            ("client h -b 1M,2M", "sweeps UDP tests only"),
            ("client h -l 64,1400 --repeat 2", "sweeps UDP tests only"),
            ("client h -u -b 1M/2", "burst"),
            ("client h -u -b 1M/stream,2M", "not understood"),
            ("client h -u -b 1M,1M", "listed twice"),
            ("client h -u -b 8,1M -l 64", "-b"),
            ("client h -u -l 8,1400 -b 1M", "-l"),
        ] {
            let e = resolve(args)
                .err()
                .unwrap_or_else(|| panic!("{args}: accepted"));
            assert!(e.contains(words), "{args}: {e}");
        }
    }

    /// `--start-at`: a near instant is kept; one long past, far ahead, not a number, or in a
    /// sweep is refused.
    #[test]
    fn start_at_takes_a_near_instant_of_one_test() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let Ok(Plan::Single(s)) = resolve(&format!("client h --start-at {:.3}", now + 3.0)) else {
            panic!("a single test");
        };
        let at = s.start_at.unwrap();
        let ahead = at.duration_since(std::time::SystemTime::now()).unwrap();
        assert!(
            ahead > Duration::from_secs(2) && ahead <= Duration::from_secs(3),
            "{ahead:?}"
        );
        for (args, words) in [
            (
                format!("client h --start-at {:.0}", now - 60.0),
                "in the past",
            ),
            (format!("client h --start-at {:.0}", now + 7200.0), "ahead"),
            ("client h --start-at soon".to_owned(), "Unix seconds"),
            (
                format!("client h -P 1,2 --start-at {:.0}", now + 5.0),
                "sweep",
            ),
        ] {
            let e = resolve(&args)
                .err()
                .unwrap_or_else(|| panic!("{args}: accepted"));
            assert!(e.contains(words), "{args}: {e}");
        }
    }
}
