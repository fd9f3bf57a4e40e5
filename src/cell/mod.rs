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

use core::time::Duration;

use crate::algorithm::{WordAlgorithm, FRESH};
use crate::decision::Decision;
use crate::sync::{AtomicU64, Backoff, Ordering};

mod log;

/// One client's state word. Public only as the sealed
/// [`Algorithm::Cell`] of the word algorithms; nothing outside the crate can
/// reach it.
#[doc(hidden)]
#[derive(Debug)]
pub struct StateCell {
    word: AtomicU64,
    /// Loom builds only: replace the compare-and-swap with a load and a
    /// store, the bug the models must catch (see `tollgate::__loom`).
    #[cfg(feature = "loom")]
    racy: bool,
}

/// What [`StateCell::apply`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    /// The transition accepted the word and this is the word it wrote.
    Admitted(u64),
    /// The transition refused this word, the latest one observed; nothing
    /// was written.
    Denied(u64),
}

impl StateCell {
    /// A cell holding `word`.
    pub fn new(word: u64) -> Self {
        Self {
            word: AtomicU64::new(word),
            #[cfg(feature = "loom")]
            racy: false,
        }
    }

    /// A deliberately broken cell whose update is a load followed by a
    /// store: two threads can both admit against the same word.
    #[cfg(feature = "loom")]
    pub fn new_racy(word: u64) -> Self {
        Self {
            word: AtomicU64::new(word),
            racy: true,
        }
    }

    /// The current word.
    #[inline]
    pub fn load(&self) -> u64 {
        // Acquire: pairs with the Release half of the AcqRel exchange in
        // `apply` that wrote this word (see "Orderings" above).
        self.word.load(Ordering::Acquire)
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
    pub(crate) fn apply(&self, transition: impl Fn(u64) -> Option<u64>) -> Applied {
        let current = self.load();
        #[cfg(feature = "loom")]
        if self.racy {
            let Some(next) = transition(current) else {
                return Applied::Denied(current);
            };
            // The bug under test: a plain store can overwrite an admission
            // made since the load.
            self.word.store(next, Ordering::Release);
            return Applied::Admitted(next);
        }
        let Some(next) = transition(current) else {
            return Applied::Denied(current);
        };
        // AcqRel on success: Release publishes this admission to the next
        // Acquire load or exchange of the word; Acquire orders it after the
        // admission we are replacing. Acquire on failure: as in `load`.
        match self
            .word
            .compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Applied::Admitted(next),
            Err(seen) => self.apply_contended(seen, transition),
        }
    }

    /// The retry loop, kept out of line: it runs only when another thread
    /// changed the word between our load and our exchange.
    #[cold]
    #[inline(never)]
    fn apply_contended(
        &self,
        mut current: u64,
        transition: impl Fn(u64) -> Option<u64>,
    ) -> Applied {
        let backoff = Backoff::new();
        loop {
            let Some(next) = transition(current) else {
                return Applied::Denied(current);
            };
            // Orderings as in `apply`. A weak exchange may fail spuriously,
            // which this loop absorbs like any other failure.
            match self.word.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Applied::Admitted(next),
                Err(seen) => current = seen,
            }
            backoff.spin();
        }
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
pub trait Algorithm: sealed::Sealed + Send + Sync + 'static {
    // The methods below are hidden from the docs: `cost` is always in
    // `1..=capacity()`, because the limiter rejects the rest before calling.

    /// One client's state.
    #[doc(hidden)]
    /// One client's state.
    type Cell: Send + Sync + 'static;

    #[doc(hidden)]
    /// The state of a client never seen before.
    fn new_cell(&self) -> Self::Cell;

    #[doc(hidden)]
    /// The largest cost that can ever be admitted.
    fn capacity(&self) -> u64;

    #[doc(hidden)]
    /// Checks and, if admitted, records a request: the hot path.
    fn admit(&self, cell: &Self::Cell, now: u64, cost: u64) -> bool;

    #[doc(hidden)]
    /// As [`Algorithm::admit`], with the figures for a [`Decision`].
    fn decide(&self, cell: &Self::Cell, now: u64, cost: u64) -> Decision;

    #[doc(hidden)]
    /// The decision `decide` would make, recording nothing.
    fn peek(&self, cell: &Self::Cell, now: u64, cost: u64) -> Decision;

    #[doc(hidden)]
    /// The decision for a request of cost 0: always allowed, nothing
    /// recorded, with the quota as it stands.
    fn quota(&self, cell: &Self::Cell, now: u64) -> Decision;
}

pub(crate) mod sealed {
    /// Keeps [`Algorithm`](super::Algorithm) closed to the crate's own types.
    pub trait Sealed {}
    impl<A: crate::algorithm::WordAlgorithm> Sealed for A {}
}

impl<A: WordAlgorithm> Algorithm for A {
    type Cell = StateCell;

    fn new_cell(&self) -> StateCell {
        StateCell::new(FRESH)
    }

    #[inline]
    fn capacity(&self) -> u64 {
        WordAlgorithm::capacity(self)
    }

    #[inline]
    fn admit(&self, cell: &StateCell, now: u64, cost: u64) -> bool {
        matches!(
            cell.apply(|word| WordAlgorithm::admit(self, word, now, cost)),
            Applied::Admitted(_)
        )
    }

    fn decide(&self, cell: &StateCell, now: u64, cost: u64) -> Decision {
        let applied = cell.apply(|word| WordAlgorithm::admit(self, word, now, cost));
        describe(self, applied, now, cost)
    }

    fn peek(&self, cell: &StateCell, now: u64, cost: u64) -> Decision {
        let word = cell.load();
        let applied = match WordAlgorithm::admit(self, word, now, cost) {
            Some(next) => Applied::Admitted(next),
            None => Applied::Denied(word),
        };
        describe(self, applied, now, cost)
    }

    fn quota(&self, cell: &StateCell, now: u64) -> Decision {
        Decision {
            allowed: true,
            limit: WordAlgorithm::capacity(self),
            remaining: self.remaining(cell.load(), now),
            retry_after: Duration::ZERO,
        }
    }
}

/// The figures for a decision: what is left after it, and when a denied
/// request would pass.
fn describe<A: WordAlgorithm>(algorithm: &A, applied: Applied, now: u64, cost: u64) -> Decision {
    let (allowed, word, retry_after) = match applied {
        Applied::Admitted(word) => (true, word, 0),
        Applied::Denied(word) => (false, word, algorithm.retry_after(word, now, cost)),
    };
    Decision {
        allowed,
        limit: algorithm.capacity(),
        remaining: algorithm.remaining(word, now),
        retry_after: Duration::from_nanos(retry_after),
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
}
