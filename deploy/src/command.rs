//! The `xbench` command lines this tool runs, built in one place from typed values: `xbench
//! client` from the library's [`ClientConfig`] (so a suite cell becomes exactly the flags
//! that give back the same [`xbench::config::TestSpec`]), and `xbench server` from its port, key
//! file and allowed networks. The boot scripts, the SSM runner and the lab runner all call
//! these; none assembles flags of its own.
//!
//! Every run checks the report's spec against the planned one ([`spec_differences`]), so a
//! flag that stopped meaning what this module thinks (or an older xbench on a host) is caught
//! on the first run instead of silently measuring something else. Not for running anything.

use std::fmt::Write as _;
use std::time::Duration;

use xbench::ClientConfig;
use xbench::client::AddressFamily;
use xbench::config::{Direction, EndCondition, ReceiveMode, TestSpec, Workload};

use crate::cidr::Ipv4Cidr;

/// The `xbench client` arguments (without the program) for `config`, printing one JSON report
/// on stdout. `psk_file` is where the key is on the machine that runs it.
pub fn client_argv(config: &ClientConfig, psk_file: Option<&str>) -> Vec<String> {
    let mut a: Vec<String> = vec!["client".into(), config.host.clone()];
    let mut flag = |f: &str, v: String| {
        a.push(f.to_owned());
        a.push(v);
    };
    flag("-p", config.port.to_string());
    let spec = &config.spec;
    match spec.end {
        EndCondition::Duration(d) => flag("-t", time(d)),
        EndCondition::Bytes(b) => flag("-n", b.to_string()),
    }
    flag("-O", time(spec.omit));
    flag("-i", spec.interval.map_or_else(|| "0".to_owned(), time));
    flag("--connect-timeout", time(config.connect_timeout));
    if let Some(l) = &config.label {
        flag("--label", l.clone());
    }
    if let Some(p) = psk_file {
        flag("--psk-file", p.to_owned());
    }
    if let Some(b) = config.bind {
        flag("-B", b.to_string());
    }
    if let Some(w) = spec.socket.window {
        flag("-w", size(w));
    }
    if let Some(m) = spec.socket.mss {
        flag("-M", m.to_string());
    }
    if let Some(c) = &spec.socket.congestion {
        flag("-C", c.clone());
    }
    workload_flags(&mut a, config, spec);
    match config.family {
        AddressFamily::V4 => a.push("-4".into()),
        AddressFamily::V6 => a.push("-6".into()),
        _ => {}
    }
    if spec.socket.nodelay {
        a.push("-N".into());
    }
    a.push("--json".into());
    a
}

fn workload_flags(a: &mut Vec<String>, config: &ClientConfig, spec: &TestSpec) {
    let mut flag = |f: &str, v: String| {
        a.push(f.to_owned());
        a.push(v);
    };
    match &spec.workload {
        Workload::Throughput(t) => {
            flag("-P", t.streams.to_string());
            flag("-l", t.block_len.to_string());
            if let Some(b) = t.bitrate {
                flag("-b", b.to_string());
            }
            match t.direction {
                Direction::ClientToServer => {}
                Direction::ServerToClient => a.push("-R".into()),
                Direction::Bidir => a.push("--bidir".into()),
            }
            if t.zerocopy {
                a.push("-Z".into());
            }
            if t.receive == ReceiveMode::Copy {
                a.push("--recv-copy".into());
            }
        }
        Workload::RequestResponse(r) => {
            flag(
                "-r",
                format!("{},{}", r.request_len.get(), r.response_len.get()),
            );
            flag("--flows", r.flows.to_string());
            if !r.connect_per_transaction {
                flag("--burst", r.burst.to_string());
            }
            if let Some(rate) = r.rate_per_flow {
                // Rust prints the shortest text that parses back to the same f64.
                flag("--rate", format!("{rate}"));
            }
            flag("--response-timeout", time(config.stall_timeout));
            a.push(
                if r.connect_per_transaction {
                    "--crr"
                } else {
                    "--rr"
                }
                .into(),
            );
        }
        // A workload this tool does not know cannot be put on a command line.
        _ => {}
    }
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
    let (Ok(a), Ok(b)) = (serde_json::to_value(ran), serde_json::to_value(planned)) else {
        return vec!["the test settings could not be compared".into()];
    };
    let mut out = Vec::new();
    walk("", &a, &b, &mut out);
    out
}

fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    match (a, b) {
        (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let null = serde_json::Value::Null;
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(
                    &p,
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        _ if a != b => out.push(format!("{path}: ran {a}, planned {b}")),
        _ => {}
    }
}

/// A time as `xbench client` reads it back to the same value: whole seconds, else
/// milliseconds, else microseconds.
fn time(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}us", d.as_micros())
    }
}

/// A size with the unit `-w` insists on.
fn size(bytes: u64) -> String {
    let mut s = String::new();
    if bytes.is_multiple_of(1 << 20) {
        let _ = write!(s, "{}M", bytes >> 20);
    } else if bytes.is_multiple_of(1024) {
        let _ = write!(s, "{}K", bytes >> 10);
    } else {
        let _ = write!(s, "{bytes}B");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throughput_cell_becomes_its_flags() {
        let mut c = ClientConfig::new("10.20.0.4");
        c.label = Some("vpn".into());
        c.spec.socket.window = Some(256 << 10);
        if let Workload::Throughput(t) = &mut c.spec.workload {
            t.direction = Direction::ServerToClient;
            t.streams = std::num::NonZeroU16::new(4).unwrap();
        }
        let line = shell_line("xbench", &client_argv(&c, Some("/etc/xbench-deploy/psk")));
        assert_eq!(
            line,
            "xbench client 10.20.0.4 -p 5201 -t 10 -O 0 -i 1 --connect-timeout 10 --label vpn \
             --psk-file /etc/xbench-deploy/psk -w 256K -P 4 -l 131072 -R --json"
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
        let line = shell_line("xbench", &client_argv(&c, None));
        assert_eq!(
            line,
            "xbench client 10.1.0.9 -p 5201 -t 60 -O 0 -i 1 --connect-timeout 10 -r 64,16384 \
             --flows 8 --rate 100 --response-timeout 10 --crr --json"
        );
    }

    #[test]
    fn quoting_survives_a_shell() {
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote(""), "''");
        assert_eq!(time(Duration::from_millis(1500)), "1500ms");
        assert_eq!(size(1000), "1000B");
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
