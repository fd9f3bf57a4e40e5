//! Two limits held at once (`Builder::and`, `Both`): against the pair of
//! exact models, decision by decision; exact under contention; a denial by
//! either limit charges neither; eviction of pair clients.

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

mod common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::strategies::{bucket, steps, window};
use common::{agree_with_model, Fixed, Pair, Sliding};
use proptest::prelude::*;
use tollgate::{Both, CostError, FixedWindow, ManualClock, SlidingWindowCounter, TokenBucket};

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn token_bucket_and_token_bucket_match_the_pair_of_exact_models(
        first in bucket(), second in bucket(), steps in steps(3, 6),
    ) {
        agree_with_model(&Pair(first, second), &steps);
    }

    #[test]
    fn token_bucket_and_fixed_window_match_the_pair_of_exact_models(
        first in bucket(), second in window(), steps in steps(3, 6),
    ) {
        agree_with_model(&Pair(first, Fixed(second)), &steps);
    }

    #[test]
    fn sliding_window_counter_and_fixed_window_match_the_pair_of_exact_models(
        first in window(), second in window(), steps in steps(3, 6),
    ) {
        agree_with_model(&Pair(Sliding(first), Fixed(second)), &steps);
    }

    #[test]
    fn fixed_window_and_token_bucket_match_the_pair_of_exact_models(
        first in window(), second in bucket(), steps in steps(3, 6),
    ) {
        agree_with_model(&Pair(Fixed(first), second), &steps);
    }
}

const HOUR: Duration = Duration::from_secs(3600);

/// Threads checking one client on a frozen clock, from a barrier: how many
/// were admitted.
fn race<A: tollgate::Algorithm>(
    limiter: tollgate::Limiter<A, String, ManualClock>,
    threads: usize,
    per_thread: usize,
) -> usize {
    let limiter = Arc::new(limiter);
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (limiter, barrier) = (Arc::clone(&limiter), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                (0..per_thread)
                    .filter(|_| limiter.allow_request("hot"))
                    .count()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).sum()
}

#[test]
fn eight_threads_on_a_frozen_clock_admit_exactly_the_smaller_budget() {
    for round in 0..20 {
        // Either limit may bind: 300 of 500 per second, or 300 of 700.
        let (first, second) = if round % 2 == 0 {
            (500, 300)
        } else {
            (300, 700)
        };
        let limiter = TokenBucket::builder()
            .rate(first, Duration::from_secs(1))
            .and_rate(second, HOUR)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        assert_eq!(race(limiter, 8, 200), 300, "round {round}");

        let limiter = TokenBucket::builder()
            .rate(first, Duration::from_secs(1))
            .and(FixedWindow::builder().limit(second).window(HOUR))
            .clock(ManualClock::new())
            .build()
            .unwrap();
        assert_eq!(race(limiter, 8, 200), 300, "round {round}, with a window");
    }
}

#[test]
fn a_denial_by_the_second_limit_charges_nothing_on_the_first() {
    // 3 per hour, and 1 per second.
    let clock = ManualClock::new();
    let both = TokenBucket::builder()
        .rate(3, HOUR)
        .and(
            FixedWindow::builder()
                .limit(1)
                .window(Duration::from_secs(1)),
        )
        .clock(clock.clone())
        .build()
        .unwrap();
    // The same two limits as two limiters, checked one after the other:
    // the first is charged before the second can deny.
    let hourly = TokenBucket::builder()
        .rate(3, HOUR)
        .clock(clock.clone())
        .build()
        .unwrap();
    let per_second = FixedWindow::builder()
        .limit(1)
        .window(Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let stacked = |id: &str| hourly.allow_request(id) && per_second.allow_request(id);

    let (mut together, mut apart) = (0, 0);
    for _ in 0..3 {
        for _ in 0..5 {
            together += usize::from(both.allow_request("a"));
            apart += usize::from(stacked("a"));
        }
        let denied = both.check("a");
        assert!(denied.is_denied());
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(together, 3, "one a second, all three of the hour's");
    assert_eq!(
        apart, 1,
        "the stacked pair leaked the hour's budget on denials"
    );
    let spent = both.check("a");
    assert_eq!((spent.limit(), spent.remaining()), (3, 0));
    assert_eq!(spent.retry_after(), Duration::from_secs(1200 - 3));
}

#[test]
fn the_binding_limit_is_reported() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(2, Duration::from_secs(1))
        .and(
            SlidingWindowCounter::builder()
                .limit(3)
                .window(Duration::from_secs(60)),
        )
        .clock(clock.clone())
        .build()
        .unwrap();
    let fresh = limiter.peek("a");
    // The quota as it stands: both limits full, the bucket's 2 the less.
    assert_eq!((fresh.limit(), fresh.remaining()), (2, 2));
    assert!(limiter.allow_request("a") && limiter.allow_request("a"));
    let denied = limiter.check("a");
    assert_eq!(denied.limit(), 2);
    assert_eq!(denied.retry_after(), Duration::from_millis(500));
    clock.advance(Duration::from_secs(1));
    assert!(limiter.allow_request("a"));
    let denied = limiter.check("a");
    assert_eq!((denied.limit(), denied.remaining()), (3, 0));
    // The window's 3 weigh in full until just after the next one starts.
    assert_eq!(
        denied.retry_after(),
        Duration::from_secs(59) + Duration::from_nanos(1)
    );
    let err: CostError = limiter.check_n("a", 3).unwrap_err();
    assert_eq!(
        (err.cost(), err.capacity()),
        (3, 2),
        "the pair's capacity is the smaller"
    );
}

#[test]
fn pair_clients_are_swept_only_when_both_limits_are_idle() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .and(
            FixedWindow::builder()
                .limit(2)
                .window(Duration::from_secs(10)),
        )
        .clock(clock.clone())
        .no_auto_sweep()
        .build()
        .unwrap();
    for id in ["a", "b", "c"] {
        assert!(limiter.allow_request(id));
    }
    clock.set(Duration::from_secs(5));
    assert_eq!(limiter.sweep(), 0, "the buckets are full, the windows not");
    assert_eq!(limiter.len(), 3);
    assert!(limiter.allow_request("a"));
    assert!(limiter.check("a").is_denied(), "the window's 2 are spent");
    clock.set(Duration::from_secs(10));
    assert_eq!(limiter.sweep(), 3);
    assert!(limiter.is_empty());
    // Forgotten clients decide as fresh ones.
    assert!(limiter.allow_request("a") && limiter.allow_request("b"));
    assert_eq!(limiter.len(), 2);
    assert!(limiter.reset("a"));
    let fresh = limiter.peek("a");
    assert!(fresh.is_allowed());
    assert_eq!(
        (fresh.limit(), fresh.remaining()),
        (1, 1),
        "the bucket binds"
    );
    assert!(limiter.remove("b"));
    assert_eq!(limiter.len(), 1);
}

#[test]
fn table_rebuilds_move_pair_clients_without_losing_a_charge() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, HOUR)
        .and_rate(5, Duration::from_secs(1))
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    // Enough clients to rebuild every shard's table several times: each
    // client's one admission must survive every move.
    for id in 0..20_000u64 {
        assert!(limiter.allow_request(&id));
    }
    for id in (0..20_000u64).step_by(97) {
        assert!(
            limiter.check(&id).is_denied(),
            "client {id} lost its charge"
        );
    }
    assert_eq!(limiter.len(), 20_000);
}

#[test]
fn bad_second_limits_are_config_errors_naming_the_field() {
    let first = || TokenBucket::builder().rate(10, Duration::from_secs(1));
    let field = |err: tollgate::ConfigError| err.field();
    assert_eq!(
        field(first().and_rate(0, HOUR).build().unwrap_err()),
        "and.rate"
    );
    assert_eq!(
        field(
            first()
                .and_rate(u64::MAX, Duration::from_nanos(1))
                .build()
                .unwrap_err()
        ),
        "and.rate"
    );
    assert_eq!(
        field(
            first()
                .and(TokenBucket::builder().rate(1, Duration::MAX))
                .build()
                .unwrap_err()
        ),
        "and.rate"
    );
    assert_eq!(
        field(
            first()
                .and(FixedWindow::builder().limit(1))
                .build()
                .unwrap_err()
        ),
        "and.window"
    );
    assert_eq!(
        field(
            first()
                .and(
                    SlidingWindowCounter::builder()
                        .limit(u64::MAX)
                        .window(Duration::from_secs(1))
                )
                .build()
                .unwrap_err()
        ),
        "and.limit"
    );
    assert_eq!(
        field(
            TokenBucket::builder()
                .and_rate(1, HOUR)
                .build()
                .unwrap_err()
        ),
        "rate"
    );
}

#[test]
fn the_pair_is_sixteen_bytes_and_lock_free_here() {
    // x86-64 and AArch64, where the suite runs, have the instruction.
    if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        assert!(Both::<TokenBucket, FixedWindow>::is_lock_free());
    }
}

#[test]
fn a_pair_books_when_both_limits_conform_and_cancels_from_both() {
    let clock = ManualClock::new();
    // 1 per second, and 2 per 10 s in fixed windows.
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .capacity(1)
        .and(
            FixedWindow::builder()
                .limit(2)
                .window(Duration::from_secs(10)),
        )
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.allow_request("a"));
    // The bucket binds: ready at 1 s, when the window still has room.
    let first = limiter.reserve("a", Duration::MAX).unwrap();
    assert_eq!(first.wait(), Duration::from_secs(1));
    assert!(limiter.check("a").is_denied(), "served in booking order");
    // Now the window binds: its 2 are spent, the next window opens at 10 s.
    let second = limiter.reserve("a", Duration::MAX).unwrap();
    assert_eq!(second.wait(), Duration::from_secs(10));
    assert!(
        !first.cancel(),
        "the second booking was timed on top of the first"
    );
    assert!(
        second.cancel(),
        "the tail goes back from both limits at once"
    );
    let again = limiter.reserve("a", Duration::MAX).unwrap();
    assert_eq!(again.wait(), Duration::from_secs(10));
    again.commit();
    clock.advance(Duration::from_secs(10));
    assert!(limiter.check("a").is_denied(), "the booking took the unit");
    clock.advance(Duration::from_secs(1));
    assert!(limiter.allow_request("a"));
}

// A pair holding a sliding window counter cannot book ahead: `reserve` on
// it does not compile (a `compile_fail` doctest on `tollgate::Reservable`).
