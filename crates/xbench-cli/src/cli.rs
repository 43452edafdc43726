//! The command line: every clap structure of every subcommand, and nothing else. Values are
//! parsed by `parse`; `plan` resolves `xbench client`'s flags into what to run, and `cmd/` turns
//! the other subcommands' into library configuration, so each flag's meaning is in one place
//! and the library never sees clap.

use std::net::IpAddr;
use std::num::{NonZeroU16, NonZeroU32};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use xbench::units::ByteSize;
use xbench_lab::PathKind;

use crate::parse;

/// Parses the process's arguments, or exits: status 0 for `--help` and `--version`, 2 with a
/// message naming the flag for anything wrong. iperf3's `-c HOST` and `-s` in front of any
/// subcommand name it (`crate::iperf3_habits`).
pub(crate) fn parse() -> Cli {
    let args = crate::iperf3_habits::rewrite(std::env::args_os().collect());
    let mut cli = Cli::try_parse_from(&args).unwrap_or_else(|e| explain(e, &args).exit());
    if let Command::Client(a) = &mut cli.command
        && let Some(note) = a.apply_format()
    {
        eprintln!("warning: {note}");
    }
    cli
}

/// clap's message, with a tip where our own words say more than clap's: which flags need
/// `--rr`, and what `--local` with a host means.
fn explain(mut e: clap::Error, args: &[std::ffi::OsString]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let has = |kind, what: &str| match e.get(kind) {
        Some(ContextValue::String(s)) => s == what,
        Some(ContextValue::Strings(v)) => v.iter().any(|s| s == what),
        _ => false,
    };
    let tip = match e.kind() {
        ErrorKind::MissingRequiredArgument
            if has(ContextKind::InvalidArg, "<--rr|--crr|--connections-only>") =>
        {
            // Which flag asked for it: the arguments as far as clap can read them.
            let matches = Cli::command()
                .ignore_errors(true)
                .try_get_matches_from(args)
                .ok();
            let client = matches
                .as_ref()
                .and_then(|m| m.subcommand_matches("client"));
            let given = [
                ("rr_size", "-r"),
                ("flows", "--flows"),
                ("burst", "--burst"),
                ("rate", "--rate"),
                ("hist", "--hist"),
            ]
            .into_iter()
            .find(|(id, _)| {
                client.is_some_and(|c| {
                    c.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
                })
            })
            .map_or("this flag", |(_, flag)| flag);
            Some(format!(
                "{given} applies to request/response tests; add --rr or --crr (or \
                 --connections-only for a connection-rate test)"
            ))
        }
        ErrorKind::ArgumentConflict
            if (has(ContextKind::InvalidArg, "--crr") && has(ContextKind::PriorArg, "--udp"))
                || (has(ContextKind::InvalidArg, "--udp")
                    && has(ContextKind::PriorArg, "--crr")) =>
        {
            Some(
                "--crr opens a TCP connection per transaction and UDP has none; for UDP \
                 request/response latency use --rr -u"
                    .to_owned(),
            )
        }
        ErrorKind::ArgumentConflict
            if (has(ContextKind::InvalidArg, "--local")
                && has(ContextKind::PriorArg, "[HOST]"))
                || (has(ContextKind::InvalidArg, "[HOST]")
                    && has(ContextKind::PriorArg, "--local")) =>
        {
            Some(
                "--local runs against an in-process server; leave out the host, or drop --local"
                    .to_owned(),
            )
        }
        _ => None,
    };
    if let Some(tip) = tip {
        e.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![tip.into()]),
        );
    }
    e
}

/// Network throughput and latency between two hosts, with the TCP state that explains the figures.
#[derive(Debug, Parser)]
#[command(name = "xbench", version, about, max_term_width = 100)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a test against an `xbench server` (or an in-process one with --local).
    Client(Box<ClientArgs>),
    /// Serve tests on a port until stopped.
    Server(ServerArgs),
    /// Emulated cloud paths (peering, transit hop, software VPN) in network namespaces.
    Lab(LabArgs),
    /// Compare saved runs (sweeps, repeats, iperf3 -J files) in one table, and chart them.
    Report(ReportArgs),
    /// Check a candidate sweep against a baseline for regressions (exit 1 names the cell).
    Compare(CompareArgs),
    /// Print the completion script of a shell (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the manual page (roff), or write every page to a directory with --dir.
    Man(ManArgs),
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for a log system.
    Json,
}

/// The layout of `xbench client --json`'s document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub(crate) enum JsonFormat {
    /// xbench's report (crates/xbench/schema/report.schema.json).
    #[default]
    Xbench,
    /// iperf3 3.12's `-J` document.
    Iperf3,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("end").args(["time", "bytes"]))]
#[command(group = clap::ArgGroup::new("dir").args(["reverse", "bidir"]))]
#[command(group = clap::ArgGroup::new("output").args(["json", "json_stream", "fields"]))]
#[command(group = clap::ArgGroup::new("latency").args(["rr", "crr", "connections_only"]))]
pub(crate) struct ClientArgs {
    /// Server host name or address. Leave out (or pass --local) to test against an in-process
    /// server on loopback.
    pub(crate) host: Option<String>,

    /// Run against an in-process server on 127.0.0.1: a measurement with no other setup.
    #[arg(long, conflicts_with = "host")]
    pub(crate) local: bool,

    /// The server, as iperf3 names it: `xbench -c HOST` and `xbench client -c HOST` are
    /// `xbench client HOST`.
    #[arg(short = 'c', long = "client", value_name = "HOST", hide = true,
          conflicts_with_all = ["host", "local"])]
    pub(crate) client: Option<String>,

    /// Server port.
    #[arg(short = 'p', long, default_value_t = xbench::client::DEFAULT_PORT)]
    pub(crate) port: u16,

    /// Parallel streams (TCP connections) per direction [default: 1; 4 with --under-load]; a
    /// list (1,2,4,8) sweeps.
    #[arg(allow_negative_numbers = true, short = 'P', long = "parallel", value_name = "N[,N…]", value_parser = parse::streams_list)]
    pub(crate) parallel: Option<parse::List<NonZeroU16>>,

    /// Test length: seconds, or with a unit (500ms, 10s, 2m) [default: 10].
    #[arg(allow_negative_numbers = true, short = 't', long = "time", value_name = "SECS", value_parser = parse::positive_duration)]
    pub(crate) time: Option<Duration>,

    /// Bytes to send per direction instead of a duration (e.g. 1G, 500M).
    #[arg(allow_negative_numbers = true, short = 'n', long = "bytes", value_name = "BYTES", value_parser = parse::size)]
    pub(crate) bytes: Option<ByteSize>,

    /// Seconds between interval reports; 0 for none.
    #[arg(allow_negative_numbers = true, short = 'i', long = "interval", value_name = "SECS", default_value = "1", value_parser = parse::interval)]
    pub(crate) interval: Duration,

    /// Leave the first SECS out of the totals (TCP slow start).
    #[arg(allow_negative_numbers = true, short = 'O', long = "omit", value_name = "SECS", default_value = "0", value_parser = parse::duration)]
    pub(crate) omit: Duration,

    /// Reverse: the server sends, the client receives.
    #[arg(short = 'R', long)]
    pub(crate) reverse: bool,

    /// Both directions at once, -P streams each way.
    #[arg(long)]
    pub(crate) bidir: bool,

    /// Bytes per write/read call (default 128K); with -u, bytes of UDP payload per datagram,
    /// xbench's 24-byte header included (default 1448; above 1472 a 1500-byte-MTU path
    /// fragments them); with -u, a list (64,1400) sweeps.
    #[arg(allow_negative_numbers = true, short = 'l', long = "length", value_name = "LEN[,…]", value_parser = parse::length_list)]
    pub(crate) length: Option<parse::List<NonZeroU32>>,

    /// Socket buffer size on both ends, which bounds the TCP window (needs a unit: 256K, 4M);
    /// a list (64K,256K,1M) sweeps.
    #[arg(allow_negative_numbers = true, short = 'w', long = "window", value_name = "BYTES[,…]", value_parser = parse::window_list)]
    pub(crate) window: Option<parse::List<ByteSize>>,

    /// TCP maximum segment size, bytes.
    #[arg(allow_negative_numbers = true, short = 'M', long = "set-mss", value_name = "MSS", value_parser = parse::mss)]
    pub(crate) mss: Option<u32>,

    /// Most each stream sends, bits per second (e.g. 100M); the kernel paces the connection;
    /// 0 for no cap. With -u: the total of all streams of a direction, each sending an equal
    /// share as evenly paced datagrams [default: 1M, as iperf3]; 0 sends unpaced. RATE/stream
    /// is per stream, as iperf3's -b: -u -P 4 -b 100M/stream offers 400 Mbit/s in total.
    /// With -u, a list (100M,200M,500M, or 10M,50M/stream) sweeps.
    #[arg(short = 'b', long = "bitrate", value_name = "BITRATE[,…][/stream]", value_parser = parse::bitrate_arg)]
    pub(crate) bitrate: Option<parse::Bitrates>,

    /// UDP instead of TCP: numbered, paced datagrams, each counted at the receiver (loss,
    /// reordering, duplicates, jitter, the kernel's receive-buffer drops). -b is then the total
    /// of all streams [default 1M, like iperf3] and -l the datagram size.
    #[arg(short = 'u', long = "udp",
          conflicts_with_all = ["crr", "zerocopy", "bytes", "recv_copy", "mss", "no_delay", "congestion"])]
    pub(crate) udp: bool,

    /// Prove to the server that this client holds the key in FILE (the server's --psk-file).
    #[arg(long, value_name = "FILE")]
    pub(crate) psk_file: Option<PathBuf>,

    /// The server is iperf3 (3.x): speak its protocol. TCP and UDP (-u) throughput, -t and -O
    /// in whole seconds. Without it a server that stays silent to xbench's greeting is probed
    /// for iperf3 after 5 s.
    #[arg(long, conflicts_with_all = ["rr", "crr", "connections_only", "psk_file", "local"])]
    pub(crate) iperf3: bool,

    /// Disable Nagle's algorithm (TCP_NODELAY).
    #[arg(short = 'N', long = "no-delay")]
    pub(crate) no_delay: bool,

    /// Congestion control algorithm on both ends (e.g. cubic, bbr).
    #[arg(short = 'C', long = "congestion", value_name = "ALGO")]
    pub(crate) congestion: Option<String>,

    /// Send with sendfile(2) instead of copying from user space (less sender CPU).
    #[arg(short = 'Z', long = "zerocopy")]
    pub(crate) zerocopy: bool,

    /// Receivers copy the data into user space as an application (and iperf3) does. By
    /// default they let the kernel drop it after TCP has accepted it (MSG_TRUNC), which costs
    /// less CPU and changes nothing on the wire.
    #[arg(long)]
    pub(crate) recv_copy: bool,

    /// IPv4 only.
    #[arg(short = '4', long = "version4", conflicts_with = "ipv6")]
    pub(crate) ipv4: bool,

    /// IPv6 only.
    #[arg(short = '6', long = "version6")]
    pub(crate) ipv6: bool,

    /// Local address to send from. A comma list spreads the data over the addresses,
    /// round-robin by flow or stream (--rr and --crr flows, --connections-only's held flows and
    /// openers, -P streams, UDP, iperf3 TCP): each brings its own ephemeral ports, so more
    /// flows fit than one port range holds (the control connection uses the first). Refused
    /// for --iperf3 -u.
    #[arg(
        short = 'B',
        long = "bind",
        value_name = "ADDR[,ADDR…]",
        value_delimiter = ','
    )]
    pub(crate) bind: Vec<IpAddr>,

    /// Most data connections being opened at once; the others wait for a handshake to finish,
    /// so thousands of flows do not overrun the server's SYN and accept queues (the default
    /// is half an xbench server's listen backlog).
    #[arg(long, value_name = "N", default_value_t = xbench::client::DEFAULT_MAX_CONNECTING)]
    pub(crate) max_connecting: std::num::NonZeroUsize,

    /// Seconds to wait for each connection to open. With --connections-only, also how long
    /// each new connection has from connect() to its answer before it counts as timed out.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse::positive_duration)]
    pub(crate) connect_timeout: Duration,

    /// Start the test at this wall-clock instant (Unix seconds, fractions allowed), so that
    /// clients on several machines measure one window (xbench-deploy's fleets): the client
    /// connects and completes its handshake up to 5 s ahead, then asks for the test at the
    /// instant. Refused more than 5 s in the past or more than an hour ahead.
    #[arg(long, value_name = "UNIX_SECS", value_parser = parse::start_at)]
    pub(crate) start_at: Option<std::time::SystemTime>,

    /// A name for this path or run, carried into the report.
    #[arg(long, value_name = "NAME")]
    pub(crate) label: Option<String>,

    /// Print one JSON document at the end.
    #[arg(short = 'J', long)]
    pub(crate) json: bool,

    /// Layout of --json's document: xbench's own report, or iperf3 3.12's -J shape (start,
    /// intervals, end.sum_sent, end.sum_received, end.streams, cpu_utilization_percent…) for
    /// scripts written for iperf3; TCP and UDP throughput tests. --json-file keeps xbench's
    /// report. Which figure fills which iperf3 key: docs/iperf3.md, "iperf3's JSON".
    #[arg(long, value_enum, default_value_t, value_name = "LAYOUT")]
    pub(crate) json_format: JsonFormat,

    /// Print one JSON event per line as the test runs.
    #[arg(long)]
    pub(crate) json_stream: bool,

    /// Also write the JSON report to FILE (written even when the test is interrupted).
    #[arg(long, value_name = "FILE")]
    pub(crate) json_file: Option<PathBuf>,

    /// Unit of every rate printed: kbit/s, Mbit/s, Gbit/s, MB/s, MiB/s…, or iperf3's -f
    /// letters: k m g t for bits (powers of 1000), K M G T for bytes (powers of 1024)
    /// [default: each figure, and each table, in the unit that suits it]. JSON stays in bits/s.
    #[arg(short = 'f', long = "unit", value_name = "UNIT", value_parser = parse::throughput_unit)]
    pub(crate) unit: Option<xbench_report::ThroughputUnit>,

    /// Output format, as in every xbench command: text (lines, then a summary) or json (one
    /// document at the end, as --json). A rate unit here is read as --unit, with a warning:
    /// --format was --unit's other name before it meant the output format.
    #[arg(long, value_name = "FORMAT", value_parser = parse::client_format,
          conflicts_with_all = ["json_stream", "fields"])]
    pub(crate) format: Option<parse::ClientFormat>,

    /// Request/response latency over persistent connections (netperf's TCP_RR).
    #[arg(long, help_heading = "Request/response (latency)",
          conflicts_with_all = ["reverse", "bidir", "bytes", "zerocopy", "length", "recv_copy", "parallel"])]
    pub(crate) rr: bool,

    /// A new connection for every transaction: connect, request, response, close (TCP_CRR).
    #[arg(long, help_heading = "Request/response (latency)",
          conflicts_with_all = ["reverse", "bidir", "bytes", "zerocopy", "length", "recv_copy", "parallel", "burst"])]
    pub(crate) crr: bool,

    /// Connection rate: hold --flows connections open and, for the test's length, open new
    /// ones --openers at a time (connect, 1-byte request and answer, close), reporting
    /// connections/s and each one's setup latency; the held flows are checked at the end.
    #[arg(long, help_heading = "Request/response (latency)",
          conflicts_with_all = ["reverse", "bidir", "bytes", "zerocopy", "length", "recv_copy",
                                "parallel", "burst", "udp", "rr_size", "bitrate", "per_flow"])]
    pub(crate) connections_only: bool,

    /// With --connections-only: new connections being opened at any one time [default: 16];
    /// with --rate, each opener's pace.
    #[arg(long, value_name = "K", requires = "connections_only",
          value_parser = clap::value_parser!(u16).range(1..), help_heading = "Request/response (latency)")]
    pub(crate) openers: Option<u16>,

    /// Request and response sizes, bytes [default: 1,1] (e.g. 64,16K); repeat the flag to
    /// sweep (-r 1,1 -r 64,16K).
    #[arg(short = 'r', long = "rr-size", value_name = "REQ,RESP", action = clap::ArgAction::Append,
          value_parser = parse::rr_sizes, requires = "latency", help_heading = "Request/response (latency)")]
    pub(crate) rr_size: Vec<(NonZeroU32, NonZeroU32)>,

    /// Concurrent request/response connections [default: 1], up to 65536 (more than one
    /// address's ephemeral ports need a -B list); a list (1,4,16) sweeps.
    #[arg(long, value_name = "N[,N…]", value_parser = parse::flows_list, requires = "latency",
          allow_negative_numbers = true, help_heading = "Request/response (latency)")]
    pub(crate) flows: Option<parse::List<xbench::config::FlowCount>>,

    /// Transactions in flight per connection [default: 1, strict ping-pong].
    #[arg(long, value_name = "K", value_parser = parse::burst, requires = "latency",
          allow_negative_numbers = true, help_heading = "Request/response (latency)")]
    pub(crate) burst: Option<NonZeroU32>,

    /// Pace each flow: transactions per second (200), or the time between them like netperf's
    /// -w (10ms). Latency is then measured from each transaction's intended send time.
    #[arg(long, value_name = "TPS|INTERVAL", value_parser = parse::rate, requires = "latency",
          allow_negative_numbers = true, help_heading = "Request/response (latency)")]
    pub(crate) rate: Option<f64>,

    /// With --rr -u: a request unanswered this long is counted as lost, and its flow goes on
    /// with the next one; a response arriving later is counted as late [default: 1s].
    #[arg(long, value_name = "SECS", value_parser = parse::positive_duration, requires = "udp",
          help_heading = "Request/response (latency)")]
    pub(crate) rr_timeout: Option<Duration>,

    /// A flow waiting this long for a response fails the test: the server stopped answering.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse::positive_duration,
          help_heading = "Request/response (latency)")]
    pub(crate) response_timeout: Duration,

    /// Report each flow's own latency: count, min, mean, max and a p99 (within 6.25 %, from
    /// a 1.3 KB sketch per flow). Without it a flow reports its counts only; the latency
    /// figures are all flows' merged histograms either way.
    #[arg(
        long,
        requires = "latency",
        help_heading = "Request/response (latency)"
    )]
    pub(crate) per_flow: bool,

    /// When the server takes fewer flows than --flows (its --max-flows), measure the flows it
    /// takes and say so, instead of failing. Off, such a test exits 1 naming the limit: a
    /// connection limit on the path (a load balancer's, a NAT's) is a finding, not noise.
    #[arg(
        long,
        requires = "latency",
        help_heading = "Request/response (latency)"
    )]
    pub(crate) allow_partial_flows: bool,

    /// While the test runs, probe its path's hops (rising TTLs on the test's protocol, from one
    /// source port to the server's, a few probes a second, no root) and report each hop's
    /// address, name, loss and RTT after the summary, as mtr's report does.
    #[arg(long)]
    pub(crate) trace: bool,

    /// Write the latency histograms as an HdrHistogram interval log to FILE, and the
    /// percentile distribution to FILE.hgrm.
    #[arg(
        long,
        value_name = "FILE",
        requires = "latency",
        help_heading = "Request/response (latency)"
    )]
    pub(crate) hist: Option<PathBuf>,

    /// Print only these figures, netperf-style (like netperf -O), e.g.
    /// min_latency,mean_latency,max_latency,stddev_latency,transaction_rate.
    #[arg(long, value_name = "LIST", value_parser = parse::fields, help_heading = "Request/response (latency)")]
    pub(crate) fields: Option<crate::render::netperf::FieldList>,

    /// Layout of --fields: columns (netperf -O), csv (-o) or keyval (-k).
    #[arg(
        long,
        value_enum,
        default_value_t,
        requires = "fields",
        help_heading = "Request/response (latency)"
    )]
    pub(crate) fields_format: crate::render::netperf::Format,

    /// Latency under load: latency probes while the path rests, then while -P TCP streams
    /// load it in DIR (up, down or both: -P each way), then at rest again; -t is the load's
    /// length, -O its ramp. Reports the latency the load adds and the responsiveness (RPM).
    #[arg(long, value_enum, value_name = "DIR", help_heading = "Latency under load",
          conflicts_with_all = ["reverse", "bidir", "udp", "bytes", "latency", "iperf3"])]
    pub(crate) under_load: Option<LoadDirection>,

    /// Seconds each idle phase lasts, before and after the load [default: 3].
    #[arg(long, value_name = "SECS", value_parser = parse::positive_duration,
          requires = "under_load", help_heading = "Latency under load")]
    pub(crate) idle: Option<Duration>,

    /// UDP latency probes a second, paced evenly (1 to 100) [default: 20].
    #[arg(
        long,
        value_name = "N",
        requires = "under_load",
        help_heading = "Latency under load"
    )]
    pub(crate) probe_rate: Option<f64>,

    /// A probe unanswered this long is lost [default: 3].
    #[arg(long, value_name = "SECS", value_parser = parse::positive_duration,
          requires = "under_load", help_heading = "Latency under load")]
    pub(crate) probe_timeout: Option<Duration>,

    /// Also probe with TCP request/response on a connection of its own, at the same rate.
    #[arg(long, requires = "under_load", help_heading = "Latency under load")]
    pub(crate) tcp_probe: bool,

    #[command(flatten)]
    pub(crate) sweep: SweepArgs,
}

/// Which way `--under-load`'s bulk streams load the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LoadDirection {
    /// The client sends (uploads).
    Up,
    /// The server sends (downloads).
    Down,
    /// Both at once, -P streams each way (as flent's RRUL).
    Both,
}

impl LoadDirection {
    /// The bulk streams' direction.
    pub(crate) fn direction(self) -> xbench::config::Direction {
        use xbench::config::Direction;
        match self {
            LoadDirection::Up => Direction::ClientToServer,
            LoadDirection::Down => Direction::ServerToClient,
            LoadDirection::Both => Direction::Bidir,
        }
    }
}

impl ClientArgs {
    /// Folds `--format` into the flags it stands for: `json` is `--json`; a rate unit (the
    /// flag's meaning before it named the output format everywhere) is `--unit`, and the
    /// returned note says so.
    pub(crate) fn apply_format(&mut self) -> Option<String> {
        match self.format.take()? {
            parse::ClientFormat::Text => None,
            parse::ClientFormat::Json => {
                self.json = true;
                None
            }
            parse::ClientFormat::Unit(u) => {
                let given = self.unit.get_or_insert(u);
                Some(format!(
                    "--format now names the output format (text or json) in every xbench \
                     command; read as the rate unit this once: write --unit {} (or -f)",
                    given.label()
                ))
            }
        }
    }
}

/// Sweeps and repeats: any list above, --repeat or --save makes a client run a sweep.
#[derive(Debug, Args)]
#[command(next_help_heading = "Sweeps and repeats")]
pub(crate) struct SweepArgs {
    /// Run every cell of the sweep N times, round-robin over the cells to spread drift.
    #[arg(long, value_name = "N", value_parser = parse::repeat)]
    pub(crate) repeat: Option<NonZeroU32>,

    /// Wait this long between two runs (e.g. 30s, 5m).
    #[arg(long, value_name = "SECS", value_parser = parse::duration)]
    pub(crate) pause: Option<Duration>,

    /// Save each finished run to DIR/LABEL/CELL/run-N.json as it finishes.
    #[arg(long, value_name = "DIR")]
    pub(crate) save: Option<PathBuf>,

    /// Complete an interrupted sweep: skip the runs already saved under --save.
    #[arg(long, requires = "save")]
    pub(crate) resume: bool,
}

/// Table formats of `xbench report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TableFormat {
    /// Aligned columns.
    Text,
    /// Markdown tables.
    #[value(alias = "markdown")]
    Md,
    /// One line per row and metric.
    Csv,
    /// One JSON document (schema: crates/xbench-report/schema/comparison.schema.json).
    Json,
}

/// Charts of `xbench report --plot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ChartArg {
    /// Throughput vs parallel streams, one line per path, 95 % CI bars.
    Streams,
    /// Throughput vs window size beside the window ÷ RTT ceiling.
    Window,
    /// Request/response latency by percentile, one curve per path.
    Latency,
    /// Runs per interval: throughput, congestion windows, retransmits. Several runs are
    /// overlaid, a line per run (at most 12, shared between the paths).
    Timeline,
    /// UDP loss and jitter vs the offered rate (-b), one line per path, 95 % CI bars.
    Udp,
    /// Latency under load (--under-load): the probes' median over time with the load's
    /// phases shaded, one line per path, and idle against loaded latency by percentile.
    UnderLoad,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Directories of saved runs (xbench client --save) or result files, xbench JSON or
    /// iperf3 -J; the directory right below each one names the path (its label).
    #[arg(value_name = "DIR", required = true)]
    pub(crate) paths: Vec<PathBuf>,

    /// Table format.
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) format: TableFormat,

    /// Also draw a chart to FILE (.svg or .png).
    #[arg(long, value_name = "FILE")]
    pub(crate) plot: Option<PathBuf>,

    /// Which chart [default: udp for UDP runs, streams if -P varies, else window if -w
    /// varies, else latency for request/response runs, else the timeline]. A timeline of one run shows each
    /// stream's congestion window; of several, a line per run in every panel ("vpn run 3"),
    /// the window summed over the run's streams. Name the runs to overlay by the DIRs or
    /// files given.
    #[arg(long, value_enum, requires = "plot")]
    pub(crate) chart: Option<ChartArg>,

    /// Throughput unit: Mbit/s, Gbit/s, MB/s, MiB/s…, or iperf3's -f letters (k m g t bits,
    /// K M G T bytes in powers of 1024) [default: the unit that suits each table's and
    /// chart's largest figure; Mbit/s in csv]. JSON stays in bits per second.
    #[arg(short = 'f', long, value_name = "UNIT", value_parser = parse::throughput_unit)]
    pub(crate) unit: Option<xbench_report::ThroughputUnit>,

    /// A link's capacity, bits per second as -b takes them (1G, 500M): a labelled line on the
    /// throughput charts, and each row's share of it in text, md and csv tables.
    #[arg(long, value_name = "RATE", value_parser = parse::bitrate)]
    pub(crate) ceiling: Option<u64>,

    /// Also write the whole comparison as one self-contained web page to FILE: a verdict per
    /// cell, every chart (hover a point, click a path in the key to hide it), sortable tables
    /// with CIs, each path's TCP state and warnings, links to the runs, the commands. It
    /// fetches nothing; open it from disk or send it as an attachment.
    #[arg(long, value_name = "FILE")]
    pub(crate) html: Option<PathBuf>,

    /// The web page's title [default: "Path comparison: " and the paths].
    #[arg(long, value_name = "TEXT", requires = "html")]
    pub(crate) title: Option<String>,

    /// Largest result file read (e.g. 2G): a larger one is skipped with a warning naming it,
    /// so that a stray huge file cannot take the machine's memory. Only regular files are
    /// read; FIFOs and devices are skipped.
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse::size)]
    pub(crate) max_file_size: xbench::units::ByteSize,
}

#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    /// iperf3's server flag: `xbench -s` and `xbench server -s` are `xbench server`.
    #[arg(short = 's', long = "server", hide = true)]
    pub(crate) server: bool,

    /// Port to listen on.
    #[arg(short = 'p', long, default_value_t = xbench::client::DEFAULT_PORT)]
    pub(crate) port: u16,

    /// Address to listen on (repeatable); default all IPv4 and IPv6 addresses.
    #[arg(short = 'B', long = "bind", value_name = "ADDR")]
    pub(crate) bind: Vec<IpAddr>,

    /// Exit after one completed test.
    #[arg(short = '1', long)]
    pub(crate) one_off: bool,

    /// Most data connections (threads) one throughput test may open.
    #[arg(long, value_name = "N", default_value_t = xbench::Limits::default().max_streams,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) max_streams: u16,

    /// Largest block (-l) a throughput test may ask for, bytes (e.g. 4M).
    #[arg(long, value_name = "BYTES", default_value = "4M", value_parser = parse::block_len)]
    pub(crate) max_block_len: std::num::NonZeroU32,

    /// Most connections one request/response test may hold open at once [default: what one
    /// client address's share of the open-file limit holds, at most 65536].
    #[arg(long, value_name = "N", value_parser = parse::max_flows)]
    pub(crate) max_flows: Option<u32>,

    /// Longest test accepted, warm-up included: seconds, or with a unit (up to a week).
    #[arg(long, value_name = "SECS", default_value = "3600", value_parser = parse::max_duration)]
    pub(crate) max_duration: Duration,

    /// Most tests running at once.
    #[arg(long, value_name = "N", default_value_t = xbench::Limits::default().max_tests,
          value_parser = clap::builder::ValueParser::new(parse::at_least_one))]
    pub(crate) max_tests: usize,

    /// Most tests running at once from one client address.
    #[arg(long, value_name = "N", default_value_t = xbench::Limits::default().max_tests_per_client,
          value_parser = clap::builder::ValueParser::new(parse::at_least_one))]
    pub(crate) max_tests_per_client: usize,

    /// Most threads all tests together may run (a thread per throughput stream, a few
    /// workers per request/response test); a test beyond it is refused.
    #[arg(long, value_name = "N", default_value_t = xbench::Limits::default().max_threads,
          value_parser = clap::builder::ValueParser::new(parse::at_least_one))]
    pub(crate) max_threads: usize,

    /// Most of each shared budget (descriptors, threads, connections in their handshake) one
    /// client address may hold, so one client cannot lock the others out (e.g. 50%).
    #[arg(long, value_name = "PERCENT", default_value = "50%", value_parser = parse::client_share)]
    pub(crate) client_share: u8,

    /// Most connections still in their handshake; beyond it a new client is told the server
    /// is busy, and other connections are closed [default: 8192, or half the open-file limit
    /// if that is less].
    #[arg(long, value_name = "N",
          value_parser = clap::builder::ValueParser::new(parse::at_least_one))]
    pub(crate) max_handshakes: Option<usize>,

    /// Most the server sends in total across all tests (e.g. 5G); its sending streams share it.
    #[arg(long, value_name = "BITRATE", value_parser = parse::bitrate)]
    pub(crate) max_send_rate: Option<u64>,

    /// End a running test after this many seconds in which no data moved.
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse::positive_duration)]
    pub(crate) idle_timeout: Duration,

    /// Require clients to prove they hold the key in FILE (HMAC-SHA256 challenge-response;
    /// the key never crosses the network). Without it the server is open to anyone, as
    /// iperf3's is.
    #[arg(long, value_name = "FILE")]
    pub(crate) psk_file: Option<PathBuf>,

    /// Only these client networks may connect (e.g. 10.0.0.0/8,192.168.1.7), to tests and to
    /// --metrics; repeatable.
    #[arg(long, value_name = "CIDR,...", value_delimiter = ',', value_parser = parse::network)]
    pub(crate) allow: Vec<ipnet::IpNet>,

    /// Serve the server's counters for a scraper (Prometheus, OpenMetrics text) at
    /// http://ADDR:PORT/metrics: tests started, finished, refused and running, bytes and
    /// datagrams moved, failed handshakes, CPU. Off by default; --allow applies.
    #[arg(long, value_name = "ADDR:PORT")]
    pub(crate) metrics: Option<std::net::SocketAddr>,

    /// On SIGINT/SIGTERM, seconds running tests may continue before they are cut short.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse::duration)]
    pub(crate) shutdown_grace: Duration,

    /// Log line format (--format, as in every xbench command, is the same flag).
    #[arg(long, visible_alias = "format", value_enum, default_value_t)]
    pub(crate) log_format: LogFormat,
}

/// Check a candidate sweep against a baseline sweep for regressions, per cell and path.
#[derive(Debug, Args)]
pub(crate) struct CompareArgs {
    /// Saved runs to compare against (`xbench client … --save DIR`), a directory or files.
    #[arg(value_name = "BASELINE")]
    pub(crate) baseline: PathBuf,

    /// Saved runs to check.
    #[arg(value_name = "CANDIDATE")]
    pub(crate) candidate: PathBuf,

    /// Largest result file read (e.g. 2G): a larger one is skipped with a warning naming it,
    /// so that a stray huge file cannot take the machine's memory. Only regular files are
    /// read; FIFOs and devices are skipped.
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse::size)]
    pub(crate) max_file_size: xbench::units::ByteSize,

    /// Figures to check, comma-separated or repeated: throughput, tps, p50, p90, p99, p99.9,
    /// mean, and for UDP cells loss (% of datagrams) and jitter; throughput is a UDP cell's
    /// received rate. For --under-load cells, increase (loaded minus idle median) and rpm;
    /// there p50–p99 and loss are the loaded probes' and throughput the load's. Each is
    /// checked in the cells that carry it [default: throughput,p99,loss,increase].
    #[arg(long, value_name = "METRIC", value_delimiter = ',', value_parser = parse::metric)]
    pub(crate) metric: Vec<xbench_report::compare::Metric>,

    /// Loss allowed before a cell counts as regressed, percent of the baseline: throughput
    /// may fall, and latency rise, by this much.
    #[arg(long, value_name = "PERCENT", default_value = "5%", value_parser = parse::max_regression)]
    pub(crate) max_regression: f64,

    /// Confidence a regression must be shown with, percent.
    #[arg(long, value_name = "PERCENT", default_value = "95%", value_parser = parse::confidence)]
    pub(crate) confidence: f64,
}

/// Print a shell's completion script for xbench.
///
/// bash: `xbench completions bash > ~/.local/share/bash-completion/completions/xbench`;
/// zsh: `xbench completions zsh > ~/.zfunc/_xbench` (with `~/.zfunc` in `fpath`);
/// fish: `xbench completions fish > ~/.config/fish/completions/xbench.fish`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

/// Print xbench's manual page, or write every page (xbench.1, xbench-client.1, …) to a directory.
///
/// Read one with `xbench man client | man -l -`.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// The subcommand whose page to print (e.g. client, or lab run) [default: xbench(1)].
    #[arg(value_name = "SUBCOMMAND")]
    pub(crate) command: Vec<String>,

    /// Write every page into DIR (created if missing) instead of printing one.
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
}

/// Emulated cloud paths (peering, a transit hop, a software VPN) in network namespaces.
#[derive(Debug, Args)]
pub(crate) struct LabArgs {
    #[command(subcommand)]
    pub(crate) command: LabCommand,
}

#[derive(Debug, Subcommand)]
pub(crate) enum LabCommand {
    /// Build the lab and leave it running; `xbench lab down` removes it.
    Up(UpArgs),
    /// Run the comparison suite on every path (building a lab for the run unless one is up).
    Run(RunArgs),
    /// Remove the lab, or what a killed one left behind.
    Down(WhereArgs),
    /// Show the lab that is up: paths, addresses and delay-line accuracy.
    Status(WhereArgs),
    /// The delay line of one path, run by `xbench lab up` (not for direct use).
    #[command(hide = true)]
    DelayLine(DelayLineArgs),
}

#[derive(Debug, Args)]
pub(crate) struct WhereArgs {
    /// Start of every namespace name the lab creates.
    #[arg(long, default_value = xbench_lab::DEFAULT_PREFIX)]
    pub(crate) prefix: String,

    /// Where the lab keeps its lock, state, logs and keys.
    #[arg(long, value_name = "DIR", default_value = xbench_lab::DEFAULT_STATE_DIR)]
    pub(crate) state_dir: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct TopologyArgs {
    /// Paths to build, comma-separated: direct, transit, vpn (default all three). Each may
    /// carry its own settings after colons, e.g. `vpn:delay=20ms:loss=0.5%`, and a
    /// `label=NAME` to have two paths of one kind.
    #[arg(long, value_name = "PATHS", value_delimiter = ',', value_parser = parse::lab_path)]
    pub(crate) paths: Option<Vec<PathArg>>,

    /// Rate cap of every path, each direction (tc tbf), e.g. 200M.
    #[arg(long, value_name = "RATE", value_parser = parse::link_rate)]
    pub(crate) rate: Option<u64>,

    /// One-way delay added in each direction, e.g. 10ms (20 ms round trip).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true, value_parser = parse::lab_duration)]
    pub(crate) delay: Option<Duration>,

    /// Delay varies within ± this, never reordering packets, e.g. 1ms.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true, value_parser = parse::lab_duration)]
    pub(crate) jitter: Option<Duration>,

    /// Random loss in each direction, percent, e.g. 1% or 0.5.
    #[arg(long, value_name = "PERCENT", allow_hyphen_values = true, value_parser = parse::loss)]
    pub(crate) loss: Option<f64>,

    /// Reordering in each direction, percent, e.g. 1%: a packet is held an extra 1 ms so the
    /// packets behind it overtake it (the userspace delay line; it counts what it reorders).
    #[arg(long, value_name = "PERCENT", allow_hyphen_values = true, value_parser = parse::reorder)]
    pub(crate) reorder: Option<f64>,

    /// Bytes the rate cap's queue holds (tc tbf's limit), e.g. 60K: a short queue drops
    /// bursts, as a policer or a congested VPN gateway does. Default: one bandwidth-delay
    /// product, at least 10 ms.
    #[arg(long, value_name = "BYTES", value_parser = parse::queue)]
    pub(crate) queue: Option<u64>,

    /// How delay, jitter and loss are made: the kernel's netem when present (auto), or the
    /// lab's userspace delay line.
    #[arg(long, value_enum, value_name = "HOW")]
    pub(crate) impair: Option<Impair>,

    /// Seed of the loss and jitter generators.
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u64>,

    /// Delay line: spin this long before each release instead of sleeping (e.g. 30us; more
    /// precise on virtual machines with slow timer wake-ups, costs CPU).
    #[arg(long, value_name = "TIME", value_parser = parse::lab_duration)]
    pub(crate) spin: Option<Duration>,
}

impl TopologyArgs {
    pub(crate) fn given(&self) -> bool {
        self.paths.is_some()
            || self.rate.is_some()
            || self.delay.is_some()
            || self.jitter.is_some()
            || self.loss.is_some()
            || self.reorder.is_some()
            || self.queue.is_some()
            || self.impair.is_some()
            || self.seed.is_some()
            || self.spin.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Impair {
    Auto,
    Netem,
    DelayLine,
}

#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    #[command(flatten)]
    pub(crate) topology: TopologyArgs,
    #[command(flatten)]
    pub(crate) place: WhereArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) topology: TopologyArgs,
    #[command(flatten)]
    pub(crate) place: WhereArgs,

    /// Run the tests of this suite file instead of the suite the flags below make: the file
    /// `xbench-deploy run --suite` takes (a scenario's [suite] keys at the top level), so the
    /// lab and the cloud paths can run one suite. -t and --repeat still apply to it.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["streams", "omit", "window", "no_rr", "under_load", "udp", "udp_length"])]
    pub(crate) suite: Option<PathBuf>,

    /// Parallel stream counts of the throughput sweep.
    #[arg(long, value_name = "N,…", value_delimiter = ',', default_value = "1,2,4,8", value_parser = parse::streams)]
    pub(crate) streams: Vec<std::num::NonZeroU16>,

    /// Length of each test: seconds, or with a unit [default: 10, or the suite file's].
    #[arg(short = 't', long = "time", value_name = "SECS", value_parser = parse::positive_duration)]
    pub(crate) time: Option<Duration>,

    /// Leave the first SECS of each test out (TCP slow start).
    #[arg(short = 'O', long = "omit", value_name = "SECS", value_parser = parse::duration)]
    pub(crate) omit: Option<Duration>,

    /// Socket buffer size on both ends, which bounds the TCP window (needs a unit: 256K).
    #[arg(short = 'w', long = "window", value_name = "BYTES", value_parser = parse::size_with_unit)]
    pub(crate) window: Option<ByteSize>,

    /// Runs of every test on every path (round robin, as `xbench client --repeat`) [default:
    /// 1, or the suite file's].
    #[arg(long, value_name = "N", value_parser = parse::lab_repeat)]
    pub(crate) repeat: Option<NonZeroU32>,

    /// Leave out the request/response (latency) test.
    #[arg(long)]
    pub(crate) no_rr: bool,

    /// Also run latency under load on every path (as `xbench client --under-load DIR`, four
    /// streams each way it loads, -t long): what the path's queues add to latency while it is
    /// busy (under-load.svg).
    #[arg(long, value_enum, value_name = "DIR")]
    pub(crate) under_load: Option<LoadDirection>,

    /// Also run UDP tests at these offered rates (as -u -b takes them: 10M,50M,100M), one
    /// stream each: loss and jitter vs offered rate on every path (udp.svg).
    #[arg(long = "udp", value_name = "RATE,…", value_parser = parse::udp_rates)]
    pub(crate) udp: Option<parse::List<u64>>,

    /// Datagram sizes of the UDP tests, bytes (as -u -l takes them) [default: 1448].
    #[arg(long = "udp-length", value_name = "LEN,…", requires = "udp", value_parser = parse::length_list)]
    pub(crate) udp_length: Option<parse::List<std::num::NonZeroU32>>,

    /// Throughput unit of the table and charts: Mbit/s, Gbit/s, MB/s, MiB/s…, or iperf3's -f
    /// letters [default: the unit that suits each table's and chart's largest figure].
    #[arg(long, value_name = "UNIT", value_parser = parse::throughput_unit)]
    pub(crate) unit: Option<xbench_report::ThroughputUnit>,

    /// Directory for the results: every run saved as `xbench client --save` does
    /// (DIR/LABEL/CELL/run-N.json, LABEL the path), the comparison in DIR/report.md and as a
    /// web page in DIR/report.html, and the charts in DIR/*.svg.
    #[arg(long, value_name = "DIR", default_value = "xbench-lab-results")]
    pub(crate) out: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct DelayLineArgs {
    /// Where to keep the line's stats (rewritten every second and on exit).
    #[arg(long, value_name = "FILE")]
    pub(crate) stats: PathBuf,
    /// The line, as JSON.
    pub(crate) spec: String,
}

/// One `--paths` item: a path kind and the settings written after it.
#[derive(Debug, Clone)]
pub(crate) struct PathArg {
    pub(crate) kind: PathKind,
    pub(crate) label: Option<String>,
    pub(crate) rate: Option<u64>,
    pub(crate) delay: Option<Duration>,
    pub(crate) jitter: Option<Duration>,
    pub(crate) loss: Option<f64>,
    pub(crate) reorder: Option<f64>,
    pub(crate) queue: Option<u64>,
}

impl PathArg {
    /// A path of `kind` with the lab's settings.
    pub(crate) fn new(kind: PathKind) -> Self {
        PathArg {
            kind,
            label: None,
            rate: None,
            delay: None,
            jitter: None,
            loss: None,
            reorder: None,
            queue: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own checks of every subcommand: names, groups, `requires`, defaults.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
