//! The MTU a path's client reports: its interface's MTU toward the server, and the path MTU
//! the kernel learned on the route by the end of the suite (`ip route get`'s cached `mtu`,
//! set when "fragmentation needed" came back and TCP lowered its segments). Recorded per
//! path as `DIR/<label>/.path-mtu.json` and printed by `run`.
//!
//! A hook, not the analysis: issue 33 adds per-run MTU and path-MTU figures to xbench's own
//! reports; until then this is what the host says once per path. Not for changing any MTU.

use serde::{Deserialize, Serialize};

/// What one path's client reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathMtu {
    /// The address the client dials.
    pub target: String,
    /// The interface the route to it leaves by.
    pub interface: Option<String>,
    /// That interface's MTU, bytes (9001 on most EC2 instance types, 1500 over the internet
    /// gateway for traffic leaving the region).
    pub interface_mtu: Option<u32>,
    /// The path MTU the kernel learned for the target (a cached route exception), bytes;
    /// `None` when it learned none (no "fragmentation needed" came back).
    pub route_mtu: Option<u32>,
    /// `ip route get`'s own words.
    pub route: String,
}

impl PathMtu {
    /// One line for people.
    pub fn line(&self) -> String {
        let iface = match (&self.interface, self.interface_mtu) {
            (Some(i), Some(m)) => format!("client interface {i} MTU {m}"),
            (Some(i), None) => format!("client interface {i} (MTU unknown)"),
            _ => "client interface unknown".to_owned(),
        };
        match self.route_mtu {
            Some(m) => format!(
                "{iface}; path MTU to {} learned by the kernel: {m}",
                self.target
            ),
            None => format!(
                "{iface}; no smaller path MTU to {} learned (no \"fragmentation needed\" seen)",
                self.target
            ),
        }
    }
}

/// The shell lines that print what [`parse`] reads, for `target` (an address this tool put in
/// the outputs: shell-safe).
pub fn script(target: &str) -> String {
    format!(
        "route=$(ip -o route get {target} 2>&1 || true)\n\
         dev=$(printf '%s\\n' \"$route\" | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p')\n\
         echo \"route: $route\"\n\
         echo \"dev: $dev\"\n\
         echo \"mtu: $(cat /sys/class/net/$dev/mtu 2>/dev/null)\"\n"
    )
}

/// Reads what [`script`] printed.
pub fn parse(target: &str, out: &str) -> PathMtu {
    let field = |name: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let route = field("route:").unwrap_or_default();
    // "... dev ens5 src 10.0.0.5 uid 0 \    cache expires 587sec mtu 1500"
    let words: Vec<&str> = route.split_whitespace().collect();
    let route_mtu = words
        .windows(2)
        .find(|w| w[0] == "mtu")
        .and_then(|w| w[1].parse().ok());
    PathMtu {
        target: target.to_owned(),
        interface: field("dev:"),
        interface_mtu: field("mtu:").and_then(|m| m.parse().ok()),
        route_mtu,
        route,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_learned_path_mtu_and_an_interface_mtu_are_read() {
        let out = "route: 54.1.2.3 via 10.0.0.1 dev ens5 src 10.0.0.5 uid 0 \\    cache expires 587sec mtu 1500\ndev: ens5\nmtu: 9001\n";
        let m = parse("54.1.2.3", out);
        assert_eq!(m.interface.as_deref(), Some("ens5"));
        assert_eq!(m.interface_mtu, Some(9001));
        assert_eq!(m.route_mtu, Some(1500));
        assert!(
            m.line()
                .contains("path MTU to 54.1.2.3 learned by the kernel: 1500")
        );
        let none = parse(
            "10.0.0.9",
            "route: 10.0.0.9 dev ens5 src 10.0.0.5 uid 0 \\    cache\ndev: ens5\nmtu: 9001\n",
        );
        assert_eq!(none.route_mtu, None);
        assert!(
            none.line().contains("no smaller path MTU"),
            "{}",
            none.line()
        );
    }

    #[test]
    fn the_script_runs_here_against_loopback() {
        let Ok(out) = std::process::Command::new("bash")
            .arg("-c")
            .arg(script("127.0.0.1"))
            .output()
        else {
            return;
        };
        let m = parse("127.0.0.1", &String::from_utf8_lossy(&out.stdout));
        assert_eq!(m.interface.as_deref(), Some("lo"), "{m:?}");
        assert_eq!(m.interface_mtu, Some(65536), "{m:?}");
    }
}
