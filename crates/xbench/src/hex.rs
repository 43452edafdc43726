//! Hex digits for the bytes the protocol and its keys write as text (cookies, proofs, nonces
//! in JSON). A leaf of its own: the protocol and the keys both use it, and neither should
//! depend on the other for it.

/// Lower-case hex of `bytes`.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Fills `out` from exactly `2 × out.len()` hex digits.
pub(crate) fn from_hex(s: &str, out: &mut [u8]) -> Option<()> {
    if s.len() != out.len() * 2 || !s.is_ascii() {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(())
}
