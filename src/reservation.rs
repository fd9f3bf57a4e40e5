//! Layer 5: a request booked ahead ([`Limiter::reserve`]), and its
//! cancellation.
//!
//! A reservation is charged when it is made, so clients that wait are
//! served in the order they booked. It remembers its client's key, the
//! booking's ticket and the *stamp* of the state it booked on, and looks
//! the client's state up again to cancel: it never holds a reference into
//! the store across time.
//!
//! # Whose state a ticket may touch
//!
//! The tail rule restores the state a booking found iff the client's
//! state is still exactly the one the booking left. A client's state can be
//! *replaced* (by `reset`, by `remove` or sampled eviction and the client's
//! return, by a quota change), and the new state can come round to that
//! very word. So every replacement *renews* the client's stamp
//! ([`Renewals`]), and a cancel acts only if the stamp it booked under is
//! still current, checked so that no replacement can fall between the
//! check and the cancel's exchange:
//!
//! - a replacement that retires the state (remove, eviction, a quota
//!   change's carry) marks the stamp *before* it retires and again after.
//!   A retired cell never comes alive, so a cancel's exchange on it fails;
//!   and a cancel that finds the new state found it after the first mark,
//!   so it sees the stamp changed.
//! - a reset in place writes a fresh state into the same cell, so it and
//!   a cancel exclude each other for that instant: the cancel counts itself
//!   in progress on the stamp's stripe from its stamp test to the end of
//!   its exchange, and the reset marks the stamp only while no cancel is in
//!   progress. A reset never waits for a cancel: if one is in progress, the
//!   reset retires the state instead (it forgets the client, as a removal
//!   does), which needs no exclusion. Cancels never exclude each other
//!   (their exchanges on the state are compare-and-swaps), so any number
//!   may be in progress at once, and none waits for another.
//!
//! A cancel runs no user code while it is counted in progress: it hashes
//! the key, looks the client's state up and reads the clock first, and
//! only then tests its stamp and makes its exchange. So a key's `Hash` or a
//! clock that stalls holds up only its own cancel, never a reset (which
//! would otherwise forget the stripe's clients for as long) or another
//! cancel.
//!
//! Stamps are kept per stripe of clients (by the key's hash), not per
//! client, so a client's state stays one word; a replacement therefore
//! also ends the cancellability of the bookings of the other clients of
//! its stripe (they give nothing back, the safe direction). Neither a
//! check nor an idle eviction touches the stamps: a client with a booking
//! pending is never idle, and a cancel reads the clock, past the
//! evictions' readings, only once it has found the state (each time it
//! finds one, if it must look again).
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
use crate::sync::{AtomicU64, Ordering};

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

    /// Cancels `ticket`'s booking for `client` on the state stamped
    /// `stamp`: true iff its charge (or,
    /// on a log, any of it) was given back.
    fn give_back(&self, client: &K, ticket: &Ticket, stamp: Stamp) -> bool;
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
    /// The client, the booking and the stamp of the state it was booked on
    /// (see [`Renewals`]), while a cancellation could still give something
    /// back; `None` once committed, cancelled, or if the booking never
    /// waited.
    pending: Option<(K, Ticket, Stamp)>,
    _limiter: PhantomData<fn() -> (A, C)>,
}

impl<'a, A, K, C> Reservation<'a, A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// A booking made at the reading `now` for `client` on the state
    /// stamped `stamp`, or with nothing to give back (`ticket` `None`: cost
    /// 0), or no wait.
    pub(crate) fn new(
        booker: &'a (dyn Booker<K> + 'a),
        ticket: Option<(Ticket, u64, Stamp)>,
        now: u64,
        client: impl FnOnce() -> K,
    ) -> Self {
        let Some((ticket, wait, stamp)) = ticket else {
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
            pending: (wait > 0).then(|| (client(), ticket, stamp)),
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
    /// been replaced since the booking: by
    /// [`reset`](crate::Limiter::reset), by [`remove`](crate::Limiter::remove) (or by
    /// [`Overflow::EvictSampled`](crate::Overflow::EvictSampled) at a full
    /// cap) and the client's return, or by a quota change
    /// (`set_quota`). A cancel acts only on the state it was booked on,
    /// even if a new state has come to look exactly like it. Such a
    /// replacement also ends, to keep the state one word per client, the
    /// cancellability of bookings of other clients that share its stripe
    /// (one in 256 by the key's hash; every client for a quota change):
    /// they give nothing back, the safe direction.
    ///
    /// A cancel never waits for another thread: not for a reset, nor for
    /// another cancel (of this client or any other), however long that
    /// one is held up. If over a thousand cancels are in progress at the
    /// same instant on its stripe, it gives nothing back, the safe
    /// direction.
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
            Some((client, ticket, stamp)) => self.booker.give_back(&client, &ticket, stamp),
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

/// The stamp of a client's state at a booking: its stripe's word with the
/// count of cancels in progress cleared ([`Renewals`]).
pub(crate) type Stamp = u64;

/// The stamps of the limiter's clients' states, one word per stripe of
/// clients (picked by the key's hash). Bits 0 to 9 count the cancels in
/// progress on the stripe (a reset finding any does not reset in place);
/// bits 10 to 24 count the replacements under way; bits 25 and up count
/// the replacements begun and ended. A stamp is current iff no replacement
/// has begun since it was read; one read while a replacement was under way
/// is never current. The count of replacements wraps after 2^39 of them in
/// one stripe: a booking still pending after that many could meet its
/// stamp again, and then only the tail rule stands between it and a state
/// that has come round to its very word.
///
/// Public (but unreachable outside `--features loom`) for the loom model of
/// a cancel racing a reset.
#[doc(hidden)]
#[derive(Debug)]
#[cfg_attr(not(feature = "loom"), allow(unreachable_pub))]
pub struct Renewals {
    stripes: Box<[AtomicU64]>,
}

#[cfg_attr(not(feature = "loom"), allow(unreachable_pub))]
impl Renewals {
    /// Stripes: enough that a replacement ends few other clients' bookings'
    /// cancellability, few enough to be 2 KiB per limiter.
    const STRIPES: usize = 256;
    /// Bits 0 to 9: the cancels in progress, each from its stamp test to the
    /// end of its exchange; a reset that finds any resets by retiring the
    /// state instead. One more is one added.
    const CANCELS: u64 = 0x3ff;
    /// Bits 10 to 24: replacements under way.
    const BUSY: u64 = 0x7fff << 10;
    /// A replacement begins: one more under way, one more begun.
    const BEGIN: u64 = (1 << 25) + (1 << 10);
    /// A replacement ends: one fewer under way, one more count (as a wrapping
    /// add: `+ (1 << 25) - (1 << 10)`).
    const END: u64 = (1 << 25) - (1 << 10);

    /// Stamps for a limiter's clients, none renewed yet.
    pub fn new() -> Self {
        Self::with_stripes(Self::STRIPES)
    }

    /// As [`Renewals::new`] with `n` stripes (the loom models use one).
    pub fn with_stripes(n: usize) -> Self {
        Self {
            stripes: (0..n.max(1)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn stripe(&self, hash: u64) -> &AtomicU64 {
        // The hash's middle bits: its top bits pick the store's shard, its
        // low bits the slot.
        &self.stripes[(hash >> 24) as usize % self.stripes.len()]
    }

    /// The stamp a booking on the client hashed `hash` carries: read after
    /// the client's state is found and before the booking's exchange.
    #[inline]
    pub fn stamp(&self, hash: u64) -> Stamp {
        // Acquire: pairs with the Release half of every mark (`renew`'s),
        // so a stamp that counts a replacement's end is read after that
        // replacement wrote the state this booking's exchange then finds.
        self.stripe(hash).load(Ordering::Acquire) & !Self::CANCELS
    }

    /// Runs `replace`, which retires the state of the client hashed `hash`
    /// (remove, eviction, a quota change's carry), between two marks of
    /// its stamp: no stamp read before it stays current.
    pub fn renew<R>(&self, hash: u64, replace: impl FnOnce() -> R) -> R {
        let stripe = self.stripe(hash);
        // AcqRel: the Release half orders this mark before the retirement
        // that follows (a cancel that finds the state which replaces the
        // retired one reads this mark or a later one); the Acquire half
        // orders the retirement after every cancel's leaving read here.
        stripe.fetch_add(Self::BEGIN, Ordering::AcqRel);
        // Ended however `replace` leaves (a key's `Hash` may panic): a
        // replacement left under way would keep the stripe's stamps from
        // ever being current again.
        let _end = Mark(stripe, Self::END);
        replace()
    }

    /// As [`Renewals::renew`] for a replacement in place (a reset, which
    /// writes a fresh state into the same cell): marks the stamp in the
    /// same exchange that sees no cancel in progress on the stripe, and
    /// runs `in_place` between the marks, so no cancel's test and exchange
    /// can straddle the write. Never waits for a cancel: if one is in
    /// progress, marks nothing and runs `instead`, which must replace the
    /// state by retiring it (forget the client, through
    /// [`Renewals::renew`]), so that the cancel's exchange fails on the
    /// retired state.
    pub fn renew_in_place<R>(
        &self,
        hash: u64,
        in_place: impl FnOnce() -> R,
        instead: impl FnOnce() -> R,
    ) -> R {
        let stripe = self.stripe(hash);
        // Acquire: pairs with the Release of a cancel's leaving, so that
        // cancel's exchange happens before the reset's write.
        let mut seen = stripe.load(Ordering::Acquire);
        loop {
            if seen & Self::CANCELS != 0 {
                return instead();
            }
            // AcqRel on success: as in `renew`, and Acquire as the load
            // above; Acquire on failure: as the load above. A failure means
            // another thread changed the stripe (a mark, a cancel coming or
            // leaving), or a spurious one: look again, never waiting.
            match stripe.compare_exchange_weak(
                seen,
                seen.wrapping_add(Self::BEGIN),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => seen = now,
            }
        }
        let _end = Mark(stripe, Self::END);
        in_place()
    }

    /// As [`Renewals::renew`] for every client at once (a quota change).
    pub fn renew_all<R>(&self, replace: impl FnOnce() -> R) -> R {
        for stripe in &*self.stripes {
            // AcqRel, Release: as in `renew`, stripe by stripe.
            stripe.fetch_add(Self::BEGIN, Ordering::AcqRel);
        }
        // Ended however `replace` leaves, as in `renew`.
        let _end: Vec<_> = self.stripes.iter().map(|s| Mark(s, Self::END)).collect();
        replace()
    }

    /// Runs `exchange`, a cancel's exchange on the state of the client
    /// hashed `hash` that it has already found, iff `stamp` is still
    /// current, counted among the stripe's cancels in progress while it
    /// runs, so that no reset in place lands between the test and the
    /// exchange; `Some(false)` without running it otherwise. A retiring
    /// replacement may still begin meanwhile: then the exchange fails on
    /// the retired state (and answers `None`, as `exchange` does on a state
    /// not alive), and the test fails on the state that replaced it.
    ///
    /// Never waits for another thread: any number of cancels may be in
    /// progress at once, and a reset never holds anything a cancel needs.
    /// Its one compare-and-swap fails only when another thread has changed
    /// the stripe meanwhile. Run no user code in `exchange`: a cancel that
    /// stalled there would make the stripe's resets forget their clients
    /// instead of resetting them, for as long as it stalls. If 1 023
    /// cancels are in progress on the stripe already, gives nothing back
    /// (`Some(false)`), the safe direction.
    pub fn cancel(
        &self,
        hash: u64,
        stamp: Stamp,
        exchange: impl FnOnce() -> Option<bool>,
    ) -> Option<bool> {
        if stamp & Self::BUSY != 0 {
            return Some(false);
        }
        let stripe = self.stripe(hash);
        // Acquire: pairs with the Release half of a retiring replacement's
        // first mark, ordered before the retirement: a cancel that found
        // the state replacing the retired one reads this mark or a later
        // one, and its test fails.
        let mut seen = stripe.load(Ordering::Acquire);
        loop {
            if seen & !Self::CANCELS != stamp || seen & Self::CANCELS == Self::CANCELS {
                return Some(false);
            }
            // AcqRel on success: Acquire as the load above; Release orders
            // nothing a reset needs (it pairs with the leaving's Release)
            // but costs nothing. Acquire on failure: as the load above. A
            // failure means another thread changed the stripe (a mark, a
            // cancel coming or leaving), or a spurious one: test again.
            match stripe.compare_exchange_weak(seen, seen + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => seen = now,
            }
        }
        // Counted out however `exchange` leaves, so that resets go back to
        // resetting in place.
        let _leave = Mark(stripe, 1u64.wrapping_neg());
        exchange()
    }
}

/// Adds its value to a stripe when dropped (wrapping): the end of a
/// replacement, or a cancel's leaving.
struct Mark<'a>(&'a AtomicU64, u64);

impl Drop for Mark<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire in `Renewals::stamp` (a
        // replacement's end: a booking that counts it books on the
        // replacing state) and in `renew_in_place` (a cancel's leaving: its
        // exchange happens before the reset's write).
        self.0.fetch_add(self.1, Ordering::Release);
    }
}

impl Default for Renewals {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    /// A cancel in progress (here: inside another's exchange, as if that
    /// one were descheduled there) never makes a second one wait, on the
    /// same stripe, nor a reset; the stripe is left as it was found.
    #[test]
    fn cancels_share_their_stripe_and_a_reset_never_waits_for_them() {
        let renewals = Renewals::with_stripes(1);
        let stamp = renewals.stamp(0);
        let (outer, inner, reset) = std::thread::scope(|scope| {
            let worker = scope.spawn(|| {
                let mut inner = None;
                let mut reset = None;
                let outer = renewals.cancel(0, stamp, || {
                    inner = renewals.cancel(0, stamp, || Some(true));
                    reset = Some(renewals.renew_in_place(0, || "in place", || "instead"));
                    Some(true)
                });
                (outer, inner, reset)
            });
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !worker.is_finished() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "a cancel waited for a cancel in progress on its stripe"
                );
                std::thread::yield_now();
            }
            worker.join().unwrap()
        });
        assert_eq!(outer, Some(true));
        assert_eq!(
            inner,
            Some(true),
            "the second cancel ran while the first was in progress"
        );
        assert_eq!(
            reset,
            Some("instead"),
            "a reset meeting a cancel in progress retires"
        );
        // The reset marked nothing; both cancels counted themselves out.
        assert_eq!(renewals.stamp(0), stamp);
        assert_eq!(renewals.stripes[0].load(Ordering::Relaxed), stamp);
        assert_eq!(
            renewals.renew_in_place(0, || "in place", || "instead"),
            "in place"
        );
        assert_ne!(
            renewals.stamp(0),
            stamp,
            "a reset in place renews the stamp"
        );
        assert_eq!(renewals.cancel(0, stamp, || Some(true)), Some(false));
    }

    /// A stamp read while a replacement is under way is never current, and
    /// one read before a replacement began is not current after it.
    #[test]
    fn a_cancel_acts_only_on_a_current_stamp() {
        let renewals = Renewals::with_stripes(1);
        let before = renewals.stamp(0);
        let (during, during_cancel) = renewals.renew(0, || {
            let during = renewals.stamp(0);
            (during, renewals.cancel(0, during, || Some(true)))
        });
        assert_eq!(during_cancel, Some(false), "a replacement was under way");
        assert_eq!(renewals.cancel(0, during, || Some(true)), Some(false));
        assert_eq!(renewals.cancel(0, before, || Some(true)), Some(false));
        let after = renewals.stamp(0);
        assert_eq!(
            renewals.cancel(0, after, || None),
            None,
            "the exchange's answer"
        );
        assert_eq!(renewals.cancel(0, after, || Some(true)), Some(true));
        // Every stripe renewed by a quota change.
        let renewals = Renewals::with_stripes(4);
        let stamps: Vec<_> = (0..4u64).map(|i| renewals.stamp(i << 24)).collect();
        renewals.renew_all(|| ());
        for (i, stamp) in stamps.into_iter().enumerate() {
            assert_eq!(
                renewals.cancel((i as u64) << 24, stamp, || Some(true)),
                Some(false)
            );
        }
    }

    /// With the count of cancels in progress full, one more gives nothing
    /// back rather than carry into the count of replacements.
    #[test]
    fn a_cancel_past_the_most_in_progress_gives_nothing_back() {
        let renewals = Renewals::with_stripes(1);
        let stamp = renewals.stamp(0);
        renewals.stripes[0].fetch_add(Renewals::CANCELS - 1, Ordering::Relaxed);
        // The last one that fits.
        assert_eq!(
            renewals.cancel(0, stamp, || {
                assert_eq!(
                    renewals.cancel(0, stamp, || Some(true)),
                    Some(false),
                    "one too many"
                );
                Some(true)
            }),
            Some(true)
        );
        renewals.stripes[0].fetch_sub(Renewals::CANCELS - 1, Ordering::Relaxed);
        assert_eq!(renewals.stripes[0].load(Ordering::Relaxed), stamp);
        assert_eq!(renewals.stamp(0), stamp, "no replacement counted");
        assert_eq!(renewals.cancel(0, stamp, || Some(true)), Some(true));
    }
}
