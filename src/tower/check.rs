//! The layer's one question to a limiter: the [`Check`] trait, and the
//! [`Quota`] a limiter enforces.

use core::fmt;
use core::future::{ready, Future, Ready};
use core::hash::Hash;
use core::time::Duration;
use std::error::Error as StdError;
use std::sync::Arc;

use crate::algorithm::FromParams;
use crate::cell::Algorithm;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::limiter::Limiter;

/// What the HTTP layer asks of a limiter: a [`Decision`] for a key, and the
/// [`Quota`] it enforces (for the `RateLimit-Policy` header).
///
/// Every [`Limiter`] implements it, whatever its algorithm, key and clock,
/// with a future that is ready at once; so does an `Arc` of any `Check`.
/// The decision is a future so that a limiter whose state lives in another
/// process can implement the trait too and plug into
/// [`RateLimitLayer`](super::RateLimitLayer) without any change to the
/// layer: the layer polls the future once as it handles the request, and
/// only if that poll is pending does it keep the request aside until the
/// decision arrives.
///
/// # Examples
///
/// A check that delegates to a limiter and counts what it sees:
///
/// ```
/// use std::future::{ready, Ready};
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
/// use tollgate::tower::{Check, CheckError, Quota};
/// use tollgate::{Decision, Limiter, TokenBucket};
///
/// #[derive(Debug)]
/// struct Counted {
///     limiter: Limiter<TokenBucket>,
///     seen: AtomicU64,
/// }
///
/// impl Check<String> for Counted {
///     type Future = Ready<Result<Decision, CheckError>>;
///
///     fn check(&self, key: &String, cost: u64) -> Self::Future {
///         self.seen.fetch_add(1, Ordering::Relaxed);
///         Check::check(&self.limiter, key, cost)
///     }
///
///     fn quota(&self) -> Quota {
///         self.limiter.quota()
///     }
/// }
///
/// let counted = Counted {
///     limiter: TokenBucket::builder().rate(5, Duration::from_secs(1)).build()?,
///     seen: AtomicU64::new(0),
/// };
/// assert_eq!(counted.quota(), Quota::new(5, Duration::from_secs(1)));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub trait Check<K: ?Sized>: Send + Sync + 'static {
    /// The decision, once made. In-process limiters answer with
    /// [`Ready`]; a remote one may answer later.
    type Future: Future<Output = Result<Decision, CheckError>> + Send + Unpin + 'static;

    /// Checks, and if admitted records, a request of `cost` units from
    /// `key`. The layer sends a cost of 1.
    fn check(&self, key: &K, cost: u64) -> Self::Future;

    /// The quota this limiter grants per window: the `q` and `w` of the
    /// `RateLimit-Policy` header.
    fn quota(&self) -> Quota;
}

impl<A, K, C> Check<K> for Limiter<A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
{
    type Future = Ready<Result<Decision, CheckError>>;

    #[inline]
    fn check(&self, key: &K, cost: u64) -> Self::Future {
        let decision = if cost == 1 {
            Ok(Limiter::check(self, key))
        } else {
            Limiter::check_n(self, key, cost).map_err(CheckError::new)
        };
        ready(decision)
    }

    fn quota(&self) -> Quota {
        Limiter::quota(self)
    }
}

impl<K: ?Sized, T: Check<K> + ?Sized> Check<K> for Arc<T> {
    type Future = T::Future;

    #[inline]
    fn check(&self, key: &K, cost: u64) -> Self::Future {
        T::check(self, key, cost)
    }

    fn quota(&self) -> Quota {
        T::quota(self)
    }
}

impl<A, K, C> Limiter<A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// The quota this limiter grants: `limit` requests per `window`. For
    /// the windowed algorithms, their limit and window; for the token
    /// bucket, its capacity and the time to refill it from empty (so a
    /// bucket of 10 refilled at 10 per minute grants 10 per minute).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::tower::Quota;
    /// use tollgate::{SlidingWindowLog, TokenBucket};
    ///
    /// let bucket = TokenBucket::builder().rate(10, Duration::from_secs(60)).build()?;
    /// assert_eq!(bucket.quota(), Quota::new(10, Duration::from_secs(60)));
    /// let log = SlidingWindowLog::builder().limit(3).window(Duration::from_secs(5)).build()?;
    /// assert_eq!(log.quota(), Quota::new(3, Duration::from_secs(5)));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn quota(&self) -> Quota {
        let (limit, window) = FromParams::granted(self.algorithm());
        Quota::new(limit, Duration::from_nanos(window))
    }
}

/// A limiter's quota: `limit` units per `window`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::tower::Quota;
///
/// let quota = Quota::new(100, Duration::from_secs(60));
/// assert_eq!((quota.limit(), quota.window()), (100, Duration::from_secs(60)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u64,
    window: Duration,
}

impl Quota {
    /// `limit` units per `window`.
    #[must_use]
    pub const fn new(limit: u64, window: Duration) -> Self {
        Self { limit, window }
    }

    /// The units granted per window (the header's `q`).
    #[must_use]
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The window (the header's `w`, in whole seconds there).
    #[must_use]
    pub const fn window(&self) -> Duration {
        self.window
    }
}

/// A check that could not be made: a cost the limiter can never admit, or,
/// for a limiter in another process, a failure to reach it. The layer
/// answers such a request with `503 Service Unavailable` and does not call
/// the inner service.
///
/// # Examples
///
/// ```
/// use tollgate::tower::CheckError;
///
/// let err = CheckError::new(std::io::Error::other("store unreachable"));
/// assert_eq!(err.to_string(), "rate limit check failed: store unreachable");
/// ```
#[derive(Debug)]
pub struct CheckError(Box<dyn StdError + Send + Sync>);

impl CheckError {
    /// Wraps the cause.
    pub fn new(cause: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self(cause.into())
    }
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate limit check failed: {}", self.0)
    }
}

impl StdError for CheckError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.0)
    }
}
