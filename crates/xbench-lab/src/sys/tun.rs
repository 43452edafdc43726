//! Attaching to a persistent TUN device that `ip tuntap add … mode tun` created in a
//! namespace. The lab creates and configures the devices (addresses, routes, qdiscs) with
//! iproute2, so they outlive any one delay-line process; a delay line only attaches.
//!
//! Two modes. Without offload (no `IFF_VNET_HDR`) the kernel segments GSO packets and fills in
//! checksums before they reach the device, so every packet read is one IP packet of at most
//! the device's MTU, whatever offloads the veths in front of it use. With offload the device
//! takes TSO packets whole: each read is a 10-byte `virtio_net_hdr` and up to 64 KiB of
//! segments, and writing the same bytes to another offloading device hands the kernel the
//! same GSO packet — up to ~44 packets per system call instead of one.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use crate::error::LabError;
use crate::sys::netns;

/// Opens `/dev/net/tun` inside namespace `ns` and attaches to device `dev` (non-blocking),
/// with GSO/checksum offload when `offload`.
pub fn attach(ns: &str, dev: &str, offload: bool) -> Result<File, LabError> {
    let what = || format!("cannot attach to TUN device {dev} in namespace {ns}");
    if dev.len() >= libc::IFNAMSIZ {
        return Err(LabError::io(what(), io::ErrorKind::InvalidInput.into()));
    }
    netns::run_in(ns, || -> io::Result<File> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")?;
        // SAFETY: ifreq is plain data; all-zero is a valid value (empty name, no flags).
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(dev.bytes()) {
            *d = s as libc::c_char;
        }
        let vnet = if offload { libc::IFF_VNET_HDR } else { 0 };
        req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI | vnet) as libc::c_short;
        // SAFETY: `f` is an open tun control file and `req` a valid, initialised ifreq that
        // outlives the call; TUNSETIFF reads the name and flags and may write the name back.
        let rc = unsafe { libc::ioctl(f.as_raw_fd(), libc::TUNSETIFF, &mut req) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        if offload {
            let features = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6;
            // SAFETY: TUNSETOFFLOAD takes the feature bits by value on an attached tun file.
            let rc = unsafe {
                libc::ioctl(
                    f.as_raw_fd(),
                    libc::TUNSETOFFLOAD,
                    features as libc::c_ulong,
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(f)
    })?
    .map_err(|e| LabError::io(what(), e))
}
