//! One module per subcommand: flags → library configuration → run → render.

pub(crate) mod client;
pub(crate) mod compare;
pub(crate) mod completions;
pub(crate) mod lab;
pub(crate) mod local;
pub(crate) mod man;
pub(crate) mod report;
pub(crate) mod server;
pub(crate) mod sweep;
