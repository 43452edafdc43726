//! The lab's contact with the operating system: running `ip`/`tc`, entering network
//! namespaces, attaching TUN devices, starting and stopping helper processes, and checking
//! privileges. Each module wraps one kind of system interaction; none decides topology.

pub mod cmd;
pub mod netns;
pub mod privilege;
pub mod process;
pub mod tun;
