//! Settings the builder must never drop silently: each is either honoured,
//! whatever the order it was given in, or rejected by `build` with an error
//! naming it.

use std::time::Duration;

use tollgate::{FixedWindow, ManualClock, Overflow, TokenBucket};

const SECOND: Duration = Duration::from_secs(1);

/// A resolver of tiers given before `key_type` is kept when the key type
/// is the one it takes.
#[test]
fn a_resolver_given_before_key_type_is_kept() {
    let limiter = TokenBucket::builder()
        .rate(1, SECOND)
        .tier(1, TokenBucket::builder().rate(100, SECOND))
        .tier_by(|key: &String| u16::from(key.starts_with("pro-")))
        .key_type::<String>()
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert_eq!(limiter.check("pro-1").limit(), 100);
    assert_eq!(limiter.check("free-1").limit(), 1);
}

/// ... and rejected, naming `tier_by`, when the key type is another.
#[test]
fn a_resolver_of_another_key_type_is_an_error() {
    let err = TokenBucket::builder()
        .rate(1, SECOND)
        .tier_by(|key: &String| u16::from(key.starts_with("pro-")))
        .key_type::<u64>()
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "tier_by");
    assert!(err.to_string().contains("key type"), "{err}");
}

/// The second limit of a pair reads the pair's clock: a clock given to it
/// would be ignored, so it is an error.
#[test]
fn a_clock_given_to_the_second_limit_is_an_error() {
    let clock = ManualClock::new();
    let err = TokenBucket::builder()
        .rate(10, SECOND)
        .and(
            FixedWindow::builder()
                .limit(5)
                .window(SECOND)
                .clock(clock.clone()),
        )
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "and.clock");
    // Given to the pair, it is the pair's clock.
    let limiter = TokenBucket::builder()
        .rate(10, SECOND)
        .and(FixedWindow::builder().limit(5).window(SECOND))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!((0..10).filter(|_| limiter.allow_request("a")).count(), 5);
    clock.advance(SECOND);
    assert_eq!((0..10).filter(|_| limiter.allow_request("a")).count(), 5);
}

/// Memory settings given to a second limit or to a tier's quota would be
/// ignored too: errors naming them.
#[test]
fn memory_settings_given_to_a_quota_are_errors() {
    let err = TokenBucket::builder()
        .rate(10, SECOND)
        .and(
            FixedWindow::builder()
                .limit(5)
                .window(SECOND)
                .max_clients(10),
        )
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "and.memory");
    let err = TokenBucket::builder()
        .rate(10, SECOND)
        .tier(
            1,
            TokenBucket::builder()
                .rate(5, SECOND)
                .overflow(Overflow::DenyNew),
        )
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "tier.memory");
    let err = TokenBucket::builder()
        .rate(10, SECOND)
        .tier(
            1,
            TokenBucket::builder()
                .rate(5, SECOND)
                .clock(ManualClock::new()),
        )
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "tier.clock");
    // On a running limiter, nothing changes.
    let limiter = TokenBucket::builder()
        .rate(10, SECOND)
        .reconfigurable()
        .build()
        .unwrap();
    let err = limiter
        .set_quota(
            0,
            TokenBucket::builder()
                .rate(5, SECOND)
                .clock(ManualClock::new()),
        )
        .unwrap_err();
    assert_eq!(err.field(), "tier.clock");
    assert_eq!(limiter.check("a").limit(), 10);
}
