//! What a lab leaves on disk so another process can find and remove it: the lock that keeps
//! two labs from sharing a state directory, and the state file listing every namespace and
//! process the lab created. The state file is written ahead of each creation, so a lab killed
//! at any point leaves a record `xbench lab down` can follow.
//!
//! Layout of the state directory: `lock` (flock'ed by whoever builds, runs or removes the
//! lab), `holder.json` (who that is), `lab.json` (the lab; exists while one is up), and the
//! helpers' logs, stats and VPN keys.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::error::{Holder, LabError};
use crate::plan::PathInfo;
use crate::sys::process::ProcRecord;

/// The largest state file read back (`lab.json`, `holder.json`, a delay line's stats),
/// bytes: a lab of a few paths writes a few KB; anything near this is not ours.
pub(crate) const STATE_FILE_LIMIT: u64 = 16 << 20;

/// Version of `lab.json`.
pub const STATE_VERSION: u32 = 1;

/// Everything a lab created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabState {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// Namespace prefix.
    pub prefix: String,
    /// Who built it.
    pub builder: Holder,
    /// False until every path was built and checked.
    pub complete: bool,
    /// Namespaces, in creation order (recorded before each is created).
    pub netns: Vec<String>,
    /// Helper processes.
    pub processes: Vec<ProcRecord>,
    /// The paths.
    pub paths: Vec<PathInfo>,
}

impl LabState {
    /// Reads `lab.json` from `dir`, if a lab is recorded there.
    pub fn load(dir: &Path) -> Result<Option<Self>, LabError> {
        let p = dir.join("lab.json");
        match xbench::file::read_regular(&p, STATE_FILE_LIMIT) {
            Ok(text) => serde_json::from_slice(&text).map(Some).map_err(|e| {
                LabError::io(
                    format!("cannot parse {}", p.display()),
                    io::Error::new(io::ErrorKind::InvalidData, e),
                )
            }),
            Err(xbench::file::ReadError::Io(e)) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(LabError::io(
                format!("cannot read {}", p.display()),
                io::Error::new(io::ErrorKind::InvalidData, e),
            )),
        }
    }

    /// Writes `lab.json` into `dir`.
    pub fn save(&self, dir: &Path) -> Result<(), LabError> {
        write_atomically(&dir.join("lab.json"), self)
    }
}

/// Removes `lab.json` (the lab is gone).
pub(crate) fn remove(dir: &Path) -> Result<(), LabError> {
    match std::fs::remove_file(dir.join("lab.json")) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(LabError::io(
            format!("cannot remove {}", dir.join("lab.json").display()),
            e,
        )),
        _ => Ok(()),
    }
}

/// This process as a [`Holder`].
pub fn this_process(command: &str) -> Holder {
    Holder {
        pid: std::process::id(),
        command: command.to_owned(),
        since: xbench::time::rfc3339(SystemTime::now()),
    }
}

/// Exclusive use of a state directory, for as long as the value lives. The kernel drops an
/// flock when its holder dies, so a killed process never leaves a stale lock.
#[derive(Debug)]
pub struct LabLock {
    _file: File,
    dir: PathBuf,
}

impl LabLock {
    /// Takes the lock or, if another process holds it, says who. Never waits.
    pub fn acquire(dir: &Path, command: &str) -> Result<Self, LabError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| LabError::io(format!("cannot create {}", dir.display()), e))?;
        let path = dir.join("lock");
        // A regular file or nothing: O_NOFOLLOW refuses a link, O_NONBLOCK keeps a FIFO
        // from holding the open, and anything else found there is refused below.
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .and_then(|f| {
                if f.metadata()?.is_file() {
                    Ok(f)
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "not a regular file; the lock is kept only in a regular file",
                    ))
                }
            })
            .map_err(|e| LabError::io(format!("cannot open {}", path.display()), e))?;
        // SAFETY: flock on an open descriptor; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Err(LabError::Busy {
                    holder: read_holder(dir).unwrap_or_else(|| Holder {
                        pid: 0,
                        command: "an unknown process".into(),
                        since: "an unknown time".into(),
                    }),
                    state_dir: dir.to_owned(),
                });
            }
            return Err(LabError::io(format!("cannot lock {}", path.display()), e));
        }
        write_atomically(&dir.join("holder.json"), &this_process(command))?;
        Ok(LabLock {
            _file: file,
            dir: dir.to_owned(),
        })
    }
}

impl Drop for LabLock {
    fn drop(&mut self) {
        // Before the flock goes (when `_file` closes after this), so a reader never sees a
        // stale holder for a free lock.
        let _ = std::fs::remove_file(self.dir.join("holder.json"));
    }
}

fn read_holder(dir: &Path) -> Option<Holder> {
    let bytes = xbench::file::read_regular(&dir.join("holder.json"), STATE_FILE_LIMIT).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes `value` as pretty JSON with [`xbench::file::write_json_atomically`], so a reader
/// (or a `down` after a crash) never sees half a file.
pub(crate) fn write_atomically<T: Serialize>(path: &Path, value: &T) -> Result<(), LabError> {
    xbench::file::write_json_atomically(path, value)
        .map_err(|e| LabError::io(format!("cannot write {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("xbl-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_second_lock_names_the_first_holder() {
        let d = tmpdir("lock");
        let first = LabLock::acquire(&d, "xbench lab run --paths vpn").unwrap();
        let e = LabLock::acquire(&d, "xbench lab up").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("pid {}", std::process::id()))
                && msg.contains("xbench lab run --paths vpn"),
            "{msg}"
        );
        drop(first);
        let again = LabLock::acquire(&d, "xbench lab up");
        assert!(again.is_ok(), "the lock is free once its holder is gone");
        drop(again);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn state_round_trips() {
        let d = tmpdir("state");
        std::fs::create_dir_all(&d).unwrap();
        assert_eq!(LabState::load(&d).unwrap(), None);
        let s = LabState {
            version: STATE_VERSION,
            prefix: "xbl-".into(),
            builder: this_process("test"),
            complete: false,
            netns: vec!["xbl-c".into()],
            processes: vec![],
            paths: vec![],
        };
        s.save(&d).unwrap();
        assert_eq!(LabState::load(&d).unwrap(), Some(s));
        remove(&d).unwrap();
        assert_eq!(LabState::load(&d).unwrap(), None);
        let _ = std::fs::remove_dir_all(&d);
    }
}
