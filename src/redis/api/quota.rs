//! Tiers on the limiter's face: [`RedisBuilder::tier_by`], and
//! [`RedisLimiter::set_quota`] and [`quota_of`](RedisLimiter::quota_of).

use core::time::Duration;
use std::sync::Arc;

use super::builder::RedisBuilder;
use crate::builder::Builder;
use crate::check::Quota;
use crate::error::ConfigError;
use crate::redis::quota::algorithm::RedisAlgorithm;
use crate::redis::quota::tier::quota_for;
use crate::redis::shared::limiter::RedisLimiter;
use crate::Tier;

impl<A> RedisBuilder<A> {
    /// Puts each client in a tier: `resolver` runs on the client's key
    /// bytes (as [`RedisKey`](crate::redis::RedisKey) writes them) for every
    /// request, and the request is judged by its tier's quota, set with
    /// [`RedisLimiter::set_quota`] (tier 0's is the builder's; a tier with
    /// none set uses tier 0's). The resolver must be cheap: it runs before
    /// every round trip.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::FixedWindow;
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindow::builder()
    ///     .limit(10)
    ///     .window(Duration::from_secs(60))
    ///     .redis(conn, "api")
    ///     .tier_by(|client| u16::from(client.starts_with(b"pro-")))
    ///     .build()?;
    /// limiter.set_quota(1, FixedWindow::builder().limit(1_000).window(Duration::from_secs(60)))?;
    /// assert_eq!(limiter.check("pro-alice").await?.limit(), 1_000);
    /// assert_eq!(limiter.check("bob").await?.limit(), 10);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn tier_by(mut self, resolver: impl Fn(&[u8]) -> Tier + Send + Sync + 'static) -> Self {
        self.tier_by = Some(Arc::new(resolver));
        self
    }
}

impl<A: RedisAlgorithm> RedisLimiter<A> {
    /// Sets tier `tier`'s quota, for the requests judged from now on by
    /// this limiter (other processes keep their own quotas), as an
    /// in-process limiter's `set_quota` does: each client's state is
    /// carried over by the algorithm's rule (see
    /// [`Limiter::set_quota`](crate::Limiter::set_quota)) at the instant of
    /// the change, when the limiter next meets it. The quota of the
    /// [`FailPolicy::Local`](crate::redis::FailPolicy::Local) fallback changes
    /// with it, keeping each client's state there too. A sliding window
    /// log keeps every entry (it has no conversion), read under the new
    /// limit and window.
    ///
    /// # Errors
    ///
    /// Every error of [`RedisBuilder::build`] for the quota's settings, the
    /// field named `tier.<field>`; [`ConfigError::Conflict`]
    /// (`tier.clock`, `tier.memory`, `tier.tier_by`) for a setting of the
    /// limiter given to a quota, as in-process. Nothing changes.
    ///
    /// # Examples
    ///
    /// See [`RedisBuilder::tier_by`].
    pub fn set_quota<K, C>(&self, tier: Tier, quota: Builder<A, K, C>) -> Result<(), ConfigError> {
        let params = quota.quota_params().map_err(ConfigError::in_tier)?;
        let new = quota_for::<A>(params, 0).map_err(ConfigError::in_tier)?;
        let inner = &self.inner;
        if let Some(local) = &inner.fallback {
            local.set_quota(tier, &new.params);
        }
        // The change's instant on Redis's clock, as this process reads it
        // (no earlier than it), and past every check in flight: one sent
        // before the change is judged under the old quota, and its state
        // converted after it, as if it had come first.
        let in_flight = if inner.calls.clock.reads_redis() {
            inner.timeout
        } else {
            Duration::ZERO
        };
        let at = inner.redis_now() + u64::try_from(in_flight.as_nanos()).unwrap_or(0);
        inner.tiers.set(tier, new, at / 1_000);
        if let Some(leases) = &inner.leases {
            leases.clear();
        }
        if let Some(cache) = &inner.shortcut {
            cache.renew();
        }
        #[cfg(feature = "tracing")]
        inner.quota_changed(tier, inner.tiers.get(tier).quota);
        Ok(())
    }

    /// The quota `tier`'s clients are held to now: its own, or tier 0's.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, Quota};
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), tollgate::ConfigError> {
    /// let minute = Duration::from_secs(60);
    /// let limiter = FixedWindow::builder().limit(10).window(minute).redis(conn, "q").build()?;
    /// assert_eq!(limiter.quota_of(3), Quota::new(10, minute));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn quota_of(&self, tier: Tier) -> Quota {
        self.inner.tiers.get(tier).quota
    }
}
