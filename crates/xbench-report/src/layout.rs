//! Where a sweep saves its runs, and how a file is written so that a crash never leaves half
//! of one.
//!
//! ```text
//! DIR/<label>/<cell>/run-<n>.json
//! ```
//!
//! `<label>` is `--label`; `<cell>` is [`CellKey::slug`](crate::cell::CellKey::slug), e.g.
//! `tcp-up-P4-w256K` or `rr-64x16K-f4`; `<n>` counts the repeats of that cell from 1. Each file
//! is exactly the `TestReport` JSON `xbench client --json` prints, label included, so it can be
//! read on its own. The report reads cells from the files' contents, never from their names:
//! names only make the tree browsable and let `--resume` see what is done. Temporary files
//! (`.run-<n>.json.tmp-<pid>`) are hidden and ignored by readers.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The directory of one cell's runs.
pub fn cell_dir(dir: &Path, label: &str, cell_slug: &str) -> PathBuf {
    dir.join(label).join(cell_slug)
}

/// The file of the `n`th repeat (from 1) of a cell.
pub fn run_file(cell_dir: &Path, n: u32) -> PathBuf {
    cell_dir.join(format!("run-{n}.json"))
}

/// Whether `label` can be a directory name: not empty, no path separators, not hidden (a
/// leading dot), at most 100 bytes, and no control characters.
pub fn check_label(label: &str) -> Result<(), String> {
    if label.is_empty() {
        return Err("a label cannot be empty".into());
    }
    if label.starts_with('.') {
        return Err(format!("label `{label}` cannot start with a dot"));
    }
    if label.contains(['/', '\\']) || label.chars().any(char::is_control) {
        return Err(format!(
            "label `{label}` names a directory: no slashes or control characters"
        ));
    }
    if label.len() > 100 {
        return Err("a label is at most 100 bytes".into());
    }
    Ok(())
}

/// Writes `contents` to a hidden temporary file beside `path`, flushes it to disk and renames
/// it over `path`: a reader (or a later `--resume`) sees the whole file or none.
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(contents)?;
        // Without this a power cut after the rename can leave an empty file under the name.
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_must_be_plain_names() {
        assert!(check_label("vpc-peering").is_ok());
        assert!(check_label("tgw 2024").is_ok());
        for bad in ["", ".", "..", ".hidden", "a/b", "a\\b", "a\nb"] {
            assert!(check_label(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn atomic_writes_leave_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("xbench-layout-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = run_file(&cell_dir(&dir, "a", "tcp-up-P1"), 1);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        write_atomically(&p, b"{}").unwrap();
        write_atomically(&p, b"{\"x\":1}").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"{\"x\":1}");
        let names: Vec<_> = fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["run-1.json"]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
