//! The boot scripts (EC2 user data) that turn a fresh Amazon Linux 2023 instance into an xbench
//! server, client or VPN gateway (WireGuard, or IPsec with strongSwan); and the WireGuard keys
//! the gateways use (IPsec's key is [`crate::ipsec::IpsecPsk`]).
//!
//! Scripts are plain bash run once by cloud-init as root. Every value put into them is checked
//! to be shell-safe first (scenario URLs, numbers, addresses, base64 keys). A boot that cannot
//! finish fails visibly: a line on the console, `failed: <why>` in [`BOOT_STATUS_PATH`] (which
//! `up` reads through SSM and reports with the host's name), a non-zero exit. The run's key is
//! never in a script: hosts read it from SSM Parameter Store. A gateway's script holds its
//! WireGuard private key or its tunnel's IPsec key, so scripts are never printed or logged by
//! this tool. Not for launching instances.

use std::fmt::{self, Write as _};
use std::net::Ipv4Addr;

use aws_smithy_types::base64;

use crate::cidr::Ipv4Cidr;
use crate::command;
use crate::error::Error;
use crate::ipsec::{self, IpsecPsk};
use crate::plan::{VpnEnd, WIREGUARD_PORT};
use crate::scenario::Scenario;
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

/// Where the xbench binary is installed on a host.
pub const XBENCH_PATH: &str = "/usr/local/bin/xbench";
/// Where a host keeps the run's pre-shared key (mode 0600, root).
pub const PSK_PATH: &str = "/etc/xbench-deploy/psk";
/// The file a host's boot script ends by writing: `ok`, or `failed: <why>`.
pub const BOOT_STATUS_PATH: &str = "/var/lib/xbench-deploy/boot-status";
/// The server's systemd unit.
pub const SERVER_UNIT_PATH: &str = "/etc/systemd/system/xbench-server.service";

/// How a host gets the xbench binary at boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetch {
    /// Download (a presigned URL of the run's bucket, or the scenario's `[xbench] url`) and
    /// check the SHA-256.
    Url {
        /// http(s) URL without single quotes.
        url: String,
        /// Expected SHA-256, lowercase hex.
        sha256: String,
    },
    /// Copy the run's own object with the host's instance profile (`aws s3 cp`), which may
    /// read that object and nothing else; no presigned URL, so nothing expires with the
    /// operator's credentials. Then check the SHA-256.
    S3 {
        /// Bucket name.
        bucket: String,
        /// Object key.
        key: String,
        /// The bucket's region.
        region: String,
        /// Expected SHA-256, lowercase hex.
        sha256: String,
    },
    /// Build with `cargo install --git` (slow).
    Cargo {
        /// Repository.
        git: String,
        /// Branch, tag or commit.
        rev: Option<String>,
    },
}

/// What the boot of an xbench host (server or client) needs besides the scenario.
#[derive(Debug, Clone)]
pub struct HostBoot<'a> {
    /// The run.
    pub run: &'a RunId,
    /// The host's plan key.
    pub host: &'a str,
    /// The host's region (where its key parameter is).
    pub region: &'a str,
    /// Where the binary comes from.
    pub fetch: &'a Fetch,
    /// The run's deletion-due time (RFC 3339 UTC, as tagged): the host powers itself off
    /// then.
    pub deletion_due: &'a str,
}

/// The head of every script: `set -euo pipefail`, and a failure that is visible — a line on the
/// console (`aws ec2 get-console-output`), `failed: <why>` in the boot-status file that `up`
/// reads through SSM, and a non-zero exit for cloud-init. The paths below `XB_ROOT` (empty on
/// a host), and the `XB_*` settings, let the tests run the script for real in a scratch
/// directory.
fn preamble(run: &RunId, host: &str, role: &str, due: &str) -> String {
    format!("{}{}", preamble_head(run, host, role), self_stop(host, due))
}

/// The systemd calendar form (`2025-06-01 20:00:00 UTC`) of an RFC 3339 UTC time as
/// [`crate::state::format_time`] writes it; `None` for anything else (nothing else may reach
/// a script).
pub fn calendar_time(rfc3339: &str) -> Option<String> {
    let (date, time) = rfc3339.strip_suffix('Z')?.split_once('T')?;
    let ok = |s: &str, n: usize, sep: char| {
        s.len() == n && s.chars().all(|c| c.is_ascii_digit() || c == sep)
    };
    (ok(date, 10, '-') && ok(time, 8, ':')).then(|| format!("{date} {time} UTC"))
}

/// A host that nobody tears down stops billing at the run's deletion-due time: a persistent
/// systemd timer on the host's own clock powers it off then, and the instance is launched
/// with `InstanceInitiatedShutdownBehavior=terminate`, so powering off terminates it. Written
/// first, before anything that can fail, so a host whose boot failed stops too; `Persistent`
/// fires at once on a boot after the time (a host that was stopped past it).
fn self_stop(host: &str, due: &str) -> String {
    // A time that is not ours cannot reach the script: the host then has no timer, and its
    // boot says so rather than inventing one.
    let Some(when) = calendar_time(due) else {
        return format!(
            "fail \"no deletion-due time to power off at (got '{}')\"\n",
            due.replace(['\'', '"', '\\', '$', '`'], "?")
        );
    };
    format!(
        "# Power off (and so terminate) at the run's deletion-due time, {due}, whoever tears down.\n\
         SYSTEMD=\"$XB_ROOT/etc/systemd/system\"\n\
         install -d -m 0755 \"$SYSTEMD\"\n\
         cat > \"$SYSTEMD/xbench-deletion-due.service\" <<'EOF'\n\
         [Unit]\n\
         Description=xbench-deploy: power off {host} at the run's deletion-due time\n\
         \n\
         [Service]\n\
         Type=oneshot\n\
         ExecStartPre=/bin/sh -c 'echo \"xbench-deploy: {host} reached its deletion-due time ({due}); powering off\" > /dev/console'\n\
         ExecStart=/usr/bin/systemctl poweroff\n\
         EOF\n\
         cat > \"$SYSTEMD/xbench-deletion-due.timer\" <<'EOF'\n\
         [Unit]\n\
         Description=xbench-deploy: the run's deletion-due time\n\
         \n\
         [Timer]\n\
         OnCalendar={when}\n\
         Persistent=true\n\
         AccuracySec=1s\n\
         \n\
         [Install]\n\
         WantedBy=timers.target\n\
         EOF\n\
         systemctl daemon-reload\n\
         systemctl enable --now xbench-deletion-due.timer || fail \"cannot arm the power-off at {due}\"\n"
    )
}

fn preamble_head(run: &RunId, host: &str, role: &str) -> String {
    format!(
        "#!/bin/bash\n\
         # xbench-deploy {role} host {host}, run {run}. Output goes to /var/log/cloud-init-output.log\n\
         # and the console; the outcome to {BOOT_STATUS_PATH}.\n\
         set -euo pipefail\n\
         : \"${{XB_ROOT:=}}\" \"${{XB_FETCH_ATTEMPTS:=5}}\" \"${{XB_FETCH_PAUSE:=10}}\" \"${{XB_PSK_ATTEMPTS:=30}}\" \"${{XB_CONSOLE:=/dev/console}}\"\n\
         ETC=\"$XB_ROOT/etc/xbench-deploy\" STATE=\"$XB_ROOT/var/lib/xbench-deploy\"\n\
         BIN=\"$XB_ROOT{XBENCH_PATH}\" UNIT=\"$XB_ROOT{SERVER_UNIT_PATH}\"\n\
         install -d -m 0755 \"$ETC\" \"$STATE\" \"$(dirname \"$BIN\")\" \"$(dirname \"$UNIT\")\"\n\
         rm -f \"$STATE/boot-status\"\n\
         console() {{ echo \"$*\"; {{ echo \"$*\" >> \"$XB_CONSOLE\"; }} 2>/dev/null || true; }}\n\
         fail() {{\n\
         \x20 trap - ERR\n\
         \x20 console \"xbench-deploy: boot FAILED on {host}: $*\"\n\
         \x20 printf 'failed: %s\\n' \"$*\" > \"$STATE/boot-status\"\n\
         \x20 exit 1\n\
         }}\n\
         trap 'fail \"line $LINENO: $BASH_COMMAND exited with $?\"' ERR\n\
         echo '{run}' > \"$ETC/run-id\"\n"
    )
}

fn done(host: &str) -> String {
    format!(
        "echo ok > \"$STATE/boot-status\"\n\
         console \"xbench-deploy: boot complete on {host}\"\n"
    )
}

fn tuning(s: &Scenario) -> String {
    match s.tcp_buffer_max_mib {
        None => String::new(),
        Some(mib) => {
            let bytes = u64::from(mib) * 1024 * 1024;
            format!(
                "# Larger TCP buffer ceilings, so one stream can fill a long fat pipe.\n\
                 if [ -z \"$XB_ROOT\" ]; then\n\
                 cat > /etc/sysctl.d/90-xbench-buffers.conf <<'EOF'\n\
                 net.core.rmem_max = {bytes}\n\
                 net.core.wmem_max = {bytes}\n\
                 net.ipv4.tcp_rmem = 4096 131072 {bytes}\n\
                 net.ipv4.tcp_wmem = 4096 16384 {bytes}\n\
                 EOF\n\
                 sysctl --system >/dev/null\n\
                 fi\n"
            )
        }
    }
}

/// Reads the run's key from Parameter Store with the instance profile's credentials (they can
/// take a few seconds to appear after boot, hence the retries).
fn fetch_psk(b: &HostBoot<'_>) -> String {
    let param = crate::aws::ssm::psk_parameter(b.run);
    let region = b.region;
    format!(
        "# The run's pre-shared key, from SSM Parameter Store (never in this script).\n\
         got=\n\
         for attempt in $(seq 1 \"$XB_PSK_ATTEMPTS\"); do\n\
         \x20 if (umask 077; aws ssm get-parameter --region '{region}' --name '{param}' --with-decryption \\\n\
         \x20      --query Parameter.Value --output text > \"$ETC/psk.new\" 2> \"$STATE/psk.err\"); then got=1; break; fi\n\
         \x20 sleep 5\n\
         done\n\
         [ -n \"$got\" ] || fail \"cannot read the run's key {param} in {region} (instance profile, or no route to SSM): $(tail -n 1 \"$STATE/psk.err\")\"\n\
         [ \"$(wc -c < \"$ETC/psk.new\")\" -ge 17 ] || fail \"the run's key {param} is empty\"\n\
         chmod 0600 \"$ETC/psk.new\"\n\
         mv \"$ETC/psk.new\" \"$ETC/psk\"\n\
         rm -f \"$STATE/psk.err\"\n"
    )
}

fn install_xbench(fetch: &Fetch) -> String {
    match fetch {
        Fetch::Url { url, sha256 } => format!(
            "# The xbench binary: downloaded, checked, and run once before anything relies on it.\n\
             tmp=$(mktemp)\n\
             got=\n\
             for attempt in $(seq 1 \"$XB_FETCH_ATTEMPTS\"); do\n\
             \x20 if curl -fsS --connect-timeout 10 --max-time 600 -o \"$tmp\" '{url}' 2> \"$STATE/fetch.err\"; then got=1; break; fi\n\
             \x20 echo \"xbench download failed (attempt $attempt of $XB_FETCH_ATTEMPTS): $(tail -n 1 \"$STATE/fetch.err\")\" >&2\n\
             \x20 sleep \"$XB_FETCH_PAUSE\"\n\
             done\n\
             [ -n \"$got\" ] || fail \"cannot download the xbench binary after $XB_FETCH_ATTEMPTS attempts: $(tail -n 1 \"$STATE/fetch.err\")\"\n\
             sum=$(sha256sum \"$tmp\" | cut -d' ' -f1)\n\
             [ \"$sum\" = '{sha256}' ] || fail \"the downloaded xbench binary has sha256 $sum, expected {sha256}\"\n\
             install -m 0755 \"$tmp\" \"$BIN\"\n\
             rm -f \"$tmp\" \"$STATE/fetch.err\"\n\
             \"$BIN\" --version > /dev/null 2> \"$STATE/version.err\" || fail \"xbench does not run on this host: $(head -n 1 \"$STATE/version.err\")\"\n"
        ),
        Fetch::S3 {
            bucket,
            key,
            region,
            sha256,
        } => format!(
            "# The xbench binary: the run's own object, read with this host's instance profile,\n\
             # checked, and run once before anything relies on it.\n\
             tmp=$(mktemp)\n\
             got=\n\
             for attempt in $(seq 1 \"$XB_FETCH_ATTEMPTS\"); do\n\
             \x20 if aws s3 cp --only-show-errors --region '{region}' 's3://{bucket}/{key}' \"$tmp\" 2> \"$STATE/fetch.err\"; then got=1; break; fi\n\
             \x20 echo \"xbench download failed (attempt $attempt of $XB_FETCH_ATTEMPTS): $(tail -n 1 \"$STATE/fetch.err\")\" >&2\n\
             \x20 sleep \"$XB_FETCH_PAUSE\"\n\
             done\n\
             [ -n \"$got\" ] || fail \"cannot copy the xbench binary s3://{bucket}/{key} after $XB_FETCH_ATTEMPTS attempts (instance profile, or no route to S3): $(tail -n 1 \"$STATE/fetch.err\")\"\n\
             sum=$(sha256sum \"$tmp\" | cut -d' ' -f1)\n\
             [ \"$sum\" = '{sha256}' ] || fail \"the downloaded xbench binary has sha256 $sum, expected {sha256}\"\n\
             install -m 0755 \"$tmp\" \"$BIN\"\n\
             rm -f \"$tmp\" \"$STATE/fetch.err\"\n\
             \"$BIN\" --version > /dev/null 2> \"$STATE/version.err\" || fail \"xbench does not run on this host: $(head -n 1 \"$STATE/version.err\")\"\n"
        ),
        Fetch::Cargo { git, rev } => {
            let rev = rev
                .as_ref()
                .map(|r| format!(" --rev '{r}'"))
                .unwrap_or_default();
            format!(
                "# Build from source: a Rust toolchain first (a few minutes).\n\
                 (dnf install -y gcc git || (apt-get update && apt-get install -y build-essential git curl))\n\
                 export HOME=/root\n\
                 curl --proto '=https' -fsSL https://sh.rustup.rs | sh -s -- -y --profile minimal\n\
                 /root/.cargo/bin/cargo install --locked --git '{git}'{rev} xbench-cli --root \"$XB_ROOT/usr/local\"\n\
                 \"$BIN\" --version > /dev/null || fail \"the xbench built from {git} does not run\"\n"
            )
        }
    }
}

/// The `xbench-server` systemd unit: `xbench server` with the run's key and only the
/// scenario's client addresses allowed (written at boot, and again by `up` once the public
/// addresses of client hosts are known). The key reaches the unprivileged service as a
/// systemd credential.
pub fn server_unit(run: &RunId, port: u16, allow: &[Ipv4Cidr]) -> String {
    // `%d`: the directory systemd puts the unit's credentials in.
    let argv = command::server_argv(port, None, "%d/psk", allow);
    format!(
        "[Unit]\n\
         Description=xbench server (xbench-deploy run {run})\n\
         Wants=network-online.target\n\
         After=network-online.target\n\
         StartLimitIntervalSec=60\n\
         StartLimitBurst=5\n\
         \n\
         [Service]\n\
         ExecStart={XBENCH_PATH} {}\n\
         LoadCredential=psk:{PSK_PATH}\n\
         # SIGTERM: running tests get --shutdown-grace to finish.\n\
         KillSignal=SIGTERM\n\
         TimeoutStopSec=30\n\
         Restart=on-failure\n\
         RestartSec=2\n\
         DynamicUser=yes\n\
         LimitNOFILE=65536\n\
         NoNewPrivileges=yes\n\
         ProtectSystem=strict\n\
         ProtectHome=yes\n\
         PrivateTmp=yes\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        argv.join(" ")
    )
}

/// The shell lines that write the server unit and (re)start it, failing the boot (or the
/// command) when it does not stay up.
pub fn install_server_unit(run: &RunId, port: u16, allow: &[Ipv4Cidr]) -> String {
    format!(
        "cat > \"$UNIT\" <<'EOF'\n\
         {}\
         EOF\n\
         systemctl daemon-reload\n\
         systemctl enable xbench-server.service\n\
         systemctl restart xbench-server.service\n\
         sleep 2\n\
         systemctl is-active --quiet xbench-server.service || fail \"xbench-server does not stay up: $(journalctl -u xbench-server -n 3 --no-pager 2>&1 | tail -n 1)\"\n",
        server_unit(run, port, allow)
    )
}

/// The script of a server host: the key, xbench, and `xbench server` under systemd with
/// `--psk-file` and `--allow`.
pub fn server(s: &Scenario, b: &HostBoot<'_>, allow: &[Ipv4Cidr]) -> String {
    format!(
        "{}{}{}{}{}{}",
        preamble(b.run, b.host, "server", b.deletion_due),
        tuning(s),
        fetch_psk(b),
        install_xbench(b.fetch),
        install_server_unit(b.run, s.port, allow),
        done(b.host),
    )
}

/// The script of a client host: the key, xbench, and the commands to run in
/// `/etc/xbench-deploy/commands` (for a person; `run` sends its own through SSM).
pub fn client(s: &Scenario, b: &HostBoot<'_>, commands: &[String]) -> String {
    let mut list = String::new();
    for c in commands {
        let _ = writeln!(list, "{c}");
    }
    format!(
        "{}{}{}{}\
         cat > \"$ETC/commands\" <<'EOF'\n\
         {list}\
         EOF\n\
         cp \"$ETC/commands\" \"$XB_ROOT/etc/motd.d/90-xbench\" 2>/dev/null || true\n\
         {}",
        preamble(b.run, b.host, "client", b.deletion_due),
        tuning(s),
        fetch_psk(b),
        install_xbench(b.fetch),
        done(b.host),
    )
}

/// What every VPN gateway does first: forward packets, and accept them from either side.
fn forwarding() -> &'static str {
    "cat > /etc/sysctl.d/90-xbench-forward.conf <<'EOF'\n\
     net.ipv4.ip_forward = 1\n\
     net.ipv4.conf.all.rp_filter = 0\n\
     EOF\n\
     sysctl --system >/dev/null\n"
}

/// What every VPN gateway does last: hosts behind it have a 9001-byte MTU, so the MSS of TCP
/// connections it forwards is clamped: each of `rules` is an nft rule's match and action.
fn mss_clamp(why: &str, rules: &[String]) -> String {
    let add: String = rules
        .iter()
        .map(|r| format!("\x20 nft add rule inet xbench forward {r}\n"))
        .collect();
    format!(
        "# Hosts behind us have a 9001-byte MTU; {why}.\n\
         command -v nft >/dev/null || {{ command -v apt-get >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y nftables; }} || dnf install -y nftables || true\n\
         if command -v nft >/dev/null; then\n\
         \x20 nft add table inet xbench\n\
         \x20 nft add chain inet xbench forward '{{ type filter hook forward priority mangle; }}'\n\
         {add}\
         else\n\
         \x20 echo 'warning: no nft; TCP MSS is not clamped'\n\
         fi\n"
    )
}

/// The MSS a forwarded TCP connection through an IPsec tunnel is clamped to: a 1500-byte
/// internet path (between regions, or through the internet gateway) less IPv4 and TCP headers
/// (40) and ESP in UDP with AES-GCM (outer IPv4 20, UDP 8, ESP header 8, IV 8, padding and
/// trailer up to 5, ICV 16: 65), rounded down with a margin.
pub const IPSEC_MSS: u16 = 1360;

/// The script of a WireGuard gateway: IP forwarding, a `wg0` interface through
/// systemd-networkd (no packages needed on Amazon Linux 2023), a route to the far subnet, and
/// TCP MSS clamping for traffic forwarded into the smaller-MTU tunnel.
pub fn wireguard_gateway(
    run: &RunId,
    host: &str,
    due: &str,
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
        "{}{}\
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
         {}{}",
        preamble(run, host, "vpn gateway", due),
        forwarding(),
        mss_clamp(
            "clamp MSS so TCP fits the 1420-byte tunnel",
            &["tcp flags syn tcp option maxseg size set rt mtu".to_owned()]
        ),
        done(host),
        private = own.private,
    )
}

/// Debian and Ubuntu's packages of strongSwan's swanctl daemon (`charon-systemd`, which pulls
/// in `strongswan-swanctl`) and of the openssl plugin the proposals need (AES-GCM, ECP-256):
/// all in Ubuntu's main component, so the default gateway image (Ubuntu 24.04) installs them
/// from its own repositories.
pub const STRONGSWAN_APT_PACKAGES: &str = "charon-systemd libstrongswan-standard-plugins";

/// strongSwan from the image's own repositories, or a boot that fails saying which image
/// lacks it: apt on Debian and Ubuntu (waiting for the package lock, which cloud-init and
/// unattended upgrades hold for a while after boot), dnf elsewhere. Each manager's own words
/// are kept; one never hides the other's.
fn install_strongswan() -> String {
    format!(
        "# strongSwan: charon (IKEv2) configured by swanctl, from this image's repositories.\n\
         if ! command -v swanctl >/dev/null; then\n\
         \x20 if command -v apt-get >/dev/null; then\n\
         \x20   got=\n\
         \x20   for attempt in 1 2 3; do\n\
         \x20     if {{ apt-get -o DPkg::Lock::Timeout=300 update && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends {STRONGSWAN_APT_PACKAGES}; }} > \"$STATE/strongswan.err\" 2>&1; then got=1; break; fi\n\
         \x20     sleep 10\n\
         \x20   done\n\
         \x20   [ -n \"$got\" ] || fail \"cannot install strongSwan ({STRONGSWAN_APT_PACKAGES}) with apt-get on $(. /etc/os-release; echo \"$PRETTY_NAME\"): $(tail -n 1 \"$STATE/strongswan.err\")\"\n\
         \x20 elif command -v dnf >/dev/null; then\n\
         \x20   dnf install -y strongswan > \"$STATE/strongswan.err\" 2>&1 || fail \"cannot install strongSwan with dnf on $(. /etc/os-release; echo \"$PRETTY_NAME\") (Amazon Linux 2023's repositories do not carry it; the default gateway_ami, ubuntu-24.04, does): $(tail -n 1 \"$STATE/strongswan.err\")\"\n\
         \x20 else\n\
         \x20   fail \"this image has no swanctl (strongSwan) and neither apt-get nor dnf to install it with\"\n\
         \x20 fi\n\
         fi\n\
         command -v swanctl >/dev/null || fail \"strongSwan was installed but there is no swanctl\"\n"
    )
}

/// Where an IPsec gateway's boot script writes its swanctl file, below the swanctl directory
/// the host's strongSwan package uses (`/etc/strongswan/swanctl` on Fedora-family systems
/// such as Amazon Linux, `/etc/swanctl` on Debian); the namespace test reads it back from the
/// script.
pub fn swanctl_file(path: &str) -> String {
    format!("conf.d/{}.conf", ipsec::connection_name(path))
}

/// The script of an IPsec gateway: IP forwarding, strongSwan (from the image's own
/// repositories when it lacks it; the default gateway image is Ubuntu 24.04), the tunnel's
/// swanctl file with its key (mode 0600), charon started and the
/// file loaded (the client side then dials at once), and TCP MSS clamping. The instances
/// have kernel IPsec (xfrm); the namespace test runs the same file with userspace ESP instead.
pub fn ipsec_gateway(
    run: &RunId,
    host: &str,
    due: &str,
    vpn: &VpnEnd,
    psk: &IpsecPsk,
    peer_address: Option<Ipv4Addr>,
) -> String {
    let conf = ipsec::swanctl_conf(vpn, host, psk, peer_address);
    let file = swanctl_file(&vpn.path);
    format!(
        "{}{}{}\
         SWANCTL=/etc/strongswan/swanctl\n\
         [ -d \"$SWANCTL\" ] || SWANCTL=/etc/swanctl\n\
         install -d -m 0750 \"$SWANCTL/conf.d\"\n\
         umask 077\n\
         cat > \"$SWANCTL/{file}\" <<'EOF'\n\
         {conf}\
         EOF\n\
         umask 022\n\
         systemctl enable strongswan\n\
         systemctl restart strongswan\n\
         loaded=\n\
         for attempt in $(seq 1 10); do\n\
         \x20 if swanctl --load-all > \"$STATE/swanctl.err\" 2>&1; then loaded=1; break; fi\n\
         \x20 sleep 2\n\
         done\n\
         [ -n \"$loaded\" ] || fail \"swanctl --load-all failed: $(tail -n 1 \"$STATE/swanctl.err\")\"\n\
         {}{}",
        preamble(run, host, "vpn gateway", due),
        forwarding(),
        install_strongswan(),
        mss_clamp(
            "clamp the MSS of connections with the far subnet, both ways (its end may be your own \
             host, which clamps nothing), so TCP fits ESP over a 1500-byte path",
            &["daddr", "saddr"].map(|dir| {
                format!(
                    "ip {dir} {} tcp flags syn tcp option maxseg size set {IPSEC_MSS}",
                    vpn.remote_subnet
                )
            })
        ),
        done(host),
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
        let fetch = Fetch::Url {
            url: "https://example.com/xbench?X-Amz-Signature=ab&X-Amz-Date=1".into(),
            sha256: "a".repeat(64),
        };
        let boot = HostBoot {
            run: &run,
            host: "server-eu-west-2",
            region: "eu-west-2",
            fetch: &fetch,
            deletion_due: "2025-06-01T20:00:00Z",
        };
        let allow = ["10.1.1.0/24".parse().unwrap()];
        let srv = server(&s, &boot, &allow);
        assert!(srv.contains(
            "ExecStart=/usr/local/bin/xbench server -p 5201 --psk-file %d/psk --allow 10.1.1.0/24"
        ));
        assert!(srv.contains("LoadCredential=psk:/etc/xbench-deploy/psk"));
        assert!(srv.contains(&format!("/xbench/{run}/psk")));
        assert!(
            !srv.contains("Restart=always"),
            "a broken server must not restart for ever"
        );
        bash_parses(&srv);
        let boot = HostBoot {
            host: "client-vpn",
            region: "us-east-1",
            ..boot
        };
        bash_parses(&client(
            &s,
            &boot,
            &["xbench client 10.2.0.10 --label vpn".into()],
        ));
        let keys = WgKeys::generate().unwrap();
        let peer = WgKeys::generate().unwrap();
        let mut vpn = VpnEnd {
            path: "vpn".into(),
            flavour: crate::scenario::VpnFlavour::WireGuard,
            peer_host: "gw-vpn-server".into(),
            tunnel_address: Ipv4Addr::new(169, 254, 200, 1),
            local_subnet: "10.1.1.0/24".parse().unwrap(),
            remote_subnet: "10.2.0.0/24".parse().unwrap(),
            initiator: true,
        };
        let gw = wireguard_gateway(
            &run,
            "gw-vpn-client",
            "2025-06-01T20:00:00Z",
            &vpn,
            &keys,
            &peer.public,
            Some(Ipv4Addr::new(192, 0, 2, 9)),
        );
        assert!(gw.contains("Endpoint=192.0.2.9:51820"));
        assert!(gw.contains("AllowedIPs=10.2.0.0/24, 169.254.200.2/32"));
        bash_parses(&gw);

        vpn.flavour = crate::scenario::VpnFlavour::Ipsec;
        let psk = IpsecPsk::generate().unwrap();
        let gw = ipsec_gateway(
            &run,
            "gw-vpn-client",
            "2025-06-01T20:00:00Z",
            &vpn,
            &psk,
            Some(Ipv4Addr::new(192, 0, 2, 9)),
        );
        let conf = ipsec::swanctl_conf(
            &vpn,
            "gw-vpn-client",
            &psk,
            Some(Ipv4Addr::new(192, 0, 2, 9)),
        );
        assert!(
            gw.contains(&format!(
                "cat > \"$SWANCTL/conf.d/xbench-vpn.conf\" <<'EOF'\n{conf}EOF\n"
            )),
            "{gw}"
        );
        assert!(gw.contains("umask 077\ncat > \"$SWANCTL"));
        assert!(gw.contains("net.ipv4.ip_forward = 1"));
        assert!(gw.contains(
            "nft add rule inet xbench forward ip daddr 10.2.0.0/24 tcp flags syn tcp option maxseg size set 1360"
        ));
        bash_parses(&gw);
    }

    #[test]
    fn every_script_arms_the_power_off_before_anything_can_fail() {
        assert_eq!(
            calendar_time("2025-06-01T20:00:05Z").as_deref(),
            Some("2025-06-01 20:00:05 UTC")
        );
        for bad in [
            "2025-06-01 20:00:05Z",
            "2025-06-01T20:00:05",
            "x'; rm -rf /;'Z",
            "",
        ] {
            assert_eq!(calendar_time(bad), None, "{bad}");
        }
        let run = RunId::generate(SystemTime::now()).unwrap();
        let script = preamble(&run, "h", "server", "2025-06-01T20:00:05Z");
        let timer = script.find("OnCalendar=2025-06-01 20:00:05 UTC\n").unwrap();
        let trap = script.find("trap 'fail").unwrap();
        assert!(trap < timer, "fail() exists before the timer is armed");
        assert!(script.contains("Persistent=true"));
        assert!(script.contains("ExecStart=/usr/bin/systemctl poweroff"));
        // A malformed time fails the boot rather than leaving a host without its stop.
        let script = preamble(&run, "h", "server", "soon");
        assert!(script.ends_with("fail \"no deletion-due time to power off at (got 'soon')\"\n"));
        bash_parses(&script);
    }

    #[test]
    fn keys_are_32_bytes_and_debug_hides_the_private_half() {
        let k = WgKeys::generate().unwrap();
        assert_eq!(base64::decode(&k.public).unwrap().len(), 32);
        assert_eq!(base64::decode(&k.private).unwrap().len(), 32);
        assert!(!format!("{k:?}").contains(&k.private));
    }
}
