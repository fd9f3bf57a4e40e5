//! tollgate's Redis token bucket against throttle-kit 2.1.2's Redis GCRA,
//! side by side on one `redis-server`, tollgate both one call per check and
//! coalesced: all admit every check (a quota of
//! a million per hour over 1 000 keys), so each check is one script that
//! reads and writes one key. Tasks 8 and 64 on a 2-worker tokio runtime;
//! in each round both run, in alternating order, for the same time.
//!
//! ```text
//! cargo run --release -- [--rounds 5] [--secs 1.0] [--tasks 8,64]   # starts its own redis-server
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --release
//! ```

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server() -> (String, Option<Server>) {
    if let Ok(url) = std::env::var("REDIS_URL") {
        return (url, None);
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server on PATH (or set REDIS_URL)");
    let server = Server(child);
    let url = format!("redis://127.0.0.1:{port}/");
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .is_err()
    {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (url, Some(server))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Lib {
    /// One call per check.
    Tollgate,
    /// Coalesced: the checks made while a call is in flight share the next.
    Coalesced,
    ThrottleKit,
}

const LIBS: [Lib; 3] = [Lib::Tollgate, Lib::Coalesced, Lib::ThrottleKit];

/// A figure of `EVALSHA` in Redis's `INFO commandstats` since its last
/// reset: `calls`, or `usec_per_call` (the server's own µs per call).
fn evalsha_stat(url: &str, field: &str) -> f64 {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .and_then(|l| {
            l.split(',')
                .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))
        })
        .map_or(0.0, |v| v.parse().unwrap())
}

fn reset_stats(url: &str) {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
}

/// One cell's figures.
#[derive(Clone, Copy, Default)]
struct Cell {
    /// Checks per second.
    rate: f64,
    /// The server's µs per script call.
    usec: f64,
    /// Script calls per check, from Redis's own counts.
    calls_per_check: f64,
}

/// `lib` with `tasks` tasks for `secs`.
async fn cell(lib: Lib, url: &str, tasks: usize, secs: f64, round: usize) -> Cell {
    let keys: Vec<String> = (0..1_000).map(|i| format!("r{round}-{i}")).collect();
    let keys = Arc::new(keys);
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    match lib {
        Lib::Tollgate | Lib::Coalesced => {
            let conn = redis::aio::ConnectionManager::new(redis::Client::open(url).unwrap())
                .await
                .unwrap();
            let limiter = tollgate::TokenBucket::builder()
                .rate(1_000_000, Duration::from_secs(3_600))
                .redis(conn, "tg")
                .coalesce(lib == Lib::Coalesced)
                .build()
                .unwrap();
            // Load the script before the clock starts.
            assert!(limiter.check("warm").await.unwrap().is_allowed());
            for t in 0..tasks {
                let (limiter, keys, stop, count) =
                    (limiter.clone(), keys.clone(), stop.clone(), count.clone());
                handles.push(tokio::spawn(async move {
                    let mut i = t;
                    while !stop.load(Ordering::Relaxed) {
                        let d = limiter.check(&keys[i % keys.len()]).await.unwrap();
                        assert!(d.is_allowed());
                        count.fetch_add(1, Ordering::Relaxed);
                        i += tasks;
                    }
                }));
            }
        }
        Lib::ThrottleKit => {
            let backend = throttle_kit::RedisBackend::connect(url).await.unwrap();
            let quota = throttle_kit::Quota::per_hour(1_000_000);
            let limiter = throttle_kit::RateLimiter::new(quota, backend);
            assert!(limiter.check("tk:warm").await.allowed);
            for t in 0..tasks {
                let (limiter, keys, stop, count) =
                    (limiter.clone(), keys.clone(), stop.clone(), count.clone());
                handles.push(tokio::spawn(async move {
                    let mut i = t;
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("tk:{}", keys[i % keys.len()]);
                        assert!(limiter.check(&key).await.allowed);
                        count.fetch_add(1, Ordering::Relaxed);
                        i += tasks;
                    }
                }));
            }
        }
    }
    reset_stats(url);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let n = count.load(Ordering::Relaxed);
    let took = started.elapsed().as_secs_f64();
    let calls = evalsha_stat(url, "calls");
    let usec = evalsha_stat(url, "usec_per_call");
    let done = count.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await.unwrap();
    }
    Cell {
        rate: n as f64 / took,
        usec,
        calls_per_check: calls / done.max(1) as f64,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut rounds = 5;
    let mut secs = 1.0;
    let mut task_counts = vec![8, 64];
    let mut only: Option<Lib> = None;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rounds" => rounds = it.next().unwrap().parse().unwrap(),
            "--secs" => secs = it.next().unwrap().parse().unwrap(),
            "--tasks" => {
                task_counts = it
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|t| t.parse().unwrap())
                    .collect()
            }
            "--only" => {
                only = Some(match it.next().unwrap().as_str() {
                    "tollgate" => Lib::Tollgate,
                    "coalesced" => Lib::Coalesced,
                    "throttle-kit" => Lib::ThrottleKit,
                    other => panic!("unknown library {other}"),
                })
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let (url, _server) = start_server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if let Some(lib) = only {
        // One library alone (for an instruction count under callgrind).
        for &tasks in &task_counts {
            let c = rt.block_on(cell(lib, &url, tasks, secs, 0));
            println!(
                "{lib:?} tasks {tasks}: {:.0} checks/s, server {:.2} µs/call, {:.3} calls/check",
                c.rate, c.usec, c.calls_per_check
            );
        }
        return;
    }
    println!("| tasks | round | one call each: checks/s | coalesced: checks/s | throttle-kit: checks/s | one call each / throttle-kit | coalesced / throttle-kit | server µs/call (one each / coalesced / throttle-kit) | script calls per check (one each / coalesced / throttle-kit) |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &tasks in &task_counts {
        let mut rates: [Vec<f64>; 3] = Default::default();
        let mut ratios: [Vec<f64>; 2] = Default::default();
        for round in 0..rounds {
            // Each round runs the three in another order.
            let mut order = LIBS;
            order.rotate_left(round % 3);
            let mut got = [Cell::default(); 3];
            for lib in order {
                let at = LIBS.iter().position(|&l| l == lib).unwrap();
                got[at] = rt.block_on(cell(lib, &url, tasks, secs, round));
            }
            println!(
                "| {tasks} | {round} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} / {:.2} / {:.2} | {:.3} / {:.3} / {:.3} |",
                got[0].rate,
                got[1].rate,
                got[2].rate,
                got[0].rate / got[2].rate,
                got[1].rate / got[2].rate,
                got[0].usec,
                got[1].usec,
                got[2].usec,
                got[0].calls_per_check,
                got[1].calls_per_check,
                got[2].calls_per_check,
            );
            for (at, c) in got.iter().enumerate() {
                rates[at].push(c.rate);
            }
            ratios[0].push(got[0].rate / got[2].rate);
            ratios[1].push(got[1].rate / got[2].rate);
        }
        let [a, b, c] = rates;
        let [r0, r1] = ratios;
        println!(
            "| {tasks} | median | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | | |",
            median(a),
            median(b),
            median(c),
            median(r0),
            median(r1)
        );
    }
}
