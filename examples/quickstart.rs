//! A ten-line tour: one limiter per algorithm behind the one trait, a burst
//! from one client, and the figures for `RateLimit` / `Retry-After` headers.
//!
//! Run with `cargo run --release --example quickstart`.

use std::time::Duration;

use tollgate::{FixedWindow, RateLimiter, SlidingWindowCounter, TokenBucket};

fn main() -> Result<(), tollgate::ConfigError> {
    let second = Duration::from_secs(1);
    let limiters: Vec<(&str, Box<dyn RateLimiter>)> = vec![
        (
            "token bucket",
            Box::new(TokenBucket::builder().rate(5, second).build()?),
        ),
        (
            "sliding window counter",
            Box::new(
                SlidingWindowCounter::builder()
                    .limit(5)
                    .window(second)
                    .build()?,
            ),
        ),
        (
            "fixed window",
            Box::new(FixedWindow::builder().limit(5).window(second).build()?),
        ),
    ];
    for (name, limiter) in &limiters {
        let burst: String = (0..8)
            .map(|_| {
                if limiter.allow_request("alice") {
                    '✓'
                } else {
                    '✗'
                }
            })
            .collect();
        println!(
            "{name:>24}: {burst}  (bob: {})",
            limiter.allow_request("bob")
        );
    }

    let limiter = TokenBucket::builder().rate(5, second).build()?;
    for _ in 0..6 {
        let d = limiter.check("alice");
        println!(
            "allowed={:<5} RateLimit: limit={}, remaining={}  Retry-After: {:?}",
            d.is_allowed(),
            d.limit(),
            d.remaining(),
            d.retry_after()
        );
    }
    Ok(())
}
