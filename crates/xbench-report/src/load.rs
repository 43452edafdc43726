//! Reading saved runs: directories (walked recursively for `*.json`) and single files, each an
//! xbench `TestReport` or an `iperf3 -J` file told apart by their shape.
//!
//! A file that cannot be used (truncated, corrupt, from a newer xbench, an interrupted run, an
//! iperf3 SCTP test) becomes a [`Warning`] naming it and is skipped; one bad file never stops a
//! report. A path that does not exist is an error. The label of a run is the one inside it
//! (`--label`, iperf3's `--title`), else the directory directly below the one named on the
//! command line that holds it (`DIR/<label>/…`), else the name of that directory itself (or of
//! a named file's directory). This module does not group runs (see `table`).

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use xbench::report::{SCHEMA_VERSION, TestReport};

use crate::iperf3;
use crate::run::Run;

/// What was read.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Every usable run, in the order found: arguments in order, directory entries sorted.
    pub runs: Vec<Run>,
    /// Files skipped, and why.
    pub warnings: Vec<Warning>,
    /// How many files were looked at.
    pub files_seen: usize,
}

/// A file that was skipped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Warning {
    /// The file.
    pub path: PathBuf,
    /// Why it was skipped.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

/// A path that could not be read at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// It does not exist.
    #[error("{0}: no such file or directory")]
    Missing(PathBuf),
    /// It exists but could not be listed or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
}

/// Reads every run under `paths` (directories or files).
pub fn load(paths: &[PathBuf]) -> Result<Loaded, LoadError> {
    let mut loaded = Loaded::default();
    for root in paths {
        let meta = fs::metadata(root).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => LoadError::Missing(root.clone()),
            _ => LoadError::Io {
                path: root.clone(),
                source: e,
            },
        })?;
        if meta.is_dir() {
            let fallback = dir_name(root);
            walk(root, root, &fallback, &mut loaded)?;
        } else {
            let parent = root.parent().unwrap_or(Path::new("."));
            let fallback = dir_name(parent);
            read_file(root, &fallback, &mut loaded);
        }
    }
    Ok(loaded)
}

/// The most of one file read as a run: a saved run is kilobytes to a few megabytes (a long
/// test with one-second intervals and many streams); a file far larger is not one.
pub const MAX_RUN_FILE: u64 = 256 << 20;

/// Reads one file that should hold a run; `Err` is the warning's message.
pub fn read_run(path: &Path, label: &str) -> Result<Run, String> {
    let bytes = read_capped(path)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err("empty file".into());
    }
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
        if e.is_eof() {
            format!("truncated JSON ({e})")
        } else {
            format!("not valid JSON ({e})")
        }
    })?;
    if let Some(version) = v.get("schema_version").and_then(Value::as_u64) {
        if version > u64::from(SCHEMA_VERSION) {
            return Err(format!(
                "written by a newer xbench (report schema version {version}; this xbench reads \
                 up to {SCHEMA_VERSION}); upgrade xbench to include it"
            ));
        }
        let report: TestReport =
            serde_json::from_value(v).map_err(|e| format!("not a valid xbench report ({e})"))?;
        return Run::from_report(&report, path.to_path_buf(), label).map_err(|e| e.to_string());
    }
    if iperf3::looks_like_iperf3(&v) {
        return iperf3::to_run(&v, path.to_path_buf(), label);
    }
    Err("neither an xbench report nor iperf3 -J output".into())
}

/// The xbench report a run file holds, for what [`Run`] leaves out (where and how it was
/// measured); `Ok(None)` for an iperf3 file.
pub fn read_report(path: &Path) -> Result<Option<TestReport>, String> {
    let v = read_json(path)?;
    if v.get("schema_version").is_none() {
        return Ok(None);
    }
    serde_json::from_value(v)
        .map(Some)
        .map_err(|e| format!("not a valid xbench report ({e})"))
}

/// A run file as JSON.
pub(crate) fn read_json(path: &Path) -> Result<Value, String> {
    let bytes = read_capped(path)?;
    serde_json::from_slice(&bytes).map_err(|e| format!("not valid JSON ({e})"))
}

/// A regular file's bytes, at most [`MAX_RUN_FILE`] of them.
fn read_capped(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let f = fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let meta = f.metadata().map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    f.take(MAX_RUN_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_RUN_FILE {
        return Err(format!(
            "larger than {} MiB: not a saved run",
            MAX_RUN_FILE >> 20
        ));
    }
    Ok(bytes)
}

fn walk(root: &Path, dir: &Path, fallback: &str, loaded: &mut Loaded) -> Result<(), LoadError> {
    let io = |source| LoadError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut entries: Vec<_> = fs::read_dir(dir)
        .map_err(io)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(io)?;
    // Numeric order for run-2 before run-10; plain order otherwise.
    entries.sort_by_key(|e| natural_key(&e.file_name().to_string_lossy()));
    for e in entries {
        let name = e.file_name();
        let name = name.to_string_lossy();
        // Hidden files include a sweep's temporary files, which are never whole runs.
        if name.starts_with('.') {
            continue;
        }
        let path = e.path();
        let ty = e.file_type().map_err(io)?;
        if ty.is_dir() {
            // A fleet's per-instance reports: already counted in the merged run beside them.
            if crate::layout::is_fleet_dir(&name) {
                continue;
            }
            walk(root, &path, fallback, loaded)?;
        } else if name.ends_with(".json") {
            let label = path
                .strip_prefix(root)
                .ok()
                .and_then(|rel| {
                    let mut c = rel.components();
                    let first = c.next()?;
                    // A file directly in the root has no label directory.
                    c.next()?;
                    Some(first.as_os_str().to_string_lossy().into_owned())
                })
                .unwrap_or_else(|| fallback.to_owned());
            read_file(&path, &label, loaded);
        }
    }
    Ok(())
}

fn read_file(path: &Path, label: &str, loaded: &mut Loaded) {
    loaded.files_seen += 1;
    match read_run(path, label) {
        Ok(run) => loaded.runs.push(run),
        Err(message) => loaded.warnings.push(Warning {
            path: path.to_path_buf(),
            message,
        }),
    }
}

fn dir_name(p: &Path) -> String {
    let abs = if p.as_os_str().is_empty() || p == Path::new(".") {
        std::env::current_dir().unwrap_or_else(|_| p.to_path_buf())
    } else {
        p.to_path_buf()
    };
    abs.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "results".to_owned())
}

/// Splits a name into text and number runs so that `run-10` sorts after `run-9`.
fn natural_key(s: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            let mut n = u64::from(c as u8 - b'0');
            while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                n = n
                    .saturating_mul(10)
                    .saturating_add(u64::from(*d as u8 - b'0'));
                chars.next();
            }
            out.push((std::mem::take(&mut text), n));
        } else {
            text.push(c);
        }
    }
    out.push((text, 0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec!["run-10.json", "run-9.json", "run-1.json", "a"];
        v.sort_by_key(|s| natural_key(s));
        assert_eq!(v, ["a", "run-1.json", "run-9.json", "run-10.json"]);
    }

    #[test]
    fn bad_files_are_warnings_naming_the_problem() {
        let dir = std::env::temp_dir().join(format!("xbench-load-{}", std::process::id()));
        let sub = dir.join("lbl");
        fs::create_dir_all(&sub).unwrap();
        fs::write(sub.join("empty.json"), "").unwrap();
        fs::write(sub.join("cut.json"), "{\"schema_version\": 1, \"xbe").unwrap();
        fs::write(sub.join("newer.json"), "{\"schema_version\": 99}").unwrap();
        fs::write(sub.join("other.json"), "[1, 2]").unwrap();
        fs::write(sub.join(".run-1.json.tmp-1"), "{").unwrap();
        let l = load(std::slice::from_ref(&dir)).unwrap();
        assert!(l.runs.is_empty());
        assert_eq!(l.files_seen, 4);
        let msg = |f: &str| {
            l.warnings
                .iter()
                .find(|w| w.path.ends_with(f))
                .map(|w| w.message.clone())
                .unwrap()
        };
        assert_eq!(msg("empty.json"), "empty file");
        assert!(msg("cut.json").starts_with("truncated JSON"));
        assert!(msg("newer.json").contains("newer xbench"));
        assert!(msg("other.json").contains("neither"));
        assert!(matches!(
            load(&[dir.join("nope")]),
            Err(LoadError::Missing(_))
        ));
        fs::remove_dir_all(&dir).unwrap();
    }
}
