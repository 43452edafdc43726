//! The human-readable report of a UDP test (`-u`): iperf3's UDP table (`Jitter  Lost/Total
//! Datagrams`) per interval, with reordering and duplicates beside it, then a summary of the
//! measured window: asked versus achieved rate, exact loss, the kernel's receive-buffer drops
//! apart from the network's, and how the datagrams were moved.

use std::fmt::Write as _;

use xbench::config::StreamDirection;
use xbench::report::{TestReport, UdpFigures, UdpInterval};
use xbench::units::{ByteSize, count, format_micros};
use xbench::{ClientConfig, TestSpec};

use super::text::{Columns, Shown, outcome_line};

/// Renders one UDP test's events as text.
#[derive(Debug, Default)]
pub(crate) struct UdpText {
    columns: Columns,
    shown: Shown,
    header_done: bool,
}

const HEADER: &str =
    "Interval           Transfer      Bitrate        Jitter     Lost/Total Datagrams   Reord  Dup";

impl UdpText {
    pub(crate) fn new(spec: &TestSpec, shown: Shown) -> Self {
        UdpText {
            columns: Columns::of(spec),
            shown,
            ..Self::default()
        }
    }

    /// Lines printed once the sockets are greeted.
    pub(crate) fn started(
        &self,
        config: &ClientConfig,
        server: &xbench::report::PeerInfo,
        streams: &[xbench::report::StreamInfo],
    ) -> String {
        let mut s = self.shown.connected_line(config, server);
        if let Some(tp) = config.spec.as_throughput()
            && let Some(u) = tp.udp
        {
            let rate = u.bitrate.map_or_else(
                || "unpaced (-b 0)".to_owned(),
                |b| format!("{} asked, all streams", self.shown.rate.show(b as f64)),
            );
            let _ = writeln!(
                s,
                "Test: UDP, {} stream{} per direction, {}-byte datagrams, {rate}, {:.1} s",
                tp.streams,
                if tp.streams.get() == 1 { "" } else { "s" },
                u.datagram_len,
                match config.spec.end {
                    xbench::EndCondition::Duration(d) => d.as_secs_f64(),
                    xbench::EndCondition::Bytes(_) => 0.0,
                }
            );
        }
        for st in streams {
            let arrow = if st.direction == StreamDirection::ClientToServer {
                "→"
            } else {
                "←"
            };
            // The receiver's buffer is the one that overflows (Linux reports double the
            // request, capped at net.core.rmem_max).
            let rcvbuf = match st.direction {
                StreamDirection::ClientToServer => st.server_socket.rcvbuf_granted,
                StreamDirection::ServerToClient => st.client_socket.rcvbuf_granted,
            };
            let _ = writeln!(
                s,
                "[{:>3}] {} {arrow} {} udp  receive buffer {}",
                st.id,
                st.client_addr,
                st.server_addr,
                ByteSize(rcvbuf)
            );
        }
        s
    }

    /// One interval: per-stream lines (with several streams) and the sum per direction.
    pub(crate) fn interval(&mut self, iv: &UdpInterval) -> String {
        let mut s = String::new();
        if !self.header_done {
            self.header_done = true;
            let _ = writeln!(s, "[ ID]{} {HEADER}", self.columns.dir_heading());
        }
        let omitted = if iv.omitted { "  (omitted)" } else { "" };
        let span = format!("{:6.2}-{:<6.2} s", iv.start_s, iv.end_s);
        if self.columns.multi {
            for st in &iv.streams {
                let _ = writeln!(
                    s,
                    "[{:>3}]{} {span} {}{omitted}",
                    st.stream,
                    self.columns.dir(st.direction),
                    self.cols(&st.figures)
                );
            }
        }
        for sum in &iv.sum {
            let id = if self.columns.multi {
                "SUM".to_owned()
            } else {
                format!(
                    "{:>3}",
                    iv.streams
                        .iter()
                        .find(|s| s.direction == sum.direction)
                        .map_or(0, |s| s.stream)
                )
            };
            let _ = writeln!(
                s,
                "[{id}]{} {span} {}{omitted}",
                self.columns.dir(sum.direction),
                self.cols(&sum.figures)
            );
        }
        s
    }

    /// The end-of-test summary over the measured window.
    pub(crate) fn summary(&self, r: &TestReport) -> String {
        let mut s = String::from(
            "- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -\n",
        );
        let Some(u) = &r.udp else {
            s.push_str(&outcome_line(r));
            return s;
        };
        let _ = writeln!(s, "[ ID]{} {HEADER}", self.columns.dir_heading());
        let span = format!("{:6.2}-{:<6.2} s", 0.0, r.summary.measured_s);
        for d in &u.directions {
            let dir = self.columns.dir(d.direction);
            if self.columns.multi {
                for st in &d.per_stream {
                    let _ = writeln!(
                        s,
                        "[{:>3}]{dir} {span} {}",
                        st.stream,
                        self.cols(&st.figures)
                    );
                }
            }
            let id = if self.columns.multi {
                "SUM".to_owned()
            } else {
                format!("{:>3}", d.per_stream.first().map_or(0, |p| p.stream))
            };
            let _ = writeln!(s, "[{id}]{dir} {span} {}", self.cols(&d.figures));
        }
        s.push('\n');
        for d in &u.directions {
            self.explain(&mut s, d);
        }
        let server = u.server_batching.as_deref().unwrap_or("no report");
        let _ = writeln!(
            s,
            "Datagrams moved with: client {}; server {server}",
            u.client_batching
        );
        let _ = writeln!(
            s,
            "Loss counts every datagram sent inside the window that had not arrived {:.1} s after it ended.",
            u.grace_s
        );
        let per_gb = |v: Option<f64>| v.map_or_else(String::new, |v| format!(" ({v:.3} s/GB)"));
        let _ = write!(
            s,
            "CPU: client {:.2} s{}",
            r.cpu.client.total_s(),
            per_gb(r.cpu.client_s_per_gb)
        );
        match r.cpu.server {
            Some(sv) => {
                let _ = writeln!(
                    s,
                    ", server {:.2} s{}",
                    sv.total_s(),
                    per_gb(r.cpu.server_s_per_gb)
                );
            }
            None => s.push_str(", server: no report\n"),
        }
        s.push_str(&outcome_line(r));
        s
    }

    /// Asked versus achieved, and what the receiver's kernel dropped.
    fn explain(&self, s: &mut String, d: &xbench::report::UdpDirectionSummary) {
        let f = &d.figures;
        let got = f
            .received
            .map_or(f.sent.bits_per_second, |r| r.count.bits_per_second);
        let _ = write!(
            s,
            "{}: received {}",
            d.direction.label(),
            self.shown.rate.show(got)
        );
        match d.asked_bits_per_second {
            Some(a) if a > 0.0 => {
                let _ = write!(
                    s,
                    " of {} asked ({:.1} %)",
                    self.shown.rate.show(a),
                    got * 100.0 / a
                );
            }
            _ => s.push_str(" unpaced"),
        }
        let _ = write!(
            s,
            "; sent {} datagrams ({})",
            count(f.sent.datagrams),
            ByteSize(f.sent.bytes)
        );
        if f.slipped > 0 {
            let _ = write!(
                s,
                "; the schedule slipped: {} datagram slots skipped",
                count(f.slipped)
            );
        }
        if let Some(r) = f.received
            && r.rxq_drops > 0
        {
            let _ = write!(
                s,
                "; the receiver's kernel dropped {} for a full socket buffer (SO_RXQ_OVFL; with \
                 GRO each can be a train of datagrams): the receiver, not the network, lost those",
                count(r.rxq_drops)
            );
        }
        if let Some(r) = f.received
            && r.ignored > 0
        {
            let _ = write!(
                s,
                "; {} datagrams that were not this test's ignored",
                count(r.ignored)
            );
        }
        s.push('\n');
    }

    fn cols(&self, f: &UdpFigures) -> String {
        let Some(r) = f.received else {
            return format!(
                "{:>10}  {:>13}  {:>9}  {:<22}",
                ByteSize(f.sent.bytes).to_string(),
                self.shown.rate.show(f.sent.bits_per_second),
                "-",
                "(no report)"
            );
        };
        let total = r.count.datagrams + r.lost;
        format!(
            "{:>10}  {:>13}  {:>9}  {:<22} {:>5} {:>4}",
            ByteSize(r.count.bytes).to_string(),
            self.shown.rate.show(r.count.bits_per_second),
            format_micros(r.jitter_ms * 1e3),
            format!("{}/{} ({})", count(r.lost), count(total), pct(r.lost_pct)),
            count(r.out_of_order),
            count(r.duplicates),
        )
    }
}

/// A loss percentage as iperf3 prints it: no decimals for 0 and whole numbers.
fn pct(p: f64) -> String {
    if p == 0.0 || p == 100.0 {
        format!("{p:.0}%")
    } else if p < 0.01 {
        format!("{p:.1e}%")
    } else {
        format!("{p:.2}%")
    }
}
