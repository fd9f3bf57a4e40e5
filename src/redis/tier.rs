//! Tiers on Redis: a resolver run on each request's client names its
//! tier, and the tier's quota goes to the script with the request. Every
//! tier of a limiter shares each client's one key, so a client that moves
//! between tiers keeps what it spent, read under its new quota as any
//! quota change is (see the module's docs).

use core::time::Duration;
use std::sync::{Arc, PoisonError, RwLock};

use super::script::Spec;
use super::{RedisAlgorithm, RedisBuilder, RedisLimiter};
use crate::algorithm::FromParams;
use crate::builder::Builder;
use crate::cell::Algorithm;
use crate::check::Quota;
use crate::clock::MonotonicClock;
use crate::error::ConfigError;
use crate::limiter::Limiter;
use crate::memory::Memory;
use crate::Tier;

/// The resolver of [`RedisBuilder::tier_by`].
pub(super) type Resolver = Box<dyn Fn(&[u8]) -> Tier + Send + Sync>;

/// One tier's quota: the script's settings, the quota, and the in-process
/// limiter of [`FailPolicy::Local`](super::FailPolicy::Local) for it.
pub(super) struct TierQuota<A: Algorithm> {
    pub(super) spec: Spec,
    pub(super) quota: Quota,
    pub(super) local: Option<Limiter<A, Vec<u8>>>,
}

/// The tiers' quotas, indexed by tier; tier 0 always set. Read on every
/// request (an uncontended read lock, against a round trip), written by
/// [`RedisLimiter::set_quota`].
pub(super) struct Tiers<A: Algorithm> {
    table: RwLock<Vec<Option<Arc<TierQuota<A>>>>>,
    resolver: Option<Resolver>,
    /// The memory settings of each tier's in-process limiter, and whether
    /// to make one.
    memory: Memory,
    local: bool,
}

impl<A: RedisAlgorithm> Tiers<A> {
    pub(super) fn new(
        algorithm: A,
        resolver: Option<Resolver>,
        memory: Memory,
        local: bool,
    ) -> Result<Self, ConfigError> {
        let first = Self::quota_for(algorithm, &memory, local)?;
        Ok(Self {
            table: RwLock::new(vec![Some(Arc::new(first))]),
            resolver,
            memory,
            local,
        })
    }

    fn quota_for(algorithm: A, memory: &Memory, local: bool) -> Result<TierQuota<A>, ConfigError> {
        let spec = algorithm.spec()?;
        let quota = {
            let (limit, window) = FromParams::granted(&algorithm);
            Quota::new(limit, Duration::from_nanos(window))
        };
        let local = local.then(|| Limiter::new(algorithm, MonotonicClock::new(), *memory));
        Ok(TierQuota { spec, quota, local })
    }
}

impl<A: Algorithm> Tiers<A> {
    /// The quota of `client`'s tier: its own, or tier 0's if it has none.
    pub(super) fn of(&self, client: &[u8]) -> Arc<TierQuota<A>> {
        let tier = self.resolver.as_ref().map_or(0, |resolve| resolve(client));
        self.get(tier)
    }

    /// Tier `tier`'s quota, or tier 0's.
    pub(super) fn get(&self, tier: Tier) -> Arc<TierQuota<A>> {
        // A writer that panicked left the table whole (it swaps one slot).
        let table = self.table.read().unwrap_or_else(PoisonError::into_inner);
        let own = table.get(usize::from(tier)).and_then(Option::as_ref);
        // Tier 0 is set by `new` and never cleared.
        Arc::clone(own.or(table[0].as_ref()).expect("tier 0 is always set"))
    }

    /// Every tier's quota that is set.
    pub(super) fn all(&self) -> Vec<Arc<TierQuota<A>>> {
        let table = self.table.read().unwrap_or_else(PoisonError::into_inner);
        table.iter().flatten().cloned().collect()
    }
}

impl<A> RedisBuilder<A> {
    /// Puts each client in a tier: `resolver` runs on the client's key
    /// bytes (as [`RedisKey`](super::RedisKey) writes them) for every
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
        self.tier_by = Some(Box::new(resolver));
        self
    }
}

impl<A: RedisAlgorithm> RedisLimiter<A> {
    /// Sets tier `tier`'s quota, for the requests judged from now on by
    /// this limiter (other processes keep their own quotas). A client's
    /// state stays in Redis as it is, and is read under the new quota as
    /// any quota change is: what it spent above a lower limit counts as
    /// that limit. The window of a fixed window, a sliding window counter
    /// or a log must not change (the stored window index would mean
    /// another window, and a log trimmed to a shorter window forgets
    /// entries a longer one still counts): give a new window a new
    /// limiter and prefix.
    ///
    /// # Errors
    ///
    /// Every error of [`RedisBuilder::build`] for the quota's settings, the
    /// field named `tier.<field>`; [`ConfigError::OutOfRange`]
    /// (`tier.window`) for a window that differs from tier 0's.
    ///
    /// # Examples
    ///
    /// See [`RedisBuilder::tier_by`].
    pub fn set_quota<K, C>(&self, tier: Tier, quota: Builder<A, K, C>) -> Result<(), ConfigError> {
        let tiers = &self.inner.tiers;
        let algorithm = A::from_params(&quota.params).map_err(ConfigError::in_tier)?;
        let new = Tiers::quota_for(algorithm, &tiers.memory, tiers.local)
            .map_err(ConfigError::in_tier)?;
        let base = tiers.get(0).spec;
        if !base.shares_windows(&new.spec) {
            let us = |spec: &Spec| u128::from(spec.args()[0]);
            return Err(ConfigError::OutOfRange {
                field: "tier.window",
                value: us(&new.spec),
                min: us(&base),
                max: us(&base),
                unit: "µs",
                reason: "every tier of a Redis limiter shares each client's window index, so shares the window",
            });
        }
        let mut table = tiers.table.write().unwrap_or_else(|p| p.into_inner());
        let slot = usize::from(tier);
        if table.len() <= slot {
            table.resize_with(slot + 1, || None);
        }
        table[slot] = Some(Arc::new(new));
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
