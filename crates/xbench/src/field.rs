//! The settings a refusal names ([`Field`]), each with both of its names: the flag that
//! `xbench client` or `xbench server` takes, which error messages quote, and its long name,
//! which is also a suite file's key (`parallel`, `rr-size`).
//!
//! One table, so that a refusal the library writes reads right wherever the value came from:
//! the command line quotes `-P`, a deployment's suite names `parallel`, and neither keeps a
//! list of the other's names to translate.

use std::fmt;

/// A setting of a test or a server, as a [`SpecError`](crate::config::SpecError) names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// `-t`, `time`: the test's length.
    Time,
    /// `-n`, `bytes`: a byte count to send instead of a time.
    Bytes,
    /// `-O`, `omit`: the start left out.
    Omit,
    /// `-i`, `interval`: the report interval.
    Interval,
    /// `-w`, `window`: the socket buffers.
    Window,
    /// `-M`, `set-mss`: the TCP maximum segment size.
    Mss,
    /// `-C`, `congestion`: the congestion control algorithm.
    Congestion,
    /// `-P`, `parallel`: streams.
    Streams,
    /// `-b`, `bitrate`: the send cap, or UDP's offered rate.
    Bitrate,
    /// `-l`, `length`: a block or a datagram.
    Length,
    /// `-r`, `rr-size`: request and response sizes.
    RrSize,
    /// `--flows`: request/response flows.
    Flows,
    /// `--burst`: transactions in flight per flow.
    Burst,
    /// `--rate`: transactions per second per flow.
    Rate,
    /// `--crr`: a connection per transaction.
    Crr,
    /// `--rr-timeout`: when a UDP transaction counts as lost.
    RrTimeout,
    /// `--under-load`: latency probes beside the load.
    UnderLoad,
    /// `--probe-rate`: the latency probes' rate.
    ProbeRate,
    /// `--probe-timeout`: when a latency probe counts as lost.
    ProbeTimeout,
    /// `--idle`: the idle phases around the load.
    Idle,
    /// `--connections-only`: flows opened and held, no traffic.
    ConnectionsOnly,
    /// `--iperf3`: an iperf3 server at the other end.
    Iperf3,
    /// `--max-streams`: a server's streams per test.
    MaxStreams,
    /// `--max-flows`: a server's flows per test.
    MaxFlows,
    /// `--max-tests`: a server's tests at once.
    MaxTests,
    /// `--max-tests-per-client`: a server's tests at once from one client address.
    MaxTestsPerClient,
    /// `--max-block-len`: the largest block a server accepts.
    MaxBlockLen,
    /// `--max-duration`: the longest test a server runs.
    MaxDuration,
    /// `--client-share`: one client's share of a server's budget.
    ClientShare,
    /// `--max-threads`: a server's stream threads.
    MaxThreads,
    /// `--max-handshakes`: a server's connections not yet part of a test.
    MaxHandshakes,
}

impl Field {
    /// Every field, for tests that check each against a command line.
    pub const ALL: &'static [Field] = &[
        Field::Time,
        Field::Bytes,
        Field::Omit,
        Field::Interval,
        Field::Window,
        Field::Mss,
        Field::Congestion,
        Field::Streams,
        Field::Bitrate,
        Field::Length,
        Field::RrSize,
        Field::Flows,
        Field::Burst,
        Field::Rate,
        Field::Crr,
        Field::RrTimeout,
        Field::UnderLoad,
        Field::ProbeRate,
        Field::ProbeTimeout,
        Field::Idle,
        Field::ConnectionsOnly,
        Field::Iperf3,
        Field::MaxStreams,
        Field::MaxFlows,
        Field::MaxTests,
        Field::MaxTestsPerClient,
        Field::MaxBlockLen,
        Field::MaxDuration,
        Field::ClientShare,
        Field::MaxThreads,
        Field::MaxHandshakes,
    ];

    /// The flag, as the command line takes it and error messages quote it: `-P`, `--flows`.
    pub fn flag(self) -> &'static str {
        self.names().0
    }

    /// The long name without dashes, as `xbench client --parallel` spells it and as a suite
    /// file's key: `parallel`, `rr-size`.
    pub fn long(self) -> &'static str {
        self.names().1
    }

    fn names(self) -> (&'static str, &'static str) {
        match self {
            Field::Time => ("-t", "time"),
            Field::Bytes => ("-n", "bytes"),
            Field::Omit => ("-O", "omit"),
            Field::Interval => ("-i", "interval"),
            Field::Window => ("-w", "window"),
            Field::Mss => ("-M", "set-mss"),
            Field::Congestion => ("-C", "congestion"),
            Field::Streams => ("-P", "parallel"),
            Field::Bitrate => ("-b", "bitrate"),
            Field::Length => ("-l", "length"),
            Field::RrSize => ("-r", "rr-size"),
            Field::Flows => ("--flows", "flows"),
            Field::Burst => ("--burst", "burst"),
            Field::Rate => ("--rate", "rate"),
            Field::Crr => ("--crr", "crr"),
            Field::RrTimeout => ("--rr-timeout", "rr-timeout"),
            Field::UnderLoad => ("--under-load", "under-load"),
            Field::ProbeRate => ("--probe-rate", "probe-rate"),
            Field::ProbeTimeout => ("--probe-timeout", "probe-timeout"),
            Field::Idle => ("--idle", "idle"),
            Field::ConnectionsOnly => ("--connections-only", "connections-only"),
            Field::Iperf3 => ("--iperf3", "iperf3"),
            Field::MaxStreams => ("--max-streams", "max-streams"),
            Field::MaxFlows => ("--max-flows", "max-flows"),
            Field::MaxTests => ("--max-tests", "max-tests"),
            Field::MaxTestsPerClient => ("--max-tests-per-client", "max-tests-per-client"),
            Field::MaxBlockLen => ("--max-block-len", "max-block-len"),
            Field::MaxDuration => ("--max-duration", "max-duration"),
            Field::ClientShare => ("--client-share", "client-share"),
            Field::MaxThreads => ("--max-threads", "max-threads"),
            Field::MaxHandshakes => ("--max-handshakes", "max-handshakes"),
        }
    }
}

/// The flag: what a refusal on the command line quotes.
impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.flag())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long name is its long flag without the dashes, and no two fields share a name.
    #[test]
    fn names_are_the_flags_and_distinct() {
        let all = Field::ALL;
        let mut flags = std::collections::BTreeSet::new();
        let mut longs = std::collections::BTreeSet::new();
        for &f in all {
            assert!(flags.insert(f.flag()), "{f:?}");
            assert!(longs.insert(f.long()), "{f:?}");
            match f.flag().strip_prefix("--") {
                Some(long) => assert_eq!(long, f.long()),
                None => assert_eq!(f.flag().len(), 2, "{f:?}"),
            }
            assert_eq!(f.to_string(), f.flag());
        }
    }
}
