//! Layer 5: the public limiter, a thin skin over the keyed store and the
//! cells. It reads the clock once per check, finds the client's cell, and
//! lets the cell layer decide. Off the check path, it bounds the store's
//! memory: sweeps, the cap and its overflow policy, and their counters.

use core::borrow::Borrow;
use core::fmt;
use core::hash::Hash;
use std::borrow::Cow;

use crate::cell::{Algorithm, Life, Mortal, Tier};
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::CostError;
use crate::memory::{Counters, Memory, Overflow, Stats};
use crate::reservation::Renewals;
use crate::store::{check_or_insert, DefaultHasher, Store};
#[cfg(feature = "metrics")]
use crate::telemetry::Decisions;

mod booking;
mod direct;
#[cfg(feature = "tracing")]
mod events;
mod memory;
#[cfg(feature = "metrics")]
mod metrics;
mod tiers;

pub use direct::DirectLimiter;
use memory::Arrival;
pub use tiers::TierAlgorithm;

/// The one entry point: may this client make a request now?
///
/// This is `allow_request(client_id) -> bool`. Every algorithm's
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
/// [`FixedWindow::builder`](crate::FixedWindow::builder). A check on a
/// client the limiter tracks is lock-free and never waits for another
/// thread, a rebuild of the map's tables included: one clock read, one map
/// lookup that writes nothing shared, and one compare-and-swap of the
/// client's state word (for the log, of one slot; for two limits, of the
/// pair's two words at once, lock-free where
/// [`Both::is_lock_free`](crate::Both::is_lock_free) says so) if the request
/// is admitted. So are [`peek`](Limiter::peek) and bookings, and
/// [`reset`](Limiter::reset) and [`remove`](Limiter::remove) never wait for
/// another thread either. Such a check runs no code of yours but the key's
/// `Hash` and `Eq` and the clock: the keys of clients the map no longer
/// holds are dropped by the threads that insert, remove or sweep clients
/// (with the `metrics` feature, the one check a second that publishes the
/// counts also runs the installed recorder's code). A client's first
/// request (or its first since it was forgotten) inserts it, with no lock
/// either: it waits for a rebuild of its shard of the map (as the shard
/// grows, as a sweep or removals shrink it, or as a quota changes), which
/// holds that shard's lock, only while the rebuild seals the old table and
/// links the new one, or once that new table is full (while the entries
/// move, the request goes into the new table); and it makes that rebuild
/// itself when the shard is full, first waiting for any writer holding the
/// shard's lock (a removal, a sweep's walk) to let it go.
///
/// Share it between threads by reference or in an `Arc`.
///
/// Its memory is bounded by [`max_clients`](crate::Builder::max_clients), a
/// hard cap on the clients held, and by forgetting clients whose state has
/// become idle (equal to a fresh client's), without changing any decision:
/// as new clients arrive (as they fill the table, and in a pass over it
/// at most once a horizon), or all at once by [`sweep`](Limiter::sweep).
/// See "Eviction" in the crate documentation, and the
/// [memory guide](crate::guide::memory) for the bound.
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
    memory: Memory,
    counters: Counters,
    /// Which tier a new client belongs to (a [`Tiered`] limiter's), run
    /// once per client as its state is created.
    tier_by: Option<TierBy<K>>,
    /// Orders quota changes one after another. A lock, not a CAS: a change
    /// publishes a table and then carries every client over to it, and the
    /// next change must not publish before that carry has finished; changes
    /// are rare and each walks every client anyway. Checks, sweeps and
    /// inserts never take it.
    control: std::sync::Mutex<()>,
    /// The stamps that keep a reservation's cancel to the state it booked
    /// on (see `crate::reservation`).
    renewals: Renewals,
    /// The builder's [`name`](crate::Builder::name), or `"default"`.
    name: Cow<'static, str>,
    /// The checks' counts, kept per thread, and their publication.
    #[cfg(feature = "metrics")]
    decisions: Decisions,
    /// The reading of the latest new client that found the cap reached
    /// ([`Limiter::overflow`]), or `u64::MAX` before the first: an event
    /// marks the first of each run of them.
    #[cfg(feature = "tracing")]
    cap_reached_at: crate::sync::PlainAtomicU64,
}

/// `Ok` if `algorithm` could ever admit `cost` (at most its capacity, or
/// limit), else the [`CostError`] a check of that cost answers.
fn within_capacity<A: Algorithm>(algorithm: &A, cost: u64) -> Result<(), CostError> {
    let capacity = algorithm.capacity();
    if cost > capacity {
        Err(CostError { cost, capacity })
    } else {
        Ok(())
    }
}

/// What a recording check answers, as the `metrics` feature counts it:
/// whether it admitted.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) trait Outcome {
    fn admitted(&self) -> Option<bool>;
}

impl Outcome for bool {
    #[inline]
    fn admitted(&self) -> Option<bool> {
        Some(*self)
    }
}

impl Outcome for Decision {
    #[inline]
    fn admitted(&self) -> Option<bool> {
        Some(self.allowed)
    }
}

/// A booking: made, or refused (too long a wait, a full limiter). One the
/// algorithm cannot make is no decision.
impl<T> Outcome for Result<T, crate::error::ReserveError> {
    #[inline]
    fn admitted(&self) -> Option<bool> {
        match self {
            Ok(_) => Some(true),
            Err(crate::error::ReserveError::Unsupported) => None,
            Err(_) => Some(false),
        }
    }
}

/// A tiered limiter's resolver: a new client's tier from its key.
pub(crate) type TierBy<K> = Box<dyn Fn(&K) -> Tier + Send + Sync>;

impl<A, K, C> Limiter<A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    pub(crate) fn new(algorithm: A, clock: C, memory: Memory) -> Self {
        Self {
            algorithm,
            clock,
            store: Store::with_hasher(DefaultHasher::default(), memory.max_clients.is_some()),
            memory,
            counters: Counters::new(&memory),
            tier_by: None,
            control: std::sync::Mutex::new(()),
            renewals: Renewals::new(),
            name: Cow::Borrowed("default"),
            #[cfg(feature = "metrics")]
            decisions: Decisions::new(),
            #[cfg(feature = "tracing")]
            cap_reached_at: crate::sync::PlainAtomicU64::new(u64::MAX),
        }
    }

    /// Sets the limiter's name.
    pub(crate) fn named(mut self, name: Cow<'static, str>) -> Self {
        self.name = name;
        self
    }

    /// Sets the resolver of a new client's tier.
    pub(crate) fn with_tier_by(mut self, tier_by: Option<TierBy<K>>) -> Self {
        self.tier_by = tier_by;
        self
    }

    /// The tier of a new client: the resolver's answer, or 0.
    fn resolve_tier(&self, key: &K) -> Tier {
        self.tier_by.as_ref().map_or(0, |tier_by| tier_by(key))
    }

    /// Runs `op` on the client's live cell (creating it if need be) at the
    /// clock's reading: the one path every recording check takes. `refuse`
    /// answers for a new client that a full limiter denies, given its wait
    /// in ns ([`Limiter::busy_for`]). `cost` is what
    /// the decision is counted as, with the `metrics` feature.
    #[inline]
    fn run<Q, R: Outcome>(
        &self,
        client_id: &Q,
        cost: u64,
        op: impl Fn(&A, &A::Cell, u64) -> Option<R>,
        refuse: impl Fn(&A, u64) -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now_nanos();
        let algorithm = &self.algorithm;
        let outcome = check_or_insert(
            &self.store,
            client_id,
            now,
            |cell, now| op(algorithm, cell, now),
            &Arrival {
                limiter: self,
                reading: now,
                refuse,
            },
        );
        #[cfg(feature = "metrics")]
        self.count(&outcome, cost, now);
        #[cfg(not(feature = "metrics"))]
        let _ = cost;
        outcome
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
        self.run(
            client_id,
            1,
            |algorithm, cell, now| algorithm.try_admit(cell, now, 1),
            |_, _| false,
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
        self.run(
            client_id,
            1,
            |algorithm, cell, now| algorithm.decide(cell, now, 1),
            Self::refused,
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
        self.record_n(client_id, cost)
    }

    /// As [`check_n`](Self::check_n), but a cost of 0 records the client's
    /// state as it stands (a new client's first), where `check_n` only
    /// peeks: for the Redis limiters' `Local` fallback, which holds each
    /// client to what Redis last said was left.
    pub(crate) fn record_n<Q>(&self, client_id: &Q, cost: u64) -> Result<Decision, CostError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_cost(cost)?;
        Ok(self.run(
            client_id,
            cost,
            |algorithm, cell, now| algorithm.decide(cell, now, cost),
            Self::refused,
        ))
    }

    /// The decision for a new client that a full limiter denies
    /// ([`Overflow::DenyNew`]): nothing remains, and room is likely after
    /// `wait` ns, the longest a held client can stay busy (see
    /// [`Limiter::busy_for`]).
    fn refused(algorithm: &A, wait: u64) -> Decision {
        Decision {
            allowed: false,
            limit: algorithm.capacity(),
            remaining: 0,
            retry_after: wait,
            replenish_after: wait,
            window: algorithm.quota_granted().1,
            pair: None,
        }
    }

    /// The longest a client held at the reading `now` can stay busy,
    /// bookings included (see `Counters::busy_for`): the wait of a new
    /// client that [`Overflow::DenyNew`] turns away.
    pub(crate) fn busy_for(&self, now: u64) -> u64 {
        self.counters.busy_for(now, self.algorithm.horizon())
    }

    /// Whether [`check`](Limiter::check) would admit now (and if not,
    /// when it would), with the client's quota as it stands, recording
    /// nothing and creating no state for an unknown client.
    ///
    /// A peek takes nothing, so its [`remaining`](Decision::remaining) is
    /// what the client holds now: a check that admits leaves one fewer.
    /// Its [`replenish_after`](Decision::replenish_after) likewise reads
    /// the quota as it stands.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::FixedWindow;
    ///
    /// let limiter = FixedWindow::builder()
    ///     .limit(3)
    ///     .window(Duration::from_secs(60))
    ///     .build()?;
    /// assert!(limiter.peek("alice").is_allowed());
    /// assert_eq!(limiter.len(), 0, "a peek creates no state");
    ///
    /// assert!(limiter.allow_request("alice"));
    /// let peeked = limiter.peek("alice");
    /// assert_eq!(peeked.remaining(), 2, "two left now");
    /// assert_eq!(limiter.check("alice").remaining(), 1, "one left after a check");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn peek<Q>(&self, client_id: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.peek_cost(client_id, 1)
    }

    /// Whether [`check_n`](Limiter::check_n) would admit now, recording
    /// nothing, with the quota as it stands (as [`peek`](Limiter::peek)).
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
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
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
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now_nanos();
        let algorithm = &self.algorithm;
        let known = self.store.get(client_id, |cell| {
            (cell.life() == Life::Live).then(|| algorithm.peek(cell, now, cost))
        });
        if let Some(Some(decision)) = known {
            return decision;
        }
        // Not tracked: a check would have to make room for it. At a full
        // cap under `DenyNew`, it is denied unless a held client has become
        // idle, which only a check (or a sweep) finds out.
        // Read again after the look that found it absent: never before the
        // reading of an eviction that look saw, as a new client's check.
        let now = self.clock.now_nanos();
        if self.memory.overflow == Overflow::DenyNew && self.store.is_full(self.memory.max_clients)
        {
            return Self::refused(algorithm, self.busy_for(now));
        }
        algorithm.peek(&self.unknown_cell(client_id), now, cost)
    }

    /// The state a client the limiter does not hold would start with: a
    /// fresh cell in the tier the resolver gives it (if the limiter has
    /// one), as its first check would make it.
    fn unknown_cell<Q>(&self, client_id: &Q) -> A::Cell
    where
        Q: ToOwned<Owned = K> + ?Sized,
    {
        match &self.tier_by {
            None => self.algorithm.fresh_cell(0),
            Some(tier_by) => self.algorithm.fresh_in(tier_by(&client_id.to_owned()), 0),
        }
    }

    /// Runs `f` on the client's cell, or on a fresh one if the client is
    /// unknown, without inserting anything.
    fn read<Q, R>(&self, client_id: &Q, f: impl Fn(&A, &A::Cell, u64) -> R) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now_nanos();
        let algorithm = &self.algorithm;
        // A client forgotten (its cell dead) reads as an unknown one, at a
        // reading taken after the look that found it so.
        self.store
            .get(client_id, |cell| {
                (cell.life() == Life::Live).then(|| f(algorithm, cell, now))
            })
            .flatten()
            .unwrap_or_else(|| {
                f(
                    algorithm,
                    &self.unknown_cell(client_id),
                    self.clock.now_nanos(),
                )
            })
    }

    fn check_cost(&self, cost: u64) -> Result<(), CostError> {
        within_capacity(&self.algorithm, cost)
    }

    /// The number of clients the limiter holds state for (counting any
    /// being added at this instant). Constant time, without a lock: one
    /// load of the count of room under a cap, else a load per shard of the
    /// table (64).
    ///
    /// Clients whose state has become idle count until a sweep forgets
    /// them.
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

    /// The memory counters: clients held, evicted (idle, and by sampled
    /// eviction), and every application of the overflow policy.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, Overflow};
    ///
    /// let limiter = FixedWindow::builder()
    ///     .limit(5)
    ///     .window(Duration::from_secs(60))
    ///     .max_clients(2)
    ///     .overflow(Overflow::AdmitUntracked)
    ///     .build()?;
    /// for id in ["a", "b", "c", "d"] {
    ///     assert!(limiter.allow_request(id));
    /// }
    /// let stats = limiter.stats();
    /// assert_eq!((stats.clients, stats.overflows, stats.admitted_untracked), (2, 2, 2));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.counters.snapshot(self.len())
    }

    /// The limiter's name: the one given to its builder
    /// ([`name`](crate::Builder::name)), or `"default"`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder().rate(5, Duration::from_secs(1)).name("api").build()?;
    /// assert_eq!(limiter.name(), "api");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
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
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .field("clock", &self.clock)
            .field("tier_by", &self.tier_by.as_ref().map(|_| "Fn(&K) -> Tier"))
            .finish_non_exhaustive()
    }
}
