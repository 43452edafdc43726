//! The hop view's lines of the text summary (`--trace`): one row per hop as `mtr --report`
//! prints them — address, name, loss, probes, RTT min/p50/p90/max — with a hop that never
//! answered shown as `???`. Rendering only; the figures are the library's.

use std::fmt::Write;

use xbench::report::{Hop, TestReport, TraceProtocol, TraceReport};
use xbench::units::count;

/// The trace block, or nothing for a test without `--trace`.
pub(crate) fn text(r: &TestReport) -> String {
    r.trace.as_ref().map_or_else(String::new, block)
}

fn block(t: &TraceReport) -> String {
    let mut s = format!(
        "Hops to {} ({} probes from {}, one flow; {} sent over {:.1} s):\n",
        t.target,
        match t.protocol {
            TraceProtocol::Tcp => "TCP SYN",
            TraceProtocol::Udp => "UDP",
        },
        t.source,
        count(t.probes),
        t.seconds
    );
    let rows: Vec<[String; 9]> = t.hops.iter().map(hop_row).collect();
    let head = [
        "hop", "address", "name", "loss", "sent", "min ms", "p50 ms", "p90 ms", "max ms",
    ];
    table(&mut s, &head, &rows);
    match (t.routed_hops(), &t.error) {
        (_, Some(e)) => {
            let _ = writeln!(s, "  {e}");
        }
        (Some(n), None) => {
            let _ = writeln!(
                s,
                "  {} between the ends",
                match n {
                    0 => "no router".to_owned(),
                    1 => "1 router".to_owned(),
                    n => format!("{n} routers"),
                }
            );
        }
        (None, None) => s.push_str("  the server did not answer the probes\n"),
    }
    s
}

/// One hop's row: TTL, address (with the server and other addresses marked), name, loss,
/// probes sent and RTT min/p50/p90/max in ms.
fn hop_row(h: &Hop) -> [String; 9] {
    let ms = |us: f64| format!("{:.2}", us / 1000.0);
    let (min, p50, p90, max) = h.rtt.map_or_else(
        || ("-".into(), "-".into(), "-".into(), "-".into()),
        |r| (ms(r.min_us), ms(r.p50_us), ms(r.p90_us), ms(r.max_us)),
    );
    let mut address = h
        .address
        .map_or_else(|| "???".to_owned(), |a| a.to_string());
    if h.destination {
        address.push_str(" (server)");
    }
    if !h.other_addresses.is_empty() {
        let _ = write!(address, " +{} more", h.other_addresses.len());
    }
    [
        h.ttl.to_string(),
        address,
        h.name.clone().unwrap_or_else(|| "-".into()),
        format!("{:.1} %", h.loss_percent),
        count(h.sent),
        min,
        p50,
        p90,
        max,
    ]
}

/// The rows under `head`, aligned: address and name to the left, figures to the right.
fn table(s: &mut String, head: &[&str; 9], rows: &[[String; 9]]) {
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([head[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..head.len()).map(width).collect();
    let line = |cells: Vec<&str>| {
        let mut l = String::from(" ");
        for (i, c) in cells.iter().enumerate() {
            let pad = " ".repeat(widths[i].saturating_sub(c.chars().count()));
            // Address and name read left to right; figures line up on the right.
            if i == 1 || i == 2 {
                let _ = write!(l, " {c}{pad}");
            } else {
                let _ = write!(l, " {pad}{c}");
            }
        }
        l.trim_end().to_owned()
    };
    let _ = writeln!(s, "{}", line(head.to_vec()));
    for r in rows {
        let _ = writeln!(s, "{}", line(r.iter().map(String::as_str).collect()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xbench::report::{Hop, HopRtt};

    #[test]
    fn hops_in_order_with_the_silent_one_as_question_marks() {
        let hop = |ttl: u8, a: Option<[u8; 4]>, rtt: Option<f64>, dest: bool| Hop {
            ttl,
            address: a.map(Into::into),
            other_addresses: vec![],
            name: None,
            destination: dest,
            sent: 10,
            answered: if a.is_some() { 10 } else { 0 },
            loss_percent: if a.is_some() { 0.0 } else { 100.0 },
            rtt: rtt.and_then(|v| HopRtt::of(&[v])),
        };
        let t = TraceReport {
            protocol: TraceProtocol::Tcp,
            source: "198.18.0.1:40000".parse().unwrap(),
            target: "198.18.3.2:5201".parse().unwrap(),
            probes: 30,
            seconds: 10.0,
            destination_ttl: Some(3),
            hops: vec![
                hop(1, Some([198, 18, 0, 2]), Some(80.0), false),
                hop(2, None, None, false),
                hop(3, Some([198, 18, 3, 2]), Some(20_500.0), true),
            ],
            error: None,
        };
        let b = block(&t);
        let lines: Vec<&str> = b.lines().collect();
        assert!(
            lines[0].starts_with("Hops to 198.18.3.2:5201 (TCP SYN probes from 198.18.0.1:40000")
        );
        assert!(
            lines[2].contains("198.18.0.2") && lines[2].contains("0.08"),
            "{b}"
        );
        assert!(
            lines[3].contains("???") && lines[3].contains("100.0 %"),
            "{b}"
        );
        assert!(
            lines[4].contains("198.18.3.2 (server)") && lines[4].contains("20.50"),
            "{b}"
        );
        assert_eq!(lines[5], "  2 routers between the ends");
    }
}
