//! `--under-load` as text: the timeline as it happens (phase, probe latency, the bulk streams'
//! rate, retransmits, RTT and window, RPM), then what the load added, the responsiveness, and
//! the bulk streams' own summary.

use std::fmt::Write as _;

use xbench::config::{Direction, StreamDirection, Workload};
use xbench::report::{PeerInfo, StreamInfo, TestReport};
use xbench::under_load::{
    PhaseLatency, ProbeResults, RowBulk, RowLatency, TimelineRow, UnderLoadReport,
};
use xbench::units::{ByteSize, RateScale, count, format_micros};
use xbench::{ClientConfig, TestSpec};

use super::text::{Shown, Text};

/// Renders a latency-under-load test's events as text.
#[derive(Debug)]
pub(crate) struct UnderLoadText {
    shown: Shown,
    tcp: bool,
    directions: &'static [StreamDirection],
    header_done: bool,
}

impl UnderLoadText {
    pub(crate) fn new(spec: &TestSpec, shown: Shown) -> Self {
        let (tcp, directions) = match &spec.workload {
            Workload::Throughput(tp) => (
                tp.under_load.is_some_and(|u| u.tcp_probe),
                tp.direction.stream_directions(),
            ),
            _ => (false, &[][..]),
        };
        UnderLoadText {
            shown,
            tcp,
            directions,
            header_done: false,
        }
    }

    /// Lines printed once the probes run.
    pub(crate) fn started(
        &self,
        config: &ClientConfig,
        server: &PeerInfo,
        _streams: &[StreamInfo],
    ) -> String {
        let mut s = self.shown.connected_line(config, server);
        let _ = writeln!(s, "{}", describe(&config.spec));
        s
    }

    /// One row of the timeline.
    pub(crate) fn interval(&mut self, r: &TimelineRow) -> String {
        let mut s = String::new();
        if !self.header_done {
            self.header_done = true;
            let _ = write!(
                s,
                "Interval          Phase       UDP p50      p90      max  lost"
            );
            if self.tcp {
                s.push_str("  TCP p50");
            }
            for d in self.directions {
                let _ = write!(s, " │ {}     rate   retr      sRTT      cwnd", arrow(*d));
            }
            s.push_str(" │     RPM\n");
        }
        let _ = write!(
            s,
            "{:6.2}-{:<6.2} s  {:<10} {}",
            r.start_s,
            r.end_s,
            r.phase.label(),
            latency_cols(&r.udp)
        );
        if let Some(t) = &r.tcp {
            let _ = write!(s, " {:>8}", us(t.p50_us));
        } else if self.tcp {
            let _ = write!(s, " {:>8}", "-");
        }
        for d in self.directions {
            match r.bulk.iter().find(|b| b.direction == *d) {
                Some(b) => s.push_str(&bulk_cols(self.shown.rate, b)),
                None => {
                    let _ = write!(s, " │ {:>10} {:>6} {:>9} {:>9}", "", "", "", "");
                }
            }
        }
        let _ = writeln!(
            s,
            " │ {:>7}",
            r.rpm.map_or_else(String::new, |v| count(v.round() as u64))
        );
        s
    }

    /// What the load added, the responsiveness, then the bulk streams' own summary.
    pub(crate) fn summary(&self, r: &TestReport) -> String {
        let mut s = String::new();
        if let Some(ul) = &r.under_load {
            s.push_str(super::text::RULE);
            let probe_rate = match &r.spec.workload {
                Workload::Throughput(tp) => tp.under_load.map_or(0.0, |u| u.probe_rate),
                _ => 0.0,
            };
            let _ = writeln!(
                s,
                "Latency under load (UDP probes, {}/s, one datagram each way):",
                xbench::units::number(probe_rate)
            );
            phase_table(&mut s, &ul.udp);
            added(&mut s, "the UDP probes", &ul.udp);
            if let Some(t) = &ul.tcp {
                let _ = writeln!(s, "TCP probes (a connection of their own):");
                phase_table(&mut s, t);
                added(&mut s, "the TCP probes", t);
            }
            rtt_lines(&mut s, ul);
            load_and_phases(&mut s, ul);
            s.push('\n');
            s.push('\n');
        }
        s.push_str(&Text::new(&r.spec, self.shown).summary(r));
        s
    }
}

/// Under load, the bulk streams' own smoothed RTT and the responsiveness (RPM) with what it
/// is made of.
fn rtt_lines(s: &mut String, ul: &UnderLoadReport) {
    match &ul.bulk_srtt {
        Some(b) => {
            let _ = writeln!(
                s,
                "The bulk streams' own smoothed RTT under load (TCP_INFO, {} samples): \
                 p50 {}, p90 {}, p99 {}, max {}",
                count(b.count),
                format_micros(b.p50_us),
                format_micros(b.p90_us),
                format_micros(b.p99_us),
                format_micros(b.max_us)
            );
        }
        None => s.push_str("The bulk streams reported no RTT under load.\n"),
    }
    match &ul.responsiveness {
        Some(x) => {
            let foreign = match x.tcp_ms {
                Some(t) => {
                    format!("UDP {} and TCP {} probes averaged", ms(x.udp_ms), ms(t))
                }
                None => format!("UDP probes {}", ms(x.udp_ms)),
            };
            let _ = writeln!(
                s,
                "Responsiveness: {} RPM — foreign {} RPM ({foreign}), self {} RPM (bulk \
                 sRTT {}); each a trimmed mean of the loaded phase, slowest 5 % left out \
                 (draft-ietf-ippm-responsiveness)",
                count(x.rpm.round() as u64),
                count(x.foreign_rpm.round() as u64),
                count(x.self_rpm.round() as u64),
                ms(x.self_ms),
            );
        }
        None => s.push_str(
            "Responsiveness: not measured (no probe or no bulk RTT in the loaded phase)\n",
        ),
    }
}

/// What the probes themselves loaded the path with, and when each phase began and ended.
fn load_and_phases(s: &mut String, ul: &UnderLoadReport) {
    let pl = &ul.probe_load;
    let _ = writeln!(
        s,
        "The probes' own load: {}/s, {} each way (IP and UDP headers included){}",
        xbench::units::number(pl.probes_per_second),
        RateScale::AUTO.show(pl.bits_per_second),
        pl.share_of_bulk_percent
            .map_or_else(String::new, |p| format!(
                ", {} % of the bulk rate",
                xbench::units::number(p)
            ))
    );
    let ph = &ul.phases;
    let _ = write!(
        s,
        "Phases: idle 0.00–{:.2} s, ramp to {:.2} s, loaded to {:.2} s, drained by {:.2} s",
        ph.load_start_s, ph.loaded_start_s, ph.loaded_end_s, ph.idle_after_start_s,
    );
    // An interrupted test ends before its second idle phase begins.
    if ph.end_s > ph.idle_after_start_s {
        let _ = write!(s, ", idle to {:.2} s", ph.end_s);
    }
}

fn describe(spec: &TestSpec) -> String {
    let Workload::Throughput(tp) = &spec.workload else {
        return String::new();
    };
    let Some(ul) = tp.under_load else {
        return String::new();
    };
    let dir = match tp.direction {
        Direction::ClientToServer => "up (client → server)",
        Direction::ServerToClient => "down (server → client)",
        Direction::Bidir => "both ways",
    };
    let load = match spec.end {
        xbench::EndCondition::Duration(d) => format!("{:.1} s", d.as_secs_f64()),
        xbench::EndCondition::Bytes(b) => ByteSize(b).to_string(),
    };
    let mut s = format!(
        "Latency under load: {:.1} s idle, then {} TCP stream{} {dir} for {load}",
        ul.idle.as_secs_f64(),
        tp.streams,
        if tp.streams.get() == 1 { "" } else { "s" },
    );
    if !spec.omit.is_zero() {
        let _ = write!(s, " (the first {:.1} s a ramp)", spec.omit.as_secs_f64());
    }
    let _ = write!(
        s,
        ", then {:.1} s idle; UDP probes {}/s",
        ul.idle.as_secs_f64(),
        xbench::units::number(ul.probe_rate)
    );
    if ul.tcp_probe {
        s.push_str(", TCP probes too");
    }
    s
}

fn arrow(d: StreamDirection) -> &'static str {
    match d {
        StreamDirection::ClientToServer => "↑",
        StreamDirection::ServerToClient => "↓",
    }
}

fn us(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), format_micros)
}

fn ms(v: f64) -> String {
    format_micros(v * 1e3)
}

fn latency_cols(l: &RowLatency) -> String {
    format!(
        "{:>8} {:>8} {:>8} {:>5}",
        us(l.p50_us),
        us(l.p90_us),
        us(l.max_us),
        count(l.lost)
    )
}

fn bulk_cols(rate: RateScale, b: &RowBulk) -> String {
    format!(
        " │ {:>10} {:>6} {:>9} {:>9}",
        rate.show(b.bits_per_second),
        count(b.retransmits),
        us(b.srtt_us),
        b.cwnd_bytes
            .map_or_else(|| "-".into(), |c| ByteSize(c).to_string())
    )
}

fn phase_table(s: &mut String, p: &ProbeResults) {
    let _ = writeln!(
        s,
        "  phase        probes       p50       p90       p99       max   lost"
    );
    for (name, l) in [
        ("idle", &p.idle),
        ("loaded", &p.loaded),
        ("idle after", &p.idle_after),
    ] {
        let _ = writeln!(s, "  {name:<10} {}", phase_cols(l));
    }
}

fn phase_cols(l: &PhaseLatency) -> String {
    let lost = format!(
        "{} ({} %)",
        count(l.lost),
        xbench::units::number(l.lost_percent)
    );
    match &l.latency {
        Some(x) => format!(
            "{:>8} {:>9} {:>9} {:>9} {:>9}   {lost}",
            count(x.count),
            format_micros(x.p50_us),
            format_micros(x.p90_us),
            format_micros(x.p99_us),
            format_micros(x.max_us)
        ),
        None => format!("{:>8}   no answers   {lost}", 0),
    }
}

/// "The load adds 183 ms at p50": loaded minus idle, as measured; a negative or nil figure
/// is said as such, never as an addition.
fn added(s: &mut String, what: &str, p: &ProbeResults) {
    let Some(i) = &p.increase else {
        let _ = writeln!(
            s,
            "  {what}: no increase can be given (no answers in the idle or the loaded phase)"
        );
        return;
    };
    let signed = xbench::units::format_signed_micros;
    if i.p50_us > 0.0 {
        let _ = writeln!(
            s,
            "  Under load {what} waited {} longer at p50 ({} at p90, {} at p99)",
            format_micros(i.p50_us),
            signed(i.p90_us),
            signed(i.p99_us)
        );
    } else {
        let _ = writeln!(
            s,
            "  Under load {what} waited no longer at p50 ({}; {} at p90, {} at p99)",
            signed(i.p50_us),
            signed(i.p90_us),
            signed(i.p99_us)
        );
    }
}
