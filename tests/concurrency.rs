//! Concurrency stress tests, one generic suite run over every algorithm.
//!
//! Threads start together from a `Barrier`. Each test asserts an exact count
//! where the outcome is determined (a frozen clock), and the algorithm's
//! admission bound where it is not (a clock moving under the threads).

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

#[macro_use]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use common::{BucketConfig, Fixed, Log, Model, Sliding, Subject, WindowConfig};
use tollgate::ManualClock;

const THREADS: usize = 8;

fn subjects() -> (BucketConfig, Sliding, Fixed, Log) {
    let window = WindowConfig {
        limit: 50,
        window: 1_000_000,
    };
    (
        BucketConfig {
            tokens: 1,
            per: 1_000,
            capacity: 50,
        },
        Sliding(window),
        Fixed(window),
        Log(window),
    )
}

/// Eight threads race on one hot client with a frozen clock: exactly the
/// capacity is admitted, in every repetition.
fn frozen_hot_client_admits_exactly_capacity<S: Subject>(subject: &S) {
    let capacity = subject.model().capacity();
    for round in 0..200 {
        let limiter = subject.limiter(ManualClock::new());
        let barrier = Barrier::new(THREADS);
        let admitted = AtomicU64::new(0);
        thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    barrier.wait();
                    let mine = (0..capacity).filter(|_| limiter.allow_request(&7)).count();
                    admitted.fetch_add(mine as u64, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(
            admitted.into_inner(),
            capacity,
            "round {round}, {subject:?}"
        );
    }
}

/// Threads hammer one client while another thread moves the clock: the
/// admissions never exceed what the algorithm allows over the elapsed time.
fn moving_clock_never_over_admits<S: Subject>(subject: &S) {
    for round in 0..20 {
        let clock = ManualClock::new();
        let limiter = subject.limiter(clock.clone());
        let barrier = Barrier::new(THREADS + 1);
        let admitted = AtomicU64::new(0);
        thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    barrier.wait();
                    let mut mine = 0;
                    for _ in 0..20_000 {
                        mine += u64::from(limiter.allow_request(&7));
                    }
                    admitted.fetch_add(mine, Ordering::Relaxed);
                });
            }
            s.spawn(|| {
                barrier.wait();
                for step in 0..2_000u64 {
                    clock.advance(Duration::from_nanos(step % 7 * 97));
                    thread::yield_now();
                }
            });
        });
        let elapsed = tollgate::Clock::now_nanos(&clock);
        let admitted = admitted.into_inner();
        let bound = subject.admission_bound(elapsed);
        assert!(
            admitted <= bound,
            "round {round}: {admitted} > {bound} over {elapsed} ns, {subject:?}"
        );
        assert!(
            admitted >= subject.model().capacity(),
            "round {round}: starved, {subject:?}"
        );
    }
}

/// Many clients checked from many threads at once stay independent: each
/// gets exactly its own capacity under a frozen clock.
fn many_clients_stay_independent<S: Subject>(subject: &S) {
    const CLIENTS: u64 = 2_000;
    let capacity = subject.model().capacity();
    let limiter = subject.limiter(ManualClock::new());
    let barrier = Barrier::new(THREADS);
    let per_client: Vec<AtomicU64> = (0..CLIENTS).map(|_| AtomicU64::new(0)).collect();
    thread::scope(|s| {
        for t in 0..THREADS as u64 {
            let (limiter, barrier, per_client) = (&limiter, &barrier, &per_client);
            s.spawn(move || {
                barrier.wait();
                // Each thread walks the clients from its own offset, so that
                // first requests race as well as later ones.
                for i in 0..CLIENTS * 2 {
                    let client = (i + t * 251) % CLIENTS;
                    if limiter.allow_request(&client) {
                        per_client[client as usize].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let expected = capacity.min(2 * THREADS as u64);
    for (client, count) in per_client.iter().enumerate() {
        assert_eq!(
            count.load(Ordering::Relaxed),
            expected,
            "client {client}, {subject:?}"
        );
    }
    assert_eq!(limiter.len(), CLIENTS as usize);
}

/// Threads race with costs of 1, 2 and 3 on one client under a frozen
/// clock; then one thread drains what is left. Exactly the capacity is
/// admitted in total: a multi-unit claim that raced short gave back every
/// unit it held.
fn mixed_costs_lose_and_double_nothing<S: Subject>(subject: &S) {
    let capacity = subject.model().capacity();
    for round in 0..100 {
        let limiter = subject.limiter(ManualClock::new());
        let barrier = Barrier::new(THREADS);
        let admitted = AtomicU64::new(0);
        thread::scope(|s| {
            for t in 0..THREADS as u64 {
                let (limiter, barrier, admitted) = (&limiter, &barrier, &admitted);
                s.spawn(move || {
                    barrier.wait();
                    for i in 0..capacity {
                        let cost = 1 + (t + i) % 3;
                        if limiter.check_n(&7, cost).unwrap().is_allowed() {
                            admitted.fetch_add(cost, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let mut total = admitted.into_inner();
        while limiter.allow_request(&7) {
            total += 1;
        }
        assert_eq!(total, capacity, "round {round}, {subject:?}");
    }
}

#[test]
fn mixed_costs() {
    for_each_subject!(mixed_costs_lose_and_double_nothing);
}

#[test]
fn frozen_hot_client() {
    for_each_subject!(frozen_hot_client_admits_exactly_capacity);
}

#[test]
fn moving_clock() {
    for_each_subject!(moving_clock_never_over_admits);
}

#[test]
fn many_clients() {
    for_each_subject!(many_clients_stay_independent);
}

/// The log's last free slot: `limit − 1` are taken, and eight threads race
/// for the one left. Exactly one wins, every time.
#[test]
fn eight_threads_race_for_the_last_log_slot() {
    let (_, _, _, log) = subjects();
    let limit = log.0.limit;
    for round in 0..300 {
        let limiter = log.limiter(ManualClock::new());
        assert!(limiter.check_n(&7, limit - 1).unwrap().is_allowed());
        let barrier = Barrier::new(THREADS);
        let winners = AtomicU64::new(0);
        thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    barrier.wait();
                    winners.fetch_add(u64::from(limiter.allow_request(&7)), Ordering::Relaxed);
                });
            }
        });
        assert_eq!(winners.into_inner(), 1, "round {round}");
    }
}

/// A full window expires while threads race: they hammer a client whose
/// quota was spent at time 0 while another thread moves the clock onto the
/// boundary at which all of it comes back. Exactly one quota's worth is
/// admitted: none before the boundary, all of it after.
fn boundary_crossed_mid_race<S: Subject>(subject: &S, boundary: u64) {
    let capacity = subject.model().capacity();
    for round in 0..50 {
        let clock = ManualClock::new();
        let limiter = subject.limiter(clock.clone());
        assert!(limiter.check_n(&7, capacity).unwrap().is_allowed());
        clock.set(Duration::from_nanos(boundary - 1));
        let barrier = Barrier::new(THREADS + 1);
        let admitted = AtomicU64::new(0);
        thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    barrier.wait();
                    let mut mine = 0;
                    // Until the boundary is seen, then as many tries again.
                    while tollgate::Clock::now_nanos(&clock) < boundary {
                        mine += u64::from(limiter.allow_request(&7));
                        std::hint::spin_loop();
                    }
                    for _ in 0..capacity {
                        mine += u64::from(limiter.allow_request(&7));
                    }
                    admitted.fetch_add(mine, Ordering::Relaxed);
                });
            }
            s.spawn(|| {
                barrier.wait();
                thread::yield_now();
                clock.set(Duration::from_nanos(boundary));
            });
        });
        assert_eq!(
            admitted.into_inner(),
            capacity,
            "round {round}, {subject:?}"
        );
    }
}

#[test]
fn window_boundary_crossed_while_racing() {
    let (_, _, fixed, log) = subjects();
    boundary_crossed_mid_race(&log, log.0.window);
    boundary_crossed_mid_race(&fixed, fixed.0.window);
}

/// A client id whose `Hash` stalls on its `n`-th call (counted over every
/// key sharing the gate): the test's way to hold a thread inside the insert
/// path, between making a new client's state and inserting it (the insert
/// hashes the key).
#[derive(Clone)]
struct Gated {
    id: u64,
    gate: std::sync::Arc<Gate>,
}

struct Gate {
    /// Calls left until the stalling one; 0: disarmed.
    countdown: AtomicU64,
    stalled: Barrier,
    released: Barrier,
}

impl PartialEq for Gated {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for Gated {}

impl std::hash::Hash for Gated {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let gate = &self.gate;
        let left = gate
            .countdown
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if left == Ok(1) {
            gate.stalled.wait();
            gate.released.wait();
        }
        self.id.hash(state);
    }
}

/// A new client's first request is held in its lookup (its key's one
/// `Hash`: the insert reuses the lookup's hash) while the quota changes:
/// the client must end under the new quota, not under the table the change
/// has retired. The narrower window, between the making of its state and
/// its insert, runs no user code a test could hold it in; the loom model of
/// a quota change racing a new client's birth covers it.
#[test]
fn a_client_born_across_a_quota_change_is_held_to_the_new_quota() {
    use tollgate::TokenBucket;
    let limiter = TokenBucket::builder()
        .rate(10, Duration::from_secs(1))
        .reconfigurable()
        .key_type::<Gated>()
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let gate = std::sync::Arc::new(Gate {
        countdown: AtomicU64::new(1),
        stalled: Barrier::new(2),
        released: Barrier::new(2),
    });
    let key = Gated {
        id: 1,
        gate: std::sync::Arc::clone(&gate),
    };
    thread::scope(|s| {
        let first = s.spawn(|| limiter.check(&key));
        gate.stalled.wait();
        limiter
            .set_quota(0, TokenBucket::builder().rate(20, Duration::from_secs(1)))
            .unwrap();
        gate.released.wait();
        let first = first.join().unwrap();
        assert!(first.is_allowed());
        assert_eq!((first.limit(), first.remaining()), (20, 19), "{first:?}");
    });
    assert_eq!(limiter.peek(&key).limit(), 20);
    assert_eq!(limiter.len(), 1);
}
