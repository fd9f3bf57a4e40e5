//! One shard's table: control bytes read eight at a time, slots holding a
//! key and its value side by side, and the link to the table a rebuild is
//! moving its entries to.

use core::borrow::Borrow;
use core::cell::UnsafeCell;
use core::mem::{self, MaybeUninit};
use core::ptr;

use crossbeam_epoch::{Atomic, Guard, Shared};

// PlainAtomicU64: the control words are std's atomics even in loom builds;
// the loom models run the store's protocol over a loom-aware stand-in for
// this table (see `loom-tests/stand_in.rs`).
use crate::sync::{plain_fence, Ordering, PlainAtomicU64};

/// How many shards a map has: a power of two, picked by the hash's top
/// bits.
pub(crate) const SHARDS: usize = 64;
pub(super) const SHARD_BITS: u32 = SHARDS.trailing_zeros();

/// Slots per group: one control word's bytes.
pub(super) const LANES: usize = 8;

pub(super) const EMPTY: u8 = 0x00;
pub(super) const DELETED: u8 = 0x01;
pub(super) const MOVED: u8 = 0x02;
/// A slot one inserter has claimed and is writing: no one else reads it.
pub(super) const CLAIMED: u8 = 0x03;
/// An empty slot a rebuild closed: a probe stops at it as at `EMPTY`, and
/// no insert claims it.
pub(super) const SEALED: u8 = 0x04;
/// A published slot that lost its key's resolution: it keeps its key and
/// value (dropped with the table), and only its own inserter may publish
/// it again, until a rebuild seals it `DELETED`.
pub(super) const GIVEN_UP: u8 = 0x05;
/// The two high bits of a `PENDING` tag (a slot whose key and value are
/// written and published, its entry not yet decided); its other six bits
/// are from the hash.
pub(super) const PENDING: u8 = 0x40;
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

/// The `EMPTY` and `SEALED` lanes of `group`, as high bits: where a probe
/// stops.
#[inline]
pub(super) fn stops(group: u64) -> u64 {
    zero_bytes(group) | lanes_tagged(group, SEALED)
}

/// The `PENDING` lanes of `group` (second bit set, high bit clear), as
/// high bits. No other tag has its second bit set without its high bit.
#[inline]
pub(super) fn pending_lanes(group: u64) -> u64 {
    (group << 1) & !group & HIGH
}

/// The lowest lane marked in `bits`.
#[inline]
pub(super) fn lowest(bits: u64) -> usize {
    (bits.trailing_zeros() / 8) as usize
}

/// Lane `lane`'s tag in `group`.
#[inline]
pub(super) fn byte(group: u64, lane: usize) -> u8 {
    (group >> (lane * 8)) as u8
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

/// The `PENDING` tag for `hash`: six of the bits its `FULL` tag holds.
#[inline]
fn pending_of(hash: u64) -> u8 {
    PENDING | (tag_of(hash) & 0x3F)
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

/// One slot used, in a table's counts: the low half.
pub(super) const ONE_USED: u64 = 1;
/// One slot live, in a table's counts: the high half.
pub(super) const ONE_LIVE: u64 = 1 << 32;
/// The slots used, in a table's counts.
const USED: u64 = 0xFFFF_FFFF;

/// How an insert with no lock ended ([`Table::insert`]).
pub(super) enum Claim<K, V> {
    /// Slot `.0` holds the key's entry: the one inserted.
    Won(usize),
    /// Another slot holds the key's entry (or held it, and the caller
    /// looks again); the entry inserted stays in its slot, given up, owned
    /// by the table.
    Lost,
    /// A rebuild sealed the table first: the entry, handed back, read by
    /// no one.
    Sealed((K, V)),
}

/// How a [`Table::resolve`] decided the slot it resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resolved {
    /// The slot is the key's entry.
    Won,
    /// The slot was given up: another is, or will be, the entry.
    Lost,
}

/// One slot: a key and its value, written once (while its tag is
/// `CLAIMED` by one inserter, or `EMPTY` in a table no other thread writes
/// yet) and dropped only with its table.
struct Slot<K, V>(UnsafeCell<MaybeUninit<(K, V)>>);

/// One shard's table: control words, and slots, `LANES` per word.
pub(super) struct Table<K, V> {
    pub(super) ctrl: Box<[PlainAtomicU64]>,
    slots: Box<[Slot<K, V>]>,
    /// Slots used (low half) and live (high half), counted by the writers
    /// that change them, inserts with no lock included (see
    /// [`Table::reserve`]).
    counts: PlainAtomicU64,
    /// The table a rebuild is moving this one's entries to: null until the
    /// rebuild publishes it, then set for good. Not owned: the shard (or a
    /// later table's retirement) frees it.
    next: Atomic<Table<K, V>>,
}

// SAFETY: a table owns its keys and values (sending it sends them, and it
// may be dropped on the epoch collector's thread), and shares them only as
// `&(K, V)`, so it is `Send` and `Sync` when they both are. A slot's
// `UnsafeCell` is written only by the one thread that claimed it, before
// its tag is published (see `Table::insert` and `Table::put`).
unsafe impl<K: Send + Sync, V: Send + Sync> Send for Table<K, V> {}
// SAFETY: as for `Send` above.
unsafe impl<K: Send + Sync, V: Send + Sync> Sync for Table<K, V> {}

impl<K, V> Table<K, V> {
    pub(super) fn new(groups: usize) -> Self {
        // Multiply-shift indexing takes the group count in 32 bits, and
        // the counts take the slots in 32; at least one group, so that
        // every hash has a home in bounds.
        let groups = groups.clamp(1, u32::MAX as usize / LANES);
        Self {
            ctrl: (0..groups).map(|_| PlainAtomicU64::new(0)).collect(),
            slots: (0..groups * LANES)
                .map(|_| Slot(UnsafeCell::new(MaybeUninit::uninit())))
                .collect(),
            counts: PlainAtomicU64::new(0),
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
    /// The slot's tag must have been seen `FULL` or `PENDING` (by a load
    /// that reads from or after the `Release` write that published it), or
    /// be `DELETED`, `GIVEN_UP` or `MOVED` now, or the slot be one this
    /// thread filled: a slot is filled before its tag is published, and its
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
    /// [`Table::insert`] starts its claim (`None` only for a table with no
    /// empty slot, which a table below `max_used` never is, or one a
    /// rebuild sealed).
    #[inline]
    pub(super) fn search<Q>(&self, hash: u64, key: &Q) -> Result<(usize, &(K, V)), Option<Vacancy>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let tag = tag_of(hash);
        let mut group = self.home(hash);
        for _ in 0..self.groups() {
            // Acquire: pairs with the Release write (in `put`, `insert` or
            // `resolve`) that published a slot's tag, or one that continued
            // its release sequence (every later write of the word is a
            // read-modify-write), so the key and value written before it
            // are visible here.
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
            // empty slot, and a slot never becomes empty again (a rebuild
            // seals it, and a probe stops there as well).
            if stops(word) != 0 {
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

    /// Places `entry`, whose key the table holds in no other slot and no
    /// insert will add, in the first empty slot of its probe sequence,
    /// `FULL` at once, and returns the slot's index: a rebuild's move into
    /// the table it has linked, holding the shard's lock. First requests
    /// may be claiming slots of the same table meanwhile (see
    /// [`Map::insert`]), so the slot is claimed as theirs are (a
    /// compare-and-swap to `CLAIMED`), written, and then published by one
    /// add to its word (`AcqRel`, as [`Table::insert`]'s publication; the
    /// lane is this thread's, so no compare is needed), with no
    /// resolution: no other slot of the key is ever published, since a
    /// first request inserts only a key it found in neither table, and
    /// the key's entry in the old table reads `FULL` until its copy here
    /// is published. The rebuild reserved the slot when it linked the
    /// table, and a table is sealed only under the lock, so the claim
    /// always finds one.
    ///
    /// [`Map::insert`]: super::Map
    #[inline]
    pub(super) fn put(&self, hash: u64, entry: (K, V)) -> usize {
        let index = self
            .claim(self.home(hash))
            .expect("a table is sealed only under the lock, and the slot was reserved");
        // SAFETY: `claim` returns a slot in bounds, CLAIMED by this thread:
        // no one else reads or writes it until it is published.
        unsafe { (*self.slots.get_unchecked(index).0.get()).write(entry) };
        // The lane is this thread's until published: only a seal changes a
        // CLAIMED lane, and only the lock's holder (this thread) seals. So
        // one add turns it from CLAIMED to its tag, whatever the other lanes
        // do meanwhile (no carry: the tag is above CLAIMED, at most 0xFF).
        let (ctrl, lane) = (&self.ctrl[index / LANES], index % LANES);
        // AcqRel: the release half publishes the slot written above to
        // every reader whose Acquire load sees the tag (and continues the
        // word's release sequence), as `Table::insert`'s publication does.
        let before = ctrl.fetch_add(
            u64::from(tag_of(hash) - CLAIMED) << (lane * 8),
            Ordering::AcqRel,
        );
        debug_assert_eq!(byte(before, lane), CLAIMED, "only a seal takes a claim");
        index
    }

    /// The group after `group` in probe order.
    #[inline]
    fn after(&self, group: usize) -> usize {
        if group + 1 == self.groups() {
            0
        } else {
            group + 1
        }
    }

    /// Where slot `index` comes in the probe sequence from `home`.
    #[inline]
    pub(super) fn rank(&self, home: usize, index: usize) -> usize {
        let group = index / LANES;
        let from_home = if group >= home {
            group - home
        } else {
            group + self.groups() - home
        };
        from_home * LANES + index % LANES
    }

    /// Counts a slot an insert is about to claim, and the entry it is
    /// about to make: false, counting nothing, if the table has no room
    /// for it below [`max_used`] (a rebuild is due). Every slot that
    /// leaves `EMPTY` (but for a rebuild's seal) holds one of these, so a
    /// probe always meets an empty slot.
    #[inline]
    pub(super) fn reserve(&self) -> bool {
        // Relaxed: the count publishes nothing; each reservation reads the
        // last one in the word's modification order (a read-modify-write),
        // so no more than `max_used` are ever held.
        let before = self
            .counts
            .fetch_add(ONE_USED | ONE_LIVE, Ordering::Relaxed);
        if (before & USED) as usize >= max_used(self.capacity()) {
            self.uncount(ONE_USED | ONE_LIVE);
            return false;
        }
        true
    }

    /// Takes `counted` (a multiple of [`ONE_USED`] and [`ONE_LIVE`]) off
    /// the counts: a reservation given back (`ONE_USED | ONE_LIVE`), an
    /// entry lost or removed (`ONE_LIVE`).
    #[inline]
    pub(super) fn uncount(&self, counted: u64) {
        // Relaxed: as in `reserve`.
        self.counts.fetch_sub(counted, Ordering::Relaxed);
    }

    /// The slots used and live, as counted now.
    pub(super) fn counts(&self) -> Counts {
        // Relaxed: as in `reserve`.
        let counts = self.counts.load(Ordering::Relaxed);
        Counts {
            used: (counts & USED) as usize,
            live: (counts >> 32) as usize,
        }
    }

    /// Counts one slot more used, beyond the reservations: a rebuild's copy
    /// given up when its move was cut short, whose entry will take
    /// another slot.
    pub(super) fn count_used(&self) {
        // Relaxed: as in `reserve`.
        self.counts.fetch_add(ONE_USED, Ordering::Relaxed);
    }

    /// Sets the counts of a table no other thread reaches yet: a rebuild's
    /// new table, before it is linked.
    pub(super) fn set_counts(&self, counts: Counts) {
        // Relaxed: published with the table itself, by the link's Release
        // store (`Table::link`), which every thread that reaches the table
        // (and reserves a slot in it) acquired.
        self.counts.store(
            counts.used as u64 | (counts.live as u64) << 32,
            Ordering::Relaxed,
        );
    }

    /// Inserts `entry`, whose key is absent as far as its inserter knows,
    /// with no lock (the protocol of `loom-tests/claim.rs`, model 21):
    /// the caller has [reserved](Table::reserve) a slot. `from` is where a
    /// search of this table for the key stopped, or its home.
    ///
    /// 1. **Claim** the first `EMPTY` slot of the probe sequence, by a
    ///    compare-and-swap of its group's word to `CLAIMED`: so two inserts
    ///    of one key claim in probe order, and every group before a claimed
    ///    slot holds no `EMPTY` one from then on. A `SEALED` lane met first
    ///    (a rebuild is under way) ends the insert: [`Claim::Sealed`].
    /// 2. **Write** key and value into the slot (no one else reads it).
    /// 3. **Publish** it by a compare-and-swap: `FULL` at once if its
    ///    group still holds an `EMPTY` lane and no other lane tagged for
    ///    the key (which the compare-and-swap reads), and every group
    ///    before it in the key's probe holds no lane that may yet become
    ///    the key's entry ([`Table::settled_before`]): no other slot of
    ///    the key can then be `FULL` without its resolution seeing this
    ///    one (an inserter that claims later either claims in this group,
    ///    whose word orders the two publications, or passes it once its
    ///    last `EMPTY` lane is gone, after this publication); otherwise
    ///    `PENDING`, and resolve it. A rebuild that sealed the claim
    ///    (`CLAIMED → MOVED`) makes it fail, and the entry is handed back,
    ///    read by no one.
    /// 4. **Resolve** (see [`Table::resolve`]): the entry wins, or another
    ///    slot of the key does, and this one is given up, keeping key and
    ///    value; the inserter then finds the key's entry, helping resolve
    ///    a `PENDING` one, or, if there is none (the one that won was
    ///    removed since), publishes its own slot again
    ///    ([`Table::winner`]).
    pub(super) fn insert(
        &self,
        hash: u64,
        from: Option<Vacancy>,
        entry: (K, V),
        guard: &Guard,
    ) -> Claim<K, V>
    where
        K: Eq,
    {
        let home = self.home(hash);
        let Some(index) = self.claim(from.map_or(home, |vacancy| vacancy.group)) else {
            return Claim::Sealed(entry);
        };
        // SAFETY: `claim` returns a slot in bounds, CLAIMED by this thread:
        // no one else reads or writes it until it is published.
        unsafe { (*self.slots.get_unchecked(index).0.get()).write(entry) };
        let (group, lane) = (index / LANES, index % LANES);
        let (full, pending) = (tag_of(hash), pending_of(hash));
        let ctrl = &self.ctrl[group];
        // Relaxed: the compare-and-swap below checks what it read.
        let mut word = ctrl.load(Ordering::Relaxed);
        let (published, word) = loop {
            if byte(word, lane) != CLAIMED {
                debug_assert_eq!(byte(word, lane), MOVED, "only a seal takes a claim");
                // SAFETY: this thread wrote the slot above, and the lane,
                // sealed MOVED, owns nothing and never was published: no
                // one else read it or will.
                let entry = unsafe { ptr::read(self.slots[index].0.get()).assume_init() };
                return Claim::Sealed(entry);
            }
            let alone = zero_bytes(word) != 0
                && (lanes_tagged(word, full) | lanes_tagged(word, pending)) == 0
                && (group == home || self.settled_before(home, group, full, pending));
            let tag = if alone { full } else { pending };
            // AcqRel: the release half publishes the key and value written
            // above to every reader whose Acquire load sees the tag (and
            // continues the word's release sequence); the acquire half
            // reads the other lanes as the resolution's scan does (see
            // `resolve`). Acquire on failure: the lane read is acted on.
            let new = retagged(word, lane, tag);
            match ctrl.compare_exchange_weak(word, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break (tag, new),
                Err(now) => word = now,
            }
        };
        if published == full {
            return Claim::Won(index);
        }
        match self.resolve(index, hash, home, Some((group, word))) {
            Resolved::Won => Claim::Won(index),
            Resolved::Lost => self.winner(index, hash, home, guard),
        }
    }

    /// Whether every group of the probe sequence from `home` up to (not
    /// including) `group`, the group of this thread's claim, holds only
    /// lanes that can never become the key's entry: `FULL` or `PENDING`
    /// with other tags (a published slot keeps its key), `DELETED` or
    /// `MOVED`. A lane `CLAIMED` or `GIVEN_UP` may yet be published with
    /// the key's tags, so any one of those, or a lane tagged `full` or
    /// `pending`, answers false.
    ///
    /// Every one of these groups held no `EMPTY` lane when this thread's
    /// search or claim passed it, before the claim, and a lane never
    /// becomes `EMPTY` again: so each read here comes after that pass in
    /// the word's order (coherence), and every lane another inserter of
    /// the key claimed there before this claim is seen claimed or later.
    /// None can be claimed there after it.
    #[inline]
    pub(super) fn settled_before(&self, home: usize, group: usize, full: u8, pending: u8) -> bool {
        let mut at = home;
        while at != group {
            // Relaxed: only the tags are read, and nothing they publish;
            // what matters is that this read comes after the pass (see
            // above), which coherence gives any load.
            let word = self.ctrl[at].load(Ordering::Relaxed);
            let unsettled = lanes_tagged(word, CLAIMED)
                | lanes_tagged(word, GIVEN_UP)
                | lanes_tagged(word, pending)
                | lanes_tagged(word, full);
            if unsettled != 0 {
                return false;
            }
            at = self.after(at);
        }
        true
    }

    /// Claims the first `EMPTY` slot from `group` on: `None` if a `SEALED`
    /// lane comes first.
    fn claim(&self, mut group: usize) -> Option<usize> {
        for _ in 0..self.groups() {
            let ctrl = &self.ctrl[group];
            // Acquire (here and on the compare-and-swap): as in the design
            // model; the claim itself publishes nothing (the slot is
            // written after it) and reads no slot.
            let mut word = ctrl.load(Ordering::Acquire);
            loop {
                if lanes_tagged(word, SEALED) != 0 {
                    return None;
                }
                let empty = zero_bytes(word);
                if empty == 0 {
                    break;
                }
                let lane = lowest(empty);
                match ctrl.compare_exchange_weak(
                    word,
                    retagged(word, lane, CLAIMED),
                    Ordering::Acquire,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Some(group * LANES + lane),
                    Err(now) => word = now,
                }
            }
            group = self.after(group);
        }
        // No empty slot: the reservations make this unreachable in a table
        // no rebuild sealed.
        None
    }

    /// Reads group `group`'s word for a resolution: a read-modify-write
    /// that changes nothing (`AcqRel`; an add of 0, which x86-64 makes one
    /// locked instruction that returns the word). Its acquire half makes the keys of
    /// the lanes it reads published visible; its release half orders this
    /// thread's own publication before the next read-modify-write of the
    /// word, so of two slots of one key published at once, one's resolver
    /// always sees the other (plain loads would allow the store-buffering
    /// race: the design model's twin `LoadScan`).
    #[inline]
    fn scan_read(&self, group: usize) -> u64 {
        // AcqRel: see above; pairs with the publishing compare-and-swaps.
        self.ctrl[group].fetch_add(0, Ordering::AcqRel)
    }

    /// Changes slot `index`'s lane from `from` to `to`, whatever the other
    /// lanes do meanwhile: `Err` with the lane found if it is not `from`.
    pub(super) fn swap_lane(&self, index: usize, from: u8, to: u8) -> Result<(), u8> {
        let (ctrl, lane) = (&self.ctrl[index / LANES], index % LANES);
        // Acquire: the lane found is acted on (a FULL one's key read).
        let mut word = ctrl.load(Ordering::Acquire);
        loop {
            if byte(word, lane) != from {
                return Err(byte(word, lane));
            }
            // AcqRel: the release half publishes what this thread wrote
            // before (a retired cell's tombstone, for instance) and
            // continues the word's release sequence; acquire as above.
            match ctrl.compare_exchange_weak(
                word,
                retagged(word, lane, to),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(now) => word = now,
            }
        }
    }

    /// The slots of the key in slot `s` published (`FULL` or `PENDING`)
    /// in its probe sequence from `home` up to where a probe stops, each
    /// word read by [`Table::scan_read`], passed to `each` with its tag
    /// until `each` answers `Some`.
    ///
    /// `known`, a group and its word as this thread's publication of
    /// slot `s` in it just left it, makes the scan a publisher's: one
    /// sequentially consistent fence after the publication, then that
    /// group's word as the publication left it (the compare-and-swap read
    /// it) and every other group's by an `Acquire` load. Of two slots of
    /// one key, each resolved so (or by read-modify-writes), one's scan
    /// always sees the other published: the publications are each
    /// sequenced before a fence, the fences are in one total order, and the
    /// later fence's thread then reads the earlier one's publication (the
    /// store-buffering outcome, both missed, is ruled out). A scan with no
    /// `known` (a helper's, a publication again, a rebuild's) reads every
    /// word by [`Table::scan_read`].
    fn scan<R>(
        &self,
        s: usize,
        hash: u64,
        home: usize,
        known: Option<(usize, u64)>,
        mut each: impl FnMut(usize, u8) -> Option<R>,
    ) -> Option<R>
    where
        K: Eq,
    {
        let (full, pending) = (tag_of(hash), pending_of(hash));
        // SAFETY: slot `s` was published (or filled) by this thread, or
        // read PENDING by an acquiring read.
        let (key, _) = unsafe { self.entry(s) };
        if known.is_some() {
            // SeqCst: pairs with the fence of every other publisher's scan
            // (see above). std's fence, as the words are std's atomics.
            plain_fence(Ordering::SeqCst);
        }
        let mut group = home;
        for _ in 0..self.groups() {
            let word = match known {
                Some((at, word)) if at == group => word,
                // Acquire: the keys of the lanes read published; the fence
                // above orders it after this thread's publication.
                Some(_) => self.ctrl[group].load(Ordering::Acquire),
                None => self.scan_read(group),
            };
            let mut hits = lanes_tagged(word, full) | lanes_tagged(word, pending);
            while hits != 0 {
                let lane = lowest(hits);
                hits &= hits - 1;
                let t = group * LANES + lane;
                if t == s {
                    continue;
                }
                // SAFETY: the lane was read FULL or PENDING by an acquiring
                // read-modify-write.
                let (other, _) = unsafe { self.entry(t) };
                if other != key {
                    continue;
                }
                if let Some(answer) = each(t, byte(word, lane)) {
                    return Some(answer);
                }
            }
            if stops(word) != 0 {
                break;
            }
            group = self.after(group);
        }
        None
    }

    /// Decides slot `s`, read `PENDING` by this thread (or published by
    /// it): scans the key's probe sequence (see [`Table::scan`]), and for
    /// every other slot `t` of the key found published, `FULL`, or
    /// `PENDING` and earlier in probe order, gives `s` up (`PENDING →
    /// GIVEN_UP`); `PENDING` and later, gives `t` up (or, if it turned
    /// `FULL` first, `s`). Then `s` becomes `FULL`. So of two slots of one
    /// key, at most one is ever `FULL` (the argument is in the design
    /// model's docs, "Why one entry"). Never waits for another thread.
    /// `known` is as in [`Table::scan`].
    pub(super) fn resolve(
        &self,
        s: usize,
        hash: u64,
        home: usize,
        known: Option<(usize, u64)>,
    ) -> Resolved
    where
        K: Eq,
    {
        let (full, pending) = (tag_of(hash), pending_of(hash));
        let rank = self.rank(home, s);
        let lost = self.scan(s, hash, home, known, |t, tag| {
            let beaten = tag == full
                || self.rank(home, t) < rank
                || self.swap_lane(t, pending, GIVEN_UP) == Err(full);
            beaten.then_some(())
        });
        let decided = if lost.is_some() {
            self.swap_lane(s, pending, GIVEN_UP)
        } else {
            self.swap_lane(s, pending, full)
        };
        match decided {
            Ok(()) => {
                if lost.is_some() {
                    Resolved::Lost
                } else {
                    Resolved::Won
                }
            }
            // Given up by another resolver (or sealed so by a rebuild).
            Err(GIVEN_UP | DELETED) => Resolved::Lost,
            // Made FULL by another resolver (and moved since, perhaps),
            // whose scan found it the key's entry.
            Err(_) => Resolved::Won,
        }
    }

    /// The key's entry once its inserter's own slot `s` was given up: a
    /// `FULL` slot of the key ([`Claim::Lost`]); or, helping, the earliest
    /// `PENDING` one resolved, and a look again; or, if there is neither
    /// (the entry that won was removed since), `s` published again and
    /// resolved as a new publication. [`Claim::Lost`] too if a rebuild has
    /// linked a new table and neither is found (the entry may have moved
    /// on): the caller looks the key up again.
    fn winner(&self, s: usize, hash: u64, home: usize, guard: &Guard) -> Claim<K, V>
    where
        K: Eq,
    {
        let (full, pending) = (tag_of(hash), pending_of(hash));
        loop {
            let mut earliest = None;
            let found = self.scan(s, hash, home, None, |t, tag| {
                if tag == full {
                    return Some(());
                }
                earliest.get_or_insert(t);
                None
            });
            if found.is_some() {
                return Claim::Lost;
            }
            match earliest {
                Some(t) => {
                    let _ = self.resolve(t, hash, home, None);
                }
                None if self.next(guard).is_some() => return Claim::Lost,
                // Not one published slot of the key: the entry that won was
                // removed since, or the scan read a group before the
                // earliest slot's publication and a later one after it
                // gave the others up. `s` never was FULL, so it is its
                // inserter's to publish again, unless a rebuild sealed it
                // DELETED (linked or not yet): the key is then the rebuild's
                // to carry, and the caller looks it up again.
                None => match self.swap_lane(s, GIVEN_UP, pending) {
                    Ok(()) => {
                        if self.resolve(s, hash, home, None) == Resolved::Won {
                            return Claim::Won(s);
                        }
                    }
                    Err(DELETED) => return Claim::Lost,
                    Err(_) => {}
                },
            }
        }
    }

    /// Seals the table for a rebuild, which has linked the new one: every
    /// `EMPTY` lane becomes `SEALED` (no insert claims it), every
    /// `CLAIMED` one `MOVED` (its inserter takes its entry back), and
    /// every `GIVEN_UP` one `DELETED` (its inserter can no longer publish
    /// it again). After this no lane becomes `PENDING`. Holding the
    /// shard's lock. Whether any lane was `PENDING` then (an insert caught
    /// between its publication and its decision).
    pub(super) fn seal(&self) -> bool {
        let mut pending = 0;
        for ctrl in &*self.ctrl {
            // AcqRel: acquires every PENDING lane's key, and continues the
            // word's release sequence. Acquire on each retry.
            let sealed = ctrl.fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                // Byte by byte, no carry or borrow crossing one:
                // EMPTY + 4 = SEALED, CLAIMED - 1 = MOVED, GIVEN_UP - 4 =
                // DELETED.
                let ones = |lanes: u64| lanes >> 7;
                Some(
                    word + ones(zero_bytes(word)) * u64::from(SEALED - EMPTY)
                        - ones(lanes_tagged(word, CLAIMED)) * u64::from(CLAIMED - MOVED)
                        - ones(lanes_tagged(word, GIVEN_UP)) * u64::from(GIVEN_UP - DELETED),
                )
            });
            // The word before the seal: its PENDING lanes are the seal's.
            pending |= pending_lanes(sealed.unwrap_or_else(|word| word));
        }
        pending != 0
    }

    /// The `PENDING` slots of a sealed table, each with its key, for the
    /// rebuild to resolve: `each` runs on every one, in slot order.
    pub(super) fn each_pending(&self, mut each: impl FnMut(usize, &K)) {
        for (group, ctrl) in self.ctrl.iter().enumerate() {
            // Acquire: the key of each PENDING lane read.
            let mut pending = pending_lanes(ctrl.load(Ordering::Acquire));
            while pending != 0 {
                let index = group * LANES + lowest(pending);
                pending &= pending - 1;
                // SAFETY: read PENDING by an acquiring load.
                let (key, _) = unsafe { self.entry(index) };
                each(index, key);
            }
        }
    }

    /// [`Table::resolve`] for slot `index`, holding `hash`'s key, by a
    /// rebuild (which has no home group at hand).
    pub(super) fn resolve_for(&self, index: usize, hash: u64) -> Resolved
    where
        K: Eq,
    {
        self.resolve(index, hash, self.home(hash), None)
    }

    /// Changes the tag of slot `index`, whatever the other lanes do
    /// meanwhile (an insert with no lock may be claiming or publishing one
    /// of them). Holding the shard's lock, which makes this thread the
    /// only writer of a `FULL` lane (the lane this changes).
    #[inline]
    pub(super) fn mark(&self, index: usize, tag: u8) {
        let group = &self.ctrl[index / LANES];
        let lane = index % LANES;
        // AcqRel: a reader that sees the new tag sees what this writer did
        // before (a retired cell's tombstone, for instance), though none
        // depends on it; a read-modify-write continues the word's release
        // sequence, and loses no other lane's change.
        let _ = group.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |word| {
            Some(retagged(word, lane, tag))
        });
    }

    /// Retags the lanes `lanes` (high bits) of group `group` as they are in
    /// `word`, whatever the other lanes do meanwhile (as [`Table::mark`]).
    /// Holding the shard's lock.
    pub(super) fn retag(&self, group: usize, lanes: u64, word: u64) {
        if lanes == 0 {
            return;
        }
        // Every bit of each lane named.
        let mask = (lanes >> 7) * 0xFF;
        // AcqRel: as in `mark`.
        let _ = self.ctrl[group].fetch_update(Ordering::AcqRel, Ordering::Relaxed, |now| {
            Some((now & !mask) | (word & mask))
        });
    }

    /// The tag of slot `index`. Holding the shard's lock.
    pub(super) fn tag(&self, index: usize) -> u8 {
        // Acquire: a FULL lane's key may be read next.
        let word = self.ctrl[index / LANES].load(Ordering::Acquire);
        byte(word, index % LANES)
    }

    /// The table this one's entries are moving to, if a rebuild has
    /// published one.
    #[inline]
    pub(super) fn next<'g>(&self, guard: &'g Guard) -> Option<&'g Table<K, V>> {
        // Acquire: pairs with the Release store in `link`, so the new
        // table's control words are visible, and so is every entry
        // published in this table before the rebuilder took the shard's
        // lock (by a writer that let it go since, or whose publication the
        // lock's holder read), or decided by the rebuild before it linked
        // the new table: a search of this table after a load that sees the
        // link finds every entry this table will ever hold, `FULL` until
        // its copy is published in the new one (`Map::insert_moving`), and
        // the new table's counts, which the rebuild set before the link.
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

    /// Live (`FULL`) and used (neither `EMPTY` nor `SEALED`) slots,
    /// counted from the control words.
    pub(super) fn count(&self) -> Counts {
        let mut counts = Counts::default();
        for word in &*self.ctrl {
            // Relaxed: tags only, no slot read.
            let word = word.load(Ordering::Relaxed);
            counts.used += LANES - stops(word).count_ones() as usize;
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
            // to (or, for a copy a move gave up on, or a claim a rebuild
            // sealed, to no one: see `Relocation::Moved`); an empty,
            // sealed or claimed one holds none. So only FULL, DELETED,
            // GIVEN_UP and PENDING (left so by a panic in a key's `Eq`)
            // slots are dropped, found a group at a time (a retired table
            // is mostly MOVED). Relaxed: `&mut self`.
            let word = self.ctrl[group].load(Ordering::Relaxed);
            let mut owned = (word & HIGH)
                | lanes_tagged(word, DELETED)
                | lanes_tagged(word, GIVEN_UP)
                | pending_lanes(word);
            while owned != 0 {
                let index = group * LANES + lowest(owned);
                owned &= owned - 1;
                // SAFETY: the slot is initialised (owned, as above), this
                // table still owns it, and `&mut self` means no one else
                // can reach it.
                unsafe { self.slots[index].0.get_mut().assume_init_drop() };
            }
        }
    }
}

/// A table's counts of slots: live (`FULL`, and those an insert has
/// reserved for its entry) and used (neither `EMPTY` nor `SEALED`, and
/// those reserved).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) live: usize,
    pub(super) used: usize,
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
