//! The `xbench` command lines this tool runs, built in one place from typed values: `xbench
//! client` from the library's [`ClientConfig`] (so a suite cell becomes exactly the flags
//! that give back the same [`xbench::config::TestSpec`]), and `xbench server` from its port, key
//! file and allowed networks. The boot scripts, the SSM runner and the lab runner all call
//! these; none assembles flags of its own.
//!
//! Every run checks the report's spec against the planned one ([`spec_differences`]), so a
//! flag that stopped meaning what this module thinks (or an older xbench on a host) is caught
//! on the first run instead of silently measuring something else. Not for running anything.

use std::path::PathBuf;

use xbench::ClientConfig;
use xbench::config::TestSpec;
use xbench_sweep::{RenderError, SweepPlan, Target};

use crate::cidr::Ipv4Cidr;

/// The `xbench client` arguments (without the program) for `config`, printing one JSON report
/// on stdout. `psk_file` is where the key is on the machine that runs it.
///
/// Written by the sweep library's [`SweepPlan::client_args`], the same code that writes the
/// lab's commands and whose output the `xbench` binary's tests parse back, so a suite cell
/// cannot become flags that mean something else. A configuration the command line cannot say
/// exactly (a label with a slash, a time finer than a microsecond) is an error.
pub fn client_argv(
    config: &ClientConfig,
    psk_file: Option<&str>,
) -> Result<Vec<String>, RenderError> {
    let target = Target::from_client_config(config, psk_file.map(PathBuf::from));
    let label = config.label.clone().unwrap_or_else(|| "deploy".to_owned());
    let mut argv = SweepPlan::new(target, config.spec.clone(), label).client_args()?;
    argv.push("--json".into());
    Ok(argv)
}

/// The `xbench server` arguments (without the program): listen on `port`, require the key in
/// `psk_file`, and only let `allow` connect.
pub fn server_argv(
    port: u16,
    bind: Option<&str>,
    psk_file: &str,
    allow: &[Ipv4Cidr],
) -> Vec<String> {
    let mut a = vec!["server".to_owned(), "-p".into(), port.to_string()];
    if let Some(b) = bind {
        a.extend(["-B".to_owned(), b.to_owned()]);
    }
    a.extend(["--psk-file".to_owned(), psk_file.to_owned()]);
    if !allow.is_empty() {
        let list: Vec<String> = allow.iter().map(|c| c.to_string()).collect();
        a.extend(["--allow".to_owned(), list.join(",")]);
    }
    a
}

/// `xbench client --start-at`'s value for `at`: Unix seconds with milliseconds (a fleet's
/// common start; the clocks were checked to agree far better than that).
pub fn start_at_arg(at: std::time::SystemTime) -> String {
    let d = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:03}", d.as_secs(), d.subsec_millis())
}

/// `program` and `argv` as one line for a POSIX shell (single-quoted where needed).
pub fn shell_line(program: &str, argv: &[String]) -> String {
    let mut out = quote(program);
    for arg in argv {
        out.push(' ');
        out.push_str(&quote(arg));
    }
    out
}

/// `s` as one shell word.
pub fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:,=+@%".contains(&b));
    if plain {
        return s.to_owned();
    }
    let mut out = String::from("'");
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// Settings that differ between the spec a run reports and the one planned, as
/// `socket.window: ran 262144, planned null`; empty when they agree.
pub fn spec_differences(ran: &TestSpec, planned: &TestSpec) -> Vec<String> {
    xbench_sweep::spec_differences(ran, planned, ["ran", "planned"])
        .unwrap_or_else(|| vec!["the test settings could not be compared".into()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use xbench::config::{Direction, Workload};

    #[test]
    fn a_throughput_cell_becomes_its_flags() {
        let mut c = ClientConfig::new("10.20.0.4");
        c.label = Some("vpn".into());
        c.spec.socket.window = Some(256 << 10);
        if let Workload::Throughput(t) = &mut c.spec.workload {
            t.direction = Direction::ServerToClient;
            t.streams = std::num::NonZeroU16::new(4).unwrap();
        }
        let line = shell_line(
            "xbench",
            &client_argv(&c, Some("/etc/xbench-deploy/psk")).unwrap(),
        );
        assert_eq!(
            line,
            "xbench client 10.20.0.4 --psk-file=/etc/xbench-deploy/psk --label=vpn -P 4 -R -w 256K \
             --json"
        );
    }

    #[test]
    fn a_request_response_cell_becomes_its_flags() {
        let suite = crate::suite::Suite::from_toml(
            "[[test]]\ncrr = true\nrr-size = \"64,16K\"\nflows = 8\nrate = \"10ms\"\ntime = 60\n",
        )
        .unwrap();
        let mut c = ClientConfig::new("10.1.0.9");
        c.spec = suite.cells().remove(0);
        let line = shell_line("xbench", &client_argv(&c, None).unwrap());
        assert_eq!(
            line,
            "xbench client 10.1.0.9 --label=deploy --crr -r 64,16K --flows 8 --rate 100 -t 60 --json"
        );
    }

    #[test]
    fn quoting_survives_a_shell() {
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn servers_get_the_key_and_the_allow_list() {
        let allow = [
            "10.10.1.0/24".parse().unwrap(),
            "203.0.113.7/32".parse().unwrap(),
        ];
        assert_eq!(
            server_argv(5201, None, "/k", &allow).join(" "),
            "server -p 5201 --psk-file /k --allow 10.10.1.0/24,203.0.113.7/32"
        );
    }
}
