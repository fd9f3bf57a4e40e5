//! Measures leases ([`RedisBuilder::lease`]) against one call per check,
//! side by side in one run, alternating which goes first in each round:
//!
//! - **fleet, fastest bucket**: one hot client, 4 processes × 64 tasks,
//!   for `--secs` each, against a bucket of 2 000 000 refilled at
//!   1 000 000 a second (one unit a µs, the finest a script counts): one
//!   call per check never spends it, leases do;
//! - **fleet, small bucket**: the same against a bucket of 2 000 refilled
//!   at 20 000 a second, which both outrun;
//! - for both: the admissions against the exact bound (`capacity + rate ×
//!   span`, the span from the first process's start to the last one's
//!   end), over-admitted (beyond it, which must be 0) and the shortfall,
//!   beside the documented bound on it;
//! - **uniform**: one process, 64 tasks, 100 000 clients drawn uniformly,
//!   the fastest bucket (never spent).
//!
//! Round trips per check are Redis's own count, from `INFO commandstats`.
//! Prints the medians over the rounds, and each round's figures.
//!
//! ```text
//! cargo build --release --features redis --example redis_lease
//! ./target/release/examples/redis_lease                     # 5 rounds of 2 s
//! ./target/release/examples/redis_lease --rounds 3 --secs 1
//! ./target/release/examples/redis_lease --only fleet        # or uniform
//! LEASE_DEBUG=1 ./target/release/examples/redis_lease       # and each process's RedisStats
//! ```
//!
//! Not a timed test: it asserts only that every check got an answer from
//! Redis and that no process admitted beyond the exact bound.
//!
//! [`RedisBuilder::lease`]: tollgate::redis::RedisBuilder::lease

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionManager;
use tollgate::redis::{FailPolicy, Lease, RedisLimiter};
use tollgate::TokenBucket;

#[path = "support/local_redis.rs"]
mod local_redis;
use local_redis::{redis_url, script_calls};
#[path = "support/figures.rs"]
mod figures;
use figures::row;

const TASKS: u64 = 64;
const PROCESSES: usize = 4;
/// The most units a lease holds: the default, a tenth of the capacity.
fn max_units(capacity: u64) -> u64 {
    capacity / 10
}

/// A lease's horizon.
const HORIZON: Duration = Duration::from_millis(20);
/// The spent cell's bucket: capacity, and tokens a second.
const SPENT: (u64, u64) = (2_000, 20_000);

/// A token bucket of `capacity`, `rate` a second, leasing if `lease`.
fn limiter(
    conn: &ConnectionManager,
    prefix: &str,
    (capacity, rate): (u64, u64),
    lease: bool,
) -> RedisLimiter<TokenBucket> {
    let builder = TokenBucket::builder()
        .rate(rate, Duration::from_secs(1))
        .capacity(capacity)
        .redis(conn.clone(), prefix)
        .timeout(Duration::from_secs(5))
        .fail_policy(FailPolicy::FailClosed)
        .no_deny_shortcut()
        // Leases against one call per check: no coalescing either way.
        .coalesce(false);
    if lease {
        builder.lease(Lease::new(HORIZON)).build().unwrap()
    } else {
        builder.build().unwrap()
    }
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// What one process did: checks, admitted, its span (Unix µs), and the
/// units its leases lapsed.
#[derive(Debug, Default, Clone, Copy)]
struct Ran {
    checks: u64,
    admitted: u64,
    start: u64,
    end: u64,
    lapsed: u64,
}

/// 64 tasks checking for `span`, each check of client `0` (`clients ==
/// 1`) or of one drawn uniformly from `clients`.
async fn hammer(limiter: RedisLimiter<TokenBucket>, clients: u64, span: Duration) -> Ran {
    let start = unix_us();
    let started = Instant::now();
    let handles: Vec<_> = (0..TASKS)
        .map(|t| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut x = 0x9E37_79B9_7F4A_7C15_u64 ^ (t + 1);
                let (mut n, mut admitted) = (0u64, 0u64);
                while started.elapsed() < span {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let client = if clients == 1 { 0 } else { x % clients };
                    let d = limiter.check(&client).await.expect("Redis answers");
                    admitted += u64::from(d.is_allowed());
                    n += 1;
                    // A check answered in process never yields: let the
                    // other tasks and the calls for more run.
                    if n % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                (n, admitted)
            })
        })
        .collect();
    let mut ran = Ran {
        start,
        ..Ran::default()
    };
    for h in handles {
        let (n, a) = h.await.unwrap();
        ran.checks += n;
        ran.admitted += a;
    }
    ran.end = unix_us();
    let stats = limiter.stats();
    assert_eq!(
        stats.errors + stats.timeouts + stats.fail_closed,
        0,
        "{stats:?}"
    );
    ran.lapsed = stats.lease_lapsed;
    if std::env::var_os("LEASE_DEBUG").is_some() {
        eprintln!("{stats:?}");
    }
    ran
}

/// A child process: `--child URL PREFIX CAPACITY RATE LEASE SECS`.
fn child(mut args: impl Iterator<Item = String>) {
    let mut next = || args.next().expect("child arguments");
    let (url, prefix) = (next(), next());
    let capacity: u64 = next().parse().unwrap();
    let rate: u64 = next().parse().unwrap();
    let lease = next() == "lease";
    let secs: f64 = next().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let ran = rt.block_on(async {
        let conn = ConnectionManager::new(redis::Client::open(url.as_str()).unwrap())
            .await
            .unwrap();
        let l = limiter(&conn, &prefix, (capacity, rate), lease);
        hammer(l, 1, Duration::from_secs_f64(secs)).await
    });
    println!(
        "RAN {} {} {} {} {}",
        ran.checks, ran.admitted, ran.start, ran.end, ran.lapsed
    );
}

/// The fleet: `PROCESSES` children on one client; their sum, and the
/// round trips per check.
fn fleet(url: &str, prefix: &str, quota: (u64, u64), lease: bool, secs: f64) -> (Ran, f64) {
    let exe = std::env::current_exe().unwrap();
    let before = script_calls(url);
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .arg("--child")
                .args([url, prefix, &quota.0.to_string(), &quota.1.to_string()])
                .arg(if lease { "lease" } else { "each" })
                .arg(secs.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut sum = Ran {
        start: u64::MAX,
        ..Ran::default()
    };
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "a child failed");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find(|l| l.starts_with("RAN ")).unwrap();
        let f: Vec<u64> = line[4..].split(' ').map(|v| v.parse().unwrap()).collect();
        sum.checks += f[0];
        sum.admitted += f[1];
        sum.start = sum.start.min(f[2]);
        sum.end = sum.end.max(f[3]);
        sum.lapsed += f[4];
    }
    let trips = script_calls(url) - before;
    (sum, trips as f64 / sum.checks as f64)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut rounds, mut secs, mut only) = (5usize, 2.0f64, String::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--child" => return child(args),
            "--rounds" => {
                rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--rounds N")
            }
            "--secs" => secs = args.next().and_then(|v| v.parse().ok()).expect("--secs S"),
            "--only" => only = args.next().expect("--only fleet|uniform"),
            other => panic!("unknown argument {other}"),
        }
    }
    let (url, _server) = redis_url("lease");
    let never = (2_000_000, 1_000_000);
    // [fastest, small] × [each, lease]: (checks/s, round trips/check).
    let mut cells: [[Vec<(f64, f64)>; 2]; 2] = Default::default();
    let mut exactness = Vec::new();
    let mut uniform: [Vec<(f64, f64)>; 2] = Default::default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    for round in 0..rounds {
        println!("round {}", round + 1);
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for (cell, quota) in [(0, never), (1, SPENT)] {
            if only == "uniform" {
                break;
            }
            for lease in order {
                let prefix = format!("l{round}-{cell}-{lease}");
                let (ran, trips) = fleet(&url, &prefix, quota, lease, secs);
                let span_s = (ran.end - ran.start) as f64 / 1e6;
                let rate = ran.checks as f64 / secs;
                println!(
                    "  {} lease={lease}: {rate:.0} checks/s, {trips:.5} round trips per check, {} admitted",
                    ["fastest bucket", "small bucket"][cell],
                    ran.admitted
                );
                cells[cell][usize::from(lease)].push((rate, trips));
                {
                    let bound = quota.0 + (quota.1 as f64 * span_s) as u64;
                    let over = ran.admitted.saturating_sub(bound);
                    let short = bound.saturating_sub(ran.admitted);
                    println!(
                        "    exact bound {bound} over {span_s:.3} s: over-admitted {over}, short {short} (lapsed {})",
                        ran.lapsed
                    );
                    assert_eq!(over, 0, "beyond the exact bound");
                    exactness.push((cell, lease, bound, ran.admitted, short, ran.lapsed));
                }
            }
        }
        if only == "fleet" {
            continue;
        }
        rt.block_on(async {
            let conn = ConnectionManager::new(redis::Client::open(url.as_str()).unwrap())
                .await
                .unwrap();
            for lease in order {
                let prefix = format!("u{round}-{lease}");
                let l = limiter(&conn, &prefix, never, lease);
                let before = script_calls(&url);
                let ran = hammer(l, 100_000, Duration::from_secs_f64(secs)).await;
                let trips = (script_calls(&url) - before) as f64 / ran.checks as f64;
                let rate = ran.checks as f64 / secs;
                println!(
                    "  uniform lease={lease}: {rate:.0} checks/s, {trips:.4} round trips per check"
                );
                uniform[usize::from(lease)].push((rate, trips));
            }
        });
    }
    println!();
    println!("| one hot client, {PROCESSES} processes × {TASKS} tasks | one call per check: checks/s | leases: checks/s | ratio | round trips per check (one call each / leases) |");
    println!("|---|---:|---:|---:|---:|");
    for (cell, name) in [
        "bucket of 2 000 000, 1 000 000/s",
        "bucket of 2 000, 20 000/s",
    ]
    .iter()
    .enumerate()
    {
        println!("{}", row(name, &cells[cell][0], &cells[cell][1]));
    }
    println!(
        "{}",
        row(
            &format!("100 000 uniform clients, 1 process × {TASKS} tasks"),
            &uniform[0],
            &uniform[1]
        )
    );
    println!();
    let held = |(capacity, rate): (u64, u64)| {
        PROCESSES as u64 * max_units(capacity).max(HORIZON.as_micros() as u64 * rate / 1_000_000)
    };
    println!(
        "exactness (cell, lease, exact bound, admitted, short, lapsed); the documented bound on the shortfall, P × max(max_units, a horizon's refill) held plus what lapsed: {} (fastest), {} (small)",
        held(never),
        held(SPENT)
    );
    for e in &exactness {
        println!("  {e:?}");
    }
}
