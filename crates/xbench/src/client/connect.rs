//! Opening TCP connections to the server: resolving its name, the control connection (each
//! resolved address in turn), and every data connection at once with the test's socket
//! options set before `connect()` and its greeting sent first.
//!
//! Not what is said on them ([`session`](super::session)) nor the data itself (`engine`).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{AddressFamily, ClientConfig};
use crate::engine::sockopt;
use crate::error::{Error, connect_hint};
use crate::proto::DataHello;
use crate::report::SocketReport;

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
        match connect_one(addr, config, None, &mut Vec::new()).await {
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

pub(super) async fn connect_one(
    addr: SocketAddr,
    config: &ClientConfig,
    opts: Option<&crate::config::SocketOptions>,
    warnings: &mut Vec<String>,
) -> std::io::Result<(TcpStream, Option<SocketReport>)> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if let Some(opts) = opts {
        sockopt::apply(SockRef::from(&sock), opts, warnings).map_err(std::io::Error::other)?;
    }
    if let Some(ip) = config.bind {
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

/// Opens every data connection concurrently (one by one would cost a round trip each), the
/// one of stream or flow `id` greeting with `hellos[id]`.
pub(crate) async fn open_data(
    config: &ClientConfig,
    server: SocketAddr,
    hellos: &[DataHello],
    warnings: &mut Vec<String>,
) -> Result<Vec<(std::net::TcpStream, SocketReport)>, Error> {
    let mut set = tokio::task::JoinSet::new();
    for (id, hello) in hellos.iter().enumerate() {
        let config = config.clone();
        let greeting = hello.greeting();
        set.spawn(async move {
            let mut w = Vec::new();
            let res: std::io::Result<_> = async {
                let (mut s, report) =
                    connect_one(server, &config, Some(&config.spec.socket), &mut w).await?;
                s.write_all(&greeting).await?;
                let std = s.into_std()?;
                Ok((std, report.unwrap_or_else(empty_socket_report)))
            }
            .await;
            (id, res, w)
        });
    }
    let mut out: BTreeMap<usize, (std::net::TcpStream, SocketReport)> = BTreeMap::new();
    let mut first_err = None;
    while let Some(joined) = set.join_next().await {
        let Ok((id, res, w)) = joined else { continue };
        if id == 0 {
            // Every stream gets the same settings; one copy of each warning is enough.
            warnings.extend(w);
        }
        match res {
            Ok(v) => {
                out.insert(id, v);
            }
            Err(e) if first_err.is_none() => {
                // A socket option failure arrives wrapped; show the library error itself.
                first_err = Some(match e.downcast::<Error>() {
                    Ok(inner) => inner,
                    Err(e) => Error::DataConnect {
                        stream: id as u16,
                        addr: server.to_string(),
                        cause: e,
                    },
                });
            }
            Err(_) => {}
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok(out.into_values().collect())
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
