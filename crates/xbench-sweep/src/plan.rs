//! What a sweep runs: the plan, its cells and the schedule of runs in the order they happen.

use std::num::{NonZeroU16, NonZeroU32};
use std::path::PathBuf;
use std::time::Duration;

use xbench::client::ClientConfig;
use xbench::config::Workload;
use xbench_report::cell::CellKey;
use xbench_report::layout;

use crate::error::SweepError;

/// What to sweep and how often.
#[derive(Debug, Clone)]
pub struct SweepPlan {
    /// The test every cell starts from: host, port, duration, direction and so on.
    pub base: ClientConfig,
    /// Throughput tests: stream counts (`-P 1,2,4`); empty keeps the base's.
    pub streams: Vec<NonZeroU16>,
    /// Socket buffer sizes, bytes (`-w 64K,256K`); empty keeps the base's.
    pub windows: Vec<u64>,
    /// Request/response sizes, bytes (`-r 1,1 -r 64,16K`); empty keeps the base's.
    pub rr_sizes: Vec<(NonZeroU32, NonZeroU32)>,
    /// Request/response flows (`--flows 1,4,16`); empty keeps the base's.
    pub flows: Vec<NonZeroU16>,
    /// Runs of each cell.
    pub repeat: NonZeroU32,
    /// Wait between two runs, to let queues drain and to spread runs over time.
    pub pause: Duration,
    /// The path's name; saved runs go to `save/<label>/`.
    pub label: String,
    /// Where to save each finished run; `None` keeps them in memory only.
    pub save: Option<PathBuf>,
    /// Skip runs already saved instead of refusing a directory that has some.
    pub resume: bool,
}

/// One run of the schedule.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    /// Position in the schedule, from 0.
    pub index: usize,
    /// Which cell, from 0, in [`SweepPlan::cells`] order.
    pub cell: usize,
    /// Which repeat of the cell, from 1.
    pub repeat: u32,
    /// The cell.
    pub key: CellKey,
    /// The test to run.
    pub config: ClientConfig,
    /// Where it is saved, with `save`.
    pub path: Option<PathBuf>,
}

impl SweepPlan {
    /// Checks the lists and the label. Duplicates are refused: a list value is a cell.
    pub fn check(&self) -> Result<(), SweepError> {
        layout::check_label(&self.label).map_err(SweepError::Label)?;
        let is_rr = self.base.spec.as_rr().is_some();
        if is_rr && !self.streams.is_empty() {
            return Err(SweepError::NotApplicable {
                flag: "-P",
                kind: "request/response",
            });
        }
        if !is_rr && !self.rr_sizes.is_empty() {
            return Err(SweepError::NotApplicable {
                flag: "-r",
                kind: "throughput",
            });
        }
        if !is_rr && !self.flows.is_empty() {
            return Err(SweepError::NotApplicable {
                flag: "--flows",
                kind: "throughput",
            });
        }
        no_duplicates("-P", &self.streams, |v| v.to_string())?;
        no_duplicates("-w", &self.windows, |v| xbench_report::cell::short_size(*v))?;
        no_duplicates("-r", &self.rr_sizes, |(q, r)| format!("{q},{r}"))?;
        no_duplicates("--flows", &self.flows, |v| v.to_string())?;
        Ok(())
    }

    /// Every cell's test, in matrix order: windows outermost, then streams or sizes and flows.
    pub fn cells(&self) -> Vec<ClientConfig> {
        let windows: Vec<Option<u64>> = if self.windows.is_empty() {
            vec![self.base.spec.socket.window]
        } else {
            self.windows.iter().map(|w| Some(*w)).collect()
        };
        let mut out = Vec::new();
        for w in windows {
            let mut c = self.base.clone();
            c.spec.socket.window = w;
            c.label = Some(self.label.clone());
            match &c.spec.workload {
                Workload::Throughput(t) => {
                    let streams = if self.streams.is_empty() {
                        vec![t.streams]
                    } else {
                        self.streams.clone()
                    };
                    for p in streams {
                        let mut c = c.clone();
                        if let Workload::Throughput(t) = &mut c.spec.workload {
                            t.streams = p;
                        }
                        out.push(c);
                    }
                }
                Workload::RequestResponse(r) => {
                    let sizes = if self.rr_sizes.is_empty() {
                        vec![(r.request_len, r.response_len)]
                    } else {
                        self.rr_sizes.clone()
                    };
                    let flows = if self.flows.is_empty() {
                        vec![r.flows]
                    } else {
                        self.flows.clone()
                    };
                    for &(q, s) in &sizes {
                        for &f in &flows {
                            let mut c = c.clone();
                            if let Workload::RequestResponse(r) = &mut c.spec.workload {
                                r.request_len = q;
                                r.response_len = s;
                                r.flows = f;
                            }
                            out.push(c);
                        }
                    }
                }
                // A workload kind this crate does not know: run it as given.
                _ => out.push(c),
            }
        }
        out
    }

    /// The runs in the order they happen: repeat 1 of every cell, then repeat 2, …
    pub fn schedule(&self) -> Vec<PlannedRun> {
        let cells = self.cells();
        let mut out = Vec::with_capacity(cells.len() * self.repeat.get() as usize);
        for repeat in 1..=self.repeat.get() {
            for (i, config) in cells.iter().enumerate() {
                let key = CellKey::of_spec(&config.spec);
                let path = self.save.as_ref().map(|dir| {
                    layout::run_file(&layout::cell_dir(dir, &self.label, &key.slug()), repeat)
                });
                out.push(PlannedRun {
                    index: out.len(),
                    cell: i,
                    repeat,
                    key,
                    config: config.clone(),
                    path,
                });
            }
        }
        out
    }
}

fn no_duplicates<T: PartialEq>(
    flag: &'static str,
    list: &[T],
    show: impl Fn(&T) -> String,
) -> Result<(), SweepError> {
    for (i, v) in list.iter().enumerate() {
        if list[..i].contains(v) {
            return Err(SweepError::Duplicate {
                flag,
                value: show(v),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn plan(streams: &[u16], repeat: u32) -> SweepPlan {
        SweepPlan {
            base: ClientConfig::new("127.0.0.1"),
            streams: streams
                .iter()
                .map(|p| NonZeroU16::new(*p).unwrap())
                .collect(),
            windows: vec![],
            rr_sizes: vec![],
            flows: vec![],
            repeat: NonZeroU32::new(repeat).unwrap(),
            pause: Duration::ZERO,
            label: "a".into(),
            save: Some("/tmp/x".into()),
            resume: false,
        }
    }

    #[test]
    fn schedule_goes_round_robin_over_cells() {
        let s = plan(&[1, 2, 4], 3).schedule();
        let order: Vec<(u16, u32)> = s
            .iter()
            .map(|r| (r.key.streams.unwrap(), r.repeat))
            .collect();
        assert_eq!(
            order,
            [
                (1, 1),
                (2, 1),
                (4, 1),
                (1, 2),
                (2, 2),
                (4, 2),
                (1, 3),
                (2, 3),
                (4, 3)
            ]
        );
        assert_eq!(
            s[4].path.as_deref(),
            Some(Path::new("/tmp/x/a/tcp-up-P2/run-2.json"))
        );
        assert_eq!(s[4].config.label.as_deref(), Some("a"));
    }

    #[test]
    fn windows_and_streams_make_a_matrix() {
        let mut p = plan(&[1, 8], 1);
        p.windows = vec![64 << 10, 1 << 20];
        let slugs: Vec<String> = p.schedule().iter().map(|r| r.key.slug()).collect();
        assert_eq!(
            slugs,
            [
                "tcp-up-P1-w64K",
                "tcp-up-P8-w64K",
                "tcp-up-P1-w1M",
                "tcp-up-P8-w1M"
            ]
        );
    }

    #[test]
    fn bad_plans_are_refused() {
        assert!(matches!(
            plan(&[1, 2, 1], 1).check(),
            Err(SweepError::Duplicate { flag: "-P", .. })
        ));
        let mut p = plan(&[], 1);
        p.flows = vec![NonZeroU16::MIN];
        assert!(matches!(
            p.check(),
            Err(SweepError::NotApplicable {
                flag: "--flows",
                ..
            })
        ));
        let mut p = plan(&[1], 1);
        p.label = "../etc".into();
        assert!(matches!(p.check(), Err(SweepError::Label(_))));
    }
}
