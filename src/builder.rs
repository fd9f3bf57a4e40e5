//! Builders: one generic [`Builder`], with each algorithm's own settings in
//! an impl block of their own, and `build()` validating them all.
//!
//! The top of the public layer: it makes a [`Limiter`], and nothing below
//! it names a builder.

use core::any::Any;
use core::fmt;
use core::hash::Hash;
use core::marker::PhantomData;
use core::time::Duration;
use std::borrow::Cow;

use crate::algorithm::{
    Both, FixedWindow, Params, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use crate::cell::{Algorithm, Tiered};
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::limiter::{Limiter, TierBy};
use crate::memory::Memory;

mod direct;
mod memory;
mod tiers;
pub use tiers::Tierable;

/// Builds a [`Limiter`] for the algorithm `A`, keyed by `K`, reading time
/// from `C`.
///
/// Start from the algorithm: [`TokenBucket::builder`],
/// [`SlidingWindowCounter::builder`], [`SlidingWindowLog::builder`] or
/// [`FixedWindow::builder`]. Keys
/// default to `String` (checked with a `&str`) and time to
/// [`MonotonicClock`].
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use std::time::Duration;
/// use tollgate::{ManualClock, TokenBucket};
///
/// let limiter = TokenBucket::builder()
///     .rate(100, Duration::from_secs(60))
///     .capacity(10)
///     .key_type::<IpAddr>()
///     .clock(ManualClock::new())
///     .build()?;
/// assert!(limiter.allow_request(&IpAddr::from([127, 0, 0, 1])));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub struct Builder<A, K = String, C = MonotonicClock> {
    pub(crate) params: Params,
    pub(crate) memory: Memory,
    /// The clock given, or how to make the default one: it is built only by
    /// [`Builder::build`], and only if no clock was given, since creating a
    /// [`MonotonicClock`] calibrates the CPU's counter.
    clock: Result<C, fn() -> C>,
    /// A tiered limiter's resolver of a new client's tier: a `TierBy<K2>`
    /// for the key type `K2` it was given for, which [`Builder::build`]
    /// holds to `K` (so that a later `key_type` cannot drop it unseen).
    tier_by: Option<Box<dyn Any + Send + Sync>>,
    /// A setting given where it would not apply, reported by `build`.
    conflict: Option<ConfigError>,
    /// The limiter's name, if given ([`Builder::name`]).
    pub(crate) name: Option<Cow<'static, str>>,
    _algorithm: PhantomData<fn() -> (A, K)>,
}

impl<A> Builder<A> {
    fn new() -> Self {
        Self {
            params: Params::default(),
            memory: Memory::default(),
            clock: Err(MonotonicClock::new),
            tier_by: None,
            conflict: None,
            name: None,
            _algorithm: PhantomData,
        }
    }
}

impl<A, K, C> Builder<A, K, C> {
    /// The same settings, for another algorithm type or key type.
    fn cast<A2, K2>(self) -> Builder<A2, K2, C> {
        Builder {
            params: self.params,
            memory: self.memory,
            clock: self.clock,
            tier_by: self.tier_by,
            conflict: self.conflict,
            name: self.name,
            _algorithm: PhantomData,
        }
    }

    /// The algorithm settings alone, for a second limit or a tier's quota
    /// (whose clock, memory settings and resolver would not apply): an
    /// error naming the first such setting given.
    pub(crate) fn quota_params(self) -> Result<Params, ConfigError> {
        if let Some(conflict) = self.conflict {
            return Err(conflict);
        }
        let conflict = |field, reason| Err(ConfigError::Conflict { field, reason });
        if self.clock.is_ok() {
            return conflict(
                "clock",
                "the limiter reads one clock: give it to the limiter's builder",
            );
        }
        if self.memory != Memory::default() {
            return conflict(
                "memory",
                "the memory settings (`max_clients`, `overflow`, `auto_sweep`) are the limiter's: give them to its builder",
            );
        }
        if self.tier_by.is_some() {
            return conflict(
                "tier_by",
                "tiers are the limiter's: give the resolver to its builder",
            );
        }
        if self.name.is_some() {
            return conflict(
                "name",
                "the name is the limiter's: give it to the limiter's builder",
            );
        }
        Ok(self.params)
    }
}

/// What a Redis limiter's builder needs to know of this one's settings
/// that it would not apply.
#[cfg(feature = "redis")]
impl<A, K, C> Builder<A, K, C> {
    /// The setting given where it would not apply, if any.
    pub(crate) fn conflict(&self) -> Option<ConfigError> {
        self.conflict.clone()
    }

    /// Whether a clock was given.
    pub(crate) fn has_clock(&self) -> bool {
        self.clock.is_ok()
    }

    /// Whether a resolver of tiers was given.
    pub(crate) fn has_tier_by(&self) -> bool {
        self.tier_by.is_some()
    }
}

impl TokenBucket {
    /// Starts a token bucket limiter. Set [`rate`](Builder::rate), and
    /// optionally [`capacity`](Builder::capacity).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .capacity(20)
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn builder() -> Builder<TokenBucket> {
        Builder::new()
    }
}

impl SlidingWindowCounter {
    /// Starts a sliding window counter limiter. Set
    /// [`limit`](Builder::limit) and [`window`](Builder::window).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::SlidingWindowCounter;
    ///
    /// let limiter = SlidingWindowCounter::builder()
    ///     .limit(100)
    ///     .window(Duration::from_secs(60))
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn builder() -> Builder<SlidingWindowCounter> {
        Builder::new()
    }
}

impl FixedWindow {
    /// Starts a fixed window limiter. Set [`limit`](Builder::limit) and
    /// [`window`](Builder::window).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::FixedWindow;
    ///
    /// let limiter = FixedWindow::builder()
    ///     .limit(100)
    ///     .window(Duration::from_secs(60))
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn builder() -> Builder<FixedWindow> {
        Builder::new()
    }
}

impl SlidingWindowLog {
    /// Starts a sliding window log limiter. Set [`limit`](Builder::limit)
    /// (at most [`SlidingWindowLog::MAX_LIMIT`]) and
    /// [`window`](Builder::window).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::SlidingWindowLog;
    ///
    /// let limiter = SlidingWindowLog::builder()
    ///     .limit(100)
    ///     .window(Duration::from_secs(60))
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn builder() -> Builder<SlidingWindowLog> {
        Builder::new()
    }
}

impl<K, C> Builder<TokenBucket, K, C> {
    /// Refill `tokens` tokens every `per`, continuously: one token each
    /// `per / tokens`. Required.
    ///
    /// At most one token per nanosecond. When `per / tokens` is not a whole
    /// number of nanoseconds it is rounded up, so the limiter errs toward
    /// denying.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let builder = TokenBucket::builder().rate(5, Duration::from_secs(1));
    /// # let _ = builder.build()?;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn rate(mut self, tokens: u64, per: Duration) -> Self {
        self.params.rate = Some((tokens, per));
        self
    }

    /// The most tokens the bucket holds: the largest burst, and the largest
    /// cost a single check may ask for. Defaults to the `tokens` of
    /// [`rate`](Builder::rate).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(1))
    ///     .capacity(3)
    ///     .build()?;
    /// assert_eq!(limiter.check("alice").limit(), 3);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn capacity(mut self, tokens: u64) -> Self {
        self.params.capacity = Some(tokens);
        self
    }

    /// Holds every client to a second token bucket as well, of `tokens`
    /// per `per` (holding `tokens`): a request is admitted only if both
    /// buckets admit it, and is then charged to both. Shorthand for
    /// [`and`](Builder::and) with `TokenBucket::builder().rate(tokens, per)`;
    /// use that to give the second bucket its own capacity.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, TokenBucket};
    ///
    /// // 10 per second, and 1000 per hour.
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .and_rate(1000, Duration::from_secs(3600))
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let admitted = (0..20).filter(|_| limiter.allow_request("alice")).count();
    /// assert_eq!(admitted, 10);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`build`](Builder::build) rejects a second rate that a bucket could
    /// not hold, naming the field `and.rate` (or `and.capacity`).
    #[must_use]
    pub fn and_rate(
        self,
        tokens: u64,
        per: Duration,
    ) -> Builder<Both<TokenBucket, TokenBucket>, K, C> {
        self.and(TokenBucket::builder().rate(tokens, per))
    }
}

/// An algorithm set by a limit and a window
/// ([`limit`](Builder::limit), [`window`](Builder::window)): the
/// [`SlidingWindowCounter`], the [`FixedWindow`], the [`SlidingWindowLog`],
/// and a [`Tiered`] limiter of the first two (whose tier 0 they set).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Builder, FixedWindow, Windowed};
///
/// fn per_minute<A: Windowed>(builder: Builder<A>, requests: u64) -> Builder<A> {
///     builder.limit(requests).window(Duration::from_secs(60))
/// }
/// let limiter = per_minute(FixedWindow::builder(), 100).build()?;
/// assert_eq!(limiter.check("alice").limit(), 100);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no limit and window",
    note = "a token bucket is set by `rate` and `capacity`; `limit` and `window` set a SlidingWindowCounter, a FixedWindow or a SlidingWindowLog"
)]
pub trait Windowed {}
impl Windowed for SlidingWindowCounter {}
impl Windowed for FixedWindow {}
impl Windowed for SlidingWindowLog {}
impl Windowed for Tiered<SlidingWindowCounter> {}
impl Windowed for Tiered<FixedWindow> {}

impl<A, K, C> Builder<A, K, C> {
    // Each method states `A: Windowed` itself, so that the compiler's error
    // on a token bucket is the trait's own note.
    /// The most requests a client may make per window. Required.
    ///
    /// The state word holds the window index beside the counts, so the
    /// largest limit depends on the window; [`build`](Builder::build) names
    /// it when a limit does not fit.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::SlidingWindowCounter;
    ///
    /// let err = SlidingWindowCounter::builder()
    ///     .limit(1 << 20)
    ///     .window(Duration::from_secs(1))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "limit");
    /// ```
    #[must_use]
    pub fn limit(mut self, requests: u64) -> Self
    where
        A: Windowed,
    {
        self.params.limit = Some(requests);
        self
    }

    /// The window's length. Windows start on whole multiples of it in Unix
    /// time (an hourly window resets on the hour), as on Redis: see
    /// [`Clock::unix_origin`]. Required.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::FixedWindow;
    ///
    /// let builder = FixedWindow::builder().limit(10).window(Duration::from_secs(1));
    /// # let _ = builder.build()?;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn window(mut self, window: Duration) -> Self
    where
        A: Windowed,
    {
        self.params.window = Some(window);
        self
    }
}

impl<A, K, C> Builder<A, K, C> {
    /// Holds every client to a second limit as well: a request is admitted
    /// only if both limits admit it, and is then charged to both; a denial
    /// charges neither. The two states change together, by one 128-bit
    /// compare-and-swap, so no thread can slip a request between them.
    ///
    /// Either limit may be a token bucket, a sliding window counter or a
    /// fixed window. `second` gives the second limit's algorithm settings
    /// only: the clock and the memory settings are the pair's, given to
    /// this builder (before or after `and`). A clock or a memory setting
    /// given to `second` would not apply, so [`build`](Builder::build)
    /// rejects it ([`ConfigError::Conflict`], naming `and.clock` or
    /// `and.memory`); `second`'s key type plays no part.
    /// A [`Decision`](crate::Decision) reports the limit that binds: the
    /// one with the fewer remaining (the smaller on a tie), the smaller
    /// remaining, and the longer wait.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, ManualClock, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// // Bursts of 5 at 1 per second, and at most 8 in any clock hour.
    /// let limiter = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(1))
    ///     .capacity(5)
    ///     .and(FixedWindow::builder().limit(8).window(Duration::from_secs(3600)))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// assert_eq!((0..10).filter(|_| limiter.allow_request("bob")).count(), 5);
    /// clock.advance(Duration::from_secs(60));
    /// assert_eq!((0..10).filter(|_| limiter.allow_request("bob")).count(), 3);
    /// let denied = limiter.check("bob");
    /// assert_eq!(denied.limit(), 8);
    /// assert_eq!(denied.retry_after(), Duration::from_secs(3540));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`build`](Builder::build) validates both limits; an error in the
    /// second names its field with `and.` in front (`and.limit`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, TokenBucket};
    ///
    /// let err = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .and(FixedWindow::builder().limit(0).window(Duration::from_secs(1)))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "and.limit");
    ///
    /// // The pair reads one clock: give it to the pair.
    /// let err = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .and(FixedWindow::builder().limit(5).window(Duration::from_secs(1)).clock(ManualClock::new()))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "and.clock");
    /// # use tollgate::ManualClock;
    /// ```
    #[must_use]
    pub fn and<B, K2, C2>(self, second: Builder<B, K2, C2>) -> Builder<Both<A, B>, K, C>
    where
        Both<A, B>: Algorithm,
    {
        let mut pair = self.cast();
        match second.quota_params() {
            Ok(second) => pair.params.second = Some(Box::new(second)),
            Err(err) => {
                pair.conflict = pair.conflict.or(Some(err.in_second()));
            }
        }
        pair
    }

    /// Reads time from `clock` instead of a [`MonotonicClock`]: a
    /// [`ManualClock`](crate::ManualClock) in tests, or your own [`Clock`].
    /// The default clock is then never created (creating one calibrates the
    /// CPU's time-stamp counter).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = FixedWindow::builder()
    ///     .limit(1)
    ///     .window(Duration::from_secs(1))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// assert!(limiter.allow_request("a"));
    /// assert!(!limiter.allow_request("a"));
    /// clock.advance(Duration::from_secs(1));
    /// assert!(limiter.allow_request("a"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn clock<C2: Clock>(self, clock: C2) -> Builder<A, K, C2> {
        Builder {
            params: self.params,
            memory: self.memory,
            clock: Ok(clock),
            tier_by: self.tier_by,
            conflict: self.conflict,
            name: self.name,
            _algorithm: PhantomData,
        }
    }

    /// Keys clients by `K2` instead of `String`: `u64`, `IpAddr`, or any
    /// `Hash + Eq + Clone` type of your own.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::FixedWindow;
    ///
    /// let limiter = FixedWindow::builder()
    ///     .limit(1)
    ///     .window(Duration::from_secs(1))
    ///     .key_type::<u64>()
    ///     .build()?;
    /// assert!(limiter.allow_request(&42));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    ///
    /// A resolver of tiers ([`tier_by`](Builder::tier_by)) may be given
    /// before or after this. It sets the key type itself, to the one it
    /// takes; [`build`](Builder::build) rejects a resolver that takes
    /// another key type than the limiter's ([`ConfigError::Conflict`],
    /// naming `tier_by`), rather than drop it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(1))
    ///     .tier(1, TokenBucket::builder().rate(100, Duration::from_secs(1)))
    ///     .tier_by(|key: &String| u16::from(key.starts_with("pro-")))
    ///     .key_type::<String>()
    ///     .build()?;
    /// assert_eq!(limiter.check("pro-1").limit(), 100);
    ///
    /// let err = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(1))
    ///     .tier_by(|key: &String| u16::from(key.starts_with("pro-")))
    ///     .key_type::<u64>()
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "tier_by");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn key_type<K2>(self) -> Builder<A, K2, C> {
        self.cast()
    }

    /// Names the limiter: the `limiter` label of its series with the
    /// `metrics` feature, and the `limiter` field of its events with the
    /// `tracing` feature (see the [observability
    /// guide](crate::guide::observability)). Any non-empty string, used as
    /// given; [`build`](Builder::build) rejects an empty one. A limiter
    /// given no name is named `"default"`, in every release; limiters that
    /// share a name add up in its series.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let login = TokenBucket::builder()
    ///     .rate(5, Duration::from_secs(60))
    ///     .name("login")
    ///     .build()?;
    /// assert_eq!(login.name(), "login");
    /// let api = TokenBucket::builder().rate(100, Duration::from_secs(1)).build()?;
    /// assert_eq!(api.name(), "default");
    ///
    /// let err = TokenBucket::builder().rate(1, Duration::from_secs(1)).name("").build().unwrap_err();
    /// assert_eq!(err.field(), "name");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn name(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// A builder's name, validated: the one given, or `"default"`.
pub(crate) fn valid_name(
    name: Option<Cow<'static, str>>,
) -> Result<Cow<'static, str>, ConfigError> {
    let name = name.unwrap_or(Cow::Borrowed("default"));
    ConfigError::check_range(
        "name",
        name.len() as u128,
        (1, u128::from(u64::MAX)),
        "bytes",
        "a limiter's name labels its series and events: it must not be empty",
    )?;
    Ok(name)
}

impl<A, K, C> Builder<A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// Validates the settings and builds the limiter.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Missing`] if a required setting was never given, and
    /// [`ConfigError::OutOfRange`] if one is zero or too large for the
    /// algorithm's state word, or if a memory setting
    /// ([`max_clients`](Builder::max_clients), [`overflow`](Builder::overflow),
    /// [`auto_sweep`](Builder::auto_sweep)) is out of its range; both name
    /// the setting. [`ConfigError::Conflict`] if a setting was given where
    /// it would not apply (see [`and`](Builder::and),
    /// [`tier`](Builder::tier) and [`key_type`](Builder::key_type)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ConfigError, TokenBucket};
    ///
    /// assert_eq!(
    ///     TokenBucket::builder().build().unwrap_err(),
    ///     ConfigError::Missing { field: "rate" },
    /// );
    /// let err = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(1))
    ///     .capacity(0)
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "capacity");
    /// ```
    pub fn build(self) -> Result<Limiter<A, K, C>, ConfigError> {
        if let Some(conflict) = self.conflict {
            return Err(conflict);
        }
        let tier_by = match self.tier_by.map(|any| any.downcast::<TierBy<K>>()) {
            None => None,
            Some(Ok(tier_by)) => Some(*tier_by),
            Some(Err(_)) => {
                return Err(ConfigError::Conflict {
                    field: "tier_by",
                    reason: "the resolver takes another key type than the limiter's (`key_type`)",
                })
            }
        };
        let name = valid_name(self.name)?;
        let clock = self.clock.unwrap_or_else(|make| make());
        let mut params = self.params;
        params.on_origin(crate::clock::unix_nanos(clock.unix_origin()));
        let algorithm = A::from_settings(&params)?;
        let memory = self.memory.validate()?;
        Ok(Limiter::new(algorithm, clock, memory)
            .with_tier_by(tier_by)
            .named(name))
    }
}

impl<A, K, C: fmt::Debug> fmt::Debug for Builder<A, K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("algorithm", &core::any::type_name::<A>())
            .field("params", &self.params)
            .field("memory", &self.memory)
            .field("clock", &self.clock.as_ref().ok())
            .field("name", &self.name)
            .finish()
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use core::time::Duration;

    use crate::clock::tests::MONOTONIC_CLOCKS_MADE;
    use crate::{ManualClock, TokenBucket};

    fn made() -> u64 {
        MONOTONIC_CLOCKS_MADE.with(std::cell::Cell::get)
    }

    #[test]
    fn the_default_clock_is_made_only_when_no_clock_is_given() {
        let before = made();
        let limiter = TokenBucket::builder()
            .rate(1, Duration::from_secs(1))
            .clock(ManualClock::new())
            .build()
            .unwrap();
        assert!(limiter.allow_request("a"));
        assert_eq!(made(), before, "a supplied clock built the default one too");
        let builder = TokenBucket::builder().rate(1, Duration::from_secs(1));
        assert_eq!(made(), before, "a builder makes no clock before `build`");
        let _ = builder.build().unwrap();
        assert_eq!(made(), before + 1);
    }
}
