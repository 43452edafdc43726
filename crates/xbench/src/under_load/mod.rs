//! Latency under load (`--under-load`): what a path's queues do to the latency users feel
//! while it is busy, in one test — the spec, the report, and how the report is derived from
//! its parts. Modelled on flent's RRUL test (latency probes while TCP streams load the path)
//! and on the responsiveness draft behind Apple's `networkQuality` (round trips per minute).
//!
//! Not the running of it: the client composes its parts (`client::under_load`) from the
//! ordinary bulk and request/response tests, so the server needs nothing new.

mod report;
pub mod rpm;
mod spec;
pub(crate) mod summary;

pub use report::*;
pub use spec::*;
