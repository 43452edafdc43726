//! The boot scripts (EC2 user data) that turn a fresh Amazon Linux 2023 instance into an xbench
//! server, client or WireGuard gateway; and the WireGuard keys the gateways use.
//!
//! Scripts are plain bash run once by cloud-init as root. Every value put into them is checked
//! to be shell-safe first (scenario URLs, numbers, addresses, base64 keys). A gateway's script
//! holds its WireGuard private key, so scripts are never printed or logged by this tool. Not for
//! launching instances.

use std::fmt::{self, Write as _};
use std::net::Ipv4Addr;

use aws_smithy_types::base64;

use crate::error::Error;
use crate::plan::{VpnEnd, WIREGUARD_PORT};
use crate::scenario::{Scenario, XbenchInstall};
use crate::state::RunId;

/// A WireGuard key pair. `Debug` shows only the public half.
#[derive(Clone)]
pub struct WgKeys {
    private: String,
    /// Base64 public key.
    pub public: String,
}

impl fmt::Debug for WgKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WgKeys")
            .field("private", &"** redacted **")
            .field("public", &self.public)
            .finish()
    }
}

impl WgKeys {
    /// A fresh random key pair.
    pub fn generate() -> Result<Self, Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
        let secret = x25519_dalek::StaticSecret::from(bytes);
        let public = x25519_dalek::PublicKey::from(&secret);
        Ok(WgKeys {
            private: base64::encode(secret.to_bytes()),
            public: base64::encode(public.as_bytes()),
        })
    }
}

/// User data as EC2 wants it (base64).
pub fn encode(script: &str) -> String {
    base64::encode(script.as_bytes())
}

fn preamble(run: &RunId, host: &str, role: &str) -> String {
    format!(
        "#!/bin/bash\n\
         # xbench-deploy {role} host {host}, run {run}. Output goes to /var/log/cloud-init-output.log.\n\
         set -euo pipefail\n\
         install -d -m 0755 /etc/xbench-deploy\n\
         echo '{run}' > /etc/xbench-deploy/run-id\n"
    )
}

fn tuning(s: &Scenario) -> String {
    match s.tcp_buffer_max_mib {
        None => String::new(),
        Some(mib) => {
            let bytes = u64::from(mib) * 1024 * 1024;
            format!(
                "# Larger TCP buffer ceilings, so one stream can fill a long fat pipe.\n\
                 cat > /etc/sysctl.d/90-xbench-buffers.conf <<'EOF'\n\
                 net.core.rmem_max = {bytes}\n\
                 net.core.wmem_max = {bytes}\n\
                 net.ipv4.tcp_rmem = 4096 131072 {bytes}\n\
                 net.ipv4.tcp_wmem = 4096 16384 {bytes}\n\
                 EOF\n\
                 sysctl --system >/dev/null\n"
            )
        }
    }
}

fn install_xbench(s: &Scenario) -> String {
    match &s.xbench {
        XbenchInstall::Url { url, sha256 } => {
            let mut out = format!(
                "tmp=$(mktemp)\n\
                 for attempt in 1 2 3 4 5; do\n\
                 \x20 if curl -fsSL --retry 3 -o \"$tmp\" '{url}'; then break; fi\n\
                 \x20 echo \"xbench download failed (attempt $attempt)\"; sleep 10\n\
                 done\n"
            );
            if let Some(sum) = sha256 {
                let _ = writeln!(out, "echo '{sum}  '\"$tmp\" | sha256sum -c -");
            }
            out.push_str("install -m 0755 \"$tmp\" /usr/local/bin/xbench\nrm -f \"$tmp\"\n");
            out
        }
        XbenchInstall::CargoGit { git, rev } => {
            let rev = rev
                .as_ref()
                .map(|r| format!(" --rev '{r}'"))
                .unwrap_or_default();
            format!(
                "# Build from source: a Rust toolchain first (a few minutes).\n\
                 (dnf install -y gcc git || (apt-get update && apt-get install -y build-essential git curl))\n\
                 export HOME=/root\n\
                 curl --proto '=https' -fsSL https://sh.rustup.rs | sh -s -- -y --profile minimal\n\
                 /root/.cargo/bin/cargo install --locked --git '{git}'{rev} xbench-cli --root /usr/local\n"
            )
        }
    }
}

/// The script of a server host: install xbench and run `xbench server` under systemd.
pub fn server(s: &Scenario, run: &RunId, host: &str) -> String {
    let port = s.port;
    format!(
        "{}{}{}\
         cat > /etc/systemd/system/xbench-server.service <<'EOF'\n\
         [Unit]\n\
         Description=xbench server (xbench-deploy)\n\
         Wants=network-online.target\n\
         After=network-online.target\n\
         \n\
         [Service]\n\
         ExecStart=/usr/local/bin/xbench server -p {port}\n\
         DynamicUser=yes\n\
         Restart=always\n\
         RestartSec=2\n\
         LimitNOFILE=65536\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n\
         EOF\n\
         systemctl daemon-reload\n\
         systemctl enable --now xbench-server.service\n",
        preamble(run, host, "server"),
        tuning(s),
        install_xbench(s),
    )
}

/// The script of a client host: install xbench and leave the commands to run in
/// `/etc/xbench-deploy/commands`.
pub fn client(s: &Scenario, run: &RunId, host: &str, commands: &[String]) -> String {
    let mut list = String::new();
    for c in commands {
        let _ = writeln!(list, "{c}");
    }
    format!(
        "{}{}{}\
         cat > /etc/xbench-deploy/commands <<'EOF'\n\
         {list}\
         EOF\n\
         cp /etc/xbench-deploy/commands /etc/motd.d/90-xbench 2>/dev/null || true\n",
        preamble(run, host, "client"),
        tuning(s),
        install_xbench(s),
    )
}

/// The script of a WireGuard gateway: IP forwarding, a `wg0` interface through
/// systemd-networkd (no packages needed on Amazon Linux 2023), a route to the far subnet, and
/// TCP MSS clamping for traffic forwarded into the smaller-MTU tunnel.
pub fn gateway(
    run: &RunId,
    host: &str,
    vpn: &VpnEnd,
    own: &WgKeys,
    peer_public: &str,
    peer_endpoint: Option<Ipv4Addr>,
) -> String {
    let endpoint = peer_endpoint
        .map(|ip| format!("Endpoint={ip}:{WIREGUARD_PORT}\n"))
        .unwrap_or_default();
    let remote = vpn.remote_subnet;
    let tunnel = vpn.tunnel_address;
    let peer_tunnel = Ipv4Addr::from(if vpn.initiator {
        u32::from(tunnel) + 1
    } else {
        u32::from(tunnel) - 1
    });
    format!(
        "{}\
         cat > /etc/sysctl.d/90-xbench-forward.conf <<'EOF'\n\
         net.ipv4.ip_forward = 1\n\
         net.ipv4.conf.all.rp_filter = 0\n\
         EOF\n\
         sysctl --system >/dev/null\n\
         install -d -m 0755 /etc/systemd/network\n\
         umask 077\n\
         printf '%s\\n' '{private}' > /etc/systemd/network/90-xbench-wg0.key\n\
         chown root:systemd-network /etc/systemd/network/90-xbench-wg0.key\n\
         chmod 0640 /etc/systemd/network/90-xbench-wg0.key\n\
         umask 022\n\
         cat > /etc/systemd/network/90-xbench-wg0.netdev <<'EOF'\n\
         [NetDev]\n\
         Name=wg0\n\
         Kind=wireguard\n\
         MTUBytes=1420\n\
         \n\
         [WireGuard]\n\
         PrivateKeyFile=/etc/systemd/network/90-xbench-wg0.key\n\
         ListenPort={WIREGUARD_PORT}\n\
         \n\
         [WireGuardPeer]\n\
         PublicKey={peer_public}\n\
         AllowedIPs={remote}, {peer_tunnel}/32\n\
         {endpoint}\
         PersistentKeepalive=25\n\
         EOF\n\
         cat > /etc/systemd/network/90-xbench-wg0.network <<'EOF'\n\
         [Match]\n\
         Name=wg0\n\
         \n\
         [Network]\n\
         Address={tunnel}/30\n\
         \n\
         [Route]\n\
         Destination={remote}\n\
         EOF\n\
         systemctl enable systemd-networkd\n\
         systemctl restart systemd-networkd\n\
         networkctl reload || true\n\
         # Hosts behind us have a 9001-byte MTU; clamp MSS so TCP fits the 1420-byte tunnel.\n\
         command -v nft >/dev/null || dnf install -y nftables || true\n\
         if command -v nft >/dev/null; then\n\
         \x20 nft add table inet xbench\n\
         \x20 nft add chain inet xbench forward '{{ type filter hook forward priority mangle; }}'\n\
         \x20 nft add rule inet xbench forward tcp flags syn tcp option maxseg size set rt mtu\n\
         else\n\
         \x20 echo 'warning: no nft; TCP MSS is not clamped'\n\
         fi\n",
        preamble(run, host, "vpn gateway"),
        private = own.private,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn scenario() -> Scenario {
        Scenario::from_toml(
            "name='t'\ninstance_type='m5.large'\ntcp_buffer_max_mib=64\n[xbench]\nurl='https://example.com/xbench'\nsha256='aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'\n[[vpc]]\nregion='us-east-1'\ncidr='10.1.0.0/16'\n[[vpc]]\nregion='eu-west-2'\ncidr='10.2.0.0/16'\n[[path]]\nkind='vpn'\nclient='us-east-1'\nserver='eu-west-2'\n",
        )
        .unwrap()
    }

    fn bash_parses(script: &str) {
        let Ok(mut child) = std::process::Command::new("bash")
            .arg("-n")
            .stdin(std::process::Stdio::piped())
            .spawn()
        else {
            eprintln!("no bash: syntax not checked");
            return;
        };
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        assert!(
            child.wait().unwrap().success(),
            "bash -n refused:\n{script}"
        );
    }

    #[test]
    fn scripts_are_valid_bash() {
        let s = scenario();
        let run = RunId::generate(SystemTime::now()).unwrap();
        let srv = server(&s, &run, "server-eu-west-2");
        assert!(srv.contains("xbench server -p 5201"));
        assert!(srv.contains("sha256sum -c"));
        bash_parses(&srv);
        bash_parses(&client(
            &s,
            &run,
            "client-vpn",
            &["xbench client 10.2.0.10 --label vpn".into()],
        ));
        let keys = WgKeys::generate().unwrap();
        let peer = WgKeys::generate().unwrap();
        let vpn = VpnEnd {
            path: "vpn".into(),
            peer_host: "gw-vpn-server".into(),
            tunnel_address: Ipv4Addr::new(169, 254, 200, 1),
            remote_subnet: "10.2.0.0/24".parse().unwrap(),
            initiator: true,
        };
        let gw = gateway(
            &run,
            "gw-vpn-client",
            &vpn,
            &keys,
            &peer.public,
            Some(Ipv4Addr::new(192, 0, 2, 9)),
        );
        assert!(gw.contains("Endpoint=192.0.2.9:51820"));
        assert!(gw.contains("AllowedIPs=10.2.0.0/24, 169.254.200.2/32"));
        bash_parses(&gw);
    }

    #[test]
    fn keys_are_32_bytes_and_debug_hides_the_private_half() {
        let k = WgKeys::generate().unwrap();
        assert_eq!(base64::decode(&k.public).unwrap().len(), 32);
        assert_eq!(base64::decode(&k.private).unwrap().len(), 32);
        assert!(!format!("{k:?}").contains(&k.private));
    }
}
