//! Leases against a real `redis-server`, on a test clock: the fleet's
//! admissions, leased or not, against the token bucket's exact bound in
//! every span of time; holds; and `reset`, `remove`, `set_quota` and the
//! fail policies with leases.

use core::time::Duration;
use std::sync::Arc;

use proptest::prelude::*;

use super::testing::{on_clock, runner, runtime, Server, PATIENCE};
use crate::check::CheckErrorKind;
use crate::clock::ManualClock;
use crate::redis::script::packed::text_of;
use crate::redis::{FailPolicy, Lease, RedisLimiter};
use crate::sync::Ordering;
use crate::{ConfigError, FixedWindow, TokenBucket};

/// µs per unit of the buckets below.
const T: u64 = 10_000;

/// A leasing limiter (one process) of `capacity` units, one per `T` µs,
/// leases of at most `max_units` sized for a horizon of one interval.
fn leasing(
    server: &Server,
    rt: &tokio::runtime::Runtime,
    clock: &ManualClock,
    prefix: &str,
    capacity: u64,
    max_units: u64,
) -> RedisLimiter<TokenBucket> {
    leasing_for(server, rt, clock, prefix, (capacity, max_units), 1)
}

/// The same with a horizon of `horizon` intervals.
fn leasing_for(
    server: &Server,
    rt: &tokio::runtime::Runtime,
    clock: &ManualClock,
    prefix: &str,
    (capacity, max_units): (u64, u64),
    horizon: u64,
) -> RedisLimiter<TokenBucket> {
    leasing_slow(
        server,
        rt,
        (clock, 0),
        prefix,
        (capacity, max_units),
        horizon,
    )
}

/// The same on a local clock running `slow_ppm` parts per million slower
/// than `clock`, Redis's.
fn leasing_slow(
    server: &Server,
    rt: &tokio::runtime::Runtime,
    (clock, slow_ppm): (&ManualClock, u64),
    prefix: &str,
    (capacity, max_units): (u64, u64),
    horizon: u64,
) -> RedisLimiter<TokenBucket> {
    let manager = rt.block_on(server.manager());
    TokenBucket::builder()
        .rate(1, Duration::from_micros(T))
        .capacity(capacity)
        .redis(manager, prefix)
        .no_deny_shortcut()
        .lease(Lease::new(Duration::from_micros(horizon * T)).max_units(max_units))
        .fail_policy(FailPolicy::FailClosed)
        .timeout(PATIENCE)
        .build_on_slow_test_clock(clock.clone(), slow_ppm)
        .unwrap()
}

/// Checks client `c` until `limiter` holds units of a lease (a client's
/// first checks go one call each, until it is hot): the checks admitted,
/// all of them.
fn warm_up(rt: &tokio::runtime::Runtime, limiter: &RedisLimiter<TokenBucket>) -> u64 {
    let mut admitted = 0;
    while held(limiter) == 0 {
        assert!(admitted < 20, "no lease: {:?}", limiter.stats());
        assert!(rt.block_on(limiter.check("c")).unwrap().is_allowed());
        admitted += 1;
    }
    admitted
}

/// The units `limiter` holds unspent: every unit granted is spent, lapsed,
/// given back or held.
fn held(limiter: &RedisLimiter<TokenBucket>) -> u64 {
    let s = limiter.stats();
    s.lease_units - s.leased - s.lease_lapsed - s.lease_returned
}

/// Whether `admitted` (µs, in order, each with the number of resets
/// before it) keeps the bucket's exact bound in every span that no reset
/// cuts: at most `capacity + ⌊(b − a)/T⌋` admissions in `[a, b]`.
fn within_bound(admitted: &[(u64, usize)], capacity: u64) -> Result<(), String> {
    for (i, &(a, ra)) in admitted.iter().enumerate() {
        for (j, &(b, rb)) in admitted.iter().enumerate().skip(i) {
            if ra != rb {
                continue;
            }
            let count = (j - i + 1) as u64;
            let bound = capacity + (b - a) / T;
            if count > bound {
                return Err(format!(
                    "{count} admitted in [{a}, {b}], the bound is {bound}: {admitted:?}"
                ));
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Step {
    /// Process `p` checks `n` times at the current instant.
    Check { p: usize, n: u64 },
    /// Time moves on, µs.
    Wait(u64),
    /// Process `p` resets the client.
    Reset { p: usize },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..3usize, 1..6u64).prop_map(|(p, n)| Step::Check { p, n }),
        3 => prop_oneof![Just(1u64), 1..T, Just(T), T..6 * T, Just(40 * T)].prop_map(Step::Wait),
        1 => (0..3usize).prop_map(|p| Step::Reset { p }),
    ]
}

/// Three processes leasing one client's units, with a horizon of 1 to 6
/// intervals, each on a local clock up to 1 000 ppm slower than Redis's,
/// checks interleaved with waits and resets: every admission of the
/// fleet, in order of time, keeps the exact bound of a bucket of 6 in
/// every span no reset cuts.
/// The spawned calls for more run whenever the runtime gets to them,
/// so their timing varies too.
#[test]
fn the_fleet_never_admits_beyond_the_exact_bound() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let mut runner = runner(64);
    let case = core::cell::Cell::new(0u32);
    runner
        .run(
            &(
                proptest::collection::vec(step(), 1..60),
                1..=6u64,
                proptest::collection::vec(prop_oneof![Just(0u64), 0..=1_000u64], 3),
            ),
            |(steps, horizon, slow)| {
                case.set(case.get() + 1);
                let clock = server.clock();
                let prefix = format!("exact{}", case.get());
                let fleet: Vec<_> = slow
                    .iter()
                    .map(|&ppm| leasing_slow(&server, &rt, (&clock, ppm), &prefix, (6, 3), horizon))
                    .collect();
                let (mut admitted, mut resets) = (Vec::new(), 0usize);
                let now = || crate::clock::Clock::now_nanos(&clock) / 1_000;
                for step in &steps {
                    match *step {
                        Step::Check { p, n } => {
                            for _ in 0..n {
                                let d = rt.block_on(fleet[p].check("c")).unwrap();
                                if d.is_allowed() {
                                    admitted.push((now(), resets));
                                }
                            }
                        }
                        Step::Wait(us) => clock.advance(Duration::from_micros(us)),
                        Step::Reset { p } => {
                            let _ = rt.block_on(fleet[p].reset("c")).unwrap();
                            resets += 1;
                        }
                    }
                }
                within_bound(&admitted, 6).map_err(TestCaseError::fail)
            },
        )
        .unwrap();
}

/// A process whose clock runs slow against Redis's, by 1 000 ppm (two
/// hosts slewing apart at NTP's limit of 500 ppm each), never spends a
/// leased unit whose slot has started: its estimate of Redis's clock
/// allows for the drift since the last reply. Process `A` leases (grants
/// under 4 units, so it never asks ahead) and holds the bucket's last
/// slots `[end − k·T, end)`; 1 µs after the last of them starts, `A`
/// checks once, and at `end` process `B` (one call per check) checks until
/// denied. Spending that unit late, `A` would make `capacity + 1`
/// admissions in a span shorter than `T`; on time, `A`'s check is judged
/// by Redis and the span holds `capacity`.
#[test]
fn a_slow_local_clock_never_spends_a_slot_that_has_started() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    let capacity = 20;
    let bucket = || {
        TokenBucket::builder()
            .rate(1, Duration::from_micros(T))
            .capacity(capacity)
            .redis(rt.block_on(server.manager()), "slow")
            .no_deny_shortcut()
    };
    let a = bucket()
        .lease(Lease::new(Duration::from_micros(capacity * T)).max_units(3))
        .timeout(PATIENCE)
        .build_on_slow_test_clock(clock.clone(), 1_000)
        .unwrap();
    let b = on_clock(bucket(), &clock);
    let before = warm_up(&rt, &a);
    assert!(held(&a) > 0);
    let now = |clock: &ManualClock| crate::clock::Clock::now_nanos(clock) / 1_000;
    // Where the bucket's slots end, as Redis holds it.
    let left = rt.block_on(b.peek("c")).unwrap().remaining();
    let end = now(&clock) + (capacity - left) * T;
    clock.advance(Duration::from_micros(end - T + 1 - now(&clock)));
    let mut admitted = Vec::new();
    if rt.block_on(a.check("c")).unwrap().is_allowed() {
        admitted.push((now(&clock), 0));
    }
    clock.advance(Duration::from_micros(end - now(&clock)));
    while rt.block_on(b.check("c")).unwrap().is_allowed() {
        admitted.push((now(&clock), 0));
        assert!(admitted.len() <= 2 * capacity as usize);
    }
    assert!(before > 0 && !admitted.is_empty());
    within_bound(&admitted, capacity).unwrap();
}

/// A grant that does not continue the lease, because another process took
/// the slots after it, waits behind the units the lease still holds
/// rather than displacing them: time stopped, process `A` leases (asking
/// ahead once a quarter of a grant is left) while process `B`, one call
/// per check, takes a slot after each of `A`'s checks. None of `A`'s units
/// lapses, every unit granted is spent or still held, and the bucket is
/// spent exactly.
#[test]
fn a_grant_behind_another_process_s_slots_waits_for_the_units_left() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    let capacity = 40;
    let a = leasing(&server, &rt, &clock, "behind", capacity, 8);
    let b = on_clock(
        TokenBucket::builder()
            .rate(1, Duration::from_micros(T))
            .capacity(capacity)
            .redis(rt.block_on(server.manager()), "behind")
            .no_deny_shortcut(),
        &clock,
    );
    let (mut a_got, mut b_got) = (warm_up(&rt, &a), 0);
    let calls = a.stats().lease_calls;
    // Each check made in the runtime, where its call ahead is spawned.
    let admitted = |l: &RedisLimiter<TokenBucket>| {
        rt.block_on(async { l.check("c").await.unwrap().is_allowed() })
    };
    for _ in 0..capacity {
        a_got += u64::from(admitted(&a));
        b_got += u64::from(admitted(&b));
    }
    let s = a.stats();
    assert!(s.lease_calls >= calls + 2, "asked ahead behind B: {s:?}");
    assert_eq!(s.lease_lapsed, 0, "{s:?}");
    assert_eq!(held(&a), 0, "every unit granted spent: {s:?}");
    assert_eq!(a_got + b_got, capacity, "{s:?}");
}

/// One process, a bucket of 5 and leases of up to 2, time stopped: exactly
/// 5 admitted; once the bucket has nothing to give, further checks are
/// denied here, without a call, each saying when the next unit frees.
#[test]
fn exactly_the_capacity_then_held_without_a_call() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    let limiter = leasing(&server, &rt, &clock, "held", 5, 2);
    let decisions: Vec<_> = (0..12)
        .map(|_| rt.block_on(limiter.check("c")).unwrap())
        .collect();
    assert_eq!(decisions.iter().filter(|d| d.is_allowed()).count(), 5);
    assert!(decisions[..5].iter().all(|d| d.is_allowed()));
    let calls = limiter.stats().round_trips;
    for _ in 0..20 {
        let d = rt.block_on(limiter.check("c")).unwrap();
        assert!(d.is_denied());
        assert!(d.retry_after() > Duration::ZERO);
        assert!(d.retry_after() <= Duration::from_micros(T));
    }
    let stats = limiter.stats();
    assert_eq!(stats.round_trips, calls, "held, no call: {stats:?}");
    assert!(stats.lease_held >= 20, "{stats:?}");
    // The next unit frees one interval on: one more admitted, and no
    // more.
    clock.advance(Duration::from_micros(T));
    let after: Vec<_> = (0..4)
        .map(|_| rt.block_on(limiter.check("c")).unwrap().is_allowed())
        .collect();
    assert_eq!(after, [true, false, false, false]);
}

/// A process spending at half the bucket's rate, leases sized for ten
/// intervals: every check admitted, none of the units lapses, and a call
/// carries several checks (a grant's slots end a horizon ahead, so its
/// units last the horizon at up to the bucket's rate).
#[test]
fn a_lease_lasts_its_horizon_below_the_bucket_s_rate() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    let limiter = leasing_for(&server, &rt, &clock, "last", (100, 50), 10);
    warm_up(&rt, &limiter);
    let before = limiter.stats();
    for _ in 0..200 {
        clock.advance(Duration::from_micros(2 * T));
        assert!(rt.block_on(limiter.check("c")).unwrap().is_allowed());
    }
    let after = limiter.stats();
    let calls = after.lease_calls - before.lease_calls;
    println!("200 checks, {calls} calls: {after:?}");
    assert!(calls * 3 <= 200, "{calls} calls for 200 checks: {after:?}");
    assert_eq!(after.lease_lapsed, 0, "{after:?}");
}

/// A check whose call for more is dropped on its way (its caller gave up
/// on it while Redis was paused) gives the call's place back: the next
/// check asks at once, rather than waiting for a call that will never
/// end.
#[test]
fn a_call_dropped_on_its_way_leaves_no_place_held() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    // Leases of one unit, each spent by the check that asked for it: the
    // client hot after a few checks, and the next check must ask.
    let limiter = leasing(&server, &rt, &clock, "dropped", 100, 1);
    for _ in 0..10 {
        assert!(rt.block_on(limiter.check("c")).unwrap().is_allowed());
    }
    assert!(limiter.stats().lease_calls > 0 && held(&limiter) == 0);
    // Redis holds every command for three seconds, far past the check's
    // 200 ms however loaded the machine: the check's call is held, and the
    // check dropped while it is.
    server.pause(3_000);
    let gave_up = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(200), limiter.check("c")).await
    });
    assert!(gave_up.is_err(), "the call was held by the pause");
    std::thread::sleep(Duration::from_millis(3_000));
    let started = std::time::Instant::now();
    let next = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(5), limiter.check("c")).await });
    assert!(next
        .expect("the next check is not held up by the dropped call")
        .unwrap()
        .is_allowed());
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A lease whose client goes quiet for a horizon gives its unspent units
/// back, since no process took units after them: another process then
/// gets the whole bucket but what was spent.
#[test]
fn a_quiet_lease_gives_its_units_back() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    let a = leasing_for(&server, &rt, &clock, "quiet", (20, 8), 2);
    let b = leasing(&server, &rt, &clock, "quiet", 20, 8);
    let a_spent = warm_up(&rt, &a);
    let a_held = held(&a);
    assert!(a_held > 0, "{:?}", a.stats());
    // The quiet timer runs on the runtime, on real time: a horizon is
    // 20 ms of the test clock, at least 1 ms of real time.
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(200)).await });
    let stats = a.stats();
    assert_eq!(stats.lease_returned, a_held, "{stats:?}");
    let b_got = (0..40)
        .filter(|_| rt.block_on(b.check("c")).unwrap().is_allowed())
        .count() as u64;
    assert_eq!(b_got, 20 - a_spent, "all but what A spent");
}

/// A reset while another process holds leased units, time stopped: the
/// slots leased stay that process's, and the bucket restarts full from
/// the end of the latest lease outstanding, so the units after it are
/// forgiven at once, the leased ones stay spendable, and nothing is
/// granted twice: never more than a full bucket from the reset on.
#[test]
fn a_reset_forgives_all_but_the_units_other_processes_hold() {
    let Some(server) = Server::start() else {
        return;
    };
    // A runtime each: A's quiet timer (on real time) runs only while A
    // checks, so it never gives A's units back while B does.
    let (rt, rt_b) = (runtime(), runtime());
    let clock = server.clock();
    let now = || crate::clock::Clock::now_nanos(&clock) / 1_000;
    let a = leasing(&server, &rt, &clock, "reset", 8, 4);
    let b = leasing(&server, &rt_b, &clock, "reset", 8, 4);
    let admit = |l: &RedisLimiter<TokenBucket>, n: usize| {
        let rt = if core::ptr::eq(l, &b) { &rt_b } else { &rt };
        (0..n)
            .filter(|_| rt.block_on(l.check("c")).unwrap().is_allowed())
            .count() as u64
    };
    // The bucket's TAT (µs) as Redis holds it, `now` if no key.
    let tat = || {
        let value: Option<Vec<u8>> = ::redis::cmd("GET")
            .arg(a.key("c"))
            .query(&mut server.sync())
            .unwrap();
        value.map_or(now(), |v| {
            let v = text_of(&v).expect("a tollgate state");
            v.split('|').nth(3).unwrap().parse::<u64>().unwrap()
        })
    };
    // A checks until it holds units of a lease (a client's first checks
    // go one call each, until it is hot); B takes what is left.
    let a_spent = warm_up(&rt, &a);
    let b_spent = admit(&b, 20);
    let a_held = held(&a);
    assert!(a_held > 0, "{:?}", a.stats());
    assert_eq!(a_spent + a_held + b_spent + a.stats().lease_lapsed, 8);
    assert!(rt_b.block_on(b.reset("c")).unwrap());
    let restart = tat();
    assert!(restart > now(), "A's lease keeps its slots");
    let forgiven = 8 - (restart - now()).div_ceil(T);
    let (b_after, a_after) = (admit(&b, 20), admit(&a, 20));
    assert_eq!(
        a_after,
        a_held,
        "A's units are still A's, and no more: {:?}",
        a.stats()
    );
    assert_eq!(b_after, forgiven, "the units after A's lease, at once");
    assert!(a_after + b_after <= 8, "never beyond a full bucket");
    // With no lease outstanding, a removal forgives everything.
    assert!(rt.block_on(a.remove("c")).unwrap());
    assert_eq!(tat(), now(), "no key: a full bucket");
    assert_eq!(admit(&b, 20) + admit(&a, 20), 8);
}

/// Another process's quota (a rolling deploy: capacity 4 where the
/// leasing one holds 8) converts the state while units are leased out,
/// time stopped: the conversion keeps the bucket's TAT, and the key's
/// expiry, no earlier than the lease's end, so the slots leased are never
/// granted a second time, and the key never expires while they may be
/// spent (it would come back a full bucket). The lease's units stay its
/// holder's; the other process takes only what its quota leaves after
/// them; and never more than a full bucket of 8 at that instant.
#[test]
fn a_conversion_by_another_quota_keeps_the_bucket_behind_the_leases() {
    let Some(server) = Server::start() else {
        return;
    };
    let (rt, rt_b) = (runtime(), runtime());
    let clock = server.clock();
    let now = || crate::clock::Clock::now_nanos(&clock) / 1_000;
    let a = leasing(&server, &rt, &clock, "behind", 8, 2);
    let b = TokenBucket::builder()
        .rate(1, Duration::from_micros(T))
        .capacity(4)
        .redis(rt_b.block_on(server.manager()), "behind")
        .no_deny_shortcut()
        .fail_policy(FailPolicy::FailClosed)
        .timeout(PATIENCE)
        .build_on_test_clock(clock.clone())
        .unwrap();
    let a_spent = warm_up(&rt, &a);
    let a_held = held(&a);
    assert!(a_held > 0, "{:?}", a.stats());
    let mut sync = server.sync();
    let lease_end = || -> u64 {
        let last: Vec<(String, u64)> = ::redis::cmd("ZRANGE")
            .arg([a.key("c"), b":lease".to_vec()].concat())
            .arg(-1)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut server.sync())
            .unwrap();
        last.first().map_or(0, |(_, end)| *end)
    };
    let end = lease_end();
    assert!(end > now(), "a lease outstanding");
    // B converts and admits what its quota leaves after the lease: a
    // bucket of 4 whose TAT is the lease's end.
    let behind = 4u64.saturating_sub((end - now()).div_ceil(T));
    let decisions: Vec<_> = (0..10)
        .map(|_| rt_b.block_on(b.check("c")).unwrap())
        .collect();
    let b_admitted = decisions.iter().filter(|d| d.is_allowed()).count() as u64;
    assert_eq!(b_admitted, behind, "B's quota after the lease's slots");
    // A denial says the wait the lease's end leaves under B's quota: no
    // shorter (B would find the slots still leased) and no longer.
    let denied = decisions.iter().find(|d| !d.is_allowed()).unwrap();
    assert_eq!(
        denied.retry_after(),
        Duration::from_micros((end + b_admitted * T).saturating_sub(now() + 3 * T)),
        "{denied:?}"
    );
    // The TAT (µs) Redis holds now.
    let stored_tat = || -> Option<u64> {
        let value: Option<Vec<u8>> = ::redis::cmd("GET")
            .arg(a.key("c"))
            .query(&mut server.sync())
            .unwrap();
        value.map(|v| {
            let v = text_of(&v).expect("a tollgate state");
            v.split('|').nth(3).unwrap().parse().unwrap()
        })
    };
    if let Some(tat) = stored_tat() {
        assert!(tat >= end, "the TAT {tat} behind the lease's end {end}");
        let expiry: i64 = ::redis::cmd("PEXPIRETIME")
            .arg(a.key("c"))
            .query(&mut sync)
            .unwrap();
        assert!(
            u64::try_from(expiry).unwrap() * 1_000 >= end,
            "the key lives until the lease's end"
        );
    }
    // A's units are still A's; after them, A's quota finds the bucket as
    // the lease left it, less what B took: never beyond a full bucket.
    let a_after = (0..20)
        .filter(|_| rt.block_on(a.check("c")).unwrap().is_allowed())
        .count() as u64;
    assert!(a_after >= a_held, "A spends what it holds: {:?}", a.stats());
    assert!(
        a_spent + a_after + b_admitted <= 8,
        "{a_spent} + {a_after} + {b_admitted} beyond a full bucket"
    );
    // Once every slot leased or spent has passed, nothing holds B back:
    // its whole quota at once.
    let last = stored_tat().unwrap_or(0).max(now());
    clock.advance(Duration::from_micros(last - now()));
    let b_full = (0..10)
        .filter(|_| rt_b.block_on(b.check("c")).unwrap().is_allowed())
        .count();
    assert_eq!(b_full, 4, "B refused past every lease's end");
}

/// A lease given up by `set_quota` leaves the leases' set once its client
/// goes quiet, though its units cannot go back (the state is converted
/// to the new quota by then): else every later conversion would keep the
/// bucket behind a lease no one can spend, until its end.
#[test]
fn a_lease_given_up_by_set_quota_leaves_the_leases_set_when_quiet() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    let a = leasing(&server, &rt, &clock, "given-up", 8, 4);
    let _ = warm_up(&rt, &a);
    let members = || -> usize {
        let all: Vec<String> = ::redis::cmd("ZRANGE")
            .arg([a.key("c"), b":lease".to_vec()].concat())
            .arg(0)
            .arg(-1)
            .query(&mut server.sync())
            .unwrap();
        all.len()
    };
    assert_eq!(members(), 1, "the lease is registered");
    a.set_quota(
        0,
        TokenBucket::builder()
            .rate(1, Duration::from_micros(T))
            .capacity(6),
    )
    .unwrap();
    // Judged under the new quota: the lease is given up, the state
    // converted.
    let _ = rt.block_on(a.check("c")).unwrap();
    // The quiet timer runs on real time, while the runtime runs.
    for _ in 0..100 {
        if members() == 0 {
            break;
        }
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(10)).await });
    }
    assert_eq!(
        members(),
        0,
        "the given-up lease left the set: {:?}",
        a.stats()
    );
}

/// A reset by the process that was held: its hold goes, so the fresh
/// bucket admits at once.
#[test]
fn a_reset_ends_this_process_s_hold() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    let limiter = leasing(&server, &rt, &clock, "unhold", 3, 3);
    let admitted = (0..6)
        .filter(|_| rt.block_on(limiter.check("c")).unwrap().is_allowed())
        .count();
    assert_eq!(admitted, 3);
    assert!(rt.block_on(limiter.check("c")).unwrap().is_denied());
    assert!(rt.block_on(limiter.reset("c")).unwrap());
    let after = (0..6)
        .filter(|_| rt.block_on(limiter.check("c")).unwrap().is_allowed())
        .count();
    assert_eq!(after, 3);
}

/// A quota changed by `set_quota`: this process gives up its lease (its
/// units lapse) and judges the next checks under the new quota, the state
/// converted as in-process (the bucket keeps the units it is missing, at
/// most the new capacity), so never more than the new quota allows.
#[test]
fn set_quota_gives_up_the_lease_and_judges_by_the_new_quota() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    let three = || {
        TokenBucket::builder()
            .rate(1, Duration::from_micros(T))
            .capacity(3)
    };
    let admit = |l: &RedisLimiter<TokenBucket>, n: usize| {
        (0..n)
            .filter(|_| rt.block_on(l.check("c")).unwrap().is_allowed())
            .count() as u64
    };
    // Lowered before any check: exactly the new capacity.
    let fresh = leasing(&server, &rt, &clock, "quota0", 10, 4);
    fresh.set_quota(0, three()).unwrap();
    assert_eq!(admit(&fresh, 10), 3);
    // Lowered after units were leased: what Redis granted counts as
    // spent, so at most 3 less what was taken.
    let limiter = leasing(&server, &rt, &clock, "quota1", 10, 4);
    assert_eq!(admit(&limiter, 1), 1);
    let taken = limiter.stats().lease_units;
    limiter.set_quota(0, three()).unwrap();
    let after = admit(&limiter, 10);
    assert!(after <= 3 - taken.min(3), "{after} after {taken} taken");
}

/// A denial by a lease says the wait Redis gives, however long: a bucket
/// spent, then slowed by `set_quota` to one unit per 10 s (the state
/// converted as is: still spent), is denied by the new lease's hold, and
/// each denial's `retry_after` is the one a `peek` reads from Redis's
/// state (about 10 s; at most a µs less, the lease's reading of Redis's
/// clock rounded up), never the hold's end (at most a second away), at
/// every instant of the wait.
#[test]
fn a_leased_denial_after_set_quota_says_the_real_wait() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    let limiter = leasing(&server, &rt, &clock, "quotawait", 100, 10);
    warm_up(&rt, &limiter);
    while rt.block_on(limiter.check("c")).unwrap().is_allowed() {}
    let slow = TokenBucket::builder()
        .rate(1, Duration::from_secs(10))
        .capacity(100);
    limiter.set_quota(0, slow).unwrap();
    let held_before = limiter.stats().lease_held;
    // Until the wait is under the longest hold: steps whose wait the
    // hold's end would cut short.
    let mut long = 0;
    for step in 0.. {
        let d = rt.block_on(limiter.check("c")).unwrap();
        let exact = rt.block_on(limiter.peek("c")).unwrap();
        if exact.retry_after() <= Duration::from_millis(1_250) {
            break;
        }
        long += 1;
        assert!(d.is_denied() && exact.is_denied(), "{d:?} {exact:?}");
        // The lease reads Redis's clock no earlier than it is (rounded
        // up to the µs): its wait is at most that much shorter.
        let (wait, exact) = (d.retry_after(), exact.retry_after());
        assert!(
            wait <= exact && exact - wait <= Duration::from_micros(1),
            "step {step}: {wait:?} where Redis says {exact:?}: {d:?}"
        );
        // A quarter second on: the hold (at most a second) ends every
        // four steps, the wait does not.
        clock.advance(Duration::from_millis(250));
    }
    assert!(long >= 8, "a wait of {long} quarter seconds");
    let s = limiter.stats();
    assert!(s.lease_held > held_before, "denied by the lease: {s:?}");
}

/// Redis stops while a lease holds units: they are still spent, and the
/// checks they cannot answer get the fail policy's answer.
#[test]
fn the_units_held_outlive_redis_and_the_fail_policy_answers_the_rest() {
    for policy in [
        FailPolicy::FailClosed,
        FailPolicy::FailOpen,
        FailPolicy::Local,
    ] {
        let Some(mut server) = Server::start() else {
            return;
        };
        let rt = runtime();
        let clock = server.clock();
        let manager = rt.block_on(server.manager());
        let limiter = TokenBucket::builder()
            .rate(1, Duration::from_secs(3_600))
            .capacity(100)
            .redis(manager, "down")
            .no_deny_shortcut()
            .fail_policy(policy)
            // A stopped server refuses the connection at once: the
            // timeout only has to outlast a loaded machine's replies.
            .timeout(PATIENCE)
            .lease(Lease::new(Duration::from_secs(60)).max_units(8))
            .build_on_test_clock(clock.clone())
            .unwrap();
        warm_up(&rt, &limiter);
        let held = held(&limiter);
        assert!(held > 0, "{:?}", limiter.stats());
        server.stop();
        for _ in 0..held {
            assert!(
                rt.block_on(limiter.check("c")).unwrap().is_allowed(),
                "{policy:?}: a unit held is spent without Redis"
            );
        }
        let next = rt.block_on(limiter.check("c"));
        match policy {
            FailPolicy::FailClosed => {
                let kind = next.unwrap_err().kind();
                assert!(
                    matches!(kind, CheckErrorKind::Unavailable | CheckErrorKind::Timeout),
                    "{kind:?}"
                );
            }
            FailPolicy::FailOpen => assert!(next.unwrap().is_allowed()),
            _ => {
                // The in-process limiter of the same quota, fresh.
                assert!(next.unwrap().is_allowed());
                assert_eq!(limiter.stats().fail_local, 1);
            }
        }
    }
}

/// Leases hold a token bucket's units and nothing else: any other
/// algorithm, or sizes out of range, is a clear error at build.
#[test]
fn leases_of_anything_but_a_bucket_or_out_of_range_are_refused() {
    let rt = runtime();
    let Some(server) = Server::start() else {
        return;
    };
    let manager = rt.block_on(server.manager());
    let err = FixedWindow::builder()
        .limit(10)
        .window(Duration::from_secs(1))
        .redis(manager.clone(), "no")
        .lease(Lease::new(Duration::from_millis(10)))
        .build()
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::Conflict { field: "lease", .. }),
        "{err}"
    );
    let bucket = || {
        TokenBucket::builder()
            .rate(10, Duration::from_secs(1))
            .redis(manager.clone(), "no")
    };
    for lease in [
        Lease::new(Duration::from_millis(10)).max_units(0),
        Lease::new(Duration::from_millis(10)).max_units(11),
        Lease::new(Duration::ZERO),
        Lease::new(Duration::from_secs(2)),
        Lease::new(Duration::from_millis(10)).max_clients(0),
    ] {
        let err = bucket().lease(lease).build().unwrap_err();
        assert_eq!(err.field(), "lease", "{lease:?}: {err}");
    }
    assert!(bucket()
        .lease(Lease::new(Duration::from_millis(10)))
        .build()
        .is_ok());
}

/// A check that finds its lease empty while another task's call for
/// more is on its way (its flag held, as by a call Redis holds past
/// the timeout) waits for that call at most until its own timeout,
/// and then answers by the fail policy: one timeout in all, never a
/// wait and then a call of its own (or several waits).
#[test]
fn a_check_waiting_for_another_s_call_answers_within_one_timeout() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let timeout = Duration::from_millis(250);
    let limiter = TokenBucket::builder()
        .rate(1_000, Duration::from_secs(1))
        .redis(rt.block_on(server.manager()), "late")
        .fail_policy(FailPolicy::FailOpen)
        .timeout(timeout)
        .lease(Lease::new(Duration::from_secs(1)).max_units(4))
        .build()
        .unwrap();
    // Checks until the client is hot and leased: on a loaded machine
    // some may time out (FailOpen admits them), which only takes longer.
    let leases = limiter.inner.leases.as_ref().unwrap();
    let started = std::time::Instant::now();
    let entry = loop {
        assert!(rt.block_on(limiter.check("c")).unwrap().is_allowed());
        if let Some(entry) = leases.map.pin().get(&b"c"[..]).map(Arc::clone) {
            break entry;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "no lease: {:?}",
            limiter.stats()
        );
    };
    // Another task's call on its way: the flag, once any call of the
    // checks above has ended. Acquire: as in `leased`.
    while entry
        .asking
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(10)).await });
    }
    // The lease empty, so the check must wait for that call; Redis
    // paused, so a call of its own would wait the timeout again.
    let _ = entry.cell.take_out(0);
    let timeouts = limiter.stats().timeouts;
    server.pause(1_000);
    let started = std::time::Instant::now();
    let decision = rt.block_on(limiter.check("c")).unwrap();
    let took = started.elapsed();
    assert!(decision.is_allowed(), "FailOpen admits");
    // Under twice the timeout (a check that waited out the other call and
    // then made its own waits a second timeout in the pause), with room
    // for a loaded machine's scheduling.
    assert!(
        took < 2 * timeout,
        "answered after {took:?}, against a timeout of {timeout:?}"
    );
    assert_eq!(
        limiter.stats().timeouts,
        timeouts + 1,
        "{:?}",
        limiter.stats()
    );
    // Release: as the call's end would.
    entry.asking.store(false, Ordering::Release);
}
