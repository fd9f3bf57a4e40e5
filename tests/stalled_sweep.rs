//! A returning client is never turned away at a full cap by a sweep that
//! has removed its idle entry: the room an entry holds is given back before
//! any reader can find the entry gone.
//!
//! All the clients here share one shard (their key's `Hash` writes nothing
//! but a constant), so a full sweep that forgets all of them but one, a
//! busy client, then rebuilds the shard's table, shrinking it, and hashes
//! the busy client's key for its move: that `Hash` stalls for seconds,
//! standing in for the operating system descheduling the sweeping thread
//! while it holds the shard's lock. During the stall a forgotten client
//! comes back, at a cap reached by the clients the sweep has just
//! forgotten: its entry is gone from the table, so its room must be free.
//! The limiter denies new clients at a full cap (`Overflow::DenyNew`) after
//! a short look for idle clients, which here is skipped (the look before
//! found none, and it backs off).

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

use std::thread;
use std::time::Duration;

use tollgate::{ManualClock, Overflow, TokenBucket};

mod stall;
use stall::OneShard;

/// The clients the cap holds: client 0 stays busy, the rest go idle.
const CLIENTS: u64 = 8;

#[test]
fn a_client_a_stalled_sweep_forgot_finds_its_room_free() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .max_clients(CLIENTS)
        .overflow(Overflow::DenyNew)
        .key_type::<OneShard>()
        .clock(clock.clone())
        .build()
        .unwrap();
    // Every bucket is empty: the newcomer's short look finds no one idle.
    let denied = stall::fill_the_cap(&limiter, CLIENTS);
    assert_eq!(denied, 1);
    // Every bucket is full again, so idle, but client 0's: it spends again.
    clock.advance(Duration::from_secs(1));
    assert!(limiter.allow_request(&OneShard(0)));
    stall::reset();
    thread::scope(|scope| {
        let sweeper = scope.spawn(|| {
            // The sweep forgets clients 1 to 7, then shrinks the table and
            // hashes client 0 to move it: the stall.
            stall::arm(Some(0));
            let removed = limiter.sweep();
            stall::arm(None);
            removed
        });
        while !stall::stalling() {
            assert!(!stall::stalled(), "the sweep never stalled");
            thread::sleep(Duration::from_millis(1));
        }
        // Client 1's entry is gone: its room is free, so it comes back in.
        assert!(
            limiter.allow_request(&OneShard(1)),
            "a client the sweep forgot was turned away at a full cap: {:?}",
            limiter.stats()
        );
        assert_eq!(sweeper.join().unwrap(), CLIENTS as usize - 1);
    });
    let stats = limiter.stats();
    assert_eq!(stats.denied_new, denied, "{stats:?}");
    assert_eq!(limiter.len(), 2, "clients 0 and 1");
}
