//! A suite: the tests a path comparison runs on every path, each with the lists it sweeps.
//!
//! One definition serves both places that compare paths: `xbench lab run` builds its suite
//! from its flags, and `xbench-deploy run` reads a scenario's `[suite]` (or a `--suite FILE`),
//! written in xbench's own terms and checked into typed values here. Either way a test is
//! expanded into cells by this crate's sweep expansion ([`SweepPlan::cells`]), so a suite means
//! exactly what the same lists on `xbench client` mean.
//!
//! ```toml
//! [suite]
//! time = 10          # -t, seconds or "500ms"; per test too
//! omit = 2           # -O
//! repeat = 15        # runs of every cell, round-robin over cells and paths
//! pause = "5s"       # between two runs
//! every = "4h"       # repeat N starts (N-1) x 4 h after the first: report 000's 15 runs over 3 days
//! trace = true       # --trace on every run: the hops of each path, as mtr shows them
//!
//! [[suite.test]]
//! parallel = [1, 2, 4, 8, 16]   # -P
//!
//! [[suite.test]]
//! window = ["64K", "256K", "1M"]   # -w
//! direction = ["up", "down"]       # up: client sends; down: -R; bidir: --bidir
//!
//! [[suite.test]]
//! under-load = true                # --under-load: latency probes idle, loaded, idle again
//! direction = "bidir"              # the load: up, down or bidir (flent's RRUL)
//!
//! [[suite.test]]
//! rr = true
//! rr-size = ["1,1", "64,16K"]      # -r
//! flows = [1, 4]                   # --flows
//! rate = "10ms"                    # --rate
//! time = 60
//! ```
//!
//! Keys are `xbench client`'s long flag names; a key xbench does not have is refused (serde's
//! `deny_unknown_fields`), naming the key. This module runs nothing: each test becomes a
//! [`SweepPlan`] ([`SuiteTest::plan`]) that [`crate::run`] runs, or that a deployment writes
//! as `xbench client` command lines.

use std::collections::BTreeSet;
use std::num::{NonZeroU16, NonZeroU32};
use std::time::Duration;

use crate::{SweepError, SweepPlan, Target};
use serde::Deserialize;
use xbench::config::{
    Direction, EndCondition, FlowCount, MAX_FLOWS, ReceiveMode, RrSpec, SocketOptions, TestSpec,
    ThroughputSpec, Workload,
};
use xbench::under_load::UnderLoadSpec;
use xbench::units::{BitRate, ByteSize};
use xbench_report::cell::CellKey;

/// Time a run takes beyond its test: connecting, the server's results, the SSM or lab round
/// trip. Used for the expected length of a suite (and so its cost), never for timeouts.
pub const RUN_OVERHEAD: Duration = Duration::from_secs(4);

/// A checked suite.
#[derive(Debug, Clone, PartialEq)]
pub struct Suite {
    /// Runs of every cell.
    pub repeat: NonZeroU32,
    /// Wait between two runs.
    pub pause: Duration,
    /// `every = "4h"`: repeat `n` starts no sooner than `(n - 1) × every` after the first
    /// began, so a cell's repeats sample different hours (report 000 spread its 15 runs over
    /// three days: a suite run in one sitting measures one afternoon 15 times). `run --resume`
    /// keeps the schedule across restarts. `None`: each repeat starts when the last ends.
    pub every: Option<Duration>,
    /// The tests, one per direction of each `[[suite.test]]`, in file order.
    pub tests: Vec<SuiteTest>,
    /// `trace = true`: every run probes the hops of its path while it runs (`--trace`), so
    /// each path's report shows where its RTT is spent (report 003 ran `mtr` beside iperf3
    /// for that). The probes are a few a second, rate-limited not to disturb the test.
    pub trace: bool,
}

/// One test of a suite and the lists it sweeps, as `xbench client` takes them.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteTest {
    /// The test every cell starts from.
    pub spec: TestSpec,
    /// `-P` values; empty keeps the spec's.
    pub streams: Vec<NonZeroU16>,
    /// `-w` values, bytes; empty keeps the spec's.
    pub windows: Vec<u64>,
    /// `-r` values; empty keeps the spec's.
    pub rr_sizes: Vec<(NonZeroU32, NonZeroU32)>,
    /// `--flows` values; empty keeps the spec's.
    pub flows: Vec<FlowCount>,
    /// `-b` values of a UDP test, bits per second; empty keeps the spec's.
    pub bitrates: Vec<u64>,
    /// `-l` values of a UDP test, datagram payload bytes; empty keeps the spec's.
    pub datagram_lens: Vec<u32>,
}

/// Why a suite was refused; each message names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SuiteError {
    /// Not valid TOML, or a key xbench does not have.
    #[error("suite: {0}")]
    Syntax(String),
    /// A value xbench would refuse.
    #[error("suite test {test}: {key}: {problem}")]
    BadValue {
        /// Which `[[suite.test]]`, from 1 (0 for the `[suite]` table itself).
        test: usize,
        /// The key.
        key: String,
        /// What is wrong and what to write.
        problem: String,
    },
    /// The suite has no test.
    #[error("suite: no [[suite.test]]; add at least one, e.g. parallel = [1, 2, 4]")]
    Empty,
    /// Two tests measure the same cell.
    #[error("suite: tests {first} and {second} both measure {cell}; each cell once")]
    DuplicateCell {
        /// The cell.
        cell: String,
        /// First test, from 1.
        first: usize,
        /// Second test, from 1.
        second: usize,
    },
}

impl Suite {
    /// Parses a suite file: the same keys as a scenario's `[suite]` table, at the top level.
    pub fn from_toml(text: &str) -> Result<Suite, SuiteError> {
        let raw: RawSuite = toml::from_str(text).map_err(|e| syntax(&e.to_string()))?;
        raw.check()
    }

    /// Every cell, in order: each test's cells as `xbench client` expands its lists.
    pub fn cells(&self) -> Vec<TestSpec> {
        self.tests.iter().flat_map(SuiteTest::cells).collect()
    }

    /// The same suite with `--every` applied (see [`Suite::every`]).
    pub fn with_every(mut self, every: Option<Duration>) -> Suite {
        if every.is_some() {
            self.every = every;
        }
        self
    }

    /// The same suite with `--time` and `--repeat` applied.
    pub fn with_overrides(mut self, time: Option<Duration>, repeat: Option<NonZeroU32>) -> Suite {
        if let Some(t) = time {
            for test in &mut self.tests {
                test.spec.end = EndCondition::Duration(t);
                // An omit longer than the test would leave nothing measured.
                test.spec.omit = test.spec.omit.min(t / 2);
            }
        }
        if let Some(r) = repeat {
            self.repeat = r;
        }
        self
    }

    /// How long one path's share of the suite takes, overheads and pauses included.
    pub fn expected_per_path(&self) -> Duration {
        let runs = self.repeat.get();
        let one_round: Duration = self.cells().iter().map(expected_run).sum();
        one_round * runs
    }

    /// Runs per path.
    pub fn runs_per_path(&self) -> usize {
        self.cells().len() * self.repeat.get() as usize
    }

    /// How long the whole suite takes over `paths` paths, one run at a time: with `every`,
    /// from the first repeat's start to the last one's end (the hosts are up, and billed,
    /// in between).
    pub fn expected(&self, paths: usize) -> Duration {
        let n = u32::try_from(paths).unwrap_or(u32::MAX);
        let runs = u32::try_from(self.runs_per_path()).unwrap_or(u32::MAX);
        let all =
            self.expected_per_path() * n + self.pause * runs.saturating_mul(n).saturating_sub(1);
        let Some(every) = self.every else {
            return all;
        };
        let repeats = self.repeat.get();
        // One repeat, and the pause before the next.
        let round = all / repeats;
        let step = every.max(round + self.pause);
        step.saturating_mul(repeats - 1) + round
    }
}

/// How long one run of `spec` takes, with [`RUN_OVERHEAD`].
pub fn expected_run(spec: &TestSpec) -> Duration {
    let test = match spec.end {
        EndCondition::Duration(d) => d,
        // Byte counts never come from a suite; count them as the default 10 s.
        EndCondition::Bytes(_) => Duration::from_secs(10),
    };
    // Latency under load rests the path before and after its load.
    let idle = spec
        .as_throughput()
        .and_then(|t| t.under_load)
        .map_or(Duration::ZERO, |u| u.idle * 2);
    spec.omit + test + idle + RUN_OVERHEAD
}

impl SuiteTest {
    /// A test of `spec` that sweeps nothing: one cell, until lists are set.
    pub fn new(spec: TestSpec) -> SuiteTest {
        SuiteTest {
            spec,
            streams: Vec::new(),
            windows: Vec::new(),
            rr_sizes: Vec::new(),
            flows: Vec::new(),
            bitrates: Vec::new(),
            datagram_lens: Vec::new(),
        }
    }

    /// The cells of this test, through the library's sweep expansion.
    pub fn cells(&self) -> Vec<TestSpec> {
        self.sweep().cells()
    }

    /// The test at `target`, saved (when the caller sets `save`) under `label`: one run of
    /// each cell, no pause; the suite's repeats and pause are the caller's to apply, as the
    /// lab runs one sweep per test and a deployment interleaves paths between runs.
    pub fn plan(&self, target: Target, label: &str) -> SweepPlan {
        SweepPlan {
            streams: self.streams.clone(),
            windows: self.windows.clone(),
            rr_sizes: self.rr_sizes.clone(),
            flows: self.flows.clone(),
            bitrates: self.bitrates.clone(),
            datagram_lens: self.datagram_lens.clone(),
            ..SweepPlan::new(target, self.spec.clone(), label)
        }
    }

    fn sweep(&self) -> SweepPlan {
        self.plan(Target::new("suite"), "suite")
    }
}

fn syntax(message: &str) -> SuiteError {
    SuiteError::Syntax(format!("{}{}", message.trim_end(), hint(message)))
}

/// What to add to a TOML error about an unknown key of a suite (found by the list of keys
/// serde names), so the user learns the keys are xbench's flags; empty for other errors.
pub fn hint(message: &str) -> &'static str {
    let about_suite = message.contains("unknown field")
        && (message.contains("`parallel`") || message.contains("`repeat`"));
    if about_suite {
        "\nsuite keys are xbench client's long flags (parallel, window, time, omit, interval, \
         length, bitrate, no-delay, congestion, set-mss, zerocopy, recv-copy, under-load, rr, crr, \
         rr-size, flows, burst, rate) and direction, repeat, pause, every"
    } else {
        ""
    }
}

/// The `[suite]` table as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawSuite {
    time: Option<TimeValue>,
    omit: Option<TimeValue>,
    interval: Option<TimeValue>,
    repeat: Option<u32>,
    pause: Option<TimeValue>,
    every: Option<TimeValue>,
    #[serde(default)]
    trace: bool,
    #[serde(default)]
    test: Vec<RawTest>,
}

/// A time as a number of seconds or a string with a unit (`"500ms"`, `"2m"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum TimeValue {
    Seconds(f64),
    Text(String),
}

/// One value or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T: Clone> OneOrMany<T> {
    fn to_vec(&self) -> Vec<T> {
        match self {
            OneOrMany::One(v) => vec![v.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// A number or a string with a unit.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum NumberOrText {
    Number(f64),
    Text(String),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawTest {
    time: Option<TimeValue>,
    omit: Option<TimeValue>,
    interval: Option<TimeValue>,
    direction: Option<OneOrMany<String>>,
    parallel: Option<OneOrMany<u32>>,
    window: Option<OneOrMany<String>>,
    length: Option<NumberOrText>,
    bitrate: Option<NumberOrText>,
    #[serde(default)]
    no_delay: bool,
    congestion: Option<String>,
    set_mss: Option<u32>,
    #[serde(default)]
    zerocopy: bool,
    #[serde(default)]
    recv_copy: bool,
    #[serde(default)]
    under_load: bool,
    #[serde(default)]
    rr: bool,
    #[serde(default)]
    crr: bool,
    rr_size: Option<OneOrMany<String>>,
    flows: Option<OneOrMany<u32>>,
    burst: Option<u32>,
    rate: Option<NumberOrText>,
}

/// Seconds (`10`, `0.5`) or a string with a unit, as `xbench client -t` takes them. Whole
/// milliseconds only, so the value survives the trip through a command line unchanged.
fn time(test: usize, key: &str, v: &TimeValue) -> Result<Duration, SuiteError> {
    let bad = |problem: String| SuiteError::BadValue {
        test,
        key: key.to_owned(),
        problem,
    };
    let secs = match v {
        TimeValue::Seconds(s) => *s,
        // xbench's own time parser: a suite's "2m" is the command line's -t 2m.
        TimeValue::Text(t) => xbench::units::parse_duration(t)
            .map_err(|e| bad(e.to_string()))?
            .as_secs_f64(),
    };
    if !secs.is_finite() || secs < 0.0 || secs > xbench::config::MAX_DURATION.as_secs_f64() {
        return Err(bad(format!("{secs} s is outside 0 to a week")));
    }
    let ms = (secs * 1e3).round();
    if (ms - secs * 1e3).abs() > 1e-6 {
        return Err(bad("give whole milliseconds".into()));
    }
    Ok(Duration::from_millis(ms as u64))
}

impl RawSuite {
    /// Checks the `[suite]` table of a scenario (or a suite file) into a [`Suite`].
    pub fn check(self) -> Result<Suite, SuiteError> {
        let bad = |key: &str, problem: &str| SuiteError::BadValue {
            test: 0,
            key: key.to_owned(),
            problem: problem.to_owned(),
        };
        let repeat = match self.repeat {
            None => NonZeroU32::MIN,
            Some(n) => NonZeroU32::new(n)
                .filter(|n| n.get() <= 1000)
                .ok_or_else(|| bad("repeat", "must be 1 to 1000"))?,
        };
        let pause = match &self.pause {
            Some(p) => time(0, "pause", p)?,
            None => Duration::ZERO,
        };
        let every = match &self.every {
            Some(e) => Some(time(0, "every", e)?)
                .filter(|e| !e.is_zero())
                .map(Some)
                .ok_or_else(|| bad("every", "must be longer than 0"))?,
            None => None,
        };
        if self.test.is_empty() {
            return Err(SuiteError::Empty);
        }
        let defaults = Defaults {
            time: self.time.as_ref().map(|t| time(0, "time", t)).transpose()?,
            omit: self.omit.as_ref().map(|t| time(0, "omit", t)).transpose()?,
            interval: self
                .interval
                .as_ref()
                .map(|t| time(0, "interval", t))
                .transpose()?,
        };
        let mut tests = Vec::new();
        let mut owner: Vec<(usize, SuiteTest)> = Vec::new();
        for (i, raw) in self.test.iter().enumerate() {
            for t in raw.check(i + 1, &defaults)? {
                owner.push((i + 1, t.clone()));
                tests.push(t);
            }
        }
        check_distinct_cells(&owner)?;
        Ok(Suite {
            repeat,
            pause,
            every,
            tests,
            trace: self.trace,
        })
    }
}

/// Two tests of one suite must not measure the same cell: their runs would land in one
/// directory and be averaged as repeats.
fn check_distinct_cells(tests: &[(usize, SuiteTest)]) -> Result<(), SuiteError> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for (n, t) in tests {
        let mut own = BTreeSet::new();
        for spec in t.cells() {
            let slug = CellKey::of_spec(&spec).slug();
            if !own.insert(slug.clone()) {
                continue;
            }
            if let Some((_, first)) = seen.iter().find(|(s, _)| *s == slug) {
                return Err(SuiteError::DuplicateCell {
                    cell: slug,
                    first: *first,
                    second: *n,
                });
            }
            seen.push((slug, *n));
        }
    }
    Ok(())
}

struct Defaults {
    time: Option<Duration>,
    omit: Option<Duration>,
    interval: Option<Duration>,
}

impl RawTest {
    /// This test, one [`SuiteTest`] per direction.
    fn check(&self, n: usize, d: &Defaults) -> Result<Vec<SuiteTest>, SuiteError> {
        let bad = |key: &str, problem: String| SuiteError::BadValue {
            test: n,
            key: key.to_owned(),
            problem,
        };
        let rr = self.rr || self.crr;
        if self.rr && self.crr {
            return Err(bad("crr", "give rr or crr, not both".into()));
        }
        self.check_applicable(n, rr)?;
        let mut spec = if rr {
            TestSpec::request_response()
        } else {
            TestSpec::throughput()
        };
        self.common(n, d, &mut spec)?;
        let (streams, windows, rr_sizes, flows) = self.lists(n)?;
        if rr {
            spec.workload = Workload::RequestResponse(self.rr_spec(n)?);
        } else {
            spec.workload = Workload::Throughput(self.throughput_spec(n)?);
        }
        let directions = self.directions(n, rr)?;
        let mut out = Vec::new();
        for direction in directions {
            let mut spec = spec.clone();
            if let Workload::Throughput(t) = &mut spec.workload {
                t.direction = direction;
            }
            // The library's own bounds, as `xbench client` applies them.
            spec.validate()
                .map_err(|e| bad(e.field.long(), e.reason.clone()))?;
            let test = SuiteTest {
                streams: streams.clone(),
                windows: windows.clone(),
                rr_sizes: rr_sizes.clone(),
                flows: flows.clone(),
                ..SuiteTest::new(spec)
            };
            test.sweep().check().map_err(|e| match e {
                SweepError::Duplicate { flag, value } => bad(
                    flag.long(),
                    format!("lists {value} twice; each value is one cell"),
                ),
                // A cell the server would refuse, named by its suite key, not its flag.
                SweepError::Spec(e) => bad(e.field.long(), e.reason),
                other => bad("test", other.to_string()),
            })?;
            for cell in test.cells() {
                cell.validate()
                    .map_err(|e| bad(e.field.long(), e.reason.clone()))?;
            }
            out.push(test);
        }
        Ok(out)
    }

    /// Keys of the other kind of test are refused, as `xbench client` refuses the flags.
    fn check_applicable(&self, n: usize, rr: bool) -> Result<(), SuiteError> {
        let throughput_only = [
            ("direction", self.direction.is_some()),
            ("parallel", self.parallel.is_some()),
            ("length", self.length.is_some()),
            ("bitrate", self.bitrate.is_some()),
            ("zerocopy", self.zerocopy),
            ("recv-copy", self.recv_copy),
            ("under-load", self.under_load),
        ];
        let rr_only = [
            ("rr-size", self.rr_size.is_some()),
            ("flows", self.flows.is_some()),
            ("burst", self.burst.is_some()),
            ("rate", self.rate.is_some()),
        ];
        let (wrong, fix): (&[(&str, bool)], &str) = if rr {
            (&throughput_only, "applies to throughput tests, not rr/crr")
        } else {
            (&rr_only, "applies to request/response tests; add rr = true")
        };
        if let Some((key, _)) = wrong.iter().find(|(_, given)| *given) {
            return Err(SuiteError::BadValue {
                test: n,
                key: (*key).to_owned(),
                problem: fix.to_owned(),
            });
        }
        if self.crr && self.burst.is_some() {
            return Err(SuiteError::BadValue {
                test: n,
                key: "burst".into(),
                problem: "crr carries one transaction per connection; use flows".into(),
            });
        }
        Ok(())
    }

    fn common(&self, n: usize, d: &Defaults, spec: &mut TestSpec) -> Result<(), SuiteError> {
        let pick = |own: &Option<TimeValue>, key: &str, default: Option<Duration>| {
            own.as_ref()
                .map(|t| time(n, key, t))
                .transpose()
                .map(|t| t.or(default))
        };
        if let Some(t) = pick(&self.time, "time", d.time)? {
            if t.is_zero() {
                return Err(SuiteError::BadValue {
                    test: n,
                    key: "time".into(),
                    problem: "must be greater than 0".into(),
                });
            }
            spec.end = EndCondition::Duration(t);
        }
        if let Some(o) = pick(&self.omit, "omit", d.omit)? {
            spec.omit = o;
        }
        if let Some(i) = pick(&self.interval, "interval", d.interval)? {
            spec.interval = (!i.is_zero()).then_some(i);
        }
        spec.socket = SocketOptions {
            window: None,
            mss: self.set_mss,
            nodelay: self.no_delay,
            congestion: self.congestion.clone(),
        };
        Ok(())
    }

    #[allow(clippy::type_complexity)] // the four lists of a sweep, as SweepPlan holds them
    fn lists(
        &self,
        n: usize,
    ) -> Result<
        (
            Vec<NonZeroU16>,
            Vec<u64>,
            Vec<(NonZeroU32, NonZeroU32)>,
            Vec<FlowCount>,
        ),
        SuiteError,
    > {
        let bad = |key: &str, problem: String| SuiteError::BadValue {
            test: n,
            key: key.to_owned(),
            problem,
        };
        let count = |key: &str, v: u32| {
            u16::try_from(v)
                .ok()
                .and_then(NonZeroU16::new)
                .ok_or_else(|| bad(key, format!("{v} is not 1 to 65535")))
        };
        let streams = list(&self.parallel)
            .into_iter()
            .map(|v| count("parallel", v))
            .collect::<Result<Vec<_>, _>>()?;
        let flows = list(&self.flows)
            .into_iter()
            .map(|v| {
                FlowCount::new(v)
                    .ok_or_else(|| bad("flows", format!("{v} is not 1 to {MAX_FLOWS}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let windows = list(&self.window)
            .iter()
            .map(|w| {
                ByteSize::parse_with_unit(w)
                    .map(|b| b.0)
                    .map_err(|e| bad("window", e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rr_sizes = list(&self.rr_size)
            .iter()
            .map(|s| rr_size(s).map_err(|e| bad("rr-size", e)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((streams, windows, rr_sizes, flows))
    }

    fn throughput_spec(&self, n: usize) -> Result<ThroughputSpec, SuiteError> {
        let bad = |key: &str, problem: String| SuiteError::BadValue {
            test: n,
            key: key.to_owned(),
            problem,
        };
        let mut t = ThroughputSpec {
            // The default probes; the load is the test's own streams (4 unless `parallel`
            // says otherwise, as `xbench client --under-load`).
            under_load: self.under_load.then(UnderLoadSpec::default),
            streams: match self.under_load {
                true => NonZeroU16::MIN.saturating_add(3),
                false => NonZeroU16::MIN,
            },
            zerocopy: self.zerocopy,
            receive: if self.recv_copy {
                ReceiveMode::Copy
            } else {
                ReceiveMode::Discard
            },
            ..ThroughputSpec::default()
        };
        if let Some(l) = &self.length {
            let bytes = match l {
                NumberOrText::Number(v) => {
                    whole(*v).ok_or_else(|| bad("length", "not a whole number of bytes".into()))?
                }
                NumberOrText::Text(s) => {
                    ByteSize::parse(s)
                        .map_err(|e| bad("length", e.to_string()))?
                        .0
                }
            };
            t.block_len = u32::try_from(bytes)
                .ok()
                .and_then(NonZeroU32::new)
                .ok_or_else(|| bad("length", format!("{bytes} is not 1 byte to 4 GiB")))?;
        }
        if let Some(b) = &self.bitrate {
            // The command line's `-b` rule: a bare number too small to be bits per second was
            // meant with a unit.
            let text = match b {
                NumberOrText::Number(v) => whole(*v)
                    .ok_or_else(|| bad("bitrate", "not a whole number of bits per second".into()))?
                    .to_string(),
                NumberOrText::Text(s) => s.clone(),
            };
            let cap = BitRate::parse_cap(&text).map_err(|e| bad("bitrate", e.to_string()))?;
            t.bitrate = Some(cap.bits_per_second());
        }
        Ok(t)
    }

    fn rr_spec(&self, n: usize) -> Result<RrSpec, SuiteError> {
        let mut r = RrSpec {
            connect_per_transaction: self.crr,
            ..RrSpec::default()
        };
        if let Some(b) = self.burst {
            r.burst = NonZeroU32::new(b).ok_or_else(|| SuiteError::BadValue {
                test: n,
                key: "burst".into(),
                problem: "must be at least 1".into(),
            })?;
        }
        if let Some(rate) = &self.rate {
            r.rate_per_flow = Some(rate_value(rate).map_err(|problem| SuiteError::BadValue {
                test: n,
                key: "rate".into(),
                problem,
            })?);
        }
        Ok(r)
    }

    fn directions(&self, n: usize, rr: bool) -> Result<Vec<Direction>, SuiteError> {
        if rr {
            return Ok(vec![Direction::ClientToServer]);
        }
        let names = list(&self.direction);
        if names.is_empty() {
            return Ok(vec![Direction::ClientToServer]);
        }
        let mut out = Vec::new();
        for name in names {
            let d = match name.as_str() {
                "up" => Direction::ClientToServer,
                "down" => Direction::ServerToClient,
                "bidir" => Direction::Bidir,
                other => {
                    return Err(SuiteError::BadValue {
                        test: n,
                        key: "direction".into(),
                        problem: format!(
                            "`{other}` is not up (client sends), down (-R) or bidir (--bidir)"
                        ),
                    });
                }
            };
            if out.contains(&d) {
                return Err(SuiteError::BadValue {
                    test: n,
                    key: "direction".into(),
                    problem: format!("`{name}` is given twice"),
                });
            }
            out.push(d);
        }
        Ok(out)
    }
}

fn list<T: Clone>(v: &Option<OneOrMany<T>>) -> Vec<T> {
    v.as_ref().map(OneOrMany::to_vec).unwrap_or_default()
}

fn whole(v: f64) -> Option<u64> {
    (v.is_finite() && v >= 1.0 && v.fract() == 0.0 && v <= u64::MAX as f64).then_some(v as u64)
}

/// `REQ,RESP` or one size for both, as `xbench client -r` takes it.
fn rr_size(s: &str) -> Result<(NonZeroU32, NonZeroU32), String> {
    let (req, resp) = s.split_once(',').unwrap_or((s, s));
    let one = |v: &str| -> Result<NonZeroU32, String> {
        let b = ByteSize::parse(v.trim()).map_err(|e| e.to_string())?;
        u32::try_from(b.0)
            .ok()
            .and_then(NonZeroU32::new)
            .ok_or_else(|| format!("`{v}` is not 1 byte to 16 MiB"))
    };
    Ok((one(req)?, one(resp)?))
}

/// Transactions per second per flow: a number, or as `xbench client --rate` takes it (`"1.5k"`,
/// a gap `"10ms"`), by the same parser and bounds.
fn rate_value(v: &NumberOrText) -> Result<f64, String> {
    match v {
        NumberOrText::Number(n) => xbench::config::rate_per_flow(*n, &n.to_string()),
        NumberOrText::Text(t) => xbench::config::parse_rate_per_flow(t),
    }
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite(text: &str) -> Result<Suite, SuiteError> {
        Suite::from_toml(text)
    }

    #[test]
    fn streams_and_windows_expand_like_the_cli() {
        let s = suite(
            "time = 5\nrepeat = 3\n[[test]]\nparallel = [1, 2, 4]\n[[test]]\nwindow = [\"64K\", \"1M\"]\ndirection = [\"up\", \"down\"]\n",
        )
        .unwrap();
        let slugs: Vec<String> = s
            .cells()
            .iter()
            .map(|c| CellKey::of_spec(c).slug())
            .collect();
        assert_eq!(
            slugs,
            [
                "tcp-up-P1",
                "tcp-up-P2",
                "tcp-up-P4",
                "tcp-up-P1-w64K",
                "tcp-up-P1-w1M",
                "tcp-down-P1-w64K",
                "tcp-down-P1-w1M"
            ]
        );
        assert_eq!(s.runs_per_path(), 21);
        assert_eq!(
            s.expected_per_path(),
            (Duration::from_secs(5) + RUN_OVERHEAD) * 21
        );
    }

    /// `under-load = true`: the direction is the load's, four streams unless `parallel` says
    /// otherwise, its own cell beside a plain test of the same streams, and a run's expected
    /// length counts the two idle phases. Not with rr.
    #[test]
    fn latency_under_load_is_a_test_of_its_own() {
        let s = suite(
            "time = 10\n[[test]]\nunder-load = true\ndirection = \"bidir\"\n[[test]]\nparallel = 4\ndirection = \"bidir\"\n",
        )
        .unwrap();
        let cells = s.cells();
        assert_eq!(cells.len(), 2, "{cells:?}");
        let t = cells[0].as_throughput().unwrap();
        assert_eq!(t.under_load, Some(UnderLoadSpec::default()));
        assert_eq!((t.direction, t.streams.get()), (Direction::Bidir, 4));
        assert_ne!(
            CellKey::of_spec(&cells[0]).slug(),
            CellKey::of_spec(&cells[1]).slug()
        );
        assert_eq!(
            expected_run(&cells[0]) - expected_run(&cells[1]),
            UnderLoadSpec::default().idle * 2
        );
        let e = suite("[[test]]\nrr = true\nunder-load = true\n").unwrap_err();
        assert!(e.to_string().contains("under-load"), "{e}");
    }

    /// `every` spreads the repeats: the suite then spans (repeat - 1) x every and the last
    /// repeat; a repeat longer than `every` pushes the next one back instead of overlapping.
    #[test]
    fn every_spreads_repeats_and_the_span_counts_the_wait() {
        let s =
            suite("time = 10\nrepeat = 3\nevery = \"1h\"\n[[test]]\nparallel = [1, 2]\n").unwrap();
        assert_eq!(s.every, Some(Duration::from_secs(3600)));
        // 2 cells x 14 s = 28 s a repeat on one path.
        assert_eq!(s.expected(1), Duration::from_secs(2 * 3600 + 28));
        let tight = s.clone().with_every(Some(Duration::from_secs(10)));
        assert_eq!(tight.expected(1), Duration::from_secs(3 * 28));
        assert_eq!(
            s.clone().with_every(None),
            s,
            "no --every keeps the suite's"
        );
        let e = suite("every = 0\nrepeat = 2\n[[test]]\nparallel = 1\n").unwrap_err();
        assert!(e.to_string().contains("longer than 0"), "{e}");
        // One repeat (a quick try with --repeat 1) waits for nothing.
        let once = s.with_overrides(None, NonZeroU32::new(1));
        assert_eq!(once.expected(1), Duration::from_secs(28));
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = suite("[[test]]\nparallel = 2\nzero-copy = true\n").unwrap_err();
        assert!(e.to_string().contains("zero-copy"), "{e}");
        let e = suite("[[test]]\nrr = true\nparallel = 2\n").unwrap_err();
        assert!(
            e.to_string().contains("parallel") && e.to_string().contains("throughput"),
            "{e}"
        );
        let e = suite("[[test]]\nflows = [1]\n").unwrap_err();
        assert!(e.to_string().contains("add rr = true"), "{e}");
    }

    #[test]
    fn values_xbench_refuses_are_refused() {
        let e = suite("[[test]]\nparallel = [1, 1]\n").unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        let e = suite("[[test]]\nwindow = [\"256\"]\n").unwrap_err();
        assert!(e.to_string().contains("window"), "{e}");
        let e = suite("[[test]]\nparallel = 2000\n").unwrap_err();
        assert!(e.to_string().contains("parallel"), "{e}");
        let e = suite("[[test]]\nparallel = [1]\n[[test]]\nparallel = 1\n").unwrap_err();
        assert!(matches!(e, SuiteError::DuplicateCell { .. }), "{e}");
        let e = suite("[[test]]\nrr = true\ncongestion = \"../x\"\n").unwrap_err();
        assert!(e.to_string().contains("congestion"), "{e}");
    }

    /// `bitrate` follows `xbench client -b`'s rule: a bare number too small to be bits per
    /// second is refused as a missing unit, written as a number or as text (the spec's own
    /// 8 kbit/s floor refused it before, without saying the unit was missing).
    #[test]
    fn a_bitrate_follows_the_command_lines_rule() {
        let cap = |v: &str| {
            let s = suite(&format!("[[test]]\nbitrate = {v}\n"))?;
            Ok::<_, SuiteError>(s.cells()[0].as_throughput().unwrap().bitrate)
        };
        assert_eq!(cap("\"100M\"").unwrap(), Some(100_000_000));
        assert_eq!(cap("20000000").unwrap(), Some(20_000_000));
        for small in ["100", "\"100\""] {
            let e = cap(small).unwrap_err().to_string();
            assert!(e.contains("bitrate") && e.contains("100M"), "{e}");
        }
    }

    #[test]
    fn rr_rates_and_times() {
        let s = suite("time = \"1500ms\"\n[[test]]\nrr = true\nrate = \"10ms\"\nrr-size = [\"1,1\", \"64,16K\"]\nflows = [1, 4]\ntime = 60\n").unwrap();
        let cells = s.cells();
        assert_eq!(cells.len(), 4);
        let rr = cells[0].as_rr().unwrap();
        assert_eq!(rr.rate_per_flow, Some(100.0));
        assert_eq!(
            cells[0].end,
            EndCondition::Duration(Duration::from_secs(60))
        );
        let quick = s.with_overrides(Some(Duration::from_secs(2)), NonZeroU32::new(1));
        assert_eq!(
            quick.cells()[0].end,
            EndCondition::Duration(Duration::from_secs(2))
        );
    }
}
