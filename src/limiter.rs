//! Layer 5: the public limiter, a thin skin over the keyed store and the
//! cells. It reads the clock once per check, finds the client's cell, and
//! lets the cell layer decide. Off the check path, it bounds the store's
//! memory: sweeps, the cap and its overflow policy, and their counters.

use core::borrow::Borrow;
use core::fmt;
use core::hash::Hash;

use core::time::Duration;

use crate::algorithm::{FromParams, Ticket, Transitions};
use crate::builder::Builder;
use crate::cell::{Algorithm, Booking, Life, Mortal, Packed, Tier, Tiered};
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::{ConfigError, CostError, ReserveError};
use crate::memory::{Counters, Memory, Overflow, Stats};
use crate::reservation::Reservation;
use crate::store::{
    act_on_live, check_or_insert, forget_client, reset_client, DefaultHasher, Newcomer, Store,
};

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
/// [`FixedWindow::builder`](crate::FixedWindow::builder). A check on a
/// client the limiter tracks is lock-free and never waits for another
/// thread, a rebuild of the map's tables included: one clock read, one map
/// lookup that writes nothing shared, and one compare-and-swap of the
/// client's state word (for the log, of one slot) if the request is
/// admitted. So are [`peek`](Limiter::peek) and bookings. A client's first
/// request (or its first since it was forgotten) inserts it, under a lock
/// per shard of the map that only inserts, removals and rebuilds take.
///
/// Share it between threads by reference or in an `Arc`.
///
/// Its memory stays bounded: clients whose state has become idle (equal to
/// a fresh client's) are forgotten, a slice at a time as new clients arrive,
/// or all at once by [`sweep`](Limiter::sweep), without changing any
/// decision; and [`max_clients`](crate::Builder::max_clients) sets a hard
/// cap. See "Eviction" in the crate documentation.
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
            counters: Counters::default(),
            tier_by: None,
            control: std::sync::Mutex::new(()),
        }
    }

    /// Sets the resolver of a new client's tier.
    pub(crate) fn with_tier_by(mut self, tier_by: Option<TierBy<K>>) -> Self {
        self.tier_by = tier_by;
        self
    }

    /// The tier of a new client: the resolver's answer, or 0.
    fn tier_of(&self, key: &K) -> Tier {
        self.tier_by.as_ref().map_or(0, |tier_by| tier_by(key))
    }

    /// Runs `op` on the client's live cell (creating it if need be) at the
    /// clock's reading: the one path every recording check takes. `refuse`
    /// answers for a new client that a full limiter denies.
    #[inline]
    fn run<Q, R>(
        &self,
        client_id: &Q,
        op: impl Fn(&A, &A::Cell, u64) -> Option<R>,
        refuse: impl Fn(&A, u64) -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now_nanos();
        let algorithm = &self.algorithm;
        check_or_insert(
            &self.store,
            client_id,
            now,
            |cell, now| op(algorithm, cell, now),
            &Arrival {
                limiter: self,
                refuse,
            },
        )
    }

    /// The cap is reached: forget whatever idle clients a short slice finds
    /// (which changes nothing), then, under [`Overflow::EvictSampled`],
    /// forget a sampled client. True iff a unit of room is now the caller's.
    ///
    /// The short slice backs off while it finds nothing (see
    /// `Counters::full_scan_due`): in a flood of new clients against busy
    /// ones it would otherwise cost each of them eight cache misses for
    /// nothing.
    #[cold]
    #[inline(never)]
    fn overflow(&self, now: u64) -> bool {
        let max = self.memory.max_clients;
        if self.counters.full_scan_due() {
            let retired = self.sweep_slice(now, now, Memory::FULL_SLICE);
            self.counters.full_scan_found(retired);
            if self.store.reserve(max) {
                return true;
            }
        }
        let Overflow::EvictSampled { sample } = self.memory.overflow else {
            // The policy answers once the new client's cell is refused.
            return false;
        };
        Counters::add(&self.counters.overflows, 1);
        // The room an eviction makes is ours: no other thread can take it
        // between the eviction and our insert. After four lost races, the
        // client goes untracked (`Arrival::refused`).
        (0..4).any(|_| self.evict_sampled(now, sample.into()) || self.store.reserve(max))
    }

    /// Visits `budget` entries from the sweep's position, forgetting those
    /// already idle at `idle_by` (≤ `now`; idle then means idle at `now`
    /// too, since a state only lapses further as time passes). Does nothing
    /// if another thread is sweeping a slice.
    fn sweep_slice(&self, now: u64, idle_by: u64, budget: u64) -> u64 {
        self.counters.evicting(now);
        let algorithm = &self.algorithm;
        let mut retired = 0;
        let _ = self.store.sweep_slice(
            budget,
            |_, cell| {
                let gone = algorithm.try_evict(cell, idle_by);
                retired += u64::from(gone);
                gone
            },
            false,
        );
        Counters::add(&self.counters.evicted_idle, retired);
        retired
    }

    /// Forgets one client from a sample of `sample`: an idle one if the
    /// sample holds any, otherwise the live one that would become idle
    /// soonest. Returns whether a unit of room is now the caller's, as if
    /// [`Store::reserve`] had granted it.
    fn evict_sampled(&self, now: u64, sample: u64) -> bool {
        self.counters.evicting(now);
        let algorithm = &self.algorithm;
        let mut retired = 0;
        let mut victim: Option<(u64, K)> = None;
        // Another thread's slice holds the cursor only for a few entries:
        // wait for it a little rather than give up the eviction (giving up
        // is what made most concurrent new clients go untracked).
        let mut spins = 0;
        let swept = loop {
            let mut sampled = 0;
            let visited = self.store.sweep_slice(
                // One more than the sample: the new client's own unborn
                // entry is in the map, and is no candidate.
                sample + 1,
                |key, cell| {
                    if retired > 0 || sampled == sample {
                        return false;
                    }
                    if algorithm.try_evict(cell, now) {
                        retired += 1;
                        return true;
                    }
                    // Only a live client can be forgotten: an unborn one is
                    // some other new client's, on its way in.
                    if cell.life() != Life::Live {
                        return false;
                    }
                    sampled += 1;
                    let idle_at = algorithm.idle_at(cell);
                    if victim.as_ref().is_none_or(|(best, _)| idle_at < *best) {
                        victim = Some((idle_at, key.clone()));
                    }
                    false
                },
                true,
            );
            match visited {
                Some(swept) => break swept,
                None if spins < Memory::CURSOR_SPINS => {
                    spins += 1;
                    crate::sync::spin_hint();
                }
                None => return false,
            }
        };
        Counters::add(&self.counters.evicted_idle, retired);
        if swept.kept {
            return true;
        }
        let Some((_, key)) = victim else {
            return false;
        };
        // Retire first, then remove only a dead entry: a check racing this
        // sees the tombstone and retries on a fresh cell. A victim idle by a
        // fresh reading goes as idle, which changes nothing: typically a
        // client another thread has just brought to life, whose state
        // starts at a reading later than ours.
        // The victim is looked up again: its entry may have moved, or left.
        let now = self.counters.not_before(self.clock.now_nanos());
        self.counters.evicting(now);
        let _ = self.store.get(&key, |cell| {
            if algorithm.try_evict(cell, now) {
                Counters::add(&self.counters.evicted_idle, 1);
            } else if algorithm.force_evict(cell) {
                Counters::add(&self.counters.evicted_live, 1);
            }
        });
        self.store.take_if(&key, Mortal::is_dead)
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
        self.check_cost(cost)?;
        Ok(self.run(
            client_id,
            |algorithm, cell, now| algorithm.decide(cell, now, cost),
            Self::refused,
        ))
    }

    /// Books one request for `client_id`, to proceed as soon as it
    /// conforms: see [`reserve_n`](Limiter::reserve_n).
    ///
    /// # Errors
    ///
    /// As [`reserve_n`](Limiter::reserve_n)'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder().rate(10, Duration::from_secs(1)).build()?;
    /// let reservation = limiter.reserve("alice", Duration::from_secs(1)).unwrap();
    /// assert_eq!(reservation.wait(), Duration::ZERO);
    /// reservation.commit();
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn reserve<Q>(
        &self,
        client_id: &Q,
        max_wait: Duration,
    ) -> Result<Reservation<'_, A, K, C>, ReserveError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.reserve_n(client_id, 1, max_wait)
    }

    /// Books a request of `cost` units for `client_id`, to proceed as soon
    /// as it conforms: the units are charged now, however long the request
    /// must wait, so clients that wait are served in the order they booked,
    /// and the [`Reservation`] says how long to wait.
    ///
    /// The wait is exact: the request conforms at
    /// [`ready_at`](Reservation::ready_at) and not a nanosecond earlier,
    /// the instant a [`check_n`](Limiter::check_n) would first have passed
    /// had nothing else arrived (its `retry_after`). A check made while a
    /// booking waits sees the units already taken.
    ///
    /// A cost of 0 is ready at once and charges nothing. Dropping the
    /// reservation before its time cancels it; see [`Reservation`].
    ///
    /// The [`TokenBucket`](crate::TokenBucket) and the
    /// [`FixedWindow`](crate::FixedWindow) book ahead. The fixed window
    /// books a request that does not fit into the first later window where
    /// it fits, and closes the windows before it, so that requests are
    /// served in the order they booked. A pair of them
    /// ([`Both`](crate::Both)) books a request for the first instant at
    /// which both limits conform, charged to both as a check at that
    /// instant would be, in one exchange; cancelling gives it back to both.
    /// A tiered limiter of any of these books by each client's own quota.
    /// The [`SlidingWindowLog`](crate::SlidingWindowLog) books a request of
    /// cost `n` for the instant at which `n` of its slots are free (the
    /// `n`-th earliest expiry), and claims those slots at once with the
    /// expiry of an admission at that instant, so requests are served in
    /// the order they booked; cancelling gives back each of those slots
    /// that no later booking has claimed from it.
    ///
    /// # Errors
    ///
    /// Nothing is charged on an error.
    ///
    /// - [`ReserveError::TooLong`] if the request would have to wait longer
    ///   than `max_wait` (`Duration::ZERO` books only what conforms now;
    ///   `Duration::MAX` waits however long it takes);
    /// - [`ReserveError::Cost`] if `cost` exceeds the capacity, since such
    ///   a request could never conform;
    /// - [`ReserveError::Full`] for a new client that a full limiter denies
    ///   ([`Overflow::DenyNew`]);
    /// - [`ReserveError::Unsupported`] for the sliding window counter (and
    ///   a pair holding one), and for a fixed window (or a pair holding
    ///   one) whose limit lies in the top half of its range.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, ReserveError, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .capacity(10)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// limiter.reserve_n("alice", 10, Duration::ZERO).unwrap().commit();
    /// // 4 more tokens take 0.4 s to refill: booked, and charged already.
    /// let batch = limiter.reserve_n("alice", 4, Duration::from_secs(1)).unwrap();
    /// assert_eq!(batch.wait(), Duration::from_millis(400));
    /// assert!(matches!(
    ///     limiter.reserve("alice", Duration::from_millis(100)),
    ///     Err(ReserveError::TooLong { .. })
    /// ));
    /// clock.advance(batch.wait());
    /// batch.commit();
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn reserve_n<Q>(
        &self,
        client_id: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Reservation<'_, A, K, C>, ReserveError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if !self.algorithm.can_reserve() {
            return Err(ReserveError::Unsupported);
        }
        if cost == 0 {
            let now = self.clock.now_nanos();
            return Ok(Reservation::new(self, None, now, || client_id.to_owned()));
        }
        self.check_cost(cost)?;
        let max_wait = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        let (ticket, wait, now) = self.run(
            client_id,
            |algorithm, cell, now| {
                Some(match algorithm.reserve(cell, now, cost, max_wait)? {
                    Booking::Granted(ticket, wait) => Ok((ticket, wait, now)),
                    Booking::TooLong(wait) => Err(ReserveError::TooLong {
                        wait: Decision::wait(wait),
                    }),
                    Booking::Unsupported => Err(ReserveError::Unsupported),
                })
            },
            |algorithm, _| {
                Err(ReserveError::Full {
                    retry_after: Decision::wait(algorithm.horizon()),
                })
            },
        )?;
        Ok(Reservation::new(self, Some((ticket, wait)), now, || {
            client_id.to_owned()
        }))
    }

    /// Cancels `ticket`'s booking for `client` by the tail rule, at a fresh
    /// reading: true iff its charge was given back. The client is looked
    /// up past dead cells (`act_on_live`): an evicted one has nothing to
    /// give back, and one a table rebuild moved while we looked has its
    /// live copy in the new table.
    pub(crate) fn give_back(&self, client: &K, ticket: &Ticket) -> bool {
        let algorithm = &self.algorithm;
        let now = self.clock.now_nanos();
        act_on_live(&self.store, client, |cell| {
            algorithm.unreserve(cell, now, ticket)
        })
        .unwrap_or(false)
    }

    /// A jitter in `0..=max` for a booking of `client_id` ready at
    /// `ready_at`: the store's seeded hash of the key, mixed with the ready
    /// time by splitmix64's finaliser. Unpredictable to clients, and
    /// different for two clients (or two bookings of one) ready together.
    #[cfg(feature = "tokio")]
    pub(crate) fn jitter<Q: Hash + ?Sized>(
        &self,
        client_id: &Q,
        ready_at: Duration,
        max: Duration,
    ) -> Duration {
        let max = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if max == 0 {
            return Duration::ZERO;
        }
        let mut z = self.store.hash_of(client_id) ^ (ready_at.as_nanos() as u64);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        Duration::from_nanos(z % max.saturating_add(1).max(1))
    }

    /// The decision for a new client that a full limiter denies
    /// ([`Overflow::DenyNew`]): nothing remains, and room is likely once the
    /// longest-lived state has had time to become idle.
    fn refused(algorithm: &A, _now: u64) -> Decision {
        Decision {
            allowed: false,
            limit: algorithm.capacity(),
            remaining: 0,
            retry_after: Decision::wait(algorithm.horizon()),
            replenish_after: Decision::wait(algorithm.horizon()),
            window: Duration::from_nanos(FromParams::granted(algorithm).1),
        }
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
        if self.memory.overflow == Overflow::DenyNew && self.store.is_full(self.memory.max_clients)
        {
            return Self::refused(algorithm, now);
        }
        algorithm.peek(&algorithm.new_cell(), now, cost)
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

    /// Forgets every client whose state is idle now, that is, equal to a
    /// fresh client's, so that forgetting it changes no decision; returns
    /// how many were removed.
    ///
    /// A full pass over the map. Checks run on concurrently, and a check on
    /// a client the sweep keeps never waits for it: a check that races the
    /// removal of its own client's entry is applied either to the entry
    /// before it is retired (which then is not idle, and stays) or to a
    /// fresh one afterwards, inserted as a new client's is. Inserting threads already sweep
    /// a slice at a time (see [`auto_sweep`](crate::Builder::auto_sweep)),
    /// so calling this is optional.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, SlidingWindowCounter};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = SlidingWindowCounter::builder()
    ///     .limit(10)
    ///     .window(Duration::from_secs(1))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// clock.advance(Duration::from_secs(1));
    /// assert!(limiter.allow_request("bob"));
    /// // alice's request still weighs on the sliding window.
    /// assert_eq!(limiter.sweep(), 0);
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(limiter.sweep(), 1);
    /// assert_eq!(limiter.len(), 1);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn sweep(&self) -> usize {
        let now = self.clock.now_nanos();
        self.counters.evicting(now);
        let algorithm = &self.algorithm;
        let mut retired = 0;
        let removed = self.store.sweep(|cell| {
            let gone = algorithm.try_evict(cell, now);
            retired += u64::from(gone);
            gone
        });
        Counters::add(&self.counters.evicted_idle, retired);
        usize::try_from(removed).unwrap_or(usize::MAX)
    }

    /// Puts `client_id` back to a fresh state now, as if it had never made
    /// a request; returns whether the limiter held a live state for it.
    ///
    /// Linearizable against concurrent checks of the same client: each one
    /// is decided wholly before the reset (and its admission is then
    /// forgotten with the rest) or wholly after (on the fresh state). For
    /// the token bucket and both window counters the state is one word, put
    /// back in place by one compare-and-swap, so the client keeps its place
    /// under [`max_clients`](crate::Builder::max_clients). A sliding window
    /// log is many words, so it is reset by forgetting it, as
    /// [`remove`](Self::remove) does: its next request brings in a fresh log
    /// (and takes a unit of room again). An unknown client, or one being
    /// added at this instant, is already fresh: `false`, and nothing
    /// changes.
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
    /// assert!(limiter.reset("alice"));
    /// assert!(limiter.allow_request("alice"));
    /// assert!(!limiter.reset("bob"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn reset<Q>(&self, client_id: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.counters.not_before(self.clock.now_nanos());
        let algorithm = &self.algorithm;
        reset_client(
            &self.store,
            client_id,
            |cell| algorithm.reset(cell, now),
            || self.remove(client_id),
        )
    }

    /// Forgets `client_id` now, giving back its unit of room; returns
    /// whether the limiter held a live state for it.
    ///
    /// Linearizable against concurrent checks, by the same two steps as
    /// eviction: the client's state is first retired by an exchange to the
    /// tombstone, then its entry is removed. A check decided before the
    /// exchange counted on the old state, which is then forgotten; a check
    /// after it finds the tombstone or no entry, and starts the client
    /// afresh (never judged earlier than this call's clock reading). A
    /// client being added at this instant is left to come in: the removal
    /// takes effect before it. Unlike an eviction of an idle client, this
    /// changes decisions by intent, and [`stats`](Self::stats) does not
    /// count it as an eviction.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, Overflow};
    ///
    /// let limiter = FixedWindow::builder()
    ///     .limit(1)
    ///     .window(Duration::from_secs(60))
    ///     .max_clients(1)
    ///     .overflow(Overflow::DenyNew)
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// assert!(!limiter.allow_request("bob")); // full
    /// assert!(limiter.remove("alice"));
    /// assert_eq!(limiter.len(), 0);
    /// assert!(limiter.allow_request("bob"));
    /// assert!(!limiter.remove("carol"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn remove<Q>(&self, client_id: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.counters.not_before(self.clock.now_nanos());
        self.counters.evicting(now);
        let algorithm = &self.algorithm;
        forget_client(&self.store, client_id, |cell| algorithm.force_evict(cell))
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

impl<A, K, C> Limiter<Tiered<A>, K, C>
where
    A: Transitions + FromParams + Clone + PartialEq,
    A::Word: Packed,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// Changes `tier`'s quota, for every client of the tier (and, for tier
    /// 0, every client of a tier with no quota of its own), known or new,
    /// without a restart. A tier with no quota yet gets one.
    ///
    /// Checks on tracked clients never wait for a change and take no lock
    /// (a new client's first request is inserted under its shard's lock,
    /// which the change holds while it carries that shard). Each client's
    /// change is one step in its history: a check lands wholly before it,
    /// under the old quota, or wholly after, under the new one. The call
    /// itself visits every client once (shard by shard, under each shard's
    /// insert lock), carrying its state over to the new quota by the
    /// algorithm's rule:
    ///
    /// - [`TokenBucket`](crate::TokenBucket): the tokens the client is
    ///   missing stay missing, at most a whole new bucket: a full bucket
    ///   stays full, and one that spent more than the new capacity starts
    ///   empty, refilling at the new rate.
    /// - [`FixedWindow`](crate::FixedWindow): the requests counted in the
    ///   window that is running stay counted (at most the new limit) in the
    ///   new quota's window that is running.
    /// - [`SlidingWindowCounter`](crate::SlidingWindowCounter): with the
    ///   same window, both windows' counts are kept (each at most the new
    ///   limit); with another window, the client's estimate for the last
    ///   window (rounded up, at most the new limit) is counted in the new
    ///   window that is running.
    /// - Two limits held together ([`Both`](crate::Both)): each limit's
    ///   state by its own rule above.
    ///
    /// A client whose own quota did not change (one of another tier) keeps
    /// its state exactly as it was, bookings included. Changes are made one
    /// at a time. A reservation booked before its tier's quota changes
    /// keeps its ready time; its charge is carried with the rest of the
    /// state (so, like all of it, at most one new bucket or window of it
    /// is), and cancelling it after the change gives nothing back.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field with `tier.` in front
    /// (`tier.capacity`) if `quota` does not validate; nothing changes.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .reconfigurable()
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// assert_eq!((0..8).filter(|_| limiter.allow_request("ann")).count(), 8);
    /// // Ann has spent 8 of 10 tokens: under a bucket of 20 she has 12 left.
    /// limiter.set_quota(0, TokenBucket::builder().rate(20, Duration::from_secs(1)))?;
    /// assert_eq!((0..20).filter(|_| limiter.allow_request("ann")).count(), 12);
    /// assert_eq!(limiter.check("bob").limit(), 20);
    ///
    /// let err = limiter
    ///     .set_quota(0, TokenBucket::builder().rate(1, Duration::from_secs(1)).capacity(0))
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "tier.capacity");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn set_quota<K2, C2>(
        &self,
        tier: Tier,
        quota: Builder<A, K2, C2>,
    ) -> Result<(), ConfigError> {
        let quota = A::from_params(&quota.params).map_err(ConfigError::in_tier)?;
        // A change that panicked midway (a key's `Hash`, say) left some
        // clients under the table before it, which then stays allocated
        // for them; this change carries them over like every other client.
        let _one_at_a_time = self.control.lock().unwrap_or_else(|poisoned| {
            self.control.clear_poison();
            poisoned.into_inner()
        });
        let algorithm = &self.algorithm;
        algorithm.change(tier, quota, || {
            self.store
                .rebuild_all(|cell| algorithm.carry(cell, || self.clock.now_nanos()));
        });
        Ok(())
    }

    /// The quota `tier`'s clients are held to now: its own, or tier 0's if
    /// it has none.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, Quota};
    ///
    /// let limiter = FixedWindow::builder()
    ///     .limit(10)
    ///     .window(Duration::from_secs(1))
    ///     .tier(2, FixedWindow::builder().limit(50).window(Duration::from_secs(1)))
    ///     .build()?;
    /// assert_eq!(limiter.tier_quota(2), Quota::new(50, Duration::from_secs(1)));
    /// assert_eq!(limiter.tier_quota(1), Quota::new(10, Duration::from_secs(1)));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn tier_quota(&self, tier: Tier) -> crate::Quota {
        let (limit, window) = self.algorithm.quota_of(tier).granted();
        crate::Quota::new(limit, Duration::from_nanos(window))
    }
}

/// A new client on its way in: how the store's protocol reads the clock,
/// makes cells, takes room and applies the overflow policy, for one check.
struct Arrival<'a, A: Algorithm, K, C, F> {
    limiter: &'a Limiter<A, K, C>,
    /// The answer for a new client denied by [`Overflow::DenyNew`].
    refuse: F,
}

impl<A, K, C, R, F> Newcomer<K, A::Cell, R> for Arrival<'_, A, K, C, F>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    F: Fn(&A, u64) -> R,
{
    #[inline]
    fn now(&self) -> u64 {
        // No earlier than any eviction's reading: see `Counters::not_before`.
        let limiter = self.limiter;
        limiter.counters.not_before(limiter.clock.now_nanos())
    }

    fn unborn(&self, key: &K, floor: u64) -> A::Cell {
        let limiter = self.limiter;
        // First, so that a resolver that panics leaves nothing behind.
        let tier = limiter.tier_of(key);
        // Every new client pays its share of the incremental sweep.
        if let Some(pace) = limiter.memory.auto_sweep {
            if limiter.counters.next_insert() % pace.every == pace.every - 1 {
                Counters::add(&limiter.counters.auto_sweeps, 1);
                // Only clients idle for a whole horizon already: one idle
                // for less may well be back, and forgetting it, though it
                // changes no decision, would cost it a fresh insert.
                let lapsed = floor.saturating_sub(limiter.algorithm.horizon());
                let _ = limiter.sweep_slice(floor, lapsed, pace.slice);
            }
        }
        limiter.algorithm.unborn_in(tier, floor)
    }

    fn fresh(&self, key: &K, floor: u64) -> A::Cell {
        let limiter = self.limiter;
        limiter.algorithm.fresh_in(limiter.tier_of(key), floor)
    }

    #[inline]
    fn reserve(&self) -> bool {
        self.limiter.store.reserve(self.limiter.memory.max_clients)
    }

    fn make_room(&self, now: u64) -> bool {
        self.limiter.overflow(now)
    }

    fn release(&self) {
        self.limiter.store.release(1);
    }

    fn activate(&self, cell: &A::Cell, floor: u64) {
        self.limiter.algorithm.activate(cell, floor);
    }

    fn turn_away(&self, now: u64) -> bool {
        let limiter = self.limiter;
        // Sampled eviction makes room for every new client; the other
        // policies answer without tracking it, so at a full cap it need not
        // be inserted (and then removed, leaving a slot that only a rebuild
        // of its shard reclaims).
        if matches!(limiter.memory.overflow, Overflow::EvictSampled { .. })
            || !limiter.store.is_full(limiter.memory.max_clients)
        {
            return false;
        }
        // The short scan for idle clients, as a client inserted at a full cap
        // gets; if it freed room, let the client in the usual way.
        if limiter.overflow(now) {
            limiter.store.release(1);
            return false;
        }
        true
    }

    fn refused(&self, now: u64) -> Option<R> {
        let counters = &self.limiter.counters;
        match self.limiter.memory.overflow {
            Overflow::DenyNew => {
                Counters::add(&counters.overflows, 1);
                Counters::add(&counters.denied_new, 1);
                Some((self.refuse)(&self.limiter.algorithm, now))
            }
            Overflow::AdmitUntracked => {
                Counters::add(&counters.overflows, 1);
                Counters::add(&counters.admitted_untracked, 1);
                None
            }
            // The overflow was counted when sampled eviction was tried.
            Overflow::EvictSampled { .. } => {
                Counters::add(&counters.admitted_untracked, 1);
                None
            }
        }
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
            .field("tier_by", &self.tier_by.as_ref().map(|_| "Fn(&K) -> Tier"))
            .finish_non_exhaustive()
    }
}
