//! Builds the AWS network paths xbench compares — VPC peering, Transit Gateway, a WireGuard or
//! IPsec (strongSwan) VPN between gateway instances, public addresses, Global Accelerator, and
//! hosts the user already has — from a short scenario file, and deletes them again.
//!
//! The library never prints: [`plan::Plan`] is data, [`Deployer::up`] returns
//! [`state::Outputs`], and progress goes to `tracing`. The `xbench-deploy` binary is the thin
//! command line on top. Not part of the `xbench` measuring tool itself, which stays free of the
//! AWS SDK.
//!
//! A scenario is checked and laid out without AWS:
//!
//! ```
//! use xbench_deploy::{Plan, Scenario, cost::PriceTable};
//!
//! let scenario = Scenario::from_toml(r#"
//!     name = "peering-vs-tgw"
//!     instance_type = "m7i.large"
//!     [[vpc]]
//!     name = "a"
//!     region = "ap-northeast-1"
//!     cidr = "10.100.0.0/16"
//!     [[vpc]]
//!     name = "b"
//!     region = "ap-northeast-1"
//!     cidr = "10.101.0.0/16"
//!     [[path]]
//!     kind = "peering"
//!     client = "a"
//!     server = "b"
//!     [[path]]
//!     kind = "tgw"
//!     client = "a"
//!     server = "b"
//! "#)?;
//! let plan = Plan::build(&scenario, &PriceTable::shipped())?;
//! assert_eq!(plan.hosts.len(), 3); // one server, a client per path
//! assert_eq!(plan.tgws.len(), 1); // one Transit Gateway joins both VPCs
//! assert!(plan.cost.total_hourly > 0.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

pub mod apply;
pub mod aws;
pub mod binary;
pub mod cidr;
pub mod command;
pub mod cost;
pub mod deployer;
pub mod error;
pub mod home;
pub mod hybrid;
pub mod ipsec;
pub mod plan;
pub mod policy;
pub mod regions;
pub mod run;
pub mod scenario;
pub mod state;
pub use xbench_sweep::suite;
pub mod teardown;
pub mod transfer;
pub mod userdata;

pub use deployer::Deployer;
pub use error::Error;
pub use plan::Plan;
pub use scenario::Scenario;
pub use suite::Suite;
