//! The bounds `xbench server` puts on its own flags, for a program that builds a
//! [`ServerConfig`] itself: [`ServerConfig::check`] refuses what the CLI refuses, in the same
//! words. [`Server::bind`](crate::Server::bind) does not call it: tests of the server's
//! defences run it with limits no operator should choose (three handshake slots).

use crate::config::{MAX_BLOCK_LEN, MAX_DURATION, SpecError};
use crate::server::{Limits, ServerConfig};

impl ServerConfig {
    /// Checks [`Self::limits`] as `xbench server` checks its flags.
    pub fn check(&self) -> Result<(), SpecError> {
        self.limits.check()
    }
}

impl Limits {
    /// Every bound `xbench server` applies to its `--max-*` flags, and that
    /// [`Self::max_handshakes`] is at least twice [`Self::max_flows`]. The field is named by
    /// its flag.
    pub fn check(&self) -> Result<(), SpecError> {
        let err = |field, reason: String| Err(SpecError { field, reason });
        let at_least_one = "must be at least 1".to_owned();
        if self.max_streams == 0 {
            return err("--max-streams", at_least_one);
        }
        if self.max_flows == 0 {
            return err("--max-flows", at_least_one);
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
        // A request/response test opens all its connections at once, each holding a
        // handshake slot until it finds its test.
        let needed = 2 * usize::from(self.max_flows);
        if self.max_handshakes < needed {
            return err(
                "--max-handshakes",
                format!(
                    "{} is below twice --max-flows ({needed}); a test with --max-flows \
                     connections could not open them",
                    self.max_handshakes
                ),
            );
        }
        Ok(())
    }
}
