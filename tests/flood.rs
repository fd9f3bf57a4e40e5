//! A flood of unique client ids against a limiter that is only ever asked
//! `allow_request` (never `sweep`): resident memory stays proportional to
//! the clients that are not idle, and hot clients tracked throughout keep
//! exact decisions. Each measurement runs in a child process of its own
//! (this test binary, run again for one algorithm), so that its
//! resident-memory readings see nothing else: memory another test freed
//! would otherwise be reused without showing as growth.
//!
//! `cargo test --test flood` runs a short flood in debug builds; the full
//! 5 M-client flood and the bytes-per-client figures of `docs/MEMORY.md`
//! run in release:
//!
//! ```text
//! cargo test --release --test flood -- --ignored --nocapture --test-threads 1
//! ```

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{BucketConfig, Fixed, Log, Model, Sliding, Subject, WindowConfig};
use tollgate::ManualClock;

/// Set in a child process: which algorithm it measures.
const CHILD: &str = "TOLLGATE_FLOOD_CHILD";

/// In the parent: runs `test` again in one child process per algorithm and
/// checks that each passed. In a child: `Some(index)` of its algorithm.
fn child_or_spawn(test: &str, algorithms: usize) -> Option<usize> {
    if let Ok(which) = std::env::var(CHILD) {
        return Some(which.parse().unwrap());
    }
    for which in 0..algorithms {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                test,
                "--exact",
                "--include-ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD, which.to_string())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        for line in stderr
            .lines()
            .filter(|l| l.starts_with("flood") || l.contains("B/client"))
        {
            eprintln!("{line}");
        }
        assert!(out.status.success(), "{test} #{which} failed:\n{stderr}");
    }
    None
}

/// The process's peak resident memory so far, bytes (`VmHWM`).
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Resident memory now, bytes (Linux: `/proc/self/statm`).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// New clients arrive one per `GAP` ns; a state is idle at most `HORIZON`
/// ns after its last admission, so about `HORIZON / GAP` = 20 000 clients
/// are not idle at any moment.
const GAP: u64 = 1_000;
const HORIZON: u64 = 20_000_000;
const LIVE: u64 = HORIZON / GAP;
const HOT: u64 = 8;

fn subjects() -> (BucketConfig, Sliding, Fixed, Log) {
    (
        BucketConfig {
            tokens: 1,
            per: HORIZON / 4,
            capacity: 4,
        },
        Sliding(WindowConfig {
            limit: 4,
            window: HORIZON / 2,
        }),
        Fixed(WindowConfig {
            limit: 4,
            window: HORIZON,
        }),
        Log(WindowConfig {
            limit: 4,
            window: HORIZON,
        }),
    )
}

/// Floods `clients` unique ids at one per `GAP` ns; every 97 steps one of
/// the hot clients asks too, checked against its exact model. Returns the
/// peak resident-memory growth, bytes.
fn flood<S: Subject>(subject: &S, clients: u64) -> u64 {
    let clock = ManualClock::new();
    let limiter = subject.limiter(clock.clone());
    let mut models: Vec<S::Model> = (0..HOT).map(|_| subject.model()).collect();
    let base = rss();
    let mut peak = 0;
    let started = Instant::now();
    for i in 0..clients {
        let now = i * GAP;
        clock.set(Duration::from_nanos(now));
        // Hot ids are 0..HOT; flood ids never repeat.
        assert!(limiter.allow_request(&(HOT + i)), "a new client at {now}");
        if i % 97 == 0 {
            let hot = (i / 97) % HOT;
            let want = models[hot as usize].admit(now, 1);
            assert_eq!(
                limiter.allow_request(&hot),
                want,
                "hot {hot} at {now}, {subject:?}"
            );
        }
        if i % 65_536 == 0 {
            let held = limiter.len() as u64;
            assert!(held <= 3 * LIVE, "{held} held at {i}, {subject:?}");
            peak = peak.max(rss().saturating_sub(base));
        }
    }
    let stats = limiter.stats();
    eprintln!(
        "flood {}: {clients} clients in {:.2?}; RSS growth peak {:.1} MiB, process peak {:.1} MiB; held at end {}; {stats:?}",
        std::any::type_name::<S::Algo>(),
        started.elapsed(),
        peak as f64 / (1 << 20) as f64,
        peak_rss() as f64 / (1 << 20) as f64,
        limiter.len(),
    );
    assert_eq!(stats.overflows, 0);
    peak
}

/// A generous bound proportional to the live clients: 1 KiB each (they
/// take about a tenth of that), plus 16 MiB for the allocator's and the
/// test harness's own growth. Without eviction the full flood would hold
/// 5 M clients, over 400 MiB.
const BOUND: u64 = 1024 * LIVE + (16 << 20);

fn flood_one(which: usize, clients: u64) {
    let (bucket, sliding, fixed, log) = subjects();
    let peak = match which {
        0 => flood(&bucket, clients),
        1 => flood(&sliding, clients),
        2 => flood(&fixed, clients),
        _ => flood(&log, clients),
    };
    assert!(
        peak <= BOUND,
        "peak RSS growth {peak} B over the bound {BOUND} B"
    );
}

/// The short flood, for every test run: each algorithm in a child process.
#[test]
fn a_flood_of_new_clients_stays_bounded() {
    let clients = if cfg!(debug_assertions) {
        200_000
    } else {
        1_000_000
    };
    if let Some(which) = child_or_spawn("a_flood_of_new_clients_stays_bounded", 4) {
        flood_one(which, clients);
    }
}

/// The issue's flood: 5 M unique ids per algorithm. Run in release (see
/// the module docs); in debug it takes a minute or two.
#[test]
#[ignore = "5 M clients per algorithm: run in release, see the module docs"]
fn five_million_new_clients_stay_bounded() {
    if let Some(which) = child_or_spawn("five_million_new_clients_stay_bounded", 4) {
        flood_one(which, 5_000_000);
    }
}

/// Bytes per client for each algorithm, by resident-memory growth over
/// 1 M clients that are all held (a frozen clock: no state goes idle), and
/// the memory a sweep gives back. The figures in `docs/MEMORY.md`.
#[test]
#[ignore = "a measurement: run in release, see the module docs"]
fn bytes_per_client() {
    const N: u64 = 1_000_000;
    fn measure<S: Subject>(subject: &S) {
        let clock = ManualClock::new();
        let limiter = subject
            .builder(clock.clone())
            .no_auto_sweep()
            .build()
            .unwrap();
        let base = rss();
        for id in 0..N {
            assert!(limiter.allow_request(&id));
        }
        let held = rss() - base;
        clock.set(Duration::from_secs(3_600));
        let swept = limiter.sweep();
        // Freed memory stays with the allocator for reuse: RSS need not fall.
        let after = rss().saturating_sub(base);
        // Reused by new clients: refilling the map grows RSS little. At the
        // sweep's reading: a clock set back before it would hold new
        // clients to the forgotten ones' idle instant (the memory guide).
        for id in N..2 * N {
            assert!(limiter.allow_request(&id));
        }
        let refilled = rss().saturating_sub(base);
        eprintln!(
            "{:<55} {:>6.1} B/client; swept {swept}: {:.1} MiB resident; refilled with 1 M new: {:.1} MiB",
            format!("{subject:?}"),
            held as f64 / N as f64,
            after as f64 / (1 << 20) as f64,
            refilled as f64 / (1 << 20) as f64
        );
    }
    let Some(which) = child_or_spawn("bytes_per_client", 5) else {
        return;
    };
    let (bucket, sliding, fixed, log) = subjects();
    match which {
        0 => measure(&bucket),
        1 => measure(&sliding),
        2 => measure(&fixed),
        3 => measure(&log),
        _ => measure(&Log(WindowConfig {
            limit: 100,
            window: HORIZON,
        })),
    }
}
