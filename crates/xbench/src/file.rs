//! Writing a file so that a crash, a power cut or a second writer never leaves half of one:
//! a reader sees the whole old file or the whole new one.
//!
//! For the programs built on the library that keep results and state on disk (a sweep's
//! saved runs, `--json-file`, charts, the lab's and a deployment's state files). The library
//! itself writes no files while it measures.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Writes `contents` to `path` atomically and durably:
///
/// 1. into a new hidden file in the same directory, `.NAME.tmp-PID-N`, created exclusively,
///    so two writers (threads or processes) never share one; readers that skip hidden files
///    never see it;
/// 2. flushed to disk (`fsync`), so a power cut after the rename cannot leave an empty file
///    under the name;
/// 3. renamed over `path`, which is atomic because both names are in one directory;
/// 4. and the directory flushed, so that the rename itself survives a power cut.
///
/// On error `path` is as it was and the temporary file is removed. The directory must exist.
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
    let (tmp, mut file) = create_temporary(dir, &name.to_string_lossy())?;
    let written = (|| {
        file.write_all(contents)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// [`write_atomically`] of `value` as pretty-printed JSON with a final newline.
pub fn write_json_atomically<T: Serialize + ?Sized>(path: &Path, value: &T) -> io::Result<()> {
    let mut json = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    json.push(b'\n');
    write_atomically(path, &json)
}

/// Tells apart the temporary files of one process's writers.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new, exclusively created temporary file beside the target. The process id tells
/// processes apart and the counter threads; a file left by a dead process that had this id
/// is stepped over, never reused.
fn create_temporary(dir: &Path, name: &str) -> io::Result<(std::path::PathBuf, File)> {
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
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
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\n  \"y\": 2\n}\n");
        assert_eq!(names(&d), ["run-1.json"]);
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
}
