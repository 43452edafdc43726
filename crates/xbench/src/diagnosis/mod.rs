//! What limited a TCP throughput test's rate, derived from named figures, returned as data.
//!
//! Each verdict — the pacing asked, the path's queue, the receive window's size, a receiver
//! that did not read fast enough, the send buffer, the sender's CPU or application, losses on
//! the path — rests on figures the report already holds (the kernel's `TCP_INFO` limited
//! times, the window ceiling against the rate, retransmits, RTT under load against the base
//! RTT) and on how each end's threads spent the window (on a CPU, waiting for one, asleep) and
//! the receiver's unread queue, where xbench ran that end. The thresholds are constants in
//! [`rules`], each with the reasoning behind it; `docs/diagnosis.md` is the user's account.
//!
//! When the figures disagree, or the side that would tell is unseen (an iperf3 server says
//! nothing about its reader), the [`Diagnosis`] says what it cannot tell instead of guessing:
//! a wrong "why" is worse than none. Not for: rendering (the binary and `xbench-report` word
//! the verdicts), UDP or request/response tests (their figures are their own).

mod inputs;
pub(crate) mod model;
pub mod rules;

use crate::report::TestReport;

pub use inputs::{Inputs, Peer};
pub use model::{Confidence, Diagnosis, Figure, FigureName, Unit, Unknown, Verdict};

/// Diagnoses every TCP throughput direction of `report` in place
/// ([`crate::report::DirectionSummary::diagnosis`]); UDP and request/response reports are left
/// alone. The client calls it before it returns a report; `xbench report` calls it on saved
/// documents written before diagnoses existed.
pub fn attach(report: &mut TestReport) {
    let found: Vec<Option<Diagnosis>> = (0..report.summary.directions.len())
        .map(|i| Inputs::of(report, i).map(|x| x.diagnose()))
        .collect();
    for (d, diagnosis) in report.summary.directions.iter_mut().zip(found) {
        d.diagnosis = diagnosis;
    }
}

impl Inputs {
    /// Runs the rules on these figures. Here rather than beside the inputs so that the rules
    /// read the inputs and the inputs need not know the rules.
    pub fn diagnose(&self) -> Diagnosis {
        rules::decide(self)
    }
}
