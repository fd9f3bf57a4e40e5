//! Acting on one client's state: booking ahead and cancelling
//! ([`Limiter::reserve`], through the [`Booker`] a reservation holds),
//! resetting and forgetting it ([`Limiter::reset`], [`Limiter::remove`]).
//!
//! What a booking checks and does on a state, whoever holds it, is
//! [`terms`] and [`book_on`]: the keyed limiter runs them on a client's
//! cell in its store, the direct limiter on its one cell.

use core::borrow::Borrow;
use core::hash::Hash;
use core::time::Duration;

use super::Limiter;
use crate::algorithm::Ticket;
use crate::cell::{Algorithm, Booking};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::ReserveError;
use crate::reservation::{Booker, Reservable, Reservation, Stamp};
use crate::store::{act_on_live, forget_client, reset_client};

impl<A, K, C> Limiter<A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
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
        A: Reservable,
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
    /// Only these algorithms offer the method (they are [`Reservable`]).
    /// The [`SlidingWindowCounter`](crate::SlidingWindowCounter)'s state
    /// has no room for a charge that counts in a later window, so booking
    /// on it (or on a pair holding one) does not compile:
    ///
    /// ```compile_fail,E0277
    /// use std::time::Duration;
    /// use tollgate::SlidingWindowCounter;
    ///
    /// let limiter = SlidingWindowCounter::builder()
    ///     .limit(10)
    ///     .window(Duration::from_secs(1))
    ///     .build()?;
    /// let _ = limiter.reserve_n("alice", 1, Duration::MAX); // not `Reservable`
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
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
    ///   ([`Overflow::DenyNew`](crate::Overflow::DenyNew));
    /// - [`ReserveError::Unsupported`] for a fixed window (or a pair or a
    ///   tier holding one) whose limit lies in the top half of its range,
    ///   where its state word has no room for the windows a booking closes.
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
        A: Reservable,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.book_n(client_id, cost, max_wait)
    }

    /// [`reserve_n`](Self::reserve_n) for any algorithm: one that cannot
    /// book ahead answers [`ReserveError::Unsupported`] (the Redis
    /// limiter's fallback, whose algorithm is known only at run time).
    pub(crate) fn book_n<Q>(
        &self,
        client_id: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Reservation<'_, A, K, C>, ReserveError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let Some(max_wait) = terms(&self.algorithm, cost, max_wait)? else {
            let now = self.clock.now_nanos();
            return Ok(Reservation::new(self, None, now, || client_id.to_owned()));
        };
        let hash = self.store.hash_of(client_id);
        let (booked, now) = self.run(
            client_id,
            cost,
            |algorithm, cell, now| {
                // The stamp of the state found, read before the booking's
                // exchange on it (see `crate::reservation`).
                let stamp = self.renewals.stamp(hash);
                let booked = book_on(algorithm, cell, now, cost, max_wait)?;
                if let Ok((_, wait)) = booked {
                    // Its client stays busy until a horizon after it.
                    self.counters.booked(now.saturating_add(wait));
                }
                Some(booked.map(|(ticket, wait)| ((ticket, wait, stamp), now)))
            },
            |_, wait| {
                Err(ReserveError::Full {
                    retry_after: Decision::wait(wait),
                })
            },
        )?;
        Ok(Reservation::new(self, Some(booked), now, || {
            client_id.to_owned()
        }))
    }

    /// Cancels `ticket`'s booking for `client` by the tail rule, iff the
    /// state it was booked on (stamped `stamp`) is still the client's: true
    /// iff its charge was given back. The client is looked up past dead
    /// cells (`act_on_live`): one a table rebuild moved while we looked has
    /// its live copy in the new table; an evicted one's replacement fails
    /// the stamp's test. The clock is read once the state is found, after
    /// any eviction whose effect the look saw (so, with a clock that never
    /// goes back, after the booking's time if an idle eviction forgot the
    /// state it was booked on: nothing is given back to its replacement). Both the
    /// look-up (the key's `Hash` and `Eq`) and the clock run before the
    /// cancel counts itself in progress on its stripe of stamps, so no user
    /// code runs while it is (see `crate::reservation`).
    pub(crate) fn give_back(&self, client: &K, ticket: &Ticket, stamp: Stamp) -> bool {
        let algorithm = &self.algorithm;
        let hash = self.store.hash_of(client);
        act_on_live(&self.store, client, |cell| {
            let now = self.clock.now_nanos();
            self.renewals
                .cancel(hash, stamp, || algorithm.unreserve(cell, now, ticket))
        })
        .unwrap_or(false)
    }

    /// `client_id`'s hash under the store's randomly seeded hasher:
    /// unpredictable to clients, different for every limiter (the waiting
    /// skin's jitter is drawn from it).
    #[cfg(feature = "tokio")]
    pub(crate) fn key_hash<Q: Hash + ?Sized>(&self, client_id: &Q) -> u64 {
        self.store.hash_of(client_id)
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
    /// A reservation booked before the reset gives nothing back when
    /// cancelled. A reset never waits for another thread: if a reservation's
    /// cancel is in progress at that instant (of this client, or of one
    /// sharing its stripe; see [`Reservation::cancel`]), a fresh state in
    /// the same cell could be mistaken for the cancelled booking's, so the
    /// reset forgets the client instead, as `remove` does: it starts afresh
    /// all the same, and takes a unit of room again on its next request.
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
        let algorithm = &self.algorithm;
        // A new state in the same cell: old bookings' tickets must not
        // touch it (see `crate::reservation`).
        let hash = self.store.hash_of(client_id);
        // A cancel on the stripe in progress: forget the client instead,
        // which retires its state (its exchange then fails) and needs no
        // wait for the cancel.
        self.renewals.renew_in_place(
            hash,
            || {
                reset_client(
                    &self.store,
                    client_id,
                    // A fresh state: as if it had never made a request.
                    |cell| algorithm.reset(cell, 0),
                    || self.remove(client_id),
                )
            },
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
    /// afresh, as a new client. A
    /// client being added at this instant is left to come in: the removal
    /// takes effect before it. Unlike an eviction of an idle client, this
    /// changes decisions by intent, and [`stats`](Self::stats) does not
    /// count it as an eviction.
    ///
    /// Never waits for another thread. If another thread is writing the
    /// client's part of the table at that instant (adding a client, sweeping,
    /// or rebuilding it, perhaps descheduled half way), the retired entry is
    /// left in the table for later: the client reads as absent at once, but
    /// its unit of room comes back, and [`len`](Self::len) stops counting
    /// it, only when the entry is next met: by the client's next request, a
    /// sweep, a rebuild of that part of the table, or another `remove` or
    /// `reset` of it. Until then it counts against `max_clients`.
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
        let algorithm = &self.algorithm;
        let hash = self.store.hash_of(client_id);
        self.renewals.renew(hash, || {
            forget_client(&self.store, client_id, |cell| algorithm.force_evict(cell))
        })
    }
}

impl<A, K, C> Booker<K> for Limiter<A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    fn now_nanos(&self) -> u64 {
        self.clock.now_nanos()
    }

    fn give_back(&self, client: &K, ticket: &Ticket, stamp: Stamp) -> bool {
        Limiter::give_back(self, client, ticket, stamp)
    }
}

/// What every booking settles before it touches a state, keyed or direct:
/// [`ReserveError::Unsupported`] for an algorithm that cannot book ahead,
/// [`ReserveError::Cost`] for a cost above the capacity; else `None` for a
/// cost of 0 (ready at once, charging nothing), or the longest wait
/// allowed in ns.
pub(super) fn terms<A: Algorithm>(
    algorithm: &A,
    cost: u64,
    max_wait: Duration,
) -> Result<Option<u64>, ReserveError> {
    if !algorithm.can_reserve() {
        return Err(ReserveError::Unsupported);
    }
    if cost == 0 {
        return Ok(None);
    }
    super::within_capacity(algorithm, cost)?;
    Ok(Some(u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX)))
}

/// Books `cost` (in `1..=capacity`) on `cell` at the reading `now`, waiting
/// at most `max_wait` ns: the booking's ticket and its wait in ns, or why
/// nothing was charged. `None` if the cell is not alive (the keyed store
/// then looks again).
pub(super) fn book_on<A: Algorithm>(
    algorithm: &A,
    cell: &A::Cell,
    now: u64,
    cost: u64,
    max_wait: u64,
) -> Option<Result<(Ticket, u64), ReserveError>> {
    Some(match algorithm.reserve(cell, now, cost, max_wait)? {
        Booking::Granted(ticket, wait) => Ok((ticket, wait)),
        Booking::TooLong(wait) => Err(ReserveError::TooLong {
            wait: Decision::wait(wait),
        }),
        Booking::Unsupported => Err(ReserveError::Unsupported),
    })
}
