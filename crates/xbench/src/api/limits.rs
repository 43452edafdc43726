//! The bounds `xbench server` puts on its own flags, for a program that builds a
//! [`ServerConfig`] itself: [`ServerConfig::check`] refuses what the CLI refuses, in the same
//! words. [`Server::bind`](crate::Server::bind) does not call it: tests of the server's
//! defences run it with limits no operator should choose (three handshake slots).

use crate::client::DEFAULT_MAX_CONNECTING;
use crate::config::{MAX_BLOCK_LEN, MAX_DURATION, MAX_FLOWS, SpecError};
use crate::server::{Limits, ServerConfig};

impl ServerConfig {
    /// Checks [`Self::limits`] as `xbench server` checks its flags.
    pub fn check(&self) -> Result<(), SpecError> {
        self.limits.check()
    }
}

impl Limits {
    /// Descriptors a server keeps for itself beside flows and handshakes: its listeners, the
    /// control connection of each running test, logs, the runtime's.
    pub const OPEN_FILES_RESERVE: u64 = 256;

    /// Every bound `xbench server` applies to its `--max-*` flags, and that
    /// [`Self::max_handshakes`] is at least twice what one client opens at once (its
    /// `--max-connecting`, or [`Self::max_flows`] if fewer). The field is named by its flag.
    pub fn check(&self) -> Result<(), SpecError> {
        let err = |field, reason: String| Err(SpecError { field, reason });
        let at_least_one = "must be at least 1".to_owned();
        if self.max_streams == 0 {
            return err("--max-streams", at_least_one);
        }
        if self.max_flows == 0 {
            return err("--max-flows", at_least_one);
        }
        if self.max_flows > MAX_FLOWS {
            return err(
                "--max-flows",
                format!("at most {MAX_FLOWS} (the most flows a client may ask for)"),
            );
        }
        if self.max_tests == 0 {
            return err("--max-tests", at_least_one);
        }
        if self.max_tests_per_client == 0 {
            return err("--max-tests-per-client", at_least_one);
        }
        if self.max_block_len == 0 {
            return err("--max-block-len", "must be greater than 0".into());
        }
        if self.max_block_len > MAX_BLOCK_LEN {
            return err(
                "--max-block-len",
                format!("at most {} MiB", MAX_BLOCK_LEN >> 20),
            );
        }
        if self.max_duration.is_zero() {
            return err(
                "--max-duration",
                "must be greater than 0 (xbench has no endless mode; give a duration)".into(),
            );
        }
        if self.max_duration > MAX_DURATION {
            return err(
                "--max-duration",
                format!("at most {} s (a week)", MAX_DURATION.as_secs()),
            );
        }
        // A request/response client opens up to --max-connecting connections at once (all of
        // them, before clients paced their setup), each holding a handshake slot until its
        // greeting is read; twice that leaves room for a second client.
        let at_once = (self.max_flows as usize).min(DEFAULT_MAX_CONNECTING.get());
        let needed = 2 * at_once;
        if self.max_handshakes < needed {
            return err(
                "--max-handshakes",
                format!(
                    "{} is below twice the connections a client opens at once ({needed}: \
                     --max-flows or a client's default --max-connecting, {}, whichever is \
                     fewer); such a client's connections would be turned away as silent ones",
                    self.max_handshakes, DEFAULT_MAX_CONNECTING
                ),
            );
        }
        Ok(())
    }

    /// The defaults for a server that may hold `open_files` descriptors (its `RLIMIT_NOFILE`;
    /// `xbench server` raises the soft limit to the hard one first and passes that): one
    /// request/response test's flows must fit beside a flood of silent connections, or the
    /// flood would starve the test of descriptors, and more flows than the descriptors hold
    /// would fail half-way through setup instead of being refused with the number.
    ///
    /// [`Self::max_handshakes`] stays 8,192 while that is at most half of what is left after
    /// [`Self::OPEN_FILES_RESERVE`] (listeners, control connections, the runtime's own), and
    /// half below; [`Self::max_flows`] gets the rest, at most 65,536 (the protocol's most), or
    /// half the handshakes where descriptors are so few that [`Self::check`] needs it. With
    /// this machine's 20,000: 8,192 and 11,552. With 1,048,576 (a common hard limit):
    /// 8,192 and 65,536. Everything else is [`Limits::default`].
    pub fn for_open_files(open_files: u64) -> Limits {
        let usable = open_files.saturating_sub(Self::OPEN_FILES_RESERVE);
        let defaults = Limits::default();
        let handshakes = (defaults.max_handshakes as u64).min(usable / 2);
        let mut flows = usable.saturating_sub(handshakes).min(u64::from(MAX_FLOWS));
        if handshakes < 2 * flows.min(DEFAULT_MAX_CONNECTING.get() as u64) {
            // So few descriptors that the handshakes could not take a client's burst: fewer
            // flows, so that `check` holds.
            flows = handshakes / 2;
        }
        Limits {
            // At least one of each, so a tiny limit still yields limits `check` takes.
            // `flows` is at most MAX_FLOWS, which fits in u32.
            max_flows: (flows as u32).max(1),
            max_handshakes: (handshakes as usize).max(2),
            ..defaults
        }
    }
}
