//! A shard: its writers' lock with the counts it guards, and its current
//! table; taking the lock (waiting, or only if it is free), recovering it
//! after a panic under it, and what a writer publishes as it lets go.

#![allow(unsafe_code)]

use core::hash::{BuildHasher, Hash};
use core::mem::ManuallyDrop;
use std::sync::{MutexGuard, PoisonError, TryLockError};

use crossbeam_epoch::{self as epoch, Atomic, Guard};

use super::reclaim::Retired;
use super::table::{Counts, Table};
use super::Map;
use crate::cell::Mortal;
use crate::sync::{Mutex, Ordering, PlainAtomicU64};

/// A shard's lock held, with its counts; on release the live count is
/// published for [`Map::len`], a table retired under the lock is flushed
/// to the epoch collector, and the map's retired tables that no reader can
/// hold any more are freed (see [`Locked::drop`]).
pub(super) struct Locked<'a, K, V> {
    /// Dropped (the lock released) only in [`Locked::drop`].
    counts: ManuallyDrop<MutexGuard<'a, Counts>>,
    entries: &'a PlainAtomicU64,
    /// The shard's removed entries still in its table, published as the
    /// lock is let go (the `metrics` feature's gauge).
    #[cfg(feature = "metrics")]
    removed: &'a PlainAtomicU64,
    retired: &'a Retired<K, V>,
}

impl<K, V> core::ops::Deref for Locked<'_, K, V> {
    type Target = Counts;

    fn deref(&self) -> &Counts {
        &self.counts
    }
}

impl<K, V> core::ops::DerefMut for Locked<'_, K, V> {
    fn deref_mut(&mut self) -> &mut Counts {
        &mut self.counts
    }
}

impl<K, V> Drop for Locked<'_, K, V> {
    /// Publishes the live count and releases the lock; then, outside it:
    /// if a rebuild retired a table under it, flushes this thread's epoch
    /// bag, so that the collector marks the table expired once no reader
    /// can hold it rather than after dozens more retirements have filled
    /// the bag; and frees the map's retired tables already expired (their
    /// dead keys dropped: user code, run here, on a writer's path).
    fn drop(&mut self) {
        // Relaxed: read only by `Map::len`, which promises no ordering.
        self.entries
            .store(self.counts.live as u64, Ordering::Relaxed);
        // Relaxed: as above, for `Map::removed`. Slots used but not live:
        // removed entries, whose keys and cells the table keeps until the
        // shard is rebuilt (and copies a move gave up).
        #[cfg(feature = "metrics")]
        self.removed.store(
            self.counts.used.saturating_sub(self.counts.live) as u64,
            Ordering::Relaxed,
        );
        let retired = core::mem::take(&mut self.counts.retired);
        // SAFETY: dropped once, here, and not touched again.
        unsafe { ManuallyDrop::drop(&mut self.counts) };
        // Not while unwinding: a key's `Drop` that panicked then would
        // abort; the tables wait for a later writer.
        if std::thread::panicking() {
            return;
        }
        if retired {
            flush_retired();
        }
        if self.retired.any_expired() {
            self.retired.free_expired();
        }
    }
}

/// Hands this thread's deferred functions (a retired table's expiry among
/// them) to the epoch collector, which runs those no reader can be
/// concerned with any more.
#[cold]
#[inline(never)]
fn flush_retired() {
    epoch::pin().flush();
}

pub(super) struct Shard<K, V> {
    /// Writers only: inserts, removals, sweeps and rebuilds. Readers never
    /// take it.
    pub(super) lock: Mutex<Counts>,
    /// The live entries, as the lock's counts last had them: published by
    /// every writer as it lets go of the lock, so that [`Map::len`] can sum
    /// the shards without taking any lock.
    pub(super) entries: PlainAtomicU64,
    /// The removed entries its table still holds, as the lock's counts last
    /// had them: published with `entries`, for [`Map::removed`].
    #[cfg(feature = "metrics")]
    pub(super) removed: PlainAtomicU64,
    /// The current table; null until the shard's first insert.
    pub(super) table: Atomic<Table<K, V>>,
}

impl<K, V, S> Map<K, V, S>
where
    K: Hash + Eq + Send + Sync,
    V: Mortal + Send + Sync,
    S: BuildHasher,
{
    /// Takes a shard's lock, waiting for its holder. A panic under it (in
    /// a caller's closure, the key's `Hash`, or a rebuild's `relocate`) may
    /// have left the counts stale, or a rebuild unfinished: see
    /// [`Map::recover`].
    pub(super) fn lock<'a>(&'a self, shard: &'a Shard<K, V>, guard: &Guard) -> Locked<'a, K, V> {
        let counts = shard
            .lock
            .lock()
            .unwrap_or_else(|poisoned| self.recover(shard, poisoned, guard));
        Locked {
            counts: ManuallyDrop::new(counts),
            entries: &shard.entries,
            #[cfg(feature = "metrics")]
            removed: &shard.removed,
            retired: &self.retired,
        }
    }

    /// Takes a shard's lock if no other thread holds it: `None` at once
    /// otherwise, never waiting. A poisoned lock is held by no one, and is
    /// recovered as [`Map::lock`] does.
    pub(super) fn try_lock<'a>(
        &'a self,
        shard: &'a Shard<K, V>,
        guard: &Guard,
    ) -> Option<Locked<'a, K, V>> {
        let counts = match shard.lock.try_lock() {
            Ok(counts) => counts,
            Err(TryLockError::WouldBlock) => return None,
            Err(TryLockError::Poisoned(poisoned)) => self.recover(shard, poisoned, guard),
        };
        Some(Locked {
            counts: ManuallyDrop::new(counts),
            entries: &shard.entries,
            #[cfg(feature = "metrics")]
            removed: &shard.removed,
            retired: &self.retired,
        })
    }

    /// A shard's lock, poisoned by a panic under it: the rebuild it left
    /// unfinished is finished (see [`Map::finish_abandoned`]) and the
    /// counts are counted again from the table.
    fn recover<'a>(
        &self,
        shard: &Shard<K, V>,
        poisoned: PoisonError<MutexGuard<'a, Counts>>,
        guard: &Guard,
    ) -> MutexGuard<'a, Counts> {
        let mut counts = poisoned.into_inner();
        if let Some(table) = Self::current(shard, guard) {
            let (table, retired) = match table.next(guard) {
                Some(_) => (self.finish_abandoned(shard, table, guard), true),
                None => (table, false),
            };
            *counts = Counts {
                retired,
                ..table.count()
            };
        } else {
            *counts = Counts::default();
        }
        shard.lock.clear_poison();
        counts
    }
}
