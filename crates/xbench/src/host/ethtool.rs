//! The driver's own statistics of an interface — what `ethtool -S` prints — read with the
//! ethtool ioctl (`SIOCETHTOOL`: `ETHTOOL_GDRVINFO` for the driver's name, `ETHTOOL_GSSET_INFO`
//! for how many statistics it keeps, `ETHTOOL_GSTRINGS` for their names, `ETHTOOL_GSTATS` for
//! their values), so no `ethtool` binary is needed.
//!
//! The kernel answers `GSTRINGS` and `GSTATS` with as many entries as the driver has *now*,
//! whatever size the caller announced; a driver that grew between the count and the read (its
//! queues reconfigured) would write past a plain buffer. Both are read into a buffer that ends
//! at an inaccessible guard page, so such a read fails with `EFAULT` instead. Not for: the
//! kernel's generic counters (`netlink`), or what the statistics mean (`allowance`).

use std::io;
use std::os::fd::AsRawFd;

use socket2::{Domain, Socket, Type};

/// From `linux/sockios.h` and `linux/ethtool.h`.
const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;
/// `sizeof(struct ethtool_drvinfo)`.
const DRVINFO_LEN: usize = 196;
/// Most statistics a driver is believed to keep; a count above this is refused as nonsense
/// rather than mapped (mlx5 with 128 queues keeps a few thousand).
const MAX_STATS: u32 = 1 << 16;

/// An interface's driver statistics, names read once.
#[derive(Debug)]
pub(crate) struct Nic {
    sock: Socket,
    ifname: [libc::c_char; libc::IFNAMSIZ],
    /// `ETHTOOL_GDRVINFO`'s driver name, when the driver answers it.
    pub(crate) driver: Option<String>,
    /// The statistics' names, in the order `read` returns their values; empty when the driver
    /// keeps none.
    pub(crate) names: Vec<String>,
}

impl Nic {
    /// Opens interface `name`: its driver's name and its statistics' names.
    pub(crate) fn open(name: &str) -> io::Result<Nic> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{name}` is not an interface name"),
            ));
        }
        let mut ifname = [0 as libc::c_char; libc::IFNAMSIZ];
        for (d, &s) in ifname.iter_mut().zip(bytes) {
            *d = s as libc::c_char;
        }
        // Any socket carries the ioctl; it names the interface in the calling namespace.
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
        let mut nic = Nic {
            sock,
            ifname,
            driver: None,
            names: Vec::new(),
        };
        nic.driver = nic.driver_name().ok();
        let count = match nic.stat_count() {
            Ok(n) => n,
            Err(e) if unsupported(&e) => 0,
            Err(e) => return Err(e),
        };
        if count > 0 {
            nic.names = nic.stat_names(count)?;
        }
        Ok(nic)
    }

    /// The statistics' current values, in the order of [`Self::names`]. An error if the
    /// driver now keeps a different number of them (reopen to read the new names).
    pub(crate) fn read(&self) -> io::Result<Vec<u64>> {
        let n = self.names.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut buf = GuardedBuf::new(8 + 8 * n)?;
        buf.put_u32(0, ETHTOOL_GSTATS);
        buf.put_u32(4, n as u32);
        self.ioctl(buf.as_mut_ptr())?;
        let got = buf.u32_at(4) as usize;
        if got != n {
            return Err(changed(n, got));
        }
        Ok((0..n).map(|i| buf.u64_at(8 + 8 * i)).collect())
    }

    fn driver_name(&self) -> io::Result<String> {
        let mut info = [0u8; DRVINFO_LEN];
        info[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
        self.ioctl(info.as_mut_ptr())?;
        Ok(c_string(&info[4..36]))
    }

    /// How many statistics the driver keeps (0: none).
    fn stat_count(&self) -> io::Result<u32> {
        // struct ethtool_sset_info: cmd, reserved, sset_mask, then one u32 per set bit.
        let mut info = [0u8; 24];
        info[..4].copy_from_slice(&ETHTOOL_GSSET_INFO.to_ne_bytes());
        info[8..16].copy_from_slice(&(1u64 << ETH_SS_STATS).to_ne_bytes());
        self.ioctl(info.as_mut_ptr())?;
        let mask = u64::from_ne_bytes(info[8..16].try_into().unwrap_or([0; 8]));
        if mask & (1 << ETH_SS_STATS) == 0 {
            return Ok(0);
        }
        let n = u32::from_ne_bytes(info[16..20].try_into().unwrap_or([0; 4]));
        if n > MAX_STATS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the driver claims {n} statistics"),
            ));
        }
        Ok(n)
    }

    fn stat_names(&self, n: u32) -> io::Result<Vec<String>> {
        let n = n as usize;
        let mut buf = GuardedBuf::new(12 + ETH_GSTRING_LEN * n)?;
        buf.put_u32(0, ETHTOOL_GSTRINGS);
        buf.put_u32(4, ETH_SS_STATS);
        buf.put_u32(8, n as u32);
        self.ioctl(buf.as_mut_ptr())?;
        let got = buf.u32_at(8) as usize;
        if got != n {
            return Err(changed(n, got));
        }
        let bytes = buf.bytes();
        Ok((0..n)
            .map(|i| c_string(&bytes[12 + ETH_GSTRING_LEN * i..12 + ETH_GSTRING_LEN * (i + 1)]))
            .collect())
    }

    /// `ioctl(SIOCETHTOOL)` with `data` as the command buffer.
    fn ioctl(&self, data: *mut u8) -> io::Result<()> {
        // SAFETY: `ifreq` is plain old data (a name and a union of integers, addresses and a
        // raw pointer); all zeroes is a valid value of it.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        ifr.ifr_name = self.ifname;
        ifr.ifr_ifru.ifru_data = data.cast();
        // SAFETY: `ifr` lives across the call and names a NUL-terminated interface; `data`
        // points to a command buffer its caller sized for the command written at its start
        // (the drvinfo and sset-info answers are fixed in size; strings and stats end at a
        // guard page, so a longer answer faults instead of overrunning). The kernel touches
        // nothing else.
        let rc = unsafe { libc::ioctl(self.sock.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Whether an ioctl error means "this driver does not do that".
pub(crate) fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::ENOTTY)
    )
}

fn changed(had: usize, now: usize) -> io::Error {
    io::Error::other(format!(
        "the driver's statistics changed from {had} to {now} during the test (its queues \
         were reconfigured?)"
    ))
}

fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// A zeroed buffer of `len` bytes that ends exactly where an inaccessible page begins: a write
/// past its end faults (in the kernel: `copy_to_user` fails with `EFAULT`) instead of landing
/// in other memory.
struct GuardedBuf {
    map: *mut u8,
    map_len: usize,
    /// Offset of the buffer in the mapping.
    start: usize,
    len: usize,
}

impl GuardedBuf {
    fn new(len: usize) -> io::Result<Self> {
        // SAFETY: sysconf only reads a system constant.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|&p| p > 0)
            .unwrap_or(4096);
        let data_pages = len.div_ceil(page).max(1);
        let map_len = (data_pages + 1) * page;
        // SAFETY: a new private anonymous mapping at an address of the kernel's choosing; it
        // aliases nothing, and the result is checked before use.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let buf = GuardedBuf {
            map: map.cast(),
            map_len,
            start: data_pages * page - len,
            len,
        };
        // SAFETY: the last page of the mapping made above, page-aligned and inside it.
        let rc = unsafe {
            libc::mprotect(
                map.cast::<u8>().add(data_pages * page).cast(),
                page,
                libc::PROT_NONE,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error()); // `buf` unmaps on drop
        }
        Ok(buf)
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        // SAFETY: `start` is within the mapping (start + len ends at the guard page).
        unsafe { self.map.add(self.start) }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `start..start + len` lies in the readable part of the mapping, which this
        // value owns and which anonymous mapping zero-filled; nothing else aliases it.
        unsafe { std::slice::from_raw_parts(self.map.add(self.start), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.map.add(self.start), self.len) }
    }

    fn put_u32(&mut self, at: usize, v: u32) {
        self.bytes_mut()[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }

    fn u32_at(&self, at: usize) -> u32 {
        u32::from_ne_bytes(self.bytes()[at..at + 4].try_into().unwrap_or([0; 4]))
    }

    fn u64_at(&self, at: usize) -> u64 {
        u64::from_ne_bytes(self.bytes()[at..at + 8].try_into().unwrap_or([0; 8]))
    }
}

impl Drop for GuardedBuf {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping `new` made; no reference into it outlives `self`.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_no_driver_statistics() {
        // lo answers neither GDRVINFO nor a statistics count: no names, and reading gives
        // nothing rather than zeros.
        let nic = Nic::open("lo").unwrap();
        assert!(nic.names.is_empty(), "{:?}", nic.names);
        assert_eq!(nic.read().unwrap(), Vec::<u64>::new());
    }

    #[test]
    fn a_missing_interface_is_an_error_naming_it() {
        let e = Nic::open("xb33-nonesuch").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
        assert!(Nic::open("").is_err());
        assert!(Nic::open("a-name-far-too-long").is_err());
    }

    #[test]
    fn a_guarded_buffer_ends_at_a_page_that_faults() {
        let mut b = GuardedBuf::new(20).unwrap();
        b.put_u32(16, 7);
        assert_eq!(b.u32_at(16), 7);
        assert_eq!(b.bytes().len(), 20);
        // The kernel reports a write into the guard page as EFAULT: ask it to write 8 bytes
        // (a socket address) where only 4 remain.
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
        sock.bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
        let mut len: libc::socklen_t = 16;
        // SAFETY: `len` says 16 bytes; only the last 4 of the buffer are before the guard,
        // so the kernel's copy faults inside our own mapping, which is what is tested.
        let rc =
            unsafe { libc::getsockname(sock.as_raw_fd(), b.as_mut_ptr().add(16).cast(), &mut len) };
        assert_eq!(rc, -1);
        assert_eq!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::EFAULT)
        );
    }
}
