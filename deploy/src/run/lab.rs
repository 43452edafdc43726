//! `run --lab`: the same suite on the project's path lab, on this machine, for free — each
//! scenario path becomes a lab path (peering → direct, Transit Gateway → transit, VPN → vpn;
//! public, accelerator and existing → direct), with the one-way delay the user gives, and a
//! real `xbench server` per path started exactly as on AWS (the run's key, `--allow` the
//! path's client address) by the same command builder. Clients run in the lab's client
//! namespace with the same command lines `run` sends through SSM.
//!
//! Needs what the lab needs: Linux, root, iproute2 (and OpenVPN and openssl for vpn paths).
//! Not for building the lab itself: that is `xbench_lab`.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use xbench_lab::sys::netns::{self, Detach};
use xbench_lab::{Impairment, Lab, LabError, LabSpec, PathInfo, PathSpec};

use crate::aws::BoxFuture;
use crate::cidr::Ipv4Cidr;
use crate::command;
use crate::error::Error;
use crate::run::{Executor, RunPath};
use crate::scenario::{PathKind, Scenario};

/// The lab path kind standing in for a scenario path kind.
pub fn lab_kind(kind: PathKind) -> xbench_lab::PathKind {
    match kind {
        PathKind::Peering => xbench_lab::PathKind::Direct,
        PathKind::Tgw => xbench_lab::PathKind::Transit,
        PathKind::Vpn => xbench_lab::PathKind::Vpn,
        // Public, accelerator, existing: a direct link, with the delay the user gives.
        _ => xbench_lab::PathKind::Direct,
    }
}

/// What the rehearsal needs besides the scenario.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// The `xbench` to run servers and clients with.
    pub xbench: PathBuf,
    /// One-way delay per path label; `None` as key: every other path.
    pub delays: BTreeMap<Option<String>, Duration>,
    /// Rate cap per path label, bits per second (`tc tbf`); `None` as key: every other path.
    /// What a fleet test needs: a bottleneck its instances share.
    pub rates: BTreeMap<Option<String>, u64>,
    /// The lab's namespace prefix (two labs need two prefixes).
    pub prefix: String,
    /// The lab's state directory (its lock, logs, and here the run's key).
    pub state_dir: PathBuf,
}

impl LabOptions {
    /// Defaults: prefix `xbd-`, state in `/run/xbench-deploy-lab`, no delay.
    pub fn new(xbench: PathBuf) -> Self {
        LabOptions {
            xbench,
            delays: BTreeMap::new(),
            rates: BTreeMap::new(),
            prefix: "xbd-".into(),
            state_dir: PathBuf::from("/run/xbench-deploy-lab"),
        }
    }

    fn rate(&self, label: &str) -> Option<u64> {
        self.rates
            .get(&Some(label.to_owned()))
            .or_else(|| self.rates.get(&None))
            .copied()
    }

    fn delay(&self, label: &str) -> Duration {
        self.delays
            .get(&Some(label.to_owned()))
            .or_else(|| self.delays.get(&None))
            .copied()
            .unwrap_or_default()
    }
}

/// A lab built for a scenario, with an `xbench server` per path; removed when dropped.
#[derive(Debug)]
pub struct LabRun {
    /// Scenario label → the lab path standing in for it.
    paths: BTreeMap<String, PathInfo>,
    xbench: PathBuf,
    psk: PathBuf,
    servers: Mutex<Vec<Child>>,
    // Dropped last: removes the namespaces once the servers are stopped.
    lab: Lab,
}

fn lab_error(e: LabError) -> Error {
    let usage = e.is_usage()
        || matches!(
            e,
            LabError::Permission { .. } | LabError::MissingProgram { .. }
        );
    Error::Lab {
        message: e.to_string(),
        usage,
    }
}

impl LabRun {
    /// Builds the lab for `scenario`'s paths and starts their servers (blocking: run it off
    /// the async runtime's threads).
    pub fn start(scenario: &Scenario, opts: &LabOptions) -> Result<(LabRun, Vec<RunPath>), Error> {
        if !xbench_lab::sys::cmd::is_executable(&opts.xbench) {
            return Err(Error::Lab {
                message: format!(
                    "{} is not an executable xbench (build it: cargo build -p xbench-cli; or \
                     pass --xbench PATH)",
                    opts.xbench.display()
                ),
                usage: true,
            });
        }
        let mut specs = Vec::new();
        for (i, p) in scenario.paths.iter().enumerate() {
            // Scenario labels can be longer than lab labels (namespace names are short).
            let mut spec = PathSpec::new(lab_kind(p.kind));
            spec.label = format!("p{i}");
            spec.impairment = Impairment {
                delay: opts.delay(&p.label),
                rate_bps: opts.rate(&p.label),
                ..Impairment::default()
            };
            specs.push(spec);
        }
        let mut spec = LabSpec::new(specs);
        spec.prefix = opts.prefix.clone();
        spec.state_dir = opts.state_dir.clone();
        spec.command = format!("xbench-deploy run --lab {}", scenario.name);
        let lab = Lab::up(&spec, &AtomicBool::new(false)).map_err(lab_error)?;
        let psk = lab.state_dir().join("deploy-run.psk");
        write_key(&psk)?;
        let mut run = LabRun {
            paths: BTreeMap::new(),
            xbench: opts.xbench.clone(),
            psk,
            servers: Mutex::new(Vec::new()),
            lab,
        };
        let mut out = Vec::new();
        for (i, p) in scenario.paths.iter().enumerate() {
            let info = run
                .lab
                .path(&format!("p{i}"))
                .cloned()
                .ok_or_else(|| Error::Internal(format!("the lab has no path p{i}")))?;
            run.start_server(&info, scenario.port)?;
            out.push(RunPath {
                label: p.label.clone(),
                target: info.server_addr.to_string(),
                port: scenario.port,
                authenticated: true,
                unavailable: None,
                clients: p.clients,
            });
            run.paths.insert(p.label.clone(), info);
        }
        Ok((run, out))
    }

    /// `xbench server` in the path's server namespace, with the run's key and only the
    /// path's client address allowed, as on AWS; waits until it accepts.
    fn start_server(&self, p: &PathInfo, port: u16) -> Result<(), Error> {
        let allow = [Ipv4Cidr::host(p.client_addr)];
        let bind = p.server_addr.to_string();
        let argv = command::server_argv(port, Some(&bind), &self.psk.display().to_string(), &allow);
        let log = File::create(
            self.lab
                .state_dir()
                .join(format!("deploy-server-{}.log", p.label)),
        )
        .map_err(|e| io_error(&self.lab.state_dir().display().to_string(), e))?;
        let mut c = Command::new(&self.xbench);
        c.args(&argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let child = netns::spawn_in(&p.server_netns, &mut c, Detach::Session)
            .map_err(|e| io_error(&format!("xbench server in {}", p.server_netns), e))?;
        self.servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(child);
        let target = std::net::SocketAddr::from((p.server_addr, port));
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let ok = netns::run_in(&p.client_netns, || {
                std::net::TcpStream::connect_timeout(&target, Duration::from_millis(500)).is_ok()
            })
            .map_err(lab_error)?;
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Lab {
                    message: format!(
                        "xbench server on {target} did not start (see its log in {})",
                        self.lab.state_dir().display()
                    ),
                    usage: false,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The lab path standing in for scenario path `label`.
    pub fn path(&self, label: &str) -> Option<&PathInfo> {
        self.paths.get(label)
    }

    async fn go(
        &self,
        path: &RunPath,
        instance: usize,
        argv: &[String],
        limit: Duration,
    ) -> Result<Vec<u8>, String> {
        let info = self
            .paths
            .get(&path.label)
            .ok_or_else(|| format!("the lab has no path for {}", path.label))?;
        let dir = self.lab.state_dir();
        let out_file = dir.join(format!("deploy-client-{}-{instance}.json", info.label));
        let err_file = dir.join(format!("deploy-client-{}-{instance}.err", info.label));
        super::child::run(&self.xbench, argv, (&out_file, &err_file), limit, |c| {
            netns::spawn_in(&info.client_netns, c, Detach::No)
                .map_err(|e| std::io::Error::other(format!("in {}: {e}", info.client_netns)))
        })
        .await
    }
}

impl Drop for LabRun {
    fn drop(&mut self) {
        let mut servers = self
            .servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for s in servers.iter_mut() {
            let _ = s.kill();
            let _ = s.wait();
        }
    }
}

impl Executor for LabRun {
    fn execute<'a>(
        &'a self,
        path: &'a RunPath,
        instance: usize,
        argv: &'a [String],
        limit: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, String>> {
        Box::pin(self.go(path, instance, argv, limit))
    }

    fn psk_file(&self, path: &RunPath) -> Option<String> {
        path.authenticated.then(|| self.psk.display().to_string())
    }
}

/// A fresh key for the rehearsal, readable by root only.
fn write_key(path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| io_error(&path.display().to_string(), e))?;
    std::io::Write::write_all(&mut f, hex.as_bytes())
        .map_err(|e| io_error(&path.display().to_string(), e))
}

fn io_error(what: &str, e: std::io::Error) -> Error {
    Error::Lab {
        message: format!("{what}: {e}"),
        usage: false,
    }
}
