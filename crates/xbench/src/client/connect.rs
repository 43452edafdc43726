//! Opening TCP connections to the server: resolving its name, the control connection (each
//! resolved address in turn), and the data connections, a bounded number at a time
//! (`max_connecting`), each from the local address the [`FlowPlan`] gives it, with the test's
//! socket options set before `connect()` and its greeting sent first.
//!
//! Not what is said on them ([`session`](super::session)) nor the data itself (`engine`).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use super::config::{AddressFamily, ClientConfig};
use super::flow_plan::{FlowPlan, PortRange};
use crate::engine::sockopt;
use crate::error::{Error, connect_hint};
use crate::proto::DataHello;
use crate::report::{ConnectionSetup, SocketReport};

pub(super) async fn resolve(config: &ClientConfig) -> Result<Vec<SocketAddr>, Error> {
    let host = config.host.trim_start_matches('[').trim_end_matches(']');
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host, config.port))
        .await
        .map_err(|e| Error::Resolve {
            host: config.host.clone(),
            port: config.port,
            cause: e,
        })?
        .collect();
    let wanted: Vec<SocketAddr> = found
        .into_iter()
        .filter(|a| match config.family {
            AddressFamily::Any => true,
            AddressFamily::V4 => a.is_ipv4(),
            AddressFamily::V6 => a.is_ipv6(),
        })
        .collect();
    if wanted.is_empty() {
        return Err(Error::NoAddress {
            host: config.host.clone(),
            family: match config.family {
                AddressFamily::V6 => "IPv6",
                AddressFamily::V4 => "IPv4",
                AddressFamily::Any => "IP",
            },
        });
    }
    Ok(wanted)
}

/// Tries each resolved address in turn, as `connect(2)` users expect of a host name.
pub(super) async fn connect_any(
    addrs: &[SocketAddr],
    config: &ClientConfig,
) -> Result<(TcpStream, SocketAddr), Error> {
    let mut last = None;
    for &addr in addrs {
        match connect_one(addr, config, config.bind, None, &mut Vec::new()).await {
            Ok((s, _)) => return Ok((s, addr)),
            Err(e) => last = Some((addr, e)),
        }
    }
    let (addr, e) = last.unwrap_or_else(|| {
        (
            addrs[0],
            std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
        )
    });
    let shown = if addrs.len() > 1 || addr.ip().to_string() != config.host {
        format!("{}:{} ({addr})", config.host, config.port)
    } else {
        format!("{}:{}", config.host, config.port)
    };
    Err(Error::Connect {
        hint: connect_hint(&e, config.port),
        addr: shown,
        cause: e,
    })
}

/// Connects to `addr` from `bind` (or the kernel's choice of address).
pub(super) async fn connect_one(
    addr: SocketAddr,
    config: &ClientConfig,
    bind: Option<IpAddr>,
    opts: Option<&crate::config::SocketOptions>,
    warnings: &mut Vec<String>,
) -> std::io::Result<(TcpStream, Option<SocketReport>)> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if let Some(opts) = opts {
        sockopt::apply(SockRef::from(&sock), opts, warnings).map_err(std::io::Error::other)?;
    }
    if let Some(ip) = bind {
        sockopt::bind_address_only(&sock);
        sock.bind(&SocketAddr::new(ip, 0).into())?;
    }
    sock.set_nonblocking(true)?;
    let tsock = tokio::net::TcpSocket::from_std_stream(std::net::TcpStream::from(sock));
    let stream = match tokio::time::timeout(config.connect_timeout, tsock.connect(addr)).await {
        Ok(r) => r?,
        Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
    };
    let report = opts.map(|o| sockopt::report(SockRef::from(&stream), o));
    Ok((stream, report))
}

/// Opens the data connections, at most `config.max_connecting` at a time (one by one would
/// cost a round trip each; all at once overruns a server's SYN queue with thousands), the
/// one of stream or flow `id` greeting with `hellos[id]`, and says how that went. Every
/// connection is waited for, so a failure names how many of them failed and how. More
/// connections than the local addresses' port ranges hold are refused before the first.
pub(crate) async fn open_data(
    config: &ClientConfig,
    server: SocketAddr,
    hellos: &[DataHello],
    warnings: &mut Vec<String>,
) -> Result<(Vec<(std::net::TcpStream, SocketReport)>, ConnectionSetup), Error> {
    let (out, setup, first_err) = open_some(config, server, hellos, warnings).await?;
    if let Some((id, e)) = first_err {
        return Err(setup_error(server, setup, id, e));
    }
    Ok((out.into_values().collect(), setup))
}

/// The connections by id.
pub(crate) type Opened = BTreeMap<usize, (std::net::TcpStream, SocketReport)>;

/// [`open_data`]'s work: every connection tried, to the end of setup, whatever fails on the
/// way. The ones that opened, by id; the counts; and the first failure, if any.
pub(crate) async fn open_some(
    config: &ClientConfig,
    server: SocketAddr,
    hellos: &[DataHello],
    warnings: &mut Vec<String>,
) -> Result<(Opened, ConnectionSetup, Option<(usize, std::io::Error)>), Error> {
    let plan = FlowPlan::new(
        hellos.len(),
        &sources(config),
        PortRange::current_or_default(),
    )?;
    let started = std::time::Instant::now();
    let gate = Arc::new(Semaphore::new(config.max_connecting.get()));
    let mut set = tokio::task::JoinSet::new();
    for (id, hello) in hellos.iter().enumerate() {
        let config = config.clone();
        let greeting = hello.greeting();
        let bind = plan.source(id);
        // Nothing closes the semaphore.
        let Ok(slot) = Arc::clone(&gate).acquire_owned().await else {
            break;
        };
        set.spawn(async move {
            let mut w = Vec::new();
            let res: std::io::Result<_> = async {
                let opened =
                    connect_one(server, &config, bind, Some(&config.spec.socket), &mut w).await;
                drop(slot);
                let (mut s, report) = opened?;
                s.write_all(&greeting).await?;
                let std = s.into_std()?;
                Ok((std, report.unwrap_or_else(empty_socket_report)))
            }
            .await;
            (id, res, w)
        });
    }
    let mut out = Opened::new();
    let mut tally = SetupTally::default();
    let mut first_err = None;
    while let Some(joined) = set.join_next().await {
        let Ok((id, res, w)) = joined else {
            tally.failed += 1;
            continue;
        };
        if id == 0 {
            // Every stream gets the same settings; one copy of each warning is enough.
            warnings.extend(w);
        }
        match res {
            Ok(v) => {
                out.insert(id, v);
            }
            Err(e) => {
                tally.count(&e);
                if first_err.is_none() {
                    first_err = Some((id, e));
                }
            }
        }
    }
    let setup = tally.setup(hellos.len(), out.len(), started.elapsed());
    Ok((out, setup, first_err))
}

/// The error of a setup in which connection `id` failed first with `e`.
pub(crate) fn setup_error(
    server: SocketAddr,
    setup: ConnectionSetup,
    id: usize,
    e: std::io::Error,
) -> Error {
    // A socket option failure arrives wrapped; show the library error itself.
    let e = match e.downcast::<Error>() {
        Ok(inner) => return inner,
        Err(e) => e,
    };
    if setup.requested == 1 || setup.connected + 1 == setup.requested {
        return Error::DataConnect {
            stream: id as u16,
            addr: server.to_string(),
            cause: e,
        };
    }
    Error::DataSetup {
        addr: server.to_string(),
        setup,
        cause: e,
    }
}

/// The local addresses the data connections may come from: `-B`'s list, or its one address.
pub(super) fn sources(config: &ClientConfig) -> Vec<IpAddr> {
    if config.flow_binds.is_empty() {
        config.bind.into_iter().collect()
    } else {
        config.flow_binds.clone()
    }
}

/// How the data connections failed, by kind.
#[derive(Debug, Default)]
struct SetupTally {
    refused: u64,
    timed_out: u64,
    failed: u64,
}

impl SetupTally {
    fn count(&mut self, e: &std::io::Error) {
        use std::io::ErrorKind as K;
        match e.kind() {
            // A reset or an early close is how a server (or a middlebox) that took the
            // connection but will not serve it says no.
            K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::BrokenPipe
            | K::UnexpectedEof => self.refused += 1,
            K::TimedOut => self.timed_out += 1,
            _ => self.failed += 1,
        }
    }

    fn setup(&self, requested: usize, connected: usize, took: Duration) -> ConnectionSetup {
        let seconds = took.as_secs_f64();
        ConnectionSetup {
            requested: requested as u64,
            connected: connected as u64,
            refused: self.refused,
            timed_out: self.timed_out,
            failed: self.failed,
            seconds,
            per_second: if seconds > 0.0 {
                connected as f64 / seconds
            } else {
                0.0
            },
            server_limit: None,
        }
    }
}

pub(crate) fn empty_socket_report() -> SocketReport {
    SocketReport {
        sndbuf_requested: None,
        sndbuf_granted: 0,
        rcvbuf_requested: None,
        rcvbuf_granted: 0,
        mss: 0,
        congestion: String::new(),
        nodelay: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_connections_are_counted_by_kind_and_add_up() {
        use std::io::{Error as E, ErrorKind as K};
        let mut t = SetupTally::default();
        for k in [
            K::ConnectionRefused,
            K::ConnectionReset,
            K::TimedOut,
            K::AddrNotAvailable,
        ] {
            t.count(&E::from(k));
        }
        let s = t.setup(10, 6, Duration::from_millis(500));
        assert_eq!((s.refused, s.timed_out, s.failed), (2, 1, 1));
        assert_eq!(
            s.connected + s.refused + s.timed_out + s.failed,
            s.requested
        );
        assert!((s.per_second - 12.0).abs() < 1e-9, "{}", s.per_second);
    }
}
