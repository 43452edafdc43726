//! Hops' reverse names, within a time limit: each lookup runs on its own thread and those not
//! done by the limit are left behind (the system resolver cannot be cancelled), so a slow or
//! absent DNS never delays a report by more than the limit.

use std::collections::HashMap;
use std::ffi::CStr;
use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The names of `addrs` that resolved within `within`, all lookups together.
pub(crate) fn reverse(addrs: &[IpAddr], within: Duration) -> HashMap<IpAddr, String> {
    let deadline = Instant::now() + within;
    let (tx, rx) = mpsc::channel();
    let mut asked = 0;
    let mut unique: Vec<IpAddr> = addrs.to_vec();
    unique.sort();
    unique.dedup();
    for a in unique {
        let tx = tx.clone();
        let spawned = std::thread::Builder::new()
            .name("xbench-rdns".into())
            .spawn(move || {
                let _ = tx.send((a, lookup(a)));
            });
        if spawned.is_ok() {
            asked += 1;
        }
    }
    drop(tx);
    let mut names = HashMap::new();
    for _ in 0..asked {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        match rx.recv_timeout(left) {
            Ok((a, Some(n))) => {
                names.insert(a, n);
            }
            Ok((_, None)) => {}
            Err(_) => break,
        }
    }
    names
}

/// `getnameinfo` with `NI_NAMEREQD`: a name, or `None` when there is none.
fn lookup(a: IpAddr) -> Option<String> {
    let sa: socket2::SockAddr = SocketAddr::new(a, 0).into();
    let mut host = [0 as libc::c_char; 256];
    // SAFETY: `sa` is a valid socket address of the length given; `host` is a buffer of the
    // length given, which getnameinfo NUL-terminates on success; no service is asked for.
    let rc = unsafe {
        libc::getnameinfo(
            sa.as_ptr().cast(),
            sa.len(),
            host.as_mut_ptr(),
            host.len() as libc::socklen_t,
            std::ptr::null_mut(),
            0,
            libc::NI_NAMEREQD,
        )
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: getnameinfo succeeded, so `host` holds a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(host.as_ptr()) };
    Some(name.to_string_lossy().into_owned()).filter(|n| n.parse::<IpAddr>().is_err())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_resolves_and_the_limit_holds() {
        let t = Instant::now();
        let names = reverse(&[IpAddr::from([127, 0, 0, 1])], Duration::from_secs(2));
        assert!(t.elapsed() < Duration::from_secs(4));
        // /etc/hosts names 127.0.0.1 on every system this runs on.
        assert!(
            names.contains_key(&IpAddr::from([127, 0, 0, 1])),
            "{names:?}"
        );
        // Nothing to look up: at once.
        assert!(reverse(&[], Duration::from_secs(1)).is_empty());
    }
}
