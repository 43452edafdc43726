//! iperf3's control protocol (3.x, as iperf3 3.12 speaks it), byte for byte: the cookie, the
//! one-byte states, the length-prefixed JSON of the parameter and results exchanges, and the
//! error encoding. Taken from iperf3's `iperf_api.c` (`send_parameters`, `get_parameters`,
//! `send_results`, `get_results`, `JSON_write`, `JSON_read`), `iperf_server_api.c` and
//! `iperf_api.h`.
//!
//! This module is the wire format only: it opens no sockets and runs no tests; the server's
//! session is `server::iperf3`, the client's `client::iperf3`.

use std::io;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Length of the cookie that opens every iperf3 connection, control and data: 36 characters
/// of iperf3's base32 alphabet and a NUL.
pub const COOKIE_LEN: usize = 37;

/// Longest parameter or results JSON accepted. iperf3 allocates whatever the 4-byte length
/// says; a results document of 128 streams is about 20 KB, so 1 MiB is generous and a hostile
/// "2 GB" length costs nothing.
pub const MAX_JSON_LEN: u32 = 1 << 20;

/// iperf3's test states, sent as one signed byte on the control connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum State {
    /// `TEST_START` (1): streams are connected, the test is about to start.
    TestStart,
    /// `TEST_RUNNING` (2): data flows.
    TestRunning,
    /// `TEST_END` (4): the client's end of the test.
    TestEnd,
    /// `PARAM_EXCHANGE` (9): the client is to send its parameters.
    ParamExchange,
    /// `CREATE_STREAMS` (10): the client is to open its data connections.
    CreateStreams,
    /// `SERVER_TERMINATE` (11): the server was interrupted.
    ServerTerminate,
    /// `CLIENT_TERMINATE` (12): the client was interrupted.
    ClientTerminate,
    /// `EXCHANGE_RESULTS` (13): results JSON follows, the client's first.
    ExchangeResults,
    /// `DISPLAY_RESULTS` (14): results are exchanged.
    DisplayResults,
    /// `IPERF_DONE` (16): the client is done.
    IperfDone,
    /// `ACCESS_DENIED` (-1): the server will not run a test for this client.
    AccessDenied,
    /// `SERVER_ERROR` (-2): followed by `i_errno` and `errno`, 4 bytes each, big-endian.
    ServerError,
}

impl State {
    /// The byte on the wire.
    pub fn byte(self) -> u8 {
        let v: i8 = match self {
            State::TestStart => 1,
            State::TestRunning => 2,
            State::TestEnd => 4,
            State::ParamExchange => 9,
            State::CreateStreams => 10,
            State::ServerTerminate => 11,
            State::ClientTerminate => 12,
            State::ExchangeResults => 13,
            State::DisplayResults => 14,
            State::IperfDone => 16,
            State::AccessDenied => -1,
            State::ServerError => -2,
        };
        v as u8
    }

    /// The state a byte names, if any.
    pub fn from_byte(b: u8) -> Option<State> {
        Some(match b as i8 {
            1 => State::TestStart,
            2 => State::TestRunning,
            4 => State::TestEnd,
            9 => State::ParamExchange,
            10 => State::CreateStreams,
            11 => State::ServerTerminate,
            12 => State::ClientTerminate,
            13 => State::ExchangeResults,
            14 => State::DisplayResults,
            16 => State::IperfDone,
            -1 => State::AccessDenied,
            -2 => State::ServerError,
            _ => return None,
        })
    }
}

/// iperf3's `i_errno` values that this implementation sends (`iperf_api.h`, 3.x numbering).
pub mod ierr {
    /// "unable to create a new test".
    pub const NEW_TEST: i32 = 100;
    /// "received an unknown control message".
    pub const MESSAGE: i32 = 110;
    /// "unable to receive parameters from client".
    pub const RECV_PARAMS: i32 = 114;
    /// "unable to receive results from client".
    pub const RECV_RESULTS: i32 = 117;
    /// `IESTREAMACCEPT`: "unable to accept stream connection".
    pub const ACCEPT_STREAM: i32 = 204;
}

/// What iperf3's `SERVER_ERROR` state carries: the state byte, `i_errno` and `errno`. An
/// iperf3 client prints iperf3's text for `i_errno` followed by `strerror(errno)`.
pub fn server_error(i_errno: i32, errno: i32) -> [u8; 9] {
    let mut out = [0u8; 9];
    out[0] = State::ServerError.byte();
    out[1..5].copy_from_slice(&i_errno.to_be_bytes());
    out[5..9].copy_from_slice(&errno.to_be_bytes());
    out
}

/// Whether 37 bytes are an iperf3 cookie: base32 characters (`a-z`, `2-7`) and a NUL.
pub fn is_cookie(b: &[u8; COOKIE_LEN]) -> bool {
    b[COOKIE_LEN - 1] == 0
        && b[..COOKIE_LEN - 1]
            .iter()
            .all(|c| c.is_ascii_lowercase() || (b'2'..=b'7').contains(c))
}

/// A fresh random cookie, as an iperf3 client makes one (`make_cookie`).
pub fn new_cookie() -> io::Result<[u8; COOKIE_LEN]> {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut rnd = [0u8; COOKIE_LEN - 1];
    getrandom::fill(&mut rnd).map_err(io::Error::from)?;
    let mut out = [0u8; COOKIE_LEN];
    for (o, r) in out.iter_mut().zip(rnd) {
        *o = ALPHABET[usize::from(r % 32)];
    }
    Ok(out)
}

/// The client's test parameters (`send_parameters`). Every field iperf3 3.12 may send is
/// listed, so a server can refuse what it does not do instead of silently ignoring it.
/// Numbers are `f64`-tolerant integers: cJSON writes every number as a double.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Params {
    /// Present (true) for TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<bool>,
    /// Present (true) for UDP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<bool>,
    /// Present (true) for SCTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sctp: Option<bool>,
    /// `-O`, seconds.
    #[serde(default)]
    pub omit: u64,
    /// `-A`'s server half.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_affinity: Option<i64>,
    /// `-t`, seconds; 0 with `-n` or `-k`.
    #[serde(default)]
    pub time: u64,
    /// `-n`, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num: Option<u64>,
    /// `-k`, blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blockcount: Option<u64>,
    /// `-M`, bytes.
    #[serde(default, rename = "MSS", skip_serializing_if = "Option::is_none")]
    pub mss: Option<u32>,
    /// `-N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodelay: Option<bool>,
    /// `-P`.
    #[serde(default = "one")]
    pub parallel: u64,
    /// `-R`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<bool>,
    /// `--bidir`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bidirectional: Option<bool>,
    /// `-w`, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    /// `-l`, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<u64>,
    /// `-b`, bits per second per stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<u64>,
    /// `--fq-rate`, bits per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fqrate: Option<u64>,
    /// `--pacing-timer`, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing_timer: Option<u64>,
    /// The burst of `-b RATE/BURST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// `-S`.
    #[serde(default, rename = "TOS", skip_serializing_if = "Option::is_none")]
    pub tos: Option<u64>,
    /// `-L`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flowlabel: Option<u64>,
    /// `-T`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `--extra-data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_data: Option<String>,
    /// `-C`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// The algorithm the client's sockets use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_used: Option<String>,
    /// `--get-server-output` (1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub get_server_output: Option<u64>,
    /// `--udp-counters-64bit` (1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_counters_64bit: Option<u64>,
    /// `--repeating-payload` (1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeating_payload: Option<u64>,
    /// `--username` (RSA-encrypted credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authtoken: Option<String>,
    /// The client's iperf3 version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
}

fn one() -> u64 {
    1
}

/// One side's results (`send_results`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    /// Process CPU over the test, percent of one core.
    pub cpu_util_total: f64,
    /// User part of [`Self::cpu_util_total`].
    pub cpu_util_user: f64,
    /// System part of [`Self::cpu_util_total`].
    pub cpu_util_system: f64,
    /// 1 when this side sent and counts retransmissions, 0 when it cannot, -1 when it only
    /// received.
    #[serde(deserialize_with = "lenient_i64")]
    pub sender_has_retransmits: i64,
    /// The congestion control this side used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_used: Option<String>,
    /// Per stream, by iperf3's stream id.
    pub streams: Vec<StreamResult>,
    /// The server's own output, as text, when the client asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output_text: Option<String>,
    /// The server's own output, as JSON, when the client asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output_json: Option<serde_json::Value>,
}

/// One stream's results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StreamResult {
    /// iperf3's stream id: 1, 3, 4, 5… in connection order (`iperf_add_stream`).
    #[serde(deserialize_with = "lenient_u64")]
    pub id: u64,
    /// Bytes sent (a sender, after `-O`) or received.
    #[serde(deserialize_with = "lenient_u64")]
    pub bytes: u64,
    /// A sender's retransmitted segments; -1 for a receiver (iperf3 3.12 clients write it as
    /// 2⁶⁴−1).
    #[serde(deserialize_with = "lenient_i64")]
    pub retransmits: i64,
    /// UDP receiver's jitter, seconds.
    pub jitter: f64,
    /// UDP receiver's lost datagrams.
    #[serde(deserialize_with = "lenient_i64")]
    pub errors: i64,
    /// UDP receiver's lost datagrams within `-O` (included in [`Self::errors`]).
    #[serde(default, deserialize_with = "lenient_i64")]
    pub omitted_errors: i64,
    /// UDP datagrams: a sender's count, a receiver's highest sequence number.
    #[serde(deserialize_with = "lenient_i64")]
    pub packets: i64,
    /// UDP datagrams within `-O` (included in [`Self::packets`]).
    #[serde(default, deserialize_with = "lenient_i64")]
    pub omitted_packets: i64,
    /// Seconds from the test start; always 0.
    #[serde(default)]
    pub start_time: f64,
    /// Seconds from the test start to this side's end of the stream.
    #[serde(default)]
    pub end_time: f64,
}

/// An integer as cJSON writes one: maybe a double, maybe an unsigned wrap of -1.
fn lenient_i64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    Ok(n.as_i64()
        .or_else(|| n.as_u64().map(|u| u as i64))
        .or_else(|| n.as_f64().map(|f| f as i64))
        .unwrap_or(0))
}

/// A count as cJSON writes one: maybe a double (`1e+17`).
fn lenient_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    Ok(n.as_u64()
        .or_else(|| n.as_f64().map(|f| f as u64))
        .unwrap_or(0))
}

/// The stream id iperf3 gives the `n`th stream (0-based) of a test: 1, 3, 4, 5…
/// (`iperf_add_stream` counts from 2 for every stream after the first).
pub fn stream_id(n: usize) -> u64 {
    if n == 0 { 1 } else { n as u64 + 2 }
}

/// Why a JSON exchange failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// The connection failed or closed.
    #[error("connection: {0}")]
    Io(#[from] io::Error),
    /// Nothing arrived in time.
    #[error("no JSON within {0:?}")]
    Timeout(Duration),
    /// The announced length is beyond [`MAX_JSON_LEN`].
    #[error("JSON length {0} is beyond the {MAX_JSON_LEN}-byte limit")]
    TooLong(u32),
    /// The bytes are not the JSON expected.
    #[error("bad JSON: {0}")]
    Parse(#[from] serde_json::Error),
}

/// Reads one length-prefixed JSON document (`JSON_read`) within `limit`, refusing a length
/// beyond [`MAX_JSON_LEN`] before allocating anything.
pub async fn read_json<R, T>(r: &mut R, limit: Duration) -> Result<T, JsonError>
where
    R: AsyncRead + Unpin,
    T: for<'de> Deserialize<'de>,
{
    let body = async {
        let len = r.read_u32().await?;
        if len > MAX_JSON_LEN {
            return Err(JsonError::TooLong(len));
        }
        let mut buf = vec![0u8; len as usize];
        r.read_exact(&mut buf).await?;
        Ok(serde_json::from_slice(&buf)?)
    };
    tokio::time::timeout(limit, body)
        .await
        .map_err(|_| JsonError::Timeout(limit))?
}

/// Writes one length-prefixed JSON document (`JSON_write`).
pub async fn write_json<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    value: &T,
) -> io::Result<()> {
    let body = serde_json::to_vec(value).map_err(io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(io::Error::other)?;
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&body);
    w.write_all(&out).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_as_signed_bytes() {
        for s in [
            State::TestStart,
            State::TestRunning,
            State::TestEnd,
            State::ParamExchange,
            State::CreateStreams,
            State::ServerTerminate,
            State::ClientTerminate,
            State::ExchangeResults,
            State::DisplayResults,
            State::IperfDone,
            State::AccessDenied,
            State::ServerError,
        ] {
            assert_eq!(State::from_byte(s.byte()), Some(s));
        }
        assert_eq!(State::AccessDenied.byte(), 0xff);
        assert_eq!(State::ServerError.byte(), 0xfe);
        assert_eq!(State::from_byte(3), None);
    }

    #[test]
    fn stream_ids_skip_two_as_iperf3s_do() {
        assert_eq!((0..4).map(stream_id).collect::<Vec<_>>(), vec![1, 3, 4, 5]);
    }

    #[test]
    fn cookies_are_base32_and_nul() {
        let c = new_cookie().unwrap();
        assert!(is_cookie(&c));
        let mut bad = c;
        bad[3] = b'A';
        assert!(!is_cookie(&bad));
        let mut unterminated = c;
        unterminated[36] = b'a';
        assert!(!is_cookie(&unterminated));
    }

    #[test]
    fn iperf3_312_parameters_parse() {
        // What iperf3 3.12 sends for `-c h -P 4 -R -t 2 -l 128K -b 100M -N -C cubic`.
        let j = br#"{"tcp":true,"omit":0,"time":2,"parallel":4,"reverse":true,"len":131072,"bandwidth":100000000,"pacing_timer":1000,"nodelay":true,"congestion":"cubic","client_version":"3.12"}"#;
        let p: Params = serde_json::from_slice(j).unwrap();
        assert_eq!(p.parallel, 4);
        assert_eq!(p.reverse, Some(true));
        assert_eq!(p.len, Some(131_072));
        assert_eq!(p.bandwidth, Some(100_000_000));
        assert_eq!(p.congestion.as_deref(), Some("cubic"));
    }

    #[tokio::test]
    async fn a_huge_length_is_refused_before_allocating() {
        let mut input: &[u8] = &0x8000_0000u32.to_be_bytes();
        let r: Result<Params, _> = read_json(&mut input, Duration::from_secs(1)).await;
        assert!(matches!(r, Err(JsonError::TooLong(0x8000_0000))), "{r:?}");
    }

    #[tokio::test]
    async fn json_round_trips_with_its_length() {
        let mut buf = Vec::new();
        let p = Params {
            tcp: Some(true),
            parallel: 2,
            ..Params::default()
        };
        write_json(&mut buf, &p).await.unwrap();
        assert_eq!(
            u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize,
            buf.len() - 4
        );
        let back: Params = read_json(&mut &buf[..], Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(back.parallel, 2);
    }
}
