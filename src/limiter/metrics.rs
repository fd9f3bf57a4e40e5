//! A keyed limiter's series, with the `metrics` feature: each check counted
//! on its thread's stripe; the counts published through the `metrics`
//! facade by the publishing thread about once a second of real time (see
//! `crate::telemetry`), the counts and gauges by the first check after each
//! of its rounds, and both on [`Limiter::publish_metrics`].

use core::hash::Hash;

use super::{Limiter, Outcome};
use crate::cell::Algorithm;
use crate::clock::Clock;
use crate::telemetry;

/// Clients held, by `limiter`.
const CLIENTS: &str = "tollgate_clients";
/// The cap on clients held, by `limiter` (capped limiters only).
const CLIENTS_MAX: &str = "tollgate_clients_max";
/// Removed clients whose keys and state the tables still hold.
const AWAITING_REMOVAL: &str = "tollgate_entries_awaiting_removal";

impl<A, K, C> Limiter<A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// Counts a check's outcome on `cost` units, and publishes if a
    /// publication is due at `now`: on the check path, a few plain loads
    /// and stores of this thread's own stripe, and one load and comparison.
    #[inline]
    pub(super) fn count<R: Outcome>(&self, outcome: &R, cost: u64, now: u64) {
        let due = match outcome.admitted() {
            Some(admitted) => self.decisions.record_at(admitted, cost, now),
            None => self.decisions.due(now),
        };
        if due {
            self.publish_due(now);
        }
    }

    /// The first check publishes, and joins the counts to the publishing
    /// thread; later, the first check after each of the thread's rounds,
    /// for the gauges.
    #[cold]
    #[inline(never)]
    fn publish_due(&self, now: u64) {
        if self.decisions.claim(now, &self.name) {
            self.publish(false);
        }
    }

    /// Publishes the limiter's counts and gauges through the `metrics`
    /// crate's facade, to whichever recorder is installed: what its checks
    /// counted since the last publication, and the clients it holds now.
    /// Needs the `metrics` feature.
    ///
    /// There is no need to call it for a scrape: from its first check on,
    /// the limiter's counts are published about once a second of real
    /// time by a thread of tollgate's (`tollgate-metrics`, whatever the
    /// limiter's clock reads, and whether or not checks go on), and its
    /// gauges by the first check after each such publication. So a scrape
    /// a second after a decision shows it. Call this for figures exact to
    /// the last check (a test, a scrape that must not lag), or for gauges
    /// exact now. Counts are kept per thread (for up to 64 threads
    /// counting at once; any beyond share one more set of counters), so a
    /// check writes no line another thread counts on; see the
    /// [observability guide](crate::guide::observability) for the series
    /// and the thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder().rate(1, Duration::from_secs(60)).name("login").build()?;
    /// assert!(limiter.allow_request("alice"));
    /// assert!(!limiter.allow_request("alice"));
    /// // tollgate_decisions_total{limiter="login",outcome="admitted"} 1, and "denied" 1.
    /// limiter.publish_metrics();
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn publish_metrics(&self) {
        self.publish(true);
    }

    /// Publishes, waiting for another publisher if `wait`; otherwise
    /// leaves it to that one.
    fn publish(&self, wait: bool) {
        if !self.decisions.publish(&self.name, wait) {
            return;
        }
        let name = &self.name;
        // As f64: exact for any count below 2^53.
        telemetry::gauge(CLIENTS, name, &[]).set(self.len() as f64);
        if let Some(max) = self.memory.max_clients {
            telemetry::gauge(CLIENTS_MAX, name, &[]).set(max as f64);
        }
        telemetry::gauge(AWAITING_REMOVAL, name, &[]).set(self.store.awaiting_removal() as f64);
    }
}
