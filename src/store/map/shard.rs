//! A shard: its writers' lock and its current table; taking the lock
//! (waiting, or only if it is free), recovering it after a panic under it,
//! and what a writer does as it lets go.

#![allow(unsafe_code)]

use core::hash::{BuildHasher, Hash};
use core::mem::ManuallyDrop;
use std::sync::{MutexGuard, PoisonError, TryLockError};

use crossbeam_epoch::{self as epoch, Atomic, Guard};

use super::reclaim::Retired;
use super::table::Table;
use super::Map;
use crate::cell::Mortal;
use crate::sync::Mutex;

/// What a shard's lock guards besides its table's writers: whether a
/// table was retired under it, so that the writer hands it to the epoch
/// collector once it lets the lock go.
#[derive(Debug, Default)]
pub(super) struct Held {
    pub(super) retired: bool,
}

/// A shard's lock held; on release a table retired under the lock is
/// flushed to the epoch collector, and the map's retired tables that no
/// reader can hold any more are freed (see [`Locked::drop`]).
pub(super) struct Locked<'a, K, V> {
    /// Dropped (the lock released) only in [`Locked::drop`].
    held: ManuallyDrop<MutexGuard<'a, Held>>,
    retired: &'a Retired<K, V>,
}

impl<K, V> core::ops::Deref for Locked<'_, K, V> {
    type Target = Held;

    fn deref(&self) -> &Held {
        &self.held
    }
}

impl<K, V> core::ops::DerefMut for Locked<'_, K, V> {
    fn deref_mut(&mut self) -> &mut Held {
        &mut self.held
    }
}

impl<K, V> Drop for Locked<'_, K, V> {
    /// Releases the lock; then, outside it: if a rebuild retired a table
    /// under it, flushes this thread's epoch bag, so that the collector
    /// marks the table expired once no reader can hold it rather than
    /// after dozens more retirements have filled the bag; and frees the
    /// map's retired tables already expired (their dead keys dropped: user
    /// code, run here, on a writer's path).
    fn drop(&mut self) {
        let retired = core::mem::take(&mut self.held.retired);
        // SAFETY: dropped once, here, and not touched again.
        unsafe { ManuallyDrop::drop(&mut self.held) };
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
    /// Rebuilds, removals, sweeps, and the inserts that meet a rebuild (or
    /// find no table, or no room). Readers never take it, nor does an
    /// insert into a table with room.
    pub(super) lock: Mutex<Held>,
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
        let held = shard
            .lock
            .lock()
            .unwrap_or_else(|poisoned| self.recover(shard, poisoned, guard));
        Locked {
            held: ManuallyDrop::new(held),
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
        let held = match shard.lock.try_lock() {
            Ok(held) => held,
            Err(TryLockError::WouldBlock) => return None,
            Err(TryLockError::Poisoned(poisoned)) => self.recover(shard, poisoned, guard),
        };
        Some(Locked {
            held: ManuallyDrop::new(held),
            retired: &self.retired,
        })
    }

    /// A shard's lock, poisoned by a panic under it: the rebuild it left
    /// unfinished is finished (see [`Map::finish_abandoned`]). The counts
    /// need no repair: each writer changes them in one step with the tags
    /// it changes.
    fn recover<'a>(
        &self,
        shard: &Shard<K, V>,
        poisoned: PoisonError<MutexGuard<'a, Held>>,
        guard: &Guard,
    ) -> MutexGuard<'a, Held> {
        let mut held = poisoned.into_inner();
        if let Some(table) = Self::current(shard, guard) {
            if table.next(guard).is_some() {
                let _ = self.finish_abandoned(shard, table, guard);
                held.retired = true;
            }
        }
        shard.lock.clear_poison();
        held
    }
}
