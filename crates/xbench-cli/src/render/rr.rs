//! The human-readable report of a request/response test: one line per interval with the rate
//! and the latency distribution, then a summary with every percentile, the TCP state of the
//! connections, and whether the server's count agrees.

use std::fmt::Write as _;

use xbench::latency::LatencyStats;
use xbench::report::{
    ConnectionSetup, Pacing, RrFlowSummary, RrInterval, RrSummary, RrUdpSummary, TestReport,
};
use xbench::units::{ByteSize, TimeUnit, count, format_micros, number};
use xbench::{ClientConfig, TestSpec};

use super::text::{connected, outcome_line, rtt, rtt_triple};

const RULE: &str = "- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -\n";

/// Renders one request/response test as text.
#[derive(Debug, Default)]
pub(crate) struct RrText {
    /// The server is the in-process one (`--local`, or no host).
    local: bool,
    /// `--connections-only`: a transaction is a new connection, and the flows are held.
    connections_only: bool,
    header_done: bool,
    /// Flows asked and flows run, when fewer ran (`--allow-partial-flows`), and why.
    partial: Option<Partial>,
}

impl RrText {
    /// The server is the in-process one of `--local`: the first line says so.
    pub(crate) fn local(mut self, local: bool) -> Self {
        self.local = local;
        self
    }

    /// `--allow-partial-flows`: `running` of the `asked` flows run, for the server's limit
    /// (`server_limit`) or because the rest did not open; the header says what ran, what was
    /// asked (first) and why (last).
    pub(crate) fn partial_flows(&mut self, asked: u32, running: u32, server_limit: bool) {
        self.partial = Some(Partial {
            asked: self.partial.map_or(asked, |p| p.asked),
            running,
            why: if server_limit {
                "the server's --max-flows"
            } else {
                "the rest did not open"
            },
        });
    }

    /// A connection-rate test (`--connections-only`): its lines count connections.
    pub(crate) fn connections_only(mut self, yes: bool) -> Self {
        self.connections_only = yes;
        self
    }

    pub(crate) fn started(&self, config: &ClientConfig) -> String {
        let test = match config.connections_only {
            Some(k) => describe_connections_only(&config.spec, k.get(), self.partial),
            None => describe(&config.spec, self.partial),
        };
        format!("{}\n{test}\n", connected(config, self.local))
    }

    pub(crate) fn interval(&mut self, iv: &RrInterval) -> String {
        let mut s = String::new();
        // UDP has no retransmits and no RTT of its own; it has lost requests instead.
        let (c1, c2) = match iv.lost {
            Some(_) => ("Lost", ""),
            None => ("Retr", "sRTT"),
        };
        // --connections-only: how the interval's failed attempts ended.
        let failed = iv.attempts.filter(|_| self.connections_only).map(|a| {
            format!(
                " {:>14}",
                format!("{}/{}/{}", a.refused, a.timed_out, a.reset)
            )
        });
        if !self.header_done {
            self.header_done = true;
            let mut header = format!(
                "[ ID] Interval          {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8}",
                if self.connections_only {
                    "Conn/s"
                } else {
                    "Trans/s"
                },
                "min",
                "p50",
                "p90",
                "p99",
                "max",
                c1,
                c2
            );
            if failed.is_some() {
                let _ = write!(header, " {:>14}", "Ref/TO/Reset");
            }
            let _ = writeln!(s, "{}", header.trim_end());
        }
        let l = iv.latency;
        let col = |f: fn(&LatencyStats) -> f64| {
            l.as_ref()
                .map_or_else(|| "-".into(), |l| format_micros(f(l)))
        };
        let retr = match (iv.lost, iv.server_retransmits) {
            (Some(lost), _) => count(lost),
            (None, Some(sv)) => format!("{}/{}", count(iv.retransmits), count(sv)),
            (None, None) => count(iv.retransmits),
        };
        let srtt = match (iv.lost, iv.srtt_us) {
            (Some(_), _) => String::new(),
            (None, v) => v.map_or_else(|| "-".into(), rtt),
        };
        let mut row = format!(
            "[SUM] {:6.2}-{:<6.2} s {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8}",
            iv.start_s,
            iv.end_s,
            number(iv.transactions_per_second),
            col(|l| l.min_us),
            col(|l| l.p50_us),
            col(|l| l.p90_us),
            col(|l| l.p99_us),
            col(|l| l.max_us),
            retr,
            srtt,
        );
        if let Some(f) = failed {
            row.push_str(&f);
        }
        let omitted = if iv.omitted { "  (omitted)" } else { "" };
        let _ = writeln!(s, "{}{omitted}", row.trim_end());
        s
    }

    pub(crate) fn summary(&self, r: &TestReport) -> String {
        let mut s = String::from(RULE);
        let Some(rr) = &r.rr else {
            return s;
        };
        let sum = &rr.summary;
        let flows = rr.flows.len();
        if let Some(h) = &rr.held {
            connections_only_summary(&mut s, r, h);
            return s;
        }
        let _ = writeln!(
            s,
            "request/response: {} transactions/s over {:.2} s ({} transactions, {} flow{}{})",
            number(sum.transactions_per_second),
            sum.seconds,
            count(sum.transactions),
            count(flows as u64),
            if flows == 1 { "" } else { "s" },
            if sum.connections > 0 {
                format!(", {} connections", count(sum.connections))
            } else {
                String::new()
            }
        );
        if let Some(c) = &rr.setup {
            s.push_str(&setup_line(c));
        }
        match sum.latency {
            Some(l) => {
                latency_line(&mut s, "latency", "", &l);
            }
            None => s.push_str("  no transaction completed\n"),
        }
        if let Some(p) = sum.pacing {
            paced_line(
                &mut s,
                &p,
                "latency is measured from each transaction's intended send time",
            );
        }
        if let Some(u) = &sum.udp {
            udp_lines(&mut s, sum, u);
        } else {
            tcp_lines(&mut s, sum);
        }
        if (2..=16).contains(&flows) {
            flow_lines(&mut s, &rr.flows);
        }
        cpu_line(&mut s, r, "CPU:", "transaction");
        s.push_str(&outcome_line(r));
        s
    }
}

/// A TCP test's retransmits and RTT, and whether the server's count agrees.
fn tcp_lines(s: &mut String, sum: &RrSummary) {
    let _ = write!(
        s,
        "  retransmits: client {}, server {}",
        count(sum.retransmits),
        sum.server_retransmits
            .map_or_else(|| "no report".into(), count)
    );
    if let Some(t) = sum.rtt {
        let _ = write!(
            s,
            "; TCP sRTT min/mean/max {}",
            rtt_triple(t.min_us, t.mean_us, t.max_us)
        );
    }
    s.push('\n');
    match sum.server_transactions {
        Some(st) if st == sum.total_transactions => {
            let _ = writeln!(
                s,
                "  the server answered {} requests: every transaction counted at both ends",
                count(st)
            );
        }
        Some(st) => {
            let _ = writeln!(
                s,
                "  the server answered {} requests, this client completed {}",
                count(st),
                count(sum.total_transactions)
            );
        }
        None => s.push_str("  the server's count never arrived\n"),
    }
}

/// A UDP test's lost requests, and where they were lost: on the way to the server (it never
/// answered them) or on the way back (it did).
fn udp_lines(s: &mut String, sum: &RrSummary, u: &RrUdpSummary) {
    let _ = write!(
        s,
        "  lost: {} of {} requests ({:.3} %) unanswered within {} s",
        count(u.lost),
        count(sum.transactions + u.lost),
        u.lost_percent,
        u.timeout_s
    );
    if u.late > 0 || u.duplicates > 0 {
        let _ = write!(
            s,
            "; {} answered late, {} duplicates",
            count(u.late),
            count(u.duplicates)
        );
    }
    s.push('\n');
    match sum.server_transactions {
        Some(st) if st == u.total_requests => {
            let _ = writeln!(
                s,
                "  the server answered all {st} requests sent{}",
                if u.total_lost == 0 {
                    ": every transaction counted at both ends"
                } else {
                    "; the responses were lost on the way back"
                }
            );
        }
        Some(st) => {
            let _ = writeln!(
                s,
                "  the server answered {st} of {} requests sent: {} lost on the way there, {} \
                 responses lost (or late) on the way back",
                u.total_requests,
                u.total_requests.saturating_sub(st),
                st.saturating_sub(sum.total_transactions)
            );
        }
        None => s.push_str("  the server's count never arrived\n"),
    }
    let server_ignored = u.server_ignored.unwrap_or(0);
    if u.ignored > 0 || server_ignored > 0 {
        let _ = writeln!(
            s,
            "  datagrams that were not this test's (stray or forged), ignored and never \
             answered: client {}, server {server_ignored}",
            u.ignored
        );
    }
}

/// `--allow-partial-flows`: flows asked and run, and why fewer ran.
#[derive(Debug, Clone, Copy)]
struct Partial {
    asked: u32,
    running: u32,
    why: &'static str,
}

impl Partial {
    /// The flows that run and the words after them: `spec`'s flows when all run.
    fn shown(partial: Option<Partial>, spec: &xbench::config::RrSpec) -> (u32, String) {
        match partial {
            Some(p) => (
                p.running,
                format!(" (of {} asked: {})", count(u64::from(p.asked)), p.why),
            ),
            None => (spec.flows.get(), String::new()),
        }
    }
}

/// The test's first line; `partial`: flows asked and run, when fewer ran.
fn describe(spec: &TestSpec, partial: Option<Partial>) -> String {
    let Some(rr) = spec.as_rr() else {
        return String::new();
    };
    let (flows, of) = Partial::shown(partial, rr);
    let mut s = format!(
        "Test: {}, {} flow{}{of}, {} requests, {} responses",
        if rr.connect_per_transaction {
            "connect/request/response (a new connection per transaction)"
        } else if rr.udp.is_some() {
            "UDP request/response"
        } else {
            "request/response"
        },
        flows,
        if flows == 1 { "" } else { "s" },
        size(rr.request_len.get()),
        size(rr.response_len.get()),
    );
    if rr.burst.get() > 1 {
        let _ = write!(s, ", {} in flight per flow", rr.burst);
    }
    if let Some(r) = rr.rate_per_flow {
        let _ = write!(s, ", paced at {r}/s per flow");
    }
    if let Some(u) = rr.udp {
        let _ = write!(
            s,
            ", lost after {:.3} s unanswered",
            u.timeout.as_secs_f64()
        );
    }
    if let xbench::EndCondition::Duration(d) = spec.end {
        let _ = write!(s, ", {:.1} s", d.as_secs_f64());
    }
    if !spec.omit.is_zero() {
        let _ = write!(s, ", first {:.1} s omitted", spec.omit.as_secs_f64());
    }
    s
}

/// The test line of `--connections-only`.
fn describe_connections_only(spec: &TestSpec, openers: u16, partial: Option<Partial>) -> String {
    let Some(rr) = spec.as_rr() else {
        return String::new();
    };
    let (held, of) = Partial::shown(partial, rr);
    let mut s = format!(
        "Test: connection rate, {} flow{} held open{of}, new connections opened {openers} at a \
         time (connect, 1-byte request and answer, close)",
        count(u64::from(held)),
        if held == 1 { "" } else { "s" },
    );
    if let Some(r) = rr.rate_per_flow {
        let _ = write!(s, ", paced at {r}/s per opener");
    }
    if let xbench::EndCondition::Duration(d) = spec.end {
        let _ = write!(s, ", {:.1} s", d.as_secs_f64());
    }
    if !spec.omit.is_zero() {
        let _ = write!(s, ", first {:.1} s omitted", spec.omit.as_secs_f64());
    }
    s
}

/// The summary of `--connections-only`: the new connections' rate and setup latency, how
/// the held flows opened, and how many still answered at the end.
fn connections_only_summary(s: &mut String, r: &TestReport, h: &xbench::report::HeldFlows) {
    let Some(rr) = &r.rr else { return };
    let sum = &rr.summary;
    let _ = writeln!(
        s,
        "connections: {}/s over {:.2} s ({} opened and closed, {} at a time)",
        number(sum.transactions_per_second),
        sum.seconds,
        count(sum.transactions),
        h.openers,
    );
    if let Some(o) = &rr.opening {
        let a = &o.attempts;
        let _ = writeln!(
            s,
            "  attempts: {} tried, {} opened, {} refused, {} timed out (no answer in {:.1} s), {} reset before the answer: {:.1} % failed",
            count(a.attempts),
            count(a.opened),
            count(a.refused),
            count(a.timed_out),
            o.timeout_s,
            count(a.reset),
            a.failed_percent,
        );
    }
    match sum.latency {
        Some(l) => {
            latency_line(s, "setup", " (connect() to first answer)", &l);
        }
        None => s.push_str("  no new connection completed\n"),
    }
    if let Some(p) = sum.pacing {
        paced_line(
            s,
            &p,
            "setup latency is measured from each connection's intended start",
        );
    }
    if let Some(c) = &rr.setup {
        s.push_str(&setup_line(c).replacen("  setup:", "  held:", 1));
    }
    let _ = writeln!(
        s,
        "  held flows at the end: {} of {} answered, {} closed, {} reset, {} unanswered",
        count(h.open_at_end),
        count(h.held),
        count(h.closed),
        count(h.reset),
        count(h.unanswered),
    );
    cpu_line(s, r, "CPU of the openers:", "connection");
    s.push_str(&outcome_line(r));
}

/// The paced test's line: the rate asked and achieved, and from when `measured` (the
/// latency, or the setup latency) counts.
fn paced_line(s: &mut String, p: &Pacing, measured: &str) {
    let _ = writeln!(
        s,
        "  paced: asked {}/s, achieved {}/s{}; {measured} (coordinated-omission corrected)",
        per_second(p.asked_per_second),
        per_second(p.achieved_per_second),
        if p.kept_up {
            ""
        } else {
            " — could not keep up"
        }
    );
}

/// One line per flow: its transactions, latency, losses and error.
fn flow_lines(s: &mut String, flows: &[RrFlowSummary]) {
    for f in flows {
        let _ = write!(
            s,
            "  [{:>3}] {:>10} transactions",
            f.flow,
            count(f.transactions)
        );
        if let Some(l) = f.latency {
            let _ = write!(
                s,
                "  mean {}  p99 {}  max {}",
                format_micros(l.mean_us),
                format_micros(l.p99_us),
                format_micros(l.max_us)
            );
        }
        if let Some(lost) = f.lost {
            let _ = write!(s, "  lost {}", count(lost));
        }
        if let Some(e) = &f.error {
            let _ = write!(s, "  error: {e}");
        }
        s.push('\n');
    }
}

/// The CPU line after `head`: each side's CPU time, and per `per_what` (transaction or
/// connection) where the report has it.
fn cpu_line(s: &mut String, r: &TestReport, head: &str, per_what: &str) {
    let cpu = &r.cpu;
    let per = |v: Option<f64>| {
        v.map_or_else(String::new, |v| {
            format!(" ({}/{per_what})", format_micros(v))
        })
    };
    let _ = write!(
        s,
        "{head} client {:.2} s{}",
        cpu.client.total_s(),
        per(cpu.client_us_per_transaction)
    );
    match cpu.server {
        Some(sv) => {
            let _ = writeln!(
                s,
                ", server {:.2} s{}",
                sv.total_s(),
                per(cpu.server_us_per_transaction)
            );
        }
        None => s.push_str(", server: no report\n"),
    }
}

/// Message sizes as people write them: exact bytes when small.
/// How opening the flows went: a connection limit on the path (a load balancer's, a NAT's)
/// shows as refused or timed-out connections, or as a slow setup.
fn setup_line(c: &ConnectionSetup) -> String {
    // One connection's time is its latency, not a rate: the rate is shown from two on.
    let rate = if c.connected > 1 {
        format!(" ({}/s)", number(c.per_second))
    } else {
        String::new()
    };
    let mut s = format!(
        "  setup: {} flow{} connected in {}{rate}, {} refused, {} timed out",
        count(c.connected),
        if c.connected == 1 { "" } else { "s" },
        format_micros(c.seconds * 1e6),
        count(c.refused),
        count(c.timed_out),
    );
    if c.failed > 0 {
        let _ = write!(s, ", {} failed otherwise", count(c.failed));
    }
    if let Some(max) = c.server_limit {
        let _ = write!(
            s,
            " — of {} asked, the server's limit is {max} (--max-flows); measured {} \
             (--allow-partial-flows)",
            count(c.requested),
            count(c.connected)
        );
    }
    s.push('\n');
    s
}

fn size(b: u32) -> String {
    if b < 1024 {
        format!("{b}-byte")
    } else {
        ByteSize(u64::from(b)).to_string()
    }
}

/// A paced rate, three significant digits, so a slow rate (one transaction a minute) does
/// not read as 0.0/s.
fn per_second(v: f64) -> String {
    number(v)
}

/// One line of latency percentiles, `what` saying what was timed (a transaction, or a new
/// connection's setup) and `note` how; every figure in the unit that suits the median, so a
/// 20 ms path reads `latency ms: min 20.4`, not `latency µs: min 20413`.
fn latency_line(s: &mut String, what: &str, note: &str, l: &LatencyStats) {
    let u = TimeUnit::for_micros(l.p50_us);
    let _ = writeln!(
        s,
        "  {what} {}{note}: min {}  mean {}  stddev {}  p50 {}  p90 {}  p99 {}  p99.9 {}  p99.99 {}  max {}",
        u.label(),
        u.format(l.min_us),
        u.format(l.mean_us),
        u.format(l.stddev_us),
        u.format(l.p50_us),
        u.format(l.p90_us),
        u.format(l.p99_us),
        u.format(l.p99_9_us),
        u.format(l.p99_99_us),
        u.format(l.max_us)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setup_line_groups_its_counts() {
        let c = ConnectionSetup {
            requested: 4096,
            connected: 4096,
            refused: 0,
            timed_out: 0,
            failed: 0,
            seconds: 0.41,
            per_second: 9990.2,
            server_limit: None,
        };
        assert_eq!(
            setup_line(&c),
            "  setup: 4,096 flows connected in 410 ms (9,990/s), 0 refused, 0 timed out\n"
        );
    }

    #[test]
    fn slow_paced_rates_keep_their_digits() {
        assert_eq!(per_second(1234.6), "1,235");
        assert_eq!(per_second(2.0), "2.00");
        assert_eq!(per_second(1.0 / 60.0), "0.0167");
        assert_eq!(per_second(1.0 / 3600.0), "0.000278");
        assert_eq!(per_second(0.0), "0");
    }

    /// Issue 31: "setup: 1 flow connected in 0.00 s (3,745/s)": one flow's setup time in a
    /// unit that shows it, and no rate made of one event.
    #[test]
    fn one_flows_setup_reads_as_a_time_not_a_rate() {
        let c = ConnectionSetup {
            requested: 1,
            connected: 1,
            refused: 0,
            timed_out: 0,
            failed: 0,
            seconds: 0.000_267,
            per_second: 3745.3,
            server_limit: None,
        };
        assert_eq!(
            setup_line(&c),
            "  setup: 1 flow connected in 267 µs, 0 refused, 0 timed out\n"
        );
    }
}
