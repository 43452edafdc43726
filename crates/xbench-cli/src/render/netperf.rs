//! `--fields`: netperf's output selectors, so a script that scraped
//! `netperf -t TCP_RR -- -O min_latency,mean_latency,…` reads `xbench client --rr --fields …`
//! unchanged. Same selector names (case-insensitive), same column titles and number formats;
//! `columns` is netperf's `-O`, `csv` its `-o`, `keyval` its `-k`.

use std::fmt::Write as _;

use clap::ValueEnum;
use xbench::report::TestReport;
use xbench_report::ThroughputUnit;

/// One output selector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    MinLatency,
    MeanLatency,
    MaxLatency,
    StddevLatency,
    P50Latency,
    P90Latency,
    P99Latency,
    P999Latency,
    P9999Latency,
    TransactionRate,
    Throughput,
    ThroughputUnits,
    ElapsedTime,
    RequestSize,
    ResponseSize,
    BurstSize,
    LocalTransportRetrans,
    RemoteTransportRetrans,
    Flows,
    Connections,
    LostRequests,
    LostPercent,
}

/// netperf's selector name, its three header lines, and how its value is printed.
struct Spec {
    field: Field,
    name: &'static str,
    title: [&'static str; 3],
    decimals: usize,
}

const SPECS: &[Spec] = &[
    spec(
        Field::MinLatency,
        "MIN_LATENCY",
        ["Minimum", "Latency", "Microseconds"],
        0,
    ),
    spec(
        Field::MeanLatency,
        "MEAN_LATENCY",
        ["Mean", "Latency", "Microseconds"],
        2,
    ),
    spec(
        Field::MaxLatency,
        "MAX_LATENCY",
        ["Maximum", "Latency", "Microseconds"],
        0,
    ),
    spec(
        Field::StddevLatency,
        "STDDEV_LATENCY",
        ["Stddev", "Latency", "Microseconds"],
        2,
    ),
    spec(
        Field::P50Latency,
        "P50_LATENCY",
        ["50th", "Percentile", "Latency Microseconds"],
        0,
    ),
    spec(
        Field::P90Latency,
        "P90_LATENCY",
        ["90th", "Percentile", "Latency Microseconds"],
        0,
    ),
    spec(
        Field::P99Latency,
        "P99_LATENCY",
        ["99th", "Percentile", "Latency Microseconds"],
        0,
    ),
    spec(
        Field::P999Latency,
        "P99_9_LATENCY",
        ["99.9th", "Percentile", "Latency Microseconds"],
        0,
    ),
    spec(
        Field::P9999Latency,
        "P99_99_LATENCY",
        ["99.99th", "Percentile", "Latency Microseconds"],
        0,
    ),
    spec(
        Field::TransactionRate,
        "TRANSACTION_RATE",
        ["Transaction", "Rate", "Tran/s"],
        3,
    ),
    spec(Field::Throughput, "THROUGHPUT", ["Throughput", "", ""], 2),
    spec(
        Field::ThroughputUnits,
        "THROUGHPUT_UNITS",
        ["Throughput", "Units", ""],
        0,
    ),
    spec(
        Field::ElapsedTime,
        "ELAPSED_TIME",
        ["Elapsed", "Time", "(sec)"],
        2,
    ),
    spec(
        Field::RequestSize,
        "REQUEST_SIZE",
        ["Request", "Size", "Bytes"],
        0,
    ),
    spec(
        Field::ResponseSize,
        "RESPONSE_SIZE",
        ["Response", "Size", "Bytes"],
        0,
    ),
    spec(
        Field::BurstSize,
        "BURST_SIZE",
        ["Initial", "Burst", "Requests"],
        0,
    ),
    spec(
        Field::LocalTransportRetrans,
        "LOCAL_TRANSPORT_RETRANS",
        ["Local", "Transport", "Retransmissions"],
        0,
    ),
    spec(
        Field::RemoteTransportRetrans,
        "REMOTE_TRANSPORT_RETRANS",
        ["Remote", "Transport", "Retransmissions"],
        0,
    ),
    spec(Field::Flows, "FLOWS", ["Flows", "", ""], 0),
    spec(
        Field::Connections,
        "CONNECTIONS",
        ["Connections", "", ""],
        0,
    ),
    spec(
        Field::LostRequests,
        "LOST_REQUESTS",
        ["Lost", "Requests", "(UDP)"],
        0,
    ),
    spec(
        Field::LostPercent,
        "LOST_PERCENT",
        ["Lost", "Requests", "%"],
        3,
    ),
];

const fn spec(field: Field, name: &'static str, title: [&'static str; 3], decimals: usize) -> Spec {
    Spec {
        field,
        name,
        title,
        decimals,
    }
}

impl Field {
    pub(crate) fn parse(s: &str) -> Result<Field, String> {
        SPECS
            .iter()
            .find(|sp| sp.name.eq_ignore_ascii_case(s))
            .map(|sp| sp.field)
            .ok_or_else(|| {
                let names: Vec<String> = SPECS.iter().map(|sp| sp.name.to_lowercase()).collect();
                format!("unknown field `{s}`; known: {}", names.join(", "))
            })
    }

    fn spec(self) -> &'static Spec {
        // Every variant has an entry; the table is checked by a test.
        SPECS
            .iter()
            .find(|sp| sp.field == self)
            .unwrap_or(&SPECS[0])
    }
}

/// The selectors of `--fields`, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldList(pub(crate) Vec<Field>);

/// How the selected figures are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum Format {
    /// Aligned columns under three title lines (netperf -O).
    #[default]
    Columns,
    /// A title line and a value line, comma-separated (netperf -o).
    Csv,
    /// NAME=value, one per line (netperf -k).
    Keyval,
}

/// The selected figures of a finished test.
///
/// `unit` (`-f`) scales `throughput` of a throughput test and names it in `throughput_units`;
/// without one they are netperf's default, 10^6 bits/s.
pub(crate) fn render(
    r: &TestReport,
    fields: &[Field],
    format: Format,
    unit: Option<ThroughputUnit>,
) -> String {
    let values: Vec<String> = fields.iter().map(|f| value(r, *f, unit)).collect();
    let mut s = String::new();
    match format {
        Format::Columns => {
            let width = |i: usize| {
                let sp = fields[i].spec();
                sp.title
                    .iter()
                    .map(|t| t.len())
                    .chain([values[i].len(), 12])
                    .max()
                    .unwrap_or(12)
            };
            for line in 0..3 {
                for (i, f) in fields.iter().enumerate() {
                    let _ = write!(s, "{:<w$} ", f.spec().title[line], w = width(i));
                }
                s.push('\n');
            }
            s.push('\n');
            for (i, v) in values.iter().enumerate() {
                let _ = write!(s, "{:<w$} ", v, w = width(i));
            }
            s.push('\n');
        }
        Format::Csv => {
            let titles: Vec<String> = fields
                .iter()
                .map(|f| {
                    f.spec()
                        .title
                        .iter()
                        .filter(|t| !t.is_empty())
                        .copied()
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect();
            let _ = writeln!(s, "{}", titles.join(","));
            let _ = writeln!(s, "{}", values.join(","));
        }
        Format::Keyval => {
            for (f, v) in fields.iter().zip(&values) {
                let _ = writeln!(s, "{}={v}", f.spec().name);
            }
        }
    }
    s
}

fn value(r: &TestReport, f: Field, unit: Option<ThroughputUnit>) -> String {
    let unit_factor = unit.map_or(1e-6, ThroughputUnit::factor);
    let sp = f.spec();
    let num = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.*}", sp.decimals));
    let rr = r.rr.as_ref();
    let lat = rr.and_then(|x| x.summary.latency);
    let rr_spec = r.spec.as_rr();
    let udp = rr.and_then(|x| x.summary.udp.as_ref());
    match f {
        Field::MinLatency => num(lat.map(|l| l.min_us)),
        Field::MeanLatency => num(lat.map(|l| l.mean_us)),
        Field::MaxLatency => num(lat.map(|l| l.max_us)),
        Field::StddevLatency => num(lat.map(|l| l.stddev_us)),
        Field::P50Latency => num(lat.map(|l| l.p50_us)),
        Field::P90Latency => num(lat.map(|l| l.p90_us)),
        Field::P99Latency => num(lat.map(|l| l.p99_us)),
        Field::P999Latency => num(lat.map(|l| l.p99_9_us)),
        Field::P9999Latency => num(lat.map(|l| l.p99_99_us)),
        Field::TransactionRate => num(rr.map(|x| x.summary.transactions_per_second)),
        Field::Throughput => match rr {
            Some(x) => num(Some(x.summary.transactions_per_second)),
            None => num(r
                .summary
                .directions
                .first()
                .and_then(|d| d.receiver)
                .map(|t| t.bits_per_second * unit_factor)),
        },
        Field::ThroughputUnits => match (rr, unit) {
            (Some(_), _) => "Trans/s",
            (None, Some(u)) => u.label(),
            (None, None) => "10^6bits/s",
        }
        .to_owned(),
        Field::ElapsedTime => num(Some(r.summary.measured_s)),
        Field::RequestSize => num(rr_spec.map(|s| f64::from(s.request_len.get()))),
        Field::ResponseSize => num(rr_spec.map(|s| f64::from(s.response_len.get()))),
        Field::BurstSize => num(rr_spec.map(|s| f64::from(s.burst.get()))),
        Field::LocalTransportRetrans => {
            num(rr.map(|x| x.summary.retransmits as f64).or_else(|| {
                Some(
                    r.summary
                        .directions
                        .iter()
                        .map(|d| d.retransmits)
                        .sum::<u64>() as f64,
                )
            }))
        }
        Field::RemoteTransportRetrans => num(rr
            .and_then(|x| x.summary.server_retransmits)
            .map(|v| v as f64)),
        Field::Flows => num(rr_spec.map(|s| f64::from(s.flows.get()))),
        Field::Connections => num(rr.map(|x| x.summary.connections as f64)),
        Field::LostRequests => num(udp.map(|u| u.lost as f64)),
        Field::LostPercent => num(udp.map(|u| u.lost_percent)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_a_table_entry_and_parses_by_name() {
        for sp in SPECS {
            assert_eq!(Field::parse(&sp.name.to_lowercase()).unwrap(), sp.field);
            assert_eq!(sp.field.spec().name, sp.name);
        }
        assert!(Field::parse("bogus").unwrap_err().contains("known:"));
    }
}
