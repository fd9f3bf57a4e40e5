//! The builder's end for a limiter with no clients:
//! [`Builder::build_direct`].

use super::Builder;
use crate::cell::Algorithm;
use crate::clock::Clock;
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
        let algorithm = A::from_settings(&self.params)?;
        let clock = self.clock.unwrap_or_else(|make| make());
        Ok(DirectLimiter::new(algorithm, clock).named(name))
    }
}
