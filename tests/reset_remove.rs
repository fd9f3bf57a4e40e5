//! `reset` and `remove` against the exact models, and racing checks.
//!
//! After a reset or a removal, a client must decide exactly as a fresh
//! model would; every other client is untouched; `len()` counts exactly the
//! clients held. Under concurrent checks on a frozen clock, a reset or a
//! removal is one point in time: every admission lands wholly before it
//! (and is forgotten with the state) or wholly after it (on the fresh
//! state), so no admission is lost or doubled beyond that.

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use common::strategies::{bucket, window, SEC};
use common::{BucketConfig, Fixed, Log, Model, Sliding, Subject, WindowConfig};
use proptest::prelude::*;
use tollgate::{ManualClock, Overflow};

#[derive(Clone, Copy, Debug)]
enum Op {
    Check { client: u64, cost: u64 },
    Peek { client: u64, cost: u64 },
    Reset { client: u64 },
    Remove { client: u64 },
}

fn ops() -> impl Strategy<Value = Vec<(u64, Op)>> {
    let op = prop_oneof![
        6 => (0..3u64, 1..=4u64).prop_map(|(client, cost)| Op::Check { client, cost }),
        1 => (0..3u64, 1..=4u64).prop_map(|(client, cost)| Op::Peek { client, cost }),
        2 => (0..3u64).prop_map(|client| Op::Reset { client }),
        2 => (0..3u64).prop_map(|client| Op::Remove { client }),
    ];
    let gap = prop_oneof![Just(0u64), 0..3_000u64, 0..50_000u64, 0..20 * SEC];
    prop::collection::vec((gap, op), 1..150)
}

/// Runs `ops` through a limiter (no auto-sweep, so a client is held exactly
/// from its first check until it is removed) and one model per client.
fn agree<S: Subject + Forgets>(subject: &S, ops: &[(u64, Op)]) {
    let clock = ManualClock::new();
    let limiter = subject
        .builder(clock.clone())
        .no_auto_sweep()
        .build()
        .unwrap();
    let mut models: HashMap<u64, S::Model> = HashMap::new();
    let mut now = 0;
    for (i, &(gap, op)) in ops.iter().enumerate() {
        now += gap;
        clock.set(Duration::from_nanos(now));
        let ctx = || format!("op {i} {op:?} at {now} ns, {subject:?}");
        match op {
            Op::Check { client, cost } | Op::Peek { client, cost } => {
                let peek = matches!(op, Op::Peek { .. });
                let fresh = subject.model();
                let cost = cost.min(fresh.capacity());
                let before = models.get(&client).unwrap_or(&fresh).clone();
                let mut after = before.clone();
                let expected = after.admit(now, cost);
                let got = if peek {
                    limiter.peek_n(&client, cost).unwrap()
                } else {
                    limiter.check_n(&client, cost).unwrap()
                };
                assert_eq!(got.is_allowed(), expected, "decision, {}", ctx());
                // A peek reports the quota as it stands; a check, what it left.
                let left = if peek { &before } else { &after };
                assert_eq!(got.remaining(), left.remaining(now), "remaining, {}", ctx());
                if !peek {
                    models.insert(client, after);
                }
            }
            Op::Reset { client } => {
                let held = models.contains_key(&client);
                assert_eq!(limiter.reset(&client), held, "reset's answer, {}", ctx());
                if S::RESET_FORGETS {
                    models.remove(&client);
                } else if held {
                    models.insert(client, subject.model());
                }
            }
            Op::Remove { client } => {
                let held = models.remove(&client).is_some();
                assert_eq!(limiter.remove(&client), held, "remove's answer, {}", ctx());
            }
        }
        assert_eq!(limiter.len(), models.len(), "clients held, {}", ctx());
    }
}

/// Whether `reset` forgets the client (the log) or resets it in place.
trait Forgets {
    const RESET_FORGETS: bool;
}
impl Forgets for BucketConfig {
    const RESET_FORGETS: bool = false;
}
impl Forgets for Sliding {
    const RESET_FORGETS: bool = false;
}
impl Forgets for Fixed {
    const RESET_FORGETS: bool = false;
}
impl Forgets for Log {
    const RESET_FORGETS: bool = true;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn token_bucket_reset_and_remove_match_the_exact_model(config in bucket(), ops in ops()) {
        agree(&config, &ops);
    }

    #[test]
    fn sliding_window_counter_reset_and_remove_match_the_exact_model(config in window(), ops in ops()) {
        agree(&Sliding(config), &ops);
    }

    #[test]
    fn fixed_window_reset_and_remove_match_the_exact_model(config in window(), ops in ops()) {
        agree(&Fixed(config), &ops);
    }

    #[test]
    fn sliding_window_log_reset_and_remove_match_the_exact_model(config in window(), ops in ops()) {
        agree(&Log(config), &ops);
    }
}

fn subjects() -> (BucketConfig, Sliding, Fixed, Log) {
    let window = WindowConfig {
        limit: 20,
        window: 1_000_000_000,
    };
    (
        BucketConfig {
            tokens: 1,
            per: 3_600_000_000_000,
            capacity: 20,
        },
        Sliding(window),
        Fixed(window),
        Log(window),
    )
}

/// Eight threads hammer one client on a frozen clock while a ninth resets
/// (or removes) it `ROUNDS` times. A reset that finds a live state returns
/// its whole capacity and nothing more, so the admissions can never exceed
/// `capacity × (1 + successful resets)`; after the threads stop, one more
/// reset and a drain admit exactly the capacity.
fn racing<S: Subject>(subject: &S, remove: bool) {
    const THREADS: usize = 8;
    const ROUNDS: u64 = 50;
    let capacity = subject.model().capacity();
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1));
    let limiter = subject.limiter(clock);
    let admitted = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let barrier = Barrier::new(THREADS + 1);
    let mut restored = 0;
    thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                barrier.wait();
                while !done.load(Ordering::Relaxed) {
                    if limiter.allow_request(&7) {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        barrier.wait();
        for _ in 0..ROUNDS {
            let held = if remove {
                limiter.remove(&7)
            } else {
                limiter.reset(&7)
            };
            restored += u64::from(held);
            thread::yield_now();
        }
        done.store(true, Ordering::Relaxed);
    });
    let admitted = admitted.into_inner();
    assert!(
        admitted <= capacity * (1 + restored),
        "{admitted} admitted with {restored} resets of capacity {capacity}"
    );
    // Quiet now: one more reset, then exactly the capacity.
    let _ = if remove {
        limiter.remove(&7)
    } else {
        limiter.reset(&7)
    };
    let drained = (0..capacity * 2)
        .filter(|_| limiter.allow_request(&7))
        .count() as u64;
    assert_eq!(drained, capacity);
    assert_eq!(limiter.len(), 1);
}

#[test]
fn resets_racing_checks_never_double_an_admission() {
    fn run<S: Subject>(subject: &S) {
        racing(subject, false);
    }
    for_each_subject!(run);
}

#[test]
fn removals_racing_checks_never_double_an_admission() {
    fn run<S: Subject>(subject: &S) {
        racing(subject, true);
    }
    for_each_subject!(run);
}

/// A reset keeps a word client's unit of room under a cap; a removal gives
/// it back, and so does the log's reset, which forgets.
#[test]
fn reset_keeps_the_room_and_remove_gives_it_back() {
    fn run<S: Subject + Forgets>(subject: &S) {
        let clock = ManualClock::new();
        let limiter = subject
            .builder(clock)
            .max_clients(1)
            .overflow(Overflow::DenyNew)
            .build()
            .unwrap();
        assert!(limiter.allow_request(&1));
        assert!(!limiter.allow_request(&2), "full");
        assert!(limiter.reset(&1));
        assert_eq!(
            limiter.is_empty(),
            S::RESET_FORGETS,
            "room kept by a reset in place"
        );
        assert!(limiter.allow_request(&1), "fresh after the reset");
        assert_eq!(limiter.len(), 1);
        assert!(limiter.remove(&1));
        assert!(limiter.is_empty());
        assert!(limiter.allow_request(&2), "room given back");
        assert!(!limiter.remove(&1), "already gone");
    }
    for_each_subject!(run);
}
