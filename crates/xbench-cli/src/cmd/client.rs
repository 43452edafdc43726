//! `xbench client`: flags → [`ClientConfig`], an in-process server for `--local`, Ctrl-C
//! handling, and live rendering of the events the library reports.

use std::io;
use std::path::Path;

use anyhow::Context;
use std::num::{NonZeroU16, NonZeroU32};
use xbench::client::{AddressFamily, ClientEvent};

use xbench::ClientConfig;
use xbench::auth::Psk;
use xbench::config::{
    Direction, EndCondition, ReceiveMode, RrSpec, SocketOptions, TestSpec, ThroughputSpec, Workload,
};
use xbench::file::write_atomically;
use xbench::report::{Outcome, RrReport, TestReport};

use crate::cli::ClientArgs;
use crate::cmd::local::{LocalServer, ctrl_c};
use crate::exit::{Exit, UsageError};
use crate::render::json::{self, Event};
use crate::render::netperf;
use crate::render::rr::RrText;
use crate::render::{out, text::Text};

/// Output style.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Text,
    Json,
    JsonStream,
    /// `--fields`: nothing live, the selected figures at the end.
    Fields,
}

pub(crate) async fn run(args: ClientArgs) -> anyhow::Result<Exit> {
    if super::sweep::wanted(&args) {
        return super::sweep::run(args).await;
    }
    let mut config = to_config(&args)?;
    let style = if args.json {
        Style::Json
    } else if args.json_stream {
        Style::JsonStream
    } else if args.fields.is_some() {
        Style::Fields
    } else {
        Style::Text
    };

    // `--local` (or no host): an in-process server on a free loopback port.
    let local = if args.local || args.host.is_none() {
        let l = LocalServer::start(config.psk.clone()).await?;
        config.port = l.port;
        Some(l)
    } else {
        None
    };
    let cancel = ctrl_c("waiting for results");

    let mut text = Text::new(&config.spec);
    let mut rr_text = RrText::default();
    let is_rr = config.spec.as_rr().is_some();
    let mut write_err: Option<io::Error> = None;
    let mut on_event = |ev: ClientEvent| {
        if write_err.is_some() {
            return;
        }
        let s = match (&ev, style) {
            (ClientEvent::Warning(w), _) => {
                eprintln!("warning: {w}");
                if style == Style::JsonStream {
                    json::event_line(&Event::Warning { message: w })
                } else {
                    return;
                }
            }
            (ClientEvent::Started { .. }, Style::Text) if is_rr => rr_text.started(&config),
            (ClientEvent::Started { server, streams }, Style::Text) => {
                text.started(&config, server, streams)
            }
            (ClientEvent::Started { server, streams }, Style::JsonStream) => {
                json::event_line(&Event::Start {
                    schema_version: xbench::report::SCHEMA_VERSION,
                    server,
                    streams,
                })
            }
            (ClientEvent::Interval(iv), Style::Text) => text.interval(iv),
            (ClientEvent::Interval(iv), Style::JsonStream) => {
                json::event_line(&Event::Interval { interval: iv })
            }
            (ClientEvent::RrInterval(iv), Style::Text) => rr_text.interval(iv),
            (ClientEvent::RrInterval(iv), Style::JsonStream) => {
                json::event_line(&Event::RrInterval { interval: iv })
            }
            _ => return,
        };
        if let Err(e) = out(&s) {
            write_err = Some(e);
        }
    };
    let result = xbench::client::run(&config, &mut on_event, cancel).await;

    if let Some(l) = local {
        l.stop().await;
    }
    let report = result.with_context(|| match &args.host {
        Some(h) => format!("test against {h} failed"),
        None => "test against the in-process server failed".to_owned(),
    })?;
    if let Some(e) = write_err {
        return Err(e).context("writing results");
    }
    if let Some(path) = &args.json_file {
        write_atomically(path, json::document(&report).as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let (Some(path), Some(rr)) = (&args.hist, &report.rr) {
        write_histograms(path, &report, rr)?;
    }
    let rendered = match style {
        Style::Text if is_rr => rr_text.summary(&report),
        Style::Text => Text::new(&config.spec).summary(&report),
        Style::Json => json::document(&report),
        Style::JsonStream => json::event_line(&Event::End { report: &report }),
        Style::Fields => netperf::render(
            &report,
            args.fields.as_ref().map_or(&[][..], |f| &f.0),
            args.fields_format,
        ),
    };
    out(&rendered).context("writing results")?;
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    Ok(exit_for(&report))
}

fn exit_for(r: &TestReport) -> Exit {
    match r.outcome {
        Outcome::Completed => Exit::Success,
        Outcome::Interrupted => Exit::Interrupted,
        Outcome::Failed { .. } => Exit::Failure,
    }
}

pub(crate) fn to_config(a: &ClientArgs) -> anyhow::Result<ClientConfig> {
    let host = a.host.clone().unwrap_or_else(|| "127.0.0.1".to_owned());
    let direction = if a.bidir {
        Direction::Bidir
    } else if a.reverse {
        Direction::ServerToClient
    } else {
        Direction::ClientToServer
    };
    let end = match (a.time, a.bytes) {
        (_, Some(b)) => EndCondition::Bytes(b.0),
        (Some(t), None) => EndCondition::Duration(t),
        (None, None) => EndCondition::Duration(std::time::Duration::from_secs(10)),
    };
    let mut tp = ThroughputSpec {
        // A sweep (a list) starts from its first value; cmd/sweep sets each cell's.
        streams: a
            .parallel
            .as_ref()
            .and_then(|l| l.first())
            .unwrap_or(NonZeroU16::MIN),
        direction,
        zerocopy: a.zerocopy,
        bitrate: a.bitrate,
        receive: if a.recv_copy {
            ReceiveMode::Copy
        } else {
            ReceiveMode::Discard
        },
        ..ThroughputSpec::default()
    };
    if let Some(l) = a.length {
        tp.block_len = l;
    }
    let workload = if a.rr || a.crr {
        let (request_len, response_len) = a
            .rr_size
            .first()
            .copied()
            .unwrap_or((NonZeroU32::MIN, NonZeroU32::MIN));
        Workload::RequestResponse(RrSpec {
            request_len,
            response_len,
            flows: a
                .flows
                .as_ref()
                .and_then(|l| l.first())
                .unwrap_or(NonZeroU16::MIN),
            burst: a.burst.unwrap_or(NonZeroU32::MIN),
            connect_per_transaction: a.crr,
            rate_per_flow: a.rate,
        })
    } else {
        Workload::Throughput(tp)
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
    Ok(ClientConfig {
        host,
        port: a.port,
        family: if a.ipv4 {
            AddressFamily::V4
        } else if a.ipv6 {
            AddressFamily::V6
        } else {
            AddressFamily::Any
        },
        bind: a.bind,
        connect_timeout: a.connect_timeout,
        stall_timeout: a.response_timeout,
        psk: match &a.psk_file {
            Some(p) => Some(Psk::from_file(p).map_err(|e| UsageError(e.to_string()))?),
            None => None,
        },
        spec,
        label: a.label.clone(),
        ..ClientConfig::new("")
    })
}

/// `--hist FILE`: the interval log at FILE and the percentile distribution at FILE.hgrm,
/// both in the formats HdrHistogram's own tools read.
fn write_histograms(path: &Path, report: &TestReport, rr: &RrReport) -> anyhow::Result<()> {
    let log = xbench::latency::interval_log(report, rr)
        .with_context(|| format!("cannot encode the histograms for {}", path.display()))?;
    write_atomically(path, log.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    let total = xbench::latency::Distribution::decode(&rr.summary.histogram)
        .context("cannot decode the total histogram")?;
    let mut hgrm = path.as_os_str().to_owned();
    hgrm.push(".hgrm");
    let hgrm = std::path::PathBuf::from(hgrm);
    write_atomically(
        &hgrm,
        xbench::latency::percentile_distribution(&total).as_bytes(),
    )
    .with_context(|| format!("cannot write {}", hgrm.display()))?;
    Ok(())
}
