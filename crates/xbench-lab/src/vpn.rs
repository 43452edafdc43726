//! The `vpn` path's tunnel: two OpenVPN daemons in point-to-point TLS mode, one per gateway
//! namespace, over UDP on the (possibly impaired) underlay — a userspace software VPN like the
//! Openswan gateways of the field reports.
//!
//! Each side gets a throwaway self-signed certificate (made with `openssl`), and each pins the
//! other's fingerprint (`--peer-fingerprint`, OpenVPN 2.6's replacement for static keys, which
//! are deprecated). The data channel negotiates AES-256-GCM. OpenVPN attaches to the `vpn` TUN
//! device the lab created and configured, so addresses and routes do not depend on it.
//! Not for: WireGuard or IPsec (no kernel support on the CI machines).

use std::path::{Path, PathBuf};

use crate::error::LabError;
use crate::sys::cmd;

/// UDP port of both daemons.
pub(crate) const PORT: u16 = 1194;

/// Environment variable that overrides where `openvpn` is looked for.
pub const OPENVPN_ENV: &str = "XBENCH_LAB_OPENVPN";

/// Finds the `openvpn` binary (or the override in [`OPENVPN_ENV`]).
pub fn openvpn_program() -> Result<PathBuf, LabError> {
    openvpn_program_from(std::env::var_os(OPENVPN_ENV))
}

fn openvpn_program_from(over: Option<std::ffi::OsString>) -> Result<PathBuf, LabError> {
    let missing = || LabError::MissingProgram {
        program: "openvpn".into(),
        package: "openvpn",
        purpose: "the vpn path",
    };
    match over {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            if cmd::is_executable(&p) {
                Ok(p)
            } else {
                Err(missing())
            }
        }
        _ => cmd::which("openvpn").ok_or_else(missing),
    }
}

/// Certificate, key and fingerprint of one side.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    pub(crate) fingerprint: String,
}

/// Makes a self-signed P-256 certificate for `name` in `dir`.
pub(crate) fn make_identity(dir: &Path, name: &str) -> Result<Identity, LabError> {
    cmd::require("openssl", "openssl", "the vpn path's certificates")?;
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::io(format!("cannot create {}", dir.display()), e))?;
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let s = |p: &Path| p.to_string_lossy().into_owned();
    cmd::run(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-days",
            "30",
            "-keyout",
            &s(&key),
            "-out",
            &s(&cert),
        ],
    )?;
    let out = cmd::run(
        "openssl",
        &[
            "x509",
            "-noout",
            "-fingerprint",
            "-sha256",
            "-in",
            &s(&cert),
        ],
    )?;
    let fingerprint = out
        .trim()
        .rsplit('=')
        .next()
        .filter(|f| f.contains(':'))
        .ok_or_else(|| LabError::Command {
            command: "openssl x509 -fingerprint".into(),
            detail: format!("unexpected output `{}`", out.trim()),
        })?
        .to_owned();
    Ok(Identity {
        cert,
        key,
        fingerprint,
    })
}

/// Arguments of one daemon. `server` plays the TLS server (the client-side gateway).
pub(crate) fn args(
    dev: &str,
    local: std::net::Ipv4Addr,
    remote: std::net::Ipv4Addr,
    me: &Identity,
    peer: &Identity,
    server: bool,
) -> Vec<String> {
    let mut a: Vec<String> = [
        "--dev",
        dev,
        "--dev-type",
        "tun",
        "--proto",
        "udp",
        "--disable-dco", // no ovpn-dco module on the CI kernels; be explicit, not probed
        "--verb",
        "3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend([
        "--local".into(),
        local.to_string(),
        "--lport".into(),
        PORT.to_string(),
        "--remote".into(),
        remote.to_string(),
        "--rport".into(),
        PORT.to_string(),
        "--cert".into(),
        me.cert.to_string_lossy().into_owned(),
        "--key".into(),
        me.key.to_string_lossy().into_owned(),
        "--peer-fingerprint".into(),
        peer.fingerprint.clone(),
    ]);
    if server {
        a.extend(["--tls-server".into(), "--dh".into(), "none".into()]);
    } else {
        a.push("--tls-client".into());
    }
    a
}

/// The line OpenVPN logs once the tunnel carries data.
pub(crate) const READY_LINE: &str = "Initialization Sequence Completed";

/// The last `n` lines of a log, for error messages.
pub(crate) fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(n)..].join("\n");
    if tail.is_empty() {
        format!("(nothing in {})", path.display())
    } else {
        format!("end of {}:\n{tail}", path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_openvpn_names_the_debian_package() {
        let e = openvpn_program_from(Some("/nonexistent/openvpn".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("apt-get install openvpn"), "{e}");
    }

    #[test]
    fn server_side_needs_no_dh_and_pins_the_peer() {
        let id = |n: &str| Identity {
            cert: n.into(),
            key: n.into(),
            fingerprint: format!("{n}:FP"),
        };
        let a = args(
            "vpn",
            "198.18.2.1".parse().unwrap(),
            "198.18.4.2".parse().unwrap(),
            &id("a"),
            &id("b"),
            true,
        );
        let s = a.join(" ");
        assert!(s.contains("--peer-fingerprint b:FP"), "{s}");
        assert!(s.contains("--tls-server --dh none"), "{s}");
        assert!(s.contains("--remote 198.18.4.2"), "{s}");
    }
}
