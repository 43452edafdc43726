//! Run identity and bookkeeping: the run id, the tags every resource carries, the local state
//! file, and the outputs file later tooling reads.
//!
//! The tags are the source of truth for what a run owns (`down` and `gc` find resources by
//! them); the local state file is only a hint that saves scanning every region and remembers
//! ids whose tags an emulator may drop. Not for talking to AWS.

use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use aws_smithy_types::date_time::{DateTime, Format};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::aws::s3::RunBucket;
use crate::cidr::Ipv4Cidr;
use crate::error::Error;
use crate::scenario::{PathKind, VpnFlavour};

/// Tag key holding the run id. Every resource `up` creates has it.
pub const TAG_RUN: &str = "xbench:run-id";
/// Tag key holding the scenario name.
pub const TAG_SCENARIO: &str = "xbench:scenario";
/// Tag key holding when `gc` may delete the run (RFC 3339, UTC).
pub const TAG_DUE: &str = "xbench:deletion-due";
/// Tag key holding the resource's key in the plan (`vpc/use1`, `host/server-use1`, …), which is
/// how a re-run of `up` finds what it already made.
pub const TAG_KEY: &str = "xbench:key";
/// Tag key holding the regions the run spans, so `down` from another machine knows where to look.
pub const TAG_REGIONS: &str = "xbench:regions";
/// Tag key present (value `yes`) when the run uses placement groups, so `down` calls that API
/// only for runs that need it (the moto emulator does not implement it).
pub const TAG_PLACEMENT: &str = "xbench:placement-groups";
/// Tag key present (value `yes`) when the run uses Transit Gateways (its own, or a VPC
/// attachment to yours): `down` then needs the Transit Gateway listings to answer; a run
/// without it is torn down even when the caller may not list Transit Gateways.
pub const TAG_TGW: &str = "xbench:transit-gateways";
/// Tag key present (value `yes`) when the run uses Global Accelerator: `down` then needs its
/// listing to answer; a run without it is torn down even when the caller has no Global
/// Accelerator permission at all.
pub const TAG_ACCELERATORS: &str = "xbench:accelerators";

/// A run's id: `xb-YYYYMMDD-` and six hex digits, e.g. `xb-20250601-3fa9c0`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

impl RunId {
    /// A new id for a run starting at `now`.
    pub fn generate(now: SystemTime) -> Result<Self, Error> {
        let mut bytes = [0u8; 3];
        getrandom::fill(&mut bytes).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
        let date = format_time(now);
        Ok(RunId(format!(
            "xb-{}{}{}-{:02x}{:02x}{:02x}",
            &date[0..4],
            &date[5..7],
            &date[8..10],
            bytes[0],
            bytes[1],
            bytes[2]
        )))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for RunId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let b = s.as_bytes();
        let ok = b.len() == 18
            && s.starts_with("xb-")
            && b[3..11].iter().all(u8::is_ascii_digit)
            && b[11] == b'-'
            && b[12..]
                .iter()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
        if ok {
            Ok(RunId(s.to_owned()))
        } else {
            Err(Error::BadRunId(s.to_owned()))
        }
    }
}

impl TryFrom<String> for RunId {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        s.parse()
    }
}

impl From<RunId> for String {
    fn from(r: RunId) -> String {
        r.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `t` as RFC 3339 UTC with seconds (`2025-06-01T12:00:00Z`).
pub fn format_time(t: SystemTime) -> String {
    // Whole seconds: tags and file names read better, and nothing needs finer.
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    DateTime::from_secs(i64::try_from(secs).unwrap_or(i64::MAX))
        .fmt(Format::DateTime)
        // Any SystemTime after 1970 and before year 10000 formats; ours is "now" plus a TTL.
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

/// Parses what [`format_time`] writes.
pub fn parse_time(s: &str) -> Option<SystemTime> {
    let dt = DateTime::from_str(s, Format::DateTime).ok()?;
    SystemTime::try_from(dt).ok()
}

/// The tags shared by every resource of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTags {
    /// Run id.
    pub run: RunId,
    /// Scenario name.
    pub scenario: String,
    /// When `gc` may delete it.
    pub deletion_due: String,
    /// Comma-separated regions.
    pub regions: String,
    /// Whether the run uses placement groups.
    pub uses_placement: bool,
    /// Whether the run uses Transit Gateways.
    pub uses_tgw: bool,
    /// Whether the run uses Global Accelerator.
    pub uses_accelerators: bool,
}

impl RunTags {
    /// Tags for a run of `scenario` started at `now` living `ttl`.
    pub fn new(
        run: RunId,
        scenario: &str,
        now: SystemTime,
        ttl: Duration,
        regions: &[String],
    ) -> Self {
        RunTags {
            run,
            scenario: scenario.to_owned(),
            deletion_due: format_time(now + ttl),
            regions: regions.join(","),
            uses_placement: false,
            uses_tgw: false,
            uses_accelerators: false,
        }
    }

    /// Key/value pairs for a resource with plan key `key`, including a readable `Name`.
    pub fn for_resource(&self, key: &str) -> Vec<(String, String)> {
        [
            (
                "Name".into(),
                format!("xbench-{}-{}", self.run, key.replace('/', "-")),
            ),
            (TAG_RUN.into(), self.run.to_string()),
            (TAG_SCENARIO.into(), self.scenario.clone()),
            (TAG_DUE.into(), self.deletion_due.clone()),
            (TAG_KEY.into(), key.to_owned()),
            (TAG_REGIONS.into(), self.regions.clone()),
        ]
        .into_iter()
        .chain(
            [
                (self.uses_placement, TAG_PLACEMENT),
                (self.uses_tgw, TAG_TGW),
                (self.uses_accelerators, TAG_ACCELERATORS),
            ]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, tag)| (tag.into(), "yes".into())),
        )
        .collect()
    }
}

/// What the local state file records about a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LocalState {
    /// Run id.
    pub run_id: Option<RunId>,
    /// Scenario name.
    pub scenario: String,
    /// Regions the run spans.
    pub regions: Vec<String>,
    /// When `gc` may delete it.
    pub deletion_due: String,
    /// `creating`, `up`, `failed`, `deleted`.
    pub status: String,
    /// Ids created, as `region/id` (a hint for `down`; tags are authoritative).
    pub created: Vec<String>,
    /// Accelerator ARNs created.
    pub accelerators: Vec<String>,
    /// Whether the run uses placement groups.
    #[serde(default)]
    pub uses_placement: bool,
    /// Whether the run uses Transit Gateways.
    #[serde(default)]
    pub uses_tgw: bool,
    /// Whether the run uses Global Accelerator.
    #[serde(default)]
    pub uses_accelerators: bool,
    /// The run's bucket, once made.
    #[serde(default)]
    pub bucket: Option<RunBucket>,
}

/// Where a run's files go: `<dir>/<run-id>/state.json` and `outputs.json`.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Files under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StateDir { dir: dir.into() }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Path of a run's state file.
    pub fn state_file(&self, run: &RunId) -> PathBuf {
        self.dir.join(run.as_str()).join("state.json")
    }

    /// Path of a run's outputs file.
    pub fn outputs_file(&self, run: &RunId) -> PathBuf {
        self.dir.join(run.as_str()).join("outputs.json")
    }

    /// Reads a run's state file, if there is one.
    pub fn load(&self, run: &RunId) -> Result<Option<LocalState>, Error> {
        read_json(&self.state_file(run))
    }

    /// Writes a run's state file (atomically: a crash leaves the old or the new file).
    pub fn save(&self, run: &RunId, state: &LocalState) -> Result<(), Error> {
        write_json(&self.state_file(run), state)
    }

    /// Reads a run's outputs file, if there is one.
    pub fn load_outputs(&self, run: &RunId) -> Result<Option<Outputs>, Error> {
        read_json(&self.outputs_file(run))
    }

    /// Every run with a state file here, oldest first (run ids start with their date).
    pub fn runs(&self) -> Result<Vec<(RunId, LocalState)>, Error> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(Error::StateFile {
                    path: self.dir.display().to_string(),
                    message: e.to_string(),
                });
            }
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let Ok(run) = e.file_name().to_string_lossy().parse::<RunId>() else {
                continue;
            };
            if let Some(state) = self.load(&run)? {
                out.push((run, state));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Where the pre-shared key of vpn path `path` to your own VPN end is kept (mode 0600):
    /// only the gateway's boot script and this file hold it, and a resumed run writes your
    /// end's configuration from it.
    pub fn home_key_file(&self, run: &RunId, path: &str) -> PathBuf {
        self.dir.join(run.as_str()).join(format!("home-{path}.psk"))
    }

    /// Where `run --here` keeps the clients' output and the run's key while it runs your
    /// host's paths on this machine ([`crate::run::here`]).
    pub fn here_dir(&self, run: &RunId) -> PathBuf {
        self.dir.join(run.as_str()).join("here")
    }

    /// Where the swanctl configuration for your end of vpn path `path` is written (mode 0600).
    pub fn home_config_file(&self, run: &RunId, path: &str) -> PathBuf {
        self.dir
            .join(run.as_str())
            .join(format!("home-{path}.swanctl.conf"))
    }

    /// Removes the keys and configurations of a run's VPN ends (after `down`: the gateways
    /// they pair with are gone), and what `run --here` left (a key, if it was killed). Files
    /// already gone are fine.
    pub fn remove_home_files(&self, run: &RunId) -> Result<(), Error> {
        let here = self.here_dir(run);
        match std::fs::remove_dir_all(&here) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::StateFile {
                    path: here.display().to_string(),
                    message: err.to_string(),
                });
            }
            _ => {}
        }
        let dir = self.dir.join(run.as_str());
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(());
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("home-")
                && (name.ends_with(".psk") || name.ends_with(".swanctl.conf"))
            {
                match std::fs::remove_file(e.path()) {
                    Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                        return Err(Error::StateFile {
                            path: e.path().display().to_string(),
                            message: err.to_string(),
                        });
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Writes a run's outputs file and returns its path.
    pub fn save_outputs(&self, outputs: &Outputs) -> Result<PathBuf, Error> {
        let path = self.outputs_file(&outputs.run_id);
        write_json(&path, outputs)?;
        Ok(path)
    }
}

/// Reads the JSON file at `path`, `None` when there is none: the state and outputs files'
/// one reader, the counterpart of [`write_json`].
fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, Error> {
    let fail = |e: &dyn fmt::Display| Error::StateFile {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| fail(&e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(fail(&e)),
    }
}

/// Writes `value` as pretty JSON to `path`, atomically (see [`write_file_atomically`]).
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    let fail = |e: &dyn fmt::Display| Error::StateFile {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| fail(&e))?;
    }
    let text = serde_json::to_string_pretty(value).map_err(|e| fail(&e))?;
    write_file_atomically(path, (text + "\n").as_bytes()).map_err(|e| fail(&e))
}

/// Every file this tool writes goes through here: the library's one atomic writer (a
/// uniquely named temporary file in the same directory, fsync, rename, fsync of the
/// directory), so a crash leaves the old file or the new one, never part of one.
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    xbench::file::write_atomically(path, bytes)
}

/// Writes a file only its owner may read (a key, or a configuration holding one), atomically:
/// a temporary file created with mode 0600 (never readable by others, not even for a moment),
/// synced, then renamed over `path`.
pub fn write_secret_file(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;

    let fail = |e: std::io::Error| Error::StateFile {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(fail)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(fail)
}

/// Identifies the outputs format; bump on incompatible change.
pub const OUTPUTS_FORMAT: &str = "xbench-deploy-outputs/1";

/// What `up` built, for people and for a later sweep across paths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outputs {
    /// Always [`OUTPUTS_FORMAT`].
    pub format: String,
    /// Run id.
    pub run_id: RunId,
    /// Scenario name.
    pub scenario: String,
    /// When `gc` may delete the run.
    pub deletion_due: String,
    /// The `xbench server` port.
    pub port: u16,
    /// The run's bucket: the uploaded binary, and results on their way back.
    #[serde(default)]
    pub bucket: Option<RunBucket>,
    /// Hosts created.
    pub hosts: Vec<HostOutput>,
    /// One entry per path.
    pub paths: Vec<PathOutput>,
    /// What your side needs for hybrid paths (routes back to the run's VPCs), as `up` printed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Your VPN ends (vpn paths to your own host): where each dials, and its configuration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub home_ends: Vec<HomeEndOutput>,
}

/// Your end of a `vpn` path to your own host, as `up` left it. The key is not here (this file
/// is not secret); it is in [`HomeEndOutput::config`], mode 0600.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HomeEndOutput {
    /// Path label.
    pub path: String,
    /// The gateway's host key.
    pub gateway: String,
    /// The gateway's public address.
    pub gateway_ip: Ipv4Addr,
    /// The static address of the accelerator in front of the gateway, if there is one.
    pub accelerator_ip: Option<Ipv4Addr>,
    /// What your end dials: the accelerator's address, else the gateway's.
    pub dial: Ipv4Addr,
    /// Your VPN end's public address (the only one the gateway lets IKE in from).
    pub public_ip: Ipv4Addr,
    /// Your block behind it.
    pub on_prem_cidr: Ipv4Cidr,
    /// The run's subnet behind the gateway.
    pub aws_subnet: Ipv4Cidr,
    /// The swanctl file for your end, key included.
    pub config: PathBuf,
}

/// A host `up` created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostOutput {
    /// Plan key (`server-use1`, `client-peering`, …).
    pub key: String,
    /// `server`, `client` or `gateway`.
    pub role: String,
    /// Region.
    pub region: String,
    /// Instance id.
    pub instance_id: String,
    /// Instance type.
    pub instance_type: String,
    /// Private address.
    pub private_ip: Option<Ipv4Addr>,
    /// Public address.
    pub public_ip: Option<Ipv4Addr>,
}

/// One path, ready to measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathOutput {
    /// Label (also passed as `--label`).
    pub label: String,
    /// Kind.
    pub kind: PathKind,
    /// A VPN path's flavour (`wireguard`, `ipsec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpn: Option<VpnFlavour>,
    /// Host key of the client, when this tool made it (a fleet's first instance).
    pub client_host: Option<String>,
    /// A fleet's other client hosts (`clients = N`), in order; empty for one client.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fleet: Vec<String>,
    /// Where to run the command: the client host's public address, or the user's own host.
    pub run_on: Option<Ipv4Addr>,
    /// Address the client dials.
    pub target: Ipv4Addr,
    /// Port.
    pub port: u16,
    /// Whether the server holds the run's key (not so for an `existing` server of yours).
    #[serde(default)]
    pub authenticated: bool,
    /// The exact command.
    pub command: String,
}

/// The `xbench client` command a person types on a path's client.
pub fn client_command(target: Ipv4Addr, port: u16, label: &str, authenticated: bool) -> String {
    let port = if port == crate::scenario::DEFAULT_XBENCH_PORT {
        String::new()
    } else {
        format!(" -p {port}")
    };
    let key = if authenticated {
        format!(" --psk-file {}", crate::userdata::PSK_PATH)
    } else {
        String::new()
    };
    format!("xbench client {target}{port} --label {label}{key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_round_trip() {
        let id = RunId::generate(SystemTime::now()).unwrap();
        assert_eq!(id.as_str().parse::<RunId>().unwrap(), id);
        assert!("xb-2025-abc".parse::<RunId>().is_err());
        assert!("xb-20250601-ABCDEF".parse::<RunId>().is_err());
    }

    #[test]
    fn times_round_trip() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
        assert_eq!(parse_time(&format_time(t)), Some(t));
    }
}
