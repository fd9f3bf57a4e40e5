//! The builder's end for a limiter with no clients:
//! [`Builder::build_direct`]; and what the direct limiter answers through
//! the check layer's types, [`AsyncCheck`] and [`Quota`], which sit above
//! the limiter layer that defines it.

use core::future::{ready, Ready};

use super::Builder;
use crate::cell::Algorithm;
use crate::check::{AsyncCheck, CheckError, CheckErrorKind, Quota};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::limiter::DirectLimiter;
use crate::memory::Memory;

impl<A: Algorithm, K, C: Clock> Builder<A, K, C> {
    /// Validates the settings and builds a [`DirectLimiter`]: one budget
    /// for every caller, with no clients (no key, no table).
    ///
    /// # Errors
    ///
    /// As [`build`](Builder::build)'s, and [`ConfigError::Conflict`] for a
    /// setting that only clients have: the memory settings
    /// ([`max_clients`](Builder::max_clients), [`overflow`](Builder::overflow),
    /// [`auto_sweep`](Builder::auto_sweep), [`no_auto_sweep`](Builder::no_auto_sweep))
    /// and tiers ([`tier`](Builder::tier), [`tier_by`](Builder::tier_by)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ConfigError, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .and_rate(1_000, Duration::from_secs(3600))
    ///     .build_direct()?;
    /// assert!(limiter.allow());
    ///
    /// let err = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .max_clients(100)
    ///     .build_direct()
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "memory");
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn build_direct(self) -> Result<DirectLimiter<A, C>, ConfigError> {
        if let Some(conflict) = self.conflict {
            return Err(conflict);
        }
        let conflict = |field, reason| Err(ConfigError::Conflict { field, reason });
        if self.memory != Memory::default() {
            return conflict(
                "memory",
                "a direct limiter holds no clients: the memory settings (`max_clients`, `overflow`, `auto_sweep`) apply to `build` only",
            );
        }
        if self.tier_by.is_some() || !self.params.tiers.is_empty() {
            return conflict(
                "tier",
                "a direct limiter has no clients to put in tiers: tiers apply to `build` only",
            );
        }
        let name = super::valid_name(self.name)?;
        let clock = self.clock.unwrap_or_else(|make| make());
        let mut params = self.params;
        params.on_origin(crate::clock::unix_nanos(clock.unix_origin()));
        let algorithm = A::from_settings(&params)?;
        Ok(DirectLimiter::new(algorithm, clock).named(name))
    }
}

impl<A: Algorithm, C: Clock> DirectLimiter<A, C> {
    /// The quota this limiter grants: `limit` requests per `window`, as
    /// [`Limiter::quota`](crate::Limiter::quota) reports it (for the token
    /// bucket, its capacity and the time to refill it from empty).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, TokenBucket};
    ///
    /// let upstream = TokenBucket::builder().rate(10, Duration::from_secs(60)).build_direct()?;
    /// assert_eq!(upstream.quota(), Quota::new(10, Duration::from_secs(60)));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn quota(&self) -> Quota {
        Quota::of(self.algorithm())
    }
}

/// For every key type, the key ignored: every key draws on the one budget,
/// so a direct limiter is a global limit wherever an `AsyncCheck` is asked
/// for, such as the HTTP layer's limiter. The future is ready at once.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{AsyncCheck, CheckErrorKind, TokenBucket};
///
/// let everyone = TokenBucket::builder().rate(2, Duration::from_secs(1)).build_direct()?;
/// let alice = AsyncCheck::check(&everyone, "alice", 1).into_inner()?;
/// let bob = AsyncCheck::check(&everyone, "bob", 1).into_inner()?;
/// assert_eq!((alice.remaining(), bob.remaining()), (1, 0), "one budget for both");
/// let err = AsyncCheck::<str>::check(&everyone, "carol", 3).into_inner().unwrap_err();
/// assert_eq!(err.kind(), CheckErrorKind::Cost);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl<A, K, C> AsyncCheck<K> for DirectLimiter<A, C>
where
    A: Algorithm,
    K: ?Sized,
    C: Clock + 'static,
{
    type Future = Ready<Result<Decision, CheckError>>;

    #[inline]
    fn check(&self, _key: &K, cost: u64) -> Self::Future {
        let decision = if cost == 1 {
            Ok(DirectLimiter::check(self))
        } else {
            DirectLimiter::check_n(self, cost)
                .map_err(|err| CheckError::with_kind(CheckErrorKind::Cost, err))
        };
        ready(decision)
    }

    fn quota(&self) -> Quota {
        DirectLimiter::quota(self)
    }

    fn name(&self) -> &str {
        DirectLimiter::name(self)
    }

    #[cfg(feature = "metrics")]
    fn publish_metrics(&self) {
        DirectLimiter::publish_metrics(self);
    }
}
