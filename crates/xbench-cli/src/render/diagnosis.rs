//! The diagnosis lines of a throughput summary: the verdict, the figures it rests on, and what
//! the figures could not tell. Wording of the library's [`Diagnosis`]; nothing decided here.

use std::fmt::Write as _;

use xbench::diagnosis::{Confidence, Diagnosis, Verdict};

/// Three lines at most, indented under a direction's summary:
///
/// ```text
///   limit: receiver not keeping up (likely): the receiving application read too slowly, …
///     from: rate 22.0 Gbit/s; held back by the receive window 62.0 %; …
///     cannot tell why the receiver read slowly: it does not report how …
/// ```
pub(crate) fn lines(d: &Diagnosis, rate: &dyn Fn(f64) -> String) -> String {
    let mut s = String::new();
    match (d.verdict, d.confidence) {
        (Verdict::CannotTell, _) | (_, None) => s.push_str("  limit: cannot tell\n"),
        (v, Some(c)) => {
            let how = match c {
                Confidence::Clear => "",
                Confidence::Likely => " (likely)",
            };
            let _ = writeln!(s, "  limit: {}{how}: {}", v.name(), v.meaning());
        }
    }
    if !d.figures.is_empty() {
        let figures: Vec<String> = d.figures.iter().map(|f| f.describe(rate)).collect();
        let _ = writeln!(s, "    from: {}", figures.join("; "));
    }
    for u in &d.cannot_tell {
        let _ = writeln!(s, "    cannot tell {u}");
    }
    s
}
