//! Models 9 and 10 for the fixed window: a booking racing a check, and a
//! cancellation racing bookings, on one fixed-window cell.
//!
//! As in `reserve.rs`, every thread runs the crate's own code on the word
//! cell: `Algorithm::reserve` (the fixed window's booking transition
//! through the one compare-and-swap loop), `Algorithm::admit`, and
//! `Algorithm::unreserve` (the tail rule). The clock is frozen at 0 in
//! window 0; windows are 10 ns long.
//!
//! The fixed window books a request that does not fit into the first later
//! window where it fits, and closes the windows before it, so that
//! requests are served in the order they booked. The reference is the
//! exact fixed window over what was executed (admitted checks at their
//! reading, bookings not given back at their ready time): no window holds
//! more than the limit, and one more booking after the race is ready at the
//! start of the first window, from the latest one used on, that still has
//! room: nothing was lost, and the order of bookings is kept.
//!
//! Broken twins: the booking racing a check over the racy cell (a load and
//! a store instead of the exchange: the booking and the check both take
//! the window's last unit), and the blind cancellation
//! (`twins::give_back_blindly`), which reopens a window that a later
//! booking closed and hands out its slot twice.

use loom::sync::Arc;
use loom::thread;

use crate::eviction::check;
use crate::harness::{MakeCell, RACY, REAL};
use crate::twins::give_back_blindly;
use tollgate::__loom::{fixed_window, Algorithm, Booking, StateCell, Ticket};
use tollgate::FixedWindow;

/// ns per window.
const WINDOW: u64 = 10;

/// Every check and booking reads this instant (window 0).
const NOW: u64 = 0;

fn window(limit: u64) -> FixedWindow {
    fixed_window(limit, std::time::Duration::from_nanos(WINDOW)).unwrap()
}

/// Books one unit at `NOW`, however long it waits.
fn book(algorithm: &FixedWindow, cell: &StateCell) -> Ticket {
    match algorithm.reserve(cell, NOW, 1, u64::MAX) {
        Some(Booking::Granted(ticket, _)) => ticket,
        other => panic!("a booking with no limit on its wait: {other:?}"),
    }
}

/// The units executed in each window, by window index.
fn per_window(executed: &[u64]) -> std::collections::BTreeMap<u64, u64> {
    let mut windows = std::collections::BTreeMap::new();
    for &at in executed {
        *windows.entry(at / WINDOW).or_insert(0) += 1;
    }
    windows
}

/// The exact fixed window admits every unit executed at the instants
/// `executed`: no window holds more than `limit`.
fn assert_exact(name: &str, limit: u64, executed: &[u64]) {
    for (index, count) in per_window(executed) {
        assert!(
            count <= limit,
            "{name}: over-admitted: window {index} holds {count} of {executed:?}, limit {limit}"
        );
    }
}

/// Where a booking made after every executed unit goes, served in order:
/// the start of the first window, from the latest one used on, that has
/// room for one more unit. (`NOW` lies in window 0, at its start.)
fn exact_next(limit: u64, executed: &[u64]) -> u64 {
    let windows = per_window(executed);
    let latest = windows.keys().copied().max().unwrap_or(0);
    let index = if windows.get(&latest).copied().unwrap_or(0) < limit {
        latest
    } else {
        latest + 1
    };
    index * WINDOW
}

/// The race's end: one more booking after it must fit, and be ready exactly
/// where the exact window in booking order puts it.
fn finish(
    name: &str,
    algorithm: &FixedWindow,
    book_one: impl FnOnce() -> u64,
    mut executed: Vec<u64>,
) {
    let limit = Algorithm::capacity(algorithm);
    assert_exact(name, limit, &executed);
    let want = exact_next(limit, &executed);
    let last = book_one();
    executed.push(last);
    assert_exact(name, limit, &executed);
    assert_eq!(
        last, want,
        "{name}: a later booking is not served where the exact window puts it: {executed:?}"
    );
}

/// Model 9 for the fixed window: `bookers` threads each book one unit
/// while the main thread checks one, on a fresh window of `limit`.
/// Returns the interleavings, and the fewest and most checks admitted.
fn reserve_racing_check(
    name: &str,
    make: MakeCell,
    bookers: usize,
    limit: u64,
) -> (usize, u64, u64) {
    let label = name.to_owned();
    check(name, move || {
        let algorithm = window(limit);
        let cell = Arc::new(make.word(0));
        let threads: Vec<_> = (0..bookers)
            .map(|_| {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.book(&window(limit), NOW, 1))
            })
            .collect();
        let admitted = cell.admit(&algorithm, NOW, 1);
        let mut executed: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        if admitted {
            executed.push(NOW);
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

/// Model 10 for the fixed window: on a full window of 1 (a unit admitted
/// at 0), thread A books one unit and cancels it at once (still before its
/// time), while `bookers` other threads each book one unit. Returns the
/// interleavings, and the fewest and most of A's cancellations that gave
/// back.
fn cancel_racing_reserve(name: &str, blind: bool, bookers: usize) -> (usize, u64, u64) {
    let label = name.to_owned();
    check(name, move || {
        let algorithm = window(1);
        // Window 0 holding 1: the word of index 0 and count 1.
        let cell = Arc::new(StateCell::new(1));
        let canceller = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                let algorithm = window(1);
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
                thread::spawn(move || book(&window(1), &cell))
            })
            .collect();
        let mine = book(&algorithm, &cell);
        let mut executed = vec![0, mine.ready_at()];
        executed.extend(others.into_iter().map(|t| t.join().unwrap().ready_at()));
        let (ticket, gave) = canceller.join().unwrap();
        if !gave {
            executed.push(ticket.ready_at());
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
fn window_reserve_racing_check_limit_1() {
    // The check takes the window's unit (and the booking goes to the next
    // window) or the booking does (and the check is denied).
    let (_, min, max) = reserve_racing_check("reserve_window/vs_check/1+1/limit1", REAL, 1, 1);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
fn window_two_reserves_racing_a_check_limit_2() {
    let (_, min, max) = reserve_racing_check("reserve_window/vs_check/2+1/limit2", REAL, 2, 2);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_window_booking_by_load_and_store_is_caught() {
    let _ = reserve_racing_check("reserve_window/vs_check/racy", RACY, 1, 1);
}

#[test]
fn window_cancel_racing_one_reserve() {
    // Given back when A's booking is still the tail, nothing otherwise.
    let (_, min, max) = cancel_racing_reserve("reserve_window/cancel_vs_reserve/2", false, 2);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_window_cancel_that_ignores_the_tail_is_caught() {
    let _ = cancel_racing_reserve("reserve_window/cancel_vs_reserve/blind", true, 2);
}
