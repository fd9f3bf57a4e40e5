//! The tier resolver: when it runs, and what a client the limiter does not
//! hold reads as.

// Plain `cargo test` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

use std::time::Duration;

use tollgate::TokenBucket;

/// A peek at a client the limiter does not hold reads the tier the
/// resolver gives it, as its first check will.
#[test]
fn a_peek_at_an_unknown_client_reads_the_tier_it_resolves_to() {
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .tier(1, TokenBucket::builder().rate(5, Duration::from_secs(1)))
        .tier_by(|client: &String| u16::from(client.starts_with("pro-")))
        .build()
        .unwrap();
    for peeked in [
        limiter.peek("pro-ann"),
        limiter.peek_n("pro-ann", 0).unwrap(),
    ] {
        assert_eq!((peeked.limit(), peeked.remaining()), (5, 5));
    }
    assert!(limiter.peek_n("pro-ann", 5).unwrap().is_allowed());
    assert!(limiter.is_empty());
    assert_eq!(limiter.check("pro-ann").limit(), 5);
    assert_eq!(limiter.peek("bob").limit(), 1);
}
