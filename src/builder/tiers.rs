//! The builder's tiers: which algorithms have them ([`Tierable`]), a
//! tier's quota ([`Builder::tier`]), the resolver of a client's tier
//! ([`Builder::tier_by`]), and a builder's settings as the quota
//! [`Limiter::set_quota`](crate::Limiter::set_quota) takes.

use core::time::Duration;

use super::Builder;
use crate::algorithm::{Both, FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};
use crate::cell::{Algorithm, Tier, Tiered};
use crate::error::ConfigError;
use crate::limiter::TierBy;

/// A quota for [`Limiter::set_quota`](crate::Limiter::set_quota): the settings of a builder, validated.
/// Its clock and memory settings, which would not apply, must not be set.
macro_rules! quota_from_builder {
    ($($algorithm:ty),*) => {$(
        impl<K, C> TryFrom<Builder<$algorithm, K, C>> for $algorithm {
            type Error = ConfigError;

            /// Validates the builder's settings, as [`Builder::build`] would.
            fn try_from(builder: Builder<$algorithm, K, C>) -> Result<Self, ConfigError> {
                <$algorithm as Algorithm>::from_settings(&builder.quota_params()?)
            }
        }
    )*};
}
quota_from_builder!(
    TokenBucket,
    FixedWindow,
    SlidingWindowCounter,
    SlidingWindowLog
);

/// A quota for [`Limiter::set_quota`](crate::Limiter::set_quota): the settings of a builder, validated.
impl<A, B, K, C> TryFrom<Builder<Both<A, B>, K, C>> for Both<A, B>
where
    Both<A, B>: Algorithm,
{
    type Error = ConfigError;

    /// Validates the builder's settings, as [`Builder::build`] would.
    fn try_from(builder: Builder<Both<A, B>, K, C>) -> Result<Self, ConfigError> {
        Self::from_settings(&builder.quota_params()?)
    }
}

/// An algorithm whose clients can be given quotas of their own
/// ([`Builder::tier`], [`Builder::tier_by`], [`Builder::reconfigurable`]):
/// the [`TokenBucket`], the [`FixedWindow`], the [`SlidingWindowCounter`],
/// two of them held together ([`Both`]), and a [`Tiered`] limiter of any of
/// these (to which more tiers may be added). The
/// [`SlidingWindowLog`] has no tiers.
///
/// # Examples
///
/// ```
/// use tollgate::{Both, FixedWindow, Tierable, TokenBucket};
///
/// fn has_tiers<A: Tierable>() {}
/// has_tiers::<TokenBucket>();
/// has_tiers::<Both<TokenBucket, FixedWindow>>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot have tiers",
    note = "tiers are offered by TokenBucket, FixedWindow, SlidingWindowCounter and a pair of them (Both)"
)]
pub trait Tierable {
    /// The algorithm each tier runs: the algorithm itself, or a tiered
    /// limiter's.
    type Base;
}

macro_rules! tierable {
    ($($algorithm:ty),*) => {$(
        impl Tierable for $algorithm {
            type Base = $algorithm;
        }
    )*};
}
tierable!(TokenBucket, FixedWindow, SlidingWindowCounter);

impl<A, B> Tierable for Both<A, B> {
    type Base = Self;
}

impl<A> Tierable for Tiered<A> {
    type Base = A;
}

impl<K, C> Builder<Tiered<TokenBucket>, K, C> {
    /// Tier 0's [`rate`](Builder::rate): the quota of every client whose
    /// tier has none of its own. Given before or after the tiers.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let second = Duration::from_secs(1);
    /// let limiter = TokenBucket::builder()
    ///     .tier(1, TokenBucket::builder().rate(100, second))
    ///     .rate(10, second)
    ///     .build()?;
    /// assert_eq!(limiter.check("alice").limit(), 10);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn rate(mut self, tokens: u64, per: Duration) -> Self {
        self.params.rate = Some((tokens, per));
        self
    }

    /// Tier 0's [`capacity`](Builder::capacity). Given before or after the
    /// tiers.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .reconfigurable()
    ///     .rate(1, Duration::from_secs(1))
    ///     .capacity(5)
    ///     .build()?;
    /// assert_eq!(limiter.check("alice").limit(), 5);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn capacity(mut self, tokens: u64) -> Self {
        self.params.capacity = Some(tokens);
        self
    }
}

impl<A, K, C> Builder<A, K, C> {
    // On another algorithm the compiler names the unmet bound,
    // `SlidingWindowLog: Tierable`, whose docs say which algorithms have
    // tiers.
    /// Gives the clients of `tier` a quota of their own: `quota`'s
    /// algorithm settings. This builder's own algorithm settings are tier
    /// 0's, the quota of every client whose tier has none; they may be
    /// given before or after the tiers. Which tier a new client belongs to
    /// is [`tier_by`](Builder::tier_by)'s answer. Every tier's quota can
    /// change while the limiter runs ([`Limiter::set_quota`](crate::Limiter::set_quota)).
    ///
    /// The clock and memory settings are the limiter's: given to `quota`
    /// they would not apply, so [`build`](Builder::build) rejects them
    /// ([`ConfigError::Conflict`], naming `tier.clock` or `tier.memory`).
    ///
    /// Tiers are offered by the algorithms that are [`Tierable`]; the
    /// [`SlidingWindowLog`] is not:
    ///
    /// ```compile_fail,E0599
    /// use std::time::Duration;
    /// use tollgate::SlidingWindowLog;
    ///
    /// let second = Duration::from_secs(1);
    /// let _ = SlidingWindowLog::builder()
    ///     .limit(10)
    ///     .window(second)
    ///     .tier(1, SlidingWindowLog::builder().limit(100).window(second));
    /// ```
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, SlidingWindowCounter};
    ///
    /// let minute = Duration::from_secs(60);
    /// let limiter = SlidingWindowCounter::builder()
    ///     .limit(60)
    ///     .window(minute)
    ///     .key_type::<u64>()
    ///     .tier(1, SlidingWindowCounter::builder().limit(600).window(minute))
    ///     .tier_by(|account: &u64| if *account < 1000 { 1 } else { 0 })
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// assert_eq!(limiter.check(&7).limit(), 600);
    /// assert_eq!(limiter.check(&4242).limit(), 60);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`build`](Builder::build) validates every tier's quota; an error in
    /// one names its field with `tier.` in front (`tier.limit`).
    #[must_use]
    pub fn tier<K2, C2>(
        self,
        tier: Tier,
        quota: Builder<A::Base, K2, C2>,
    ) -> Builder<Tiered<A::Base>, K, C>
    where
        A: Tierable,
    {
        let mut tiered = self.cast();
        match quota.quota_params() {
            Ok(quota) => {
                tiered.params.tiers.retain(|(t, _)| *t != tier);
                tiered.params.tiers.push((tier, quota));
            }
            Err(err) => tiered.conflict = tiered.conflict.or(Some(err.in_tier())),
        }
        tiered
    }

    /// Decides each new client's tier from its key, once, when its state
    /// is created; the tier is remembered with the state and never asked
    /// for again while the client is known (a client forgotten and seen
    /// again is asked again, and so is one a full limiter decides on
    /// untracked, on each such check, since nothing of it is kept; racing
    /// first requests of one client may each ask once, and one state
    /// wins). A tier with no quota of its own ([`tier`](Builder::tier)) is
    /// held to tier 0's.
    ///
    /// So a change in what the resolver reads (a key upgraded in your own
    /// records) does not reach a client the limiter holds by itself: call
    /// [`Limiter::retier`](crate::Limiter::retier) for that client, which
    /// runs the resolver again and moves it, its state converted. A peek
    /// at a client the limiter does not hold (or
    /// [`tier_of`](crate::Limiter::tier_of) it) asks the resolver too,
    /// and keeps nothing.
    ///
    /// The resolver sets the limiter's key type to the one it takes (so
    /// [`key_type`](Builder::key_type) is not needed with it, and may come
    /// before or after it).
    ///
    /// The resolver runs on the check that brings a client in, before
    /// anything is recorded and outside every lock: if it panics, the
    /// panic reaches that check's caller, nothing of the client is kept,
    /// and the limiter goes on serving every other client (and this one,
    /// on its next check) as before.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(1))
    ///     .tier(1, TokenBucket::builder().rate(100, Duration::from_secs(1)))
    ///     .tier_by(|key: &String| u16::from(key.starts_with("internal-")))
    ///     .build()?;
    /// assert_eq!(limiter.check("internal-batch").limit(), 100);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn tier_by<K2: 'static>(
        self,
        resolver: impl Fn(&K2) -> Tier + Send + Sync + 'static,
    ) -> Builder<Tiered<A::Base>, K2, C>
    where
        A: Tierable,
    {
        let resolver: TierBy<K2> = Box::new(resolver);
        Builder {
            tier_by: Some(Box::new(resolver)),
            ..self.cast()
        }
    }

    /// A limiter whose quota can change while it runs
    /// ([`Limiter::set_quota`](crate::Limiter::set_quota)), with every client in tier 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::FixedWindow;
    ///
    /// let limiter = FixedWindow::builder()
    ///     .limit(100)
    ///     .window(Duration::from_secs(1))
    ///     .reconfigurable()
    ///     .build()?;
    /// limiter.set_quota(0, FixedWindow::builder().limit(10).window(Duration::from_secs(1)))?;
    /// assert_eq!(limiter.check("ann").limit(), 10);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn reconfigurable(self) -> Builder<Tiered<A::Base>, K, C>
    where
        A: Tierable,
    {
        self.cast()
    }
}
