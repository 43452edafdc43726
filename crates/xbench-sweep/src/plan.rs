//! What a sweep runs: the plan, its cells and the schedule of runs in the order they happen.
//! Not how it is run (`run`) or written as a command (`args`).

use std::num::{NonZeroU16, NonZeroU32};
use std::path::PathBuf;
use std::time::Duration;

use xbench::config::{Field, RrSpec, TestSpec, ThroughputSpec, Workload};
use xbench_report::cell::CellKey;
use xbench_report::layout;

use crate::error::SweepError;
use crate::target::Target;

/// What to sweep and how often: a test, the lists that make its cells, and the repeats.
///
/// Every field is one of `xbench client`'s flags, so a plan can be run here ([`crate::run`]) or
/// written as the command that runs it ([`SweepPlan::client_args`]) without the two drifting
/// apart. The lists replace the spec's value cell by cell; an empty list keeps the spec's.
///
/// One plan sweeps one direction and, for TCP, one block length: a suite that wants both
/// directions is two plans (the cell key and the saved layout have no TCP block length to tell
/// runs apart by). UDP tests sweep their datagram size and offered rate as well.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPlan {
    /// The server.
    pub target: Target,
    /// The test every cell starts from: duration, direction, block length, socket options…
    pub spec: TestSpec,
    /// The path's name (`--label`); saved runs go to `save/<label>/`.
    pub label: String,
    /// Throughput tests: stream counts (`-P 1,2,4`).
    pub streams: Vec<NonZeroU16>,
    /// Socket buffer sizes, bytes (`-w 64K,256K`).
    pub windows: Vec<u64>,
    /// Request/response sizes, bytes (`-r 1,1 -r 64,16K`).
    pub rr_sizes: Vec<(NonZeroU32, NonZeroU32)>,
    /// Request/response flows (`--flows 1,4,16`).
    pub flows: Vec<xbench::config::FlowCount>,
    /// UDP tests: offered rates, bits per second (`-u -b 100M,200M,500M`); 0 is unpaced. The
    /// total of a direction's streams, unless `bitrate_per_stream`.
    pub bitrates: Vec<u64>,
    /// UDP tests: `bitrates` are per stream (`-b 100M/stream`, iperf3's meaning): each cell
    /// offers the rate times its streams. The one rate of a single test is kept in
    /// `bitrates` too, since the spec holds only the total.
    pub bitrate_per_stream: bool,
    /// UDP tests: datagram sizes, bytes, xbench's header included (`-u -l 64,1400`).
    pub datagram_lens: Vec<u32>,
    /// Runs of each cell (`--repeat`).
    pub repeat: NonZeroU32,
    /// Wait between two runs, to let queues drain and to spread runs over time (`--pause`).
    pub pause: Duration,
    /// Where to save each finished run (`--save`); `None` keeps them in memory only.
    pub save: Option<PathBuf>,
    /// Skip runs already saved instead of refusing a directory that has some (`--resume`);
    /// only with `save`.
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
    pub spec: TestSpec,
    /// Where it is saved, with `save`.
    pub path: Option<PathBuf>,
}

impl SweepPlan {
    /// One run of `spec` against `target`, labelled `label`: no lists, no repeats, nothing
    /// saved. Set the fields to sweep.
    pub fn new(target: Target, spec: TestSpec, label: impl Into<String>) -> Self {
        SweepPlan {
            target,
            spec,
            label: label.into(),
            streams: Vec::new(),
            windows: Vec::new(),
            rr_sizes: Vec::new(),
            flows: Vec::new(),
            bitrates: Vec::new(),
            bitrate_per_stream: false,
            datagram_lens: Vec::new(),
            repeat: NonZeroU32::MIN,
            pause: Duration::ZERO,
            save: None,
            resume: false,
        }
    }

    /// Checks the lists and the label. Duplicates are refused: a list value is a cell.
    pub fn check(&self) -> Result<(), SweepError> {
        layout::check_label(&self.label).map_err(SweepError::Label)?;
        let is_rr = self.spec.as_rr().is_some();
        if is_rr && !self.streams.is_empty() {
            return Err(SweepError::NotApplicable {
                flag: Field::Streams,
                kind: "request/response",
            });
        }
        if !is_rr && !self.rr_sizes.is_empty() {
            return Err(SweepError::NotApplicable {
                flag: Field::RrSize,
                kind: "throughput",
            });
        }
        if !is_rr && !self.flows.is_empty() {
            return Err(SweepError::NotApplicable {
                flag: Field::Flows,
                kind: "throughput",
            });
        }
        let is_udp = self.spec.as_throughput().is_some_and(|t| t.udp.is_some());
        for (flag, given) in [
            (Field::Bitrate, !self.bitrates.is_empty()),
            (Field::Length, !self.datagram_lens.is_empty()),
        ] {
            if given && !is_udp {
                return Err(SweepError::UdpOnly { flag: flag.flag() });
            }
        }
        if self.bitrate_per_stream && self.bitrates.is_empty() {
            return Err(SweepError::UdpOnly {
                flag: "-b …/stream",
            });
        }
        no_duplicates(Field::Streams, &self.streams, |v| v.to_string())?;
        no_duplicates(Field::Bitrate, &self.bitrates, |v| {
            xbench_report::cell::short_rate(*v)
        })?;
        no_duplicates(Field::Length, &self.datagram_lens, |v| v.to_string())?;
        no_duplicates(Field::Window, &self.windows, |v| {
            xbench_report::cell::short_size(*v)
        })?;
        no_duplicates(Field::RrSize, &self.rr_sizes, |(q, r)| format!("{q},{r}"))?;
        no_duplicates(Field::Flows, &self.flows, |v| v.to_string())?;
        // Every cell must be a test the server would take (a rate below one datagram a second
        // at one of the sizes, …), found before the first run rather than at it.
        for c in self.cells() {
            c.validate()?;
        }
        Ok(())
    }

    /// Whether `xbench client` runs this plan as a sweep (a line per run, then the summary
    /// table) rather than as one test: a list with more than one value, more than one repeat,
    /// or runs to save.
    pub fn is_sweep(&self) -> bool {
        self.streams.len() > 1
            || self.windows.len() > 1
            || self.rr_sizes.len() > 1
            || self.flows.len() > 1
            || self.bitrates.len() > 1
            || self.datagram_lens.len() > 1
            || self.repeat.get() > 1
            || self.save.is_some()
    }

    /// The same plan written one way: a one-value list folded into the spec, the spec holding
    /// the first value of every longer list (as a single test of the command line would), and
    /// no `resume` without `save`. Two plans that run the same runs normalize equal.
    pub fn normalized(&self) -> SweepPlan {
        let mut p = self.clone();
        if let Some(&w) = p.windows.first() {
            p.spec.socket.window = Some(w);
        }
        let per_stream = p.bitrate_per_stream;
        match &mut p.spec.workload {
            Workload::Throughput(t) => {
                if let Some(&n) = p.streams.first() {
                    t.streams = n;
                }
                if let Some(u) = &mut t.udp {
                    if let Some(&l) = p.datagram_lens.first() {
                        u.datagram_len = l;
                        t.block_len = block_len(l, t.block_len);
                    }
                    if let Some(&b) = p.bitrates.first() {
                        u.bitrate = total_rate(b, per_stream, t.streams);
                    }
                }
            }
            Workload::RequestResponse(r) => {
                if let Some(&(q, s)) = p.rr_sizes.first() {
                    (r.request_len, r.response_len) = (q, s);
                }
                if let Some(&f) = p.flows.first() {
                    r.flows = f;
                }
            }
            _ => {}
        }
        fn fold<T>(list: &mut Vec<T>) {
            if list.len() == 1 {
                list.clear();
            }
        }
        fold(&mut p.streams);
        fold(&mut p.windows);
        fold(&mut p.rr_sizes);
        fold(&mut p.flows);
        fold(&mut p.datagram_lens);
        // A per-stream rate stays: the spec holds only the total of its streams.
        if !per_stream {
            fold(&mut p.bitrates);
        }
        p.resume &= p.save.is_some();
        p
    }

    /// The plan of cell `cell` alone (in [`SweepPlan::cells`] order): its test, run once,
    /// nothing saved. Written as a command ([`SweepPlan::client_args`]) it is a single test.
    pub fn cell(&self, cell: usize) -> Option<SweepPlan> {
        let spec = self.cells().into_iter().nth(cell)?;
        Some(SweepPlan::new(
            self.target.clone(),
            spec,
            self.label.clone(),
        ))
    }

    /// Every cell's test, in matrix order: windows outermost, then UDP datagram sizes and
    /// rates, then streams or request/response sizes and flows.
    pub fn cells(&self) -> Vec<TestSpec> {
        let windows: Vec<Option<u64>> = if self.windows.is_empty() {
            vec![self.spec.socket.window]
        } else {
            self.windows.iter().map(|w| Some(*w)).collect()
        };
        let mut out = Vec::new();
        for w in windows {
            let mut c = self.spec.clone();
            c.socket.window = w;
            match &c.workload {
                Workload::Throughput(t) => out.extend(self.throughput_cells(&c, t)),
                Workload::RequestResponse(r) => out.extend(self.rr_cells(&c, r)),
                // A workload kind this crate does not know: run it as given.
                _ => out.push(c),
            }
        }
        out
    }

    /// A throughput spec's cells: each UDP (datagram size, rate) pair, then each stream count.
    fn throughput_cells(&self, c: &TestSpec, t: &ThroughputSpec) -> Vec<TestSpec> {
        let mut out = Vec::new();
        let streams = if self.streams.is_empty() {
            vec![t.streams]
        } else {
            self.streams.clone()
        };
        for (len, rate) in self.udp_points(t) {
            for &p in &streams {
                let mut c = c.clone();
                if let Workload::Throughput(t) = &mut c.workload {
                    t.streams = p;
                    if let Some(u) = &mut t.udp {
                        if let Some(l) = len {
                            u.datagram_len = l;
                            t.block_len = block_len(l, t.block_len);
                        }
                        if let Some(r) = rate {
                            u.bitrate = total_rate(r, self.bitrate_per_stream, p);
                        }
                    }
                }
                out.push(c);
            }
        }
        out
    }

    /// The UDP (datagram size, rate) pairs as listed, sizes outermost; `None`: the spec's own.
    /// One `(None, None)` for TCP.
    fn udp_points(&self, t: &ThroughputSpec) -> Vec<(Option<u32>, Option<u64>)> {
        match &t.udp {
            None => vec![(None, None)],
            Some(_) => {
                let lens: Vec<Option<u32>> = if self.datagram_lens.is_empty() {
                    vec![None]
                } else {
                    self.datagram_lens.iter().copied().map(Some).collect()
                };
                let rates: Vec<Option<u64>> = if self.bitrates.is_empty() {
                    vec![None]
                } else {
                    self.bitrates.iter().copied().map(Some).collect()
                };
                lens.iter()
                    .flat_map(|l| rates.iter().map(move |r| (*l, *r)))
                    .collect()
            }
        }
    }

    /// A request/response spec's cells: each (request, response) size, then each flow count.
    fn rr_cells(&self, c: &TestSpec, r: &RrSpec) -> Vec<TestSpec> {
        let mut out = Vec::new();
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
                if let Workload::RequestResponse(r) = &mut c.workload {
                    r.request_len = q;
                    r.response_len = s;
                    r.flows = f;
                }
                out.push(c);
            }
        }
        out
    }

    /// How many runs the plan makes: cells × repeats.
    pub fn run_count(&self) -> usize {
        self.cells().len() * self.repeat.get() as usize
    }

    /// The runs in the order they happen: repeat 1 of every cell, then repeat 2, …
    pub fn schedule(&self) -> Vec<PlannedRun> {
        let cells = self.cells();
        let mut out = Vec::with_capacity(cells.len() * self.repeat.get() as usize);
        for repeat in 1..=self.repeat.get() {
            for (i, spec) in cells.iter().enumerate() {
                let key = CellKey::of_spec(spec);
                let path = self.save.as_ref().map(|dir| {
                    layout::run_file(&layout::cell_dir(dir, &self.label, &key.slug()), repeat)
                });
                out.push(PlannedRun {
                    index: out.len(),
                    cell: i,
                    repeat,
                    key,
                    spec: spec.clone(),
                    path,
                });
            }
        }
        out
    }
}

/// The block length of a UDP cell: its datagram size, as `xbench client -u -l` sets both (a
/// server's `--max-block-len` bounds it).
fn block_len(datagram_len: u32, otherwise: NonZeroU32) -> NonZeroU32 {
    NonZeroU32::new(datagram_len).unwrap_or(otherwise)
}

/// A UDP test's total rate from a listed one: times the streams when it is per stream; `None`
/// (unpaced) for 0. Saturates: a rate that large is refused by the spec's bounds.
fn total_rate(listed: u64, per_stream: bool, streams: NonZeroU16) -> Option<u64> {
    let total = if per_stream {
        listed.saturating_mul(u64::from(streams.get()))
    } else {
        listed
    };
    (total > 0).then_some(total)
}

fn no_duplicates<T: PartialEq>(
    flag: Field,
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
            streams: streams
                .iter()
                .map(|p| NonZeroU16::new(*p).unwrap())
                .collect(),
            repeat: NonZeroU32::new(repeat).unwrap(),
            save: Some("/tmp/x".into()),
            ..SweepPlan::new(Target::new("127.0.0.1"), TestSpec::throughput(), "a")
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
            Err(SweepError::Duplicate {
                flag: Field::Streams,
                ..
            })
        ));
        let mut p = plan(&[], 1);
        p.flows = vec![xbench::config::FlowCount::MIN];
        assert!(matches!(
            p.check(),
            Err(SweepError::NotApplicable {
                flag: Field::Flows,
                ..
            })
        ));
        let mut p = plan(&[1], 1);
        p.label = "../etc".into();
        assert!(matches!(p.check(), Err(SweepError::Label(_))));
    }

    #[test]
    fn one_value_lists_fold_into_the_spec_and_run_the_same_cells() {
        let mut p = plan(&[4], 1);
        p.save = None;
        p.resume = true;
        assert!(
            !p.is_sweep(),
            "one cell, once, nothing saved: a single test"
        );
        let n = p.normalized();
        assert!(n.streams.is_empty() && !n.resume);
        assert_eq!(n.spec.as_throughput().unwrap().streams.get(), 4);
        assert_eq!(n.cells(), p.cells());
        assert_eq!(n.normalized(), n, "normalizing twice changes nothing");

        let mut p = plan(&[2, 8], 1);
        p.windows = vec![64 << 10];
        let n = p.normalized();
        assert!(n.is_sweep());
        assert_eq!(n.streams.len(), 2, "a real list stays");
        assert_eq!(n.spec.as_throughput().unwrap().streams.get(), 2);
        assert_eq!(n.spec.socket.window, Some(64 << 10));
        assert_eq!(n.cells(), p.cells());
    }

    #[test]
    fn a_cell_is_a_single_test_of_that_cell() {
        let mut p = plan(&[1, 8], 3);
        p.windows = vec![64 << 10, 1 << 20];
        assert_eq!(p.run_count(), 12);
        let c = p.cell(3).unwrap();
        assert!(!c.is_sweep());
        assert_eq!(c.cells(), [p.cells()[3].clone()]);
        assert_eq!(c.spec.socket.window, Some(1 << 20));
        assert_eq!((c.target, c.label), (p.target.clone(), p.label.clone()));
        assert!(p.cell(4).is_none());
    }

    fn udp_plan() -> SweepPlan {
        let mut spec = TestSpec::throughput();
        if let Workload::Throughput(t) = &mut spec.workload {
            t.udp = Some(xbench::config::UdpSpec::default());
        }
        SweepPlan {
            bitrates: vec![100_000_000, 200_000_000, 500_000_000],
            datagram_lens: vec![64, 1400],
            repeat: NonZeroU32::new(5).unwrap(),
            save: Some("/tmp/x".into()),
            ..SweepPlan::new(Target::new("127.0.0.1"), spec, "a")
        }
    }

    #[test]
    fn udp_rates_and_sizes_make_a_matrix() {
        let p = udp_plan();
        p.check().unwrap();
        assert_eq!(p.run_count(), 30);
        let slugs: Vec<String> = p.schedule()[..6].iter().map(|r| r.key.slug()).collect();
        assert_eq!(
            slugs,
            [
                "udp-up-b100M-l64-P1",
                "udp-up-b200M-l64-P1",
                "udp-up-b500M-l64-P1",
                "udp-up-b100M-l1400-P1",
                "udp-up-b200M-l1400-P1",
                "udp-up-b500M-l1400-P1"
            ]
        );
        let n = p.normalized();
        assert_eq!(n.cells(), p.cells());
        let u = n.spec.as_throughput().unwrap().udp.unwrap();
        assert_eq!((u.datagram_len, u.bitrate), (64, Some(100_000_000)));
    }

    #[test]
    fn a_per_stream_rate_is_multiplied_by_each_cells_streams() {
        let mut p = udp_plan();
        p.datagram_lens.clear();
        p.bitrates = vec![100_000_000];
        p.bitrate_per_stream = true;
        p.streams = [1, 4].map(|n| NonZeroU16::new(n).unwrap()).to_vec();
        let totals: Vec<Option<u64>> = p
            .cells()
            .iter()
            .map(|c| c.as_throughput().unwrap().udp.unwrap().bitrate)
            .collect();
        assert_eq!(totals, [Some(100_000_000), Some(400_000_000)]);
        // One value with one stream count: a single test of the total, the list kept.
        p.streams = vec![NonZeroU16::new(4).unwrap()];
        p.repeat = NonZeroU32::MIN;
        p.save = None;
        let n = p.normalized();
        assert!(!n.is_sweep());
        assert_eq!(n.bitrates, [100_000_000]);
        let u = n.spec.as_throughput().unwrap().udp.unwrap();
        assert_eq!(u.bitrate, Some(400_000_000));
        assert_eq!(n.cells(), p.cells());
    }

    #[test]
    fn udp_lists_are_refused_for_tcp_and_bad_cells_before_any_run() {
        let mut p = plan(&[1], 1);
        p.bitrates = vec![1_000_000, 2_000_000];
        assert!(matches!(p.check(), Err(SweepError::UdpOnly { flag: "-b" })));
        let mut p = udp_plan();
        p.bitrates = vec![100_000_000, 100_000_000];
        assert!(matches!(
            p.check(),
            Err(SweepError::Duplicate {
                flag: Field::Bitrate,
                ..
            })
        ));
        // 8 bit/s is below one 64-byte datagram a second.
        let mut p = udp_plan();
        p.bitrates = vec![8, 100_000_000];
        let e = p.check().unwrap_err().to_string();
        assert!(e.contains("-b"), "{e}");
    }
}
