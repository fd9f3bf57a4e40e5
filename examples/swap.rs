//! Middleware that holds an `Arc<dyn RateLimiter>` runs unchanged over all
//! four algorithms; only the constructor differs. The burst pattern is the
//! seed's boundary spike: `limit` requests just before a window boundary and
//! `limit` more just after it.
//!
//! Run with `cargo run --release --example swap`.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    FixedWindow, ManualClock, RateLimiter, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};

const LIMIT: u64 = 5;
const WINDOW: Duration = Duration::from_secs(1);

/// The code a server writes once: it knows only the trait.
fn middleware(limiter: &Arc<dyn RateLimiter>, client: &str) -> u16 {
    if limiter.allow_request(client) {
        200
    } else {
        429
    }
}

fn main() -> Result<(), tollgate::ConfigError> {
    let clock = ManualClock::new();
    let limiters: Vec<(&str, Arc<dyn RateLimiter>)> = vec![
        (
            "token bucket",
            Arc::new(
                TokenBucket::builder()
                    .rate(LIMIT, WINDOW)
                    .clock(clock.clone())
                    .build()?,
            ),
        ),
        (
            "sliding window counter",
            Arc::new(
                SlidingWindowCounter::builder()
                    .limit(LIMIT)
                    .window(WINDOW)
                    .clock(clock.clone())
                    .build()?,
            ),
        ),
        (
            "sliding window log",
            Arc::new(
                SlidingWindowLog::builder()
                    .limit(LIMIT)
                    .window(WINDOW)
                    .clock(clock.clone())
                    .build()?,
            ),
        ),
        (
            "fixed window",
            Arc::new(
                FixedWindow::builder()
                    .limit(LIMIT)
                    .window(WINDOW)
                    .clock(clock.clone())
                    .build()?,
            ),
        ),
    ];
    // (instant, requests): 5 at 0.999 s, 5 at 1.001 s, 5 at 1.5 s.
    let pattern = [(999, LIMIT), (1_001, LIMIT), (1_500, LIMIT)];
    println!("limit {LIMIT} per {WINDOW:?}; each column is one request from client \"alice\"\n");
    print!("{:>24} ", "");
    for (ms, n) in pattern {
        print!("| {:<width$}", format!("t={ms}ms"), width = 2 * n as usize);
    }
    println!("| admitted");
    for (name, limiter) in &limiters {
        print!("{name:>24} ");
        let mut admitted = 0;
        for (ms, n) in pattern {
            clock.set(Duration::from_millis(ms));
            print!("| ");
            for _ in 0..n {
                let ok = middleware(limiter, "alice") == 200;
                admitted += u64::from(ok);
                print!("{} ", if ok { '✓' } else { '✗' });
            }
        }
        println!("| {admitted}");
    }
    println!("\nThe fixed window admits {} within 2 ms around the boundary; the others hold near {LIMIT}.", 2 * LIMIT);
    Ok(())
}
