//! The store's own hash table: each client's key and state cell inline in
//! one slot, lookups that take no lock and never wait, and entries that
//! never move while a reader can see them.
//!
//! # Shape
//!
//! The map is [`SHARDS`] shards, picked by the hash's top bits. A shard is a
//! writers' lock and a pointer to its current [`Table`] (`table.rs`): an
//! array of control bytes, one per slot, read eight at a time as a word,
//! and an array of slots, each holding a key and its value side by side. A
//! control byte is `EMPTY`, `DELETED`, `MOVED`, or `FULL` with seven bits
//! of the key's hash. Probing is linear, by groups of eight slots, from a
//! home group picked by the hash's low bits (multiply-shift, so a table may
//! have any number of groups, and grow by less than double).
//!
//! # Readers
//!
//! A lookup pins the epoch ([`crossbeam_epoch`]: a store to this thread's
//! own slot), loads the shard's table, and probes: for each group, one
//! `Acquire` load of its control word, a key comparison per slot whose tag
//! matches, and a stop at the first group holding an `EMPTY` byte. It
//! takes no lock, writes nothing shared, and never waits for another
//! thread: a rebuild in progress costs it at most a second probe, in the
//! table the entries are moving to. The value it finds stays valid until
//! it unpins, whatever writers do meanwhile.
//!
//! # Writers
//!
//! Inserts, removals, sweeps and rebuilds of a shard hold its lock. A slot
//! is written once, from `EMPTY`: the writer fills it, then publishes its
//! tag with a `Release` store of the group's control word. A slot is never
//! refilled: removal turns its tag to `DELETED` and leaves key and value in
//! place, so a reader that found the entry keeps a valid reference to the
//! value it found, a dead cell, and can never be handed another client's
//! state through it. Room taken by deleted slots comes back only when the
//! shard is *rebuilt* into a new table. A removal takes the lock only for
//! an entry whose cell is dead, which no check needs; and a removal that
//! must not wait ([`Map::try_remove_if`], for a client's removal or reset)
//! takes it only if no other writer holds it, and otherwise leaves the
//! dead entry where it is, for the next writer that meets it: a rebuild
//! leaves it behind, a sweep removes it, an insert of its key removes it
//! first. Until then the entry counts in [`Map::len`].
//!
//! # Rebuilds
//!
//! When an insert would take the table past 7/8 full (deleted slots
//! included), the shard is rebuilt into a new table sized for its live
//! entries at a load of 3/5, so it grows by about 1.46× while only
//! inserting, and shrinks when many entries were removed (`migrate.rs`).
//! The rebuild links the new table from the old one first, so readers can
//! reach both, and then moves the live entries one at a time:
//!
//! 1. the key is hashed (a `Hash` that stalls here holds up only the
//!    rebuild: every entry is live in one table or the other);
//! 2. a word cell's state is copied ([`Mortal::relocate`]) into a slot of
//!    the new table, published with its tag;
//! 3. the old cell is marked moved ([`Mortal::forward`]): one exchange of
//!    its word, from the very word copied, to the tombstone. A check that
//!    changed the word first makes the exchange fail, and the rebuild copies
//!    the newer word into the same slot and tries again; a check that comes
//!    after fails against the tombstone, and looks the client up again;
//! 4. the old slot's tag becomes `MOVED`, which hands the key and value to
//!    the new table.
//!
//! The rebuild walks the old table a group at a time: one load of the
//! group's control word, its `FULL` lanes taken from a bitmask, and one
//! store of the word once each of the group's entries has moved (or been
//! left behind), with every retag at once. Until that store a moved
//! entry's slot still reads `FULL` over a cell marked moved, which readers
//! treat as dead. The store is made on unwind too, so a panic half way
//! through a group leaves no moved entry tagged `FULL`, and the rebuild
//! that finishes the job moves none twice.
//!
//! A reader searches the old table first: a live cell there is the
//! client's; a dead one (moved, or dead and left behind) or a miss sends it
//! to the linked table. A log, a handle to state that does not move, is
//! moved bit for bit, and both copies name the same state. Dead entries are
//! left behind, and their room is given back through the caller's
//! `on_dead`. Once every entry is moved, the new table is published in the
//! shard with a `Release` store and the old one is handed to the epoch
//! collector, which frees it (with the keys and values it still owns, in
//! one pass) once no reader can hold a reference into it. The writer hands
//! it over (flushes its thread's epoch bag) as it lets the lock go, outside
//! the lock: a retired table is freed within a few more pins, not left in
//! the bag until dozens more retirements fill it (which, with the 64
//! shards growing together, kept up to a generation of old tables in
//! memory). A panic in a
//! key's `Hash` half way leaves both tables consistent; the next writer to
//! take the shard's lock finishes the rebuild.

#![allow(unsafe_code)]

mod migrate;
mod table;
#[cfg(test)]
mod tests;

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use core::mem::ManuallyDrop;
use core::ptr;
use std::sync::{MutexGuard, PoisonError, TryLockError};

use crossbeam_epoch::{self as epoch, Atomic, Guard};
use crossbeam_utils::CachePadded;

pub(crate) use self::table::SHARDS;
use self::table::{
    lowest, max_used, retagged, Counts, Table, DELETED, FULL, HIGH, LANES, SHARD_BITS,
};
use crate::cell::{Life, Mortal, Relocation};
use crate::store::Lapse;
use crate::sync::{Mutex, Ordering, PlainAtomicU64};

/// A shard's lock held, with its counts; on release the live count is
/// published for [`Map::len`], and a table retired under the lock is
/// flushed to the epoch collector (see [`Locked::drop`]).
struct Locked<'a> {
    /// Dropped (the lock released) only in [`Locked::drop`].
    counts: ManuallyDrop<MutexGuard<'a, Counts>>,
    entries: &'a PlainAtomicU64,
}

impl core::ops::Deref for Locked<'_> {
    type Target = Counts;

    fn deref(&self) -> &Counts {
        &self.counts
    }
}

impl core::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Counts {
        &mut self.counts
    }
}

impl Drop for Locked<'_> {
    /// Publishes the live count and releases the lock; then, if a rebuild
    /// retired a table under it, flushes this thread's epoch bag, so that
    /// the collector frees the table (its dead keys dropped, user code)
    /// once no reader can hold it, outside the lock, rather than after
    /// dozens more retirements have filled the bag.
    fn drop(&mut self) {
        // Relaxed: read only by `Map::len`, which promises no ordering.
        self.entries
            .store(self.counts.live as u64, Ordering::Relaxed);
        let retired = core::mem::take(&mut self.counts.retired);
        // SAFETY: dropped once, here, and not touched again.
        unsafe { ManuallyDrop::drop(&mut self.counts) };
        // Not while unwinding: a deferred drop that panicked then would
        // abort; the bag is flushed by a later retirement, or when full.
        if retired && !std::thread::panicking() {
            flush_retired();
        }
    }
}

/// Hands this thread's deferred frees (a retired table among them) to the
/// epoch collector, which frees what no reader can reach any more.
#[cold]
#[inline(never)]
fn flush_retired() {
    epoch::pin().flush();
}

struct Shard<K, V> {
    /// Writers only: inserts, removals, sweeps and rebuilds. Readers never
    /// take it.
    lock: Mutex<Counts>,
    /// The live entries, as the lock's counts last had them: published by
    /// every writer as it lets go of the lock, so that [`Map::len`] can sum
    /// the shards without taking any lock.
    entries: PlainAtomicU64,
    /// The current table; null until the shard's first insert.
    table: Atomic<Table<K, V>>,
}

/// What a lookup that missed leaves for an insert of the same key: the
/// key's hash, and the lookup's pin, held on (see [`Map::lookup`]).
pub(crate) struct Miss {
    hash: u64,
    guard: Guard,
}

/// What a sample's visitor makes of an entry (see [`Map::sample`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Visit {
    /// Leave it.
    Keep,
    /// Remove it now (the visitor has retired its cell).
    Remove,
    /// Leave it, as a candidate for the walk's pick, ranked: the lowest is
    /// picked.
    Rank(u64),
}

/// Where a walk over the map (a sweep slice) stands: a shard and a slot
/// index in its table. Any value is valid: a table rebuilt since only moves
/// the walk.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Cursor {
    shard: usize,
    slot: usize,
}

/// A concurrent map from `K` to `V`, with values that stay where a reader
/// found them until it unpins (see the module docs).
pub(crate) struct Map<K, V, S> {
    /// An array, not a slice: indexed by the hash's top bits, which are
    /// always in range, so a lookup needs no bounds check.
    shards: Box<[CachePadded<Shard<K, V>>; SHARDS]>,
    hasher: S,
}

impl<K, V, S> Map<K, V, S>
where
    K: Hash + Eq + Send + Sync,
    V: Mortal + Send + Sync,
    S: BuildHasher,
{
    pub(crate) fn with_hasher(hasher: S) -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| {
                    CachePadded::new(Shard {
                        lock: Mutex::new(Counts::default()),
                        entries: PlainAtomicU64::new(0),
                        table: Atomic::null(),
                    })
                })
                .collect::<Box<[_]>>()
                .try_into()
                .unwrap_or_else(|_| unreachable!("SHARDS shards")),
            hasher,
        }
    }

    #[inline]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard<K, V> {
        &self.shards[(hash >> (64 - SHARD_BITS)) as usize]
    }

    /// Takes a shard's lock, waiting for its holder. A panic under it (in
    /// a caller's closure, the key's `Hash`, or a rebuild's `relocate`) may
    /// have left the counts stale, or a rebuild unfinished: see
    /// [`Map::recover`].
    fn lock<'a>(&self, shard: &'a Shard<K, V>, guard: &Guard) -> Locked<'a> {
        let counts = shard
            .lock
            .lock()
            .unwrap_or_else(|poisoned| self.recover(shard, poisoned, guard));
        Locked {
            counts: ManuallyDrop::new(counts),
            entries: &shard.entries,
        }
    }

    /// Takes a shard's lock if no other thread holds it: `None` at once
    /// otherwise, never waiting. A poisoned lock is held by no one, and is
    /// recovered as [`Map::lock`] does.
    fn try_lock<'a>(&self, shard: &'a Shard<K, V>, guard: &Guard) -> Option<Locked<'a>> {
        let counts = match shard.lock.try_lock() {
            Ok(counts) => counts,
            Err(TryLockError::WouldBlock) => return None,
            Err(TryLockError::Poisoned(poisoned)) => self.recover(shard, poisoned, guard),
        };
        Some(Locked {
            counts: ManuallyDrop::new(counts),
            entries: &shard.entries,
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

    /// The live entries of every shard, as their writers last published
    /// them: exact once no writer is at work, and never locked.
    pub(crate) fn len(&self) -> u64 {
        self.shards
            .iter()
            // Relaxed: a count that publishes nothing; each shard's lock
            // orders its own writers' stores.
            .map(|shard| shard.entries.load(Ordering::Relaxed))
            .sum()
    }

    /// The shard's current table, for a writer holding its lock or a reader.
    #[inline]
    fn current<'g>(shard: &Shard<K, V>, guard: &'g Guard) -> Option<&'g Table<K, V>> {
        // Acquire: pairs with the Release store in `Map::finish` (or the
        // first table's in `Map::rebuild`) that published the table, so its
        // slots and control words are visible.
        let table = shard.table.load(Ordering::Acquire, guard);
        // SAFETY: a table is freed only through `defer_destroy` after it has
        // been replaced, so it outlives every guard pinned before that; or
        // in `Drop for Map`, which no reader can overlap.
        unsafe { table.as_ref() }
    }

    /// Runs `f` on the value for `key`. Takes no lock, writes nothing
    /// shared, and never waits for another thread, a rebuilder included.
    ///
    /// # Errors
    ///
    /// Hands `f` back, not run, if the key is absent.
    #[inline]
    pub(crate) fn get<Q, R, F>(&self, key: &Q, f: F) -> Result<R, F>
    where
        F: FnOnce(&V) -> R,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.lookup(key, f).map_err(|(f, _)| f)
    }

    /// As [`Map::get`], and a miss hands back the key's hash and the pin,
    /// for an insert of the same key to reuse.
    ///
    /// # Errors
    ///
    /// Hands `f` back, not run, and the miss, if the key is absent.
    #[inline]
    pub(crate) fn lookup<Q, R, F>(&self, key: &Q, f: F) -> Result<R, (F, Miss)>
    where
        F: FnOnce(&V) -> R,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let guard = epoch::pin();
        // The common cases, inline: a hit in the shard's table with no
        // rebuild linked, and a miss in the newest table (the first steps
        // of `locate`, with its reasons).
        let shard = self.shard(hash);
        if let Some(table) = Self::current(shard, &guard) {
            if table.next(&guard).is_none() {
                if let Some((_, (_, value))) = table.find(hash, key) {
                    return Ok(f(value));
                }
                if Self::absent(shard, table, &guard) {
                    return Err((f, Miss { hash, guard }));
                }
            }
        }
        match self.locate(hash, key, &guard) {
            Some(value) => Ok(f(value)),
            None => Err((f, Miss { hash, guard })),
        }
    }

    /// After a miss in `table`, searched with no link seen: whether the key
    /// is absent, as `locate` decides it (no link seen since, and no newer
    /// table published). Out of line, to keep the hit path short.
    #[cold]
    #[inline(never)]
    fn absent(shard: &Shard<K, V>, table: &Table<K, V>, guard: &Guard) -> bool {
        table.next(guard).is_none()
            && Self::current(shard, guard).is_some_and(|current| ptr::eq(current, table))
    }

    /// The value `key`'s client has now: the live copy if a rebuild is
    /// moving the shard's entries (see "Rebuilds" in the module docs), or
    /// a dead one no rebuild carries. `None` if the key is absent.
    #[cold]
    #[inline(never)]
    fn locate<'g, Q>(&self, hash: u64, key: &Q, guard: &'g Guard) -> Option<&'g V>
    where
        K: Borrow<Q> + 'g,
        V: 'g,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(hash);
        let mut start = Self::current(shard, guard)?;
        let mut table = start;
        loop {
            // Loaded before the search: if a rebuild has begun, the search
            // sees every entry it moves (see `Table::next`).
            let next = table.next(guard);
            match (table.find(hash, key), next) {
                (Some((_, (_, value))), None) => return Some(value),
                // Not moved yet: the old copy is the client's.
                (Some((_, (_, value))), Some(_)) if !value.is_dead() => return Some(value),
                // Moved (the old copy reads as dead once the new one stands
                // for the client), or dead and left behind, or absent here:
                // what the rebuild carried is in the next table.
                (_, Some(next)) => table = next,
                (None, None) => {
                    // A miss with no link seen. A `MOVED` tag the search
                    // read (Acquire) was stored after the link, which is
                    // visible now: search this table again, the link loaded
                    // first (a search before it may have missed an entry
                    // the move has copied but not yet forwarded).
                    if table.next(guard).is_some() {
                        continue;
                    }
                    // A miss in the newest table linked: a rebuild finished
                    // since the search began may have published one with
                    // entries inserted since.
                    match Self::current(shard, guard) {
                        Some(current) if !ptr::eq(current, start) => {
                            start = current;
                            table = current;
                        }
                        _ => return None,
                    }
                }
            }
        }
    }

    /// Inserts `value` for `key` if the key is absent, then runs `f` on the
    /// inserted value (after releasing the shard's lock, still protected).
    /// `miss`, a lookup's of this very key, spares hashing and pinning
    /// again.
    /// A rebuild on the way runs `lapsed` (if any) on every live value of
    /// the shard (see [`Map::rebuild_lapsing`]), and leaves dead entries
    /// behind, calling `on_dead` on each.
    ///
    /// # Errors
    ///
    /// Hands `value` back if the key was present.
    pub(crate) fn insert<R>(
        &self,
        miss: Option<&Miss>,
        key: K,
        value: V,
        lapsed: Option<impl Lapse<V>>,
        on_dead: impl FnMut(&V),
        f: impl FnOnce(&V) -> R,
    ) -> Result<R, V> {
        let pinned;
        let (hash, guard) = match miss {
            Some(miss) => (miss.hash, &miss.guard),
            None => {
                pinned = epoch::pin();
                (self.hash(&key), &pinned)
            }
        };
        let shard = self.shard(hash);
        let mut counts = self.lock(shard, guard);
        let mut table = Self::current(shard, guard);
        let mut vacancy = None;
        if let Some(current) = table {
            match current.search(hash, &key) {
                Ok(_) => return Err(value),
                Err(found) => vacancy = found,
            }
        }
        if table.is_none_or(|table| counts.used >= max_used(table.capacity())) {
            // The vacancy found is in the table being replaced.
            vacancy = None;
            let room_for = counts.live + 1;
            table = Some(match lapsed {
                None => self.rebuild(shard, &mut counts, room_for, on_dead, V::relocate, guard),
                Some(lapsed) => {
                    self.rebuild_lapsing(shard, &mut counts, room_for, lapsed, on_dead, guard)
                }
            });
        }
        let table = table.expect("a shard has a table after a rebuild");
        let index = match vacancy {
            Some(vacancy) => table.put_at(vacancy, hash, (key, value)),
            None => table.put(hash, (key, value)),
        };
        counts.used += 1;
        counts.live += 1;
        drop(counts);
        // SAFETY: `put` just filled and published this slot; `guard` keeps
        // the table alive however soon it is rebuilt.
        let (_, value) = unsafe { table.entry(index) };
        Ok(f(value))
    }

    /// A rebuild for `room_for` live entries that leaves behind the clients
    /// `lapsed` judges lapsed; if so many were left that the new table is
    /// under three quarters of the load it was sized for, it is rebuilt
    /// once more, for the entries it holds. So the table a flood of
    /// short-lived clients leaves is sized for the clients still active,
    /// and a rebuild that forgets no one costs one pass. Holding the
    /// shard's lock.
    ///
    /// A word cell is judged on the state the move reads anyway (the copy):
    /// if it has lapsed, the move marks the cell moved from that state
    /// without placing the copy, and the tombstone it leaves is the one a
    /// sweep's retirement leaves, so the client is forgotten by the very
    /// exchange that would have moved it. A handle is retired by `lapsed`
    /// itself.
    #[cold]
    #[inline(never)]
    fn rebuild_lapsing<'g>(
        &self,
        shard: &Shard<K, V>,
        counts: &mut Counts,
        room_for: usize,
        mut lapsed: impl Lapse<V>,
        mut on_dead: impl FnMut(&V),
        guard: &'g Guard,
    ) -> &'g Table<K, V> {
        let relocate = |value: &V| {
            let relocation = value.relocate();
            match &relocation {
                // Only a live state lapses: an unborn cell (a new client on
                // its way in, holding no room yet) is moved as it is. A
                // check that changed the state first makes the exchange
                // fail: not lapsed after all, and the move's own exchange
                // fails the same way and reads the cell again.
                Relocation::Moved(copy, seal)
                    if copy.life() == Life::Live
                        && lapsed.has_lapsed(copy)
                        && value.forward(*seal) =>
                {
                    // Retired from the lapsed state: left behind, as dead.
                    lapsed.retired();
                    Relocation::Dead
                }
                Relocation::Same if lapsed.retire_if_lapsed(value) => Relocation::Dead,
                _ => relocation,
            }
        };
        let table = self.rebuild(shard, counts, room_for, &mut on_dead, relocate, guard);
        if counts.live * 4 >= room_for * 3 {
            return table;
        }
        let room_for = counts.live + 1;
        self.rebuild(shard, counts, room_for, on_dead, V::relocate, guard)
    }

    /// Removes `key`'s entry if `condition` (run under the shard's lock)
    /// holds for its value; true iff this call removed it. `condition` must
    /// hold only of dead cells ([`Mortal::is_dead`]): a key absent, or whose
    /// client's cell is alive, is answered without the lock, so a thread
    /// that met a copy a rebuild has just moved never waits for the
    /// rebuilder. A dead entry's removal waits for the shard's lock, which
    /// an insert, a sweep or a rebuild may hold: for the insert path, where
    /// waiting is allowed (see [`Map::try_remove_if`] for a removal that
    /// never waits).
    pub(crate) fn remove_if<Q>(&self, key: &Q, condition: impl FnOnce(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // Never `None`: a removal that may wait always gets the lock.
        self.remove_dead(key, condition, true).unwrap_or(false)
    }

    /// As [`Map::remove_if`], but never waits for another thread: if the
    /// entry is dead and another thread holds the shard's lock, answers
    /// `None` at once and leaves the entry in the table. A dead entry left
    /// there reads as dead to every reader (a lookup returns it only when
    /// no live copy exists) and is removed by whoever next meets it holding
    /// the lock: a rebuild leaves it behind (`on_dead`), a sweep removes
    /// it, an insert of its key removes it first. `Some(removed)` otherwise,
    /// as [`Map::remove_if`] answers.
    pub(crate) fn try_remove_if<Q>(
        &self,
        key: &Q,
        condition: impl FnOnce(&V) -> bool,
    ) -> Option<bool>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_dead(key, condition, false)
    }

    /// The removal of [`Map::remove_if`] (`wait`) and
    /// [`Map::try_remove_if`]: `None` iff the entry is dead, `wait` is
    /// false, and another thread holds the shard's lock.
    fn remove_dead<Q>(
        &self,
        key: &Q,
        condition: impl FnOnce(&V) -> bool,
        wait: bool,
    ) -> Option<bool>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        let guard = epoch::pin();
        // A cell forwarded after its table's link was loaded reads as dead
        // here; its forward (seen by this Acquire load of the word) came
        // after the link, so a second lookup follows the link to the copy.
        let dead = || self.locate(hash, key, &guard).is_some_and(Mortal::is_dead);
        if !(dead() && dead()) {
            return Some(false);
        }
        // Dead: a cell stays dead, so the entry is still dead, or gone, when
        // the lock is ours.
        let mut counts = if wait {
            self.lock(shard, &guard)
        } else {
            self.try_lock(shard, &guard)?
        };
        let Some(table) = Self::current(shard, &guard) else {
            return Some(false);
        };
        let Some((index, (_, value))) = table.find(hash, key) else {
            return Some(false);
        };
        if !condition(value) {
            return Some(false);
        }
        debug_assert!(value.is_dead(), "only dead entries are removed");
        table.mark(index, DELETED);
        counts.live -= 1;
        Some(true)
    }

    /// Visits every live entry, removing those for which `remove` (run
    /// under the shard's lock) is true, then rebuilds each shard left less
    /// than a quarter full, unless its table has at most `small` slots
    /// (the pass a new client makes every horizon,
    /// `Limiter::sweep_for_newcomer`, would otherwise rebuild the small
    /// tables of a map of short-lived clients on every pass, only for new
    /// clients to grow them again). `on_dead` is as in [`Map::insert`].
    /// The removals are made a group of slots at a time: `removing` runs
    /// once a group's are decided, before they are made (one store of the
    /// group's control word), still under the lock, so a caller can settle
    /// there, in one step, what it counted for them before any reader can
    /// find those entries gone. Returns how many entries `remove` removed.
    pub(crate) fn retain(
        &self,
        small: usize,
        mut remove: impl FnMut(&K, &V) -> bool,
        mut on_dead: impl FnMut(&V),
        mut removing: impl FnMut(),
    ) -> u64 {
        let guard = epoch::pin();
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut counts = self.lock(shard, &guard);
            let Some(table) = Self::current(shard, &guard) else {
                continue;
            };
            for (group, ctrl) in table.ctrl.iter().enumerate() {
                // Relaxed: as in `Table::put`.
                let word = ctrl.load(Ordering::Relaxed);
                let mut live = word & HIGH;
                let mut left = word;
                while live != 0 {
                    let lane = lowest(live);
                    live &= live - 1;
                    // SAFETY: the slot is FULL.
                    let (key, value) = unsafe { table.entry(group * LANES + lane) };
                    if remove(key, value) {
                        left = retagged(left, lane, DELETED);
                        counts.live -= 1;
                        removed += 1;
                    }
                }
                if left != word {
                    removing();
                    // Release: as in `Table::mark`.
                    ctrl.store(left, Ordering::Release);
                }
            }
            if counts.live * 4 < table.capacity()
                && counts.used > counts.live
                && table.capacity() > small
            {
                let room_for = counts.live;
                self.rebuild(
                    shard,
                    &mut counts,
                    room_for,
                    &mut on_dead,
                    V::relocate,
                    &guard,
                );
            }
        }
        removed
    }

    /// Rebuilds every shard's table, one shard at a time under its lock,
    /// putting `relocate`'s answer in each entry's place: how a change of
    /// quota carries every client's state over (see `cell::tier`). `on_dead`
    /// is as in [`Map::insert`].
    pub(crate) fn rebuild_all(
        &self,
        mut relocate: impl FnMut(&V) -> Relocation<V>,
        mut on_dead: impl FnMut(&V),
    ) {
        let guard = epoch::pin();
        for shard in self.shards.iter() {
            let mut counts = self.lock(shard, &guard);
            if Self::current(shard, &guard).is_none() {
                continue;
            }
            let room_for = counts.live;
            self.rebuild(
                shard,
                &mut counts,
                room_for,
                &mut on_dead,
                &mut relocate,
                &guard,
            );
        }
    }

    /// Visits live entries from `cursor`, shard by shard, until `visit`
    /// has seen `budget` of them or the walk reaches the end of the map
    /// (the cursor then goes back to the start), removing those for which
    /// `visit` (run under the shard's lock) is true. Returns how many it
    /// removed.
    ///
    /// It reads at most `budget` + [`SHARDS`] control words, skipping a
    /// group with no live slot in one step and a shard with no table
    /// without its lock, so a slice over a sparse map costs little more
    /// than one over a dense one and still reaches its entries.
    pub(crate) fn sweep_slice(
        &self,
        cursor: &mut Cursor,
        budget: u64,
        mut visit: impl FnMut(&K, &V) -> bool,
    ) -> u64 {
        let visit = |key: &K, value: &V| {
            if visit(key, value) {
                Visit::Remove
            } else {
                Visit::Keep
            }
        };
        self.walk(cursor, budget, false, visit, |_, _| false).0
    }

    /// A position drawn from `draw` (uniform bits): the shard its top bits
    /// pick, and the slot its low 32 bits place in proportion to that
    /// shard's table.
    pub(crate) fn cursor_at(&self, draw: u64) -> Cursor {
        let shard = (draw >> (64 - SHARD_BITS)) as usize;
        let guard = epoch::pin();
        let capacity = Self::current(&self.shards[shard], &guard).map_or(0, Table::capacity);
        Cursor {
            shard,
            slot: ((u64::from(draw as u32) * capacity as u64) >> 32) as usize,
        }
    }

    /// Visits up to `budget` live entries from `cursor` (which it then
    /// leaves past the last entry visited), going round the map at most
    /// once, removing those for which `visit` (run under the shard's lock)
    /// answers [`Visit::Remove`]. Of those it ranks ([`Visit::Rank`]),
    /// `pick` then runs on the one ranked lowest, under its shard's lock,
    /// and the entry is removed if `pick` is true (it must retire the cell
    /// first). Returns how many entries `visit` removed, and whether `pick`
    /// removed one.
    ///
    /// The walk usually ends in the shard of the entry picked, under the
    /// lock it found the entry under: the entry is then picked through the
    /// reference the walk holds, with no second lookup. Otherwise (the
    /// entry is in a shard the walk has left, or in the first shard of a
    /// walk round the map, which it locks afresh at the end) the entry is
    /// offered to `pick` only if its slot still holds it: its table is
    /// still the shard's and its tag still `FULL` (a slot is never
    /// refilled, and the guard, pinned for the whole walk, keeps the
    /// table's address from being reused).
    pub(crate) fn sample(
        &self,
        cursor: &mut Cursor,
        budget: u64,
        visit: impl FnMut(&K, &V) -> Visit,
        pick: impl FnOnce(&K, &V) -> bool,
    ) -> (u64, bool) {
        self.walk(cursor, budget, true, visit, pick)
    }

    /// The walk of [`Map::sweep_slice`] and [`Map::sample`]: with `round`,
    /// at the end of the map it goes on from the start, up to where it
    /// began.
    fn walk(
        &self,
        cursor: &mut Cursor,
        budget: u64,
        round: bool,
        mut visit: impl FnMut(&K, &V) -> Visit,
        pick: impl FnOnce(&K, &V) -> bool,
    ) -> (u64, bool) {
        let guard = epoch::pin();
        let start = *cursor;
        let mut wrapped = false;
        let mut seen = 0;
        let mut removed = 0;
        // One more word than shards: a walk round the map reads its first
        // shard's table twice.
        let mut words = budget.saturating_add(SHARDS as u64 + 1);
        // The entry ranked lowest so far: its rank, shard, table and slot.
        let mut best: Option<(u64, usize, *const Table<K, V>, usize)> = None;
        'walk: while seen < budget {
            let Some(shard) = self.shards.get(cursor.shard) else {
                *cursor = Cursor::default();
                break;
            };
            // Back where a walk round the map began: up to its first slot.
            let last = wrapped && cursor.shard == start.shard;
            if Self::current(shard, &guard).is_some() {
                let mut counts = self.lock(shard, &guard);
                let table = Self::current(shard, &guard).expect("tables are never unpublished");
                let end = if last {
                    start.slot.min(table.capacity())
                } else {
                    table.capacity()
                };
                let mut ended = false;
                'shard: while cursor.slot < end {
                    if seen == budget || words == 0 {
                        ended = true;
                        break;
                    }
                    let group = cursor.slot / LANES;
                    // Relaxed: as in `put`.
                    let word = table.ctrl[group].load(Ordering::Relaxed);
                    words -= 1;
                    let mut live = word & HIGH & (u64::MAX << (cursor.slot % LANES * 8));
                    if (group + 1) * LANES > end {
                        // Only the lanes below `end`.
                        live &= !(u64::MAX << (end % LANES * 8));
                    }
                    cursor.slot = (group + 1) * LANES;
                    while live != 0 {
                        let index = group * LANES + lowest(live);
                        live &= live - 1;
                        seen += 1;
                        // SAFETY: the slot is FULL.
                        let (key, value) = unsafe { table.entry(index) };
                        match visit(key, value) {
                            Visit::Keep => {}
                            Visit::Remove => {
                                table.mark(index, DELETED);
                                counts.live -= 1;
                                removed += 1;
                            }
                            Visit::Rank(rank) => {
                                if best.is_none_or(|(lowest, ..)| rank < lowest) {
                                    best = Some((rank, cursor.shard, ptr::from_ref(table), index));
                                }
                            }
                        }
                        if seen == budget {
                            cursor.slot = index + 1;
                            ended = true;
                            break 'shard;
                        }
                    }
                }
                if ended || last {
                    // The walk ends in this shard: if the entry ranked
                    // lowest is here, pick it before letting the lock go.
                    // Unless found under this very lock (a walk round the
                    // map comes back to its first shard under a lock taken
                    // afresh), the slot must still hold it, as below.
                    if let Some((_, _, was, index)) = best.filter(|&(_, at, ..)| at == cursor.shard)
                    {
                        let held = ptr::eq(table, was) && table.tag(index) & FULL != 0;
                        let picked = held && Self::pick(table, index, &mut counts, pick);
                        return (removed, picked);
                    }
                    break 'walk;
                }
            } else if last {
                break;
            }
            cursor.shard += 1;
            cursor.slot = 0;
            if cursor.shard == self.shards.len() {
                // The end of the map: the next slice starts over, and a walk
                // round the map goes on from there.
                *cursor = Cursor::default();
                if !round || wrapped {
                    break;
                }
                wrapped = true;
            }
        }
        let Some((_, at, was, index)) = best else {
            return (removed, false);
        };
        // A shard the walk has left: lock it again.
        let shard = &self.shards[at];
        let mut counts = self.lock(shard, &guard);
        let picked = Self::current(shard, &guard).is_some_and(|table| {
            ptr::eq(table, was)
                && table.tag(index) & FULL != 0
                && Self::pick(table, index, &mut counts, pick)
        });
        (removed, picked)
    }

    /// Removes the entry in slot `index` of `table` if `pick` is true of
    /// it. The caller holds the shard's lock, `table` is its current table,
    /// and the slot is `FULL`.
    fn pick(
        table: &Table<K, V>,
        index: usize,
        counts: &mut Locked<'_>,
        pick: impl FnOnce(&K, &V) -> bool,
    ) -> bool {
        // SAFETY: the slot is FULL (the caller's promise), and stays so
        // while the caller holds the shard's lock.
        let (key, value) = unsafe { table.entry(index) };
        let gone = pick(key, value);
        if gone {
            table.mark(index, DELETED);
            counts.live -= 1;
        }
        gone
    }
}

impl<K, V, S> Drop for Map<K, V, S> {
    fn drop(&mut self) {
        for shard in self.shards.iter_mut() {
            // SAFETY: `&mut self`: no reader or writer can reach the map, so
            // the current tables can be freed now (retired ones are the
            // collector's), with any a rebuild left unfinished linked.
            let mut table = unsafe {
                let table = shard.table.load(Ordering::Relaxed, epoch::unprotected());
                (!table.is_null()).then(|| table.into_owned().into_box())
            };
            while let Some(mut current) = table {
                table = current.take_next();
                drop(current);
            }
        }
    }
}

impl<K, V, S> fmt::Debug for Map<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Reading a concurrent map's contents in Debug would race with
        // checks; print the shape only.
        f.debug_struct("Map")
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}
