//! Time and forgetting under one model: no limiter-wide floor.
//!
//! - A new client is judged at a clock reading taken after the look at the
//!   map that found it absent, so a sweep between a check's first reading
//!   and its look never makes a brand-new client's first request look
//!   spent.
//! - The automatic pass (and the paced slices and rebuilds that new clients
//!   make) forgets only what was idle at its own reading and at the reading
//!   of the pass before it: a clock that reads ahead for less than a
//!   horizon, and comes back, forgets no client that would not have been
//!   forgotten without it.
//! - A client the limiter never saw decides exactly as a fresh client,
//!   whatever readings came before; `reset` makes a client exactly fresh; a
//!   booking's cancel judges at its own reading.
//! - A client forgotten before the clock steps back (or during a glitch
//!   longer than a horizon) comes back fresh: admitted early by at most its
//!   capacity, once (`tests/oracle.rs`, `tests/edge_cases.rs`).

// Plain `cargo test` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use tollgate::{Clock, FixedWindow, Limiter, ManualClock, TokenBucket};

const SEC: u64 = 1_000_000_000;
const DAY: u64 = 86_400 * SEC;

fn at(clock: &ManualClock, ns: u64) {
    clock.set(Duration::from_nanos(ns));
}

/// Ten a second, a hundred at once: a horizon of 10 s.
fn bucket(clock: &ManualClock) -> Limiter<TokenBucket, u64, ManualClock> {
    TokenBucket::builder()
        .rate(10, Duration::from_secs(1))
        .capacity(100)
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// A user clock reads a day ahead for 3 s of ordinary traffic (new clients
/// among it, so the automatic pass runs), then comes back, with no explicit
/// call: brand-new clients are admitted as fresh ones, and clients not
/// checked during the glitch decide exactly as without it.
#[test]
fn a_glitch_a_day_ahead_forgets_no_spent_client_and_refuses_no_new_one() {
    let clock = ManualClock::new();
    let limiter = bucket(&clock);
    at(&clock, 100 * SEC);
    for id in 0..1_000 {
        assert_eq!((0..200).filter(|_| limiter.allow_request(&id)).count(), 100);
    }
    for k in 0..30 {
        at(&clock, 100 * SEC + DAY + k * SEC / 10);
        assert!(limiter.allow_request(&(10_000 + k)));
    }
    at(&clock, 103 * SEC);
    for id in 1_000_000..1_001_000 {
        let first = limiter.check(&id);
        assert!(first.is_allowed(), "new client {id}: {first:?}");
        assert_eq!(first.remaining(), 99);
    }
    // 3 s of refill at 10 a second since they were spent: 30 each.
    for id in 0..1_000 {
        assert_eq!((0..200).filter(|_| limiter.allow_request(&id)).count(), 30);
    }
}

/// One `sweep()` at a reading ten years ahead, then the clock comes back:
/// every brand-new client is admitted, then and an hour later.
#[test]
fn a_sweep_far_ahead_refuses_no_new_client_afterwards() {
    let clock = ManualClock::new();
    let limiter = bucket(&clock);
    at(&clock, 100 * SEC);
    for id in 0..100 {
        assert!(limiter.allow_request(&id));
    }
    at(&clock, 100 * SEC + 3_650 * DAY);
    let _ = limiter.sweep();
    at(&clock, 101 * SEC);
    assert!((1_000..2_000u64).all(|id| limiter.allow_request(&id)));
    at(&clock, 3_701 * SEC);
    assert!((2_000..3_000u64).all(|id| limiter.allow_request(&id)));
}

/// After a glitch, a fixed window's new client is admitted, and once it has
/// spent its window it is told the true wait (to the end of the window),
/// and admitted then.
#[test]
fn after_a_glitch_a_new_window_client_is_told_the_true_wait() {
    let clock = ManualClock::new();
    let limiter = FixedWindow::builder()
        .limit(2)
        .window(Duration::from_secs(60))
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    at(&clock, 600 * SEC);
    for id in 0..600 {
        assert!(limiter.allow_request(&id));
    }
    at(&clock, 600 * SEC + DAY);
    for id in 600..1_200 {
        assert!(limiter.allow_request(&id));
    }
    at(&clock, 610 * SEC);
    assert!(limiter.allow_request(&5_000));
    assert!(limiter.allow_request(&5_000));
    let refused = limiter.check(&5_000);
    assert!(!refused.is_allowed());
    assert_eq!(refused.retry_after(), Duration::from_secs(50));
    at(&clock, 660 * SEC);
    assert!(limiter.allow_request(&5_000));
}

/// After a glitch: `reset` makes a client exactly fresh, and a booking made
/// since gives its charge back when cancelled before its time.
#[test]
fn after_a_glitch_reset_is_fresh_and_a_cancel_gives_back() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .capacity(2)
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    at(&clock, 100 * SEC);
    for id in 0..600 {
        assert!(limiter.allow_request(&id));
    }
    at(&clock, 100 * SEC + DAY);
    for id in 600..1_200 {
        assert!(limiter.allow_request(&id));
    }
    at(&clock, 101 * SEC);
    assert!(limiter.allow_request(&7));
    assert!(limiter.reset(&7));
    assert_eq!(limiter.peek(&7).remaining(), 2);
    assert_eq!((0..5).filter(|_| limiter.allow_request(&7)).count(), 2);
    let booked = limiter.reserve_n(&7, 1, Duration::from_secs(10)).unwrap();
    assert_eq!(booked.wait(), Duration::from_secs(1));
    assert!(booked.cancel(), "nothing else was charged since");
    assert_eq!(limiter.check(&7).retry_after(), Duration::from_secs(1));
}

/// One request at a reading a day ahead does not postpone the automatic
/// pass for a day: once the clock is back, a flood of one-off clients is
/// held to a few horizons of them.
#[test]
fn a_reading_a_day_ahead_postpones_no_pass() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_millis(1))
        .capacity(1)
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    at(&clock, SEC);
    assert!(limiter.allow_request(&0));
    at(&clock, SEC + DAY);
    assert!(limiter.allow_request(&1));
    // Back: 50 000 one-off clients, one every 10 µs over 0.5 s, a horizon
    // of 1 ms: about 100 of them a horizon.
    let mut most = 0;
    for id in 2..50_002u64 {
        at(&clock, SEC + id * 10_000);
        assert!(limiter.allow_request(&id));
        most = most.max(limiter.len());
    }
    assert!(most <= 4 * 100 + 514, "{most} held");
}

/// A clock that, once armed, runs a sweep of its limiter 10 s later, right
/// after a reading (the race a sweep on another thread makes with a check
/// between its clock reading and its look at the map, made deterministic).
#[derive(Clone, Debug, Default)]
struct Racing(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    now: AtomicU64,
    armed: AtomicBool,
    limiter: OnceLock<Weak<Limiter<TokenBucket, u64, Racing>>>,
}

impl Clock for Racing {
    fn now_nanos(&self) -> u64 {
        let now = self.0.now.load(Ordering::SeqCst);
        if self.0.armed.swap(false, Ordering::SeqCst) {
            self.0.now.store(now + 10 * SEC, Ordering::SeqCst);
            if let Some(limiter) = self.0.limiter.get().and_then(Weak::upgrade) {
                let _ = limiter.sweep();
            }
        }
        now
    }
}

/// A capacity-1 bucket of one a second on a [`Racing`] clock, not armed.
fn racing() -> (Racing, Arc<Limiter<TokenBucket, u64, Racing>>) {
    let clock = Racing::default();
    let limiter = Arc::new(
        TokenBucket::builder()
            .rate(1, Duration::from_secs(1))
            .key_type::<u64>()
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    clock.0.limiter.set(Arc::downgrade(&limiter)).unwrap();
    (clock, limiter)
}

/// A capacity-1 bucket: a client spent at 0 is forgotten by a sweep that
/// runs between a brand-new client's clock reading (at 0.5 s, before the
/// spent client's idle instant) and its look at the map. The new client's
/// first request is admitted, as with no sweep.
#[test]
fn a_sweep_between_a_reading_and_the_look_refuses_no_first_request() {
    let (clock, limiter) = racing();
    assert!(limiter.allow_request(&1));
    clock.0.now.store(SEC / 2, Ordering::SeqCst);
    clock.0.armed.store(true, Ordering::SeqCst);
    assert!(
        limiter.allow_request(&2),
        "a brand-new client's first request"
    );
    assert_eq!(
        limiter.stats().evicted_idle,
        1,
        "the sweep ran and forgot 1"
    );
}

/// The client a racing sweep forgets is its own: spent at 0, checked again
/// at 0.5 s, where the sweep (at 10.5 s, after that reading and before the
/// look at the map) forgets it as idle. The request is judged no earlier
/// than the sweep's reading, so the client's next request at that same
/// reading finds its one unit spent; judged at the reading taken before
/// the look (0.5 s, on the fresh state), the bucket of one would have
/// admitted both.
#[test]
fn a_client_a_racing_sweep_forgot_is_judged_no_earlier_than_the_sweep() {
    let (clock, limiter) = racing();
    assert!(limiter.allow_request(&1));
    clock.0.now.store(SEC / 2, Ordering::SeqCst);
    clock.0.armed.store(true, Ordering::SeqCst);
    assert!(limiter.allow_request(&1), "idle by the sweep's reading");
    assert_eq!(limiter.stats().evicted_idle, 1, "the sweep forgot it");
    assert!(
        !limiter.allow_request(&1),
        "a second unit at 10.5 s from a bucket of one"
    );
}
