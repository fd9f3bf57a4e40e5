//! Rebuilds: a shard's entries moved, one at a time, to a new table that
//! readers can already reach (see "Rebuilds" in the parent module's docs).

use core::hash::{BuildHasher, Hash};
use core::ptr;

use crossbeam_epoch::{Guard, Owned, Shared};

use super::shard::Held;
use super::table::{
    groups_for, lowest, retagged, Counts, Table, DELETED, HIGH, LANES, MOVED, ONE_LIVE, ONE_USED,
};
use super::{Map, Shard};
use crate::cell::{Mortal, Relocation};
use crate::sync::{Ordering, PlainAtomicU64};

/// A copy of an entry placed in the new table before its old cell is
/// forwarded: given up on (its slot marked `MOVED`, owning nothing) if the
/// move ends otherwise (the old cell retired or refused meanwhile, or a
/// panic in `relocate`), so the entry is never owned by both tables. No
/// reader reaches the copy before the forward: a lookup goes on to the new
/// table only from a forwarded cell, or from a slot that no longer holds
/// the key, and the old slot is retagged only after the copy is given up.
struct Placed<'a, K, V> {
    table: &'a Table<K, V>,
    index: Option<usize>,
}

impl<K, V> Placed<'_, K, V> {
    /// Gives the copy up, if one was placed; true iff one was.
    fn give_up(&mut self) -> bool {
        let Some(index) = self.index.take() else {
            return false;
        };
        self.table.mark(index, MOVED);
        true
    }
}

impl<K, V> Drop for Placed<'_, K, V> {
    fn drop(&mut self) {
        // On unwind: the copy's slot was the entry's reserved one, and the
        // rebuild that finishes the job moves the entry into another,
        // counted here.
        if self.give_up() {
            self.table.count_used();
        }
    }
}

/// One group of the old table while its entries leave: its control word
/// with the tags its moved (or left behind) slots take, stored when the
/// group is done, or on unwind, so that a slot whose entry the new table
/// owns never stays `FULL` past the move (see `Map::move_all`).
///
/// A plain store, where every other write of a control word is a
/// read-modify-write: the table is sealed and its claims settled, so no
/// other thread changes its words any more (a resolution's scan still
/// reads one by a read-modify-write that writes what it read, which the
/// store loses nothing of), and the rebuilder read the word it retags
/// with an `Acquire` load after every publication in it, so its `Release`
/// store carries them to every reader that sees it.
struct Retag<'a> {
    ctrl: &'a PlainAtomicU64,
    word: u64,
}

impl Drop for Retag<'_> {
    fn drop(&mut self) {
        // Release: see above: a reader that sees a `MOVED` tag (Acquire,
        // in `Table::find`) sees the copy placed and the old cell forwarded
        // before it, though none depends on it, and one that reads a FULL
        // lane left (a panic half way) sees its entry.
        self.ctrl.store(self.word, Ordering::Release);
    }
}

impl<K, V, S> Map<K, V, S>
where
    K: Hash + Eq + Send + Sync,
    V: Mortal + Send + Sync,
    S: BuildHasher,
{
    /// Replaces the shard's table with one sized for `room_for` live
    /// entries, moving its live entries and leaving dead ones behind
    /// (calling `on_dead` on each). Holding the shard's lock.
    ///
    /// The old table is sealed first, and the inserts it caught half way
    /// (claimed, published and not yet decided) are settled
    /// ([`Map::settle_claims`]), so that no entry appears in it from then
    /// on; then the new table is made, for at least the entries the old one
    /// holds, and linked from the old one before any entry moves. Each
    /// entry moves on its own (see [`Map::move_entry`]), so a reader finds
    /// every client, live, in one table or the other at every step, however
    /// long the rebuilder is held up between steps.
    pub(super) fn rebuild<'g>(
        &self,
        shard: &Shard<K, V>,
        held: &mut Held,
        room_for: usize,
        mut on_dead: impl FnMut(&V),
        mut relocate: impl FnMut(&V) -> Relocation<V>,
        guard: &'g Guard,
    ) -> &'g Table<K, V> {
        // Relaxed: the lock orders this after the last writer's store.
        let old = shard.table.load(Ordering::Relaxed, guard);
        if old.is_null() {
            let new = Owned::new(Table::new(groups_for(room_for))).into_shared(guard);
            // Release: pairs with the Acquire load in `Map::current`.
            shard.table.store(new, Ordering::Release);
            // SAFETY: just allocated, and freed only once replaced.
            return unsafe { new.deref() };
        }
        // SAFETY: as in `Map::current`; the lock keeps it current.
        let old_table = unsafe { old.deref() };
        // Sealed first: inserts with no lock may add entries up to here, so
        // the new table is sized once none can, for at least the entries
        // it will take.
        self.settle_claims(old_table);
        let live = old_table.count().live;
        let new = Table::new(groups_for(room_for.max(live)));
        // Every entry of the old table has its slot reserved before any
        // first request can reach the new one: they claim the rest, up to
        // `max_used`, while the entries move. Each move then takes its
        // reserved slot, and an entry left behind gives its back.
        new.set_counts(Counts { live, used: live });
        let new = Owned::new(new).into_shared(guard);
        old_table.link(new);
        // First requests waiting for the lock insert into `new` from now on.
        shard.gate.open();
        // SAFETY: `new` is freed only after the old table's retirement (see
        // `Table::next`), which comes after `guard` was pinned.
        let new_table = unsafe { new.deref() };
        self.move_all(old_table, new_table, Some(&mut on_dead), &mut relocate);
        held.retired = true;
        self.finish(shard, old, new, guard)
    }

    /// Seals `old` ([`Table::seal`]: no lane becomes `PENDING` after it,
    /// and no insert claims a slot) and decides every insert left
    /// `PENDING` in it as its inserter would ([`Table::resolve`]: the key's
    /// `Hash` and `Eq` run here), so that every entry the table will ever
    /// hold is `FULL` before the moves begin. Every group is sealed before
    /// any is resolved or moved: a resolution made after some entries had
    /// left could miss one already `MOVED`. Holding the shard's lock.
    fn settle_claims(&self, old: &Table<K, V>) {
        // No lane becomes PENDING after the seal: if none was then, there is
        // nothing to decide.
        if old.seal() {
            old.each_pending(|index, key| {
                let _ = old.resolve_for(index, self.hash(key));
            });
        }
    }

    /// Moves every `FULL` entry of `old` to `new` (see [`Map::move_entry`]),
    /// a group at a time, into the slots the rebuild reserved for them
    /// there. Holding the shard's lock.
    ///
    /// Each group's control word is read once, and written once, when its
    /// last entry has left: until then a moved entry's old slot still reads
    /// `FULL`, over a forwarded cell, which readers pass by for the linked
    /// table (see `Map::locate`). The write is made
    /// on unwind too ([`Retag`]), so a panic in a key's `Hash` (or in
    /// `relocate`) half way through a group leaves each entry owned by one
    /// table, and the rebuild that finishes the job moves none twice.
    fn move_all(
        &self,
        old: &Table<K, V>,
        new: &Table<K, V>,
        mut on_dead: Option<&mut dyn FnMut(&V)>,
        relocate: &mut impl FnMut(&V) -> Relocation<V>,
    ) {
        for (group, ctrl) in old.ctrl.iter().enumerate() {
            // Acquire: pairs with the write that published each FULL lane
            // (an insert's, made with no lock), whose key is read next. No
            // FULL lane changes meanwhile: only the lock's holder does
            // that, and no lane becomes FULL in a sealed table once its
            // claims are settled.
            let word = ctrl.load(Ordering::Acquire);
            let mut live = word & HIGH;
            if live == 0 {
                continue;
            }
            let mut retag = Retag { ctrl, word };
            while live != 0 {
                let lane = lowest(live);
                live &= live - 1;
                let on_dead = on_dead
                    .as_mut()
                    .map(|on_dead| &mut **on_dead as &mut dyn FnMut(&V));
                let tag = self.move_entry(old, group * LANES + lane, new, on_dead, relocate);
                retag.word = retagged(retag.word, lane, tag);
            }
        }
    }

    /// Moves the entry in `old`'s slot `index` (`FULL`) to `new`, into the
    /// slot the rebuild reserved for it there (an entry left behind gives
    /// it back; a copy given up keeps it, used), and returns the tag the
    /// old slot must take (`MOVED`, or `DELETED` for a dead entry left
    /// behind), which the caller stores. Holding the shard's lock.
    ///
    /// The key's hash comes first (a `Hash` that panics or stalls leaves
    /// the entry where readers find it). A word cell's copy is placed in
    /// the new table, then the old cell is forwarded by one exchange from
    /// the very state the copy was made from ([`Mortal::forward`]): a check
    /// that changed the state first makes the exchange fail, and the move
    /// copies the newer state into the same slot and tries again; a check
    /// that comes after fails against the mark and finds the copy. A cell
    /// retired or refused meanwhile makes it fail too, and the next read
    /// finds it dead: the copy, which no reader can have reached, is given
    /// up. A handle
    /// ([`Relocation::Same`]) moves bit for bit. A dead cell stays behind:
    /// reported to `on_dead` and marked deleted, or, with no `on_dead` (a
    /// rebuild finished after a panic, which cannot tell whom to report
    /// it to), moved as it is, to be removed from the new table later.
    #[inline]
    fn move_entry(
        &self,
        old: &Table<K, V>,
        index: usize,
        new: &Table<K, V>,
        mut on_dead: Option<&mut dyn FnMut(&V)>,
        relocate: &mut impl FnMut(&V) -> Relocation<V>,
    ) -> u8 {
        // SAFETY: the slot is FULL, and this thread, holding the lock, is
        // its only writer.
        let entry = unsafe { old.entry(index) };
        let hash = self.hash(&entry.0);
        let mut placed = Placed {
            table: new,
            index: None,
        };
        loop {
            match relocate(&entry.1) {
                Relocation::Dead => {
                    // A copy given up holds the entry's reserved slot.
                    let gave_up = placed.give_up();
                    if let Some(on_dead) = on_dead.as_mut() {
                        new.uncount(if gave_up {
                            ONE_LIVE
                        } else {
                            ONE_USED | ONE_LIVE
                        });
                        on_dead(&entry.1);
                        return DELETED;
                    }
                    if gave_up {
                        // Moved as it is below, into one slot more.
                        new.count_used();
                    }
                    // SAFETY: as for `Same` below: a dead cell is never
                    // written again, so the copy read here and the old one
                    // stay the same.
                    let _ = new.put(hash, unsafe { ptr::read(entry) });
                    break;
                }
                Relocation::Same => {
                    // SAFETY: the entry is FULL in the old table; the
                    // MOVED tag returned below hands its ownership to the
                    // new table (the old one drops no MOVED slot). The
                    // caller's `Retag` stores it when the group is done, or
                    // on unwind if a later entry's `Hash` panics first, and
                    // nothing reads the old table's tags for ownership (its
                    // drop, a rebuild finishing the job) before that store,
                    // so it is owned once. Readers of the old table only
                    // ever borrow it, and the new table outlives them.
                    let _ = new.put(hash, unsafe { ptr::read(entry) });
                    break;
                }
                Relocation::Moved(copy, seal) => {
                    match placed.index {
                        None => {
                            // SAFETY: as for `Same`, for the key, which the
                            // new slot owns once the old one is tagged
                            // MOVED; until then `placed` gives the slot up
                            // (owning nothing) if the move ends any other
                            // way.
                            let key = unsafe { ptr::read(&entry.0) };
                            placed.index = Some(new.put(hash, (key, copy)));
                        }
                        Some(slot) => {
                            // SAFETY: this thread filled and published the
                            // slot; the table lives while `new` does.
                            let (_, placed_copy) = unsafe { new.entry(slot) };
                            placed_copy.refresh(copy);
                        }
                    }
                    if entry.1.forward(seal) {
                        // The copy stands for the client now.
                        placed.index = None;
                        break;
                    }
                }
            }
        }
        MOVED
    }

    /// Publishes `new` as the shard's table, the old one's entries all
    /// moved or left behind, and retires the old one. Holding the lock.
    fn finish<'g>(
        &self,
        shard: &Shard<K, V>,
        old: Shared<'g, Table<K, V>>,
        new: Shared<'g, Table<K, V>>,
        guard: &'g Guard,
    ) -> &'g Table<K, V> {
        // Release: pairs with the Acquire load in `Map::current`, publishing
        // the new table and every slot moved into it.
        shard.table.store(new, Ordering::Release);
        // Unreachable from the shard now; readers that still hold it reach
        // the new one through its link. Freed by a writer of this map once
        // every guard pinned before this point is dropped (no reader pinned
        // later can reach it).
        self.retired.retire(old, guard);
        // SAFETY: as in `rebuild`.
        unsafe { new.deref() }
    }

    /// Finishes a rebuild that a panic (in a key's `Hash`, or a quota
    /// change's clock) left half done: `old` is the shard's table, linked
    /// to the new one. Every entry left moves as a plain rebuild moves it,
    /// dead ones included (see [`Map::move_entry`]). Holding the lock.
    pub(super) fn finish_abandoned<'g>(
        &self,
        shard: &Shard<K, V>,
        old: &'g Table<K, V>,
        guard: &'g Guard,
    ) -> &'g Table<K, V> {
        let new = old.next(guard).expect("a rebuild was under way");
        self.settle_claims(old);
        // Into the slots the rebuild reserved when it linked `new`, as it
        // would have.
        self.move_all(old, new, None, &mut V::relocate);
        // Relaxed: the lock orders this after the panicked writer's store.
        let old_shared = shard.table.load(Ordering::Relaxed, guard);
        self.finish(shard, old_shared, Shared::from(ptr::from_ref(new)), guard)
    }
}
