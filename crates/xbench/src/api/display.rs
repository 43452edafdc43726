//! `Display` for a test's outcome and its headline figures: what a program prints when it
//! wants one line per result. Formatting only; the library itself prints nothing. The full
//! text and JSON renderings are the CLI's.

use std::fmt;

use crate::report::{Outcome, RrSummary, TestReport};
use crate::units::format_bits_per_second;

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Completed => f.write_str("completed"),
            Outcome::Interrupted => f.write_str("interrupted"),
            Outcome::Failed { error } => write!(f, "failed: {error}"),
        }
    }
}

/// One line per direction of a throughput test (the receivers' rate over the measured window
/// and the retransmits), or one line for a request/response test (transactions per second,
/// p50 and p99); then the outcome, when the test did not complete.
///
/// `client→server: 9.41 Gbit/s received, 0 retransmits over 10.0 s`
impl fmt::Display for TestReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut line = |f: &mut fmt::Formatter<'_>| -> fmt::Result {
            if !std::mem::take(&mut first) {
                f.write_str("\n")?;
            }
            Ok(())
        };
        for d in &self.summary.directions {
            line(f)?;
            let rate = d.receiver.map_or("no receiver report".to_owned(), |r| {
                format!("{} received", format_bits_per_second(r.bits_per_second))
            });
            write!(
                f,
                "{}: {rate}, {} retransmits over {:.1} s",
                d.direction.label(),
                d.retransmits,
                self.summary.measured_s
            )?;
        }
        if let Some(rr) = &self.rr {
            line(f)?;
            rr_line(f, &rr.summary)?;
        }
        if self.outcome != Outcome::Completed {
            line(f)?;
            write!(f, "test {}", self.outcome)?;
        }
        Ok(())
    }
}

/// `request/response: 41230 transactions/s, p50 23.1 µs, p99 48.0 µs over 10.0 s`
fn rr_line(f: &mut fmt::Formatter<'_>, s: &RrSummary) -> fmt::Result {
    write!(
        f,
        "request/response: {:.0} transactions/s",
        s.transactions_per_second
    )?;
    if let Some(l) = &s.latency {
        write!(f, ", p50 {:.1} µs, p99 {:.1} µs", l.p50_us, l.p99_us)?;
    }
    if let Some(u) = &s.udp {
        write!(f, ", {} lost ({:.3} %)", u.lost, u.lost_percent)?;
    }
    write!(f, " over {:.1} s", s.seconds)
}
