//! The async-ready check: the [`AsyncCheck`] trait that every limiter, in
//! this process or in a shared store, answers; the [`Quota`] it enforces;
//! and the [`CheckError`] of a check that could not be made.

use core::fmt;
use core::future::{ready, Future, Ready};
use core::hash::Hash;
use core::time::Duration;
use std::error::Error as StdError;
use std::sync::Arc;

use crate::cell::Algorithm;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::limiter::Limiter;

/// A limiter asked through a future: a [`Decision`] for a key and a cost,
/// and the [`Quota`] it enforces.
///
/// Every in-process [`Limiter`] implements it, whatever its algorithm, key
/// and clock, with a future that is ready at once ([`Ready`]); so does an
/// `Arc` of any `AsyncCheck`. A limiter whose state lives in another
/// process (the Redis limiters of the `redis` feature) implements it with a
/// future that completes when the store answers. Code written against this
/// trait therefore works with either, and the HTTP layer of the `tower`
/// feature asks its limiter through it.
///
/// # Examples
///
/// A check that delegates to a limiter and counts what it sees:
///
/// ```
/// use std::future::{ready, Ready};
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
/// use tollgate::{AsyncCheck, CheckError, Decision, Limiter, Quota, TokenBucket};
///
/// #[derive(Debug)]
/// struct Counted {
///     limiter: Limiter<TokenBucket>,
///     seen: AtomicU64,
/// }
///
/// impl AsyncCheck<String> for Counted {
///     type Future = Ready<Result<Decision, CheckError>>;
///
///     fn check(&self, key: &String, cost: u64) -> Self::Future {
///         self.seen.fetch_add(1, Ordering::Relaxed);
///         AsyncCheck::check(&self.limiter, key, cost)
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
/// // An in-process check is ready at once; `.await` it in async code.
/// let decision = counted.check(&"alice".to_string(), 1).into_inner()?;
/// assert_eq!(decision.remaining(), 4);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait AsyncCheck<K: ?Sized>: Send + Sync + 'static {
    /// The decision, once made. In-process limiters answer with
    /// [`Ready`]; a remote one answers later.
    type Future: Future<Output = Result<Decision, CheckError>> + Send + Unpin + 'static;

    /// Checks, and if admitted records, a request of `cost` units from
    /// `key`. A cost of 0 is admitted and records nothing.
    ///
    /// # Errors
    ///
    /// The future resolves to a [`CheckError`] when no decision could be
    /// made: a cost above the limiter's capacity
    /// ([`CheckErrorKind::Cost`]), or, for a limiter in another process, a
    /// store that could not be reached or answered with something that is
    /// not a limiter's state (see [`CheckErrorKind`]).
    fn check(&self, key: &K, cost: u64) -> Self::Future;

    /// The quota this limiter grants per window: the `q` and `w` of a
    /// `RateLimit-Policy` header.
    fn quota(&self) -> Quota;

    /// The limiter's name, as its builder's
    /// [`name`](crate::Builder::name) gave it: the `limiter` label of the
    /// HTTP layer's series (with the `metrics` feature). `"default"`
    /// unless implemented.
    fn name(&self) -> &str {
        "default"
    }

    /// Publishes the limiter's counts through the `metrics` crate's
    /// facade ([`Limiter::publish_metrics`]); the HTTP layer's
    /// `publish_metrics` calls it. Does nothing unless implemented. Needs
    /// the `metrics` feature.
    #[cfg(feature = "metrics")]
    fn publish_metrics(&self) {}
}

impl<A, K, C> AsyncCheck<K> for Limiter<A, K, C>
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
            Limiter::check_n(self, key, cost)
                .map_err(|err| CheckError::with_kind(CheckErrorKind::Cost, err))
        };
        ready(decision)
    }

    fn quota(&self) -> Quota {
        Limiter::quota(self)
    }

    fn name(&self) -> &str {
        Limiter::name(self)
    }

    #[cfg(feature = "metrics")]
    fn publish_metrics(&self) {
        Limiter::publish_metrics(self);
    }
}

impl<K: ?Sized, T: AsyncCheck<K> + ?Sized> AsyncCheck<K> for Arc<T> {
    type Future = T::Future;

    #[inline]
    fn check(&self, key: &K, cost: u64) -> Self::Future {
        T::check(self, key, cost)
    }

    fn quota(&self) -> Quota {
        T::quota(self)
    }

    fn name(&self) -> &str {
        T::name(self)
    }

    #[cfg(feature = "metrics")]
    fn publish_metrics(&self) {
        T::publish_metrics(self);
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
    /// use tollgate::{Quota, SlidingWindowLog, TokenBucket};
    ///
    /// let bucket = TokenBucket::builder().rate(10, Duration::from_secs(60)).build()?;
    /// assert_eq!(bucket.quota(), Quota::new(10, Duration::from_secs(60)));
    /// let log = SlidingWindowLog::builder().limit(3).window(Duration::from_secs(5)).build()?;
    /// assert_eq!(log.quota(), Quota::new(3, Duration::from_secs(5)));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn quota(&self) -> Quota {
        Quota::of(self.algorithm())
    }
}

/// A limiter's quota: `limit` units per `window`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
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

    /// The quota `algorithm` grants, as [`Limiter::quota`] reports it: for
    /// the windowed algorithms, their limit and window; for the token
    /// bucket, its capacity and the time to refill it from empty; for two
    /// limits held together, the one with the smaller limit; for a tiered
    /// limiter, tier 0's.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(1))
    ///     .tier(1, TokenBucket::builder().rate(5, Duration::from_secs(1)))
    ///     .build()?;
    /// assert_eq!(Quota::of(&limiter.tier_quota(1)), Quota::new(5, Duration::from_secs(1)));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn of<A: Algorithm>(algorithm: &A) -> Self {
        let (limit, window) = algorithm.quota_granted();
        Self::new(limit, Duration::from_nanos(window))
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

/// Why a check could not be made; see [`CheckError::kind`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{AsyncCheck, CheckErrorKind, TokenBucket};
///
/// let limiter = TokenBucket::builder().rate(5, Duration::from_secs(1)).build()?;
/// let err = AsyncCheck::check(&limiter, &"alice".to_string(), 6).into_inner().unwrap_err();
/// assert_eq!(err.kind(), CheckErrorKind::Cost);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CheckErrorKind {
    /// The cost exceeds the limiter's capacity: it could never be
    /// admitted (the cause is a [`CostError`](crate::CostError)).
    Cost,
    /// The store did not answer within the limiter's timeout.
    Timeout,
    /// The store could not be reached, refused the command, or is being
    /// given time to recover after such failures.
    Unavailable,
    /// The store answered, but the state held for this client is not one
    /// the limiter wrote (another program's value under its key): only
    /// this client's checks are affected.
    Corrupt,
    /// The store's reply was not the shape the limiter expects.
    Protocol,
    /// Any other cause, such as one given to [`CheckError::new`].
    Other,
}

/// A check that could not be made: a cost the limiter can never admit, or,
/// for a limiter in another process, a failure to reach it or a state it
/// cannot read. The HTTP layer answers such a request with
/// `503 Service Unavailable` and does not call the inner service.
///
/// # Examples
///
/// ```
/// use tollgate::{CheckError, CheckErrorKind};
///
/// let err = CheckError::new(std::io::Error::other("store unreachable"));
/// assert_eq!(err.to_string(), "rate limit check failed: store unreachable");
/// assert_eq!(err.kind(), CheckErrorKind::Other);
/// ```
#[derive(Debug)]
pub struct CheckError {
    kind: CheckErrorKind,
    cause: Box<dyn StdError + Send + Sync>,
}

impl CheckError {
    /// Wraps the cause, of kind [`CheckErrorKind::Other`].
    pub fn new(cause: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self::with_kind(CheckErrorKind::Other, cause)
    }

    /// Wraps the cause, of the given kind.
    pub(crate) fn with_kind(
        kind: CheckErrorKind,
        cause: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> Self {
        Self {
            kind,
            cause: cause.into(),
        }
    }

    /// Why the check could not be made.
    #[must_use]
    pub fn kind(&self) -> CheckErrorKind {
        self.kind
    }
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate limit check failed: {}", self.cause)
    }
}

impl StdError for CheckError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.cause)
    }
}
