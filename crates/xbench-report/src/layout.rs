//! Where a sweep saves its runs.
//!
//! ```text
//! DIR/<label>/<cell>/run-<n>.json
//! ```
//!
//! `<label>` is `--label`; `<cell>` is [`CellKey::slug`](crate::cell::CellKey::slug), e.g.
//! `tcp-up-P4-w256K` or `rr-64x16K-f4`; `<n>` counts the repeats of that cell from 1. Each file
//! is exactly the `TestReport` JSON `xbench client --json` prints, label included, so it can be
//! read on its own. A run measured by a fleet of client machines holds their merged report,
//! and `run-<n>.fleet/client-<k>.json` each instance's own ([`crate::fleet`]). The report reads cells from the files' contents, never from their names:
//! names only make the tree browsable and let `--resume` see what is done. Each file is
//! written with [`xbench::file::write_atomically`]; its temporary files
//! (`.run-<n>.json.tmp-<pid>-<k>`) are hidden and ignored by readers.

use std::path::{Path, PathBuf};

/// The directory of one cell's runs.
pub fn cell_dir(dir: &Path, label: &str, cell_slug: &str) -> PathBuf {
    dir.join(label).join(cell_slug)
}

/// The file of the `n`th repeat (from 1) of a cell.
pub fn run_file(cell_dir: &Path, n: u32) -> PathBuf {
    cell_dir.join(format!("run-{n}.json"))
}

/// Where instance `k` (from 1) of a fleet keeps its own report of the run saved at
/// `run_file` (which holds the fleet's merged report): `run-<n>.fleet/client-<k>.json`. Readers
/// of a results tree skip `*.fleet` directories ([`is_fleet_dir`]): the parts are in the
/// merged figure already.
pub fn fleet_part_file(run_file: &Path, k: usize) -> PathBuf {
    let stem = run_file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    run_file
        .with_file_name(format!("{stem}.fleet"))
        .join(format!("client-{k}.json"))
}

/// Whether a directory of that name holds a fleet's per-instance reports.
pub fn is_fleet_dir(name: &str) -> bool {
    name.ends_with(".fleet")
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
}
