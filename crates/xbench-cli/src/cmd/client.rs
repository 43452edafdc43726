//! `xbench client` for one test (`plan` decided it is one): its [`xbench::ClientConfig`], an in-process
//! server for `--local`, Ctrl-C handling, and live rendering of the events the library reports.

use std::io;
use std::path::Path;
use std::time::SystemTime;

use anyhow::Context;
use xbench::client::ClientEvent;
use xbench::file::write_atomically;
use xbench::report::{Outcome, RrReport, TestReport};

use crate::cmd::local::{LocalServer, ctrl_c_twice};
use crate::exit::Exit;
use crate::plan::{Single, Style};
use crate::render::iperf3_json;
use crate::render::json::{self, Event};
use crate::render::netperf;
use crate::render::out;
use crate::render::rr::RrText;
use crate::render::text::{Shown, Text};
use crate::render::udp::UdpText;
use crate::render::under_load::UnderLoadText;

pub(crate) async fn run(test: Single) -> anyhow::Result<Exit> {
    let Single {
        target,
        spec,
        label,
        psk,
        style,
        json_file,
        hist,
        unit,
        start_at,
    } = test;
    if let Some(rr) = spec.as_rr() {
        crate::flow_space::ensure(&target, rr, rr.flows.get())?;
        // --connections-only holds its flows and opens new connections beside them.
        let openers = target.connections_only.map_or(0, |k| u64::from(k.get()));
        crate::fd_limit::ensure(u64::from(rr.flows.get()) + openers, target.host.is_none())?;
    }
    // First, so that no Ctrl-C meets the default action (exit without a file).
    let (cancel, give_up) = ctrl_c_twice()?;
    let mut config = target.client_config(spec, label, psk);
    // The library connects ahead of it and holds, so that setup is out of a fleet's spread.
    config.start_at = start_at;
    // No host: an in-process server on a free loopback port.
    let local = if target.host.is_none() {
        let l = LocalServer::start(config.psk.clone()).await?;
        config.port = l.port;
        Some(l)
    } else {
        None
    };
    warn_of_fragments(&config);
    let mut live = Live::new(&config, style.clone(), unit, local.is_some());
    // The cookie is drawn before the test, as iperf3 draws its own.
    let iperf3 = iperf3_json::Context::new();
    let started_at = SystemTime::now();
    let mut on_event = |ev: ClientEvent| live.event(&config, ev);
    let result = xbench::client::run_with_give_up(&config, &mut on_event, cancel, give_up).await;
    let report = match result {
        Ok(r) => r,
        Err(e @ xbench::Error::Interrupted { .. }) => {
            let report = xbench::client::nothing_measured(&config, started_at, &e);
            let exit = interrupted_before_data(&report, &e, &style, json_file.as_deref());
            stop(local).await;
            return exit;
        }
        Err(e) => {
            // iperf3 -J reports a test that could not run as a document with an `error`.
            if style == Style::Iperf3Json {
                out(&iperf3_json::error_document(&e.to_string(), &iperf3))
                    .context("writing results")?;
            }
            return Err(e).with_context(|| match &target.host {
                Some(h) => format!("test against {h} failed"),
                None => "test against the in-process server failed".to_owned(),
            });
        }
    };
    let files = Files {
        json_file: json_file.as_deref(),
        hist: hist.as_deref(),
    };
    let done = live.finish(&config, &report, &iperf3, files);
    // Last: the results are out before an in-process server's wind-down can delay them.
    stop(local).await;
    done?;
    Ok(exit_for(&report))
}

/// Datagrams larger than a 1500-byte MTU carries whole: said before the test.
fn warn_of_fragments(config: &xbench::ClientConfig) {
    if let Some(u) = config.spec.as_throughput().and_then(|t| t.udp)
        && u.datagram_len > xbench::config::UNFRAGMENTED_DATAGRAM_LEN
    {
        eprintln!(
            "warning: {}-byte datagrams do not fit a 1500-byte MTU (at most {} bytes of UDP \
             payload over IPv4): such a path fragments every one, and losing one fragment loses \
             the datagram",
            u.datagram_len,
            xbench::config::UNFRAGMENTED_DATAGRAM_LEN
        );
    }
}

/// Where the results are also written: `--json-file` and `--hist`.
struct Files<'a> {
    json_file: Option<&'a Path>,
    hist: Option<&'a Path>,
}

/// The test as it is printed: the renderer of its kind, live and at the end.
struct Live {
    style: Style,
    unit: Option<xbench::units::ThroughputUnit>,
    text: Text,
    rr_text: RrText,
    udp_text: UdpText,
    ul_text: UnderLoadText,
    kind: Kind,
    /// Warnings already printed as they came: the report's list holds them again.
    warned: std::collections::HashSet<String>,
    /// Writing to stdout failed (a closed pipe): nothing more is printed live.
    write_err: Option<io::Error>,
}

/// Which renderer a test's output takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bulk,
    Rr,
    Udp,
    UnderLoad,
}

impl Live {
    fn new(
        config: &xbench::ClientConfig,
        style: Style,
        unit: Option<xbench::units::ThroughputUnit>,
        local: bool,
    ) -> Self {
        let spec = &config.spec;
        let tp = spec.as_throughput();
        let kind = if spec.as_rr().is_some() {
            Kind::Rr
        } else if tp.is_some_and(|t| t.udp.is_some()) {
            Kind::Udp
        } else if tp.is_some_and(|t| t.under_load.is_some()) {
            Kind::UnderLoad
        } else {
            Kind::Bulk
        };
        Live {
            style,
            unit,
            text: Text::new(spec, Shown::new(unit, local)),
            rr_text: RrText::default()
                .local(local)
                .connections_only(config.connections_only.is_some()),
            udp_text: UdpText::new(spec, Shown::new(unit, local)),
            ul_text: UnderLoadText::new(spec, Shown::new(unit, local)),
            kind,
            warned: std::collections::HashSet::new(),
            write_err: None,
        }
    }

    /// Prints one event as the style asks.
    fn event(&mut self, config: &xbench::ClientConfig, ev: ClientEvent) {
        if self.write_err.is_some() {
            return;
        }
        let (style, kind) = (&self.style, self.kind);
        let s = match (&ev, style) {
            (ClientEvent::Warning(w), _) => {
                eprintln!("warning: {w}");
                self.warned.insert(w.clone());
                if *style == Style::JsonStream {
                    json::event_line(&Event::Warning { message: w })
                } else {
                    return;
                }
            }
            (
                ClientEvent::PartialFlows {
                    asked,
                    running,
                    server_limit,
                },
                _,
            ) => {
                (self.rr_text).partial_flows(*asked, *running, *server_limit);
                return;
            }
            (ClientEvent::Started { server, streams }, Style::Text) => match kind {
                Kind::UnderLoad => self.ul_text.started(config, server, streams),
                Kind::Rr => self.rr_text.started(config),
                Kind::Udp => self.udp_text.started(config, server, streams),
                Kind::Bulk => self.text.started(config, server, streams),
            },
            (ClientEvent::UnderLoadInterval(iv), Style::Text) => self.ul_text.interval(iv),
            (ClientEvent::UnderLoadInterval(iv), Style::JsonStream) => {
                json::event_line(&Event::UnderLoadInterval { interval: iv })
            }
            (ClientEvent::Started { server, streams }, Style::JsonStream) => {
                json::event_line(&Event::Start {
                    schema_version: xbench::report::SCHEMA_VERSION,
                    server,
                    streams,
                })
            }
            (ClientEvent::Interval(iv), Style::Text) => self.text.interval(iv),
            (ClientEvent::Interval(iv), Style::JsonStream) => {
                json::event_line(&Event::Interval { interval: iv })
            }
            (ClientEvent::UdpInterval(iv), Style::Text) => self.udp_text.interval(iv),
            (ClientEvent::UdpInterval(iv), Style::JsonStream) => {
                json::event_line(&Event::UdpInterval { interval: iv })
            }
            (ClientEvent::RrInterval(iv), Style::Text) => self.rr_text.interval(iv),
            (ClientEvent::RrInterval(iv), Style::JsonStream) => {
                json::event_line(&Event::RrInterval { interval: iv })
            }
            (ClientEvent::Interface(iv), Style::JsonStream) => {
                json::event_line(&Event::Interface { interval: iv })
            }
            _ => return,
        };
        if let Err(e) = out(&s) {
            self.write_err = Some(e);
        }
    }

    /// The end: the files first — a closed stdout (`xbench … | head`) must not lose them —
    /// then the summary, then the warnings not yet printed. A file that cannot be written (a
    /// full disk, a FIFO nobody reads) must not lose the printed results either: they are
    /// printed, then the failure is the exit status.
    fn finish(
        mut self,
        config: &xbench::ClientConfig,
        report: &TestReport,
        iperf3: &iperf3_json::Context,
        files: Files<'_>,
    ) -> anyhow::Result<()> {
        let mut file_err = None;
        if let Some(path) = files.json_file
            && let Err(e) = write_atomically(path, json::document(report).as_bytes())
        {
            let e = anyhow::Error::new(e).context(format!("cannot write {}", path.display()));
            file_err = Some(e);
        }
        if let Some(e) = self.write_err.take() {
            return Err(e).context("writing results");
        }
        if let (Some(path), Some(rr)) = (files.hist, &report.rr)
            && let Err(e) = write_histograms(path, report, rr)
        {
            file_err.get_or_insert(e);
        }
        let unit = self.unit;
        let mut rendered = match (&self.style, self.kind) {
            (Style::Text, Kind::Rr) => self.rr_text.summary(report),
            (Style::Text, Kind::Udp) => self.udp_text.summary(report),
            (Style::Text, Kind::UnderLoad) => self.ul_text.summary(report),
            (Style::Text, Kind::Bulk) => {
                Text::new(&config.spec, Shown::new(unit, false)).summary(report)
            }
            (Style::Json, _) => json::document(report),
            (Style::Iperf3Json, _) => iperf3_json::document(report, iperf3),
            (Style::JsonStream, _) => json::event_line(&Event::End { report }),
            (Style::Fields(fields, format), _) => netperf::render(report, &fields.0, *format, unit),
        };
        if self.style == Style::Text {
            rendered.push_str(&crate::render::host::text(report));
            rendered.push_str(&crate::render::trace::text(report));
        }
        out(&rendered).context("writing results")?;
        for w in report.warnings.iter().filter(|w| !self.warned.contains(*w)) {
            eprintln!("warning: {w}");
        }
        file_err.map_or(Ok(()), Err)
    }
}

async fn stop(local: Option<LocalServer>) {
    if let Some(l) = local {
        l.stop().await;
    }
}

/// A test stopped by Ctrl-C before data flowed: its `--json-file` and JSON output say so, in
/// a document with nothing measured (as `--json-file`'s help promises a file for every run),
/// and the text output says it in one line.
fn interrupted_before_data(
    report: &TestReport,
    why: &xbench::Error,
    style: &Style,
    json_file: Option<&Path>,
) -> anyhow::Result<Exit> {
    if let Some(path) = json_file {
        write_atomically(path, json::document(report).as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    match style {
        Style::Json => out(&json::document(report)).context("writing results")?,
        Style::Iperf3Json => out(&iperf3_json::error_document(
            &why.to_string(),
            &iperf3_json::Context::new(),
        ))
        .context("writing results")?,
        Style::JsonStream => {
            out(&json::event_line(&Event::End { report })).context("writing results")?
        }
        Style::Text | Style::Fields(..) => {}
    }
    eprintln!("xbench: {why}");
    Ok(Exit::Interrupted)
}

fn exit_for(r: &TestReport) -> Exit {
    match r.outcome {
        Outcome::Completed => Exit::Success,
        Outcome::Interrupted => Exit::Interrupted,
        Outcome::Failed { .. } => Exit::Failure,
    }
}

/// `--hist FILE`: the interval log at FILE and the percentile distribution at FILE.hgrm,
/// both in the formats HdrHistogram's own tools read.
fn write_histograms(path: &Path, report: &TestReport, rr: &RrReport) -> anyhow::Result<()> {
    let log = xbench::report::interval_log(report, rr)
        .with_context(|| format!("cannot encode the histograms for {}", path.display()))?;
    write_atomically(path, log.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    let total = xbench::latency::Distribution::decode(&rr.summary.histogram)
        .context("cannot decode the total histogram")?;
    let hgrm = crate::plan::hgrm_path(path);
    write_atomically(
        &hgrm,
        xbench::latency::percentile_distribution(&total).as_bytes(),
    )
    .with_context(|| format!("cannot write {}", hgrm.display()))?;
    Ok(())
}
