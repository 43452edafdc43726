//! Repeats spread over time (the suite's `every`): repeat `n` of a `run` starts no sooner than
//! `(n - 1) × every` after the first began. The first start is the schedule's anchor, kept in
//! the results directory (hidden, so `xbench report` reads runs only), so a `run --resume`
//! after a laptop slept, a Ctrl-C or a lost connection keeps the same schedule: what is due
//! runs at once, what is not waits for its time. Waits are on the wall clock in steps of a
//! minute at most, so a machine that sleeps does not oversleep a due repeat.
//!
//! Not for the order of runs (see [`super::schedule`]) or the pause between two runs.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::state::{format_time, parse_time, write_file_atomically};

/// The schedule's anchor in the results directory.
pub const SCHEDULE_FILE: &str = ".xbench-deploy-schedule.json";

/// Longest single sleep while waiting for a due time: the wall clock is read again after it.
const STEP: Duration = Duration::from_secs(60);

#[derive(Debug, Serialize, Deserialize)]
struct Anchor {
    /// When the first repeat began (RFC 3339 UTC).
    first_repeat_started: String,
    /// The spacing then, seconds (for people reading the file: a resume takes the suite's).
    every_s: f64,
}

/// A `run`'s schedule of repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spread {
    anchor: SystemTime,
    every: Duration,
}

impl Spread {
    /// The schedule of the results in `out`: the anchor an earlier `run` left there when
    /// resuming, else one that makes `next` (the first repeat not yet collected, from 1) due
    /// now — a resumed run whose anchor was lost waits for no repeat it has no reason to —
    /// written there.
    pub fn start(out: &Path, every: Duration, resume: bool, next: u32) -> Result<Spread, Error> {
        let file = out.join(SCHEDULE_FILE);
        let unreadable = |message: String| Error::Results {
            path: file.display().to_string(),
            message,
        };
        if resume && file.exists() {
            let bytes = std::fs::read(&file).map_err(|e| unreadable(e.to_string()))?;
            let a: Anchor =
                serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))?;
            let anchor = parse_time(&a.first_repeat_started)
                .ok_or_else(|| unreadable(format!("`{}` is not a time", a.first_repeat_started)))?;
            return Ok(Spread { anchor, every });
        }
        // Whole seconds, as on disk: a resumed schedule is the same schedule.
        let secs = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        let before = every.saturating_mul(next.saturating_sub(1));
        let anchor = now.checked_sub(before).unwrap_or(now);
        let a = Anchor {
            first_repeat_started: format_time(anchor),
            every_s: every.as_secs_f64(),
        };
        let json = serde_json::to_vec_pretty(&a).map_err(|e| Error::Internal(e.to_string()))?;
        write_file_atomically(&file, &json).map_err(|e| unreadable(e.to_string()))?;
        Ok(Spread { anchor, every })
    }

    /// Removes the schedule a `run` without `every` would otherwise leave for a later
    /// `--resume --every` to pick up.
    pub fn forget(out: &Path) {
        let _ = std::fs::remove_file(out.join(SCHEDULE_FILE));
    }

    /// When repeat `repeat` (from 1) may start.
    pub fn due(&self, repeat: u32) -> SystemTime {
        self.anchor + self.every.saturating_mul(repeat.saturating_sub(1))
    }

    /// How long until repeat `repeat` is due at `now`; `None` when it is.
    pub fn wait(&self, repeat: u32, now: SystemTime) -> Option<Duration> {
        self.due(repeat)
            .duration_since(now)
            .ok()
            .filter(|d| !d.is_zero())
    }

    /// Sleeps until repeat `repeat` is due, on the wall clock.
    pub async fn until_due(&self, repeat: u32) {
        while let Some(left) = self.wait(repeat, SystemTime::now()) {
            tokio::time::sleep(left.min(STEP)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("xbench-every-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Repeat n is due (n - 1) × every after the anchor, and the anchor survives a resume but
    /// not a fresh run.
    #[test]
    fn repeats_are_due_from_one_anchor_that_a_resume_keeps() {
        let d = dir("anchor");
        let every = Duration::from_secs(4 * 3600);
        let s = Spread::start(&d, every, false, 1).unwrap();
        assert_eq!(s.due(3).duration_since(s.due(1)).unwrap(), every * 2);
        assert_eq!(s.wait(1, s.due(1)), None);
        assert_eq!(s.wait(2, s.due(1)), Some(every));
        assert_eq!(s.wait(2, s.due(2) + Duration::from_secs(1)), None);
        let resumed = Spread::start(&d, every, true, 3).unwrap();
        assert_eq!(resumed, s);
        std::thread::sleep(Duration::from_millis(1100));
        let fresh = Spread::start(&d, every, false, 1).unwrap();
        assert!(fresh.due(1) > s.due(1), "{fresh:?} {s:?}");
        // A resume without the file (lost) makes the first repeat not collected due now.
        Spread::forget(&d);
        let lost = Spread::start(&d, every, true, 3).unwrap();
        assert_eq!(lost.wait(3, SystemTime::now()), None);
        assert!(lost.wait(4, SystemTime::now()).is_some());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
