//! Eviction (issue 6): sweeping forgets only idle clients and changes no
//! decision; each cap policy does what it says; checks racing sweeps lose
//! and double nothing. The memory flood is in `tests/flood.rs`, a process of
//! its own so that its resident-memory readings see no other test.

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

#[macro_use]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use common::{BucketConfig, Fixed, Log, Model, Sliding, Subject, WindowConfig};
use tollgate::{ManualClock, Overflow, TokenBucket};

/// A small deterministic generator (xorshift64*), so that a failure names
/// its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn subjects() -> (BucketConfig, Sliding, Fixed, Log) {
    let window = WindowConfig {
        limit: 4,
        window: 1_000,
    };
    (
        BucketConfig {
            tokens: 1,
            per: 250,
            capacity: 4,
        },
        Sliding(window),
        Fixed(window),
        Log(window),
    )
}

/// The same random sequence against a limiter that never evicts and one
/// that sweeps after almost every step (and slices on every insert):
/// decision by decision, every figure is identical, and the sweeping one
/// did forget clients along the way.
fn sweeping_changes_no_decision<S: Subject>(subject: &S) {
    let capacity = subject.model().capacity();
    // Gaps around the state's lifetime, so that clients go idle often.
    let horizon = 2_000;
    let mut evicted = 0;
    for seed in 1..=24u64 {
        let clock = ManualClock::new();
        let keeper = subject
            .builder(clock.clone())
            .no_auto_sweep()
            .build()
            .unwrap();
        let sweeper = subject
            .builder(clock.clone())
            .auto_sweep(1, 2)
            .build()
            .unwrap();
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut now = 0u64;
        for step in 0..300 {
            now += match rng.below(4) {
                0 => 0,
                1 => rng.below(50),
                2 => rng.below(horizon / 2),
                _ => rng.below(2 * horizon),
            };
            clock.set(Duration::from_nanos(now));
            let client = rng.below(6);
            let cost = 1 + rng.below(capacity);
            let ctx = || format!("seed {seed} step {step} at {now} ns, {subject:?}");
            match rng.below(4) {
                0 => assert_eq!(
                    sweeper.peek_n(&client, cost),
                    keeper.peek_n(&client, cost),
                    "{}",
                    ctx()
                ),
                1 => assert_eq!(sweeper.check(&client), keeper.check(&client), "{}", ctx()),
                2 => assert_eq!(
                    sweeper.allow_request(&client),
                    keeper.allow_request(&client),
                    "{}",
                    ctx()
                ),
                _ => assert_eq!(
                    sweeper.check_n(&client, cost),
                    keeper.check_n(&client, cost),
                    "{}",
                    ctx()
                ),
            }
            if rng.below(3) > 0 {
                let _ = sweeper.sweep();
            }
            assert!(sweeper.len() <= keeper.len(), "{}", ctx());
        }
        evicted += sweeper.stats().evicted_idle;
        // Far in the future every client is idle: a sweep forgets them all,
        // and still nothing differs.
        now += 10 * horizon;
        clock.set(Duration::from_nanos(now));
        let _ = sweeper.sweep();
        assert!(sweeper.is_empty(), "seed {seed}, {subject:?}");
        for client in 0..6 {
            assert_eq!(sweeper.check(&client), keeper.check(&client));
        }
    }
    assert!(evicted > 100, "{subject:?}: only {evicted} evictions");
}

#[test]
fn sweeping_changes_no_decision_for_any_algorithm() {
    for_each_subject!(sweeping_changes_no_decision);
}

/// A sweep forgets exactly the idle clients, and `len` follows.
#[test]
fn sweep_forgets_only_idle_clients() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .capacity(2)
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    for id in 0..10 {
        assert!(limiter.allow_request(&id));
    }
    // Clients 0..5 spend their second token at 0.5 s: their buckets are
    // full again at 2 s, the others' at 1 s.
    clock.set(Duration::from_millis(500));
    for id in 0..5 {
        assert!(limiter.allow_request(&id));
    }
    clock.set(Duration::from_millis(999));
    assert_eq!(limiter.sweep(), 0);
    clock.set(Duration::from_secs(1));
    assert_eq!(limiter.sweep(), 5);
    assert_eq!(limiter.len(), 5);
    for id in 0..5 {
        assert_eq!(
            limiter.peek_n(&id, 0).unwrap().remaining(),
            1,
            "client {id} kept"
        );
    }
    clock.set(Duration::from_secs(2));
    assert_eq!(limiter.sweep(), 5);
    assert!(limiter.is_empty());
    assert_eq!(limiter.stats().evicted_idle, 10);
}

/// The log keeps a client until every slot has expired.
#[test]
fn the_log_is_idle_once_every_slot_is_free() {
    let clock = ManualClock::new();
    let limiter = tollgate::SlidingWindowLog::builder()
        .limit(3)
        .window(Duration::from_nanos(100))
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.allow_request(&1));
    clock.set(Duration::from_nanos(60));
    assert!(limiter.allow_request(&1));
    clock.set(Duration::from_nanos(100));
    assert_eq!(limiter.sweep(), 0);
    clock.set(Duration::from_nanos(159));
    assert_eq!(limiter.sweep(), 0);
    assert_eq!(limiter.peek_n(&1, 0).unwrap().remaining(), 2);
    clock.set(Duration::from_nanos(160));
    assert_eq!(limiter.sweep(), 1);
    assert_eq!(limiter.check_n(&1, 3).unwrap().remaining(), 0);
}

/// Without any call to `sweep` and with no paced sweep, inserting threads
/// keep the map near the clients that are active: a table that fills up is
/// rebuilt without the clients idle for a whole horizon, and sized for the
/// rest.
#[test]
fn auto_sweep_bounds_the_map_alone() {
    for horizon_us in [100, 5_000] {
        let clock = ManualClock::new();
        let limiter = TokenBucket::builder()
            .rate(1, Duration::from_micros(horizon_us))
            .key_type::<u64>()
            .clock(clock.clone())
            .build()
            .unwrap();
        // One new client per µs; each is idle a horizon after its request,
        // and forgotten once idle for another: at most `2 · horizon_us`
        // clients are active or idle for less than a horizon.
        let active = 2 * horizon_us as usize;
        let bound = active * 2 + 64 * 8;
        let mut most = 0;
        for id in 0..200_000u64 {
            clock.set(Duration::from_micros(id));
            assert!(limiter.allow_request(&id));
            most = most.max(limiter.len());
            assert!(most <= bound, "at {id}: {most} held, bound {bound}");
        }
        let stats = limiter.stats();
        assert!(
            stats.evicted_idle >= 200_000 - bound as u64,
            "{horizon_us} µs: {stats:?}"
        );
        assert!(stats.auto_sweeps > 0, "{stats:?}");
        assert_eq!(stats.overflows, 0);
    }
}

/// The paced sweep, where a limiter asks for one, keeps the map tighter
/// still: every `every` new clients, `slice` entries visited.
#[test]
fn a_paced_auto_sweep_keeps_the_map_tighter() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_micros(5_000))
        .key_type::<u64>()
        .clock(clock.clone())
        .auto_sweep(64, 256)
        .build()
        .unwrap();
    let active = 10_000;
    let mut most = 0;
    for id in 0..200_000u64 {
        clock.set(Duration::from_micros(id));
        assert!(limiter.allow_request(&id));
        most = most.max(limiter.len());
    }
    // About `slice / (slice − every)` = 4/3 times the clients not idle by
    // the reading the slices trust (that of the pass before the latest, a
    // horizon or two back): at most twice the active ones, and a half.
    assert!(most <= active * 5 / 2, "{most} held");
    let stats = limiter.stats();
    assert!(stats.auto_sweeps >= 200_000 / 64 - 1, "{stats:?}");
}

fn capped(
    policy: Overflow,
    clock: &ManualClock,
) -> tollgate::Limiter<tollgate::FixedWindow, u64, ManualClock> {
    tollgate::FixedWindow::builder()
        .limit(2)
        .window(Duration::from_secs(10))
        .max_clients(3)
        .overflow(policy)
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn deny_new_denies_only_new_clients() {
    let clock = ManualClock::new();
    let limiter = capped(Overflow::DenyNew, &clock);
    for id in 0..3 {
        assert!(limiter.allow_request(&id));
    }
    let d = limiter.check(&3);
    assert!(d.is_denied());
    assert_eq!(
        (d.remaining(), d.retry_after()),
        (0, Duration::from_secs(10))
    );
    assert!(!limiter.allow_request(&4));
    // Known clients are decided as ever.
    assert!(limiter.allow_request(&0));
    assert!(!limiter.allow_request(&0));
    let stats = limiter.stats();
    assert_eq!(
        (
            stats.clients,
            stats.overflows,
            stats.denied_new,
            stats.evicted_live
        ),
        (3, 2, 2, 0)
    );
    // Once the window passes the held clients are idle: they make room
    // without the policy.
    clock.set(Duration::from_secs(10));
    assert!(limiter.allow_request(&3));
    assert_eq!(limiter.stats().overflows, 2);
    assert!(limiter.stats().evicted_idle >= 1);
    assert!(limiter.len() <= 3);
}

#[test]
fn admit_untracked_admits_without_tracking() {
    let clock = ManualClock::new();
    let limiter = capped(Overflow::AdmitUntracked, &clock);
    for id in 0..3 {
        assert!(limiter.allow_request(&id));
    }
    // Client 3 never gets a cell: every request is its first.
    for _ in 0..5 {
        assert!(limiter.allow_request(&3));
    }
    let d = limiter.check_n(&3, 2).unwrap();
    assert_eq!((d.is_allowed(), d.remaining()), (true, 0));
    assert_eq!(limiter.len(), 3);
    assert!(limiter.peek(&3).is_allowed());
    let stats = limiter.stats();
    assert_eq!(
        (stats.overflows, stats.admitted_untracked, stats.denied_new),
        (6, 6, 0)
    );
    // Tracked clients keep their state.
    assert!(limiter.allow_request(&1));
    assert!(!limiter.allow_request(&1));
}

/// A token bucket of 3, one a second, holding at most 3 clients, that
/// evicts from samples of `sample`: the state's TAT says when it expires.
fn sampled_bucket(
    sample: u32,
    clock: &ManualClock,
) -> tollgate::Limiter<TokenBucket, u64, ManualClock> {
    TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .capacity(3)
        .max_clients(3)
        .overflow(Overflow::EvictSampled { sample })
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn evict_sampled_forgets_the_state_that_expires_first() {
    let clock = ManualClock::new();
    let limiter = sampled_bucket(3, &clock);
    // Client 0 spends 3 tokens, client 1 two, client 2 one.
    for (id, spent) in [(0u64, 3), (1, 2), (2, 1)] {
        assert!(limiter.check_n(&id, spent).unwrap().is_allowed());
    }
    assert!(limiter.allow_request(&9), "room made for the new client");
    let stats = limiter.stats();
    assert_eq!(
        (stats.clients, stats.overflows, stats.evicted_live),
        (3, 1, 1)
    );
    // Client 2 (full again soonest) was forgotten: it starts afresh, the
    // only kind of decision change this policy makes.
    assert_eq!(limiter.peek_n(&2, 0).unwrap().remaining(), 3);
    assert_eq!(limiter.peek_n(&0, 0).unwrap().remaining(), 0);
    assert_eq!(limiter.peek_n(&1, 0).unwrap().remaining(), 1);
    assert_eq!(limiter.peek_n(&9, 0).unwrap().remaining(), 2);
}

/// The policy's own choice, with the full-cap scan backing off: a sample
/// that holds idle clients forgets one of them, as idle, and only that
/// one; with none idle, the live one idle soonest, counted as live.
#[test]
fn evict_sampled_forgets_one_idle_client_of_its_sample_before_any_live_one() {
    let clock = ManualClock::new();
    // The whole map in every sample.
    let limiter = sampled_bucket(5, &clock);
    // Clients 0 and 1 idle at 1 s, client 2 at 3 s.
    for (id, spent) in [(0u64, 1), (1, 1), (2, 3)] {
        assert!(limiter.check_n(&id, spent).unwrap().is_allowed());
    }
    // None idle: the scan finds nothing, and client 0 or 1, idle soonest,
    // is forgotten live.
    assert!(limiter.allow_request(&9));
    let stats = limiter.stats();
    assert_eq!(
        (stats.clients, stats.evicted_idle, stats.evicted_live),
        (3, 0, 1)
    );
    // At 1.5 s two clients are idle (9, and the one of 0 and 1 left) and
    // client 2 is not: the scan backs off after finding nothing, so the
    // policy's sample meets both idle ones and forgets one of them, as
    // idle; client 2 keeps its state.
    clock.set(Duration::from_millis(1_500));
    assert!(limiter.allow_request(&8));
    let stats = limiter.stats();
    assert_eq!(
        (
            stats.clients,
            stats.overflows,
            stats.evicted_idle,
            stats.evicted_live
        ),
        (3, 2, 1, 1)
    );
    assert_eq!(limiter.peek_n(&2, 0).unwrap().remaining(), 1);
    assert_eq!(limiter.peek_n(&8, 0).unwrap().remaining(), 2);
}

#[test]
fn evict_sampled_prefers_an_idle_client() {
    let clock = ManualClock::new();
    let limiter = capped(Overflow::EvictSampled { sample: 5 }, &clock);
    for id in 0..3 {
        assert!(limiter.allow_request(&id));
    }
    clock.set(Duration::from_secs(10));
    assert!(limiter.allow_request(&1));
    // 0 and 2 are idle now: room is made without the policy.
    assert!(limiter.allow_request(&7));
    let stats = limiter.stats();
    assert_eq!((stats.overflows, stats.evicted_live), (0, 0));
    assert_eq!(limiter.peek_n(&1, 0).unwrap().remaining(), 1);
}

#[test]
fn memory_settings_are_validated() {
    let b = || {
        TokenBucket::builder()
            .rate(1, Duration::from_secs(1))
            .key_type::<u64>()
    };
    assert_eq!(
        b().max_clients(0).build().unwrap_err().field(),
        "max_clients"
    );
    assert_eq!(
        b().overflow(Overflow::EvictSampled { sample: 0 })
            .build()
            .unwrap_err()
            .field(),
        "overflow"
    );
    assert_eq!(
        b().auto_sweep(0, 10).build().unwrap_err().field(),
        "auto_sweep"
    );
    assert_eq!(
        b().auto_sweep(8, 15).build().unwrap_err().field(),
        "auto_sweep"
    );
    assert!(b().auto_sweep(8, 16).build().is_ok());
}

/// The cap holds under concurrent inserts: never more than `max_clients`.
#[test]
fn the_cap_is_hard_under_concurrent_inserts() {
    for policy in [
        Overflow::DenyNew,
        Overflow::AdmitUntracked,
        Overflow::EvictSampled { sample: 4 },
    ] {
        let limiter = TokenBucket::builder()
            .rate(1, Duration::from_secs(60))
            .max_clients(100)
            .overflow(policy)
            .key_type::<u64>()
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let over = AtomicBool::new(false);
        thread::scope(|s| {
            for t in 0..4u64 {
                let (limiter, over) = (&limiter, &over);
                s.spawn(move || {
                    for i in 0..2_000 {
                        let _ = limiter.allow_request(&(t * 1_000_000 + i));
                        if limiter.len() > 100 {
                            over.store(true, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert!(!over.load(Ordering::Relaxed), "{policy:?}");
        let stats = limiter.stats();
        assert!(stats.clients <= 100, "{policy:?} {stats:?}");
        assert!(stats.overflows > 0, "{policy:?} {stats:?}");
        match policy {
            Overflow::DenyNew => assert_eq!(stats.denied_new, stats.overflows),
            Overflow::AdmitUntracked => assert_eq!(stats.admitted_untracked, stats.overflows),
            _ => assert!(stats.evicted_live > 0, "{stats:?}"),
        }
    }
}

/// Checks race sweeps. The clock is frozen within each round, at an
/// instant where every state from earlier rounds is idle, so that the
/// sweeper retires entries that checks are about to use: per round and per
/// client, exactly the capacity is admitted (nothing doubled), and a final
/// drain finds nothing left over (nothing lost).
fn checks_racing_sweeps_lose_and_double_nothing<S: Subject>(subject: &S) {
    const THREADS: usize = 3;
    const KEYS: u64 = 16;
    let capacity = subject.model().capacity();
    let clock = ManualClock::new();
    let limiter = subject
        .builder(clock.clone())
        .auto_sweep(1, 2)
        .build()
        .unwrap();
    for round in 0..25u64 {
        // Far enough apart that every earlier state is idle.
        clock.set(Duration::from_millis(round * 100));
        let barrier = Barrier::new(THREADS + 1);
        let admitted: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
        let done = AtomicBool::new(false);
        thread::scope(|s| {
            let checkers: Vec<_> = (0..THREADS as u64)
                .map(|t| {
                    let (limiter, barrier, admitted) = (&limiter, &barrier, &admitted);
                    s.spawn(move || {
                        barrier.wait();
                        for i in 0..capacity {
                            for key in 0..KEYS {
                                let cost = (1 + (t + i + key) % 3).min(capacity);
                                if limiter.check_n(&key, cost).unwrap().is_allowed() {
                                    admitted[key as usize].fetch_add(cost, Ordering::Relaxed);
                                }
                            }
                        }
                    })
                })
                .collect();
            let (limiter_ref, barrier, done_ref) = (&limiter, &barrier, &done);
            s.spawn(move || {
                barrier.wait();
                while !done_ref.load(Ordering::Relaxed) {
                    let _ = limiter_ref.sweep();
                    thread::yield_now();
                }
            });
            for checker in checkers {
                checker.join().unwrap();
            }
            done.store(true, Ordering::Relaxed);
        });
        for key in 0..KEYS {
            let mut total = admitted[key as usize].load(Ordering::Relaxed);
            while limiter.allow_request(&key) {
                total += 1;
            }
            assert_eq!(total, capacity, "round {round}, key {key}, {subject:?}");
        }
    }
}

#[test]
fn checks_racing_sweeps() {
    let window = WindowConfig {
        limit: 12,
        window: 1_000_000,
    };
    checks_racing_sweeps_lose_and_double_nothing(&BucketConfig {
        tokens: 1,
        per: 1_000_000,
        capacity: 12,
    });
    checks_racing_sweeps_lose_and_double_nothing(&Sliding(window));
    checks_racing_sweeps_lose_and_double_nothing(&Fixed(window));
    checks_racing_sweeps_lose_and_double_nothing(&Log(window));
}

/// Clients that come back more often than their state takes to lapse are
/// not churned by the automatic sweep: forgetting an idle client changes no
/// decision, but forgetting one that returns a moment later costs a fresh
/// insert each time. Here 300 clients take turns, each back every 3 ms while
/// its state (1 000 tokens per second, capacity 1 000) lapses within 1 ms of
/// a check; a trickle of one-off clients keeps the auto-sweep running.
#[test]
fn auto_sweep_leaves_regular_clients_alone() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1_000, Duration::from_secs(1))
        .key_type::<u64>()
        .clock(clock.clone())
        .auto_sweep(1, 64)
        .build()
        .unwrap();
    for round in 0..20u64 {
        for client in 0..300u64 {
            clock.advance(Duration::from_micros(10));
            assert!(limiter.allow_request(&client));
        }
        // One client seen once, to keep the sweep going.
        assert!(limiter.allow_request(&(1_000_000 + round)));
    }
    let stats = limiter.stats();
    // The one-off clients may go; the regular ones must all still be held.
    assert!(limiter.len() >= 300, "{stats:?}");
    assert!(
        stats.evicted_idle <= 20,
        "regular clients were churned: {stats:?}"
    );
}

/// A flood of new clients against a full cap of busy ones backs the
/// full-cap scan off (it finds nothing), but once clients go idle a new
/// client finds room within the backoff's bound, and every one after it
/// does too.
#[test]
fn the_full_cap_scan_backs_off_in_a_flood_but_finds_idle_clients_again() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .max_clients(10)
        .overflow(Overflow::DenyNew)
        .no_auto_sweep()
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    for id in 0..10 {
        assert!(limiter.allow_request(&id));
    }
    for id in 1_000..1_500 {
        assert!(
            !limiter.allow_request(&id),
            "the cap is full of busy clients"
        );
    }
    clock.advance(Duration::from_secs(1)); // every held client is idle now
    let first = (2_000..2_100u64)
        .position(|id| limiter.allow_request(&id))
        .expect("room found once clients went idle");
    assert!(first <= 64, "found after {first} refusals");
    let admitted = (3_000..3_009u64)
        .filter(|id| limiter.allow_request(id))
        .count();
    assert_eq!(admitted, 9, "the rest of the idle room, one scan each");
}

/// A manual clock that panics on the `n`-th reading after it is armed.
struct FailingClock {
    time: ManualClock,
    /// Readings left until the failing one; 0: disarmed.
    countdown: AtomicU64,
}

impl FailingClock {
    fn arm(&self, n: u64) {
        self.countdown.store(n, Ordering::SeqCst);
    }
}

impl tollgate::Clock for FailingClock {
    fn now_nanos(&self) -> u64 {
        let left = self
            .countdown
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if left == Ok(1) {
            panic!("the clock failed");
        }
        self.time.now_nanos()
    }
}

/// A clock that panics at any reading of a new client's first requests,
/// at a full cap, never leaves that client stuck half-born: afterwards it
/// is served, admitted exactly once by a bucket of one, a quota change
/// (which moves every client) finishes, and the count of clients stays at
/// the cap. Each client's requests run in a thread of their own, so that
/// one stuck for good fails the test instead of hanging it.
#[test]
fn a_clock_that_panics_during_a_birth_leaves_no_client_stuck() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::{mpsc, Arc};

    for first in 1..=5 {
        for second in 1..=5 {
            let clock = Arc::new(FailingClock {
                time: ManualClock::new(),
                countdown: AtomicU64::new(0),
            });
            let limiter = Arc::new(
                TokenBucket::builder()
                    .rate(1, Duration::from_secs(60))
                    .max_clients(2)
                    .overflow(Overflow::EvictSampled { sample: 4 })
                    .reconfigurable()
                    .key_type::<u64>()
                    .clock(Arc::clone(&clock))
                    .build()
                    .unwrap(),
            );
            // Two busy clients fill the cap.
            assert!(limiter.allow_request(&1));
            assert!(limiter.allow_request(&2));
            let (done, finished) = mpsc::channel();
            let (worker, worker_clock) = (Arc::clone(&limiter), Arc::clone(&clock));
            thread::spawn(move || {
                // The first request fails at its `first` reading, which may
                // leave client 3 unborn in the map; room is then made for
                // it, and its next request fails at its `second` reading.
                let mut admitted = 0;
                worker_clock.arm(first);
                let caught = catch_unwind(AssertUnwindSafe(|| worker.allow_request(&3)));
                admitted += u32::from(caught.unwrap_or(false));
                worker_clock.arm(0);
                let _ = worker.remove(&1);
                worker_clock.arm(second);
                let caught = catch_unwind(AssertUnwindSafe(|| worker.allow_request(&3)));
                admitted += u32::from(caught.unwrap_or(false));
                worker_clock.arm(0);
                // A request that failed had admitted nothing (the decision
                // comes after every reading), and the clock stands still:
                // client 3's bucket of one admits it once in all.
                admitted += u32::from(worker.allow_request(&3));
                admitted += u32::from(worker.allow_request(&3));
                worker
                    .set_quota(0, TokenBucket::builder().rate(1, Duration::from_secs(60)))
                    .unwrap();
                let _ = done.send(admitted);
            });
            let admitted = finished
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| {
                    panic!("reading {first}, then {second}: client 3 never served")
                });
            assert_eq!(admitted, 1, "reading {first}, then {second}");
            let stats = limiter.stats();
            assert!(limiter.len() <= 2, "{stats:?}");
            assert_eq!(stats.clients, limiter.len(), "{stats:?}");
            assert!(!limiter.allow_request(&3), "client 3 is tracked");
        }
    }
}
