//! The throughput unit of tables and charts: Mbit/s, Gbit/s, or MB/s as one field report
//! compared against a 125 MB/s link, and every unit iperf3's `-f` letters name, scaled to the
//! figures unless one is fixed. The units and the rule for writing a number are the library's
//! (`xbench::units`), one implementation for every crate; this module adds the loss share.
//! JSON output always stays in bits per second.

pub use xbench::units::{RateScale, ThroughputUnit, TimeUnit, UnknownUnit, number};

/// The largest of `figures` by size (0 for none): what an axis's, a column's or a table's
/// unit is chosen by.
pub(crate) fn largest(figures: impl Iterator<Item = f64>) -> f64 {
    figures.map(f64::abs).fold(0.0, f64::max)
}

/// A share in percent as loss is read: `0 %` only when exactly none, else enough digits that a
/// single datagram in millions does not show as zero (`0.0001 %`).
pub(crate) fn percent(p: f64) -> String {
    if p == 0.0 {
        "0 %".to_owned()
    } else if p.abs() >= 0.1 {
        format!("{} %", number(p))
    } else {
        // Two significant digits of a small share.
        let digits = (-p.abs().log10()).ceil() as usize + 1;
        format!("{p:.digits$} %")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_losses_do_not_read_as_none() {
        assert_eq!(percent(0.0), "0 %");
        assert_eq!(percent(50.0), "50.0 %");
        assert_eq!(percent(0.5), "0.500 %");
        assert_eq!(percent(0.012), "0.012 %");
        assert_eq!(percent(0.0001234), "0.00012 %");
    }
}
