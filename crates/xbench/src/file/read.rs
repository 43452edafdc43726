//! Reading back a file a user named or a directory held: regular files only, at most a size
//! the caller names, so a FIFO cannot block the reader and a link to `/dev/zero` or a huge
//! file cannot take its memory.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Something other than a regular file is at the path (or at the end of its links).
    #[error("not a regular file ({what}); only regular files are read")]
    NotRegular {
        /// What it is, as "a FIFO" or "a symbolic link to a character device".
        what: String,
    },
    /// Larger than the limit the caller set.
    #[error("{size} bytes, more than the limit of {limit} bytes for one file")]
    TooLarge {
        /// Its size, bytes.
        size: u64,
        /// The limit, bytes.
        limit: u64,
    },
    /// The system refused (missing, permissions…).
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Opens the regular file at `path` (following symbolic links) for reading at most `limit`
/// bytes. Nothing else is opened: a FIFO, device, socket or directory is refused from its
/// metadata, before any `open` (opening some devices has effects of its own), and the opened
/// file is checked again, so a swap between the look and the open is caught too. A file over
/// `limit` is refused; one that grows past it while being read yields only `limit` bytes.
pub fn open_regular(path: &Path, limit: u64) -> Result<io::Take<File>, ReadError> {
    let m = fs::metadata(path)?;
    if !m.is_file() {
        return Err(not_regular(path, &m));
    }
    // Non-blocking so that a FIFO swapped in after the look cannot hold the open.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let m = file.metadata()?;
    if !m.is_file() {
        return Err(not_regular(path, &m));
    }
    if m.len() > limit {
        return Err(ReadError::TooLarge {
            size: m.len(),
            limit,
        });
    }
    Ok(file.take(limit))
}

/// The whole regular file at `path`, at most `limit` bytes (see [`open_regular`]).
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let mut r = open_regular(path, limit)?;
    let mut bytes = Vec::new();
    r.read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn not_regular(path: &Path, target: &fs::Metadata) -> ReadError {
    let ft = target.file_type();
    let kind = if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a file"
    };
    let link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    ReadError::NotRegular {
        what: if link {
            format!("a symbolic link to {kind}")
        } else {
            kind.to_owned()
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::os::unix::fs::symlink;
    use std::time::Duration;

    use super::*;

    fn tmpdir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("xbench-read-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn mkfifo(p: &Path) {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn a_regular_file_and_a_link_to_one_are_read() {
        let d = tmpdir("regular");
        fs::write(d.join("run-1.json"), b"{}").unwrap();
        symlink(d.join("run-1.json"), d.join("run-2.json")).unwrap();
        assert_eq!(read_regular(&d.join("run-1.json"), 2).unwrap(), b"{}");
        assert_eq!(read_regular(&d.join("run-2.json"), 2).unwrap(), b"{}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_fifo_is_refused_at_once_without_blocking() {
        let d = tmpdir("fifo");
        let p = d.join("run-1.json");
        mkfifo(&p);
        let (tx, rx) = std::sync::mpsc::channel();
        let p2 = p.clone();
        std::thread::spawn(move || tx.send(read_regular(&p2, 1 << 20)).unwrap());
        // No writer ever opens it: a blocking open would never return.
        let r = rx.recv_timeout(Duration::from_secs(30)).expect("returned");
        let e = r.unwrap_err();
        assert!(matches!(e, ReadError::NotRegular { .. }), "{e}");
        assert!(e.to_string().contains("a FIFO"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_link_to_dev_zero_or_a_directory_is_refused_and_named() {
        let d = tmpdir("zero");
        symlink("/dev/zero", d.join("run-1.json")).unwrap();
        let e = read_regular(&d.join("run-1.json"), 1 << 20).unwrap_err();
        assert_eq!(
            e.to_string(),
            "not a regular file (a symbolic link to a character device); only regular files \
             are read"
        );
        let e = read_regular(&d, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("(a directory)"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_over_the_limit_is_refused_with_its_size() {
        let d = tmpdir("cap");
        let p = d.join("big.json");
        fs::write(&p, vec![b' '; 1001]).unwrap();
        let e = read_regular(&p, 1000).unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::TooLarge {
                    size: 1001,
                    limit: 1000
                }
            ),
            "{e}"
        );
        assert_eq!(read_regular(&p, 1001).unwrap().len(), 1001);
        assert!(matches!(
            read_regular(&d.join("nope"), 10),
            Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::NotFound
        ));
        fs::remove_dir_all(&d).unwrap();
    }
}
