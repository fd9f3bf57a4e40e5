//! Moving a client between tiers (`Limiter::retier`): the tier resolver
//! runs once per client, so a change in what it reads reaches a known
//! client only through `retier`, which converts the client's state by the
//! rule a quota change follows. Against the exact models, decision by
//! decision; and under threads on a frozen clock, where a move between
//! tiers of equal quotas must keep every admission exactly.

// Plain `cargo test` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, RwLock};
use std::thread;
use std::time::Duration;

use common::strategies;
use common::{BucketConfig, BucketModel, Gap, Model, Subject};
use proptest::prelude::*;
use tollgate::{ManualClock, TokenBucket};

/// Which tier each client is in, in "your own records": what the
/// resolver reads.
type Records = Arc<RwLock<HashMap<u64, u16>>>;

fn tier_in(records: &Records, client: u64) -> u16 {
    records.read().unwrap().get(&client).copied().unwrap_or(0)
}

/// The trap: a client upgraded in the records stays in its old tier while
/// the limiter holds it, until `retier` moves it.
#[test]
fn a_known_client_changes_tier_only_when_retiered() {
    let records: Records = Arc::default();
    let read = Arc::clone(&records);
    let limiter = TokenBucket::builder()
        .rate(2, Duration::from_secs(60))
        .tier(1, TokenBucket::builder().rate(10, Duration::from_secs(60)))
        .tier_by(move |client: &u64| tier_in(&read, *client))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(limiter.allow_request(&7));
    records.write().unwrap().insert(7, 1);
    // Held in tier 0: the resolver is not asked again.
    assert_eq!(limiter.tier_of(&7), 0);
    assert_eq!(limiter.peek(&7).limit(), 2);
    // Moved: the one token it holds is kept, no more (the larger bucket
    // fills at its own rate from there).
    assert_eq!(limiter.retier(&7), 1);
    assert_eq!(limiter.tier_of(&7), 1);
    assert_eq!(limiter.peek(&7).remaining(), 1);
    assert_eq!((0..20).filter(|_| limiter.allow_request(&7)).count(), 1);
    // Back to tier 0: empty, and waiting one interval of that tier.
    records.write().unwrap().insert(7, 0);
    assert_eq!(limiter.retier(&7), 0);
    let denied = limiter.check(&7);
    assert_eq!(denied.limit(), 2);
    assert!(!denied.is_allowed());
    assert_eq!(denied.retry_after(), Duration::from_secs(30));
    // An upgrade with a fresh start: `reset` after `retier`.
    records.write().unwrap().insert(7, 1);
    assert_eq!(limiter.retier(&7), 1);
    assert!(limiter.reset(&7));
    assert_eq!(limiter.peek(&7).remaining(), 10);
    assert_eq!(limiter.len(), 1);
}

/// A client the limiter does not hold is left alone: nothing is created,
/// and its first request runs the resolver.
#[test]
fn retiering_an_unknown_client_creates_nothing() {
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .tier(3, TokenBucket::builder().rate(5, Duration::from_secs(1)))
        .tier_by(|client: &String| if client.starts_with("pro-") { 3 } else { 0 })
        .build()
        .unwrap();
    assert_eq!(limiter.retier("pro-ann"), 3);
    assert_eq!(limiter.retier("bob"), 0);
    assert!(limiter.is_empty());
    assert_eq!(limiter.check("pro-ann").limit(), 5);
}

/// A peek at a client the limiter does not hold reads the tier the
/// resolver gives it, as its first check will.
#[test]
fn a_peek_at_an_unknown_client_reads_the_tier_it_resolves_to() {
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .tier(1, TokenBucket::builder().rate(5, Duration::from_secs(1)))
        .tier_by(|client: &String| u16::from(client.starts_with("pro-")))
        .build()
        .unwrap();
    for peeked in [
        limiter.peek("pro-ann"),
        limiter.peek_n("pro-ann", 0).unwrap(),
    ] {
        assert_eq!((peeked.limit(), peeked.remaining()), (5, 5));
    }
    assert!(limiter.peek_n("pro-ann", 5).unwrap().is_allowed());
    assert!(limiter.is_empty());
    assert_eq!(limiter.check("pro-ann").limit(), 5);
    assert_eq!(limiter.peek("bob").limit(), 1);
}

/// The step of a scenario: a check (or peek), or a move of one client to
/// the other tier in the records, followed by `retier`.
#[derive(Clone, Copy, Debug)]
enum Act {
    Check { client: u64, cost: u64, peek: bool },
    Move { client: u64 },
}

fn acts() -> impl Strategy<Value = Vec<(Gap, Act)>> {
    let act = prop_oneof![
        6 => (0..4u64, 1..=6u64, prop::bool::weighted(0.15))
            .prop_map(|(client, cost, peek)| Act::Check { client, cost, peek }),
        1 => (0..4u64).prop_map(|client| Act::Move { client }),
    ];
    prop::collection::vec((strategies::gap(), act), 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Two tiers of random buckets; clients move between them. Each client
    /// is held to its own model, which a move converts to the new tier's
    /// quota by the quota change's rule: every decision, remainder and
    /// limit agrees.
    #[test]
    fn moves_agree_with_the_exact_model(
        quotas in prop::collection::vec(strategies::bucket(), 2..=2),
        acts in acts(),
    ) {
        let records: Records = Arc::default();
        let read = Arc::clone(&records);
        let clock = ManualClock::new();
        let limiter = quotas[0]
            .builder(clock.clone())
            .tier(1, quotas[1].settings())
            .tier_by(move |client: &u64| tier_in(&read, *client))
            .build()
            .unwrap();
        let models: Vec<BucketModel> = quotas.iter().map(BucketConfig::model).collect();
        // The clients the limiter holds, each with its tier and model.
        let mut held: HashMap<u64, (u16, BucketModel)> = HashMap::new();
        let mut now = 0u64;
        for (i, (gap, act)) in acts.into_iter().enumerate() {
            now += match gap {
                Gap::Nanos(n) => n,
                Gap::Boundary(_) => 0,
            };
            clock.set(Duration::from_nanos(now));
            match act {
                Act::Move { client } => {
                    let tier = 1 - tier_in(&records, client);
                    records.write().unwrap().insert(client, tier);
                    prop_assert_eq!(limiter.retier(&client), tier);
                    if let Some((held_tier, model)) = held.get_mut(&client) {
                        *model = model.convert(now, &models[usize::from(tier)]);
                        *held_tier = tier;
                    }
                }
                Act::Check { client, cost, peek } => {
                    let tier = tier_in(&records, client);
                    let fresh = (tier, models[usize::from(tier)].clone());
                    let (held_tier, model) = if peek {
                        held.get(&client).cloned().unwrap_or(fresh)
                    } else {
                        held.entry(client).or_insert(fresh).clone()
                    };
                    let cost = cost.clamp(1, model.capacity());
                    let got = if peek {
                        limiter.peek_n(&client, cost).unwrap()
                    } else {
                        limiter.check_n(&client, cost).unwrap()
                    };
                    let mut after = model.clone();
                    let allowed = after.admit(now, cost);
                    // A peek reports the quota as it stands; a check, what
                    // it left.
                    let left = if peek { model.remaining(now) } else { after.remaining(now) };
                    let ctx = format!("act {i} {act:?} at {now} ns, tier {held_tier}");
                    prop_assert_eq!(got.is_allowed(), allowed, "decision, {}", ctx);
                    prop_assert_eq!(got.remaining(), left, "remaining, {}", ctx);
                    prop_assert_eq!(got.limit(), model.capacity(), "limit, {}", ctx);
                    if !peek {
                        held.insert(client, (held_tier, after));
                        prop_assert_eq!(limiter.tier_of(&client), held_tier, "{}", ctx);
                    }
                }
            }
        }
    }
}

/// Clients moved back and forth between two tiers of equal quotas (each
/// tier's own) while 4 threads check them on a frozen clock: a move keeps
/// the state exactly, so each client is admitted exactly its capacity,
/// however the moves interleave with the checks.
#[test]
fn moves_racing_checks_keep_every_admission() {
    const KEYS: u64 = 64;
    const CAPACITY: u64 = 20;
    let bucket = || {
        TokenBucket::builder()
            .rate(CAPACITY, Duration::from_secs(3600))
            .key_type::<u64>()
    };
    let records: Records = Arc::default();
    let read = Arc::clone(&records);
    let limiter = Arc::new(
        bucket()
            .tier(1, bucket())
            .tier_by(move |client: &u64| tier_in(&read, *client))
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    // Every client known before the race, one unit spent.
    for key in 0..KEYS {
        assert!(limiter.allow_request(&key));
    }
    let start = Arc::new(Barrier::new(5));
    let done = Arc::new(AtomicBool::new(false));
    let admitted = Arc::new(AtomicU64::new(KEYS));
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let (limiter, start, done, admitted) = (
                Arc::clone(&limiter),
                Arc::clone(&start),
                Arc::clone(&done),
                Arc::clone(&admitted),
            );
            thread::spawn(move || {
                start.wait();
                let mut round = 0;
                // Until the moves are done, then two passes more.
                let mut after = 0;
                while after < 2 {
                    if done.load(Ordering::Acquire) {
                        after += 1;
                    }
                    for k in 0..KEYS {
                        let key = (k + t * 17 + round) % KEYS;
                        for _ in 0..CAPACITY {
                            if limiter.allow_request(&key) {
                                admitted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    round += 1;
                }
            })
        })
        .collect();
    start.wait();
    let mut moves = 0;
    for round in 0..6u16 {
        for key in 0..KEYS {
            let tier = (round + 1) % 2;
            records.write().unwrap().insert(key, tier);
            assert_eq!(limiter.retier(&key), tier);
            moves += 1;
        }
    }
    done.store(true, Ordering::Release);
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(moves, 6 * KEYS);
    assert_eq!(admitted.load(Ordering::Relaxed), KEYS * CAPACITY);
    for key in 0..KEYS {
        assert_eq!(limiter.tier_of(&key), 0, "key {key}");
        assert!(!limiter.allow_request(&key), "key {key} has more left");
    }
    assert_eq!(limiter.len(), KEYS as usize);
}
