//! The scripts against the in-process algorithms, decision by decision,
//! for two limiters of different settings sharing each client's key (the
//! replicas of a rolling deploy), on a real `redis-server` and one test
//! clock.
//!
//! A proptest drives the two through any sequence of instants (long idle
//! gaps, window edges), costs up to and beyond either quota, and checks
//! and peeks by either. A reference model keeps the client's state as the
//! in-process word with the settings it was written under, and decides
//! each step with the very `admit`, `convert` and `describe` the
//! in-process limiters run: a state written under the reader's settings
//! as it is; one written under the other's converted to the reader's
//! quota at that instant, and written back converted only with an
//! admission (a reader with a lower limit never lowers what a client
//! spent). Each decision (`allowed`, `limit`, `remaining`, `retry_after`,
//! `replenish_after`, `window`, a pair's figures) and the state the
//! script leaves in Redis must be the model's. The sliding window log,
//! whose entries mean the same under any settings, is compared with the
//! in-process log's own `retry_after` over the entries' expiries.

use core::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::testing::{gap, on_clock, runner, runtime, Server};
use crate::algorithm::{SlidingWindowLog, Transitions};
use crate::builder::Builder;
use crate::cell::{describe, look, Applied};
use crate::decision::Decision;
use crate::redis::script::packed::text_of;
use crate::redis::script::spec::Spec;
use crate::redis::script::state::{round_figures, Stored};
use crate::redis::RedisLimiter;
use crate::{FixedWindow, SlidingWindowCounter, TokenBucket};

/// One step: the instant moves on by `gap` µs, then a request of `cost` by
/// limiter `by` (0 or 1), a check or a peek.
#[derive(Debug, Clone, Copy)]
struct Step {
    gap: u64,
    cost: u64,
    by: usize,
    peek: bool,
}

fn steps(unit: u64, max: u64) -> impl Strategy<Value = Vec<Step>> {
    let step = (
        gap(unit, 100_000_000_000),
        0..=max + 1,
        0..2usize,
        prop::bool::weighted(0.25),
    )
        .prop_map(|(gap, cost, by, peek)| Step {
            gap,
            cost,
            by,
            peek,
        });
    proptest::collection::vec(step, 1..40)
}

/// The client's state in the model: its word and the settings it was
/// written under.
type State = Option<(u128, Spec)>;

/// The model's decision for a word algorithm, and the state it leaves.
fn expect(state: State, reader: &Spec, now: u64, step: &Step) -> (Decision, State) {
    let ns = reader.ns().unwrap();
    let now_ns = now * 1_000;
    let view = match state {
        None => ns.fresh_at(0),
        Some((word, spec)) if spec == *reader => word,
        Some((word, spec)) => spec.ns().unwrap().convert(word, now_ns, &ns),
    };
    let admitted = (step.cost > 0)
        .then(|| ns.admit(view, now_ns, step.cost))
        .flatten();
    let allowed = step.cost == 0 || admitted.is_some();
    let applied = match admitted {
        Some(after) => Applied::Admitted(after),
        None if allowed => Applied::Admitted(view),
        None => Applied::Denied(view),
    };
    // A peek, as in-process: the check's outcome, the state's figures.
    let mut d = if step.peek {
        look(&ns, view, now_ns, step.cost)
    } else {
        describe(&ns, applied, now_ns, step.cost).unwrap()
    };
    round_figures(&mut d);
    let left = match admitted {
        Some(after) if !step.peek => Some((after, *reader)),
        _ => state,
    };
    (d, left)
}

/// The state a word algorithm's key holds, as the model keeps it.
fn read(conn: &mut ::redis::Connection, spec: &Spec, key: &[u8]) -> State {
    let value: Option<Vec<u8>> = ::redis::cmd("GET").arg(key).query(conn).unwrap();
    let stored = Stored {
        now: 0,
        expiry: -1,
        leased: Some(0),
        value: value.map(|v| text_of(&v).expect("a tollgate state")),
    };
    let written = spec.parse_stamp(stored.stamp()?).unwrap();
    Some((stored.word(&written).unwrap()?, written))
}

/// Runs `steps` through the two limiters, asserting that they decide as
/// the model and leave its state.
fn agree<A: crate::redis::RedisAlgorithm>(
    rt: &tokio::runtime::Runtime,
    conn: &mut ::redis::Connection,
    limiters: &[RedisLimiter<A>; 2],
    specs: &[Spec; 2],
    clock: &crate::ManualClock,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let mut state: State = None;
    let mut now = crate::clock::Clock::now_nanos(clock) / 1_000;
    for (i, s) in steps.iter().enumerate() {
        now += s.gap;
        clock.advance(Duration::from_micros(s.gap));
        let (limiter, spec) = (&limiters[s.by], &specs[s.by]);
        if s.cost > spec.capacity() {
            continue; // refused before any script runs
        }
        let (want, left) = expect(state, spec, now, s);
        let got = if s.peek {
            rt.block_on(limiter.peek_n("c", s.cost))
        } else {
            rt.block_on(limiter.check_n("c", s.cost))
        }
        .map_err(|e| TestCaseError::fail(format!("step {i}: {e}")))?;
        prop_assert_eq!(got, want, "step {} ({:?} at {})", i, s, now);
        state = left;
        let found = read(conn, spec, &limiter.key("c"));
        prop_assert_eq!(found, state, "step {} ({:?}): the state left", i, s);
    }
    Ok(())
}

/// Pairs of settings of one family (the unit, and the two limits).
fn run<A: crate::redis::RedisAlgorithm>(
    builder: impl Fn(u64, u64) -> Builder<A>,
    units: &[u64],
    scales: &[u64],
) {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let manager = rt.block_on(server.manager());
    let conn = std::cell::RefCell::new(server.sync());
    let n = std::cell::Cell::new(0u64);
    let mut runner = runner(128);
    let strategy = (
        prop::sample::select(units.to_vec()),
        prop::sample::select(scales.to_vec()),
        1..=6u64,
        1..=6u64,
    )
        .prop_flat_map(|(unit, scale, a, b)| (Just((unit, scale, a, b)), steps(unit, a.max(b))));
    runner
        .run(&strategy, |((unit, scale, a, b), steps)| {
            n.set(n.get() + 1);
            let clock = server.clock();
            let prefix = format!("replicas{}-{}", std::process::id(), n.get());
            let build = |unit, limit| {
                let algorithm = A::from_params(&builder(unit, limit).params).unwrap();
                let spec =
                    crate::redis::quota::algorithm::sealed::Sealed::spec(&algorithm).unwrap();
                (
                    on_clock(
                        builder(unit, limit)
                            .redis(manager.clone(), &prefix)
                            .no_deny_shortcut(),
                        &clock,
                    ),
                    spec,
                )
            };
            let (l0, s0) = build(unit, a);
            let (l1, s1) = build(unit * scale, b);
            agree(
                &rt,
                &mut conn.borrow_mut(),
                &[l0, l1],
                &[s0, s1],
                &clock,
                &steps,
            )
        })
        .unwrap();
}

#[test]
fn the_token_bucket_script_decides_as_the_in_process_bucket() {
    // Capacities `limit`, one token per `unit` µs (the second limiter's
    // interval scaled).
    run(
        |unit, limit| {
            TokenBucket::builder()
                .rate(1, Duration::from_micros(unit))
                .capacity(limit)
        },
        &[1, 3, 1_000, 250_000],
        &[1, 1, 2, 3],
    );
}

#[test]
fn the_fixed_window_script_decides_as_the_in_process_window() {
    run(
        |unit, limit| {
            FixedWindow::builder()
                .limit(limit)
                .window(Duration::from_micros(unit))
        },
        &[1, 7, 1_000, 1_000_000],
        &[1, 1, 2, 3],
    );
}

#[test]
fn the_sliding_window_counter_script_decides_as_the_in_process_counter() {
    run(
        |unit, limit| {
            SlidingWindowCounter::builder()
                .limit(limit)
                .window(Duration::from_micros(unit))
        },
        &[1, 7, 1_000, 1_000_000],
        &[1, 1, 2, 3],
    );
}

#[test]
fn a_pair_script_decides_as_the_in_process_pair() {
    // A bucket of `limit` at one token per `unit` µs, with a fixed window
    // of `limit + 1` per `3 · unit`.
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
        &[1, 1, 2],
    );
    // A counter of `limit` per `unit` with a bucket of `limit` per `unit`.
    run(
        |unit, limit| {
            SlidingWindowCounter::builder()
                .limit(limit)
                .window(Duration::from_micros(unit))
                .and(
                    TokenBucket::builder()
                        .rate(limit, Duration::from_micros(unit * limit))
                        .capacity(limit),
                )
        },
        &[1, 7, 1_000, 1_000_000],
        &[1, 1, 2],
    );
}

/// The log: entries kept whatever the settings, judged by the reader's
/// limit and window.
#[test]
fn the_sliding_log_script_decides_as_the_in_process_log() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let manager = rt.block_on(server.manager());
    let conn = std::cell::RefCell::new(server.sync());
    let n = std::cell::Cell::new(0u64);
    let mut runner = runner(128);
    let strategy = (
        prop::sample::select(vec![1u64, 7, 1_000, 1_000_000]),
        prop::sample::select(vec![1u64, 1, 2]),
        1..=6u64,
        1..=6u64,
    )
        .prop_flat_map(|(unit, scale, a, b)| (Just((unit, scale, a, b)), steps(unit, a.max(b))));
    runner
        .run(&strategy, |((unit, scale, a, b), steps)| {
            n.set(n.get() + 1);
            let clock = server.clock();
            let prefix = format!("replicalog{}-{}", std::process::id(), n.get());
            let settings = [(unit, a), (unit * scale, b)];
            let limiters = settings.map(|(w, limit)| {
                on_clock(
                    crate::SlidingWindowLog::builder()
                        .limit(limit)
                        .window(Duration::from_micros(w))
                        .redis(manager.clone(), &prefix)
                        .no_deny_shortcut(),
                    &clock,
                )
            });
            let mut entries: Vec<u64> = Vec::new();
            let mut now = crate::clock::Clock::now_nanos(&clock) / 1_000;
            for (i, s) in steps.iter().enumerate() {
                now += s.gap;
                clock.advance(Duration::from_micros(s.gap));
                let (window, limit) = settings[s.by];
                if s.cost > limit {
                    continue;
                }
                let log = SlidingWindowLog::new(limit, Duration::from_micros(window)).unwrap();
                // Entries whose expiry has passed are gone (trimmed by
                // peeks too).
                entries.retain(|&t| !log.is_free((t + window) * 1_000, now * 1_000));
                let want = log_expect(&log, &entries, now, s, window, limit);
                let got = if s.peek {
                    rt.block_on(limiters[s.by].peek_n("c", s.cost))
                } else {
                    rt.block_on(limiters[s.by].check_n("c", s.cost))
                }
                .map_err(|e| TestCaseError::fail(format!("step {i}: {e}")))?;
                prop_assert_eq!(got, want, "step {} ({:?} at {})", i, s, now);
                if want.is_allowed() && !s.peek {
                    entries.extend((0..s.cost).map(|_| now));
                }
                let found: Vec<(String, u64)> = ::redis::cmd("ZRANGE")
                    .arg(limiters[s.by].key("c"))
                    .arg(&["0", "-1", "WITHSCORES"][..])
                    .query(&mut *conn.borrow_mut())
                    .unwrap();
                let mut found: Vec<u64> = found.into_iter().map(|(_, t)| t).collect();
                found.sort_unstable();
                let mut want = entries.clone();
                want.sort_unstable();
                prop_assert_eq!(found, want, "step {}: entries", i);
            }
            Ok(())
        })
        .unwrap();
}

/// The in-process log's decision over `entries` (µs instants, all live):
/// a check's, or a peek's (whose figures are the entries' as they stand).
fn log_expect(
    log: &SlidingWindowLog,
    entries: &[u64],
    now: u64,
    step: &Step,
    window: u64,
    limit: u64,
) -> Decision {
    let cost = step.cost;
    let now_ns = now * 1_000;
    let used = entries.len() as u64;
    let allowed = cost == 0 || used + cost <= limit;
    // The in-process log's wait for `n` units over these entries (every
    // slot beyond them free, none if there are more entries than the
    // limit).
    let wait = |entries: &[u64], n: u64| -> u64 {
        let used = entries.len() as u64;
        let mut expiries: Vec<u64> = entries.iter().map(|&t| log.stamp(t * 1_000)).collect();
        expiries.extend((used..limit).map(|_| 0));
        log.retry_after(expiries, now_ns, n + used.saturating_sub(limit))
    };
    let retry_after = if allowed { 0 } else { wait(entries, cost) };
    let mut after = entries.to_vec();
    if allowed && !step.peek {
        after.extend((0..cost).map(|_| now));
    }
    let remaining = limit.saturating_sub(after.len() as u64);
    let replenish_after = if remaining >= limit {
        0
    } else {
        wait(&after, remaining + 1)
    };
    Decision::new(
        allowed,
        limit,
        remaining,
        Duration::from_nanos(retry_after),
        Duration::from_nanos(replenish_after),
        Duration::from_micros(window),
    )
}
