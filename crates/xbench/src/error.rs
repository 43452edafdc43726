//! The library's error type. Every message names what failed and, where there is one, what the
//! user can do about it; the CLI prints them as they are.

use std::io;
use std::time::Duration;

use crate::config::SpecError;
use crate::proto::{ErrorCode, ProtoError};

/// Everything that can stop a test.
///
/// Each message carries its cause in its own text, so no variant exposes a `source()`: a
/// caller printing the error chain would otherwise repeat it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The test description is out of bounds.
    #[error("invalid test: {0}")]
    Spec(SpecError),
    /// Name resolution failed.
    #[error(
        "cannot resolve `{host}` (port {port}): {cause} — check the name, or give an IP address"
    )]
    Resolve {
        /// The host as given.
        host: String,
        /// The port we were going to connect to.
        port: u16,
        /// The resolver's error.
        cause: io::Error,
    },
    /// The host resolved, but to no address of the wanted family.
    #[error("`{host}` has no {family} address")]
    NoAddress {
        /// The host as given.
        host: String,
        /// "IPv4" or "IPv6".
        family: &'static str,
    },
    /// The control connection could not be opened.
    #[error("cannot connect to {addr}: {cause}{hint}")]
    Connect {
        /// `host:port`.
        addr: String,
        /// The socket error.
        cause: io::Error,
        /// What to check.
        hint: String,
    },
    /// The peer answered, but not as an xbench server does.
    #[error("{addr} did not answer as an xbench server {}{hint}", waited_words(*silent, *waited))]
    NotXbench {
        /// `host:port`.
        addr: String,
        /// How long we waited for its preamble: all our patience when it stayed silent, less
        /// when it closed or answered otherwise.
        waited: Duration,
        /// What it might be instead.
        hint: &'static str,
        /// It said nothing at all (as an iperf3 server does).
        silent: bool,
    },
    /// Client and server speak different protocol versions.
    #[error(
        "the server at {addr} speaks xbench protocol version {server}, this client speaks version \
         {client}; run the same xbench release on both ends"
    )]
    VersionMismatch {
        /// `host:port`.
        addr: String,
        /// Our version.
        client: u16,
        /// Theirs.
        server: u16,
    },
    /// Authentication with the pre-shared key failed.
    #[error("authentication with {addr} failed: {reason}")]
    Auth {
        /// `host:port`.
        addr: String,
        /// What went wrong, and what to do.
        reason: String,
    },
    /// The server attached, as one of this test's streams or flows, a connection this client
    /// did not open: someone who read the test's cookie on the path got there first.
    #[error(
        "{addr} attached a connection that is not this client's as stream {id} of the test — \
         someone on the path read the test's cookie and connected first; no figures of this \
         test could be trusted. Authenticate the data connections with --psk-file on both ends"
    )]
    ForeignConnection {
        /// The server, as the user gave it.
        addr: String,
        /// The stream or flow.
        id: u16,
    },
    /// The server refused or aborted the test.
    #[error("the server refused the test: {message}")]
    Refused {
        /// Category.
        code: ErrorCode,
        /// The server's words.
        message: String,
    },
    /// More flows than the local addresses' ephemeral ports hold towards one server port;
    /// refused before the first connection.
    #[error("{0}")]
    PortSpace(#[from] crate::client::flow_plan::PortSpace),
    /// A `-B` list this test cannot use: an address twice, two families, or a test whose
    /// data cannot come from several addresses; refused before the first connection.
    #[error("{0}")]
    BindList(#[from] crate::client::flow_plan::BindList),
    /// The server refused a request/response test for asking more flows than its limit.
    #[error(
        "the server refused the test: {message}; --allow-partial-flows runs the {max} flows \
         it takes instead"
    )]
    FlowLimit {
        /// The server's `--max-flows`.
        max: u32,
        /// The server's words.
        message: String,
    },
    /// The control connection broke or carried garbage.
    #[error("control connection to {addr}: {cause}")]
    Protocol {
        /// `host:port`.
        addr: String,
        /// What went wrong.
        cause: ProtoError,
    },
    /// The peer sent a message that makes no sense at this point.
    #[error("unexpected `{got}` message from {addr} while {state}")]
    Unexpected {
        /// `host:port`.
        addr: String,
        /// Message type received.
        got: String,
        /// What we were doing.
        state: &'static str,
    },
    /// Several data connections failed to open; how many, and how.
    #[error(
        "only {} of {} data connections to {addr} opened: {} refused or reset, {} timed out, \
         {} failed otherwise (first error: {cause}){}",
        setup.connected, setup.requested, setup.refused, setup.timed_out, setup.failed,
        data_hint(cause)
    )]
    DataSetup {
        /// `host:port`.
        addr: String,
        /// The counts.
        setup: crate::report::ConnectionSetup,
        /// The first socket error.
        cause: io::Error,
    },
    /// A data connection failed to open.
    #[error(
        "cannot open data connection {stream} to {addr}: {cause}{}",
        data_hint(cause)
    )]
    DataConnect {
        /// Stream id.
        stream: u16,
        /// `host:port`.
        addr: String,
        /// The socket error.
        cause: io::Error,
    },
    /// A socket option was refused by the kernel.
    #[error("cannot set {option} to {value}: {cause}{hint}")]
    SocketOption {
        /// The option, e.g. `TCP_CONGESTION`.
        option: &'static str,
        /// The value asked for.
        value: String,
        /// Where to look.
        hint: &'static str,
        /// The kernel's error.
        cause: io::Error,
    },
    /// The caller's cancel future fired (Ctrl-C) before data flowed: nothing was measured.
    #[error("interrupted while {during}; nothing was measured")]
    Interrupted {
        /// The setup step that was cut short.
        during: &'static str,
    },
    /// The server could not listen on any address it tried.
    #[error("cannot listen on {tried}{hint}")]
    Listen {
        /// Each address tried, in order, and why it failed.
        tried: String,
        /// What to check.
        hint: &'static str,
    },
    /// Any other I/O failure, with what we were doing.
    #[error("{context}: {cause}")]
    Io {
        /// What we were doing.
        context: String,
        /// The error.
        cause: io::Error,
    },
}

impl From<SpecError> for Error {
    fn from(e: SpecError) -> Self {
        Error::Spec(e)
    }
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, cause: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            cause,
        }
    }
}

/// The hint for a failed connect, by cause.
pub(crate) fn connect_hint(e: &io::Error, port: u16) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => {
            format!(" — is `xbench server` running there? is port {port} open?")
        }
        io::ErrorKind::TimedOut => format!(
            " — no answer: is the host up, and does a firewall or security group allow TCP port {port}?"
        ),
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
            " — no route to the host: check the address and the routes".to_owned()
        }
        _ => String::new(),
    }
}

fn data_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EMFILE) | Some(libc::ENFILE) => {
            " — out of file descriptors: raise the open-file limit (`ulimit -n`) or use fewer \
             streams/flows"
        }
        Some(libc::EADDRNOTAVAIL) => " — out of local ports (net.ipv4.ip_local_port_range)",
        _ => "",
    }
}
/// "within 5.00 s" of a silent peer; "after 10.2 ms" of one that closed or answered
/// otherwise, so the message does not claim a patience it did not take.
fn waited_words(silent: bool, waited: Duration) -> String {
    let t = crate::units::format_micros(waited.as_secs_f64() * 1e6);
    if silent {
        format!("within {t}")
    } else {
        format!("after {t}")
    }
}
