//! A log's birth word: the log keeps its life (see "Birth" in
//! `crate::cell`) in a word of its own, beside the `life` word its
//! eviction handshake uses.

use crate::cell::Life;
use crate::sync::{AtomicU64, Ordering};

/// A log's birth word: unborn, claimed, born or refused (see "Birth" in
/// `crate::cell`).
#[derive(Debug)]
pub(crate) struct Birth(AtomicU64);

impl Birth {
    const UNBORN: u64 = 0;
    const CLAIMED: u64 = 1;
    const BORN: u64 = 2;
    const REFUSED: u64 = 3;

    /// The birth word of a cell created alive.
    pub(crate) fn born() -> Self {
        Self(AtomicU64::new(Self::BORN))
    }

    /// The birth word of a cell inserted before it has room.
    pub(crate) fn unborn() -> Self {
        Self(AtomicU64::new(Self::UNBORN))
    }

    /// Unborn, claimed, or `born` if born (the caller then reads the state
    /// itself to tell live from evicted), or refused.
    #[inline]
    pub(crate) fn life(&self, born: impl FnOnce() -> Life) -> Life {
        // Acquire: pairs with the Release store in `bear`, so a reader that
        // sees the cell born also sees the fresh state written before it.
        Self::decode(self.0.load(Ordering::Acquire), born)
    }

    /// What a birth word reads as, `born` deciding for a born cell.
    fn decode(word: u64, born: impl FnOnce() -> Life) -> Life {
        match word {
            Self::UNBORN => Life::Unborn,
            Self::CLAIMED => Life::Claimed,
            Self::BORN => born(),
            _ => Life::Refused,
        }
    }

    /// Unborn → `to`: `Ok` iff this call moved it, else the life it found
    /// (read by the exchange itself, so never older than this thread's last
    /// look), `born` deciding for a born cell.
    fn leave_unborn(&self, to: u64, born: impl FnOnce() -> Life) -> Result<(), Life> {
        // AcqRel/Acquire: claim, unclaim, refusal and birth are exchanges or
        // stores on this one word; whichever comes first in its modification
        // order makes the others fail. Acquire on failure: as in `life`.
        self.0
            .compare_exchange(Self::UNBORN, to, Ordering::AcqRel, Ordering::Acquire)
            .map(drop)
            .map_err(|word| Self::decode(word, born))
    }

    /// Unborn → claimed; see [`Mortal::claim`].
    pub(crate) fn claim(&self, born: impl FnOnce() -> Life) -> Result<(), Life> {
        self.leave_unborn(Self::CLAIMED, born)
    }

    /// Claimed → unborn, by the claimer that found no room.
    pub(crate) fn unclaim(&self) {
        // Release: pairs with the Acquire of the next `claim` or `refuse`,
        // which then sees the store's count as this claimer left it.
        self.0.store(Self::UNBORN, Ordering::Release);
    }

    /// Unborn → refused; see [`Mortal::refuse`].
    pub(crate) fn refuse(&self, born: impl FnOnce() -> Life) -> Result<(), Life> {
        self.leave_unborn(Self::REFUSED, born)
    }

    /// Claimed → born, by the claimer, after it wrote the fresh state.
    pub(crate) fn bear(&self) {
        // Release: publishes the fresh state to the Acquire in `life`.
        self.0.store(Self::BORN, Ordering::Release);
    }
}
