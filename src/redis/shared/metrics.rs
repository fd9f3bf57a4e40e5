//! A Redis limiter's series, with the `metrics` feature: each check's
//! answer counted by the path that gave it (Redis, the deny shortcut, the
//! fail policy) and its outcome, on its thread's stripe; the limiter's
//! [`RedisStats`] counters and its breaker's state
//! beside them; all published through the `metrics` facade by the first
//! check after each round of the publishing thread (see
//! `crate::telemetry`), which publishes the checks' counts itself about
//! once a second of real time, or on [`RedisLimiter::publish_metrics`].

use super::limiter::{Inner, RedisLimiter};
use crate::redis::quota::algorithm::RedisAlgorithm;
use crate::redis::table::answers::{publish_checks, Outcome, Path};
use crate::redis::wire::guard::RedisStats;
use crate::telemetry::{self, Counts};

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
/// 1 while the breaker is open (on Redis Cluster, any node's), else 0, by
/// `limiter`.
const BREAKER_OPEN: &str = "tollgate_redis_breaker_open";

impl<A> Inner<A> {
    /// Counts a check's answer, and publishes if a publication is due:
    /// the first check (which joins the counts to the publishing thread),
    /// then the first after each of the thread's rounds.
    pub(crate) fn answered(&self, path: Path, answer: Outcome, cost: u64) {
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
        telemetry::gauge(BREAKER_OPEN, name, &[]).set(if self.breakers.is_open() {
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
