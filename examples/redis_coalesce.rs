//! Measures coalescing of Redis checks
//! ([`RedisBuilder::coalesce`]) against one call per check, side by side
//! in one run, alternating which goes first in each round:
//!
//! - **hot**: one client, 64 tasks in one process, a quota that is never
//!   spent (every check admitted), for `--secs` each;
//! - **uniform**: 100 000 clients drawn uniformly, 64 tasks, the same;
//! - **exact**: one client, 64 tasks making 500 checks each against a
//!   token bucket of 10 000 (one token an hour): the admissions must be
//!   exactly 10 000, with every `remaining` from 9 999 down to 0 seen once,
//!   whichever way the checks go.
//!
//! Round trips per check are Redis's own count, from `INFO commandstats`
//! (`EVALSHA`, `EVAL` and `SCRIPT` calls over the checks made). Prints the
//! medians over the rounds, and each round's figures.
//!
//! ```text
//! cargo run --release --features redis --example redis_coalesce                      # 5 rounds of 2 s
//! cargo run --release --features redis --example redis_coalesce -- --rounds 3 --secs 1
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --release --features redis --example redis_coalesce
//! ```
//!
//! Not a timed test: it asserts only that every check got an answer from
//! Redis and that the exact cell admitted exactly its quota.
//!
//! [`RedisBuilder::coalesce`]: tollgate::redis::RedisBuilder::coalesce

use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use tollgate::redis::{FailPolicy, RedisLimiter};
use tollgate::TokenBucket;

#[path = "support/local_redis.rs"]
mod local_redis;
use local_redis::{redis_url, script_calls};
#[path = "support/figures.rs"]
mod figures;
use figures::row;

const TASKS: u64 = 64;

/// A token bucket of `capacity`, refilled at `tokens` per `per`.
fn limiter(
    conn: &ConnectionManager,
    prefix: &str,
    (tokens, per, capacity): (u64, Duration, u64),
    coalesce: bool,
) -> RedisLimiter<TokenBucket> {
    TokenBucket::builder()
        .rate(tokens, per)
        .capacity(capacity)
        .redis(conn.clone(), prefix)
        .timeout(Duration::from_secs(5))
        .fail_policy(FailPolicy::FailClosed)
        .no_deny_shortcut()
        .coalesce(coalesce)
        .build()
        .unwrap()
}

/// Checks/s and round trips per check of 64 tasks checking for `span`,
/// each check of client `0` (`clients == 1`) or of one drawn uniformly
/// from `clients`.
async fn throughput(
    url: &str,
    limiter: RedisLimiter<TokenBucket>,
    clients: u64,
    span: Duration,
) -> (f64, f64) {
    let before = script_calls(url);
    let started = Instant::now();
    let handles: Vec<_> = (0..TASKS)
        .map(|t| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                // xorshift64: a uniform draw of the client, cheap and
                // different in each task.
                let mut x = 0x9E37_79B9_7F4A_7C15_u64 ^ (t + 1);
                let mut n = 0u64;
                while started.elapsed() < span {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let client = if clients == 1 { 0 } else { x % clients };
                    let d = limiter.check(&client).await.expect("Redis answers");
                    assert!(d.is_allowed(), "a quota that is never spent");
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut checks = 0;
    for h in handles {
        checks += h.await.unwrap();
    }
    let elapsed = started.elapsed();
    let trips = script_calls(url) - before;
    let stats = limiter.stats();
    assert_eq!(stats.errors + stats.timeouts + stats.fail_closed, 0);
    (
        checks as f64 / elapsed.as_secs_f64(),
        trips as f64 / checks as f64,
    )
}

/// The exact cell: 64 tasks × 500 checks of one client against 10 000
/// tokens. Returns the admissions, after asserting each `remaining` from
/// 9 999 to 0 was seen exactly once.
async fn exact(limiter: RedisLimiter<TokenBucket>) -> u64 {
    const CAPACITY: u64 = 10_000;
    let handles: Vec<_> = (0..TASKS)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for _ in 0..500 {
                    let d = limiter.check("hot").await.expect("Redis answers");
                    if d.is_allowed() {
                        seen.push(d.remaining());
                    }
                }
                seen
            })
        })
        .collect();
    let mut seen = Vec::new();
    for h in handles {
        seen.extend(h.await.unwrap());
    }
    seen.sort_unstable();
    let want: Vec<u64> = (0..CAPACITY).collect();
    assert_eq!(seen, want, "each token admitted once, in order");
    seen.len() as u64
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut rounds, mut secs) = (5usize, 2.0f64);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => {
                rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--rounds N")
            }
            "--secs" => secs = args.next().and_then(|v| v.parse().ok()).expect("--secs S"),
            other => panic!("unknown argument {other}"),
        }
    }
    let span = Duration::from_secs_f64(secs);
    let (url, _server) = redis_url("coalesce");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let conn = ConnectionManager::new(redis::Client::open(url.as_str()).unwrap())
            .await
            .unwrap();
        // Never spent: a million tokens a second, two million held.
        let big = (1_000_000, Duration::from_secs(1), 2_000_000);
        // [hot, uniform] × [off, on]: (checks/s, round trips per check).
        let mut cells: [[Vec<(f64, f64)>; 2]; 2] = Default::default();
        let mut admitted = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            println!("round {}", round + 1);
            for (cell, clients) in [(0, 1u64), (1, 100_000)] {
                let order = if round % 2 == 0 { [false, true] } else { [true, false] };
                for coalesce in order {
                    let prefix = format!("c{round}-{cell}-{coalesce}");
                    let l = limiter(&conn, &prefix, big, coalesce);
                    let got = throughput(&url, l, clients, span).await;
                    println!(
                        "  {} coalesce={coalesce}: {:.0} checks/s, {:.4} round trips per check",
                        ["hot", "uniform"][cell],
                        got.0,
                        got.1
                    );
                    cells[cell][usize::from(coalesce)].push(got);
                }
            }
            for coalesce in [false, true] {
                let prefix = format!("exact{round}-{coalesce}");
                let n = exact(limiter(&conn, &prefix, (1, Duration::from_secs(3_600), 10_000), coalesce)).await;
                admitted[usize::from(coalesce)].push(n);
            }
        }
        println!();
        println!("| clients, 64 tasks | one call per check: checks/s | coalesced: checks/s | ratio | round trips per check (one call each / coalesced) |");
        println!("|---|---:|---:|---:|---:|");
        for (cell, name) in ["one hot client", "100 000 uniform"].iter().enumerate() {
            println!("{}", row(name, &cells[cell][0], &cells[cell][1]));
        }
        println!();
        println!(
            "exact: admitted {:?} (one call each) and {:?} (coalesced) of 32 000 checks against 10 000 tokens",
            admitted[0], admitted[1]
        );
    });
}
