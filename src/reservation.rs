//! Layer 5: a request booked ahead ([`Limiter::reserve`]), and its
//! cancellation.
//!
//! A reservation is charged when it is made, so clients that wait are
//! served in the order they booked. It remembers its client's key and the
//! booking's ticket, and looks the client's state up again to cancel: it
//! never holds a reference into the store across time.

use core::fmt;
use core::hash::Hash;
use core::time::Duration;

use crate::algorithm::Ticket;
use crate::cell::Algorithm;
use crate::clock::{Clock, MonotonicClock};
use crate::limiter::Limiter;

/// A request booked ahead: charged now, allowed from
/// [`ready_at`](Reservation::ready_at), [`wait`](Reservation::wait) after
/// it was made.
///
/// Made by [`Limiter::reserve`] and [`Limiter::reserve_n`]. What to do with
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
    limiter: &'a Limiter<A, K, C>,
    wait: Duration,
    ready_at: u64,
    cost: u64,
    /// The client and the booking, while a cancellation could still give
    /// something back; `None` once committed, cancelled, or if the booking
    /// never waited.
    pending: Option<(K, Ticket)>,
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
        limiter: &'a Limiter<A, K, C>,
        ticket: Option<(Ticket, u64)>,
        now: u64,
        client: impl FnOnce() -> K,
    ) -> Self {
        let Some((ticket, wait)) = ticket else {
            return Self {
                limiter,
                wait: Duration::ZERO,
                ready_at: now,
                cost: 0,
                pending: None,
            };
        };
        Self {
            limiter,
            wait: Duration::from_nanos(wait),
            ready_at: ticket.ready_at(),
            cost: ticket.cost(),
            pending: (wait > 0).then(|| (client(), ticket)),
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
        Duration::from_nanos(
            self.ready_at
                .saturating_sub(self.limiter.clock().now_nanos()),
        )
    }

    /// Whether the limiter's clock has reached [`ready_at`](Self::ready_at).
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.limiter.clock().now_nanos() >= self.ready_at
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
            Some((client, ticket)) => self.limiter.give_back(&client, &ticket),
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
