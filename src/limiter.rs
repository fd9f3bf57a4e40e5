//! Layer 5: the public limiter, a thin skin over the keyed store and the
//! cells. It reads the clock once per check, finds the client's cell, and
//! lets the cell layer decide.

use core::borrow::Borrow;
use core::fmt;
use core::hash::Hash;

use crate::cell::Algorithm;
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::CostError;
use crate::store::{DefaultHasher, Store};

/// The one entry point: may this client make a request now?
///
/// This is the seed's `allow_request(client_id) -> bool`. Every algorithm's
/// [`Limiter`] implements it, so middleware written against
/// `dyn RateLimiter` runs unchanged whichever algorithm is behind it; only
/// the constructor changes. A limiter backed by a shared store in another
/// process could implement it too.
///
/// The trait is object safe, and `K` defaults to `str`, so
/// `Box<dyn RateLimiter>` is a limiter keyed by string ids.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate::{FixedWindow, RateLimiter, TokenBucket};
///
/// fn middleware(limiter: &dyn RateLimiter, client: &str) -> u16 {
///     if limiter.allow_request(client) { 200 } else { 429 }
/// }
///
/// let limiters: Vec<Arc<dyn RateLimiter>> = vec![
///     Arc::new(TokenBucket::builder().rate(1, Duration::from_secs(1)).build()?),
///     Arc::new(FixedWindow::builder().limit(1).window(Duration::from_secs(1)).build()?),
/// ];
/// for limiter in &limiters {
///     assert_eq!(middleware(limiter.as_ref(), "alice"), 200);
///     assert_eq!(middleware(limiter.as_ref(), "alice"), 429);
/// }
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub trait RateLimiter<K: ?Sized = str>: Send + Sync {
    /// Whether `client_id` may make one request now. An admitted request is
    /// recorded; a denied one changes nothing.
    #[must_use]
    fn allow_request(&self, client_id: &K) -> bool;
}

/// A per-client rate limiter running the algorithm `A`, keyed by `K`, with
/// time from `C`.
///
/// Build one with [`TokenBucket::builder`](crate::TokenBucket::builder),
/// [`SlidingWindowCounter::builder`](crate::SlidingWindowCounter::builder),
/// [`SlidingWindowLog::builder`](crate::SlidingWindowLog::builder) or
/// [`FixedWindow::builder`](crate::FixedWindow::builder). Every check is
/// lock-free: one clock read, one map lookup that writes nothing shared, and
/// one compare-and-swap of the client's state word (for the log, of one
/// slot) if the request is admitted.
///
/// Share it between threads by reference or in an `Arc`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::TokenBucket;
///
/// let limiter = TokenBucket::builder()
///     .rate(2, Duration::from_secs(1))
///     .build()?;
/// assert!(limiter.allow_request("alice"));
/// assert!(limiter.allow_request("alice"));
/// assert!(!limiter.allow_request("alice"));
/// assert!(limiter.allow_request("bob"));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub struct Limiter<A: Algorithm, K = String, C = MonotonicClock> {
    algorithm: A,
    clock: C,
    store: Store<K, A::Cell, DefaultHasher>,
}

impl<A, K, C> Limiter<A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    pub(crate) fn new(algorithm: A, clock: C) -> Self {
        Self {
            algorithm,
            clock,
            store: Store::with_hasher(DefaultHasher::default()),
        }
    }

    /// Whether `client_id` may make one request now; see
    /// [`RateLimiter::allow_request`]. The fastest check: it computes no
    /// figures for a [`Decision`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder().rate(1, Duration::from_secs(60)).build()?;
    /// assert!(limiter.allow_request("alice"));
    /// assert!(!limiter.allow_request("alice"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[inline]
    #[must_use]
    pub fn allow_request<Q>(&self, client_id: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now_nanos();
        let algorithm = &self.algorithm;
        self.store.get_or_insert(
            client_id,
            || algorithm.new_cell(),
            |cell| algorithm.admit(cell, now, 1),
        )
    }

    /// Checks one request and says how much quota is left and, if denied,
    /// when to retry.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::SlidingWindowCounter;
    ///
    /// let limiter = SlidingWindowCounter::builder()
    ///     .limit(2)
    ///     .window(Duration::from_secs(1))
    ///     .build()?;
    /// assert_eq!(limiter.check("alice").remaining(), 1);
    /// assert_eq!(limiter.check("alice").remaining(), 0);
    /// assert!(limiter.check("alice").is_denied());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn check<Q>(&self, client_id: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now_nanos();
        let algorithm = &self.algorithm;
        self.store.get_or_insert(
            client_id,
            || algorithm.new_cell(),
            |cell| algorithm.decide(cell, now, 1),
        )
    }

    /// Checks a request that costs `cost` units at once (a batch, or a
    /// request weighted by size): all of it is admitted or none.
    ///
    /// A cost of 0 is always admitted and records nothing.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` exceeds the capacity (token bucket) or limit
    /// (windows), since such a request could never be admitted.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .build()?;
    /// assert!(limiter.check_n("alice", 7).unwrap().is_allowed());
    /// assert!(limiter.check_n("alice", 7).unwrap().is_denied());
    /// assert!(limiter.check_n("alice", 11).is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn check_n<Q>(&self, client_id: &Q, cost: u64) -> Result<Decision, CostError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if cost == 0 {
            return self.peek_n(client_id, 0);
        }
        self.check_cost(cost)?;
        let now = self.clock.now_nanos();
        let algorithm = &self.algorithm;
        Ok(self.store.get_or_insert(
            client_id,
            || algorithm.new_cell(),
            |cell| algorithm.decide(cell, now, cost),
        ))
    }

    /// What [`check`](Limiter::check) would decide now, without recording
    /// anything, and without creating state for an unknown client.
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
    ///     .build()?;
    /// assert!(limiter.peek("alice").is_allowed());
    /// assert!(limiter.peek("alice").is_allowed());
    /// assert_eq!(limiter.len(), 0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn peek<Q>(&self, client_id: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.peek_cost(client_id, 1)
    }

    /// What [`check_n`](Limiter::check_n) would decide now, recording
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` exceeds the capacity or limit.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder().rate(5, Duration::from_secs(1)).build()?;
    /// assert!(limiter.peek_n("alice", 5).unwrap().is_allowed());
    /// assert!(limiter.peek_n("alice", 6).is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn peek_n<Q>(&self, client_id: &Q, cost: u64) -> Result<Decision, CostError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if cost == 0 {
            // Nothing to admit: allowed, with the quota as it stands.
            return Ok(self.read(client_id, |algorithm, cell, now| algorithm.quota(cell, now)));
        }
        self.check_cost(cost)?;
        Ok(self.peek_cost(client_id, cost))
    }

    fn peek_cost<Q>(&self, client_id: &Q, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.read(client_id, |algorithm, cell, now| {
            algorithm.peek(cell, now, cost)
        })
    }

    /// Runs `f` on the client's cell, or on a fresh one if the client is
    /// unknown, without inserting anything.
    fn read<Q, R>(&self, client_id: &Q, f: impl Fn(&A, &A::Cell, u64) -> R) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.clock.now_nanos();
        let algorithm = &self.algorithm;
        self.store
            .get(client_id, |cell| f(algorithm, cell, now))
            .unwrap_or_else(|| f(algorithm, &algorithm.new_cell(), now))
    }

    fn check_cost(&self, cost: u64) -> Result<(), CostError> {
        let capacity = self.algorithm.capacity();
        if cost > capacity {
            Err(CostError { cost, capacity })
        } else {
            Ok(())
        }
    }

    /// The number of clients the limiter holds state for.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder().rate(5, Duration::from_secs(1)).build()?;
    /// let _ = limiter.allow_request("alice");
    /// let _ = limiter.allow_request("bob");
    /// assert_eq!(limiter.len(), 2);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether the limiter holds state for no client.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder().rate(5, Duration::from_secs(1)).build()?;
    /// assert!(limiter.is_empty());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The algorithm and its validated settings.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder().rate(5, Duration::from_secs(1)).build()?;
    /// println!("{:?}", limiter.algorithm());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The clock the limiter reads.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(5, Duration::from_secs(1))
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// limiter.clock().advance(Duration::from_secs(1));
    /// assert_eq!(limiter.clock().now_nanos(), 1_000_000_000);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<A, K, Q, C> RateLimiter<Q> for Limiter<A, K, C>
where
    A: Algorithm,
    K: Borrow<Q> + Hash + Eq + Clone + Send + Sync + 'static,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    C: Clock,
{
    #[inline]
    fn allow_request(&self, client_id: &Q) -> bool {
        Limiter::allow_request(self, client_id)
    }
}

impl<A: Algorithm + fmt::Debug, K, C: fmt::Debug> fmt::Debug for Limiter<A, K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("algorithm", &self.algorithm)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}
