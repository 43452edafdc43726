//! A plan written as the `xbench client` command that runs it: [`SweepPlan::client_args`], the
//! one place that knows how each field is spelled on the command line, for programs that
//! start `xbench` rather than link it (the lab runs it inside a network namespace; a
//! deployment writes it into a host's boot script). The `xbench` binary's tests parse what it
//! writes with the real command line and check that it resolves to the same plan.
//!
//! Only what differs from `xbench client`'s defaults is written, so commands stay short; a
//! value the command line cannot say exactly is an error, never a rounded flag.
//! Not for running a plan (see [`crate::run`]).

use std::path::Path;
use std::time::Duration;

use xbench::client::{AddressFamily, DEFAULT_OPENERS, DEFAULT_PORT, ServerProtocol};
use xbench::config::{
    Direction, EndCondition, ReceiveMode, RrSpec, SocketOptions, SpecError, TestSpec,
    ThroughputSpec, UdpSpec, Workload,
};

use xbench::under_load::UnderLoadSpec;

use crate::error::SweepError;
use crate::plan::SweepPlan;
use crate::target::Target;

/// Why a plan cannot be written as a command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// The plan would not run either (a bad label, a list that does not apply…).
    #[error(transparent)]
    Plan(#[from] SweepError),
    /// The test is out of bounds.
    #[error("invalid value for {}: {}", .0.field, .0.reason)]
    Spec(#[from] SpecError),
    /// A value `xbench client` has no way to say exactly.
    #[error("{0}")]
    Unexpressible(String),
}

impl SweepPlan {
    /// The arguments after `xbench` that run this plan: `["client", HOST, …]`.
    ///
    /// A plan that [`is_sweep`](SweepPlan::is_sweep) runs as a sweep; one cell run once and not
    /// saved (as [`SweepPlan::cell`] gives) is a single test, printed as one.
    ///
    /// ```
    /// use std::num::NonZeroU16;
    /// use std::time::Duration;
    /// use xbench::config::{EndCondition, TestSpec};
    /// use xbench_sweep::{SweepPlan, Target};
    ///
    /// let mut spec = TestSpec::throughput();
    /// spec.end = EndCondition::Duration(Duration::from_secs(5));
    /// let mut plan = SweepPlan::new(Target::new("198.18.0.2"), spec, "vpn");
    /// plan.streams = [1, 4].map(|n| NonZeroU16::new(n).unwrap()).to_vec();
    /// plan.save = Some("results".into());
    /// assert_eq!(
    ///     plan.client_args()?,
    ///     ["client", "198.18.0.2", "--label=vpn", "-P", "1,4", "-t", "5", "--save=results"]
    /// );
    /// assert_eq!(
    ///     plan.cell(1).unwrap().command_line("xbench")?,
    ///     "xbench client 198.18.0.2 --label=vpn -P 4 -t 5"
    /// );
    /// # Ok::<(), xbench_sweep::RenderError>(())
    /// ```
    pub fn client_args(&self) -> Result<Vec<String>, RenderError> {
        self.spec.validate()?;
        self.check()?;
        let mut a = Args(vec!["client".to_owned()]);
        a.target(&self.target)?;
        a.eq("--label", &self.label);
        a.spec(self)?;
        if self.repeat.get() > 1 {
            a.flag("--repeat", self.repeat);
        }
        if !self.pause.is_zero() {
            a.flag("--pause", seconds(self.pause)?);
        }
        if let Some(dir) = &self.save {
            a.eq("--save", utf8(dir)?);
            if self.resume {
                a.push("--resume");
            }
        }
        Ok(a.0)
    }

    /// [`SweepPlan::client_args`] after `program`, as one line a POSIX shell reads back into
    /// the same arguments (quoted where needed).
    pub fn command_line(&self, program: &str) -> Result<String, RenderError> {
        let mut words = vec![shell_quote(program)];
        words.extend(self.client_args()?.iter().map(|w| shell_quote(w)));
        Ok(words.join(" "))
    }
}

/// The arguments being written.
struct Args(Vec<String>);

impl Args {
    fn push(&mut self, word: &str) {
        self.0.push(word.to_owned());
    }

    fn flag(&mut self, flag: &str, value: impl ToString) {
        self.0.push(flag.to_owned());
        self.0.push(value.to_string());
    }

    /// `--flag=VALUE`, for free text that could start with a dash.
    fn eq(&mut self, flag: &str, value: &str) {
        self.0.push(format!("{flag}={value}"));
    }

    fn target(&mut self, t: &Target) -> Result<(), RenderError> {
        // Long on purpose: one destructuring of every Target field, each written in flag
        // order; split, a field added to Target could go unwritten without a compile error.
        // Destructured whole: a field added to Target does not compile until it is written.
        let Target {
            host,
            port,
            family,
            bind,
            flow_binds,
            max_connecting,
            connect_timeout,
            response_timeout,
            psk_file,
            protocol,
            per_flow,
            allow_partial_flows,
            connections_only,
            trace,
        } = t;
        let defaults = Target::local();
        match host {
            None => self.push("--local"),
            Some(h) if h.is_empty() || h.starts_with('-') => {
                return Err(RenderError::Unexpressible(format!(
                    "`{h}` is not a host name or address"
                )));
            }
            Some(h) => self.push(h),
        }
        if *port != DEFAULT_PORT {
            self.flag("-p", port);
        }
        match family {
            AddressFamily::Any => {}
            AddressFamily::V4 => self.push("-4"),
            AddressFamily::V6 => self.push("-6"),
        }
        match (bind, flow_binds.as_slice()) {
            (_, []) => {
                if let Some(b) = bind {
                    self.flag("-B", b);
                }
            }
            (Some(b), [first, ..]) if b == first => {
                let list: Vec<String> = flow_binds.iter().map(ToString::to_string).collect();
                self.flag("-B", list.join(","));
            }
            _ => {
                return Err(RenderError::Unexpressible(
                    "-B names the control connection's address first: flow_binds must start \
                     with bind"
                        .into(),
                ));
            }
        }
        if *max_connecting != defaults.max_connecting {
            self.flag("--max-connecting", max_connecting);
        }
        for (flag, d, default) in [
            (
                "--connect-timeout",
                connect_timeout,
                defaults.connect_timeout,
            ),
            (
                "--response-timeout",
                response_timeout,
                defaults.response_timeout,
            ),
        ] {
            if d.is_zero() {
                return Err(RenderError::Unexpressible(format!(
                    "{flag} must be above 0"
                )));
            }
            if *d != default {
                self.flag(flag, seconds(*d)?);
            }
        }
        if *per_flow {
            self.push("--per-flow");
        }
        if *allow_partial_flows {
            self.push("--allow-partial-flows");
        }
        if *trace {
            self.push("--trace");
        }
        // `--connections-only` itself stands for `--rr` in the test's flags (`Args::rr`).
        if let Some(k) = connections_only
            && k.get() != DEFAULT_OPENERS
        {
            self.flag("--openers", k);
        }
        if let Some(p) = psk_file {
            self.eq("--psk-file", utf8(p)?);
        }
        if *protocol == ServerProtocol::Iperf3 {
            self.push("--iperf3");
        }
        Ok(())
    }

    fn spec(&mut self, plan: &SweepPlan) -> Result<(), RenderError> {
        let TestSpec {
            workload,
            end,
            omit,
            interval,
            socket,
        } = &plan.spec;
        let defaults = TestSpec::throughput();
        match workload {
            Workload::Throughput(t) => self.throughput(t, plan)?,
            Workload::RequestResponse(r) => self.rr(r, plan)?,
            _ => {
                return Err(RenderError::Unexpressible(
                    "this workload has no xbench client flags".into(),
                ));
            }
        }
        match end {
            EndCondition::Duration(d) if *end != defaults.end => self.flag("-t", seconds(*d)?),
            EndCondition::Duration(_) => {}
            EndCondition::Bytes(n) => self.flag("-n", exact(*n)?),
        }
        if !omit.is_zero() {
            self.flag("-O", seconds(*omit)?);
        }
        match interval {
            None => self.flag("-i", "0"),
            Some(i) if *interval != defaults.interval => self.flag("-i", seconds(*i)?),
            Some(_) => {}
        }
        let SocketOptions {
            window,
            mss,
            nodelay,
            congestion,
        } = socket;
        if !plan.windows.is_empty() {
            let list: Result<Vec<String>, RenderError> =
                plan.windows.iter().map(|w| size_with_unit(*w)).collect();
            self.flag("-w", list?.join(","));
        } else if let Some(w) = window {
            self.flag("-w", size_with_unit(*w)?);
        }
        if let Some(m) = mss {
            self.flag("-M", m);
        }
        if *nodelay {
            self.push("-N");
        }
        if let Some(c) = congestion {
            self.eq("--congestion", c);
        }
        Ok(())
    }

    fn throughput(&mut self, t: &ThroughputSpec, plan: &SweepPlan) -> Result<(), RenderError> {
        let ThroughputSpec {
            streams,
            direction,
            block_len,
            zerocopy,
            receive,
            bitrate,
            udp,
            under_load,
        } = t;
        if let Some(u) = udp {
            self.push("-u");
            let default = UdpSpec::default();
            if !plan.datagram_lens.is_empty() {
                self.flag("-l", list(&plan.datagram_lens));
            } else if u.datagram_len != default.datagram_len {
                self.flag("-l", u.datagram_len);
            }
            if !plan.bitrates.is_empty() {
                let rates: Result<Vec<String>, RenderError> =
                    plan.bitrates.iter().map(|b| bits_per_second(*b)).collect();
                let mut rates = rates?.join(",");
                if plan.bitrate_per_stream {
                    rates.push_str("/stream");
                }
                self.flag("-b", rates);
            } else if u.bitrate != default.bitrate {
                self.flag("-b", bits_per_second(u.bitrate.unwrap_or(0))?);
            }
        }
        if !plan.streams.is_empty() {
            self.flag("-P", list(&plan.streams));
        } else if streams.get() != 1 {
            self.flag("-P", streams);
        }
        match (direction, under_load) {
            (_, Some(ul)) => self.under_load(*direction, ul)?,
            (Direction::ClientToServer, None) => {}
            (Direction::ServerToClient, None) => self.push("-R"),
            (Direction::Bidir, None) => self.push("--bidir"),
        }
        if *block_len != ThroughputSpec::default().block_len && udp.is_none() {
            self.flag("-l", size(u64::from(block_len.get()))?);
        }
        if *zerocopy {
            self.push("-Z");
        }
        match receive {
            ReceiveMode::Discard => {}
            ReceiveMode::Copy => self.push("--recv-copy"),
        }
        if let Some(b) = bitrate {
            self.flag("-b", bits_per_second(*b)?);
        }
        Ok(())
    }

    /// `--under-load DIR` (the load's direction) and the probes' settings that differ from
    /// the defaults.
    fn under_load(&mut self, direction: Direction, ul: &UnderLoadSpec) -> Result<(), RenderError> {
        let UnderLoadSpec {
            idle,
            probe_rate,
            probe_timeout,
            tcp_probe,
        } = ul;
        let d = UnderLoadSpec::default();
        self.flag(
            "--under-load",
            match direction {
                Direction::ClientToServer => "up",
                Direction::ServerToClient => "down",
                Direction::Bidir => "both",
            },
        );
        if *idle != d.idle {
            self.flag("--idle", seconds(*idle)?);
        }
        if *probe_rate != d.probe_rate {
            self.flag("--probe-rate", probe_rate);
        }
        if *probe_timeout != d.probe_timeout {
            self.flag("--probe-timeout", seconds(*probe_timeout)?);
        }
        if *tcp_probe {
            self.push("--tcp-probe");
        }
        Ok(())
    }

    fn rr(&mut self, r: &RrSpec, plan: &SweepPlan) -> Result<(), RenderError> {
        let RrSpec {
            request_len,
            response_len,
            flows,
            burst,
            connect_per_transaction,
            rate_per_flow,
            udp,
        } = r;
        if udp.is_some() {
            // Sweeps of UDP request/response tests are not built yet.
            return Err(RenderError::Unexpressible(
                "UDP request/response tests (--rr -u) cannot be swept yet".into(),
            ));
        }
        self.push(if plan.target.connections_only.is_some() {
            "--connections-only"
        } else if *connect_per_transaction {
            "--crr"
        } else {
            "--rr"
        });
        let sizes = if plan.rr_sizes.is_empty() {
            vec![(*request_len, *response_len)]
        } else {
            plan.rr_sizes.clone()
        };
        for (q, s) in sizes {
            if plan.rr_sizes.is_empty() && q.get() == 1 && s.get() == 1 {
                continue; // the default
            }
            let q = size(u64::from(q.get()))?;
            let s = size(u64::from(s.get()))?;
            self.flag("-r", format!("{q},{s}"));
        }
        if !plan.flows.is_empty() {
            self.flag("--flows", list(&plan.flows));
        } else if flows.get() != 1 {
            self.flag("--flows", flows);
        }
        if burst.get() != 1 {
            self.flag("--burst", burst);
        }
        if let Some(rate) = rate_per_flow {
            // Rust prints the shortest decimal that parses back to the same f64.
            self.flag("--rate", rate);
        }
        Ok(())
    }
}

fn list<T: ToString>(values: &[T]) -> String {
    values
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Decimal seconds, exact to the nanosecond: the command line reads seconds as an f64, whose
/// 53 bits hold every nanosecond count up to about 100 days. Longer values that do not come
/// back exactly are refused.
fn seconds(d: Duration) -> Result<String, RenderError> {
    let s = if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else {
        let s = format!("{}.{:09}", d.as_secs(), d.subsec_nanos());
        s.trim_end_matches('0').to_owned()
    };
    let back = s.parse::<f64>().ok().map(Duration::try_from_secs_f64);
    match back {
        Some(Ok(b)) if b == d => Ok(s),
        _ => Err(RenderError::Unexpressible(format!(
            "{d:?} cannot be written exactly in seconds"
        ))),
    }
}

/// Integers the command line reads through an f64 are exact up to 2^53.
fn exact(n: u64) -> Result<u64, RenderError> {
    if n > 1 << 53 {
        return Err(RenderError::Unexpressible(format!(
            "{n} is too large to be read back exactly"
        )));
    }
    Ok(n)
}

/// A byte count in the largest binary unit that divides it (`64K`, `1M`), else bytes.
fn size(n: u64) -> Result<String, RenderError> {
    for (shift, unit) in [(30, "G"), (20, "M"), (10, "K")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return Ok(format!("{}{unit}", n >> shift));
        }
    }
    Ok(exact(n)?.to_string())
}

/// A size where the command line wants a unit (`-w`): bytes as `B`.
fn size_with_unit(n: u64) -> Result<String, RenderError> {
    let s = size(n)?;
    Ok(if s.ends_with(|c: char| c.is_ascii_digit()) {
        format!("{s}B")
    } else {
        s
    })
}

/// Bits per second in the largest decimal unit that divides it (`100M`), else bare.
fn bits_per_second(n: u64) -> Result<String, RenderError> {
    exact(n)?;
    Ok(xbench_report::cell::short_rate(n))
}

fn utf8(p: &Path) -> Result<&str, RenderError> {
    p.to_str()
        .ok_or_else(|| RenderError::Unexpressible(format!("{} is not valid UTF-8", p.display())))
}

/// A word as a POSIX shell reads it: as is when it holds nothing the shell treats specially,
/// else in single quotes.
fn shell_quote(w: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_=+,./:@%".contains(c);
    if !w.is_empty() && w.chars().all(plain) {
        w.to_owned()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::num::{NonZeroU16, NonZeroU32};

    use super::*;

    #[test]
    fn values_are_written_in_the_units_people_type() {
        assert_eq!(size(131_072).unwrap(), "128K");
        assert_eq!(size(3 << 20).unwrap(), "3M");
        assert_eq!(size(1500).unwrap(), "1500");
        assert_eq!(size_with_unit(1500).unwrap(), "1500B");
        assert_eq!(size_with_unit(256 << 10).unwrap(), "256K");
        assert_eq!(bits_per_second(100_000_000).unwrap(), "100M");
        assert_eq!(bits_per_second(8_500).unwrap(), "8500");
        assert_eq!(seconds(Duration::from_millis(300)).unwrap(), "0.3");
        assert_eq!(seconds(Duration::from_secs(10)).unwrap(), "10");
        assert_eq!(seconds(Duration::new(1, 1)).unwrap(), "1.000000001");
        assert!(seconds(Duration::new(400 * 86_400, 1)).is_err());
        assert!(exact(u64::MAX).is_err());
    }

    #[test]
    fn shell_words_come_back_whole() {
        assert_eq!(shell_quote("--label=vpn"), "--label=vpn");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn a_request_response_sweep_names_every_list() {
        let mut plan = SweepPlan::new(Target::new("h"), TestSpec::request_response(), "tgw");
        plan.rr_sizes = vec![
            (NonZeroU32::MIN, NonZeroU32::MIN),
            (
                NonZeroU32::new(64).unwrap(),
                NonZeroU32::new(16 << 10).unwrap(),
            ),
        ];
        plan.flows = [1, 4]
            .map(|n| xbench::config::FlowCount::new(n).unwrap())
            .to_vec();
        plan.repeat = NonZeroU32::new(3).unwrap();
        plan.pause = Duration::from_secs(2);
        assert_eq!(
            plan.client_args().unwrap(),
            [
                "client",
                "h",
                "--label=tgw",
                "--rr",
                "-r",
                "1,1",
                "-r",
                "64,16K",
                "--flows",
                "1,4",
                "--repeat",
                "3",
                "--pause",
                "2"
            ]
        );
    }

    #[test]
    fn what_the_command_line_cannot_say_is_refused() {
        let mut plan = SweepPlan::new(Target::new("-h"), TestSpec::throughput(), "a");
        assert!(matches!(
            plan.client_args(),
            Err(RenderError::Unexpressible(_))
        ));
        plan.target = Target::local();
        plan.label = "a/b".into();
        assert!(matches!(plan.client_args(), Err(RenderError::Plan(_))));
        plan.label = "a".into();
        plan.spec.omit = Duration::from_secs(8 * 86_400);
        assert!(matches!(plan.client_args(), Err(RenderError::Spec(_))));
        plan.spec.omit = Duration::ZERO;
        plan.target.connect_timeout = Duration::ZERO;
        assert!(plan.client_args().is_err());
    }

    #[test]
    fn a_udp_sweep_names_its_rates_and_sizes() {
        let mut spec = TestSpec::throughput();
        if let Workload::Throughput(t) = &mut spec.workload {
            t.udp = Some(UdpSpec::default());
            t.direction = Direction::ServerToClient;
        }
        let mut plan = SweepPlan::new(Target::new("h"), spec, "vpn");
        plan.bitrates = vec![100_000_000, 200_000_000];
        plan.datagram_lens = vec![64, 1400];
        plan.repeat = NonZeroU32::new(5).unwrap();
        assert_eq!(
            plan.client_args().unwrap()[3..],
            [
                "-u",
                "-l",
                "64,1400",
                "-b",
                "100M,200M",
                "-R",
                "--repeat",
                "5"
            ]
        );
        plan.bitrate_per_stream = true;
        plan.datagram_lens.clear();
        plan.streams = [1, 4].map(|n| NonZeroU16::new(n).unwrap()).to_vec();
        assert_eq!(
            plan.client_args().unwrap()[3..],
            [
                "-u",
                "-b",
                "100M,200M/stream",
                "-P",
                "1,4",
                "-R",
                "--repeat",
                "5"
            ]
        );
        // One cell of it: the total the cell offers.
        assert_eq!(
            plan.cell(3).unwrap().client_args().unwrap()[3..],
            ["-u", "-b", "800M", "-P", "4", "-R"]
        );
    }
}
