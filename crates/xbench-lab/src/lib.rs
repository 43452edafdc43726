//! The xbench path lab: the network paths users compare — VPC peering, an extra routed hop
//! like a Transit Gateway, a software VPN — emulated on one Linux host in network namespaces,
//! with known rate caps, delays and loss rates, so xbench's figures can be checked against
//! ground truth (the cap, the delay, the kernel's own counters).
//!
//! [`Lab::up`] builds a hub-and-spoke topology from a [`LabSpec`] (see [`plan`] for the
//! layout and addresses); tests then run inside [`PathInfo::client_netns`] against
//! [`PathInfo::server_addr`]. Delay, jitter and loss come from the kernel's netem where it
//! exists and otherwise from the lab's userspace [`delay`] line between two TUN devices;
//! reordering only from the delay line, which counts what it drops and reorders.
//! Everything carries a name prefix and is removed when the [`Lab`] is dropped, or by [`down`]
//! after a killed run.
//!
//! The library has no command line and prints nothing; `xbench lab` is its front end. It
//! needs Linux, root (or CAP_NET_ADMIN + CAP_SYS_ADMIN), iproute2, and for the `vpn` path
//! OpenVPN and openssl.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use std::time::Duration;
//! use xbench_lab::{Impairment, Lab, LabSpec, PathKind, PathSpec};
//!
//! let mut spec = LabSpec::new(vec![PathSpec::new(PathKind::Direct).with(Impairment {
//!     delay: Duration::from_millis(10),
//!     rate_bps: Some(200_000_000),
//!     ..Impairment::default()
//! })]);
//! spec.prefix = "doc-".into();
//! let lab = Lab::up(&spec, &AtomicBool::new(false))?;
//! let path = &lab.paths()[0];
//! println!("run tests in {} against {}", path.client_netns, path.server_addr);
//! drop(lab); // removes every namespace, link and process it made
//! # Ok::<(), xbench_lab::LabError>(())
//! ```

#![deny(missing_docs)]

pub mod delay;
mod error;
mod lab;
pub mod plan;
pub mod reference;
mod spec;
pub mod state;
pub mod sys;
mod vpn;

pub use error::{Holder, LabError};
pub use lab::{DEFAULT_SPIN_NS, Lab, Teardown, delay_stats_path, down};
pub use plan::PathInfo;
pub use spec::{
    Backend, DEFAULT_PREFIX, DEFAULT_STATE_DIR, Impairment, LabSpec, MAX_DELAY, MAX_LABEL_LEN,
    MAX_RATE_BPS, MIN_RATE_BPS, PathKind, PathSpec, SERVER_PORT, UnknownKind,
};
pub use vpn::{OPENVPN_ENV, openvpn_program};
