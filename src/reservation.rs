//! Layer 5: a request booked ahead ([`Limiter::reserve`]), and its
//! cancellation.
//!
//! A reservation is charged when it is made, so clients that wait are
//! served in the order they booked. It remembers its client's key and the
//! booking's ticket, and looks the client's state up again to cancel: it
//! never holds a reference into the store across time.
//!
//! This module sits below the limiter: a reservation reaches the limiter
//! it was made on only through [`Booker`], which the limiter implements.

use core::fmt;
use core::hash::Hash;
use core::marker::PhantomData;
use core::time::Duration;

use crate::algorithm::{Both, FixedWindow, SlidingWindowLog, Ticket, TokenBucket};
use crate::cell::{Algorithm, Tiered};
use crate::clock::{Clock, MonotonicClock};

/// An algorithm that books requests ahead
/// ([`Limiter::reserve`](crate::Limiter::reserve) and, with the `tokio`
/// feature, `Limiter::until_ready`): the
/// [`TokenBucket`](crate::TokenBucket), the
/// [`FixedWindow`](crate::FixedWindow), the
/// [`SlidingWindowLog`](crate::SlidingWindowLog), a pair of the first two
/// ([`Both`](crate::Both)), and a [`Tiered`] limiter of any of these.
///
/// The [`SlidingWindowCounter`](crate::SlidingWindowCounter) is not: its
/// state has no room for a charge that counts in a later window. Check it
/// with [`Limiter::check`](crate::Limiter::check) and retry after the
/// decision's [`retry_after`](crate::Decision::retry_after) instead.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiter, Reservable, TokenBucket};
///
/// fn book<A: Reservable>(limiter: &Limiter<A>, client: &str) -> Duration {
///     let reservation = limiter.reserve(client, Duration::MAX).unwrap();
///     let wait = reservation.wait();
///     reservation.commit();
///     wait
/// }
/// let limiter = TokenBucket::builder().rate(1, Duration::from_secs(1)).build()?;
/// assert_eq!(book(&limiter, "alice"), Duration::ZERO);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
///
/// A pair holding a sliding window counter cannot book ahead either, and
/// the compiler says so:
///
/// ```compile_fail,E0277
/// use std::time::Duration;
/// use tollgate::{SlidingWindowCounter, TokenBucket};
///
/// let limiter = TokenBucket::builder()
///     .rate(10, Duration::from_secs(1))
///     .and(SlidingWindowCounter::builder().limit(100).window(Duration::from_secs(60)))
///     .build()?;
/// let _ = limiter.reserve("alice", Duration::MAX); // not `Reservable`
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot book requests ahead",
    label = "`reserve` and `until_ready` need a `Reservable` algorithm",
    note = "a TokenBucket, a FixedWindow, a SlidingWindowLog, a pair of buckets and fixed windows, or a tiered limiter of them can; a SlidingWindowCounter cannot: check it and retry after `Decision::retry_after`"
)]
pub trait Reservable: Algorithm {}

impl Reservable for TokenBucket {}
impl Reservable for FixedWindow {}
impl Reservable for SlidingWindowLog {}
impl<A: Reservable, B: Reservable> Reservable for Both<A, B> where Both<A, B>: Algorithm {}
impl<A: Reservable> Reservable for Tiered<A> where Tiered<A>: Algorithm {}

/// What a reservation needs of the limiter it was made on: its clock, and
/// the cancellation of a booking. Implemented by the limiter.
pub(crate) trait Booker<K>: Sync {
    /// The limiter's clock, read now.
    fn now_nanos(&self) -> u64;

    /// Cancels `ticket`'s booking for `client`: true iff its charge (or,
    /// on a log, any of it) was given back.
    fn give_back(&self, client: &K, ticket: &Ticket) -> bool;
}

/// A request booked ahead: charged now, allowed from
/// [`ready_at`](Reservation::ready_at), [`wait`](Reservation::wait) after
/// it was made.
///
/// Made by [`Limiter::reserve`](crate::Limiter::reserve) and
/// [`Limiter::reserve_n`](crate::Limiter::reserve_n). What to do with
/// it:
///
/// - **proceed**: wait [`wait`](Reservation::wait) (or until
///   [`is_ready`](Reservation::is_ready)), make the request, and call
///   [`commit`](Reservation::commit);
/// - **give up**: call [`cancel`](Reservation::cancel), or drop it. Before
///   its time, that gives the charge back if nothing was charged to the
///   client since (on a [`SlidingWindowLog`](crate::SlidingWindowLog): the
///   slots no later booking has claimed from it; see
///   [`cancel`](Reservation::cancel)); once its time has come, the charge
///   stands.
///
/// Call `commit` whenever you act on a reservation: dropping one cancels it
/// if the limiter's clock has not yet reached `ready_at`, and a
/// [`CoarseClock`](crate::CoarseClock) (or any clock read a little behind
/// the time your thread slept by) can still be short of it when your sleep
/// ends. A reservation with no wait is consumed at once: `commit`, `cancel`
/// and drop then do nothing.
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
///     .capacity(1)
///     .clock(clock.clone())
///     .build()?;
/// assert!(limiter.allow_request("alice"));
/// let reservation = limiter.reserve("alice", Duration::from_secs(5)).unwrap();
/// assert_eq!(reservation.wait(), Duration::from_secs(1));
/// clock.advance(reservation.wait()); // a real caller sleeps here
/// assert!(reservation.is_ready());
/// reservation.commit();
/// assert!(!limiter.allow_request("alice"), "the booking took the token");
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[must_use = "dropping a reservation before its time cancels it; call `commit` when you proceed"]
pub struct Reservation<'a, A, K = String, C = MonotonicClock>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    booker: &'a (dyn Booker<K> + 'a),
    wait: Duration,
    ready_at: u64,
    cost: u64,
    /// The client and the booking, while a cancellation could still give
    /// something back; `None` once committed, cancelled, or if the booking
    /// never waited.
    pending: Option<(K, Ticket)>,
    _limiter: PhantomData<fn() -> (A, C)>,
}

impl<'a, A, K, C> Reservation<'a, A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// A booking made at the reading `now` for `client`, or with nothing to
    /// give back (`client` `None`: cost 0, or no wait).
    pub(crate) fn new(
        booker: &'a (dyn Booker<K> + 'a),
        ticket: Option<(Ticket, u64)>,
        now: u64,
        client: impl FnOnce() -> K,
    ) -> Self {
        let Some((ticket, wait)) = ticket else {
            return Self {
                booker,
                wait: Duration::ZERO,
                ready_at: now,
                cost: 0,
                pending: None,
                _limiter: PhantomData,
            };
        };
        Self {
            booker,
            wait: Duration::from_nanos(wait),
            ready_at: ticket.ready_at(),
            cost: ticket.cost(),
            pending: (wait > 0).then(|| (client(), ticket)),
            _limiter: PhantomData,
        }
    }

    /// How long after the reservation was made the request may proceed: 0
    /// if it could at once.
    #[must_use]
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The instant from which the request may proceed, as a time since the
    /// origin of the limiter's clock (what [`Clock::now_nanos`] counts).
    #[must_use]
    pub fn ready_at(&self) -> Duration {
        Duration::from_nanos(self.ready_at)
    }

    /// How long from now, by the limiter's clock, until the request may
    /// proceed: 0 once it may.
    #[must_use]
    pub fn remaining_wait(&self) -> Duration {
        Duration::from_nanos(self.ready_at.saturating_sub(self.booker.now_nanos()))
    }

    /// Whether the limiter's clock has reached [`ready_at`](Self::ready_at).
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.booker.now_nanos() >= self.ready_at
    }

    /// The units booked.
    #[must_use]
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Keeps the charge, however early: the caller proceeds (or will, at
    /// [`ready_at`](Self::ready_at)). Dropping the reservation afterwards
    /// changes nothing.
    pub fn commit(mut self) {
        self.pending = None;
    }

    /// Gives the charge back if the booking is still the last thing
    /// charged to the client and its time has not come; true iff it did.
    ///
    /// The rule is exact: the client's state is then set back to what it
    /// was just before the booking, as if it had never been made. If
    /// anything was charged to the client since (a check, another booking
    /// that has not itself been cancelled), nothing is given back: those
    /// later requests were timed on top of this booking, and handing its
    /// share out again would let a new request take the very capacity they
    /// are waiting for. Cancelling bookings newest first gives all of them
    /// back. Nothing is given back either once the limiter's clock has
    /// reached [`ready_at`](Self::ready_at), or if the client's state has
    /// since been forgotten (only possible under
    /// [`Overflow::EvictSampled`](crate::Overflow::EvictSampled) at a full
    /// cap: a client with a booking pending is never idle).
    ///
    /// A [`SlidingWindowLog`](crate::SlidingWindowLog) gives back by its
    /// slots instead: each slot the booking claimed that no later booking
    /// has claimed from it gets back the expiry it held before, and `cancel`
    /// returns true iff any did. Every request holds slots of its own, so
    /// this takes nothing from the requests made after it; they keep their
    /// times.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(1))
    ///     .capacity(1)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// let first = limiter.reserve("alice", Duration::MAX).unwrap();
    /// let second = limiter.reserve("alice", Duration::MAX).unwrap();
    /// assert_eq!(second.wait(), Duration::from_secs(2));
    /// assert!(!first.cancel(), "the second was timed on top of it");
    /// assert!(second.cancel(), "the newest goes back");
    /// // The first's second of waiting is lost; nothing else was handed out twice.
    /// assert_eq!(limiter.reserve("alice", Duration::MAX).unwrap().wait(), Duration::from_secs(2));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use = "the result says whether anything was given back; ignore it with `let _ =`"]
    pub fn cancel(mut self) -> bool {
        self.give_back()
    }

    fn give_back(&mut self) -> bool {
        match self.pending.take() {
            Some((client, ticket)) => self.booker.give_back(&client, &ticket),
            None => false,
        }
    }
}

impl<A, K, C> Drop for Reservation<'_, A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// Cancels the reservation (see [`Reservation::cancel`]) unless it was
    /// committed or its time has come.
    fn drop(&mut self) {
        let _ = self.give_back();
    }
}

impl<A, K, C> fmt::Debug for Reservation<'_, A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("wait", &self.wait)
            .field("ready_at", &self.ready_at())
            .field("cost", &self.cost)
            .field("cancellable", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}
