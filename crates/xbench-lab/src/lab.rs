//! A built lab and its life: [`Lab::up`] builds one from a [`LabSpec`] (taking the state
//! directory's lock, writing the state file ahead of every namespace and process it creates),
//! [`Lab::attach`] uses one that `xbench lab up` left running, and [`down`] removes a lab —
//! or the leftovers of a killed one — by its state file and by its namespace prefix.
//!
//! A [`Lab`] that built its lab removes it when dropped: on an error half-way through
//! building, on a panic that unwinds through its owner, or at the end of `xbench lab run`.
//! [`Lab::keep`] leaves it up instead. Not for: deciding what to measure on it (the caller
//! runs its own tests, in [`PathInfo::client_netns`]).

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::delay::{DelayLine, DelayLineSpec, DelayLineStats, LineParams, TunEnd};
use crate::error::LabError;
use crate::plan::{self, DelayLinePlan, Link, LinkKind, PathInfo, Qdisc, ServerPlan, VpnPlan};
use crate::spec::{Backend, LabSpec, PathKind};
use crate::state::{self, LabLock, LabState, STATE_VERSION};
use crate::sys::netns::{self, Detach};
use crate::sys::process::{self, ProcRecord};
use crate::sys::{cmd, privilege};
use crate::vpn;

/// How long a VPN tunnel may take to come up (TLS handshake over a slow, lossy underlay).
const VPN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a helper process may take to report that it runs.
const HELPER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a path may take to carry a first connection once built.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Spin before each delay-line deadline, ns. On the CI's virtual machines a timer wake-up
/// comes 20–50 µs late even for a SCHED_FIFO thread with 1 ns slack; waking 25 µs early and
/// spinning the rest halved the line's added round trip (388 → 209 µs) at no measurable CPU
/// cost at 200 Mbit/s, where packets are ~60 µs apart (crate README, "Accuracy").
pub const DEFAULT_SPIN_NS: u64 = 25_000;

/// Path of the stats file a delay-line process keeps for path `label`.
pub fn delay_stats_path(state_dir: &Path, label: &str) -> PathBuf {
    state_dir.join(format!("delay-{label}.json"))
}

/// A lab that is up.
#[derive(Debug)]
pub struct Lab {
    dir: PathBuf,
    state: LabState,
    /// Held while this process builds, runs or removes the lab.
    lock: Option<LabLock>,
    /// Whether dropping this value removes the lab (true for a lab this value built).
    owned: bool,
    /// Helpers this process started, so they are reaped, not left as zombies.
    children: Vec<(ProcRecord, Child)>,
    /// Delay lines running as threads of this process (no `xbench` executable given).
    lines: Vec<(String, DelayLine)>,
}

/// What [`down`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Teardown {
    /// Processes stopped, by role.
    pub stopped: Vec<String>,
    /// Namespaces deleted.
    pub removed_netns: Vec<String>,
    /// What could not be removed, with why.
    pub problems: Vec<String>,
}

impl Teardown {
    /// True when nothing was there to remove.
    pub fn is_empty(&self) -> bool {
        self.stopped.is_empty() && self.removed_netns.is_empty() && self.problems.is_empty()
    }
}

impl Lab {
    /// Builds the lab described by `spec`. Raising `cancel` (Ctrl-C) stops the build at the
    /// next step; whatever was built is removed before this returns an error.
    pub fn up(spec: &LabSpec, cancel: &AtomicBool) -> Result<Lab, LabError> {
        spec.validate()?;
        // Missing programs first: installing them is the step a user takes before sudo.
        cmd::require("ip", "iproute2", "the lab")?;
        cmd::require("tc", "iproute2", "the lab")?;
        let has_vpn = spec.paths.iter().any(|p| p.kind == PathKind::Vpn);
        let openvpn = if has_vpn {
            cmd::require("openssl", "openssl", "the vpn path's certificates")?;
            Some(vpn::openvpn_program()?)
        } else {
            None
        };
        if let Some(x) = &spec.xbench
            && !cmd::is_executable(x)
        {
            return Err(LabError::InvalidSpec(format!(
                "{} is not an executable xbench",
                x.display()
            )));
        }
        privilege::check()?;
        let lock = LabLock::acquire(&spec.state_dir, &spec.command)?;
        if let Some(st) = LabState::load(&spec.state_dir)? {
            return Err(LabError::AlreadyUp {
                holder: st.builder,
                state_dir: spec.state_dir.clone(),
            });
        }
        let leftovers: Vec<String> = netns::list()
            .into_iter()
            .filter(|n| n.starts_with(&spec.prefix))
            .collect();
        if !leftovers.is_empty() {
            return Err(LabError::Leftovers {
                names: leftovers,
                prefix: spec.prefix.clone(),
            });
        }
        let mut lab = Lab {
            dir: spec.state_dir.clone(),
            state: LabState {
                version: STATE_VERSION,
                prefix: spec.prefix.clone(),
                builder: state::this_process(&spec.command),
                complete: false,
                netns: Vec::new(),
                processes: Vec::new(),
                paths: Vec::new(),
            },
            lock: Some(lock),
            owned: true,
            children: Vec::new(),
            lines: Vec::new(),
        };
        lab.save()?;
        // On any error from here, dropping `lab` removes what was built.
        lab.build(spec, openvpn.as_deref(), cancel)?;
        lab.state.complete = true;
        lab.save()?;
        Ok(lab)
    }

    /// Uses the lab `xbench lab up` left in `state_dir`, holding its lock so nothing else
    /// builds or removes it meanwhile. Dropping the value leaves the lab up.
    pub fn attach(state_dir: &Path, command: &str) -> Result<Lab, LabError> {
        let lock = LabLock::acquire(state_dir, command)?;
        let st = LabState::load(state_dir)?.ok_or_else(|| LabError::NotUp {
            state_dir: state_dir.to_owned(),
        })?;
        if !st.complete {
            return Err(LabError::Leftovers {
                names: st.netns.clone(),
                prefix: st.prefix.clone(),
            });
        }
        Ok(Lab {
            dir: state_dir.to_owned(),
            state: st,
            lock: Some(lock),
            owned: false,
            children: Vec::new(),
            lines: Vec::new(),
        })
    }

    /// The paths, in the order they were asked for.
    pub fn paths(&self) -> &[PathInfo] {
        &self.state.paths
    }

    /// The path labelled `label`.
    pub fn path(&self, label: &str) -> Option<&PathInfo> {
        self.state.paths.iter().find(|p| p.label == label)
    }

    /// The lab's state as recorded on disk.
    pub fn state(&self) -> &LabState {
        &self.state
    }

    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        &self.dir
    }

    /// Accuracy and counts of the delay line of path `label`, if it has one.
    pub fn delay_line_stats(&self, label: &str) -> Option<DelayLineStats> {
        if let Some((_, l)) = self.lines.iter().find(|(l, _)| l == label) {
            return Some(l.stats());
        }
        DelayLineStats::load(&delay_stats_path(&self.dir, label)).ok()
    }

    /// Leaves the lab up (for `xbench lab up`) and releases the lock. Delay lines running as
    /// threads would die with this process, so a lab without an `xbench` executable cannot be
    /// kept.
    pub fn keep(mut self) -> Result<LabState, LabError> {
        if !self.lines.is_empty() {
            return Err(LabError::InvalidSpec(
                "a lab whose delay lines run in this process cannot outlive it; give LabSpec::xbench"
                    .into(),
            ));
        }
        self.owned = false;
        self.lock = None;
        Ok(self.state.clone())
    }

    /// Removes the lab now and says what was removed.
    pub fn down(mut self) -> Teardown {
        self.owned = false;
        self.teardown()
    }

    fn save(&self) -> Result<(), LabError> {
        self.state.save(&self.dir)
    }

    fn teardown(&mut self) -> Teardown {
        let mut t = Teardown::default();
        for (label, line) in self.lines.drain(..) {
            let _final_stats = line.stop();
            t.stopped.push(format!("delay line {label}"));
        }
        let mut children = std::mem::take(&mut self.children);
        for rec in self.state.processes.iter().rev() {
            let child = children.iter_mut().find(|(r, _)| r == rec).map(|(_, c)| c);
            if process::stop(rec, child, Duration::from_secs(3)) {
                t.stopped.push(rec.role.clone());
            }
        }
        sweep(&self.state.prefix, &self.state.netns, &mut t);
        if let Err(e) = state::remove(&self.dir) {
            t.problems.push(e.to_string());
        }
        remove_files(&self.dir);
        t
    }

    fn build(
        &mut self,
        spec: &LabSpec,
        openvpn: Option<&Path>,
        cancel: &AtomicBool,
    ) -> Result<(), LabError> {
        let check = || {
            if cancel.load(Ordering::Relaxed) {
                Err(LabError::Cancelled)
            } else {
                Ok(())
            }
        };
        let hub = format!("{}c", spec.prefix);
        self.add_netns(&hub, false)?;
        let wants_delay = spec.paths.iter().any(|p| p.impairment.needs_delay_line());
        let netem = match spec.backend {
            Backend::DelayLine => false,
            _ if !wants_delay => false,
            _ => netem_available(&hub),
        };
        if spec.backend == Backend::Netem && wants_delay && !netem {
            return Err(LabError::Helper {
                what: "the kernel's netem qdisc".into(),
                detail: "this kernel has no sch_netem; use the userspace delay line \
                         (backend delay-line, or auto)"
                    .into(),
            });
        }
        let plan = plan::plan(spec, netem);
        self.state.paths = plan.paths.clone();
        self.save()?;
        for (ns, forwards) in plan.namespaces.iter().skip(1) {
            check()?;
            self.add_netns(ns, *forwards)?;
        }
        for l in &plan.links {
            check()?;
            create_link(l)?;
        }
        for d in &plan.delay_lines {
            check()?;
            self.start_delay_line(d, spec)?;
        }
        for r in &plan.routes {
            let dest = r.dest.to_string();
            let mut args = vec!["-n", &r.ns, "route", "add", &dest];
            let via = r.via.map(|v| v.to_string());
            if let Some(v) = &via {
                args.extend(["via", v]);
            }
            args.extend(["dev", &r.dev]);
            cmd::ip(&args)?;
        }
        for q in &plan.qdiscs {
            for c in qdisc_commands(q) {
                let args: Vec<&str> = c.iter().map(String::as_str).collect();
                cmd::tc(&args)?;
            }
        }
        if let Some(openvpn) = openvpn {
            for v in &plan.vpns {
                check()?;
                self.start_vpn(v, openvpn, cancel)?;
            }
        }
        if let Some(xbench) = &spec.xbench {
            for s in &plan.servers {
                check()?;
                self.start_server(s, xbench)?;
            }
        }
        for p in &plan.paths {
            probe(p, spec.xbench.is_some(), cancel)?;
        }
        Ok(())
    }

    fn add_netns(&mut self, name: &str, forwards: bool) -> Result<(), LabError> {
        // Recorded before it exists, so a kill between the two still leaves a record.
        self.state.netns.push(name.to_owned());
        self.save()?;
        netns::add(name)?;
        // No IPv6: router solicitations and DAD would otherwise cross the delay line and
        // the counters the accuracy tests read. (Absent when the kernel has no IPv6.)
        for key in [
            "net/ipv6/conf/all/disable_ipv6",
            "net/ipv6/conf/default/disable_ipv6",
        ] {
            let _ = netns::sysctl(name, key, "1");
        }
        if forwards {
            netns::sysctl(name, "net/ipv4/ip_forward", "1")?;
        }
        Ok(())
    }

    fn record(&mut self, rec: ProcRecord, child: Child) -> Result<(), LabError> {
        self.state.processes.push(rec.clone());
        self.children.push((rec, child));
        self.save()
    }

    /// Spawns a detached helper in `ns`, records it, and returns its record.
    fn spawn_helper(
        &mut self,
        ns: &str,
        role: String,
        mut command: Command,
        log: &Path,
    ) -> Result<ProcRecord, LabError> {
        let log_file = xbench::file::create_regular(log)
            .map_err(|e| LabError::io(format!("cannot create {}", log.display()), e))?;
        let err_file = log_file
            .try_clone()
            .map_err(|e| LabError::io(format!("cannot open {}", log.display()), e))?;
        command
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(err_file);
        let child =
            netns::spawn_in(ns, &mut command, Detach::Session).map_err(|e| LabError::Helper {
                what: role.clone(),
                detail: e.to_string(),
            })?;
        let rec = ProcRecord::of(child.id(), role.clone()).ok_or_else(|| LabError::Helper {
            what: role.clone(),
            detail: format!("it exited at once; {}", vpn::log_tail(log, 10)),
        })?;
        self.record(rec.clone(), child)?;
        Ok(rec)
    }

    fn start_delay_line(&mut self, d: &DelayLinePlan, spec: &LabSpec) -> Result<(), LabError> {
        let imp = d.impairment;
        let params = |seed| LineParams {
            delay_ns: imp.delay.as_nanos() as u64,
            jitter_ns: imp.jitter.as_nanos() as u64,
            loss: imp.loss,
            reorder: imp.reorder,
            reorder_hold_ns: crate::delay::DEFAULT_REORDER_HOLD_NS,
            seed,
        };
        let line = DelayLineSpec {
            a: TunEnd {
                netns: d.a.ns.clone(),
                dev: d.a.dev.clone(),
            },
            b: TunEnd {
                netns: d.b.ns.clone(),
                dev: d.b.dev.clone(),
            },
            a_to_b: params(d.seeds[0]),
            b_to_a: params(d.seeds[1]),
            realtime: true,
            spin_ns: spec.delay_spin.as_nanos() as u64,
            offload: imp.loss == 0.0 && imp.reorder == 0.0,
        };
        let Some(xbench) = &spec.xbench else {
            self.lines.push((d.label.clone(), DelayLine::start(&line)?));
            return Ok(());
        };
        let stats = delay_stats_path(&self.dir, &d.label);
        let _ = std::fs::remove_file(&stats);
        let json = serde_json::to_string(&line)
            .map_err(|e| LabError::io("cannot encode the delay line", std::io::Error::other(e)))?;
        let mut c = Command::new(xbench);
        c.args(["lab", "delay-line", "--stats"])
            .arg(&stats)
            .arg(json);
        let log = self.dir.join(format!("delay-{}.log", d.label));
        let role = format!("delay line {}", d.label);
        let rec = self.spawn_helper(&d.a.ns, role.clone(), c, &log)?;
        // The helper writes its first stats once both devices are attached.
        let started = wait_for(HELPER_TIMEOUT, || {
            if stats.exists() {
                Ok(true)
            } else if !rec.is_running() {
                Err(LabError::Helper {
                    what: role.clone(),
                    detail: vpn::log_tail(&log, 10),
                })
            } else {
                Ok(false)
            }
        })?;
        if !started {
            return Err(LabError::Helper {
                what: role,
                detail: format!(
                    "no stats after {HELPER_TIMEOUT:?}; {}",
                    vpn::log_tail(&log, 10)
                ),
            });
        }
        Ok(())
    }

    fn start_vpn(
        &mut self,
        v: &VpnPlan,
        openvpn: &Path,
        cancel: &AtomicBool,
    ) -> Result<(), LabError> {
        let keys = self.dir.join(format!("vpn-{}", v.label));
        let ga = vpn::make_identity(&keys, "ga")?;
        let gb = vpn::make_identity(&keys, "gb")?;
        let mut recs = Vec::new();
        for (ns, local, remote, me, peer, server, side) in [
            (&v.ga.0, v.ga.1, v.gb.1, &ga, &gb, true, "ga"),
            (&v.gb.0, v.gb.1, v.ga.1, &gb, &ga, false, "gb"),
        ] {
            let mut c = Command::new(openvpn);
            c.args(vpn::args(&v.dev, local, remote, me, peer, server));
            let log = self.dir.join(format!("vpn-{}-{side}.log", v.label));
            let role = format!("openvpn {} {side}", v.label);
            let rec = self.spawn_helper(ns, role.clone(), c, &log)?;
            recs.push((rec, log, role));
        }
        let deadline = Instant::now() + VPN_TIMEOUT;
        for (rec, log, role) in &recs {
            loop {
                if cancel.load(Ordering::Relaxed) {
                    return Err(LabError::Cancelled);
                }
                let text = std::fs::read_to_string(log).unwrap_or_default();
                if text.contains(vpn::READY_LINE) {
                    break;
                }
                if !rec.is_running() || Instant::now() > deadline {
                    return Err(LabError::Helper {
                        what: role.clone(),
                        detail: format!(
                            "the tunnel did not come up within {VPN_TIMEOUT:?}; {}",
                            vpn::log_tail(log, 12)
                        ),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    fn start_server(&mut self, s: &ServerPlan, xbench: &Path) -> Result<(), LabError> {
        let mut c = Command::new(xbench);
        c.args([
            "server",
            "-p",
            &s.port.to_string(),
            "-B",
            &s.addr.to_string(),
        ]);
        let log = self.dir.join(format!("server-{}.log", s.label));
        self.spawn_helper(&s.ns, format!("xbench server {}", s.label), c, &log)
            .map(drop)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.owned {
            self.owned = false;
            let _ = self.teardown();
        }
    }
}

/// Removes the lab recorded in `state_dir`, or the leftovers of a killed one: stops its
/// processes by id, stops any other process inside its namespaces, and deletes every
/// namespace it recorded or that starts with its prefix (`prefix` is used when there is no
/// state file). Refuses, naming the holder, while another process builds or runs the lab.
pub fn down(state_dir: &Path, prefix: &str, command: &str) -> Result<Teardown, LabError> {
    privilege::check()?;
    let _lock = LabLock::acquire(state_dir, command)?;
    let st = LabState::load(state_dir)?;
    let mut t = Teardown::default();
    let recorded: Vec<String> = st.as_ref().map(|s| s.netns.clone()).unwrap_or_default();
    if let Some(s) = &st {
        for rec in s.processes.iter().rev() {
            if process::stop(rec, None, Duration::from_secs(3)) {
                t.stopped.push(rec.role.clone());
            }
        }
        if s.prefix != prefix {
            sweep(&s.prefix, &recorded, &mut t);
        }
    }
    sweep(prefix, &recorded, &mut t);
    state::remove(state_dir)?;
    remove_files(state_dir);
    Ok(t)
}

/// Stops every process in, then deletes, the namespaces in `recorded` and those that start
/// with `prefix`.
fn sweep(prefix: &str, recorded: &[String], t: &mut Teardown) {
    let mut names: BTreeSet<String> = recorded.iter().cloned().collect();
    names.extend(netns::list().into_iter().filter(|n| n.starts_with(prefix)));
    let names: Vec<String> = names.into_iter().filter(|n| netns::exists(n)).collect();
    let inodes: Vec<u64> = names.iter().filter_map(|n| netns::inode(n)).collect();
    for pid in process::in_namespaces(&inodes) {
        if let Some(rec) = ProcRecord::of(pid, format!("process {pid} left in the lab"))
            && process::stop(&rec, None, Duration::from_secs(3))
        {
            t.stopped.push(rec.role);
        }
    }
    for n in names {
        match netns::delete(&n) {
            Ok(()) => t.removed_netns.push(n),
            Err(e) => t.problems.push(e.to_string()),
        }
    }
}

/// Removes keys and stats a lab left; logs stay for a post-mortem.
fn remove_files(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let p = e.path();
        if name.starts_with("vpn-") && p.is_dir() {
            let _ = std::fs::remove_dir_all(&p);
        } else if name.starts_with("delay-") && name.ends_with(".json") {
            let _ = std::fs::remove_file(&p);
        }
    }
}

fn create_link(l: &Link) -> Result<(), LabError> {
    let (a, b) = (&l.a, &l.b);
    match &l.kind {
        LinkKind::Veth(net) => {
            cmd::ip(&[
                "link", "add", &a.dev, "netns", &a.ns, "type", "veth", "peer", "name", &b.dev,
                "netns", &b.ns,
            ])?;
            for e in [a, b] {
                if let Some(addr) = e.addr {
                    let cidr = format!("{addr}/{}", net.len);
                    cmd::ip(&["-n", &e.ns, "addr", "add", &cidr, "dev", &e.dev])?;
                }
                cmd::ip(&["-n", &e.ns, "link", "set", &e.dev, "up"])?;
            }
        }
        LinkKind::DelayTun | LinkKind::VpnTun(_) => {
            let mtu = plan::MTU.to_string();
            for (e, peer) in [(a, b), (b, a)] {
                cmd::ip(&["-n", &e.ns, "tuntap", "add", "dev", &e.dev, "mode", "tun"])?;
                // A longer queue than the default 500 absorbs the bursts a TCP sender makes
                // while the reader thread is scheduled out.
                cmd::ip(&[
                    "-n",
                    &e.ns,
                    "link",
                    "set",
                    &e.dev,
                    "mtu",
                    &mtu,
                    "txqueuelen",
                    "2000",
                    "up",
                ])?;
                if let (Some(addr), Some(p)) = (e.addr, peer.addr) {
                    cmd::ip(&[
                        "-n",
                        &e.ns,
                        "addr",
                        "add",
                        &addr.to_string(),
                        "peer",
                        &p.to_string(),
                        "dev",
                        &e.dev,
                    ])?;
                }
            }
        }
    }
    Ok(())
}

/// The `tc` argument lists that put `q` on its device.
pub(crate) fn qdisc_commands(q: &Qdisc) -> Vec<Vec<String>> {
    let base = |rest: &[&str]| -> Vec<String> {
        ["-n", &q.ns, "qdisc", "replace", "dev", &q.dev]
            .iter()
            .chain(rest)
            .map(|s| s.to_string())
            .collect()
    };
    let tbf_args = |t: &plan::Tbf| -> Vec<String> {
        vec![
            "tbf".into(),
            "rate".into(),
            format!("{}bit", t.rate_bps),
            "burst".into(),
            t.burst_bytes.to_string(),
            "limit".into(),
            t.limit_bytes.to_string(),
        ]
    };
    let mut out = Vec::new();
    match (&q.netem, &q.tbf) {
        (None, Some(t)) => {
            let mut c = base(&["root"]);
            c.extend(tbf_args(t));
            out.push(c);
        }
        (Some(n), tbf) => {
            let mut c = base(&["root", "handle", "1:", "netem", "limit", "100000"]);
            if !n.delay.is_zero() {
                c.extend(["delay".into(), format!("{}us", n.delay.as_micros())]);
                if !n.jitter.is_zero() {
                    c.push(format!("{}us", n.jitter.as_micros()));
                }
            }
            if n.loss > 0.0 {
                c.extend(["loss".into(), format!("{}%", n.loss * 100.0)]);
            }
            out.push(c);
            if let Some(t) = tbf {
                let mut c: Vec<String> = ["-n", &q.ns, "qdisc", "add", "dev", &q.dev]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                c.extend(["parent".into(), "1:1".into(), "handle".into(), "10:".into()]);
                c.extend(tbf_args(t));
                out.push(c);
            }
        }
        (None, None) => {}
    }
    out
}

/// Whether `tc` can make a netem qdisc here (tried on the loopback of namespace `ns`).
fn netem_available(ns: &str) -> bool {
    let ok = cmd::tc(&[
        "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms",
    ])
    .is_ok();
    if ok {
        let _ = cmd::tc(&["-n", ns, "qdisc", "del", "dev", "lo", "root"]);
    }
    ok
}

/// Calls `f` every 20 ms until it returns true (then true) or fails, or `limit` passes (then
/// false).
fn wait_for(
    limit: Duration,
    mut f: impl FnMut() -> Result<bool, LabError>,
) -> Result<bool, LabError> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if f()? {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(false)
}

/// Checks that a TCP connection from the hub reaches the path's server namespace. With
/// servers, the xbench server must accept; without, a refusal (RST from the server's kernel)
/// proves the path just as well.
fn probe(p: &PathInfo, servers: bool, cancel: &AtomicBool) -> Result<(), LabError> {
    let port = if servers { p.server_port } else { 9 };
    let target = SocketAddr::from((p.server_addr, port));
    let until = Instant::now() + PROBE_TIMEOUT;
    let mut last = String::new();
    while Instant::now() < until {
        if cancel.load(Ordering::Relaxed) {
            return Err(LabError::Cancelled);
        }
        let r = netns::run_in(&p.client_netns, || {
            TcpStream::connect_timeout(&target, Duration::from_secs(1))
        })?;
        match r {
            Ok(_) => return Ok(()),
            Err(e) if !servers && e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Ok(());
            }
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(LabError::Unreachable {
        path: p.label.clone(),
        detail: format!(
            "no TCP connection from {} to {target} within {PROBE_TIMEOUT:?} (last error: {last})",
            p.client_netns
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Impairment;

    #[test]
    fn tbf_alone_and_under_netem() {
        let t = plan::Tbf {
            rate_bps: 200_000_000,
            burst_bytes: 25_000,
            limit_bytes: 275_000,
        };
        let q = Qdisc {
            ns: "x-wa".into(),
            dev: "wan".into(),
            tbf: Some(t),
            netem: None,
        };
        assert_eq!(
            qdisc_commands(&q),
            [[
                "-n",
                "x-wa",
                "qdisc",
                "replace",
                "dev",
                "wan",
                "root",
                "tbf",
                "rate",
                "200000000bit",
                "burst",
                "25000",
                "limit",
                "275000"
            ]]
        );
        let q = Qdisc {
            netem: Some(Impairment {
                delay: Duration::from_millis(10),
                jitter: Duration::from_millis(1),
                loss: 0.01,
                rate_bps: Some(200_000_000),
                queue_bytes: None,
                reorder: 0.0,
            }),
            ..q
        };
        let c = qdisc_commands(&q);
        assert_eq!(c.len(), 2);
        assert!(
            c[0].join(" ")
                .ends_with("netem limit 100000 delay 10000us 1000us loss 1%")
        );
        assert!(
            c[1].join(" ")
                .contains("parent 1:1 handle 10: tbf rate 200000000bit")
        );
    }
}
