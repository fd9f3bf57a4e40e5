//! Model 16: a ticket acts only on the state it was booked on. A cancel
//! of booking `B1` races a reset of its client followed by a check and a
//! new booking `B2` on the fresh state, on a token bucket client of
//! capacity 1 (1 token per 10 ns, the clock frozen at 0), through the
//! crate's own stamps (`__loom::Renewals`, one stripe): the booking reads
//! its stamp before its exchange, the cancel finds the client's cell and
//! then counts itself in progress on the stripe from its stamp test to the
//! end of its exchange, and the reset never waits for it: it resets in
//! place (a fresh state in the same cell) in the exchange that marks the
//! stripe and sees no cancel in progress, or, if one is, forgets the client
//! instead (the cell retired between two
//! marks, as `Limiter::remove` does), and the client's next request brings
//! in a fresh cell.
//!
//! After the reset, `B1` starts over exactly as `B2` does (spend the token,
//! book the next), so the fresh state comes round to the very word `B1`
//! left. Property: whatever the interleaving, the fresh state holds
//! exactly what was charged to it (the check if admitted, `B2` at its
//! ready time), so one more booking after the race is ready exactly when
//! the exact bucket first admits it after them: a cancel that gave `B1`
//! back on the fresh state would hand `B2`'s slot out again. Both ways of
//! resetting are reached.
//!
//! Broken twins (written here, not in the crate): the cancel by the tail
//! rule alone, the rule before stamps; a cancel that tests the stamp but
//! is not counted in progress until its exchange is done; and a reset in
//! place that marks the stripe whether or not a cancel is in progress.

use std::sync::atomic::{AtomicBool as StdAtomicBool, Ordering::Relaxed};
use std::sync::Arc as StdArc;

use loom::sync::atomic::{AtomicUsize, Ordering::Acquire, Ordering::Release};
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

/// The client as the store holds it: its first cell, the fresh cell its
/// next request brings in once a reset has forgotten it, and which one is
/// the client's now.
#[derive(Debug)]
struct Client {
    cells: [StateCell; 2],
    live: AtomicUsize,
}

impl Client {
    /// The client's cell now, as a cancel's lookup finds it.
    fn cell(&self) -> &StateCell {
        // Acquire: pairs with the Release in `forget`'s return, so the
        // fresh cell's state is visible.
        &self.cells[self.live.load(Acquire)]
    }
}

/// The cancel as `Limiter::give_back` makes it: the client's cell looked
/// up first, then the stamp tested and the tail rule applied, counted in
/// progress on the stripe from the test to the end of the exchange; a
/// cell found retired is looked past once (`act_on_live`'s second look).
fn cancel(
    algorithm: &TokenBucket,
    renewals: &Renewals,
    client: &Client,
    booked: &(Ticket, u64),
) -> bool {
    let (ticket, stamp) = booked;
    for _ in 0..2 {
        let cell = client.cell();
        if let Some(gave) = renewals.cancel(HASH, *stamp, || algorithm.unreserve(cell, NOW, ticket))
        {
            return gave;
        }
    }
    false
}

/// The broken twin: the tail rule on whatever state the client holds.
fn cancel_by_the_tail_alone(
    algorithm: &TokenBucket,
    _: &Renewals,
    client: &Client,
    booked: &(Ticket, u64),
) -> bool {
    algorithm.unreserve(client.cell(), NOW, &booked.0) == Some(true)
}

/// The second broken twin: the stamp tested, then the tail rule applied,
/// without holding the stripe in between; a reset, a check and a booking
/// fit in that gap.
fn cancel_with_the_stamp_apart(
    algorithm: &TokenBucket,
    renewals: &Renewals,
    client: &Client,
    booked: &(Ticket, u64),
) -> bool {
    renewals.stamp(HASH) == booked.1
        && algorithm.unreserve(client.cell(), NOW, &booked.0) == Some(true)
}

type Cancel = fn(&TokenBucket, &Renewals, &Client, &(Ticket, u64)) -> bool;

/// Forgets the client as `Limiter::remove` does: its cell retired between
/// two marks; its next request brings in the fresh cell.
fn forget(algorithm: &TokenBucket, renewals: &Renewals, client: &Client) -> bool {
    let retired = renewals.renew(HASH, || algorithm.force_evict(&client.cells[0]));
    // Release: pairs with the Acquire in `Client::cell`.
    client.live.store(1, Release);
    retired
}

/// `Limiter::reset`: in place unless a cancel is in progress, else by
/// forgetting. True iff it reset in place.
fn reset(algorithm: &TokenBucket, renewals: &Renewals, client: &Client) -> bool {
    renewals.renew_in_place(
        HASH,
        || {
            assert_eq!(algorithm.reset(&client.cells[0], NOW), Some(true));
            true
        },
        || {
            assert!(forget(algorithm, renewals, client));
            false
        },
    )
}

/// The third broken twin: a reset in place between two marks, as a
/// retirement is marked, whether or not a cancel is in progress.
fn reset_over_a_cancel(algorithm: &TokenBucket, renewals: &Renewals, client: &Client) -> bool {
    renewals.renew(HASH, || {
        assert_eq!(algorithm.reset(&client.cells[0], NOW), Some(true));
    });
    true
}

type Reset = fn(&TokenBucket, &Renewals, &Client) -> bool;

/// The race. Returns the interleavings, the fewest and most cancels that
/// gave back, and which ways of resetting were reached (in place, by
/// forgetting).
fn cancel_racing_reset_and_booking(
    name: &str,
    cancel: Cancel,
    reset: Reset,
) -> (usize, u64, u64, [bool; 2]) {
    let label = name.to_owned();
    // Outside the model: the ways of resetting reached.
    let ways = StdArc::new([StdAtomicBool::new(false), StdAtomicBool::new(false)]);
    let reached = StdArc::clone(&ways);
    let (runs, min, max) = check(name, move || {
        let algorithm = bucket();
        let renewals = Arc::new(Renewals::with_stripes(1));
        let client = Arc::new(Client {
            cells: [StateCell::new(0), algorithm.new_cell()],
            live: AtomicUsize::new(0),
        });
        // Spend the token, then book B1: ready at 10, the word at 20.
        assert!(algorithm.admit(client.cell(), NOW, 1));
        let b1 = book(&algorithm, &renewals, client.cell());
        assert_eq!(b1.0.ready_at(), INTERVAL);
        let canceller = {
            let (renewals, client) = (Arc::clone(&renewals), Arc::clone(&client));
            thread::spawn(move || cancel(&bucket(), &renewals, &client, &b1))
        };
        // The client starts over: reset, spend, book B2.
        let in_place = reset(&algorithm, &renewals, &client);
        reached[usize::from(!in_place)].store(true, Relaxed);
        let cell = client.cell();
        let mut executed = Vec::new();
        if algorithm.admit(cell, NOW, 1) {
            executed.push(NOW);
        }
        let (b2, _) = book(&algorithm, &renewals, cell);
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
        let (last, _) = book(&algorithm, &renewals, cell);
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
    });
    let ways = [ways[0].load(Relaxed), ways[1].load(Relaxed)];
    (runs, min, max, ways)
}

#[test]
fn a_cancel_racing_a_reset_and_a_new_booking_touches_only_its_own_state() {
    // Given back when the cancel lands before the reset (on the state it
    // booked on, which the reset then forgets); nothing otherwise. The
    // reset went both ways: in place, and by forgetting the client while
    // the cancel was in progress (never waiting for it).
    let (_, min, max, ways) =
        cancel_racing_reset_and_booking("tickets/cancel_vs_reset", cancel, reset);
    assert_eq!((min, max), (0, 1), "both outcomes reached");
    assert_eq!(ways, [true, true], "both ways of resetting reached");
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_cancel_by_the_tail_rule_alone_is_caught() {
    let _ = cancel_racing_reset_and_booking(
        "tickets/cancel_vs_reset/tail_alone",
        cancel_by_the_tail_alone,
        reset,
    );
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_cancel_that_tests_its_stamp_apart_from_its_exchange_is_caught() {
    let _ = cancel_racing_reset_and_booking(
        "tickets/cancel_vs_reset/stamp_apart",
        cancel_with_the_stamp_apart,
        reset,
    );
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_reset_in_place_over_a_cancel_in_progress_is_caught() {
    let _ = cancel_racing_reset_and_booking(
        "tickets/cancel_vs_reset/reset_over_cancel",
        cancel,
        reset_over_a_cancel,
    );
}
