//! Model 2: the sliding window counter and the fixed window on one client.
//!
//! Windows are `W` = 1 s wide (narrower ones leave the packed word too few
//! bits for a limit of 2). The clock starts one nanosecond before a boundary
//! (`W − 1`), and in the crossing models a clock thread moves it while the
//! clients race: onto the boundary itself (`W`, offset 0 of the next window)
//! or into the middle of the next window (`W + W/2`, where the sliding window
//! counter still weighs the previous window by one half).

use std::time::Duration;

use tollgate::{FixedWindow, SlidingWindowCounter};

use crate::harness::{assert_reached, Explored, MakeCell, Race, REAL};

/// Window width, ns.
const W: u64 = 1_000_000_000;

/// Where the "past the boundary" models land in the next window, ns.
const HALF: u64 = W / 2;

fn counter(limit: u64) -> SlidingWindowCounter {
    tollgate::__loom::sliding_window_counter(limit, Duration::from_nanos(W)).unwrap()
}

fn fixed(limit: u64) -> FixedWindow {
    tollgate::__loom::fixed_window(limit, Duration::from_nanos(W)).unwrap()
}

/// The sliding window counter's bound after crossing into a new window at
/// `offset`: a previous window holding `prev` leaves room for the unit
/// requests `i = 0, 1, …` with `i·W + prev·(W − offset) < limit·W` (the
/// admission rule in `src/algorithm/sliding_window.rs`), so admitted + still
/// on offer is at most the largest `prev + #room` over `prev ≤ limit`. A
/// request whose reading predates the crossing is judged at offset 0, which
/// only leaves less room.
fn counter_bound(limit: u64, offset: u64) -> u64 {
    (0..=limit)
        .map(|prev| {
            prev + (0..)
                .take_while(|i| i * W + prev * (W - offset) < limit * W)
                .count() as u64
        })
        .max()
        .unwrap()
}

/// Sliding window counter, frozen clock mid-window: exactly `limit`.
pub(crate) fn counter_frozen(
    make: MakeCell,
    threads: usize,
    limit: u64,
    per_thread: u64,
) -> Explored {
    Race {
        algorithm: counter(limit),
        threads,
        per_thread,
        start: W - 1,
        advance: None,
    }
    .exact(
        &format!("sliding_window_counter/frozen/{threads}x{per_thread}/limit{limit}"),
        make,
    )
}

/// Sliding window counter, clock crossing exactly onto the boundary during
/// the race: the previous window then weighs in full, so the total is still
/// exactly `limit` in every interleaving, whichever side of the boundary
/// each check lands on.
pub(crate) fn counter_onto_boundary(
    make: MakeCell,
    threads: usize,
    limit: u64,
    per_thread: u64,
) -> Explored {
    Race {
        algorithm: counter(limit),
        threads,
        per_thread,
        start: W - 1,
        advance: Some(1),
    }
    .exact(
        &format!("sliding_window_counter/onto_boundary/{threads}x{per_thread}/limit{limit}"),
        make,
    )
}

/// Sliding window counter, clock crossing into the middle of the next
/// window during the race: bounded by [`counter_bound`].
pub(crate) fn counter_past_boundary(
    make: MakeCell,
    threads: usize,
    limit: u64,
    per_thread: u64,
) -> Explored {
    Race {
        algorithm: counter(limit),
        threads,
        per_thread,
        start: W - 1,
        advance: Some(1 + HALF),
    }
    .bounded(
        &format!("sliding_window_counter/past_boundary/{threads}x{per_thread}/limit{limit}"),
        make,
        counter_bound(limit, HALF),
    )
}

/// Fixed window, frozen clock: exactly `limit`.
pub(crate) fn fixed_frozen(
    make: MakeCell,
    threads: usize,
    limit: u64,
    per_thread: u64,
) -> Explored {
    Race {
        algorithm: fixed(limit),
        threads,
        per_thread,
        start: W - 1,
        advance: None,
    }
    .exact(
        &format!("fixed_window/frozen/{threads}x{per_thread}/limit{limit}"),
        make,
    )
}

/// Fixed window, clock crossing a boundary during the race: each of the two
/// windows admits at most `limit`, so admitted + still on offer ≤ 2·limit.
pub(crate) fn fixed_across_boundary(
    make: MakeCell,
    threads: usize,
    limit: u64,
    per_thread: u64,
) -> Explored {
    Race {
        algorithm: fixed(limit),
        threads,
        per_thread,
        start: W - 1,
        advance: Some(1),
    }
    .bounded(
        &format!("fixed_window/across_boundary/{threads}x{per_thread}/limit{limit}"),
        make,
        2 * limit,
    )
}

#[test]
fn counter_bounds_follow_the_weighting() {
    // Onto the boundary nothing extra; halfway, half the previous window.
    assert_eq!(counter_bound(1, 0), 1);
    assert_eq!(counter_bound(2, 0), 2);
    assert_eq!(counter_bound(1, HALF), 2);
    assert_eq!(counter_bound(2, HALF), 3);
}

#[test]
fn counter_frozen_2_threads_limit_1() {
    assert_reached(counter_frozen(REAL, 2, 1, 1), 1, 1);
}

#[test]
fn counter_frozen_2_threads_limit_2() {
    assert_reached(counter_frozen(REAL, 2, 2, 2), 2, 2);
}

#[test]
fn counter_frozen_3_threads_limit_1() {
    assert_reached(counter_frozen(REAL, 3, 1, 1), 1, 1);
}

#[test]
fn counter_frozen_3_threads_limit_2() {
    assert_reached(counter_frozen(REAL, 3, 2, 1), 2, 2);
}

#[test]
fn counter_onto_boundary_2_threads_limit_1() {
    assert_reached(counter_onto_boundary(REAL, 2, 1, 2), 1, 1);
}

#[test]
fn counter_onto_boundary_2_threads_limit_2() {
    assert_reached(counter_onto_boundary(REAL, 2, 2, 2), 2, 2);
}

#[test]
fn counter_past_boundary_2_threads_limit_1() {
    assert_reached(counter_past_boundary(REAL, 2, 1, 2), 1, 2);
}

#[test]
fn counter_past_boundary_2_threads_limit_2() {
    assert_reached(counter_past_boundary(REAL, 2, 2, 2), 2, 3);
}

#[test]
fn fixed_frozen_2_threads_limit_1() {
    assert_reached(fixed_frozen(REAL, 2, 1, 1), 1, 1);
}

#[test]
fn fixed_frozen_2_threads_limit_2() {
    assert_reached(fixed_frozen(REAL, 2, 2, 2), 2, 2);
}

#[test]
fn fixed_frozen_3_threads_limit_1() {
    assert_reached(fixed_frozen(REAL, 3, 1, 1), 1, 1);
}

#[test]
fn fixed_frozen_3_threads_limit_2() {
    assert_reached(fixed_frozen(REAL, 3, 2, 1), 2, 2);
}

#[test]
fn fixed_across_boundary_2_threads_limit_1() {
    assert_reached(fixed_across_boundary(REAL, 2, 1, 2), 1, 2);
}

#[test]
fn fixed_across_boundary_2_threads_limit_2() {
    assert_reached(fixed_across_boundary(REAL, 2, 2, 3), 2, 4);
}

#[test]
fn counter_onto_boundary_3_threads_limit_2() {
    assert_reached(counter_onto_boundary(REAL, 3, 2, 1), 2, 2);
}

#[test]
fn counter_past_boundary_3_threads_limit_1() {
    assert_reached(counter_past_boundary(REAL, 3, 1, 1), 1, 2);
}

#[test]
fn fixed_across_boundary_3_threads_limit_1() {
    assert_reached(fixed_across_boundary(REAL, 3, 1, 1), 1, 2);
}
