#![cfg(not(feature = "loom"))]
//! Regression tests for the defects an adversarial review found in
//! eviction, the cap and a few edge cases. Each test names the scenario it
//! reproduces; each failed on the code before its fix.
//!
//! The deterministic ones stall one chosen thread inside its N-th clock
//! reading ([`StallClock`]), so that another thread can act at exactly the
//! point where the stalled one is vulnerable. The stress ones race 8
//! threads over thousands of rounds and count exactly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::{self, ThreadId};
use std::time::Duration;

use tollgate::{
    Clock, FixedWindow, ManualClock, Overflow, SlidingWindowCounter, SlidingWindowLog, Stats,
    TokenBucket,
};

/// A hand-moved clock that can stall one thread inside one of its readings:
/// the reading is taken, then the thread waits until released, then the
/// reading is returned. So the stalled thread holds a reading that the rest
/// of the world has moved past.
#[derive(Clone)]
struct StallClock(Arc<StallInner>);

struct StallInner {
    nanos: AtomicU64,
    /// The thread to stall, and how many of its readings are left until
    /// the one that stalls.
    trap: Mutex<Option<(ThreadId, u32)>>,
    stalled: Barrier,
    released: Barrier,
}

impl StallClock {
    fn new() -> Self {
        Self(Arc::new(StallInner {
            nanos: AtomicU64::new(0),
            trap: Mutex::new(None),
            stalled: Barrier::new(2),
            released: Barrier::new(2),
        }))
    }

    fn set(&self, nanos: u64) {
        self.0.nanos.store(nanos, Ordering::SeqCst);
    }

    /// Stalls the calling thread inside its `nth` reading from now on.
    fn stall_my_read(&self, nth: u32) {
        *self.0.trap.lock().unwrap() = Some((thread::current().id(), nth));
    }

    /// Returns once the trapped thread is stalled.
    fn wait_until_stalled(&self) {
        self.0.stalled.wait();
    }

    /// Lets the stalled thread go on.
    fn release(&self) {
        self.0.released.wait();
    }
}

impl Clock for StallClock {
    fn now_nanos(&self) -> u64 {
        let reading = self.0.nanos.load(Ordering::SeqCst);
        let stall = {
            let mut trap = self.0.trap.lock().unwrap();
            match *trap {
                Some((id, n)) if id == thread::current().id() => {
                    *trap = (n > 1).then_some((id, n - 1));
                    n == 1
                }
                _ => false,
            }
        };
        if stall {
            self.0.stalled.wait();
            self.0.released.wait();
        }
        reading
    }
}

/// Big runs in release, small ones in debug, so `cargo test` stays quick.
fn rounds(debug: u64, release: u64) -> u64 {
    if cfg!(debug_assertions) {
        debug
    } else {
        release
    }
}

// ---------------------------------------------------------------------------
// A reading taken before an eviction is never applied to the state that
// replaces the evicted one.
// ---------------------------------------------------------------------------

/// Sliding window log, limit 2 per 1000 ns. Two admissions at 0; thread X
/// reads 500 and stalls before its lookup; at 1000 the client is swept (it
/// is idle) and re-inserted by another check. X's stale reading must not be
/// judged on the new log, or a window `[t, t + 1000)` would hold 3.
#[test]
fn a_reading_from_before_an_eviction_is_not_judged_on_the_new_log() {
    let clock = StallClock::new();
    let limiter = SlidingWindowLog::builder()
        .limit(2)
        .window(Duration::from_nanos(1_000))
        .no_auto_sweep()
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.allow_request("k"));
    assert!(limiter.allow_request("k"));
    clock.set(500);
    thread::scope(|s| {
        let x = s.spawn(|| {
            clock.stall_my_read(1);
            limiter.allow_request("k")
        });
        clock.wait_until_stalled();
        clock.set(1_000);
        assert_eq!(limiter.sweep(), 1, "idle at 1000: forgotten");
        assert!(limiter.allow_request("k"), "fresh at 1000");
        clock.release();
        let x = x.join().unwrap();
        clock.set(1_500);
        let last = limiter.allow_request("k");
        let admitted = 3 + u64::from(x) + u64::from(last);
        assert!(
            admitted <= 4,
            "{admitted} admissions in 1500 ns at 2 per 1000 ns (x: {x}, last: {last})"
        );
    });
}

/// The single-threaded form: a user clock that steps back past an
/// eviction. Readings 0, 0, then 1000 (a sweep, then a check), then 500,
/// then 1500. For every algorithm, the sweep must not let more through than
/// the same readings do with no sweep at all (and for the log, that is 4).
#[test]
fn a_clock_stepping_back_past_an_eviction_admits_no_more_than_without_it() {
    fn run<L>(
        check: impl Fn(&L) -> bool,
        sweep: impl Fn(&L),
        limiter: &L,
        clock: &ManualClock,
    ) -> u64 {
        let mut admitted = 0;
        for (at, sweep_first) in [
            (0, false),
            (0, false),
            (1_000, true),
            (500, false),
            (1_500, false),
        ] {
            clock.set(Duration::from_nanos(at));
            if sweep_first {
                sweep(limiter);
            }
            admitted += u64::from(check(limiter));
        }
        admitted
    }
    macro_rules! both {
        ($make:expr) => {{
            let with = ManualClock::new();
            let without = ManualClock::new();
            let a = $make.no_auto_sweep().clock(with.clone()).build().unwrap();
            let b = $make
                .no_auto_sweep()
                .clock(without.clone())
                .build()
                .unwrap();
            let swept = run(
                |l: &_| l.allow_request("k"),
                |l: &_| {
                    let _ = l.sweep();
                },
                &a,
                &with,
            );
            let kept = run(|l: &_| l.allow_request("k"), |_| {}, &b, &without);
            assert!(
                swept <= kept,
                "{}: {swept} admitted with the sweep, {kept} without",
                stringify!($make)
            );
            swept
        }};
    }
    let window = Duration::from_nanos(1_000);
    assert_eq!(
        both!(SlidingWindowLog::builder().limit(2).window(window)),
        4
    );
    both!(SlidingWindowCounter::builder().limit(2).window(window));
    both!(FixedWindow::builder().limit(2).window(window));
    both!(TokenBucket::builder().rate(2, window));
}

// ---------------------------------------------------------------------------
// The first-insert race at a full cap gives the client one budget.
// ---------------------------------------------------------------------------

/// A client id whose `Hash` and `Clone` read the clock: the test's way to
/// stall a thread inside the insert path, between the lookup that found
/// the client absent and the insert, where the key is cloned to be stored
/// (a request reads the clock itself only once, before its lookup, and
/// hashes its key once, in the lookup).
struct Stalling {
    id: u64,
    clock: StallClock,
}

impl Clone for Stalling {
    fn clone(&self) -> Self {
        let _ = self.clock.now_nanos();
        Self {
            id: self.id,
            clock: self.clock.clone(),
        }
    }
}

impl PartialEq for Stalling {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for Stalling {}

impl std::hash::Hash for Stalling {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let _ = self.clock.now_nanos();
        self.id.hash(state);
    }
}

/// `max_clients(1)`: thread X asks for 5 units of a new client and stalls
/// inside the insert path, after its lookup found the client absent (in
/// its third clock reading: its request's, then its key's `Hash` in the
/// lookup, then the key's `Clone` for the insert); meanwhile Y takes all 10 units, tracking
/// the client in the one room. X must then be denied on Y's state (with the
/// wait for 5 tokens), whatever the policy: not admitted untracked, not
/// given room by evicting the client's own state, not denied "as new".
#[test]
fn racing_first_requests_at_the_cap_share_one_budget() {
    for policy in [
        Overflow::AdmitUntracked,
        Overflow::EvictSampled { sample: 5 },
        Overflow::DenyNew,
    ] {
        let clock = StallClock::new();
        let limiter = TokenBucket::builder()
            .rate(10, Duration::from_secs(1))
            .max_clients(1)
            .overflow(policy)
            .key_type::<Stalling>()
            .clock(clock.clone())
            .build()
            .unwrap();
        let key = Stalling {
            id: 7,
            clock: clock.clone(),
        };
        thread::scope(|s| {
            let x = s.spawn(|| {
                clock.stall_my_read(3);
                limiter.check_n(&key, 5).unwrap()
            });
            clock.wait_until_stalled();
            assert!(
                limiter.check_n(&key, 10).unwrap().is_allowed(),
                "{policy:?}: Y"
            );
            clock.release();
            let x = x.join().unwrap();
            assert!(x.is_denied(), "{policy:?}: X got a second budget: {x:?}");
            assert_eq!(
                x.retry_after(),
                Duration::from_millis(500),
                "{policy:?}: {x:?}"
            );
            let stats = limiter.stats();
            assert_eq!(
                (
                    stats.clients,
                    stats.overflows,
                    stats.admitted_untracked,
                    stats.evicted_live,
                    stats.denied_new
                ),
                (1, 0, 0, 0, 0),
                "{policy:?}: {stats:?}"
            );
        });
    }
}

/// Without any stall: 8 threads race the first request of one new client
/// (cost = the whole capacity) into a limiter with room for one client.
/// In every round exactly one is admitted, and no policy ever applies.
#[test]
fn eight_threads_racing_a_new_client_into_the_last_room_get_one_budget() {
    const THREADS: usize = 8;
    let rounds = rounds(300, 3_000) as usize;
    for policy in [
        Overflow::AdmitUntracked,
        Overflow::EvictSampled { sample: 5 },
        Overflow::DenyNew,
    ] {
        let limiters: Vec<_> = (0..rounds)
            .map(|_| {
                TokenBucket::builder()
                    .rate(10, Duration::from_secs(1))
                    .max_clients(1)
                    .overflow(policy)
                    .key_type::<u64>()
                    .clock(ManualClock::new())
                    .build()
                    .unwrap()
            })
            .collect();
        let admitted: Vec<AtomicU64> = (0..rounds).map(|_| AtomicU64::new(0)).collect();
        let barrier = Barrier::new(THREADS);
        thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for (limiter, admitted) in limiters.iter().zip(&admitted) {
                        barrier.wait();
                        if limiter.check_n(&7, 10).unwrap().is_allowed() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        for (round, (limiter, admitted)) in limiters.iter().zip(&admitted).enumerate() {
            let stats: Stats = limiter.stats();
            assert_eq!(
                (
                    admitted.load(Ordering::Relaxed),
                    stats.clients,
                    stats.overflows,
                    stats.admitted_untracked,
                    stats.evicted_live,
                    stats.denied_new
                ),
                (1, 1, 0, 0, 0, 0),
                "{policy:?}, round {round}: admissions of 10 units at capacity 10, then {stats:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// A sweep gives each removed entry's room back as it goes.
// ---------------------------------------------------------------------------

/// A full cap of N idle clients; a full `sweep()` runs while the same N
/// clients return. Each client has at most one entry, so the cap can never
/// legitimately bind: no returning client may be refused (`DenyNew`) or
/// make room by forgetting a live one (`EvictSampled`).
#[test]
fn a_sweep_racing_returning_clients_never_makes_the_cap_bind() {
    const RETURNERS: u64 = 3;
    let n = rounds(20_000, 200_000);
    for policy in [Overflow::DenyNew, Overflow::EvictSampled { sample: 5 }] {
        let clock = ManualClock::new();
        let limiter = TokenBucket::builder()
            .rate(1, Duration::from_secs(1))
            .max_clients(n)
            .overflow(policy)
            .key_type::<u64>()
            .clock(clock.clone())
            .build()
            .unwrap();
        for id in 0..n {
            assert!(limiter.allow_request(&id));
        }
        clock.advance(Duration::from_secs(1)); // every bucket is full again: idle
        let barrier = Barrier::new(RETURNERS as usize + 1);
        let refused = AtomicU64::new(0);
        thread::scope(|s| {
            s.spawn(|| {
                barrier.wait();
                let _ = limiter.sweep();
            });
            for part in 0..RETURNERS {
                let (barrier, limiter, refused) = (&barrier, &limiter, &refused);
                s.spawn(move || {
                    barrier.wait();
                    for id in (part..n).step_by(RETURNERS as usize) {
                        if !limiter.allow_request(&id) {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let stats = limiter.stats();
        assert_eq!(
            (
                refused.into_inner(),
                stats.overflows,
                stats.denied_new,
                stats.evicted_live
            ),
            (0, 0, 0, 0),
            "{policy:?}: {stats:?}"
        );
        assert!(stats.clients as u64 <= n);
    }
}

// ---------------------------------------------------------------------------
// Edge cases of `retry_after`, `peek` and the builder.
// ---------------------------------------------------------------------------

/// A sliding window counter with a window so long that the next window
/// starts past the last instant a reading reaches: a denial there will
/// never pass, and says so, instead of overflowing (a panic in debug,
/// `retry_after: 0` in release).
#[test]
fn sliding_window_counter_retry_after_at_the_last_window_is_never() {
    const NOW_MAX: u64 = (1 << 63) - 1;
    let year = 365 * 24 * 3_600 * 1_000_000_000u64;
    for (window, limit, at) in [
        (200 * year, 100, 250 * year),
        ((1 << 62) + 1, 3, NOW_MAX),
        ((1 << 62) + 1, 3, (1 << 62) + 5),
    ] {
        let clock = ManualClock::new();
        let limiter = SlidingWindowCounter::builder()
            .limit(limit)
            .window(Duration::from_nanos(window))
            .clock(clock.clone())
            .build()
            .unwrap();
        clock.set(Duration::from_nanos(at));
        for _ in 0..limit {
            assert!(limiter.allow_request("k"));
        }
        let denied = limiter.check("k");
        assert!(denied.is_denied());
        assert_eq!(
            denied.retry_after(),
            Duration::MAX,
            "window {window} ns at {at} ns"
        );
    }
}

/// A fixed window at the last representable instant: the window never
/// ends, so a denial's wait is "never", not the ~145 ms to a window start
/// that no reading reaches.
#[test]
fn fixed_window_at_the_end_of_time_reports_never() {
    const NOW_MAX: u64 = (1 << 63) - 1;
    let clock = ManualClock::new();
    let limiter = FixedWindow::builder()
        .limit(1)
        .window(Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    clock.set(Duration::from_nanos(NOW_MAX));
    assert!(limiter.allow_request("k"));
    let denied = limiter.check("k");
    assert_eq!(
        (denied.is_denied(), denied.retry_after()),
        (true, Duration::MAX)
    );
    // And it is the truth: no later reading lets it through.
    clock.advance(Duration::from_secs(3_600));
    assert!(!limiter.allow_request("k"));
}

/// A peek reports what a check would decide for a new client at a full
/// cap (under `DenyNew`, the same denial), with the quota as it stands: a
/// check that admits leaves one fewer than the peek reports.
#[test]
fn peek_agrees_with_check_for_a_new_client_at_a_full_cap() {
    for policy in [
        Overflow::DenyNew,
        Overflow::AdmitUntracked,
        Overflow::EvictSampled { sample: 5 },
    ] {
        let limiter = FixedWindow::builder()
            .limit(1)
            .window(Duration::from_secs(60))
            .max_clients(1)
            .overflow(policy)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        assert!(limiter.allow_request("alice"));
        let peeked = limiter.peek("bob");
        let checked = limiter.check("bob");
        assert_eq!(peeked.is_allowed(), checked.is_allowed(), "{policy:?}");
        assert_eq!(peeked.retry_after(), checked.retry_after(), "{policy:?}");
        let taken = u64::from(checked.is_allowed());
        assert_eq!(
            peeked.remaining(),
            checked.remaining() + taken,
            "{policy:?}"
        );
        if policy == Overflow::DenyNew {
            assert_eq!(peeked, checked);
        }
    }
}
