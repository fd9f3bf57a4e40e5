//! `Limiter::until_ready` and friends (the `tokio` feature), on tokio's
//! paused clock: the limiter reads the same clock as tokio's timer
//! (`TokioClock`), so sleeps are exact and instant.

#![cfg(not(feature = "loom"))]

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tollgate::{Clock, FixedWindow, ReserveError, TokenBucket, TokioClock};

fn limiter(per: Duration, capacity: u64) -> tollgate::Limiter<TokenBucket, String, TokioClock> {
    TokenBucket::builder()
        .rate(1, per)
        .capacity(capacity)
        .clock(TokioClock::new())
        .build()
        .unwrap()
}

const SEC: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn waits_exactly_until_the_request_conforms() {
    let limiter = limiter(SEC, 2);
    let start = Instant::now();
    limiter.until_ready_n("a", 2).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO, "a full bucket: no wait");
    limiter.until_ready("a").await.unwrap();
    assert_eq!(start.elapsed(), SEC);
    assert!(limiter.peek("a").is_denied(), "the token was taken");
    limiter.until_ready_n("a", 2).await.unwrap();
    assert_eq!(start.elapsed(), 3 * SEC);
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_in_the_order_they_booked() {
    let limiter = Arc::new(limiter(SEC, 1));
    let start = Instant::now();
    assert!(limiter.allow_request("a"));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            // The current-thread runtime runs the tasks, so they book, in
            // the order they were spawned.
            tokio::spawn(async move {
                limiter.until_ready("a").await.unwrap();
                start.elapsed()
            })
        })
        .collect();
    let mut done = Vec::new();
    for task in tasks {
        done.push(task.await.unwrap());
    }
    assert_eq!(done, [SEC, 2 * SEC, 3 * SEC, 4 * SEC]);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_wait_gives_its_booking_back() {
    let limiter = limiter(SEC, 1);
    let start = Instant::now();
    assert!(limiter.allow_request("a"));
    let gave_up = tokio::time::timeout(SEC / 2, limiter.until_ready("a")).await;
    assert!(gave_up.is_err(), "timed out while sleeping");
    assert_eq!(start.elapsed(), SEC / 2);
    // The booking was cancelled: the token due at 1 s is free again.
    assert_eq!(limiter.peek("a").retry_after(), SEC / 2);
    limiter.until_ready("a").await.unwrap();
    assert_eq!(start.elapsed(), SEC);
}

#[tokio::test(start_paused = true)]
async fn jitter_delays_by_at_most_its_bound_and_spreads_clients() {
    let limiter = limiter(SEC, 1);
    let jitter = Duration::from_millis(100);
    let start = Instant::now();
    let mut woke = Vec::new();
    for client in 0..20 {
        let id = format!("client-{client}");
        assert!(limiter.allow_request(id.as_str()));
        let begun = start.elapsed();
        limiter
            .until_ready_jittered(id.as_str(), 1, jitter)
            .await
            .unwrap();
        let waited = start.elapsed() - begun;
        assert!(
            waited >= SEC && waited <= SEC + jitter + Duration::from_millis(1),
            "{waited:?}"
        );
        woke.push(waited);
    }
    woke.sort();
    woke.dedup();
    assert!(woke.len() > 10, "jitter spreads the wake-ups: {woke:?}");
    // No wait, no jitter.
    let begun = Instant::now();
    limiter
        .until_ready_jittered("fresh", 1, jitter)
        .await
        .unwrap();
    assert_eq!(begun.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn errors_charge_nothing_and_never_sleep() {
    let limiter = limiter(SEC, 2);
    let start = Instant::now();
    assert!(matches!(
        limiter.until_ready_n("a", 3).await,
        Err(ReserveError::Cost(_))
    ));
    // (A sliding window counter cannot book ahead: `until_ready` on it does
    // not compile, a `compile_fail` doctest on `Limiter::until_ready`.)
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert!(limiter.is_empty());
}

#[test]
fn the_wait_is_a_send_future() {
    fn send<T: Send>(_: &T) {}
    let limiter = limiter(SEC, 1);
    let wait = limiter.until_ready_n("a", 1);
    send(&wait);
    drop(wait);
}

/// A request that would conform only after the end of the clock's range
/// (`Duration::MAX`, "never") is refused at once, charging nothing: it does
/// not sleep for 584 years. Here the clock stands in a fixed window's last
/// window, with the window's limit spent, and a tiered client asks for
/// more than its own tier's capacity.
#[tokio::test(start_paused = true)]
async fn never_is_refused_at_once_not_slept() {
    use tollgate::{FixedWindow, ManualClock};
    const NOW_MAX: u64 = (1 << 63) - 1;
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(NOW_MAX));
    let limiter = FixedWindow::builder()
        .limit(1)
        .window(SEC)
        .clock(clock.clone())
        .build()
        .unwrap();
    let start = Instant::now();
    let limit = Duration::from_secs(3_600);
    tokio::time::timeout(limit, limiter.until_ready("a"))
        .await
        .expect("a conforming request")
        .unwrap();
    assert_eq!(limiter.check("a").retry_after(), Duration::MAX);
    let never = tokio::time::timeout(limit, limiter.until_ready("a"))
        .await
        .expect("refused at once, not slept on");
    assert_eq!(
        never,
        Err(ReserveError::TooLong {
            wait: Duration::MAX
        })
    );
    let jittered = tokio::time::timeout(limit, limiter.until_ready_jittered("a", 1, SEC))
        .await
        .expect("refused at once, not slept on");
    assert!(matches!(jittered, Err(ReserveError::TooLong { wait }) if wait == Duration::MAX));
    assert_eq!(start.elapsed(), Duration::ZERO, "no sleep at all");

    let tiered = TokenBucket::builder()
        .rate(2, SEC)
        .tier(1, TokenBucket::builder().rate(10, SEC))
        .tier_by(|c: &String| u16::from(c.starts_with("pro-")))
        .clock(clock)
        .build()
        .unwrap();
    let never = tokio::time::timeout(limit, tiered.until_ready_n("ann", 5))
        .await
        .expect("refused at once, not slept on");
    assert!(matches!(never, Err(ReserveError::TooLong { wait }) if wait == Duration::MAX));
    assert_eq!(start.elapsed(), Duration::ZERO, "no sleep at all");
}

/// `TokioClock` reads tokio's paused time to the nanosecond: a token
/// bucket on it refills exactly as `advance` moves the time, and a fixed
/// window's windows start at the clock's origin.
#[tokio::test(start_paused = true)]
async fn a_tokio_clock_refills_exactly_as_tokio_time_advances() {
    let clock = TokioClock::new();
    assert_eq!(clock.now_nanos(), 0);
    assert_eq!(clock.unix_origin(), Duration::ZERO);
    let bucket = TokenBucket::builder()
        .rate(1, SEC)
        .capacity(3)
        .clock(clock)
        .build()
        .unwrap();
    let window = FixedWindow::builder()
        .limit(2)
        .window(SEC)
        .clock(clock)
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(bucket.allow_request("a"));
    }
    for _ in 0..2 {
        assert!(window.allow_request("a"));
    }
    assert!(bucket.check("a").is_denied());
    assert!(window.check("a").is_denied());

    let tick = Duration::from_nanos(1);
    tokio::time::advance(SEC - tick).await;
    assert_eq!(clock.now_nanos(), 999_999_999);
    assert_eq!(bucket.check("a").retry_after(), tick);
    assert_eq!(window.check("a").retry_after(), tick);
    tokio::time::advance(tick).await;
    assert_eq!(clock.now_nanos(), 1_000_000_000);
    assert!(
        bucket.allow_request("a"),
        "one token, refilled at 1 s exactly"
    );
    assert!(bucket.check("a").is_denied(), "and only one");
    assert!(window.allow_request("a"), "a new window at 1 s exactly");

    tokio::time::advance(10 * SEC).await;
    assert_eq!(clock.now_nanos(), 11_000_000_000);
    assert_eq!(bucket.peek("a").remaining(), 3, "full again, no fuller");
}

/// `until_ready` on a `TokioClock` completes once `advance` has moved
/// tokio's time by exactly the wait, and not a nanosecond before.
#[tokio::test(start_paused = true)]
async fn until_ready_on_a_tokio_clock_completes_after_exactly_the_advanced_time() {
    let limiter = Arc::new(
        TokenBucket::builder()
            .rate(1, 4 * SEC)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    );
    let start = Instant::now();
    assert!(limiter.allow_request("a"));
    let waiter = {
        let limiter = Arc::clone(&limiter);
        tokio::spawn(async move {
            limiter.until_ready("a").await.unwrap();
            start.elapsed()
        })
    };
    tokio::task::yield_now().await; // the waiter books, and sleeps
    assert_eq!(limiter.peek("a").retry_after(), 8 * SEC, "booked");
    let tick = Duration::from_nanos(1);
    tokio::time::advance(4 * SEC - tick).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!waiter.is_finished(), "1 ns early");
    tokio::time::advance(tick).await;
    // The deadline has passed: the waiter wakes without more time passing.
    assert_eq!(waiter.await.unwrap(), 4 * SEC);
    assert_eq!(start.elapsed(), 4 * SEC);
}
