//! A check's entry: which way it goes (its lease, a batch, a call of its
//! own); the limiter's public figures; and its tiers' quotas
//! ([`RedisBuilder::tier_by`], [`RedisLimiter::set_quota`]).

use core::time::Duration;
use std::sync::Arc;

use super::builder::RedisBuilder;
use crate::builder::Builder;
use crate::check::{AsyncCheck, CheckError, CheckErrorKind, Quota};
use crate::error::{ConfigError, CostError};
use crate::redis::check::coalesce::{coalesces, joined};
use crate::redis::check::decide::{RedisCheck, State};
use crate::redis::lease::{leases, AtOnce};
use crate::redis::quota::{algorithm::RedisAlgorithm, tier::quota_for};
use crate::redis::script::key::{client_bytes, RedisKey};
use crate::redis::shared::limiter::RedisLimiter;
#[cfg(feature = "metrics")]
use crate::redis::table::answers::{Outcome, Path};
use crate::redis::table::request::{Mode, Request};
use crate::redis::wire::guard::{bump, RedisStats};
use crate::Tier;

impl<A: RedisAlgorithm> RedisLimiter<A> {
    /// Checks, and if admitted records, one request from `key`.
    ///
    /// # Errors
    ///
    /// A [`CheckError`] when Redis fails and the [`FailPolicy`](crate::redis::FailPolicy) answers
    /// with it: under `FailClosed` for any failure, under `FailOpen` for a
    /// failure other than Redis being unreachable or slow (see the
    /// module's docs), under `Local` never.
    ///
    /// # Examples
    ///
    /// See [`RedisLimiter`].
    pub fn check<K: RedisKey + ?Sized>(&self, key: &K) -> RedisCheck {
        self.check_n(key, 1)
    }

    /// Checks a request that costs `cost` units at once: all of it is
    /// admitted or none. A cost of 0 is admitted and records nothing (it
    /// still asks Redis, for the figures). As in-process, a cost above the
    /// client's tier's capacity but within another tier's is denied, and
    /// would never pass.
    ///
    /// # Errors
    ///
    /// [`CheckErrorKind::Cost`] (with no round trip) if `cost` exceeds the
    /// capacity or limit of every tier, and the errors of
    /// [`check`](Self::check).
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::{CheckErrorKind, TokenBucket};
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .redis(conn, "batch")
    ///     .build()?;
    /// assert!(limiter.check_n("alice", 7).await?.is_allowed());
    /// assert!(limiter.check_n("alice", 7).await?.is_denied());
    /// assert_eq!(limiter.check_n("alice", 11).await.unwrap_err().kind(), CheckErrorKind::Cost);
    /// # Ok(())
    /// # }
    /// ```
    pub fn check_n<K: RedisKey + ?Sized>(&self, key: &K, cost: u64) -> RedisCheck {
        self.decide(key, cost, Mode::Check)
    }

    /// The Redis key that holds `client`'s state (see the module's docs on
    /// keys): for inspecting it, or for operations of your own.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), tollgate::ConfigError> {
    /// let limiter = TokenBucket::builder().rate(10, Duration::from_secs(1)).redis(conn, "api").build()?;
    /// assert_eq!(limiter.key("alice"), b"api:{alice}:tb");
    /// assert_eq!(limiter.key("a{b}"), b"api:{a%7Bb%7D}:tb");
    /// assert_eq!(limiter.key(""), b"api:{%}:tb");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn key<K: RedisKey + ?Sized>(&self, client: &K) -> Vec<u8> {
        self.inner.layout.key(&client_bytes(client))
    }

    /// The quota this limiter grants, as for an in-process limiter of the
    /// same settings.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::{Quota, TokenBucket};
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), tollgate::ConfigError> {
    /// let limiter = TokenBucket::builder().rate(10, Duration::from_secs(60)).redis(conn, "q").build()?;
    /// assert_eq!(limiter.quota(), Quota::new(10, Duration::from_secs(60)));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn quota(&self) -> Quota {
        self.inner.tiers.get(0).quota
    }

    /// A snapshot of the limiter's counters: round trips, the calls the
    /// deny shortcut saved, failures and how the fail policy answered.
    ///
    /// # Examples
    ///
    /// See [`RedisLimiter`].
    pub fn stats(&self) -> RedisStats {
        self.inner.calls.counters.snapshot()
    }

    /// The limiter's name: the one given to its builder
    /// ([`name`](crate::Builder::name)), or `"default"`.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), tollgate::ConfigError> {
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .name("login")
    ///     .redis(conn, "login")
    ///     .build()?;
    /// assert_eq!(limiter.name(), "login");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }
}

impl<A: RedisAlgorithm, K: RedisKey + ?Sized> AsyncCheck<K> for RedisLimiter<A> {
    type Future = RedisCheck;

    fn check(&self, key: &K, cost: u64) -> RedisCheck {
        self.check_n(key, cost)
    }

    fn quota(&self) -> Quota {
        self.inner.tiers.get(0).quota
    }

    fn name(&self) -> &str {
        RedisLimiter::name(self)
    }

    #[cfg(feature = "metrics")]
    fn publish_metrics(&self) {
        RedisLimiter::publish_metrics(self);
    }
}

impl<A: RedisAlgorithm> RedisLimiter<A> {
    /// A check or a peek.
    pub(super) fn decide<K: RedisKey + ?Sized>(
        &self,
        key: &K,
        cost: u64,
        mode: Mode,
    ) -> RedisCheck {
        let inner = &self.inner;
        bump(&inner.calls.counters.checks);
        let client = client_bytes(key);
        let judged = inner.tiers.judge(&client);
        if cost > judged.max_capacity {
            let err = CostError {
                cost,
                capacity: judged.max_capacity,
            };
            return RedisCheck::ready(Err(CheckError::with_kind(CheckErrorKind::Cost, err)));
        }
        let beyond = cost > judged.quota.spec.capacity();
        let lease = if mode == Mode::Check && cost > 0 && !beyond {
            inner.lease_now_or_never(&client, &judged, cost)
        } else {
            AtOnce::Cold
        };
        if let AtOnce::Answered(decision) = lease {
            return RedisCheck::ready(Ok(decision));
        }
        let cache_key = inner
            .shortcut
            .as_ref()
            .map(|cache| cache.key(cache.generation(), judged.tier, &client));
        let request = Request {
            key: inner.layout.key(&client),
            judged,
            client,
            cost,
            beyond,
            mode,
            cache_key,
        };
        let now = inner.calls.clock.local_ns();
        if mode == Mode::Check && !beyond {
            if let Some(decision) = inner.local_denial(&request, now) {
                bump(&inner.calls.counters.denied_locally);
                #[cfg(feature = "metrics")]
                inner.answered(Path::Shortcut, Outcome::Denied, cost);
                return RedisCheck::ready(Ok(decision));
            }
        }
        let probe_due = match inner.gate(now, &request.key) {
            Ok(probe_due) => probe_due,
            Err(err) => return RedisCheck::ready(inner.fallback(&request, err)),
        };
        let inner = Arc::clone(inner);
        if matches!(lease, AtOnce::Wait) && leases(&request) {
            return RedisCheck(State::Waiting(Box::pin(inner.leased(request, probe_due))));
        }
        if mode == Mode::Check
            && !beyond
            && !probe_due
            && inner.coalesce.is_some()
            && coalesces(&request.spec())
        {
            return RedisCheck(State::Waiting(Box::pin(joined(inner, request))));
        }
        RedisCheck(State::Waiting(Box::pin(async move {
            inner.single(&request, probe_due).await
        })))
    }
}

impl<A> RedisBuilder<A> {
    /// Puts each client in a tier: `resolver` runs on the client's key
    /// bytes (as [`RedisKey`] writes them) for every
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
            // The local share must fit before anything changes.
            let share = new
                .params
                .share(inner.local_share)
                .map_err(ConfigError::in_tier)?;
            local.set_quota(tier, &share);
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
