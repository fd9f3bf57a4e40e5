//! The `tracing` feature's events for a keyed limiter: what an operator
//! must see once, not per request. All have the target `"tollgate"` and a
//! `limiter` field, its name.

use core::hash::Hash;

use super::Limiter;
use crate::cell::{Algorithm, Tier};
use crate::clock::Clock;
use crate::sync::Ordering;

impl<A, K, C> Limiter<A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// How long, in the clock's nanoseconds, the cap must go unreached
    /// before reaching it again is an event of its own: a minute.
    pub(super) const CAP_QUIET: u64 = 60_000_000_000;

    /// A new client found the cap reached at the reading `now`. The first
    /// of a run (the first ever, or the first after a minute without one)
    /// is a `WARN` event, `"client cap reached"`, with the cap and the
    /// overflow policy.
    pub(super) fn cap_reached(&self, now: u64) {
        // Relaxed: a time, publishing nothing. Of two new clients at once,
        // one sees the other's reading: one event.
        let last = self.cap_reached_at.swap(now, Ordering::Relaxed);
        if last == u64::MAX || now >= last.saturating_add(Self::CAP_QUIET) {
            tracing::warn!(
                target: "tollgate",
                limiter = %self.name,
                max_clients = self.memory.max_clients,
                overflow = ?self.memory.overflow,
                "client cap reached"
            );
        }
    }

    /// A quota change was applied to every client of `tier`: an `INFO`
    /// event, `"quota changed"`, with the tier and the new quota's limit
    /// and window (in nanoseconds).
    pub(super) fn quota_changed(&self, tier: Tier, (limit, window_ns): (u64, u64)) {
        tracing::info!(
            target: "tollgate",
            limiter = %self.name,
            tier,
            limit,
            window_ns,
            "quota changed"
        );
    }
}
