//! Stopping early: a setup step the caller may interrupt ([`interruptible`]), the caller's
//! give-up that stays fired ([`GiveUp`]), and waiting for a wall-clock instant.

use std::future::Future;
use std::pin::Pin;
use std::time::SystemTime;

use crate::error::Error;

/// The caller's `give_up`, which stays resolved once it has fired: the end of a test waits in
/// several places, and after a second Ctrl-C none of them may wait again.
pub(crate) struct GiveUp<F> {
    fut: Pin<Box<F>>,
    fired: bool,
}

impl<F: Future<Output = ()>> GiveUp<F> {
    pub(crate) fn new(fut: F) -> Self {
        GiveUp {
            fut: Box::pin(fut),
            fired: false,
        }
    }

    /// Resolves when the caller gave up, at once if it already had.
    pub(crate) async fn wait(&mut self) {
        if !self.fired {
            self.fut.as_mut().await;
            self.fired = true;
        }
    }

    /// Whether the caller has given up (as far as a `wait` has seen).
    pub(crate) fn fired(&self) -> bool {
        self.fired
    }
}

/// Sleeps until the wall clock reads `at` (at once if it is past). An `Ok` future, for
/// [`interruptible`].
pub(crate) async fn wait_until(at: SystemTime) -> Result<(), Error> {
    if let Ok(wait) = at.duration_since(SystemTime::now()) {
        tokio::time::sleep(wait).await;
    }
    Ok(())
}

/// Runs one setup step unless `cancel` fires first, which yields [`Error::Interrupted`].
/// Dropping the step closes whatever it opened; the server sees a client that went away.
pub(crate) async fn interruptible<T>(
    step: impl Future<Output = Result<T, Error>>,
    cancel: Pin<&mut impl Future<Output = ()>>,
    during: &'static str,
) -> Result<T, Error> {
    tokio::select! {
        r = step => r,
        () = cancel => Err(Error::Interrupted { during }),
    }
}
