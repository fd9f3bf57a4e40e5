//! `Decision::retry_after() == Duration::MAX` means "never": the request
//! would pass only after the last instant the limiter distinguishes
//! (2^63 − 1 ns after its clock's origin), or never at all. Every way to
//! reach it, for each algorithm: a denial in the last window or once the
//! clock has reached its end, and a cost above what the client can ever be
//! admitted. A booking for such a request is refused with the same wait
//! (`ReserveError::TooLong { wait: Duration::MAX }`), charging nothing,
//! however long the caller would wait.

#![cfg(not(feature = "loom"))]

use std::time::Duration;

use tollgate::{
    Algorithm, Builder, FixedWindow, Limiter, ManualClock, Reservable, ReserveError,
    SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};

/// The last instant any algorithm distinguishes.
const NOW_MAX: u64 = (1 << 63) - 1;
const SEC: Duration = Duration::from_secs(1);

fn at_the_end() -> ManualClock {
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(NOW_MAX));
    clock
}

/// Spends the client's whole quota at the clock's end, then: a check is
/// denied for ever.
fn never_checked<A: Algorithm>(name: &str, limiter: &Limiter<A, String, ManualClock>, quota: u64) {
    for _ in 0..quota {
        assert!(limiter.allow_request("a"), "{name}: the quota is there");
    }
    let denied = limiter.check("a");
    assert!(!denied.is_allowed(), "{name}");
    assert_eq!(denied.retry_after(), Duration::MAX, "{name}: never");
    assert_eq!(
        denied.replenish_after(),
        Duration::MAX,
        "{name}: never grows"
    );
}

/// As [`never_checked`], and then a booking that would wait however long
/// is refused with the same "never", charging nothing.
fn never_after_the_end<A: Reservable>(
    name: &str,
    limiter: &Limiter<A, String, ManualClock>,
    quota: u64,
) {
    never_checked(name, limiter, quota);
    let booking = limiter.reserve("a", Duration::MAX).unwrap_err();
    assert_eq!(
        booking,
        ReserveError::TooLong {
            wait: Duration::MAX
        },
        "{name}: no booking past the end"
    );
    // Nothing was charged: the same answer, with nothing booked.
    assert_eq!(limiter.check("a").retry_after(), Duration::MAX, "{name}");
}

fn built<A: Algorithm>(builder: Builder<A>) -> Limiter<A, String, ManualClock> {
    builder.clock(at_the_end()).build().unwrap()
}

#[test]
fn a_denial_at_the_end_of_time_never_passes() {
    never_after_the_end(
        "token bucket",
        &built(TokenBucket::builder().rate(1, SEC).capacity(2)),
        2,
    );
    never_after_the_end(
        "fixed window, last window",
        &built(FixedWindow::builder().limit(3).window(SEC)),
        3,
    );
    never_checked(
        "sliding window counter, last window",
        &built(SlidingWindowCounter::builder().limit(3).window(SEC)),
        3,
    );
    never_after_the_end(
        "sliding window log",
        &built(SlidingWindowLog::builder().limit(3).window(SEC)),
        3,
    );
    never_after_the_end(
        "pair",
        &built(
            TokenBucket::builder()
                .rate(5, SEC)
                .capacity(5)
                .and(FixedWindow::builder().limit(2).window(SEC)),
        ),
        2,
    );
}

/// Within the last window, before the clock's very end: a fixed window's
/// next window would start past it.
#[test]
fn a_denial_in_the_last_window_never_passes() {
    let clock = ManualClock::new();
    let window = 1_000_000u64;
    let last_start = NOW_MAX / window * window;
    clock.set(Duration::from_nanos(last_start));
    let limiter = FixedWindow::builder()
        .limit(1)
        .window(Duration::from_nanos(window))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.allow_request("a"));
    assert_eq!(limiter.check("a").retry_after(), Duration::MAX);
    assert_eq!(
        limiter.reserve("a", Duration::MAX).unwrap_err(),
        ReserveError::TooLong {
            wait: Duration::MAX
        }
    );
    // One window earlier, the wait is finite: to the last window's start.
    clock.set(Duration::from_nanos(last_start - window));
    let earlier = FixedWindow::builder()
        .limit(1)
        .window(Duration::from_nanos(window))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(earlier.allow_request("a"));
    assert_eq!(
        earlier.check("a").retry_after(),
        Duration::from_nanos(window)
    );
    let r = earlier.reserve("a", Duration::MAX).unwrap();
    assert_eq!(r.ready_at(), Duration::from_nanos(last_start));
    r.commit();
}

/// A tiered client asking for more than its own tier's capacity (but no
/// more than another tier's) is denied for ever, and cannot book.
#[test]
fn a_cost_above_the_clients_own_quota_never_passes() {
    let limiter = TokenBucket::builder()
        .rate(2, SEC)
        .capacity(2)
        .tier(1, TokenBucket::builder().rate(10, SEC).capacity(10))
        .tier_by(|c: &String| u16::from(c.starts_with("pro-")))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let denied = limiter.check_n("ann", 5).unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(denied.retry_after(), Duration::MAX);
    assert_eq!(
        limiter.reserve_n("ann", 5, Duration::MAX).unwrap_err(),
        ReserveError::TooLong {
            wait: Duration::MAX
        }
    );
    // Nothing charged, and the same cost passes for the larger tier.
    assert_eq!(limiter.check("ann").remaining(), 1);
    assert!(limiter.check_n("pro-bob", 5).unwrap().is_allowed());
}
