//! Walks over the map's entries, shard by shard, each under its shard's
//! lock: a full sweep's pass (`retain`), a quota change's rebuild of every
//! shard, and the sweep slices and samples that go on from a cursor.

#![allow(unsafe_code)]

use core::hash::{BuildHasher, Hash};
use core::ptr;

use crossbeam_epoch as epoch;

use super::table::{lowest, Table, DELETED, FULL, HIGH, LANES, ONE_LIVE, SHARDS, SHARD_BITS};
use super::Map;
use crate::cell::{Mortal, Relocation};
use crate::sync::Ordering;

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
    pub(super) shard: usize,
    pub(super) slot: usize,
}

impl<K, V, S> Map<K, V, S>
where
    K: Hash + Eq + Send + Sync,
    V: Mortal + Send + Sync,
    S: BuildHasher,
{
    /// Visits every live entry, removing those for which `remove` (run
    /// under the shard's lock) is true, then rebuilds each shard whose
    /// table holds removed entries: with `small` 0 (a full sweep), every
    /// one; otherwise those left less than a quarter full, unless the table
    /// has at most `small` slots
    /// (the pass a new client makes every horizon,
    /// `Limiter::sweep_for_newcomer`, would otherwise rebuild the small
    /// tables of a map of short-lived clients on every pass, only for new
    /// clients to grow them again), and those it leaves more than half
    /// dead ([`Map::shed`]: with `small` at most 32, as the pass's is,
    /// every one, since such a table uses more than 28 slots, so has more
    /// than 32). `on_dead` is as in [`Map::insert`].
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
            let mut held = self.lock(shard, &guard);
            let Some(table) = Self::current(shard, &guard) else {
                continue;
            };
            for (group, ctrl) in table.ctrl.iter().enumerate() {
                // Acquire: the keys of the FULL lanes read (an insert with
                // no lock may have published one). Only this thread, holding
                // the lock, changes a FULL lane.
                let word = ctrl.load(Ordering::Acquire);
                let mut live = word & HIGH;
                let mut gone = 0;
                while live != 0 {
                    let lane = lowest(live);
                    live &= live - 1;
                    // SAFETY: the slot is FULL.
                    let (key, value) = unsafe { table.entry(group * LANES + lane) };
                    if remove(key, value) {
                        gone |= 0x80 << (lane * 8);
                        removed += 1;
                    }
                }
                if gone != 0 {
                    removing();
                    // DELETED in every lane removed.
                    table.retag(group, gone, (gone >> 7) * u64::from(DELETED));
                    table.uncount(u64::from(gone.count_ones()) * ONE_LIVE);
                }
            }
            // A full sweep (`small` 0) rebuilds every table holding removed
            // entries, so that their keys go; the pass only those left
            // under a quarter full or more than half dead (see
            // `Map::shed`).
            let counts = table.counts();
            if counts.used > counts.live
                && table.capacity() > small
                && (small == 0 || counts.live * 4 < table.capacity() || counts.half_dead())
            {
                let room_for = counts.live;
                self.rebuild(
                    shard,
                    &mut held,
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
            let mut held = self.lock(shard, &guard);
            let Some(table) = Self::current(shard, &guard) else {
                continue;
            };
            let room_for = table.counts().live;
            self.rebuild(
                shard,
                &mut held,
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
        on_dead: impl FnMut(&V),
    ) -> u64 {
        let visit = |key: &K, value: &V| {
            if visit(key, value) {
                Visit::Remove
            } else {
                Visit::Keep
            }
        };
        self.walk(cursor, budget, false, visit, |_, _| false, on_dead)
            .0
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
        on_dead: impl FnMut(&V),
    ) -> (u64, bool) {
        self.walk(cursor, budget, true, visit, pick, on_dead)
    }

    /// The walk of [`Map::sweep_slice`] and [`Map::sample`]: with `round`,
    /// at the end of the map it goes on from the start, up to where it
    /// began. A shard its removals (or the pick's) leave more than half
    /// dead is rebuilt ([`Map::shed`], calling `on_dead` as
    /// [`Map::insert`] does) before the walk lets its lock go for good:
    /// as it leaves the shard, or, for one holding the entry ranked lowest
    /// so far, at the end, once the pick is made.
    fn walk(
        &self,
        cursor: &mut Cursor,
        budget: u64,
        round: bool,
        mut visit: impl FnMut(&K, &V) -> Visit,
        pick: impl FnOnce(&K, &V) -> bool,
        mut on_dead: impl FnMut(&V),
    ) -> (u64, bool) {
        const _: () = assert!(SHARDS <= 64, "a shard's bit in a u64");
        let guard = epoch::pin();
        // Shards left more than half dead while they held the entry
        // ranked lowest then: rebuilt at the end, once the pick is made.
        let mut unshed = 0_u64;
        // The pick, if the walk made it in the shard it ended in (once).
        let mut picked = None;
        let mut pick = Some(pick);
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
                let mut held = self.lock(shard, &guard);
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
                    // Acquire: as in `retain`.
                    let word = table.ctrl[group].load(Ordering::Acquire);
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
                                table.uncount(ONE_LIVE);
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
                        let still = ptr::eq(table, was) && table.tag(index) & FULL != 0;
                        let pick = pick.take().expect("picked once, at the walk's end");
                        picked = Some(still && Self::pick(table, index, pick));
                        unshed &= !(1 << cursor.shard);
                    }
                    self.shed(shard, &mut held, &mut on_dead, &guard);
                    break 'walk;
                }
                if best.is_some_and(|(_, at, ..)| at == cursor.shard) {
                    if table.counts().half_dead() {
                        unshed |= 1 << cursor.shard;
                    }
                } else {
                    self.shed(shard, &mut held, &mut on_dead, &guard);
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
        let picked = match (picked, best) {
            (Some(picked), _) => picked,
            (None, None) => false,
            (None, Some((_, at, was, index))) => {
                // A shard the walk has left: lock it again.
                let shard = &self.shards[at];
                let mut held = self.lock(shard, &guard);
                let pick = pick.take().expect("picked once, at the walk's end");
                let picked = Self::current(shard, &guard).is_some_and(|table| {
                    ptr::eq(table, was)
                        && table.tag(index) & FULL != 0
                        && Self::pick(table, index, pick)
                });
                self.shed(shard, &mut held, &mut on_dead, &guard);
                unshed &= !(1 << at);
                picked
            }
        };
        // Shards left half dead under an entry ranked lowest then, and
        // outranked since.
        while unshed != 0 {
            let shard = &self.shards[unshed.trailing_zeros() as usize];
            unshed &= unshed - 1;
            let mut held = self.lock(shard, &guard);
            self.shed(shard, &mut held, &mut on_dead, &guard);
        }
        (removed, picked)
    }

    /// Removes the entry in slot `index` of `table` if `pick` is true of
    /// it. The caller holds the shard's lock, `table` is its current table,
    /// and the slot is `FULL`.
    fn pick(table: &Table<K, V>, index: usize, pick: impl FnOnce(&K, &V) -> bool) -> bool {
        // SAFETY: the slot is FULL (the caller's promise), and stays so
        // while the caller holds the shard's lock.
        let (key, value) = unsafe { table.entry(index) };
        let gone = pick(key, value);
        if gone {
            table.mark(index, DELETED);
            table.uncount(ONE_LIVE);
        }
        gone
    }
}
