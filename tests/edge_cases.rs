//! Bad input gets a clear outcome: invalid configurations, oversized and
//! zero costs, clocks that jump backwards or run to the end of time, idle
//! gaps of years, and slow rates.

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

mod common;

use std::time::Duration;

use common::{BucketConfig, Fixed, Log, Model, Sliding, Subject, WindowConfig};
use proptest::prelude::*;
use tollgate::{ConfigError, FixedWindow, ManualClock, SlidingWindowCounter, TokenBucket};

const SEC: u64 = 1_000_000_000;
const YEAR: Duration = Duration::from_secs(365 * 86_400);

fn out_of_range(err: ConfigError) -> (&'static str, u128, u128) {
    match err {
        ConfigError::OutOfRange {
            field, min, max, ..
        } => (field, min, max),
        other => panic!("expected OutOfRange, got {other:?}"),
    }
}

#[test]
fn token_bucket_rejects_each_bad_field_by_name() {
    let per = Duration::from_secs(1);
    let build = |tokens, per, capacity| {
        TokenBucket::builder()
            .rate(tokens, per)
            .capacity(capacity)
            .build()
    };
    assert_eq!(
        TokenBucket::builder().build().unwrap_err(),
        ConfigError::Missing { field: "rate" }
    );
    assert_eq!(
        out_of_range(build(0, per, 1).unwrap_err()),
        ("rate", 1, SEC as u128)
    );
    assert_eq!(
        out_of_range(build(1, Duration::ZERO, 1).unwrap_err()).0,
        "rate"
    );
    // More than one token per nanosecond.
    assert_eq!(
        out_of_range(build(11, Duration::from_nanos(10), 1).unwrap_err()),
        ("rate", 1, 10)
    );
    assert_eq!(
        out_of_range(build(1, Duration::MAX, 1).unwrap_err()).0,
        "rate"
    );
    assert_eq!(out_of_range(build(1, per, 0).unwrap_err()).0, "capacity");
    // A full refill must fit in 2^63 - 1 ns.
    let max_capacity = ((1u64 << 63) - 1) / SEC;
    assert_eq!(
        out_of_range(build(1, per, max_capacity + 1).unwrap_err()),
        ("capacity", 1, max_capacity.into())
    );
    assert!(build(1, per, max_capacity).is_ok());
    assert!(build(u64::MAX, Duration::MAX, 1).is_err());
}

#[test]
fn windows_reject_each_bad_field_by_name() {
    fn check<B>(
        build: impl Fn(Option<u64>, Option<Duration>) -> Result<B, ConfigError>,
        max_limit_1s: u128,
    ) {
        assert_eq!(
            build(None, Some(Duration::from_secs(1))).err(),
            Some(ConfigError::Missing { field: "limit" })
        );
        assert_eq!(
            build(Some(1), None).err(),
            Some(ConfigError::Missing { field: "window" })
        );
        assert_eq!(
            out_of_range(build(Some(0), Some(Duration::from_secs(1))).err().unwrap()).0,
            "limit"
        );
        assert_eq!(
            out_of_range(build(Some(1), Some(Duration::ZERO)).err().unwrap()).0,
            "window"
        );
        assert_eq!(
            out_of_range(build(Some(1), Some(Duration::MAX)).err().unwrap()).0,
            "window"
        );
        let err = build(Some(u64::MAX), Some(Duration::from_secs(1)))
            .err()
            .unwrap();
        assert_eq!(out_of_range(err.clone()), ("limit", 1, max_limit_1s));
        assert!(
            err.to_string()
                .contains(&format!("at most {max_limit_1s} requests")),
            "{err}"
        );
        assert!(build(Some(max_limit_1s as u64), Some(Duration::from_secs(1))).is_ok());
    }
    check(
        |limit, window| {
            let mut b = SlidingWindowCounter::builder();
            if let Some(l) = limit {
                b = b.limit(l)
            }
            if let Some(w) = window {
                b = b.window(w)
            }
            b.build()
        },
        32_767,
    );
    check(
        |limit, window| {
            let mut b = FixedWindow::builder();
            if let Some(l) = limit {
                b = b.limit(l)
            }
            if let Some(w) = window {
                b = b.window(w)
            }
            b.build()
        },
        (1 << 30) - 1,
    );
}

#[test]
fn oversized_cost_is_an_error_not_an_eternal_deny() {
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .capacity(3)
        .build()
        .unwrap();
    let err = limiter.check_n("a", 4).unwrap_err();
    assert_eq!((err.cost(), err.capacity()), (4, 3));
    assert!(err.to_string().contains("never"));
    assert!(limiter.peek_n("a", u64::MAX).is_err());
    // Nothing was recorded by the refused checks.
    assert!(limiter.is_empty());
    assert!(limiter.check_n("a", 3).unwrap().is_allowed());
}

#[test]
fn zero_cost_is_admitted_and_records_nothing() {
    let limiter = FixedWindow::builder()
        .limit(2)
        .window(Duration::from_secs(1))
        .build()
        .unwrap();
    let d = limiter.check_n("a", 0).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 2);
    assert!(limiter.is_empty());
    assert!(limiter.check_n("a", 2).unwrap().is_allowed());
    let d = limiter.check_n("a", 0).unwrap();
    assert!(d.is_allowed() && d.remaining() == 0 && d.retry_after().is_zero());
}

#[test]
fn peek_neither_consumes_nor_inserts() {
    let limiter = SlidingWindowCounter::builder()
        .limit(1)
        .window(Duration::from_secs(1))
        .build()
        .unwrap();
    for _ in 0..3 {
        let d = limiter.peek("a");
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 1, "a peek reports the quota as it stands");
    }
    assert!(limiter.is_empty());
    assert!(limiter.allow_request("a"));
    assert!(limiter.peek("a").is_denied());
    assert_eq!(limiter.len(), 1);
}

/// Ten idle years later, every algorithm treats a client as new.
fn ten_idle_years_forget_everything<S: Subject>(subject: &S) {
    let clock = ManualClock::new();
    let limiter = subject.limiter(clock.clone());
    let capacity = subject.model().capacity();
    clock.advance(Duration::from_nanos(123_456_789));
    assert!(limiter.check_n(&1, capacity).unwrap().is_allowed());
    assert!(limiter.check(&1).is_denied());
    clock.advance(10 * YEAR);
    let d = limiter.check_n(&1, capacity).unwrap();
    assert!(d.is_allowed(), "{subject:?}");
    assert_eq!(d.remaining(), 0);
}

#[test]
fn ten_year_gaps() {
    let window = WindowConfig {
        limit: 5,
        window: SEC,
    };
    ten_idle_years_forget_everything(&BucketConfig {
        tokens: 1,
        per: SEC,
        capacity: 5,
    });
    ten_idle_years_forget_everything(&Sliding(window));
    ten_idle_years_forget_everything(&Fixed(window));
    ten_idle_years_forget_everything(&Log(window));
}

#[test]
fn one_token_a_day_arrives_each_day_when_checked_every_second() {
    // Requirement (b) through the whole limiter (the pure layer's test checks
    // every millisecond): frequent denied checks never starve the refill.
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(86_400))
        .capacity(1)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut admitted_at = Vec::new();
    for second in 0..=3 * 86_400u64 {
        clock.set(Duration::from_secs(second));
        if limiter.allow_request("slow") {
            admitted_at.push(second);
        }
    }
    assert_eq!(admitted_at, [0, 86_400, 2 * 86_400, 3 * 86_400]);
}

#[test]
fn readings_past_the_end_of_time_do_not_panic() {
    let clock = ManualClock::new();
    let limiter = SlidingWindowCounter::builder()
        .limit(2)
        .window(Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    clock.set(Duration::from_nanos(u64::MAX));
    assert!(limiter.allow_request("a"));
    assert!(limiter.allow_request("a"));
    // Past 2^63 ns every reading is the last instant: one endless window.
    assert!(limiter.check("a").is_denied());
    clock.advance(Duration::from_secs(1));
    assert!(!limiter.allow_request("a"));
}

/// Time as a list of readings that may jump back by up to an hour.
fn wobbly_readings() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(
        prop_oneof![4 => 0..5_000_000i64, 1 => -3_600_000_000_000..0i64, 1 => -5_000_000..0i64],
        1..300,
    )
}

/// A clock that steps backwards never panics and never admits more than
/// the algorithm allows over the time the clock has actually covered, with
/// or without a sweep evicting idle state after every step.
fn backward_clock_never_over_admits<S: Subject>(subject: &S, steps: &[i64], sweep: bool) {
    let clock = ManualClock::new();
    let limiter = subject.limiter(clock.clone());
    let (mut now, mut latest, mut admitted) = (0i64, 0i64, 0u64);
    for step in steps {
        now = (now + step).max(0);
        latest = latest.max(now);
        clock.set(Duration::from_nanos(now as u64));
        admitted += u64::from(limiter.allow_request(&0));
        let _ = limiter.check_n(&1, 1).unwrap();
        let _ = limiter.peek(&0);
        if sweep {
            let _ = limiter.sweep();
        }
    }
    let bound = subject.admission_bound(latest as u64);
    assert!(admitted <= bound, "{admitted} > {bound}, {subject:?}");
}

proptest! {
    #[test]
    fn backward_clocks(steps in wobbly_readings(), sweep in any::<bool>()) {
        let window = WindowConfig { limit: 3, window: 2_000_000 };
        backward_clock_never_over_admits(&BucketConfig { tokens: 1, per: 1_000_000, capacity: 3 }, &steps, sweep);
        backward_clock_never_over_admits(&Sliding(window), &steps, sweep);
        backward_clock_never_over_admits(&Fixed(window), &steps, sweep);
        backward_clock_never_over_admits(&Log(window), &steps, sweep);
    }
}

/// The smallest case of the above: a token bucket drained at 0 and idle by
/// 1 s is evicted; the clock then steps back to 0.5 s. The client comes
/// back fresh: forgetting it before the step gives it at most one bucket
/// early, once: over the 1.5 s the clock has covered, at most capacity +
/// 1.5 tokens, and a capacity more.
#[test]
fn eviction_then_a_backward_step_refills_early_at_most_once() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .capacity(1)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut admitted = u64::from(limiter.allow_request("a"));
    clock.set(Duration::from_secs(1));
    assert_eq!(limiter.sweep(), 1);
    clock.set(Duration::from_millis(500));
    admitted += u64::from(limiter.allow_request("a"));
    clock.set(Duration::from_millis(1_500));
    admitted += u64::from(limiter.allow_request("a"));
    assert!(
        admitted <= 3,
        "{admitted} admitted over 1.5 s at 1 per second, capacity 1"
    );
    // Once: no more until the refill of the fresh state's admission.
    clock.set(Duration::from_millis(1_600));
    assert!(!limiter.allow_request("a"));
}

/// A tiered limiter at its cap refuses a new client for the longest
/// horizon of any tier (the longest any state stays non-idle): the
/// `retry_after` and `replenish_after` of a full-cap `DenyNew` refusal and
/// of `ReserveError::Full`, before and after quota changes that move the
/// longest horizon from one tier to another.
#[test]
fn a_full_tiered_limiter_refuses_for_its_longest_tiers_horizon() {
    use tollgate::{Algorithm, Builder, Limiter, Overflow, Reservable, ReserveError};

    /// How long a one-quota limiter of `quota`, full, refuses a newcomer.
    fn horizon_of<A: Algorithm>(quota: Builder<A>) -> Duration {
        let full: Limiter<A, String, ManualClock> = quota
            .max_clients(1)
            .overflow(Overflow::DenyNew)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        assert!(full.allow_request("ann"));
        let refused = full.check("bob");
        assert!(!refused.is_allowed());
        assert!(refused.retry_after() > Duration::ZERO);
        refused.retry_after()
    }

    fn refuses_for<A: Reservable>(limiter: &Limiter<A, String, ManualClock>, want: Duration) {
        let refused = limiter.check("newcomer");
        assert!(!refused.is_allowed(), "the cap is full");
        assert_eq!(refused.retry_after(), want);
        assert_eq!(refused.replenish_after(), want);
        assert_eq!(
            limiter.reserve("newcomer", Duration::MAX).unwrap_err(),
            ReserveError::Full { retry_after: want }
        );
    }

    let bucket = |capacity| {
        TokenBucket::builder()
            .rate(1, Duration::from_secs(1))
            .capacity(capacity)
    };
    let limiter = bucket(3)
        .tier(1, bucket(5))
        .tier_by(|c: &String| u16::from(c.starts_with("pro-")))
        .max_clients(1)
        .overflow(Overflow::DenyNew)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert_eq!(horizon_of(bucket(5)), Duration::from_secs(5));
    assert!(limiter.allow_request("ann"));
    refuses_for(&limiter, horizon_of(bucket(5)));
    // Tier 1 shrinks below tier 0: tier 0's horizon is now the longest.
    limiter.set_quota(1, bucket(2)).unwrap();
    refuses_for(&limiter, horizon_of(bucket(3)));
    limiter.set_quota(0, bucket(7)).unwrap();
    refuses_for(&limiter, horizon_of(bucket(7)));

    let fixed = |secs| {
        FixedWindow::builder()
            .limit(4)
            .window(Duration::from_secs(secs))
    };
    let limiter = fixed(10)
        .tier(3, fixed(60))
        .max_clients(1)
        .overflow(Overflow::DenyNew)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(limiter.allow_request("ann"));
    refuses_for(&limiter, horizon_of(fixed(60)));
    limiter.set_quota(3, fixed(5)).unwrap();
    refuses_for(&limiter, horizon_of(fixed(10)));
}

/// A full `DenyNew` limiter tells a new client to wait as long as a held
/// client can stay busy, bookings included: a horizon past the instant the
/// latest booking falls due (it told the horizon alone, 1 s, while a
/// client booked 100 s ahead stayed busy 101 s). Both ways: a nanosecond
/// short of the wait the held client is still busy, and a new client that
/// honours the wait is admitted, even after refusals that found no one
/// idle (which otherwise put the next scans for idle clients off).
#[test]
fn a_full_limiter_refuses_for_as_long_as_a_booking_keeps_a_client_busy() {
    use tollgate::{Overflow, ReserveError};

    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .max_clients(1)
        .overflow(Overflow::DenyNew)
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    let booked: Vec<_> = (0..=100)
        .map(|_| limiter.reserve(&1, Duration::MAX).unwrap())
        .collect();
    assert_eq!(booked[100].wait(), Duration::from_secs(100));
    // The last booking falls due at 100 s; client 1's bucket is full, so
    // idle, a second later.
    let wait = Duration::from_secs(101);
    let refused = limiter.check(&2);
    assert!(!refused.is_allowed());
    assert_eq!(refused.retry_after(), wait);
    assert_eq!(refused.replenish_after(), wait);
    assert_eq!(
        limiter.reserve(&2, Duration::MAX).unwrap_err(),
        ReserveError::Full { retry_after: wait }
    );
    assert_eq!(limiter.peek(&2).retry_after(), wait);
    clock.advance(wait - Duration::from_nanos(1));
    assert!(!limiter.allow_request(&3), "client 1 is still busy");
    clock.advance(Duration::from_nanos(1));
    assert!(limiter.allow_request(&2), "the wait honoured, room");
    assert_eq!(limiter.stats().denied_new, 3);
    drop(booked);
}
