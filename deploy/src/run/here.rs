//! `run --here`: a path whose client is your own host (the scenario's `client_address`: the
//! home end of field report 003, the campus of report 004) measured from the machine that
//! runs `xbench-deploy`, by a local `xbench client` with the same command line a host gets
//! through SSM. Every other path goes to the executor this one wraps. The seeds measured from
//! those hosts, in the direction they upload: a suite that left those paths to be run by hand
//! lost the very figure the seed was about.
//!
//! The run's key, for a server this tool made, comes from Parameter Store (the operator may
//! read `/xbench/<run>/*`) into a file only its owner can read, removed when the executor is
//! dropped; a process killed before that (a second Ctrl-C, SIGKILL) leaves it in the run's
//! state directory, which `down` clears. Not for running servers: your own host as a path's *server* runs `xbench server`
//! as it always has.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::aws::{BoxFuture, ssm};
use crate::deployer::Deployer;
use crate::error::Error;
use crate::run::{Executor, RunPath, mtu};
use crate::state::Outputs;

/// [`Executor`] that runs the clients of your own host's paths here, and the others through
/// `inner`.
pub struct Here<'a> {
    inner: &'a dyn Executor,
    xbench: PathBuf,
    /// Where each run's stdout and stderr go (the run's state directory).
    dir: PathBuf,
    key: Option<KeyFile>,
    labels: BTreeSet<String>,
    notes: Vec<(String, String)>,
}

impl std::fmt::Debug for Here<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Here")
            .field("xbench", &self.xbench)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

/// What [`Here::new`] needs besides the paths.
#[derive(Debug, Clone)]
pub struct HereOptions {
    /// The `xbench` to run.
    pub xbench: PathBuf,
    /// Where the runs' output and the key file go, in a directory per process (created if
    /// missing; `down` removes it all).
    pub dir: PathBuf,
    /// The run's key, when a path run here dials a server this tool made.
    pub key: Option<String>,
}

impl<'a> Here<'a> {
    /// Takes over the paths of `out` whose client is your host (those `inner`'s constructor
    /// marked unavailable for that reason) and returns them runnable ([`Here::notes`] says
    /// where each runs).
    pub fn new(
        inner: &'a dyn Executor,
        out: &Outputs,
        paths: Vec<RunPath>,
        opts: HereOptions,
    ) -> Result<(Self, Vec<RunPath>), Error> {
        let ours: Vec<&crate::state::PathOutput> = out
            .paths
            .iter()
            .filter(|p| p.client_host.is_none())
            .collect();
        let mut labels = BTreeSet::new();
        let mut notes = Vec::new();
        let mut needs_key = false;
        let paths = paths
            .into_iter()
            .map(|mut p| {
                if let Some(o) = ours.iter().find(|o| o.label == p.label) {
                    p.unavailable = None;
                    needs_key |= p.authenticated;
                    labels.insert(p.label.clone());
                    notes.push((p.label.clone(), where_note(o.run_on)));
                }
                p
            })
            .collect();
        if labels.is_empty() {
            return Err(Error::Here(
                "no path of this run has your host as its client (client_address)".into(),
            ));
        }
        check_xbench(&opts.xbench)?;
        // A directory of this process's own: two `run --here` of one run share nothing, and
        // the key of one is not removed under the other.
        let dir = opts.dir.join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, &e))?;
        let opts = HereOptions { dir, ..opts };
        let key = match (needs_key, opts.key) {
            (false, _) => None,
            (true, Some(k)) => Some(KeyFile::write(&opts.dir.join("here.psk"), &k)?),
            (true, None) => {
                return Err(Error::Here(format!(
                    "run {}'s key is not in Parameter Store ({}); was the run brought up \
                     by this tool?",
                    out.run_id,
                    crate::aws::ssm::psk_parameter(&out.run_id)
                )));
            }
        };
        let here = Here {
            inner,
            xbench: opts.xbench,
            dir: opts.dir,
            key,
            labels,
            notes,
        };
        Ok((here, paths))
    }

    /// A note per path run here: (its label, where it runs and whether this machine holds
    /// the scenario's address for your host).
    pub fn notes(&self) -> &[(String, String)] {
        &self.notes
    }

    fn is_here(&self, path: &RunPath) -> bool {
        self.labels.contains(&path.label)
    }

    async fn go(
        &self,
        path: &RunPath,
        argv: &[String],
        limit: Duration,
    ) -> Result<Vec<u8>, String> {
        let file = |ext: &str| self.dir.join(format!("here-{}.{ext}", path.label));
        let (out_file, err_file) = (file("json"), file("err"));
        super::child::run(&self.xbench, argv, (&out_file, &err_file), limit, |c| {
            c.spawn()
        })
        .await
    }
}

/// What `all --here` checks before it creates anything: that some path of `plan` has your
/// host as its client, and that the xbench to run here can run.
pub fn check_before_up(plan: &crate::plan::Plan, xbench: &Path) -> Result<(), Error> {
    let yours = plan
        .paths
        .iter()
        .any(|p| !matches!(p.client, crate::plan::PathClient::Host(_)));
    if !yours {
        return Err(Error::Here(
            "no path of this scenario has your host as its client (client_address)".into(),
        ));
    }
    check_xbench(xbench)
}

fn check_xbench(xbench: &Path) -> Result<(), Error> {
    if xbench_lab::sys::cmd::is_executable(xbench) {
        return Ok(());
    }
    Err(Error::Here(format!(
        "it runs xbench on this machine, but {} is not an executable xbench (build it beside \
         xbench-deploy: cargo build --release -p xbench-cli; `run --here` also takes --xbench \
         PATH)",
        xbench.display()
    )))
}

/// The run's key from Parameter Store, from the first of the run's regions that has it
/// (`up` stores the same key in each); `None` when none has.
pub async fn run_key(d: &Deployer, out: &Outputs) -> Result<Option<String>, Error> {
    let regions: BTreeSet<&str> = out.hosts.iter().map(|h| h.region.as_str()).collect();
    for region in regions {
        if let Some(k) = ssm::get_psk(&d.aws.region(region), &out.run_id).await? {
            return Ok(Some(k));
        }
    }
    Ok(None)
}

/// Where a path of yours runs, and whether this machine holds the scenario's address for
/// your host: if not, it may be behind NAT with that public address (then the server, which
/// allows that address only, sees it) — or the scenario names another machine, and the
/// server refuses this one.
fn where_note(run_on: Option<Ipv4Addr>) -> String {
    match run_on {
        Some(a) if UdpSocket::bind(SocketAddr::from((a, 0))).is_ok() => {
            format!("its client is this machine ({a}): run here")
        }
        Some(a) => format!(
            "its client is your host {a}, which is not an address of this machine: run here, \
             which works only if this machine reaches the server as {a} (behind NAT); the \
             server allows that address only"
        ),
        None => "its client is your host: run here".into(),
    }
}

impl Executor for Here<'_> {
    fn execute<'a>(
        &'a self,
        path: &'a RunPath,
        instance: usize,
        argv: &'a [String],
        limit: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, String>> {
        if self.is_here(path) {
            Box::pin(self.go(path, argv, limit))
        } else {
            self.inner.execute(path, instance, argv, limit)
        }
    }

    fn start_lead(&self) -> Duration {
        self.inner.start_lead()
    }

    fn check_clocks<'a>(
        &'a self,
        path: &'a RunPath,
    ) -> BoxFuture<'a, Result<Option<String>, String>> {
        self.inner.check_clocks(path)
    }

    fn psk_file(&self, path: &RunPath) -> Option<String> {
        if !self.is_here(path) {
            return self.inner.psk_file(path);
        }
        path.authenticated
            .then(|| self.key.as_ref().map(|k| k.0.display().to_string()))
            .flatten()
    }

    /// Your host's interface toward the server and the path MTU its kernel learned, read
    /// here by the same script a host runs.
    fn path_mtu<'a>(
        &'a self,
        path: &'a RunPath,
    ) -> BoxFuture<'a, Option<Result<mtu::PathMtu, String>>> {
        if !self.is_here(path) {
            return self.inner.path_mtu(path);
        }
        Box::pin(async move {
            let script = mtu::script(&path.target);
            let out = tokio::task::spawn_blocking(move || {
                std::process::Command::new("sh")
                    .args(["-c", &script])
                    .output()
            })
            .await;
            Some(match out {
                Ok(Ok(o)) => Ok(mtu::parse(
                    &path.target,
                    &String::from_utf8_lossy(&o.stdout),
                )),
                Ok(Err(e)) => Err(format!("sh: {e}")),
                Err(e) => Err(e.to_string()),
            })
        })
    }
}

/// The run's key in a file only its owner can read, removed on drop.
struct KeyFile(PathBuf);

impl KeyFile {
    fn write(path: &Path, key: &str) -> Result<KeyFile, Error> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let _ = std::fs::remove_file(path);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| io_error(path, &e))?;
        f.write_all(key.trim().as_bytes())
            .map_err(|e| io_error(path, &e))?;
        Ok(KeyFile(path.to_owned()))
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        // The process's directory, now empty of secrets; the clients' output may stay.
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn io_error(path: &Path, e: &std::io::Error) -> Error {
    Error::StateFile {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}
