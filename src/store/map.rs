//! The store's own hash table: each client's key and state cell inline in
//! one slot, lock-free lookups, and entries that never move while a reader
//! can see them.
//!
//! # Shape
//!
//! The map is [`SHARDS`] shards, picked by the hash's top bits. A shard is a
//! writers' lock and a pointer to its current [`Table`]: an array of
//! control bytes, one per slot, read eight at a time as a word, and an
//! array of slots, each holding a key and its value side by side. A
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
//! takes no lock and writes nothing shared. The value it finds stays valid
//! until it unpins, whatever writers do meanwhile.
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
//! shard is *rebuilt* into a new table.
//!
//! # Rebuilds
//!
//! When an insert would take the table past 7/8 full (deleted slots
//! included), the shard is rebuilt into a new table sized for its live
//! entries at a load of 3/5, so it grows by about 1.46× while only
//! inserting, and shrinks when many entries were removed. Each live entry
//! is *relocated* ([`Mortal::relocate`]): a word cell is frozen (its word
//! exchanged for the tombstone, so any compare-and-swap through the old copy
//! fails and its thread looks the client up again) and its word carried to
//! the new slot; a log, a handle to state that does not move, is copied bit
//! for bit. Dead entries are left behind, and their room is given back
//! through the caller's `on_dead`. The old slots are marked `MOVED`, the new
//! table is published with a `Release` store, and the old one is handed to
//! the epoch collector, which frees it (with the keys and values it still
//! owns, in one pass) once no reader can hold a reference into it.

#![allow(unsafe_code)]

use core::borrow::Borrow;
use core::cell::UnsafeCell;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use core::mem::{self, MaybeUninit};
use core::ptr;
use std::sync::{MutexGuard, PoisonError};

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};
use crossbeam_utils::CachePadded;

use crate::cell::{Mortal, Relocation};
// PlainAtomicU64: the control words are std's atomics even in loom builds;
// the loom models run the store's protocol over a loom-aware stand-in for
// this table (see `loom-tests/stand_in.rs`).
use crate::sync::{Mutex, Ordering, PlainAtomicU64};

/// How many shards a map has: a power of two, picked by the hash's top
/// bits.
pub(crate) const SHARDS: usize = 64;
const SHARD_BITS: u32 = SHARDS.trailing_zeros();

/// Slots per group: one control word's bytes.
const LANES: usize = 8;

const EMPTY: u8 = 0x00;
const DELETED: u8 = 0x01;
const MOVED: u8 = 0x02;
/// The high bit of a `FULL` tag; its other seven bits are from the hash.
const FULL: u8 = 0x80;

const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
const HIGH: u64 = 0x8080_8080_8080_8080;
const ONES: u64 = 0x0101_0101_0101_0101;

/// The high bit of every byte of `x` that is zero, and no other bit: exact,
/// since no carry crosses a byte (`(b & 0x7F) + 0x7F ≤ 0xFE`).
#[inline]
fn zero_bytes(x: u64) -> u64 {
    !(((x & LOW7) + LOW7) | x) & HIGH
}

/// The lanes of `group` whose tag is `tag`, as high bits.
#[inline]
fn lanes_tagged(group: u64, tag: u8) -> u64 {
    zero_bytes(group ^ ONES.wrapping_mul(u64::from(tag)))
}

/// The lowest lane marked in `bits`.
#[inline]
fn lowest(bits: u64) -> usize {
    (bits.trailing_zeros() / 8) as usize
}

/// `group` with lane `lane` tagged `tag`.
#[inline]
fn retag(group: u64, lane: usize, tag: u8) -> u64 {
    let shift = lane * 8;
    (group & !(0xFF << shift)) | (u64::from(tag) << shift)
}

/// The `FULL` tag for `hash`: seven bits the shard choice did not use.
#[inline]
fn tag_of(hash: u64) -> u8 {
    FULL | ((hash >> (64 - SHARD_BITS - 7)) as u8 & 0x7F)
}

/// Groups for `live` entries at a load of about 3/5 (at least one).
fn groups_for(live: usize) -> usize {
    (live.saturating_mul(5).div_ceil(3)).div_ceil(LANES).max(1)
}

/// The slots a table of `capacity` may use (live or deleted) before it is
/// rebuilt: 7/8 of them, so a probe always meets an `EMPTY` byte.
fn max_used(capacity: usize) -> usize {
    capacity - capacity / 8
}

/// One slot: a key and its value, written once (while its tag is `EMPTY`,
/// under the shard's lock) and dropped only with its table.
struct Slot<K, V>(UnsafeCell<MaybeUninit<(K, V)>>);

/// One shard's table: control words, and slots, `LANES` per word.
struct Table<K, V> {
    ctrl: Box<[PlainAtomicU64]>,
    slots: Box<[Slot<K, V>]>,
}

// SAFETY: a table owns its keys and values (sending it sends them, and it
// may be dropped on the epoch collector's thread), and shares them only as
// `&(K, V)`, so it is `Send` and `Sync` when they both are. The slots'
// `UnsafeCell` is written only under the shard's lock, before the slot's
// tag is published (see `Table::put`).
unsafe impl<K: Send + Sync, V: Send + Sync> Send for Table<K, V> {}
// SAFETY: as for `Send` above.
unsafe impl<K: Send + Sync, V: Send + Sync> Sync for Table<K, V> {}

impl<K, V> Table<K, V> {
    fn new(groups: usize) -> Self {
        // Multiply-shift indexing takes the group count in 32 bits.
        let groups = groups.min(u32::MAX as usize);
        Self {
            ctrl: (0..groups).map(|_| PlainAtomicU64::new(0)).collect(),
            slots: (0..groups * LANES)
                .map(|_| Slot(UnsafeCell::new(MaybeUninit::uninit())))
                .collect(),
        }
    }

    fn groups(&self) -> usize {
        self.ctrl.len()
    }

    fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The group a probe for `hash` starts at.
    #[inline]
    fn home(&self, hash: u64) -> usize {
        // Multiply-shift of the hash's low 32 bits onto [0, groups).
        (((hash & 0xFFFF_FFFF) * self.groups() as u64) >> 32) as usize
    }

    /// The entry in slot `index`.
    ///
    /// # Safety
    ///
    /// The slot's tag must have been seen `FULL` (by a load that reads from
    /// or after the `Release` store that published it), or be `DELETED` or
    /// `MOVED` now: a slot is filled before its tag leaves `EMPTY`, and its
    /// contents live until the table is dropped.
    #[inline]
    unsafe fn entry(&self, index: usize) -> &(K, V) {
        // SAFETY: by the caller's contract the slot is initialised, and no
        // one writes it again while the table lives.
        unsafe { (*self.slots[index].0.get()).assume_init_ref() }
    }

    /// The slot index and entry for `key`, if the table holds it live.
    #[inline]
    fn find<Q>(&self, hash: u64, key: &Q) -> Option<(usize, &(K, V))>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let tag = tag_of(hash);
        let mut group = self.home(hash);
        for _ in 0..self.groups() {
            // Acquire: pairs with the Release store in `put` that published
            // a slot's tag, so the key and value written before it are
            // visible here.
            let word = self.ctrl[group].load(Ordering::Acquire);
            let mut hits = lanes_tagged(word, tag);
            while hits != 0 {
                let index = group * LANES + lowest(hits);
                // SAFETY: this slot's tag was just read FULL.
                let entry = unsafe { self.entry(index) };
                if entry.0.borrow() == key {
                    return Some((index, entry));
                }
                hits &= hits - 1;
            }
            // An entry is always placed before the first group that had an
            // empty slot, and a slot never becomes empty again.
            if zero_bytes(word) != 0 {
                return None;
            }
            group = if group + 1 == self.groups() {
                0
            } else {
                group + 1
            };
        }
        None
    }

    /// Places `entry` in the first empty slot of its probe sequence and
    /// returns the slot's index. Holding the shard's lock, the table being
    /// below `max_used`.
    fn put(&self, hash: u64, entry: (K, V)) -> usize {
        let mut group = self.home(hash);
        loop {
            // Relaxed: only writers change control words, and they hold the
            // shard's lock.
            let word = self.ctrl[group].load(Ordering::Relaxed);
            let empty = zero_bytes(word);
            if empty != 0 {
                let lane = lowest(empty);
                let index = group * LANES + lane;
                // SAFETY: the slot's tag is EMPTY, so no reader dereferences
                // it, and the shard's lock makes this thread its only
                // writer.
                unsafe { (*self.slots[index].0.get()).write(entry) };
                // Release: publishes the slot's contents to every reader
                // whose Acquire load (`find`) sees this tag.
                self.ctrl[group].store(retag(word, lane, tag_of(hash)), Ordering::Release);
                return index;
            }
            group = if group + 1 == self.groups() {
                0
            } else {
                group + 1
            };
        }
    }

    /// Changes the tag of slot `index`. Holding the shard's lock.
    fn mark(&self, index: usize, tag: u8) {
        let group = &self.ctrl[index / LANES];
        // Relaxed load: as in `put`. Release store: a reader that sees the
        // new tag sees what this writer did before (a retired cell's
        // tombstone, for instance), though none depends on it.
        let word = group.load(Ordering::Relaxed);
        group.store(retag(word, index % LANES, tag), Ordering::Release);
    }

    /// The tag of slot `index`. Holding the shard's lock.
    fn tag(&self, index: usize) -> u8 {
        // Relaxed: as in `put`.
        let word = self.ctrl[index / LANES].load(Ordering::Relaxed);
        (word >> (index % LANES * 8)) as u8
    }

    /// Live and used slots, counted.
    fn count(&self) -> Counts {
        let mut counts = Counts::default();
        for word in &*self.ctrl {
            // Relaxed: as in `put`.
            let word = word.load(Ordering::Relaxed);
            counts.used += LANES - zero_bytes(word).count_ones() as usize;
            counts.live += (word & HIGH).count_ones() as usize;
        }
        counts
    }
}

impl<K, V> Drop for Table<K, V> {
    fn drop(&mut self) {
        if !mem::needs_drop::<(K, V)>() {
            return;
        }
        for index in 0..self.capacity() {
            // A moved slot's key and value belong to the table they moved
            // to; an empty one holds none.
            let tag = self.tag(index);
            if tag == EMPTY || tag == MOVED {
                continue;
            }
            // SAFETY: the slot is initialised (FULL or DELETED), this table
            // still owns it, and `&mut self` means no one else can reach
            // it.
            unsafe { self.slots[index].0.get_mut().assume_init_drop() };
        }
    }
}

/// A shard's counts of slots: live (`FULL`) and used (not `EMPTY`).
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    live: usize,
    used: usize,
}

/// A shard's lock held, with its counts; on release the live count is
/// published for [`Map::len`].
struct Locked<'a> {
    counts: MutexGuard<'a, Counts>,
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
    fn drop(&mut self) {
        // Relaxed: read only by `Map::len`, which promises no ordering.
        self.entries
            .store(self.counts.live as u64, Ordering::Relaxed);
    }
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
    shards: Box<[CachePadded<Shard<K, V>>]>,
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
                .collect(),
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

    /// Takes a shard's lock. A panic under it (in a caller's closure, or
    /// the key's `Hash`) may have left the counts stale: they are counted
    /// again from the table.
    fn lock<'a>(shard: &'a Shard<K, V>, guard: &Guard) -> Locked<'a> {
        let counts = shard
            .lock
            .lock()
            .unwrap_or_else(|poisoned: PoisonError<_>| {
                let mut counts = poisoned.into_inner();
                // Relaxed: the lock orders this after every writer's stores.
                let table = shard.table.load(Ordering::Relaxed, guard);
                // SAFETY: a table published in a shard is freed only after it is
                // replaced and `guard` (pinned before this load) is dropped.
                *counts = unsafe { table.as_ref() }.map_or_else(Counts::default, Table::count);
                shard.lock.clear_poison();
                counts
            });
        Locked {
            counts,
            entries: &shard.entries,
        }
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
        // Acquire: pairs with the Release store in `rebuild` that published
        // the table, so its slots and control words are visible.
        let table = shard.table.load(Ordering::Acquire, guard);
        // SAFETY: a table is freed only through `defer_destroy` after it has
        // been replaced, so it outlives every guard pinned before that; or
        // in `Drop for Map`, which no reader can overlap.
        unsafe { table.as_ref() }
    }

    /// Runs `f` on the value for `key`. Takes no lock and writes nothing
    /// shared.
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
        let hash = self.hash(key);
        let shard = self.shard(hash);
        let guard = epoch::pin();
        let mut table = Self::current(shard, &guard);
        loop {
            let Some(searched) = table else {
                return Err(f);
            };
            if let Some((_, (_, value))) = searched.find(hash, key) {
                return Ok(f(value));
            }
            // A miss in a table that has since been replaced may have
            // skipped entries moved out of it (a rebuild publishes the new
            // table before it marks the old slots moved): search the new
            // one.
            table = Self::current(shard, &guard);
            if table.is_some_and(|table| ptr::eq(table, searched)) {
                return Err(f);
            }
        }
    }

    /// Inserts `value` for `key` if the key is absent, then runs `f` on the
    /// inserted value (after releasing the shard's lock, still protected).
    /// A rebuild on the way leaves dead entries behind, calling `on_dead`
    /// on each.
    ///
    /// # Errors
    ///
    /// Hands `value` back if the key was present.
    pub(crate) fn insert<R>(
        &self,
        key: K,
        value: V,
        on_dead: impl FnMut(&V),
        f: impl FnOnce(&V) -> R,
    ) -> Result<R, V> {
        let hash = self.hash(&key);
        let shard = self.shard(hash);
        let guard = epoch::pin();
        let mut counts = Self::lock(shard, &guard);
        let mut table = Self::current(shard, &guard);
        if table.and_then(|table| table.find(hash, &key)).is_some() {
            return Err(value);
        }
        if table.is_none_or(|table| counts.used >= max_used(table.capacity())) {
            let room_for = counts.live + 1;
            table = Some(self.rebuild(shard, &mut counts, room_for, on_dead, V::relocate, &guard));
        }
        let table = table.expect("a shard has a table after a rebuild");
        let index = table.put(hash, (key, value));
        counts.used += 1;
        counts.live += 1;
        drop(counts);
        // SAFETY: `put` just filled and published this slot; `guard` keeps
        // the table alive however soon it is rebuilt.
        let (_, value) = unsafe { table.entry(index) };
        Ok(f(value))
    }

    /// Replaces the shard's table with one sized for `room_for` live
    /// entries, relocating its live entries and leaving dead ones behind
    /// (calling `on_dead` on each). Holding the shard's lock.
    ///
    /// The new table is published before the old slots are marked moved,
    /// so a reader that meets a moved slot finds the new table by loading
    /// the shard's pointer again (see [`Map::get`]).
    fn rebuild<'g>(
        &self,
        shard: &Shard<K, V>,
        counts: &mut Counts,
        room_for: usize,
        mut on_dead: impl FnMut(&V),
        mut relocate: impl FnMut(&V) -> Relocation<V>,
        guard: &'g Guard,
    ) -> &'g Table<K, V> {
        // Until it is published, the new table shares the moved entries
        // with the old one, which still marks them FULL: if a key's `Hash`
        // panicked on the way, dropping both would drop them twice, so the
        // new table is leaked instead.
        let new = mem::ManuallyDrop::new(Table::new(groups_for(room_for)));
        // Relaxed: the lock orders this after the last writer's store.
        let old = shard.table.load(Ordering::Relaxed, guard);
        // SAFETY: as in `current`.
        let old_table = unsafe { old.as_ref() };
        let mut live = 0;
        if let Some(old) = old_table {
            for index in 0..old.capacity() {
                if old.tag(index) & FULL == 0 {
                    continue;
                }
                // SAFETY: the slot is FULL, and this thread, holding the
                // lock, is its only writer.
                let entry = unsafe { old.entry(index) };
                match relocate(&entry.1) {
                    Relocation::Dead => {
                        on_dead(&entry.1);
                        old.mark(index, DELETED);
                    }
                    Relocation::Same => {
                        let hash = self.hash(&entry.0);
                        // SAFETY: the entry is FULL; once the new table is
                        // published, every FULL slot of the old one is
                        // marked MOVED, which hands its ownership to the new
                        // table (the old one drops no MOVED slot), so it is
                        // owned once. Readers of the old table only ever
                        // borrow it, and the new table outlives them (it is
                        // retired, if ever, after the old one).
                        new.put(hash, unsafe { ptr::read(entry) });
                        live += 1;
                    }
                    Relocation::Moved(value) => {
                        let hash = self.hash(&entry.0);
                        // SAFETY: as for `Same`, for the key; the old value,
                        // frozen, is left in place and never dropped, which
                        // `Relocation::Moved` allows.
                        new.put(hash, (unsafe { ptr::read(&entry.0) }, value));
                        live += 1;
                    }
                }
            }
        }
        *counts = Counts { live, used: live };
        // Release: pairs with the Acquire load in `current`, publishing the
        // new table's slots and control words to readers.
        let new = Owned::new(mem::ManuallyDrop::into_inner(new));
        shard.table.store(new, Ordering::Release);
        if let Some(old_table) = old_table {
            for group in &*old_table.ctrl {
                // Relaxed load: as in `put`. Release store: a reader that
                // sees a MOVED tag then sees the new table in the shard.
                let word = group.load(Ordering::Relaxed);
                let full = word & HIGH;
                if full != 0 {
                    // Every FULL byte (high bit set) becomes MOVED: `full
                    // >> 7` has 0x01 in those bytes, and no product below
                    // carries out of its byte.
                    let lanes = full >> 7;
                    let moved = (word & !(lanes * 0xFF)) | (lanes * u64::from(MOVED));
                    group.store(moved, Ordering::Release);
                }
            }
            // SAFETY: the old table is unreachable from the shard now; the
            // collector frees it once every guard pinned before this point
            // is dropped, and no reader pinned later can reach it.
            unsafe { guard.defer_destroy(old) };
        }
        Self::current(shard, guard).expect("just published")
    }

    /// Removes `key`'s entry if `condition` (run under the shard's lock)
    /// holds for its value; true iff this call removed it.
    pub(crate) fn remove_if<Q>(&self, key: &Q, condition: impl FnOnce(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        let guard = epoch::pin();
        let mut counts = Self::lock(shard, &guard);
        let Some(table) = Self::current(shard, &guard) else {
            return false;
        };
        let Some((index, (_, value))) = table.find(hash, key) else {
            return false;
        };
        if !condition(value) {
            return false;
        }
        table.mark(index, DELETED);
        counts.live -= 1;
        true
    }

    /// Visits every live entry, removing those for which `remove` (run
    /// under the shard's lock) is true, then rebuilds each shard left less
    /// than a quarter full, or frees its table if it is empty. `on_dead` is
    /// as in [`Map::insert`]. `shard_done` runs after each shard, still
    /// under its lock (a caller can settle there, in one step, what it
    /// counted for the shard's removals). Returns how many entries `remove`
    /// removed.
    pub(crate) fn retain(
        &self,
        mut remove: impl FnMut(&K, &V) -> bool,
        mut on_dead: impl FnMut(&V),
        mut shard_done: impl FnMut(),
    ) -> u64 {
        let guard = epoch::pin();
        let mut removed = 0;
        for shard in &*self.shards {
            let mut counts = Self::lock(shard, &guard);
            let Some(table) = Self::current(shard, &guard) else {
                continue;
            };
            for index in 0..table.capacity() {
                if table.tag(index) & FULL == 0 {
                    continue;
                }
                // SAFETY: the slot is FULL.
                let (key, value) = unsafe { table.entry(index) };
                if remove(key, value) {
                    table.mark(index, DELETED);
                    counts.live -= 1;
                    removed += 1;
                }
            }
            if counts.live * 4 < table.capacity() && counts.used > counts.live {
                self.rebuild_to_fit(shard, &mut counts, &mut on_dead, V::relocate, &guard);
            }
            shard_done();
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
        for shard in &*self.shards {
            let mut counts = Self::lock(shard, &guard);
            if Self::current(shard, &guard).is_none() {
                continue;
            }
            self.rebuild_to_fit(shard, &mut counts, &mut on_dead, &mut relocate, &guard);
        }
    }

    /// [`Map::rebuild`] into a table sized for the shard's live entries.
    fn rebuild_to_fit(
        &self,
        shard: &Shard<K, V>,
        counts: &mut Counts,
        on_dead: impl FnMut(&V),
        relocate: impl FnMut(&V) -> Relocation<V>,
        guard: &Guard,
    ) {
        let room_for = counts.live;
        self.rebuild(shard, counts, room_for, on_dead, relocate, guard);
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
        let guard = epoch::pin();
        let mut seen = 0;
        let mut removed = 0;
        let mut words = budget.saturating_add(SHARDS as u64);
        'walk: while seen < budget {
            let Some(shard) = self.shards.get(cursor.shard) else {
                *cursor = Cursor::default();
                break;
            };
            if Self::current(shard, &guard).is_some() {
                let mut counts = Self::lock(shard, &guard);
                let table = Self::current(shard, &guard).expect("tables are never unpublished");
                while cursor.slot < table.capacity() {
                    if seen == budget || words == 0 {
                        break 'walk;
                    }
                    let group = cursor.slot / LANES;
                    // Relaxed: as in `put`.
                    let word = table.ctrl[group].load(Ordering::Relaxed);
                    words -= 1;
                    let mut live = word & HIGH & (u64::MAX << (cursor.slot % LANES * 8));
                    cursor.slot = (group + 1) * LANES;
                    while live != 0 {
                        let index = group * LANES + lowest(live);
                        live &= live - 1;
                        seen += 1;
                        // SAFETY: the slot is FULL.
                        let (key, value) = unsafe { table.entry(index) };
                        if visit(key, value) {
                            table.mark(index, DELETED);
                            counts.live -= 1;
                            removed += 1;
                        }
                        if seen == budget {
                            cursor.slot = index + 1;
                            break 'walk;
                        }
                    }
                }
            }
            cursor.shard += 1;
            cursor.slot = 0;
            if cursor.shard == self.shards.len() {
                // The end of the map: the next slice starts over.
                *cursor = Cursor::default();
                break;
            }
        }
        removed
    }
}

impl<K, V, S> Drop for Map<K, V, S> {
    fn drop(&mut self) {
        for shard in &mut *self.shards {
            // SAFETY: `&mut self`: no reader or writer can reach the map, so
            // the current tables can be freed now (retired ones are the
            // collector's).
            unsafe {
                let table = shard.table.load(Ordering::Relaxed, epoch::unprotected());
                if !table.is_null() {
                    drop(table.into_owned());
                }
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Barrier;
    use std::thread;

    use super::*;
    use crate::cell::{Life, StateCell};

    type TestMap = Map<String, StateCell, foldhash::fast::FixedState>;

    /// Runs are shorter under Miri, which interprets every step.
    const N: u64 = if cfg!(miri) { 300 } else { 20_000 };

    fn map() -> TestMap {
        Map::with_hasher(foldhash::fast::FixedState::with_seed(7))
    }

    fn word(map: &TestMap, key: &str) -> Option<u64> {
        map.get(key, StateCell::load).ok()
    }

    fn put(map: &TestMap, key: String, word: u64) -> bool {
        map.insert(
            key,
            StateCell::new(word),
            |_| unreachable!("nothing dies"),
            |_| (),
        )
        .is_ok()
    }

    /// `count` keys that share a shard with `key`.
    fn neighbours(map: &TestMap, key: &str, count: usize) -> Vec<String> {
        let shard = map.hash(key) >> (64 - SHARD_BITS);
        (0..)
            .map(|i| format!("neighbour-{i}"))
            .filter(|k| map.hash(k.as_str()) >> (64 - SHARD_BITS) == shard)
            .take(count)
            .collect()
    }

    #[test]
    fn finds_every_key_it_holds_and_no_other_across_rebuilds() {
        let map = map();
        for i in 0..N {
            assert!(put(&map, format!("client-{i}"), i));
        }
        for i in 0..N {
            assert_eq!(word(&map, &format!("client-{i}")), Some(i));
        }
        assert_eq!(word(&map, "client-absent"), None);
        // A second insert of a key hands the value back, untouched.
        let again = map.insert("client-3".into(), StateCell::new(99), |_| (), |_| ());
        assert_eq!(again.map_err(|cell| cell.load()), Err(99));
        assert_eq!(word(&map, "client-3"), Some(3));
    }

    #[test]
    fn removal_needs_the_condition_and_a_removed_key_can_come_back() {
        let map = map();
        for i in 0..N {
            assert!(put(&map, format!("client-{i}"), i));
        }
        for i in (0..N).step_by(2) {
            let key = format!("client-{i}");
            assert!(!map.remove_if(key.as_str(), |_| false));
            map.get(key.as_str(), |cell| assert!(cell.retire()))
                .ok()
                .expect("present");
            assert!(map.remove_if(key.as_str(), Mortal::is_dead));
            assert!(!map.remove_if(key.as_str(), |_| true), "removed once");
        }
        for i in 0..N {
            let expected = (i % 2 == 1).then_some(i);
            assert_eq!(word(&map, &format!("client-{i}")), expected);
        }
        for i in (0..N).step_by(2) {
            assert!(put(&map, format!("client-{i}"), i + 1));
        }
        for i in 0..N {
            let expected = if i % 2 == 1 { i } else { i + 1 };
            assert_eq!(word(&map, &format!("client-{i}")), Some(expected));
        }
    }

    #[test]
    fn a_rebuild_freezes_the_copy_a_reader_holds_and_carries_its_word() {
        let map = map();
        assert!(put(&map, "target".into(), 41));
        let others = neighbours(&map, "target", 64);
        map.get("target", |old| {
            // Fill the shard until it is rebuilt at least once.
            for (i, key) in others.iter().enumerate() {
                assert!(put(&map, key.clone(), i as u64));
            }
            assert_eq!(old.life(), Life::Evicted, "the old copy is frozen");
            assert_eq!(word(&map, "target"), Some(41), "the new copy has the word");
        })
        .ok()
        .expect("present");
    }

    #[test]
    fn a_rebuild_leaves_dead_entries_behind_and_reports_each_once() {
        let map = map();
        assert!(put(&map, "dead".into(), 1));
        map.get("dead", |cell| assert!(cell.retire()))
            .ok()
            .expect("present");
        let mut reported = 0;
        for key in neighbours(&map, "dead", 64) {
            assert!(map
                .insert(key, StateCell::new(0), |_| reported += 1, |_| ())
                .is_ok());
        }
        assert_eq!(reported, 1);
        assert_eq!(word(&map, "dead"), None);
    }

    #[test]
    fn retain_removes_what_it_is_told_and_shrinks_what_is_left() {
        let map = map();
        for i in 0..N {
            assert!(put(&map, format!("client-{i}"), i));
        }
        let capacity = || -> usize {
            map.shards
                .iter()
                .map(|shard| {
                    Map::<String, StateCell, foldhash::fast::FixedState>::current(
                        shard,
                        &epoch::pin(),
                    )
                    .map_or(0, Table::capacity)
                })
                .sum()
        };
        let before = capacity();
        let removed = map.retain(|_, cell| cell.load() % 10 != 0, |_| unreachable!(), || ());
        assert_eq!(removed, N - N.div_ceil(10));
        // Shrunk: to under half the entries there were, or, where the
        // shards held only a few each (a small N), to one group per shard.
        let after = capacity();
        assert!(after < before, "{before} slots before, {after} after");
        assert!(
            after <= (N as usize / 2).max(SHARDS * LANES),
            "{after} slots left for {} entries",
            N.div_ceil(10)
        );
        for i in 0..N {
            let expected = (i % 10 == 0).then_some(i);
            assert_eq!(word(&map, &format!("client-{i}")), expected);
        }
    }

    #[test]
    fn sweep_slices_visit_every_entry_once_per_pass() {
        let map = map();
        for i in 0..N {
            assert!(put(&map, format!("client-{i}"), i));
        }
        let mut cursor = Cursor::default();
        let mut seen: HashMap<String, u32> = HashMap::new();
        let mut slices = 0;
        loop {
            let mut visited = 0;
            let _ = map.sweep_slice(&mut cursor, 37, |key, _| {
                *seen.entry(key.clone()).or_default() += 1;
                visited += 1;
                false
            });
            slices += 1;
            if cursor.shard == 0 && cursor.slot == 0 {
                break;
            }
            assert!(visited <= 37);
            assert!(slices <= N, "the walk ends");
        }
        assert_eq!(seen.len() as u64, N);
        assert!(seen.values().all(|&n| n == 1));
        // A slice that removes: the entries go, and are not found again.
        let removed = map.sweep_slice(&mut cursor, N, |_, cell| cell.load() < N / 2);
        assert_eq!(removed, N / 2);
        assert_eq!(word(&map, "client-0"), None);
        assert_eq!(word(&map, &format!("client-{}", N - 1)), Some(N - 1));
    }

    #[test]
    fn readers_racing_inserts_and_removals_see_only_whole_entries() {
        let map = map();
        let threads = 2;
        let barrier = Barrier::new(threads + 1);
        let per_thread = N / 4;
        // Retired cells go either by `remove_if` or, if another thread's
        // rebuild got there first, left behind by it: each exactly once.
        let gone = PlainAtomicU64::new(0);
        thread::scope(|scope| {
            for t in 0..threads as u64 {
                let (map, barrier, gone) = (&map, &barrier, &gone);
                scope.spawn(move || {
                    let dead = |_: &StateCell| {
                        // Relaxed: a counter read after the threads join.
                        gone.fetch_add(1, Ordering::Relaxed);
                    };
                    barrier.wait();
                    for i in 0..per_thread {
                        let key = format!("t{t}-{i}");
                        assert!(map
                            .insert(key.clone(), StateCell::new(i), dead, |_| ())
                            .is_ok());
                        // A copy frozen by another thread's rebuild reads
                        // as the tombstone until the new table is out.
                        let mut read = word(map, &key);
                        while read == Some(crate::algorithm::TOMBSTONE) {
                            std::hint::spin_loop();
                            read = word(map, &key);
                        }
                        assert_eq!(read, Some(i));
                        if i % 3 == 0 {
                            // A copy another thread's rebuild froze meanwhile
                            // cannot be retired: look again until the live
                            // copy is out.
                            while !map
                                .get(key.as_str(), StateCell::retire)
                                .ok()
                                .expect("present")
                            {
                                std::hint::spin_loop();
                            }
                            if map.remove_if(key.as_str(), Mortal::is_dead) {
                                dead(&StateCell::new(0));
                            }
                        }
                    }
                });
            }
            barrier.wait();
            // Reads of the other threads' keys: absent, or whole.
            for i in 0..per_thread {
                for t in 0..threads {
                    let key = format!("t{t}-{i}");
                    if let Ok(word) = map.get(key.as_str(), StateCell::load) {
                        assert!(
                            word == i || word >= crate::algorithm::UNBORN,
                            "{key}: {word}"
                        );
                    }
                }
            }
        });
        let retired = threads as u64 * per_thread.div_ceil(3);
        assert_eq!(gone.load(Ordering::Relaxed), retired);
        for t in 0..threads {
            for i in 0..per_thread {
                let expected = (i % 3 != 0).then_some(i);
                assert_eq!(word(&map, &format!("t{t}-{i}")), expected);
            }
        }
    }

    #[test]
    fn zero_bytes_is_exact() {
        for byte in 0..=255u8 {
            for other in [0u8, 1, 0x7F, 0x80, 0xFF] {
                let word = u64::from_le_bytes([other, byte, other, other, byte, other, 0x55, byte]);
                let expected = word
                    .to_le_bytes()
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| **b == 0)
                    .fold(0, |bits, (lane, _)| bits | 0x80 << (lane * 8));
                assert_eq!(zero_bytes(word), expected, "{word:#x}");
            }
        }
    }

    #[test]
    fn tables_grow_by_less_than_double_and_always_keep_an_empty_slot() {
        for live in 0..10_000 {
            // A rebuild for `live + 1` entries holds `live`, then one more.
            let capacity = groups_for(live + 1) * LANES;
            assert!(live < max_used(capacity), "{live} entries fit");
            assert!(max_used(capacity) < capacity);
        }
        let capacity = groups_for(100_000) * LANES;
        let next = groups_for(max_used(capacity) + 1) * LANES;
        assert!(next * 2 < capacity * 3, "{capacity} → {next}");
    }
}
