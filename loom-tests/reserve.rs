//! Models 9 and 10: reservations (`Limiter::reserve_n`) racing checks, and
//! cancellations racing reservations, on one token bucket cell.
//!
//! Every thread runs the crate's own code on the word cell: a booking is
//! `Algorithm::reserve` (GCRA's pure booking transition through the one
//! compare-and-swap loop, `StateCell::apply`), a check `Algorithm::admit`,
//! a cancellation `Algorithm::unreserve` (the tail rule through the same
//! loop). The clock is frozen at 0: the bucket is 1 token per 10 ns.
//!
//! The property is the one that matters whatever the interleaving: execute
//! every admitted check at its reading and every booking that was not given
//! back at its ready time, plus one more booking made after the race; the
//! exact bucket admits all of them (no over-admission), and the last
//! booking is ready exactly when the exact bucket first admits it after the
//! others (nothing was lost either).
//!
//! Broken twins (`twins.rs`): model 9 over the racy cell (`RacyCell`, a load
//! and a store instead of the exchange, so a booking and a check both take
//! the last token); model 10 with a cancellation that subtracts the
//! booking's charge (through the cell's own exchange) without checking that it is still the
//! tail (`give_back_blindly`), so a booking made after it is
//! handed the slot of virtual time a standing booking holds.

use loom::sync::Arc;
use loom::thread;

use crate::eviction::check;
use crate::harness::{MakeCell, RACY, REAL};
use crate::twins::give_back_blindly;
use tollgate::__loom::{token_bucket, Algorithm, Booking, StateCell, Ticket};
use tollgate::TokenBucket;

/// ns per token.
const INTERVAL: u64 = 10;

/// Every check and booking reads this instant.
const NOW: u64 = 0;

fn bucket(capacity: u64) -> TokenBucket {
    token_bucket(1, std::time::Duration::from_nanos(INTERVAL), capacity).unwrap()
}

/// Books one unit at `NOW`, however long it waits.
fn book(algorithm: &TokenBucket, cell: &StateCell) -> Ticket {
    match algorithm.reserve(cell, NOW, 1, u64::MAX) {
        Some(Booking::Granted(ticket, _)) => ticket,
        other => panic!("a booking with no limit on its wait: {other:?}"),
    }
}

/// The exact bucket (tokens scaled by `INTERVAL`, refilled 1 per ns) admits
/// every `(at, cost)` in time order, each at its own instant.
fn assert_exact(name: &str, capacity: u64, mut executed: Vec<(u64, u64)>) {
    executed.sort_by_key(|e| e.0);
    let (mut scaled, mut last) = (capacity * INTERVAL, 0);
    for &(at, cost) in &executed {
        scaled = (scaled + (at - last)).min(capacity * INTERVAL);
        last = at;
        assert!(
            scaled >= cost * INTERVAL,
            "{name}: over-admitted: {executed:?} exceeds the exact bucket of {capacity}"
        );
        scaled -= cost * INTERVAL;
    }
}

/// The first instant at or after every executed admission at which the
/// exact bucket admits one more unit.
fn exact_next(capacity: u64, executed: &[(u64, u64)]) -> u64 {
    let mut sorted = executed.to_vec();
    sorted.sort_by_key(|e| e.0);
    let (mut scaled, mut last) = (capacity * INTERVAL, 0);
    for &(at, cost) in &sorted {
        scaled = (scaled + (at - last)).min(capacity * INTERVAL) - cost * INTERVAL;
        last = at;
    }
    last + (INTERVAL.saturating_sub(scaled))
}

/// The race's end: one more booking after it, which must fit (no
/// over-admission) and be ready exactly when the exact bucket first has a
/// token for it (no lost charge and no lost refund).
fn finish(
    name: &str,
    algorithm: &TokenBucket,
    book_one: impl FnOnce() -> u64,
    mut executed: Vec<(u64, u64)>,
) {
    let capacity = Algorithm::capacity(algorithm);
    assert_exact(name, capacity, executed.clone());
    let last = book_one();
    let want = exact_next(capacity, &executed);
    executed.push((last, 1));
    assert_exact(name, capacity, executed);
    assert_eq!(
        last, want,
        "{name}: a later booking waits longer than the exact bucket makes it"
    );
}

/// Model 9: `bookers` threads each book one unit while the main thread
/// checks one, on a full bucket of `capacity`. Returns the interleavings,
/// and the fewest and most checks admitted.
fn reserve_racing_check(
    name: &str,
    make: MakeCell,
    bookers: usize,
    capacity: u64,
) -> (usize, u64, u64) {
    let label = name.to_owned();
    check(name, move || {
        let algorithm = bucket(capacity);
        let cell = Arc::new(make.word(0));
        let threads: Vec<_> = (0..bookers)
            .map(|_| {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.book(&bucket(capacity), NOW, 1))
            })
            .collect();
        let admitted = cell.admit(&algorithm, NOW, 1);
        let mut executed: Vec<(u64, u64)> = threads
            .into_iter()
            .map(|t| (t.join().unwrap(), 1))
            .collect();
        if admitted {
            executed.push((NOW, 1));
        }
        finish(
            &label,
            &algorithm,
            || cell.book(&algorithm, NOW, 1),
            executed,
        );
        u64::from(admitted)
    })
}

/// Model 10: on an empty bucket of 1 (a unit admitted at 0), thread A
/// books one unit and cancels it at once (still before its time), while
/// `bookers` other threads each book one unit. Returns the interleavings,
/// and the fewest and most of A's cancellations that gave back.
fn cancel_racing_reserve(name: &str, blind: bool, bookers: usize) -> (usize, u64, u64) {
    let label = name.to_owned();
    check(name, move || {
        let algorithm = bucket(1);
        let cell = Arc::new(StateCell::new(INTERVAL));
        let canceller = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                let algorithm = bucket(1);
                let ticket = book(&algorithm, &cell);
                let gave = if blind {
                    give_back_blindly(&cell, &ticket);
                    true
                } else {
                    algorithm.unreserve(&cell, NOW, &ticket) == Some(true)
                };
                (ticket, gave)
            })
        };
        let others: Vec<_> = (1..bookers)
            .map(|_| {
                let cell = Arc::clone(&cell);
                thread::spawn(move || book(&bucket(1), &cell))
            })
            .collect();
        let mine = book(&algorithm, &cell);
        let mut executed = vec![(0, 1), (mine.ready_at(), 1)];
        executed.extend(
            others
                .into_iter()
                .map(|t| (t.join().unwrap().ready_at(), 1)),
        );
        let (ticket, gave) = canceller.join().unwrap();
        if !gave {
            executed.push((ticket.ready_at(), 1));
        }
        finish(
            &label,
            &algorithm,
            || book(&algorithm, &cell).ready_at(),
            executed,
        );
        u64::from(gave)
    })
}

#[test]
fn reserve_racing_check_capacity_1() {
    // The check gets the token (and the booking waits) or the booking
    // does (and the check is denied).
    let (_, min, max) = reserve_racing_check("reserve/vs_check/1+1/cap1", REAL, 1, 1);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
fn two_reserves_racing_a_check_capacity_2() {
    let (_, min, max) = reserve_racing_check("reserve/vs_check/2+1/cap2", REAL, 2, 2);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_booking_by_load_and_store_is_caught() {
    let _ = reserve_racing_check("reserve/vs_check/racy", RACY, 1, 1);
}

#[test]
fn cancel_racing_one_reserve() {
    // Given back when A's booking is still the tail, nothing otherwise.
    let (_, min, max) = cancel_racing_reserve("reserve/cancel_vs_reserve/2", false, 2);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
fn cancel_racing_two_reserves() {
    let (_, min, max) = cancel_racing_reserve("reserve/cancel_vs_reserve/3", false, 3);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_cancel_that_ignores_the_tail_is_caught() {
    let _ = cancel_racing_reserve("reserve/cancel_vs_reserve/blind", true, 2);
}
