//! What new clients pay for the memory bound: `H` new clients a horizon.
//!
//! 200 000 (or the second argument) new clients, one per microsecond of a
//! `ManualClock`, on a token bucket of capacity 1 whose horizon is the
//! first argument in microseconds; prints the most clients held. Run it
//! under callgrind, counting the loop only:
//!
//! ```text
//! cargo build --release --example pass_cost
//! valgrind --tool=callgrind --toggle-collect='pass_cost::drive' \
//!     target/release/examples/pass_cost 100 200000
//! ```
//!
//! (`docs/PERFORMANCE.md`, "Passes over the map for the memory bound".)

use std::time::Duration;

use tollgate::{ManualClock, TokenBucket};

/// `n` new clients, one a microsecond, on a bucket of horizon
/// `horizon_us`: returns the most clients held (sampled every 1 000).
#[inline(never)]
fn drive(horizon_us: u64, n: u64) -> usize {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_micros(horizon_us))
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .expect("a valid bucket");
    let mut most = 0;
    for id in 0..n {
        clock.set(Duration::from_micros(id));
        assert!(limiter.allow_request(&id), "a new client's first request");
        if id % 1_000 == 0 {
            most = most.max(limiter.len());
        }
    }
    most.max(limiter.len())
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let horizon_us = args.next().and_then(Result::ok).unwrap_or(100);
    let n = args.next().and_then(Result::ok).unwrap_or(200_000);
    println!("most clients held: {}", drive(horizon_us, n));
}
