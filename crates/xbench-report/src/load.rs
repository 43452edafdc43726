//! Reading saved runs: directories (walked recursively for `*.json`) and single files, each an
//! xbench `TestReport` or an `iperf3 -J` file told apart by their shape.
//!
//! A file that cannot be used (truncated, corrupt, from a newer xbench, an interrupted run, an
//! iperf3 SCTP test, a figure that cannot be true) becomes a [`Warning`] naming it and is
//! skipped; one bad file never stops a report. Only regular files are read (a symbolic link is
//! followed to one; a FIFO, a device or a link to one is skipped with a warning) and none
//! larger than a limit ([`DEFAULT_FILE_LIMIT`] unless the caller gives another), so that a FIFO
//! cannot block a report nor `/dev/zero` or a huge file take its memory. An xbench report is
//! parsed straight into its types, never held as a JSON tree, and a file over 16 MiB is parsed
//! as it is read, never held as text: a 100 MB run costs about as much memory as its figures.
//!
//! A path that does not exist is an error. The label of a run is the one inside it
//! (`--label`, iperf3's `--title`), else the directory directly below the one named on the
//! command line that holds it (`DIR/<label>/…`), else the name of that directory itself (or of
//! a named file's directory). This module does not group runs (see `table`).

use std::fmt;
use std::fs;
use std::io::{self, BufReader, Read, Seek};
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

/// The largest file read by default, bytes: 1 GiB. Ten times the largest run xbench writes
/// in ordinary use: an hour of `-P 128 -i 1` is about 250 MB, a `--flows 65536 --per-flow`
/// request/response run about 25 MB (6.0 MB measured for 16,384 flows). `xbench report` and
/// `compare` take `--max-file-size` to raise it.
pub const DEFAULT_FILE_LIMIT: u64 = 1 << 30;

/// Reads every run under `paths` (directories or files), each file at most
/// [`DEFAULT_FILE_LIMIT`] bytes.
pub fn load(paths: &[PathBuf]) -> Result<Loaded, LoadError> {
    load_with_limit(paths, DEFAULT_FILE_LIMIT)
}

/// [`load`] with another limit on the size of one file, bytes.
pub fn load_with_limit(paths: &[PathBuf], file_limit: u64) -> Result<Loaded, LoadError> {
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
            walk(root, root, &fallback, file_limit, &mut loaded)?;
        } else {
            let parent = root.parent().unwrap_or(Path::new("."));
            let fallback = dir_name(parent);
            read_file(root, &fallback, file_limit, &mut loaded);
        }
    }
    Ok(loaded)
}

/// Reads one file that should hold a run, at most `limit` bytes; `Err` is the warning's
/// message.
pub fn read_run(path: &Path, label: &str, limit: u64) -> Result<Run, String> {
    let mut src = Source::open(path, limit)?;
    // The common case in one pass: an xbench report of a version we read.
    let xbench_error = match src.parse::<TestReport>() {
        Ok(report) if report.schema_version <= SCHEMA_VERSION => {
            return Run::from_report(&report, path.to_path_buf(), label).map_err(|e| e.to_string());
        }
        Ok(_) => None,
        Err(e) => Some(e),
    };
    // Otherwise a second look says what the document is (newer, iperf3's, cut, not JSON),
    // keeping nothing of it.
    if src.is_blank() {
        return Err("empty file".into());
    }
    let shape: Shape = match src.parse() {
        Ok(s) => s,
        Err(e) if e.inner.is_eof() => return Err(format!("truncated JSON ({})", e.inner)),
        Err(e) if e.inner.is_data() => {
            return Err("neither an xbench report nor iperf3 -J output".into());
        }
        Err(e) => return Err(format!("not valid JSON ({})", e.inner)),
    };
    if let Some(version) = shape.schema_version {
        if version > u64::from(SCHEMA_VERSION) {
            return Err(format!(
                "written by a newer xbench (report schema version {version}; this xbench reads \
                 up to {SCHEMA_VERSION}); upgrade xbench to include it"
            ));
        }
        let why = xbench_error.map(|e| e.to_string()).unwrap_or_default();
        return Err(format!("not a valid xbench report ({why})"));
    }
    if shape.is_iperf3() {
        // iperf3's documents are read as a tree: their shape varies by version and mode.
        let v: Value = src
            .parse()
            .map_err(|e| format!("not valid JSON ({})", e.inner))?;
        return iperf3::to_run(&v, path.to_path_buf(), label);
    }
    Err("neither an xbench report nor iperf3 -J output".into())
}

/// The xbench report a run file holds, for what [`Run`] leaves out (where and how it was
/// measured); `Ok(None)` for an iperf3 file. Read under the same rule as [`read_run`]: a
/// regular file of at most `limit` bytes.
pub fn read_report(path: &Path, limit: u64) -> Result<Option<TestReport>, String> {
    let v = read_json(path, limit)?;
    if v.get("schema_version").is_none() {
        return Ok(None);
    }
    serde_json::from_value(v)
        .map(Some)
        .map_err(|e| format!("not a valid xbench report ({e})"))
}

/// A run file as JSON, a regular file of at most `limit` bytes.
pub(crate) fn read_json(path: &Path, limit: u64) -> Result<Value, String> {
    Source::open(path, limit)?
        .parse::<Value>()
        .map_err(|e| format!("not valid JSON ({e})"))
}

/// Files up to this size are read into memory and parsed from there, the fastest way; larger
/// ones are parsed from the file as it is read (about twice as slow), so that memory holds the
/// figures and never the text: a 100 MB run then costs 40 MB rather than 100 MB more.
const IN_MEMORY: u64 = 16 << 20;

/// A saved file, parsed as often as it takes to say what it is.
enum Source {
    Bytes(Vec<u8>),
    File {
        file: io::Take<fs::File>,
        limit: u64,
    },
}

/// A parse error and where in the document it was.
struct ParseError {
    path: String,
    inner: serde_json::Error,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path == "." {
            write!(f, "{}", self.inner)
        } else {
            write!(f, "{}: {}", self.path, self.inner)
        }
    }
}

impl Source {
    fn open(path: &Path, limit: u64) -> Result<Source, String> {
        let mut file = xbench::file::open_regular(path, limit).map_err(|e| e.to_string())?;
        let len = file.get_ref().metadata().map_err(|e| e.to_string())?.len();
        if len > IN_MEMORY {
            return Ok(Source::File { file, limit });
        }
        let mut bytes = Vec::with_capacity(len as usize);
        file.read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read: {e}"))?;
        Ok(Source::Bytes(bytes))
    }

    /// The whole document as a `T`, from the start, nothing but whitespace after it.
    fn parse<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, ParseError> {
        match self {
            Source::Bytes(b) => whole(serde_json::Deserializer::from_slice(b)),
            Source::File { file, limit } => {
                file.set_limit(*limit);
                file.get_mut().rewind().map_err(|e| ParseError {
                    path: ".".into(),
                    inner: serde_json::Error::io(e),
                })?;
                whole(serde_json::Deserializer::from_reader(BufReader::new(
                    file.by_ref(),
                )))
            }
        }
    }

    /// Whether an in-memory file holds nothing but whitespace (a large one is never blank).
    fn is_blank(&self) -> bool {
        matches!(self, Source::Bytes(b) if b.iter().all(u8::is_ascii_whitespace))
    }
}

fn whole<'de, R: serde_json::de::Read<'de>, T: serde::de::DeserializeOwned>(
    mut de: serde_json::Deserializer<R>,
) -> Result<T, ParseError> {
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| ParseError {
        path: e.path().to_string(),
        inner: e.into_inner(),
    })?;
    de.end().map_err(|inner| ParseError {
        path: ".".into(),
        inner,
    })?;
    Ok(value)
}

/// The top-level keys that tell an xbench report from iperf3's `-J` output.
#[derive(serde::Deserialize)]
struct Shape {
    schema_version: Option<u64>,
    start: Option<IperfStart>,
    end: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct IperfStart {
    test_start: Option<serde::de::IgnoredAny>,
}

impl Shape {
    /// As [`iperf3::looks_like_iperf3`]: a `start` with a `test_start`, and an `end`.
    fn is_iperf3(&self) -> bool {
        self.start.as_ref().is_some_and(|s| s.test_start.is_some()) && self.end.is_some()
    }
}

fn walk(
    root: &Path,
    dir: &Path,
    fallback: &str,
    limit: u64,
    loaded: &mut Loaded,
) -> Result<(), LoadError> {
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
            walk(root, &path, fallback, limit, loaded)?;
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
            read_file(&path, &label, limit, loaded);
        }
    }
    Ok(())
}

fn read_file(path: &Path, label: &str, limit: u64, loaded: &mut Loaded) {
    loaded.files_seen += 1;
    match read_run(path, label, limit) {
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

    #[test]
    fn fifos_devices_and_files_over_the_limit_are_skipped_and_named() {
        let dir = std::env::temp_dir().join(format!("xbench-load-special-{}", std::process::id()));
        let sub = dir.join("lbl");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&sub).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(sub.join("run-1.json"))
            .status()
            .unwrap();
        assert!(made.success());
        std::os::unix::fs::symlink("/dev/zero", sub.join("run-2.json")).unwrap();
        fs::write(sub.join("run-3.json"), vec![b' '; 2000]).unwrap();
        // A count cannot be negative: the field is named.
        fs::write(
            sub.join("run-4.json"),
            r#"{"schema_version": 1, "summary": {"directions": [{"retransmits": -5}]}}"#,
        )
        .unwrap();
        let l = load_with_limit(std::slice::from_ref(&dir), 1000).unwrap();
        assert!(l.runs.is_empty());
        let msg = |f: &str| {
            l.warnings
                .iter()
                .find(|w| w.path.ends_with(f))
                .map(|w| w.to_string())
                .unwrap()
        };
        assert!(
            msg("run-1.json").contains("not a regular file (a FIFO)"),
            "{}",
            msg("run-1.json")
        );
        assert!(
            msg("run-2.json").contains("a symbolic link to a character device"),
            "{}",
            msg("run-2.json")
        );
        assert!(
            msg("run-3.json").contains("2000 bytes, more than the limit of 1000"),
            "{}",
            msg("run-3.json")
        );
        assert!(
            msg("run-4.json").contains("summary.directions[0].retransmits"),
            "{}",
            msg("run-4.json")
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
