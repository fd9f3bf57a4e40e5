//! A check on a tracked client runs none of the limiter's other keys'
//! `Drop`: the table a rebuild retires, with the keys of the clients
//! removed from it, is freed on a writer's path (an insert, a removal, a
//! sweep, a rebuild), never by a thread that only checks.
//!
//! One thread floods the limiter with new clients, each removed at once,
//! so that inserts keep rebuilding tables full of removed entries, whose
//! keys are dropped when those tables are freed; another checks one
//! tracked client all the while. Each flood key's `Drop` records whether
//! the checking thread ran it.

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use tollgate::TokenBucket;

/// Flood keys dropped by the checking thread, and by any thread.
static DROPPED_BY_CHECKER: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);

std::thread_local! {
    /// Set on the checking thread only.
    static CHECKER: Cell<bool> = const { Cell::new(false) };
}

/// A client id; flood clients' keys record who drops them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Tracked,
    Flood(u64),
}

impl Drop for Key {
    fn drop(&mut self) {
        if let Key::Flood(_) = self {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            if CHECKER.with(Cell::get) {
                DROPPED_BY_CHECKER.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[test]
fn a_check_never_runs_another_clients_drop() {
    let limiter = TokenBucket::builder()
        // One token a nanosecond: the checks are never denied.
        .rate(1_000_000_000, Duration::from_secs(1))
        .capacity(1_000_000_000)
        .key_type::<Key>()
        .build()
        .unwrap();
    assert!(limiter.allow_request(&Key::Tracked));
    let done = AtomicBool::new(false);
    let checks = thread::scope(|scope| {
        let checker = scope.spawn(|| {
            CHECKER.with(|checker| checker.set(true));
            let mut checks = 0u64;
            while !done.load(Ordering::Relaxed) {
                assert!(limiter.allow_request(&Key::Tracked));
                checks += 1;
            }
            checks
        });
        for id in 0..200_000 {
            let key = Key::Flood(id);
            assert!(limiter.allow_request(&key));
            assert!(limiter.remove(&key));
        }
        done.store(true, Ordering::Relaxed);
        checker.join().unwrap()
    });
    let by_checker = DROPPED_BY_CHECKER.load(Ordering::Relaxed);
    let dropped = DROPPED.load(Ordering::Relaxed);
    assert!(
        by_checker == 0,
        "checker: {checks} checks, ran {by_checker} flood keys' Drop (of {dropped})"
    );
    assert!(
        dropped > 200_000,
        "the flood's removed keys were never freed from retired tables: {dropped} drops"
    );
}
