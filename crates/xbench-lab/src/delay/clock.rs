//! Precise waiting for the delay line: absolute-deadline sleeps on `CLOCK_MONOTONIC` with the
//! timer slack set to 1 ns (the default 50 µs slack would be the largest error), an optional
//! short spin for the last microseconds, and best-effort `SCHED_FIFO` so a busy machine's
//! other work does not delay a release.

/// `CLOCK_MONOTONIC` now, nanoseconds.
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec the call writes; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Returns at or just after `deadline_ns`: sleeps to `deadline − spin` with an absolute
/// deadline (no drift from computing a relative one), then spins.
pub(crate) fn sleep_until(deadline_ns: u64, spin_ns: u64) {
    loop {
        let now = now_ns();
        if now >= deadline_ns {
            return;
        }
        if deadline_ns - now > spin_ns {
            let wake = deadline_ns - spin_ns;
            let ts = libc::timespec {
                tv_sec: (wake / 1_000_000_000) as libc::time_t,
                tv_nsec: (wake % 1_000_000_000) as libc::c_long,
            };
            // SAFETY: `ts` is a valid timespec; a null remainder is allowed with TIMER_ABSTIME.
            // An early return (EINTR) just goes round the loop.
            unsafe {
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &ts,
                    std::ptr::null_mut(),
                )
            };
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Prepares the calling thread for precise wake-ups: 1 ns timer slack, and `SCHED_FIFO` at
/// `priority` when `realtime`. Returns whether the thread is real-time (needs root or
/// CAP_SYS_NICE; without it the line still works, less precisely on a loaded machine).
pub(crate) fn tune_thread(realtime: bool, priority: i32) -> bool {
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes a plain integer and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    if !realtime {
        return false;
    }
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is the calling thread; `param` is valid for the call.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_wakes_early() {
        tune_thread(false, 0);
        for spin in [0, 20_000] {
            for _ in 0..50 {
                let d = now_ns() + 300_000;
                sleep_until(d, spin);
                assert!(now_ns() >= d);
            }
        }
    }
}
