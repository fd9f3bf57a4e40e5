//! The Redis limiters' edges against a real `redis-server` (see
//! `redis_server`): a probe dropped before its first poll, quotas that
//! differ between the replica that wrote a state and the one reading it,
//! the largest costs, the builder's every documented bound, the deny
//! shortcut's reach, and the round-trip count.

mod redis_server;

use std::time::{Duration, Instant};

use redis_server::{admitted, at_once, builders, prefix, runtime, Patient, Server, HOUR};
use tollgate::redis::{FailPolicy, RedisLimiter};
use tollgate::{CheckErrorKind, FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};

// ---------------------------------------------------------------------------
// The breaker's probe.

/// A check made while the breaker waits for a probe, then dropped before
/// its first poll (a `select!` branch that lost), gives the probe back:
/// the next check goes to Redis, and the limiter is back on Redis as soon
/// as Redis is.
#[test]
fn a_probe_dropped_before_its_first_poll_lets_the_next_one_go() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let limiter = rt.block_on(async {
        FixedWindow::builder()
            .limit(1_000)
            .window(HOUR)
            .redis(server.manager().await, prefix("probe"))
            .patient()
            .backoff(Duration::from_millis(20), Duration::from_millis(40))
            .fail_policy(FailPolicy::FailClosed)
            .build()
            .unwrap()
    });
    rt.block_on(async {
        assert!(limiter.check("a").await.unwrap().is_allowed());
    });
    server.stop();
    rt.block_on(async {
        let err = limiter.check("a").await.unwrap_err();
        assert_ne!(err.kind(), CheckErrorKind::Corrupt, "{err}");
    });
    server.run();
    rt.block_on(async {
        // Past the backoff: the next check made is the probe. Drop it
        // unpolled.
        tokio::time::sleep(Duration::from_millis(60)).await;
        drop(limiter.check("a"));
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match limiter.check("a").await {
                Ok(d) => {
                    assert!(d.is_allowed());
                    break;
                }
                Err(err) => assert!(
                    Instant::now() < deadline,
                    "not back on Redis 5 s after it came back: {err} ({:?})",
                    limiter.stats()
                ),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

// ---------------------------------------------------------------------------
// Quotas that differ between writer and reader.

/// A replica whose limit differs from the writer's converts the state by
/// the move rule, as an in-process quota change does: what is left (2 of
/// 10, once 8 are spent) is what it may take, at most its own limit, and
/// never more (under FailOpen, which would admit on any error: no error);
/// a log keeps its admissions, each its own instant.
#[test]
fn a_replica_with_another_limit_admits_what_is_left_and_no_more() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(30));
    runtime().block_on(async {
        let conn = server.manager().await;
        let p = prefix("requota");
        let (tb10, swc10, fw10, swl10) = builders(&conn, &p, 10, HOUR);
        let (_, swc5, fw5, swl5) = builders(&conn, &p, 5, HOUR);
        let (_, swc20, fw20, swl20) = builders(&conn, &p, 20, HOUR);
        let open = FailPolicy::FailOpen;
        macro_rules! case {
            ($old:expr, $low:expr, $high:expr, $low_left:expr, $high_left:expr, $name:literal) => {{
                let old = $old.fail_policy(open).no_deny_shortcut().build().unwrap();
                let low = $low.fail_policy(open).no_deny_shortcut().build().unwrap();
                let high = $high.fail_policy(open).no_deny_shortcut().build().unwrap();
                for (reader, key, left) in [
                    (&low, "heavy-low", $low_left),
                    (&high, "heavy-high", $high_left),
                ] {
                    assert!(old.check_n(key, 8).await.unwrap().is_allowed());
                    let mut admitted = 0;
                    for _ in 0..20 {
                        let d = reader.check(key).await.unwrap();
                        if d.is_allowed() {
                            admitted += 1;
                        } else {
                            assert_eq!(d.remaining(), 0, "{}: {key}", $name);
                            assert!(d.retry_after() > Duration::ZERO, "{}: {key}: {d:?}", $name);
                        }
                    }
                    assert_eq!(admitted, left, "{}: {key}", $name);
                    assert_eq!(reader.stats().errors, 0, "{}", $name);
                    assert_eq!(reader.stats().fail_open, 0, "{}", $name);
                    // And the writer, back, has what its 10 leave: the 2
                    // it left, less what the reader took of them.
                    let mut back = 0;
                    for _ in 0..5 {
                        back += u64::from(old.check(key).await.unwrap().is_allowed());
                    }
                    assert_eq!(back, 2u64.saturating_sub(left), "{}: {key}", $name);
                    assert_eq!(old.stats().errors, 0, "{}", $name);
                }
            }};
        }
        case!(fw10, fw5, fw20, 2, 2, "fixed window");
        case!(swc10, swc5, swc20, 2, 2, "sliding window counter");
        case!(swl10, swl5, swl20, 0, 12, "sliding window log");
        // The bucket at the same rate keeps the tokens it holds: the
        // 2 tokens left, at most its capacity of 5, then one every 6 min.
        let tb5 = TokenBucket::builder()
            .rate(10, HOUR)
            .capacity(5)
            .redis(conn.clone(), &p)
            .patient()
            .fail_policy(open)
            .build()
            .unwrap();
        let tb10 = tb10.fail_policy(open).build().unwrap();
        assert!(tb10.check_n("heavy", 8).await.unwrap().is_allowed());
        assert!(tb5.check("heavy").await.unwrap().is_allowed());
        assert!(tb5.check("heavy").await.unwrap().is_allowed());
        let d = tb5.check("heavy").await.unwrap();
        assert!(d.is_denied() && d.remaining() == 0, "{d:?}");
        assert!(d.retry_after() <= Duration::from_secs(360), "{d:?}");
        assert_eq!(tb5.stats().errors, 0);
    });
}

// ---------------------------------------------------------------------------
// The largest costs, and errors about one request.

/// A log may admit its whole limit at once; an error reply about one
/// request never makes the limiter back off for every client.
#[test]
fn the_log_admits_its_largest_cost_and_one_bad_request_trips_nothing() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let limiter = SlidingWindowLog::builder()
            .limit(SlidingWindowLog::MAX_LIMIT)
            .window(HOUR)
            .redis(server.manager().await, prefix("bigcost"))
            .patient()
            .fail_policy(FailPolicy::FailClosed)
            .build()
            .unwrap();
        let max = SlidingWindowLog::MAX_LIMIT;
        let d = limiter.check_n("big", max).await.unwrap();
        assert_eq!((d.is_allowed(), d.remaining()), (true, 0), "{d:?}");
        let d = limiter.check("big").await.unwrap();
        assert!(d.is_denied(), "{d:?}");
        let d = limiter.check_n("other", max - 1).await.unwrap();
        assert_eq!((d.is_allowed(), d.remaining()), (true, 1), "{d:?}");
        assert!(limiter.check("third").await.unwrap().is_allowed());
        let s = limiter.stats();
        assert_eq!((s.errors, s.fail_closed), (0, 0), "{s:?}");
    });
}

// ---------------------------------------------------------------------------
// The builder's bounds.

/// Every bound `RedisBuilder::build` documents, at the value on each side.
#[test]
fn every_documented_bound_of_the_redis_builder() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let conn = server.manager().await;
        let p = prefix("bounds");
        let us = Duration::from_micros;
        let max_us: u64 = 1 << 52;
        let exact: u64 = (1 << 53) - 1;
        // field, or None for a setting that builds.
        let field = |r: Result<(), tollgate::ConfigError>| r.err().map(|e| e.field());
        macro_rules! fixed {
            ($limit:expr, $window:expr) => {
                field(
                    FixedWindow::builder()
                        .limit($limit)
                        .window($window)
                        .redis(conn.clone(), &p)
                        .build()
                        .map(drop),
                )
            };
        }
        macro_rules! sliding {
            ($limit:expr, $window:expr) => {
                field(
                    SlidingWindowCounter::builder()
                        .limit($limit)
                        .window($window)
                        .redis(conn.clone(), &p)
                        .build()
                        .map(drop),
                )
            };
        }
        macro_rules! log {
            ($limit:expr, $window:expr) => {
                field(
                    SlidingWindowLog::builder()
                        .limit($limit)
                        .window($window)
                        .redis(conn.clone(), &p)
                        .build()
                        .map(drop),
                )
            };
        }
        macro_rules! bucket {
            ($capacity:expr, $interval:expr) => {
                field(
                    TokenBucket::builder()
                        .rate(1, $interval)
                        .capacity($capacity)
                        .redis(conn.clone(), &p)
                        .build()
                        .map(drop),
                )
            };
        }
        // Windows: whole µs, from 1 µs to 2^52 µs.
        assert_eq!(fixed!(1, us(1)), None);
        assert_eq!(fixed!(1, Duration::from_nanos(1_500)), Some("window"));
        assert_eq!(fixed!(1, Duration::from_nanos(999)), Some("window"));
        assert_eq!(fixed!(1, us(max_us)), None);
        assert_eq!(fixed!(1, us(max_us + 1)), Some("window"));
        assert_eq!(sliding!(1, us(1)), None);
        assert_eq!(sliding!(1, Duration::from_nanos(1_001)), Some("window"));
        assert_eq!(sliding!(1, us(max_us)), None);
        assert_eq!(sliding!(1, us(max_us + 1)), Some("window"));
        assert_eq!(log!(1, us(1)), None);
        assert_eq!(log!(1, Duration::from_nanos(2_500)), Some("window"));
        assert_eq!(log!(1, us(max_us)), None);
        assert_eq!(log!(1, us(max_us + 1)), Some("window"));
        // The fixed window's count: at most 2^53 − 1 (a year-long window
        // leaves the in-process word room for more).
        let year = Duration::from_secs(365 * 86_400);
        assert_eq!(fixed!(exact, year), None);
        assert_eq!(fixed!(exact + 1, year), Some("limit"));
        assert_eq!(fixed!(1 << 54, year), Some("limit"));
        // The sliding window counter: limit × window (µs) ≤ 2^53 − 1.
        let year_us = 365 * 86_400 * 1_000_000;
        assert_eq!(sliding!(exact / year_us, year), None);
        assert_eq!(sliding!(exact / year_us + 1, year), Some("limit"));
        // The log: its in-process bound.
        assert_eq!(log!(SlidingWindowLog::MAX_LIMIT, HOUR), None);
        assert_eq!(log!(SlidingWindowLog::MAX_LIMIT + 1, HOUR), Some("limit"));
        // The bucket: capacity × interval (µs, rounded up) ≤ 2^52 µs.
        assert_eq!(bucket!(1 << 20, us(1 << 32)), None);
        assert_eq!(bucket!((1 << 20) + 1, us(1 << 32)), Some("capacity"));
        assert_eq!(bucket!(4, Duration::from_nanos(1_001)), None);
        // The connection's settings.
        let with = |b: tollgate::redis::RedisBuilder<FixedWindow>| field(b.build().map(drop));
        let base = || {
            FixedWindow::builder()
                .limit(1)
                .window(HOUR)
                .redis(conn.clone(), &p)
        };
        let ms = Duration::from_millis;
        assert_eq!(with(base().timeout(ms(1))), None);
        assert_eq!(with(base().timeout(HOUR)), None);
        assert_eq!(with(base().timeout(us(999))), Some("timeout"));
        assert_eq!(with(base().timeout(HOUR + ms(1))), Some("timeout"));
        assert_eq!(with(base().backoff(ms(1), ms(1))), None);
        assert_eq!(with(base().backoff(ms(1), HOUR)), None);
        assert_eq!(with(base().backoff(us(999), HOUR)), Some("backoff"));
        assert_eq!(with(base().backoff(ms(10), ms(9))), Some("backoff"));
        assert_eq!(with(base().backoff(ms(1), HOUR + ms(1))), Some("backoff"));
        assert_eq!(with(base().deny_shortcut(1)), None);
        assert_eq!(with(base().deny_shortcut(1 << 20)), None);
        assert_eq!(with(base().deny_shortcut(0)), Some("deny_shortcut"));
        assert_eq!(
            with(base().deny_shortcut((1 << 20) + 1)),
            Some("deny_shortcut")
        );
    });
}

/// A fixed window of a limit past 2^53 would count in Lua beyond exact
/// doubles: refused at build, and a limit just below works to its end.
#[test]
fn a_fixed_window_counts_exactly_up_to_its_largest_limit() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let exact: u64 = (1 << 53) - 1;
        let limiter = FixedWindow::builder()
            .limit(exact)
            .window(Duration::from_secs(365 * 86_400))
            .redis(server.manager().await, prefix("bigfw"))
            .patient()
            .fail_policy(FailPolicy::FailClosed)
            .build()
            .unwrap();
        let d = limiter.check_n("c", exact - 1).await.unwrap();
        assert_eq!((d.is_allowed(), d.remaining()), (true, 1));
        let d = limiter.check("c").await.unwrap();
        assert_eq!((d.is_allowed(), d.remaining()), (true, 0));
        assert!(limiter.check("c").await.unwrap().is_denied());
    });
}

// ---------------------------------------------------------------------------
// The deny shortcut's reach, and the round-trip count.

/// After a state vanishes (FLUSHALL, a key deleted by hand), the shortcut
/// denies a client for at most a second more.
#[test]
fn the_shortcut_outlives_a_vanished_state_by_at_most_a_second() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(30));
    runtime().block_on(async {
        let limiter = FixedWindow::builder()
            .limit(2)
            .window(HOUR)
            .redis(server.manager().await, prefix("flush"))
            .patient()
            .build()
            .unwrap();
        // The admission leaves nothing: the next check is denied here.
        assert!(limiter.check_n("c", 2).await.unwrap().is_allowed());
        let local = limiter.check("c").await.unwrap();
        assert!(local.is_denied(), "{local:?}");
        assert_eq!(limiter.stats().denied_locally, 1);
        let _: () = redis::cmd("FLUSHALL").query(&mut server.sync()).unwrap();
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        let d = limiter.check("c").await.unwrap();
        assert!(d.is_allowed(), "{d:?} {:?}", limiter.stats());
    });
}

/// A denial that leaves some units denies locally every cost above them
/// until the quota grows; a cost that fits still goes to Redis.
#[test]
fn the_shortcut_denies_every_cost_above_what_is_left() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(30));
    runtime().block_on(async {
        let limiter = FixedWindow::builder()
            .limit(10)
            .window(HOUR)
            .redis(server.manager().await, prefix("cost3"))
            .patient()
            .build()
            .unwrap();
        for _ in 0..3 {
            assert!(limiter.check_n("c", 3).await.unwrap().is_allowed());
        }
        let d = limiter.check_n("c", 3).await.unwrap();
        assert_eq!((d.is_denied(), d.remaining()), (true, 1));
        let trips = limiter.stats().round_trips;
        for _ in 0..100 {
            let d = limiter.check_n("c", 3).await.unwrap();
            assert_eq!((d.is_denied(), d.remaining()), (true, 1), "{d:?}");
            assert!(limiter.check_n("c", 2).await.unwrap().is_denied());
        }
        let s = limiter.stats();
        assert_eq!(s.round_trips, trips, "{s:?}");
        // The first denial too was made here: the last admission left 1.
        assert_eq!(s.denied_locally, 201, "{s:?}");
        // The last unit is still there, and a cost of 1 asks Redis.
        assert!(limiter.check("c").await.unwrap().is_allowed());
        assert_eq!(limiter.stats().round_trips, trips + 1);
        assert!(limiter.check("c").await.unwrap().is_denied());
    });
}

/// A denial made here tells a wait no shorter than Redis would: a client
/// that honours its `retry_after` is admitted then, even when Redis judged
/// the check that left the client empty late in its round trip (the check
/// waited in Redis's queue). Each algorithm, one unit per 2 s.
#[test]
fn a_local_denial_s_wait_is_never_shorter_than_redis_s() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let conn = rt.block_on(server.manager());
    let (tb, swc, fw, swl) = builders(&conn, &prefix("wait"), 1, Duration::from_secs(2));
    rt.block_on(async {
        honoured(&server, "token bucket", tb.build().unwrap()).await;
        honoured(&server, "sliding counter", swc.build().unwrap()).await;
        honoured(&server, "fixed window", fw.build().unwrap()).await;
        honoured(&server, "sliding log", swl.build().unwrap()).await;
    });
}

/// The admission that spends `limiter`'s one unit waits 400 ms in Redis's
/// queue (`CLIENT PAUSE`) before Redis judges it; the denial that follows
/// is made here, and its wait admits. The check is sent 100 ms into a 2 s
/// window of Redis's clock, so that the windows do not roll over before
/// the denial.
async fn honoured<A: tollgate::redis::RedisAlgorithm>(
    server: &Server,
    name: &str,
    limiter: RedisLimiter<A>,
) {
    // The script is loaded, so that the paused check is the admission.
    assert!(limiter.check("warm").await.unwrap().is_allowed(), "{name}");
    let (secs, us): (u64, u64) = redis::cmd("TIME").query(&mut server.sync()).unwrap();
    let phase = (secs % 2) * 1_000_000 + us;
    let to = (2_100_000 - phase) % 2_000_000;
    tokio::time::sleep(Duration::from_micros(to)).await;
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "400", "ALL"][..])
        .query(&mut server.sync())
        .unwrap();
    let admitted = limiter.check("c").await.unwrap();
    assert!(admitted.is_allowed(), "{name}: {admitted:?}");
    let before = limiter.stats().denied_locally;
    let denied = limiter.check("c").await.unwrap();
    assert!(denied.is_denied(), "{name}: {denied:?}");
    assert_eq!(
        limiter.stats().denied_locally,
        before + 1,
        "{name}: denied here: {denied:?}"
    );
    tokio::time::sleep(denied.retry_after()).await;
    let then = limiter.check("c").await.unwrap();
    assert!(
        then.is_allowed(),
        "{name}: denied here with {denied:?}, then {then:?}"
    );
}

/// `round_trips` counts every command a check sends, a reload of a lost
/// script included: the server's own count of commands agrees.
#[test]
fn round_trips_count_every_command_sent() {
    let Some(server) = Server::start() else {
        return;
    };
    let mut admin = server.sync();
    // The commands a check may send, as Redis counts them (the commands a
    // script runs inside are counted apart).
    let mut commands = move || -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut admin)
            .unwrap();
        info.lines()
            .filter(|l| {
                ["evalsha", "eval", "script"]
                    .iter()
                    .any(|c| l.starts_with(&format!("cmdstat_{c}:")))
            })
            .flat_map(|l| l.split([':', ',']))
            .filter_map(|field| {
                // Calls made (failed ones included) or refused.
                let (name, n) = field.split_once('=')?;
                ["calls", "rejected_calls"]
                    .contains(&name)
                    .then(|| n.parse::<u64>().unwrap())
            })
            .sum()
    };
    runtime().block_on(async {
        let limiter = TokenBucket::builder()
            .rate(100, HOUR)
            .redis(server.manager().await, prefix("trips"))
            .patient()
            .build()
            .unwrap();
        assert!(limiter.check("c").await.unwrap().is_allowed());
        let before = commands();
        let trips = limiter.stats().round_trips;
        assert!(limiter.check("c").await.unwrap().is_allowed());
        let sent = commands() - before;
        assert_eq!(limiter.stats().round_trips - trips, sent);
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut server.sync())
            .unwrap();
        let before = commands();
        let trips = limiter.stats().round_trips;
        assert!(limiter.check("c").await.unwrap().is_allowed());
        let sent = commands() - before;
        assert!(sent > 1, "the script was reloaded");
        assert_eq!(limiter.stats().round_trips - trips, sent);
    });
}

// ---------------------------------------------------------------------------
// Coalesced checks through faults.

/// A fixed window of 5 an hour that coalesces, under `policy`, with a
/// timeout of 10 s: far longer than a server's death takes to reach a
/// check, however loaded the machine, so that an answer before it is the
/// death's, never the timeout's.
fn coalescing(
    conn: &redis::aio::ConnectionManager,
    name: &str,
    policy: FailPolicy,
) -> RedisLimiter<FixedWindow> {
    FixedWindow::builder()
        .limit(5)
        .window(HOUR)
        .redis(conn.clone(), prefix(&format!("{name}-{policy:?}")))
        .fail_policy(policy)
        .timeout(Duration::from_secs(10))
        .backoff(Duration::from_millis(20), Duration::from_millis(100))
        .no_deny_shortcut()
        .coalesce(true)
        .build()
        .unwrap()
}

/// Checks `limiter` until Redis answers one (the breaker closed again):
/// an answer that the fail policy did not give.
async fn until_redis_answers(limiter: &RedisLimiter<FixedWindow>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let before = limiter.stats();
        let answer = limiter.check("until-redis-answers").await;
        let after = limiter.stats();
        let by_policy = (after.fail_closed + after.fail_local + after.fail_open)
            - (before.fail_closed + before.fail_local + before.fail_open);
        if answer.is_ok() && by_policy == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not back on Redis 10 s after it came back: {:?}",
            limiter.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Coalescing through a killed server: 24 checks of one client at once
/// on a paused server (two calls in flight, the rest waiting behind them)
/// on each of two limiters, then the server killed. Every check is
/// answered (none hangs) when the server dies, before the 10 s timeout of
/// any, and only the two calls in flight went to Redis; each is answered
/// by the fail policy: under `FailClosed` each with an error of
/// kind `Unavailable` or `Timeout`, under `Local` each by the in-process
/// limiter, which admits exactly its quota of 5. After a restart, checks
/// go to Redis again, coalesced, and exact: three clients checked by 8
/// tasks each at once are each admitted exactly 5, remaining 4 … 0 once
/// each, none answered by the fail policy.
#[test]
fn coalesced_checks_through_a_killed_server_are_answered_then_exact() {
    let Some(mut server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let rt = runtime();
    let conn = rt.block_on(server.manager());
    let closed = coalescing(&conn, "coalkill", FailPolicy::FailClosed);
    let local = coalescing(&conn, "coalkill", FailPolicy::Local);
    rt.block_on(async {
        assert!(closed.check("warm").await.unwrap().is_allowed());
        assert!(local.check("warm").await.unwrap().is_allowed());
    });
    let trips = [closed.stats().round_trips, local.stats().round_trips];
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "20000", "ALL"][..])
        .query(&mut server.sync())
        .unwrap();
    let (closed_answers, local_answers) = rt.block_on(async {
        let checks = |limiter: &RedisLimiter<FixedWindow>| -> Vec<_> {
            (0..24)
                .map(|_| {
                    let limiter = limiter.clone();
                    tokio::spawn(async move {
                        let started = Instant::now();
                        let answer =
                            tokio::time::timeout(Duration::from_secs(30), limiter.check("c")).await;
                        (answer.expect("a check hung"), started.elapsed())
                    })
                })
                .collect()
        };
        let (closed_checks, local_checks) = (checks(&closed), checks(&local));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            closed_checks
                .iter()
                .chain(&local_checks)
                .all(|t| !t.is_finished()),
            "every check is in flight or waiting when the server dies"
        );
        server.stop();
        let mut answers = (Vec::new(), Vec::new());
        for task in closed_checks {
            answers.0.push(task.await.unwrap());
        }
        for task in local_checks {
            answers.1.push(task.await.unwrap());
        }
        answers
    });
    // Answered when the server died (200 ms in), not at their timeout
    // (10 s in): the two calls in flight failed, and the checks behind
    // them went to the fail policy without a call of their own.
    let slack = Duration::from_secs(9);
    for (limiter, trips) in [&closed, &local].into_iter().zip(trips) {
        let s = limiter.stats();
        assert_eq!((s.round_trips - trips, s.timeouts), (2, 0), "{s:?}");
    }
    for (answer, took) in &closed_answers {
        let err = answer.as_ref().unwrap_err();
        assert!(
            matches!(
                err.kind(),
                CheckErrorKind::Unavailable | CheckErrorKind::Timeout
            ),
            "{err}"
        );
        assert!(*took < slack, "{took:?}");
    }
    assert_eq!(closed.stats().fail_closed, 24, "{:?}", closed.stats());
    let decisions: Vec<_> = local_answers
        .iter()
        .map(|(answer, took)| {
            assert!(*took < slack, "{took:?}");
            *answer.as_ref().unwrap()
        })
        .collect();
    assert_eq!(
        admitted(&decisions),
        vec![0, 1, 2, 3, 4],
        "{:?}",
        local.stats()
    );
    assert_eq!(local.stats().fail_local, 24, "{:?}", local.stats());

    server.run();
    rt.block_on(async {
        for limiter in [&closed, &local] {
            until_redis_answers(limiter).await;
            // Exact again, with no check left to the fail policy; and
            // coalescing again: checks of a client made at once share
            // calls. Whether the spawned tasks overlap a call in flight is
            // up to the machine's scheduler (under load they may each find
            // none), so fresh clients try again until some did, every try
            // exact.
            let coalesced = limiter.stats().coalesced;
            let mut tries = 0;
            while limiter.stats().coalesced == coalesced {
                tries += 1;
                assert!(
                    tries <= 50,
                    "no check shared a call in 50 tries: {:?}",
                    limiter.stats()
                );
                let before = limiter.stats();
                let names: Vec<&'static str> = (0..3)
                    .map(|c| &*Box::leak(format!("back-{tries}-{c}").into_boxed_str()))
                    .collect();
                for (client, decisions) in names.iter().zip(at_once(limiter, &names, 8, 2).await) {
                    assert_eq!(admitted(&decisions), vec![0, 1, 2, 3, 4], "{client}");
                }
                let after = limiter.stats();
                assert_eq!(
                    (after.fail_closed, after.fail_local),
                    (before.fail_closed, before.fail_local),
                    "{after:?}"
                );
            }
        }
    });
}

/// Polls `future` once, with a waker that does nothing.
fn poll_once<F: std::future::Future + Unpin>(future: &mut F) -> std::task::Poll<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    std::pin::Pin::new(future).poll(&mut cx)
}

/// Runs `future` to its end on this thread, parking between polls: an
/// executor that is not tokio's, and no tokio runtime's context.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

/// The call that a coalesced check waits on ends outside any tokio
/// runtime (its check driven to its end by another executor, or dropped,
/// on a thread of no runtime), so no task can be spawned to carry the
/// waiting check. Polled on a thread of no runtime too, it is answered at
/// once by the fail policy (under `FailClosed` an `Unavailable` error,
/// under `Local` the in-process limiter's decision), not at its timeout of
/// 5 s; polled in a runtime, it makes its own call, and Redis answers it.
/// Either way the client's place is given back: the next checks go to
/// Redis, which holds exactly the calls that reached it.
#[test]
fn a_call_that_ends_outside_a_runtime_answers_the_checks_waiting_on_it() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let rt = runtime();
    let build = |policy, variant: usize| {
        let conn = rt.block_on(server.manager());
        let limiter = FixedWindow::builder()
            .limit(3)
            .window(HOUR)
            .redis(conn, prefix(&format!("noruntime-{variant}")))
            .fail_policy(policy)
            .timeout(Duration::from_secs(5))
            .no_deny_shortcut()
            .coalesce(true)
            .build()
            .unwrap();
        rt.block_on(async {
            assert!(limiter.check("warm").await.unwrap().is_allowed());
        });
        limiter
    };
    for (variant, (policy, finish, waiter_in_runtime)) in [
        (FailPolicy::FailClosed, "driven to its end", false),
        (FailPolicy::Local, "dropped", false),
        (FailPolicy::FailClosed, "dropped", true),
    ]
    .into_iter()
    .enumerate()
    {
        let limiter = build(policy, variant);
        // Two calls in flight (the most one client has), and a check
        // waiting for the next: each first polled in the runtime, while
        // Redis holds its answers for 200 ms.
        let mut admin = server.sync();
        let _: () = redis::cmd("CLIENT")
            .arg(&["PAUSE", "200", "ALL"][..])
            .query(&mut admin)
            .unwrap();
        let (mut leads, mut waiting) = {
            let _runtime = rt.enter();
            let mut leads = [Box::pin(limiter.check("c")), Box::pin(limiter.check("c"))];
            let mut waiting = Box::pin(limiter.check("c"));
            for lead in &mut leads {
                assert!(poll_once(lead).is_pending());
            }
            assert!(poll_once(&mut waiting).is_pending());
            (leads, waiting)
        };
        let _: () = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query(&mut admin)
            .unwrap();
        assert!(tokio::runtime::Handle::try_current().is_err());
        let started = Instant::now();
        match finish {
            "driven to its end" => {
                let mut left: Vec<u64> = leads
                    .iter_mut()
                    .map(|lead| block_on(lead).unwrap().remaining())
                    .collect();
                left.sort_unstable();
                assert_eq!(left, [1, 2], "{policy:?}");
            }
            _ => drop(leads),
        }
        let answer = if waiter_in_runtime {
            rt.block_on(&mut waiting)
        } else {
            block_on(&mut waiting)
        };
        assert!(started.elapsed() < Duration::from_secs(2), "{policy:?}");
        let s = limiter.stats();
        match policy {
            _ if waiter_in_runtime => {
                // Redis's answer: at most the two dropped leads reached it
                // before, of 3; what it leaves is all the next checks get.
                let d = answer.unwrap();
                assert!(d.is_allowed(), "{policy:?}");
                assert_eq!((s.fail_closed, s.fail_local), (0, 0), "{s:?}");
                rt.block_on(async {
                    for _ in 0..d.remaining() {
                        assert!(limiter.check("c").await.unwrap().is_allowed());
                    }
                    assert!(limiter.check("c").await.unwrap().is_denied());
                });
                assert_eq!(limiter.stats().timeouts, 0);
                continue;
            }
            FailPolicy::FailClosed => {
                let err = answer.unwrap_err();
                assert_eq!(err.kind(), CheckErrorKind::Unavailable, "{err}");
                assert_eq!(s.fail_closed, 1, "{s:?}");
            }
            _ => {
                assert!(answer.unwrap().is_allowed(), "{policy:?}");
                assert_eq!(s.fail_local, 1, "{s:?}");
            }
        }
        assert_eq!((s.timeouts, s.coalesced), (0, 0), "{policy:?}: {s:?}");
        // Back in the runtime: the client's place was given back, so the
        // next check leads a call of its own at once, answered by Redis,
        // which counts every call that reached it: both leads that ran to
        // their end (a dropped one may or may not have been sent).
        rt.block_on(async {
            let d = tokio::time::timeout(Duration::from_secs(2), limiter.check("c"))
                .await
                .expect("the client's place was given back")
                .unwrap();
            assert!(d.is_allowed(), "{policy:?}");
            if finish == "driven to its end" {
                assert_eq!(d.remaining(), 0, "{policy:?}");
            }
            for _ in 0..d.remaining() {
                assert!(limiter.check("c").await.unwrap().is_allowed(), "{policy:?}");
            }
            assert!(limiter.check("c").await.unwrap().is_denied(), "{policy:?}");
            let after = limiter.stats();
            assert_eq!(
                (after.fail_closed, after.fail_local, after.timeouts),
                (s.fail_closed, s.fail_local, 0),
                "{policy:?}: {after:?}"
            );
        });
    }
}

/// Checks waiting for the next call when a call fails find the breaker as
/// that failure left it: answered by the fail policy at once, with no
/// call (and no probe) of their own. A paused server holds a check of
/// client `x` and one of client `c`, with nine checks of `c` waiting
/// behind them (on one server every client of a limiter shares the
/// calls in flight); `x`'s check times out at 3 s and opens the breaker,
/// and the nine are answered then. At 3.9 s the server is killed, and
/// `c`'s call fails. Each instant the test asserts at is 0.9 s from the
/// events on either side of it, so that a loaded machine's scheduling
/// cannot reorder them.
#[test]
fn checks_waiting_when_a_call_fails_find_the_breaker_it_left() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let rt = runtime();
    // Redis's answers awaited for up to 10 s (the limiter's timeout
    // decides), a dead server found at once.
    let limiter = rt.block_on(async {
        let conn = server.manager().await;
        FixedWindow::builder()
            .limit(100)
            .window(HOUR)
            .redis(conn, prefix("coalprobe"))
            .fail_policy(FailPolicy::FailClosed)
            .timeout(Duration::from_secs(3))
            .backoff(Duration::from_millis(20), Duration::from_secs(5))
            .no_deny_shortcut()
            .coalesce(true)
            .build()
            .unwrap()
    });
    rt.block_on(async {
        assert!(limiter.check("warm").await.unwrap().is_allowed());
    });
    let before = limiter.stats();
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "20000", "ALL"][..])
        .query(&mut server.sync())
        .unwrap();
    let answers = rt.block_on(async {
        let check = |client: &'static str| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_secs(15), limiter.check(client))
                    .await
                    .expect("a check hung")
            })
        };
        let started = Instant::now();
        // x's call times out at 3 s, and the checks waiting are answered
        // then; c's call would time out at 4.8 s: the server dies at 3.9 s.
        let mut tasks = vec![check("x")];
        tokio::time::sleep(Duration::from_millis(1_800)).await;
        // c's first check alone, so that it is the one whose call goes:
        // two spawned together may reach the limiter in either order.
        tasks.push(check("c"));
        tokio::time::sleep(Duration::from_millis(150)).await;
        tasks.extend((0..9).map(|_| check("c")));
        tokio::time::sleep_until((started + Duration::from_millis(3_900)).into()).await;
        assert!(tasks[0].is_finished(), "x's check timed out");
        assert!(!tasks[1].is_finished(), "c's call is in flight");
        assert!(
            tasks[2..].iter().all(tokio::task::JoinHandle::is_finished),
            "the waiting checks were answered when x's call failed"
        );
        server.stop();
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        // Long enough for probes sent one after another to show.
        tokio::time::sleep(Duration::from_millis(500)).await;
        answers
    });
    for answer in &answers {
        let err = answer.as_ref().unwrap_err();
        assert!(
            matches!(
                err.kind(),
                CheckErrorKind::Unavailable | CheckErrorKind::Timeout
            ),
            "{err}"
        );
    }
    let s = limiter.stats();
    assert_eq!(s.probes - before.probes, 0, "{s:?}");
    // x's call and c's.
    assert_eq!(s.round_trips - before.round_trips, 2, "{s:?}");
}

/// The calls that a coalesced check waits on are made on a runtime that
/// shuts down while they are in flight (their tasks dropped with it; the
/// task that would carry the waiting check is spawned on that runtime,
/// which drops it at once): the check, made on another runtime, makes a
/// call of its own at once, answered by Redis once its pause of 1.5 s is
/// over, not at its timeout of 10 s and not by the fail policy; and its client's
/// places in flight are given back (twice over: none is kept by the
/// runtime that went): the next checks go to Redis, counted there.
#[test]
fn a_call_on_a_runtime_shut_down_answers_the_checks_waiting_on_it() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let rt = runtime();
    let limiter = rt.block_on(async {
        let limiter = FixedWindow::builder()
            .limit(10)
            .window(HOUR)
            .redis(server.manager().await, prefix("shutdown"))
            .fail_policy(FailPolicy::FailClosed)
            .timeout(Duration::from_secs(10))
            .no_deny_shortcut()
            .coalesce(true)
            .build()
            .unwrap();
        assert!(limiter.check("warm").await.unwrap().is_allowed());
        limiter
    });
    // Twice: a place of the client's that a shut-down runtime kept would
    // show the second time, and two such would leave none.
    for round in 1..=2 {
        let other = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        // Redis holds its answers for 1.5 s: two calls in flight from the
        // other runtime, and a check of this one's waiting behind them.
        let _: () = redis::cmd("CLIENT")
            .arg(&["PAUSE", "1500", "ALL"][..])
            .query(&mut server.sync())
            .unwrap();
        let leads: Vec<_> = (0..2)
            .map(|_| {
                let limiter = limiter.clone();
                other.spawn(async move { limiter.check("c").await })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        let waiting = {
            let limiter = limiter.clone();
            rt.spawn(async move {
                let started = Instant::now();
                (limiter.check("c").await, started.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(leads.iter().all(|t| !t.is_finished()) && !waiting.is_finished());
        drop(other);
        let (answer, took) = rt.block_on(waiting).unwrap();
        assert!(answer.unwrap().is_allowed(), "round {round}");
        assert!(took < Duration::from_secs(6), "{took:?}");
        let s = limiter.stats();
        assert_eq!((s.fail_closed, s.timeouts, s.coalesced), (0, 0, 0), "{s:?}");
        std::thread::sleep(Duration::from_millis(1_500));
    }
    rt.block_on(async {
        let d = tokio::time::timeout(Duration::from_secs(2), limiter.check("c"))
            .await
            .expect("the client's place was given back")
            .unwrap();
        assert!(d.is_allowed(), "{d:?}");
        for _ in 0..d.remaining() {
            assert!(limiter.check("c").await.unwrap().is_allowed());
        }
        assert!(limiter.check("c").await.unwrap().is_denied());
    });
    let after = limiter.stats();
    assert_eq!((after.fail_closed, after.timeouts), (0, 0), "{after:?}");
}

/// A coalescing fixed window of 5 an hour on `server` (awaiting its
/// answers patiently; the limiter's `timeout` decides), its breaker
/// backing off 5 s, warmed up with a check of another client.
fn coalescing_five(
    server: &Server,
    rt: &tokio::runtime::Runtime,
    name: &str,
    policy: FailPolicy,
    timeout: Duration,
) -> RedisLimiter<FixedWindow> {
    rt.block_on(async {
        let limiter = FixedWindow::builder()
            .limit(5)
            .window(HOUR)
            .redis(server.manager().await, prefix(name))
            .fail_policy(policy)
            .timeout(timeout)
            .backoff(Duration::from_secs(5), Duration::from_secs(5))
            .no_deny_shortcut()
            .coalesce(true)
            .build()
            .unwrap();
        assert!(limiter.check("warm").await.unwrap().is_allowed());
        limiter
    })
}

/// Pauses `server` for `pause_ms`, then checks client `c` twice (two
/// calls in flight) and 50 ms later three times more (waiting for the
/// next call), and aborts the first two at `abort_ms`, so that the three
/// go in one batch call: the three checks' tasks, and when the first two
/// were made.
async fn three_behind_two_aborted(
    server: &Server,
    limiter: &RedisLimiter<FixedWindow>,
    pause_ms: u64,
    abort_ms: u64,
) -> (
    [tokio::task::JoinHandle<Result<tollgate::Decision, tollgate::CheckError>>; 3],
    Instant,
) {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(pause_ms)
        .arg("ALL")
        .query(&mut server.sync())
        .unwrap();
    let check = || {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.check("c").await })
    };
    let started = Instant::now();
    let leads = [check(), check()];
    tokio::time::sleep(Duration::from_millis(50)).await;
    let waiting = [check(), check(), check()];
    tokio::time::sleep_until((started + Duration::from_millis(abort_ms)).into()).await;
    for lead in &leads {
        lead.abort();
    }
    (waiting, started)
}

/// Coalesced checks answered at their timeout, whose batch Redis decides
/// later, are counted once: as timeouts answered by the fail policy, not
/// also as checks that rode another's call (nor, with the `metrics`
/// feature, as Redis's answers). Two calls on a paused server are
/// aborted at 1 s, so the three checks waiting behind them go in one batch
/// call; they time out at 2.05 s, and the pause ends at 2.5 s, before the
/// batch's own timeout at 3 s: Redis decides all five.
#[test]
fn coalesced_checks_answered_at_their_timeout_are_not_counted_again_by_their_batch() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let rt = runtime();
    let limiter = coalescing_five(
        &server,
        &rt,
        "counted-once",
        FailPolicy::FailClosed,
        Duration::from_secs(2),
    );
    let before = limiter.stats();
    rt.block_on(async {
        let (waiting, _) = three_behind_two_aborted(&server, &limiter, 2_500, 1_000).await;
        for task in waiting {
            let err = task.await.unwrap().unwrap_err();
            assert_eq!(err.kind(), CheckErrorKind::Timeout, "{err}");
        }
        // Past the pause: the batch decided.
        let s = batch_tasks_ended(&limiter).await;
        assert_eq!((s.timeouts, s.fail_closed, s.coalesced), (3, 3, 0), "{s:?}");
        // The two leads' calls and the batch's (and any script load),
        // past the warm-up's.
        assert!(s.round_trips - before.round_trips >= 3, "{s:?}");
        // Redis admitted the aborted leads and the batch's three: the
        // window is spent, as another limiter finds.
        let other = FixedWindow::builder()
            .limit(5)
            .window(HOUR)
            .redis(server.manager().await, prefix("counted-once"))
            .patient()
            .no_deny_shortcut()
            .build()
            .unwrap();
        let d = other.check("c").await.unwrap();
        assert_eq!((d.is_allowed(), d.remaining()), (false, 0), "{d:?}");
    });
}

/// The limiter's stats once every batch task it started has ended (the
/// counters equal), polled every 10 ms; a panic after a minute.
async fn batch_tasks_ended(limiter: &RedisLimiter<FixedWindow>) -> tollgate::redis::RedisStats {
    let patience = Instant::now() + Duration::from_secs(60);
    loop {
        let s = limiter.stats();
        if s.batch_tasks == s.batch_tasks_done {
            return s;
        }
        assert!(Instant::now() < patience, "a batch task still runs: {s:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A batch task goes on after the checks it carries are answered at their
/// timeout, and `batch_tasks` counts it started, `batch_tasks_done` ended;
/// once the two are equal, Redis's late answer is kept: under `Local`, the
/// in-process limiter holds the client to what Redis said was left, and a
/// later check it decides sees that. Three checks wait behind two calls on
/// a server paused for 2.8 s; the two are aborted at 1.5 s, so the three go
/// in one batch call; they time out at 2.05 s, each admitted in process (3
/// of the in-process window's 5); the pause ends before the batch's own
/// timeout at 3.5 s, and Redis admits all five (the aborted calls' two and
/// the batch's three), none left. With the server stopped, the next check
/// is decided in process, and refused: held to Redis's 0, not the 2 it had
/// left of its own.
#[test]
fn a_batch_task_counted_done_has_kept_its_late_answer() {
    let Some(mut server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let rt = runtime();
    let limiter = coalescing_five(
        &server,
        &rt,
        "late-kept",
        FailPolicy::Local,
        Duration::from_secs(2),
    );
    let before = limiter.stats();
    rt.block_on(async {
        let (waiting, _) = three_behind_two_aborted(&server, &limiter, 2_800, 1_500).await;
        let mut left = Vec::new();
        for task in waiting {
            let d = task.await.unwrap().unwrap();
            assert!(d.is_allowed(), "{d:?}");
            left.push(d.remaining());
        }
        left.sort_unstable();
        assert_eq!(left, [2, 3, 4], "decided in process");
        let s = batch_tasks_ended(&limiter).await;
        assert_eq!(s.batch_tasks - before.batch_tasks, 1, "{s:?}");
        assert_eq!((s.timeouts, s.fail_local), (3, 3), "{s:?}");
        server.stop();
        let d = limiter.check("c").await.unwrap();
        assert!(d.is_denied(), "held to what Redis said was left: {d:?}");
        assert_eq!(limiter.stats().fail_local, 4);
    });
}

/// A waiting check answered at its timeout is not answered again when
/// the batch that was to carry it fails later: under `Local` the
/// in-process limiter decides it once, so its quota is spent once. Three
/// checks wait behind two calls on a paused server; the calls are dropped
/// (their tasks aborted), so the three go in one batch call, which hangs
/// past the three checks' timeouts and then times out itself.
#[test]
fn a_check_answered_at_its_timeout_is_not_answered_again_by_its_failed_batch() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let limiter = coalescing_five(
        &server,
        &rt,
        "twice",
        FailPolicy::Local,
        Duration::from_millis(500),
    );
    rt.block_on(async {
        // The waiting checks time out at 550 ms; their batch, sent at
        // 250 ms, at 750 ms.
        let (waiting, _) = three_behind_two_aborted(&server, &limiter, 3_000, 250).await;
        let mut left = Vec::new();
        for task in waiting {
            let d = task.await.unwrap().unwrap();
            assert!(d.is_allowed(), "{d:?}");
            left.push(d.remaining());
        }
        left.sort_unstable();
        assert_eq!(left, [2, 3, 4]);
        // Once the batch's task has ended (its call timed out), the three
        // checks' own timeouts and the call's are counted, and the three
        // were decided in process once: answered at their timeout, not
        // again when the batch failed. No timing is assumed.
        let s = batch_tasks_ended(&limiter).await;
        assert_eq!((s.timeouts, s.fail_local), (4, 3), "{s:?}");
        // The breaker is open: the in-process limiter decides, with 2
        // of its 5 left.
        let d = limiter.check("c").await.unwrap();
        assert_eq!((d.is_allowed(), d.remaining()), (true, 1), "{d:?}");
    });
}

// ---------------------------------------------------------------------------
// A foreign value among coalesced checks.

/// The checks of `GOOD` clients and of one client whose key holds a hash
/// (another program's value, of another type), 8 tasks each, all at
/// once on a coalescing limiter of 5 an hour under `policy`: every good
/// client's checks, batched with the bad one's, are decided by Redis,
/// exactly 5 admitted each (remaining 4 … 0 once each), none answered by
/// the fail policy; only the bad client's are, each with the error that
/// names its key (`Corrupt`, under `FailClosed`) or decided in process
/// (`Local`); and nothing backs off. A batch script that stopped at the
/// hash failed every check riding with it: under `Local` those were
/// decided in process while Redis decided the others.
fn a_foreign_value_fails_only_its_client_in_a_batch(policy: FailPolicy) {
    const GOOD: usize = 12;
    const TASKS: usize = 8;
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let rt = runtime();
    let limiter = rt.block_on(async {
        FixedWindow::builder()
            .limit(5)
            .window(HOUR)
            .redis(server.manager().await, prefix(&format!("hash-{policy:?}")))
            .patient()
            .fail_policy(policy)
            .no_deny_shortcut()
            .coalesce(true)
            .build()
            .unwrap()
    });
    let bad = limiter.key("bad");
    let _: () = redis::cmd("HSET")
        .arg(&bad)
        .arg(&["field", "7"][..])
        .query(&mut server.sync())
        .unwrap();
    let clients: Vec<String> = (0..GOOD)
        .map(|c| format!("good-{c}"))
        .chain(["bad".to_owned()])
        .collect();
    let answers = rt.block_on(async {
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(clients.len() * TASKS));
        let tasks: Vec<_> = (0..clients.len() * TASKS)
            .map(|i| {
                let (limiter, start) = (limiter.clone(), start.clone());
                let client = clients[i % clients.len()].clone();
                tokio::spawn(async move {
                    start.wait().await;
                    let answer = limiter.check(client.as_str()).await;
                    (client, answer)
                })
            })
            .collect();
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        answers
    });
    let stats = limiter.stats();
    for client in &clients[..GOOD] {
        let decisions: Vec<_> = answers
            .iter()
            .filter(|(c, _)| c == client)
            .map(|(_, answer)| {
                *answer
                    .as_ref()
                    .unwrap_or_else(|err| panic!("{client}: {err} ({stats:?})"))
            })
            .collect();
        assert_eq!(admitted(&decisions), [0, 1, 2, 3, 4], "{client}: {stats:?}");
    }
    let key = String::from_utf8_lossy(&bad).into_owned();
    for (_, answer) in answers.iter().filter(|(c, _)| c == "bad") {
        match policy {
            FailPolicy::FailClosed => {
                let err = answer.as_ref().unwrap_err();
                assert_eq!(err.kind(), CheckErrorKind::Corrupt, "{err}");
                assert!(err.to_string().contains(&key), "names the key: {err}");
            }
            _ => assert!(answer.is_ok(), "{answer:?}"),
        }
    }
    let by_policy = stats.fail_closed + stats.fail_local + stats.fail_open;
    assert_eq!(by_policy, TASKS as u64, "the bad client's only: {stats:?}");
    assert_eq!(stats.breaker_opened, 0, "{stats:?}");
    assert!(
        stats.coalesced > 0,
        "no check rode another's call: {stats:?}"
    );
    // Redis still holds the hash, untouched.
    let kind: String = redis::cmd("TYPE")
        .arg(&bad)
        .query(&mut server.sync())
        .unwrap();
    assert_eq!(kind, "hash");
}

#[test]
fn a_foreign_value_fails_only_its_client_in_a_batch_closed() {
    a_foreign_value_fails_only_its_client_in_a_batch(FailPolicy::FailClosed);
}

#[test]
fn a_foreign_value_fails_only_its_client_in_a_batch_local() {
    a_foreign_value_fails_only_its_client_in_a_batch(FailPolicy::Local);
}

/// The sliding window log's checks go one call each, coalescing on or
/// not (as `RedisBuilder::coalesce` says): checks made at once by many
/// tasks start no batch, ride no other check's call, and are decided
/// exactly, each a call of its own.
#[test]
fn a_log_s_checks_made_at_once_go_one_call_each() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let limiter = SlidingWindowLog::builder()
            .limit(20)
            .window(HOUR)
            .redis(server.manager().await, prefix("logalone"))
            .patient()
            .coalesce(true)
            .build()
            .unwrap();
        let clients = ["a", "b", "c"];
        // 3 clients × 8 tasks × 4 checks: 32 a client, 20 admitted.
        let decisions = at_once(&limiter, &clients, 8, 4).await;
        for (client, d) in clients.iter().zip(&decisions) {
            assert_eq!(d.len(), 32);
            assert_eq!(admitted(d), (0..20).collect::<Vec<_>>(), "{client}");
        }
        let s = limiter.stats();
        assert_eq!((s.coalesced, s.batch_tasks), (0, 0), "{s:?}");
        // A call each, but for those the deny shortcut answered, and one
        // more for each script loaded again.
        assert_eq!(s.checks, 96, "{s:?}");
        assert_eq!(
            s.round_trips,
            s.checks - s.denied_locally + s.script_reloads,
            "{s:?}"
        );
    });
}
