//! The layer's one question to a limiter: the crate's [`AsyncCheck`]
//! trait, under the name the layer has always used.

/// What the HTTP layer asks of a limiter: the crate's
/// [`AsyncCheck`](crate::AsyncCheck) trait, a [`Decision`](crate::Decision)
/// for a key as a future, and the [`Quota`] it enforces (for the
/// `RateLimit-Policy` header).
///
/// Every [`Limiter`](crate::Limiter) implements it with a future that is
/// ready at once, and so do the Redis limiters of the `redis` feature, with
/// a future that completes when Redis answers: the layer polls the future
/// once as it handles the request, and only if that poll is pending does it
/// keep the request aside until the decision arrives.
///
/// # Examples
///
/// A check that delegates to a limiter and counts what it sees:
///
/// ```
/// use std::future::Ready;
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
pub use crate::check::AsyncCheck as Check;
pub use crate::check::{CheckError, Quota};
