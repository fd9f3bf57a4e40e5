//! tollgate's Redis token bucket against throttle-kit 2.1.2's Redis GCRA,
//! side by side on one `redis-server`: both admit every check (a quota of
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
    Tollgate,
    ThrottleKit,
}

/// The server's own time per script call (µs), since its last reset.
fn server_usec_per_call(url: &str) -> f64 {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .and_then(|l| l.split("usec_per_call=").nth(1))
        .and_then(|v| v.split(',').next())
        .map_or(0.0, |v| v.parse().unwrap())
}

fn reset_stats(url: &str) {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
}

/// Checks per second of `lib` with `tasks` tasks for `secs`, and the
/// server's µs per call.
async fn cell(lib: Lib, url: &str, tasks: usize, secs: f64, round: usize) -> (f64, f64) {
    let keys: Vec<String> = (0..1_000).map(|i| format!("r{round}-{i}")).collect();
    let keys = Arc::new(keys);
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    match lib {
        Lib::Tollgate => {
            let conn = redis::aio::ConnectionManager::new(redis::Client::open(url).unwrap())
                .await
                .unwrap();
            let limiter = tollgate::TokenBucket::builder()
                .rate(1_000_000, Duration::from_secs(3_600))
                .redis(conn, "tg")
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
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await.unwrap();
    }
    (n as f64 / took, server_usec_per_call(url))
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
            let (rate, usec) = rt.block_on(cell(lib, &url, tasks, secs, 0));
            println!("{lib:?} tasks {tasks}: {rate:.0} checks/s, server {usec:.2} µs/call");
        }
        return;
    }
    println!("| tasks | round | tollgate checks/s | throttle-kit checks/s | ratio | server µs/call (tollgate / throttle-kit) |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for &tasks in &task_counts {
        let mut ratios = Vec::new();
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let order = if round % 2 == 0 {
                [Lib::Tollgate, Lib::ThrottleKit]
            } else {
                [Lib::ThrottleKit, Lib::Tollgate]
            };
            let mut got = [0.0; 2];
            let mut usec = [0.0; 2];
            for lib in order {
                let (rate, us) = rt.block_on(cell(lib, &url, tasks, secs, round));
                got[usize::from(lib == Lib::ThrottleKit)] = rate;
                usec[usize::from(lib == Lib::ThrottleKit)] = us;
            }
            println!(
                "| {tasks} | {round} | {:.0} | {:.0} | {:.2} | {:.2} / {:.2} |",
                got[0],
                got[1],
                got[0] / got[1],
                usec[0],
                usec[1]
            );
            ours.push(got[0]);
            theirs.push(got[1]);
            ratios.push(got[0] / got[1]);
        }
        println!(
            "| {tasks} | median | {:.0} | {:.0} | {:.2} | |",
            median(ours),
            median(theirs),
            median(ratios)
        );
    }
}
