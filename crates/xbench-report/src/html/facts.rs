//! What a run's file says beyond the figures a comparison keeps ([`Run`]): where it was
//! measured (host, addresses, the server's software), the sender's TCP state, the warnings the
//! test printed — and every field this version of xbench does not know, so that a figure a
//! newer xbench (or a branch being merged) saves shows on the page instead of vanishing.
//!
//! Unknown fields are found by reading the file as a [`TestReport`], writing that back, and
//! keeping what the file holds that the round trip lost. Reading only; the page is `html`'s.

use std::collections::BTreeMap;

use serde_json::Value;
use xbench::config::StreamDirection;
use xbench::report::TestReport;

use crate::run::Run;

/// The most unknown fields kept per run: enough for any added section, bounded for a file
/// that is mostly unknown.
const MAX_UNKNOWN: usize = 200;

/// What a run's file says about where and how it was measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunFacts {
    /// The server as given on the command line.
    pub(crate) host: Option<String>,
    /// The client's address (no port).
    pub(crate) client_ip: Option<String>,
    /// The server's address (no port).
    pub(crate) server_ip: Option<String>,
    /// `xbench 0.1.0` at the far end; iperf3's version for an imported file.
    pub(crate) server_software: Option<String>,
    /// The program that wrote the file.
    pub(crate) writer: Option<String>,
    /// What the test warned about.
    pub(crate) warnings: Vec<String>,
    /// The sender's TCP state per direction (throughput runs).
    pub(crate) tcp: Vec<TcpFacts>,
    /// Fields of the file this version does not know: a JSON path with array indices left
    /// out (`summary.directions[].mtu`) and each value found there.
    pub(crate) unknown: Vec<(String, Value)>,
    /// Why the file could not be read back, when it could not (it changed since loading).
    pub(crate) unreadable: Option<String>,
}

/// One direction's TCP state, over the measured window.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TcpFacts {
    pub(crate) direction: StreamDirection,
    pub(crate) retransmits: u64,
    /// Smallest, mean and largest smoothed RTT, µs.
    pub(crate) rtt_us: Option<(f64, f64, f64)>,
    pub(crate) max_cwnd_bytes: Option<u64>,
    /// Share of time busy, held by the receive window, held by the send buffer, percent.
    pub(crate) limits: Option<(f64, f64, f64)>,
    pub(crate) window_limited: bool,
    pub(crate) ceiling_bps: Option<f64>,
}

impl RunFacts {
    /// Reads `run`'s file again (at most `limit` bytes) for what the comparison left out.
    pub(crate) fn of(run: &Run, limit: u64) -> RunFacts {
        if run.path.as_os_str().is_empty() {
            return RunFacts::default();
        }
        match crate::load::read_json(&run.path, limit) {
            Ok(v) => RunFacts::of_value(&v),
            Err(e) => RunFacts {
                unreadable: Some(e),
                ..RunFacts::default()
            },
        }
    }

    fn of_value(raw: &Value) -> RunFacts {
        if raw.get("schema_version").is_some() {
            return match serde_json::from_value::<TestReport>(raw.clone()) {
                Ok(r) => {
                    let mut f = of_report(&r);
                    if let Ok(known) = serde_json::to_value(&r) {
                        unknown_fields(raw, &known, "", &mut f.unknown);
                    }
                    f
                }
                Err(e) => RunFacts {
                    unreadable: Some(format!("not a valid xbench report ({e})")),
                    ..RunFacts::default()
                },
            };
        }
        of_iperf3(raw)
    }
}

fn of_report(r: &TestReport) -> RunFacts {
    let tcp = if r.rr.is_some() || r.udp.is_some() {
        Vec::new()
    } else {
        r.summary
            .directions
            .iter()
            .map(|d| TcpFacts {
                direction: d.direction,
                retransmits: d.retransmits,
                rtt_us: d
                    .rtt
                    .map(|t| (f64::from(t.min_us), t.mean_us, f64::from(t.max_us))),
                max_cwnd_bytes: d.max_cwnd_bytes,
                limits: d
                    .limits
                    .map(|l| (l.busy_pct, l.rwnd_limited_pct, l.sndbuf_limited_pct)),
                window_limited: d.window_limited,
                ceiling_bps: d.window_ceiling.map(|c| c.bits_per_second),
            })
            .collect()
    };
    RunFacts {
        host: Some(r.host.clone()),
        client_ip: r.client_addr.map(|a| a.ip().to_string()),
        server_ip: r.server_addr.map(|a| a.ip().to_string()),
        server_software: r.server.as_ref().map(|s| s.software.clone()),
        writer: Some(format!("xbench {}", r.xbench_version)),
        warnings: r.warnings.clone(),
        tcp,
        unknown: Vec::new(),
        unreadable: None,
    }
}

fn of_iperf3(v: &Value) -> RunFacts {
    let start = &v["start"];
    let s = |v: &Value| v.as_str().map(str::to_owned);
    let conn = &start["connected"][0];
    RunFacts {
        host: s(&start["connecting_to"]["host"]),
        client_ip: s(&conn["local_host"]),
        server_ip: s(&conn["remote_host"]),
        server_software: None,
        writer: s(&start["version"]),
        warnings: Vec::new(),
        tcp: Vec::new(),
        unknown: Vec::new(),
        unreadable: None,
    }
}

/// What `raw` holds that `known` (the same document read as a [`TestReport`] and written
/// back) does not, as (path, value). A null is no value: an optional field left empty.
fn unknown_fields(raw: &Value, known: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    match (raw, known) {
        (Value::Object(r), Value::Object(k)) => {
            for (key, v) in r {
                if v.is_null() || out.len() >= MAX_UNKNOWN {
                    continue;
                }
                let p = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match k.get(key) {
                    Some(kv) => unknown_fields(v, kv, &p, out),
                    None => out.push((p, v.clone())),
                }
            }
        }
        (Value::Array(r), Value::Array(k)) => {
            let p = format!("{path}[]");
            for (rv, kv) in r.iter().zip(k) {
                unknown_fields(rv, kv, &p, out);
            }
        }
        _ => {}
    }
}

/// The unknown fields of several runs (a path's), merged: per field path, each distinct value
/// with how many times it was seen, in the order first met.
pub(crate) fn merge_unknown<'a>(
    facts: impl Iterator<Item = &'a RunFacts>,
) -> Vec<(String, Vec<(Value, usize)>)> {
    let mut order: Vec<String> = Vec::new();
    let mut by: BTreeMap<String, Vec<(Value, usize)>> = BTreeMap::new();
    for f in facts {
        for (path, v) in &f.unknown {
            let values = by.entry(path.clone()).or_insert_with(|| {
                order.push(path.clone());
                Vec::new()
            });
            match values.iter_mut().find(|(x, _)| x == v) {
                Some((_, n)) => *n += 1,
                None => values.push((v.clone(), 1)),
            }
        }
    }
    order
        .into_iter()
        .map(|p| {
            let v = by.remove(&p).unwrap_or_default();
            (p, v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A saved report with fields another branch added (at the top, inside a direction, and a
    /// whole new section) keeps every one of them, and nothing it knows.
    #[test]
    fn unknown_fields_are_kept_whatever_their_depth() {
        let raw = json!({
            "a": 1,
            "b": {"c": 2, "new_inner": {"x": [1, 2]}},
            "list": [{"k": 1, "mtu": 1500}, {"k": 2, "mtu": 9001}],
            "empty": null,
            "diagnosis": {"verdict": "receive window", "confidence": "high"}
        });
        let known = json!({"a": 1, "b": {"c": 2}, "list": [{"k": 1}, {"k": 2}]});
        let mut out = Vec::new();
        unknown_fields(&raw, &known, "", &mut out);
        let paths: Vec<&str> = out.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            ["b.new_inner", "diagnosis", "list[].mtu", "list[].mtu"],
            "{out:?}"
        );
        let facts = RunFacts {
            unknown: out,
            ..RunFacts::default()
        };
        let merged = merge_unknown([&facts, &facts].into_iter());
        let mtu = merged.iter().find(|(p, _)| p == "list[].mtu").unwrap();
        assert_eq!(mtu.1, [(json!(1500), 2), (json!(9001), 2)]);
    }
}
