//! The keyed store itself: the map, the count of room its entries hold
//! under a cap, and the sweeps that forget idle clients a slice at a time
//! or all at once.

use core::borrow::Borrow;
use core::cell::Cell;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use std::sync::TryLockError;

use super::map::{Cursor, Map, Miss};
use super::{DefaultHasher, Index, Lapse, Purge};
use crate::cell::{Mortal, Relocation};
// Mutex: only the sweep cursor, only ever try_lock-ed on the insert and
// sweep paths; a check never touches it (see `Store::cursor`).
use crate::sync::{AtomicU64, Mutex, Ordering};

/// The keyed store: the map, and the count of room its entries hold.
pub(crate) struct Store<K, V, S: BuildHasher = DefaultHasher> {
    map: Map<K, V, S>,
    /// Units of room taken: one per live or evicted entry (an evicted one
    /// gives its unit back just before it leaves the map, under the map's
    /// lock for its shard), plus units taken for a cell about to come
    /// alive. Unborn and refused entries hold none. A cap on this count is a
    /// hard cap on the clients tracked. Kept only under a cap: without one,
    /// a shared count written by every new client would be pure cost, and
    /// `len()` sums the table's shards instead.
    held: AtomicU64,
    /// Whether the limiter has a cap, so that `held` is kept.
    capped: bool,
    /// Where the next sweep slice starts. Taken only with `try_lock`, by
    /// sweeps, never by a check.
    cursor: Mutex<Cursor>,
}

impl<K, V, S> Index<K, V> for Store<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Mortal + Send + Sync + 'static,
    S: BuildHasher,
{
    #[inline]
    fn with<Q, R, F>(&self, key: &Q, f: F) -> Result<R, F>
    where
        F: FnOnce(&V) -> R,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(key, f)
    }

    type Miss = Miss;

    #[inline]
    fn lookup<Q, R, F>(&self, key: &Q, f: F) -> Result<R, (F, Miss)>
    where
        F: FnOnce(&V) -> R,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.lookup(key, f)
    }

    /// A rebuild on the way gives back the room of the dead entries it
    /// leaves behind (see [`Store::leaving`]), those `lapsed` retires
    /// included.
    fn insert<R>(
        &self,
        miss: Option<&Miss>,
        key: K,
        value: V,
        lapsed: Option<impl Lapse<V>>,
        f: impl FnOnce(&V) -> R,
    ) -> Result<R, V> {
        self.map.insert(
            miss,
            key,
            value,
            lapsed,
            |cell| {
                self.leaving(cell, false);
            },
            f,
        )
    }
}

impl<K, V, S> Purge<K, V> for Store<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Mortal + Send + Sync + 'static,
    S: BuildHasher,
{
    /// Gives back the room the removed cell held (see [`Store::leaving`]).
    fn remove_if<Q, F>(&self, key: &Q, condition: F) -> bool
    where
        F: FnOnce(&V) -> bool,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.remove_if(key, |cell| {
            let gone = condition(cell);
            if gone {
                self.leaving(cell, false);
            }
            gone
        })
    }

    /// As `remove_if`; an entry left in place keeps its room until it
    /// leaves (see [`Map::try_remove_if`]).
    fn try_remove_if<Q, F>(&self, key: &Q, condition: F) -> Option<bool>
    where
        F: FnOnce(&V) -> bool,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.try_remove_if(key, |cell| {
            let gone = condition(cell);
            if gone {
                self.leaving(cell, false);
            }
            gone
        })
    }
}

/// What a sweep slice did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Swept {
    /// Whether the caller was handed a removed entry's unit of room.
    pub(crate) kept: bool,
}

impl<K, V, S> Store<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Mortal + Send + Sync + 'static,
    S: BuildHasher,
{
    /// An empty store; `capped` if the limiter caps its clients (see
    /// `held`).
    pub(crate) fn with_hasher(hasher: S, capped: bool) -> Self {
        Self {
            map: Map::with_hasher(hasher),
            held: AtomicU64::new(0),
            capped,
            cursor: Mutex::new(Cursor::default()),
        }
    }

    /// Puts `relocate`'s answer in place of every entry, shard by shard
    /// (see [`Map::rebuild_all`]); an entry found dead on the way leaves
    /// and gives back its room.
    pub(crate) fn rebuild_all(&self, relocate: impl FnMut(&V) -> Relocation<V>) {
        self.map.rebuild_all(relocate, |cell| {
            self.leaving(cell, false);
        });
    }

    /// `key`'s hash under the store's randomly seeded hasher: unpredictable
    /// to clients, different for every store.
    pub(crate) fn hash_of<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.map.hash(key)
    }

    /// Runs `f` on the cell for `key`, if the key has one. Allocates nothing,
    /// takes no lock and never waits. A cell that reads as dead is looked
    /// past once: if a table rebuild moved it just after the lookup found
    /// it, the second lookup finds the live copy; a cell still dead the
    /// second time is the client's, and `f` runs on it.
    #[inline]
    pub(crate) fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut f = Some(f);
        let mut dead: Option<*const V> = None;
        loop {
            let found = self.with(key, |cell| {
                let at = core::ptr::from_ref(cell);
                if cell.is_dead() && dead != Some(at) {
                    return Err(at);
                }
                Ok((f.take().expect("runs once"))(cell))
            });
            match found {
                Ok(Ok(answer)) => return Some(answer),
                Ok(Err(at)) => dead = Some(at),
                Err(_) => return None,
            }
        }
    }

    /// The entry holding `cell` is about to leave the map, and the caller
    /// holds its shard's lock: gives back the unit of room the cell holds,
    /// if any, or with `keep` hands it to the caller. Called before the
    /// removal, so a thread that then finds the entry gone (having taken
    /// that lock after the removal) also finds the room free. True iff the
    /// caller now holds the unit.
    fn leaving(&self, cell: &V, keep: bool) -> bool {
        if !cell.holds_room() {
            return false;
        }
        if !keep {
            self.release(1);
        }
        keep
    }

    /// Takes a unit of room if fewer than `max` are taken; `None` for no
    /// cap. The unit must then go to a cell coming alive, or back through
    /// [`Store::release`].
    #[inline]
    pub(crate) fn reserve(&self, max: Option<u64>) -> bool {
        // No cap, no count (see `held`).
        let Some(max) = max else {
            return true;
        };
        // Look before writing, so that a flood against a full map only
        // reads; then take a unit only from a count below `max`, so the
        // count never goes past the cap, not even for a moment (`len`
        // reads it). Relaxed: the loaded value is only a guess for the
        // exchange, which decides.
        let mut held = self.held.load(Ordering::Relaxed);
        while held < max {
            // Release (success): publishes the entry this unit is taken for
            // (inserted before it) to whoever sees the unit taken
            // (`is_full`'s Acquire). Relaxed (failure): a fresh guess only.
            match self.held.compare_exchange_weak(
                held,
                held + 1,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => held = now,
            }
        }
        false
    }

    /// Whether no unit of room is left under `max`.
    pub(crate) fn is_full(&self, max: Option<u64>) -> bool {
        // Acquire: pairs with the Release of every unit taken in `reserve`
        // (and, through the release sequence, with later read-modify-writes
        // of the count), so a caller that sees a unit taken also sees the
        // entry it was taken for: a first request turned away at a full cap
        // looks the client up again after this, and finds a racing first
        // request's entry (`Newcomer::turn_away`).
        max.is_some_and(|max| self.held.load(Ordering::Acquire) >= max)
    }

    /// Removes `key`'s entry if `condition` holds of its cell, handing the
    /// unit of room it held to the caller instead of giving it back (see
    /// `keep_one` in [`Store::sweep_slice`]). True iff the caller now holds
    /// a unit.
    pub(crate) fn take_if<Q>(&self, key: &Q, condition: impl FnOnce(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut room = false;
        let removed = self.map.remove_if(key, |cell| {
            let gone = condition(cell);
            room = gone && self.leaving(cell, true);
            gone
        });
        removed && room
    }

    /// The number of clients tracked (plus any coming alive at this
    /// instant).
    pub(crate) fn len(&self) -> usize {
        let held = if self.capped {
            // Relaxed: a count that publishes nothing.
            self.held.load(Ordering::Relaxed)
        } else {
            self.map.len()
        };
        usize::try_from(held).unwrap_or(usize::MAX)
    }

    /// Visits every entry once and removes those for which `evict` is true
    /// (it must retire the cell first) or whose cell is already dead, giving
    /// back the room of each shard's removed entries before that shard's
    /// lock is released, then shrinks tables left mostly empty. Returns how
    /// many were removed.
    pub(crate) fn sweep(&self, mut evict: impl FnMut(&V) -> bool) -> u64 {
        // Units to give back for the shard being swept: one shared
        // `fetch_sub` per shard instead of one per entry. Still before the
        // shard's lock is released, so a thread that finds one of these
        // entries gone (having taken that lock after the removal) also
        // finds its room free, as `leaving` promises.
        let freed = Cell::new(0);
        let leaving = |cell: &V| {
            if cell.holds_room() {
                freed.set(freed.get() + 1);
            }
        };
        self.map.retain(
            |_, cell| {
                let gone = evict(cell) || cell.is_dead();
                if gone {
                    leaving(cell);
                }
                gone
            },
            leaving,
            || self.release(freed.replace(0)),
        )
    }

    /// Visits up to `budget` entries from where the last slice stopped,
    /// removing those for which `visit` is true (it must retire the cell
    /// first) or whose cell is already dead; the next slice starts at the
    /// beginning once one reaches the end. Returns what it did, or `None` if
    /// another thread is sweeping a slice (this one then does nothing).
    ///
    /// With `keep_one`, the first removed entry's unit of room is not given
    /// back but handed to the caller, as [`Store::reserve`] would have: a
    /// new client then takes the room its own eviction made, which no other
    /// thread can take first.
    pub(crate) fn sweep_slice(
        &self,
        budget: u64,
        mut visit: impl FnMut(&K, &V) -> bool,
        keep_one: bool,
    ) -> Option<Swept> {
        let mut cursor = match self.cursor.try_lock() {
            Ok(cursor) => cursor,
            Err(TryLockError::WouldBlock) => return None,
            // A panic in `visit` left the cursor at some position: still
            // valid.
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        };
        let mut kept = false;
        self.map.sweep_slice(&mut cursor, budget, |key, cell| {
            let gone = visit(key, cell) || cell.is_dead();
            if gone && self.leaving(cell, keep_one && !kept) {
                kept = true;
            }
            gone
        });
        drop(cursor);
        Some(Swept { kept })
    }
}

impl<K, V, S: BuildHasher> Store<K, V, S> {
    /// Gives back `n` units of room.
    pub(crate) fn release(&self, n: u64) {
        if self.capped && n > 0 {
            // Relaxed: a count that publishes nothing (the Release half of
            // `reserve` is for units taken, not given back).
            self.held.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

impl<K, V, S: BuildHasher> fmt::Debug for Store<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Reading a concurrent map's contents in Debug would race with
        // checks; print the shape only.
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::StateCell;
    use crate::store::NoLapse;

    fn capped() -> Store<u64, StateCell, foldhash::fast::FixedState> {
        Store::with_hasher(foldhash::fast::FixedState::with_seed(3), true)
    }

    /// Inserts a live cell for `key`, holding a unit of room.
    fn admit(store: &Store<u64, StateCell, foldhash::fast::FixedState>, key: u64) {
        assert!(store.reserve(Some(10)));
        assert!(store
            .insert(None, key, StateCell::new(0), None::<NoLapse>, |_| ())
            .is_ok());
    }

    #[test]
    fn a_slice_removes_an_entry_already_dead_and_gives_back_its_room() {
        let store = capped();
        admit(&store, 1);
        admit(&store, 2);
        // Client 1 is evicted, but its entry is still in the map (its
        // evictor has not removed it yet).
        assert_eq!(store.get(&1, StateCell::retire), Some(true));
        assert_eq!(store.len(), 2, "an evicted entry holds its room");
        // The slice's visitor forgets no one: the dead entry goes anyway.
        let swept = store.sweep_slice(100, |_, _| false, false);
        assert!(swept.is_some_and(|swept| !swept.kept));
        assert_eq!(store.len(), 1, "its room came back");
        assert_eq!(store.get(&1, StateCell::load), None);
        assert_eq!(store.get(&2, StateCell::load), Some(0));
    }

    #[test]
    fn reserve_never_counts_past_the_cap() {
        let store = capped();
        for _ in 0..3 {
            assert!(store.reserve(Some(3)));
        }
        assert!(!store.reserve(Some(3)));
        assert_eq!(store.len(), 3);
        assert!(store.is_full(Some(3)));
        store.release(1);
        assert!(!store.is_full(Some(3)));
        assert!(store.reserve(Some(3)));
        assert_eq!(store.len(), 3);
    }

    #[test]
    fn take_if_hands_over_the_unit_of_the_entry_it_removes_and_only_that() {
        let store = capped();
        admit(&store, 1);
        admit(&store, 2);
        // Absent, or the condition false: nothing removed, no unit.
        assert!(!store.take_if(&3, |_| true));
        assert!(!store.take_if(&2, |_| false));
        assert_eq!(store.get(&2, StateCell::load), Some(0));
        // A dead entry holding room: removed, its unit now the caller's (the
        // count still holds it).
        assert_eq!(store.get(&1, StateCell::retire), Some(true));
        assert!(store.take_if(&1, Mortal::is_dead));
        assert_eq!(store.get(&1, StateCell::load), None);
        assert_eq!(store.len(), 2, "the unit was handed over, not given back");
        store.release(1);
        // A refused entry holds none: removed, but no unit to hand over.
        let refused = StateCell::new(crate::algorithm::UNBORN);
        assert_eq!(refused.refuse(), Ok(()));
        assert!(store
            .insert(None, 4, refused, None::<NoLapse>, |_| ())
            .is_ok());
        assert!(!store.take_if(&4, Mortal::is_dead));
        assert_eq!(store.get(&4, StateCell::load), None, "removed all the same");
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn a_full_sweep_removes_the_entries_it_retires_and_those_already_dead() {
        let store = capped();
        for key in 1..=4 {
            assert!(store.reserve(Some(10)));
            assert!(store
                .insert(None, key, StateCell::new(key), None::<NoLapse>, |_| ())
                .is_ok());
        }
        // Client 1 is evicted, its entry still in the map; the sweep
        // retires client 2; clients 3 and 4 stay.
        assert_eq!(store.get(&1, StateCell::retire), Some(true));
        let removed = store.sweep(|cell| cell.load() == 2 && cell.retire());
        assert_eq!(removed, 2);
        assert_eq!(store.len(), 2, "both removed entries gave their room back");
        assert_eq!(store.get(&1, StateCell::load), None);
        assert_eq!(store.get(&2, StateCell::load), None);
        assert_eq!(store.get(&3, StateCell::load), Some(3));
        assert_eq!(store.get(&4, StateCell::load), Some(4));
    }

    #[test]
    fn a_slice_that_keeps_one_hands_over_the_first_unit_and_gives_back_the_rest() {
        let store = capped();
        for key in 1..=3 {
            admit(&store, key);
        }
        assert_eq!(store.get(&1, StateCell::retire), Some(true));
        assert_eq!(store.get(&2, StateCell::retire), Some(true));
        let swept = store.sweep_slice(100, |_, _| false, true);
        assert!(swept.is_some_and(|swept| swept.kept), "a unit handed over");
        // Of the two removed entries' units, one is the caller's (still
        // counted), the other given back.
        assert_eq!(store.len(), 2);
        assert_eq!(store.get(&1, StateCell::load), None);
        assert_eq!(store.get(&2, StateCell::load), None);
        assert_eq!(store.get(&3, StateCell::load), Some(0));
    }
}
