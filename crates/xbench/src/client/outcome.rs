//! The outcome of a test whose server's results did not come, and the words for why: the
//! xbench and iperf3 sessions end the same way.

use std::time::Duration;

use crate::report::Outcome;

/// The outcome of a test whose server's results never came: one that ran to its end failed,
/// since `missing` (which figures that leaves out) are missing and a run that looks complete
/// would be averaged with the others by a sweep or a report; `why` says why they did not come
/// (a server stopped or frozen, a control connection cut). An interrupted or already failed
/// test keeps its outcome.
pub(crate) fn without_server_results(
    outcome: Outcome,
    missing: &str,
    why: Option<&str>,
) -> Outcome {
    match outcome {
        Outcome::Completed => Outcome::Failed {
            error: format!(
                "the server's results never arrived, because {}: {missing} are missing",
                why.unwrap_or("the server did not send them")
            ),
        },
        other => other,
    }
}

/// Why a server's results did not come by `waited` after the end of a test: it stopped
/// answering on a control connection that stayed open.
pub(crate) fn results_timed_out(addr: &str, waited: Duration) -> String {
    format!(
        "{addr} sent nothing for {:.1} s after the end of the test (a server stopped or \
         frozen, overloaded, or a path that stopped carrying the control connection)",
        waited.as_secs_f64()
    )
}
