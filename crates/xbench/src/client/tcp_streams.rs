//! The data streams of a TCP throughput test, started: a sender thread (paced as `-b` asks)
//! or a receiver thread per data connection, in stream-id order, each described for the
//! report. xbench's own test and the test against an iperf3 server run the same threads over
//! the same kind of sockets, so they start them here, once.

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use crate::client::connect::empty_socket_report;
use crate::config::{EndCondition, StreamDirection, ThroughputSpec};
use crate::engine::group::Group;
use crate::engine::stream::{self, Budget, Payload, SendMode, StreamHandle};
use crate::error::Error;
use crate::proto::StreamLayout;
use crate::report::{SocketReport, StreamInfo};

/// Starts a thread per connection of `data` (laid out as `layout`); the sockets' other options
/// were set before they connected. `end` shares a byte count among the senders. `ends` are
/// the control connection's (client, server) addresses, for a socket that cannot name its
/// own; `server_sockets` the server's report of each stream's socket, by stream id (empty
/// when the server sends none). On an error every thread already started is stopped.
pub(crate) fn start(
    end: EndCondition,
    tp: &ThroughputSpec,
    send_mode: SendMode,
    (layout, data): (StreamLayout, Vec<(TcpStream, SocketReport)>),
    (client_addr, server_addr): (SocketAddr, SocketAddr),
    server_sockets: &[SocketReport],
) -> Result<(Group, Vec<StreamInfo>), Error> {
    let budget = match end {
        EndCondition::Bytes(n) => Some(Budget::new(n)),
        EndCondition::Duration(_) => None,
    };
    let block = tp.block_len.get() as usize;
    let payload = match layout.contains(StreamDirection::ClientToServer) {
        true => Some(Arc::new(
            Payload::new(block, send_mode).map_err(|e| Error::io("preparing the payload", e))?,
        )),
        false => None,
    };
    // Dropped on an early return, which stops the streams already started.
    let mut handles: Vec<StreamHandle> = Vec::with_capacity(data.len());
    let mut infos = Vec::with_capacity(data.len());
    for ((id, direction), (sock, report)) in layout.iter().zip(data) {
        infos.push(StreamInfo {
            id,
            direction,
            client_addr: sock.local_addr().unwrap_or(client_addr),
            server_addr: sock.peer_addr().unwrap_or(server_addr),
            client_socket: report,
            server_socket: (server_sockets.get(usize::from(id)).cloned())
                .unwrap_or_else(empty_socket_report),
        });
        let h = match (direction, &payload) {
            (StreamDirection::ClientToServer, Some(p)) => {
                if let Err(e) = crate::engine::sockopt::pace(&sock, tp.bitrate) {
                    drop(Group::new(handles));
                    return Err(e);
                }
                stream::spawn_sender(id, sock, Arc::clone(p), budget.clone())
            }
            // The payload exists whenever a stream sends; kept as an error, not a panic.
            (StreamDirection::ClientToServer, None) => {
                Err(std::io::Error::other("no payload for a sending stream"))
            }
            (StreamDirection::ServerToClient, _) => {
                stream::spawn_receiver(id, sock, block, tp.receive)
            }
        };
        match h {
            Ok(h) => handles.push(h),
            Err(e) => {
                drop(Group::new(handles));
                return Err(Error::io("starting a stream thread", e));
            }
        }
    }
    Ok((Group::new(handles), infos))
}
