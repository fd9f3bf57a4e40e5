//! The oracle's concurrent half: the public operations from several threads
//! with real interleavings, and the exact bound checked over the admissions
//! each client received in every span of readings.
//!
//! The clock moves in phases: within a phase every thread sees one
//! reading, and between phases the driver moves it forward. In each phase
//! four threads race checks of a few tracked clients (costs 1 to 3), peeks,
//! bookings given back or kept, sweeps, removals of one-off clients and
//! floods of new ones (which set off the pass and rebuilds). Afterwards,
//! for every tracked client and every span of phases `[i, j]`, the units
//! admitted are at most what the exact algorithm allows over that span:
//!
//! - token bucket: `capacity + ⌊rate · (tⱼ − tᵢ)⌋`;
//! - fixed window and sliding window counter: `limit` per aligned window
//!   the span touches;
//! - sliding window log: `limit` per window length, `⌈(tⱼ − tᵢ + 1) / W⌉`.

// Plain `cargo test` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use tollgate::{
    Algorithm, Builder, FixedWindow, Limiter, ManualClock, SlidingWindowCounter, SlidingWindowLog,
    TokenBucket,
};

const THREADS: usize = 4;
const PHASES: usize = 48;
const TRACKED: u64 = 3;
const MS: u64 = 1_000_000;

/// The exact bound on the units a client can be admitted over readings
/// `[a, b]`.
type Bound = fn(u64, u64) -> u64;

/// A small deterministic generator (xorshift), one per thread and round.
struct Draw(u64);

impl Draw {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn run<A: Algorithm>(name: &str, builder: impl Fn() -> Builder<A>, bound: Bound, seed: u64) {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_000));
    let limiter: Arc<Limiter<A, u64, ManualClock>> = Arc::new(
        builder()
            .key_type::<u64>()
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    // admitted[phase][client], in units.
    let admitted: Arc<Vec<Vec<AtomicU64>>> = Arc::new(
        (0..PHASES)
            .map(|_| (0..TRACKED).map(|_| AtomicU64::new(0)).collect())
            .collect(),
    );
    let start = Arc::new(Barrier::new(THREADS + 1));
    let done = Arc::new(Barrier::new(THREADS + 1));
    let fresh = Arc::new(AtomicU64::new(1 << 40));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (limiter, admitted, start, done, fresh) = (
                Arc::clone(&limiter),
                Arc::clone(&admitted),
                Arc::clone(&start),
                Arc::clone(&done),
                Arc::clone(&fresh),
            );
            thread::spawn(move || {
                let mut draw = Draw(seed.wrapping_mul(31).wrapping_add(t as u64 + 1) | 1);
                for phase in 0..PHASES {
                    start.wait();
                    for _ in 0..40 {
                        match draw.next(20) {
                            0..=11 => {
                                let (client, cost) = (draw.next(TRACKED), 1 + draw.next(3));
                                if let Ok(d) = limiter.check_n(&client, cost) {
                                    if d.is_allowed() {
                                        admitted[phase][client as usize]
                                            .fetch_add(cost, Ordering::Relaxed);
                                    }
                                }
                            }
                            12 => {
                                let _ = limiter.peek(&draw.next(TRACKED));
                            }
                            13 => {
                                let _ = limiter.sweep();
                            }
                            14 | 15 => {
                                // A one-off client, then gone.
                                let id = fresh.fetch_add(1, Ordering::Relaxed);
                                let _ = limiter.check(&id);
                                let _ = limiter.remove(&id);
                            }
                            _ => {
                                // A flood of new clients.
                                for _ in 0..(20 + draw.next(200)) {
                                    let id = fresh.fetch_add(1, Ordering::Relaxed);
                                    let _ = limiter.check(&id);
                                }
                            }
                        }
                    }
                    done.wait();
                }
            })
        })
        .collect();
    let mut readings = Vec::with_capacity(PHASES);
    let mut draw = Draw(seed | 1);
    for _ in 0..PHASES {
        readings.push(clock_now(&clock));
        start.wait();
        done.wait();
        // Forward by up to about two windows, sometimes not at all.
        let step = match draw.next(4) {
            0 => 0,
            1 => draw.next(50) * MS,
            _ => draw.next(2_500) * MS,
        };
        clock.advance(Duration::from_nanos(step));
    }
    for w in workers {
        w.join().unwrap();
    }
    for client in 0..TRACKED as usize {
        for i in 0..PHASES {
            let mut units = 0;
            for j in i..PHASES {
                units += admitted[j][client].load(Ordering::Relaxed);
                let most = bound(readings[i], readings[j]);
                assert!(
                    units <= most,
                    "{name} (seed {seed}): client {client} admitted {units} units over \
                     phases {i}..={j} (readings {}..={}), the exact bound is {most}",
                    readings[i],
                    readings[j]
                );
            }
        }
    }
}

fn clock_now(clock: &ManualClock) -> u64 {
    use tollgate::Clock;
    clock.now_nanos()
}

/// 10 a second, bursts of 10; windows of 1 s for 10.
const RATE: u64 = 10;
const SEC: u64 = 1_000_000_000;

fn bucket_bound(a: u64, b: u64) -> u64 {
    RATE + (b - a) * RATE / SEC
}

fn window_bound(a: u64, b: u64) -> u64 {
    // Windows start on the Unix epoch's multiples; a ManualClock reads 0 at
    // the Unix epoch's 0.
    RATE * (b / SEC - a / SEC + 1)
}

fn log_bound(a: u64, b: u64) -> u64 {
    RATE * (b - a + 1).div_ceil(SEC)
}

fn seeds() -> u64 {
    std::env::var("ORACLE_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2)
}

#[test]
fn racing_operations_keep_every_token_bucket_client_within_the_exact_bound() {
    for seed in 1..=seeds() {
        run(
            "token bucket",
            || TokenBucket::builder().rate(RATE, Duration::from_secs(1)),
            bucket_bound,
            seed,
        );
    }
}

#[test]
fn racing_operations_keep_every_fixed_window_client_within_the_exact_bound() {
    for seed in 1..=seeds() {
        run(
            "fixed window",
            || {
                FixedWindow::builder()
                    .limit(RATE)
                    .window(Duration::from_secs(1))
            },
            window_bound,
            seed,
        );
    }
}

#[test]
fn racing_operations_keep_every_sliding_counter_client_within_the_exact_bound() {
    for seed in 1..=seeds() {
        run(
            "sliding window counter",
            || {
                SlidingWindowCounter::builder()
                    .limit(RATE)
                    .window(Duration::from_secs(1))
            },
            window_bound,
            seed,
        );
    }
}

#[test]
fn racing_operations_keep_every_sliding_log_client_within_the_exact_bound() {
    for seed in 1..=seeds() {
        run(
            "sliding window log",
            || {
                SlidingWindowLog::builder()
                    .limit(RATE)
                    .window(Duration::from_secs(1))
            },
            log_bound,
            seed,
        );
    }
}
