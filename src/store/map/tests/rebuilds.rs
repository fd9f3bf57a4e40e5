//! Rebuilds: entries forwarded, dead and lapsed ones left behind, and
//! panics half way.

#[allow(clippy::wildcard_imports)]
use super::*;

#[test]
fn a_rebuild_forwards_the_copy_a_reader_holds_and_carries_its_word() {
    let map = map();
    assert!(put(&map, "target".into(), 41));
    let others = neighbours(&map, "target", 64);
    map.get("target", |old| {
        // Fill the shard until it is rebuilt at least once.
        for (i, key) in others.iter().enumerate() {
            assert!(put(&map, key.clone(), i as u64));
        }
        assert_eq!(old.life(), Life::Forwarded, "the old copy is forwarded");
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
            .insert(
                None,
                key,
                StateCell::new(0),
                NO_SWEEP,
                |_| reported += 1,
                |_| ()
            )
            .is_ok());
    }
    assert_eq!(reported, 1);
    assert_eq!(word(&map, "dead"), None);
}

#[test]
fn a_rebuild_leaves_lapsed_entries_behind_and_sizes_the_table_for_the_rest() {
    let map = map();
    let mut left_behind = 0;
    let mut retired = 0;
    for i in 0..N {
        // Every client but the ten newest has lapsed: the rebuild an insert
        // sets off retires those it meets.
        let lapsed = OlderThanTen {
            newest: i,
            retired: &mut retired,
        };
        let key = format!("client-{i}");
        assert!(map
            .insert(
                None,
                key,
                StateCell::new(i),
                Some(lapsed),
                |_| left_behind += 1,
                |_| ()
            )
            .is_ok());
    }
    let guard = epoch::pin();
    let capacity: usize = map
        .shards
        .iter()
        .map(|shard| TestMap::current(shard, &guard).map_or(0, Table::capacity))
        .sum();
    // Sized for the clients spared (at most eleven in a shard), not for
    // every entry the full table held: a table sized for those would have
    // grown with the flood.
    assert!(
        capacity <= SHARDS * groups_for(11) * LANES,
        "{capacity} slots for {} entries",
        map.len()
    );
    assert_eq!(
        map.len() + left_behind,
        N,
        "every lapsed entry is reported once"
    );
    assert_eq!(
        retired, left_behind,
        "each one left behind was retired by its move"
    );
    for i in N - 10..N {
        assert_eq!(
            word(&map, &format!("client-{i}")),
            Some(i),
            "the newest stay"
        );
    }
}

/// Clients whose word the function holds true of have lapsed.
struct LapsedIf(fn(u64) -> bool);

impl crate::store::Lapse<StateCell> for LapsedIf {
    fn has_lapsed(&mut self, copy: &StateCell) -> bool {
        (self.0)(copy.load())
    }

    fn retire_if_lapsed(&mut self, _: &StateCell) -> bool {
        unreachable!("a word cell moves as a copy")
    }

    fn retired(&mut self) {}
}

/// A rebuild that forgets about two fifths of a full table's clients leaves
/// a table sized for the clients it keeps, not for all it held: the table
/// it first made, under three quarters of the load it was sized for, is
/// rebuilt once more for its entries.
#[test]
fn a_rebuild_that_forgets_two_fifths_of_the_clients_sizes_the_table_for_the_rest() {
    let map = map();
    let grown: u64 = if cfg!(miri) { 100 } else { 1_000 };
    let mut keys = neighbours(&map, "seed", 4 * grown as usize).into_iter();
    let shard = map.shard(map.hash("seed"));
    let table = || {
        let guard = epoch::pin();
        let table = TestMap::current(shard, &guard).unwrap();
        let at = ptr::from_ref(table) as usize;
        (at, table.capacity(), table.counts().live)
    };
    // Grown by clients of every word, half of them even: none forgotten.
    for (word, key) in (0..grown).zip(keys.by_ref()) {
        assert!(put(&map, key, word));
    }
    let (start, ..) = table();
    // Then clients of odd words, with the even ones lapsed, until the table
    // is full and rebuilt.
    for (word, key) in (grown..).map(|w| 2 * w + 1).zip(keys) {
        let put = map.insert(
            None,
            key,
            StateCell::new(word),
            Some(LapsedIf(|word| word % 2 == 0)),
            |_| (),
            |_| (),
        );
        assert!(put.is_ok());
        let (at, capacity, live) = table();
        if at != start {
            assert_eq!(live as u64, grown / 2 + word.div_ceil(2) - grown);
            assert!(
                capacity <= groups_for(live + 1) * LANES,
                "{capacity} slots for {live} entries"
            );
            return;
        }
    }
    panic!("the table was never rebuilt");
}

#[test]
fn a_rebuild_never_forgets_an_unborn_cell() {
    let map = map();
    // A new client on its way in, holding no room yet: its cell is unborn.
    assert!(map
        .insert(
            None,
            "newcomer".into(),
            StateCell::new(crate::algorithm::UNBORN),
            NO_SWEEP,
            |_| unreachable!("nothing dies"),
            |_| ()
        )
        .is_ok());
    let mut left_behind = 0;
    for i in 0..N {
        assert!(map
            .insert(
                None,
                format!("client-{i}"),
                StateCell::new(i),
                Some(LapsedIf(|_| true)),
                |_| left_behind += 1,
                |_| ()
            )
            .is_ok());
    }
    assert!(left_behind > 0, "the rebuilds forgot the live clients");
    let life = map.get("newcomer", Mortal::life).ok();
    assert_eq!(life, Some(Life::Unborn), "moved as it was, never retired");
}

#[test]
fn a_move_overtaken_by_a_check_copies_again_and_loses_nothing() {
    let map = map();
    for i in 0..64 {
        assert!(put(&map, format!("client-{i}"), i));
    }
    // Each cell's first copy is overtaken: an admission lands on the old
    // cell after the copy was taken, so the move must copy again.
    let mut overtaken = 0;
    let mut seen = std::collections::HashSet::new();
    map.rebuild_all(
        |cell| {
            let relocation = cell.relocate();
            if seen.insert(std::ptr::from_ref(cell) as usize) {
                assert!(matches!(
                    cell.apply(|w| Some(w + 1_000)),
                    crate::cell::Applied::Admitted(_)
                ));
                overtaken += 1;
            }
            relocation
        },
        |_| unreachable!("nothing dies"),
    );
    assert_eq!(overtaken, 64);
    for i in 0..64 {
        assert_eq!(word(&map, &format!("client-{i}")), Some(i + 1_000));
    }
    assert_eq!(map.len(), 64);
}

/// A quota change's carry reads the clock, which may panic. If it panics
/// on a move's second try (a check overtook the first copy, already
/// placed), the placed copy is given up: the old table keeps the client,
/// the writer that finishes the rebuild moves it once, and its key is
/// owned (and dropped) once.
#[test]
fn a_carry_that_panics_after_placing_its_copy_gives_the_copy_up() {
    let map = map();
    assert!(put(&map, "carried".into(), 7));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        map.rebuild_all(
            |cell| match cell.load() {
                7 => {
                    // The first try: its copy is placed, then a check
                    // lands on the old cell, so the forward fails.
                    let relocation = cell.relocate();
                    assert!(matches!(
                        cell.apply(|w| Some(w + 1_000)),
                        crate::cell::Applied::Admitted(_)
                    ));
                    relocation
                }
                1_007 => panic!("the clock panicked"),
                _ => cell.relocate(),
            },
            |_| unreachable!("nothing dies"),
        );
    }));
    assert!(result.is_err());
    assert_eq!(word(&map, "carried"), Some(1_007));
    assert_eq!(map.len(), 1);
    // The next writer of the shard finishes the rebuild.
    for (i, key) in neighbours(&map, "carried", 8).into_iter().enumerate() {
        assert!(put(&map, key, i as u64));
    }
    assert_eq!(word(&map, "carried"), Some(1_007), "the client's one state");
    assert_eq!(map.len(), 9);
}

#[test]
fn a_cell_that_dies_while_it_moves_is_left_behind_once() {
    let map = map();
    assert!(put(&map, "dies".into(), 5));
    assert!(put(&map, "lives".into(), 6));
    let mut dead = 0;
    map.rebuild_all(
        |cell| {
            let relocation = cell.relocate();
            if cell.load() == 5 {
                // Retired after the copy was placed: the copy is given up.
                assert!(cell.retire());
            }
            relocation
        },
        |_| dead += 1,
    );
    assert_eq!(dead, 1);
    assert_eq!(word(&map, "dies"), None);
    assert_eq!(word(&map, "lives"), Some(6));
    assert_eq!(map.len(), 1);
    // The copy given up still takes its slot until the next rebuild: the
    // shard's counts say so, or the table would fill past its last empty
    // slot (and a probe for an absent key would never end).
    let guard = epoch::pin();
    let shard = map.shard(map.hash("dies"));
    let table = TestMap::current(shard, &guard).expect("a table");
    assert_eq!(table.counts(), table.count());
}

/// A key whose `Hash` panics while `PANIC` is set: a rebuild is left half
/// done.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fragile(u64);

static PANIC_ON: PlainAtomicU64 = PlainAtomicU64::new(u64::MAX);

impl Hash for Fragile {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        // Relaxed: set and read by this test's one thread.
        if PANIC_ON.load(Ordering::Relaxed) == self.0 {
            panic!("the key's Hash panicked");
        }
        self.0.hash(state);
    }
}

#[test]
fn a_rebuild_a_panic_left_half_done_is_finished_by_the_next_writer() {
    let map: Map<Fragile, StateCell, foldhash::fast::FixedState> =
        Map::with_hasher(foldhash::fast::FixedState::with_seed(7));
    let count = if cfg!(miri) { 40 } else { 2_000 };
    for i in 0..count {
        assert!(map
            .insert(
                None,
                Fragile(i),
                StateCell::new(i),
                NO_SWEEP,
                |_| (),
                |_| ()
            )
            .is_ok());
    }
    // A quota change's rebuild: the key in the middle panics after about
    // half the map has moved.
    PANIC_ON.store(count / 2, Ordering::Relaxed);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        map.rebuild_all(Mortal::relocate, |_| ());
    }));
    assert!(result.is_err());
    PANIC_ON.store(u64::MAX, Ordering::Relaxed);
    // Readers find every client meanwhile, half moved or not.
    for i in 0..count {
        assert_eq!(
            map.get(&Fragile(i), StateCell::load).ok(),
            Some(i),
            "client {i}"
        );
    }
    // The next writer of the shard finishes the rebuild, then inserts.
    let shard_of = |key: u64| map.hash(&Fragile(key)) >> (64 - SHARD_BITS);
    let next = (count..)
        .find(|&key| shard_of(key) == shard_of(count / 2))
        .expect("a key in the shard");
    let linked = |map: &Map<Fragile, StateCell, foldhash::fast::FixedState>| {
        let guard = epoch::pin();
        let shard = map.shard(map.hash(&Fragile(next)));
        Map::<Fragile, StateCell, foldhash::fast::FixedState>::current(shard, &guard)
            .is_some_and(|table| table.next(&guard).is_some())
    };
    assert!(linked(&map), "the rebuild was left half done");
    assert!(map
        .insert(
            None,
            Fragile(next),
            StateCell::new(next),
            NO_SWEEP,
            |_| (),
            |_| ()
        )
        .is_ok());
    assert!(!linked(&map), "the rebuild is finished");
    for i in (0..count).chain([next]) {
        assert_eq!(map.get(&Fragile(i), StateCell::load).ok(), Some(i));
    }
    assert_eq!(map.len(), count + 1);
}

/// As [`Fragile`], with its own switch, for a test that runs beside the
/// one above.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Brittle(u64);

static BRITTLE_ON: PlainAtomicU64 = PlainAtomicU64::new(u64::MAX);

impl Hash for Brittle {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        // Relaxed: set and read by this test's one thread.
        if BRITTLE_ON.load(Ordering::Relaxed) == self.0 {
            panic!("the key's Hash panicked");
        }
        self.0.hash(state);
    }
}

#[test]
fn a_panic_half_way_through_a_group_leaves_no_moved_entry_tagged_full() {
    type Brittles = Map<Brittle, StateCell, foldhash::fast::FixedState>;
    let map: Brittles = Map::with_hasher(foldhash::fast::FixedState::with_seed(7));
    let count = if cfg!(miri) { 40 } else { 2_000 };
    for i in 0..count {
        assert!(map
            .insert(
                None,
                Brittle(i),
                StateCell::new(i),
                NO_SWEEP,
                |_| (),
                |_| ()
            )
            .is_ok());
    }
    // A key in the second live lane of its group: the rebuild moves the
    // first lane's entry, then panics hashing this one.
    let guard = epoch::pin();
    let (victim, shard) = map
        .shards
        .iter()
        .find_map(|shard| {
            let table = Brittles::current(shard, &guard)?;
            table.ctrl.iter().enumerate().find_map(|(group, ctrl)| {
                let live = ctrl.load(Ordering::Relaxed) & 0x8080_8080_8080_8080;
                let second = live & (live - 1);
                (live.count_ones() >= 2).then(|| {
                    let index = group * LANES + (second.trailing_zeros() / 8) as usize;
                    // SAFETY: the slot is FULL, and no writer runs.
                    (unsafe { table.entry(index) }.0.clone(), shard)
                })
            })
        })
        .expect("a group with two live entries");
    BRITTLE_ON.store(victim.0, Ordering::Relaxed);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        map.rebuild_all(Mortal::relocate, |_| ());
    }));
    assert!(result.is_err());
    BRITTLE_ON.store(u64::MAX, Ordering::Relaxed);
    // Half done: every slot still tagged FULL in the old table holds a
    // live cell (one the new table does not own), and every moved one is
    // tagged MOVED, so finishing the rebuild moves none twice.
    let old = Brittles::current(shard, &guard).expect("a table");
    assert!(old.next(&guard).is_some(), "the rebuild was left half done");
    let mut moved = 0;
    for index in 0..old.capacity() {
        let tag = old.tag(index);
        if tag & FULL != 0 {
            // SAFETY: the slot is FULL.
            let (key, cell) = unsafe { old.entry(index) };
            assert!(!cell.is_dead(), "{key:?} moved, but its slot is FULL");
        } else if tag == MOVED {
            moved += 1;
        }
    }
    assert!(moved > 0, "the panic came after a move");
    drop(guard);
    // The next writer finishes the rebuild: every client once, with its
    // word.
    let shard_of = |key: u64| map.hash(&Brittle(key)) >> (64 - SHARD_BITS);
    let next = (count..)
        .find(|&key| shard_of(key) == shard_of(victim.0))
        .expect("a key in the shard");
    assert!(map
        .insert(
            None,
            Brittle(next),
            StateCell::new(next),
            NO_SWEEP,
            |_| (),
            |_| ()
        )
        .is_ok());
    for i in (0..count).chain([next]) {
        assert_eq!(map.get(&Brittle(i), StateCell::load).ok(), Some(i));
    }
    assert_eq!(map.len(), count + 1);
    let counted: usize = map
        .shards
        .iter()
        .filter_map(|shard| Brittles::current(shard, &epoch::pin()).map(|t| t.count().live))
        .sum();
    assert_eq!(counted as u64, count + 1, "no entry is held twice");
}

/// A move cut short by a panic after it placed its copy (a check changed
/// the cell between the copy and its forward, and `relocate` panicked on
/// the second try) gives the copy up, and the slot stays used; the writer
/// that finishes the rebuild moves the entry into another slot, counted
/// too: once published, the table's counts equal its tags, and the
/// client's state is the changed one.
#[test]
fn a_copy_given_up_by_a_panic_keeps_its_slot_counted() {
    let map = map();
    assert!(put(&map, "moved".into(), 5));
    let mut calls = 0;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        map.rebuild_all(
            |cell| {
                calls += 1;
                assert_eq!(calls, 1, "relocate panicked on its second try");
                let relocation = cell.relocate();
                // A check after the copy: the forward fails.
                let _ = cell.apply(|word| Some(word + 1));
                relocation
            },
            |_| unreachable!("nothing dies"),
        );
    }));
    assert!(result.is_err());
    // The next writer of the shard finishes the rebuild, then inserts.
    let neighbour = neighbours(&map, "moved", 1).remove(0);
    assert!(put(&map, neighbour.clone(), 7));
    assert_eq!(word(&map, "moved"), Some(6));
    assert_eq!(word(&map, &neighbour), Some(7));
    let guard = epoch::pin();
    let table = TestMap::current(map.shard(map.hash("moved")), &guard).expect("a table");
    assert!(table.next(&guard).is_none(), "the rebuild is finished");
    assert_eq!(table.counts(), table.count(), "the copy given up counted");
    assert_eq!(map.len(), 2);
}
