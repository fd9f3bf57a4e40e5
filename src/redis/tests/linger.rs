//! How long a token bucket's key outlives its state's idle instant, on a
//! real `redis-server` and a test clock.
//!
//! A bucket full under a small quota is not full under a larger one: that
//! quota carries it on from the tokens it held, and would admit more at
//! once on a key found expired. So every write sets a key to linger, past
//! its idle instant, the longest refill of every quota that wrote it since
//! it was made (`Spec::linger_ms`), named in its value, whichever path
//! writes it: the check's script, the slow path's conversion, a lease's
//! grant, give-back and reset. The value's linger is also what a key moved
//! to a node whose clock differs is carried by (`moved`), so an expiry
//! that disagreed with its value would move the state.

use core::time::Duration;

use super::testing::{on_clock, runtime, Server, PATIENCE};
use crate::clock::ManualClock;
use crate::redis::script::packed::text_of;
use crate::redis::{FailPolicy, Lease, RedisLimiter};
use crate::TokenBucket;

/// µs per unit of every bucket below.
const T: u64 = 100_000;

/// A bucket of `capacity`, one unit per `T`, under `prefix`.
fn bucket(
    server: &Server,
    rt: &tokio::runtime::Runtime,
    clock: &ManualClock,
    capacity: u64,
) -> RedisLimiter<TokenBucket> {
    on_clock(
        TokenBucket::builder()
            .rate(1, Duration::from_micros(T))
            .capacity(capacity)
            .redis(rt.block_on(server.manager()), "linger")
            .no_deny_shortcut(),
        clock,
    )
}

/// The key's value (in the text form), its TAT (µs, ns past it), the
/// linger its value names (ms; `None` for none) and its expiry (ms).
fn stored(server: &Server, key: &[u8]) -> (String, (u64, u64), Option<u64>, i64) {
    let mut c = server.sync();
    let value: Vec<u8> = ::redis::cmd("GET").arg(key).query(&mut c).unwrap();
    let value = text_of(&value).expect("a tollgate state");
    let fields: Vec<&str> = value.split('|').collect();
    let linger = fields[1].split(':').nth(2).map(|l| l.parse().unwrap());
    let tat = (fields[3].parse().unwrap(), fields[4].parse().unwrap());
    let expiry: i64 = ::redis::cmd("PEXPIRETIME").arg(key).query(&mut c).unwrap();
    (value.clone(), tat, linger, expiry)
}

/// Asserts that `key` names `linger` and expires that long past its idle
/// instant, to the ms; answers its TAT (µs).
#[track_caller]
fn lingers(server: &Server, key: &[u8], linger: u64) -> u64 {
    let (value, (t, r), named, expiry) = stored(server, key);
    assert_eq!(named, Some(linger), "{value}");
    let idle_ms = (t + u64::from(r > 0)) / 1_000;
    assert_eq!(
        expiry,
        i64::try_from(idle_ms + 1 + linger).unwrap(),
        "{value}: expires a linger past its idle instant"
    );
    t
}

#[test]
fn a_key_lingers_the_longest_refill_of_every_quota_that_wrote_it() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    // Refills of 2 s and of 300 ms.
    let (large, small) = (2_000, 300);
    let a = bucket(&server, &rt, &clock, 20);
    let b = bucket(&server, &rt, &clock, 3);
    let b2 = bucket(&server, &rt, &clock, 3);
    let key = a.key("c");
    assert_eq!(b.key("c"), key);
    let check = |l: &RedisLimiter<TokenBucket>| rt.block_on(l.check("c")).unwrap();

    // Its own refill, from the check's script.
    assert!(check(&a).is_allowed());
    let tat = lingers(&server, &key, large);
    // Converted by a quota of another refill (the slow path): the longer
    // kept.
    assert!(check(&b).is_allowed());
    let converted = lingers(&server, &key, large);
    assert!(converted >= tat);
    // Read as it stands by another writer of the same settings (the
    // check's script): kept, the state carried on by one unit.
    assert!(check(&b2).is_allowed());
    assert_eq!(lingers(&server, &key, large), converted + T);
    // And by the writer that converted it, whose own values name the
    // shorter: read as it stands (not converted again), kept.
    assert!(check(&b).is_allowed());
    assert_eq!(lingers(&server, &key, large), converted + 2 * T);
    // Denied: nothing written.
    assert!(check(&b).is_denied());
    assert_eq!(lingers(&server, &key, large), converted + 2 * T);

    // Once the key went (expired, or reset), the chain starts again from
    // the quota that writes it.
    assert!(rt.block_on(b.reset("c")).unwrap());
    clock.advance(Duration::from_micros(3 * T));
    assert!(check(&b).is_allowed());
    lingers(&server, &key, small);

    // A value an earlier release wrote names none: read as it stands by
    // the same settings, and written with the reader's own.
    let (value, ..) = stored(&server, &key);
    let mut fields: Vec<String> = value.split('|').map(str::to_owned).collect();
    fields[1] = "0:0".into();
    fields[2] = format!("0123456789abcdef.{}", fields[2].split_once('.').unwrap().1);
    let () = ::redis::cmd("SET")
        .arg(&key)
        .arg(fields.join("|"))
        .query(&mut server.sync())
        .unwrap();
    let before = stored(&server, &key).1 .0;
    assert!(check(&b2).is_allowed());
    assert_eq!(lingers(&server, &key, small), before + T);
}

#[test]
fn a_lease_s_grant_give_back_and_reset_keep_the_linger() {
    let Some(server) = Server::start() else {
        return;
    };
    // A runtime each: the leasing limiter's quiet timer (on real time)
    // runs only while its runtime does.
    let (rt, rt_b) = (runtime(), runtime());
    let clock = server.clock();
    let a = bucket(&server, &rt_b, &clock, 20);
    let b = bucket(&server, &rt_b, &clock, 3);
    // Refills of 800 ms; leases of a horizon of 200 ms.
    let leasing = TokenBucket::builder()
        .rate(1, Duration::from_micros(T))
        .capacity(8)
        .redis(rt.block_on(server.manager()), "linger")
        .no_deny_shortcut()
        .lease(Lease::new(Duration::from_micros(2 * T)).max_units(4))
        .fail_policy(FailPolicy::FailClosed)
        .timeout(PATIENCE)
        .build_on_test_clock(clock.clone())
        .unwrap();
    let key = a.key("c");
    assert!(rt_b.block_on(a.check("c")).unwrap().is_allowed());
    lingers(&server, &key, 2_000);
    let held = |l: &RedisLimiter<TokenBucket>| {
        let s = l.stats();
        s.lease_units - s.leased - s.lease_lapsed - s.lease_returned
    };
    // The leasing limiter's first checks go one call each (a conversion,
    // then the check's script), then a grant: every write keeps the
    // longer linger.
    let warm_up = || {
        for _ in 0..20 {
            if held(&leasing) > 0 {
                return;
            }
            assert!(rt.block_on(leasing.check("c")).unwrap().is_allowed());
            lingers(&server, &key, 2_000);
        }
        panic!("no lease: {:?}", leasing.stats());
    };
    warm_up();
    lingers(&server, &key, 2_000);
    // Quiet for its horizon, the lease gives its unpassed units back: the
    // key kept, however full the bucket, a linger past its idle instant.
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(600)).await });
    assert!(leasing.stats().lease_returned > 0, "{:?}", leasing.stats());
    lingers(&server, &key, 2_000);
    // Leased again, then reset by a quota of a shorter refill while the
    // lease is out: the bucket kept behind the lease, and the linger.
    clock.advance(Duration::from_micros(8 * T));
    warm_up();
    assert!(rt_b.block_on(b.reset("c")).unwrap());
    lingers(&server, &key, 2_000);
}

#[test]
fn the_scripts_work_out_the_linger_the_head_names() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    // (µs a token, capacity): refills of 2 331 µs, 1 µs, 999 ms and
    // 3 003 µs, lingering 3, 1, 999 and 4 ms, the scripts' arithmetic and
    // the head's alike.
    for (i, (us, capacity, linger)) in [(333, 7, 3), (1, 1, 1), (999, 1_000, 999), (1_001, 3, 4)]
        .into_iter()
        .enumerate()
    {
        let limiter = on_clock(
            TokenBucket::builder()
                .rate(1, Duration::from_micros(us))
                .capacity(capacity)
                .redis(rt.block_on(server.manager()), format!("odd-{i}"))
                .no_deny_shortcut(),
            &clock,
        );
        assert!(rt.block_on(limiter.check("c")).unwrap().is_allowed());
        lingers(&server, &limiter.key("c"), linger);
    }
}
