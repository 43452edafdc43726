//! The path beside the rates (issue 33): what each run says of the hosts and the path it
//! crossed — each end's interface MTU, the interface counters and EC2 allowance counters that
//! moved — grouped per label, so a table can show, next to two paths' rates, whether one of
//! them was the instance's limit or dropped packets at an interface.
//!
//! Reads only what a report recorded; nothing here runs a test or reads a host.

use std::collections::BTreeMap;

use serde::Serialize;
use xbench::report::{Allowances, HostReport, TestReport};

use crate::run::Run;
use crate::stats::Stats;

/// What one run says of its path and hosts.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PathFacts {
    /// The client's interface MTU, bytes.
    pub client_mtu: Option<u32>,
    /// The server's interface MTU, bytes.
    pub server_mtu: Option<u32>,
    /// The client's EC2 instance type, when it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_instance: Option<String>,
    /// The server's EC2 instance type, when it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_instance: Option<String>,
    /// The smallest MSS the run's TCP senders used, bytes.
    pub mss: Option<u32>,
    /// The smallest path MTU they found, bytes.
    pub pmtu: Option<u32>,
    /// The MSS was below what the MTUs allowed (clamped, or an MTU black hole).
    pub mss_below_mtu: bool,
    /// `--trace`: routers between the ends, when the server answered the probes.
    pub routed_hops: Option<usize>,
    /// `--trace`: the median RTT of the probes the server answered, µs.
    pub trace_rtt_us: Option<f64>,
    /// Counters that moved over the run, by `end:name` (`client:tx_dropped`,
    /// `server:bw_out_allowance_exceeded`): the kernel's drop and error counters and EC2's
    /// allowance counters. A counter that did not move is not listed.
    pub counters: BTreeMap<String, u64>,
    /// Whether each end's driver counts EC2's allowances (`client`, `server`): a counter
    /// missing from `counters` is then 0, not unknown.
    pub allowances_counted: Vec<String>,
}

impl PathFacts {
    /// The facts a report recorded (none for reports written before they were).
    pub fn of_report(r: &TestReport) -> PathFacts {
        let mut f = PathFacts::default();
        if let Some(t) = &r.trace {
            f.routed_hops = t.routed_hops();
            f.trace_rtt_us = t
                .hops
                .iter()
                .find(|h| h.destination)
                .and_then(|h| h.rtt)
                .map(|r| r.p50_us);
        }
        let Some(h) = &r.hosts else {
            return f;
        };
        if let Some(p) = &h.path_mtu {
            f.mss = Some(p.mss);
            f.pmtu = Some(p.pmtu);
            f.mss_below_mtu = p.finding == xbench::report::MtuFinding::MssBelow;
        }
        for (end, host) in [("client", &h.client), ("server", &h.server)] {
            let Some(HostReport {
                interface: Some(i),
                cloud,
                ..
            }) = host
            else {
                continue;
            };
            let instance = cloud.as_ref().map(|p| p.instance_type.clone());
            match end {
                "client" => f.client_instance = instance,
                _ => f.server_instance = instance,
            }
            match end {
                "client" => f.client_mtu = Some(i.mtu),
                _ => f.server_mtu = Some(i.mtu),
            }
            let c = &i.counters;
            for (name, n) in [
                ("rx_dropped", c.rx_dropped),
                ("tx_dropped", c.tx_dropped),
                ("rx_errors", c.rx_errors),
                ("tx_errors", c.tx_errors),
                ("rx_missed", c.rx_missed),
            ] {
                if n > 0 {
                    f.counters.insert(format!("{end}:{name}"), n);
                }
            }
            if let Allowances::Counted(a) = &i.allowances {
                f.allowances_counted.push(end.to_owned());
                for (al, n) in a.exceeded() {
                    if n > 0 {
                        f.counters.insert(format!("{end}:{}", al.counter()), n);
                    }
                }
            }
        }
        f
    }
}

/// One label's runs, as far as their path facts go.
#[derive(Debug, Clone, Serialize)]
pub struct PathRow {
    /// The path.
    pub label: String,
    /// Runs of this label.
    pub runs: usize,
    /// The client's interface MTU (the smallest over the runs that recorded it).
    pub client_mtu: Option<u32>,
    /// The server's interface MTU (the smallest over the runs that recorded it).
    pub server_mtu: Option<u32>,
    /// The smallest MSS over the runs.
    pub mss: Option<u32>,
    /// The smallest path MTU over the runs.
    pub pmtu: Option<u32>,
    /// Runs whose MSS was below what their MTUs allowed.
    pub mss_below_mtu: usize,
    /// Routers between the ends, as the traced runs found them (the most found).
    pub routed_hops: Option<usize>,
    /// The server's median probe RTT per traced run, µs.
    pub trace_rtt_us: Option<Stats>,
    /// Each counter that moved in any run of any label: its count per run, over the runs of
    /// this label that recorded their hosts (0 where it did not move).
    pub counters: BTreeMap<String, Stats>,
}

/// The path rows of `runs`, one per label in order, when any run recorded its hosts.
pub fn rows(runs: &[Run]) -> Vec<PathRow> {
    if runs.iter().all(|r| r.facts == PathFacts::default()) {
        return Vec::new();
    }
    let moved: std::collections::BTreeSet<&String> =
        runs.iter().flat_map(|r| r.facts.counters.keys()).collect();
    let mut labels: Vec<&str> = Vec::new();
    for r in runs {
        if !labels.contains(&r.label.as_str()) {
            labels.push(&r.label);
        }
    }
    labels
        .into_iter()
        .map(|label| {
            let mine: Vec<&Run> = runs.iter().filter(|r| r.label == label).collect();
            let recorded: Vec<&PathFacts> = mine
                .iter()
                .map(|r| &r.facts)
                .filter(|f| {
                    f.client_mtu.is_some() || f.server_mtu.is_some() || f.routed_hops.is_some()
                })
                .collect();
            let counters = moved
                .iter()
                .filter_map(|name| {
                    let per_run: Vec<f64> = recorded
                        .iter()
                        .map(|f| f.counters.get(*name).copied().unwrap_or(0) as f64)
                        .collect();
                    Some(((*name).clone(), Stats::of(&per_run)?))
                })
                .collect();
            PathRow {
                label: label.to_owned(),
                runs: mine.len(),
                client_mtu: recorded.iter().filter_map(|f| f.client_mtu).min(),
                server_mtu: recorded.iter().filter_map(|f| f.server_mtu).min(),
                mss: recorded.iter().filter_map(|f| f.mss).min(),
                pmtu: recorded.iter().filter_map(|f| f.pmtu).min(),
                mss_below_mtu: recorded.iter().filter(|f| f.mss_below_mtu).count(),
                routed_hops: mine.iter().filter_map(|r| r.facts.routed_hops).max(),
                trace_rtt_us: Stats::of(
                    &mine
                        .iter()
                        .filter_map(|r| r.facts.trace_rtt_us)
                        .collect::<Vec<_>>(),
                ),
                counters,
            }
        })
        .collect()
}

/// The path table: a row per label; MTU of each end, then a column per counter that moved
/// (its mean per run). Empty without rows.
pub fn table(rows: &[PathRow], md: bool) -> String {
    let mut out = String::new();
    table_into(&mut out, rows, md);
    out
}

/// [`table`], appended to `out` as the report's other tables are.
pub(crate) fn table_into(out: &mut String, rows: &[PathRow], md: bool) {
    if rows.is_empty() {
        return;
    }
    let counters: Vec<&String> = rows
        .first()
        .map(|r| r.counters.keys().collect())
        .unwrap_or_default();
    let mut head = vec![
        "path".to_owned(),
        "runs".to_owned(),
        "MTU client/server".to_owned(),
        "path MTU".to_owned(),
        "MSS".to_owned(),
        "hops".to_owned(),
        "trace RTT".to_owned(),
    ];
    head.extend(counters.iter().map(|c| (*c).clone()));
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mtu = |m: Option<u32>| m.map_or("-".to_owned(), |m| xbench::units::count(m.into()));
            let mss = match (r.mss, r.mss_below_mtu) {
                (None, _) => "-".to_owned(),
                (Some(m), 0) => mtu(Some(m)),
                // The flag: an MSS below what the MTUs allow (clamped, or a black hole).
                (Some(m), n) => format!("{} (below MTU in {n} runs)", mtu(Some(m))),
            };
            let mut row = vec![
                r.label.clone(),
                r.runs.to_string(),
                format!("{}/{}", mtu(r.client_mtu), mtu(r.server_mtu)),
                mtu(r.pmtu),
                mss,
                r.routed_hops.map_or("-".to_owned(), |h| h.to_string()),
                r.trace_rtt_us
                    .as_ref()
                    .map_or("-".to_owned(), |s| xbench::units::format_micros(s.mean)),
            ];
            row.extend(counters.iter().map(|c| {
                r.counters
                    .get(*c)
                    .map_or("-".to_owned(), |s| xbench::units::number(s.mean))
            }));
            row
        })
        .collect();
    let head: Vec<&str> = head.iter().map(String::as_str).collect();
    crate::render::table(
        out,
        "Path: interfaces, and the counters that moved (mean per run)",
        &head,
        body,
        md,
    );
}

/// What a regression check should say of the paths' facts beside its verdicts: counters that
/// moved on either side (an allowance that shaped the candidate's runs makes its loss the
/// instance's, not the path's) and interface MTUs that differ between the sides.
pub fn compare_notes(
    b_label: &str,
    baseline: &[Run],
    c_label: &str,
    candidate: &[Run],
) -> Vec<String> {
    let mut notes = Vec::new();
    for (side, label, runs) in [
        ("baseline", b_label, baseline),
        ("candidate", c_label, candidate),
    ] {
        let Some(row) = rows(runs).into_iter().find(|r| r.label == label) else {
            continue;
        };
        for (name, st) in &row.counters {
            if st.max > 0.0 {
                let why = if name.ends_with("_allowance_exceeded") {
                    ": the instance's allowance shaped these runs, so their rate is partly the \
                     instance's limit"
                } else {
                    ""
                };
                notes.push(format!(
                    "{side} `{label}`: {name} moved (mean {} per run over {} runs){why}",
                    crate::units::number(st.mean),
                    st.n
                ));
            }
        }
    }
    let mtus = |runs: &[Run], label: &str| {
        rows(runs)
            .into_iter()
            .find(|r| r.label == label)
            .map(|r| (r.client_mtu, r.server_mtu))
    };
    if let (Some(b), Some(c)) = (mtus(baseline, b_label), mtus(candidate, c_label))
        && b != c
    {
        let show = |m: (Option<u32>, Option<u32>)| {
            let one = |v: Option<u32>| v.map_or("-".to_owned(), |v| xbench::units::count(v.into()));
            format!("{}/{}", one(m.0), one(m.1))
        };
        notes.push(format!(
            "the interfaces' MTUs (client/server) differ: {} in the baseline, {} in the candidate",
            show(b),
            show(c)
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::CellKey;
    use crate::run::{DirectionResult, Measure};
    use xbench::config::StreamDirection;

    fn run(label: &str, facts: PathFacts) -> Run {
        Run {
            path: Default::default(),
            label: label.into(),
            key: CellKey::of_spec(&xbench::config::TestSpec::throughput()),
            started_at: String::new(),
            length_s: Some(10.0),
            measure: Measure::Throughput(vec![DirectionResult {
                direction: StreamDirection::ClientToServer,
                bits_per_second: 1e9,
                retransmits: 0,
                rtt_mean_us: None,
                window_ceiling_bps: None,
                timeline: vec![],
                verdict: None,
            }]),
            facts,
        }
    }

    #[test]
    fn a_column_per_counter_that_moved_and_zero_where_it_did_not() {
        let moved = PathFacts {
            client_mtu: Some(9001),
            server_mtu: Some(9001),
            counters: BTreeMap::from([("client:bw_out_allowance_exceeded".to_owned(), 12_408)]),
            allowances_counted: vec!["client".into(), "server".into()],
            ..PathFacts::default()
        };
        let quiet = PathFacts {
            client_mtu: Some(1500),
            server_mtu: Some(1400),
            counters: BTreeMap::new(),
            allowances_counted: vec![],
            ..PathFacts::default()
        };
        let runs = [
            run("peering", moved.clone()),
            run("peering", moved),
            run("vpn", quiet),
        ];
        let r = rows(&runs);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0].counters["client:bw_out_allowance_exceeded"].mean,
            12_408.0
        );
        assert_eq!(r[1].counters["client:bw_out_allowance_exceeded"].mean, 0.0);
        let t = table(&r, false);
        assert!(t.contains("client:bw_out_allowance_exceeded"), "{t}");
        assert!(t.contains("9,001/9,001"), "{t}");
        assert!(t.contains("1,500/1,400"), "{t}");
        // Runs without host facts give no table.
        assert!(rows(&[run("x", PathFacts::default())]).is_empty());
    }

    #[test]
    fn a_regression_check_notes_an_allowance_that_moved_and_a_changed_mtu() {
        let shaped = PathFacts {
            client_mtu: Some(1500),
            server_mtu: Some(1500),
            counters: BTreeMap::from([("server:bw_in_allowance_exceeded".to_owned(), 900)]),
            allowances_counted: vec!["server".into()],
            ..PathFacts::default()
        };
        let before = PathFacts {
            client_mtu: Some(9001),
            server_mtu: Some(1500),
            ..PathFacts::default()
        };
        let notes = compare_notes("p", &[run("p", before)], "p", &[run("p", shaped)]);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("candidate `p`: server:bw_in_allowance_exceeded moved (mean 900 per run over 1 runs)"), "{notes:?}");
        assert!(notes[1].contains("9,001/1,500 in the baseline, 1,500/1,500 in the candidate"));
    }
}
