//! Measures the Redis limiters against a local Redis: round trips per
//! check, checks per second and latency percentiles at 1, 8 and 64
//! concurrent tasks, and what the local deny shortcut saves under a flood
//! of denied requests.
//!
//! ```text
//! cargo run --release --features redis --example redis_bench            # starts its own redis-server
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --release --features redis --example redis_bench
//! cargo run --release --features redis --example redis_bench -- --quick # 0.3 s per cell
//! ```
//!
//! Not a timed test: it asserts only that every check got an answer from
//! Redis, and prints a Markdown table.

use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use tollgate::redis::{FailPolicy, RedisAlgorithm, RedisBuilder, RedisLimiter};
use tollgate::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};

#[path = "support/local_redis.rs"]
mod local_redis;
use local_redis::{redis_url, script_calls};

struct Row {
    name: &'static str,
    tasks: usize,
    checks: u64,
    per_sec: f64,
    p50: Duration,
    p99: Duration,
    trips_per_check: f64,
}

async fn run<A: RedisAlgorithm>(
    name: &'static str,
    url: &str,
    limiter: RedisLimiter<A>,
    tasks: usize,
    span: Duration,
) -> Row {
    let before = script_calls(url);
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut i = 0u64;
                while started.elapsed() < span {
                    // 10 000 clients per task, each far below its quota.
                    let key = (t as u64) << 32 | (i % 10_000);
                    let at = Instant::now();
                    let d = limiter.check(&key).await.expect("Redis answers");
                    latencies.push(at.elapsed());
                    assert!(d.is_allowed());
                    i += 1;
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    let elapsed = started.elapsed();
    let trips = script_calls(url) - before;
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    assert_eq!(limiter.stats().errors + limiter.stats().timeouts, 0);
    Row {
        name,
        tasks,
        checks: all.len() as u64,
        per_sec: all.len() as f64 / elapsed.as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
        trips_per_check: trips as f64 / all.len() as f64,
    }
}

/// One call per check (coalescing off, so that each row measures a
/// call's cost), no shortcut.
fn configure<A>(b: RedisBuilder<A>) -> RedisBuilder<A> {
    b.timeout(Duration::from_secs(1))
        .fail_policy(FailPolicy::FailClosed)
        .no_deny_shortcut()
        .coalesce(false)
}

async fn flood(conn: &ConnectionManager, shortcut: bool, span: Duration) -> (u64, u64, u64) {
    let builder = FixedWindow::builder()
        .limit(10)
        .window(Duration::from_secs(3_600))
        .redis(conn.clone(), format!("bench-flood-{shortcut}"))
        .fail_policy(FailPolicy::FailClosed);
    let limiter = if shortcut {
        builder
    } else {
        builder.no_deny_shortcut()
    }
    .build()
    .unwrap();
    let started = Instant::now();
    let handles: Vec<_> = (0..64)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while started.elapsed() < span {
                    let _ = limiter.check("flooder").await.expect("answered");
                    n += 1;
                    // A check answered by the shortcut is ready at once and
                    // never yields, as an in-process check; a real server
                    // yields on its sockets. Without this the 64 tasks would
                    // starve the connection's own task.
                    if n.is_multiple_of(64) {
                        tokio::task::yield_now().await;
                    }
                }
                n
            })
        })
        .collect();
    let mut checks = 0;
    for h in handles {
        checks += h.await.unwrap();
    }
    let s = limiter.stats();
    (checks, s.round_trips, s.denied_locally)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let span = if quick {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(2)
    };
    let (url, _server) = redis_url("bench");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let conn = ConnectionManager::new(redis::Client::open(url.as_str()).unwrap())
            .await
            .unwrap();
        let big = 1_000_000;
        let hour = Duration::from_secs(3_600);
        let mut rows = Vec::new();
        for tasks in [1, 8, 64] {
            let p = format!("bench-{tasks}");
            let tb = configure(
                TokenBucket::builder()
                    .rate(big, hour)
                    .redis(conn.clone(), p.clone()),
            );
            rows.push(run("token bucket", &url, tb.build().unwrap(), tasks, span).await);
            let fw = configure(
                FixedWindow::builder()
                    .limit(big)
                    .window(hour)
                    .redis(conn.clone(), p.clone()),
            );
            rows.push(run("fixed window", &url, fw.build().unwrap(), tasks, span).await);
            let swc = configure(
                SlidingWindowCounter::builder()
                    .limit(big)
                    .window(hour)
                    .redis(conn.clone(), p.clone()),
            );
            rows.push(
                run(
                    "sliding window counter",
                    &url,
                    swc.build().unwrap(),
                    tasks,
                    span,
                )
                .await,
            );
            let swl = configure(
                SlidingWindowLog::builder()
                    .limit(4_096)
                    .window(hour)
                    .redis(conn.clone(), p.clone()),
            );
            rows.push(
                run(
                    "sliding window log",
                    &url,
                    swl.build().unwrap(),
                    tasks,
                    span,
                )
                .await,
            );
        }
        println!("| algorithm | tasks | checks | checks/s | p50 | p99 | round trips per check |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for r in &rows {
            println!(
                "| {} | {} | {} | {:.0} | {:.0} µs | {:.0} µs | {:.3} |",
                r.name,
                r.tasks,
                r.checks,
                r.per_sec,
                r.p50.as_secs_f64() * 1e6,
                r.p99.as_secs_f64() * 1e6,
                r.trips_per_check
            );
        }
        println!();
        println!("| deny flood, 64 tasks, one client | checks | Redis calls | denied locally |");
        println!("|---|---:|---:|---:|");
        for shortcut in [false, true] {
            let (checks, trips, local) = flood(&conn, shortcut, span).await;
            let label = if shortcut {
                "with the deny shortcut"
            } else {
                "without"
            };
            println!("| {label} | {checks} | {trips} | {local} |");
        }
    });
}
