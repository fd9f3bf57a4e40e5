//! The `tracing` feature's events for a Redis limiter: what an operator
//! must see once, not per request. All have the target `"tollgate"` and a
//! `limiter` field, its name.

use super::{FailPolicy, Inner};

impl<A> Inner<A> {
    /// The breaker opened: a `WARN` event, `"redis breaker opened"`, with
    /// the fail policy that answers checks until a probe finds Redis back;
    /// under [`FailPolicy::Local`], also `"local fallback started"`.
    pub(super) fn breaker_opened(&self) {
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
    pub(super) fn breaker_closed(&self) {
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
}
