//! Builders: one generic [`Builder`], with each algorithm's own settings in
//! an impl block of their own, and `build()` validating them all.

use core::fmt;
use core::hash::Hash;
use core::marker::PhantomData;
use core::time::Duration;

use crate::algorithm::{
    Both, FixedWindow, FromParams, Params, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use crate::cell::{Algorithm, Tier, Tiered};
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::limiter::{Limiter, TierBy};
use crate::memory::{AutoSweep, Memory, Overflow};

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
    /// A tiered limiter's resolver of a new client's tier.
    tier_by: Option<TierBy<K>>,
    _algorithm: PhantomData<fn() -> (A, K)>,
}

impl<A> Builder<A> {
    fn new() -> Self {
        Self {
            params: Params::default(),
            memory: Memory::default(),
            clock: Err(MonotonicClock::new),
            tier_by: None,
            _algorithm: PhantomData,
        }
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

/// Builder settings shared by the windowed algorithms.
pub trait Windowed: FromParams {}
impl Windowed for SlidingWindowCounter {}
impl Windowed for FixedWindow {}
impl Windowed for SlidingWindowLog {}

impl<A: Windowed, K, C> Builder<A, K, C> {
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
    pub fn limit(mut self, requests: u64) -> Self {
        self.params.limit = Some(requests);
        self
    }

    /// The window's length. Windows are aligned to the clock's origin:
    /// window `k` covers `[k·window, (k+1)·window)`. Required.
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
    pub fn window(mut self, window: Duration) -> Self {
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
    /// fixed window; `second`'s own algorithm settings are taken, and its
    /// key type, clock and memory settings ignored (this builder's apply).
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
    /// ```
    #[must_use]
    pub fn and<B, K2, C2>(self, second: Builder<B, K2, C2>) -> Builder<Both<A, B>, K, C>
    where
        Both<A, B>: Algorithm,
    {
        Builder {
            params: Params {
                second: Some(Box::new(second.params)),
                ..self.params
            },
            memory: self.memory,
            clock: self.clock,
            tier_by: self.tier_by,
            _algorithm: PhantomData,
        }
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
    /// A resolver of tiers given before ([`tier_by`](Builder::tier_by))
    /// takes the old key type, so it is dropped: give it after this.
    #[must_use]
    pub fn key_type<K2>(self) -> Builder<A, K2, C> {
        Builder {
            params: self.params,
            memory: self.memory,
            clock: self.clock,
            tier_by: None,
            _algorithm: PhantomData,
        }
    }

    /// A hard cap: the limiter holds at most `clients` clients at once.
    /// Unset by default (the map is then bounded by sweeping alone).
    ///
    /// A new client that finds the map full first makes idle clients go
    /// (which changes no decision); if there are none, the
    /// [`overflow`](Builder::overflow) policy decides, and
    /// [`Limiter::stats`] counts it. [`build`](Builder::build) rejects 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .max_clients(1_000_000)
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn max_clients(mut self, clients: u64) -> Self {
        self.memory.max_clients = Some(clients);
        self
    }

    /// What to do with a new client when the [`max_clients`](Builder::max_clients)
    /// cap is reached and no held client is idle. Defaults to
    /// [`Overflow::EvictSampled`] with a sample of 5, the only policy that
    /// may change a tracked client's decisions; see [`Overflow`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Overflow, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(60))
    ///     .max_clients(1)
    ///     .overflow(Overflow::AdmitUntracked)
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// assert!(limiter.allow_request("bob"), "admitted, untracked");
    /// assert!(limiter.allow_request("bob"), "and still untracked");
    /// assert!(!limiter.allow_request("alice"), "alice is tracked");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn overflow(mut self, policy: Overflow) -> Self {
        self.memory.overflow = policy;
        self
    }

    /// The pace of incremental sweeping: after every `every` new clients,
    /// the thread inserting the last visits `slice` entries of the map (from
    /// where the previous slice stopped) and forgets the idle ones. No
    /// background thread is involved, and known clients never sweep.
    ///
    /// The default is 64 and 256: four entries visited per new client,
    /// which keeps the map within about `slice / (slice − every)` = 4/3
    /// times the clients that are not idle, plus those that became idle
    /// since the cursor last passed. [`build`](Builder::build) requires
    /// `every ≥ 1` and `slice ≥ 2 · every`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::FixedWindow;
    ///
    /// let limiter = FixedWindow::builder()
    ///     .limit(10)
    ///     .window(Duration::from_secs(1))
    ///     .auto_sweep(16, 128)
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn auto_sweep(mut self, every: u64, slice: u64) -> Self {
        self.memory.auto_sweep = Some(AutoSweep { every, slice });
        self
    }

    /// Turns incremental sweeping off: only [`Limiter::sweep`] and a full
    /// cap forget clients. Without a [`max_clients`](Builder::max_clients)
    /// cap, the map then grows until `sweep` is called.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(1))
    ///     .no_auto_sweep()
    ///     .clock(clock.clone())
    ///     .build()?;
    /// for id in 0..100 {
    ///     let _ = limiter.allow_request(&id.to_string());
    /// }
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(limiter.len(), 100);
    /// assert_eq!(limiter.sweep(), 100);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn no_auto_sweep(mut self) -> Self {
        self.memory.auto_sweep = None;
        self
    }
}

/// An algorithm whose clients can be given quotas of their own
/// ([`Builder::tier`]): the [`TokenBucket`], the [`FixedWindow`], the
/// [`SlidingWindowCounter`], two of them held together ([`Both`]), and a
/// [`Tiered`] limiter of any of these.
pub trait Tierable: sealed::Tierable {}

mod sealed {
    /// The algorithm of each tier.
    pub trait Tierable {
        type Base;
    }
}

macro_rules! tierable {
    ($($algorithm:ty),*) => {$(
        impl sealed::Tierable for $algorithm {
            type Base = $algorithm;
        }
        impl Tierable for $algorithm {}
    )*};
}
tierable!(TokenBucket, FixedWindow, SlidingWindowCounter);

impl<A, B> sealed::Tierable for Both<A, B> {
    type Base = Self;
}
impl<A, B> Tierable for Both<A, B> {}

impl<A> sealed::Tierable for Tiered<A> {
    type Base = A;
}
impl<A> Tierable for Tiered<A> {}

impl<A: Tierable, K, C> Builder<A, K, C> {
    /// Gives the clients of `tier` a quota of their own: `quota`'s
    /// algorithm settings (its key type, clock and memory settings are
    /// ignored). The settings given so far are tier 0's, the quota of every
    /// client whose tier has none; give them before the first tier. Which
    /// tier a new client belongs to is [`tier_by`](Builder::tier_by)'s
    /// answer. Every tier's quota can change while the limiter runs
    /// ([`Limiter::set_quota`]).
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
    ) -> Builder<Tiered<A::Base>, K, C> {
        let mut params = self.params;
        params.tiers.retain(|(t, _)| *t != tier);
        params.tiers.push((tier, quota.params));
        Builder {
            params,
            memory: self.memory,
            clock: self.clock,
            tier_by: self.tier_by,
            _algorithm: PhantomData,
        }
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
    pub fn tier_by(
        self,
        resolver: impl Fn(&K) -> Tier + Send + Sync + 'static,
    ) -> Builder<Tiered<A::Base>, K, C> {
        Builder {
            params: self.params,
            memory: self.memory,
            clock: self.clock,
            tier_by: Some(Box::new(resolver)),
            _algorithm: PhantomData,
        }
    }

    /// A limiter whose quota can change while it runs
    /// ([`Limiter::set_quota`]), with every client in tier 0.
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
    pub fn reconfigurable(self) -> Builder<Tiered<A::Base>, K, C> {
        Builder {
            params: self.params,
            memory: self.memory,
            clock: self.clock,
            tier_by: self.tier_by,
            _algorithm: PhantomData,
        }
    }
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
    /// the setting.
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
        let algorithm = A::from_params(&self.params)?;
        let memory = self.memory.validate()?;
        let clock = self.clock.unwrap_or_else(|make| make());
        Ok(Limiter::new(algorithm, clock, memory).with_tier_by(self.tier_by))
    }
}

impl<A, K, C: fmt::Debug> fmt::Debug for Builder<A, K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("algorithm", &core::any::type_name::<A>())
            .field("params", &self.params)
            .field("memory", &self.memory)
            .field("clock", &self.clock.as_ref().ok())
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
