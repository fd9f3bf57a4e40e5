//! Quotas per client (tiers) and quotas changed at run time, against the
//! exact models: every decision before, across and after a change agrees
//! with a model that carries each client's state over by the documented
//! rule; tiers are resolved once per client; 8 threads on a frozen clock
//! count exactly across a change; bad quotas and panicking resolvers have
//! clear outcomes.

// Plain `cargo test` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

mod common;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::strategies::{self, US};
use common::{
    BucketConfig, BucketModel, FixedModel, Gap, Model, SlidingModel, Subject, WindowConfig,
};
use proptest::prelude::*;
use tollgate::{
    ConfigError, Decision, FixedWindow, ManualClock, SlidingWindowCounter, TokenBucket,
};

/// A step of a scenario: a check (or peek) by one client, or a change of
/// the quota to the `i`-th of the scenario's quotas.
#[derive(Clone, Copy, Debug)]
enum Act {
    Check { client: u64, cost: u64, peek: bool },
    Change(usize),
}

fn acts(clients: u64, quotas: usize) -> impl Strategy<Value = Vec<(Gap, Act)>> {
    let act = prop_oneof![
        8 => (0..clients, 1..=6u64, prop::bool::weighted(0.15))
            .prop_map(|(client, cost, peek)| Act::Check { client, cost, peek }),
        1 => (0..quotas).prop_map(Act::Change),
    ];
    prop::collection::vec((strategies::gap(), act), 1..120)
}

/// A limiter whose one quota changes among `quotas` (each a fresh model of
/// that quota; a change to `i` goes to `quotas[i % len]`), driven through
/// `check` and `set`, against one model per client carried over by
/// `convert` at each change.
fn agree_across_changes<M: Model, L>(
    quotas: &[M],
    acts: &[(Gap, Act)],
    build: impl Fn(ManualClock) -> L,
    check: impl Fn(&L, u64, u64, bool) -> Decision,
    set: impl Fn(&L, usize),
    convert: impl Fn(&M, u64, &M) -> M,
) {
    let clock = ManualClock::new();
    let limiter = build(clock.clone());
    let mut quota = 0;
    let mut models: HashMap<u64, M> = HashMap::new();
    let mut now = 0u64;
    for (i, (gap, act)) in acts.iter().enumerate() {
        match *act {
            Act::Change(to) => {
                let to = to % quotas.len();
                now += match gap {
                    Gap::Nanos(gap) => *gap,
                    Gap::Boundary(_) => 0,
                };
                clock.set(Duration::from_nanos(now));
                set(&limiter, to);
                // A change to the same quota leaves every state as it is.
                if format!("{:?}", quotas[to]) != format!("{:?}", quotas[quota]) {
                    for model in models.values_mut() {
                        *model = convert(model, now, &quotas[to]);
                    }
                }
                quota = to;
            }
            Act::Check { client, cost, peek } => {
                // A peek holds no state for a client the limiter does not
                // hold: such a client is fresh, and is converted by no move.
                let mut unheld = quotas[quota].clone();
                let model = if peek && !models.contains_key(&client) {
                    &mut unheld
                } else {
                    models
                        .entry(client)
                        .or_insert_with(|| quotas[quota].clone())
                };
                let cost = cost.clamp(1, model.capacity());
                now = match *gap {
                    Gap::Nanos(gap) => now + gap,
                    Gap::Boundary(offset) => (now + model.retry_after(now, cost))
                        .saturating_add_signed(offset.into())
                        .max(now),
                };
                clock.set(Duration::from_nanos(now));
                let retry = model.retry_after(now, cost);
                let got = check(&limiter, client, cost, peek);
                // A peek admits on a copy, and reports the quota as it stands.
                let allowed = if peek {
                    model.clone().admit(now, cost)
                } else {
                    model.admit(now, cost)
                };
                let ctx = format!("act {i} {act:?} at {now} ns under quota {quota}");
                assert_eq!(got.is_allowed(), allowed, "decision, {ctx}");
                assert_eq!(got.remaining(), model.remaining(now), "remaining, {ctx}");
                assert_eq!(got.limit(), model.capacity(), "limit, {ctx}");
                let retry = if allowed { 0 } else { retry };
                assert_eq!(
                    got.retry_after(),
                    Duration::from_nanos(retry),
                    "retry, {ctx}"
                );
            }
        }
    }
}

/// The limiter side of a scenario: check or peek `client` at `cost`.
macro_rules! decide {
    () => {
        |l: &_, client: u64, cost, peek| {
            if peek {
                l.peek_n(&client, cost).unwrap()
            } else {
                l.check_n(&client, cost).unwrap()
            }
        }
    };
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn token_bucket_changes_agree_with_the_exact_model(
        quotas in prop::collection::vec(strategies::bucket(), 2..4),
        acts in acts(3, 3),
    ) {
        let models: Vec<BucketModel> = quotas.iter().map(BucketConfig::model).collect();
        agree_across_changes(
            &models,
            &acts,
            |clock| quotas[0].builder(clock).reconfigurable().build().unwrap(),
            decide!(),
            |l, i| l.set_quota(0, quotas[i].settings()).unwrap(),
            BucketModel::convert,
        );
    }

    #[test]
    fn fixed_window_changes_agree_with_the_exact_model(
        quotas in prop::collection::vec(strategies::window(), 2..4),
        acts in acts(3, 3),
    ) {
        let models: Vec<FixedModel> = quotas.iter().map(|q| common::Fixed(*q).model()).collect();
        agree_across_changes(
            &models,
            &acts,
            |clock| common::Fixed(quotas[0]).builder(clock).reconfigurable().build().unwrap(),
            decide!(),
            |l, i| l.set_quota(0, common::Fixed(quotas[i]).settings()).unwrap(),
            FixedModel::convert,
        );
    }

    #[test]
    fn sliding_window_changes_agree_with_the_exact_model(
        quotas in prop::collection::vec(strategies::window(), 2..4),
        same_window in any::<bool>(),
        acts in acts(3, 3),
    ) {
        let mut quotas = quotas;
        if same_window {
            let window = quotas[0].window;
            for q in &mut quotas {
                q.window = window;
            }
        }
        let models: Vec<SlidingModel> =
            quotas.iter().map(|q| common::Sliding(*q).model()).collect();
        agree_across_changes(
            &models,
            &acts,
            |clock| common::Sliding(quotas[0]).builder(clock).reconfigurable().build().unwrap(),
            decide!(),
            |l, i| l.set_quota(0, common::Sliding(quotas[i]).settings()).unwrap(),
            SlidingModel::convert,
        );
    }

    /// Clients of different tiers, each against its own tier's model, with
    /// one tier's quota changing: only that tier's clients move.
    #[test]
    fn tiers_agree_with_their_own_models(
        quotas in prop::collection::vec(strategies::bucket(), 3..4),
        acts in acts(6, 3),
    ) {
        // Clients 0, 2, 4 are tier 0; 1, 3, 5 tier 1. Changes go to tier 1,
        // to the quotas[2] and back to quotas[1].
        let clock = ManualClock::new();
        let limiter = quotas[0]
            .builder(clock.clone())
            .tier(1, quotas[1].settings())
            .tier_by(|client: &u64| (*client % 2) as u16)
            .build()
            .unwrap();
        let models: Vec<BucketModel> = quotas.iter().map(BucketConfig::model).collect();
        let mut tier1 = 1;
        let mut state: HashMap<u64, BucketModel> = HashMap::new();
        let mut now = 0;
        for (gap, act) in acts {
            now += match gap { Gap::Nanos(n) => n, Gap::Boundary(_) => 0 };
            clock.set(Duration::from_nanos(now));
            match act {
                Act::Change(_) => {
                    tier1 = if tier1 == 1 { 2 } else { 1 };
                    limiter.set_quota(1, quotas[tier1].settings()).unwrap();
                    for (client, model) in &mut state {
                        if client % 2 == 1 {
                            *model = model.convert(now, &models[tier1]);
                        }
                    }
                }
                Act::Check { client, cost, .. } => {
                    let fresh = if client % 2 == 1 { &models[tier1] } else { &models[0] };
                    let model = state.entry(client).or_insert_with(|| fresh.clone());
                    let cost = cost.clamp(1, model.capacity());
                    let got = limiter.check_n(&client, cost).unwrap();
                    prop_assert_eq!(got.is_allowed(), model.admit(now, cost));
                    prop_assert_eq!(got.remaining(), model.remaining(now));
                    prop_assert_eq!(got.limit(), model.capacity());
                }
            }
        }
    }
}

/// A bucket's settings, keyed by `u64`: a tier's quota, or (given a clock)
/// a limiter's.
fn bucket(tokens: u64, capacity: u64) -> tollgate::Builder<TokenBucket, u64> {
    TokenBucket::builder()
        .rate(tokens, Duration::from_secs(1))
        .capacity(capacity)
        .key_type::<u64>()
}

/// A limiter's builder: [`bucket`], reading a manual clock.
fn base(tokens: u64, capacity: u64) -> tollgate::Builder<TokenBucket, u64, ManualClock> {
    bucket(tokens, capacity).clock(ManualClock::new())
}

fn fixed_of(limit: u64, window: Duration) -> tollgate::Builder<FixedWindow, u64> {
    FixedWindow::builder()
        .limit(limit)
        .window(window)
        .key_type::<u64>()
}

fn counter_of(limit: u64, window: Duration) -> tollgate::Builder<SlidingWindowCounter, u64> {
    SlidingWindowCounter::builder()
        .limit(limit)
        .window(window)
        .key_type::<u64>()
}

#[test]
fn the_resolver_runs_once_per_client_and_never_for_a_known_one() {
    let calls = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&calls);
    let limiter = base(5, 5)
        .tier(1, bucket(50, 50))
        .tier_by(move |client: &u64| {
            counted.fetch_add(1, Ordering::Relaxed);
            u16::from(*client >= 100)
        })
        .build()
        .unwrap();
    for round in 0..20 {
        for client in [1, 2, 100, 101] {
            let _ = limiter.check(&client);
        }
        assert_eq!(calls.load(Ordering::Relaxed), 4, "round {round}");
    }
    assert_eq!(limiter.check(&1).limit(), 5);
    assert_eq!(limiter.check(&100).limit(), 50);
    // A client forgotten and seen again is asked again.
    assert!(limiter.remove(&1));
    let _ = limiter.check(&1);
    assert_eq!(calls.load(Ordering::Relaxed), 5);
}

#[test]
fn a_tier_without_a_quota_of_its_own_follows_tier_0() {
    let limiter = base(3, 3)
        .tier(2, bucket(9, 9))
        .tier_by(|c: &u64| *c as u16)
        .build()
        .unwrap();
    assert_eq!(limiter.check(&1).limit(), 3, "tier 1 has no quota");
    assert_eq!(limiter.check(&2).limit(), 9);
    assert_eq!(limiter.check(&7).limit(), 3, "tier 7 is beyond the table");
    limiter.set_quota(0, bucket(4, 4)).unwrap();
    assert_eq!(limiter.check(&1).limit(), 4);
    assert_eq!(limiter.check(&7).limit(), 4);
    assert_eq!(limiter.check(&2).limit(), 9);
    // Giving tier 7 a quota moves its known clients too.
    limiter.set_quota(7, bucket(20, 20)).unwrap();
    assert_eq!(limiter.check(&7).limit(), 20);
    assert_eq!(tollgate::Quota::of(&limiter.tier_quota(7)).limit(), 20);
}

#[test]
fn a_cost_above_the_clients_own_tier_is_denied_and_above_every_tier_an_error() {
    let limiter = base(2, 2)
        .tier(1, bucket(10, 10))
        .tier_by(|c: &u64| (*c % 2) as u16)
        .build()
        .unwrap();
    let denied = limiter.check_n(&0, 5).unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(denied.retry_after(), Duration::MAX);
    assert!(limiter.check_n(&1, 5).unwrap().is_allowed());
    assert!(limiter.check_n(&1, 11).is_err());
    // The denial charged nothing.
    assert_eq!(limiter.check_n(&0, 2).unwrap().remaining(), 0);
    // The largest cost follows the quotas as they change.
    limiter.set_quota(1, bucket(20, 20)).unwrap();
    assert!(limiter.check_n(&3, 15).unwrap().is_allowed());
    assert!(limiter.check_n(&3, 21).is_err());
    limiter.set_quota(1, bucket(4, 4)).unwrap();
    assert!(limiter.check_n(&3, 5).is_err());
}

#[test]
fn bad_quotas_are_config_errors_from_the_builder_and_from_set_quota() {
    let err = base(1, 1).tier(1, bucket(1, 0)).build().unwrap_err();
    assert_eq!(err.field(), "tier.capacity");
    let err = FixedWindow::builder()
        .limit(1)
        .window(Duration::from_secs(1))
        .tier(3, FixedWindow::builder().limit(1))
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::Missing {
            field: "tier.window"
        }
    );
    let limiter = base(1, 1).reconfigurable().build().unwrap();
    let too_big = TokenBucket::builder()
        .rate(1, Duration::from_secs(3600))
        .capacity(1 << 30);
    assert_eq!(
        limiter.set_quota(0, too_big).unwrap_err().field(),
        "tier.capacity"
    );
    assert_eq!(
        tollgate::Quota::of(&limiter.tier_quota(0)).limit(),
        1,
        "nothing changed"
    );
}

#[test]
fn a_panicking_resolver_leaves_the_limiter_serving() {
    let armed = Arc::new(AtomicBool::new(true));
    let trigger = Arc::clone(&armed);
    let limiter = base(2, 2)
        .tier(1, bucket(4, 4))
        .tier_by(move |c: &u64| {
            if *c == 13 && trigger.swap(false, Ordering::Relaxed) {
                panic!("resolver failed");
            }
            (*c % 2) as u16
        })
        .max_clients(10)
        .build()
        .unwrap();
    assert!(limiter.allow_request(&1));
    let caught = catch_unwind(AssertUnwindSafe(|| limiter.allow_request(&13)));
    assert!(caught.is_err());
    assert_eq!(limiter.len(), 1, "nothing of client 13 was kept");
    assert_eq!(limiter.stats().clients, 1, "and no room is held for it");
    // Everyone is served, client 13 included, and quotas still change.
    assert_eq!((0..9).filter(|_| limiter.allow_request(&13)).count(), 4);
    assert_eq!((0..9).filter(|_| limiter.allow_request(&2)).count(), 2);
    // Client 13 spent its whole bucket of 4: all of the new one of 6.
    limiter.set_quota(1, bucket(6, 6)).unwrap();
    assert_eq!((0..9).filter(|_| limiter.allow_request(&13)).count(), 0);
    assert_eq!((0..9).filter(|_| limiter.allow_request(&15)).count(), 6);
    assert_eq!(limiter.len(), 4);
}

/// Every key drained on a frozen clock, then 8 threads check them all
/// while the quota grows from 10 to 50 tokens: each key has spent its whole
/// bucket, so it has spent the whole new one, and none passes, however the
/// change interleaves with the checks (before it they are all denied).
#[test]
fn eight_threads_across_a_change_never_refill() {
    const KEYS: u64 = 300;
    let limiter = Arc::new(base(10, 10).reconfigurable().build().unwrap());
    for key in 0..KEYS {
        assert_eq!((0..20).filter(|_| limiter.allow_request(&key)).count(), 10);
    }
    let start = Arc::new(Barrier::new(9));
    let changed = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..8)
        .map(|t| {
            let (limiter, start, changed) = (
                Arc::clone(&limiter),
                Arc::clone(&start),
                Arc::clone(&changed),
            );
            thread::spawn(move || {
                start.wait();
                let mut admitted = 0u64;
                let mut round = 0;
                let mut after = 0;
                // Checks until the change is done, then 60 rounds more:
                // 8 × 60 = 480 checks per key after it, enough to drain 40.
                while after < 60 {
                    if changed.load(Ordering::Acquire) {
                        after += 1;
                    }
                    for k in 0..KEYS {
                        let key = (k + t * 37 + round) % KEYS;
                        admitted += u64::from(limiter.allow_request(&key));
                    }
                    round += 1;
                }
                admitted
            })
        })
        .collect();
    start.wait();
    limiter.set_quota(0, bucket(50, 50)).unwrap();
    changed.store(true, Ordering::Release);
    let admitted: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    for key in 0..KEYS {
        assert!(!limiter.allow_request(&key), "key {key} has more left");
    }
    assert_eq!(admitted, 0);
    assert_eq!(limiter.len(), KEYS as usize);
}

/// A smaller quota racing checks: every racing check is admitted (the 30
/// tokens left before the change, or the 10 the new bucket holds after it,
/// cover the 4 racers), and once the change returns each client holds at
/// most the new capacity, less what the racers took after it: the move
/// takes nothing the client had and never adds to it.
#[test]
fn a_shrink_racing_checks_never_admits_past_the_old_quota() {
    const KEYS: u64 = 200;
    let limiter = Arc::new(base(50, 50).reconfigurable().build().unwrap());
    // Past the clock's first nanosecond, where a full state converted
    // would be the fresh word, which no state with a history becomes.
    limiter.clock().set(Duration::from_secs(1));
    for key in 0..KEYS {
        assert_eq!((0..20).filter(|_| limiter.allow_request(&key)).count(), 20);
    }
    let start = Arc::new(Barrier::new(5));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (limiter, start) = (Arc::clone(&limiter), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                (0..KEYS)
                    .map(|k| u64::from(limiter.allow_request(&k)))
                    .sum::<u64>()
            })
        })
        .collect();
    start.wait();
    limiter.set_quota(0, bucket(10, 10)).unwrap();
    let admitted: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(admitted, KEYS * 4);
    for key in 0..KEYS {
        let left = limiter.check(&key).remaining();
        // The check just made took one: at most 9, at least 10 − 4 − 1.
        assert!((5..=9).contains(&left), "key {key}: {left} left");
        let drained = (0..20).filter(|_| limiter.allow_request(&key)).count() as u64;
        assert_eq!(drained, left, "key {key}");
    }
}

/// Tiers under 8 threads on a frozen clock: each client gets exactly its
/// own tier's capacity.
#[test]
fn eight_threads_get_exactly_their_tiers_capacity() {
    let limiter = Arc::new(
        base(3, 3)
            .tier(1, bucket(7, 7))
            .tier(2, bucket(11, 11))
            .tier_by(|c: &u64| (*c % 3) as u16)
            .build()
            .unwrap(),
    );
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                let mut admitted = [0u64; 3];
                for _ in 0..20 {
                    for c in 0..90u64 {
                        admitted[(c % 3) as usize] += u64::from(limiter.allow_request(&c));
                    }
                }
                admitted
            })
        })
        .collect();
    let mut total = [0u64; 3];
    for w in workers {
        for (t, n) in w.join().unwrap().into_iter().enumerate() {
            total[t] += n;
        }
    }
    assert_eq!(total, [30 * 3, 30 * 7, 30 * 11]);
}

#[test]
fn every_window_algorithm_keeps_its_state_across_a_change() {
    // Fixed window: 3 of 5 used, limit to 4: the 2 left are kept in this
    // window (a move never adds to what a client may take now, and takes
    // nothing it has).
    let clock = ManualClock::new();
    let second = Duration::from_secs(1);
    let fixed = FixedWindow::builder()
        .limit(5)
        .window(second)
        .clock(clock.clone());
    let fixed = fixed.reconfigurable().build().unwrap();
    assert_eq!((0..3).filter(|_| fixed.allow_request("a")).count(), 3);
    fixed
        .set_quota(0, FixedWindow::builder().limit(4).window(second))
        .unwrap();
    assert_eq!((0..9).filter(|_| fixed.allow_request("a")).count(), 2);
    clock.advance(second);
    assert_eq!((0..9).filter(|_| fixed.allow_request("a")).count(), 4);
    // Sliding window counter with a new window: what the estimate leaves
    // (4 of 10) is what is left in the new window.
    let sliding = SlidingWindowCounter::builder()
        .limit(10)
        .window(second)
        .clock(clock.clone());
    let sliding = sliding.reconfigurable().build().unwrap();
    assert_eq!((0..6).filter(|_| sliding.allow_request("b")).count(), 6);
    sliding
        .set_quota(
            0,
            SlidingWindowCounter::builder().limit(8).window(2 * second),
        )
        .unwrap();
    assert_eq!((0..9).filter(|_| sliding.allow_request("b")).count(), 4);
    let _ = US;
    let _ = WindowConfig {
        limit: 1,
        window: 1,
    };
}

#[test]
fn a_decision_reports_the_window_of_the_quota_that_decided() {
    let second = Duration::from_secs(1);
    let clock = ManualClock::new();
    let fixed = FixedWindow::builder()
        .limit(3)
        .window(60 * second)
        .clock(clock.clone());
    let fixed = fixed.build().unwrap();
    assert_eq!(fixed.check("a").window(), 60 * second);
    let sliding = SlidingWindowCounter::builder()
        .limit(3)
        .window(5 * second)
        .build()
        .unwrap();
    assert_eq!(sliding.check("a").window(), 5 * second);
    // A bucket of 20 refilled at 10 a second grants 20 per 2 s.
    let tiers = base(10, 20)
        .tier(1, bucket(1, 1))
        .tier_by(|c: &u64| (*c % 2) as u16);
    let tiers = tiers.build().unwrap();
    assert_eq!(tiers.check(&0).window(), 2 * second);
    assert_eq!(tiers.check(&1).window(), second);
    // Two limits: the binding one's. 2 per second and 3 per minute: the
    // bucket binds until the window has fewer left.
    let pair = TokenBucket::builder()
        .rate(2, second)
        .and(FixedWindow::builder().limit(3).window(60 * second))
        .clock(clock.clone())
        .build()
        .unwrap();
    let first = pair.check("p");
    assert_eq!((first.limit(), first.window()), (2, second));
    let _ = pair.check("p");
    clock.advance(second);
    let third = pair.check("p");
    assert_eq!((third.limit(), third.window()), (3, 60 * second));
}

/// Two limits per client, per tier: each tier's pair of limits against a
/// pair of exact models, with one tier's pair changing (each limit's state
/// carried over by its own rule).
#[test]
fn tiers_of_two_limits_agree_with_pairs_of_models() {
    use common::PairModel;
    let second = Duration::from_secs(1);
    let pair = |tokens: u64, per_minute: u64| {
        TokenBucket::builder()
            .rate(tokens, second)
            .and(FixedWindow::builder().limit(per_minute).window(60 * second))
            .key_type::<u64>()
    };
    let model = |tokens: u64, per_minute: u64| PairModel {
        first: BucketModel::new(tokens, 1_000_000_000, tokens),
        second: FixedModel::new(per_minute, 60_000_000_000),
    };
    let clock = ManualClock::new();
    let limiter = pair(2, 5)
        .tier(1, pair(4, 9))
        .tier_by(|c: &u64| (*c % 2) as u16)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut models: Vec<PairModel<BucketModel, FixedModel>> =
        vec![model(2, 5), model(4, 9), model(2, 5), model(4, 9)];
    let mut now = 0;
    let step = |models: &mut Vec<PairModel<BucketModel, FixedModel>>, now: u64| {
        clock.set(Duration::from_nanos(now));
        for (client, m) in models.iter_mut().enumerate() {
            for _ in 0..3 {
                let got = limiter.check(&(client as u64));
                assert_eq!(
                    got.is_allowed(),
                    m.admit(now, 1),
                    "client {client} at {now}"
                );
                assert_eq!(
                    got.remaining(),
                    m.remaining(now),
                    "client {client} at {now}"
                );
                assert_eq!(got.limit(), m.limit(now), "client {client} at {now}");
            }
        }
    };
    for round in 0..3 {
        if round > 0 {
            now += 700_000_000;
        }
        step(&mut models, now);
    }
    // Right after the last admissions (the buckets owe tokens), tier 1
    // becomes 8 a second and 20 a minute.
    clock.set(Duration::from_nanos(now));
    limiter.set_quota(1, pair(8, 20)).unwrap();
    let to = model(8, 20);
    for m in models.iter_mut().skip(1).step_by(2) {
        *m = PairModel {
            first: m.first.convert(now, &to.first),
            second: m.second.convert(now, &to.second),
        };
    }
    for _ in 0..4 {
        step(&mut models, now);
        now += 700_000_000;
    }
    let err = limiter.set_quota(1, pair(8, 0)).unwrap_err();
    assert_eq!(err.field(), "tier.and.limit");
}

/// Reset, remove and sweeps act on a tiered client by its own quota.
#[test]
fn reset_remove_and_sweep_use_the_clients_own_quota() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(2, Duration::from_secs(1))
        .key_type::<u64>()
        .tier(1, bucket(1, 5))
        .tier_by(|c: &u64| (*c % 2) as u16)
        .clock(clock.clone())
        .build()
        .unwrap();
    // Tier 1: 5 tokens, 1 a second.
    assert_eq!((0..9).filter(|_| limiter.allow_request(&1)).count(), 5);
    assert!(limiter.reset(&1));
    assert_eq!(limiter.check(&1).limit(), 5);
    assert_eq!((0..9).filter(|_| limiter.allow_request(&1)).count(), 4);
    assert_eq!((0..9).filter(|_| limiter.allow_request(&0)).count(), 2);
    // Tier 0 refills in 1 s, tier 1 in 5 s. A tiered client is forgotten
    // once idle for the longest tier's refill (so that a move after it
    // changes nothing): client 0, idle from 1 s, at 6 s; client 1, idle
    // from 4 s, at 9 s.
    clock.advance(Duration::from_millis(5_999));
    assert_eq!(limiter.sweep(), 0);
    clock.advance(Duration::from_millis(1));
    assert_eq!(limiter.sweep(), 1);
    assert_eq!(limiter.len(), 1);
    assert!(limiter.remove(&1));
    assert!(limiter.is_empty());
}

/// Bookings on a tiered limiter wait by the client's own quota, cancel by
/// the tail rule, and a booking made before a change keeps its time while
/// its charge is carried over with the rest of the state.
#[test]
fn bookings_wait_by_the_clients_own_quota() {
    use tollgate::ReserveError;
    let clock = ManualClock::new();
    let second = Duration::from_secs(1);
    let limiter = base(1, 1)
        .tier(1, bucket(10, 10))
        .tier_by(|c: &u64| (*c % 2) as u16)
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.allow_request(&0));
    assert_eq!((0..10).filter(|_| limiter.allow_request(&1)).count(), 10);
    let slow = limiter.reserve(&0, Duration::MAX).unwrap();
    assert_eq!(slow.wait(), second);
    let fast = limiter.reserve(&1, Duration::MAX).unwrap();
    assert_eq!(fast.wait(), second / 10);
    // The booking is charged: the next waits behind it.
    assert_eq!(
        limiter.reserve(&1, Duration::MAX).unwrap().wait(),
        second / 5
    );
    // Dropping that second booking gave it back (it was the tail).
    assert_eq!(
        limiter.reserve(&1, Duration::MAX).unwrap().wait(),
        second / 5
    );
    // A cost above the client's own tier never conforms.
    assert!(matches!(
        limiter.reserve_n(&0, 5, Duration::MAX),
        Err(ReserveError::TooLong { wait }) if wait == Duration::MAX
    ));
    assert!(matches!(
        limiter.reserve_n(&0, 11, Duration::MAX),
        Err(ReserveError::Cost(_))
    ));
    // Tier 1 becomes 20 a second: the booked token stays spent (carried,
    // at the new rate), the booking keeps its time, and cancelling it now
    // gives nothing back (the state is no longer the one it left).
    limiter.set_quota(1, bucket(20, 20)).unwrap();
    assert_eq!(fast.wait(), second / 10);
    assert!(!fast.cancel());
    // 11 tokens missing of 10, the whole bucket: all of 20 now, none
    // passes.
    assert_eq!((0..20).filter(|_| limiter.allow_request(&1)).count(), 0);
    // Tier 0's client kept its state, booking included; a booking made
    // before any quota change gives nothing back after it, though.
    assert!(!slow.cancel());
    assert_eq!(
        limiter.reserve(&0, Duration::ZERO).unwrap_err(),
        ReserveError::TooLong { wait: 2 * second }
    );
}

/// Quota changes racing a flood of new clients under a hard cap with
/// sampled eviction: the cap holds, every entry left is live and counted,
/// and the last quota is the one every client is held to.
#[test]
fn changes_racing_a_capped_flood_keep_the_cap() {
    use tollgate::Overflow;
    const CAP: u64 = 500;
    let limiter = Arc::new(
        bucket(3, 3)
            .max_clients(CAP)
            .overflow(Overflow::EvictSampled { sample: 4 })
            .reconfigurable()
            .build()
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicU64::new(0));
    let flood: Vec<_> = (0..3u64)
        .map(|t| {
            let (limiter, stop, checked) = (
                Arc::clone(&limiter),
                Arc::clone(&stop),
                Arc::clone(&checked),
            );
            thread::spawn(move || {
                let mut key = t << 40;
                while !stop.load(Ordering::Relaxed) {
                    let _ = limiter.check(&key);
                    checked.fetch_add(1, Ordering::Relaxed);
                    key += 1;
                }
            })
        })
        .collect();
    for change in 0..30u64 {
        // Each change lands among a few thousand new clients.
        while checked.load(Ordering::Relaxed) < (change + 1) * 3_000 {
            thread::yield_now();
        }
        limiter
            .set_quota(0, bucket(3 + change % 5, 3 + change % 5))
            .unwrap();
        assert!(
            limiter.len() as u64 <= CAP,
            "over the cap: {}",
            limiter.len()
        );
    }
    limiter.set_quota(0, bucket(7, 7)).unwrap();
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.join().unwrap();
    }
    assert!(limiter.len() as u64 <= CAP);
    assert_eq!(limiter.stats().clients as u64, limiter.len() as u64);
    assert_eq!(limiter.check(&u64::MAX).limit(), 7);
    assert_eq!(limiter.check(&(1 << 40)).limit(), 7);
}

/// In the clock's first window (cut short by the first Unix-aligned
/// boundary), a windowed client moved keeps what it had left, at most the
/// new limit, as in any later window: 3 of 5 used, cut to 1, leaves 1. A
/// client that never made a request keeps the whole new limit. (The state
/// left there was once the fresh word, so the move held the client full
/// until that window ended.)
#[test]
fn in_the_clock_s_first_window_a_moved_client_keeps_what_it_had_left() {
    let minute = Duration::from_secs(60);
    let fixed = |limit| fixed_of(limit, minute);
    let counter = |limit| counter_of(limit, minute);
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(10));
    let f = fixed(5)
        .clock(clock.clone())
        .reconfigurable()
        .build()
        .unwrap();
    let c = counter(5)
        .clock(clock.clone())
        .reconfigurable()
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(f.check(&1).is_allowed());
        assert!(c.check(&1).is_allowed());
    }
    f.set_quota(0, fixed(1)).unwrap();
    c.set_quota(0, counter(1)).unwrap();
    let (df, dc) = (f.check(&1), c.check(&1));
    assert!(df.is_allowed() && dc.is_allowed(), "{df:?} {dc:?}");
    let (df, dc) = (f.check(&1), c.check(&1));
    assert!(df.is_denied() && dc.is_denied(), "{df:?} {dc:?}");
    assert_eq!(df.retry_after(), Duration::from_secs(50), "until it ends");
    // Raised again in the same window: what is left (none) stays, and a
    // client with no history has the whole new limit.
    f.set_quota(0, fixed(4)).unwrap();
    c.set_quota(0, counter(4)).unwrap();
    assert!(f.check(&1).is_denied() && c.check(&1).is_denied());
    for _ in 0..4 {
        assert!(f.check(&2).is_allowed() && c.check(&2).is_allowed());
    }
    assert!(f.check(&2).is_denied() && c.check(&2).is_denied());
    clock.set(minute);
    assert!(f.check(&1).is_allowed(), "the next window");
}

/// A quota cut and restored at once leaves an idle client what a single
/// change would: the whole limit. The cut finds the client fresh in the
/// narrower windows; what it writes there must not read as requests
/// counted in the wider window the restore then finds running. (It was
/// written as the narrow window before the reading, full, so the restore
/// held an idle client to the narrow limit until the minute ended.) A
/// client that did count in the running minute keeps what it had left.
#[test]
fn an_idle_client_keeps_the_whole_limit_across_a_cut_and_a_restore() {
    let minute = Duration::from_secs(60);
    let (fixed, counter) = (fixed_of, counter_of);
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_000));
    let f = fixed(20, minute)
        .clock(clock.clone())
        .reconfigurable()
        .build()
        .unwrap();
    let c = counter(20, minute)
        .clock(clock.clone())
        .reconfigurable()
        .build()
        .unwrap();
    // Client 1 counts once, then idles for long; client 2 counts 3 in the
    // minute of the changes.
    assert!(f.check(&1).is_allowed() && c.check(&1).is_allowed());
    clock.set(Duration::from_secs(2_000));
    for _ in 0..3 {
        assert!(f.check(&2).is_allowed() && c.check(&2).is_allowed());
    }
    f.set_quota(0, fixed(5, Duration::from_secs(1))).unwrap();
    c.set_quota(0, counter(5, Duration::from_secs(1))).unwrap();
    f.set_quota(0, fixed(20, minute)).unwrap();
    c.set_quota(0, counter(20, minute)).unwrap();
    assert_eq!(f.peek(&1).remaining(), 20, "{:?}", f.peek(&1));
    assert_eq!(c.peek(&1).remaining(), 20, "{:?}", c.peek(&1));
    // 17 left, cut to 5, restored: 5, never more than the cut left.
    assert_eq!(f.peek(&2).remaining(), 5);
    assert_eq!(c.peek(&2).remaining(), 5);
}

/// A token bucket moved to one that takes longer to refill from empty
/// counts as full from the move, never from before it (at a reading
/// behind the move it must be no fuller than a bucket empty when the old
/// one was, refilling at the new rate). So a cut to one an hour and a
/// restore at once leave an idle client the one token the cut bucket
/// held, refilling at the restored rate: full again one restored refill
/// of the difference later, never sooner. A cut to a bucket that refills
/// sooner keeps how long it has been full. The tiers guide states both.
#[test]
fn an_idle_bucket_cut_and_restored_at_once_refills_from_the_cut() {
    let bucket = |tokens, per, capacity| {
        TokenBucket::builder()
            .rate(tokens, per)
            .capacity(capacity)
            .key_type::<u64>()
    };
    let minute = Duration::from_secs(60);
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_000));
    let limiter = bucket(20, minute, 20)
        .clock(clock.clone())
        .reconfigurable()
        .build()
        .unwrap();
    assert!(limiter.check(&1).is_allowed());
    clock.set(Duration::from_secs(2_000));
    // Cut to 5 a second (full in 1 s) and restored: still full.
    limiter
        .set_quota(0, bucket(5, Duration::from_secs(1), 5))
        .unwrap();
    assert_eq!(limiter.peek(&1).remaining(), 5);
    limiter.set_quota(0, bucket(20, minute, 20)).unwrap();
    assert_eq!(limiter.peek(&1).remaining(), 20);
    // Cut to one an hour (full in an hour) and restored: 1, and 1 more
    // each 3 s: 20 only 57 s later.
    limiter
        .set_quota(0, bucket(1, Duration::from_secs(3_600), 1))
        .unwrap();
    assert_eq!(limiter.peek(&1).remaining(), 1);
    limiter.set_quota(0, bucket(20, minute, 20)).unwrap();
    assert_eq!(limiter.peek(&1).remaining(), 1);
    clock.advance(Duration::from_secs(56));
    assert_eq!(limiter.peek(&1).remaining(), 19);
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.peek(&1).remaining(), 20);
    // A client never seen is fresh throughout.
    assert_eq!(limiter.peek(&2).remaining(), 20);
}

/// The one rounding of a cut and restore (the tiers guide): the fresh
/// state the cut writes is idle from its own windows' first boundary not
/// before the client's last use. With 7-second windows and a minute's,
/// a client whose last window ended at 60 s is idle, to the cut, from
/// 63 s, so the restore at 100 s finds it counted in the minute that
/// began at 60 s and holds it to what the cut left (5), until that
/// minute ends. A client whose last window ended on a shared boundary
/// is fresh again at once.
#[test]
fn a_cut_to_windows_that_do_not_divide_the_restored_ones_rounds_the_last_use_up() {
    let fixed = fixed_of;
    let (minute, seven) = (Duration::from_secs(60), Duration::from_secs(7));
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(55));
    let f = fixed(20, minute)
        .clock(clock.clone())
        .reconfigurable()
        .build()
        .unwrap();
    // Client 1's last window ends at 60 s, between the 7 s boundaries
    // 56 and 63.
    assert!(f.check(&1).is_allowed());
    clock.set(Duration::from_secs(100));
    f.set_quota(0, fixed(5, seven)).unwrap();
    assert_eq!(f.peek(&1).remaining(), 5);
    f.set_quota(0, fixed(20, minute)).unwrap();
    let held = f.peek(&1);
    assert_eq!((held.remaining(), held.retry_after()), (5, Duration::ZERO));
    clock.set(Duration::from_secs(120));
    assert_eq!(f.peek(&1).remaining(), 20);
    // Counted in the minute ending at 420 s, a multiple of 7: moved at
    // 450 s the same way, it is fresh again at once.
    clock.set(Duration::from_secs(419));
    assert!(f.check(&2).is_allowed());
    clock.set(Duration::from_secs(450));
    f.set_quota(0, fixed(5, seven)).unwrap();
    f.set_quota(0, fixed(20, minute)).unwrap();
    assert_eq!(f.peek(&2).remaining(), 20);
}
