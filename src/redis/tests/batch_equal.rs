//! Coalesced checks against checks of their own, on a real `redis-server`
//! and one test clock.
//!
//! A proptest drives two limiters of the same settings, each on its own
//! keys: one decides each step's requests (of three clients, interleaved)
//! in one call of the batch script, the other checks them one call each,
//! in the same order, at the same instant. Every decision (outcome and
//! figures) must be equal, and so must the state each client is left with
//! and its expiry. A twin of each (same settings, same keys, another
//! writer) checks between the steps, so that the batch script reads other
//! writers' states too, and a limiter of other settings now and then
//! writes a client's state, which the batch must leave undecided and
//! untouched, to be converted by a check of its own. A third of the
//! batches hold only requests of cost 1, so that a client's several
//! requests are answered in the few numbers of a hot client's, and
//! replayed. Now and then a
//! client's value on one side is put back in the text form an earlier
//! release writes (by another writer, its expiry kept), the other side's
//! left as it is: the two must still decide alike and leave the same
//! state, and the next write leaves it in its writer's form (the batch's
//! side writes packed, the other text, as earlier releases do). Then
//! whole limiters: 64 checks of one client made at once through `check` coalesce, and decide as 64
//! checks one after the other; 64 tasks on two limiters (two processes)
//! admit exactly the quota; a quota change while checks wait splits their
//! batch; and a server killed while checks wait for a call, or while a
//! batch is in flight, leaves each check answered by the fail policy, none
//! hanging.

use core::time::Duration;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::testing::{gap, on_clock, runner, runtime, Server, PATIENCE};
use crate::builder::Builder;
use crate::decision::Decision;
use crate::redis::script::packed::text_of;
use crate::redis::table::flight::Waiter;
use crate::redis::table::request::{Mode, Request};
use crate::redis::{FailPolicy, RedisAlgorithm, RedisLimiter};
use crate::{FixedWindow, SlidingWindowCounter, TokenBucket};

/// The clients the steps check.
const CLIENTS: [&str; 3] = ["c", "d", "e"];

/// One step: the instant moves on by `gap` µs; the twins check `twin`
/// (each a client and a cost); a limiter of other settings checks
/// `other`'s client (its state then to convert); `old`'s client's value
/// on one side (the batch's if `true`) is put in the text form of an
/// earlier release; then the checks `batch` go, in order, in one batch.
#[derive(Debug, Clone)]
struct Step {
    gap: u64,
    twin: Vec<(usize, u64)>,
    other: Option<usize>,
    old: Option<(usize, bool)>,
    batch: Vec<(usize, u64)>,
}

fn steps(unit: u64, max: u64) -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(step_of(unit, max), 1..20)
}

fn step_of(unit: u64, max: u64) -> impl Strategy<Value = Step> {
    let checks = move |n| proptest::collection::vec((0..CLIENTS.len(), 0..=max), n);
    let other = proptest::option::weighted(0.1, 0..CLIENTS.len());
    let old = proptest::option::weighted(0.2, (0..CLIENTS.len(), any::<bool>()));
    // A third of the batches every request of cost 1: each client of
    // several requests then is answered in a few numbers and replayed (a
    // hot client's coalesced checks), often past its quota.
    let unit_costs = prop::bool::weighted(0.35);
    (
        gap(unit, 100_000_000_000),
        checks(0..2),
        other,
        old,
        checks(1..12),
        unit_costs,
    )
        .prop_map(|(gap, twin, other, old, mut batch, unit_costs)| {
            if unit_costs {
                batch.iter_mut().for_each(|(_, cost)| *cost = 1);
            }
            Step {
                gap,
                twin,
                other,
                old,
                batch,
            }
        })
}

/// `limiter`'s request of `cost` from `client`, as a check makes it.
fn request<A: RedisAlgorithm>(limiter: &RedisLimiter<A>, client: &str, cost: u64) -> Request {
    let inner = &limiter.inner;
    let client = crate::redis::script::key::client_bytes(client);
    let judged = inner.tiers.judge(&client);
    Request {
        key: inner.layout.key(&client),
        judged,
        client,
        cost,
        beyond: false,
        mode: Mode::Check,
        cache_key: None,
    }
}

/// The state part of the value under `key` (past the settings, the quota
/// and the writer) and its expiry (ms).
fn state(conn: &mut ::redis::Connection, key: &[u8]) -> (Option<String>, i64) {
    let value: Option<Vec<u8>> = ::redis::cmd("GET").arg(key).query(conn).unwrap();
    let at: i64 = ::redis::cmd("PEXPIRETIME").arg(key).query(conn).unwrap();
    (
        value.map(|v| {
            let v = text_of(&v).expect("a tollgate state");
            v.splitn(4, '|').nth(3).unwrap_or("").to_owned()
        }),
        at,
    )
}

/// Puts the value under `key`, if any, in the text form an earlier
/// release writes, as another writer of the same settings and quota
/// wrote it (`0123456789abcdef`), its expiry kept.
fn as_earlier_release(conn: &mut ::redis::Connection, key: &[u8]) {
    let value: Option<Vec<u8>> = ::redis::cmd("GET").arg(key).query(conn).unwrap();
    let Some(value) = value else { return };
    let text = text_of(&value).expect("a tollgate state");
    let mut fields: Vec<&str> = text.split('|').collect();
    let call = fields[2].split_once('.').expect("writer.call").1;
    let writer = format!("0123456789abcdef.{call}");
    fields[2] = &writer;
    let at: i64 = ::redis::cmd("PEXPIRETIME").arg(key).query(conn).unwrap();
    let () = ::redis::cmd("SET")
        .arg(key)
        .arg(fields.join("|"))
        .arg("PXAT")
        .arg(at)
        .query(conn)
        .unwrap();
}

/// Whether the value under `key` is packed (see `script::packed`).
fn packed(conn: &mut ::redis::Connection, key: &[u8]) -> bool {
    let value: Option<Vec<u8>> = ::redis::cmd("GET").arg(key).query(conn).unwrap();
    value.is_some_and(|v| v.contains(&b'#'))
}

/// The two triples of limiters: `[batched, its twin, of other
/// settings]`, `[one by one, its twin, of other settings]`.
fn agree<A: RedisAlgorithm>(
    rt: &tokio::runtime::Runtime,
    conn: &mut ::redis::Connection,
    batched: &[RedisLimiter<A>; 3],
    single: &[RedisLimiter<A>; 3],
    clock: &crate::ManualClock,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    // The clients whose state a limiter of other settings has written.
    let mut foreign = [false; CLIENTS.len()];
    for (i, s) in steps.iter().enumerate() {
        clock.advance(Duration::from_micros(s.gap));
        for &(c, cost) in &s.twin {
            let a = rt.block_on(batched[1].check_n(CLIENTS[c], cost));
            let b = rt.block_on(single[1].check_n(CLIENTS[c], cost));
            prop_assert_eq!(a.ok(), b.ok(), "step {}: the twins", i);
        }
        if let Some(c) = s.other {
            foreign[c] = true;
            let a = rt.block_on(batched[2].check(CLIENTS[c]));
            let b = rt.block_on(single[2].check(CLIENTS[c]));
            prop_assert_eq!(a.ok(), b.ok(), "step {}: other settings", i);
        }
        if let Some((c, batch_side)) = s.old {
            let side = if batch_side { &batched[0] } else { &single[0] };
            as_earlier_release(conn, &side.key(CLIENTS[c]));
        }
        let requests: Vec<Request> = s
            .batch
            .iter()
            .map(|&(c, cost)| request(&batched[0], CLIENTS[c], cost))
            .collect();
        let refs: Vec<&Request> = requests.iter().collect();
        let answers = rt
            .block_on(batched[0].inner.batch_trip(&refs))
            .map_err(|e| TestCaseError::fail(format!("step {i}: the batch failed: {e:?}")))?;
        // A client left undecided (its state to convert) is decided
        // alone, in order, after the batch, as the coalescing task does.
        let mut got = Vec::with_capacity(answers.len());
        for (&(c, cost), answer) in s.batch.iter().zip(answers) {
            got.push(match answer {
                Some(answer) => answer.decision,
                None => {
                    prop_assert!(foreign[c], "step {}: {} undecided", i, CLIENTS[c]);
                    rt.block_on(batched[0].check_n(CLIENTS[c], cost)).unwrap()
                }
            });
        }
        let want: Vec<Decision> = s
            .batch
            .iter()
            .map(|&(c, cost)| rt.block_on(single[0].check_n(CLIENTS[c], cost)).unwrap())
            .collect();
        prop_assert_eq!(&got, &want, "step {} ({:?})", i, s);
        for (c, client) in CLIENTS.iter().enumerate() {
            prop_assert_eq!(
                state(conn, &batched[0].key(client)),
                state(conn, &single[0].key(client)),
                "step {}: the state {} left and its expiry",
                i,
                client
            );
            // A script's write leaves the state in the form its limiter
            // writes (packed on the batch's side, text on the other),
            // whatever form it read (the slow path, converting another
            // settings' state, writes the text form).
            if let Some((o, batch_side)) = s.old {
                let wrote = s
                    .batch
                    .iter()
                    .zip(&want)
                    .any(|(&(b, cost), d)| b == c && cost > 0 && d.is_allowed());
                if o == c && wrote && !foreign[c] {
                    let side = if batch_side { &batched[0] } else { &single[0] };
                    prop_assert_eq!(
                        packed(conn, &side.key(client)),
                        batch_side,
                        "step {}: {} rewritten in its writer's form",
                        i,
                        client
                    );
                }
            }
        }
    }
    Ok(())
}

fn run<A: RedisAlgorithm>(builder: impl Fn(u64, u64) -> Builder<A>, units: &[u64]) {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let manager = rt.block_on(server.manager());
    let conn = std::cell::RefCell::new(server.sync());
    let n = std::cell::Cell::new(0u64);
    let mut runner = runner(96);
    let strategy = (prop::sample::select(units.to_vec()), 1..=6u64)
        .prop_flat_map(|(unit, limit)| (Just((unit, limit)), steps(unit, limit)));
    runner
        .run(&strategy, |((unit, limit), steps)| {
            n.set(n.get() + 1);
            let clock = server.clock();
            let build = |side: &str| {
                let prefix = format!("batch{}-{}-{side}", std::process::id(), n.get());
                [(limit, true), (limit, false), (limit + 1, false)].map(|(limit, coalesce)| {
                    on_clock(
                        builder(unit, limit)
                            .redis(manager.clone(), &prefix)
                            .no_deny_shortcut()
                            // The batch's side writes packed, the other
                            // text, as earlier releases do: each reads
                            // both, and the two decide alike.
                            .packed_state(side == "b")
                            .coalesce(coalesce),
                        &clock,
                    )
                })
            };
            let batched = build("b");
            let single = build("s");
            agree(
                &rt,
                &mut conn.borrow_mut(),
                &batched,
                &single,
                &clock,
                &steps,
            )
        })
        .unwrap();
}

#[test]
fn a_batch_of_bucket_checks_decides_as_checks_one_by_one() {
    run(
        |unit, limit| {
            TokenBucket::builder()
                .rate(1, Duration::from_micros(unit))
                .capacity(limit)
        },
        &[1, 3, 1_000, 250_000],
    );
}

#[test]
fn a_batch_of_window_checks_decides_as_checks_one_by_one() {
    run(
        |unit, limit| {
            FixedWindow::builder()
                .limit(limit)
                .window(Duration::from_micros(unit))
        },
        &[1, 7, 1_000, 1_000_000],
    );
    run(
        |unit, limit| {
            SlidingWindowCounter::builder()
                .limit(limit)
                .window(Duration::from_micros(unit))
        },
        &[1, 7, 1_000, 1_000_000],
    );
}

#[test]
fn a_batch_of_pair_checks_decides_as_checks_one_by_one() {
    run(
        |unit, limit| {
            TokenBucket::builder()
                .rate(1, Duration::from_micros(unit))
                .capacity(limit)
                .and(
                    FixedWindow::builder()
                        .limit(limit + 1)
                        .window(Duration::from_micros(3 * unit)),
                )
        },
        &[1, 7, 1_000, 1_000_000],
    );
}

/// 64 checks of one client made at once on a stopped clock, through the
/// limiter: the first two go alone, the 62 others in a batch, and the
/// decisions are those of 64 checks one after the other, in the order
/// they were first polled.
#[test]
fn checks_made_at_once_coalesce_and_decide_as_one_after_the_other() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let manager = rt.block_on(server.manager());
    let clock = server.clock();
    let build = |prefix: &str, coalesce: bool| {
        on_clock(
            TokenBucket::builder()
                .rate(1, Duration::from_secs(1))
                .capacity(40)
                .redis(manager.clone(), prefix)
                .coalesce(coalesce),
            &clock,
        )
    };
    let batched = build("at-once", true);
    let single = build("one-by-one", false);
    let costs: Vec<u64> = (0..64).map(|i| [1, 0, 2, 1][i % 4]).collect();
    let got: Vec<Decision> = rt.block_on(async {
        let checks = costs.iter().map(|&c| batched.check_n("c", c));
        futures_join_all(checks.collect())
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect()
    });
    let want: Vec<Decision> = costs
        .iter()
        .map(|&c| rt.block_on(single.check_n("c", c)).unwrap())
        .collect();
    assert_eq!(got, want);
    let stats = batched.stats();
    // The first two checks go at once, each alone (two calls of a client
    // may be in flight); the 62 that came while they were in flight go in
    // one batch (a batch carries up to 256). Each of the three calls is
    // two round trips on this fresh server: the script is not loaded yet
    // (NOSCRIPT), so it goes again with its source.
    assert_eq!(stats.coalesced, 61, "{stats:?}");
    assert_eq!(stats.round_trips, 6, "{stats:?}");
    assert_eq!(single.stats().coalesced, 0);
}

/// Polls every future in order each time, like `join_all`, on one task.
async fn futures_join_all<F: core::future::Future + Unpin>(mut fs: Vec<F>) -> Vec<F::Output> {
    let mut out: Vec<Option<F::Output>> = fs.iter().map(|_| None).collect();
    core::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in fs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match core::pin::Pin::new(f).poll(cx) {
                    core::task::Poll::Ready(v) => *o = Some(v),
                    core::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            core::task::Poll::Pending
        } else {
            core::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(Option::unwrap).collect()
}

/// 64 tasks of one client on a stopped clock, half on each of two
/// limiters of one quota (two processes: each its own connection and
/// in-flight table), both coalescing: exactly the quota is admitted, each
/// admission reporting a different `remaining`, from 999 down to 0.
#[test]
fn sixty_four_tasks_on_two_limiters_admit_exactly_the_quota() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let clock = server.clock();
    let limiters: Vec<RedisLimiter<TokenBucket>> = (0..2)
        .map(|_| {
            let manager = rt.block_on(server.manager());
            on_clock(
                TokenBucket::builder()
                    .rate(1, Duration::from_secs(3_600))
                    .capacity(1_000)
                    .redis(manager, "hot")
                    .no_deny_shortcut()
                    .coalesce(true),
                &clock,
            )
        })
        .collect();
    let mut remaining: Vec<u64> = rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|t| {
                let limiter = limiters[t % 2].clone();
                tokio::spawn(async move {
                    let mut admitted = Vec::new();
                    for _ in 0..40 {
                        let d = limiter.check("c").await.unwrap();
                        if d.is_allowed() {
                            admitted.push(d.remaining());
                        }
                    }
                    admitted
                })
            })
            .collect();
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.unwrap());
        }
        all
    });
    remaining.sort_unstable();
    assert_eq!(remaining, (0..1_000).collect::<Vec<u64>>());
    let stats: Vec<_> = limiters.iter().map(RedisLimiter::stats).collect();
    for s in &stats {
        assert_eq!(s.checks, 32 * 40, "{s:?}");
        assert_eq!(s.errors + s.timeouts + s.fail_closed, 0, "{s:?}");
    }
    assert!(
        stats.iter().map(|s| s.coalesced).sum::<u64>() > 0,
        "32 tasks hammering one client on each limiter coalesce: {stats:?}"
    );
}

/// A limiter of 10 tokens (one an hour) that answers faults from its
/// in-process limiter, and gives up on Redis after 2 s.
fn local_ten(server: &Server, rt: &tokio::runtime::Runtime) -> RedisLimiter<TokenBucket> {
    let manager = rt.block_on(server.manager());
    TokenBucket::builder()
        .rate(1, Duration::from_secs(3_600))
        .capacity(10)
        .redis(manager, "fault")
        .no_deny_shortcut()
        .coalesce(true)
        .fail_policy(FailPolicy::Local)
        .timeout(Duration::from_secs(2))
        .build_on_test_clock(server.clock())
        .unwrap()
}

/// The server dies while the first two checks' calls are in flight and
/// 62 others wait for the next: all 64 are answered by the fail policy (the
/// in-process limiter of 10: exactly 10 admitted), within the timeout.
#[test]
fn a_server_killed_while_checks_wait_answers_each_by_the_fail_policy() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let limiter = local_ten(&server, &rt);
    server.pause(60_000);
    let outcomes: Vec<bool> = rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move { limiter.check("c").await.unwrap().is_allowed() })
            })
            .collect();
        // All 64 run: the first two send their calls (held by the
        // pause), the others wait for the next.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let stats = limiter.stats();
        assert_eq!((stats.checks, stats.round_trips), (64, 2), "{stats:?}");
        server.stop();
        let all = async {
            let mut all = Vec::new();
            for task in tasks {
                all.push(task.await.unwrap());
            }
            all
        };
        tokio::time::timeout(Duration::from_secs(20), all)
            .await
            .expect("no check hangs")
    });
    assert_eq!(outcomes.iter().filter(|&&a| a).count(), 10);
    let stats = limiter.stats();
    assert_eq!(stats.fail_local, 64, "{stats:?}");
    assert_eq!(stats.coalesced, 0, "{stats:?}");
}

/// The server dies while a batch of 63 checks is in flight, of three
/// clients interleaved: each of the 63 is answered by the fail policy
/// (exactly 10 of each client admitted by the in-process limiter, its
/// first ten), the batch's one call counted as one error.
#[test]
fn a_server_killed_mid_batch_answers_each_check_by_the_fail_policy() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let limiter = local_ten(&server, &rt);
    server.pause(60_000);
    let outcomes: Vec<bool> = rt.block_on(async {
        let mut answers = Vec::new();
        let waiters: Vec<Waiter> = (0..63)
            .map(|i| {
                let (reply, answer) = tokio::sync::oneshot::channel();
                answers.push(answer);
                Waiter {
                    request: Arc::new(request(&limiter, CLIENTS[i % 3], 1)),
                    reply,
                }
            })
            .collect();
        let inner = Arc::clone(&limiter.inner);
        let batch = tokio::spawn(async move { inner.batches(waiters).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let stats = limiter.stats();
        assert_eq!(stats.round_trips, 1, "the batch's call is in flight");
        server.stop();
        let all = async {
            let mut all = Vec::new();
            for answer in answers {
                all.push(answer.await.unwrap().unwrap().is_allowed());
            }
            batch.await.unwrap();
            all
        };
        tokio::time::timeout(Duration::from_secs(20), all)
            .await
            .expect("no check hangs")
    });
    assert_eq!(outcomes.len(), 63);
    for c in 0..3 {
        let mine: Vec<bool> = outcomes.iter().copied().skip(c).step_by(3).collect();
        assert_eq!(mine.iter().filter(|&&a| a).count(), 10, "{c}: {mine:?}");
        assert!(mine[..10].iter().all(|&a| a), "in order: {mine:?}");
    }
    let stats = limiter.stats();
    assert_eq!(stats.fail_local, 63, "{stats:?}");
    assert_eq!(stats.errors + stats.timeouts, 1, "{stats:?}");
}

/// Checks made before and after a quota change wait together: the batch
/// splits at the change (a batch is of one quota), the checks made after
/// it find a state to convert and go one by one, and every decision is
/// that of the same checks, and the change, one after the other.
#[test]
fn a_quota_changed_while_checks_wait_splits_their_batch() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let manager = rt.block_on(server.manager());
    let clock = server.clock();
    let quota = |capacity| {
        TokenBucket::builder()
            .rate(1, Duration::from_secs(3_600))
            .capacity(capacity)
    };
    let build = |prefix: &str, coalesce: bool| {
        on_clock(
            quota(20)
                .redis(manager.clone(), prefix)
                .no_deny_shortcut()
                .coalesce(coalesce),
            &clock,
        )
    };
    let batched = build("split-b", true);
    let single = build("split-s", false);
    // Each has heard from Redis: until its first answer a limiter dates a
    // quota change by the system's clock, two days behind this test clock.
    for limiter in [&batched, &single] {
        assert!(rt.block_on(limiter.check("warm-up")).unwrap().is_allowed());
    }
    let got: Vec<Decision> = rt.block_on(async {
        let mut checks: Vec<_> = (0..10).map(|_| batched.check("c")).collect();
        // Each polled once: the first two go, the eight others wait.
        core::future::poll_fn(|cx| {
            for check in &mut checks {
                assert!(core::future::Future::poll(core::pin::Pin::new(check), cx).is_pending());
            }
            core::task::Poll::Ready(())
        })
        .await;
        batched.set_quota(0, quota(12)).unwrap();
        checks.extend((0..10).map(|_| batched.check("c")));
        futures_join_all(checks)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect()
    });
    let want: Vec<Decision> = rt.block_on(async {
        let mut all = Vec::new();
        for _ in 0..10 {
            all.push(single.check("c").await.unwrap());
        }
        single.set_quota(0, quota(12)).unwrap();
        for _ in 0..10 {
            all.push(single.check("c").await.unwrap());
        }
        all
    });
    assert_eq!(got, want);
    // 10 of 20 spent; the 10 left are kept under the bucket of 12 (the
    // same rate: empty at the same instant), and spent.
    assert_eq!(got.iter().filter(|d| d.is_allowed()).count(), 20, "{got:?}");
    // The eight of the old quota in one call; the ten of the new one by
    // one (each converts the state).
    assert_eq!(batched.stats().coalesced, 7, "{:?}", batched.stats());
}

/// A coalescing bucket of 3 (one an hour) on `server`, and a tier 1 of 7
/// refilling `pro_rate` an hour, the tier of `pro-` clients.
fn two_tiers(
    server: &Server,
    rt: &tokio::runtime::Runtime,
    name: &str,
    pro_rate: u64,
) -> crate::redis::RedisLimiter<TokenBucket> {
    let hour = Duration::from_secs(3_600);
    let limiter = TokenBucket::builder()
        .rate(1, hour)
        .capacity(3)
        .redis(rt.block_on(server.manager()), name)
        .no_deny_shortcut()
        .coalesce(true)
        .tier_by(|client: &[u8]| u16::from(client.starts_with(b"pro-")))
        .timeout(PATIENCE)
        .build_on_test_clock(server.clock())
        .unwrap();
    let pro = TokenBucket::builder().rate(pro_rate, hour).capacity(7);
    limiter.set_quota(1, pro).unwrap();
    limiter
}

/// Clients of two tiers, their checks made at once and carried in shared
/// batches: each client admitted exactly its own tier's quota (3, or 7 for
/// `pro-` clients), each batch holding both tiers' settings.
#[test]
fn clients_of_two_tiers_in_one_batch_each_get_their_tier() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let limiter = two_tiers(&server, &rt, "tiers", 1);
    let clients = ["a", "pro-a", "b", "pro-b"];
    let outcomes = rt.block_on(async {
        let checks: Vec<_> = (0..64)
            .map(|i| Box::pin(limiter.check(clients[i % 4])))
            .collect();
        futures_join_all(checks).await
    });
    for (c, client) in clients.iter().enumerate() {
        let admitted = outcomes
            .iter()
            .skip(c)
            .step_by(4)
            .filter(|d| d.as_ref().unwrap().is_allowed())
            .count();
        let quota = if client.starts_with("pro-") { 7 } else { 3 };
        assert_eq!(admitted, quota, "{client}");
    }
    let stats = limiter.stats();
    assert!(stats.coalesced > 0, "{stats:?}");
    assert!(stats.round_trips < 64, "{stats:?}");
}

/// Clients of two tiers, each checked once, at once: the checks behind
/// the first two calls go in one batch, each client one request of cost 1
/// but under two quotas, so the batch sends each client's quota (only a
/// batch under one quota leaves them out). Each client is answered by its
/// own tier's bucket: 2 left of 3, or 6 of 7 for `pro-` clients (whose
/// bucket refills twice as fast, so that a word written under the other
/// quota reads as 5 left).
#[test]
fn a_batch_of_single_checks_under_two_tiers_names_each_client_s_quota() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let limiter = two_tiers(&server, &rt, "tiers-single", 2);
    let clients = ["a", "pro-a", "b", "pro-b", "c", "pro-c", "d", "pro-d"];
    let outcomes = rt.block_on(async {
        let checks: Vec<_> = clients.iter().map(|c| Box::pin(limiter.check(c))).collect();
        futures_join_all(checks).await
    });
    for (client, d) in clients.iter().zip(outcomes) {
        let d = d.unwrap();
        let left = if client.starts_with("pro-") { 6 } else { 2 };
        assert_eq!((d.is_allowed(), d.remaining()), (true, left), "{client}");
    }
    let stats = limiter.stats();
    assert!(stats.coalesced > 0, "{stats:?}");
}
