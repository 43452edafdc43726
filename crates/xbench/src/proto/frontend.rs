//! Tells protocols apart by a connection's first bytes, so one server port can serve more than
//! one client kind.
//!
//! An xbench connection opens with `XBNC`. An iperf3 client opens with a 37-byte cookie of
//! characters from iperf3's base32 alphabet (`a-z`, `2-7`) and a NUL; the server reads the whole
//! cookie and speaks iperf3's protocol from there ([`super::iperf3`]).

use super::MAGIC;

/// Length of an iperf3 client's cookie, the first thing it sends.
pub const IPERF3_COOKIE_LEN: usize = 37;

/// Which protocol a connection speaks, judged from its first four bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frontend {
    /// Our own protocol.
    Xbench,
    /// An iperf3 client.
    Iperf3,
    /// Something else (a port scanner, an HTTP probe, random bytes).
    Unknown,
}

/// Classifies a connection by its first four bytes.
pub fn detect(first: &[u8; 4]) -> Frontend {
    if *first == MAGIC {
        Frontend::Xbench
    } else if first
        .iter()
        .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(b))
    {
        Frontend::Iperf3
    } else {
        Frontend::Unknown
    }
}

/// iperf3's reply to a connection that looked like iperf3 but is not: state `SERVER_ERROR` (-2), then
/// `i_errno = IENEWTEST` (100) and `errno = EPROTONOSUPPORT`, both big-endian. An iperf3 client
/// prints "unable to create a new test: Protocol not supported" instead of hanging.
pub fn iperf3_refusal() -> [u8; 9] {
    let mut out = [0u8; 9];
    out[0] = (-2i8) as u8;
    out[1..5].copy_from_slice(&100i32.to_be_bytes());
    out[5..9].copy_from_slice(&libc::EPROTONOSUPPORT.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_clients_apart() {
        assert_eq!(detect(b"XBNC"), Frontend::Xbench);
        assert_eq!(detect(b"k2zq"), Frontend::Iperf3);
        assert_eq!(detect(b"GET "), Frontend::Unknown);
        assert_eq!(detect(&[0xff, 0, 1, 2]), Frontend::Unknown);
    }
}
