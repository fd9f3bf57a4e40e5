//! `DirectLimiter::until_ready` and `until_ready_n` (the `tokio` feature),
//! on tokio's paused clock: the limiter reads the same clock as tokio's
//! timer (`TokioClock`), so sleeps are exact and instant. The keyed limiter's
//! `tests/until_ready.rs`, on the one budget.

#![cfg(all(feature = "tokio", not(feature = "loom")))]

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tollgate::{DirectLimiter, FixedWindow, ManualClock, ReserveError, TokenBucket, TokioClock};

fn limiter(per: Duration, capacity: u64) -> DirectLimiter<TokenBucket, TokioClock> {
    TokenBucket::builder()
        .rate(1, per)
        .capacity(capacity)
        .clock(TokioClock::new())
        .build_direct()
        .unwrap()
}

const SEC: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn waits_exactly_until_the_request_conforms() {
    let limiter = limiter(SEC, 2);
    let start = Instant::now();
    limiter.until_ready_n(2).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO, "a full bucket: no wait");
    limiter.until_ready().await.unwrap();
    assert_eq!(start.elapsed(), SEC);
    assert!(limiter.peek().is_denied(), "the token was taken");
    limiter.until_ready_n(2).await.unwrap();
    assert_eq!(start.elapsed(), 3 * SEC);
    // A cost of 0 is ready at once and takes nothing.
    limiter.until_ready_n(0).await.unwrap();
    assert_eq!(start.elapsed(), 3 * SEC);
    assert_eq!(limiter.peek().retry_after(), SEC);
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_in_the_order_they_booked() {
    let limiter = Arc::new(limiter(SEC, 1));
    let start = Instant::now();
    assert!(limiter.allow());
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            // The current-thread runtime runs the tasks, so they book, in
            // the order they were spawned.
            tokio::spawn(async move {
                limiter.until_ready().await.unwrap();
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
    assert!(limiter.allow());
    let gave_up = tokio::time::timeout(SEC / 2, limiter.until_ready()).await;
    assert!(gave_up.is_err(), "timed out while sleeping");
    assert_eq!(start.elapsed(), SEC / 2);
    // The booking was cancelled: the token due at 1 s is free again.
    assert_eq!(limiter.peek().retry_after(), SEC / 2);
    limiter.until_ready().await.unwrap();
    assert_eq!(start.elapsed(), SEC);
    assert!(limiter.peek().is_denied(), "the wait took the token");
}

#[tokio::test(start_paused = true)]
async fn errors_charge_nothing_and_never_sleep() {
    let limiter = limiter(SEC, 2);
    let start = Instant::now();
    assert!(matches!(
        limiter.until_ready_n(3).await,
        Err(ReserveError::Cost(_))
    ));
    // (A sliding window counter cannot book ahead: `until_ready` on it does
    // not compile, a `compile_fail` doctest on `DirectLimiter::until_ready`.)
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(limiter.peek().remaining(), 2, "nothing charged");
}

#[test]
fn the_wait_is_a_send_future() {
    fn send<T: Send>(_: &T) {}
    let limiter = limiter(SEC, 1);
    let wait = limiter.until_ready_n(1);
    send(&wait);
    drop(wait);
}

/// A request that would conform only after the end of the clock's range
/// (`Duration::MAX`, "never") is refused at once, charging nothing: it does
/// not sleep for 584 years. Here the clock stands in a fixed window's last
/// window, with the window's limit spent.
#[tokio::test(start_paused = true)]
async fn never_is_refused_at_once_not_slept() {
    const NOW_MAX: u64 = (1 << 63) - 1;
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(NOW_MAX));
    let limiter = FixedWindow::builder()
        .limit(1)
        .window(SEC)
        .clock(clock)
        .build_direct()
        .unwrap();
    let start = Instant::now();
    let limit = Duration::from_secs(3_600);
    tokio::time::timeout(limit, limiter.until_ready())
        .await
        .expect("a conforming request")
        .unwrap();
    assert_eq!(limiter.peek().retry_after(), Duration::MAX);
    let never = tokio::time::timeout(limit, limiter.until_ready())
        .await
        .expect("refused at once, not slept on");
    assert_eq!(
        never,
        Err(ReserveError::TooLong {
            wait: Duration::MAX
        })
    );
    assert_eq!(start.elapsed(), Duration::ZERO, "no sleep at all");
}
