//! Model 1: the token bucket (GCRA) on one client.
//!
//! The bucket refills one token per nanosecond (`interval` = 1 ns), so a
//! clock move of `d` ns refills exactly `d` tokens and the bounds below are
//! whole numbers.

use std::time::Duration;

use tollgate::TokenBucket;

use crate::harness::{assert_reached, Explored, MakeCell, Race, REAL};

/// Nanoseconds per token.
const INTERVAL: u64 = 1;

fn bucket(capacity: u64) -> TokenBucket {
    tollgate::__loom::token_bucket(1, Duration::from_nanos(INTERVAL), capacity).unwrap()
}

/// Frozen clock: `threads` clients make `per_thread` checks each, more than
/// `capacity` in all. Exactly `capacity` are admitted in every
/// interleaving, and the word shows them all.
pub(crate) fn frozen(make: MakeCell, threads: usize, capacity: u64, per_thread: u64) -> Explored {
    Race {
        algorithm: bucket(capacity),
        threads,
        per_thread,
        start: 0,
        advance: None,
    }
    .exact(
        &format!("token_bucket/frozen/{threads}x{per_thread}/cap{capacity}"),
        make,
    )
}

/// A clock thread moves time forward by `ticks` tokens' worth while the
/// clients race. In every interleaving at least `capacity` is admitted, and
/// admitted + still on offer ≤ `capacity + ticks` (GCRA: each admission
/// pushes TAT on by one interval, and an admission at `now` leaves
/// TAT ≤ now + capacity·interval).
pub(crate) fn ticking(
    make: MakeCell,
    threads: usize,
    capacity: u64,
    per_thread: u64,
    ticks: u64,
) -> Explored {
    Race {
        algorithm: bucket(capacity),
        threads,
        per_thread,
        start: 0,
        advance: Some(ticks * INTERVAL),
    }
    .bounded(
        &format!("token_bucket/ticking/{threads}x{per_thread}/cap{capacity}/+{ticks}"),
        make,
        capacity + ticks,
    )
}

#[test]
fn frozen_2_threads_capacity_1() {
    assert_reached(frozen(REAL, 2, 1, 1), 1, 1);
}

#[test]
fn frozen_2_threads_capacity_2() {
    assert_reached(frozen(REAL, 2, 2, 2), 2, 2);
}

#[test]
fn frozen_3_threads_capacity_1() {
    assert_reached(frozen(REAL, 3, 1, 1), 1, 1);
}

#[test]
fn frozen_3_threads_capacity_2() {
    assert_reached(frozen(REAL, 3, 2, 1), 2, 2);
}

#[test]
fn ticking_2_threads_capacity_1() {
    assert_reached(ticking(REAL, 2, 1, 2, 1), 1, 2);
}

#[test]
fn ticking_2_threads_capacity_2() {
    assert_reached(ticking(REAL, 2, 2, 2, 1), 2, 3);
}

#[test]
fn ticking_3_threads_capacity_1() {
    assert_reached(ticking(REAL, 3, 1, 1, 1), 1, 2);
}
