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
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[must_use = "a rate-limit decision does nothing unless its outcome is acted on"]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    pub(crate) allowed: bool,
    pub(crate) limit: u64,
    pub(crate) remaining: u64,
    pub(crate) retry_after: Duration,
}

impl Decision {
    /// A wait of `nanos` as a [`Duration`], with the algorithms' "never"
    /// as [`Duration::MAX`].
    pub(crate) fn wait(nanos: u64) -> Duration {
        if nanos == crate::algorithm::NEVER {
            Duration::MAX
        } else {
            Duration::from_nanos(nanos)
        }
    }

    /// Whether the request was admitted (for a peek: would be admitted).
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

    /// How many unit-cost requests the client could make right now, after
    /// this decision took effect (the `remaining` of a `RateLimit` header).
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
        self.retry_after
    }
}
