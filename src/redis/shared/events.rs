//! The `tracing` feature's events for a Redis limiter: what an operator
//! must see once, not per request. All have the target `"tollgate"` and a
//! `limiter` field, its name.

use super::limiter::{FailPolicy, Inner};
use crate::cell::Tier;
use crate::check::Quota;

impl<A> Inner<A> {
    /// The breaker opened: a `WARN` event, `"redis breaker opened"`, with
    /// the fail policy that answers checks until a probe finds Redis back;
    /// under [`FailPolicy::Local`], also `"local fallback started"`.
    pub(crate) fn breaker_opened(&self) {
        tracing::warn!(
            target: "tollgate",
            limiter = %self.name,
            policy = ?self.policy,
            "redis breaker opened"
        );
        if self.policy == FailPolicy::Local {
            tracing::warn!(
                target: "tollgate",
                limiter = %self.name,
                "local fallback started"
            );
        }
    }

    /// The breaker closed, Redis answering again: an `INFO` event,
    /// `"redis breaker closed"`; under [`FailPolicy::Local`], also
    /// `"local fallback ended"`.
    pub(crate) fn breaker_closed(&self) {
        tracing::info!(
            target: "tollgate",
            limiter = %self.name,
            policy = ?self.policy,
            "redis breaker closed"
        );
        if self.policy == FailPolicy::Local {
            tracing::info!(
                target: "tollgate",
                limiter = %self.name,
                "local fallback ended"
            );
        }
    }

    /// [`set_quota`](crate::redis::RedisLimiter::set_quota) applied a quota to
    /// tier `tier` (in this process): an `INFO` event, `"quota changed"`,
    /// with the tier and the new quota's limit and window (in
    /// nanoseconds), as an in-process limiter's.
    pub(crate) fn quota_changed(&self, tier: Tier, quota: Quota) {
        tracing::info!(
            target: "tollgate",
            limiter = %self.name,
            tier,
            limit = quota.limit(),
            window_ns = u64::try_from(quota.window().as_nanos()).unwrap_or(u64::MAX),
            "quota changed"
        );
    }
}
