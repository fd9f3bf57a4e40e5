//! Retired tables: expired soon, freed by writers, and dropped with the
//! map.

#[allow(clippy::wildcard_imports)]
use super::*;

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
    let mut last = 0;
    for key in (1..).filter(|&key| shard_of(key) == shard_of(0)) {
        last = key;
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
    // bag would wait there until dozens more were retired. Another test's
    // thread pinned meanwhile (on a busy machine, preempted while pinned)
    // holds the epoch back for as long: so the pins go on, napping now and
    // then, for up to a minute (Miri: a fixed count), never a count that a
    // busy machine can use up first.
    let started = std::time::Instant::now();
    let mut pins = 0u64;
    while !map.retired.any_expired() {
        drop(epoch::pin());
        pins += 1;
        if cfg!(miri) {
            if pins == 5_000 {
                break;
            }
        } else if pins.is_multiple_of(10_000) {
            if started.elapsed() > std::time::Duration::from_secs(60) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
    assert!(map.retired.any_expired(), "the retired table expired");
    // Relaxed: set by this thread's own frees.
    assert_eq!(
        COUNTED_DROPS.load(Ordering::Relaxed),
        0,
        "a reader's pin never frees a retired table"
    );
    // The map's next writer frees it, even one that takes no lock: an
    // insert into the rebuilt table, which has room.
    let next = (last + 1..)
        .find(|&key| shard_of(key) == shard_of(0))
        .unwrap();
    assert!(map
        .insert(
            None,
            Counted(next, false),
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
