//! `xbench client` with a list (`-P 1,2,4`, `-w 64K,1M`, `-r … -r …`, `--flows 1,4`),
//! `--repeat` or `--save` (`plan` decided it is a sweep): the [`xbench_sweep::SweepPlan`] run
//! with a progress bar on a terminal, one line per finished run, then the summary table of the
//! label. Single tests are `client`'s.
//!
//! Ctrl-C cuts the run in progress short; it is not saved (a `--resume` runs it again), the
//! runs that finished are kept and summarised, and the exit status is 130.

use std::io::{self, IsTerminal};
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use xbench::client::ClientEvent;
use xbench_report::Comparison;
use xbench_report::render::{self, Document, Format};
use xbench_sweep::{SweepEnd, SweepError, SweepEvent};

use crate::cmd::local::{LocalServer, ctrl_c};
use crate::exit::{Exit, UsageError};
use crate::plan::Sweep;
use crate::render::out;

pub(crate) async fn run(sweep: Sweep) -> anyhow::Result<Exit> {
    let Sweep {
        mut plan,
        psk,
        json,
        unit,
    } = sweep;
    let label = plan.label.clone();
    if let Some(rr) = plan.spec.as_rr() {
        let most = plan.flows.iter().max().copied().unwrap_or(rr.flows);
        crate::flow_space::ensure(&plan.target, rr, most.get())?;
        crate::fd_limit::ensure(u64::from(most.get()), plan.target.host.is_none())?;
    }
    // `--local` (or no host): an in-process server on a free loopback port, as for one test.
    let local = if plan.target.host.is_none() {
        let l = LocalServer::start(psk).await?;
        plan.target.port = l.port;
        Some(l)
    } else {
        None
    };
    // First Ctrl-C ends the run in progress and the sweep; a second one exits at once.
    let cancel = ctrl_c("the summary");
    let mut progress = Progress::new(&plan, json, unit);
    let outcome = xbench_sweep::run(&plan, &mut |ev| progress.event(ev), cancel).await;
    if let Some(b) = &progress.bar {
        b.finish_and_clear();
    }
    if let Some(l) = local {
        l.stop().await;
    }
    let outcome = outcome.map_err(usage_or_failure)?;
    if let Some(e) = progress.write_err {
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
    let rendered = if json {
        Document::with_sweep(&table, &warnings, summary).to_json()
    } else {
        summary_text(&label, summary, &table, unit)
    };
    out(&rendered).context("writing results")?;
    exit_of(summary, &plan)
}

/// A sweep as it goes: a progress bar for a person watching (not into a pipe or file, not
/// around JSON), and one line per finished run.
struct Progress {
    bar: Option<ProgressBar>,
    json: bool,
    unit: Option<xbench::units::ThroughputUnit>,
    total: usize,
    cells: usize,
    repeat: u32,
    /// Writing to stdout failed (a closed pipe): nothing more is printed.
    write_err: Option<io::Error>,
}

impl Progress {
    fn new(
        plan: &xbench_sweep::SweepPlan,
        json: bool,
        unit: Option<xbench::units::ThroughputUnit>,
    ) -> Self {
        let total = plan.run_count();
        Progress {
            bar: (!json && io::stdout().is_terminal()).then(|| progress_bar(total)),
            json,
            unit,
            total,
            cells: plan.cells().len(),
            repeat: plan.repeat.get(),
            write_err: None,
        }
    }

    fn event(&mut self, ev: SweepEvent<'_>) {
        let (total, cells, repeat) = (self.total, self.cells, self.repeat);
        let bar = &self.bar;
        let w = total.to_string().len();
        let line = match ev {
            SweepEvent::Skipped(_) => {
                if let Some(b) = bar {
                    b.dec_length(1);
                }
                return;
            }
            SweepEvent::Started(p) => {
                if let Some(b) = bar {
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
                if let Some(b) = bar {
                    b.set_message(format!("pausing {:.0} s", d.as_secs_f64()));
                }
                return;
            }
            SweepEvent::Client(ClientEvent::Warning(w)) => {
                suspend(bar, || eprintln!("warning: {w}"));
                return;
            }
            SweepEvent::Finished {
                planned,
                run,
                saved,
            } => {
                if let Some(b) = bar {
                    b.inc(1);
                }
                let mut s = format!(
                    "[{:>w$}/{total}] {} run {}/{repeat}: {}",
                    planned.index + 1,
                    planned.key.describe(),
                    planned.repeat,
                    run.one_line(self.unit),
                );
                if let Some(p) = saved {
                    s.push_str(&format!("  → {}", p.display()));
                }
                s
            }
            SweepEvent::NotKept { planned, reason } => {
                if let Some(b) = bar {
                    b.inc(1);
                }
                format!(
                    "[{:>w$}/{total}] {} run {}/{repeat}: {reason}",
                    planned.index + 1,
                    planned.key.describe(),
                    planned.repeat,
                )
            }
            _ => return,
        };
        if self.json || self.write_err.is_some() {
            return;
        }
        match bar {
            Some(b) => b.println(line),
            None => {
                if let Err(e) = out(&format!("{line}\n")) {
                    self.write_err = Some(e);
                }
            }
        }
    }
}

/// The text after the runs: how many completed (and were already saved, or not kept), then
/// the label's table.
fn summary_text(
    label: &str,
    summary: &xbench_sweep::SweepSummary,
    table: &Comparison,
    unit: Option<xbench::units::ThroughputUnit>,
) -> String {
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
        s.push_str(&render::render(table, Format::Text, unit));
    }
    s
}

/// The exit status of a sweep that ended as `summary` says: interrupted, stopped by a run
/// (its error, and where the finished runs are kept), or completed (a failure if a run was
/// not kept).
fn exit_of(
    summary: &xbench_sweep::SweepSummary,
    plan: &xbench_sweep::SweepPlan,
) -> anyhow::Result<Exit> {
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

/// Plan mistakes and a --save directory that cannot be written (found before the first run,
/// as --json-file is before its test) are usage errors (exit 2); a saved run that cannot be
/// read back is a failure.
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
