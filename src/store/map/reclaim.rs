//! Retired tables, freed by the map's own writers once no reader can hold
//! them, never by a reader.
//!
//! A retired table still owns the keys and values of the entries removed
//! from it (its `DELETED` slots), so freeing it runs the keys' `Drop`:
//! user code. Handed to crossbeam-epoch's collector as they were, tables
//! were freed by whichever thread collected next, and every pin may
//! collect: a check on one client ran other clients' `Drop`. So the
//! collector is given only a flag to raise: once no thread pinned before
//! the retirement is still pinned, the deferred function (run by any
//! thread, a check's included) marks the table expired, one store and a
//! count, and touches nothing else. The table itself waits in the map's
//! list of retired tables, and a writer of the map (an insert, a removal,
//! a sweep, a rebuild), letting go of a shard's lock (or, for an insert
//! that took none, as it returns), frees the expired ones, outside the
//! lock. The map's `Drop` frees whatever is left, expired
//! or not: no reader can hold a table of a map being dropped, and a flag
//! raised later touches only itself.

#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, TryLockError};

use crossbeam_epoch::{Guard, Owned, Shared};

use super::table::Table;
use crate::sync::{Ordering, PlainAtomicU64};

/// A retired table waiting to be freed, and the flag the collector raises
/// once no reader can hold it.
struct Pending<K, V> {
    table: *const Table<K, V>,
    expired: Arc<PlainAtomicU64>,
}

/// A map's retired tables (see the module docs).
pub(super) struct Retired<K, V> {
    /// Tables retired and not yet freed. Taken by writers only: a
    /// retirement (under a shard's lock) pushes, a writer that has let its
    /// shard's lock go frees the expired ones, never waiting for the list.
    pending: Mutex<VecDeque<Pending<K, V>>>,
    /// How many of them have expired: raised by the collector's deferred
    /// functions, lowered by the writers that free them. Read first, so
    /// that a writer with nothing to free touches no lock.
    expired: Arc<PlainAtomicU64>,
    /// How many tables writers have taken out of the list and not yet
    /// finished freeing: still pending for [`Retired::any_pending`], so a
    /// sweep that waits for every table to be freed does not return while
    /// another writer is still dropping one's keys.
    freeing: PlainAtomicU64,
}

// SAFETY: the pending tables are owned by the map (a retired table is
// reachable by readers only through references they took before its
// retirement, which they never use past their pin); sending or sharing the
// list sends or shares them, as sending the map would, so it is `Send` and
// `Sync` when a table is.
unsafe impl<K: Send + Sync, V: Send + Sync> Send for Retired<K, V> {}
// SAFETY: as for `Send` above; every access to the list is under its lock.
unsafe impl<K: Send + Sync, V: Send + Sync> Sync for Retired<K, V> {}

impl<K, V> Retired<K, V> {
    pub(super) fn new() -> Self {
        Self {
            pending: Mutex::new(VecDeque::new()),
            expired: Arc::new(PlainAtomicU64::new(0)),
            freeing: PlainAtomicU64::new(0),
        }
    }

    /// Retires `table`, which no reader pinned from now on can reach: it is
    /// freed by a later [`Retired::free_expired`] once every thread pinned
    /// before this call has unpinned. Holding the shard's lock.
    pub(super) fn retire(&self, table: Shared<'_, Table<K, V>>, guard: &Guard) {
        let expired = Arc::new(PlainAtomicU64::new(0));
        let (flag, count) = (Arc::clone(&expired), Arc::clone(&self.expired));
        // Run by whichever thread collects, once no thread pinned before
        // this point is still pinned: a store and an add, no user code.
        guard.defer(move || {
            // Relaxed: a hint that something may be freed; each table's own
            // flag decides. Counted before the flag is raised (and so before
            // a writer that sees the flag takes the count down again), so the
            // count never wraps.
            count.fetch_add(1, Ordering::Relaxed);
            // Release: pairs with the Acquire load in `take_expired`, so the
            // writer that frees the table does so after every reader that
            // could hold it has unpinned (the collector's own ordering runs
            // this after those unpins), and after the count above.
            flag.store(1, Ordering::Release);
        });
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push_back(Pending {
                table: table.as_raw(),
                expired,
            });
    }

    /// Whether any retired table waits to be freed, expired or not, or is
    /// being freed by another writer at this instant.
    pub(super) fn any_pending(&self) -> bool {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Acquire: pairs with the Release decrement in `free_expired`, so a
        // caller told that nothing is pending sees every key and value of
        // the tables freed as dropped. A table leaves the list only with
        // this count raised first, under the list's lock held here, so a
        // table is always in one or the other.
        !pending.is_empty() || self.freeing.load(Ordering::Acquire) != 0
    }

    /// Whether every retired table waiting has expired (tests: one free
    /// then takes them all).
    #[cfg(test)]
    pub(super) fn all_expired(&self) -> bool {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Acquire: as in `take_expired`.
        pending
            .iter()
            .all(|pending| pending.expired.load(Ordering::Acquire) != 0)
    }

    /// Whether some retired table may be freed now: one load, for a writer
    /// about to let go of a shard's lock.
    #[inline]
    pub(super) fn any_expired(&self) -> bool {
        // Relaxed: a hint, as in `retire`.
        self.expired.load(Ordering::Relaxed) != 0
    }

    /// Frees the retired tables no reader can hold any more, running their
    /// keys' and values' `Drop`. For a writer that holds no shard's lock;
    /// if another writer is freeing (or retiring) at this instant, does
    /// nothing and leaves the tables to the next writer.
    ///
    /// Tables expire in about the order they were retired (the collector
    /// runs each thread's deferred functions in order, its epochs one after
    /// another), so each is taken from the front of the list, one at a
    /// time, and freed outside the list's lock; a table that expired ahead
    /// of an older one is found by a pass over the whole list.
    #[cold]
    #[inline(never)]
    pub(super) fn free_expired(&self) {
        /// Lowers `freeing` once the table is freed, or its freeing ends
        /// in a panic (a key's `Drop`), which frees what it can.
        struct Freed<'a>(&'a PlainAtomicU64);
        impl Drop for Freed<'_> {
            fn drop(&mut self) {
                // Release: pairs with the Acquire load in `any_pending`.
                self.0.fetch_sub(1, Ordering::Release);
            }
        }
        while let Some(table) = self.take_expired() {
            let _freed = Freed(&self.freeing);
            // Relaxed: as in `retire`.
            let left = self.expired.fetch_sub(1, Ordering::Relaxed) - 1;
            // SAFETY: made by `Owned::new` (a rebuild's new table), retired
            // once, and freed once, here: taken out of the list. Its flag is
            // raised, so every thread pinned before its retirement has
            // unpinned, and no thread pinned since can reach it (it was
            // unreachable from the shard when retired, and a thread that
            // reaches it through an older table's link pinned before that
            // table's retirement, so before this one's).
            drop(unsafe { Owned::from_raw(table.cast_mut()) });
            if left == 0 {
                return;
            }
        }
    }

    /// Takes an expired table out of the list, if there is one and no
    /// other writer holds the list.
    fn take_expired(&self) -> Option<*const Table<K, V>> {
        let mut pending = match self.pending.try_lock() {
            Ok(pending) => pending,
            Err(TryLockError::WouldBlock) => return None,
            // A panic in a retirement's push: the list is still whole.
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        };
        // Acquire: pairs with the Release store in `retire`'s deferred
        // function.
        let expired = |pending: &Pending<K, V>| pending.expired.load(Ordering::Acquire) != 0;
        let at = if pending.front().is_some_and(expired) {
            0
        } else if self.any_expired() {
            pending.iter().position(expired)?
        } else {
            return None;
        };
        let table = pending.remove(at).map(|pending| pending.table)?;
        // Relaxed: ordered by the list's lock, held here and by
        // `any_pending`'s load; the free's end is published by the Release
        // decrement in `free_expired`.
        self.freeing.fetch_add(1, Ordering::Relaxed);
        Some(table)
    }
}

impl<K, V> Drop for Retired<K, V> {
    fn drop(&mut self) {
        let pending = self
            .pending
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for pending in pending.drain(..) {
            // SAFETY: `&mut self`, from the map's own `Drop`: no reader can
            // hold a table of a map being dropped; each pending table is
            // freed once, here. A flag raised later touches only its `Arc`.
            drop(unsafe { Owned::from_raw(pending.table.cast_mut()) });
        }
    }
}
