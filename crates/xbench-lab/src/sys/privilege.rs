//! Whether this process may build a lab: creating namespaces needs `CAP_SYS_ADMIN` (iproute2
//! bind-mounts them under /run/netns), links, routes and qdiscs need `CAP_NET_ADMIN`.
//! Checked up front so a user gets one clear message instead of the first `ip` failure.

use crate::error::LabError;

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;

/// Ok when the effective capabilities include both; otherwise names the missing ones.
pub fn check() -> Result<(), LabError> {
    let caps = effective().unwrap_or(0);
    let missing: Vec<&str> = [
        (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
    ]
    .into_iter()
    .filter(|(bit, _)| caps & (1u64 << bit) == 0)
    .map(|(_, name)| name)
    .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(LabError::Permission {
            missing: missing.join(" and "),
        })
    }
}

/// True when [`check`] passes.
pub fn sufficient() -> bool {
    check().is_ok()
}

/// The effective capability set from /proc/self/status.
fn effective() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}
