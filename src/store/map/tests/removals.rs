//! Removals: on a condition, without waiting, and the rebuilds that keep a
//! table from holding more removed entries than live ones.

#[allow(clippy::wildcard_imports)]
use super::*;

#[test]
fn removal_needs_the_condition_and_a_removed_key_can_come_back() {
    let map = filled();
    for i in (0..N).step_by(2) {
        let key = format!("client-{i}");
        assert!(!map.remove_if(key.as_str(), |_| false, |_| ()));
        map.get(key.as_str(), |cell| assert!(cell.retire()))
            .ok()
            .expect("present");
        assert!(map.remove_if(key.as_str(), Mortal::is_dead, |_| ()));
        assert!(
            !map.remove_if(key.as_str(), |_| true, |_| ()),
            "removed once"
        );
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
    assert_eq!(
        map.try_remove_if("gone", Mortal::is_dead, |_| ()),
        Some(false)
    );
    assert_eq!(
        map.try_remove_if("absent", Mortal::is_dead, |_| ()),
        Some(false)
    );
    map.get("gone", |cell| assert!(cell.retire()))
        .ok()
        .expect("present");
    // Dead, and the lock taken: left in place, at once.
    assert_eq!(map.try_remove_if("gone", |_| true, |_| ()), None);
    assert!(
        map.get("gone", |cell| cell.is_dead()).ok() == Some(true),
        "left in the table, dead"
    );
    assert_eq!(map.len(), 2, "still counted");
    drop(held);
    // Whoever meets it with the lock free removes it.
    assert_eq!(
        map.try_remove_if("gone", Mortal::is_dead, |_| ()),
        Some(true)
    );
    assert_eq!(word(&map, "gone"), None);
    assert_eq!(word(&map, "alive"), Some(2));
    assert_eq!(map.len(), 1);
}

/// Every shard's table, as its control bytes have it (not as its lock's
/// counts say): the address of the table, live slots, and used ones.
fn tables(map: &TestMap) -> Vec<(usize, Counts)> {
    let guard = epoch::pin();
    map.shards
        .iter()
        .map(|shard| {
            let _held = map.lock(shard, &guard);
            TestMap::current(shard, &guard).map_or((0, Counts::default()), |table| {
                (ptr::from_ref(table) as usize, table.count())
            })
        })
        .collect()
}

/// No table holds more removed entries than live ones beyond the spares,
/// so the map holds at most twice its live entries plus 28 per shard.
fn none_half_dead(map: &TestMap, after: &str) {
    for (shard, (_, counts)) in tables(map).into_iter().enumerate() {
        let dead = counts.used - counts.live;
        assert!(
            dead <= counts.live.max(DEAD_SPARES),
            "shard {shard}: {dead} removed entries beside {} live, after {after}",
            counts.live
        );
    }
}

/// Retires `key`'s cell, which must be live.
fn retire(map: &TestMap, key: &str) {
    map.get(key, |cell| assert!(cell.retire()))
        .ok()
        .expect("present");
}

/// Tables rebuilt between two looks at them: those whose address changed.
fn rebuilt(before: &[(usize, Counts)], after: &[(usize, Counts)]) -> usize {
    before
        .iter()
        .zip(after)
        .filter(|((was, _), (is, _))| was != is)
        .count()
}

#[test]
fn a_removal_that_leaves_a_table_more_than_half_dead_rebuilds_it() {
    for wait in [true, false] {
        let map = filled();
        let mut rebuilds = 0;
        let mut before = tables(&map);
        for i in 0..N {
            let key = format!("client-{i}");
            retire(&map, &key);
            let removed = if wait {
                map.remove_if(key.as_str(), Mortal::is_dead, |_| ())
            } else {
                map.try_remove_if(key.as_str(), Mortal::is_dead, |_| ()) == Some(true)
            };
            assert!(removed);
            let after = tables(&map);
            rebuilds += rebuilt(&before, &after);
            before = after;
            if i % 97 == 0 || i + 1 == N {
                none_half_dead(&map, &format!("removing {key}"));
            }
        }
        assert_eq!(map.len(), 0);
        // Each rebuild halves a shard's live entries at least, so few: not
        // one per removal.
        let per_shard = (N as usize / SHARDS / DEAD_SPARES).max(1);
        let most = SHARDS * (per_shard.ilog2() as usize + 2);
        assert!(rebuilds <= most, "{rebuilds} rebuilds, against {most}");
        if !cfg!(miri) {
            assert!(rebuilds >= SHARDS, "every shard rebuilt at least once");
        }
    }
}

/// A removal that rebuilds its table frees the old one, and the removed
/// keys it holds, before it returns when no other thread is inside a call
/// on a map: the old table is not left for a later write. The epoch
/// collector is the process's, and the other tests' threads pin it, so
/// this runs in a process of its own, alone.
#[test]
fn a_removal_that_rebuilds_frees_the_old_table_before_it_returns() {
    const NAME: &str =
        "store::map::tests::removals::a_removal_that_rebuilds_frees_the_old_table_before_it_returns";
    if std::env::var_os("TOLLGATE_TEST_ALONE").is_none() {
        if cfg!(miri) {
            return;
        }
        let run = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--test-threads", "1"])
            .env("TOLLGATE_TEST_ALONE", "1")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success() && out.contains("1 passed"),
            "{out}{}",
            String::from_utf8_lossy(&run.stderr)
        );
        return;
    }
    let map = filled();
    let (mut rebuilds, mut left) = (0, 0);
    let mut before = tables(&map);
    for i in 0..N {
        let key = format!("client-{i}");
        retire(&map, &key);
        assert!(map.remove_if(key.as_str(), Mortal::is_dead, |_| ()));
        // Read before `tables` pins.
        let pending = map.retired.any_pending();
        let after = tables(&map);
        if rebuilt(&before, &after) > 0 {
            rebuilds += 1;
            left += usize::from(pending);
        }
        before = after;
    }
    assert!(rebuilds >= SHARDS, "every shard rebuilt at least once");
    assert_eq!(
        left, 0,
        "of {rebuilds} rebuilds, {left} left their table for a later write"
    );
}

#[test]
fn the_rebuild_a_removal_makes_leaves_dead_entries_behind_and_reports_them() {
    let map = filled();
    // A quarter of the clients retired but left in place (their removals
    // found the shard's lock taken, say): dead, and still entries, which
    // `len` counts.
    for i in (0..N).step_by(4) {
        retire(&map, &format!("client-{i}"));
    }
    let mut reported = 0;
    let mut removed = 0;
    for i in (0..N).filter(|i| i % 4 != 0) {
        let key = format!("client-{i}");
        retire(&map, &key);
        assert!(map.remove_if(key.as_str(), Mortal::is_dead, |cell| {
            assert!(cell.is_dead());
            reported += 1;
        }));
        removed += 1;
        assert!(reported >= removed, "the entry removed is reported");
        none_half_dead(&map, "a removal");
    }
    if !cfg!(miri) {
        // Each shard's table rebuilt on the way (the removed entries
        // outnumbered the entries left), the dead ones left behind and
        // reported then, each once, besides each entry removed.
        assert_eq!(reported - removed, N.div_ceil(4));
        assert_eq!(map.len(), 0);
    }
    for i in 0..N {
        let key = format!("client-{i}");
        match map.get(key.as_str(), Mortal::is_dead) {
            Err(_) => {}
            // Under Miri the tables are too small for a removal to leave one
            // more than half dead (beyond `DEAD_SPARES`): the entries retired
            // in place are still there, dead, until a rebuild.
            Ok(dead) => assert!(cfg!(miri) && dead && i % 4 == 0, "{key} still an entry"),
        }
    }
}

#[test]
fn slices_and_samples_that_remove_leave_no_table_more_than_half_dead() {
    let map = filled();
    let mut cursor = Cursor::default();
    // A slice that forgets nine tenths of the map.
    let forget = |cell: &StateCell| cell.load() % 10 != 0 && cell.retire();
    let removed = map.sweep_slice(&mut cursor, N, |_, cell| forget(cell), |_| ());
    assert_eq!(removed, N / 10 * 9);
    none_half_dead(&map, "a slice");
    for i in 0..N {
        let expected = (i % 10 == 0).then_some(i);
        assert_eq!(word(&map, &format!("client-{i}")), expected);
    }
    // Samples that forget what they visit, and pick the lowest ranked.
    let mut cursor = Cursor::default();
    for _ in 0..N / 10 / 4 {
        let _ = map.sample(
            &mut cursor,
            4,
            |_, cell| {
                if cell.load() % 20 == 0 && cell.retire() {
                    Visit::Remove
                } else {
                    Visit::Rank(cell.load())
                }
            },
            |_, cell| cell.retire(),
            |_| (),
        );
        none_half_dead(&map, "a sample");
    }
}
