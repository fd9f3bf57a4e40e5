//! `remove`, and `reset` of a sliding window log (which forgets the
//! client), never wait for another thread that holds the client's shard:
//! a key's `Hash` that stalls for seconds inside a table rebuild stands in
//! for the operating system descheduling the rebuilding thread, which holds
//! the shard's writers' lock for the whole move.
//!
//! One thread inserts new clients until one of its inserts rebuilds a
//! shard, and the fifth live key the rebuild hashes stalls. While it
//! stalls, another thread forgets every known client, those of the stalled
//! shard among them, then forgets each again (nothing left to forget) and
//! peeks at it (fresh), and must be done before the stall ends. Afterwards
//! every forgotten client reads as fresh, and the room of an entry that
//! could not be taken out of the table at once comes back when the entry is
//! next met (here, by a sweep).

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

use std::thread;
use std::time::Duration;

use tollgate::{Algorithm, Limiter, ManualClock, SlidingWindowLog, TokenBucket};

mod stall;
use stall::{Client, LIVE, STALL};

/// Far more than the test spends.
const CAPACITY: u64 = 1_000;

/// A cap no insert reaches: the store then counts the room each entry holds.
const CAP: u64 = 1_000_000;

/// Runs `forget` on every known client while a rebuild holding one shard's
/// lock stalls, and returns whether the last call returned before the
/// stall ended, and how many new clients the inserting thread brought in.
fn forget_all_during_a_stall<A: Algorithm>(
    limiter: &Limiter<A, Client, ManualClock>,
    forget: impl Fn(&Client) -> bool + Sync,
) -> (bool, u64) {
    stall::reset();
    thread::scope(|scope| {
        let forgetter = scope.spawn(|| {
            while !stall::stalling() {
                if stall::stalled() {
                    return false;
                }
                thread::sleep(Duration::from_millis(1));
            }
            for id in 0..LIVE {
                assert!(forget(&Client(id)), "client {id} had no live state");
            }
            // Still during the stall, those whose dead entries are left in
            // the stalled shard among them: each reads as absent, at once.
            for id in 0..LIVE {
                assert!(!forget(&Client(id)), "client {id} forgotten twice");
                assert_eq!(
                    limiter.peek(&Client(id)).remaining(),
                    CAPACITY,
                    "client {id} still read as known after it was forgotten"
                );
            }
            stall::stalling()
        });
        // New clients until one insert's rebuild has stalled.
        stall::arm(Some(4));
        let mut id = 1 << 32;
        while !stall::stalled() && id < (1 << 32) + 1_000_000 {
            assert!(limiter.allow_request(&Client(id)));
            id += 1;
        }
        stall::arm(None);
        assert!(stall::stalled(), "no rebuild stalled");
        (forgetter.join().unwrap(), id - (1 << 32))
    })
}

/// Every known client spent one unit at the frozen instant.
fn spend<A: Algorithm>(limiter: &Limiter<A, Client, ManualClock>) {
    for id in 0..LIVE {
        assert!(limiter.allow_request(&Client(id)));
    }
}

/// After the stall: every forgotten client reads as fresh; the entries that
/// could not be taken out at once still count in `len()`; a sweep (which
/// forgets no new client: each spent a unit) takes out whatever forgotten
/// entry is still in the table and gives its room back, so that `len()`
/// counts the new clients alone; and a forgotten client's next request
/// starts afresh.
fn after<A: Algorithm>(limiter: &Limiter<A, Client, ManualClock>, inserted: u64) {
    for id in 0..LIVE {
        assert_eq!(
            limiter.peek(&Client(id)).remaining(),
            CAPACITY,
            "client {id} still read as known after it was forgotten"
        );
    }
    // The entries the rebuild had already moved when it stalled were
    // retired in its new table while it held the shard: each is still
    // there, dead, and holds its unit of room (`len()` and the cap count
    // it) until it is met, unless the rebuild, finding most of the shard
    // gone, rebuilt it once more and left them behind.
    let stranded = limiter.len() as u64 - inserted;
    eprintln!("{stranded} forgotten entries left in the table for later");
    let _ = limiter.sweep();
    assert_eq!(
        limiter.len() as u64,
        inserted,
        "the room of forgotten clients came back"
    );
    for id in 0..LIVE {
        let decision = limiter.check(&Client(id));
        assert!(decision.is_allowed());
        assert_eq!(decision.remaining(), CAPACITY - 1, "client {id} not fresh");
    }
    assert_eq!(limiter.len() as u64, inserted + LIVE);
}

/// The whole run for one way of forgetting: every known client spends a
/// unit, `forget` runs on each during a stalled rebuild and must be done
/// before the stall ends, and afterwards every forgotten client is fresh.
fn forgetting_never_waits<A: Algorithm>(
    limiter: &Limiter<A, Client, ManualClock>,
    forget: impl Fn(&Client) -> bool + Sync,
    what: &str,
) {
    let _one = stall::exclusive();
    spend(limiter);
    let (during, inserted) = forget_all_during_a_stall(limiter, forget);
    assert!(
        during,
        "a {what} waited for the rebuild stalled {STALL:?} holding its shard"
    );
    after(limiter, inserted);
}

#[test]
fn remove_never_waits_for_a_stalled_rebuild() {
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(3600))
        .capacity(CAPACITY)
        .max_clients(CAP)
        .clock(ManualClock::new())
        .key_type::<Client>()
        .build()
        .unwrap();
    forgetting_never_waits(&limiter, |id| limiter.remove(id), "remove");
}

#[test]
fn reset_of_a_log_never_waits_for_a_stalled_rebuild() {
    let limiter = SlidingWindowLog::builder()
        .limit(CAPACITY)
        .window(Duration::from_secs(3600))
        .max_clients(CAP)
        .clock(ManualClock::new())
        .key_type::<Client>()
        .build()
        .unwrap();
    forgetting_never_waits(&limiter, |id| limiter.reset(id), "reset");
}
