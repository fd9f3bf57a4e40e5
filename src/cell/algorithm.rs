//! The [`Algorithm`] trait: the interface between the limiter and the cell
//! layer, and its implementation for every state a [`StateCell`] packs,
//! written once over the pure transitions: a check runs its transition
//! through the one CAS loop (`StateCell::apply`), a booking and a
//! cancellation likewise.

use super::{Applied, Mortal, Packed, PairCell, StateCell, Tier};
use crate::algorithm::{
    clamp_now, unreserve, until, Both, FixedWindow, FromParams, Params, Reserve,
    SlidingWindowCounter, Ticket, TokenBucket, Transitions, Wide, WordAlgorithm, NEVER,
};
use crate::decision::{Decision, LimitFigures};
use crate::error::ConfigError;

/// A rate-limiting algorithm that a [`Limiter`](crate::Limiter) can run:
/// [`TokenBucket`](crate::TokenBucket),
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter),
/// [`SlidingWindowLog`](crate::SlidingWindowLog) or
/// [`FixedWindow`](crate::FixedWindow); two of the word algorithms held
/// together ([`Both`](crate::Both)); or a [`Tiered`](crate::Tiered) limiter
/// of any of these but the log.
///
/// Its methods are the crate's internal interface between the limiter and
/// the cell layer, hidden from these docs; it cannot be implemented outside
/// tollgate (a cell type is one of the crate's own). Use it to write code
/// generic over the algorithm.
///
/// # Examples
///
/// ```
/// use tollgate::{Algorithm, Limiter};
///
/// fn admit_all<A: Algorithm>(limiter: &Limiter<A>, ids: &[&str]) -> usize {
///     ids.iter().filter(|id| limiter.allow_request(**id)).count()
/// }
/// # let l = tollgate::FixedWindow::builder().limit(1).window(std::time::Duration::from_secs(1)).build().unwrap();
/// # assert_eq!(admit_all(&l, &["a", "a", "b"]), 2);
/// ```
pub trait Algorithm: Send + Sync + 'static {
    // Sealed by `Cell`: its bound `Mortal` cannot be named outside the
    // crate, so no other crate can give an algorithm a cell.
    // The methods below are hidden from the docs: `cost` is always in
    // `1..=capacity()`, because the limiter rejects the rest before calling.
    // "Dead" means the cell is not alive (see `Mortal`); the limiter then
    // retries on the map's current entry.

    /// One client's state.
    #[doc(hidden)]
    type Cell: Mortal + Send + Sync + 'static;

    #[doc(hidden)]
    /// Whether a new client's live fresh cell, made before its insert, is
    /// still right however late the insert lands: false where a cell names
    /// state that a quota change replaces (a tiered cell names an entry of
    /// the quota table, which a change retires once it has carried every
    /// cell in the map over), so that such a cell is inserted unborn and
    /// brought to life after its insert, when it reads the current table.
    const BORN_BEFORE_INSERT: bool = true;

    #[doc(hidden)]
    /// Whether a new client's state is made fresh from the reading of the
    /// request that brings it in (`fresh_cell(reading)`) rather than fresh
    /// at every reading: true where a lagging reading, one taken before
    /// the client's previous state was forgotten, that finds the new state
    /// could otherwise spend on it what the old one had spent at that
    /// reading (the log, whose admissions each free a slot at their own
    /// reading plus the window). The word algorithms record a lagging
    /// request in the window or the refill of the new state after its
    /// first decision (which, without a cap, is in the state before any
    /// other thread can see it), and are born fresh at every reading, as
    /// a client never seen: their quota changes then treat them as one.
    const BORN_AT_READING: bool = false;

    #[doc(hidden)]
    /// The algorithm a builder's settings describe (`FromParams`).
    fn from_settings(params: &Params) -> Result<Self, ConfigError>
    where
        Self: Sized;

    #[doc(hidden)]
    /// The quota the settings grant: `(limit, window in ns)` (`FromParams`).
    fn quota_granted(&self) -> (u64, u64);

    #[doc(hidden)]
    /// The state of a client never seen before, alive, with no history.
    fn new_cell(&self) -> Self::Cell {
        self.fresh_cell(0)
    }

    #[doc(hidden)]
    /// A live fresh state that is never judged earlier than `floor` (see
    /// `WordAlgorithm::fresh_at`).
    fn fresh_cell(&self, floor: u64) -> Self::Cell;

    #[doc(hidden)]
    /// An unborn cell (see [`Life::Unborn`]) whose fresh state, once it comes
    /// alive, is never judged earlier than `floor`.
    fn unborn_cell(&self, floor: u64) -> Self::Cell;

    #[doc(hidden)]
    /// As [`Algorithm::unborn_cell`], for a client of `tier` (see
    /// [`Tiered`]); other algorithms have one quota and ignore it.
    fn unborn_in(&self, tier: Tier, floor: u64) -> Self::Cell {
        let _ = tier;
        self.unborn_cell(floor)
    }

    #[doc(hidden)]
    /// As [`Algorithm::fresh_cell`], for a client of `tier`.
    fn fresh_in(&self, tier: Tier, floor: u64) -> Self::Cell {
        let _ = tier;
        self.fresh_cell(floor)
    }

    #[doc(hidden)]
    /// Brings a cell this thread has claimed ([`Mortal::claim`]) to life,
    /// with a fresh state never judged earlier than `floor`. The caller
    /// hands it the unit of room it took.
    fn activate(&self, cell: &Self::Cell, floor: u64);

    #[doc(hidden)]
    /// The largest cost that can ever be admitted.
    fn capacity(&self) -> u64;

    #[doc(hidden)]
    /// Checks and, if admitted, records a request: `None` if the cell is
    /// dead, having recorded nothing that counts. The hot path.
    fn try_admit(&self, cell: &Self::Cell, now: u64, cost: u64) -> Option<bool>;

    #[doc(hidden)]
    /// As [`Algorithm::try_admit`] for a cell that is never evicted: a dead
    /// cell admits nothing. For the loom models of the cell alone.
    #[inline]
    fn admit(&self, cell: &Self::Cell, now: u64, cost: u64) -> bool {
        self.try_admit(cell, now, cost) == Some(true)
    }

    #[doc(hidden)]
    /// As [`Algorithm::try_admit`], with the figures for a [`Decision`].
    fn decide(&self, cell: &Self::Cell, now: u64, cost: u64) -> Option<Decision>;

    #[doc(hidden)]
    /// Whether `decide` would admit, and its `retry_after` if not, with
    /// the quota as it stands (the figures of [`Algorithm::quota`]),
    /// recording nothing. A dead cell reads as a fresh one.
    fn peek(&self, cell: &Self::Cell, now: u64, cost: u64) -> Decision;

    #[doc(hidden)]
    /// The decision for a request of cost 0: always allowed, nothing
    /// recorded, with the quota as it stands. A dead cell reads as fresh.
    fn quota(&self, cell: &Self::Cell, now: u64) -> Decision;

    #[doc(hidden)]
    /// Retires the cell if it is idle at `now`, so that no check is ever
    /// applied to it again: true iff this call retired it. Before the
    /// exchange that retires it, `forgetting` is told the instant from
    /// which the state it retires is idle.
    fn try_evict(&self, cell: &Self::Cell, now: u64, forgetting: &dyn Fn(u64)) -> bool;

    #[doc(hidden)]
    /// Retires the cell whatever it holds (sampled eviction under a full
    /// cap, the one decision-changing path): true iff this call retired it.
    fn force_evict(&self, cell: &Self::Cell) -> bool;

    #[doc(hidden)]
    /// Puts a live cell's state back to a fresh one, never judged earlier
    /// than `floor`, in place: one exchange through the cell's CAS loop, so
    /// a check lands wholly before it or wholly after. `Some(true)` iff the
    /// cell was alive. A cell whose state is more than one word (the log)
    /// cannot be reset in one exchange: `None`, and the caller retires and
    /// removes it instead.
    fn reset(&self, cell: &Self::Cell, floor: u64) -> Option<bool>;

    #[doc(hidden)]
    /// The first instant at which the cell will be idle if nothing more is
    /// admitted; 0 if it is idle already at any time.
    fn idle_at(&self, cell: &Self::Cell) -> u64;

    #[doc(hidden)]
    /// The longest any state stays non-idle after its last admission, ns.
    fn horizon(&self) -> u64;

    #[doc(hidden)]
    /// Whether this algorithm can book a request that conforms only later
    /// ([`Algorithm::reserve`]).
    fn can_reserve(&self) -> bool {
        false
    }

    #[doc(hidden)]
    /// Books `cost` at `now`, charged at once however long the request must
    /// wait, unless the wait exceeds `max_wait` ns (then nothing is
    /// charged): `None` if the cell is dead, having recorded nothing.
    fn reserve(&self, cell: &Self::Cell, now: u64, cost: u64, max_wait: u64) -> Option<Booking> {
        let _ = (cell, now, cost, max_wait);
        Some(Booking::Unsupported)
    }

    #[doc(hidden)]
    /// Cancels the booking `ticket` made on this client's cell, by the tail
    /// rule (`unreserve` in the algorithm layer; the log restores the slots
    /// that still hold its claim instead, see `log.rs`): true iff its charge
    /// (for the log, any of it) was given back. `None` if the cell is dead:
    /// nothing was given back.
    fn unreserve(&self, cell: &Self::Cell, now: u64, ticket: &Ticket) -> Option<bool> {
        let _ = (cell, now, ticket);
        Some(false)
    }
}

/// What [`Algorithm::reserve`] made of a booking.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Booking {
    /// Charged; the request conforms from the ticket's `ready_at`, this
    /// many ns after the reading it was booked at.
    Granted(Ticket, u64),
    /// The request would wait this many ns (`NEVER`: past the end of time),
    /// more than allowed: nothing was charged.
    TooLong(u64),
    /// The algorithm cannot book ahead.
    Unsupported,
}

/// The methods of [`Algorithm`] that are the same for every state a
/// [`StateCell`] packs, written once over [`Transitions`]: the check runs
/// the transition through the one CAS loop, a peek and the quota read the
/// live word, eviction retires the very word judged idle, and a reset is a
/// constant transition.
macro_rules! one_cas_loop {
    () => {
        fn from_settings(params: &Params) -> Result<Self, ConfigError> {
            <Self as FromParams>::from_params(params)
        }

        fn quota_granted(&self) -> (u64, u64) {
            FromParams::granted(self)
        }

        fn fresh_cell(&self, floor: u64) -> Self::Cell {
            StateCell::holding(Transitions::fresh_at(self, floor))
        }

        fn unborn_cell(&self, _floor: u64) -> Self::Cell {
            // The floor is the claimer's to apply: it writes the fresh word.
            StateCell::unborn()
        }

        fn activate(&self, cell: &Self::Cell, floor: u64) {
            cell.bear(Transitions::fresh_at(self, floor));
        }

        #[inline]
        fn capacity(&self) -> u64 {
            Transitions::capacity(self)
        }

        #[inline]
        fn try_admit(&self, cell: &Self::Cell, now: u64, cost: u64) -> Option<bool> {
            match cell.apply(|word| Transitions::admit(self, word, now, cost)) {
                Applied::Admitted(_) => Some(true),
                Applied::Denied(_) => Some(false),
                Applied::Dead => None,
            }
        }

        fn decide(&self, cell: &Self::Cell, now: u64, cost: u64) -> Option<Decision> {
            let applied = cell.apply(|word| Transitions::admit(self, word, now, cost));
            describe(self, applied, now, cost)
        }

        fn peek(&self, cell: &Self::Cell, now: u64, cost: u64) -> Decision {
            look(self, cell.live_word(), now, cost)
        }

        fn quota(&self, cell: &Self::Cell, now: u64) -> Decision {
            describe(self, Applied::Admitted(cell.live_word()), now, 0).expect("a live word")
        }

        fn try_evict(&self, cell: &Self::Cell, now: u64, forgetting: &dyn Fn(u64)) -> bool {
            cell.try_retire(|word| {
                let idle = Transitions::is_idle(self, word, now);
                if idle {
                    forgetting(Transitions::idle_at(self, word));
                }
                idle
            })
        }

        fn force_evict(&self, cell: &Self::Cell) -> bool {
            cell.retire()
        }

        fn reset(&self, cell: &Self::Cell, floor: u64) -> Option<bool> {
            let fresh = Transitions::fresh_at(self, floor);
            Some(matches!(cell.apply(|_| Some(fresh)), Applied::Admitted(_)))
        }

        fn idle_at(&self, cell: &Self::Cell) -> u64 {
            Transitions::idle_at(self, cell.live_word())
        }

        fn horizon(&self) -> u64 {
            Transitions::horizon(self)
        }
    };
}

// One impl per word algorithm rather than a blanket impl over
// `WordAlgorithm`, whose bounds rustdoc would show on every type's page.
macro_rules! word_algorithm {
    ($($algorithm:ty),*) => {$(
        impl Algorithm for $algorithm {
            type Cell = StateCell;

            one_cas_loop!();

            fn can_reserve(&self) -> bool {
                WordAlgorithm::reserves(self)
            }

            fn reserve(
                &self,
                cell: &StateCell,
                now: u64,
                cost: u64,
                max_wait: u64,
            ) -> Option<Booking> {
                book(self, cell, now, cost, max_wait)
            }

            fn unreserve(&self, cell: &StateCell, now: u64, ticket: &Ticket) -> Option<bool> {
                cancel(cell, now, ticket)
            }
        }
    )*};
}
word_algorithm!(TokenBucket, FixedWindow, SlidingWindowCounter);

/// A booking through the one CAS loop, for any state a cell packs: the
/// algorithm's pure booking transition, installed by a compare-and-swap
/// against the very word it was computed from, unless its wait exceeds
/// `max_wait` (then nothing is written). `None` if the cell is dead.
pub(crate) fn book<T: Transitions>(
    algorithm: &T,
    cell: &StateCell<T::Word>,
    now: u64,
    cost: u64,
    max_wait: u64,
) -> Option<Booking>
where
    T::Word: Packed,
{
    if !algorithm.reserves() {
        return Some(Booking::Unsupported);
    }
    let now = clamp_now(now);
    // What the transition that ran last saw: the word it charged and its
    // ready time if it charged, its wait if it refused. `apply` returns
    // right after that run, so these describe the outcome it reports.
    let granted = core::cell::Cell::new(None);
    let refused = core::cell::Cell::new(NEVER);
    let applied = cell.apply(|word| match algorithm.reserve(word, now, cost) {
        // `NEVER` (past the end of time) exceeds every wait, `u64::MAX`
        // included: a booking is never granted for an instant no reading
        // reaches.
        Reserve::At {
            word: next,
            ready_at,
        } if until(now, ready_at) <= max_wait.min(NEVER - 1) => {
            granted.set(Some((word, ready_at)));
            Some(next)
        }
        Reserve::At { ready_at, .. } => {
            refused.set(until(now, ready_at));
            None
        }
        Reserve::Never => {
            refused.set(NEVER);
            None
        }
    });
    match applied {
        Applied::Admitted(to) => {
            let (from, ready_at) = granted.get().expect("the run that charged recorded it");
            let ticket = Ticket {
                from: from.widen(),
                to: to.widen(),
                ready_at,
                cost,
                claims: None,
            };
            Some(Booking::Granted(ticket, ready_at - now))
        }
        Applied::Denied(_) => Some(Booking::TooLong(refused.get())),
        Applied::Dead => None,
    }
}

/// A cancellation by the tail rule through the one CAS loop, for any state
/// a cell packs: the exchange succeeds only from the very state the
/// booking left, so a charge that lands first makes it fail, and the retry
/// finds the booking no longer the tail. `None` if the cell is dead.
pub(crate) fn cancel<W: Packed + Wide>(
    cell: &StateCell<W>,
    now: u64,
    ticket: &Ticket,
) -> Option<bool> {
    match cell.apply(|word| unreserve(word, now, ticket)) {
        Applied::Admitted(_) => Some(true),
        Applied::Denied(_) => Some(false),
        Applied::Dead => None,
    }
}

/// Two limits at once: both words in one `PairCell`, so one exchange
/// charges both or neither. A pair books ahead iff both its limits do: one
/// exchange charges the booking to both, and a cancellation gives it back
/// to both by the tail rule on the pair's whole state (see "Bookings" in
/// `crate::algorithm::Both`'s module).
#[doc(hidden)]
impl<A, B> Algorithm for Both<A, B>
where
    A: WordAlgorithm,
    B: WordAlgorithm,
    Self: FromParams,
{
    type Cell = PairCell;

    one_cas_loop!();

    fn can_reserve(&self) -> bool {
        Transitions::reserves(self)
    }

    fn reserve(&self, cell: &PairCell, now: u64, cost: u64, max_wait: u64) -> Option<Booking> {
        book(self, cell, now, cost, max_wait)
    }

    fn unreserve(&self, cell: &PairCell, now: u64, ticket: &Ticket) -> Option<bool> {
        cancel(cell, now, ticket)
    }
}

/// A peek at `word`: whether a request of `cost` would be admitted (and
/// if not, when it would be), with the figures of the quota as it stands,
/// since a peek takes nothing. `cost` is at most the capacity; a cost of
/// 0 is admitted.
pub(crate) fn look<T: Transitions>(algorithm: &T, word: T::Word, now: u64, cost: u64) -> Decision {
    let mut decision = describe(algorithm, Applied::Admitted(word), now, 0).expect("a live word");
    if cost > 0 && algorithm.admit(word, now, cost).is_none() {
        decision.allowed = false;
        decision.retry_after = algorithm.retry_after(word, now, cost);
    }
    decision
}

/// The figures for a decision: what is left after it, when a denied
/// request would pass, and when the quota next grows.
pub(crate) fn describe<T: Transitions>(
    algorithm: &T,
    applied: Applied<T::Word>,
    now: u64,
    cost: u64,
) -> Option<Decision> {
    let (allowed, word, retry_after) = match applied {
        Applied::Admitted(word) => (true, word, 0),
        Applied::Denied(word) => (false, word, algorithm.retry_after(word, now, cost)),
        Applied::Dead => return None,
    };
    let (capacity, remaining) = (algorithm.capacity(), algorithm.remaining(word, now));
    // The quota grows when one more unit-cost request than now would pass
    // at once: the wait for a request of cost `remaining + 1`.
    let replenish_after = if remaining >= capacity {
        0
    } else {
        algorithm.retry_after(word, now, remaining + 1)
    };
    Some(Decision {
        allowed,
        limit: algorithm.limit(word, now),
        remaining,
        retry_after,
        replenish_after,
        window: algorithm.window(word, now),
        pair: algorithm.each(word, now).map(|figures| {
            figures.map(|f| LimitFigures::new(f.limit, f.remaining, f.replenish_after, f.window))
        }),
    })
}
