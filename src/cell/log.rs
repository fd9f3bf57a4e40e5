//! The sliding window log's cell: a ring of timestamp slots, each claimed by
//! its own compare-and-swap.
//!
//! Each slot holds the expiry of one admission (see
//! [`crate::algorithm`]'s `sliding_log` module). A check looks for a free
//! slot (expiry `≤ now`) and claims it by exchanging its old value for the new
//! expiry. Two threads can never take the same slot, since only one
//! exchange from a given old value succeeds; an admission is never lost,
//! since it is exactly one successful exchange; and it is never counted
//! twice, since a slot is taken only while free. A denial is a full read of
//! the slots with no write.
//!
//! A request of cost `n > 1` first counts the free slots without writing,
//! then claims `n` of them one by one. If a race leaves it short, it gives
//! back what it claimed: while it holds them, a concurrent check may see too
//! few free slots and be denied, an error toward denying, never admitting.
//!
//! # Orderings
//!
//! As for the word cell: each slot publishes nothing but itself, so the
//! exchanges alone make the count exact. Loads are `Acquire` and successful
//! exchanges `AcqRel`, pairing with each other as in `cell::StateCell`. The
//! `next` hint is `Relaxed`: any value of it is correct, it only decides
//! where the search starts.

use core::time::Duration;

use super::sealed;
use super::Algorithm;
use crate::algorithm::SlidingWindowLog;
use crate::decision::Decision;
use crate::sync::{AtomicU64, Ordering};

/// One client's log: `limit` slots of admission expiries. Public only as
/// the sealed [`Algorithm::Cell`] of [`SlidingWindowLog`].
#[doc(hidden)]
#[derive(Debug)]
pub struct LogCell {
    /// Where the next search starts: just past the last slot claimed. Since
    /// slots are mostly claimed in turn, that is usually the oldest one.
    next: AtomicU64,
    slots: Box<[AtomicU64]>,
}

impl LogCell {
    fn new(limit: u64) -> Self {
        Self {
            next: AtomicU64::new(0),
            slots: (0..limit).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Slot indices in search order: from the hint to the end, then from the
    /// start to the hint.
    fn search_order(&self) -> impl Iterator<Item = usize> {
        let n = self.slots.len();
        // Relaxed: a hint; see "Orderings".
        let start = (self.next.load(Ordering::Relaxed) % n as u64) as usize;
        (start..n).chain(0..start)
    }

    /// Claims slot `index` for `stamp` if it is free at `now`.
    #[inline]
    fn try_claim(&self, log: &SlidingWindowLog, index: usize, now: u64, stamp: u64) -> Option<u64> {
        let slot = &self.slots[index];
        // Acquire: pairs with the AcqRel exchange that wrote the slot.
        let mut seen = slot.load(Ordering::Acquire);
        while log.is_free(seen, now) {
            // AcqRel on success, Acquire on failure: as in `StateCell::apply`.
            match slot.compare_exchange(seen, stamp, Ordering::AcqRel, Ordering::Acquire) {
                Ok(old) => {
                    // Relaxed: a hint; see "Orderings".
                    self.next.store(index as u64 + 1, Ordering::Relaxed);
                    return Some(old);
                }
                // Another thread took the slot first; if it is somehow still
                // free, try again, else move on.
                Err(now_there) => seen = now_there,
            }
        }
        None
    }

    fn admit(&self, log: &SlidingWindowLog, now: u64, cost: u64) -> bool {
        let stamp = log.stamp(now);
        if cost == 1 {
            return self
                .search_order()
                .any(|i| self.try_claim(log, i, now, stamp).is_some());
        }
        self.admit_many(log, now, cost, stamp)
    }

    #[cold]
    fn admit_many(&self, log: &SlidingWindowLog, now: u64, cost: u64, stamp: u64) -> bool {
        if self.free(log, now) < cost {
            return false;
        }
        let mut claimed = Vec::with_capacity(cost as usize);
        for i in self.search_order() {
            if let Some(old) = self.try_claim(log, i, now, stamp) {
                claimed.push((i, old));
                if claimed.len() as u64 == cost {
                    return true;
                }
            }
        }
        // Raced short: give the slots back. A slot no longer holding our
        // stamp was legitimately taken once our stamp expired; leave it.
        for (i, old) in claimed {
            // AcqRel/Acquire: as in `try_claim`.
            let _ = self.slots[i].compare_exchange(stamp, old, Ordering::AcqRel, Ordering::Acquire);
        }
        false
    }

    /// Every slot's expiry, each read once.
    fn expiries(&self) -> Vec<u64> {
        // Acquire: as in `try_claim`.
        self.slots
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .collect()
    }

    /// How many slots are free at `now`.
    fn free(&self, log: &SlidingWindowLog, now: u64) -> u64 {
        self.slots
            .iter()
            // Acquire: as in `try_claim`.
            .filter(|s| log.is_free(s.load(Ordering::Acquire), now))
            .count() as u64
    }

    fn describe(&self, log: &SlidingWindowLog, allowed: bool, now: u64, cost: u64) -> Decision {
        let expiries = self.expiries();
        let free = expiries.iter().filter(|&&e| log.is_free(e, now)).count() as u64;
        let retry_after = if allowed {
            0
        } else {
            log.retry_after(expiries, now, cost)
        };
        Decision {
            allowed,
            limit: log.limit(),
            remaining: free,
            retry_after: Duration::from_nanos(retry_after),
        }
    }
}

impl sealed::Sealed for SlidingWindowLog {}

impl Algorithm for SlidingWindowLog {
    type Cell = LogCell;

    fn new_cell(&self) -> LogCell {
        LogCell::new(self.limit())
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.limit()
    }

    #[inline]
    fn admit(&self, cell: &LogCell, now: u64, cost: u64) -> bool {
        cell.admit(self, now, cost)
    }

    fn decide(&self, cell: &LogCell, now: u64, cost: u64) -> Decision {
        let allowed = cell.admit(self, now, cost);
        cell.describe(self, allowed, now, cost)
    }

    fn peek(&self, cell: &LogCell, now: u64, cost: u64) -> Decision {
        let free = cell.free(self, now);
        let allowed = free >= cost;
        let mut d = cell.describe(self, allowed, now, cost);
        if allowed {
            // What a check would leave.
            d.remaining = free - cost;
        }
        d
    }

    fn quota(&self, cell: &LogCell, now: u64) -> Decision {
        cell.describe(self, true, now, 1)
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    fn log(limit: u64, window_ns: u64) -> SlidingWindowLog {
        SlidingWindowLog::new(limit, Duration::from_nanos(window_ns)).unwrap()
    }

    #[test]
    fn admits_while_a_slot_is_free() {
        let l = log(2, 100);
        let cell = l.new_cell();
        assert!(Algorithm::admit(&l, &cell, 10, 1));
        assert!(Algorithm::admit(&l, &cell, 20, 1));
        assert!(!Algorithm::admit(&l, &cell, 109, 1));
        assert!(Algorithm::admit(&l, &cell, 110, 1));
        assert!(!Algorithm::admit(&l, &cell, 119, 1));
        let d = l.peek(&cell, 119, 1);
        assert_eq!(
            (d.is_allowed(), d.remaining(), d.retry_after()),
            (false, 0, Duration::from_nanos(1))
        );
    }

    #[test]
    fn a_multi_claim_needs_every_slot_free() {
        let l = log(3, 100);
        let cell = l.new_cell();
        assert!(Algorithm::admit(&l, &cell, 0, 1));
        assert!(!Algorithm::admit(&l, &cell, 50, 3));
        assert_eq!(cell.free(&l, 50), 2);
        assert!(Algorithm::admit(&l, &cell, 50, 2));
        assert_eq!(cell.free(&l, 50), 0);
        // At 100 one slot is free again: too few for two, and none is taken.
        assert!(!Algorithm::admit(&l, &cell, 100, 2));
        assert_eq!(cell.expiries(), [100, 150, 150]);
    }
}
