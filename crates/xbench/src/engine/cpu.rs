//! CPU time of the calling thread, so each test is charged only for its own data threads.

use crate::report::CpuUsage;

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
}
