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
//! A [`StateCell`] keeps its life in its word: the five words above
//! [`WORD_MAX`](crate::algorithm::WORD_MAX), which no algorithm produces,
//! say forwarded (moved by a table rebuild), unborn, claimed, refused and
//! evicted, so the check's one comparison (`word >= NOT_ALIVE`) covers
//! birth, eviction and moves alike, and a cell is still one 64-bit word. A
//! log keeps it in a separate birth word beside its `life` word (`log.rs`).
//!
//! # Moves
//!
//! A table rebuild moves a word cell's state to a copy and then marks the
//! old cell *forwarded* ([`Mortal::forward`]: one exchange from the very
//! state copied to [`FORWARDED`](crate::algorithm::FORWARDED)), a mark of
//! its own, distinct from the tombstone: a lookup follows the table's link
//! from a forwarded cell only, and a retired or refused cell, which no move
//! carries, stays the client's entry, dead, until it is removed.

use crate::algorithm::{
    join, Wide, CLAIMED, FORWARDED, FRESH, NOT_ALIVE, REFUSED, TOMBSTONE, UNBORN,
};
use crate::sync::{AtomicU128, AtomicU64, Backoff, Ordering};

mod algorithm;
#[cfg(any(feature = "redis", feature = "loom"))]
mod lease;
mod log;
mod tier;

pub use algorithm::Algorithm;
#[cfg_attr(not(feature = "loom"), allow(unreachable_pub))]
pub use algorithm::Booking;
pub(crate) use algorithm::{book, cancel, describe, look};
#[cfg(feature = "loom")]
pub use lease::SpentSlots;
#[cfg(any(feature = "redis", feature = "loom"))]
#[cfg_attr(not(feature = "loom"), allow(unreachable_pub))]
pub use lease::{LeaseCell, Spent};

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
    /// A table rebuild moved its state to a copy in the new table, which
    /// stands for the client now and holds its room; a lookup that meets
    /// this cell follows the table's link to the copy.
    Forwarded,
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
    /// ([`Algorithm::activate`]) or [`unclaim`](Mortal::unclaim) it, running
    /// no user code (a clock, a key's `Hash`) in between: a panic there
    /// would leave the cell claimed for good.
    fn claim(&self) -> Result<(), Life>;

    /// Claimed → unborn: the claimer found no room.
    fn unclaim(&self);

    /// Unborn → refused: `Ok` iff this call refused it, else the life the
    /// exchange found.
    fn refuse(&self) -> Result<(), Life>;

    /// Whether the cell is gone for good (evicted, refused or forwarded):
    /// no check will ever be applied to it again. Any thread may remove an
    /// evicted or refused cell's entry from the map; a forwarded cell's
    /// entry is the rebuild's, which retags it moved.
    fn is_dead(&self) -> bool {
        matches!(self.life(), Life::Evicted | Life::Refused | Life::Forwarded)
    }

    /// Whether a table rebuild moved this cell's state to a copy
    /// ([`Mortal::forward`]): the copy, in the table the rebuild links,
    /// stands for the client.
    fn is_forwarded(&self) -> bool {
        self.life() == Life::Forwarded
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

    /// Marks this cell forwarded if it still holds the state `seal` names
    /// (one exchange from it to the forwarding mark): true iff it did. A
    /// check that changed the state first (or a removal that retired the
    /// cell, or a claim or refusal of an unborn one) makes this fail, and
    /// the mover reads the cell again; a check that comes after fails
    /// against the mark and looks the client up again, following the
    /// table's link to the copy, which no thread reaches before this
    /// exchange.
    fn forward(&self, seal: Seal) -> bool;

    /// Retires this cell if it still holds the state `seal` names (one
    /// exchange from it to the tombstone, as an eviction's): true iff it
    /// did. For a rebuild that forgets a lapsed client instead of moving
    /// it: the cell then stays the client's entry, dead, and the rebuild
    /// leaves it behind.
    fn retire_sealed(&self, seal: Seal) -> bool;

    /// Puts `newer`'s state into this copy, made by an earlier
    /// [`relocate`](Mortal::relocate) that a check overtook, before any
    /// other thread can reach it (no thread reaches a copy before the
    /// [`forward`](Mortal::forward) that hands it the client).
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

    /// The word whose five top values say the cell is not alive.
    fn life_word(self) -> u64;

    /// The state that says `life` (one of [`FORWARDED`], [`UNBORN`],
    /// [`CLAIMED`], [`REFUSED`], [`TOMBSTONE`]): that value in the life
    /// word, 0 in the rest.
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
    /// A live state (life word below [`NOT_ALIVE`]), or one of the five
    /// states of a cell that is not alive: [`FORWARDED`], [`UNBORN`],
    /// [`CLAIMED`], [`REFUSED`], [`TOMBSTONE`] (evicted), in the life word.
    word: W::Atomic,
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
}

impl<W: Packed> StateCell<W> {
    /// Brings a cell this thread claimed to life with `word`: only the
    /// claimer writes a claimed word, so a store suffices.
    fn bear(&self, word: W) {
        debug_assert!(word.life_word() < NOT_ALIVE);
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
        // The one comparison eviction, birth and moves add: a cell that is
        // not alive (forwarded, unborn, claimed, refused, evicted) is never
        // admitted on.
        if current.life_word() >= NOT_ALIVE {
            return Applied::Dead;
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
            if current.life_word() >= NOT_ALIVE {
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
        word.life_word() < NOT_ALIVE
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
        while word.life_word() < NOT_ALIVE {
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
            word if word.life_word() >= NOT_ALIVE => W::FRESH,
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
        FORWARDED => Life::Forwarded,
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
                // A forwarded cell's slot is retagged moved in the step
                // that forwards it, so no move meets one; were it met, its
                // copy already stands for the client.
                TOMBSTONE | REFUSED | FORWARDED => return Relocation::Dead,
                CLAIMED => backoff.snooze(),
                _ => {
                    return Relocation::Moved(
                        Self {
                            word: W::atomic(word),
                        },
                        Seal(word.widen()),
                    )
                }
            }
        }
    }

    fn forward(&self, seal: Seal) -> bool {
        self.seal_to(seal, FORWARDED)
    }

    fn retire_sealed(&self, seal: Seal) -> bool {
        self.seal_to(seal, TOMBSTONE)
    }

    fn refresh(&self, newer: Self) {
        // Relaxed: no other thread reaches this copy before the `forward`
        // that hands it the client (Release), which this store precedes: a
        // lookup follows the table's link only from a forwarded cell (or a
        // slot retagged moved after it), and the copy's slot is given up,
        // retagged moved, before the old slot leaves `FULL` any other way.
        W::store(&self.word, newer.load(), Ordering::Relaxed);
    }
}

impl<W: Packed> StateCell<W> {
    /// The exchange of [`Mortal::forward`] and [`Mortal::retire_sealed`]:
    /// from the very state `seal` names to the life word `to`.
    fn seal_to(&self, seal: Seal, to: u64) -> bool {
        // AcqRel: Release publishes the copy, written before this exchange
        // (its slot, and any `refresh`), to a check whose Acquire load sees
        // the forwarding mark and then follows the table's link (and, for
        // a retirement, the eviction's reading recorded before it); Acquire,
        // as in `apply`. The exchange succeeds only from the very word the
        // copy holds, so an admission (or a retirement, a claim, a refusal)
        // made through this cell after the copy was taken makes it fail,
        // and the mover reads the cell again. Acquire on failure: as in
        // `load`.
        W::compare_exchange(
            &self.word,
            W::narrow(seal.0),
            W::not_alive(to),
            false,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_ok()
    }
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
        assert_eq!(cell.life(), Life::Forwarded);
        assert!(cell.is_dead() && cell.is_forwarded() && !cell.holds_room());
        assert_eq!(cell.live_word(), join(FRESH, FRESH));
        assert!(moved.try_retire(|w| w == next));
        assert!(moved.is_dead());
    }

    #[test]
    fn a_forwarded_cell_is_told_apart_from_a_retired_one() {
        // Forwarded from the state copied: the copy stands for the client.
        let cell = StateCell::new(7);
        let Relocation::Moved(_, seal) = cell.relocate() else {
            panic!("a live cell moves");
        };
        assert!(cell.forward(seal));
        assert_eq!(cell.life(), Life::Forwarded);
        assert!(
            !cell.retire() && !cell.retire_sealed(seal),
            "moved, not retired"
        );
        assert_eq!(cell.apply(|w| Some(w + 1)), Applied::Dead);
        assert!(matches!(cell.relocate(), Relocation::Dead));
        // Retired (a removal) after the copy was taken: the forward fails,
        // and the cell reads as evicted, never as forwarded.
        let cell = StateCell::new(7);
        let Relocation::Moved(_, seal) = cell.relocate() else {
            panic!("a live cell moves");
        };
        assert!(cell.retire());
        assert!(!cell.forward(seal));
        assert_eq!(cell.life(), Life::Evicted);
        assert!(!cell.is_forwarded() && cell.holds_room());
        // An unborn cell refused after its copy was taken: likewise.
        let cell = StateCell::<u64>::unborn();
        let Relocation::Moved(_, seal) = cell.relocate() else {
            panic!("an unborn cell moves");
        };
        assert_eq!(cell.refuse(), Ok(()));
        assert!(!cell.forward(seal));
        assert_eq!(cell.life(), Life::Refused);
        // A lapsed client is retired from the state the move read, and
        // reads as evicted.
        let cell = StateCell::new(7);
        let Relocation::Moved(_, seal) = cell.relocate() else {
            panic!("a live cell moves");
        };
        assert!(cell.retire_sealed(seal));
        assert!(!cell.forward(seal));
        assert_eq!(cell.life(), Life::Evicted);
    }
}
