//! The host a test runs on, as far as it explains a rate: the network interface the test's
//! route leaves by — its MTU, the kernel's counters of it, its driver's own statistics and,
//! on EC2, the allowance counters with which the instance's traffic is shaped.
//!
//! Each end reads its own interface at the start, every interval and at the end of a test
//! (`monitor`); the server sends its reading with its results, and the report carries both
//! (`report::Hosts`). On EC2 each also says where it is ([`imds`]). Reading needs no
//! privileges and no external programs: routing netlink, the ethtool ioctl, and IMDSv2. Not for: printing, or any verdict beyond the allowances
//! ([`allowance`]).

pub mod allowance;
mod ethtool;
pub mod imds;
pub(crate) mod monitor;
pub mod mtu;
mod netlink;
mod sampler;

pub(crate) use monitor::Monitor;
