//! When a limiter gives back the memory of clients it no longer holds: a
//! key type that counts its live values shows every key the limiter still
//! owns, held clients and forgotten ones alike.

// Plain `cargo test` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tollgate::{ManualClock, TokenBucket};

/// Live `Counted` values. One test binary per file, and one test here
/// that uses it, so nothing else changes it.
static LIVE: AtomicI64 = AtomicI64::new(0);

/// A client id whose live values are counted.
#[derive(Debug, PartialEq, Eq)]
struct Counted(u64);

impl Counted {
    fn new(id: u64) -> Self {
        LIVE.fetch_add(1, Ordering::Relaxed);
        Self(id)
    }
}

impl Clone for Counted {
    fn clone(&self) -> Self {
        Self::new(self.0)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Hash for Counted {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

/// Clients removed, or forgotten by the pass, then only a trickle of new
/// clients and checks of known ones: one `sweep()` gives back every key
/// the limiter no longer needs before it returns, and the limiter then
/// owns about one key per client it holds.
#[test]
fn one_sweep_gives_back_every_forgotten_and_removed_key() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(10, Duration::from_secs(1))
        .key_type::<Counted>()
        .clock(clock.clone())
        .build()
        .unwrap();
    // 20 000 clients, then every one removed.
    for id in 0..20_000 {
        assert!(limiter.allow_request(&Counted::new(id)));
    }
    assert_eq!(live(), 20_000);
    for id in 0..20_000 {
        assert!(limiter.remove(&Counted::new(id)));
    }
    assert_eq!(limiter.len(), 0);
    // 400 new clients trickle in: too few for a pass or a rebuild.
    for id in 100_000..100_400 {
        assert!(limiter.allow_request(&Counted::new(id)));
    }
    let _ = limiter.sweep();
    assert_eq!(limiter.len(), 400);
    assert!(live() <= 400, "{} keys owned for 400 clients", live());

    // 20 000 one-off clients, forgotten by the passes new clients make
    // after them (the second of which, a horizon after the first, trusts
    // a reading after the burst), then checks of known clients only.
    for id in 200_000..220_000 {
        assert!(limiter.allow_request(&Counted::new(id)));
    }
    clock.advance(Duration::from_secs(10));
    assert!(limiter.allow_request(&Counted::new(1)));
    clock.advance(Duration::from_secs(1));
    assert!(limiter.allow_request(&Counted::new(2)));
    assert!(
        limiter.len() <= 402 + 64,
        "the pass forgot them: {}",
        limiter.len()
    );
    for _ in 0..1_000 {
        assert!(limiter.allow_request(&Counted::new(100_000)));
        clock.advance(Duration::from_millis(100));
    }
    let _ = limiter.sweep();
    let held = limiter.len() as i64;
    assert!(live() <= held, "{} keys owned for {held} clients", live());

    // A tenth of 400 clients held removed: not enough to leave a table
    // under a quarter full, and still given back by one sweep.
    for id in 300_000..300_400 {
        assert!(limiter.allow_request(&Counted::new(id)));
    }
    for id in 300_000..300_040 {
        assert!(limiter.remove(&Counted::new(id)));
    }
    let _ = limiter.sweep();
    let held = limiter.len() as i64;
    assert!(live() <= held, "{} keys owned for {held} clients", live());
    drop(limiter);
    assert_eq!(live(), 0, "dropping the limiter gives back every key");
}
