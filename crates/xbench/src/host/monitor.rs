//! Reads one end's interface on the test's clock: at the start, every interval and at the end,
//! in a task beside the test, so no workload has to know about it.
//!
//! The client starts one when its test is accepted and restarts it when its data starts to
//! flow; the server starts one when a test's data connections have arrived. Each hands the
//! intervals out live ([`Monitor::take_live`]) and its [`HostReport`] at the end. Not for: the
//! readings themselves ([`sampler`](super::sampler)).

use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use super::imds;
use super::sampler::Sampler;
use crate::report::{HostReport, InterfaceInterval};

/// One end's interface, read over a test.
#[derive(Debug)]
pub(crate) struct Monitor {
    sampler: Arc<Mutex<Option<Sampler>>>,
    stop: Arc<Notify>,
    /// Reads every interval; `None` without intervals or outside a runtime.
    task: Option<JoinHandle<()>>,
    live: Option<mpsc::UnboundedReceiver<InterfaceInterval>>,
    /// Asks IMDS where the host is, beside the test (at most its 100 ms budget, once per
    /// process); `None` when turned off or already known.
    placement: Placement,
}

/// Where the host is, asked or known.
#[derive(Debug)]
enum Placement {
    Asking(std::thread::JoinHandle<Option<crate::report::Placement>>),
    Known(Option<crate::report::Placement>),
}

impl Monitor {
    /// Finds the interface the route from `local` to `peer` leaves by, reads it, and reads it
    /// again every `interval` (none: only at the start and the end).
    pub(crate) fn start(local: IpAddr, peer: IpAddr, interval: Option<Duration>) -> Monitor {
        let sampler = Arc::new(Mutex::new(Some(Sampler::open(local, peer))));
        let stop = Arc::new(Notify::new());
        let (tx, rx) = mpsc::unbounded_channel();
        let task = match (interval, tokio::runtime::Handle::try_current()) {
            (Some(every), Ok(rt)) if !every.is_zero() => Some(rt.spawn(every_interval(
                Arc::clone(&sampler),
                every,
                Arc::clone(&stop),
                tx,
            ))),
            _ => None,
        };
        let placement = match imds::endpoint_from_env() {
            None => Placement::Known(None),
            Some(at) => match imds::known(at) {
                Some(p) => Placement::Known(p),
                None => match std::thread::Builder::new()
                    .name("xbench-imds".into())
                    .spawn(move || imds::placement_cached(at))
                {
                    Ok(h) => Placement::Asking(h),
                    Err(_) => Placement::Known(None),
                },
            },
        };
        Monitor {
            sampler,
            stop,
            task,
            live: Some(rx),
            placement,
        }
    }

    /// The intervals as they are read (once).
    pub(crate) fn take_live(&mut self) -> Option<mpsc::UnboundedReceiver<InterfaceInterval>> {
        self.live.take()
    }

    /// A handle that restarts the span from elsewhere (the client's event callback).
    pub(crate) fn restarter(&self) -> Restarter {
        Restarter(Arc::clone(&self.sampler))
    }

    /// Stops reading every interval, reads a last time, and reports.
    pub(crate) fn finish(mut self) -> HostReport {
        self.stop.notify_one();
        // The task holds the lock only between awaits, so an abort never leaves it held, and
        // a reading under way finishes before `lock` below returns.
        if let Some(t) = self.task.take() {
            t.abort();
        }
        let sampler = lock(&self.sampler).take();
        let cloud = match std::mem::replace(&mut self.placement, Placement::Known(None)) {
            Placement::Known(p) => p,
            // Bounded by IMDS's budget, and long done by the end of a test.
            Placement::Asking(h) => h.join().ok().flatten(),
        };
        let mut report = match sampler {
            Some(s) => s.finish(),
            None => HostReport {
                cloud: None,
                interface: None,
                error: Some("the interface was not read".into()),
            },
        };
        report.cloud = cloud;
        report
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// Restarts a [`Monitor`]'s span: see [`Self::restart`].
#[derive(Debug, Clone)]
pub(crate) struct Restarter(Arc<Mutex<Option<Sampler>>>);

impl Restarter {
    /// Starts the span and the intervals again from now.
    pub(crate) fn restart(&self) {
        if let Some(s) = lock(&self.0).as_mut() {
            s.restart();
        }
    }
}

/// A lock that a panicked holder did not poison for good: the readings are plain numbers.
fn lock(m: &Mutex<Option<Sampler>>) -> MutexGuard<'_, Option<Sampler>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn every_interval(
    sampler: Arc<Mutex<Option<Sampler>>>,
    every: Duration,
    stop: Arc<Notify>,
    live: mpsc::UnboundedSender<InterfaceInterval>,
) {
    loop {
        let Some(due) = lock(&sampler).as_ref().map(|s| s.next_due(every)) else {
            return;
        };
        tokio::select! {
            () = tokio::time::sleep_until(due.into()) => {}
            () = stop.notified() => return,
        }
        // A restart since `due` was computed moves the next interval: only read when due.
        let read = match lock(&sampler).as_mut() {
            Some(s) if Instant::now() >= s.next_due(every) => s.tick(),
            Some(_) => None,
            None => return,
        };
        if let Some(iv) = read {
            let _ = live.send(iv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[tokio::test]
    async fn reads_every_interval_live_and_reports_at_the_end() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut m = Monitor::start(lo, lo, Some(Duration::from_millis(50)));
        let mut live = m.take_live().unwrap();
        m.restarter().restart();
        let first = tokio::time::timeout(Duration::from_secs(10), live.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(first.end_s >= 0.05, "{first:?}");
        let r = m.finish();
        let i = r.interface.unwrap();
        assert!(!i.intervals.is_empty());
        assert_eq!(i.intervals[0], first);
        // Intervals follow each other without gaps, from the restart to the end.
        for w in i.intervals.windows(2) {
            assert_eq!(w[0].end_s, w[1].start_s);
        }
        let end = i.intervals.last().unwrap().end_s;
        assert!((end - i.span_s).abs() < 1e-6, "{end} vs {}", i.span_s);
    }
}
