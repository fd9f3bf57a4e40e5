//! Model 21's races and their broken twins (see the parent module for the
//! protocol and what each model checks).

use loom::sync::atomic::Ordering;
use loom::sync::Arc;
use loom::thread;

use super::{full, lane, Break, Shard, Table, DELETED, FULL, GIVEN_UP, GROUPS, LANES, PENDING};
use crate::harness::{
    assert_deadlocks, assert_reached, check_bounded, Explored, Tally, PREEMPTION_BOUND,
    WIDE_RACE_BOUND,
};

/// The preemption bound for a race of `threads` loom threads (the main
/// thread among them): the wide races' from three on (see "Bounds" in
/// `main.rs`).
fn bound(threads: usize) -> usize {
    if threads >= 3 {
        WIDE_RACE_BOUND
    } else {
        PREEMPTION_BOUND
    }
}

/// The keys the tables start with, all `FULL` in group 0.
const OLD: [u8; 3] = [1, 2, 3];

/// Two (or three) inserters of one new key race into a table whose home
/// group has one `EMPTY` lane left, so that they land in two groups; each
/// decides one unit on the cell of the slot its insert returned, with a
/// budget of one. One `FULL` entry, every inserter on its cell, exactly
/// one admitted.
pub(crate) fn one_key(broken: Break, inserters: usize) -> Explored {
    let name = format!("claim/one_key/{inserters}/{broken:?}");
    check_bounded(&name.clone(), bound(inserters), move |tally| {
        let table = Arc::new(Table::holding(&OLD));
        let key = 9;
        let run = move |table: &Table| {
            let at = table.insert(key, broken).expect("no rebuild here");
            (at, table.decide(at))
        };
        let others: Vec<_> = (1..inserters)
            .map(|_| {
                let table = Arc::clone(&table);
                thread::spawn(move || run(&table))
            })
            .collect();
        let mut results = vec![run(&table)];
        results.extend(others.into_iter().map(|t| t.join().unwrap()));
        one_entry(&name, &table, key, &results, tally);
        for old in OLD {
            assert_eq!(table.entries(old).len(), 1, "{name}: key {old} kept");
        }
    })
}

/// Two inserters of one new key race into a table holding `old`, all
/// `FULL` from the home group's first lane on, so that either may publish
/// its slot `FULL` at once: one key and three `EMPTY` lanes (alone in the
/// home group), or four keys (a home group full of other keys, both
/// claims past it, in the next group). One `FULL` entry, both inserters
/// on its cell, exactly one admitted.
pub(crate) fn one_key_decided_at_once(broken: Break, old: &'static [u8]) -> Explored {
    let name = format!("claim/one_key_decided_at_once/{}/{broken:?}", old.len());
    check_bounded(&name.clone(), bound(2), move |tally| {
        let table = Arc::new(Table::holding(old));
        let key = 9;
        let run = move |table: &Table| {
            let at = table.insert(key, broken).expect("no rebuild here");
            (at, table.decide(at))
        };
        let other = {
            let table = Arc::clone(&table);
            thread::spawn(move || run(&table))
        };
        let results = [run(&table), other.join().unwrap()];
        one_entry(&name, &table, key, &results, tally);
    })
}

/// A loser (its slot `GIVEN_UP` in the home group, set up before the
/// race) looking for its key's entry, the removal of that entry (`FULL`,
/// in the home group's last lane), and a new inserter of the key, which
/// claims past the home group: the loser, finding no entry, publishes its
/// slot again, while the new inserter publishes its own. The key has at
/// most one entry, and each ends on a slot that held it.
pub(crate) fn a_loser_and_an_inserter_past_it(broken: Break) -> Explored {
    let name = format!("claim/a_loser_and_an_inserter_past_it/{broken:?}");
    check_bounded(&name.clone(), bound(3), move |tally| {
        let key = 9;
        let table = Arc::new(Table::holding(&OLD[..2]).then(&[(key, GIVEN_UP), (key, full(key))]));
        let remover = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.remove(key))
        };
        let loser = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.winner(2, key, broken))
        };
        let at = table.insert(key, broken).expect("no rebuild here");
        remover.join().unwrap();
        let lost = loser.join().unwrap().expect("no rebuild here");
        let entries = table.entries(key);
        tally.record(entries.len() as u64);
        assert!(entries.len() <= 1, "{name}: two entries for one key");
        for at in [at, lost] {
            // Acquire: after the joins.
            let word = table.ctrl[at / LANES].load(Ordering::Acquire);
            assert!(
                matches!(lane(word, at % LANES), b if b == full(key) || b == DELETED),
                "{name}: an inserter ended on a slot that is not the key's entry"
            );
        }
    })
}

/// After inserters of `key` each decided a unit (budget 1) on the slot
/// its insert returned (`results`: slot, admitted): at most one admitted,
/// one `FULL` entry, and every inserter on its cell.
fn one_entry(name: &str, table: &Table, key: u8, results: &[(usize, bool)], tally: &Tally) {
    let admitted = results.iter().filter(|(_, ok)| *ok).count() as u64;
    tally.record(admitted);
    assert!(
        admitted <= 1,
        "{name}: over-admitted: {admitted} admitted on a budget of 1"
    );
    let entries = table.entries(key);
    assert_eq!(entries.len(), 1, "{name}: one key, one entry");
    assert!(
        results.iter().all(|&(at, _)| at == entries[0]),
        "{name}: an inserter decided on a cell the table does not keep"
    );
}

/// Two inserters of two keys race for the last two lanes of the home
/// group: both keys found, each once, each decided once.
pub(crate) fn two_keys(broken: Break) -> Explored {
    let name = format!("claim/two_keys/{broken:?}");
    check_bounded(&name.clone(), bound(2), move |tally| {
        let table = Arc::new(Table::holding(&OLD[..2]));
        let other = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let at = table.insert(8, broken).expect("no rebuild here");
                table.decide(at)
            })
        };
        let at = table.insert(9, broken).expect("no rebuild here");
        let admitted = u64::from(table.decide(at)) + u64::from(other.join().unwrap());
        tally.record(admitted);
        for key in [8, 9, 1, 2] {
            assert_eq!(
                table.entries(key).len(),
                1,
                "{name}: lost a key: {key} is not found exactly once"
            );
        }
        assert_eq!(admitted, 2, "{name}: each new key decided once");
    })
}

/// An inserter stalled for good after publishing its slot (`PENDING`,
/// set up before the race), a second inserter of its key, and a removal of
/// the key's entry (whose cell is dead: the removal a `forget` makes): the
/// second inserter never waits for the stalled one (it resolves the
/// stalled slot itself), returns a slot that held the key's entry (`FULL`,
/// or `DELETED` by the removal), and the key has at most one entry at the
/// end.
pub(crate) fn stalled_inserter_and_a_removal(broken: Break) -> Explored {
    let name = format!("claim/stalled_inserter_and_a_removal/{broken:?}");
    check_bounded(&name.clone(), bound(2), move |tally| {
        let key = 9;
        let table = Arc::new(Table::with_stalled(&OLD, key));
        let remover = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.remove(key))
        };
        let at = table.insert(key, broken).expect("no rebuild here");
        remover.join().unwrap();
        let entries = table.entries(key);
        tally.record(entries.len() as u64);
        assert!(entries.len() <= 1, "{name}: two entries for one key");
        // Acquire: after the join.
        let word = table.ctrl[at / LANES].load(Ordering::Acquire);
        assert!(
            matches!(lane(word, at % LANES), b if b == full(key) || b == DELETED),
            "{name}: the inserter ended on a slot that is not the key's entry"
        );
    })
}

/// One insert of a new key (or two of the same key) races a rebuild of
/// its table, which holds three keys: the key found exactly once, in the
/// new table; every old key moved; nothing left in the old table. Tallies
/// the inserts that went in with no lock.
pub(crate) fn racing_rebuild(broken: Break, inserters: usize) -> Explored {
    let name = format!("claim/racing_rebuild/{inserters}/{broken:?}");
    // The inserters and the rebuilder.
    check_bounded(&name.clone(), bound(inserters + 1), move |tally| {
        // With two inserters, one old key: the moves they race are then
        // few enough for the checker to go through every interleaving.
        let old: &[u8] = if inserters > 1 { &OLD[..1] } else { &OLD };
        let shard = Arc::new(Shard::new(Table::holding(old)));
        let rebuilder = {
            let shard = Arc::clone(&shard);
            thread::spawn(move || shard.rebuild(broken))
        };
        let others: Vec<_> = (1..inserters)
            .map(|_| {
                let shard = Arc::clone(&shard);
                thread::spawn(move || shard.insert(9, broken))
            })
            .collect();
        let mut lock_free = u64::from(shard.insert(9, broken));
        for other in others {
            lock_free += u64::from(other.join().unwrap());
        }
        rebuilder.join().unwrap();
        tally.record(lock_free);
        let (old_table, new) = (&shard.tables[0], &shard.tables[1]);
        for &key in old.iter().chain(&[9]) {
            assert_eq!(
                new.entries(key).len(),
                1,
                "{name}: stranded: key {key} is not in the new table exactly once"
            );
            assert!(
                old_table.entries(key).is_empty(),
                "{name}: stranded: key {key} left FULL in the old table"
            );
        }
    })
}

/// A first request of a key the old table holds (its lookup missed it,
/// made before another first request of the key published it) races a
/// rebuild that moves the key: the key has one entry, in the new table,
/// whether the request met the old table, the linked one, or the lock.
pub(crate) fn racing_move_of_its_key(broken: Break) -> Explored {
    let name = format!("claim/racing_move_of_its_key/{broken:?}");
    check_bounded(&name.clone(), bound(2), move |tally| {
        let shard = Arc::new(Shard::new(Table::holding(&OLD[..2])));
        let rebuilder = {
            let shard = Arc::clone(&shard);
            thread::spawn(move || shard.rebuild(broken))
        };
        let lock_free = shard.insert(OLD[1], broken);
        rebuilder.join().unwrap();
        tally.record(u64::from(lock_free));
        for key in &OLD[..2] {
            assert_eq!(
                shard.tables[1].entries(*key).len(),
                1,
                "{name}: two entries, or none, for key {key} in the new table"
            );
        }
    })
}

/// The race of [`stalled_inserter_and_a_removal`] with a rebuild beside
/// it (the removal under the writers' lock, as the map's is): nothing
/// left `FULL` or `PENDING` in the old table once the rebuild is done, and
/// the key has at most one entry, in the new table.
pub(crate) fn stalled_inserter_removal_and_rebuild(broken: Break) -> Explored {
    let name = format!("claim/stalled_inserter_removal_and_rebuild/{broken:?}");
    check_bounded(&name.clone(), bound(3), move |tally| {
        let key = 9;
        // No other key: the rebuild has only this one's lanes to seal,
        // resolve and move, which keeps the race of three threads small.
        let shard = Arc::new(Shard::new(Table::with_stalled(&[], key)));
        let others: Vec<_> = [false, true]
            .into_iter()
            .map(|rebuild| {
                let shard = Arc::clone(&shard);
                thread::spawn(move || {
                    if rebuild {
                        shard.rebuild(broken);
                    } else {
                        shard.with_writers(broken, || {
                            // Acquire: as in `Shard::insert`.
                            let current = shard.current.load(Ordering::Acquire);
                            shard.tables[current].remove(key);
                        });
                    }
                })
            })
            .collect();
        let lock_free = shard.insert(key, broken);
        for other in others {
            other.join().unwrap();
        }
        tally.record(u64::from(lock_free));
        let (old, new) = (&shard.tables[0], &shard.tables[1]);
        for t in 0..GROUPS * LANES {
            // Acquire: after the joins.
            let byte = lane(old.ctrl[t / LANES].load(Ordering::Acquire), t % LANES);
            assert!(
                byte & FULL == 0 && byte & 0xC0 != PENDING,
                "{name}: stranded: slot {t} left {byte:#04x} in the old table"
            );
        }
        assert!(
            new.entries(key).len() <= 1,
            "{name}: two entries for one key"
        );
    })
}

#[test]
fn two_inserters_of_one_key_make_one_entry() {
    let explored = one_key(Break::None, 2);
    assert_reached(explored, 1, 1);
}

#[test]
fn three_inserters_of_one_key_make_one_entry() {
    let explored = one_key(Break::None, 3);
    assert_reached(explored, 1, 1);
}

#[test]
fn two_inserters_of_one_key_alone_in_their_probe_make_one_entry() {
    let explored = one_key_decided_at_once(Break::None, &OLD[..1]);
    assert_reached(explored, 1, 1);
}

#[test]
fn two_inserters_of_one_key_past_a_full_home_make_one_entry() {
    assert_reached(one_key_decided_at_once(Break::None, &[1, 2, 3, 4]), 1, 1);
}

#[test]
fn a_loser_publishing_again_and_an_inserter_past_it_make_one_entry() {
    // Removed before the new entry's publication, or after it.
    assert_reached(a_loser_and_an_inserter_past_it(Break::None), 0, 1);
}

#[test]
fn two_keys_into_one_group_are_both_found() {
    let explored = two_keys(Break::None);
    assert_reached(explored, 2, 2);
}

#[test]
fn an_insert_racing_a_rebuild_is_found_once() {
    // Always with no lock: an insert whose claim the seal took waits at the
    // gate for the link, which comes before the lock is let go.
    assert_reached(racing_rebuild(Break::None, 1), 1, 1);
}

/// The twins of the gate: a first request that sleeps through the
/// announcement it waits for hangs, which loom reports as a deadlock and
/// cannot unwind from, so each runs alone in a child process.
#[test]
fn a_first_request_that_checks_before_it_takes_the_gate_is_caught() {
    // It finds no link and the lock held, the rebuild links and lets the
    // lock go, announcing each to a gate where no one is counted yet, and
    // the request then sleeps for good.
    assert_deadlocks("claim::models::gate_twin_check_outside");
}

#[test]
fn an_announcement_that_reads_the_waiters_by_a_load_is_caught() {
    // The store-buffering race: the waiter counts itself and finds no
    // link, the rebuild links and reads no waiter; both missed the other.
    assert_deadlocks("claim::models::gate_twin_plain_waiters");
}

#[test]
#[ignore = "a broken twin, run alone by the test above it"]
fn gate_twin_check_outside() {
    let _ = racing_rebuild(Break::CheckOutsideGate, 1);
}

#[test]
#[ignore = "a broken twin, run alone by the test above it"]
fn gate_twin_plain_waiters() {
    let _ = racing_rebuild(Break::PlainWaiters, 1);
}

#[test]
fn two_inserts_of_one_key_racing_a_rebuild_make_one_entry() {
    assert_reached(racing_rebuild(Break::None, 2), 2, 2);
}

#[test]
fn a_first_request_of_a_key_racing_its_move_finds_it() {
    let _ = racing_move_of_its_key(Break::None);
}

#[test]
fn a_stalled_inserter_a_removal_and_a_rebuild_strand_nothing() {
    let _ = stalled_inserter_removal_and_rebuild(Break::None);
}

#[test]
fn an_inserter_never_waits_for_a_stalled_one_and_outlives_a_removal() {
    // With the entry removed at the end, and kept.
    assert_reached(stalled_inserter_and_a_removal(Break::None), 0, 1);
}

/// `name: "what the checker reports" => model call;` becomes a test that
/// expects the broken twin's model to fail with that report.
macro_rules! caught {
    ($($name:ident: $expected:literal => $model:expr;)*) => {$(
        #[test]
        #[should_panic(expected = $expected)]
        fn $name() {
            let _ = $model;
        }
    )*};
}

caught! {
    // With the entry that won removed, it looks for ever.
    a_loser_that_only_looks_again_is_caught:
        "maximum number of branches" => stalled_inserter_and_a_removal(Break::NoRevive);
    a_resolution_scanning_by_loads_is_caught: "over-admitted" => one_key(Break::LoadScan, 2);
    an_insert_with_no_resolution_is_caught: "over-admitted" => one_key(Break::NoResolve, 2);
    // The two inserters land in two groups; each sees its own word clear.
    a_publication_decided_at_once_outside_the_home_group_is_caught:
        "over-admitted" => one_key(Break::AloneAnywhere, 2);
    // The first takes the home group's last lane and publishes at once;
    // the second, in the next group, scans before that publication.
    a_publication_decided_at_once_in_a_full_home_group_is_caught:
        "over-admitted" => one_key(Break::AloneInAFullGroup, 2);
    // The first claims the home group's last lane; the second, in the
    // next group, passes that claim over and publishes at once, while the
    // first's scan reads the next group before that publication.
    a_publication_past_a_claim_in_flight_is_caught:
        "over-admitted" => one_key(Break::PastAClaim, 2);
    // The new inserter passes the loser's lane over once the entry is
    // removed; the loser publishes again and its scan misses the new one.
    a_publication_past_a_given_up_lane_is_caught:
        "two entries" => a_loser_and_an_inserter_past_it(Break::PastALoser);
    // Both claimers take one lane and write its slot at once: loom's
    // `UnsafeCell` reports it (one key would be lost).
    a_claim_by_load_and_store_is_caught:
        "Concurrent write accesses to `UnsafeCell`" => two_keys(Break::RacyClaim);
    a_rebuild_that_does_not_seal_is_caught: "stranded" => racing_rebuild(Break::NoSeal, 1);
    // The move and the insert into the linked table write one slot.
    a_move_placed_by_load_and_store_is_caught:
        "Concurrent write accesses to `UnsafeCell`" => racing_rebuild(Break::RacyPut, 1);
    an_insert_into_the_linked_table_that_skips_the_old_one_is_caught:
        "two entries" => racing_move_of_its_key(Break::NoOldSearch);

    a_seal_that_leaves_given_up_lanes_revivable_is_caught:
        "stranded" => stalled_inserter_removal_and_rebuild(Break::ReviveSealed);
}
