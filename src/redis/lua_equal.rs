//! The Lua scripts against the in-process algorithms, decision by decision,
//! on a real `redis-server` (started on a free loopback port; without the
//! binary the test says why and passes, unless `CI=true`).
//!
//! Each script runs through its test wrapper ([`Spec::source_at`]), the
//! same body judging at an instant passed as an argument, so that a
//! proptest drives it through any sequence of instants: long idle gaps,
//! window edges, costs up to and beyond a quota, and quotas that change
//! between steps (replicas of different limits sharing a key). Before each
//! step the test reads the state the script will read; the in-process
//! algorithm (the very `admit` and `describe` the in-process limiters run)
//! decides on it at the same instant, after the same conversion to the
//! reader's quota; and the two must agree on the decision (`allowed`,
//! `remaining`, `retry_after`, `replenish_after`) and on the state left.
//! The sliding window log, whose in-process cell is a ring of slots,
//! is compared with the in-process log's own `retry_after` over the
//! entries' expiries.

use core::time::Duration;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::script::{fixed_word, round_up_to_us, Spec};
use crate::algorithm::{
    join, FixedWindow, Params, SlidingWindowCounter, SlidingWindowLog, TokenBucket, Transitions,
    WordAlgorithm,
};
use crate::cell::{describe, Applied};
use crate::decision::Decision;

/// A `redis-server` of this test's own.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start() -> Option<Self> {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "redis-server is not installed, and CI=true requires the Redis tests to run"
            );
            eprintln!("SKIPPED: no redis-server on PATH");
            return None;
        }
        for _ in 0..10 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts");
            let url = format!("redis://127.0.0.1:{port}/");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if child.try_wait().ok().flatten().is_some() {
                    break; // the port was taken: try another
                }
                let client = ::redis::Client::open(url.as_str()).unwrap();
                if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) {
                    let info: String = ::redis::cmd("INFO").arg("server").query(&mut c).unwrap();
                    let ours = format!("process_id:{}", child.id());
                    if info.lines().any(|l| l == ours) {
                        return Some(Self { child, url });
                    }
                }
                assert!(Instant::now() < deadline, "redis-server did not start");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("no redis-server would start on a free loopback port");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One step: the instant moves on by `gap` µs, then a request of `cost`
/// under quota `quota` (an index into the case's quotas).
#[derive(Debug, Clone, Copy)]
struct Step {
    gap: u64,
    cost: u64,
    quota: usize,
}

/// Gaps that reach window edges and long idle spells as well as the
/// instants between.
fn gap(window: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(0u64),
        4 => 1..=window,
        2 => Just(window),
        1 => Just(window - 1),
        1 => Just(window + 1),
        1 => (2..=40u64).prop_map(move |n| n * window),
        1 => 1_000_000_000u64..=100_000_000_000,
    ]
}

/// Costs from 0 to two above the largest limit (those above the reader's
/// limit are refused before any script runs, and skipped here).
fn steps(window: u64, max_limit: u64, quotas: usize) -> impl Strategy<Value = Vec<Step>> {
    let step = (gap(window), 0..=max_limit + 2, 0..quotas).prop_map(|(gap, cost, quota)| Step {
        gap,
        cost,
        quota,
    });
    proptest::collection::vec(step, 1..40)
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(128)
}

fn params(limit: u64, window_us: u64) -> Params {
    Params {
        limit: Some(limit),
        window: Some(Duration::from_micros(window_us)),
        ..Params::default()
    }
}

/// What an algorithm's key holds, read without touching it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Raw {
    Tat(Option<u64>),
    Counts(Vec<Option<u64>>),
    Log(Vec<u64>),
    /// A pair's two keys.
    Pair(Box<Raw>, Box<Raw>),
    /// A pair's two states, as the in-process words (expected only).
    Words(u64, u64),
}

fn read(conn: &mut ::redis::Connection, spec: &Spec, key: &str) -> Raw {
    match spec {
        Spec::Pair { .. } => Raw::Pair(
            Box::new(read(conn, &spec.half(0).unwrap(), &format!("{key}.1"))),
            Box::new(read(conn, &spec.half(1).unwrap(), &format!("{key}.2"))),
        ),
        Spec::Bucket { .. } => Raw::Tat(::redis::cmd("GET").arg(key).query(conn).unwrap()),
        Spec::Fixed { .. } => Raw::Counts(
            ::redis::cmd("HMGET")
                .arg(key)
                .arg(&["k", "c"][..])
                .query(conn)
                .unwrap(),
        ),
        Spec::Sliding { .. } => Raw::Counts(
            ::redis::cmd("HMGET")
                .arg(key)
                .arg(&["k", "c", "p"][..])
                .query(conn)
                .unwrap(),
        ),
        Spec::Log { .. } => {
            let pairs: Vec<(String, u64)> = ::redis::cmd("ZRANGE")
                .arg(key)
                .arg(&["0", "-1", "WITHSCORES"][..])
                .query(conn)
                .unwrap();
            Raw::Log(pairs.into_iter().map(|(_, score)| score).collect())
        }
    }
}

/// The in-process algorithm's decision on `raw` at `now` (µs), and the
/// state it leaves, as the script should store it (`None`: unchanged).
fn expect(spec: &Spec, raw: &Raw, now_us: u64, cost: u64) -> (Decision, Option<Raw>) {
    let now = now_us * 1_000;
    let round = |mut d: Decision| {
        d.map_waits(round_up_to_us);
        d
    };
    fn step<A: WordAlgorithm>(ns: &A, word: u64, now: u64, cost: u64) -> Applied {
        if cost == 0 {
            return Applied::Admitted(word);
        }
        ns.admit(word, now, cost)
            .map_or(Applied::Denied(word), Applied::Admitted)
    }
    match (spec, raw) {
        (
            Spec::Bucket {
                ns,
                interval_us,
                capacity,
            },
            Raw::Tat(tat),
        ) => {
            // A TAT further ahead than a full bucket: the bucket is empty.
            let tat = tat.unwrap_or(0).min(now_us + capacity * interval_us);
            let applied = step(ns, tat * 1_000, now, cost);
            let d = round(describe(ns, applied, now, cost).unwrap());
            let left = match applied {
                Applied::Admitted(new) if cost > 0 => Some(Raw::Tat(Some(new / 1_000))),
                _ => None,
            };
            (d, left)
        }
        (Spec::Fixed { ns, limit, .. }, Raw::Counts(v)) => {
            // Counts above the reader's limit count as its limit.
            let word = match (v[0], v[1]) {
                (Some(k), Some(c)) => fixed_word(ns, k, c.min(*limit)).unwrap(),
                _ => 0,
            };
            let applied = step(ns, word, now, cost);
            let d = round(describe(ns, applied, now, cost).unwrap());
            let left = match applied {
                Applied::Admitted(new) if cost > 0 => {
                    let k = now_us / spec.args()[0];
                    let c = limit - d.remaining;
                    assert_eq!(fixed_word(ns, k, c), Some(new));
                    Some(Raw::Counts(vec![Some(k), Some(c)]))
                }
                _ => None,
            };
            (d, left)
        }
        (Spec::Sliding { ns, limit, .. }, Raw::Counts(v)) => {
            let word = match (v[0], v[1], v[2]) {
                (Some(k), Some(c), Some(p)) => ns.word(k, c.min(*limit), p.min(*limit)).unwrap(),
                _ => 0,
            };
            let applied = step(ns, word, now, cost);
            let d = round(describe(ns, applied, now, cost).unwrap());
            let left = match applied {
                // Compared as words: see `same_state`.
                Applied::Admitted(new) if cost > 0 => Some(Raw::Counts(vec![Some(new)])),
                _ => None,
            };
            (d, left)
        }
        (Spec::Log { window_us, limit }, Raw::Log(scores)) => {
            let log = SlidingWindowLog::new(*limit, Duration::from_micros(*window_us)).unwrap();
            // Entries whose expiry has passed are gone.
            let mut live: Vec<u64> = scores
                .iter()
                .copied()
                .filter(|&t| !log.is_free((t + window_us) * 1_000, now))
                .collect();
            let used = live.len() as u64;
            let allowed = cost == 0 || used + cost <= *limit;
            // The in-process log's wait for `n` units over these entries
            // (every slot beyond them free, none if there are more entries
            // than the limit).
            let wait = |entries: &[u64], n: u64| -> u64 {
                let used = entries.len() as u64;
                let mut expiries: Vec<u64> =
                    entries.iter().map(|&t| log.stamp(t * 1_000)).collect();
                expiries.extend((used..*limit).map(|_| 0));
                log.retry_after(expiries, now, n + used.saturating_sub(*limit))
            };
            let retry_after = if allowed { 0 } else { wait(&live, cost) };
            if allowed {
                live.extend((0..cost).map(|_| now_us));
            }
            let used = live.len() as u64;
            let remaining = limit.saturating_sub(used);
            let replenish_after = if remaining >= *limit {
                0
            } else {
                wait(&live, remaining + 1)
            };
            let d = Decision::new(
                allowed,
                *limit,
                remaining,
                Duration::from_nanos(retry_after),
                Duration::from_nanos(replenish_after),
                Duration::from_micros(*window_us),
            );
            // The script trims expired entries whatever it decides.
            live.sort_unstable();
            (d, Some(Raw::Log(live)))
        }
        (Spec::Pair { ns, .. }, Raw::Pair(r1, r2)) => {
            let (h1, h2) = (spec.half(0).unwrap(), spec.half(1).unwrap());
            let word = join(converted(&h1, r1, now_us), converted(&h2, r2, now_us));
            let applied = if cost == 0 {
                Applied::Admitted(word)
            } else {
                Transitions::admit(ns, word, now, cost)
                    .map_or(Applied::Denied(word), Applied::Admitted)
            };
            let d = round(describe(ns, applied, now, cost).unwrap());
            let left = match applied {
                // The pair's word: the first limit's low half, the second's high.
                Applied::Admitted(new) if cost > 0 => {
                    Some(Raw::Words(new as u64, (new >> 64) as u64))
                }
                _ => None,
            };
            (d, left)
        }
        _ => unreachable!("a state of another algorithm"),
    }
}

/// A single word algorithm's state as its in-process word, converted to
/// the reader's quota as the script converts it.
fn converted(spec: &Spec, raw: &Raw, now_us: u64) -> u64 {
    match (spec, raw) {
        (
            Spec::Bucket {
                interval_us,
                capacity,
                ..
            },
            Raw::Tat(tat),
        ) => tat.unwrap_or(0).min(now_us + capacity * interval_us) * 1_000,
        (Spec::Fixed { ns, limit, .. }, Raw::Counts(v)) => match (v[0], v[1]) {
            (Some(k), Some(c)) => fixed_word(ns, k, c.min(*limit)).unwrap(),
            _ => 0,
        },
        (Spec::Sliding { ns, limit, .. }, Raw::Counts(v)) => match (v[0], v[1], v[2]) {
            (Some(k), Some(c), Some(p)) => ns.word(k, c.min(*limit), p.min(*limit)).unwrap(),
            _ => 0,
        },
        _ => unreachable!("not a word algorithm's state"),
    }
}

/// A single word algorithm's stored state as its in-process word, as it
/// is (`None` if absent or out of range).
fn stored(spec: &Spec, raw: &Raw) -> Option<u64> {
    match (spec, raw) {
        (Spec::Bucket { .. }, Raw::Tat(tat)) => tat.map(|t| t * 1_000),
        (Spec::Fixed { ns, .. }, Raw::Counts(v)) => fixed_word(ns, v[0]?, v[1]?),
        (Spec::Sliding { ns, .. }, Raw::Counts(v)) => ns.word(v[0]?, v[1]?, v[2]?),
        _ => None,
    }
}

/// Whether the state the script left is the one expected.
fn same_state(spec: &Spec, expected: &Raw, found: &Raw) -> bool {
    match (spec, expected, found) {
        (Spec::Sliding { ns, .. }, Raw::Counts(want), Raw::Counts(v)) if want.len() == 1 => {
            let word = match (v[0], v[1], v[2]) {
                (Some(k), Some(c), Some(p)) => ns.word(k, c, p),
                _ => None,
            };
            word == want[0]
        }
        (Spec::Pair { .. }, Raw::Words(w1, w2), Raw::Pair(f1, f2)) => {
            stored(&spec.half(0).unwrap(), f1) == Some(*w1)
                && stored(&spec.half(1).unwrap(), f2) == Some(*w2)
        }
        (Spec::Log { .. }, Raw::Log(want), Raw::Log(found)) => {
            let mut found = found.clone();
            found.sort_unstable();
            *want == found
        }
        _ => expected == found,
    }
}

/// Runs `steps` through the script and the in-process algorithm, from
/// instant `start` (µs) on a fresh key, asserting that they agree.
fn agree(
    conn: &mut ::redis::Connection,
    quotas: &[Spec],
    key: &str,
    start: u64,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let mut now = start;
    for (i, s) in steps.iter().enumerate() {
        now += s.gap;
        let spec = &quotas[s.quota];
        if s.cost > spec.capacity() {
            continue; // refused before any script runs
        }
        let before = read(conn, spec, key);
        let (want, left) = expect(spec, &before, now, s.cost);
        let call = |source: String| {
            let mut cmd = ::redis::cmd("EVAL");
            cmd.arg(source);
            spec.push_call(&mut cmd, key.as_bytes(), s.cost);
            cmd.arg(now);
            cmd
        };
        // A peek first: the same decision, and nothing recorded (but the
        // log's expired entries, trimmed).
        let reply: Vec<i64> = call(spec.peek_source_at())
            .query(conn)
            .map_err(|e| TestCaseError::fail(format!("step {i}: {e}")))?;
        let peeked = spec
            .decode(&reply, s.cost)
            .map_err(|e| TestCaseError::fail(format!("step {i}: {e} in {reply:?}")))?;
        prop_assert_eq!(peeked, want, "peek at step {} ({:?} at {})", i, s, now);
        // What a limiter's peek reports: the check's outcome, with the
        // figures of the state as it stands (the in-process peek's).
        let looked = spec
            .decode_peek(&reply, s.cost)
            .map_err(|e| TestCaseError::fail(format!("step {i}: {e} in {reply:?}")))?;
        let mut as_it_stands = expect(spec, &before, now, 0).0;
        as_it_stands.allowed = want.allowed;
        as_it_stands.retry_after = want.retry_after;
        prop_assert_eq!(
            looked,
            as_it_stands,
            "peek's figures at step {} ({:?} at {})",
            i,
            s,
            now
        );
        let unchanged = match (&before, &left) {
            (Raw::Log(_), _) => expect(spec, &before, now, 0).1.unwrap(),
            _ => before.clone(),
        };
        let after = read(conn, spec, key);
        prop_assert!(
            same_state(spec, &unchanged, &after),
            "peek at step {} wrote {:?} over {:?}",
            i,
            after,
            before
        );
        let before = after;
        let reply: Vec<i64> = call(spec.source_at())
            .query(conn)
            .map_err(|e| TestCaseError::fail(format!("step {i}: {e}")))?;
        let got = spec
            .decode(&reply, s.cost)
            .map_err(|e| TestCaseError::fail(format!("step {i}: {e} in {reply:?}")))?;
        prop_assert_eq!(
            got,
            want,
            "step {} ({:?} at {}, state {:?}, reply {:?})",
            i,
            s,
            now,
            before,
            reply
        );
        let after = read(conn, spec, key);
        let expected = left.unwrap_or_else(|| before.clone());
        prop_assert!(
            same_state(spec, &expected, &after),
            "step {} ({:?} at {}): left {:?}, expected {:?} (from {:?})",
            i,
            s,
            now,
            after,
            expected,
            before
        );
    }
    Ok(())
}

/// The instant the cases start from: two days past Redis's clock, so that
/// no key the scripts write expires while a case runs.
fn start(conn: &mut ::redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = ::redis::cmd("TIME").query(conn).unwrap();
    (secs + 2 * 86_400) * 1_000_000 + micros
}

fn run(quotas: impl Fn(u64, u64) -> Vec<Spec>, limits: (u64, u64), windows: &[u64]) {
    let Some(server) = Server::start() else {
        return;
    };
    let mut conn = ::redis::Client::open(server.url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let t0 = start(&mut conn);
    // The runner's closure is `Fn`: the connection and the case count
    // live in cells.
    let conn = std::cell::RefCell::new(conn);
    let n = std::cell::Cell::new(0u64);
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        proptest::sample::select(windows.to_vec()),
        1..=limits.0,
        1..=limits.1,
    )
        .prop_flat_map(|(w, a, b)| (Just((w, a, b)), steps(w, a.max(b), 2), 0..w));
    runner
        .run(&strategy, |((w, a, b), steps, offset)| {
            n.set(n.get() + 1);
            let specs = quotas(w, a)
                .into_iter()
                .zip(quotas(w, b))
                .flat_map(|(x, y)| [x, y])
                .collect::<Vec<_>>();
            for (j, pair) in specs.chunks(2).enumerate() {
                let key = format!("case{}:{j}", n.get());
                agree(&mut conn.borrow_mut(), pair, &key, t0 + offset, &steps)?;
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_token_bucket_script_decides_as_the_in_process_bucket() {
    // Quotas of one rate (an interval of `w` µs) and two capacities.
    run(
        |w, cap| {
            let tb = TokenBucket::new(1, Duration::from_micros(w), cap).unwrap();
            vec![Spec::bucket(&tb).unwrap()]
        },
        (6, 6),
        &[1, 3, 1_000, 250_000],
    );
}

#[test]
fn the_fixed_window_script_decides_as_the_in_process_window() {
    run(
        |w, limit| {
            let fw = <FixedWindow as crate::algorithm::FromParams>::from_params(&params(limit, w));
            vec![Spec::fixed(&fw.unwrap()).unwrap()]
        },
        (6, 6),
        &[1, 7, 1_000, 1_000_000],
    );
}

#[test]
fn the_sliding_window_counter_script_decides_as_the_in_process_counter() {
    run(
        |w, limit| {
            let swc = <SlidingWindowCounter as crate::algorithm::FromParams>::from_params(&params(
                limit, w,
            ));
            vec![Spec::sliding(&swc.unwrap()).unwrap()]
        },
        (6, 6),
        &[1, 7, 1_000, 1_000_000],
    );
}

#[test]
fn the_sliding_log_script_decides_as_the_in_process_log() {
    run(
        |w, limit| {
            let swl = SlidingWindowLog::new(limit, Duration::from_micros(w)).unwrap();
            vec![Spec::log(&swl).unwrap()]
        },
        (6, 6),
        &[1, 7, 1_000, 1_000_000],
    );
}

#[test]
fn a_pair_script_decides_as_the_in_process_pair() {
    // A bucket of `limit` at one token per `w` µs, with a fixed window of
    // `limit + 1` per `3w`; and a counter of `limit` per `w` with a bucket
    // of `limit` per `w` µs.
    run(
        |w, limit| {
            let tb = TokenBucket::new(1, Duration::from_micros(w), limit).unwrap();
            let fw = <FixedWindow as crate::algorithm::FromParams>::from_params(&params(
                limit + 1,
                3 * w,
            ));
            let swc = <SlidingWindowCounter as crate::algorithm::FromParams>::from_params(&params(
                limit, w,
            ));
            let (tb, fw, swc) = (
                Spec::bucket(&tb).unwrap(),
                Spec::fixed(&fw.unwrap()).unwrap(),
                Spec::sliding(&swc.unwrap()).unwrap(),
            );
            vec![
                Spec::pair(&tb, &fw).unwrap(),
                Spec::pair(&swc, &tb).unwrap(),
            ]
        },
        (6, 6),
        &[1, 7, 1_000, 1_000_000],
    );
}
