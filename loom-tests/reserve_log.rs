//! Model 15: bookings on the sliding window log, racing a check, and a
//! cancellation racing another booking, on one log cell.
//!
//! Every thread runs the crate's own code on the log cell
//! (`src/cell/log.rs`): a booking is `Algorithm::reserve` (read every slot,
//! time the booking at the `cost`-th expiry, claim those slots each by an
//! exchange from the very expiry it was timed on, give them back and time
//! it again if one changed), a check `Algorithm::admit` (the slot claims
//! of model 3), a cancellation `Algorithm::unreserve` (as many slots as
//! it claimed, of those that hold its expiry, whoever wrote it, get back
//! the expiries its claims replaced). Every reading is explicit; the
//! window is 10 ns.
//!
//! The property is the log's definition: execute every admitted check at
//! its reading and every booking that was not given back at its ready
//! time, plus what runs after the race; at most `limit` units lie in any
//! window `(t − W, t]`. And nothing is lost: one more unit booking after
//! the race is ready exactly when the `limit`-th latest executed admission
//! leaves the window (at once if fewer than `limit` were executed).
//!
//! Broken twins (`twins.rs`): the booking race over `RacyLog`, whose
//! claims (a booking's too) are a load and a store, so a booking and a
//! check both take the last slot; the cancellation race with a cancel that
//! puts back every claimed slot whatever it holds
//! (`unbook_log_blindly`), so a booking that claimed the slot from
//! the cancelled one loses its claim and a later check is let in beside it.

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;

use crate::eviction::check;
use crate::harness::{MakeCell, RACY, REAL};
use crate::twins::unbook_log_blindly;
use tollgate::__loom::{Algorithm, Booking, LogCell, Ticket};
use tollgate::SlidingWindowLog;

/// Window width, ns.
const W: u64 = 10;

fn log(limit: u64) -> SlidingWindowLog {
    tollgate::__loom::sliding_window_log(limit, Duration::from_nanos(W)).unwrap()
}

/// Books `cost` at `now`, however long it waits.
fn book(log: &SlidingWindowLog, cell: &LogCell, now: u64, cost: u64) -> Ticket {
    match log.reserve(cell, now, cost, u64::MAX) {
        Some(Booking::Granted(ticket, _)) => ticket,
        other => panic!("a booking with no limit on its wait: {other:?}"),
    }
}

/// At most `limit` units in any window `(t − W, t]` of `executed`.
fn assert_within(name: &str, limit: u64, executed: &[(u64, u64)]) {
    for &(t, _) in executed {
        let in_window: u64 = executed
            .iter()
            .filter(|&&(at, _)| at <= t && at + W > t)
            .map(|e| e.1)
            .sum();
        assert!(
            in_window <= limit,
            "{name}: over-admitted: {executed:?} has {in_window} units in the window ending at {t}, limit {limit}"
        );
    }
}

/// The race's end: one more unit booking at `now` (no earlier than any
/// reading before it), which must fit and be ready exactly when the
/// `limit`-th latest executed unit leaves the window, or at `now`.
fn finish(
    name: &str,
    log: &SlidingWindowLog,
    book_one: impl FnOnce(u64) -> u64,
    now: u64,
    mut executed: Vec<(u64, u64)>,
) {
    let limit = Algorithm::capacity(log);
    assert_within(name, limit, &executed);
    let mut units: Vec<u64> = executed
        .iter()
        .flat_map(|&(at, cost)| std::iter::repeat_n(at, cost as usize))
        .collect();
    units.sort_unstable_by(|a, b| b.cmp(a));
    let want = units
        .get(limit as usize - 1)
        .map_or(now, |&at| (at + W).max(now));
    let last = book_one(now);
    executed.push((last, 1));
    assert_within(name, limit, &executed);
    assert_eq!(
        last, want,
        "{name}: a later booking waits longer than the log makes it: {executed:?}"
    );
}

/// Model 15, booking racing a check: on an empty log of `limit`, one
/// spawned thread per entry of `bookings` books that cost at 0 while the
/// main thread checks one unit at 0. Returns the interleavings, and the
/// fewest and most checks admitted.
fn reserve_racing_check(
    name: &str,
    make: MakeCell,
    limit: u64,
    bookings: &'static [u64],
) -> (usize, u64, u64) {
    let label = name.to_owned();
    check(name, move || {
        let algorithm = log(limit);
        let cell = Arc::new(make.log(&algorithm));
        let threads: Vec<_> = bookings
            .iter()
            .map(|&cost| {
                let cell = Arc::clone(&cell);
                thread::spawn(move || (cell.book(&log(limit), 0, cost), cost))
            })
            .collect();
        let admitted = cell.admit(&algorithm, 0, 1);
        let mut executed: Vec<(u64, u64)> =
            threads.into_iter().map(|t| t.join().unwrap()).collect();
        if admitted {
            executed.push((0, 1));
        }
        finish(
            &label,
            &algorithm,
            |now| cell.book(&algorithm, now, 1),
            0,
            executed,
        );
        u64::from(admitted)
    })
}

/// Model 15, cancellation racing bookings: on a log of `limit` whose
/// slots all hold an admission at 5 (free at 15), thread A books
/// `a_cost` units at 10 (ready at 15) and cancels at once, still at 10,
/// while `others` spawned threads and the main thread each book one unit
/// at 10. Then a unit check at 25 (when a booking ready at 15 leaves the
/// window) and the final booking, also at 25. Returns the interleavings, and the
/// fewest and most of A's cancellations that gave back.
fn cancel_racing_reserve(
    name: &str,
    blind: bool,
    limit: u64,
    a_cost: u64,
    others: usize,
) -> (usize, u64, u64) {
    const NOW: u64 = 10;
    let label = name.to_owned();
    check(name, move || {
        let algorithm = log(limit);
        let cell = Arc::new(algorithm.new_cell());
        assert!(algorithm.admit(&cell, 5, limit));
        let canceller = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                let algorithm = log(limit);
                let ticket = book(&algorithm, &cell, NOW, a_cost);
                let gave = if blind {
                    unbook_log_blindly(&cell, &ticket);
                    true
                } else {
                    algorithm.unreserve(&cell, NOW, &ticket) == Some(true)
                };
                (ticket.ready_at(), gave)
            })
        };
        let threads: Vec<_> = (0..others)
            .map(|_| {
                let cell = Arc::clone(&cell);
                thread::spawn(move || book(&log(limit), &cell, NOW, 1).ready_at())
            })
            .collect();
        let mine = book(&algorithm, &cell, NOW, 1);
        let mut executed = vec![(5, limit), (mine.ready_at(), 1)];
        executed.extend(threads.into_iter().map(|t| (t.join().unwrap(), 1)));
        let (theirs, gave) = canceller.join().unwrap();
        if !gave {
            executed.push((theirs, a_cost));
        }
        // Later readings from here on: at 25, a check, then the final
        // booking.
        if algorithm.admit(&cell, 15 + W, 1) {
            executed.push((15 + W, 1));
        }
        finish(
            &label,
            &algorithm,
            |now| book(&algorithm, &cell, now, 1).ready_at(),
            15 + W,
            executed,
        );
        u64::from(gave)
    })
}

#[test]
fn log_reserve_racing_check_limit_1() {
    // The check gets the slot (and the booking waits) or the booking does
    // (and the check is denied).
    let (_, min, max) = reserve_racing_check("reserve_log/vs_check/1+1/lim1", REAL, 1, &[1]);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
fn log_two_reserves_racing_a_check_limit_2() {
    let (_, min, max) = reserve_racing_check("reserve_log/vs_check/2+1/lim2", REAL, 2, &[1, 1]);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
fn log_cost_2_reserve_racing_a_check_limit_2() {
    // The give-back path: the booking claims one slot, the check takes the
    // other, the booking gives its slot back and is timed again.
    let (_, min, max) = reserve_racing_check("reserve_log/vs_check/cost2+1/lim2", REAL, 2, &[2]);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_log_booking_by_load_and_store_is_caught() {
    let _ = reserve_racing_check("reserve_log/vs_check/racy", RACY, 1, &[1]);
}

#[test]
fn log_cancel_racing_a_reserve() {
    // Given back when A's slot still holds its booking, nothing once the
    // other booking claimed it from A's.
    let (_, min, max) = cancel_racing_reserve("reserve_log/cancel_vs_reserve/lim1", false, 1, 1, 0);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
fn log_cancel_racing_two_reserves() {
    let (_, min, max) =
        cancel_racing_reserve("reserve_log/cancel_vs_reserve/2/lim1", false, 1, 1, 1);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
fn log_cost_2_cancel_racing_a_reserve_limit_2() {
    // A's two slots: both given back (A's booking came after the other
    // one, or was cancelled before it), or one, when the other booking
    // claimed one of them from A's (the partial give-back): one unit
    // booking can never take both, so A always gives back something.
    let (_, min, max) =
        cancel_racing_reserve("reserve_log/cancel_vs_reserve/cost2/lim2", false, 2, 2, 0);
    assert_eq!((min, max), (1, 1), "something given back");
}

#[test]
fn log_cancel_racing_bookings_that_share_its_expiry_limit_2() {
    // A and one other booking are ready at 15, both expiring at 25; the
    // third books for 25 and claims one of their slots. A's cancel gives
    // back a slot that holds 25 whichever of the two it was, the other's
    // if the third took A's: one unit booking never takes both.
    let (_, min, max) =
        cancel_racing_reserve("reserve_log/cancel_vs_reserve/shared/lim2", false, 2, 1, 1);
    assert_eq!((min, max), (1, 1), "always given back");
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_log_cancel_that_restores_blindly_is_caught() {
    let _ = cancel_racing_reserve("reserve_log/cancel_vs_reserve/blind", true, 1, 1, 0);
}
