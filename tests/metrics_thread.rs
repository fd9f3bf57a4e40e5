//! The `metrics` feature's publishing thread (`tollgate-metrics`): it
//! starts with the first limiter that counts, runs while any limiter with
//! metrics lives, and ends once the last is dropped. A suite of its own,
//! one test, so that no other test's limiters keep the thread alive.
//! Linux only: it finds the thread by name in `/proc/self/task`.
//! `cargo test --features metrics --test metrics_thread`; about 5 s.

#![cfg(all(feature = "metrics", target_os = "linux", not(feature = "loom")))]

use std::time::{Duration, Instant};

use tollgate::{FixedWindow, ManualClock, TokenBucket};

/// The threads of this process named as the publishing thread (Linux
/// keeps the first 15 bytes of a thread's name).
fn publishing_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "tollgate-metric")
        .count()
}

/// Waits up to `within` for `publishing_threads()` to be `n`; whether it
/// got there.
fn settles_at(n: usize, within: Duration) -> bool {
    let until = Instant::now() + within;
    loop {
        if publishing_threads() == n {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_publishing_thread_ends_with_the_last_limiter() {
    assert_eq!(publishing_threads(), 0, "none before any limiter counts");
    let keyed = TokenBucket::builder()
        .rate(10, Duration::from_secs(1))
        .name("thread-keyed")
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let direct = FixedWindow::builder()
        .limit(10)
        .window(Duration::from_secs(1))
        .name("thread-direct")
        .clock(ManualClock::new())
        .build_direct()
        .unwrap();
    assert!(keyed.allow_request("alice"));
    assert!(direct.allow());
    assert!(
        settles_at(1, Duration::from_secs(1)),
        "one thread publishes every limiter"
    );

    // One limiter left: the thread goes on, rounds after rounds.
    drop(keyed);
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(publishing_threads(), 1, "the direct limiter still counts");

    // The last one gone, the thread ends within a round.
    drop(direct);
    assert!(
        settles_at(0, Duration::from_secs(3)),
        "the thread outlived the last limiter"
    );

    // And a new limiter starts a new one.
    let again = TokenBucket::builder()
        .rate(10, Duration::from_secs(1))
        .name("thread-again")
        .build()
        .unwrap();
    assert!(again.allow_request("bob"));
    assert!(settles_at(1, Duration::from_secs(1)), "started again");
    drop(again);
    assert!(settles_at(0, Duration::from_secs(3)), "ended again");
}
