//! A shard: its writers' lock and its current table; taking the lock
//! (waiting, or only if it is free), recovering it after a panic under it,
//! and what a writer does as it lets go; the gate where a first request
//! that found no room waits for the lock, or for a rebuild's new table.

#![allow(unsafe_code)]

use core::hash::{BuildHasher, Hash};
use core::mem::ManuallyDrop;
use core::ptr;
use std::sync::{Condvar, MutexGuard, PoisonError, TryLockError};

use crossbeam_epoch::{self as epoch, Atomic, Guard};

use super::reclaim::Retired;
use super::table::Table;
use super::Map;
use crate::cell::Mortal;
use crate::sync::{Mutex, Ordering, PlainAtomicU64};

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
    gate: &'a Gate,
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
        // On unwind too: a first request waiting at the gate then finds the
        // lock poisoned, and takes it to finish what was left.
        self.gate.open();
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
    /// Rebuilds, removals, sweeps, and the inserts that find no table (or
    /// no room and no rebuild under way). Readers never take it, nor does
    /// an insert into a table with room.
    pub(super) lock: Mutex<Held>,
    /// The current table; null until the shard's first insert.
    pub(super) table: Atomic<Table<K, V>>,
    /// Where a first request that found no room waits, holding no lock,
    /// for the lock to be let go or a rebuild to link its new table.
    pub(super) gate: Gate,
}

/// Where first requests that found their shard's table with no room (or
/// sealed) wait for either of the two events that let them go on: the
/// shard's lock let go (they take it, and rebuild) or a rebuild's new
/// table linked (they insert into it with no lock, while the rebuild
/// moves the entries). A waiter checks both under the gate's mutex before
/// it sleeps, and each event is announced under that mutex after it
/// happened ([`Gate::open`]), so no waiter sleeps past one: the mutex
/// orders each announcement either before the waiter's check, which then
/// sees the event, or after the waiter began to sleep, which it wakes.
///
/// An announcement takes the mutex only if a waiter is there: each waiter
/// counts itself in `waiters` before its check, and the announcer reads
/// the count after the event, both by read-modify-writes (`AcqRel`). So if
/// the announcer's read comes first in the count's order, the waiter's
/// increment reads from it and synchronizes with it, and the waiter's
/// check, after its increment, sees the event; otherwise the announcer
/// reads the waiter counted, and takes the mutex. (Plain loads on both
/// sides would let each miss the other: the store-buffering race.)
#[derive(Debug, Default)]
pub(super) struct Gate {
    lock: Mutex<()>,
    opened: Condvar,
    /// First requests at the gate, checking or asleep.
    pub(super) waiters: PlainAtomicU64,
    /// The checks made at the gate, for the tests: a waiter that spun
    /// rather than slept would make one after another.
    #[cfg(test)]
    pub(super) checks: PlainAtomicU64,
}

impl Gate {
    /// Wakes every first request waiting at the gate: the shard's lock was
    /// just let go, or a rebuild just linked its new table. Made after the
    /// event, by the thread that made it.
    pub(super) fn open(&self) {
        // AcqRel: a read-modify-write that changes nothing, ordered after
        // the event; see above for what it pairs with.
        if self.waiters.fetch_add(0, Ordering::AcqRel) != 0 {
            // A waiter's panic cannot leave the `()` it guards inconsistent.
            let _gate = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            self.opened.notify_all();
        }
    }
}

/// What a first request waiting at the gate met (see [`Map::wait_at_gate`]).
pub(super) enum Wake<'a, K, V> {
    /// The shard's lock, let go by its holder: now this thread's.
    Locked(Locked<'a, K, V>),
    /// A rebuild linked its new table, or published it, since the request
    /// looked: it tries again, with no lock.
    Moved,
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
        self.locked(shard, held)
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
        Some(self.locked(shard, held))
    }

    fn locked<'a>(
        &'a self,
        shard: &'a Shard<K, V>,
        held: MutexGuard<'a, Held>,
    ) -> Locked<'a, K, V> {
        Locked {
            held: ManuallyDrop::new(held),
            retired: &self.retired,
            gate: &shard.gate,
        }
    }

    /// Waits, for a first request that found `seen`, the shard's table,
    /// with no room for it (or sealed by a rebuild that has not linked its
    /// new table yet), until the shard's table is no longer `seen`, or has
    /// a table linked (it then tries again, with no lock), or the shard's
    /// lock is free (it takes it). So a first request waits for a rebuild
    /// only until it links the table it moves the entries to, not while it
    /// moves them; and for any other writer holding the lock (a removal, a
    /// sweep's walk) until it lets go.
    pub(super) fn wait_at_gate<'a>(
        &'a self,
        shard: &'a Shard<K, V>,
        seen: &Table<K, V>,
        guard: &Guard,
    ) -> Wake<'a, K, V> {
        let gate = &shard.gate;
        let mut waiting = gate.lock.lock().unwrap_or_else(PoisonError::into_inner);
        // AcqRel: see `Gate`; before the first check.
        gate.waiters.fetch_add(1, Ordering::AcqRel);
        let wake = loop {
            // Relaxed: read by the tests alone.
            #[cfg(test)]
            gate.checks.fetch_add(1, Ordering::Relaxed);
            // Moved on first: a rebuild that linked its new table (or
            // published it) lets this request go on with no lock.
            let moved = Self::current(shard, guard)
                .is_none_or(|table| !ptr::eq(table, seen) || table.next(guard).is_some());
            if moved {
                break Ok(Wake::Moved);
            }
            match shard.lock.try_lock() {
                Ok(held) => break Ok(Wake::Locked(self.locked(shard, held))),
                // Recovered with the gate let go: the recovery may rebuild,
                // and a rebuild opens the gate.
                Err(TryLockError::Poisoned(poisoned)) => break Err(poisoned),
                Err(TryLockError::WouldBlock) => {}
            }
            waiting = gate
                .opened
                .wait(waiting)
                .unwrap_or_else(PoisonError::into_inner);
        };
        // Relaxed: a count too high only costs an announcement the mutex.
        gate.waiters.fetch_sub(1, Ordering::Relaxed);
        drop(waiting);
        wake.unwrap_or_else(|poisoned| {
            let held = self.recover(shard, poisoned, guard);
            Wake::Locked(self.locked(shard, held))
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
