//! The server's shared resources as one budget each, across every test (xbench's and iperf3's
//! alike): descriptors, threads, handshake slots and places among the running tests, with a
//! per-address share of each, so one client address can never take what the others need.
//!
//! A test reserves everything it will open (its control connection, its data sockets, its
//! threads and their descriptors) at admission, before it opens anything, and a test that
//! does not fit is refused with the limit, by how much, and what would fit instead. The
//! descriptors are one pool: the open-file limit less [`Limits::OPEN_FILES_RESERVE`] for the
//! server itself. Connections in their handshake draw from it one each, and tests may never
//! take the last [`HANDSHAKE_RESERVE`] of it (fewer on a small pool), so a new client's
//! control connection always finds a descriptor: it gets its test or a refusal that says why,
//! never silence.
//!
//! Not the per-test limits (`--max-streams`, `--max-flows`: [`admission`](super::admission)),
//! and not what a connection does with its slot ([`conn`](super::conn)).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use super::config::Limits;

/// Descriptors tests may never take from the pool, kept for new connections' handshakes (at
/// most a quarter of the pool, and no more than `--max-handshakes`): twice what a client
/// opens at once (its `--max-connecting`, 512), so one client's data connections and another's
/// control connection both find one while tests hold the rest.
pub(crate) const HANDSHAKE_RESERVE: u64 = 1024;

/// Connections a `--crr` test's cookie may queue before its workers take them straight from
/// the accept path; a client opens none before `Ready`, so this is room for a few early ones.
pub(crate) const CRR_EARLY: u64 = 64;

/// How big each budget is, and each address's share of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sizes {
    /// The open-file limit the budget was made from.
    pub(crate) open_files: u64,
    /// Descriptors for tests and handshakes together.
    pub(crate) pool: u64,
    /// The part of the pool tests may hold: the pool less what is kept for handshakes.
    pub(crate) for_tests: u64,
    /// Of `for_tests`, what one client address's tests may hold.
    pub(crate) fds_share: u64,
    pub(crate) threads: u64,
    pub(crate) threads_share: u64,
    pub(crate) handshakes: u64,
    pub(crate) handshakes_share: u64,
    /// The share, percent.
    pub(crate) share: u8,
}

impl Sizes {
    /// The budgets of a server with `limits` and `open_files` descriptors.
    pub(crate) fn new(limits: &Limits, open_files: u64) -> Self {
        // Bounded, so that shares of an unlimited one (RLIM_INFINITY) cannot overflow.
        let open_files = open_files.min(1 << 40);
        let pool = open_files.saturating_sub(Limits::OPEN_FILES_RESERVE);
        let kept = (limits.max_handshakes as u64)
            .min(HANDSHAKE_RESERVE)
            .min(pool / 4);
        let for_tests = pool - kept;
        let share = limits.client_share.clamp(1, 100);
        // At least one of each, so that a share of a tiny budget still admits something.
        let of = |n: u64| (n * u64::from(share) / 100).max(1).min(n);
        Sizes {
            open_files,
            pool,
            for_tests,
            fds_share: of(for_tests),
            threads: limits.max_threads as u64,
            threads_share: of(limits.max_threads as u64),
            handshakes: limits.max_handshakes as u64,
            handshakes_share: of(limits.max_handshakes as u64),
            share,
        }
    }

    /// The most flows a request/response test may have and still fit one address's share of
    /// descriptors and threads on an idle server (at least 1).
    pub(crate) fn flows_in_a_share(&self) -> u64 {
        let need = |n| Need::flows(n).fits(self.fds_share, self.threads_share);
        largest(u64::from(crate::config::MAX_FLOWS), need).max(1)
    }
}

/// What a test takes from the budget: descriptors and threads, as a function of the number
/// the client chose (`-P` or `--flows`), so a refusal can say what would fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Need {
    shape: Shape,
    /// Streams (`-P`) or flows (`--flows`).
    units: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Throughput streams, xbench's or iperf3's: a socket and a thread per data connection,
    /// `per` of them for each `-P` (two with `--bidir`), and `extra` descriptors (the
    /// payload's, for sendfile).
    Streams { per: u64, extra: u64 },
    /// Request/response flows, TCP or UDP: a socket each, and worker threads for all.
    Flows,
    /// `--crr` flows: a connection each, a second while the last one closes, and the queue
    /// before the workers take them ([`CRR_EARLY`]).
    ConnectPerTransaction,
}

/// Descriptors of a request/response worker thread: its epoll instance, its waker, and the
/// counter it reads (`/proc/thread-self/net/snmp`).
const WORKER_FDS: u64 = 3;

impl Need {
    /// A throughput test with `p` streams each way it runs (`-P`), `per` data connections for
    /// each (one per direction), and `extra` descriptors of its own.
    pub(crate) fn streams(p: u64, per: u64, extra: u64) -> Self {
        Need {
            shape: Shape::Streams { per, extra },
            units: p,
        }
    }

    /// A request/response test with persistent flows (TCP or UDP).
    pub(crate) fn flows(n: u64) -> Self {
        Need {
            shape: Shape::Flows,
            units: n,
        }
    }

    /// A `--crr` test.
    pub(crate) fn connect_per_transaction(n: u64) -> Self {
        Need {
            shape: Shape::ConnectPerTransaction,
            units: n,
        }
    }

    fn with_units(self, units: u64) -> Self {
        Need { units, ..self }
    }

    fn workers(&self) -> u64 {
        // At most one a core: a small number whatever the flows.
        crate::engine::rr::worker_count(usize::try_from(self.units).unwrap_or(usize::MAX)) as u64
    }

    /// Descriptors, the control connection's included.
    pub(crate) fn fds(&self) -> u64 {
        let n = self.units;
        1 + match self.shape {
            Shape::Streams { per, extra } => n.saturating_mul(per).saturating_add(extra),
            Shape::Flows => n.saturating_add(WORKER_FDS * self.workers()),
            // The workers take at most two connections a flow, and 16 more (Handoff::max_live).
            Shape::ConnectPerTransaction => n
                .saturating_mul(2)
                .saturating_add(16 + CRR_EARLY + WORKER_FDS * self.workers()),
        }
    }

    /// Threads.
    pub(crate) fn threads(&self) -> u64 {
        match self.shape {
            Shape::Streams { per, .. } => self.units.saturating_mul(per),
            Shape::Flows | Shape::ConnectPerTransaction => self.workers(),
        }
    }

    fn fits(&self, fds: u64, threads: u64) -> bool {
        self.fds() <= fds && self.threads() <= threads
    }

    /// The flag the client chose the size with.
    fn flag(&self) -> &'static str {
        match self.shape {
            Shape::Streams { .. } => "-P",
            Shape::Flows | Shape::ConnectPerTransaction => "--flows",
        }
    }

    /// Where the descriptors go, for a refusal.
    fn fds_detail(&self) -> String {
        let n = self.units;
        match self.shape {
            Shape::Streams { per, extra } => {
                let payload = if extra > 0 { ", the payload's" } else { "" };
                format!("its control connection, {} data sockets{payload}", n * per)
            }
            Shape::Flows => format!(
                "its control connection, {n} flows' sockets, {} for its {} workers",
                WORKER_FDS * self.workers(),
                self.workers()
            ),
            Shape::ConnectPerTransaction => format!(
                "its control connection, up to 2 connections a flow for {n} flows and {} \
                 more, {} for its {} workers",
                16 + CRR_EARLY,
                WORKER_FDS * self.workers(),
                self.workers()
            ),
        }
    }

    fn threads_detail(&self) -> &'static str {
        match self.shape {
            Shape::Streams { .. } => "one per data connection",
            Shape::Flows | Shape::ConnectPerTransaction => "its request/response workers",
        }
    }
}

/// Why a new connection gets no handshake slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Busy {
    /// Every slot of `--max-handshakes` is taken.
    Full { max: u64 },
    /// The connection's address holds its share of them.
    Share {
        ip: IpAddr,
        share: u64,
        max: u64,
        percent: u8,
    },
    /// Tests and handshakes hold every descriptor of the pool.
    Descriptors { pool: u64 },
}

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Busy::Full { max } => write!(
                f,
                "{max} connections are already in their handshake (--max-handshakes); try \
                 again in a moment, or raise --max-handshakes on the server"
            ),
            Busy::Share {
                ip,
                share,
                max,
                percent,
            } => write!(
                f,
                "{ip} already has {share} connections in their handshake, its share of the \
                 server's {max} (--max-handshakes, --client-share {percent}%); close some, or \
                 try again in a moment"
            ),
            Busy::Descriptors { pool } => write!(
                f,
                "running tests and connections in their handshake hold all {pool} of its \
                 descriptors (its open-file limit less its own); try again when a test ends"
            ),
        }
    }
}

/// The budgets, and what each address holds of them.
#[derive(Debug)]
pub(crate) struct Budget {
    sizes: Sizes,
    max_tests: usize,
    max_tests_per_client: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    all: Held,
    clients: HashMap<IpAddr, Held>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Held {
    tests: usize,
    fds: u64,
    threads: u64,
    handshakes: u64,
}

impl Held {
    fn is_empty(&self) -> bool {
        *self == Held::default()
    }
}

impl Budget {
    /// The budgets of a server with `limits`: its open-file limit is
    /// [`Limits::open_files`], or the process's own (`RLIMIT_NOFILE`) when that is `None`.
    pub(crate) fn new(limits: &Limits) -> Self {
        let open_files = limits.open_files.unwrap_or_else(process_open_files);
        Budget {
            sizes: Sizes::new(limits, open_files),
            max_tests: limits.max_tests,
            max_tests_per_client: limits.max_tests_per_client,
            state: Mutex::new(State::default()),
        }
    }

    pub(crate) fn sizes(&self) -> &Sizes {
        &self.sizes
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A handshake slot for a new connection from `peer`, if the limit, the address's share
    /// and the descriptors allow.
    pub(crate) fn handshake(self: &Arc<Self>, peer: IpAddr) -> Result<Handshake, Busy> {
        let ip = client_key(peer);
        let s = &self.sizes;
        let mut st = self.state();
        if st.all.handshakes >= s.handshakes {
            return Err(Busy::Full { max: s.handshakes });
        }
        let mine = st.clients.get(&ip).map_or(0, |h| h.handshakes);
        if mine >= s.handshakes_share {
            return Err(Busy::Share {
                ip,
                share: s.handshakes_share,
                max: s.handshakes,
                percent: s.share,
            });
        }
        if st.all.fds + st.all.handshakes >= s.pool {
            return Err(Busy::Descriptors { pool: s.pool });
        }
        st.all.handshakes += 1;
        st.clients.entry(ip).or_default().handshakes += 1;
        Ok(Handshake {
            budget: Arc::clone(self),
            ip,
        })
    }

    /// Reserves what a test from `client` needs, if it fits every budget and the client's
    /// share of each; the refusal names the limit, by how much, and what would fit.
    pub(crate) fn reserve(
        self: &Arc<Self>,
        client: IpAddr,
        need: Need,
    ) -> Result<Reservation, String> {
        let ip = client_key(client);
        let s = &self.sizes;
        let mut st = self.state();
        let mine = st.clients.get(&ip).copied().unwrap_or_default();
        if mine.tests >= self.max_tests_per_client {
            return Err(format!(
                "{ip} already runs {} tests on this server, its limit \
                 (--max-tests-per-client); try again when one ends",
                mine.tests
            ));
        }
        if st.all.tests >= self.max_tests {
            return Err(format!(
                "the server is running its maximum of {} tests at once (--max-tests); try \
                 again shortly",
                self.max_tests
            ));
        }
        // What is left for this test: of the client's share, and of the server's.
        let room = Room {
            fds_here: s.fds_share.saturating_sub(mine.fds),
            threads_here: s.threads_share.saturating_sub(mine.threads),
            fds_free: s
                .for_tests
                .saturating_sub(st.all.fds)
                .min(s.pool.saturating_sub(st.all.fds + st.all.handshakes)),
            threads_free: s.threads.saturating_sub(st.all.threads),
        };
        // A share of everything (--client-share 100%) is the total's to explain.
        let fds_over_share = need.fds() > room.fds_here && s.fds_share < s.for_tests;
        let threads_over_share = need.threads() > room.threads_here && s.threads_share < s.threads;
        if fds_over_share || threads_over_share {
            return Err(self.over_share(ip, need, mine, room, fds_over_share));
        }
        if need.fds() > room.fds_free || need.threads() > room.threads_free {
            return Err(self.over_all(need, &st.all, room));
        }
        let held = Held {
            tests: 1,
            fds: need.fds(),
            threads: need.threads(),
            handshakes: 0,
        };
        st.all.add(held);
        st.clients.entry(ip).or_default().add(held);
        Ok(Reservation {
            budget: Arc::clone(self),
            ip,
            held,
        })
    }

    /// A test over its client's share.
    fn over_share(&self, ip: IpAddr, need: Need, mine: Held, room: Room, fds: bool) -> String {
        let s = &self.sizes;
        let (what, asked, left, limit, held) = if fds {
            (
                format!("{} descriptors ({})", need.fds(), need.fds_detail()),
                need.fds(),
                room.fds_here,
                format!(
                    "one client address may hold {} of the {} descriptors this server's tests \
                     may use (--client-share {}% of what its open-file limit, {}, leaves them)",
                    s.fds_share, s.for_tests, s.share, s.open_files
                ),
                mine.fds,
            )
        } else {
            (
                format!("{} threads ({})", need.threads(), need.threads_detail()),
                need.threads(),
                room.threads_here,
                format!(
                    "one client address may run {} of the server's {} threads (--client-share \
                     {}% of --max-threads)",
                    s.threads_share, s.threads, s.share
                ),
                mine.threads,
            )
        };
        let others = match mine.tests {
            0 => String::new(),
            1 => format!(", and its other test holds {held}"),
            n => format!(", and its {n} other tests hold {held}"),
        };
        let wait = match mine.tests {
            0 => "ask the server's operator for a larger share",
            _ => "wait for its other tests to end",
        };
        format!(
            "the test needs {what}, {} more than {ip} may still hold: {limit}{others}; {}",
            asked - left,
            ask(need, room, wait)
        )
    }

    /// A test over what the server has free.
    fn over_all(&self, need: Need, all: &Held, room: Room) -> String {
        let s = &self.sizes;
        let (what, asked, left, held) = if need.fds() > room.fds_free {
            let handshakes = match all.handshakes {
                0 => String::new(),
                n => format!(", connections in their handshake {n}"),
            };
            (
                format!("{} descriptors ({})", need.fds(), need.fds_detail()),
                need.fds(),
                room.fds_free,
                format!(
                    "its tests may hold {} (its open-file limit, {}, less {} for itself and {} \
                     kept for new connections); other tests hold {}{handshakes}",
                    s.for_tests,
                    s.open_files,
                    Limits::OPEN_FILES_RESERVE,
                    s.pool - s.for_tests,
                    all.fds
                ),
            )
        } else {
            (
                format!("{} threads ({})", need.threads(), need.threads_detail()),
                need.threads(),
                room.threads_free,
                format!(
                    "its tests may run {} (--max-threads); other tests run {}",
                    s.threads, all.threads
                ),
            )
        };
        format!(
            "the test needs {what}, {} more than the server has free: {held}; {}",
            asked - left,
            ask(need, room, "try again when other tests end")
        )
    }

    fn release(&self, ip: IpAddr, held: Held) {
        let mut st = self.state();
        st.all.sub(held);
        if let Some(h) = st.clients.get_mut(&ip) {
            h.sub(held);
            if h.is_empty() {
                st.clients.remove(&ip);
            }
        }
    }
}

impl Held {
    fn add(&mut self, o: Held) {
        self.tests += o.tests;
        self.fds += o.fds;
        self.threads += o.threads;
        self.handshakes += o.handshakes;
    }

    fn sub(&mut self, o: Held) {
        self.tests = self.tests.saturating_sub(o.tests);
        self.fds = self.fds.saturating_sub(o.fds);
        self.threads = self.threads.saturating_sub(o.threads);
        self.handshakes = self.handshakes.saturating_sub(o.handshakes);
    }
}

/// What is left for a test, of its client's share and of the server's budgets.
#[derive(Debug, Clone, Copy)]
struct Room {
    fds_here: u64,
    threads_here: u64,
    fds_free: u64,
    threads_free: u64,
}

/// What to ask for instead: as many streams or flows as fit now, if any, or `otherwise`.
fn ask(need: Need, room: Room, otherwise: &str) -> String {
    let fds = room.fds_here.min(room.fds_free);
    let threads = room.threads_here.min(room.threads_free);
    let fit = largest(need.units.saturating_sub(1), |u| {
        need.with_units(u).fits(fds, threads)
    });
    match fit {
        0 => otherwise.to_owned(),
        n => format!("ask for {} {n} or fewer, or {otherwise}", need.flag()),
    }
}

/// The largest `u` in `0..=max` for which `fits(u)` holds (it holds for every smaller one
/// too); 0 when none does.
fn largest(max: u64, fits: impl Fn(u64) -> bool) -> u64 {
    if max == 0 || !fits(1) {
        return 0;
    }
    let (mut lo, mut hi) = (1, max);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// A connection's place among the handshakes, given back on drop.
#[derive(Debug)]
pub(crate) struct Handshake {
    budget: Arc<Budget>,
    ip: IpAddr,
}

impl Drop for Handshake {
    fn drop(&mut self) {
        let held = Held {
            handshakes: 1,
            ..Held::default()
        };
        self.budget.release(self.ip, held);
    }
}

/// A running test's place and everything it reserved, given back on drop.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<Budget>,
    ip: IpAddr,
    held: Held,
}

impl Reservation {
    /// Gives back the test's place and all it holds but its control connection's descriptor,
    /// which the session still holds while it says goodbye: what it returns.
    pub(crate) fn keep_control(mut self) -> Reservation {
        let control = Held {
            fds: self.held.fds.min(1),
            ..Held::default()
        };
        let rest = Held {
            tests: self.held.tests,
            fds: self.held.fds - control.fds,
            threads: self.held.threads,
            handshakes: 0,
        };
        self.held = control;
        self.budget.release(self.ip, rest);
        self
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.release(self.ip, self.held);
    }
}

/// Where a client's share is counted: its address, IPv4-mapped ones as IPv4. Not its IPv6
/// /64: in a cloud subnet every instance has an address from the same /64, and a fleet of
/// test clients there must not share one client's allowance.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// This process's soft `RLIMIT_NOFILE`; 1,024 (the usual default) if the kernel will not say.
fn process_open_files() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for the call to fill.
    match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } {
        0 => lim.rlim_cur,
        _ => 1024,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// A budget of `open_files` descriptors (1,000 for tests: 1,280 less 256 for the server
    /// and a quarter of the rest, 256, kept for handshakes), with `limits`.
    fn budget(open_files: u64, limits: Limits) -> Arc<Budget> {
        Arc::new(Budget::new(&Limits {
            open_files: Some(open_files),
            ..limits
        }))
    }

    #[test]
    fn clients_are_counted_by_address() {
        // Two instances in one cloud subnet (one /64) are two clients.
        let a = ip("2001:db8:1:2::1");
        let b = ip("2001:db8:1:2:ffff::9");
        assert_ne!(client_key(a), client_key(b));
        // IPv4, also when it arrives mapped on a dual-stack socket, is counted as IPv4.
        assert_eq!(client_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
    }

    #[test]
    fn a_test_needs_a_socket_a_connection_and_threads_for_what_it_opens() {
        // -P 4 --bidir: 8 data connections and threads, the control connection.
        assert_eq!(
            (
                Need::streams(4, 2, 0).fds(),
                Need::streams(4, 2, 0).threads()
            ),
            (9, 8)
        );
        // A sendfile payload is a descriptor too.
        assert_eq!(Need::streams(1, 1, 1).fds(), 3);
        let w = crate::engine::rr::worker_count(1000) as u64;
        assert_eq!(Need::flows(1000).fds(), 1 + 1000 + 3 * w);
        assert_eq!(Need::flows(1000).threads(), w);
        assert_eq!(
            Need::connect_per_transaction(1000).fds(),
            1 + 2000 + 16 + CRR_EARLY + 3 * w
        );
    }

    #[test]
    fn one_address_holds_at_most_its_share_and_another_still_gets_in() {
        let b = budget(1280, Limits::default());
        assert_eq!((b.sizes().for_tests, b.sizes().fds_share), (768, 384));
        let a = ip("192.0.2.1");
        let first = b.reserve(a, Need::streams(100, 1, 0)).unwrap();
        let e = b.reserve(a, Need::streams(300, 1, 0)).unwrap_err();
        assert!(
            e.starts_with(
                "the test needs 301 descriptors (its control connection, 300 data sockets), \
                 18 more than 192.0.2.1 may still hold: one client address may hold 384 of \
                 the 768 descriptors this server's tests may use (--client-share 50%"
            ),
            "{e}"
        );
        assert!(
            e.ends_with(
                "its other test holds 101; ask for -P 282 or fewer, or wait for its other \
                 tests to end"
            ),
            "{e}"
        );
        // Another address has its own share.
        let other = b
            .reserve(ip("192.0.2.2"), Need::streams(300, 1, 0))
            .unwrap();
        drop((first, other));
        assert!(b.state().clients.is_empty());
        assert_eq!(b.state().all, Held::default());
    }

    #[test]
    fn a_test_beyond_what_is_free_is_refused_with_what_fits() {
        let b = budget(
            1280,
            Limits {
                client_share: 100,
                ..Limits::default()
            },
        );
        let _big = b
            .reserve(ip("192.0.2.1"), Need::streams(700, 1, 0))
            .unwrap();
        let e = b
            .reserve(ip("192.0.2.2"), Need::streams(100, 1, 0))
            .unwrap_err();
        assert_eq!(
            e,
            "the test needs 101 descriptors (its control connection, 100 data sockets), 34 \
             more than the server has free: its tests may hold 768 (its open-file limit, \
             1280, less 256 for itself and 256 kept for new connections); other tests hold \
             701; ask for -P 66 or fewer, or try again when other tests end"
        );
        // Nothing was taken by the refusal.
        assert_eq!(b.state().all.fds, 701);
    }

    #[test]
    fn threads_are_a_budget_too() {
        let b = budget(
            100_000,
            Limits {
                max_threads: 100,
                ..Limits::default()
            },
        );
        let e = b
            .reserve(ip("192.0.2.1"), Need::streams(64, 1, 0))
            .unwrap_err();
        assert!(
            e.starts_with(
                "the test needs 64 threads (one per data connection), 14 more than 192.0.2.1 \
                 may still hold: one client address may run 50 of the server's 100 threads"
            ),
            "{e}"
        );
        assert!(
            e.ends_with("ask for -P 50 or fewer, or ask the server's operator for a larger share"),
            "{e}"
        );
    }

    #[test]
    fn tests_leave_descriptors_for_new_connections() {
        let b = budget(
            1280,
            Limits {
                client_share: 100,
                max_handshakes: 10_000,
                ..Limits::default()
            },
        );
        let _all = b
            .reserve(ip("192.0.2.1"), Need::streams(767, 1, 0))
            .unwrap();
        // The 256 kept for new connections are theirs, whoever holds the tests.
        let held: Vec<_> = (0..256)
            .map(|i| {
                b.handshake(ip(&format!("10.0.{}.{}", i / 200, i % 200 + 1)))
                    .unwrap()
            })
            .collect();
        assert_eq!(
            b.handshake(ip("10.9.9.9")).unwrap_err(),
            Busy::Descriptors { pool: 1024 }
        );
        drop(held);
        assert!(b.handshake(ip("10.9.9.9")).is_ok());
    }

    #[test]
    fn one_address_gets_its_share_of_handshake_slots() {
        let b = budget(
            100_000,
            Limits {
                max_handshakes: 200,
                ..Limits::default()
            },
        );
        let mine: Vec<_> = (0..100)
            .map(|_| b.handshake(ip("192.0.2.1")).unwrap())
            .collect();
        let busy = b.handshake(ip("192.0.2.1")).unwrap_err();
        assert_eq!(
            busy.to_string(),
            "192.0.2.1 already has 100 connections in their handshake, its share of the \
             server's 200 (--max-handshakes, --client-share 50%); close some, or try again in \
             a moment"
        );
        let theirs: Vec<_> = (0..100)
            .map(|_| b.handshake(ip("192.0.2.2")).unwrap())
            .collect();
        assert_eq!(
            b.handshake(ip("192.0.2.3")).unwrap_err(),
            Busy::Full { max: 200 }
        );
        drop((mine, theirs));
        assert!(b.state().clients.is_empty());
    }

    #[test]
    fn a_finished_test_keeps_only_its_control_connection() {
        let b = budget(
            1280,
            Limits {
                max_tests_per_client: 1,
                ..Limits::default()
            },
        );
        let r = b.reserve(ip("192.0.2.1"), Need::streams(8, 1, 0)).unwrap();
        assert!(b.reserve(ip("192.0.2.1"), Need::streams(1, 1, 0)).is_err());
        let control = r.keep_control();
        // Its place is free for the client's next test (a sweep) at once.
        let next = b.reserve(ip("192.0.2.1"), Need::streams(1, 1, 0)).unwrap();
        assert_eq!(b.state().all.fds, 1 + 2);
        drop((control, next));
        assert_eq!(b.state().all, Held::default());
    }

    #[test]
    fn the_largest_that_fits() {
        assert_eq!(largest(100, |u| u <= 37), 37);
        assert_eq!(largest(100, |_| true), 100);
        assert_eq!(largest(100, |_| false), 0);
        assert_eq!(largest(0, |_| true), 0);
    }

    #[test]
    fn an_unlimited_open_file_limit_does_not_overflow() {
        let s = Sizes::new(&Limits::default(), u64::MAX);
        assert!(s.fds_share > 0 && s.fds_share < s.for_tests);
        assert_eq!(s.flows_in_a_share(), u64::from(crate::config::MAX_FLOWS));
    }
}
