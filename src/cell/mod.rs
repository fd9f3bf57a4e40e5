//! Layer 3: the atomic cell, and the one compare-and-swap loop.
//!
//! A [`StateCell`] is one client's packed word. [`StateCell::apply`] is the
//! only code in the crate that writes a word, and the pure transitions of
//! [`crate::algorithm`] are the only thing it runs.
//!
//! # Orderings
//!
//! The word is the client's whole state: no other memory is published
//! through it, so exactness rests only on the atomicity of the
//! compare-and-swap (every admission is a read-modify-write of the latest
//! value in the word's modification order). The loads are nonetheless
//! `Acquire` and a successful exchange `AcqRel`, so that each admission
//! happens-before every decision that observed its effect: a caller that
//! records something before an admission, and a caller denied because of that
//! admission, see a consistent order. On x86-64 these are the same
//! instructions as `Relaxed`.
//!
//! # Eviction
//!
//! An evictor retires a cell by exchanging its idle word for
//! [`TOMBSTONE`](crate::algorithm::TOMBSTONE), which no algorithm produces,
//! and only then removes the map entry (see `crate::store`). `apply` tests
//! the word it loaded against the tombstone (the one comparison eviction
//! adds to a check) and answers [`Applied::Dead`] without writing; the
//! limiter then looks the client up again. Since the exchange succeeds only
//! from the very idle word the evictor judged, every admission is either in
//! the word before it (and then the word was not idle, and the exchange
//! fails) or retried on the map's next entry.

//!
//! # Birth
//!
//! A client's first cell is inserted *unborn*: no check admits on it. Any
//! thread that finds an unborn cell helps it: it *claims* it (one exchange),
//! takes a unit of room from the store's count, writes the fresh state; if
//! there is no room it gives the claim back and, once the overflow policy
//! has had its say, may *refuse* the cell instead (another exchange, from
//! unborn only). Claiming and refusing are exchanges on one word, so a cell
//! that received room is never refused, and a refused cell never comes
//! alive: every racer for a new client's first request sees the same
//! outcome, and the client gets one budget (see `crate::store`).
//!
//! A [`StateCell`] keeps its life in its word: the four words above
//! [`WORD_MAX`](crate::algorithm::WORD_MAX), which no algorithm produces,
//! say unborn, claimed, refused and evicted, so the check's one comparison
//! (`word >= UNBORN`) covers birth and eviction alike, and a cell is still
//! one 64-bit word. A log keeps it in a separate birth word beside its
//! `life` word (`log.rs`).

use crate::algorithm::{
    clamp_now, join, unreserve, until, Both, FromParams, Reserve, Ticket, Transitions, Wide,
    WordAlgorithm, CLAIMED, FRESH, NEVER, REFUSED, TOMBSTONE, UNBORN,
};
use crate::decision::Decision;
use crate::sync::{AtomicU128, AtomicU64, Backoff, Ordering};

mod log;
mod tier;

#[cfg(feature = "loom")]
pub use tier::TierCell;
pub use tier::{Tier, Tiered};

/// Where a cell is in its life, as [`Mortal::life`] reads it.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    /// Inserted, waiting for a unit of room: no check may admit on it.
    Unborn,
    /// A thread has claimed it and is taking room for it; it leaves this
    /// state within that thread's next few instructions.
    Claimed,
    /// Alive: checks run on it.
    Live,
    /// Was alive, and eviction has retired it. It holds its unit of room
    /// until it leaves the map.
    Evicted,
    /// Never came alive: it found no room, and the overflow policy answered
    /// for its client instead. It holds no room.
    Refused,
}

/// A cell that eviction can retire, and that may be inserted unborn.
/// Public (but unreachable outside `--features loom`) so that the map
/// protocol in `crate::store`, and the loom models through it, can read and
/// drive a cell's life.
#[doc(hidden)]
pub trait Mortal {
    /// Where the cell is in its life.
    fn life(&self) -> Life;

    /// Unborn → claimed: `Ok` iff this call claimed it, else the life the
    /// exchange found. The claimer must then either bring it to life
    /// ([`Algorithm::activate`]) or [`unclaim`](Mortal::unclaim) it.
    fn claim(&self) -> Result<(), Life>;

    /// Claimed → unborn: the claimer found no room.
    fn unclaim(&self);

    /// Unborn → refused: `Ok` iff this call refused it, else the life the
    /// exchange found.
    fn refuse(&self) -> Result<(), Life>;

    /// Whether the cell is gone for good (evicted or refused): no check will
    /// ever be applied to it again, and any thread may remove it from the
    /// map.
    fn is_dead(&self) -> bool {
        matches!(self.life(), Life::Evicted | Life::Refused)
    }

    /// Whether the cell holds a unit of the store's room: from its birth
    /// until it leaves the map.
    fn holds_room(&self) -> bool {
        matches!(self.life(), Life::Live | Life::Evicted)
    }

    /// The store is moving this cell's entry to a new table (holding the
    /// lock that keeps every other writer of the entry out): what goes
    /// there. Reads the cell and changes nothing: a word cell's copy holds
    /// the state read, and stands for the client only once
    /// [`forward`](Mortal::forward) has marked this cell moved from that
    /// very state. A claimed cell is waited for: its claimer writes it
    /// within a few instructions and takes no lock meanwhile.
    fn relocate(&self) -> Relocation<Self>
    where
        Self: Sized;

    /// Marks this cell moved if it still holds the state `seal` names (one
    /// exchange from it to the tombstone): true iff it did. A check that
    /// changed the state first makes this fail, and the mover reads the
    /// cell again; a check that comes after fails against the tombstone
    /// and looks the client up again, finding the copy.
    fn forward(&self, seal: Seal) -> bool;

    /// Puts `newer`'s state into this copy, made by an earlier
    /// [`relocate`](Mortal::relocate) that a check overtook, before any
    /// other thread can reach it.
    fn refresh(&self, newer: Self)
    where
        Self: Sized;
}

/// What a cell becomes when the store moves its entry to a new table
/// ([`Mortal::relocate`]).
#[doc(hidden)]
#[derive(Debug)]
pub enum Relocation<C> {
    /// The cell is dead: it stays behind, and is dropped with the old table.
    Dead,
    /// The cell is a handle to state that never moves: the store may move
    /// the handle bit for bit, and the old copy is never dropped.
    Same,
    /// A new cell carrying the state the old one held when read (as it was,
    /// or converted), named by the seal. The old copy still holds that
    /// state and stays live until [`Mortal::forward`] marks it moved; it is
    /// then never dropped, nor is a copy the move gave up on, so neither
    /// may own anything that needs dropping.
    Moved(C, Seal),
}

/// The exact state a move read from a cell ([`Relocation::Moved`]), for
/// [`Mortal::forward`]: a word, or a pair of words, widened.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seal(u128);

/// What a [`StateCell`] holds: one state word (`u64`), or the two words of
/// a client held to two limits at once (`u128`, the first limit's word in
/// the low half). Either way the word that says whether the cell is alive
/// is the first one ([`Packed::life_word`]), so the life protocol below is
/// written once for both.
#[doc(hidden)]
pub trait Packed: Wide + Copy + Eq + core::fmt::Debug + Send + Sync + 'static {
    /// The atomic that holds it, from `crate::sync`.
    type Atomic: core::fmt::Debug + Send + Sync;

    /// A fresh state: every word 0.
    const FRESH: Self;

    /// The word whose four top values say the cell is not alive.
    fn life_word(self) -> u64;

    /// The state that says `life` (one of [`UNBORN`], [`CLAIMED`],
    /// [`REFUSED`], [`TOMBSTONE`]): that value in the life word, 0 in the
    /// rest.
    fn not_alive(life: u64) -> Self;

    #[doc(hidden)]
    fn atomic(value: Self) -> Self::Atomic;
    #[doc(hidden)]
    fn load(atomic: &Self::Atomic, order: Ordering) -> Self;
    #[doc(hidden)]
    fn store(atomic: &Self::Atomic, value: Self, order: Ordering);
    #[doc(hidden)]
    fn compare_exchange(
        atomic: &Self::Atomic,
        current: Self,
        new: Self,
        weak: bool,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Self, Self>;
}

/// Implements [`Packed`] for a width, over its atomic from `crate::sync`.
macro_rules! packed {
    ($word:ty, $atomic:ty, $fresh:expr, |$w:ident| $life:expr, |$l:ident| $state:expr) => {
        impl Packed for $word {
            type Atomic = $atomic;
            const FRESH: Self = $fresh;

            #[inline]
            fn life_word(self) -> u64 {
                let $w = self;
                $life
            }

            #[inline]
            fn not_alive($l: u64) -> Self {
                $state
            }

            #[inline]
            fn atomic(value: Self) -> $atomic {
                <$atomic>::new(value)
            }

            #[inline]
            fn load(atomic: &$atomic, order: Ordering) -> Self {
                atomic.load(order)
            }

            #[inline]
            fn store(atomic: &$atomic, value: Self, order: Ordering) {
                atomic.store(value, order);
            }

            #[inline]
            fn compare_exchange(
                atomic: &$atomic,
                current: Self,
                new: Self,
                weak: bool,
                success: Ordering,
                failure: Ordering,
            ) -> Result<Self, Self> {
                if weak {
                    atomic.compare_exchange_weak(current, new, success, failure)
                } else {
                    atomic.compare_exchange(current, new, success, failure)
                }
            }
        }
    };
}

packed!(u64, AtomicU64, FRESH, |w| w, |life| life);
// The first word in the low half (`algorithm::join`): `as u64` keeps
// exactly it, and a state that is not alive is that word beside a 0.
packed!(u128, AtomicU128, join(FRESH, FRESH), |w| w as u64, |life| {
    join(life, 0)
});

/// One client's state: a packed word, or two side by side. Public only as
/// the sealed [`Algorithm::Cell`] of the word algorithms and of [`Both`];
/// nothing outside the crate can reach it.
#[doc(hidden)]
#[derive(Debug)]
pub struct StateCell<W: Packed = u64> {
    /// A live state (life word below [`UNBORN`]), or one of the four states
    /// of a cell that is not alive: [`UNBORN`], [`CLAIMED`], [`REFUSED`],
    /// [`TOMBSTONE`] (evicted), in the life word.
    word: W::Atomic,
    /// Loom builds only: replace the compare-and-swap with a load and a
    /// store, the bug the models must catch (see `tollgate::__loom`).
    #[cfg(feature = "loom")]
    racy: bool,
}

/// The cell of a client held to two limits at once: both words in one
/// 128-bit atomic, updated by one compare-and-swap.
/// (Named outside the crate only by the loom models, through `__loom`.)
#[doc(hidden)]
#[cfg_attr(not(feature = "loom"), allow(unreachable_pub))]
pub type PairCell = StateCell<u128>;

/// What [`StateCell::apply`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied<W = u64> {
    /// The transition accepted the word and this is the word it wrote.
    Admitted(W),
    /// The transition refused this word, the latest one observed; nothing
    /// was written.
    Denied(W),
    /// The cell holds the tombstone: it was evicted, nothing was written,
    /// and the check belongs on the map's current entry for the client.
    Dead,
}

impl<W: Packed> StateCell<W> {
    /// A live cell holding `word`, of either width.
    pub fn holding(word: W) -> Self {
        Self {
            word: W::atomic(word),
            #[cfg(feature = "loom")]
            racy: false,
        }
    }

    /// An unborn cell: no check admits on it until a claimer writes its
    /// fresh word ([`StateCell::bear`]).
    fn unborn() -> Self {
        Self::holding(W::not_alive(UNBORN))
    }
}

impl StateCell {
    /// A live one-word cell holding `word`.
    pub fn new(word: u64) -> Self {
        Self::holding(word)
    }

    /// A deliberately broken cell whose update is a load followed by a
    /// store: two threads can both admit against the same word.
    #[cfg(feature = "loom")]
    pub fn new_racy(word: u64) -> Self {
        Self {
            racy: true,
            ..Self::new(word)
        }
    }
}

#[cfg(feature = "loom")]
impl StateCell {
    /// The bug the cancellation models must catch: give a booking's charge
    /// back by subtracting it, whether or not the booking is still the tail
    /// (whatever was charged after it keeps its wait, and the slot of
    /// virtual time it held is handed out twice).
    #[cfg(feature = "loom")]
    pub fn give_back_blindly(&self, ticket: &Ticket) {
        // AcqRel: as in `apply`; the read-modify-write itself is atomic, the
        // rule it applies is what is wrong.
        // A one-word ticket's states are zero-extended words.
        let _ = self
            .word
            .fetch_sub((ticket.to - ticket.from) as u64, Ordering::AcqRel);
    }
}

impl<W: Packed> StateCell<W> {
    /// Brings a cell this thread claimed to life with `word`: only the
    /// claimer writes a claimed word, so a store suffices.
    fn bear(&self, word: W) {
        debug_assert!(word.life_word() < UNBORN);
        // Release: pairs with the Acquire loads of the word (`load`, and the
        // failure side of every exchange), as an admission's exchange does.
        W::store(&self.word, word, Ordering::Release);
    }

    /// `UNBORN` → `to` by exchange: `Ok` iff this call moved it, else the
    /// life the exchange found (never older than this thread's last look).
    fn leave_unborn(&self, to: u64) -> Result<(), Life> {
        // AcqRel/Acquire: claim, refusal, unclaim, birth, admissions and
        // eviction are all writes of this one word; of two exchanges from
        // `UNBORN`, the first in its modification order makes the other
        // fail. Acquire on failure: as in `load`.
        W::compare_exchange(
            &self.word,
            W::not_alive(UNBORN),
            W::not_alive(to),
            false,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .map(drop)
        .map_err(|seen| life_of(seen.life_word()))
    }

    /// The current word.
    #[inline]
    pub fn load(&self) -> W {
        // Acquire: pairs with the Release half of the AcqRel exchange in
        // `apply` that wrote this word (see "Orderings" above).
        W::load(&self.word, Ordering::Acquire)
    }

    /// Runs `transition` on the current word until it either refuses the
    /// word (`Denied`, with no write) or its result is installed by a
    /// compare-and-swap against the very word it was computed from
    /// (`Admitted`).
    ///
    /// A denial therefore reads the cache line and never writes it, so a
    /// flood of denied requests for one hot client does not bounce the line
    /// between cores. The transition may run more than once, and must be
    /// pure.
    #[inline]
    pub(crate) fn apply(&self, transition: impl Fn(W) -> Option<W>) -> Applied<W> {
        let current = self.load();
        // The one comparison eviction and birth add: a cell that is not
        // alive (unborn, claimed, refused, evicted) is never admitted on.
        if current.life_word() >= UNBORN {
            return Applied::Dead;
        }
        #[cfg(feature = "loom")]
        if self.racy {
            let Some(next) = transition(current) else {
                return Applied::Denied(current);
            };
            // The bug under test: a plain store can overwrite an admission
            // made since the load.
            W::store(&self.word, next, Ordering::Release);
            return Applied::Admitted(next);
        }
        let Some(next) = transition(current) else {
            return Applied::Denied(current);
        };
        // AcqRel on success: Release publishes this admission to the next
        // Acquire load or exchange of the word; Acquire orders it after the
        // admission we are replacing. Acquire on failure: as in `load`.
        match W::compare_exchange(
            &self.word,
            current,
            next,
            false,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Applied::Admitted(next),
            Err(seen) => self.apply_contended(seen, transition),
        }
    }

    /// The retry loop, kept out of line: it runs only when another thread
    /// changed the word between our load and our exchange.
    #[cold]
    #[inline(never)]
    fn apply_contended(&self, mut current: W, transition: impl Fn(W) -> Option<W>) -> Applied<W> {
        let backoff = Backoff::new();
        loop {
            if current.life_word() >= UNBORN {
                return Applied::Dead;
            }
            let Some(next) = transition(current) else {
                return Applied::Denied(current);
            };
            // Orderings as in `apply`. A weak exchange may fail spuriously,
            // which this loop absorbs like any other failure.
            match W::compare_exchange(
                &self.word,
                current,
                next,
                true,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Applied::Admitted(next),
                Err(seen) => current = seen,
            }
            backoff.spin();
        }
    }

    /// Retires the cell if its word is idle at `now` by `is_idle`: one
    /// compare-and-swap from the very word judged idle to the tombstone.
    /// True iff this call retired it.
    pub(crate) fn try_retire(&self, is_idle: impl FnOnce(W) -> bool) -> bool {
        let word = self.load();
        // AcqRel/Acquire: as in `apply`. The exchange fails if any check
        // admitted since the load, so an admission is never retired.
        word.life_word() < UNBORN
            && is_idle(word)
            && W::compare_exchange(
                &self.word,
                word,
                W::not_alive(TOMBSTONE),
                false,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// Retires the cell whatever its live word: sampled eviction under a
    /// full cap. A cell that is not alive is left alone. True iff this call
    /// retired it.
    pub(crate) fn retire(&self) -> bool {
        let mut word = self.load();
        while word.life_word() < UNBORN {
            // AcqRel/Acquire: as in `apply`.
            match W::compare_exchange(
                &self.word,
                word,
                W::not_alive(TOMBSTONE),
                true,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(seen) => word = seen,
            }
        }
        false
    }

    /// The word as the algorithms should read it: a retired cell reads as
    /// a fresh one, which is what its idle word was equivalent to.
    fn live_word(&self) -> W {
        match self.load() {
            word if word.life_word() >= UNBORN => W::FRESH,
            word => word,
        }
    }
}

/// What a state word says of its cell's life.
fn life_of(word: u64) -> Life {
    match word {
        UNBORN => Life::Unborn,
        CLAIMED => Life::Claimed,
        REFUSED => Life::Refused,
        TOMBSTONE => Life::Evicted,
        _ => Life::Live,
    }
}

impl<W: Packed> Mortal for StateCell<W> {
    fn life(&self) -> Life {
        life_of(self.load().life_word())
    }

    fn claim(&self) -> Result<(), Life> {
        self.leave_unborn(CLAIMED)
    }

    fn unclaim(&self) {
        // Release: pairs with the Acquire of the next claim or refusal,
        // which then sees the store's count as this claimer left it.
        W::store(&self.word, W::not_alive(UNBORN), Ordering::Release);
    }

    fn refuse(&self) -> Result<(), Life> {
        self.leave_unborn(REFUSED)
    }

    /// Reads the word to carry, and copies it: a dead cell stays behind.
    fn relocate(&self) -> Relocation<Self> {
        let backoff = Backoff::new();
        loop {
            let word = self.load();
            match word.life_word() {
                TOMBSTONE | REFUSED => return Relocation::Dead,
                CLAIMED => backoff.snooze(),
                _ => {
                    return Relocation::Moved(
                        Self {
                            word: W::atomic(word),
                            #[cfg(feature = "loom")]
                            racy: self.racy,
                        },
                        Seal(word.widen()),
                    )
                }
            }
        }
    }

    fn forward(&self, seal: Seal) -> bool {
        // AcqRel: Release publishes the copy, written before this exchange
        // (its slot, and any `refresh`), to a check whose Acquire load sees
        // the tombstone and then looks the client up again; Acquire, as in
        // `apply`. The exchange succeeds only from the very word the copy
        // holds, so an admission made through this cell after the copy was
        // taken makes it fail, and the mover copies again. Acquire on
        // failure: as in `load`.
        W::compare_exchange(
            &self.word,
            W::narrow(seal.0),
            W::not_alive(TOMBSTONE),
            false,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_ok()
    }

    fn refresh(&self, newer: Self) {
        // Relaxed: no other thread reaches this copy before the `forward`
        // that publishes it (Release), which this store precedes.
        W::store(&self.word, newer.load(), Ordering::Relaxed);
    }
}

/// A rate-limiting algorithm that a [`Limiter`](crate::Limiter) can run:
/// [`TokenBucket`](crate::TokenBucket),
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter),
/// [`SlidingWindowLog`](crate::SlidingWindowLog) or
/// [`FixedWindow`](crate::FixedWindow).
///
/// The trait is sealed: its methods are the crate's internal interface
/// between the limiter and the cell layer, and it cannot be implemented
/// outside tollgate. Use it to write code generic over the algorithm.
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
pub trait Algorithm: sealed::Sealed + FromParams + Send + Sync + 'static {
    // The methods below are hidden from the docs: `cost` is always in
    // `1..=capacity()`, because the limiter rejects the rest before calling.
    // "Dead" means the cell is not alive (see `Mortal`); the limiter then
    // retries on the map's current entry.

    /// One client's state.
    #[doc(hidden)]
    type Cell: Mortal + Send + Sync + 'static;

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
    /// The decision `decide` would make, recording nothing. A dead cell
    /// reads as a fresh one.
    fn peek(&self, cell: &Self::Cell, now: u64, cost: u64) -> Decision;

    #[doc(hidden)]
    /// The decision for a request of cost 0: always allowed, nothing
    /// recorded, with the quota as it stands. A dead cell reads as fresh.
    fn quota(&self, cell: &Self::Cell, now: u64) -> Decision;

    #[doc(hidden)]
    /// Retires the cell if it is idle at `now`, so that no check is ever
    /// applied to it again: true iff this call retired it.
    fn try_evict(&self, cell: &Self::Cell, now: u64) -> bool;

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

pub(crate) mod sealed {
    /// Keeps [`Algorithm`](super::Algorithm) closed to the crate's own types.
    pub trait Sealed {}
    impl<A: crate::algorithm::WordAlgorithm> Sealed for A {}
    impl<A, B> Sealed for crate::algorithm::Both<A, B> {}
    impl<A> Sealed for super::Tiered<A> {}
}

/// The methods of [`Algorithm`] that are the same for every state a
/// [`StateCell`] packs, written once over [`Transitions`]: the check runs
/// the transition through the one CAS loop, a peek and the quota read the
/// live word, eviction retires the very word judged idle, and a reset is a
/// constant transition.
macro_rules! one_cas_loop {
    () => {
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
            let word = cell.live_word();
            let applied = match Transitions::admit(self, word, now, cost) {
                Some(next) => Applied::Admitted(next),
                None => Applied::Denied(word),
            };
            describe(self, applied, now, cost).expect("a live word is never dead")
        }

        fn quota(&self, cell: &Self::Cell, now: u64) -> Decision {
            describe(self, Applied::Admitted(cell.live_word()), now, 0).expect("a live word")
        }

        fn try_evict(&self, cell: &Self::Cell, now: u64) -> bool {
            cell.try_retire(|word| Transitions::is_idle(self, word, now))
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

impl<A: WordAlgorithm + FromParams> Algorithm for A {
    type Cell = StateCell;

    one_cas_loop!();

    fn can_reserve(&self) -> bool {
        WordAlgorithm::reserves(self)
    }

    fn reserve(&self, cell: &StateCell, now: u64, cost: u64, max_wait: u64) -> Option<Booking> {
        book(self, cell, now, cost, max_wait)
    }

    fn unreserve(&self, cell: &StateCell, now: u64, ticket: &Ticket) -> Option<bool> {
        cancel(cell, now, ticket)
    }
}

/// A booking through the one CAS loop, for any state a cell packs: the
/// algorithm's pure booking transition, installed by a compare-and-swap
/// against the very word it was computed from, unless its wait exceeds
/// `max_wait` (then nothing is written). `None` if the cell is dead.
fn book<T: Transitions>(
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
        Reserve::At {
            word: next,
            ready_at,
        } if until(now, ready_at) <= max_wait => {
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
fn cancel<W: Packed + Wide>(cell: &StateCell<W>, now: u64, ticket: &Ticket) -> Option<bool> {
    match cell.apply(|word| unreserve(word, now, ticket)) {
        Applied::Admitted(_) => Some(true),
        Applied::Denied(_) => Some(false),
        Applied::Dead => None,
    }
}

/// Two limits at once: both words in one [`PairCell`], so one exchange
/// charges both or neither. A pair books ahead iff both its limits do: one
/// exchange charges the booking to both, and a cancellation gives it back
/// to both by the tail rule on the pair's whole state (see "Bookings" in
/// `crate::algorithm::Both`'s module).
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
        retry_after: Decision::wait(retry_after),
        replenish_after: Decision::wait(replenish_after),
        window: core::time::Duration::from_nanos(algorithm.window(word, now)),
    })
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn a_refused_transition_writes_nothing() {
        let cell = StateCell::new(7);
        assert_eq!(cell.apply(|_| None), Applied::Denied(7));
        assert_eq!(cell.load(), 7);
        assert_eq!(cell.apply(|w| Some(w + 1)), Applied::Admitted(8));
        assert_eq!(cell.load(), 8);
    }

    #[test]
    fn retries_recompute_from_the_word_that_won() {
        let cell = StateCell::new(0);
        // The first run sees 0 and loses to a write of 10 made in between.
        let first = std::cell::Cell::new(true);
        let out = cell.apply(|w| {
            if first.replace(false) {
                cell.word.store(10, Ordering::Relaxed);
            }
            Some(w + 1)
        });
        assert_eq!(out, Applied::Admitted(11));
    }

    #[test]
    fn a_tombstone_is_never_admitted_on_nor_overwritten() {
        let cell = StateCell::new(5);
        assert!(!cell.try_retire(|w| w != 5), "not idle: kept");
        assert!(cell.try_retire(|w| w == 5));
        assert!(cell.is_dead());
        assert!(!cell.try_retire(|_| true), "retired once only");
        assert_eq!(cell.apply(|w| Some(w + 1)), Applied::Dead);
        assert_eq!(cell.load(), TOMBSTONE);
        assert_eq!(cell.live_word(), FRESH);
        let other = StateCell::new(9);
        assert!(other.retire());
        assert!(!other.retire());
    }

    #[test]
    fn a_new_cell_is_claimed_then_born_or_refused_never_both() {
        let cell = StateCell::<u64>::unborn();
        assert_eq!(cell.life(), Life::Unborn);
        assert_eq!(
            cell.apply(|w| Some(w + 1)),
            Applied::Dead,
            "no admission unborn"
        );
        assert!(
            !cell.try_retire(|_| true) && !cell.retire(),
            "nothing to evict"
        );
        assert_eq!(cell.claim(), Ok(()));
        assert_eq!(cell.claim(), Err(Life::Claimed));
        assert_eq!(
            cell.refuse(),
            Err(Life::Claimed),
            "never refused while claimed"
        );
        cell.unclaim();
        assert_eq!(cell.claim(), Ok(()));
        cell.bear(5);
        assert_eq!(cell.life(), Life::Live);
        assert_eq!(
            cell.refuse(),
            Err(Life::Live),
            "a born cell is never refused"
        );
        assert_eq!(cell.apply(|w| Some(w + 1)), Applied::Admitted(6));
        assert!(cell.retire());
        assert_eq!(cell.life(), Life::Evicted);
        assert!(cell.is_dead() && cell.holds_room());

        let refused = StateCell::<u64>::unborn();
        assert_eq!(refused.refuse(), Ok(()));
        assert_eq!(
            refused.claim(),
            Err(Life::Refused),
            "a refused cell never comes alive"
        );
        assert!(refused.is_dead() && !refused.holds_room());
        assert_eq!(refused.live_word(), FRESH);
    }

    #[test]
    fn a_retire_that_loses_to_an_admission_fails() {
        let cell = StateCell::new(0);
        // The word is judged idle, but an admission lands before the swap.
        assert!(!cell.try_retire(|w| {
            assert_eq!(cell.apply(|x| Some(x + 1)), Applied::Admitted(1));
            w == 0
        }));
        assert_eq!(cell.load(), 1);
        // A check racing the retirement from inside its own transition.
        let first = std::cell::Cell::new(true);
        let out = cell.apply(|w| {
            if first.replace(false) {
                assert!(cell.retire());
            }
            Some(w + 1)
        });
        assert_eq!(out, Applied::Dead);
    }

    #[test]
    fn a_pair_cell_keeps_its_life_in_the_first_word_and_moves_both() {
        let cell = PairCell::unborn();
        assert_eq!(cell.life(), Life::Unborn);
        assert_eq!(cell.apply(|w| Some(w + 1)), Applied::Dead);
        assert_eq!(cell.claim(), Ok(()));
        assert_eq!(cell.refuse(), Err(Life::Claimed));
        cell.bear(join(3, 4));
        assert_eq!(cell.life(), Life::Live);
        let next = join(5, u64::MAX);
        assert_eq!(cell.apply(|_| Some(next)), Applied::Admitted(next));
        assert_eq!(
            cell.apply(|_| None),
            Applied::Denied(next),
            "a second word at u64::MAX is not a tombstone"
        );
        let Relocation::Moved(moved, seal) = cell.relocate() else {
            panic!("a live pair moves");
        };
        assert_eq!(moved.load(), next, "both words carried");
        assert_eq!(cell.life(), Life::Live, "a copy changes nothing");
        assert!(cell.forward(seal));
        assert!(!cell.forward(seal), "forwarded once");
        assert_eq!(cell.life(), Life::Evicted);
        assert_eq!(cell.live_word(), join(FRESH, FRESH));
        assert!(moved.try_retire(|w| w == next));
        assert!(moved.is_dead());
    }
}
