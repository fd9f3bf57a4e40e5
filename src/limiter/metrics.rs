//! A keyed limiter's series, with the `metrics` feature: each check counted
//! on its thread's stripe, and the counts and gauges published through the
//! `metrics` facade at most once a second of the limiter's clock, or on
//! [`Limiter::publish_metrics`].

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
        if let Some(admitted) = outcome.admitted() {
            self.decisions.record(admitted, cost);
        }
        if self.decisions.due(now) {
            self.publish_due(now);
        }
    }

    #[cold]
    #[inline(never)]
    fn publish_due(&self, now: u64) {
        if self.decisions.claim(now) {
            self.publish(false);
        }
    }

    /// Publishes the limiter's counts and gauges through the `metrics`
    /// crate's facade, to whichever recorder is installed: what its checks
    /// counted since the last publication, and the clients it holds now.
    /// Needs the `metrics` feature.
    ///
    /// Checks publish by themselves, at most once a second of the
    /// limiter's clock (the first check of each second does), so a
    /// limiter in use reaches the recorder with no call; call this before
    /// rendering a scrape for figures exact to the last check, or when
    /// checks have stopped. Counts are kept per thread (for up to 64
    /// threads counting at once; any beyond share one more set of
    /// counters), so a check writes no line another thread counts on; see
    /// the [observability guide](crate::guide::observability) for the
    /// series.
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
