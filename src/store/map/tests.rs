//! The table's own tests: lookups, removals, rebuilds and sweeps, alone
//! and racing.

use std::collections::HashMap;
use std::sync::Barrier;
use std::thread;

use super::table::{groups_for, max_used, zero_bytes, FULL, LANES, MOVED, SHARD_BITS};
use super::*;
use crate::cell::{Life, StateCell};

type TestMap = Map<String, StateCell, foldhash::fast::FixedState>;

/// Runs are shorter under Miri, which interprets every step.
const N: u64 = if cfg!(miri) { 300 } else { 20_000 };

/// An insert whose rebuilds forget no one.
const NO_SWEEP: Option<crate::store::NoLapse> = None;

/// Clients whose word (their number) is more than ten below `newest` have
/// lapsed; counts those the rebuilds retired.
struct OlderThanTen<'a> {
    newest: u64,
    retired: &'a mut u64,
}

impl crate::store::Lapse<StateCell> for OlderThanTen<'_> {
    fn has_lapsed(&mut self, copy: &StateCell) -> bool {
        copy.load() + 10 < self.newest
    }

    fn retire_if_lapsed(&mut self, _: &StateCell) -> bool {
        unreachable!("a word cell moves as a copy")
    }

    fn retired(&mut self) {
        *self.retired += 1;
    }
}

fn map() -> TestMap {
    Map::with_hasher(foldhash::fast::FixedState::with_seed(7))
}

/// A map holding `client-0` to `client-{N - 1}`, each its own number.
fn filled() -> TestMap {
    let map = map();
    for i in 0..N {
        assert!(put(&map, format!("client-{i}"), i));
    }
    map
}

fn word(map: &TestMap, key: &str) -> Option<u64> {
    map.get(key, StateCell::load).ok()
}

fn put(map: &TestMap, key: String, word: u64) -> bool {
    map.insert(
        None,
        key,
        StateCell::new(word),
        NO_SWEEP,
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
    let map = filled();
    for i in 0..N {
        assert_eq!(word(&map, &format!("client-{i}")), Some(i));
    }
    assert_eq!(word(&map, "client-absent"), None);
    // A second insert of a key hands the value back, untouched.
    let again = map.insert(
        None,
        "client-3".into(),
        StateCell::new(99),
        NO_SWEEP,
        |_| (),
        |_| (),
    );
    assert_eq!(again.map_err(|cell| cell.load()), Err(99));
    assert_eq!(word(&map, "client-3"), Some(3));
}

#[test]
fn removal_needs_the_condition_and_a_removed_key_can_come_back() {
    let map = filled();
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

/// Every live client has lapsed.
struct AllLapsed;

impl crate::store::Lapse<StateCell> for AllLapsed {
    fn has_lapsed(&mut self, _: &StateCell) -> bool {
        true
    }

    fn retire_if_lapsed(&mut self, _: &StateCell) -> bool {
        unreachable!("a word cell moves as a copy")
    }

    fn retired(&mut self) {}
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
                Some(AllLapsed),
                |_| left_behind += 1,
                |_| ()
            )
            .is_ok());
    }
    assert!(left_behind > 0, "the rebuilds forgot the live clients");
    let life = map.get("newcomer", Mortal::life).ok();
    assert_eq!(life, Some(Life::Unborn), "moved as it was, never retired");
}

/// Each shard's table's slots (0 for a shard with none).
fn capacities(map: &TestMap) -> Vec<usize> {
    map.shards
        .iter()
        .map(|shard| TestMap::current(shard, &epoch::pin()).map_or(0, Table::capacity))
        .collect()
}

#[test]
fn retain_removes_what_it_is_told_and_shrinks_what_is_left() {
    let map = filled();
    let capacity = || -> usize { capacities(&map).into_iter().sum() };
    let before = capacity();
    let removed = map.retain(
        0,
        |_, cell| cell.load() % 10 != 0,
        |_| unreachable!(),
        || (),
    );
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

/// A table of at most `small` slots keeps its size however empty
/// `retain` leaves it; a larger one is shrunk.
#[test]
fn retain_leaves_small_tables_their_size() {
    let map = filled();
    let before = capacities(&map);
    let largest = *before.iter().max().unwrap();
    let _ = map.retain(largest, |_, _| true, |_| unreachable!(), || ());
    assert_eq!(capacities(&map), before, "no table above {largest} slots");
    assert_eq!(map.len(), 0);
    let _ = map.retain(0, |_, _| true, |_| unreachable!(), || ());
    assert!(
        capacities(&map)
            .iter()
            .zip(&before)
            .all(|(after, was)| after < was || *was <= LANES),
        "emptied tables shrink once `small` allows"
    );
}

/// Removed entries whose slots the tables still hold (their keys and
/// cells kept until a rebuild), over every shard.
fn tombstones(map: &TestMap) -> usize {
    let guard = epoch::pin();
    map.shards
        .iter()
        .map(|shard| {
            let counts = map.lock(shard, &guard);
            counts.used - counts.live
        })
        .sum()
}

/// A full sweep (`small` 0) rebuilds every table it removed from, however
/// full it is left, and no other; the pass (`small` above 0) rebuilds only
/// the tables it leaves under a quarter full.
#[test]
fn retain_rebuilds_the_tables_it_empties_as_each_caller_asks() {
    let keep_all = |_: &String, _: &StateCell| false;
    // Removing nothing rebuilds nothing.
    let map = filled();
    let before = capacities(&map);
    assert_eq!(map.retain(0, keep_all, |_| unreachable!(), || ()), 0);
    assert_eq!(capacities(&map), before, "a sweep that removed nothing");
    // A full sweep that removes one entry in ten: every table rebuilt,
    // no removed entry left in one.
    let map = filled();
    let tenth = |_: &String, cell: &StateCell| cell.load() % 10 == 0;
    let removed = map.retain(0, tenth, |_| unreachable!(), || ());
    assert_eq!(removed, N.div_ceil(10));
    assert_eq!(map.len(), N - removed);
    assert_eq!(tombstones(&map), 0, "a full sweep leaves no removed entry");
    // The pass removing one in ten leaves the tables nine tenths full:
    // none rebuilt.
    let map = filled();
    let before = capacities(&map);
    let removed = map.retain(LANES, tenth, |_| unreachable!(), || ());
    assert_eq!(capacities(&map), before, "the pass left every table full");
    assert_eq!(tombstones(&map), removed as usize);
    // The pass removing nine in ten leaves them a tenth full: every one
    // above `small` rebuilt.
    let map = filled();
    let most = |_: &String, cell: &StateCell| cell.load() % 10 != 0;
    let removed = map.retain(LANES, most, |_| unreachable!(), || ());
    assert_eq!(map.len(), N - removed);
    assert_eq!(tombstones(&map), 0, "the pass rebuilt the emptied tables");
}

/// A cursor drawn from uniform bits: the shard the top bits name, and a
/// slot in proportion to the low 32 bits.
#[test]
fn a_drawn_cursor_lands_in_proportion() {
    let map = filled();
    let capacity = capacities(&map);
    for shard in [0, 1, SHARDS / 2, SHARDS - 1] {
        let top = (shard as u64) << (64 - SHARD_BITS);
        let at = |low: u64| map.cursor_at(top | low);
        assert_eq!(at(0).shard, shard);
        assert_eq!(at(0).slot, 0);
        assert_eq!(at(1 << 31).slot, capacity[shard] / 2);
        assert_eq!(at(u64::from(u32::MAX)).slot, capacity[shard] - 1);
    }
}

/// A slice over a map whose tables hold no live entry reads exactly its
/// word budget, `budget + SHARDS + 1` control words, and stops there: the
/// cost of a slice is bounded however sparse the map.
#[test]
fn a_slice_over_empty_tables_reads_its_word_budget_and_stops() {
    let map = filled();
    // Every entry removed, every table kept its size.
    let _ = map.retain(usize::MAX, |_, _| true, |_| unreachable!(), || ());
    let groups: Vec<usize> = capacities(&map).iter().map(|c| c / LANES).collect();
    let budget = 3;
    let words = budget as usize + SHARDS + 1;
    assert!(
        groups.iter().sum::<usize>() > words,
        "a map larger than one slice reads"
    );
    let mut cursor = Cursor::default();
    assert_eq!(
        map.sweep_slice(&mut cursor, budget, |_, _| unreachable!()),
        0
    );
    let read: usize = groups[..cursor.shard].iter().sum::<usize>() + cursor.slot / LANES;
    assert_eq!(read, words, "stopped at {cursor:?}");
}

#[test]
fn sweep_slices_visit_every_entry_once_per_pass() {
    let map = filled();
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
    assert_eq!(map.len(), N - removed, "each entry removed counted once");
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
                        .insert(None, key.clone(), StateCell::new(i), NO_SWEEP, dead, |_| ())
                        .is_ok());
                    // A copy another thread's rebuild forwarded just after
                    // the lookup found it reads as the forwarding mark:
                    // look again, and find the live copy.
                    let mut read = word(map, &key);
                    while read == Some(crate::algorithm::FORWARDED) {
                        std::hint::spin_loop();
                        read = word(map, &key);
                    }
                    assert_eq!(read, Some(i));
                    if i % 3 == 0 {
                        // A copy another thread's rebuild forwarded
                        // meanwhile cannot be retired: look again, and find
                        // the live copy.
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
                        word == i || word >= crate::algorithm::NOT_ALIVE,
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
    let counted = table.count();
    let held = map.lock(shard, &guard);
    assert_eq!((held.live, held.used), (counted.live, counted.used));
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

#[test]
fn a_removal_that_may_not_wait_leaves_a_dead_entry_while_another_writer_holds_the_shard() {
    let map = map();
    assert!(put(&map, "gone".into(), 1));
    assert!(put(&map, "alive".into(), 2));
    let guard = epoch::pin();
    let shard = map.shard(map.hash("gone"));
    // Another writer holds the shard (an insert, a sweep, a stalled
    // rebuild: here, this thread, so that `try_lock` finds it taken).
    let held = map.lock(shard, &guard);
    // A live client's entry, or an absent key: answered without the lock.
    assert_eq!(map.try_remove_if("gone", Mortal::is_dead), Some(false));
    assert_eq!(map.try_remove_if("absent", Mortal::is_dead), Some(false));
    map.get("gone", |cell| assert!(cell.retire()))
        .ok()
        .expect("present");
    // Dead, and the lock taken: left in place, at once.
    assert_eq!(map.try_remove_if("gone", |_| true), None);
    assert!(
        map.get("gone", |cell| cell.is_dead()).ok() == Some(true),
        "left in the table, dead"
    );
    assert_eq!(map.len(), 2, "still counted");
    drop(held);
    // Whoever meets it with the lock free removes it.
    assert_eq!(map.try_remove_if("gone", Mortal::is_dead), Some(true));
    assert_eq!(word(&map, "gone"), None);
    assert_eq!(word(&map, "alive"), Some(2));
    assert_eq!(map.len(), 1);
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

/// A key that counts the drops of the one the map holds (marked `true`),
/// to see when a retired table is freed; equal and hashed by its number.
#[derive(Debug)]
struct Counted(u64, bool);

impl PartialEq for Counted {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for Counted {}

impl Hash for Counted {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

static COUNTED_DROPS: PlainAtomicU64 = PlainAtomicU64::new(0);

impl Drop for Counted {
    fn drop(&mut self) {
        if self.1 {
            // Relaxed: read by this test's one thread.
            COUNTED_DROPS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn a_retired_table_expires_without_waiting_for_dozens_more_and_a_writer_frees_it() {
    let map: Map<Counted, StateCell, foldhash::fast::FixedState> =
        Map::with_hasher(foldhash::fast::FixedState::with_seed(7));
    assert!(map
        .insert(
            None,
            Counted(0, true),
            StateCell::new(0),
            NO_SWEEP,
            |_| (),
            |_| ()
        )
        .is_ok());
    map.get(&Counted(0, false), |cell| assert!(cell.retire()))
        .ok()
        .expect("present");
    // One rebuild of the dead key's shard leaves it behind in the retired
    // table, which drops it when the table is freed.
    let shard_of = |key: u64| map.hash(&Counted(key, false)) >> (64 - SHARD_BITS);
    let mut reported = 0;
    for key in (1..).filter(|&key| shard_of(key) == shard_of(0)) {
        assert!(map
            .insert(
                None,
                Counted(key, false),
                StateCell::new(0),
                NO_SWEEP,
                |_| reported += 1,
                |_| ()
            )
            .is_ok());
        if reported > 0 {
            break;
        }
    }
    assert_eq!(reported, 1, "one rebuild left the dead entry behind");
    // Pins alone (no flush here): once every thread has moved on, the
    // collector marks the table expired. A table kept in this thread's own
    // bag would wait there until dozens more were retired.
    let pins = if cfg!(miri) { 5_000 } else { 1_000_000 };
    for _ in 0..pins {
        if map.retired.any_expired() {
            break;
        }
        drop(epoch::pin());
    }
    assert!(map.retired.any_expired(), "the retired table expired");
    // Relaxed: set by this thread's own frees.
    assert_eq!(
        COUNTED_DROPS.load(Ordering::Relaxed),
        0,
        "a reader's pin never frees a retired table"
    );
    // The map's next writer frees it.
    assert!(map
        .insert(
            None,
            Counted(u64::MAX, false),
            StateCell::new(0),
            NO_SWEEP,
            |_| (),
            |_| ()
        )
        .is_ok());
    assert_eq!(
        COUNTED_DROPS.load(Ordering::Relaxed),
        1,
        "freed once, by a writer"
    );
    assert!(!map.retired.any_expired());
}

/// A key that counts its drops on a counter of its test's own.
#[derive(PartialEq, Eq, Hash)]
struct Tallied(u64, DropCount);

/// Bumps its counter once when dropped; equal to any other.
struct DropCount(std::sync::Arc<PlainAtomicU64>);

impl PartialEq for DropCount {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for DropCount {}

impl std::hash::Hash for DropCount {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl Drop for DropCount {
    fn drop(&mut self) {
        // Relaxed: a counter read after the map is gone, on this thread.
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A map of keys that count their drops, half of them removed by a full
/// sweep: every shard rebuilt, its old table retired, and a reader pinned
/// since, which keeps them all from expiring until it goes. The map, how
/// many keys it was given, their drops so far, and the reader.
fn half_retired() -> (
    Map<Tallied, StateCell, foldhash::fast::FixedState>,
    u64,
    std::sync::Arc<PlainAtomicU64>,
    epoch::Guard,
) {
    let drops = std::sync::Arc::new(PlainAtomicU64::new(0));
    let keys = if cfg!(miri) { 200 } else { 2_000 };
    let map = Map::with_hasher(foldhash::fast::FixedState::with_seed(7));
    for i in 0..keys {
        let key = Tallied(i, DropCount(std::sync::Arc::clone(&drops)));
        let put = map.insert(None, key, StateCell::new(i), NO_SWEEP, |_| (), |_| ());
        assert!(put.is_ok());
    }
    let reader = epoch::pin();
    let removed = map.retain(0, |key, _| key.0 % 2 == 0, |_| (), || ());
    assert_eq!(removed, keys / 2);
    (map, keys, drops, reader)
}

/// A map dropped while rebuilt tables still wait to be freed (a reader
/// pinned since before their retirement holds the collector back) frees
/// them: every key it was given is dropped once, the removed ones that
/// only the retired tables held included.
#[test]
fn a_map_dropped_with_retired_tables_pending_drops_every_key() {
    let (map, keys, drops, reader) = half_retired();
    assert!(
        map.retired.any_pending(),
        "the old tables wait for the reader"
    );
    drop(map);
    drop(reader);
    // Relaxed: as in `DropCount`.
    assert_eq!(drops.load(Ordering::Relaxed), keys);
}

/// One call frees every retired table that has expired, not one of them.
#[test]
fn a_writer_frees_every_expired_table_at_once() {
    let (map, keys, drops, reader) = half_retired();
    drop(reader);
    // Pins until the collector has marked every one expired.
    while !map.retired.all_expired() {
        drop(epoch::pin());
    }
    map.retired.free_expired();
    assert!(!map.retired.any_pending(), "every expired table freed");
    // Relaxed: as in `DropCount`.
    assert_eq!(
        drops.load(Ordering::Relaxed),
        keys / 2,
        "the removed keys went with them"
    );
}
