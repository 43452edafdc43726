//! The bounds `xbench server` puts on its own flags, for a program that builds a
//! [`ServerConfig`] itself: [`ServerConfig::check`] refuses what the CLI refuses, in the same
//! words. [`Server::bind`](crate::Server::bind) does not call it: tests of the server's
//! defences run it with limits no operator should choose (three handshake slots).

use crate::client::DEFAULT_MAX_CONNECTING;
use crate::config::{Field, MAX_BLOCK_LEN, MAX_DURATION, MAX_FLOWS, SpecError};
use crate::server::budget::Sizes;
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
            return err(Field::MaxStreams, at_least_one);
        }
        if self.max_flows == 0 {
            return err(Field::MaxFlows, at_least_one);
        }
        if self.max_flows > MAX_FLOWS {
            return err(
                Field::MaxFlows,
                format!("at most {MAX_FLOWS} (the most flows a client may ask for)"),
            );
        }
        if self.max_tests == 0 {
            return err(Field::MaxTests, at_least_one);
        }
        if self.max_tests_per_client == 0 {
            return err(Field::MaxTestsPerClient, at_least_one);
        }
        if self.max_block_len == 0 {
            return err(Field::MaxBlockLen, "must be greater than 0".into());
        }
        if self.max_block_len > MAX_BLOCK_LEN {
            return err(
                Field::MaxBlockLen,
                format!("at most {} MiB", MAX_BLOCK_LEN >> 20),
            );
        }
        if self.max_duration.is_zero() {
            return err(
                Field::MaxDuration,
                "must be greater than 0 (xbench has no endless mode; give a duration)".into(),
            );
        }
        if self.max_duration > MAX_DURATION {
            return err(
                Field::MaxDuration,
                format!("at most {} s (a week)", MAX_DURATION.as_secs()),
            );
        }
        if self.client_share == 0 || self.client_share > 100 {
            return err(
                Field::ClientShare,
                format!("{}% is not a share: 1% to 100%", self.client_share),
            );
        }
        if self.max_threads == 0 {
            return err(Field::MaxThreads, at_least_one);
        }
        // A request/response client opens up to --max-connecting connections at once (all of
        // them, before clients paced their setup), each holding a handshake slot of its
        // address's share until its greeting is read; with the default share of half, twice
        // that leaves room for a second client.
        let at_once = (self.max_flows as usize).min(DEFAULT_MAX_CONNECTING.get());
        let share = Sizes::new(self, 0).handshakes_share as usize;
        if share < at_once {
            let needed = (at_once * 100).div_ceil(usize::from(self.client_share));
            return err(
                Field::MaxHandshakes,
                format!(
                    "{} gives one client address {share} connections in their handshake \
                     (--client-share {}%), fewer than a client opens at once ({at_once}: \
                     --max-flows or a client's default --max-connecting, {}, whichever is \
                     fewer); such a client's connections would be turned away as silent ones: \
                     give at least {needed}",
                    self.max_handshakes, self.client_share, DEFAULT_MAX_CONNECTING
                ),
            );
        }
        Ok(())
    }

    /// The defaults for a server that may hold `open_files` descriptors (its `RLIMIT_NOFILE`;
    /// `xbench server` raises the soft limit to the hard one first and passes that):
    /// [`Self::open_files`] set to it, so tests reserve their descriptors from it, and a
    /// [`Self::max_flows`] that one client's share of them holds, so a test within
    /// `--max-flows` is refused only when other tests hold what it needs.
    ///
    /// [`Self::max_handshakes`] stays 8,192 while that is at most half of what is left after
    /// [`Self::OPEN_FILES_RESERVE`] (listeners, control connections, the runtime's own), and
    /// half below; [`Self::max_flows`] is what one client address's share of the descriptors
    /// tests may use holds (see `docs/server-limits.md`), at most 65,536 (the protocol's
    /// most), or half the handshakes where descriptors are so few that [`Self::check`] needs
    /// it. Everything else is [`Limits::default`].
    pub fn for_open_files(open_files: u64) -> Limits {
        Limits::default().sized_for(open_files)
    }

    /// [`Self::for_open_files`] with this [`Self::client_share`] (and everything else but
    /// [`Self::open_files`], [`Self::max_handshakes`] and [`Self::max_flows`]) as it is:
    /// the flows one client's share holds depend on the share.
    pub fn sized_for(self, open_files: u64) -> Limits {
        let usable = open_files.saturating_sub(Self::OPEN_FILES_RESERVE);
        let handshakes = (Limits::default().max_handshakes as u64)
            .min(usable / 2)
            .max(2);
        let limits = Limits {
            open_files: Some(open_files),
            max_handshakes: handshakes as usize,
            ..self
        };
        let mut flows = Sizes::new(&limits, open_files)
            .flows_in_a_share()
            .min(u64::from(MAX_FLOWS));
        if handshakes < 2 * flows.min(DEFAULT_MAX_CONNECTING.get() as u64) {
            // So few descriptors that the handshakes could not take a client's burst: fewer
            // flows, so that `check` holds.
            flows = handshakes / 2;
        }
        Limits {
            // At least one, so a tiny limit still yields limits `check` takes. `flows` is at
            // most MAX_FLOWS, which fits in u32.
            max_flows: (flows as u32).max(1),
            ..limits
        }
    }
}
