//! `xbench client` for one test (`plan` decided it is one): its [`xbench::ClientConfig`], an in-process
//! server for `--local`, Ctrl-C handling, and live rendering of the events the library reports.

use std::io;
use std::path::Path;

use anyhow::Context;
use xbench::client::ClientEvent;
use xbench::file::write_atomically;
use xbench::report::{Outcome, RrReport, TestReport};

use crate::cmd::local::{LocalServer, ctrl_c};
use crate::exit::Exit;
use crate::plan::{Single, Style};
use crate::render::json::{self, Event};
use crate::render::netperf;
use crate::render::rr::RrText;
use crate::render::{out, text::Text};

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
    } = test;
    let mut config = target.client_config(spec, label, psk);
    // No host: an in-process server on a free loopback port.
    let local = if target.host.is_none() {
        let l = LocalServer::start(config.psk.clone()).await?;
        config.port = l.port;
        Some(l)
    } else {
        None
    };
    let cancel = ctrl_c("waiting for results");

    let mut text = Text::new(&config.spec).unit(unit).local(local.is_some());
    let mut rr_text = RrText::default().local(local.is_some());
    let is_rr = config.spec.as_rr().is_some();
    let mut write_err: Option<io::Error> = None;
    let mut on_event = |ev: ClientEvent| {
        if write_err.is_some() {
            return;
        }
        let s = match (&ev, &style) {
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
    let report = result.with_context(|| match &target.host {
        Some(h) => format!("test against {h} failed"),
        None => "test against the in-process server failed".to_owned(),
    })?;
    if let Some(e) = write_err {
        return Err(e).context("writing results");
    }
    if let Some(path) = &json_file {
        write_atomically(path, json::document(&report).as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let (Some(path), Some(rr)) = (&hist, &report.rr) {
        write_histograms(path, &report, rr)?;
    }
    let rendered = match &style {
        Style::Text if is_rr => rr_text.summary(&report),
        Style::Text => Text::new(&config.spec).unit(unit).summary(&report),
        Style::Json => json::document(&report),
        Style::JsonStream => json::event_line(&Event::End { report: &report }),
        Style::Fields(fields, format) => netperf::render(&report, &fields.0, *format, unit),
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
