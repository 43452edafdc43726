//! The open-file limit a request/response client needs: one socket per flow, so thousands of
//! `--flows` meet `RLIMIT_NOFILE` (often 1,024 soft) long before any other limit.
//!
//! At client start the soft limit is raised to the hard one, which any process may do; a test
//! that needs more than the hard limit is refused before it starts, with the numbers. The
//! server only reads the limit ([`open_files`]): its `--max-flows` default follows from it.

use crate::exit::UsageError;

/// Files a client holds beside its flows' sockets: stdio, the control connection, an epoll
/// instance and a waker per worker thread, a JSON or histogram file, tokio's own.
const RESERVE: u64 = 64;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and checks that `flows` sockets fit
/// (twice as many with `local`, whose in-process server holds the other end of each).
pub(crate) fn ensure(flows: u64, local: bool) -> Result<(), UsageError> {
    let sockets = if local { flows * 2 } else { flows };
    let needed = sockets + RESERVE;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Ok(()); // unknown: the sockets' own errors will say what ran out
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: a valid rlimit; raising the soft limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    if needed <= lim.rlim_cur {
        return Ok(());
    }
    Err(refusal(flows, local, needed, lim.rlim_cur, lim.rlim_max))
}

/// The soft `RLIMIT_NOFILE` (main() has raised it to the hard one): the descriptors this
/// process may hold. `None` if the kernel does not say.
pub(crate) fn open_files() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for the call to fill.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0).then_some(lim.rlim_cur)
}

/// The refusal, with the numbers and what to change.
fn refusal(flows: u64, local: bool, needed: u64, soft: u64, hard: u64) -> UsageError {
    let per_flow = if local { 2 } else { 1 };
    let fit = soft.saturating_sub(RESERVE) / per_flow;
    let limit = if soft < hard {
        format!("{soft} (RLIMIT_NOFILE soft limit; raising it to the hard limit {hard} failed)")
    } else {
        format!("{hard} (RLIMIT_NOFILE hard limit)")
    };
    let sockets = if local {
        "two sockets per flow with --local (the in-process server holds the other end)"
    } else {
        "a socket per flow"
    };
    UsageError(format!(
        "--flows {flows} needs about {needed} open files ({sockets}, plus {RESERVE} for the \
         rest), but this process may open at most {limit}; use --flows {fit} or fewer, or \
         raise the hard limit (`ulimit -Hn` as root, LimitNOFILE= in a systemd unit, \
         /etc/security/limits.conf)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_the_numbers_and_what_fits() {
        let e = refusal(4096, false, 4160, 1024, 1024).0;
        assert!(
            e.contains("--flows 4096 needs about 4160 open files"),
            "{e}"
        );
        assert!(e.contains("at most 1024 (RLIMIT_NOFILE hard limit)"), "{e}");
        assert!(e.contains("use --flows 960 or fewer"), "{e}");
        let e = refusal(4096, true, 8256, 5000, 5000).0;
        assert!(e.contains("two sockets per flow"), "{e}");
        assert!(e.contains("use --flows 2468 or fewer"), "{e}");
    }

    #[test]
    fn a_few_flows_fit() {
        assert!(ensure(1, true).is_ok());
    }
}
