//! Return routability on the server: a UDP socket sends its test's data only to an address
//! that has proven it receives there, and until then never sends that address more bytes than
//! it received from it.
//!
//! A greeting's source address is whatever the datagram says. Without this check anyone with
//! a test's cookie (any client: the server hands cookies out) could put a victim's address
//! there, with an SNAT rule or a raw socket, and have the server send the victim a `-R` test
//! at line rate: 126 MB to the victim for 2,380 bytes from the attacker (issue 30). So the
//! greeting that claims a socket is answered only with a [`PathCheck::Challenge`], and the
//! socket is the test's once the challenge's random token comes back from that address.
//! [`Unproven`] is the byte accounting before that (QUIC's anti-amplification limit, RFC 9000
//! §8.1; quinn's `PathData::anti_amplification_blocked`), with a factor of 1 rather than
//! QUIC's 3: a challenge is smaller than the greeting that pays for it.
//!
//! Not the greetings' own checks (cookie, key, id: [`gate`](super::gate)) nor the phases of a
//! UDP test ([`udp`](super::udp)).

use std::io;
use std::net::SocketAddr;

use tokio::net::UdpSocket;

use crate::proto::{
    DATA_GREETING_LEN, DATA_HELLO_LEN, DataHello, PREAMBLE_LEN, PathCheck, Preamble,
};

/// How many bytes an unproven address may be sent for each byte received from it. QUIC allows
/// 3 (its Initial packets must fit a TLS handshake); a challenge fits in 1.
pub(super) const AMPLIFICATION: u64 = 1;

/// Bytes exchanged with an address that has not yet proven it receives there.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Unproven {
    received: u64,
    sent: u64,
}

impl Unproven {
    /// Counts `n` bytes received from the address.
    pub(super) fn received(&mut self, n: usize) {
        self.received = self.received.saturating_add(n as u64);
    }

    /// Counts `n` bytes about to be sent to the address, if they stay within
    /// [`AMPLIFICATION`] × what it sent us; false (and nothing counted) if they would not.
    pub(super) fn try_send(&mut self, n: usize) -> bool {
        let after = self.sent.saturating_add(n as u64);
        if after > self.received.saturating_mul(AMPLIFICATION) {
            return false;
        }
        self.sent = after;
        true
    }

    /// Bytes sent so far.
    #[cfg(test)]
    pub(super) fn sent(&self) -> u64 {
        self.sent
    }
}

/// Proves that `from`, to which `sock` is connected and whose greeting (`hello`, `greeted`
/// bytes) claimed it, receives there: sends it a challenge, again for each repeat of the
/// greeting, and returns once the challenge's token comes back from `from`. Everything else is
/// dropped. Waits as long as it takes; the caller bounds it.
pub(super) async fn prove(
    sock: &UdpSocket,
    from: SocketAddr,
    hello: &DataHello,
    greeted: usize,
) -> io::Result<()> {
    let challenge = PathCheck::challenge()?;
    let wire = challenge.encode();
    let mut budget = Unproven::default();
    budget.received(greeted);
    let mut buf = [0u8; 128];
    let mut send = true;
    loop {
        if send && budget.try_send(wire.len()) {
            // Lost or refused (an ICMP error from an earlier one): the next greeting pays for
            // another.
            let _ = sock.send(&wire).await;
        }
        let (n, src) = match sock.recv_from(&mut buf).await {
            Ok(r) => r,
            // The ICMP answer to an earlier challenge: nobody listens at `from` (a forged
            // source, or a client that gave up).
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                send = false;
                continue;
            }
            Err(e) => return Err(e),
        };
        // Queued before the socket was connected to `from`.
        if src != from {
            send = false;
            continue;
        }
        budget.received(n);
        let datagram = &buf[..n];
        if PathCheck::decode(datagram) == Some(challenge.response()) {
            return Ok(());
        }
        // The client repeats its greeting until `Ready`: each repeat pays for a challenge, in
        // case the last one (or its answer) was lost.
        send = parse_hello(datagram).is_some_and(|h| h == *hello);
    }
}

/// A datagram that is a data greeting of this protocol version, decoded.
pub(super) fn parse_hello(b: &[u8]) -> Option<DataHello> {
    if b.len() != DATA_GREETING_LEN {
        return None;
    }
    let pre = Preamble::decode(b.first_chunk::<PREAMBLE_LEN>()?).ok()?;
    if pre.channel != crate::proto::Channel::Data || pre.version != crate::proto::PROTOCOL_VERSION {
        return None;
    }
    Some(DataHello::decode(b.last_chunk::<DATA_HELLO_LEN>()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Cookie, DATA_GREETING_LEN, PATH_CHECK_LEN};

    #[test]
    fn an_unproven_address_is_sent_no_more_than_it_sent() {
        let mut u = Unproven::default();
        assert!(!u.try_send(1), "nothing received, nothing sent");
        u.received(DATA_GREETING_LEN);
        // Bytes, not datagrams: 49 received pay for two 23-byte challenges, not three.
        assert!(u.try_send(PATH_CHECK_LEN) && u.try_send(PATH_CHECK_LEN));
        assert!(!u.try_send(PATH_CHECK_LEN), "sent more than received");
        assert_eq!(u.sent(), 2 * PATH_CHECK_LEN as u64);
        u.received(DATA_GREETING_LEN);
        assert!(u.try_send(PATH_CHECK_LEN) && u.try_send(PATH_CHECK_LEN));
        assert!(!u.try_send(PATH_CHECK_LEN), "sent more than received");
        assert!(u.sent() <= 2 * DATA_GREETING_LEN as u64 * AMPLIFICATION);
        let mut huge = Unproven::default();
        huge.received(usize::MAX);
        huge.received(usize::MAX);
        assert!(huge.try_send(usize::MAX), "saturates, never wraps");
    }

    /// The greeting's source gets a challenge per greeting and nothing else; the proof comes
    /// only from the address the challenge went to, with its token.
    #[tokio::test]
    async fn only_the_challenges_token_from_the_greetings_address_proves_it() {
        let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let stranger = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let (at, from) = (server.local_addr().unwrap(), client.local_addr().unwrap());
        server.connect(from).await.unwrap();
        let hello = DataHello::new(Cookie([3; 16]), 0, 0, None);
        let proving =
            tokio::spawn(async move { prove(&server, from, &hello, DATA_GREETING_LEN).await });
        let mut buf = [0u8; 128];
        let n = client.recv(&mut buf).await.unwrap();
        let Some(PathCheck::Challenge(token)) = PathCheck::decode(&buf[..n]) else {
            panic!("not a challenge: {:?}", &buf[..n]);
        };
        // A wrong token from the right address, the right token from elsewhere: no proof.
        client
            .send_to(&PathCheck::Response([0; 16]).encode(), at)
            .await
            .unwrap();
        stranger
            .send_to(&PathCheck::Response(token).encode(), at)
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!proving.is_finished());
        // The greeting again: one more challenge, the same token.
        client.send_to(&hello.greeting(), at).await.unwrap();
        let n = client.recv(&mut buf).await.unwrap();
        assert_eq!(
            PathCheck::decode(&buf[..n]),
            Some(PathCheck::Challenge(token))
        );
        client
            .send_to(&PathCheck::Response(token).encode(), at)
            .await
            .unwrap();
        proving.await.unwrap().unwrap();
        let mut none = [0u8; 64];
        let extra = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            client.recv(&mut none),
        )
        .await;
        assert!(extra.is_err(), "more than one challenge per greeting");
    }
}
