//! One shard's table: control bytes read eight at a time, slots holding a
//! key and its value side by side, and the link to the table a rebuild is
//! moving its entries to.

use core::borrow::Borrow;
use core::cell::UnsafeCell;
use core::mem::{self, MaybeUninit};

use crossbeam_epoch::{Atomic, Guard, Shared};

// PlainAtomicU64: the control words are std's atomics even in loom builds;
// the loom models run the store's protocol over a loom-aware stand-in for
// this table (see `loom-tests/stand_in.rs`).
use crate::sync::{Ordering, PlainAtomicU64};

/// How many shards a map has: a power of two, picked by the hash's top
/// bits.
pub(crate) const SHARDS: usize = 64;
pub(super) const SHARD_BITS: u32 = SHARDS.trailing_zeros();

/// Slots per group: one control word's bytes.
pub(super) const LANES: usize = 8;

pub(super) const EMPTY: u8 = 0x00;
pub(super) const DELETED: u8 = 0x01;
pub(super) const MOVED: u8 = 0x02;
/// The high bit of a `FULL` tag; its other seven bits are from the hash.
pub(super) const FULL: u8 = 0x80;

const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
pub(super) const HIGH: u64 = 0x8080_8080_8080_8080;
const ONES: u64 = 0x0101_0101_0101_0101;

// `zero_bytes` finds the `EMPTY` tags.
const _: () = assert!(EMPTY == 0);

/// The high bit of every byte of `x` that is zero, and no other bit: exact,
/// since no carry crosses a byte (`(b & 0x7F) + 0x7F ≤ 0xFE`).
#[inline]
pub(super) fn zero_bytes(x: u64) -> u64 {
    !(((x & LOW7) + LOW7) | x) & HIGH
}

/// The lanes of `group` whose tag is `tag`, as high bits.
#[inline]
fn lanes_tagged(group: u64, tag: u8) -> u64 {
    zero_bytes(group ^ ONES.wrapping_mul(u64::from(tag)))
}

/// The lowest lane marked in `bits`.
#[inline]
pub(super) fn lowest(bits: u64) -> usize {
    (bits.trailing_zeros() / 8) as usize
}

/// `group` with lane `lane` tagged `tag`.
#[inline]
pub(super) fn retagged(group: u64, lane: usize, tag: u8) -> u64 {
    let shift = lane * 8;
    (group & !(0xFF << shift)) | (u64::from(tag) << shift)
}

/// The `FULL` tag for `hash`: seven bits the shard choice did not use.
#[inline]
fn tag_of(hash: u64) -> u8 {
    FULL | ((hash >> (64 - SHARD_BITS - 7)) as u8 & 0x7F)
}

/// Groups for `live` entries at a load of about 3/5 (at least one).
pub(super) fn groups_for(live: usize) -> usize {
    (live.saturating_mul(5).div_ceil(3)).div_ceil(LANES).max(1)
}

/// The slots a table of `capacity` may use (live or deleted) before it is
/// rebuilt: 7/8 of them, so a probe always meets an `EMPTY` byte.
pub(super) fn max_used(capacity: usize) -> usize {
    capacity - capacity / 8
}

/// The removed entries a shard's table may hold beyond as many as it holds
/// live before a removal rebuilds it (see [`Counts::half_dead`]): as many
/// as a table of four groups can use, so that the small tables the pass
/// over the map leaves their size (32 slots) are never rebuilt for this.
pub(super) const DEAD_SPARES: usize = 28;

/// Where a [`Table::search`] that missed stopped: a group holding an empty
/// slot, the first of the key's probe sequence.
#[derive(Debug, Clone, Copy)]
pub(super) struct Vacancy {
    group: usize,
}

/// One slot: a key and its value, written once (while its tag is `EMPTY`,
/// under the shard's lock) and dropped only with its table.
struct Slot<K, V>(UnsafeCell<MaybeUninit<(K, V)>>);

/// One shard's table: control words, and slots, `LANES` per word.
pub(super) struct Table<K, V> {
    pub(super) ctrl: Box<[PlainAtomicU64]>,
    slots: Box<[Slot<K, V>]>,
    /// The table a rebuild is moving this one's entries to: null until the
    /// rebuild publishes it, then set for good. Not owned: the shard (or a
    /// later table's retirement) frees it.
    next: Atomic<Table<K, V>>,
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
    pub(super) fn new(groups: usize) -> Self {
        // Multiply-shift indexing takes the group count in 32 bits; at
        // least one group, so that every hash has a home in bounds.
        let groups = groups.clamp(1, u32::MAX as usize);
        Self {
            ctrl: (0..groups).map(|_| PlainAtomicU64::new(0)).collect(),
            slots: (0..groups * LANES)
                .map(|_| Slot(UnsafeCell::new(MaybeUninit::uninit())))
                .collect(),
            next: Atomic::null(),
        }
    }

    pub(super) fn groups(&self) -> usize {
        self.ctrl.len()
    }

    pub(super) fn capacity(&self) -> usize {
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
    /// contents live until the table is dropped (a `MOVED` slot's are then
    /// forgotten, not dropped: they belong to the table they moved to, or,
    /// for a copy a move gave up on, to no one). A slot with a tag is one
    /// of the table's: `index` is below [`Table::capacity`].
    #[inline]
    pub(super) unsafe fn entry(&self, index: usize) -> &(K, V) {
        debug_assert!(index < self.capacity());
        // SAFETY: by the caller's contract `index` is in bounds and the slot
        // is initialised, and no one writes it again while the table lives.
        unsafe { (*self.slots.get_unchecked(index).0.get()).assume_init_ref() }
    }

    /// The slot index and entry for `key`, if the table holds it live.
    #[inline]
    pub(super) fn find<Q>(&self, hash: u64, key: &Q) -> Option<(usize, &(K, V))>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.search(hash, key).ok()
    }

    /// As [`Table::find`]; a miss says where the probe stopped: the first
    /// group of the key's probe sequence with an empty slot, where
    /// [`Table::put_at`] places an entry (`None` only for a table with no
    /// empty slot, which a table below `max_used` never is).
    #[inline]
    pub(super) fn search<Q>(&self, hash: u64, key: &Q) -> Result<(usize, &(K, V)), Option<Vacancy>>
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
                    return Ok((index, entry));
                }
                hits &= hits - 1;
            }
            // An entry is always placed before the first group that had an
            // empty slot, and a slot never becomes empty again.
            if zero_bytes(word) != 0 {
                return Err(Some(Vacancy { group }));
            }
            group = if group + 1 == self.groups() {
                0
            } else {
                group + 1
            };
        }
        Err(None)
    }

    /// Places `entry` in the first empty slot of its probe sequence and
    /// returns the slot's index. Holding the shard's lock, the table being
    /// below `max_used`.
    #[inline]
    pub(super) fn put(&self, hash: u64, entry: (K, V)) -> usize {
        self.put_from(self.home(hash), hash, entry)
    }

    /// As [`Table::put`], where a [`Table::search`] of this table for the
    /// entry's key, under the same hold of the shard's lock, stopped: no
    /// writer has filled the empty slot it saw since, so the probe ends
    /// there at once.
    #[inline]
    pub(super) fn put_at(&self, vacancy: Vacancy, hash: u64, entry: (K, V)) -> usize {
        self.put_from(vacancy.group, hash, entry)
    }

    /// Places `entry` in the first empty slot from `group` on.
    #[inline]
    fn put_from(&self, mut group: usize, hash: u64, entry: (K, V)) -> usize {
        loop {
            debug_assert!(group < self.groups());
            // SAFETY: `home` is below the group count (a multiply-shift of
            // a 32-bit value by it, at least 1: `Table::new`), and so is
            // every later group, wrapped.
            let ctrl = unsafe { self.ctrl.get_unchecked(group) };
            // Relaxed: only writers change control words, and they hold the
            // shard's lock.
            let word = ctrl.load(Ordering::Relaxed);
            let empty = zero_bytes(word);
            if empty != 0 {
                let lane = lowest(empty);
                let index = group * LANES + lane;
                // SAFETY: `index` is in bounds (the group is, and there are
                // `LANES` slots per group); the slot's tag is EMPTY, so no
                // reader dereferences it, and the shard's lock makes this
                // thread its only writer.
                unsafe { (*self.slots.get_unchecked(index).0.get()).write(entry) };
                // Release: publishes the slot's contents to every reader
                // whose Acquire load (`find`) sees this tag.
                ctrl.store(retagged(word, lane, tag_of(hash)), Ordering::Release);
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
    #[inline]
    pub(super) fn mark(&self, index: usize, tag: u8) {
        let group = &self.ctrl[index / LANES];
        // Relaxed load: as in `put`. Release store: a reader that sees the
        // new tag sees what this writer did before (a retired cell's
        // tombstone, for instance), though none depends on it.
        let word = group.load(Ordering::Relaxed);
        group.store(retagged(word, index % LANES, tag), Ordering::Release);
    }

    /// The tag of slot `index`. Holding the shard's lock.
    pub(super) fn tag(&self, index: usize) -> u8 {
        // Relaxed: as in `put`.
        let word = self.ctrl[index / LANES].load(Ordering::Relaxed);
        (word >> (index % LANES * 8)) as u8
    }

    /// The table this one's entries are moving to, if a rebuild has
    /// published one.
    #[inline]
    pub(super) fn next<'g>(&self, guard: &'g Guard) -> Option<&'g Table<K, V>> {
        // Acquire: pairs with the Release store in `link`, so the new
        // table's control words are visible, and so is every entry placed
        // in this table before the rebuild began (under the shard's lock,
        // which the rebuilder took after those writers let it go): a search
        // of this table after this load misses no entry the rebuild moves.
        let next = self.next.load(Ordering::Acquire, guard);
        // SAFETY: a table is freed only after the table that links to it
        // has been retired and every guard pinned before that retirement
        // dropped (`Migration::finish` retires the old table first, and the
        // new one is retired only by a later rebuild, pinned after it), or
        // by `Drop for Map`, which no reader overlaps.
        unsafe { next.as_ref() }
    }

    /// Links `next` as the table this one's entries move to. Holding the
    /// shard's lock, once per table.
    pub(super) fn link(&self, next: Shared<'_, Table<K, V>>) {
        // Release: pairs with the Acquire load in `next`.
        self.next.store(next, Ordering::Release);
    }

    /// The linked table, to free it with this one (`Drop for Map`).
    pub(super) fn take_next(&mut self) -> Option<Box<Table<K, V>>> {
        // SAFETY: `&mut self`: no thread can reach this table, nor, through
        // it, the linked one; the caller frees it once.
        unsafe {
            let next = self
                .next
                .load(Ordering::Relaxed, crossbeam_epoch::unprotected());
            (!next.is_null()).then(|| next.into_owned().into_box())
        }
    }

    /// Live and used slots, counted.
    pub(super) fn count(&self) -> Counts {
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
        for group in 0..self.groups() {
            // A moved slot's key and value belong to the table they moved
            // to (or, for a copy a move gave up on, to no one: see
            // `Relocation::Moved`); an empty one holds none. So only FULL
            // and DELETED slots are dropped, found a group at a time (a
            // retired table is mostly MOVED). Relaxed: `&mut self`.
            let word = self.ctrl[group].load(Ordering::Relaxed);
            let mut owned = (word & HIGH) | lanes_tagged(word, DELETED);
            while owned != 0 {
                let index = group * LANES + lowest(owned);
                owned &= owned - 1;
                // SAFETY: the slot is initialised (FULL or DELETED), this
                // table still owns it, and `&mut self` means no one else
                // can reach it.
                unsafe { self.slots[index].0.get_mut().assume_init_drop() };
            }
        }
    }
}

/// A shard's counts of slots: live (`FULL`) and used (not `EMPTY`); and
/// whether a table was retired under the lock that holds them, so that the
/// writer hands it to the epoch collector once it lets the lock go.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counts {
    pub(super) live: usize,
    pub(super) used: usize,
    pub(super) retired: bool,
}

impl Counts {
    /// Whether the table holds more removed entries (slots used, not live)
    /// than live ones, and more than [`DEAD_SPARES`]: a removal that leaves
    /// it so rebuilds it. So a shard never holds more than its live entries
    /// plus `DEAD_SPARES` removed ones once a writer lets its lock go, and
    /// the rebuild, which costs about the slots used, is paid for by the
    /// removals since the last one, more than half of them.
    pub(super) fn half_dead(&self) -> bool {
        let dead = self.used.saturating_sub(self.live);
        dead > self.live && dead > DEAD_SPARES
    }
}
