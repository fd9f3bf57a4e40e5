//! A thread held up inside a key's `Hash`, standing in for the operating
//! system descheduling it there: shared by the suites that show a check,
//! `remove` or `reset` never waits for a thread holding a lock.
//!
//! A test arms the thread that is to stall ([`arm`]); each key it wants
//! counted calls [`count`] from its `Hash`, and the armed thread's counted
//! hash after `n` others sleeps for [`STALL`].

#![allow(dead_code)] // each suite uses its own part

use std::cell::Cell;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

/// How long the armed thread stalls: long enough that the threads that
/// must not wait for it finish their work well within it, even in a debug
/// build on a loaded 2-core machine (a thousand-odd removals and peeks).
pub const STALL: Duration = Duration::from_secs(3);

/// Whether the armed thread is inside its stall now.
pub static STALLING: AtomicBool = AtomicBool::new(false);
/// Whether the stall has happened.
pub static STALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// On the armed thread only: how many counted hashes before the stall.
    static COUNTDOWN: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Arms this thread to stall in its counted hash after `n` others; `None`
/// disarms it.
pub fn arm(n: Option<u32>) {
    COUNTDOWN.with(|countdown| countdown.set(n));
}

/// The flags belong to one test at a time: a suite's tests run in
/// parallel, and one that clears them ([`reset`]) or stalls while another
/// waits on them would answer for the other. Held for a whole test.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Clears both flags, for the next stall.
pub fn reset() {
    STALLING.store(false, Ordering::SeqCst);
    STALLED.store(false, Ordering::SeqCst);
}

/// One counted hash: on an armed thread whose count is up, the stall.
pub fn count() {
    COUNTDOWN.with(|countdown| match countdown.get() {
        Some(0) => {
            countdown.set(None);
            STALLING.store(true, Ordering::SeqCst);
            thread::sleep(STALL);
            STALLING.store(false, Ordering::SeqCst);
            STALLED.store(true, Ordering::SeqCst);
        }
        Some(n) => countdown.set(Some(n - 1)),
        None => {}
    });
}

/// Whether the armed thread is inside its stall now.
pub fn stalling() -> bool {
    STALLING.load(Ordering::SeqCst)
}

/// Whether the stall has happened.
pub fn stalled() -> bool {
    STALLED.load(Ordering::SeqCst)
}

/// Known clients: ids below this. About 20 a shard.
pub const LIVE: u64 = 1_280;

/// A client id whose hash counts toward the stall when it is a known
/// client's ([`LIVE`]): so a rebuild, which hashes every live key it moves,
/// stalls part way through a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client(pub u64);

impl Hash for Client {
    fn hash<H: Hasher>(&self, state: &mut H) {
        if self.0 < LIVE {
            count();
        }
        self.0.hash(state);
    }
}

/// A client id whose key hashes to one constant, so that every client
/// shares one shard (and one probe sequence: the table keeps them in the
/// order they came, and a rebuild moves them in that order), each hash
/// counting toward the stall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneShard(pub u64);

impl Hash for OneShard {
    fn hash<H: Hasher>(&self, state: &mut H) {
        count();
        0u8.hash(state);
    }
}

/// A client id whose key hashes to one constant, as [`OneShard`]'s does,
/// and whose `Eq`, rather than its `Hash`, counts toward the stall: each
/// comparison that finds the key equal to itself counts, so a removal,
/// which finds its key three times (the look that retires the cell, the
/// look for the dead entry, and the search under the shard's lock), can be
/// stalled at the third, holding the lock.
#[derive(Debug, Clone)]
pub struct EqStalls(pub u64);

impl Hash for EqStalls {
    fn hash<H: Hasher>(&self, state: &mut H) {
        0u8.hash(state);
    }
}

impl PartialEq for EqStalls {
    fn eq(&self, other: &Self) -> bool {
        let equal = self.0 == other.0;
        if equal {
            count();
        }
        equal
    }
}

impl Eq for EqStalls {}

/// Fills a cap of `clients` with clients `0..clients` (each spends a unit),
/// then has a newcomer denied: the short look for idle clients made at a
/// full cap finds none, so the next one is skipped (it would wait for a
/// shard a test holds). Returns the clients denied so far.
pub fn fill_the_cap<A: tollgate::Algorithm, C: tollgate::Clock>(
    limiter: &tollgate::Limiter<A, OneShard, C>,
    clients: u64,
) -> u64 {
    for id in 0..clients {
        assert!(limiter.allow_request(&OneShard(id)));
    }
    assert!(!limiter.allow_request(&OneShard(u64::MAX)));
    limiter.stats().denied_new
}
