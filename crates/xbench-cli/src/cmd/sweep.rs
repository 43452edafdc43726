//! `xbench client` with a list (`-P 1,2,4`, `-w 64K,1M`, `-r … -r …`, `--flows 1,4`),
//! `--repeat` or `--save`: flags → [`SweepPlan`], a progress bar on a terminal, one line per
//! finished run, then the summary table of the label. Not for single tests: those stay in
//! `client`, unchanged, and a one-value list without `--repeat`/`--save` is a single test.
//!
//! Ctrl-C cuts the run in progress short; it is not saved (a `--resume` runs it again), the
//! runs that finished are kept and summarised, and the exit status is 130.

use std::io::{self, IsTerminal};
use std::num::NonZeroU32;
use std::time::Duration;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use xbench::client::ClientEvent;
use xbench_report::render::{self, Document, Format};
use xbench_report::{Comparison, layout};
use xbench_sweep::{SweepEnd, SweepError, SweepEvent, SweepPlan, Target};

use crate::cli::ClientArgs;
use crate::cmd::local::{LocalServer, ctrl_c};
use crate::exit::{Exit, UsageError};
use crate::render::out;

/// Whether these flags ask for a sweep rather than a single test.
pub(crate) fn wanted(a: &ClientArgs) -> bool {
    let many = |n: Option<usize>| n.is_some_and(|n| n > 1);
    many(a.parallel.as_ref().map(|l| l.0.len()))
        || many(a.window.as_ref().map(|l| l.0.len()))
        || many(a.flows.as_ref().map(|l| l.0.len()))
        || a.rr_size.len() > 1
        || a.sweep.repeat.is_some()
        || a.sweep.save.is_some()
}

pub(crate) async fn run(args: ClientArgs) -> anyhow::Result<Exit> {
    for (flag, given) in [
        ("--json-stream", args.json_stream),
        ("--json-file", args.json_file.is_some()),
        ("--hist", args.hist.is_some()),
        ("--fields", args.fields.is_some()),
    ] {
        if given {
            bail!(UsageError(format!(
                "{flag} describes a single test; a sweep prints one line per run and a summary \
                 (--json for one document; --save DIR keeps every run's full report)"
            )));
        }
    }
    let base = super::client::to_config(&args)?;
    let label = match &args.label {
        Some(l) => l.clone(),
        None if args.local || args.host.is_none() => "local".to_owned(),
        None => base.host.clone(),
    };
    layout::check_label(&label).map_err(|e| UsageError(format!("--label: {e}")))?;
    let target = Target {
        host: args.host.clone(),
        port: base.port,
        family: base.family,
        bind: base.bind,
        connect_timeout: base.connect_timeout,
        response_timeout: base.stall_timeout,
        psk_file: args.psk_file.clone(),
    };
    let mut plan = SweepPlan {
        streams: args
            .parallel
            .as_ref()
            .map(|l| l.0.clone())
            .unwrap_or_default(),
        windows: args
            .window
            .as_ref()
            .map(|l| l.0.iter().map(|w| w.0).collect())
            .unwrap_or_default(),
        rr_sizes: args.rr_size.clone(),
        flows: args.flows.as_ref().map(|l| l.0.clone()).unwrap_or_default(),
        repeat: args.sweep.repeat.unwrap_or(NonZeroU32::MIN),
        pause: args.sweep.pause.unwrap_or(Duration::ZERO),
        save: args.sweep.save.clone(),
        resume: args.sweep.resume,
        ..SweepPlan::new(target, base.spec, label.clone())
    };
    plan.check().map_err(usage_or_failure)?;

    // `--local` (or no host): an in-process server on a free loopback port, as for one test.
    let local = if args.local || args.host.is_none() {
        let l = LocalServer::start(base.psk.clone()).await?;
        plan.target.port = l.port;
        Some(l)
    } else {
        None
    };
    // First Ctrl-C ends the run in progress and the sweep; a second one exits at once.
    let cancel = ctrl_c("the summary");

    let total = plan.schedule().len();
    let cells = plan.cells().len();
    let repeat = plan.repeat.get();
    let unit = args.sweep.unit;
    // A bar only for a person watching: not into a pipe or file, not around JSON.
    let bar = (!args.json && io::stdout().is_terminal()).then(|| progress_bar(total));
    let mut write_err: Option<io::Error> = None;
    let mut on_event = |ev: SweepEvent<'_>| {
        let line = match ev {
            SweepEvent::Skipped(_) => {
                if let Some(b) = &bar {
                    b.dec_length(1);
                }
                return;
            }
            SweepEvent::Started(p) => {
                if let Some(b) = &bar {
                    b.set_message(format!(
                        "cell {} ({}/{cells}), run {}/{repeat}",
                        p.key.describe(),
                        p.cell + 1,
                        p.repeat
                    ));
                }
                return;
            }
            SweepEvent::Pausing(d) => {
                if let Some(b) = &bar {
                    b.set_message(format!("pausing {:.0} s", d.as_secs_f64()));
                }
                return;
            }
            SweepEvent::Client(ClientEvent::Warning(w)) => {
                suspend(&bar, || eprintln!("warning: {w}"));
                return;
            }
            SweepEvent::Finished {
                planned,
                run,
                saved,
            } => {
                if let Some(b) = &bar {
                    b.inc(1);
                }
                let mut s = format!(
                    "[{:>w$}/{total}] {} run {}/{repeat}: {}",
                    planned.index + 1,
                    planned.key.describe(),
                    planned.repeat,
                    run.one_line(unit),
                    w = total.to_string().len()
                );
                if let Some(p) = saved {
                    s.push_str(&format!("  → {}", p.display()));
                }
                s
            }
            SweepEvent::NotKept { planned, reason } => {
                if let Some(b) = &bar {
                    b.inc(1);
                }
                format!(
                    "[{:>w$}/{total}] {} run {}/{repeat}: {reason}",
                    planned.index + 1,
                    planned.key.describe(),
                    planned.repeat,
                    w = total.to_string().len()
                )
            }
            _ => return,
        };
        if args.json || write_err.is_some() {
            return;
        }
        match &bar {
            Some(b) => b.println(line),
            None => {
                if let Err(e) = out(&format!("{line}\n")) {
                    write_err = Some(e);
                }
            }
        }
    };
    let outcome = xbench_sweep::run(&plan, &mut on_event, cancel).await;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if let Some(l) = local {
        l.stop().await;
    }
    let outcome = outcome.map_err(usage_or_failure)?;
    if let Some(e) = write_err {
        return Err(e).context("writing results");
    }

    // The summary covers every saved run of the label (earlier sweeps included when resuming),
    // or this sweep's runs when nothing was saved.
    let (table, warnings) = match &plan.save {
        Some(dir) => {
            let loaded = xbench_report::load(&[dir.join(&label)])
                .with_context(|| format!("cannot read back {}", dir.display()))?;
            (
                Comparison::build(&loaded.runs).for_label(&label),
                loaded.warnings,
            )
        }
        None => (Comparison::build(&outcome.runs), Vec::new()),
    };
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let summary = &outcome.summary;
    let rendered = if args.json {
        Document::with_sweep(&table, &warnings, summary).to_json()
    } else {
        let mut s = format!(
            "\n{label}: {} of {} runs completed in this sweep{}{}\n\n",
            summary.completed,
            summary.planned,
            if summary.skipped > 0 {
                format!(", {} already saved", summary.skipped)
            } else {
                String::new()
            },
            if summary.not_kept > 0 {
                format!(", {} not kept (failed or interrupted)", summary.not_kept)
            } else {
                String::new()
            },
        );
        if table.is_empty() {
            s.push_str("No run completed.\n");
        } else {
            s.push_str(&render::render(&table, Format::Text, unit));
        }
        s
    };
    out(&rendered).context("writing results")?;
    match summary.end {
        SweepEnd::Interrupted => Ok(Exit::Interrupted),
        SweepEnd::Failed => {
            let why = summary
                .error
                .clone()
                .unwrap_or_else(|| "a run failed".into());
            Err(anyhow::anyhow!(why)).context(match &plan.save {
                Some(d) => format!(
                    "sweep stopped; finished runs are kept in {} (add --resume to complete it)",
                    d.display()
                ),
                None => "sweep stopped".to_owned(),
            })
        }
        SweepEnd::Completed if summary.not_kept > 0 => Ok(Exit::Failure),
        SweepEnd::Completed => Ok(Exit::Success),
    }
}

/// Plan mistakes are usage errors (exit 2); a directory we cannot use is a failure.
fn usage_or_failure(e: SweepError) -> anyhow::Error {
    match e {
        SweepError::Io { .. } | SweepError::Unreadable { .. } => anyhow::Error::new(e),
        other => UsageError(other.to_string()).into(),
    }
}

fn progress_bar(total: usize) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stdout());
    // The template is a constant; should it ever be rejected, the default style still works.
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{bar:20}] {pos}/{len} runs · {msg} · ETA {eta}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

fn suspend(bar: &Option<ProgressBar>, f: impl FnOnce()) {
    match bar {
        Some(b) => b.suspend(f),
        None => f(),
    }
}
