//! Inserts with no lock: racing inserts of one key make one entry, inserts
//! never wait for a writer that holds the shard's lock (but a rebuild's),
//! and an insert a panic left undecided is settled by the next one.

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::store::map::table::{max_used, Claim, Counts};
use core::hash::{BuildHasherDefault, Hasher};
use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::Duration;

/// Every shard's table, its counts as counted and as its tags say: equal
/// once no writer is at work.
fn counts_agree(map: &TestMap) {
    let guard = epoch::pin();
    for shard in map.shards.iter() {
        if let Some(table) = TestMap::current(shard, &guard) {
            assert_eq!(table.counts(), table.count(), "a table's counts");
        }
    }
}

#[test]
fn inserts_of_one_key_racing_make_one_entry_and_one_winner() {
    let map = map();
    let keys = N / 2;
    let threads = 3_u64;
    let barrier = Barrier::new(threads as usize);
    let won: Vec<Vec<bool>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (map, barrier) = (&map, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    (0..keys)
                        .map(|i| {
                            // Each thread's value tells its insert apart.
                            map.insert(
                                None,
                                format!("client-{i}"),
                                StateCell::new(i * threads + t),
                                NO_SWEEP,
                                |_| unreachable!("nothing dies"),
                                |_| (),
                            )
                            .is_ok()
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for i in 0..keys {
        let winners: Vec<u64> = (0..threads)
            .filter(|&t| won[t as usize][i as usize])
            .collect();
        assert_eq!(winners.len(), 1, "client-{i}: one insert wins");
        // The entry is the winner's.
        assert_eq!(
            word(&map, &format!("client-{i}")),
            Some(i * threads + winners[0])
        );
    }
    assert_eq!(map.len(), keys);
    counts_agree(&map);
}

#[test]
fn inserts_of_many_keys_racing_rebuilds_and_sweeps_lose_none() {
    let map = map();
    let threads = 2_u64;
    let per_thread = N / 4;
    let done = PlainAtomicU64::new(0);
    thread::scope(|scope| {
        for t in 0..threads {
            let (map, done) = (&map, &done);
            scope.spawn(move || {
                for i in 0..per_thread {
                    let key = format!("client-{t}-{i}");
                    assert!(put(map, key, i), "a new key is inserted");
                }
                done.fetch_add(1, Ordering::Relaxed);
            });
        }
        // Rebuilds of every shard (a quota change's) and full sweeps that
        // keep every entry, racing the inserts.
        let (map, done) = (&map, &done);
        scope.spawn(move || {
            while done.load(Ordering::Relaxed) < threads {
                map.rebuild_all(Mortal::relocate, |_| unreachable!("nothing dies"));
                let _ = map.retain(0, |_, _| false, |_| (), || ());
            }
        });
    });
    for t in 0..threads {
        for i in 0..per_thread {
            assert_eq!(word(&map, &format!("client-{t}-{i}")), Some(i));
        }
    }
    assert_eq!(map.len(), threads * per_thread);
    counts_agree(&map);
}

#[test]
fn an_insert_never_waits_for_a_writer_holding_its_shard() {
    let map = map();
    let neighbours = neighbours(&map, "held", 3);
    assert!(put(&map, "held".into(), 1));
    for (i, key) in neighbours.iter().enumerate().take(2) {
        assert!(put(&map, key.clone(), 2 + i as u64));
    }
    let guard = epoch::pin();
    let shard = map.shard(map.hash("held"));
    let table = TestMap::current(shard, &guard).expect("a table");
    assert!(
        table.counts().used < max_used(table.capacity()),
        "room for one more: no rebuild is due"
    );
    // Another writer holds the shard's lock (a sweep, a removal, held up by
    // the operating system): here, this thread.
    let held = map.lock(shard, &guard);
    let (inserted, returned) = mpsc::channel();
    thread::scope(|scope| {
        let (map, newcomer) = (&map, neighbours[2].clone());
        scope.spawn(move || {
            let put = put(map, newcomer, 9);
            inserted.send(put).unwrap();
        });
        // Bounded, so that a wrong insert fails the test rather than hanging
        // it; a right one returns in microseconds.
        let put = returned.recv_timeout(Duration::from_secs(60));
        drop(held);
        assert_eq!(put, Ok(true), "the insert waited for the shard's lock");
    });
    assert_eq!(word(&map, &neighbours[2]), Some(9));
    counts_agree(&map);
}

/// A hasher that hashes a `u64` to itself.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64s")
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

static KEYS_ALIVE: PlainAtomicU64 = PlainAtomicU64::new(0);

/// One test of `Chosen` keys at a time: `KEYS_ALIVE` is shared.
static CHOSEN: std::sync::Mutex<()> = std::sync::Mutex::new(());

std::thread_local! {
    /// How many more comparisons of keys this thread makes before one
    /// panics, if one is to.
    static EQ_PANICS: core::cell::Cell<Option<u32>> = const { core::cell::Cell::new(None) };
}

/// A key of a chosen hash, whose `Eq` panics as `EQ_PANICS` says;
/// counted alive, so that the test sees every key dropped once.
#[derive(Debug)]
struct Chosen {
    hash: u64,
    id: u64,
}

impl Chosen {
    fn new(hash: u64, id: u64) -> Self {
        KEYS_ALIVE.fetch_add(1, Ordering::Relaxed);
        Self { hash, id }
    }
}

impl Drop for Chosen {
    fn drop(&mut self) {
        KEYS_ALIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

impl core::hash::Hash for Chosen {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialEq for Chosen {
    fn eq(&self, other: &Self) -> bool {
        EQ_PANICS.with(|countdown| match countdown.get() {
            Some(0) => {
                countdown.set(None);
                panic!("a key's Eq panics");
            }
            left => countdown.set(left.map(|n| n - 1)),
        });
        self.id == other.id
    }
}

impl Eq for Chosen {}

type ChosenMap = Map<Chosen, StateCell, BuildHasherDefault<Identity>>;

fn put_chosen(map: &ChosenMap, hash: u64, id: u64, word: u64) -> Result<(), Option<u64>> {
    map.insert(
        None,
        Chosen::new(hash, id),
        StateCell::new(word),
        NO_SWEEP,
        |_| unreachable!("nothing dies"),
        |_| (),
    )
    .map_err(|cell| cell.map(|cell| cell.load()))
}

/// A map holding key 1 (word 10) and key 2 (word 20) inserted but left
/// `PENDING`, as by an inserter held up after publishing (here, by a panic
/// in its comparison of keys), both of `hash`: one shard, one tag, one
/// home group.
fn one_entry_and_one_left_pending(hash: u64) -> ChosenMap {
    let map = ChosenMap::with_hasher(BuildHasherDefault::default());
    assert_eq!(put_chosen(&map, hash, 1, 10), Ok(()));
    // The second key's slot shares its group with a lane of the same tag,
    // so it is published PENDING and resolved, comparing keys: the
    // comparison panics (the second: the first is the search before the
    // claim), and leaves the slot PENDING.
    EQ_PANICS.with(|countdown| countdown.set(Some(1)));
    let unwound = panic::catch_unwind(AssertUnwindSafe(|| put_chosen(&map, hash, 2, 20)));
    EQ_PANICS.with(|countdown| countdown.set(None));
    assert!(unwound.is_err(), "the comparison panicked");
    map
}

#[test]
fn an_insert_a_panic_left_undecided_is_settled_by_the_next_and_dropped_once() {
    let _serial = CHOSEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let hash = 0x1234_5678_9ABC_DEF0;
    let map = one_entry_and_one_left_pending(hash);
    let guard = epoch::pin();
    let table = ChosenMap::current(map.shard(hash), &guard).expect("a table");
    assert_eq!(table.count(), Counts { live: 1, used: 2 });
    // Undecided: no lookup finds it.
    let probe = Chosen::new(hash, 2);
    assert!(map.get(&probe, StateCell::load).is_err());
    // The next insert of the key settles it, and loses to it.
    assert_eq!(put_chosen(&map, hash, 2, 30), Err(None));
    assert_eq!(map.get(&probe, StateCell::load).ok(), Some(20));
    assert_eq!(table.count(), Counts { live: 2, used: 3 });
    drop(probe);
    drop(guard);
    drop(map);
    assert_eq!(
        KEYS_ALIVE.load(Ordering::Relaxed),
        0,
        "every key dropped once, the given-up and the undecided ones too"
    );
}

#[test]
fn a_claim_begun_before_a_rebuild_sealed_its_table_is_handed_back() {
    let map = map();
    let neighbours = neighbours(&map, "old", 2);
    assert!(put(&map, "old".into(), 1));
    let guard = epoch::pin();
    let shard = map.shard(map.hash("old"));
    let old = TestMap::current(shard, &guard).expect("a table");
    // An insert that found no rebuild linked and counted its slot, then was
    // held up before its claim, while the shard was rebuilt.
    assert!(old.reserve());
    map.rebuild_all(Mortal::relocate, |_| unreachable!("nothing dies"));
    let new = TestMap::current(shard, &guard).expect("a table");
    assert!(!ptr::eq(old, new), "rebuilt");
    let key = neighbours[0].clone();
    let hash = map.hash(key.as_str());
    match old.insert(hash, None, (key, StateCell::new(7)), &guard) {
        Claim::Sealed((key, cell)) => {
            assert_eq!((key.as_str(), cell.load()), (neighbours[0].as_str(), 7))
        }
        Claim::Won(_) | Claim::Lost => panic!("a claim in a table the rebuild has left"),
    }
    // Nothing was left behind in the old table: the key is absent, and an
    // insert puts it in the new one.
    assert_eq!(word(&map, &neighbours[0]), None);
    assert!(put(&map, neighbours[0].clone(), 8));
    assert_eq!(word(&map, &neighbours[0]), Some(8));
    assert_eq!(word(&map, "old"), Some(1));
}

#[test]
fn a_rebuild_decides_an_insert_left_pending_and_moves_its_entry() {
    let _serial = CHOSEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let map = one_entry_and_one_left_pending(0x0FED_CBA9_8765_4321);
    let hash = 0x0FED_CBA9_8765_4321;
    let probe = Chosen::new(hash, 2);
    assert!(map.get(&probe, StateCell::load).is_err(), "undecided");
    // The rebuild decides it (its entry, the key's only one) and moves it.
    map.rebuild_all(Mortal::relocate, |_| unreachable!("nothing dies"));
    assert_eq!(map.get(&probe, StateCell::load).ok(), Some(20));
    assert_eq!(map.len(), 2);
    drop(probe);
    drop(map);
}

#[test]
fn a_rebuild_sized_before_more_inserts_came_in_with_no_lock_takes_them_all() {
    let map = std::sync::Arc::new(map());
    let keys = neighbours(&map, "first", 40);
    assert!(put(&map, "first".into(), 0));
    // A writer counts the shard's live entries (one) and is held up before
    // it takes the lock to rebuild for them, while inserts, taking no lock,
    // bring 40 more in (rebuilding as they fill the table).
    let counted = {
        let guard = epoch::pin();
        let shard = map.shard(map.hash("first"));
        TestMap::current(shard, &guard)
            .expect("a table")
            .counts()
            .live
    };
    assert_eq!(counted, 1);
    for (i, key) in keys.iter().enumerate() {
        assert!(put(&map, key.clone(), i as u64 + 1));
    }
    // Its rebuild, for the one entry it counted, must take all 41: a table
    // sized for one would have no slot for the rest (and its moves would
    // probe it for ever). On a thread of its own, bounded, so that a wrong
    // rebuild fails the test rather than hanging it.
    let (rebuilt, done) = mpsc::channel();
    let rebuilder = std::sync::Arc::clone(&map);
    let _detached = thread::spawn(move || {
        let map = &*rebuilder;
        let shard = map.shard(map.hash("first"));
        let guard = epoch::pin();
        let mut held = map.lock(shard, &guard);
        let _ = map.rebuild(
            shard,
            &mut held,
            counted,
            |_| unreachable!("nothing dies"),
            Mortal::relocate,
            &guard,
        );
        rebuilt.send(()).unwrap();
    });
    assert_eq!(
        done.recv_timeout(Duration::from_secs(60)),
        Ok(()),
        "the rebuild never ended"
    );
    assert_eq!(word(&map, "first"), Some(0));
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(word(&map, key), Some(i as u64 + 1));
    }
    assert_eq!(map.len(), 41);
    counts_agree(&map);
}

#[test]
fn a_table_a_panic_left_sealed_and_unlinked_is_rebuilt_by_the_next_insert() {
    let _serial = CHOSEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let hash = 0x0123_4567_89AB_CDEF;
    let map = one_entry_and_one_left_pending(hash);
    // A rebuild seals the table, then panics deciding the pending insert
    // (the key's `Eq`): the table is left sealed, no new one linked.
    EQ_PANICS.with(|countdown| countdown.set(Some(0)));
    let unwound = panic::catch_unwind(AssertUnwindSafe(|| {
        map.rebuild_all(Mortal::relocate, |_| unreachable!("nothing dies"));
    }));
    EQ_PANICS.with(|countdown| countdown.set(None));
    assert!(unwound.is_err(), "the rebuild panicked");
    {
        let guard = epoch::pin();
        let table = ChosenMap::current(map.shard(hash), &guard).expect("a table");
        assert!(table.next(&guard).is_none(), "no new table linked");
    }
    // The next insert into that shard finds its claim sealed, takes the
    // lock (recovering it) and rebuilds: the new key, and the two before,
    // are all found.
    assert_eq!(put_chosen(&map, hash, 3, 30), Ok(()));
    for (id, word) in [(1, 10), (2, 20), (3, 30)] {
        let probe = Chosen::new(hash, id);
        assert_eq!(
            map.get(&probe, StateCell::load).ok(),
            Some(word),
            "key {id}"
        );
    }
    assert_eq!(map.len(), 3);
    drop(map);
    assert_eq!(
        KEYS_ALIVE.load(Ordering::Relaxed),
        0,
        "every key dropped once"
    );
}
