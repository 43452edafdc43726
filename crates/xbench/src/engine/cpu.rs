//! CPU time of the calling thread, so each test is charged only for its own data threads; and
//! how a data thread spent its wall time (on a CPU, waiting for one, asleep), which tells a
//! thread that could not keep up from one that waited on its socket.

use std::time::Duration;

use crate::report::CpuUsage;

/// A thread's scheduler clock (`/proc/self/task/TID/schedstat`, Linux with
/// `CONFIG_SCHED_INFO`): time on a CPU and time runnable but waiting for one, since it started.
/// The rest of its life it slept: a sender blocked in `send()` on a full socket buffer, a
/// receiver blocked in `recv()` on an empty queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SchedTime {
    /// Time running on a CPU.
    pub(crate) on_cpu: Duration,
    /// Time runnable on a run queue while other work held the CPUs.
    pub(crate) waiting_for_cpu: Duration,
}

impl SchedTime {
    /// What `later` adds to `self` (zero where a counter went backwards).
    pub(crate) fn until(self, later: SchedTime) -> SchedTime {
        SchedTime {
            on_cpu: later.on_cpu.saturating_sub(self.on_cpu),
            waiting_for_cpu: later.waiting_for_cpu.saturating_sub(self.waiting_for_cpu),
        }
    }
}

/// The scheduler clock of thread `tid` of this process; `None` where the kernel keeps none
/// (no `CONFIG_SCHED_INFO`) or the thread has exited. One small procfs read: cheap enough for
/// the start and end of a measured window, never for a hot loop.
pub(crate) fn sched_time(tid: libc::pid_t) -> Option<SchedTime> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    parse_schedstat(&text)
}

/// The calling thread's scheduler clock (see [`sched_time`]).
pub(crate) fn own_sched_time() -> Option<SchedTime> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    parse_schedstat(&text)
}

/// The calling thread's kernel id.
pub(crate) fn own_tid() -> libc::pid_t {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// `schedstat` holds three numbers: nanoseconds on a CPU, nanoseconds waiting on a run queue,
/// and time slices run.
fn parse_schedstat(text: &str) -> Option<SchedTime> {
    let mut it = text.split_ascii_whitespace().map(str::parse::<u64>);
    let on_cpu = it.next()?.ok()?;
    let waiting = it.next()?.ok()?;
    Some(SchedTime {
        on_cpu: Duration::from_nanos(on_cpu),
        waiting_for_cpu: Duration::from_nanos(waiting),
    })
}

/// User and system time consumed so far by the calling thread (`RUSAGE_THREAD`).
pub(crate) fn thread_cpu() -> CpuUsage {
    // SAFETY: `rusage` is plain data; getrusage fills it completely on success.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the duration of the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        return CpuUsage::default();
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    CpuUsage {
        user_s: tv(ru.ru_utime),
        system_s: tv(ru.ru_stime),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_accumulates_cpu() {
        // Spin until this thread's own clock shows 20 ms; on a loaded machine that takes longer
        // in wall time, which is the point of measuring per thread.
        let before = thread_cpu();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while thread_cpu().total_s() - before.total_s() < 0.02 {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            assert!(
                t.elapsed().as_secs() < 30,
                "thread CPU time does not advance"
            );
        }
        std::hint::black_box(x);
    }

    #[test]
    fn schedstat_parses_and_is_missing_where_malformed() {
        let t = parse_schedstat("313941247 1734011022 1845\n").unwrap();
        assert_eq!(t.on_cpu, Duration::from_nanos(313_941_247));
        assert_eq!(t.waiting_for_cpu, Duration::from_nanos(1_734_011_022));
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("12 x 3"), None);
    }

    #[test]
    fn a_spinning_thread_is_never_asleep() {
        // Spin 50 ms of wall time: on a CPU or waiting for one, never asleep, however loaded
        // the machine is (the point of counting the run-queue wait).
        let Some(before) = own_sched_time() else {
            eprintln!("no schedstat on this kernel: nothing to check");
            return;
        };
        assert!(sched_time(own_tid()).is_some_and(|t| t.on_cpu >= before.on_cpu));
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let wall = t.elapsed();
        let d = before.until(own_sched_time().unwrap());
        let busy = d.on_cpu + d.waiting_for_cpu;
        // Neither clock counts the time a hypervisor takes the virtual CPU away (steal time):
        // on CI's VM a 50 ms spin read 38 ms on a CPU and 0.2 ms waiting. A thread whose
        // waiting was not counted, or whose clock is another thread's, reads near nothing
        // under load; half the wall time less the clocks' 10 ms tick tells the two apart.
        assert!(
            busy * 2 + Duration::from_millis(10) >= wall,
            "spun {wall:?}, on a CPU or runnable only {busy:?} ({d:?})"
        );
    }
}
