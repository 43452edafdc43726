//! What a user asks the lab for: which paths, and how each is impaired (rate cap, one-way delay,
//! jitter, random loss). Plain values with their checks; turning them into namespaces and links
//! is `plan`'s job, and parsing them from text is the command line's.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::LabError;

/// Lowest rate cap accepted, bits per second. Below 1 Mbit/s a full-size packet takes more than
/// 12 ms to serialise, the VPN tunnel's own traffic (TLS handshake, MSS-clamped segments with
/// 60+ bytes of encapsulation each) becomes a visible share of the link, and a test of a few
/// seconds moves too few packets to say anything about a cloud path.
pub const MIN_RATE_BPS: u64 = 1_000_000;

/// Highest rate cap accepted, bits per second: above this `tc tbf` is not the bottleneck of a
/// namespace lab on one host anyway.
pub const MAX_RATE_BPS: u64 = 100_000_000_000;

/// Longest one-way delay accepted (a geostationary hop is ~270 ms; anything longer is a typo).
pub const MAX_DELAY: Duration = Duration::from_secs(2);

/// Longest label: it becomes part of namespace and interface names (interfaces have 15 bytes).
pub const MAX_LABEL_LEN: usize = 12;

/// The kinds of path the lab emulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathKind {
    /// Client and server linked straight, like VPC peering.
    Direct,
    /// Through a router namespace that forwards: one extra routed hop, like a Transit Gateway.
    Transit,
    /// Through two gateway namespaces joined by an OpenVPN tunnel over UDP, like a software
    /// VPN between two sites.
    Vpn,
}

impl PathKind {
    /// Every kind, in the order they are listed to users.
    pub const ALL: [PathKind; 3] = [PathKind::Direct, PathKind::Transit, PathKind::Vpn];

    /// The name users type.
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Direct => "direct",
            PathKind::Transit => "transit",
            PathKind::Vpn => "vpn",
        }
    }
}

impl fmt::Display for PathKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// An unknown path kind; the message lists the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown path kind `{0}`; the lab has direct, transit and vpn")]
pub struct UnknownKind(pub String);

impl FromStr for PathKind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PathKind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| UnknownKind(s.to_owned()))
    }
}

/// How a path is impaired. Delay, jitter and loss apply in each direction independently (a
/// 10 ms delay makes a 20 ms round trip); the rate cap applies to each direction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Impairment {
    /// Rate cap in bits per second (`tc tbf`), or none.
    pub rate_bps: Option<u64>,
    /// One-way delay added in each direction.
    pub delay: Duration,
    /// Each packet's delay varies uniformly within ± this, without reordering: a packet is never
    /// released before the one ahead of it. Must not exceed `delay`.
    pub jitter: Duration,
    /// Probability that a packet is dropped, 0.0 to 1.0, in each direction.
    pub loss: f64,
    /// Probability that a packet is held an extra millisecond (the delay line's
    /// [`crate::delay::DEFAULT_REORDER_HOLD_NS`]) so that the packets behind it overtake it,
    /// 0.0 to 1.0, in each direction. Only the lab's delay line reorders (netem's reordering
    /// is another model), so a path with reordering uses it.
    #[serde(default)]
    pub reorder: f64,
    /// Bytes the rate cap's queue holds (tc tbf's `limit`), instead of one bandwidth-delay
    /// product: a short queue drops bursts and makes TCP retransmit, as a policer or a
    /// congested VPN gateway does. Needs a rate.
    #[serde(default)]
    pub queue_bytes: Option<u64>,
}

impl Impairment {
    /// True when nothing is impaired: the path is plain veth links.
    pub fn is_none(&self) -> bool {
        self.rate_bps.is_none() && !self.needs_delay_line()
    }

    /// True when the path needs delay, jitter, loss or reordering (netem or the userspace
    /// delay line).
    pub fn needs_delay_line(&self) -> bool {
        !self.delay.is_zero() || !self.jitter.is_zero() || self.loss > 0.0 || self.reorder > 0.0
    }

    /// Checks the values; `kind` matters for the rate floor's message.
    pub fn validate(&self, label: &str, kind: PathKind) -> Result<(), LabError> {
        let bad = |reason: String| LabError::InvalidPath {
            path: label.to_owned(),
            reason,
        };
        if let Some(r) = self.rate_bps {
            if r < MIN_RATE_BPS {
                let what = if kind == PathKind::Vpn {
                    "the vpn tunnel and its TLS control channel"
                } else {
                    "a meaningful test"
                };
                return Err(bad(format!(
                    "rate {} is below what {what} can carry; the lab's floor is {}",
                    fmt_rate(r),
                    fmt_rate(MIN_RATE_BPS)
                )));
            }
            if r > MAX_RATE_BPS {
                return Err(bad(format!(
                    "rate {} is above the lab's ceiling of {}",
                    fmt_rate(r),
                    fmt_rate(MAX_RATE_BPS)
                )));
            }
        }
        if self.delay > MAX_DELAY {
            return Err(bad(format!(
                "delay {:?} is longer than the lab's {:?}",
                self.delay, MAX_DELAY
            )));
        }
        if self.jitter > self.delay {
            return Err(bad(format!(
                "jitter {:?} exceeds the delay {:?}; a packet cannot leave before it arrived",
                self.jitter, self.delay
            )));
        }
        if let Some(q) = self.queue_bytes {
            if self.rate_bps.is_none() {
                return Err(bad(
                    "a queue length needs a rate cap: the queue is the cap's (add rate=…)".into(),
                ));
            }
            if !(MIN_QUEUE_BYTES..=MAX_QUEUE_BYTES).contains(&q) {
                return Err(bad(format!(
                    "queue of {q} bytes is outside {MIN_QUEUE_BYTES} bytes (four full frames) to \
                     {MAX_QUEUE_BYTES} bytes"
                )));
            }
        }
        if !(0.0..=1.0).contains(&self.loss) || self.loss.is_nan() {
            return Err(bad(format!(
                "loss {} % is outside 0–100 %",
                self.loss * 100.0
            )));
        }
        if !(0.0..=1.0).contains(&self.reorder) || self.reorder.is_nan() {
            return Err(bad(format!(
                "reordering {} % is outside 0–100 %",
                self.reorder * 100.0
            )));
        }
        Ok(())
    }
}

/// Shortest queue a path may have: four full Ethernet frames (a shorter one drops nearly
/// every burst and says more about the qdisc than the path).
pub(crate) const MIN_QUEUE_BYTES: u64 = 4 * 1514;

/// Longest queue a path may have: 1 GiB.
pub(crate) const MAX_QUEUE_BYTES: u64 = 1 << 30;

/// Formats a rate for messages (`1 Mbit/s`, `200 Mbit/s`).
pub(crate) fn fmt_rate(bps: u64) -> String {
    let b = bps as f64;
    if b >= 1e9 {
        format!("{} Gbit/s", b / 1e9)
    } else if b >= 1e6 {
        format!("{} Mbit/s", b / 1e6)
    } else {
        format!("{} kbit/s", b / 1e3)
    }
}

/// One path of the lab.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathSpec {
    /// Which kind of path.
    pub kind: PathKind,
    /// Its name in namespace names, reports and output directories: lower-case letters, digits
    /// and `-`, at most [`MAX_LABEL_LEN`] bytes. Defaults to the kind's name.
    pub label: String,
    /// Its impairments.
    pub impairment: Impairment,
}

impl PathSpec {
    /// A path of `kind` labelled by its kind, unimpaired.
    pub fn new(kind: PathKind) -> Self {
        PathSpec {
            kind,
            label: kind.name().to_owned(),
            impairment: Impairment::default(),
        }
    }

    /// The same path with `impairment`.
    pub fn with(mut self, impairment: Impairment) -> Self {
        self.impairment = impairment;
        self
    }
}

/// How delay, jitter and loss are produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// The kernel's `netem` when it is there and the path has no jitter (netem reorders
    /// jittered packets) and no reordering, else the userspace delay line.
    #[default]
    Auto,
    /// The kernel's `netem` qdisc; fails where `sch_netem` is missing. A path with
    /// reordering uses the delay line all the same (netem's reordering is another model).
    Netem,
    /// The lab's userspace delay line between two TUN devices.
    DelayLine,
}

/// Default namespace prefix of a lab started from the command line.
pub const DEFAULT_PREFIX: &str = "xbl-";

/// Default state directory: on tmpfs, so a reboot (which also removes namespaces) clears it.
pub const DEFAULT_STATE_DIR: &str = "/run/xbench-lab";

/// Port the lab's xbench servers listen on.
pub const SERVER_PORT: u16 = 5201;

/// Everything needed to build a lab.
#[derive(Debug, Clone)]
pub struct LabSpec {
    /// The paths, in order. Labels must be unique.
    pub paths: Vec<PathSpec>,
    /// Start of every namespace name (`xbl-`): lower-case letters, digits and `-`, ending in
    /// `-`. `down` removes namespaces by this prefix, so two labs need different prefixes.
    pub prefix: String,
    /// Where the lock, the state file, logs and VPN keys live. One lab per directory.
    pub state_dir: PathBuf,
    /// How delay and loss are made.
    pub backend: Backend,
    /// Seed of the loss and jitter generators; the same seed gives the same drop pattern for
    /// the same packet sequence.
    pub seed: u64,
    /// The `xbench` executable. With it, each delay line runs as a detached
    /// `xbench lab delay-line` process and each path's server as `xbench server`, so the lab
    /// outlives this process (`xbench lab up`). Without it, delay lines run as threads of this
    /// process and no servers are started (library tests, embedding programs).
    pub xbench: Option<PathBuf>,
    /// The delay line spins this long before each release instead of sleeping to it:
    /// more precise where timer wake-ups are slow (virtual machines), at the cost of CPU the
    /// TCP endpoints on a small host would otherwise use.
    pub delay_spin: Duration,
    /// The command that is building the lab, recorded for refusal messages.
    pub command: String,
}

impl LabSpec {
    /// A lab of `paths` with the default prefix and state directory.
    pub fn new(paths: Vec<PathSpec>) -> Self {
        LabSpec {
            paths,
            prefix: DEFAULT_PREFIX.to_owned(),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            backend: Backend::Auto,
            seed: 1,
            xbench: None,
            delay_spin: Duration::from_nanos(crate::lab::DEFAULT_SPIN_NS),
            command: std::env::args().collect::<Vec<_>>().join(" "),
        }
    }

    /// Checks every setting that does not need the machine.
    pub fn validate(&self) -> Result<(), LabError> {
        if self.paths.is_empty() {
            return Err(LabError::InvalidSpec(
                "no paths: give at least one of direct, transit, vpn".into(),
            ));
        }
        if self.paths.len() > crate::plan::MAX_PATHS {
            return Err(LabError::InvalidSpec(format!(
                "{} paths; the lab's address plan has room for {}",
                self.paths.len(),
                crate::plan::MAX_PATHS
            )));
        }
        check_name("prefix", &self.prefix, 16)?;
        if !self.prefix.ends_with('-') {
            return Err(LabError::InvalidSpec(format!(
                "prefix `{}` must end with `-`, so one lab's prefix is never the start of another's names",
                self.prefix
            )));
        }
        for (i, p) in self.paths.iter().enumerate() {
            check_name("label", &p.label, MAX_LABEL_LEN).map_err(|e| LabError::InvalidPath {
                path: p.label.clone(),
                reason: e.to_string(),
            })?;
            if self.paths[..i].iter().any(|q| q.label == p.label) {
                return Err(LabError::InvalidPath {
                    path: p.label.clone(),
                    reason: "two paths have this label; give each a different one".into(),
                });
            }
            p.impairment.validate(&p.label, p.kind)?;
        }
        Ok(())
    }
}

fn check_name(what: &str, s: &str, max: usize) -> Result<(), LabError> {
    let ok = !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(LabError::InvalidSpec(format!(
            "{what} `{s}` must be 1–{max} lower-case letters, digits or `-`, starting with a letter or digit"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab(paths: Vec<PathSpec>) -> LabSpec {
        LabSpec::new(paths)
    }

    #[test]
    fn kinds_parse_and_unknown_ones_are_named() {
        assert_eq!("vpn".parse::<PathKind>().unwrap(), PathKind::Vpn);
        let e = "mpls".parse::<PathKind>().unwrap_err().to_string();
        assert!(
            e.contains("mpls") && e.contains("direct, transit and vpn"),
            "{e}"
        );
    }

    #[test]
    fn impairments_out_of_range_are_refused() {
        let p = |i: Impairment| lab(vec![PathSpec::new(PathKind::Vpn).with(i)]).validate();
        assert!(p(Impairment::default()).is_ok());
        let e = p(Impairment {
            loss: 1.5,
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("150 %"), "{e}");
        let e = p(Impairment {
            rate_bps: Some(500_000),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("vpn tunnel"), "{e}");
        let e = p(Impairment {
            delay: Duration::from_millis(5),
            jitter: Duration::from_millis(6),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("jitter"), "{e}");
        for reorder in [-0.01, 1.01, f64::NAN] {
            let e = p(Impairment {
                reorder,
                ..Default::default()
            })
            .unwrap_err();
            assert!(e.to_string().contains("reordering"), "{e}");
        }
        let reordering = Impairment {
            reorder: 0.02,
            ..Default::default()
        };
        assert!(p(reordering).is_ok() && reordering.needs_delay_line());
    }

    #[test]
    fn labels_must_be_unique_and_short() {
        let d = PathSpec::new(PathKind::Direct);
        assert!(lab(vec![d.clone(), d.clone()]).validate().is_err());
        let mut long = d.clone();
        long.label = "a-very-long-label".into();
        assert!(lab(vec![long]).validate().is_err());
        assert!(lab(vec![]).validate().is_err());
        let mut s = lab(vec![d]);
        s.prefix = "xbl".into();
        assert!(s.validate().unwrap_err().to_string().contains("end with"));
    }
}
