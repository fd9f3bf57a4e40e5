//! `reset` never waits for a reservation's cancel in progress, however
//! long the cancelling thread is held up: a key's `Hash` that stalls for
//! seconds inside the cancel (while it looks the client up, holding its
//! stripe of stamps) stands in for the operating system descheduling it.
//!
//! A reset that meets a cancel in progress on its stripe cannot put a fresh
//! state in the same cell (the cancel could land on it), so it forgets the
//! client instead, as `remove` does: the client starts afresh all the same,
//! and the stalled cancel, once it runs, gives nothing back.

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use tollgate::{FixedWindow, Limiter, ManualClock, Reservable, TokenBucket};

mod stall;
use stall::STALL;

/// One stalled cancel at a time: the stall's flags are shared.
static SERIAL: Mutex<()> = Mutex::new(());

#[derive(Debug, Clone, PartialEq, Eq)]
struct Client(&'static str);

impl Hash for Client {
    fn hash<H: Hasher>(&self, state: &mut H) {
        stall::count();
        self.0.hash(state);
    }
}

/// `alice` spends her one unit and books one more; while the cancel of
/// that booking stalls, another thread resets her, and must return before
/// the stall ends. Then: the reset reported her live state, the cancel
/// gave nothing back (its state was replaced), and she is fresh: one unit
/// now, then denied.
fn reset_during_a_stalled_cancel<A: Reservable>(limiter: &Limiter<A, Client, ManualClock>) {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let alice = Client("alice");
    assert!(limiter.allow_request(&alice));
    let booking = limiter.reserve(&alice, Duration::MAX).unwrap();
    assert!(booking.wait() > Duration::ZERO);
    let (reset, during, gave_back) = thread::scope(|scope| {
        let canceller = scope.spawn(move || {
            stall::arm(Some(1));
            let gave_back = booking.cancel();
            stall::arm(None);
            gave_back
        });
        while !stall::stalling() {
            assert!(!canceller.is_finished(), "the cancel never stalled");
            thread::sleep(Duration::from_millis(1));
        }
        let reset = limiter.reset(&Client("alice"));
        let during = stall::stalling();
        (reset, during, canceller.join().unwrap())
    });
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
