//! A Redis limiter's series, with the `metrics` feature: each check's
//! answer counted by the path that gave it (Redis, the deny shortcut, the
//! fail policy) and its outcome, on its thread's stripe; the limiter's
//! [`RedisStats`](super::RedisStats) counters and its breaker's state
//! beside them; all published through the `metrics` facade by the first
//! check after each round of the publishing thread (see
//! `crate::telemetry`), which publishes the checks' counts itself about
//! once a second of real time, or on [`RedisLimiter::publish_metrics`].

use std::sync::{Arc, Mutex};

use super::{Inner, RedisAlgorithm, RedisLimiter, RedisStats};
use crate::telemetry::{self, Counts, Name};

/// Checks, by `limiter`, `answered_by` and `outcome`.
const CHECKS: &str = "tollgate_redis_checks_total";
/// Commands sent to Redis, by `limiter`.
const ROUND_TRIPS: &str = "tollgate_redis_round_trips_total";
/// Checks the deny shortcut denied without a round trip, by `limiter`.
const SHORTCUT_HITS: &str = "tollgate_redis_shortcut_hits_total";
/// Checks decided in a call that carried another check of the same
/// client (coalescing), by `limiter`.
const COALESCED: &str = "tollgate_redis_coalesced_total";
/// Scripts sent whole because Redis had lost them, by `limiter`.
const SCRIPT_RELOADS: &str = "tollgate_redis_script_reloads_total";
/// Round trips that failed, by `limiter` and `kind` (`timeout`, `error`).
const FAILURES: &str = "tollgate_redis_failures_total";
/// The breaker's transitions, by `limiter` and `to` (`open`, `closed`).
const TRANSITIONS: &str = "tollgate_redis_breaker_transitions_total";
/// 1 while the breaker is open, else 0, by `limiter`.
const BREAKER_OPEN: &str = "tollgate_redis_breaker_open";

/// What answered a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Path {
    /// A round trip: Redis decided.
    Redis = 0,
    /// The deny shortcut, without a round trip.
    Shortcut = 1,
    /// [`FailPolicy::FailOpen`](super::FailPolicy::FailOpen), Redis
    /// unreachable or slow.
    FailOpen = 2,
    /// Refused with an error, Redis unreachable or slow
    /// ([`FailPolicy::FailClosed`](super::FailPolicy::FailClosed)).
    FailClosed = 3,
    /// Refused with an error about the client's key or the request (a
    /// value the limiter cannot read, an error reply), Redis up.
    KeyRefused = 4,
    /// The in-process limiter of
    /// [`FailPolicy::Local`](super::FailPolicy::Local).
    Local = 5,
    /// The client's lease, without a round trip.
    Lease = 6,
}

/// How a check was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Admitted = 0,
    Denied = 1,
    /// An error, no decision.
    Refused = 2,
}

const PATHS: [&str; 7] = [
    "redis",
    "shortcut",
    "fail_open",
    "fail_closed",
    "key_refused",
    "local",
    "lease",
];
const ANSWERS: [&str; 3] = ["admitted", "denied", "refused"];
/// The `(path, answer)` pairs a check can end in: each is published, at 0
/// until it happens, so both sides of every ratio exist.
const PAIRS: [(Path, Outcome); 12] = [
    (Path::Redis, Outcome::Admitted),
    (Path::Redis, Outcome::Denied),
    (Path::Shortcut, Outcome::Denied),
    (Path::FailOpen, Outcome::Admitted),
    (Path::FailOpen, Outcome::Denied),
    (Path::FailClosed, Outcome::Refused),
    (Path::KeyRefused, Outcome::Refused),
    (Path::Local, Outcome::Admitted),
    (Path::Local, Outcome::Denied),
    (Path::Local, Outcome::Refused),
    (Path::Lease, Outcome::Admitted),
    (Path::Lease, Outcome::Denied),
];
/// Counters: `path * 3 + answer`, then the units beyond the first that
/// admitted and denied checks asked for.
const N: usize = 23;
const EXTRA: usize = 21;

/// A Redis limiter's answers and what it last published.
pub(super) struct Answers {
    /// Shared with the publishing thread, which publishes them (the
    /// [`RedisStats`] and the breaker, in the limiter, it cannot reach).
    counts: Arc<Counts<N>>,
    /// The [`RedisStats`] last published; taken by publishers only.
    stats: Mutex<RedisStats>,
}

impl Answers {
    pub(super) fn new() -> Self {
        Self {
            counts: Counts::new(true, (), publish_checks),
            stats: Mutex::new(RedisStats::default()),
        }
    }

    /// Counts a check on `cost` units answered by `path` with `answer`.
    pub(super) fn count(&self, path: Path, answer: Outcome, cost: u64) {
        let extra = match answer {
            Outcome::Refused => 0,
            _ => cost.saturating_sub(1),
        };
        let i = path as usize * 3 + answer as usize;
        self.counts
            .tally
            .count(i, EXTRA + (answer as usize).min(1), extra);
    }
}

/// Adds what `counts` counted since the last publication to the checks',
/// decisions' and units' counters of `name`; waits for another publisher
/// if `wait`, else leaves it to that one (and answers false).
fn publish_checks(counts: &Counts<N>, name: &Name, wait: bool) -> bool {
    let Some(deltas) = counts.deltas(wait) else {
        return false;
    };
    for (path, answer) in PAIRS {
        let i = path as usize * 3 + answer as usize;
        telemetry::counter(
            CHECKS,
            name,
            &[
                ("answered_by", PATHS[path as usize]),
                ("outcome", ANSWERS[answer as usize]),
            ],
        )
        .increment(deltas[i]);
    }
    for (answer, outcome) in [(Outcome::Admitted, "admitted"), (Outcome::Denied, "denied")] {
        let a = answer as usize;
        let decisions = (0..PATHS.len())
            .map(|path| deltas[path * 3 + a])
            .fold(0, u64::wrapping_add);
        telemetry::counter(telemetry::DECISIONS, name, &[("outcome", outcome)])
            .increment(decisions);
        telemetry::counter(telemetry::UNITS, name, &[("outcome", outcome)])
            .increment(decisions.wrapping_add(deltas[EXTRA + a]));
    }
    true
}

impl<A> Inner<A> {
    /// Counts a check's answer, and publishes if a publication is due:
    /// the first check (which joins the counts to the publishing thread),
    /// then the first after each of the thread's rounds.
    pub(super) fn answered(&self, path: Path, answer: Outcome, cost: u64) {
        self.answers.count(path, answer, cost);
        let now = self.calls.clock.local_ns();
        let counts = &self.answers.counts;
        if counts.sent.due(now) && Counts::claim(counts, now, &self.name) {
            self.publish(false);
        }
    }

    /// Publishes what was counted since the last publication; waits for
    /// another publisher if `wait`, else leaves it to that one.
    pub(super) fn publish(&self, wait: bool) {
        if !publish_checks(&self.answers.counts, &self.name, wait) {
            return;
        }
        let name = &self.name;
        // The `RedisStats` counters, as deltas since the last publication;
        // the lock orders publishers, so each delta is handed out once.
        // Taken for the snapshot only, never while the recorder runs, so a
        // publisher held up in the recorder holds up no other.
        let (now, last) = {
            let mut last = self
                .answers
                .stats
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = self.calls.counters.snapshot();
            (now, core::mem::replace(&mut *last, now))
        };
        let delta = |f: fn(&RedisStats) -> u64| f(&now).wrapping_sub(f(&last));
        telemetry::counter(ROUND_TRIPS, name, &[]).increment(delta(|s| s.round_trips));
        telemetry::counter(SHORTCUT_HITS, name, &[]).increment(delta(|s| s.denied_locally));
        telemetry::counter(COALESCED, name, &[]).increment(delta(|s| s.coalesced));
        telemetry::counter(SCRIPT_RELOADS, name, &[]).increment(delta(|s| s.script_reloads));
        telemetry::counter(FAILURES, name, &[("kind", "timeout")]).increment(delta(|s| s.timeouts));
        telemetry::counter(FAILURES, name, &[("kind", "error")]).increment(delta(|s| s.errors));
        telemetry::counter(TRANSITIONS, name, &[("to", "open")])
            .increment(delta(|s| s.breaker_opened));
        telemetry::counter(TRANSITIONS, name, &[("to", "closed")])
            .increment(delta(|s| s.breaker_closed));
        telemetry::gauge(BREAKER_OPEN, name, &[]).set(if self.breaker.is_open() {
            1.0
        } else {
            0.0
        });
    }
}

impl<A: RedisAlgorithm> RedisLimiter<A> {
    /// Publishes the limiter's counts through the `metrics` crate's
    /// facade, to whichever recorder is installed: its checks by what
    /// answered them and how, since the last publication, its round trips,
    /// deny-shortcut hits, script reloads, failures and breaker
    /// transitions, and whether its breaker is open now. Needs the
    /// `metrics` feature.
    ///
    /// There is no need to call it for a scrape, as for an in-process
    /// limiter ([`Limiter::publish_metrics`](crate::Limiter::publish_metrics)):
    /// from its first check on, a thread of tollgate's publishes the
    /// checks' counts about once a second of real time, and the first
    /// check after each such publication publishes the rest (round trips,
    /// failures, the breaker). Call this for figures exact to the last
    /// check, or for the rest once checks have stopped. See the
    /// [observability guide](crate::guide::observability) for the series.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .name("login")
    ///     .redis(conn, "login")
    ///     .build()?;
    /// assert!(limiter.check("alice").await?.is_allowed());
    /// // tollgate_redis_checks_total{limiter="login",answered_by="redis",outcome="admitted"} 1
    /// limiter.publish_metrics();
    /// # Ok(())
    /// # }
    /// ```
    pub fn publish_metrics(&self) {
        self.inner.publish(true);
    }
}
