//! Model 19: a cancel, as `Limiter::give_back` makes it, racing each way a
//! client's state can be replaced, and another cancel.
//!
//! The cancel runs the crate's own steps over the stand-in map: it looks
//! the client up past dead cells (`act_on_live`) and reads the clock, and
//! only then counts itself in progress on the stripe of stamps
//! (`Renewals::cancel`), tests its stamp and makes its exchange by the tail
//! rule. No user code runs while it is counted; and since any number of
//! cancels may be counted at once, none waits for another.
//!
//! The client is a token bucket of capacity 1 (1 token per 10 ns) that has
//! spent its token at 0 and booked `B1` (ready at 10). A spawned thread
//! cancels `B1` while the main thread, at once:
//!
//! - **reset**: `Limiter::reset` (in place unless a cancel is in progress,
//!   else by forgetting the client);
//! - **remove**: `Limiter::remove` (the cell retired between two marks);
//! - **evict**: advances the clock to 30 and forgets the client as idle
//!   (which touches no stamp: the cancel's clock reading, made once it has
//!   found the state, is then past `B1`'s time), unless the cancel's
//!   exchange came between the eviction's look and its own;
//! - **carry**: a quota change's carry, every stripe marked around a move
//!   of the client's cell to a new table (`StandIn::relocate`);
//! - **cancel**: with a second booking `B2` (ready at 20) made before the
//!   race, cancels `B2`: the newest, with no replacement, so it must go
//!   back, whatever the cancel of `B1` is doing meanwhile;
//!
//! then checks the client at the reading it is at (0, or 30 after the
//! eviction), bringing it in afresh if it was forgotten, and books `B3`:
//! after a reset or a removal the fresh state comes round to the very word
//! `B1` left. Property, in every interleaving: what the state the client
//! holds at the end counts (its admissions at their readings, its bookings
//! not given back at their ready times: from the replacement on if the
//! replacement forgot the client, from the start otherwise) fits the exact
//! bucket, and one more booking is ready exactly when the exact bucket
//! first admits it after them. A cancel that gave `B1` back on a state that
//! replaced the one it was booked on would hand `B3`'s slot out again.
//! Both outcomes of the cancel (given back, or not) are reached.
//!
//! Broken twins (written here, not in the crate): a cancel that counts
//! itself in progress and tests its stamp first, and only then looks the
//! client up (a reset then forgets the client, and the cancel lands on its
//! fresh state); the tail rule alone, with no stamps; and cancels that
//! exclude each other by a lock, one that finds it held giving nothing back
//! (the newest booking, which must always go back, then may not).

use loom::sync::atomic::{AtomicBool, Ordering::Acquire, Ordering::Release};
use loom::sync::Arc;
use loom::thread;

use crate::arrival::Room;
use crate::eviction::{check, check_at};
use crate::stand_in::StandIn;
use tollgate::__loom::{
    act_on_live, evict, forget_client, reset_client, token_bucket, Algorithm, Booking, Index,
    Mortal, Renewals, StateCell, Ticket,
};
use tollgate::{Clock, ManualClock, TokenBucket};

const KEY: &str = "alice";

/// The client's hash: the model has one stripe.
const HASH: u64 = 0;

/// ns per token.
const INTERVAL: u64 = 10;

/// The reading an eviction is judged at: `B1`'s state is idle by then.
const LATER: u64 = 30;

/// What races the cancel of `B1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Racer {
    Reset,
    Remove,
    Evict,
    Carry,
    Cancel,
}

fn bucket() -> TokenBucket {
    token_bucket(1, std::time::Duration::from_nanos(INTERVAL), 1).unwrap()
}

/// The limiter's parts the cancel and the racers touch.
struct Limiter {
    algorithm: TokenBucket,
    renewals: Renewals,
    index: StandIn<StateCell>,
    room: Room,
    clock: ManualClock,
    /// The third twin's lock.
    held: AtomicBool,
}

/// A booking: its ticket and the stamp it was made under.
type Booked = (Ticket, u64);

impl Limiter {
    /// Books one unit at `now`, as `Limiter::reserve_n` does: the stamp
    /// read once the state is found, before the booking's exchange.
    fn book(&self, now: u64) -> Booked {
        self.index
            .with(KEY, |cell| {
                let stamp = self.renewals.stamp(HASH);
                match self.algorithm.reserve(cell, now, 1, u64::MAX) {
                    Some(Booking::Granted(ticket, _)) => (ticket, stamp),
                    other => panic!("a booking with no limit on its wait: {other:?}"),
                }
            })
            .unwrap_or_else(|_| panic!("the client is held"))
    }

    /// `Limiter::remove`.
    fn remove(&self) -> bool {
        self.renewals.renew(HASH, || {
            forget_client(&self.index, KEY, |cell| self.algorithm.force_evict(cell))
        })
    }

    /// `Limiter::reset` at `now`.
    fn reset(&self, now: u64) -> bool {
        self.renewals.renew_in_place(
            HASH,
            || {
                reset_client(
                    &self.index,
                    KEY,
                    |cell| self.algorithm.reset(cell, now),
                    || self.remove(),
                )
            },
            || self.remove(),
        )
    }
}

/// How a cancel is made.
type Cancel = fn(&Limiter, &Booked) -> bool;

/// `Limiter::give_back`: look up, read the clock, then test and exchange.
fn give_back(limiter: &Limiter, (ticket, stamp): &Booked) -> bool {
    act_on_live(&limiter.index, KEY, |cell| {
        let now = limiter.clock.now_nanos();
        limiter.renewals.cancel(HASH, *stamp, || {
            limiter.algorithm.unreserve(cell, now, ticket)
        })
    })
    .unwrap_or(false)
}

/// The first broken twin: counted in progress and the stamp tested
/// first, the client looked up after.
fn give_back_looking_up_after_the_test(limiter: &Limiter, (ticket, stamp): &Booked) -> bool {
    limiter
        .renewals
        .cancel(HASH, *stamp, || {
            act_on_live(&limiter.index, KEY, |cell| {
                let now = limiter.clock.now_nanos();
                limiter.algorithm.unreserve(cell, now, ticket)
            })
        })
        .unwrap_or(false)
}

/// The second broken twin: the tail rule on whatever state the client
/// holds, no stamps.
fn give_back_by_the_tail_alone(limiter: &Limiter, (ticket, _): &Booked) -> bool {
    act_on_live(&limiter.index, KEY, |cell| {
        let now = limiter.clock.now_nanos();
        limiter.algorithm.unreserve(cell, now, ticket)
    })
    .unwrap_or(false)
}

/// The third broken twin: cancels exclude each other by a lock, and one
/// that finds it held gives nothing back rather than wait.
fn give_back_excluding_other_cancels(limiter: &Limiter, booked: &Booked) -> bool {
    // Acquire, Release: a lock's.
    if limiter.held.swap(true, Acquire) {
        return false;
    }
    let gave = give_back(limiter, booked);
    limiter.held.store(false, Release);
    gave
}

/// The race; returns the interleavings and the fewest and most cancels of
/// `B1` that gave back.
fn race(name: &str, racer: Racer, cancel: Cancel) -> (usize, u64, u64) {
    let label = name.to_owned();
    check(name, move || {
        let algorithm = bucket();
        let limiter = Arc::new(Limiter {
            algorithm,
            renewals: Renewals::with_stripes(1),
            index: StandIn::holding(KEY, StateCell::new(0)),
            room: Room::holding(1, None),
            clock: ManualClock::new(),
            held: AtomicBool::new(false),
        });
        // Spend the token, then book B1 (ready at 10), and B2 (at 20) if a
        // second cancel races.
        assert!(limiter
            .index
            .with(KEY, |cell| algorithm.admit(cell, 0, 1))
            .unwrap_or(false));
        let b1 = limiter.book(0);
        let b1_ready = b1.0.ready_at();
        assert_eq!(b1_ready, INTERVAL);
        let b2 = (racer == Racer::Cancel).then(|| limiter.book(0));
        let canceller = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || cancel(&limiter, &b1))
        };
        let mut executed = vec![];
        // The reading the client goes on at, and whether the replacement
        // forgot the state B1 was booked on (the exact bucket then starts
        // afresh).
        let (now, forgot) = match racer {
            Racer::Reset => {
                assert!(limiter.reset(0), "the client had a live state");
                (0, true)
            }
            Racer::Remove => {
                assert!(limiter.remove(), "the client had a live state");
                (0, true)
            }
            Racer::Evict => {
                limiter.clock.set(std::time::Duration::from_nanos(LATER));
                limiter.room.evicting(LATER);
                // Idle at 30 either way; a cancel's exchange between the
                // eviction's look and its own makes the eviction fail.
                (
                    LATER,
                    evict(&algorithm, &limiter.index, KEY, LATER, &|t| {
                        limiter.room.evicting(t)
                    }),
                )
            }
            Racer::Carry => {
                limiter.renewals.renew_all(|| {
                    limiter.index.relocate(KEY, |cell| cell.relocate());
                });
                (0, false)
            }
            Racer::Cancel => {
                // The newest booking, and nothing replaces the state: it
                // always goes back, whatever the other cancel is doing.
                assert!(
                    cancel(&limiter, &b2.expect("booked")),
                    "{label}: a cancel gave nothing back for another in progress"
                );
                (0, false)
            }
        };
        // The client goes on: a check (bringing it in afresh if it was
        // forgotten), and a booking.
        if check_at(algorithm, &limiter.index, &limiter.room, now, false) {
            executed.push(now);
        }
        let (b3, _) = limiter.book(now);
        executed.push(b3.ready_at());
        let gave = canceller.join().unwrap();
        if !forgot {
            executed.push(0);
            if !gave {
                executed.push(b1_ready);
            }
        }
        executed.sort_unstable();
        let name = &label;
        for pair in executed.windows(2) {
            assert!(
                pair[1] >= pair[0] + INTERVAL,
                "{name}: over-admitted: {executed:?} on a bucket of 1"
            );
        }
        let (last, _) = limiter.book(now);
        let want = executed.last().unwrap() + INTERVAL;
        assert!(
            last.ready_at() >= want,
            "{name}: over-admitted: a booking after the race is ready at {}, with {executed:?} standing",
            last.ready_at()
        );
        assert_eq!(
            last.ready_at(),
            want,
            "{name}: a booking after the race waits longer than the exact bucket makes it"
        );
        assert!(
            !limiter.index.snapshot()[KEY].is_dead(),
            "{name}: the map kept a dead cell"
        );
        u64::from(gave)
    })
}

fn reached_both(name: &str, racer: Racer) {
    let (_, min, max) = race(name, racer, give_back);
    assert_eq!((min, max), (0, 1), "{name}: both outcomes of the cancel");
}

#[test]
fn a_cancel_racing_a_reset() {
    reached_both("cancels/reset", Racer::Reset);
}

#[test]
fn a_cancel_racing_a_removal() {
    reached_both("cancels/remove", Racer::Remove);
}

#[test]
fn a_cancel_racing_an_idle_eviction() {
    reached_both("cancels/evict", Racer::Evict);
}

#[test]
fn a_cancel_racing_a_quota_change_s_carry() {
    reached_both("cancels/carry", Racer::Carry);
}

#[test]
fn a_cancel_racing_another_cancel() {
    reached_both("cancels/cancel", Racer::Cancel);
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_cancel_that_looks_up_after_its_test_is_caught_by_a_reset() {
    let _ = race(
        "cancels/broken/look_up_after/reset",
        Racer::Reset,
        give_back_looking_up_after_the_test,
    );
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_cancel_that_looks_up_after_its_test_is_caught_by_a_removal() {
    let _ = race(
        "cancels/broken/look_up_after/remove",
        Racer::Remove,
        give_back_looking_up_after_the_test,
    );
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_cancel_by_the_tail_alone_is_caught_by_a_removal() {
    let _ = race(
        "cancels/broken/tail_alone/remove",
        Racer::Remove,
        give_back_by_the_tail_alone,
    );
}

#[test]
#[should_panic(expected = "gave nothing back for another in progress")]
fn cancels_that_exclude_each_other_are_caught() {
    let _ = race(
        "cancels/broken/exclusive/cancel",
        Racer::Cancel,
        give_back_excluding_other_cancels,
    );
}
