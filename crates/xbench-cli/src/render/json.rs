//! `--json` (one document at the end) and `--json-stream` (one event per line as it happens).
//!
//! Stream events: `{"event":"start",…}`, `{"event":"interval","interval":{…}}` (or
//! `rr_interval` for request/response tests, `udp_interval` for UDP tests,
//! `under_load_interval` for `--under-load`; after it, `interface` with what the client's
//! network interface counted), `{"event":"warning",…}` and
//! a final `{"event":"end","report":{…}}` whose report is the `--json` document.

use serde::Serialize;
use xbench::report::{
    InterfaceInterval, Interval, PeerInfo, RrInterval, StreamInfo, TestReport, UdpInterval,
};

/// One line of `--json-stream`.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum Event<'a> {
    Start {
        schema_version: u32,
        server: &'a PeerInfo,
        streams: &'a [StreamInfo],
    },
    Interval {
        interval: &'a Interval,
    },
    RrInterval {
        interval: &'a RrInterval,
    },
    UdpInterval {
        interval: &'a UdpInterval,
    },
    /// A row of `--under-load`'s timeline.
    UnderLoadInterval {
        interval: &'a xbench::under_load::TimelineRow,
    },
    /// What the client's interface counted in an interval (issue 33).
    Interface {
        interval: &'a InterfaceInterval,
    },
    Warning {
        message: &'a str,
    },
    End {
        report: &'a TestReport,
    },
}

pub(crate) fn event_line(e: &Event<'_>) -> String {
    // Serializing plain data structures cannot fail.
    let mut s = serde_json::to_string(e)
        .unwrap_or_else(|e| format!("{{\"event\":\"error\",\"message\":\"{e}\"}}"));
    s.push('\n');
    s
}

pub(crate) fn document(r: &TestReport) -> String {
    let mut s =
        serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    s.push('\n');
    s
}
