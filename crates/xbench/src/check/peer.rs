//! Bounds on what a peer that is not xbench reports (an iperf3 server's results): each figure
//! is held to what our own counters and TCP allow, so a fake or broken peer's "10¹⁵ bytes
//! received" or negative CPU time is named and fails the test instead of being printed.
//!
//! An xbench server's figures are checked by [`super::overcounted`] and its tally; these are
//! for a peer whose counting we cannot see. Not for figures that are merely surprising.

use std::fmt;

use crate::units::ByteSize;

/// Most bytes one TCP connection can have taken from its sender that its receiver has not
/// read yet: a send buffer and a receive buffer (the kernel keeps each size in an `int`: under
/// 2 GiB each) and a window in flight (at most 2³⁰ bytes with window scaling, RFC 7323 §2.3).
pub const TCP_HELD_MAX: u64 = (2 << 30) + (2 << 30) + (1 << 30);

/// Most CPU one process can use, percent of one core: 4,096 cores at 100 %.
pub const CPU_PCT_MAX: f64 = 409_600.0;

/// A figure a peer reported that cannot be true, and the bound it broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Impossible(pub String);

impl fmt::Display for Impossible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A stream we sent on, as the peer's receiver counted it: at most every byte we handed to
/// our kernel (`handed`, exact, warm-up included). Not "at most what we handed after our
/// warm-up": the peer ends its warm-up by its own clock, on the bytes it has read by then, and
/// the bytes in our buffers and in flight at our boundary (up to [`TCP_HELD_MAX`]) are ours
/// to call warm-up and its to count (a starved iperf3 server counted 775 MiB after its warm-up
/// of the 774 MiB we handed after ours).
pub fn received(stream: u16, reported: u64, handed: u64) -> Result<(), Impossible> {
    if reported > handed {
        return Err(Impossible(format!(
            "stream {stream}: the server says it received {}, but this client sent only {} on it",
            bytes(reported),
            ByteSize(handed)
        )));
    }
    Ok(())
}

/// A stream we read, as the peer's sender counted it: at least what we read (`read`), unless
/// the peer's count starts at a warm-up boundary (`warm_up`) with bytes in flight, and at
/// most what we read plus what TCP can hold unread ([`TCP_HELD_MAX`]).
pub fn sent(stream: u16, reported: u64, read: u64, warm_up: bool) -> Result<(), Impossible> {
    let floor = if warm_up {
        read.saturating_sub(TCP_HELD_MAX)
    } else {
        read
    };
    if reported < floor {
        return Err(Impossible(format!(
            "stream {stream}: the server says it sent {}, but this client read {} of it",
            bytes(reported),
            ByteSize(read)
        )));
    }
    if reported > read.saturating_add(TCP_HELD_MAX) {
        return Err(Impossible(format!(
            "stream {stream}: the server says it sent {}, but this client read only {}: more \
             than one TCP connection can hold unread ({})",
            bytes(reported),
            ByteSize(read),
            ByteSize(TCP_HELD_MAX)
        )));
    }
    Ok(())
}

/// A CPU share in percent of one core: a finite number from 0 to [`CPU_PCT_MAX`].
pub fn cpu(what: &str, pct: f64) -> Result<(), Impossible> {
    if !(0.0..=CPU_PCT_MAX).contains(&pct) {
        return Err(Impossible(format!(
            "the server's {what} CPU is {}, which no machine can use",
            number(pct)
        )));
    }
    Ok(())
}

/// A span of seconds inside a test we watched for `elapsed` seconds: finite, from 0 to
/// `elapsed` and a second.
pub fn seconds(what: &str, s: f64, elapsed: f64) -> Result<(), Impossible> {
    if !(0.0..=elapsed + 1.0).contains(&s) {
        return Err(Impossible(format!(
            "the server's {what} is {} s, in a test that lasted {elapsed:.1} s",
            number(s)
        )));
    }
    Ok(())
}

/// A figure as reported, short: an impossible one can have 300 digits.
fn number(x: f64) -> String {
    if x.is_finite() && x.abs() < 1e9 {
        format!("{x}")
    } else {
        format!("{x:.3e}")
    }
}

/// Bytes as reported, with the exact count when it is absurd enough to matter.
fn bytes(n: u64) -> String {
    if n >= 1 << 40 {
        format!("{n} bytes ({})", ByteSize(n))
    } else {
        ByteSize(n).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_receiver_has_at_most_what_was_sent() {
        assert!(received(0, 1000, 1000).is_ok());
        let e = received(1, 1_000_000_000_000_000, 2_000_000).unwrap_err();
        assert!(
            e.0.starts_with("stream 1: the server says it received 1000000000000000 bytes"),
            "{e}"
        );
        assert!(received(0, u64::MAX, u64::MAX - 1).is_err());
    }

    #[test]
    fn a_peer_sender_sent_at_least_what_was_read_and_no_more_than_tcp_holds() {
        assert!(sent(0, 1000, 1000, false).is_ok());
        assert!(sent(0, 999, 1000, false).is_err());
        assert!(
            sent(0, 999, 1000, true).is_ok(),
            "in flight at the warm-up boundary"
        );
        assert!(sent(0, 1000 + TCP_HELD_MAX, 1000, false).is_ok());
        assert!(sent(0, 1001 + TCP_HELD_MAX, 1000, false).is_err());
        assert!(sent(0, u64::MAX, u64::MAX, false).is_ok(), "no overflow");
    }

    #[test]
    fn cpu_and_seconds_are_finite_and_in_range() {
        assert!(cpu("total", 12.5).is_ok());
        for bad in [-0.1, f64::NAN, f64::INFINITY, 1e308] {
            assert!(cpu("total", bad).is_err(), "{bad}");
        }
        let e = cpu("total", 1e308).unwrap_err().0;
        assert!(e.len() < 80, "no 300 digits: {e}");
        assert!(seconds("span", 10.0, 10.0).is_ok());
        assert!(seconds("span", 12.0, 10.0).is_err());
        assert!(seconds("span", -1.0, 10.0).is_err());
        assert!(seconds("span", f64::NAN, 10.0).is_err());
    }
}
