//! Concurrency stress tests, one generic suite run over every algorithm.
//!
//! Threads start together from a `Barrier`. Each test asserts an exact count
//! where the outcome is determined (a frozen clock), and the algorithm's
//! admission bound where it is not (a clock moving under the threads).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use common::{BucketConfig, Fixed, Model, Sliding, Subject, WindowConfig};
use tollgate::ManualClock;

const THREADS: usize = 8;

fn subjects() -> (BucketConfig, Sliding, Fixed) {
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
    )
}

/// Runs `f` for each algorithm's subject.
macro_rules! for_each_subject {
    ($f:ident) => {{
        let (bucket, sliding, fixed) = subjects();
        $f(&bucket);
        $f(&sliding);
        $f(&fixed);
    }};
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
