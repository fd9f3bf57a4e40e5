//! Walks over the map: full sweeps and passes (`retain`), slices and
//! cursors.

#[allow(clippy::wildcard_imports)]
use super::*;

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
    tombstones_above(map, 0)
}

/// As [`tombstones`], over the tables of more than `small` slots.
fn tombstones_above(map: &TestMap, small: usize) -> usize {
    let guard = epoch::pin();
    map.shards
        .iter()
        .filter_map(|shard| TestMap::current(shard, &guard))
        .filter(|table| table.capacity() > small)
        .map(|table| {
            let counts = table.counts();
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
    assert_eq!(
        tombstones_above(&map, LANES),
        0,
        "the pass rebuilt the emptied tables"
    );
    // (Under Miri the map is small enough that some tables are of `small`
    // slots, which the pass leaves.)
    if !cfg!(miri) {
        assert_eq!(tombstones(&map), 0, "every table was above `small`");
    }
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
        map.sweep_slice(&mut cursor, budget, |_, _| unreachable!(), |_| ()),
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
        let _ = map.sweep_slice(
            &mut cursor,
            37,
            |key, _| {
                *seen.entry(key.clone()).or_default() += 1;
                visited += 1;
                false
            },
            |_| (),
        );
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
    let removed = map.sweep_slice(&mut cursor, N, |_, cell| cell.load() < N / 2, |_| ());
    assert_eq!(removed, N / 2);
    assert_eq!(map.len(), N - removed, "each entry removed counted once");
    assert_eq!(word(&map, "client-0"), None);
    assert_eq!(word(&map, &format!("client-{}", N - 1)), Some(N - 1));
}
