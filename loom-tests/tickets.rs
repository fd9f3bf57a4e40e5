//! Model 16: a ticket acts only on the state it was booked on. A cancel
//! of booking `B1` races a reset of its client (in place, in the same
//! cell) followed by a check and a new booking `B2` on the fresh state,
//! on one token bucket cell of capacity 1 (1 token per 10 ns, the clock
//! frozen at 0), through the crate's own stamps (`__loom::Renewals`, one
//! stripe): the booking reads its stamp before its exchange, the reset
//! marks the stripe in the exchange that sees no cancel holding it, and
//! the cancel holds the stripe from its stamp test to the end of its
//! exchange.
//!
//! After the reset, `B1` starts over exactly as `B2` does (spend the token,
//! book the next), so the fresh state comes round to the very word `B1`
//! left. Property: whatever the interleaving, the fresh state holds
//! exactly what was charged to it (the check if admitted, `B2` at its
//! ready time), so one more booking after the race is ready exactly when
//! the exact bucket first admits it after them: a cancel that gave `B1`
//! back on the fresh state would hand `B2`'s slot out again.
//!
//! Broken twins (written here, not in the crate): the cancel by the tail
//! rule alone, the rule before stamps; and a cancel that tests the stamp
//! but does not hold the stripe until its exchange is done.

use loom::sync::Arc;
use loom::thread;

use crate::eviction::check;
use tollgate::__loom::{token_bucket, Algorithm, Booking, Renewals, StateCell, Ticket};
use tollgate::TokenBucket;

/// ns per token.
const INTERVAL: u64 = 10;

/// Every operation reads this instant.
const NOW: u64 = 0;

/// The client's hash: the model has one stripe.
const HASH: u64 = 0;

fn bucket() -> TokenBucket {
    token_bucket(1, std::time::Duration::from_nanos(INTERVAL), 1).unwrap()
}

/// Books one unit at `NOW` as `Limiter::reserve_n` does: the stamp read
/// after the state is found and before the booking's exchange.
fn book(algorithm: &TokenBucket, renewals: &Renewals, cell: &StateCell) -> (Ticket, u64) {
    let stamp = renewals.stamp(HASH);
    match algorithm.reserve(cell, NOW, 1, u64::MAX) {
        Some(Booking::Granted(ticket, _)) => (ticket, stamp),
        other => panic!("a booking with no limit on its wait: {other:?}"),
    }
}

/// The cancel as `Limiter::give_back` makes it.
fn cancel(
    algorithm: &TokenBucket,
    renewals: &Renewals,
    cell: &StateCell,
    booked: &(Ticket, u64),
) -> bool {
    let (ticket, stamp) = booked;
    renewals.cancel(HASH, *stamp, |current| {
        current() && algorithm.unreserve(cell, NOW, ticket) == Some(true)
    })
}

/// The broken twin: the tail rule on whatever state the cell holds.
fn cancel_by_the_tail_alone(
    algorithm: &TokenBucket,
    _: &Renewals,
    cell: &StateCell,
    booked: &(Ticket, u64),
) -> bool {
    algorithm.unreserve(cell, NOW, &booked.0) == Some(true)
}

/// The second broken twin: the stamp tested, then the tail rule applied,
/// without holding the stripe in between; a reset, a check and a booking
/// fit in that gap.
fn cancel_with_the_stamp_apart(
    algorithm: &TokenBucket,
    renewals: &Renewals,
    cell: &StateCell,
    booked: &(Ticket, u64),
) -> bool {
    renewals.stamp(HASH) == booked.1 && algorithm.unreserve(cell, NOW, &booked.0) == Some(true)
}

type Cancel = fn(&TokenBucket, &Renewals, &StateCell, &(Ticket, u64)) -> bool;

/// The race. Returns the interleavings, and the fewest and most cancels
/// that gave back.
fn cancel_racing_reset_and_booking(name: &str, cancel: Cancel) -> (usize, u64, u64) {
    let label = name.to_owned();
    check(name, move || {
        let algorithm = bucket();
        let renewals = Arc::new(Renewals::with_stripes(1));
        let cell = Arc::new(StateCell::new(0));
        // Spend the token, then book B1: ready at 10, the word at 20.
        assert!(algorithm.admit(&cell, NOW, 1));
        let b1 = book(&algorithm, &renewals, &cell);
        assert_eq!(b1.0.ready_at(), INTERVAL);
        let canceller = {
            let (renewals, cell) = (Arc::clone(&renewals), Arc::clone(&cell));
            thread::spawn(move || cancel(&bucket(), &renewals, &cell, &b1))
        };
        // The client starts over: reset, spend, book B2.
        let reset = renewals.renew_in_place(HASH, || algorithm.reset(&cell, NOW));
        assert_eq!(reset, Some(true));
        let mut executed = Vec::new();
        if algorithm.admit(&cell, NOW, 1) {
            executed.push(NOW);
        }
        let (b2, _) = book(&algorithm, &renewals, &cell);
        executed.push(b2.ready_at());
        let gave = canceller.join().unwrap();
        // What the fresh state holds, and one more booking on it.
        executed.sort_unstable();
        for pair in executed.windows(2) {
            assert!(
                pair[1] >= pair[0] + INTERVAL,
                "{label}: over-admitted: {executed:?} on a bucket of 1"
            );
        }
        let (last, _) = book(&algorithm, &renewals, &cell);
        let want = executed.last().unwrap() + INTERVAL;
        assert!(
            last.ready_at() >= want,
            "{label}: over-admitted: a booking after the race is ready at {}, with {executed:?} standing",
            last.ready_at()
        );
        assert_eq!(
            last.ready_at(),
            want,
            "{label}: a booking after the race waits longer than the exact bucket makes it"
        );
        u64::from(gave)
    })
}

#[test]
fn a_cancel_racing_a_reset_and_a_new_booking_touches_only_its_own_state() {
    // Given back when the cancel lands before the reset (on the state it
    // booked on, which the reset then forgets); nothing otherwise.
    let (_, min, max) = cancel_racing_reset_and_booking("tickets/cancel_vs_reset", cancel);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_cancel_by_the_tail_rule_alone_is_caught() {
    let _ = cancel_racing_reset_and_booking(
        "tickets/cancel_vs_reset/tail_alone",
        cancel_by_the_tail_alone,
    );
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_cancel_that_tests_its_stamp_apart_from_its_exchange_is_caught() {
    let _ = cancel_racing_reset_and_booking(
        "tickets/cancel_vs_reset/stamp_apart",
        cancel_with_the_stamp_apart,
    );
}
