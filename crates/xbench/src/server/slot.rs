//! A connection's place among those still saying what they are ([`HandshakeSlot`]), held
//! by whichever part of the server reads it: the new connection, then the session or the
//! iperf3 test it turns out to be. A leaf so that all of them hold it without depending on
//! each other.

use std::net::IpAddr;
use std::sync::Arc;

use super::budget::{Busy, Handshake};
use super::context::Ctx;

/// Holds one of [`Limits::max_handshakes`](super::config::Limits::max_handshakes), and one of the
/// descriptors of the server's budget, until the connection has said what it is.
#[derive(Debug)]
pub(crate) struct HandshakeSlot {
    /// Given back to the budget when the slot is dropped.
    _held: Handshake,
}

impl HandshakeSlot {
    /// A slot for a connection from `peer`, if the limit, the address's share of it and the
    /// descriptors allow; why not, otherwise.
    pub(super) fn take(ctx: &Arc<Ctx>, peer: IpAddr) -> Result<Self, Busy> {
        let held = ctx.budget.handshake(peer)?;
        Ok(HandshakeSlot { _held: held })
    }
}
