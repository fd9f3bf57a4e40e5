//! A client removed while a quota change moves its entry is gone at once,
//! for good: no check reaches the copy the move had placed for it, so it
//! gets one fresh budget, not that copy's remains and then another; and
//! its dead entry keeps holding its room until it leaves, so at a full cap
//! the client comes back in rather than being turned away.
//!
//! A quota change (`set_quota`) carries every client into a new table,
//! shard by shard, under the shard's lock: it reads the client's state,
//! converts it to the new quota at a clock reading, places the copy, then
//! hands the client to the copy by one exchange from the state read. Here
//! that move is held up inside it (by the clock, which the conversion
//! reads, or by a key's `Hash`), standing in for the operating system
//! descheduling the changing thread there, and the client is removed
//! meanwhile.

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tollgate::{Clock, ManualClock, Overflow, TokenBucket};

mod stall;
use stall::OneShard;

/// The bucket: 12 tokens, refilled 12 an hour; the change halves the rate.
const CAPACITY: u64 = 12;

/// A clock that the quota change's thread, once armed, holds up: at its
/// first reading (the conversion of the move's first copy) until the test
/// has checked the client once, so that the move's exchange fails and the
/// move reads the client again; at its second (the conversion of that
/// second read, the first copy already placed) until the test lets it go.
#[derive(Debug, Clone)]
struct HeldClock(ManualClock);

/// Readings the armed thread has made.
static READINGS: AtomicU32 = AtomicU32::new(0);
/// The test has made its check: the first reading may return.
static CHECKED: AtomicBool = AtomicBool::new(false);
/// The second reading is held.
static HOLDING: AtomicBool = AtomicBool::new(false);
/// The test lets the second reading return.
static LET_GO: AtomicBool = AtomicBool::new(false);

std::thread_local! {
    static ARMED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Waits for `flag`, for at most 10 s (a test that never sets it fails
/// rather than hangs).
fn wait_for(flag: &AtomicBool) -> bool {
    let start = Instant::now();
    while !flag.load(Ordering::SeqCst) {
        if start.elapsed() > Duration::from_secs(10) {
            return false;
        }
        thread::sleep(Duration::from_millis(1));
    }
    true
}

impl Clock for HeldClock {
    fn now_nanos(&self) -> u64 {
        if ARMED.with(std::cell::Cell::get) {
            match READINGS.fetch_add(1, Ordering::SeqCst) {
                0 => {
                    let _ = wait_for(&CHECKED);
                }
                1 => {
                    HOLDING.store(true, Ordering::SeqCst);
                    let _ = wait_for(&LET_GO);
                    HOLDING.store(false, Ordering::SeqCst);
                }
                _ => {}
            }
        }
        self.0.now_nanos()
    }
}

fn bucket(per: Duration) -> tollgate::Builder<TokenBucket> {
    TokenBucket::builder()
        .rate(CAPACITY, per)
        .capacity(CAPACITY)
}

/// Checks `client` until one is denied: how many were admitted.
fn admitted_until_denied<C: Clock>(
    limiter: &tollgate::Limiter<tollgate::Tiered<TokenBucket>, OneShard, C>,
    client: &OneShard,
) -> u64 {
    let mut admitted = 0;
    while limiter.allow_request(client) {
        admitted += 1;
        assert!(admitted <= 3 * CAPACITY, "never denied");
    }
    admitted
}

#[test]
fn a_client_removed_during_its_move_gets_one_fresh_budget() {
    let _one = stall::exclusive();
    let hour = Duration::from_secs(3600);
    let limiter = bucket(hour)
        .reconfigurable()
        .key_type::<OneShard>()
        .clock(HeldClock(ManualClock::new()))
        .build()
        .unwrap();
    let k = OneShard(1);
    // One token spent before the change; the clock is frozen throughout.
    assert!(limiter.allow_request(&k));
    thread::scope(|scope| {
        let changer = scope.spawn(|| {
            ARMED.with(|armed| armed.set(true));
            limiter.set_quota(0, bucket(2 * hour)).unwrap();
            ARMED.with(|armed| armed.set(false));
        });
        // The move has read the client once: spend a second token, so that
        // its exchange fails and it reads the client again.
        while READINGS.load(Ordering::SeqCst) == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        assert!(limiter.allow_request(&k));
        CHECKED.store(true, Ordering::SeqCst);
        assert!(wait_for(&HOLDING), "the move never read the client again");
        // The first copy (one token spent) is placed; the move is held.
        assert!(limiter.remove(&k), "the client had a live state");
        let peeked = limiter.peek(&k).remaining();
        // Checks from another thread, which may wait for the move on their
        // insert path (a removed client comes back as a new one).
        let during = scope.spawn(|| admitted_until_denied(&limiter, &k));
        // Let the move go once the checks are done, or have waited a while.
        let start = Instant::now();
        while !during.is_finished() && start.elapsed() < Duration::from_millis(500) {
            thread::sleep(Duration::from_millis(1));
        }
        LET_GO.store(true, Ordering::SeqCst);
        changer.join().unwrap();
        let admitted = during.join().unwrap() + admitted_until_denied(&limiter, &k);
        assert_eq!(
            admitted, CAPACITY,
            "after remove(k), k was admitted {admitted} times; the exact algorithm allows {CAPACITY}"
        );
        // A peek's `remaining` is the quota as it stands: a fresh client
        // shows `CAPACITY`.
        assert_eq!(
            peeked, CAPACITY,
            "peek right after remove(k): remaining {peeked} (a fresh client would show {CAPACITY})"
        );
    });
}

#[test]
fn a_client_removed_during_a_stalled_move_finds_its_room_at_a_full_cap() {
    let _one = stall::exclusive();
    // Clients 0 to 6 fill the cap, all in one shard, kept in that order.
    const CAP: u64 = 7;
    let hour = Duration::from_secs(3600);
    let limiter = bucket(hour)
        .reconfigurable()
        .max_clients(CAP)
        .overflow(Overflow::DenyNew)
        .key_type::<OneShard>()
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let denied = stall::fill_the_cap(&limiter, CAP);
    stall::reset();
    thread::scope(|scope| {
        let changer = scope.spawn(|| {
            // The move hashes client 0, then stalls hashing client 1: the
            // last client, 6, is not moved yet.
            stall::arm(Some(1));
            limiter.set_quota(0, bucket(2 * hour)).unwrap();
            stall::arm(None);
        });
        let start = Instant::now();
        while !stall::stalling() {
            assert!(!stall::stalled(), "the move never stalled");
            assert!(start.elapsed() < Duration::from_secs(10), "no stall");
            thread::sleep(Duration::from_millis(1));
        }
        // Removed while the move holds the shard: its dead entry stays,
        // holding its room, until the move leaves it behind.
        let last = OneShard(CAP - 1);
        assert!(limiter.remove(&last));
        // It comes back: its room is its own, so it is let in (once the
        // move has left its entry behind), never turned away.
        assert!(
            limiter.allow_request(&last),
            "a client removed during a stalled move was turned away at a full cap: {:?}",
            limiter.stats()
        );
        changer.join().unwrap();
    });
    assert_eq!(limiter.stats().denied_new, denied);
    assert_eq!(limiter.len() as u64, CAP);
}
