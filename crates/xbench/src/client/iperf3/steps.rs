//! The iperf3 control connection's steps that the TCP ([`super::tcp`]) and UDP
//! ([`super::udp`]) tests both take: waiting for a state (and reading the server's error when
//! it sends one instead), ending a test early, and how the peer is named in the report.
//!
//! A leaf of its own so that the two tests depend on it and not on each other.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::client::config::ClientConfig;
use crate::error::Error;
use crate::proto::ErrorCode;
use crate::proto::iperf3::State;
use crate::report::PeerInfo;

/// How long an iperf3 server may take to answer each step before the test.
pub(super) const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// What the report names as the server.
pub(super) fn iperf3_peer() -> PeerInfo {
    PeerInfo {
        software: "iperf3".into(),
        protocol: 3,
    }
}

/// The words for a control connection that spoke (or closed) before the test's end.
pub(super) async fn mid_test_end(
    ctrl: &mut TcpStream,
    addr: &str,
    read: std::io::Result<usize>,
    byte: u8,
) -> String {
    match (read, State::from_byte(byte)) {
        (Ok(0) | Err(_), _) => format!("{addr} closed the control connection mid-test"),
        (Ok(_), Some(State::ServerTerminate)) => {
            format!("the iperf3 server at {addr} was stopped mid-test")
        }
        (Ok(_), Some(State::ServerError)) => server_error(ctrl, addr).await.to_string(),
        (Ok(_), _) => format!("the iperf3 server at {addr} sent an unexpected state ({byte})"),
    }
}

/// Reads the next state, which must be `want`; iperf3's refusals become errors in words.
pub(super) async fn expect_state(
    ctrl: &mut TcpStream,
    addr: &str,
    want: State,
    limit: Duration,
) -> Result<(), Error> {
    let mut b = [0u8; 1];
    match tokio::time::timeout(limit, ctrl.read_exact(&mut b)).await {
        Err(_) => {
            return Err(Error::io(
                format!("waiting for the iperf3 server at {addr}"),
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer in {limit:?}"),
                ),
            ));
        }
        Ok(Err(e)) => {
            return Err(Error::io(
                format!("reading from the iperf3 server at {addr}"),
                e,
            ));
        }
        Ok(Ok(_)) => {}
    }
    match State::from_byte(b[0]) {
        Some(s) if s == want => Ok(()),
        Some(State::AccessDenied) => Err(Error::Refused {
            code: ErrorCode::LimitExceeded,
            message: format!(
                "the iperf3 server at {addr} is busy running another test (iperf3 serves one \
                 at a time); try again later"
            ),
        }),
        Some(State::ServerError) => Err(server_error(ctrl, addr).await),
        Some(State::ServerTerminate) => Err(Error::Refused {
            code: ErrorCode::ShuttingDown,
            message: format!("the iperf3 server at {addr} was stopped"),
        }),
        _ => Err(Error::io(
            format!("talking to the iperf3 server at {addr}"),
            std::io::Error::other(format!("expected state {want:?}, got byte {}", b[0] as i8)),
        )),
    }
}

/// Reads the `i_errno` and `errno` after `SERVER_ERROR`.
async fn server_error(ctrl: &mut TcpStream, addr: &str) -> Error {
    let mut codes = [0u8; 8];
    let detail = match tokio::time::timeout(STEP_TIMEOUT, ctrl.read_exact(&mut codes)).await {
        Ok(Ok(_)) => {
            let i_errno = i32::from_be_bytes([codes[0], codes[1], codes[2], codes[3]]);
            let errno = i32::from_be_bytes([codes[4], codes[5], codes[6], codes[7]]);
            format!(
                "iperf3 error {i_errno} ({}), {}",
                iperf3_error_text(i_errno),
                std::io::Error::from_raw_os_error(errno)
            )
        }
        _ => "no details".into(),
    };
    Error::Refused {
        code: ErrorCode::ServerError,
        message: format!("the iperf3 server at {addr} reported an error: {detail}"),
    }
}

/// iperf3's words for the `i_errno` values a server sends (`iperf_error.c`).
fn iperf3_error_text(i_errno: i32) -> &'static str {
    match i_errno {
        100 => "unable to create a new test",
        110 => "received an unknown control message",
        114 => "unable to receive parameters from client",
        117 => "unable to receive results",
        121 => "the server is busy running a test",
        204 => "unable to accept stream connection",
        _ => "see iperf_api.h",
    }
}

pub(super) fn shown(config: &ClientConfig) -> String {
    format!("{}:{}", config.host, config.port)
}
