//! The keyed store itself: the map, the count of room its entries hold
//! under a cap, and the sweeps that forget idle clients a slice at a time
//! or all at once.

use core::borrow::Borrow;
use core::cell::Cell;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use std::sync::{MutexGuard, TryLockError};

use super::map::{Cursor, Map, Miss, Visit};
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
    ) -> Result<R, Option<V>> {
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
    /// Gives back the room the removed cell held, and that of any dead
    /// entry a rebuild on the way leaves behind (see [`Store::leaving`]).
    fn remove_if<Q, F>(&self, key: &Q, condition: F) -> bool
    where
        F: FnOnce(&V) -> bool,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.remove_if(key, condition, |cell| {
            self.leaving(cell, false);
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
        self.map.try_remove_if(key, condition, |cell| {
            self.leaving(cell, false);
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
    /// takes no lock and never waits. A cell found forwarded (a table
    /// rebuild moved it just after the lookup found it) is looked past:
    /// the next lookup, made after the forward, follows the table's link to
    /// the live copy. Any other cell is the client's, dead or alive, and
    /// `f` runs on it.
    #[inline]
    pub(crate) fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut f = Some(f);
        loop {
            let found = self.with(key, |cell| {
                (!cell.is_forwarded()).then(|| (f.take().expect("runs once"))(cell))
            });
            match found {
                Ok(Some(answer)) => return Some(answer),
                Ok(None) => {}
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

    /// The removed entries the map's tables still hold (see `Map::removed`).
    #[cfg(feature = "metrics")]
    pub(crate) fn awaiting_removal(&self) -> u64 {
        self.map.removed()
    }

    /// Frees the retired tables (and the forgotten keys they hold),
    /// helping the epoch collector along, and waiting (sleeping, for up to
    /// `Map::PATIENCE`) for the lookups in flight that could still read
    /// them: for a full sweep, which gives back before it returns the
    /// memory of what it forgot. Runs keys' `Drop`; holds no lock while it
    /// waits, so it holds up no other thread.
    pub(crate) fn reclaim(&self) {
        self.map.reclaim_waiting();
    }

    /// Visits every entry once and removes those for which `evict` is true
    /// (it must retire the cell first) or whose cell is already dead, giving
    /// back the room of each group of slots' removed entries in one step,
    /// before they are removed, then shrinks tables left mostly empty,
    /// except those of at most `small` slots (see `Map::retain`). Returns
    /// how many were removed.
    pub(crate) fn sweep(&self, small: usize, mut evict: impl FnMut(&V) -> bool) -> u64 {
        // Units to give back for the group of slots being swept: one shared
        // `fetch_sub` per group with removals instead of one per entry.
        // Still before the group's removals are made, so a thread that
        // finds one of these entries gone (a lookup, which takes no lock)
        // also finds its room free, as `leaving` promises.
        let freed = Cell::new(0);
        self.map.retain(
            small,
            |_, cell| {
                let gone = evict(cell) || cell.is_dead();
                if gone && cell.holds_room() {
                    freed.set(freed.get() + 1);
                }
                gone
            },
            // A dead entry a shrinking rebuild leaves behind gives its room
            // back at once, as an insert's rebuild does.
            |cell| {
                self.leaving(cell, false);
            },
            || self.release(freed.replace(0)),
        )
    }

    /// Visits up to `budget` entries from where the last slice stopped,
    /// removing those for which `visit` is true (it must retire the cell
    /// first) or whose cell is already dead; the next slice starts at the
    /// beginning once one reaches the end. Returns whether it ran, or
    /// `None` if another thread is sweeping a slice (this one then does
    /// nothing).
    pub(crate) fn sweep_slice(&self, budget: u64, mut visit: impl FnMut(&V) -> bool) -> Option<()> {
        let mut cursor = self.cursor()?;
        self.map.sweep_slice(
            &mut cursor,
            budget,
            |_, cell| {
                let gone = visit(cell) || cell.is_dead();
                if gone {
                    self.leaving(cell, false);
                }
                gone
            },
            |cell| {
                self.leaving(cell, false);
            },
        );
        Some(())
    }

    /// Visits up to `budget` entries from `cursor` (a position of the
    /// caller's own: see [`Store::cursor_at`]), going round the map at
    /// most once and leaving the cursor past the last entry visited,
    /// removing those
    /// for which `visit` answers [`Visit::Remove`] (it must retire the cell
    /// first) or whose cell is already dead; then, unless it removed an
    /// entry holding room, runs `pick` on the entry `visit` ranked lowest
    /// ([`Visit::Rank`]), under its shard's lock, and removes the entry if
    /// `pick` is true (it must retire the cell first). Takes no shared
    /// cursor: threads sampling at once meet only on a shard's lock.
    ///
    /// The first removed entry's unit of room is not given back but handed
    /// to the caller, as [`Store::reserve`] would have (`Swept::kept`): a
    /// new client then takes the room its own eviction made, which no other
    /// thread can take first.
    pub(crate) fn sample(
        &self,
        cursor: &mut Cursor,
        budget: u64,
        mut visit: impl FnMut(&V) -> Visit,
        pick: impl FnOnce(&K, &V) -> bool,
    ) -> Swept {
        let kept = Cell::new(false);
        let keep = |cell: &V| {
            if self.leaving(cell, !kept.get()) {
                kept.set(true);
            }
        };
        let _ = self.map.sample(
            cursor,
            budget,
            |_, cell| match visit(cell) {
                Visit::Remove => {
                    keep(cell);
                    Visit::Remove
                }
                _ if cell.is_dead() => {
                    keep(cell);
                    Visit::Remove
                }
                visit => visit,
            },
            |key, cell| {
                // Room is already ours: forget no one.
                if kept.get() {
                    return false;
                }
                let gone = pick(key, cell) || cell.is_dead();
                if gone {
                    keep(cell);
                }
                gone
            },
            // A dead entry a rebuild leaves behind gives its room back.
            |cell| {
                self.leaving(cell, false);
            },
        );
        Swept { kept: kept.get() }
    }

    /// A position drawn from `draw` (uniform bits): a shard, and a slot in
    /// proportion to its table.
    pub(crate) fn cursor_at(&self, draw: u64) -> Cursor {
        self.map.cursor_at(draw)
    }

    /// The sweep cursor, unless another thread's slice holds it.
    fn cursor(&self) -> Option<MutexGuard<'_, Cursor>> {
        match self.cursor.try_lock() {
            Ok(cursor) => Some(cursor),
            Err(TryLockError::WouldBlock) => None,
            // A panic in a visitor left the cursor at some position: still
            // valid.
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        }
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
        assert!(store.sweep_slice(100, |_| false).is_some());
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

    /// Admits clients 1 to `n`, client `k`'s word being `10 * k`.
    fn admit_ranked(store: &Store<u64, StateCell, foldhash::fast::FixedState>, n: u64) {
        for key in 1..=n {
            assert!(store.reserve(Some(10_000)));
            assert!(store
                .insert(None, key, StateCell::new(10 * key), None::<NoLapse>, |_| ())
                .is_ok());
        }
    }

    /// Draws spread over every shard and over the slots of each.
    fn draws() -> impl Iterator<Item = u64> {
        (0..=u64::from(u8::MAX)).map(|i| i.wrapping_mul(0x0101_0101_0101_0101 << 2) ^ (i << 24))
    }

    #[test]
    fn a_sample_goes_round_the_map_once_from_any_position() {
        let store = capped();
        admit_ranked(&store, 40);
        for draw in draws().chain([0, u64::MAX]) {
            let mut seen = Vec::new();
            let swept = store.sample(
                &mut store.cursor_at(draw),
                1_000,
                |cell| {
                    seen.push(cell.load());
                    Visit::Keep
                },
                |_, _| unreachable!("nothing ranked"),
            );
            assert!(!swept.kept);
            seen.sort_unstable();
            let all: Vec<u64> = (1..=40).map(|key| 10 * key).collect();
            assert_eq!(seen, all, "each entry once, from {draw:#x}");
        }
        // A budget: so many entries, each once.
        for draw in draws() {
            let mut seen = Vec::new();
            let _ = store.sample(
                &mut store.cursor_at(draw),
                7,
                |cell| {
                    seen.push(cell.load());
                    Visit::Keep
                },
                |_, _| false,
            );
            let count = seen.len();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!((count, seen.len()), (7, 7), "from {draw:#x}");
        }
    }

    #[test]
    fn samples_from_one_cursor_go_on_where_the_last_ended() {
        let store = capped();
        admit_ranked(&store, 40);
        for draw in draws() {
            let mut cursor = store.cursor_at(draw);
            let mut seen = Vec::new();
            for _ in 0..8 {
                let _ = store.sample(
                    &mut cursor,
                    5,
                    |cell| {
                        seen.push(cell.load());
                        Visit::Keep
                    },
                    |_, _| false,
                );
            }
            seen.sort_unstable();
            let all: Vec<u64> = (1..=40).map(|key| 10 * key).collect();
            assert_eq!(seen, all, "one lap in eight samples, from {draw:#x}");
        }
    }

    #[test]
    fn a_cursor_from_another_map_still_goes_round_once() {
        // A thread's position serves every limiter it evicts for: one
        // taken in a big map may point past the end of a small map's
        // tables.
        let big = capped();
        admit_ranked(&big, 3_000);
        let small = capped();
        admit_ranked(&small, 5);
        for draw in draws() {
            let mut cursor = big.cursor_at(draw);
            let mut seen = Vec::new();
            let _ = small.sample(
                &mut cursor,
                100,
                |cell| {
                    seen.push(cell.load());
                    Visit::Keep
                },
                |_, _| false,
            );
            seen.sort_unstable();
            assert_eq!(seen, [10, 20, 30, 40, 50], "from {draw:#x}");
        }
    }

    #[test]
    fn a_sample_never_picks_an_entry_removed_since_it_was_ranked() {
        // The entry ranked first is removed by another remover while the
        // walk is in other shards; going round the map, the walk may end in
        // that entry's shard, under a lock taken afresh.
        for draw in draws() {
            let store = capped();
            admit_ranked(&store, 40);
            let mut first = None;
            let mut offered = None;
            let swept = store.sample(
                &mut store.cursor_at(draw),
                1_000,
                |cell| match first {
                    None => {
                        first = Some(cell.load() / 10);
                        Visit::Rank(0)
                    }
                    Some(key) => {
                        // Only from another shard than its own, whose lock
                        // this walk does not hold now.
                        let bits = crate::store::map::SHARDS.trailing_zeros();
                        let shard = |key: u64| store.hash_of(&key) >> (64 - bits);
                        if shard(cell.load() / 10) != shard(key)
                            && store.get(&key, StateCell::retire) == Some(true)
                        {
                            assert!(store.remove_if(&key, Mortal::is_dead));
                        }
                        Visit::Keep
                    }
                },
                |key, _| {
                    offered = Some(*key);
                    true
                },
            );
            assert_eq!(offered, None, "from {draw:#x}");
            assert!(!swept.kept);
            assert_eq!((store.len(), store.map.len()), (39, 39), "from {draw:#x}");
        }
    }

    #[test]
    fn a_sample_picks_the_entry_ranked_lowest_and_hands_over_its_unit() {
        let store = capped();
        admit_ranked(&store, 5);
        // The whole map, ranked by word, from anywhere: client 1, ranked
        // lowest, is offered (and declined, so nothing changes).
        for draw in draws() {
            let mut offered = None;
            let swept = store.sample(
                &mut store.cursor_at(draw),
                100,
                |cell| Visit::Rank(cell.load()),
                |key, _| {
                    offered = Some(*key);
                    false
                },
            );
            assert!(!swept.kept);
            assert_eq!(offered, Some(1), "from {draw:#x}");
        }
        assert_eq!((store.len(), store.map.len()), (5, 5));
        // Taken: removed, its unit the caller's.
        let swept = store.sample(
            &mut store.cursor_at(7),
            100,
            |cell| Visit::Rank(cell.load()),
            |_, cell| cell.retire(),
        );
        assert!(swept.kept, "its unit handed over");
        assert_eq!(store.get(&1, StateCell::load), None, "removed");
        assert_eq!(store.len(), 5, "the unit was handed over, not given back");
        assert_eq!(store.map.len(), 4);
    }

    #[test]
    fn a_sample_picks_in_the_shard_it_ends_in_or_in_one_it_has_left() {
        for draw in draws() {
            let store = capped();
            admit_ranked(&store, 5);
            // Three entries, the third ranked alone (the walk ends in its
            // shard, and picks it there), or the first (usually in a shard
            // the walk has left, locked again).
            for ranked in [3, 1] {
                let mut seen = 0;
                let mut wanted = None;
                let mut picked = None;
                let swept = store.sample(
                    &mut store.cursor_at(draw),
                    3,
                    |cell| {
                        seen += 1;
                        if seen == ranked {
                            wanted = Some(cell.load() / 10);
                            Visit::Rank(0)
                        } else {
                            Visit::Keep
                        }
                    },
                    |key, cell| {
                        picked = Some(*key);
                        cell.retire()
                    },
                );
                assert!(swept.kept);
                assert_eq!(picked, wanted, "from {draw:#x}");
                assert_eq!(
                    picked.and_then(|key| store.get(&key, StateCell::load)),
                    None
                );
                store.release(1);
            }
            assert_eq!((store.len(), store.map.len()), (3, 3));
        }
    }

    #[test]
    fn a_sample_that_removes_an_entry_holding_room_picks_no_one() {
        let store = capped();
        admit_ranked(&store, 4);
        // Client 2 is evicted, its entry still in the map: the sample takes
        // its unit, and forgets none of the live ones it ranked.
        assert_eq!(store.get(&2, StateCell::retire), Some(true));
        let mut picks = 0;
        let swept = store.sample(
            &mut store.cursor_at(0),
            100,
            |cell| Visit::Rank(cell.load()),
            |_, _| {
                picks += 1;
                true
            },
        );
        assert!(swept.kept);
        assert_eq!(picks, 0);
        assert_eq!(store.get(&2, StateCell::load), None);
        for key in [1, 3, 4] {
            assert_eq!(store.get(&key, StateCell::load), Some(10 * key));
        }
        assert_eq!(store.len(), 4, "the unit was handed over");
    }

    #[test]
    fn a_sample_hands_over_only_the_first_removed_unit_and_gives_back_the_rest() {
        let store = capped();
        for key in 1..=3 {
            admit(&store, key);
        }
        assert_eq!(store.get(&1, StateCell::retire), Some(true));
        assert_eq!(store.get(&2, StateCell::retire), Some(true));
        let swept = store.sample(&mut store.cursor_at(0), 100, |_| Visit::Keep, |_, _| true);
        assert!(swept.kept, "a unit handed over");
        // Of the two removed entries' units, one is the caller's (still
        // counted), the other given back.
        assert_eq!(store.len(), 2);
        assert_eq!(store.get(&1, StateCell::load), None);
        assert_eq!(store.get(&2, StateCell::load), None);
        assert_eq!(store.get(&3, StateCell::load), Some(0));
    }

    #[test]
    fn a_sample_of_refused_entries_removes_them_and_hands_over_nothing() {
        let store = capped();
        admit(&store, 1);
        // A refused entry holds no room: removed, but no unit to hand over.
        let refused = StateCell::new(crate::algorithm::UNBORN);
        assert_eq!(refused.refuse(), Ok(()));
        assert!(store
            .insert(None, 4, refused, None::<NoLapse>, |_| ())
            .is_ok());
        let swept = store.sample(&mut store.cursor_at(0), 100, |_| Visit::Keep, |_, _| false);
        assert!(!swept.kept);
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
        let removed = store.sweep(0, |cell| cell.load() == 2 && cell.retire());
        assert_eq!(removed, 2);
        assert_eq!(store.len(), 2, "both removed entries gave their room back");
        assert_eq!(store.get(&1, StateCell::load), None);
        assert_eq!(store.get(&2, StateCell::load), None);
        assert_eq!(store.get(&3, StateCell::load), Some(3));
        assert_eq!(store.get(&4, StateCell::load), Some(4));
    }
}
