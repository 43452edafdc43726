//! Pre-shared-key authentication of a control connection: mutual challenge-response with
//! HMAC-SHA256 over nonces from both ends.
//!
//! ```text
//! client → Hello   { nonce_c }
//! server → Welcome { nonce_s, auth_required, proof_s = HMAC(key, "xbench-v1 server" ‖ nonce_c ‖ nonce_s) }
//! client → Auth    { proof_c = HMAC(key, "xbench-v1 client" ‖ nonce_s ‖ nonce_c) }
//! ```
//!
//! Each end proves it holds the key without sending it, over nonces the other end chose, so a
//! recorded exchange cannot be replayed; proofs are compared in constant time. The client
//! checks the server's proof too, so a client with a key never runs against a server without
//! one (which could be anyone). This authenticates; it does not encrypt — test traffic and
//! results cross the network in the clear, as with iperf3.
//!
//! The control connection is not the only one: every data connection must prove it belongs to
//! the authenticated session too, or anyone who reads the test's cookie off the wire could
//! attach a connection of their own as one of the test's streams. Both ends derive a
//! [`SessionKey`] from the key and the two handshake nonces, and each data connection carries
//! a [`DataTag`] over the cookie, its stream or flow id and a per-connection counter:
//!
//! ```text
//! K_s = HMAC(key, "xbench-v3 session" ‖ nonce_c ‖ nonce_s)
//! tag = HMAC(K_s, "xbench-v3 data" ‖ cookie ‖ id ‖ counter)[..16]
//! ```
//!
//! The session key never crosses the wire and dies with the session; the counter makes every
//! connection's tag different, so the server can refuse a copied one (see the server's gate).
//!
//! Not for: deciding who may connect by address (the server's allow list does that).

use std::fmt;
use std::io;
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Length of a nonce, bytes.
pub const NONCE_LEN: usize = 32;
/// Shortest key accepted, bytes: below this a key can be guessed offline from one exchange.
pub const MIN_KEY_LEN: usize = 16;

/// A pre-shared key. Its `Debug` output never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Psk(Vec<u8>);

impl fmt::Debug for Psk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psk({} bytes, redacted)", self.0.len())
    }
}

/// Why a key could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The file could not be read.
    #[error("cannot read the key file {path}: {cause}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        cause: io::Error,
    },
    /// The key is too short to resist guessing.
    #[error(
        "the key in {path} is {len} bytes; use at least {MIN_KEY_LEN} random bytes, e.g. \
         `head -c 32 /dev/urandom | base64 > {path}`"
    )]
    TooShort {
        /// The file.
        path: String,
        /// Its key's length.
        len: usize,
    },
}

impl Psk {
    /// A key from its bytes; at least [`MIN_KEY_LEN`] long.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, KeyError> {
        let bytes = bytes.into();
        if bytes.len() < MIN_KEY_LEN {
            return Err(KeyError::TooShort {
                path: "the key".into(),
                len: bytes.len(),
            });
        }
        Ok(Psk(bytes))
    }

    /// The key in a file: its contents without surrounding whitespace (so a trailing newline
    /// from an editor or `echo` does not change the key).
    pub fn from_file(path: &Path) -> Result<Self, KeyError> {
        let shown = path.display().to_string();
        let raw = std::fs::read(path).map_err(|cause| KeyError::Read {
            path: shown.clone(),
            cause,
        })?;
        let key = raw.trim_ascii();
        if key.len() < MIN_KEY_LEN {
            return Err(KeyError::TooShort {
                path: shown,
                len: key.len(),
            });
        }
        Ok(Psk(key.to_vec()))
    }

    fn mac(&self, role: &[u8], first: &Nonce, second: &Nonce) -> Hmac<Sha256> {
        // HMAC accepts keys of any length; new_from_slice cannot fail for it.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        m.update(role);
        m.update(&first.0);
        m.update(&second.0);
        m
    }

    /// The server's proof for a handshake.
    pub fn server_proof(&self, client: &Nonce, server: &Nonce) -> Proof {
        Proof(
            self.mac(SERVER_ROLE, client, server)
                .finalize()
                .into_bytes()
                .into(),
        )
    }

    /// The client's proof for a handshake.
    pub fn client_proof(&self, client: &Nonce, server: &Nonce) -> Proof {
        Proof(
            self.mac(CLIENT_ROLE, server, client)
                .finalize()
                .into_bytes()
                .into(),
        )
    }

    /// Checks a server's proof, in constant time.
    pub fn verify_server(&self, client: &Nonce, server: &Nonce, proof: &Proof) -> bool {
        self.mac(SERVER_ROLE, client, server)
            .verify_slice(&proof.0)
            .is_ok()
    }

    /// Checks a client's proof, in constant time.
    pub fn verify_client(&self, client: &Nonce, server: &Nonce, proof: &Proof) -> bool {
        self.mac(CLIENT_ROLE, server, client)
            .verify_slice(&proof.0)
            .is_ok()
    }
}

const SERVER_ROLE: &[u8] = b"xbench-v1 server";
const CLIENT_ROLE: &[u8] = b"xbench-v1 client";
const SESSION_ROLE: &[u8] = b"xbench-v3 session";
const DATA_ROLE: &[u8] = b"xbench-v3 data";

/// Length of a data connection's [`DataTag`], bytes: a truncated HMAC-SHA256. 128 bits is
/// what forging one online would have to guess, one connection attempt per guess.
pub const DATA_TAG_LEN: usize = 16;

/// A data connection's proof that it belongs to the session: see the module docs.
pub type DataTag = [u8; DATA_TAG_LEN];

/// The key of one authenticated session, derived from the pre-shared key and both handshake
/// nonces ([`Psk::session_key`]); it signs and checks the session's data connections. Its
/// `Debug` output never shows the key.
#[derive(Clone)]
pub struct SessionKey {
    /// HMAC keyed with the session key, cloned per tag: the key schedule is paid once per
    /// session, not once per `--crr` connection.
    keyed: Hmac<Sha256>,
}

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKey(redacted)")
    }
}

impl Psk {
    /// The session key both ends derive once the handshake's nonces are exchanged.
    pub fn session_key(&self, client: &Nonce, server: &Nonce) -> SessionKey {
        let derived = self
            .mac(SESSION_ROLE, client, server)
            .finalize()
            .into_bytes();
        SessionKey {
            keyed: <Hmac<Sha256> as Mac>::new_from_slice(&derived)
                .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length")),
        }
    }
}

impl SessionKey {
    fn mac(&self, cookie: &[u8], id: u16, counter: u64) -> Hmac<Sha256> {
        let mut m = self.keyed.clone();
        m.update(DATA_ROLE);
        m.update(cookie);
        m.update(&id.to_be_bytes());
        m.update(&counter.to_be_bytes());
        m
    }

    /// The tag of a data connection of test `cookie`, for stream or flow `id`, numbered
    /// `counter` among that id's connections.
    pub fn tag(&self, cookie: &[u8], id: u16, counter: u64) -> DataTag {
        let full = self.mac(cookie, id, counter).finalize().into_bytes();
        let mut t = [0u8; DATA_TAG_LEN];
        t.copy_from_slice(&full[..DATA_TAG_LEN]);
        t
    }

    /// Checks a data connection's tag, in constant time.
    pub fn verify(&self, cookie: &[u8], id: u16, counter: u64, tag: &DataTag) -> bool {
        self.mac(cookie, id, counter)
            .verify_truncated_left(tag)
            .is_ok()
    }
}

/// A random challenge, fresh for every handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nonce(pub [u8; NONCE_LEN]);

impl Nonce {
    /// A nonce from the OS generator.
    pub fn random() -> io::Result<Self> {
        let mut b = [0u8; NONCE_LEN];
        getrandom::fill(&mut b).map_err(io::Error::from)?;
        Ok(Nonce(b))
    }
}

/// An HMAC-SHA256 proof of holding the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proof(pub [u8; 32]);

macro_rules! hex_serde {
    ($t:ident, $n:expr) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&crate::hex::to_hex(&self.0))
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                let mut b = [0u8; $n];
                crate::hex::from_hex(&s, &mut b)
                    .map(|()| $t(b))
                    .ok_or_else(|| {
                        serde::de::Error::custom(concat!("expected ", $n, " bytes of hex"))
                    })
            }
        }
    };
}

hex_serde!(Nonce, 32);
hex_serde!(Proof, 32);

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Psk {
        Psk::new(b"0123456789abcdef0123".to_vec()).unwrap()
    }

    #[test]
    fn proofs_verify_only_with_the_same_key_and_nonces() {
        let (c, s) = (Nonce::random().unwrap(), Nonce::random().unwrap());
        let k = key();
        assert!(k.verify_server(&c, &s, &k.server_proof(&c, &s)));
        assert!(k.verify_client(&c, &s, &k.client_proof(&c, &s)));
        // Roles are not interchangeable: a reflected proof fails.
        assert!(!k.verify_client(&c, &s, &k.server_proof(&c, &s)));
        let other = Psk::new(b"another key, long enough".to_vec()).unwrap();
        assert!(!k.verify_client(&c, &s, &other.client_proof(&c, &s)));
        let fresh = Nonce::random().unwrap();
        assert!(
            !k.verify_client(&fresh, &s, &k.client_proof(&c, &s)),
            "no replay"
        );
    }

    #[test]
    fn data_tags_verify_only_for_their_session_cookie_id_and_counter() {
        let (c, s) = (Nonce::random().unwrap(), Nonce::random().unwrap());
        let k = key().session_key(&c, &s);
        let cookie = [7u8; 16];
        let t = k.tag(&cookie, 3, 41);
        assert!(k.verify(&cookie, 3, 41, &t));
        assert!(!k.verify(&cookie, 4, 41, &t), "another stream");
        assert!(!k.verify(&cookie, 3, 42, &t), "another connection");
        assert!(!k.verify(&[8u8; 16], 3, 41, &t), "another test");
        let other_session = key().session_key(&c, &Nonce::random().unwrap());
        assert!(!other_session.verify(&cookie, 3, 41, &t), "another session");
        assert_ne!(k.tag(&cookie, 3, 41), k.tag(&cookie, 3, 40));
        assert_eq!(format!("{k:?}"), "SessionKey(redacted)");
    }

    #[test]
    fn short_keys_and_debug_output() {
        assert!(matches!(
            Psk::new(b"short".to_vec()),
            Err(KeyError::TooShort { len: 5, .. })
        ));
        assert_eq!(format!("{:?}", key()), "Psk(20 bytes, redacted)");
    }

    #[test]
    fn key_files_are_trimmed() {
        let dir = std::env::temp_dir().join(format!("xbench-psk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("key");
        std::fs::write(&f, "  0123456789abcdef0123\n").unwrap();
        assert_eq!(Psk::from_file(&f).unwrap(), key());
        std::fs::write(&f, "tiny\n").unwrap();
        let e = Psk::from_file(&f).unwrap_err().to_string();
        assert!(e.contains("4 bytes") && e.contains("/dev/urandom"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn nonces_travel_as_hex() {
        let n = Nonce([0xab; 32]);
        let j = serde_json::to_string(&n).unwrap();
        assert_eq!(j, format!("\"{}\"", "ab".repeat(32)));
        assert_eq!(serde_json::from_str::<Nonce>(&j).unwrap(), n);
        assert!(serde_json::from_str::<Nonce>("\"abcd\"").is_err());
    }
}
