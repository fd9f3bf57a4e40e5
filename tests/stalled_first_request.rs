//! A client's first request never waits for another writer of its shard
//! (but a rebuild): a removal whose key's `Eq` stalls for seconds while it
//! holds the shard's writers' lock stands in for the operating system
//! descheduling the removing thread there. Every client shares the one
//! shard (their keys hash to one constant). While the removal stalls, new
//! clients of that shard make their first requests, and each must return
//! before the stall ends, admitted on a fresh budget; known clients are
//! checked too.

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

use std::thread;
use std::time::Duration;

use tollgate::{ManualClock, TokenBucket};

mod stall;
use stall::{EqStalls, OneShard, STALL};

/// The clients known before the stall: few enough that the shard's table
/// has room for the newcomers, so no rebuild is due.
const KNOWN: u64 = 3;

/// The new clients whose first requests are made during the stall.
const NEW: u64 = 2;

#[test]
fn a_first_request_never_waits_for_a_stalled_removal_in_its_shard() {
    let _one = stall::exclusive();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(60))
        .capacity(2)
        .key_type::<EqStalls>()
        .clock(ManualClock::new())
        .build()
        .unwrap();
    for id in 0..KNOWN {
        assert!(limiter.allow_request(&EqStalls(id)));
    }
    stall::reset();
    thread::scope(|scope| {
        let remover = scope.spawn(|| {
            // The third comparison that finds client 0's key: the removal's
            // search under the shard's lock.
            stall::arm(Some(2));
            let removed = limiter.remove(&EqStalls(0));
            stall::arm(None);
            removed
        });
        while !stall::stalling() {
            assert!(!stall::stalled(), "the removal never stalled");
            thread::sleep(Duration::from_millis(1));
        }
        for id in 100..100 + NEW {
            let first = limiter.check(&EqStalls(id));
            assert!(first.is_allowed(), "client {id}'s first request");
            assert_eq!(first.remaining(), 1, "client {id} on a fresh budget");
        }
        for id in 1..KNOWN {
            assert!(limiter.allow_request(&EqStalls(id)), "client {id}");
        }
        assert!(
            stall::stalling(),
            "a first request waited for the removal holding its shard's lock \
             (the stall lasts {STALL:?})"
        );
        assert!(remover.join().unwrap(), "client 0 had a live state");
    });
    assert!(stall::stalled());
    // The newcomers are known now, and client 0 is gone.
    for id in 100..100 + NEW {
        assert!(limiter.allow_request(&EqStalls(id)));
        assert!(!limiter.allow_request(&EqStalls(id)), "client {id} spent");
    }
    assert_eq!(limiter.peek(&EqStalls(0)).remaining(), 2);
    assert_eq!(limiter.len() as u64, KNOWN - 1 + NEW);
}

/// The clients that fill the shard's first table (8 slots, 7 of them
/// usable before it is rebuilt), so that the next first request rebuilds
/// it.
const FILL: u64 = 7;

#[test]
fn a_first_request_never_waits_for_a_rebuild_stalled_while_it_moves_the_entries() {
    let _one = stall::exclusive();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(60))
        .capacity(2)
        .key_type::<OneShard>()
        .clock(ManualClock::new())
        .build()
        .unwrap();
    for id in 0..FILL {
        assert!(limiter.allow_request(&OneShard(id)));
    }
    stall::reset();
    thread::scope(|scope| {
        let rebuilder = scope.spawn(|| {
            // Its own key's hash, then the rebuild's of the entries it
            // moves: it stalls at the fourth, with three moved.
            stall::arm(Some(4));
            let first = limiter.check(&OneShard(1_000));
            stall::arm(None);
            first
        });
        while !stall::stalling() {
            assert!(!stall::stalled(), "the rebuild never stalled");
            thread::sleep(Duration::from_millis(1));
        }
        for id in 100..100 + NEW {
            let first = limiter.check(&OneShard(id));
            assert!(first.is_allowed(), "client {id}'s first request");
            assert_eq!(first.remaining(), 1, "client {id} on a fresh budget");
            let second = limiter.check(&OneShard(id));
            assert_eq!(second.remaining(), 0, "client {id} found again, once");
        }
        for id in 0..FILL {
            assert!(limiter.allow_request(&OneShard(id)), "client {id}");
        }
        assert!(
            stall::stalling(),
            "a first request waited for the rebuild moving its shard's entries \
             (the stall lasts {STALL:?})"
        );
        let first = rebuilder.join().unwrap();
        assert!(first.is_allowed());
        assert_eq!(first.remaining(), 1);
    });
    assert!(stall::stalled());
    // Every client once, with what it spent: the newcomers made during the
    // move among them.
    for id in (0..FILL).chain(100..100 + NEW) {
        assert!(!limiter.allow_request(&OneShard(id)), "client {id} spent");
    }
    assert!(limiter.allow_request(&OneShard(1_000)));
    assert!(!limiter.allow_request(&OneShard(1_000)));
    assert_eq!(limiter.len() as u64, FILL + NEW + 1);
}
