//! Writing a path the user named without clobbering what is not ours (see the rule in
//! [`crate::file`]): whole-file atomic replacement where a file is ours to replace, in-place
//! writes where the path is a FIFO or a device, refusal otherwise.

use std::ffi::CString;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

/// How long a write to a FIFO waits for a process to open it for reading. A FIFO nobody reads
/// would otherwise hold the program for ever at the end of its test.
pub const FIFO_READER_WAIT: Duration = Duration::from_secs(10);

/// Writes `contents` to `path` under the rule of [`crate::file`]: atomically and durably over
/// a regular file or a path that does not exist; in place to a FIFO or a device; to standard
/// output for `-`; through a symbolic link to its target; never over a directory or socket.
///
/// The atomic replacement:
///
/// 1. writes a new hidden file in the target's directory, `.NAME.tmp-PID-N`, created
///    exclusively, so two writers (threads or processes) never share one; readers that skip
///    hidden files never see it;
/// 2. gives it the old file's permissions (and owner, where we may), then flushes it to disk
///    (`fsync`), so a power cut after the rename cannot leave an empty file under the name;
/// 3. renames it over the name, atomic because both names are in one directory; a name that
///    did not exist is never renamed over something that appeared meanwhile
///    (`RENAME_NOREPLACE`): the rule is applied again to whatever it is;
/// 4. and flushes the directory, so the rename itself survives a power cut.
///
/// A regular file we may not write (mode, read-only mount) is refused rather than replaced,
/// as a shell's `>` would refuse it. A file with several hard links is replaced under this
/// name only; its other names keep the old contents. On error the path is as it was and the
/// temporary file is removed. The directory must exist.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("xbench-file-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("result.json");
/// xbench::file::write_atomically(&path, b"{\"ok\": true}\n")?;
/// assert_eq!(std::fs::read(&path)?, b"{\"ok\": true}\n");
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    write_with(path, contents, None)
}

/// [`write_atomically`] for a secret (a key, a configuration that holds one): the file is
/// created with mode 0600 and a replaced file gets 0600 too, so it is never readable by
/// others, not even for a moment. The same rule for devices, FIFOs, `-` and links.
pub fn write_private(path: &Path, contents: &[u8]) -> io::Result<()> {
    write_with(path, contents, Some(0o600))
}

fn write_with(path: &Path, contents: &[u8], mode: Option<u32>) -> io::Result<()> {
    // A name that appears between our look and the rename is looked at again, a few times.
    for _ in 0..3 {
        match resolve(path)? {
            Dest::Stdout => return write_stdout(contents),
            Dest::InPlace { path, fifo } => return write_in_place(&path, fifo, contents),
            Dest::Replace { path, old } => match replace(&path, old.as_ref(), mode, contents) {
                Err(e) if old.is_none() && e.kind() == io::ErrorKind::AlreadyExists => continue,
                r => return r,
            },
        }
    }
    Err(io::Error::other(format!(
        "{} keeps changing while xbench writes it; not written",
        path.display()
    )))
}

/// [`write_atomically`] of `value` as pretty-printed JSON with a final newline.
pub fn write_json_atomically<T: Serialize + ?Sized>(path: &Path, value: &T) -> io::Result<()> {
    let mut json = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    json.push(b'\n');
    write_atomically(path, &json)
}

/// Whether [`write_atomically`] could write `path` now, found without writing it: for a new
/// or regular file, a temporary file is created in its directory and removed (which proves
/// the directory exists, is writable, and is not on a read-only mount); a FIFO or device must
/// be writable by us, and is not opened (opening a FIFO would signal its reader). The error
/// says what is wrong in words a user can act on.
pub fn check_writable(path: &Path) -> io::Result<()> {
    match resolve(path)? {
        Dest::Stdout => Ok(()),
        Dest::InPlace { path, .. } => {
            if may_write(&path) {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("{} is not writable", path.display()),
                ))
            }
        }
        Dest::Replace { path, old } => {
            let (dir, _) = dir_and_name(&path)?;
            if old.is_some() {
                refuse_read_only(&path)?;
            }
            check_dir_writable(dir)
        }
    }
}

/// Whether new files can be written into the directory `dir`: it exists, is a directory (or
/// a link to one), and a file created in it (and removed at once) proves we may write there
/// and the mount is not read-only. For a program about to save many files into it, such as a
/// sweep's `--save` directory.
pub fn check_dir_writable(dir: &Path) -> io::Result<()> {
    match fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("the directory {} does not exist", dir.display()),
            ));
        }
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot look at {}: {e}", dir.display()),
            ));
        }
        Ok(m) if !m.is_dir() => {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", dir.display()),
            ));
        }
        Ok(_) => {}
    }
    let (tmp, file) = create_temporary(dir, "xbench-probe", 0o600)?;
    drop(file);
    fs::remove_file(&tmp)
}

/// Opens `path` for a file that is written as a program runs and cannot be replaced whole,
/// such as a helper process's log: created if missing, truncated if a regular file (a link is
/// followed to one), and refused if it is anything else — a FIFO would block its writer and a
/// device would take the log.
pub fn create_regular(path: &Path) -> io::Result<File> {
    let path = match resolve(path)? {
        Dest::Replace { path, .. } => path,
        Dest::Stdout | Dest::InPlace { .. } => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is not a regular file; xbench keeps this file only as a regular file",
                    path.display()
                ),
            ));
        }
    };
    // O_NOFOLLOW and O_NONBLOCK: the path was resolved; whatever was swapped in since (a link,
    // a FIFO) fails the open or the check below instead of being followed or blocking.
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    set_blocking(&file)?;
    file.set_len(0)?;
    Ok(file)
}

/// Where a write goes, decided from what is at the path.
enum Dest {
    Stdout,
    /// A FIFO or device: opened and written, never replaced.
    InPlace {
        path: PathBuf,
        fifo: bool,
    },
    /// A regular file (`old` its metadata) or nothing (`None`): replaced atomically.
    Replace {
        path: PathBuf,
        old: Option<Metadata>,
    },
}

fn resolve(path: &Path) -> io::Result<Dest> {
    if path == Path::new("-") {
        return Ok(Dest::Stdout);
    }
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Dest::Replace {
            path: path.to_path_buf(),
            old: None,
        }),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot look at {}: {e}", path.display()),
        )),
        Ok(m) if m.file_type().is_symlink() => {
            let (target, m) = follow(path)?;
            classify(target, m)
        }
        Ok(m) => classify(path.to_path_buf(), m),
    }
}

fn classify(path: PathBuf, m: Metadata) -> io::Result<Dest> {
    let ft = m.file_type();
    if ft.is_file() {
        return Ok(Dest::Replace { path, old: Some(m) });
    }
    if ft.is_fifo() || ft.is_char_device() || ft.is_block_device() {
        return Ok(Dest::InPlace {
            path,
            fifo: ft.is_fifo(),
        });
    }
    let (kind, what) = if ft.is_dir() {
        (io::ErrorKind::IsADirectory, "a directory")
    } else if ft.is_socket() {
        (io::ErrorKind::InvalidInput, "a socket")
    } else {
        (io::ErrorKind::InvalidInput, "not a file")
    };
    Err(io::Error::new(
        kind,
        format!(
            "{} is {what}; xbench writes regular files, FIFOs and devices",
            path.display()
        ),
    ))
}

/// The target of the symbolic link at `link` and its metadata. The kernel follows the link
/// (`O_PATH`: no open for I/O, so a device's open has no side effect), which keeps
/// `fs.protected_symlinks`: a link planted in a sticky world-writable directory by another
/// user is not followed.
fn follow(link: &Path) -> io::Result<(PathBuf, Metadata)> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(link)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} is a symbolic link to {}, which does not exist; xbench writes through \
                     a link but does not create its target",
                    link.display(),
                    fs::read_link(link).unwrap_or_default().display()
                ),
            ),
            _ => io::Error::new(
                e.kind(),
                format!("cannot follow the symbolic link {}: {e}", link.display()),
            ),
        })?;
    let m = f.metadata()?;
    let target = fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .or_else(|_| fs::canonicalize(link))?;
    Ok((target, m))
}

fn replace(
    path: &Path,
    old: Option<&Metadata>,
    mode: Option<u32>,
    contents: &[u8],
) -> io::Result<()> {
    let (dir, name) = dir_and_name(path)?;
    if old.is_some() {
        refuse_read_only(path)?;
    }
    let (tmp, mut file) = create_temporary(dir, &name, mode.unwrap_or(0o666))?;
    let written = (|| {
        if let Some(m) = old {
            keep_owner_and_mode(&file, m, mode)?;
        }
        file.write_all(contents)?;
        file.sync_all()?;
        drop(file);
        if old.is_some() {
            fs::rename(&tmp, path)
        } else {
            rename_new(&tmp, path)
        }
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

fn dir_and_name(path: &Path) -> io::Result<(&Path, String)> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} does not name a file", path.display()),
        )
    })?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Ok((dir, name.to_string_lossy().into_owned()))
}

/// A regular file we may not write is not ours to replace, though the directory would let
/// a rename do it.
fn refuse_read_only(path: &Path) -> io::Result<()> {
    if may_write(path) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} is not writable (read-only); xbench replaces only files it may write",
            path.display()
        ),
    ))
}

/// `access(W_OK)` with the effective ids, as an open for writing would be checked.
fn may_write(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) == 0 }
}

/// The replacement keeps the old file's owner (where we may change it: as root) and
/// permission bits (a secret's stay 0600), so rewriting a user's result as root does not take it from them.
/// Set-id bits are not copied.
fn keep_owner_and_mode(file: &File, old: &Metadata, mode: Option<u32>) -> io::Result<()> {
    match std::os::unix::fs::fchown(file, Some(old.uid()), Some(old.gid())) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {}
        r => r?,
    }
    file.set_permissions(fs::Permissions::from_mode(
        mode.unwrap_or(old.mode() & 0o777),
    ))
}

/// Renames a temporary file to a name that did not exist, failing with `AlreadyExists` if
/// something took the name meanwhile (rather than replacing it, whatever it is).
fn rename_new(tmp: &Path, path: &Path) -> io::Result<()> {
    let (Ok(from), Ok(to)) = (
        CString::new(tmp.as_os_str().as_bytes()),
        CString::new(path.as_os_str().as_bytes()),
    ) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path with a NUL byte",
        ));
    };
    // SAFETY: both are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        // A file system without RENAME_NOREPLACE: look again just before a plain rename.
        Some(libc::EINVAL | libc::ENOSYS) => match fs::symlink_metadata(path) {
            Err(n) if n.kind() == io::ErrorKind::NotFound => fs::rename(tmp, path),
            _ => Err(io::Error::from(io::ErrorKind::AlreadyExists)),
        },
        _ => Err(e),
    }
}

/// Writes into a FIFO or device without creating, truncating or replacing it. A FIFO with no
/// reader is waited for, at most [`FIFO_READER_WAIT`].
fn write_in_place(path: &Path, fifo: bool, contents: &[u8]) -> io::Result<()> {
    let deadline = Instant::now() + FIFO_READER_WAIT;
    let file = loop {
        // Non-blocking: an open of a FIFO with no reader fails (ENXIO) instead of waiting
        // without end; O_NOCTTY: writing to a terminal device does not make it ours.
        match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
        {
            Ok(f) => break f,
            Err(e) if fifo && e.raw_os_error() == Some(libc::ENXIO) => {
                if Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "no process opened the FIFO {} for reading within {} s",
                            path.display(),
                            FIFO_READER_WAIT.as_secs()
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    };
    let m = file.metadata()?;
    if m.is_file() || m.is_dir() {
        // It was swapped for a file after we looked: writing in place would mix contents.
        return Err(io::Error::other(format!(
            "{} changed while xbench wrote it; not written",
            path.display()
        )));
    }
    set_blocking(&file)?;
    (&file).write_all(contents)?;
    (&file).flush()
}

fn set_blocking(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own; no memory is involved.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn write_stdout(contents: &[u8]) -> io::Result<()> {
    let mut o = io::stdout().lock();
    o.write_all(contents)?;
    o.flush()
}

/// Tells apart the temporary files of one process's writers.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new, exclusively created temporary file beside the target, with `mode` (less the umask). The process id tells
/// processes apart and the counter threads; a file left by a dead process that had this id
/// is stepped over, never reused.
fn create_temporary(dir: &Path, name: &str, mode: u32) -> io::Result<(PathBuf, File)> {
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
        // create_new (O_EXCL): never through a link someone planted at the name.
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot create a file in {}: {e}", dir.display()),
                ));
            }
        }
    }
}

/// Flushes a directory's entries. A file system that cannot sync a directory (EINVAL) has
/// nothing to flush there; the rename is done either way.
fn sync_dir(dir: &Path) -> io::Result<()> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::os::unix::fs::symlink;

    use super::*;

    fn tmpdir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("xbench-file-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_write_replaces_the_file_and_leaves_no_temporary_file() {
        let d = tmpdir("replace");
        let p = d.join("run-1.json");
        write_atomically(&p, b"{}").unwrap();
        write_atomically(&p, b"{\"x\":1}").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"{\"x\":1}");
        write_json_atomically(&p, &serde_json::json!({"y": 2})).unwrap();
        write_private(&d.join("key"), b"secret").unwrap();
        assert_eq!(
            fs::metadata(d.join("key")).unwrap().permissions().mode() & 0o777,
            0o600
        );
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&p, b"{}").unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        write_json_atomically(&p, &serde_json::json!({"y": 2})).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\n  \"y\": 2\n}\n");
        assert_eq!(names(&d), ["key", "run-1.json"]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn concurrent_writers_never_mix_and_leave_one_whole_file() {
        let d = tmpdir("concurrent");
        let p = d.join("state.json");
        let writers: Vec<_> = (0..8u8)
            .map(|i| {
                let p = p.clone();
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        write_atomically(&p, &[b'a' + i; 4096]).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let got = fs::read(&p).unwrap();
        assert_eq!(got.len(), 4096);
        assert!(got.iter().all(|b| *b == got[0]), "one writer's bytes only");
        assert_eq!(names(&d), ["state.json"]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_cleans_up() {
        let d = tmpdir("fail");
        // A directory in the way: the rename fails after the temporary file was written.
        let p = d.join("taken");
        fs::create_dir_all(p.join("inside")).unwrap();
        assert!(write_atomically(&p, b"x").is_err());
        assert_eq!(names(&d), ["taken"]);
        // No directory at all: nothing is created.
        assert!(write_atomically(&d.join("no/such/dir/f"), b"x").is_err());
        assert!(write_atomically(Path::new("/"), b"x").is_err());
        // Stale temporary files of a dead writer that had this pid are stepped over, untouched.
        let next = COUNTER.load(Ordering::Relaxed);
        for n in next..next + 50 {
            fs::write(d.join(format!(".f.tmp-{}-{n}", std::process::id())), b"old").unwrap();
        }
        write_atomically(&d.join("f"), b"new").unwrap();
        assert_eq!(fs::read(d.join("f")).unwrap(), b"new");
        assert_eq!(names(&d).len(), 2 + 50);
        fs::remove_dir_all(&d).unwrap();
    }

    fn mknod(p: &Path, mode: libc::mode_t, dev: libc::dev_t) -> bool {
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        unsafe { libc::mknod(c.as_ptr(), mode, dev) == 0 }
    }

    fn file_type(p: &Path) -> fs::FileType {
        fs::symlink_metadata(p).unwrap().file_type()
    }

    /// Root, or a skip that CI (CI=true) refuses.
    fn root_or_skip(test: &str) -> bool {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return true;
        }
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "{test} needs root (mknod) and CI=true forbids skipping it"
        );
        false
    }

    #[test]
    fn root_a_device_node_is_written_in_place_and_stays_a_device() {
        if !root_or_skip("root_a_device_node_is_written_in_place_and_stays_a_device") {
            return;
        }
        let d = tmpdir("device");
        // Our own null device (1, 3), never the system's /dev/null.
        let null = d.join("null");
        assert!(mknod(&null, libc::S_IFCHR | 0o666, libc::makedev(1, 3)));
        write_atomically(&null, b"{}").unwrap();
        check_writable(&null).unwrap();
        assert!(file_type(&null).is_char_device(), "replaced by a file");
        // And /dev/full's error reaches the caller; the device stays.
        let full = d.join("full");
        assert!(mknod(&full, libc::S_IFCHR | 0o666, libc::makedev(1, 7)));
        let e = write_atomically(&full, b"{}").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        assert!(file_type(&full).is_char_device());
        assert_eq!(names(&d), ["full", "null"], "no temporary file left");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_fifo_gets_the_document_and_stays_a_fifo() {
        let d = tmpdir("fifo");
        let p = d.join("out.json");
        assert!(mknod(&p, libc::S_IFIFO | 0o600, 0));
        check_writable(&p).unwrap();
        let reader = {
            let p = p.clone();
            std::thread::spawn(move || fs::read(&p).unwrap())
        };
        write_atomically(&p, b"{\"x\": 1}\n").unwrap();
        assert_eq!(reader.join().unwrap(), b"{\"x\": 1}\n");
        assert!(file_type(&p).is_fifo());
        assert_eq!(names(&d), ["out.json"]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_symlink_is_followed_and_stays_a_link() {
        let d = tmpdir("symlink");
        fs::create_dir_all(d.join("real")).unwrap();
        let target = d.join("real/run.json");
        fs::write(&target, b"old").unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o640)).unwrap();
        let link = d.join("link.json");
        symlink("real/run.json", &link).unwrap();
        check_writable(&link).unwrap();
        write_atomically(&link, b"new").unwrap();
        assert!(file_type(&link).is_symlink(), "the link was replaced");
        assert_eq!(fs::read_link(&link).unwrap(), Path::new("real/run.json"));
        assert_eq!(fs::read(&target).unwrap(), b"new");
        // The target was replaced atomically (in its own directory) and kept its mode.
        assert_eq!(
            fs::metadata(&target).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert_eq!(names(&d.join("real")), ["run.json"]);
        // A link to a FIFO: the FIFO gets it.
        let fifo = d.join("real/fifo");
        assert!(mknod(&fifo, libc::S_IFIFO | 0o600, 0));
        symlink(&fifo, d.join("to-fifo")).unwrap();
        let reader = std::thread::spawn(move || fs::read(&fifo).unwrap());
        write_atomically(&d.join("to-fifo"), b"through").unwrap();
        assert_eq!(reader.join().unwrap(), b"through");
        assert!(file_type(&d.join("to-fifo")).is_symlink());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_dangling_link_a_directory_and_a_socket_are_refused_untouched() {
        let d = tmpdir("refused");
        let dangling = d.join("dangling.json");
        symlink("nowhere/x.json", &dangling).unwrap();
        for f in [check_writable, |p: &Path| write_atomically(p, b"x")] {
            let e = f(&dangling).unwrap_err();
            assert!(e.to_string().contains("does not exist"), "{e}");
        }
        assert!(file_type(&dangling).is_symlink());
        assert!(!d.join("nowhere").exists());
        let e = write_atomically(&d, b"x").unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let sock = d.join("sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let e = check_writable(&sock).unwrap_err();
        assert!(e.to_string().contains("is a socket"), "{e}");
        assert!(file_type(&sock).is_socket());
        assert_eq!(names(&d), ["dangling.json", "sock"]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_fifo_nobody_reads_is_given_up_on() {
        let d = tmpdir("fifo-unread");
        let p = d.join("out.json");
        assert!(mknod(&p, libc::S_IFIFO | 0o600, 0));
        let t = Instant::now();
        let e = write_atomically(&p, b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(e.to_string().contains("no process opened the FIFO"), "{e}");
        assert!(t.elapsed() >= FIFO_READER_WAIT);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_check_finds_what_the_write_would_fail_on() {
        let d = tmpdir("check");
        check_writable(&d.join("new.json")).unwrap();
        check_writable(Path::new("-")).unwrap();
        assert_eq!(names(&d), Vec::<String>::new(), "the probe is removed");
        let e = check_writable(&d.join("no/such/dir/x.json")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("does not exist"), "{e}");
        fs::write(d.join("file"), b"").unwrap();
        let e = check_writable(&d.join("file/x.json")).unwrap_err();
        assert!(e.to_string().contains("file"), "{e}");
        let e = check_writable(&d).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_log_is_a_regular_file_or_nothing() {
        let d = tmpdir("log");
        let p = d.join("helper.log");
        fs::write(&p, b"old log").unwrap();
        let mut f = create_regular(&p).unwrap();
        f.write_all(b"new").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        let fifo = d.join("fifo.log");
        assert!(mknod(&fifo, libc::S_IFIFO | 0o600, 0));
        let e = create_regular(&fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(file_type(&fifo).is_fifo());
        check_dir_writable(&d).unwrap();
        let e = check_dir_writable(&p).unwrap_err();
        assert!(e.to_string().contains("is not a directory"), "{e}");
        assert_eq!(names(&d), ["fifo.log", "helper.log"]);
        fs::remove_dir_all(&d).unwrap();
    }
}
