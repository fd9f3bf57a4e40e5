//! The memory behind a forgotten burst is given back: once a new client's
//! pass has forgotten a burst of one-off clients, the tables that held
//! them are rebuilt small and the old ones freed by the next writer, so
//! the bytes the limiter holds fall back near what an almost empty
//! limiter holds: what is left
//! is a small table per shard and the epoch collector's bookkeeping (a
//! bounded number of bags of deferred frees, about 100 KiB here, whatever
//! the burst), under a twentieth of what a burst of 300 000 clients took.
//! Counted by a global allocator of this test's own (its only test, so no
//! other test's allocations mix in).

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use tollgate::{ManualClock, TokenBucket};

/// The system allocator, counting the bytes outstanding.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; the
// count is a side tally.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's promises, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's promises, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

#[test]
fn a_forgotten_burst_gives_its_memory_back() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_millis(1))
        .capacity(4)
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    // A handful of clients, each well within its horizon: the small
    // limiter's footprint.
    for id in 0..8u64 {
        assert!(limiter.allow_request(&id));
    }
    let small = live();
    for id in 8..300_000u64 {
        assert!(limiter.allow_request(&id));
    }
    let burst = live() - small;
    assert!(burst > 5_000_000, "300 000 clients took {burst} bytes");
    // Past the horizon, new clients' passes forget the burst (the first
    // trusts the reading of the pass before it, during the burst; the next
    // one after it, a reading past the burst); a few thousand more
    // requests of a known client let the epoch collector mark the old
    // tables expired (a check frees nothing: it never runs another
    // client's `Drop`), and the next writer, one more new client, frees
    // them.
    clock.advance(Duration::from_millis(20));
    for id in 1_000_000..1_000_002 {
        assert!(limiter.allow_request(&id));
        for _ in 0..10_000 {
            clock.advance(Duration::from_millis(1));
            assert!(limiter.allow_request(&id));
        }
    }
    assert!(limiter.allow_request(&1_000_002));
    assert_eq!(limiter.len(), 3);
    let left = live() - small;
    assert!(
        left * 20 < burst,
        "the burst took {burst} bytes, and {left} are still held once it is forgotten"
    );
}
