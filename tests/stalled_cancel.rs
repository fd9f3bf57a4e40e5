//! Neither `reset` nor another cancel ever waits for a reservation's
//! cancel in progress, however long the cancelling thread is held up: a
//! key's `Hash`, or the limiter's clock, that stalls for seconds inside the
//! cancel (while it looks the client up, or reads the time) stands in for
//! the operating system descheduling it.
//!
//! A reset that meets a cancel in progress on its stripe cannot put a fresh
//! state in the same cell (the cancel could land on it), so it forgets the
//! client instead, as `remove` does: the client starts afresh all the same,
//! and the stalled cancel, once it runs, gives nothing back. (A cancel
//! stalled in the key's `Hash` has not yet tested its stamp: the reset
//! finds no cancel in progress and resets in place; the stalled cancel
//! then finds its stamp renewed, and gives nothing back.) Another cancel
//! of the same client (or of one sharing its stripe) gives its booking back
//! at once, as if the stalled one had not begun.

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

use std::hash::{Hash, Hasher};
use std::thread;
use std::time::Duration;

use tollgate::{
    Algorithm, Clock, FixedWindow, Limiter, ManualClock, Reservable, Reservation, TokenBucket,
};

mod stall;
use stall::STALL;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Client(&'static str);

impl Hash for Client {
    fn hash<H: Hasher>(&self, state: &mut H) {
        stall::count();
        self.0.hash(state);
    }
}

/// Cancels `booking` on a thread armed to stall at its `stall_at`-th
/// counted call, and runs `meanwhile` once it stalls. Returns what
/// `meanwhile` returned, whether the stall was still on when it did, and
/// what the cancel returned.
fn during_a_stalled_cancel<A, K, C, R>(
    booking: Reservation<'_, A, K, C>,
    stall_at: u32,
    meanwhile: impl FnOnce() -> R,
) -> (R, bool, bool)
where
    A: Algorithm,
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    thread::scope(|scope| {
        let canceller = scope.spawn(move || {
            stall::arm(Some(stall_at));
            let gave_back = booking.cancel();
            stall::arm(None);
            gave_back
        });
        while !stall::stalling() {
            assert!(!canceller.is_finished(), "the cancel never stalled");
            thread::sleep(Duration::from_millis(1));
        }
        let done = meanwhile();
        let during = stall::stalling();
        (done, during, canceller.join().unwrap())
    })
}

/// `alice` spends her one unit and books one more; while the cancel of
/// that booking stalls, another thread resets her, and must return before
/// the stall ends. Then: the reset reported her live state, the cancel
/// gave nothing back (its state was replaced), and she is fresh: one unit
/// now, then denied.
fn reset_during_a_stalled_cancel<A: Reservable>(limiter: &Limiter<A, Client, ManualClock>) {
    let _one = stall::exclusive();
    let alice = Client("alice");
    assert!(limiter.allow_request(&alice));
    let booking = limiter.reserve(&alice, Duration::MAX).unwrap();
    assert!(booking.wait() > Duration::ZERO);
    let (reset, during, gave_back) =
        during_a_stalled_cancel(booking, 1, || limiter.reset(&Client("alice")));
    assert!(
        during,
        "a reset waited for a cancel stalled {STALL:?} holding its stripe"
    );
    assert!(reset, "alice had a live state");
    assert!(
        !gave_back,
        "the cancel gave its booking back to the state the reset replaced"
    );
    assert!(
        limiter.allow_request(&alice),
        "alice is fresh after the reset"
    );
    assert!(!limiter.allow_request(&alice), "one unit, no more");
}

#[test]
fn reset_never_waits_for_a_stalled_cancel_token_bucket() {
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(3600))
        .capacity(1)
        .clock(ManualClock::new())
        .key_type::<Client>()
        .build()
        .unwrap();
    reset_during_a_stalled_cancel(&limiter);
}

#[test]
fn reset_never_waits_for_a_stalled_cancel_fixed_window_under_a_cap() {
    let limiter = FixedWindow::builder()
        .limit(1)
        .window(Duration::from_secs(3600))
        .max_clients(1)
        .clock(ManualClock::new())
        .key_type::<Client>()
        .build()
        .unwrap();
    reset_during_a_stalled_cancel(&limiter);
    assert_eq!(limiter.len(), 1, "alice holds her one unit of room");
}

/// A [`ManualClock`] whose readings count toward the stall.
#[derive(Clone)]
struct StallingClock(ManualClock);

impl Clock for StallingClock {
    fn now_nanos(&self) -> u64 {
        stall::count();
        self.0.now_nanos()
    }
}

/// `alice` spends her one unit and books two more, one after the other.
/// The cancel of the first stalls at its `stall_at`-th counted call (a
/// hash of her key, or a clock reading); meanwhile another thread cancels
/// the second, and must return before the stall ends. Then: the second
/// was given back at once (it was the last charged), the stalled cancel
/// gave the first back too once it ran on (it was then the last), and
/// alice is left with nothing but her spent unit: a booking now waits
/// exactly one interval.
fn cancel_during_a_stalled_cancel<K, C>(
    limiter: &Limiter<TokenBucket, K, C>,
    alice: &K,
    stall_at: u32,
) where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    let _one = stall::exclusive();
    stall::reset();
    assert!(limiter.allow_request(alice));
    let first = limiter.reserve(alice, Duration::MAX).unwrap();
    let second = limiter.reserve(alice, Duration::MAX).unwrap();
    assert_eq!(
        (first.wait(), second.wait()),
        (INTERVAL, 2 * INTERVAL),
        "two bookings, one after the other"
    );
    let (second_back, during, first_back) =
        during_a_stalled_cancel(first, stall_at, || second.cancel());
    assert!(
        during,
        "a cancel waited for another cancel stalled {STALL:?} on its stripe"
    );
    assert!(second_back, "the last booking charged goes back at once");
    assert!(first_back, "the stalled cancel then found its booking last");
    let next = limiter.reserve(alice, Duration::MAX).unwrap();
    assert_eq!(next.wait(), INTERVAL, "both bookings were given back");
    next.commit();
}

/// The bucket's interval: one unit an hour, capacity 1.
const INTERVAL: Duration = Duration::from_secs(3600);

#[test]
fn a_cancel_never_waits_for_a_cancel_stalled_in_the_key_s_hash() {
    let limiter = TokenBucket::builder()
        .rate(1, INTERVAL)
        .capacity(1)
        .clock(ManualClock::new())
        .key_type::<Client>()
        .build()
        .unwrap();
    // The cancel's first counted hash picks the stripe; the second is its
    // look-up of alice's state.
    cancel_during_a_stalled_cancel(&limiter, &Client("alice"), 1);
}

#[test]
fn a_cancel_never_waits_for_a_cancel_stalled_in_the_clock() {
    let limiter = TokenBucket::builder()
        .rate(1, INTERVAL)
        .capacity(1)
        .clock(StallingClock(ManualClock::new()))
        .key_type::<String>()
        .build()
        .unwrap();
    // The cancel reads the clock once, to judge whether the booking's
    // time has come.
    cancel_during_a_stalled_cancel(&limiter, &"alice".to_owned(), 0);
}
