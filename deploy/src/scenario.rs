//! The scenario file: a short TOML description of VPCs and the paths to compare, parsed and
//! checked into a [`Scenario`] whose every field is already valid.
//!
//! Everything that can be checked without AWS is checked here (names, CIDRs and their overlaps,
//! regions, which path kinds need which ends). What only AWS can answer (does the instance type
//! have ENA, does the availability zone exist) is checked in [`crate::apply`] before anything is
//! created. Not for turning the scenario into resources: that is [`crate::plan`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cidr::{CidrError, Ipv4Cidr};
use crate::home::{self, HomeEnd, HomeFields};
use crate::hybrid::{self, HybridEnd};
use crate::regions;
use crate::suite::{RawSuite, Suite, SuiteError};

/// The port `xbench server` listens on unless the scenario says otherwise.
pub const DEFAULT_XBENCH_PORT: u16 = 5201;

/// The default time to live: `gc` may delete a run this long after it was created.
pub const DEFAULT_TTL_HOURS: u32 = 8;

/// A checked scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Lowercase letters, digits and `-`; carried in every resource's tags.
    pub name: String,
    /// Default instance type for every host.
    pub instance_type: String,
    /// Which machine image the hosts boot.
    pub ami: AmiChoice,
    /// Which machine image IPsec gateways boot: one whose own repositories carry strongSwan
    /// (default: Ubuntu 24.04 LTS, where strongSwan's swanctl daemon is in main; Amazon Linux
    /// 2023's repositories do not carry it).
    pub gateway_ami: AmiChoice,
    /// Hours after `up` that `gc` may delete the run.
    pub ttl_hours: u32,
    /// How the hosts get the `xbench` binary.
    pub xbench: XbenchInstall,
    /// The port `xbench server` listens on (TCP and UDP are both opened to it).
    pub port: u16,
    /// CIDRs allowed to reach port 22 on every host; empty (the default) opens no SSH.
    pub ssh_from: Vec<Ipv4Cidr>,
    /// An existing EC2 key pair to install, if any.
    pub key_name: Option<String>,
    /// If set, hosts raise the kernel's TCP buffer ceilings to this many MiB (for long fat pipes).
    pub tcp_buffer_max_mib: Option<u32>,
    /// The VPCs, in file order.
    pub vpcs: Vec<VpcSpec>,
    /// The paths to build, in file order.
    pub paths: Vec<PathSpec>,
    /// Price overrides on top of the shipped table.
    pub prices: PriceOverrides,
    /// What `run` measures, if the scenario says (`run --suite FILE` can give it instead).
    pub suite: Option<Suite>,
}

/// Which image the hosts run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AmiChoice {
    /// The latest Amazon Linux 2023 for the instance type's architecture, from AWS's public SSM
    /// parameter in each region.
    AmazonLinux2023,
    /// The latest Ubuntu 24.04 LTS server image for the instance type's architecture, from
    /// Canonical's public SSM parameter in each region.
    Ubuntu2404,
    /// A named SSM parameter holding an AMI id (resolved in each region).
    SsmParameter(String),
    /// One AMI id (only sensible for single-region scenarios: AMI ids are per region).
    Id(String),
}

/// How `xbench` gets onto a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XbenchInstall {
    /// The binary the user has (`up --xbench PATH`, default the `xbench` beside
    /// `xbench-deploy`), uploaded to the run's private bucket and fetched through a presigned
    /// URL. The default.
    Upload,
    /// Download a static Linux binary from the user's own address.
    Url {
        /// Where from (http or https).
        url: String,
        /// Expected SHA-256 of the file, lowercase hex; the host refuses anything else.
        sha256: String,
    },
    /// Build from a git repository with `cargo install --git` (slow: installs a Rust toolchain).
    CargoGit {
        /// Repository URL.
        git: String,
        /// Branch, tag or commit; the repository's default branch when `None`.
        rev: Option<String>,
    },
}

/// One VPC, and so one region's worth of network.
#[derive(Debug, Clone, PartialEq)]
pub struct VpcSpec {
    /// Name paths refer to it by (the region name unless given).
    pub name: String,
    /// AWS region.
    pub region: String,
    /// The VPC's IPv4 block.
    pub cidr: Ipv4Cidr,
    /// Availability zone for its subnets; `None` picks one that offers the instance type.
    pub az: Option<String>,
    /// Instance type for hosts in this VPC, overriding the scenario's.
    pub instance_type: Option<String>,
    /// Placement group strategy for hosts in this VPC, if any.
    pub placement: Option<PlacementStrategy>,
}

/// EC2 placement group strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementStrategy {
    /// Pack instances close together in one AZ (lowest latency).
    Cluster,
    /// Put instances on distinct racks.
    Spread,
    /// Spread groups of instances over partitions.
    Partition,
}

impl fmt::Display for PlacementStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PlacementStrategy::Cluster => "cluster",
            PlacementStrategy::Spread => "spread",
            PlacementStrategy::Partition => "partition",
        })
    }
}

/// The kinds of network path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum PathKind {
    /// VPC peering, same or cross region.
    Peering,
    /// Transit Gateway(s), with inter-region TGW peering when the VPCs are in two regions.
    Tgw,
    /// A software VPN between two gateway instances ([`VpnFlavour`]: WireGuard or IPsec).
    Vpn,
    /// Public IPv4 addresses.
    Public,
    /// AWS Global Accelerator in front of the server.
    Accelerator,
    /// A host the user already has, given by address.
    Existing,
}

impl PathKind {
    /// The word used in scenario files.
    pub fn as_str(&self) -> &'static str {
        match self {
            PathKind::Peering => "peering",
            PathKind::Tgw => "tgw",
            PathKind::Vpn => "vpn",
            PathKind::Public => "public",
            PathKind::Accelerator => "accelerator",
            PathKind::Existing => "existing",
        }
    }
}

impl fmt::Display for PathKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which software VPN a `vpn` path runs between its two gateway instances.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum VpnFlavour {
    /// WireGuard through systemd-networkd (no packages needed on Amazon Linux 2023). The default.
    #[default]
    WireGuard,
    /// strongSwan with IKEv2 and a per-run pre-shared key (charon configured by swanctl).
    Ipsec,
}

impl VpnFlavour {
    /// Every flavour, in the order error messages list them.
    pub const ALL: [VpnFlavour; 2] = [VpnFlavour::WireGuard, VpnFlavour::Ipsec];

    /// The word used in scenario files.
    pub fn as_str(&self) -> &'static str {
        match self {
            VpnFlavour::WireGuard => "wireguard",
            VpnFlavour::Ipsec => "ipsec",
        }
    }

    /// The software, as `plan` names it.
    pub fn software(&self) -> &'static str {
        match self {
            VpnFlavour::WireGuard => "WireGuard",
            VpnFlavour::Ipsec => "IPsec (strongSwan, IKEv2)",
        }
    }
}

impl fmt::Display for VpnFlavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One end of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// A host this tool creates in the named VPC.
    Vpc(String),
    /// A host outside this tool's control, by address.
    Address(Ipv4Addr),
}

/// One path to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathSpec {
    /// Unique label; passed to `xbench client --label`.
    pub label: String,
    /// What kind of path.
    pub kind: PathKind,
    /// The side that runs `xbench client`.
    pub client: End,
    /// The side that runs `xbench server`.
    pub server: End,
    /// The VPN's flavour: set on `vpn` paths only (WireGuard unless the scenario says).
    pub vpn: Option<VpnFlavour>,
    /// An `existing` path reached over private addresses through your gateway.
    pub hybrid: Option<HybridEnd>,
    /// A `vpn` path whose far end is your own VPN end (at home, on a campus).
    pub home: Option<HomeEnd>,
    /// Client instances (`clients = N`, default 1): a fleet starts each run at one instant,
    /// each instance runs its share of the streams, and the reports merge into one figure
    /// ([`xbench_report::fleet`]). More than one needs a client in a VPC.
    pub clients: u16,
}

impl PathSpec {
    /// The kind as `plan` and reports show it: `vpn (ipsec)` for a VPN path, else the kind.
    pub fn kind_label(&self) -> String {
        kind_label(self.kind, self.vpn)
    }
}

/// `kind`, with the VPN flavour in brackets when there is one: `vpn (wireguard)`.
pub fn kind_label(kind: PathKind, vpn: Option<VpnFlavour>) -> String {
    match vpn {
        Some(f) => format!("{kind} ({f})"),
        None => kind.to_string(),
    }
}

/// Scenario-level price overrides (USD).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceOverrides {
    /// Hourly price per instance type, applied in every region.
    #[serde(default)]
    pub instance_hourly: BTreeMap<String, f64>,
    /// Per Transit Gateway attachment-hour.
    pub tgw_attachment_hourly: Option<f64>,
    /// Per accelerator-hour.
    pub accelerator_hourly: Option<f64>,
    /// Per public IPv4 address-hour.
    pub public_ipv4_hourly: Option<f64>,
}

/// Why a scenario was refused. Each message names the offending entry and what to change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// Not readable.
    #[error("cannot read scenario {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// The OS's reason.
        message: String,
    },
    /// Not valid TOML, or fields of the wrong type or unknown.
    #[error("scenario is not valid: {0}")]
    Syntax(String),
    /// A name that cannot go into AWS tags and resource names.
    #[error("{what} '{value}' must be 1-{max} characters of lowercase a-z, 0-9 and '-'")]
    BadName {
        /// Which name.
        what: &'static str,
        /// The value.
        value: String,
        /// Longest allowed.
        max: usize,
    },
    /// A region not in [`regions::KNOWN_REGIONS`].
    #[error("unknown region '{region}' in vpc '{vpc}'{}", suggestion.map(|s| format!("; did you mean '{s}'?")).unwrap_or_else(|| format!("; known regions (as of {}): {}", regions::LIST_DATE, regions::KNOWN_REGIONS.join(", "))))]
    UnknownRegion {
        /// The VPC entry.
        vpc: String,
        /// What was written.
        region: String,
        /// The closest known region.
        suggestion: Option<&'static str>,
    },
    /// A CIDR that does not parse.
    #[error("{what}: {source}")]
    Cidr {
        /// Where it was.
        what: String,
        /// Why.
        source: CidrError,
    },
    /// A VPC block AWS would refuse.
    #[error("vpc '{vpc}': a VPC block must be /16 to /28 (AWS's limits), not {cidr}")]
    VpcSize {
        /// The VPC.
        vpc: String,
        /// Its block.
        cidr: Ipv4Cidr,
    },
    /// Two VPC blocks overlap, so no route could tell them apart.
    #[error(
        "vpc '{a}' ({a_cidr}) and vpc '{b}' ({b_cidr}) overlap; paths between VPCs need distinct blocks, e.g. 10.1.0.0/16 and 10.2.0.0/16"
    )]
    OverlappingCidrs {
        /// First VPC.
        a: String,
        /// Its block.
        a_cidr: Ipv4Cidr,
        /// Second VPC.
        b: String,
        /// Its block.
        b_cidr: Ipv4Cidr,
    },
    /// Two entries share a name or label.
    #[error("{what} '{name}' is given twice")]
    Duplicate {
        /// "vpc" or "path label".
        what: &'static str,
        /// The repeated value.
        name: String,
    },
    /// A path names a VPC that is not declared.
    #[error("path '{path}': no [[vpc]] named '{vpc}' (declared: {known})")]
    UnknownVpc {
        /// The path.
        path: String,
        /// The missing name.
        vpc: String,
        /// What is declared.
        known: String,
    },
    /// A path kind that joins two VPCs was given one.
    #[error(
        "path '{path}': a {kind} path joins two VPCs (in two regions, or two VPCs in one region), but its client and server are both '{vpc}'; add a second [[vpc]] and name it as server"
    )]
    NeedsTwoVpcs {
        /// The path.
        path: String,
        /// Its kind.
        kind: PathKind,
        /// The single VPC.
        vpc: String,
    },
    /// A path's ends do not fit its kind.
    #[error("path '{path}' ({kind}): {problem}")]
    BadEnds {
        /// The path.
        path: String,
        /// Its kind.
        kind: PathKind,
        /// What is wrong and what to write instead.
        problem: String,
    },
    /// A `vpn` value that is not a flavour this tool builds.
    #[error(
        "path '{path}': vpn = \"{value}\" is not a VPN flavour; use one of: {}",
        VpnFlavour::ALL.map(|f| format!("\"{f}\"")).join(", ")
    )]
    UnknownVpnFlavour {
        /// The path.
        path: String,
        /// What was written.
        value: String,
    },
    /// The `[suite]` table was refused.
    #[error(transparent)]
    Suite(#[from] SuiteError),
    /// Any other field with a bad value.
    #[error("{field}: {problem}")]
    BadValue {
        /// Which field.
        field: String,
        /// What is wrong.
        problem: String,
    },
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn from_file(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_toml(&text)
    }

    /// Parses and checks a scenario from TOML text.
    pub fn from_toml(text: &str) -> Result<Self, ScenarioError> {
        let raw: RawScenario = toml::from_str(text).map_err(|e| {
            let m = e.to_string();
            ScenarioError::Syntax(format!("{}{}", m.trim_end(), crate::suite::hint(&m)))
        })?;
        raw.check()
    }

    /// The VPC called `name`.
    pub fn vpc(&self, name: &str) -> Option<&VpcSpec> {
        self.vpcs.iter().find(|v| v.name == name)
    }

    /// The distinct regions, in first-use order.
    pub fn regions(&self) -> Vec<String> {
        crate::regions::distinct(self.vpcs.iter().map(|v| v.region.as_str()))
    }

    /// The instance type hosts in `vpc` use.
    pub fn instance_type_for<'a>(&'a self, vpc: &'a VpcSpec) -> &'a str {
        vpc.instance_type.as_deref().unwrap_or(&self.instance_type)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: String,
    instance_type: String,
    #[serde(default)]
    ami: Option<String>,
    #[serde(default)]
    gateway_ami: Option<String>,
    #[serde(default)]
    ttl_hours: Option<u32>,
    #[serde(default)]
    ssh_from: Vec<String>,
    #[serde(default)]
    key_name: Option<String>,
    #[serde(default)]
    tcp_buffer_max_mib: Option<u32>,
    #[serde(default)]
    xbench: RawXbench,
    #[serde(default)]
    prices: PriceOverrides,
    #[serde(default)]
    vpc: Vec<RawVpc>,
    #[serde(default)]
    path: Vec<RawPath>,
    #[serde(default)]
    suite: Option<RawSuite>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawXbench {
    url: Option<String>,
    sha256: Option<String>,
    cargo_git: Option<String>,
    cargo_rev: Option<String>,
    port: Option<u16>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVpc {
    name: Option<String>,
    region: String,
    cidr: String,
    az: Option<String>,
    instance_type: Option<String>,
    placement: Option<PlacementStrategy>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPath {
    kind: PathKind,
    label: Option<String>,
    client: Option<String>,
    server: Option<String>,
    client_address: Option<Ipv4Addr>,
    server_address: Option<Ipv4Addr>,
    /// Read as text, so an unknown flavour gets its own message listing the flavours.
    vpn: Option<String>,
    /// `existing` paths over private addresses: your gateway and your private block.
    via: Option<String>,
    on_prem_cidr: Option<String>,
    /// `vpn` paths to your host: the public address your VPN end comes from, and whether a
    /// Global Accelerator stands in front of the gateway.
    on_prem_public_ip: Option<Ipv4Addr>,
    accelerator: Option<bool>,
    /// Read wide, so `clients = 0` or `-1` or `100000` gets this tool's message, not serde's.
    clients: Option<i64>,
}

const NAME_MAX: usize = 32;

fn check_name(what: &'static str, value: &str) -> Result<(), ScenarioError> {
    let ok = !value.is_empty()
        && value.len() <= NAME_MAX
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ScenarioError::BadName {
            what,
            value: value.to_owned(),
            max: NAME_MAX,
        })
    }
}

fn bad(field: impl Into<String>, problem: impl Into<String>) -> ScenarioError {
    ScenarioError::BadValue {
        field: field.into(),
        problem: problem.into(),
    }
}

fn check_instance_type(field: &str, value: &str) -> Result<(), ScenarioError> {
    let ok = value.split_once('.').is_some_and(|(family, size)| {
        !family.is_empty()
            && !size.is_empty()
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    });
    if ok {
        Ok(())
    } else {
        Err(bad(
            field,
            format!("'{value}' is not an instance type such as m5.large"),
        ))
    }
}

/// An image choice as written: `al2023`, `ubuntu-24.04`, `ssm:/name` or `ami-…`.
fn ami_choice(
    key: &str,
    text: Option<&str>,
    default: AmiChoice,
) -> Result<AmiChoice, ScenarioError> {
    Ok(match text {
        None => default,
        Some("al2023") => AmiChoice::AmazonLinux2023,
        Some("ubuntu-24.04") => AmiChoice::Ubuntu2404,
        Some(s) if s.starts_with("ssm:/") => AmiChoice::SsmParameter(s[4..].to_owned()),
        Some(s) if s.starts_with("ami-") && s.len() > 4 => AmiChoice::Id(s.to_owned()),
        Some(s) => {
            return Err(bad(
                key,
                format!(
                    "'{s}': use \"al2023\", \"ubuntu-24.04\", \"ssm:/parameter/name\" or an \"ami-…\" id"
                ),
            ));
        }
    })
}

impl RawScenario {
    fn check(self) -> Result<Scenario, ScenarioError> {
        check_name("scenario name", &self.name)?;
        check_instance_type("instance_type", &self.instance_type)?;
        let ami = ami_choice("ami", self.ami.as_deref(), AmiChoice::AmazonLinux2023)?;
        let gateway_ami = ami_choice(
            "gateway_ami",
            self.gateway_ami.as_deref(),
            AmiChoice::Ubuntu2404,
        )?;
        let ttl_hours = self.ttl_hours.unwrap_or(DEFAULT_TTL_HOURS);
        if !(1..=24 * 30).contains(&ttl_hours) {
            return Err(bad("ttl_hours", "must be 1 to 720 (30 days)"));
        }
        let ssh_from = self
            .ssh_from
            .iter()
            .map(|s| {
                s.parse().map_err(|source| ScenarioError::Cidr {
                    what: "ssh_from".into(),
                    source,
                })
            })
            .collect::<Result<Vec<Ipv4Cidr>, _>>()?;
        if ssh_from.iter().any(|c| c.prefix() == 0) {
            return Err(bad(
                "ssh_from",
                "0.0.0.0/0 would open SSH to the whole internet; name your own address or range",
            ));
        }
        if let Some(mib) = self.tcp_buffer_max_mib
            && !(1..=1024).contains(&mib)
        {
            return Err(bad("tcp_buffer_max_mib", "must be 1 to 1024"));
        }
        let xbench = self.xbench.check()?;
        let port = self.xbench.port.unwrap_or(DEFAULT_XBENCH_PORT);
        if port == 0 {
            return Err(bad("xbench.port", "must not be 0"));
        }
        check_prices(&self.prices)?;

        let vpcs = check_vpcs(self.vpc)?;
        for (key, choice) in [("ami", &ami), ("gateway_ami", &gateway_ami)] {
            if let AmiChoice::Id(id) = choice {
                let regions: BTreeSet<&str> = vpcs.iter().map(|v| v.region.as_str()).collect();
                if regions.len() > 1 {
                    return Err(bad(
                        key,
                        format!(
                            "{id} is an id from one region, but the scenario spans {}; use \"al2023\", \"ubuntu-24.04\" or \"ssm:/…\"",
                            regions.into_iter().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
        }
        let paths = check_paths(self.path, &vpcs)?;
        let suite = self.suite.map(RawSuite::check).transpose()?;
        Ok(Scenario {
            name: self.name,
            instance_type: self.instance_type,
            ami,
            gateway_ami,
            ttl_hours,
            xbench,
            port,
            ssh_from,
            key_name: self.key_name,
            tcp_buffer_max_mib: self.tcp_buffer_max_mib,
            vpcs,
            paths,
            prices: self.prices,
            suite,
        })
    }
}

impl RawXbench {
    fn check(&self) -> Result<XbenchInstall, ScenarioError> {
        match (&self.url, &self.cargo_git) {
            (Some(_), Some(_)) => Err(bad(
                "xbench",
                "give either url (a release binary) or cargo_git (build from source), not both",
            )),
            (None, Some(git)) => {
                if self.sha256.is_some() {
                    return Err(bad("xbench.sha256", "only applies to url"));
                }
                if !git.starts_with("https://")
                    || git.contains(['\'', '"', '\\', '`', '$', ' ', '\n'])
                {
                    return Err(bad(
                        "xbench.cargo_git",
                        "must be an https:// URL without quotes, spaces or '$'",
                    ));
                }
                if let Some(rev) = &self.cargo_rev
                    && (rev.is_empty()
                        || !rev
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b)))
                {
                    return Err(bad(
                        "xbench.cargo_rev",
                        "must be a commit, tag or branch name (letters, digits, . _ / -)",
                    ));
                }
                Ok(XbenchInstall::CargoGit {
                    git: git.clone(),
                    rev: self.cargo_rev.clone(),
                })
            }
            (None, None) => {
                if self.cargo_rev.is_some() {
                    return Err(bad("xbench.cargo_rev", "only applies to cargo_git"));
                }
                if self.sha256.is_some() {
                    return Err(bad(
                        "xbench.sha256",
                        "only applies to url (an uploaded binary's checksum is computed)",
                    ));
                }
                Ok(XbenchInstall::Upload)
            }
            (Some(url), None) => {
                if self.cargo_rev.is_some() {
                    return Err(bad("xbench.cargo_rev", "only applies to cargo_git"));
                }
                let url = url.clone();
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    return Err(bad("xbench.url", "must be an http:// or https:// URL"));
                }
                if url.contains(['\'', '"', '\\', '`', '$', ' ', '\n']) {
                    return Err(bad("xbench.url", "must not contain quotes, spaces or '$'"));
                }
                let sha256 = match &self.sha256 {
                    Some(h) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                        h.to_ascii_lowercase()
                    }
                    Some(_) => return Err(bad("xbench.sha256", "must be 64 hex digits")),
                    None => {
                        return Err(bad(
                            "xbench.sha256",
                            "give the binary's sha256 with its url (sha256sum FILE): hosts refuse a download they cannot check",
                        ));
                    }
                };
                Ok(XbenchInstall::Url { url, sha256 })
            }
        }
    }
}

fn check_prices(p: &PriceOverrides) -> Result<(), ScenarioError> {
    let all = p
        .instance_hourly
        .values()
        .copied()
        .chain(p.tgw_attachment_hourly)
        .chain(p.accelerator_hourly)
        .chain(p.public_ipv4_hourly);
    for v in all {
        if !(v.is_finite() && v >= 0.0) {
            return Err(bad("prices", "prices must be zero or positive numbers"));
        }
    }
    Ok(())
}

fn check_vpcs(raw: Vec<RawVpc>) -> Result<Vec<VpcSpec>, ScenarioError> {
    if raw.is_empty() {
        return Err(bad("vpc", "declare at least one [[vpc]]"));
    }
    let mut vpcs: Vec<VpcSpec> = Vec::new();
    for v in raw {
        let name = v.name.clone().unwrap_or_else(|| v.region.clone());
        check_name("vpc name", &name)?;
        if vpcs.iter().any(|o| o.name == name) {
            return Err(ScenarioError::Duplicate { what: "vpc", name });
        }
        if !regions::is_known(&v.region) {
            return Err(ScenarioError::UnknownRegion {
                vpc: name,
                suggestion: regions::suggest(&v.region),
                region: v.region,
            });
        }
        let cidr: Ipv4Cidr = v.cidr.parse().map_err(|source| ScenarioError::Cidr {
            what: format!("vpc '{name}' cidr"),
            source,
        })?;
        if !(16..=28).contains(&cidr.prefix()) {
            return Err(ScenarioError::VpcSize { vpc: name, cidr });
        }
        if let Some(az) = &v.az {
            let letter_ok = az.strip_prefix(v.region.as_str()).is_some_and(|rest| {
                !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
            if !letter_ok {
                return Err(bad(
                    format!("vpc '{name}' az"),
                    format!(
                        "'{az}' is not a zone of {} (such as {}a)",
                        v.region, v.region
                    ),
                ));
            }
        }
        if let Some(t) = &v.instance_type {
            check_instance_type(&format!("vpc '{name}' instance_type"), t)?;
        }
        for o in &vpcs {
            if o.cidr.overlaps(&cidr) {
                return Err(ScenarioError::OverlappingCidrs {
                    a: o.name.clone(),
                    a_cidr: o.cidr,
                    b: name,
                    b_cidr: cidr,
                });
            }
        }
        vpcs.push(VpcSpec {
            name,
            region: v.region,
            cidr,
            az: v.az,
            instance_type: v.instance_type,
            placement: v.placement,
        });
    }
    Ok(vpcs)
}

fn end(
    path: &str,
    which: &str,
    vpc: Option<String>,
    address: Option<Ipv4Addr>,
    vpcs: &[VpcSpec],
) -> Result<Option<End>, ScenarioError> {
    match (vpc, address) {
        (Some(_), Some(_)) => Err(bad(
            format!("path '{path}'"),
            format!("give {which} or {which}_address, not both"),
        )),
        (Some(name), None) => {
            if vpcs.iter().any(|v| v.name == name) {
                Ok(Some(End::Vpc(name)))
            } else {
                Err(ScenarioError::UnknownVpc {
                    path: path.to_owned(),
                    vpc: name,
                    known: vpcs
                        .iter()
                        .map(|v| v.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            }
        }
        (None, Some(a)) => Ok(Some(End::Address(a))),
        (None, None) => Ok(None),
    }
}

fn check_paths(raw: Vec<RawPath>, vpcs: &[VpcSpec]) -> Result<Vec<PathSpec>, ScenarioError> {
    if raw.is_empty() {
        return Err(bad("path", "declare at least one [[path]]"));
    }
    let mut out: Vec<PathSpec> = Vec::new();
    let mut joined: BTreeSet<(PathKind, String, String)> = BTreeSet::new();
    for p in raw {
        // Read first: its error names the path by what the file says, and an IPsec path's
        // default label names its flavour, so the report (which knows paths by label) tells
        // it from a WireGuard path, and the two compare without labels.
        let vpn = vpn_flavour(p.label.as_deref().unwrap_or(p.kind.as_str()), p.kind, p.vpn)?;
        let label = p.label.clone().unwrap_or_else(|| match vpn {
            Some(VpnFlavour::Ipsec) => "vpn-ipsec".to_owned(),
            _ => p.kind.as_str().to_owned(),
        });
        check_name("path label", &label)?;
        if out.iter().any(|o| o.label == label) {
            return Err(ScenarioError::Duplicate {
                what: "path label",
                name: label,
            });
        }
        let client = end(&label, "client", p.client, p.client_address, vpcs)?;
        let server = end(&label, "server", p.server, p.server_address, vpcs)?;
        let (client, server) = ends_for_kind(&label, p.kind, client, server, &mut joined)?;
        let fields = HomeFields {
            on_prem_cidr: p.on_prem_cidr.clone(),
            on_prem_public_ip: p.on_prem_public_ip,
            accelerator: p.accelerator,
            via: p.via.is_some(),
        };
        let home = home::check(&label, p.kind, vpn, &fields, (&client, &server), vpcs)?;
        // A VPN end of yours takes on_prem_cidr; on other paths it is a hybrid end's.
        let hybrid = if home.is_some() {
            None
        } else {
            hybrid::check(
                &label,
                p.kind,
                p.via,
                p.on_prem_cidr,
                (&client, &server),
                vpcs,
            )?
        };
        let clients = fleet_size(&label, p.clients, &client)?;
        out.push(PathSpec {
            label,
            kind: p.kind,
            client,
            server,
            vpn,
            hybrid,
            home,
            clients,
        });
    }
    hybrid::check_together(&out)?;
    home::check_together(&out)?;
    Ok(out)
}

/// A path's `clients`: 1 to [`xbench_report::fleet::MAX_INSTANCES`], and more than one only
/// where this tool launches the clients (a VPC), since it cannot start copies of your host.
fn fleet_size(label: &str, value: Option<i64>, client: &End) -> Result<u16, ScenarioError> {
    let max = xbench_report::fleet::MAX_INSTANCES;
    let field = format!("path '{label}': clients");
    let n = match value {
        None => return Ok(1),
        Some(v) => u16::try_from(v)
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| bad(&field, format!("{v} is not a fleet size; use 1 to {max}")))?,
    };
    if n > 1 && matches!(client, End::Address(_)) {
        return Err(bad(
            field,
            format!(
                "{n} client instances need a client in a VPC (client = \"<vpc>\"); this tool \
                 cannot start copies of your own host (client_address)"
            ),
        ));
    }
    Ok(n)
}

/// The flavour of a `vpn` path (WireGuard by default); `vpn = ...` on another kind is refused.
fn vpn_flavour(
    label: &str,
    kind: PathKind,
    value: Option<String>,
) -> Result<Option<VpnFlavour>, ScenarioError> {
    match (kind, value) {
        (PathKind::Vpn, None) => Ok(Some(VpnFlavour::default())),
        (PathKind::Vpn, Some(v)) => VpnFlavour::ALL
            .into_iter()
            .find(|f| f.as_str() == v)
            .map(Some)
            .ok_or(ScenarioError::UnknownVpnFlavour {
                path: label.to_owned(),
                value: v,
            }),
        (_, None) => Ok(None),
        (_, Some(v)) => Err(ScenarioError::BadEnds {
            path: label.to_owned(),
            kind,
            problem: format!("vpn = \"{v}\" applies only to kind = \"vpn\""),
        }),
    }
}

/// The ends a path of `kind` may have; `joined` remembers VPC pairs already joined by a
/// peering or Transit Gateway path (AWS allows one of each).
fn ends_for_kind(
    label: &str,
    kind: PathKind,
    client: Option<End>,
    server: Option<End>,
    joined: &mut BTreeSet<(PathKind, String, String)>,
) -> Result<(End, End), ScenarioError> {
    let bad_ends = |problem: &str| ScenarioError::BadEnds {
        path: label.to_owned(),
        kind,
        problem: problem.to_owned(),
    };
    let one_vpc = |vpc: String| ScenarioError::NeedsTwoVpcs {
        path: label.to_owned(),
        kind,
        vpc,
    };
    match (kind, client, server) {
        (PathKind::Peering | PathKind::Tgw | PathKind::Vpn, c, s) => match (c, s) {
            (Some(End::Vpc(c)), Some(End::Vpc(s))) => {
                if c == s {
                    return Err(one_vpc(c));
                }
                let pair = if c < s {
                    (kind, c.clone(), s.clone())
                } else {
                    (kind, s.clone(), c.clone())
                };
                if kind != PathKind::Vpn && !joined.insert(pair) {
                    return Err(bad_ends(
                        "the same two VPCs are already joined by another path of this kind; AWS allows one",
                    ));
                }
                Ok((End::Vpc(c), End::Vpc(s)))
            }
            // Your own VPN end (checked further by crate::home).
            (Some(End::Address(a)), Some(End::Vpc(s))) if kind == PathKind::Vpn => {
                Ok((End::Address(a), End::Vpc(s)))
            }
            (Some(End::Vpc(c)), Some(End::Address(a))) if kind == PathKind::Vpn => {
                Ok((End::Vpc(c), End::Address(a)))
            }
            _ if kind == PathKind::Vpn => Err(bad_ends(
                "needs client = \"<vpc>\" and server = \"<vpc>\", or one of them your host behind your own VPN end: client_address or server_address = \"<its private address>\" with on_prem_cidr and on_prem_public_ip",
            )),
            _ => Err(bad_ends("needs client = \"<vpc>\" and server = \"<vpc>\"")),
        },
        (PathKind::Public | PathKind::Accelerator, Some(c), Some(End::Vpc(s))) => {
            if c == End::Vpc(s.clone()) && kind == PathKind::Public {
                return Err(one_vpc(s));
            }
            Ok((c, End::Vpc(s)))
        }
        (PathKind::Public | PathKind::Accelerator, _, _) => Err(bad_ends(
            "needs server = \"<vpc>\" and either client = \"<vpc>\" or client_address = \"<your host's public IPv4>\"",
        )),
        (PathKind::Existing, Some(End::Vpc(c)), Some(End::Address(a))) => {
            Ok((End::Vpc(c), End::Address(a)))
        }
        (PathKind::Existing, Some(End::Address(a)), Some(End::Vpc(s))) => {
            Ok((End::Address(a), End::Vpc(s)))
        }
        (PathKind::Existing, _, _) => Err(bad_ends(
            "needs one end in a VPC and the other your host's address: client = \"<vpc>\" with server_address = \"<ip>\", or client_address = \"<ip>\" with server = \"<vpc>\"",
        )),
    }
}

/// The head of a scenario with one VPC, `aws` in us-east-1, that tests add their paths to: a
/// literal, so that a test's whole scenario can still be one `concat!`ed constant.
#[cfg(test)]
macro_rules! one_vpc_scenario {
    () => {
        r#"
name = "t"
instance_type = "m5.large"
[[vpc]]
name = "aws"
region = "us-east-1"
cidr = "10.1.0.0/16"
"#
    };
}
#[cfg(test)]
pub(crate) use one_vpc_scenario;

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
name = "t"
instance_type = "m5.large"
[[vpc]]
region = "us-east-1"
cidr = "10.1.0.0/16"
[[vpc]]
region = "ap-southeast-2"
cidr = "10.2.0.0/16"
"#;

    fn with(paths: &str) -> Result<Scenario, ScenarioError> {
        Scenario::from_toml(&format!("{BASE}\n{paths}"))
    }

    #[test]
    fn defaults_and_labels() {
        let s = with(
            "[[path]]\nkind = \"peering\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n",
        )
        .unwrap();
        assert_eq!(s.paths[0].label, "peering");
        assert_eq!(s.port, DEFAULT_XBENCH_PORT);
        assert_eq!(s.ami, AmiChoice::AmazonLinux2023);
        assert!(s.ssh_from.is_empty());
        assert_eq!(s.regions(), vec!["us-east-1", "ap-southeast-2"]);
    }

    #[test]
    fn refuses_one_vpc_for_peering() {
        let e = with("[[path]]\nkind = \"tgw\"\nclient = \"us-east-1\"\nserver = \"us-east-1\"\n")
            .unwrap_err();
        assert!(matches!(e, ScenarioError::NeedsTwoVpcs { .. }), "{e}");
    }

    #[test]
    fn refuses_overlap_and_unknown_region() {
        let e = Scenario::from_toml(
            "name='t'\ninstance_type='m5.large'\n[[vpc]]\nregion='us-east-1'\ncidr='10.0.0.0/16'\n[[vpc]]\nname='b'\nregion='us-east-1'\ncidr='10.0.128.0/17'\n[[path]]\nkind='peering'\nclient='us-east-1'\nserver='b'\n",
        )
        .unwrap_err();
        assert!(matches!(e, ScenarioError::OverlappingCidrs { .. }), "{e}");
        let e = Scenario::from_toml(
            "name='t'\ninstance_type='m5.large'\n[[vpc]]\nregion='us-east1'\ncidr='10.0.0.0/16'\n[[path]]\nkind='public'\nclient_address='192.0.2.1'\nserver='us-east1'\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("did you mean 'us-east-1'"), "{e}");
    }

    #[test]
    fn existing_needs_one_address() {
        let ok = with("[[path]]\nkind = \"existing\"\nclient = \"us-east-1\"\nserver_address = \"198.51.100.7\"\n").unwrap();
        assert_eq!(
            ok.paths[0].server,
            End::Address("198.51.100.7".parse().unwrap())
        );
        let e = with(
            "[[path]]\nkind = \"existing\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n",
        )
        .unwrap_err();
        assert!(matches!(e, ScenarioError::BadEnds { .. }), "{e}");
    }

    #[test]
    fn vpn_flavour_defaults_to_wireguard_and_refuses_unknown_ones() {
        let vpn = "[[path]]\nkind = \"vpn\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n";
        let s = with(vpn).unwrap();
        assert_eq!(s.paths[0].vpn, Some(VpnFlavour::WireGuard));
        assert_eq!(s.paths[0].kind_label(), "vpn (wireguard)");
        let s = with(&format!("{vpn}vpn = \"ipsec\"\n")).unwrap();
        assert_eq!(s.paths[0].vpn, Some(VpnFlavour::Ipsec));
        assert_eq!(s.paths[0].kind_label(), "vpn (ipsec)");
        // Both flavours side by side need no labels.
        let s = with(&format!("{vpn}{vpn}vpn = \"ipsec\"\n")).unwrap();
        let labels: Vec<_> = s.paths.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(labels, ["vpn", "vpn-ipsec"]);
        // A second path whose flavour is unknown: the flavour is the error, not its label.
        let e = with(&format!("{vpn}{vpn}vpn = \"strongswan\"\n")).unwrap_err();
        assert!(matches!(e, ScenarioError::UnknownVpnFlavour { .. }), "{e}");
        let e = with(&format!("{vpn}vpn = \"openvpn\"\n")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "path 'vpn': vpn = \"openvpn\" is not a VPN flavour; use one of: \"wireguard\", \"ipsec\""
        );
        let e = with("[[path]]\nkind = \"peering\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\nvpn = \"ipsec\"\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("vpn = \"ipsec\" applies only to kind = \"vpn\""),
            "{e}"
        );
        let s = with(
            "[[path]]\nkind = \"peering\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n",
        )
        .unwrap();
        assert_eq!(
            (s.paths[0].vpn, s.paths[0].kind_label().as_str()),
            (None, "peering")
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        let e = with("[[path]]\nkind = \"peering\"\nclinet = \"us-east-1\"\n").unwrap_err();
        assert!(e.to_string().contains("clinet"), "{e}");
    }

    #[test]
    fn fleet_sizes_are_checked() {
        let peering =
            "[[path]]\nkind = \"peering\"\nclient = \"us-east-1\"\nserver = \"ap-southeast-2\"\n";
        assert_eq!(with(peering).unwrap().paths[0].clients, 1);
        assert_eq!(
            with(&format!("{peering}clients = 4\n")).unwrap().paths[0].clients,
            4
        );
        for bad in ["0", "-1", "65", "100000"] {
            let e = with(&format!("{peering}clients = {bad}\n")).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("path 'peering': clients: {bad} is not a fleet size; use 1 to 64")
            );
        }
        let e = with(&format!("{peering}clients = \"many\"\n")).unwrap_err();
        assert!(matches!(e, ScenarioError::Syntax(_)), "{e}");
        let e = with(
            "[[path]]\nkind = \"public\"\nclient_address = \"192.0.2.1\"\nserver = \"ap-southeast-2\"\nclients = 2\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("need a client in a VPC"), "{e}");
    }
}
