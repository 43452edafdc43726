//! What the server writes to its log (and back to a client) of what a peer sent: its
//! software's name, an iperf3 client's version, the words of a parse error that quote the
//! input. Escaped and cut to a bound, so a peer can neither fill the log (a 1 MB congestion
//! control name once went into it whole, per connection) nor write control characters into
//! it. Not our own messages, which are bounded by what we write.

/// `s` escaped (`\n`, `\u{1b}`…) and, beyond `max` characters, cut, saying how long it was.
pub(crate) fn bounded(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).flat_map(char::escape_debug).collect();
    if s.chars().nth(max).is_some() {
        out.push_str(&format!("… ({} bytes in all)", s.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peers_text_is_escaped_and_cut() {
        assert_eq!(bounded("cubic", 16), "cubic");
        assert_eq!(bounded("a\nb\u{1b}[2J", 16), "a\\nb\\u{1b}[2J");
        let long = "x".repeat(1 << 20);
        assert_eq!(bounded(&long, 4), "xxxx… (1048576 bytes in all)");
        // Cut by characters, never inside one.
        assert_eq!(bounded("ééé", 2), "éé… (6 bytes in all)");
    }
}
