//! iperf3's muscle memory: `xbench -c HOST …` and `xbench -s …` name the subcommand the way
//! iperf3's mode flags do. Before clap reads the arguments, a mode flag in front of any
//! subcommand becomes the subcommand (`client` for `-c`, `server` for `-s`); the flag itself
//! stays and is read there (`client -c HOST` is the host, `server -s` changes nothing), so
//! clap still checks everything else and names any flag of iperf3's that xbench lacks.
//!
//! Not for translating iperf3's other flags: those xbench shares already mean the same.

use std::ffi::OsString;

/// The arguments with `client` or `server` put in front when they start with iperf3's mode
/// flag; anything else is returned as it came.
pub(crate) fn rewrite(mut args: Vec<OsString>) -> Vec<OsString> {
    let Some(first) = args.get(1).and_then(|a| a.to_str()) else {
        return args;
    };
    // A subcommand, a help or version request, or a bare word: nothing of iperf3's.
    if !first.starts_with('-') || matches!(first, "-h" | "--help" | "-V" | "--version") {
        return args;
    }
    let mode = args[1..].iter().find_map(|a| match a.to_str()? {
        "-s" | "--server" => Some("server"),
        a if a == "--client" || a.starts_with("--client=") => Some("client"),
        // -c HOST and -cHOST; "--…" is a long flag, not a cluster of short ones.
        a if a.starts_with("-c") => Some("client"),
        _ => None,
    });
    if let Some(mode) = mode {
        args.insert(1, OsString::from(mode));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(args: &[&str]) -> Vec<String> {
        rewrite(args.iter().map(OsString::from).collect())
            .into_iter()
            .map(|a| a.into_string().unwrap_or_default())
            .collect()
    }

    #[test]
    fn iperf3_mode_flags_become_subcommands() {
        assert_eq!(
            rewritten(&["xbench", "-c", "h", "-P", "4"]),
            ["xbench", "client", "-c", "h", "-P", "4"]
        );
        assert_eq!(
            rewritten(&["xbench", "-P", "4", "-c", "h"]),
            ["xbench", "client", "-P", "4", "-c", "h"]
        );
        assert_eq!(
            rewritten(&["xbench", "--client=h"]),
            ["xbench", "client", "--client=h"]
        );
        assert_eq!(
            rewritten(&["xbench", "-ch", "-R"]),
            ["xbench", "client", "-ch", "-R"]
        );
        assert_eq!(
            rewritten(&["xbench", "-s", "-p", "5202"]),
            ["xbench", "server", "-s", "-p", "5202"]
        );
        assert_eq!(
            rewritten(&["xbench", "-p", "5202", "--server"]),
            ["xbench", "server", "-p", "5202", "--server"]
        );
    }

    #[test]
    fn subcommands_help_and_other_words_are_left_alone() {
        for args in [
            &["xbench", "client", "-c", "h"][..],
            &["xbench", "server", "-s"],
            &["xbench", "--help"],
            &["xbench", "-V"],
            &["xbench"],
            &["xbench", "report", "-s"],
            &["xbench", "-C", "bbr"],
        ] {
            assert_eq!(rewritten(args), args, "{args:?}");
        }
    }
}
