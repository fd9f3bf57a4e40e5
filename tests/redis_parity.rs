//! The Redis limiters decide as the in-process ones do, against a real
//! `redis-server` (see `redis_server`): quota changes, window changes
//! under one prefix (at Redis's instant, on a server whose clock runs
//! ahead too), the deny shortcut after a reset or a raised quota,
//! the fallback of `FailPolicy::Local` across a quota change, a pair's
//! figures, settings that would not apply, keys no client id can steer,
//! foreign values under a key, and windows aligned to the Unix epoch.
//!
//! Each test compares with an in-process limiter on a `ManualClock` given
//! the same operations where the figures depend on the algorithm: the
//! quotas are per hour, so the few milliseconds a test takes on Redis's
//! clock move no figure it asserts.

mod redis_server;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_server::{prefix, runtime, Patient, Server, HOUR};
use tollgate::redis::{FailPolicy, RedisLimiter};
use tollgate::{
    CheckErrorKind, ConfigError, FixedWindow, ManualClock, SlidingWindowCounter, SlidingWindowLog,
    TokenBucket,
};

// ---------------------------------------------------------------------------
// Keys.

/// Two prefixes, one nested in the other's key, never name the same key:
/// prefix `a` with client `b:tb:{c` and prefix `a:tb:{b` with client `c`
/// are two clients with a budget each.
#[test]
fn nested_prefixes_never_share_a_key() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let conn = server.manager().await;
        let p = prefix("nest");
        let build = |prefix: String| {
            TokenBucket::builder()
                .rate(1, HOUR)
                .redis(conn.clone(), prefix)
                .patient()
                .fail_policy(FailPolicy::FailClosed)
                .build()
                .unwrap()
        };
        let outer = build(p.clone());
        let inner = build(format!("{p}:tb:{{b"));
        assert!(outer.check("b:tb:{c").await.unwrap().is_allowed());
        let d = inner.check("c").await.unwrap();
        assert!(d.is_allowed(), "another prefix's client spent it: {d:?}");
        assert!(outer.check("b:tb:{c").await.unwrap().is_denied());
        assert!(inner.check("c").await.unwrap().is_denied());
    });
}

/// A value under a client's key that the limiter cannot read is a failure
/// of the limiter for that client, never a silent admission: `FailOpen`
/// admits only when Redis cannot be reached or does not answer in time.
#[test]
fn a_foreign_value_is_never_admitted_under_fail_open() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let conn = server.manager().await;
        let limiter = FixedWindow::builder()
            .limit(3)
            .window(HOUR)
            .redis(conn, prefix("foreign"))
            .patient()
            .fail_policy(FailPolicy::FailOpen)
            .build()
            .unwrap();
        // The limiter's own key for the client, written first by a check.
        assert!(limiter.check("victim").await.unwrap().is_allowed());
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", prefix("foreign")))
            .query(&mut server.sync())
            .unwrap();
        assert_eq!(keys.len(), 1, "{keys:?}");
        let _: () = redis::cmd("SET")
            .arg(&keys[0])
            .arg("someone else's")
            .query(&mut server.sync())
            .unwrap();
        let mut admitted = 0;
        for _ in 0..20 {
            match limiter.check("victim").await {
                Ok(d) => admitted += u32::from(d.is_allowed()),
                Err(err) => assert_eq!(err.kind(), CheckErrorKind::Corrupt, "{err}"),
            }
        }
        assert_eq!(admitted, 0, "{:?}", limiter.stats());
        assert_eq!(limiter.stats().fail_open, 0);
        // Under `Local`, the fallback decides that client's checks: held to
        // the quota in this process.
        let local = FixedWindow::builder()
            .limit(3)
            .window(HOUR)
            .redis(server.manager().await, prefix("foreign"))
            .patient()
            .fail_policy(FailPolicy::Local)
            .build()
            .unwrap();
        let mut admitted = 0;
        for _ in 0..20 {
            admitted += u32::from(local.check("victim").await.unwrap().is_allowed());
        }
        assert_eq!(admitted, 3, "{:?}", local.stats());
        assert_eq!(local.stats().fail_local, 20);
    });
}

// ---------------------------------------------------------------------------
// Quota changes.

/// A token bucket's rate change keeps the tokens missing, as in-process:
/// lowered from 10 to 10 per 10 hours after spending 10, nothing is left,
/// and after spending 5, the 5 held are kept (converted at the change's
/// instant on Redis's clock: at an instant before the state's, the bucket
/// would read as empty, refused for an hour); raised to 100 per hour, 90
/// are.
#[test]
fn a_bucket_rate_change_keeps_the_tokens_missing() {
    let Some(server) = Server::start() else {
        return;
    };
    rate_change_keeps_the_tokens_missing(&server);
}

/// As [`a_bucket_rate_change_keeps_the_tokens_missing`], on a server whose
/// clock runs a minute ahead of this process's (the clock shim,
/// `tests/support/clockshift.c`): the change's instant is Redis's, as the
/// replies told it, never this process's own clock (a minute before the
/// state was written, where the bucket spent by half reads as empty).
#[test]
fn a_rate_change_on_a_server_whose_clock_runs_ahead_converts_at_redis_s_instant() {
    let Some(shim) = redis_server::clockshift() else {
        return;
    };
    let shim = shim.to_str().expect("a UTF-8 path");
    let env = [("LD_PRELOAD", shim), ("CLOCKSHIFT_MS", "60000")];
    let Some(server) = Server::start_with_env(&[], &env) else {
        return;
    };
    rate_change_keeps_the_tokens_missing(&server);
}

fn rate_change_keeps_the_tokens_missing(server: &Server) {
    runtime().block_on(async {
        let conn = server.manager().await;
        let limiter = TokenBucket::builder()
            .rate(10, HOUR)
            .redis(conn, prefix("rate"))
            .patient()
            .fail_policy(FailPolicy::FailClosed)
            .no_deny_shortcut()
            .build()
            .unwrap();
        let local = TokenBucket::builder()
            .rate(10, HOUR)
            .reconfigurable()
            .clock(ManualClock::new())
            .build()
            .unwrap();
        for (client, spent) in [("low", 10), ("high", 10), ("half", 5)] {
            assert!(limiter.check_n(client, spent).await.unwrap().is_allowed());
            assert!(local.check_n(client, spent).unwrap().is_allowed());
        }
        let slow = || TokenBucket::builder().rate(10, 10 * HOUR);
        limiter.set_quota(0, slow()).unwrap();
        local.set_quota(0, slow()).unwrap();
        for client in ["low", "half"] {
            let (remote, here) = (limiter.check(client).await.unwrap(), local.check(client));
            assert_eq!(
                (remote.is_allowed(), remote.remaining()),
                (here.is_allowed(), here.remaining()),
                "lowered, {client}: {remote:?} in-process {here:?}"
            );
        }
        assert_eq!(local.check("half").remaining(), 3, "5 kept, 2 taken");
        let fast = || TokenBucket::builder().rate(100, HOUR);
        limiter.set_quota(0, fast()).unwrap();
        local.set_quota(0, fast()).unwrap();
        let (remote, here) = (limiter.check("high").await.unwrap(), local.check("high"));
        assert_eq!(
            (remote.is_allowed(), remote.remaining()),
            (here.is_allowed(), here.remaining()),
            "raised: {remote:?} in-process {here:?}"
        );
    });
}

/// A limit lowered then raised again converts as in-process, once per
/// change: 8 spent of 10, 2 left; lowered to 5, the 2 are kept; raised to
/// 10, still 2 (a move never adds), so the next check leaves 1.
#[test]
fn lowering_then_raising_a_quota_converts_as_in_process() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    runtime().block_on(async {
        let conn = server.manager().await;
        let fw = FixedWindow::builder()
            .limit(10)
            .window(HOUR)
            .redis(conn.clone(), prefix("lowraise"))
            .patient()
            .no_deny_shortcut()
            .build()
            .unwrap();
        let swc = SlidingWindowCounter::builder()
            .limit(10)
            .window(HOUR)
            .redis(conn, prefix("lowraise"))
            .patient()
            .no_deny_shortcut()
            .build()
            .unwrap();
        assert!(fw.check_n("c", 8).await.unwrap().is_allowed());
        assert!(swc.check_n("c", 8).await.unwrap().is_allowed());
        for limit in [5, 10] {
            fw.set_quota(0, FixedWindow::builder().limit(limit).window(HOUR))
                .unwrap();
            swc.set_quota(0, SlidingWindowCounter::builder().limit(limit).window(HOUR))
                .unwrap();
        }
        let local = FixedWindow::builder()
            .limit(10)
            .window(HOUR)
            .reconfigurable()
            .clock(ManualClock::new())
            .build()
            .unwrap();
        assert!(local.check_n("c", 8).unwrap().is_allowed());
        for limit in [5, 10] {
            local
                .set_quota(0, FixedWindow::builder().limit(limit).window(HOUR))
                .unwrap();
        }
        // 8 of 10 spent, 2 left; lowered to 5 the 2 are kept, raised to 10
        // again still 2 (a move never adds): the check takes one.
        let want = local.check("c").remaining();
        assert_eq!(want, 1);
        assert_eq!(
            fw.check("c").await.unwrap().remaining(),
            want,
            "fixed window"
        );
        assert_eq!(swc.check("c").await.unwrap().remaining(), want, "counter");
    });
}

/// How many of `n` checks of `client` in a row `limiter` admits.
async fn admitted<A: tollgate::redis::RedisAlgorithm + 'static>(
    limiter: &RedisLimiter<A>,
    client: &str,
    n: usize,
) -> u32 {
    let mut admitted = 0;
    for _ in 0..n {
        admitted += u32::from(limiter.check(client).await.unwrap().is_allowed());
    }
    admitted
}

/// A limiter `builder` makes on `server` under `FailPolicy::Local`
/// (patient), with `server` stopped once it is built.
fn local_on_a_stopped_server<A: tollgate::redis::RedisAlgorithm + 'static>(
    server: &mut Server,
    rt: &tokio::runtime::Runtime,
    builder: tollgate::Builder<A>,
    name: &str,
) -> RedisLimiter<A> {
    let limiter = rt.block_on(async {
        builder
            .redis(server.manager().await, prefix(name))
            .patient()
            .fail_policy(FailPolicy::Local)
            .build()
            .unwrap()
    });
    server.stop();
    limiter
}

/// Under `FailPolicy::Local`, a quota set while Redis is down changes the
/// fallback's quota as in-process `set_quota` does, keeping each client's
/// state: the same quota set again hands out nothing new.
#[test]
fn set_quota_during_an_outage_keeps_the_fallback_state() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let builder = FixedWindow::builder().limit(3).window(HOUR);
    let limiter = local_on_a_stopped_server(&mut server, &rt, builder, "outage");
    rt.block_on(async {
        assert_eq!(admitted(&limiter, "c", 5).await, 3);
        limiter
            .set_quota(0, FixedWindow::builder().limit(3).window(HOUR))
            .unwrap();
        assert_eq!(
            admitted(&limiter, "c", 5).await,
            0,
            "the same quota set again handed out a fresh budget"
        );
        // Raised to 5: the 3 spent of 3 are all of 5 (the share is kept).
        limiter
            .set_quota(0, FixedWindow::builder().limit(5).window(HOUR))
            .unwrap();
        let d = limiter.check("c").await.unwrap();
        assert_eq!(
            (d.is_allowed(), d.limit(), d.remaining()),
            (false, 5, 0),
            "{d:?}"
        );
        assert_eq!(limiter.stats().fail_local, 11);
    });
}

/// The same for the sliding window log, whose in-process state has no
/// conversion: its fallback's new limiter holds each client to what the
/// one before still has left for it. Spent 3 of 3, lowered to 2: nothing
/// more (a fresh log would hand out 2); raised to 5: nothing more (the 3
/// spent stand, and the new limit adds none); a client the old limiter
/// never saw gets the new limit whole.
#[test]
fn set_quota_during_an_outage_keeps_the_log_fallback_s_holds() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let builder = SlidingWindowLog::builder().limit(3).window(HOUR);
    let limiter = local_on_a_stopped_server(&mut server, &rt, builder, "log-outage");
    rt.block_on(async {
        let admit = |client: &'static str| admitted(&limiter, client, 6);
        assert_eq!(admit("c").await, 3);
        limiter
            .set_quota(0, SlidingWindowLog::builder().limit(2).window(HOUR))
            .unwrap();
        assert_eq!(
            admit("c").await,
            0,
            "a lowered quota handed out a fresh log"
        );
        limiter
            .set_quota(0, SlidingWindowLog::builder().limit(5).window(HOUR))
            .unwrap();
        assert_eq!(admit("c").await, 0, "a raised quota handed out a fresh log");
        assert_eq!(admit("new").await, 5, "a client never seen: the new limit");
        assert_eq!(limiter.stats().fail_local, 24);
    });
}

/// And the other way: the log fallback's hold ends with the windows it
/// stands for. A log of 3 a 2 s window, spent; lowered to 2 (the hold
/// takes both at once); once that window has passed the client has the
/// new limit whole, never refused for longer.
#[test]
fn the_log_fallback_s_hold_ends_with_its_window() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let window = Duration::from_secs(2);
    let builder = SlidingWindowLog::builder().limit(3).window(window);
    let limiter = local_on_a_stopped_server(&mut server, &rt, builder, "log-window");
    rt.block_on(async {
        assert_eq!(admitted(&limiter, "c", 4).await, 3);
        limiter
            .set_quota(0, SlidingWindowLog::builder().limit(2).window(window))
            .unwrap();
        assert_eq!(admitted(&limiter, "c", 4).await, 0, "held");
        // Past both windows (the old limiter's entries, and the hold's,
        // made when the quota changed), however slow the machine.
        tokio::time::sleep(window + Duration::from_millis(200)).await;
        assert_eq!(admitted(&limiter, "c", 4).await, 2, "the new limit whole");
    });
}

/// Two replicas (two limiters, each with its own fallback) decide alone
/// while Redis is down: with `local_share(2)` each holds a client to half
/// of each quota, so the fleet admits one quota, where without it each
/// admits a whole one; a quota set during the outage is shared alike, and
/// a share of 0 is refused.
#[test]
fn a_local_share_keeps_a_fleet_at_one_quota_during_an_outage() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let (shared, whole, bucket) = rt.block_on(async {
        let replica = |share: u32, p: &'static str| {
            let conn = server.manager();
            async move {
                FixedWindow::builder()
                    .limit(10)
                    .window(HOUR)
                    .redis(conn.await, prefix(p))
                    .patient()
                    .fail_policy(FailPolicy::Local)
                    .local_share(share)
                    .build()
                    .unwrap()
            }
        };
        let shared = [replica(2, "share").await, replica(2, "share").await];
        let whole = [replica(1, "whole").await, replica(1, "whole").await];
        let bucket = TokenBucket::builder()
            .rate(10, Duration::from_secs(60))
            .redis(server.manager().await, prefix("share-bucket"))
            .patient()
            .local_share(4)
            .build()
            .unwrap();
        let refused = FixedWindow::builder()
            .limit(10)
            .window(HOUR)
            .redis(server.manager().await, prefix("share-0"))
            .patient()
            .local_share(0)
            .build()
            .unwrap_err();
        assert_eq!(refused.field(), "local_share", "{refused}");
        (shared, whole, bucket)
    });
    server.stop();
    rt.block_on(async {
        let fleet = |replicas: &[RedisLimiter<FixedWindow>; 2]| {
            let replicas = replicas.clone();
            async move {
                let mut admitted = 0;
                for replica in &replicas {
                    for _ in 0..20 {
                        admitted += u32::from(replica.check("c").await.unwrap().is_allowed());
                    }
                }
                admitted
            }
        };
        assert_eq!(fleet(&shared).await, 10, "two replicas of half a quota");
        assert_eq!(
            fleet(&whole).await,
            20,
            "two replicas of a whole quota each"
        );
        let d = shared[0].check("c").await.unwrap();
        assert_eq!((d.is_allowed(), d.limit()), (false, 5), "{d:?}");
        // A quarter of a 10-token bucket: 2 at once.
        let mut admitted = 0;
        for _ in 0..10 {
            admitted += u32::from(bucket.check("c").await.unwrap().is_allowed());
        }
        assert_eq!(admitted, 2);
        // A quota set during the outage is shared too: 3 of 6 for a new
        // client.
        for replica in &shared {
            replica
                .set_quota(0, FixedWindow::builder().limit(6).window(HOUR))
                .unwrap();
        }
        let d = shared[1].check("new").await.unwrap();
        assert_eq!(
            (d.is_allowed(), d.limit(), d.remaining()),
            (true, 3, 2),
            "{d:?}"
        );
    });
}

/// A replica decides alone from what Redis last told it of a client, not
/// from a full quota: a client that spent 8 of 10 through two replicas
/// (`local_share(2)`) gets one more from each while Redis is down, 10 in
/// all; a client Redis refused gets nothing locally; one never seen starts
/// from the replica's share.
#[test]
fn an_outage_starts_each_client_from_what_redis_last_said() {
    let Some(mut server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let rt = runtime();
    let replicas = rt.block_on(async {
        let mut replicas = Vec::new();
        for _ in 0..2 {
            replicas.push(
                FixedWindow::builder()
                    .limit(10)
                    .window(HOUR)
                    .redis(server.manager().await, prefix("known"))
                    .patient()
                    .local_share(2)
                    .no_deny_shortcut()
                    .build()
                    .unwrap(),
            );
        }
        for i in 0..8 {
            assert!(replicas[i % 2].check("spent").await.unwrap().is_allowed());
        }
        for i in 0..12 {
            let _ = replicas[i % 2].check("refused").await.unwrap();
        }
        // Each replica last heard of "spent" with 2 or 3 left: it learns
        // on its own replies only.
        replicas
    });
    server.stop();
    rt.block_on(async {
        let admitted = |client: &'static str| {
            let replicas = replicas.clone();
            async move {
                let mut n = 0;
                for replica in &replicas {
                    for _ in 0..10 {
                        n += u32::from(replica.check(client).await.unwrap().is_allowed());
                    }
                }
                n
            }
        };
        // Replica 0 last heard 3 left (its fourth check, the seventh in
        // all), replica 1 heard 2: a share of 1 each.
        assert_eq!(admitted("spent").await, 2);
        assert_eq!(admitted("refused").await, 0);
        assert_eq!(admitted("unseen").await, 10);
    });
}

/// Two limiters of one algorithm under one prefix with different windows
/// (a deploy that changed the window) keep limiting: each reads the
/// other's state converted to its own window, never as corrupt, and the
/// key expires within the longer window.
#[test]
fn a_window_changed_under_one_prefix_stays_limited() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    runtime().block_on(async {
        let conn = server.manager().await;
        let p = prefix("rewindow");
        let minute = Duration::from_secs(60);
        let open = FailPolicy::FailOpen;
        macro_rules! case {
            ($builder:expr, $name:literal) => {{
                let hourly = $builder
                    .limit(2)
                    .window(HOUR)
                    .redis(conn.clone(), &p)
                    .patient()
                    .fail_policy(open)
                    .no_deny_shortcut()
                    .build()
                    .unwrap();
                let minutely = $builder
                    .limit(2)
                    .window(minute)
                    .redis(conn.clone(), &p)
                    .patient()
                    .fail_policy(open)
                    .no_deny_shortcut()
                    .build()
                    .unwrap();
                let mut admitted = 0;
                for i in 0..20 {
                    let d = if i % 2 == 0 {
                        hourly.check("c").await.unwrap()
                    } else {
                        minutely.check("c").await.unwrap()
                    };
                    admitted += u32::from(d.is_allowed());
                }
                assert!(admitted <= 4, "{}: {admitted} of 20 admitted", $name);
                for l in [&hourly, &minutely] {
                    let s = l.stats();
                    assert_eq!((s.errors, s.fail_open), (0, 0), "{}: {s:?}", $name);
                }
            }};
        }
        case!(FixedWindow::builder(), "fixed window");
        case!(SlidingWindowCounter::builder(), "sliding window counter");
        // Every key expires within two hours (the counter's state weighs
        // on the window after its own).
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{p}*"))
            .query(&mut server.sync())
            .unwrap();
        assert_eq!(keys.len(), 2, "{keys:?}");
        for key in keys {
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query(&mut server.sync())
                .unwrap();
            assert!(ttl > 0 && ttl <= 2 * 3_600_000 + 1, "{key}: {ttl} ms");
        }
    });
}

// ---------------------------------------------------------------------------
// The deny shortcut.

/// A check in flight when `reset` runs, decided before the reset, leaves
/// nothing in the deny shortcut: once `reset` has returned, the client's
/// next check is decided on its fresh state.
#[test]
fn a_reset_forgets_a_denial_written_by_a_check_in_flight() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    runtime().block_on(async {
        let limiter = FixedWindow::builder()
            .limit(2)
            .window(HOUR)
            .redis(server.manager().await, prefix("inflight"))
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let mut admin = server.sync();
        for round in 0..3 {
            let client = format!("c{round}");
            assert!(limiter.check(client.as_str()).await.unwrap().is_allowed());
            // Sent (it costs no more than is left, so it goes to Redis),
            // held by the paused server, and its answer, which leaves
            // nothing, not taken in until the reset has returned.
            let _: () = redis::cmd("CLIENT")
                .arg(&["PAUSE", "150", "ALL"][..])
                .query(&mut admin)
                .unwrap();
            let mut inflight = pin!(limiter.check(client.as_str()));
            let mut cx = Context::from_waker(Waker::noop());
            let first = inflight.as_mut().poll(&mut cx);
            assert!(first.is_pending(), "{first:?}");
            assert!(limiter.reset(client.as_str()).await.unwrap());
            let d = inflight.await.unwrap();
            assert_eq!((d.is_allowed(), d.remaining()), (true, 0), "round {round}");
            let d = limiter.check(client.as_str()).await.unwrap();
            assert!(
                d.is_allowed(),
                "round {round}: denied after the reset: {d:?} {:?}",
                limiter.stats()
            );
        }
    });
}

/// A raised quota is never hidden by a denial the shortcut remembers, for
/// tier 0 and for a tier of its own.
#[test]
fn a_raised_quota_is_never_hidden_by_the_shortcut() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    runtime().block_on(async {
        let limiter = FixedWindow::builder()
            .limit(3)
            .window(HOUR)
            .redis(server.manager().await, prefix("raise"))
            .patient()
            .tier_by(|client| u16::from(client.starts_with(b"pro-")))
            .build()
            .unwrap();
        let three = || FixedWindow::builder().limit(3).window(HOUR);
        let five = || FixedWindow::builder().limit(5).window(HOUR);
        limiter.set_quota(1, three()).unwrap();
        for (tier, client) in [(0, "free"), (1, "pro-a")] {
            assert!(limiter.check_n(client, 3).await.unwrap().is_allowed());
            assert!(limiter.check(client).await.unwrap().is_denied());
            let before = limiter.stats().denied_locally;
            assert!(limiter.check(client).await.unwrap().is_denied());
            assert_eq!(limiter.stats().denied_locally, before + 1, "remembered");
            limiter.set_quota(tier, five()).unwrap();
            // All of 3 spent is all of 5 (the share is kept): still denied,
            // but by Redis under the new quota, not by the remembered
            // denial of the old one.
            let before = limiter.stats().denied_locally;
            let d = limiter.check(client).await.unwrap();
            assert_eq!(
                (d.is_allowed(), d.limit(), d.remaining()),
                (false, 5, 0),
                "tier {tier}: {d:?}"
            );
            assert_eq!(
                limiter.stats().denied_locally,
                before,
                "tier {tier}: asked Redis"
            );
        }
    });
}

/// A pair's decision names both limits whoever makes it: Redis, the deny
/// shortcut, or `FailOpen` with Redis gone.
#[test]
fn a_pair_reports_both_limits_when_denied_locally_or_failing_open() {
    let Some(mut server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let rt = runtime();
    let limiter = rt.block_on(async {
        FixedWindow::builder()
            .limit(2)
            .window(HOUR)
            .and(TokenBucket::builder().rate(5, HOUR))
            .redis(server.manager().await, prefix("pairfig"))
            .patient()
            .fail_policy(FailPolicy::FailOpen)
            .build()
            .unwrap()
    });
    rt.block_on(async {
        for left in [1, 0] {
            let d = limiter.check("c").await.unwrap();
            assert_eq!((d.is_allowed(), d.remaining()), (true, left));
            let figures = d.pair_limits().expect("Redis's decision names both");
            assert_eq!((figures[0].limit(), figures[1].limit()), (2, 5));
        }
        let before = limiter.stats().denied_locally;
        let local = limiter.check("c").await.unwrap();
        assert!(local.is_denied());
        assert_eq!(limiter.stats().denied_locally, before + 1, "denied here");
        let figures = local.pair_limits().expect("a local denial names both");
        assert_eq!((figures[0].remaining(), figures[1].remaining()), (0, 3));
    });
    server.stop();
    rt.block_on(async {
        let d = limiter.check("fresh").await.unwrap();
        assert!(d.is_allowed());
        let figures = d.pair_limits().expect("FailOpen names both");
        assert_eq!((figures[0].limit(), figures[1].limit()), (2, 5));
        assert_eq!((figures[0].remaining(), figures[1].remaining()), (2, 5));
    });
}

// ---------------------------------------------------------------------------
// Settings that would not apply.

/// A setting the Redis limiter would not apply is refused, as in-process:
/// a second limit's clock, and a quota's clock or memory setting.
#[test]
fn settings_that_would_not_apply_are_conflicts() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let conn = server.manager().await;
        let err = TokenBucket::builder()
            .rate(10, HOUR)
            .and(
                FixedWindow::builder()
                    .limit(5)
                    .window(HOUR)
                    .clock(ManualClock::new()),
            )
            .redis(conn.clone(), prefix("conflict"))
            .patient()
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Conflict {
                    field: "and.clock",
                    ..
                }
            ),
            "{err:?}"
        );
        let limiter = FixedWindow::builder()
            .limit(5)
            .window(HOUR)
            .redis(conn, prefix("conflict"))
            .patient()
            .build()
            .unwrap();
        let err = limiter
            .set_quota(
                1,
                FixedWindow::builder()
                    .limit(5)
                    .window(HOUR)
                    .clock(ManualClock::new()),
            )
            .unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Conflict {
                    field: "tier.clock",
                    ..
                }
            ),
            "{err:?}"
        );
        let err = limiter
            .set_quota(
                1,
                FixedWindow::builder().limit(5).window(HOUR).max_clients(10),
            )
            .unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Conflict {
                    field: "tier.memory",
                    ..
                }
            ),
            "{err:?}"
        );
    });
}
// ---------------------------------------------------------------------------
// Windows on the Unix epoch.

/// The wait until the next boundary of `window`-long windows aligned to the
/// Unix epoch, read from the wall clock now.
fn to_epoch_boundary(window: Duration) -> Duration {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let w = window.as_nanos();
    Duration::from_nanos((w - since.as_nanos() % w) as u64)
}

/// A fixed window resets on the Unix epoch's boundaries in-process (on the
/// default clock), on Redis, and in the fallback of `FailPolicy::Local`:
/// the three agree on when a denied client's window ends.
#[test]
fn fixed_windows_start_on_the_unix_epoch_everywhere() {
    let Some(mut server) = Server::start() else {
        return;
    };
    // Far enough from a boundary that a window cannot end mid-test.
    let window = Duration::from_secs(4 * 3_600);
    if to_epoch_boundary(window) < Duration::from_secs(120) {
        std::thread::sleep(to_epoch_boundary(window) + Duration::from_secs(1));
    }
    let close = |a: Duration, b: Duration, what: &str| {
        let gap = a.abs_diff(b);
        assert!(gap < Duration::from_secs(5), "{what}: {a:?} against {b:?}");
    };
    let in_process = FixedWindow::builder()
        .limit(1)
        .window(window)
        .build()
        .unwrap();
    assert!(in_process.allow_request("c"));
    let expected = to_epoch_boundary(window);
    close(in_process.check("c").retry_after(), expected, "in-process");
    let rt = runtime();
    let limiter = rt.block_on(async {
        FixedWindow::builder()
            .limit(1)
            .window(window)
            .redis(server.manager().await, prefix("epoch"))
            .patient()
            .fail_policy(FailPolicy::Local)
            .no_deny_shortcut()
            .build()
            .unwrap()
    });
    rt.block_on(async {
        assert!(limiter.check("c").await.unwrap().is_allowed());
        let d = limiter.check("c").await.unwrap();
        close(d.retry_after(), expected, "Redis");
    });
    server.stop();
    rt.block_on(async {
        assert!(limiter.check("d").await.unwrap().is_allowed());
        let d = limiter.check("d").await.unwrap();
        assert!(d.is_denied());
        close(d.retry_after(), expected, "the local fallback");
        assert!(limiter.stats().fail_local >= 2);
    });
}

/// By default the scripts write a state in the text form that every
/// release reads; with `packed_state(true)` packed. A packed writer and a
/// text one sharing a prefix read each other's states and share each
/// client's one budget, each write leaving the state in its writer's form.
#[test]
fn text_and_packed_writers_share_each_client_s_budget() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let conn = server.manager().await;
        let p = prefix("forms");
        let build = |packed: Option<bool>| {
            let b = TokenBucket::builder()
                .rate(10, HOUR)
                .redis(conn.clone(), p.clone())
                .patient()
                .fail_policy(FailPolicy::FailClosed)
                .no_deny_shortcut();
            match packed {
                Some(packed) => b.packed_state(packed),
                None => b,
            }
            .build()
            .unwrap()
        };
        let mut raw = server.sync();
        let mut packed_under = |key: Vec<u8>| -> bool {
            let value: Vec<u8> = redis::cmd("GET").arg(key).query(&mut raw).unwrap();
            // The text form holds no `#`; the packed one always does.
            value.contains(&b'#')
        };
        let default = build(None);
        assert!(default.check("d").await.unwrap().is_allowed());
        assert!(!packed_under(default.key("d")), "the default writes text");
        let writers = [build(Some(false)), build(Some(true))];
        let mut admitted = 0;
        for i in 0..14 {
            let writer = &writers[i % 2];
            if writer.check("c").await.unwrap().is_allowed() {
                admitted += 1;
                assert_eq!(
                    packed_under(writer.key("c")),
                    i % 2 == 1,
                    "check {i}: the state left in its writer's form"
                );
            }
        }
        assert_eq!(admitted, 10, "one budget of 10 for both writers");
    });
}
