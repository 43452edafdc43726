//! Where the tests of a plan run: the server and how to reach it, as `xbench client`'s
//! connection flags say it. Not the test itself (that is the plan's [`TestSpec`]).

use std::net::IpAddr;
use std::num::{NonZeroU16, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use xbench::auth::{KeyError, Psk};
use xbench::client::{AddressFamily, ClientConfig, DEFAULT_PORT, ServerProtocol};
use xbench::config::TestSpec;

/// The server of a plan's tests. [`Target::new`] and [`Target::local`] give `xbench client`'s
/// defaults; every field is one of its flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Server host name or address. `None` is a server on loopback in the calling program
    /// (`xbench client --local`), which that program starts and whose port it sets here.
    pub host: Option<String>,
    /// Server port (`-p`).
    pub port: u16,
    /// Address family for a host name with both (`-4`, `-6`).
    pub family: AddressFamily,
    /// Local address to send from (`-B`; the first of a list).
    pub bind: Option<IpAddr>,
    /// Local addresses the data connections are spread over (`-B a,b,…`; the library's
    /// `flow_binds`); empty: `bind` alone.
    pub flow_binds: Vec<IpAddr>,
    /// Most data connections opened at once (`--max-connecting`).
    pub max_connecting: NonZeroUsize,
    /// How long each connection may take to open (`--connect-timeout`).
    pub connect_timeout: Duration,
    /// How long a request/response flow may wait for an answer before the test fails
    /// (`--response-timeout`; the library's `stall_timeout`).
    pub response_timeout: Duration,
    /// The key file proving this client to a server that wants one (`--psk-file`). A path,
    /// not the key, so a plan can be written out as a command; [`Target::read_key`] reads it.
    pub psk_file: Option<PathBuf>,
    /// The protocol to speak (`--iperf3`: an iperf3 server).
    pub protocol: ServerProtocol,
    /// Request/response: each flow's own latency summary in the report (`--per-flow`; the
    /// library's `per_flow`).
    pub per_flow: bool,
    /// Request/response: run the flows a server's `--max-flows` takes instead of failing
    /// (`--allow-partial-flows`; the library's `allow_partial_flows`).
    pub allow_partial_flows: bool,
    /// Request/response: a connection-rate test, new connections opened this many at a time
    /// while the spec's flows are held (`--connections-only`, `--openers`; the library's
    /// `connections_only`).
    pub connections_only: Option<NonZeroU16>,
    /// Probe the hops of each test's path while it runs, at the library's default pace
    /// (`--trace`; the library's `trace`).
    pub trace: bool,
}

impl Target {
    /// A server at `host` with every connection setting at its default.
    pub fn new(host: impl Into<String>) -> Self {
        Target {
            host: Some(host.into()),
            ..Target::local()
        }
    }

    /// A server in the calling program, on loopback (`--local`).
    pub fn local() -> Self {
        let defaults = ClientConfig::new("");
        Target {
            host: None,
            port: DEFAULT_PORT,
            family: defaults.family,
            bind: defaults.bind,
            flow_binds: defaults.flow_binds,
            max_connecting: defaults.max_connecting,
            connect_timeout: defaults.connect_timeout,
            response_timeout: defaults.stall_timeout,
            psk_file: None,
            protocol: defaults.protocol,
            per_flow: defaults.per_flow,
            allow_partial_flows: defaults.allow_partial_flows,
            connections_only: defaults.connections_only,
            trace: defaults.trace.is_some(),
        }
    }

    /// The target a configuration runs against (the inverse of [`Target::client_config`]),
    /// with its key read from `psk_file`: for a program that holds a [`ClientConfig`] and
    /// wants the command line that runs it elsewhere (xbench-deploy). Kept here, beside
    /// [`Target::client_config`], so a connection setting added to both cannot be forgotten
    /// in a copy of this mapping.
    pub fn from_client_config(config: &ClientConfig, psk_file: Option<PathBuf>) -> Self {
        Target {
            host: Some(config.host.clone()),
            port: config.port,
            family: config.family,
            bind: config.bind,
            flow_binds: config.flow_binds.clone(),
            max_connecting: config.max_connecting,
            connect_timeout: config.connect_timeout,
            response_timeout: config.stall_timeout,
            psk_file,
            protocol: config.protocol,
            per_flow: config.per_flow,
            allow_partial_flows: config.allow_partial_flows,
            trace: config.trace.is_some(),
            connections_only: config.connections_only,
        }
    }

    /// The key of [`Target::psk_file`], if there is one.
    pub fn read_key(&self) -> Result<Option<Psk>, KeyError> {
        self.psk_file.as_deref().map(Psk::from_file).transpose()
    }

    /// The library's configuration for running `spec` against this target, with the key
    /// [`Target::read_key`] returned. A local target is 127.0.0.1.
    pub fn client_config(
        &self,
        spec: TestSpec,
        label: Option<String>,
        psk: Option<Psk>,
    ) -> ClientConfig {
        ClientConfig {
            port: self.port,
            family: self.family,
            bind: self.bind,
            flow_binds: self.flow_binds.clone(),
            max_connecting: self.max_connecting,
            connect_timeout: self.connect_timeout,
            stall_timeout: self.response_timeout,
            spec,
            label,
            psk,
            protocol: self.protocol,
            per_flow: self.per_flow,
            allow_partial_flows: self.allow_partial_flows,
            connections_only: self.connections_only,
            trace: self.trace.then(xbench::trace::TraceConfig::default),
            ..ClientConfig::new(self.host.as_deref().unwrap_or("127.0.0.1"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// deploy builds its command lines from a `ClientConfig` through `from_client_config`: every
    /// connection setting must survive the trip there and back, so a setting added to one
    /// mapping and not the other shows here (deploy's copy of the mapping lost two of them).
    #[test]
    fn a_target_survives_the_round_trip_through_its_client_config() {
        let t = Target {
            host: Some("10.0.0.9".into()),
            port: 7001,
            family: AddressFamily::V4,
            bind: Some("10.0.0.1".parse().unwrap()),
            flow_binds: vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()],
            max_connecting: NonZeroUsize::new(64).unwrap(),
            connect_timeout: Duration::from_millis(1500),
            response_timeout: Duration::from_secs(7),
            psk_file: Some(PathBuf::from("/etc/key")),
            protocol: ServerProtocol::Iperf3,
            per_flow: true,
            allow_partial_flows: true,
            connections_only: NonZeroU16::new(12),
            trace: true,
        };
        let config = t.client_config(TestSpec::throughput(), None, None);
        assert_eq!(Target::from_client_config(&config, t.psk_file.clone()), t);
    }
}
