//! What a check answers.

use core::time::Duration;

/// The outcome of one check: whether it was admitted, and the figures a
/// server puts in its `RateLimit` and `Retry-After` headers.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::TokenBucket;
///
/// let limiter = TokenBucket::builder()
///     .rate(1, Duration::from_secs(1))
///     .capacity(2)
///     .build()?;
/// let first = limiter.check("alice");
/// assert!(first.is_allowed());
/// assert_eq!((first.limit(), first.remaining()), (2, 1));
///
/// let _ = limiter.check("alice");
/// let third = limiter.check("alice");
/// assert!(third.is_denied());
/// assert!(third.retry_after() > Duration::from_millis(900));
/// // More quota arrives when the first token has refilled.
/// assert_eq!(third.replenish_after(), third.retry_after());
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[must_use = "a rate-limit decision does nothing unless its outcome is acted on"]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    pub(crate) allowed: bool,
    pub(crate) limit: u64,
    pub(crate) remaining: u64,
    // The waits and the window in nanoseconds, as the algorithms compute
    // them (a wait of `NEVER` reads as `Duration::MAX`), rather than as
    // `Duration`s: 120 bytes in all instead of 144, so that the moves of
    // a decision on its way to a caller (and the HTTP layer's into the
    // request's extensions) stay inline copies.
    /// Nanoseconds, or the algorithms' "never".
    pub(crate) retry_after: u64,
    /// Nanoseconds, or the algorithms' "never".
    pub(crate) replenish_after: u64,
    /// Nanoseconds.
    pub(crate) window: u64,
    /// For two limits held together, each limit's own figures.
    pub(crate) pair: Option<[LimitFigures; 2]>,
}

impl Decision {
    /// A decision on one limit from `Duration`s (the Redis limiters'),
    /// each wait of 2<sup>64</sup> − 1 ns or more (584 years) being
    /// "never".
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn new(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_after: Duration,
        replenish_after: Duration,
        window: Duration,
    ) -> Self {
        Self {
            allowed,
            limit,
            remaining,
            retry_after: Self::nanos(retry_after),
            replenish_after: Self::nanos(replenish_after),
            window: Self::nanos(window),
            pair: None,
        }
    }

    /// `d` in nanoseconds, saturating at "never".
    fn nanos(d: Duration) -> u64 {
        u64::try_from(d.as_nanos()).unwrap_or(crate::algorithm::NEVER)
    }

    /// Applies `f` to both waits (the Redis limiters round them to whole
    /// microseconds).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn map_waits(&mut self, f: impl Fn(Duration) -> Duration) {
        self.retry_after = Self::nanos(f(self.retry_after()));
        self.replenish_after = Self::nanos(f(self.replenish_after()));
    }

    /// A wait of `nanos` as a [`Duration`], with the algorithms' "never"
    /// as [`Duration::MAX`].
    pub(crate) fn wait(nanos: u64) -> Duration {
        if nanos == crate::algorithm::NEVER {
            Duration::MAX
        } else {
            Duration::from_nanos(nanos)
        }
    }

    /// Whether the request was admitted (for a peek: would be admitted by
    /// a check made now).
    #[must_use]
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// Whether the request was refused.
    #[must_use]
    pub fn is_denied(&self) -> bool {
        !self.allowed
    }

    /// The most the client may spend at once: the bucket's capacity or the
    /// window's limit (the `limit` of a `RateLimit` header).
    #[must_use]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// How many unit-cost requests the client could make right now (the
    /// `remaining` of a `RateLimit` header): for a check, after it took
    /// effect (an admission has been taken); for a peek, which takes
    /// nothing, as the quota stands.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder().rate(3, Duration::from_secs(60)).build()?;
    /// assert_eq!(limiter.peek("alice").remaining(), 3, "held now");
    /// assert_eq!(limiter.check("alice").remaining(), 2, "left after this check");
    /// assert_eq!(limiter.peek("alice").remaining(), 2);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// How long until this same request would be admitted, if nothing else
    /// arrives for the client in between (the `Retry-After` header, rounded
    /// up to whole seconds there). Zero when the request was admitted.
    ///
    /// [`Duration::MAX`] means never: the request could pass only after the
    /// last instant the limiter distinguishes (2<sup>63</sup> − 1 ns after
    /// the clock's origin, 292 years), which no reading reaches.
    #[must_use]
    pub fn retry_after(&self) -> Duration {
        Self::wait(self.retry_after)
    }

    /// How long until the client's quota next grows, if nothing else
    /// arrives for it in between: the first instant at which
    /// [`remaining`](Decision::remaining) would report one more than now
    /// (the `t` of a `RateLimit` header). Zero when the quota is already
    /// full (`remaining() == limit()`), since it cannot grow.
    ///
    /// Unlike [`retry_after`](Decision::retry_after), it is set on admitted
    /// requests too. On a denial it is never later than `retry_after`, and
    /// equal to it for a unit-cost request. For the token bucket it is when
    /// the next token has refilled, for the fixed window the next window's
    /// start, for the sliding window counter the instant the previous
    /// window's weight has decayed enough for one more request, and for the
    /// log the earliest expiry of a logged admission.
    /// [`Duration::MAX`] means never, as for `retry_after`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = FixedWindow::builder()
    ///     .limit(10)
    ///     .window(Duration::from_secs(60))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// clock.advance(Duration::from_secs(15));
    /// let d = limiter.check("alice");
    /// assert!(d.is_allowed());
    /// assert_eq!(d.retry_after(), Duration::ZERO);
    /// // The count resets with the next window, 45 s from now.
    /// assert_eq!(d.replenish_after(), Duration::from_secs(45));
    /// // A client with its whole quota has nothing to wait for.
    /// assert_eq!(limiter.peek_n("bob", 0).unwrap().replenish_after(), Duration::ZERO);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn replenish_after(&self) -> Duration {
        Self::wait(self.replenish_after)
    }

    /// The window of the quota that decided, over which it grants
    /// [`limit`](Decision::limit) (the `w` of a `RateLimit-Policy`
    /// header): the window of a sliding or fixed window, and for the token
    /// bucket the time to refill it from empty. For a client held to its
    /// own tier's quota, that quota's; for two limits, the binding one's.
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
    /// let d = limiter.check("alice");
    /// assert_eq!((d.limit(), d.window()), (20, Duration::from_secs(2)));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    /// For a client held to two limits at once ([`Both`](crate::Both)),
    /// each limit's own figures, the first limit's first; `None` for one
    /// limit. The decision's own [`limit`](Decision::limit),
    /// [`remaining`](Decision::remaining) and
    /// [`replenish_after`](Decision::replenish_after) mix the two (the
    /// binding limit's quota, the smaller remainder, the later growth);
    /// these keep them apart, so that each limit can be advertised as its
    /// own policy.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, ManualClock};
    ///
    /// let limiter = FixedWindow::builder()
    ///     .limit(3)
    ///     .window(Duration::from_secs(1))
    ///     .and(FixedWindow::builder().limit(5).window(Duration::from_secs(60)))
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let [second, minute] = limiter.check("alice").pair_limits().unwrap();
    /// assert_eq!((second.limit(), second.remaining()), (3, 2));
    /// assert_eq!(second.replenish_after(), Duration::from_secs(1));
    /// assert_eq!((minute.limit(), minute.remaining(), minute.window()), (5, 4, Duration::from_secs(60)));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn pair_limits(&self) -> Option<[LimitFigures; 2]> {
        self.pair
    }
}

/// One limit's figures in a decision on two limits held together: see
/// [`Decision::pair_limits`]. Each means what the [`Decision`] method of
/// the same name means, for this limit alone.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::TokenBucket;
///
/// let limiter = TokenBucket::builder()
///     .rate(10, Duration::from_secs(1))
///     .and_rate(100, Duration::from_secs(60))
///     .build()?;
/// let [burst, sustained] = limiter.check("alice").pair_limits().unwrap();
/// assert_eq!((burst.limit(), burst.remaining()), (10, 9));
/// assert_eq!((sustained.limit(), sustained.remaining()), (100, 99));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LimitFigures {
    limit: u64,
    remaining: u64,
    /// Nanoseconds, or the algorithms' "never".
    replenish_after: u64,
    /// Nanoseconds.
    window: u64,
}

impl LimitFigures {
    /// A limit's figures: its capacity, its remainder, the wait until it
    /// grows (nanoseconds, or "never") and its window (nanoseconds).
    pub(crate) fn new(limit: u64, remaining: u64, replenish_after: u64, window: u64) -> Self {
        Self {
            limit,
            remaining,
            replenish_after,
            window,
        }
    }

    /// The most this limit lets the client spend at once.
    #[must_use]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The unit-cost requests this limit would still admit.
    #[must_use]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// How long until this limit's quota next grows
    /// ([`Duration::MAX`]: never; zero when it is full).
    #[must_use]
    pub fn replenish_after(&self) -> Duration {
        Decision::wait(self.replenish_after)
    }

    /// The window over which this limit grants [`limit`](LimitFigures::limit).
    #[must_use]
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    /// Moves of up to 128 bytes are inline copies on x86-64 rather than
    /// calls to `memcpy`: a decision is moved several times on its way
    /// from the check to a caller (the HTTP layer's, into a request's
    /// extensions).
    #[test]
    fn a_decision_fits_in_128_bytes() {
        assert!(core::mem::size_of::<Decision>() <= 128);
        assert!(core::mem::size_of::<Result<Decision, crate::CheckError>>() <= 128);
    }

    #[test]
    fn waits_beyond_u64_nanoseconds_are_never() {
        let secs = |s| Duration::from_secs(s);
        let d = Decision::new(false, 5, 0, Duration::MAX, secs(u64::MAX / 2), secs(60));
        assert_eq!(d.retry_after(), Duration::MAX);
        assert_eq!(d.replenish_after(), Duration::MAX);
        assert_eq!(d.window(), secs(60));
        let mut d = Decision::new(false, 5, 0, secs(3), Duration::from_nanos(1_500), secs(60));
        d.map_waits(|w| w * 2);
        assert_eq!(
            (d.retry_after(), d.replenish_after()),
            (secs(6), Duration::from_nanos(3_000))
        );
    }
}
