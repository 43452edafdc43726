//! Named network namespaces as iproute2 keeps them (bind mounts under /run/netns): create,
//! delete, list, and run code or programs inside one.
//!
//! A namespace is entered per thread (`setns` changes only the calling thread), so
//! [`run_in`] uses a short-lived thread and the caller's threads stay where they were;
//! [`spawn_in`] enters in the child between fork and exec. Sockets and TUN devices opened
//! inside stay bound to that namespace wherever they are used afterwards.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::error::LabError;
use crate::sys::cmd;

/// Where iproute2 keeps named namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// The bind mount of namespace `name`.
pub fn path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

/// True when namespace `name` exists.
pub fn exists(name: &str) -> bool {
    path(name).exists()
}

/// Names of all named namespaces.
pub fn list() -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    v.sort();
    v
}

/// Creates namespace `name` with its loopback up.
pub fn add(name: &str) -> Result<(), LabError> {
    cmd::ip(&["netns", "add", name])?;
    cmd::ip(&["-n", name, "link", "set", "lo", "up"])?;
    Ok(())
}

/// Deletes namespace `name` (its interfaces go with it, veth peers included).
pub fn delete(name: &str) -> Result<(), LabError> {
    cmd::ip(&["netns", "delete", name]).map(drop)
}

/// The namespace's inode, which `/proc/PID/ns/net` of its processes points to.
pub fn inode(name: &str) -> Option<u64> {
    std::fs::metadata(path(name)).ok().map(|m| m.ino())
}

/// Moves the calling thread into namespace `name`. Use on a thread of its own (see
/// [`run_in`]): every socket the thread opens afterwards belongs to that namespace.
pub fn enter(name: &str) -> io::Result<()> {
    let f = File::open(path(name))?;
    // SAFETY: `f` is an open namespace file for the duration of the call; setns only changes
    // the calling thread's namespace.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `f` on a new thread inside namespace `name` and returns its result.
pub fn run_in<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> Result<T, LabError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(name).map_err(|e| LabError::io(format!("cannot enter namespace {name}"), e))?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Writes a sysctl inside namespace `name`, e.g. `net/ipv4/ip_forward`.
pub fn sysctl(name: &str, key: &str, value: &str) -> Result<(), LabError> {
    let p = Path::new("/proc/sys").join(key);
    run_in(name, || std::fs::write(&p, value))?
        .map_err(|e| LabError::io(format!("cannot set {} in {name}", p.display()), e))
}

/// Reads a file of the namespace's own `/proc/net` (e.g. `snmp`). `/proc/self/net` would show
/// the namespace of the process's main thread, so this reads `/proc/thread-self/net`.
pub fn read_proc_net(name: &str, file: &str) -> Result<String, LabError> {
    let p = Path::new("/proc/thread-self/net").join(file);
    run_in(name, || std::fs::read_to_string(&p))?
        .map_err(|e| LabError::io(format!("cannot read {} in {name}", p.display()), e))
}

/// How a spawned process is attached to this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detach {
    /// In its own session, so a Ctrl-C at this terminal does not reach it and it outlives
    /// this process (helpers of `xbench lab up`).
    Session,
    /// In this process's session and process group (a test client that a Ctrl-C should stop).
    No,
}

/// Spawns `command` inside namespace `name`.
pub fn spawn_in(name: &str, command: &mut Command, detach: Detach) -> io::Result<Child> {
    let ns = File::open(path(name))?;
    let fd = ns.as_raw_fd();
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe system calls (setns, setsid). `fd` stays open until after spawn
    // returns because `ns` is dropped later; it is close-on-exec, so the program never sees it.
    unsafe {
        command.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            if detach == Detach::Session && libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn();
    drop(ns);
    child
}

/// Finds TCP `TcpExt`/`Tcp` counters in `/proc/net/snmp` or `/proc/net/netstat` text: the
/// value of `field` in the two-line block whose lines start with `section:`.
pub fn snmp_counter(text: &str, section: &str, field: &str) -> Option<u64> {
    let prefix = format!("{section}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let names = names.split_whitespace().skip(1);
        let mut values = values.split_whitespace().skip(1);
        for n in names {
            let v = values.next()?;
            if n == field {
                return v.parse().ok();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snmp_counters_are_found_by_name() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm RetransSegs InErrs\nTcp: 1 42 0\n";
        assert_eq!(snmp_counter(text, "Tcp", "RetransSegs"), Some(42));
        assert_eq!(snmp_counter(text, "Ip", "DefaultTTL"), Some(64));
        assert_eq!(snmp_counter(text, "Tcp", "Nope"), None);
    }

    #[test]
    fn this_machines_snmp_has_retrans_segs() {
        let text = std::fs::read_to_string("/proc/net/snmp").unwrap();
        assert!(snmp_counter(&text, "Tcp", "RetransSegs").is_some());
    }
}
