//! One `xbench client` process on this machine, waited for like a run on a host: its stdout
//! (one JSON report) and stderr go to files beside each other, it is killed when it runs past
//! its limit or when the waiting future is dropped (Ctrl-C), and a run that printed nothing
//! fails with the last line it wrote to stderr. Shared by the lab ([`super::lab`]) and your own
//! host as a path's client ([`super::here`]); not for servers, which outlive a run.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `xbench` with `argv`, started by `spawn` (in a namespace, or here), with stdout to
/// `out_file` and stderr to `err_file`; the report it printed, or why there is none.
pub(crate) async fn run(
    xbench: &Path,
    argv: &[String],
    (out_file, err_file): (&Path, &Path),
    limit: Duration,
    spawn: impl FnOnce(&mut Command) -> std::io::Result<Child>,
) -> Result<Vec<u8>, String> {
    let mut c = Command::new(xbench);
    c.args(argv)
        .stdin(Stdio::null())
        .stdout(File::create(out_file).map_err(|e| format!("{}: {e}", out_file.display()))?)
        .stderr(File::create(err_file).map_err(|e| format!("{}: {e}", err_file.display()))?);
    let mut child = spawn(&mut c).map_err(|e| format!("cannot start {}: {e}", xbench.display()))?;
    // Killed if this future is dropped (Ctrl-C) or runs past its limit.
    let mut guard = KillOnDrop(Some(&mut child));
    let start = Instant::now();
    let status = loop {
        match guard.0.as_mut().map(|c| c.try_wait()) {
            Some(Ok(Some(status))) => break status,
            Some(Ok(None)) => {}
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("the client is gone".into()),
        }
        if start.elapsed() > limit {
            return Err(format!("the client ran past {} s", limit.as_secs()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    guard.0 = None;
    let bytes = std::fs::read(out_file).map_err(|e| e.to_string())?;
    if bytes.is_empty() {
        let err = std::fs::read_to_string(err_file).unwrap_or_default();
        return Err(format!(
            "xbench client exited with {status}: {}",
            err.trim().lines().last().unwrap_or("no output")
        ));
    }
    Ok(bytes)
}

struct KillOnDrop<'a>(Option<&'a mut Child>);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
