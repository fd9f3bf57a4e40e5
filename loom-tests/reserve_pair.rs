//! Model 14: a booking on a pair of limits (`Both`) racing a check, and a
//! cancellation racing a booking on the pair.
//!
//! The client is held to a token bucket of 2 (1 token per 10 ns) and a
//! fixed window of 1 per 10 ns, both in one pair cell. Bookings are
//! `Algorithm::reserve` on the pair (the pair's pure booking transition
//! through the one compare-and-swap loop, one 128-bit exchange), the check
//! `Algorithm::admit`; the clock is frozen at 0.
//!
//! The reference is the pair of exact models: executing the admitted check
//! at its reading and every booking at its ready time, in time order,
//! both the exact bucket and the exact fixed window admit everything (no
//! over-admission), and one more booking after the race is ready at the
//! first instant, from the latest execution on, at which both admit it
//! (nothing lost, served in booking order).
//!
//! The cancellation model starts from a unit admitted at 0 (the window
//! full): thread A books a unit and cancels it at once by the tail rule on
//! the pair's whole state (`Algorithm::unreserve`), while the main thread
//! books a unit; the bookings not given back are executed as above.
//!
//! Broken twins: a booking that settles its ready time on one look at the
//! pair and then charges each limit by its own compare-and-swap loop
//! (`twins::book_pair_apart`). A check between the look and the charges
//! takes the window's unit, and the booking, timed without it, is ready in
//! the same window: the window admits 2 against its limit of 1. And a
//! cancellation that subtracts the booking's charge from the pair's state
//! whether or not it is still the tail (`twins::give_back_pair_blindly`):
//! after A's booking and the main thread's, it reopens the window the
//! main thread's booking closed, and one more booking lands beside it.

use loom::sync::Arc;
use loom::thread;

use crate::eviction::check;
use crate::twins::{book_pair_apart, give_back_pair_blindly};
use tollgate::__loom::{
    both, fixed_window, pair_cell, token_bucket, Algorithm, Booking, PairCell, Ticket,
};
use tollgate::{Both, FixedWindow, TokenBucket};

/// ns per token, and per window.
const STEP: u64 = 10;

/// The bucket's capacity.
const CAPACITY: u64 = 2;

/// The window's limit.
const LIMIT: u64 = 1;

/// Every check and booking reads this instant.
const NOW: u64 = 0;

fn pair() -> Both<TokenBucket, FixedWindow> {
    both(
        token_bucket(1, std::time::Duration::from_nanos(STEP), CAPACITY).unwrap(),
        fixed_window(LIMIT, std::time::Duration::from_nanos(STEP)).unwrap(),
    )
}

/// Books one unit at `NOW`, however long it waits.
fn book_ticket(cell: &PairCell) -> Ticket {
    match pair().reserve(cell, NOW, 1, u64::MAX) {
        Some(Booking::Granted(ticket, _)) => ticket,
        other => panic!("a booking with no limit on its wait: {other:?}"),
    }
}

/// Books one unit at `NOW`, however long it waits: its ready time.
fn book(cell: &PairCell) -> u64 {
    book_ticket(cell).ready_at()
}

/// The pair of exact models: whether they admit every unit at the
/// instants `executed`, in time order.
fn exact_admits(executed: &[u64]) -> bool {
    let mut sorted = executed.to_vec();
    sorted.sort_unstable();
    // The bucket in tokens scaled by STEP, refilled 1 per ns.
    let (mut scaled, mut last) = (CAPACITY * STEP, 0);
    let mut windows = std::collections::BTreeMap::new();
    for at in sorted {
        scaled = (scaled + (at - last)).min(CAPACITY * STEP);
        last = at;
        let count = windows.entry(at / STEP).or_insert(0);
        if scaled < STEP || *count + 1 > LIMIT {
            return false;
        }
        scaled -= STEP;
        *count += 1;
    }
    true
}

/// The race's end: what was executed fits both exact models, and one more
/// booking is ready at the first instant from the latest execution on at
/// which both admit it.
fn finish(name: &str, cell: &PairCell, mut executed: Vec<u64>) {
    assert!(
        exact_admits(&executed),
        "{name}: over-admitted: {executed:?} exceeds the exact pair"
    );
    let from = executed.iter().copied().max().unwrap_or(NOW);
    let want = (from..)
        .find(|&t| {
            let mut with = executed.clone();
            with.push(t);
            exact_admits(&with)
        })
        .unwrap();
    let last = book(cell);
    executed.push(last);
    assert!(
        exact_admits(&executed),
        "{name}: over-admitted: {executed:?} exceeds the exact pair"
    );
    assert_eq!(
        last, want,
        "{name}: a later booking is not ready when the exact pair first admits it: {executed:?}"
    );
}

/// `bookers` threads each book one unit on a fresh pair while the main
/// thread checks one; `apart` books by the broken twin. Returns the
/// interleavings, and the fewest and most checks admitted.
fn reserve_racing_check(name: &str, apart: bool, bookers: usize) -> (usize, u64, u64) {
    let label = name.to_owned();
    check(name, move || {
        let cell = Arc::new(pair_cell(0, 0));
        let threads: Vec<_> = (0..bookers)
            .map(|_| {
                let cell = Arc::clone(&cell);
                thread::spawn(move || {
                    if apart {
                        book_pair_apart(&pair(), &cell, NOW, 1)
                    } else {
                        book(&cell)
                    }
                })
            })
            .collect();
        let admitted = pair().admit(&cell, NOW, 1);
        let mut executed: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        if admitted {
            executed.push(NOW);
        }
        finish(&label, &cell, executed);
        u64::from(admitted)
    })
}

/// On a pair with a unit admitted at 0 (the bucket at 1 of 2, the window
/// full), thread A books a unit and cancels it at once (`blind`: by the
/// broken twin) while the main thread books a unit. Returns the
/// interleavings, and the fewest and most of A's cancellations that gave
/// back.
fn cancel_racing_reserve(name: &str, blind: bool) -> (usize, u64, u64) {
    let label = name.to_owned();
    check(name, move || {
        // The bucket's TAT at 10 (one token spent at 0); window 0 at 1.
        let cell = Arc::new(pair_cell(STEP, 1));
        let canceller = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                let ticket = book_ticket(&cell);
                let gave = if blind {
                    give_back_pair_blindly(&cell, &ticket);
                    true
                } else {
                    pair().unreserve(&cell, NOW, &ticket) == Some(true)
                };
                (ticket.ready_at(), gave)
            })
        };
        let mine = book(&cell);
        let mut executed = vec![0, mine];
        let (ready, gave) = canceller.join().unwrap();
        if !gave {
            executed.push(ready);
        }
        finish(&label, &cell, executed);
        u64::from(gave)
    })
}

#[test]
fn pair_cancel_racing_reserve() {
    // Given back when A's booking is still the tail, nothing otherwise.
    let (_, min, max) = cancel_racing_reserve("reserve_pair/cancel_vs_reserve", false);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_pair_cancel_that_ignores_the_tail_is_caught() {
    let _ = cancel_racing_reserve("reserve_pair/cancel_vs_reserve/blind", true);
}

#[test]
fn pair_reserve_racing_check() {
    // The check takes the window's unit (and the booking waits for the
    // next window) or the booking does (and the check is denied).
    let (_, min, max) = reserve_racing_check("reserve_pair/vs_check/1+1", false, 1);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
fn two_pair_reserves_racing_a_check() {
    let (_, min, max) = reserve_racing_check("reserve_pair/vs_check/2+1", false, 2);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_pair_booking_charged_limit_by_limit_is_caught() {
    let _ = reserve_racing_check("reserve_pair/vs_check/apart", true, 1);
}
