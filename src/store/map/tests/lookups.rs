//! Lookups and the control bytes: every key found, readers racing writers,
//! and the tables' sizes.

#[allow(clippy::wildcard_imports)]
use super::*;

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
    assert_eq!(
        again.map_err(|cell| cell.map(|cell| cell.load())),
        Err(Some(99))
    );
    assert_eq!(word(&map, "client-3"), Some(3));
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
                        if map.remove_if(key.as_str(), Mortal::is_dead, |_| ()) {
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
fn a_seal_retags_every_lane_as_one_at_a_time_would() {
    use crate::store::map::table::{CLAIMED, DELETED, GIVEN_UP, PENDING, SEALED};
    let bytes = [
        0x00,
        0x01,
        0x02,
        CLAIMED,
        SEALED,
        GIVEN_UP,
        PENDING | 0x2A,
        FULL | 0x7F,
    ];
    let sealed_byte = |byte: u8| match byte {
        0x00 => SEALED,
        CLAIMED => MOVED,
        GIVEN_UP => DELETED,
        other => other,
    };
    // Every byte in every lane, the others drawn from the same set.
    for lane in 0..LANES {
        for (i, &byte) in bytes.iter().enumerate() {
            let mut word = 0_u64;
            let mut expected = 0_u64;
            for other in 0..LANES {
                let b = if other == lane {
                    byte
                } else {
                    bytes[(i + other) % bytes.len()]
                };
                word |= u64::from(b) << (other * 8);
                expected |= u64::from(sealed_byte(b)) << (other * 8);
            }
            let table = Table::<u64, StateCell>::new(1);
            table.ctrl[0].store(word, Ordering::Relaxed);
            table.seal();
            assert_eq!(
                table.ctrl[0].load(Ordering::Relaxed),
                expected,
                "{word:#018x}"
            );
            // Nothing to drop: the slots were never filled.
            table.ctrl[0].store(0, Ordering::Relaxed);
        }
    }
}

/// A slot's rank is its place in the probe sequence from a key's home
/// group, wrapping, lane by lane. Of two slots of one key that race, the
/// resolution gives up the one ranked later, so the rank must put every
/// slot of the table in one order, each in its own place.
#[test]
fn a_slots_rank_is_its_place_in_the_probe_sequence() {
    let table = Table::<u64, StateCell>::new(4);
    let groups = table.groups();
    for home in 0..groups {
        let mut place = 0;
        for step in 0..groups {
            let group = (home + step) % groups;
            for lane in 0..LANES {
                assert_eq!(
                    table.rank(home, group * LANES + lane),
                    place,
                    "home {home}, group {group}, lane {lane}"
                );
                place += 1;
            }
        }
    }
}

#[test]
fn a_publication_past_its_home_waits_for_every_lane_that_may_yet_be_the_key_s() {
    use crate::store::map::table::{retagged, CLAIMED, DELETED, GIVEN_UP, PENDING};
    let table = Table::<u64, StateCell>::new(4);
    let (full, pending) = (FULL | 0x15, PENDING | 0x15);
    // Home group 3, a claim in group 1: groups 3 and 0 come before it.
    let (home, group) = (3, 1);
    let other_full = FULL | 0x2A;
    let set = |at: usize, word: u64| table.ctrl[at].store(word, Ordering::Relaxed);
    // Every lane settled: entries of other keys, removed or moved slots,
    // another key's publication not yet decided.
    let settled = [other_full, DELETED, MOVED, PENDING | 0x2A];
    for (lane_tag, expected) in settled.iter().map(|&tag| (tag, true)).chain([
        (CLAIMED, false),
        (GIVEN_UP, false),
        (full, false),
        (pending, false),
    ]) {
        let filled = (0..LANES).fold(0, |word, lane| retagged(word, lane, other_full));
        for at in [home, 0] {
            set(home, filled);
            set(0, filled);
            set(at, retagged(filled, 5, lane_tag));
            assert_eq!(
                table.settled_before(home, group, full, pending),
                expected,
                "tag {lane_tag:#04x} in group {at}"
            );
        }
    }
    // Nothing before the home group itself, nor past the claim's group.
    let filled = (0..LANES).fold(0, |word, lane| retagged(word, lane, other_full));
    set(0, filled);
    set(2, retagged(filled, 0, CLAIMED));
    set(home, retagged(filled, 0, CLAIMED));
    assert!(table.settled_before(home, home, full, pending));
    set(home, filled);
    assert!(table.settled_before(home, group, full, pending));
}

/// A key whose hash it carries (with [`Carried`], the map's hash is the
/// key's `hash`), and whose `Hash` or comparison can stall one thread.
#[derive(Debug)]
struct Stalling {
    name: u64,
    hash: u64,
}

impl Hash for Stalling {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        fire(Some(self.name));
        state.write_u64(self.hash);
    }
}

impl PartialEq for Stalling {
    fn eq(&self, other: &Self) -> bool {
        fire(None);
        self.name == other.name
    }
}

impl Eq for Stalling {}

/// Hashes a [`Stalling`] key to the hash it carries.
#[derive(Clone, Copy, Default)]
struct Carried;

impl std::hash::BuildHasher for Carried {
    type Hasher = CarriedHasher;

    fn build_hasher(&self) -> CarriedHasher {
        CarriedHasher(0)
    }
}

struct CarriedHasher(u64);

impl std::hash::Hasher for CarriedHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, _: &[u8]) {
        unreachable!("a carried hash is one u64");
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

/// What stalls, on the one thread armed: the hash of the key named, or
/// (`None`) the next comparison of keys.
type Stall = (Option<u64>, Box<dyn FnOnce()>);

thread_local! {
    static STALL: std::cell::RefCell<Option<Stall>> = const { std::cell::RefCell::new(None) };
}

/// Arms this thread to run `then` at its next hash of the key named
/// `at` (or, with `None`, its next comparison).
fn arm(at: Option<u64>, then: impl FnOnce() + 'static) {
    STALL.with(|stall| *stall.borrow_mut() = Some((at, Box::new(then))));
}

fn fire(at: Option<u64>) {
    let then = STALL.with(|stall| {
        let mut stall = stall.borrow_mut();
        match &*stall {
            Some((armed, _)) if *armed == at => stall.take().map(|(_, then)| then),
            _ => None,
        }
    });
    if let Some(then) = then {
        then();
    }
}

/// A hash in shard 0 with the tag bits `tag` and the home bits `home`
/// (the low 32: 0 homes in the first group, `u32::MAX` in the last).
fn carried(tag: u64, home: u32) -> u64 {
    tag << (64 - SHARD_BITS - 7) | u64::from(home)
}

/// Puts `name` with `hash` and `word`: whether it was absent.
fn put_carried(map: &Map<Stalling, StateCell, Carried>, name: u64, hash: u64, word: u64) -> bool {
    map.insert(
        None,
        Stalling { name, hash },
        StateCell::new(word),
        NO_SWEEP,
        |_| unreachable!("nothing dies"),
        |_| (),
    )
    .is_ok()
}

/// Puts a filler key (named from `fillers`, of another tag than the
/// tests' own, homed in the middle half of the groups).
fn put_filler(map: &Map<Stalling, StateCell, Carried>, fillers: &PlainAtomicU64) {
    // Relaxed: a name, unique by the add.
    let name = fillers.fetch_add(1, Ordering::Relaxed);
    let home = 0x4000_0000 + (name.wrapping_mul(0x9E37_79B9) % 0x8000_0000) as u32;
    assert!(put_carried(map, name, carried(7, home), 0));
}

/// Puts fillers (`more`) until a rebuild this thread makes hashes the key
/// named `last`: every group before the last one moved, the new table
/// linked, not published. There it says so on `stopped`, and waits to be
/// let go on `go` (for `bound` at most, so that a failure fails rather
/// than hangs).
fn grow_until_stopped_at(
    last: u64,
    more: impl Fn(),
    stopped: std::sync::mpsc::Sender<()>,
    go: std::sync::mpsc::Receiver<()>,
    bound: std::time::Duration,
) {
    use std::cell::Cell;
    use std::rc::Rc;
    // Set and read on this thread alone.
    let seen = Rc::new(Cell::new(false));
    let seen_at_stop = Rc::clone(&seen);
    arm(Some(last), move || {
        seen_at_stop.set(true);
        stopped.send(()).unwrap();
        let _ = go.recv_timeout(bound);
    });
    for _ in 0..100_000 {
        if seen.get() {
            break;
        }
        more();
    }
}

/// A lookup stopped inside its search of a table, while a rebuild of
/// that table moves the key on and is itself stopped before it publishes
/// the new table, still finds the key: linked and not yet published, the
/// new table is where the key now is. (A lookup that took its miss in the
/// old table for an answer, or that looked no further once a rebuild had
/// linked a table, would report a known client absent.)
#[test]
fn a_lookup_stopped_while_a_rebuild_moves_its_key_finds_it_in_the_linked_table() {
    use std::sync::mpsc;

    let map: Map<Stalling, StateCell, Carried> = Map::with_hasher(Carried);
    // Eight keys of the sought key's very hash fill its home group (the
    // first), so it lies in the second, and the lookup compares it with
    // each of the eight first. One more key lies in the last group.
    let hash = carried(5, 0);
    for name in 0..8 {
        assert!(put_carried(&map, name, hash, name));
    }
    let (sought, last) = (100, 200);
    assert!(put_carried(&map, sought, hash, 42));
    assert!(put_carried(&map, last, carried(9, u32::MAX), 0));
    // Keys of another tag, homed in the middle half of the groups.
    let fillers = PlainAtomicU64::new(1_000);
    let more = || put_filler(&map, &fillers);
    let table = || {
        let guard = epoch::pin();
        Map::<Stalling, StateCell, Carried>::current(map.shard(hash), &guard)
            .map(|t| ptr::from_ref(t) as usize)
    };
    // Past a rebuild or two, so that the table has groups to spare.
    let first = table();
    while table() == first || map.len() < 64 {
        more();
    }
    // Each stopped thread says so, and waits to be let go; every wait is
    // bounded, so that a failure fails rather than hangs.
    let bound = std::time::Duration::from_secs(60);
    let (lookup_in, lookup_stopped) = mpsc::channel();
    let (lookup_go, lookup_waits) = mpsc::channel::<()>();
    let (rebuild_in, rebuild_stopped) = mpsc::channel();
    let (rebuild_go, rebuild_waits) = mpsc::channel::<()>();
    // The layout the stops rely on (the same on every run: no seed): the
    // rebuild moves the sought key's group, and retags it, before the
    // last key's.
    let group_of = |name: u64, hash: u64| {
        let guard = epoch::pin();
        let table = Map::<Stalling, StateCell, Carried>::current(map.shard(hash), &guard);
        table
            .and_then(|t| t.find(hash, &Stalling { name, hash }))
            .map(|(index, _)| index / LANES)
    };
    let (here, there) = (group_of(sought, hash), group_of(last, carried(9, u32::MAX)));
    assert!(
        matches!((here, there), (Some(a), Some(b)) if a < b),
        "groups {here:?} and {there:?}"
    );
    let (map, more) = (&map, &more);
    let found = thread::scope(|scope| {
        let lookup = scope.spawn(move || {
            // At its first comparison, with the eight keys of the home group.
            arm(None, move || {
                lookup_in.send(()).unwrap();
                let _ = lookup_waits.recv_timeout(bound);
            });
            map.get(&Stalling { name: sought, hash }, StateCell::load)
                .ok()
        });
        lookup_stopped
            .recv_timeout(bound)
            .expect("the lookup stops at its first comparison");
        let rebuild = scope
            .spawn(move || grow_until_stopped_at(last, more, rebuild_in, rebuild_waits, bound));
        let stopped = rebuild_stopped.recv_timeout(bound);
        lookup_go.send(()).unwrap();
        let found = lookup.join();
        rebuild_go.send(()).unwrap();
        rebuild.join().unwrap();
        stopped.expect("a rebuild stops at its hash of the key in the last group");
        found.unwrap()
    });
    assert_eq!(found, Some(42), "found while the rebuild was stopped");
    let found = map.get(&Stalling { name: sought, hash }, StateCell::load);
    assert_eq!(found.ok(), Some(42));
}

/// While a rebuild is stopped with the new table linked and not yet
/// published (at its hash of the key in the last group), first requests
/// of the shard take no lock: a new key goes into the linked table, once
/// however many insert it at once, and a key the old table still holds,
/// or one already moved, is answered present. The rebuild then publishes
/// the table with them, its counts equal to its tags.
#[test]
fn inserts_while_a_rebuild_is_stopped_go_into_the_linked_table_without_waiting() {
    use std::sync::mpsc;

    let map: Map<Stalling, StateCell, Carried> = Map::with_hasher(Carried);
    let (moved, last) = (100, 200);
    let moved_hash = carried(5, 0);
    let last_hash = carried(9, u32::MAX);
    assert!(put_carried(&map, moved, moved_hash, 1));
    assert!(put_carried(&map, last, last_hash, 2));
    let fillers = PlainAtomicU64::new(1_000);
    let more = || put_filler(&map, &fillers);
    let bound = std::time::Duration::from_secs(60);
    let (rebuild_in, rebuild_stopped) = mpsc::channel();
    let (rebuild_go, rebuild_waits) = mpsc::channel::<()>();
    let (map, more) = (&map, &more);
    let newcomer = |name: u64| Stalling {
        name,
        hash: carried(11, 0x2000_0000 + name as u32),
    };
    thread::scope(|scope| {
        let rebuild = scope
            .spawn(move || grow_until_stopped_at(last, more, rebuild_in, rebuild_waits, bound));
        rebuild_stopped
            .recv_timeout(bound)
            .expect("a rebuild stops at its hash of the key in the last group");
        let linked = {
            let guard = epoch::pin();
            Map::<Stalling, StateCell, Carried>::current(map.shard(last_hash), &guard)
                .is_some_and(|table| table.next(&guard).is_some())
        };
        assert!(linked, "the rebuild stopped with the new table linked");
        // The first requests, on threads of their own: each must answer
        // while the rebuild holds the shard's lock.
        let (answers_in, answers) = mpsc::channel();
        let inserts: Vec<_> = [(1, 10), (1, 11), (2, 12)]
            .into_iter()
            .map(|(name, word)| {
                let answers_in = answers_in.clone();
                scope.spawn(move || {
                    let put = put_carried(map, name, newcomer(name).hash, word);
                    answers_in.send(()).unwrap();
                    put
                })
            })
            .collect();
        for _ in 0..3 {
            answers
                .recv_timeout(std::time::Duration::from_secs(30))
                .expect("a first request answered while the rebuild moving its shard is stopped");
        }
        let put: Vec<bool> = inserts.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(
            put.iter().filter(|&&put| put).count(),
            2,
            "two keys, each inserted once: {put:?}"
        );
        assert!(put[2], "the key inserted alone");
        // Present: moved already, and not yet moved.
        let answer = |name, hash| {
            map.insert(
                None,
                Stalling { name, hash },
                StateCell::new(99),
                NO_SWEEP,
                |_| unreachable!("nothing dies"),
                |_| (),
            )
            .map_err(|back| back.map(|cell| cell.load()))
        };
        assert_eq!(answer(moved, moved_hash), Err(Some(99)), "a key moved");
        assert_eq!(
            answer(last, last_hash),
            Err(Some(99)),
            "a key not yet moved"
        );
        assert!(
            rebuild_stopped.try_recv().is_err(),
            "the rebuild stops once"
        );
        rebuild_go.send(()).unwrap();
        rebuild.join().unwrap();
    });
    let one = map.get(&newcomer(1), StateCell::load).ok();
    assert!(matches!(one, Some(10 | 11)), "{one:?}");
    assert_eq!(map.get(&newcomer(2), StateCell::load).ok(), Some(12));
    assert_eq!(word_carried(map, moved, moved_hash), Some(1));
    assert_eq!(word_carried(map, last, last_hash), Some(2));
    assert_published_whole(map, last_hash);
}

/// After a rebuild: the table of `hash`'s shard published, its counts
/// kept as it moved (equal to its tags), and the map's length its own.
fn assert_published_whole(map: &Map<Stalling, StateCell, Carried>, hash: u64) {
    let guard = epoch::pin();
    let table =
        Map::<Stalling, StateCell, Carried>::current(map.shard(hash), &guard).expect("a table");
    assert!(table.next(&guard).is_none(), "published");
    assert_eq!(
        table.counts(),
        table.count(),
        "the counts, kept as it moved"
    );
    assert_eq!(map.len(), table.count().live as u64);
}

fn word_carried(map: &Map<Stalling, StateCell, Carried>, name: u64, hash: u64) -> Option<u64> {
    map.get(&Stalling { name, hash }, StateCell::load).ok()
}

/// A first request that finds its shard's table full while another
/// writer holds the shard's lock, and that writer then rebuilds the table,
/// waits only until the rebuild links its new table, and inserts there
/// while the rebuild moves the entries (here, stopped at its hash of a key
/// in the last group). A first request that waited for the lock would wait
/// out the whole move.
#[test]
fn a_first_request_that_met_a_full_table_goes_on_once_the_rebuild_links_its_new_one() {
    use std::sync::mpsc;

    type Carrying = Map<Stalling, StateCell, Carried>;
    let map: Carrying = Map::with_hasher(Carried);
    let (last, last_hash) = (200, carried(9, u32::MAX));
    assert!(put_carried(&map, last, last_hash, 2));
    // The writer's key shares its hash with a key already in, so that its
    // search under the lock compares the two: where it stops first.
    let (twin, writer, shared) = (300, 301, carried(13, 0));
    assert!(put_carried(&map, twin, shared, 3));
    // Fill the table to its last slot: the next first request has no room.
    let fillers = PlainAtomicU64::new(1_000);
    let full = || {
        let guard = epoch::pin();
        let table = Carrying::current(map.shard(last_hash), &guard).expect("a table");
        table.counts().used >= max_used(table.capacity())
    };
    while !full() {
        put_filler(&map, &fillers);
    }
    let bound = std::time::Duration::from_secs(60);
    let (stopped_in, stopped) = mpsc::channel();
    let (go_in, go) = mpsc::channel::<()>();
    let newcomer = Stalling {
        name: 1,
        hash: carried(11, 0x2000_0000),
    };
    let map = &map;
    thread::scope(|scope| {
        let rebuild = scope.spawn(move || {
            let miss = match map.lookup(
                &Stalling {
                    name: writer,
                    hash: shared,
                },
                |_| (),
            ) {
                Ok(()) => unreachable!("the writer's key is new"),
                Err((_, miss)) => miss,
            };
            // First stop: under the lock, before any rebuild; second: in
            // the rebuild's move, its new table linked.
            let (stopped_in, go) = (stopped_in.clone(), go);
            arm(None, move || {
                stopped_in.send("holding the lock").unwrap();
                let _ = go.recv_timeout(bound);
                arm(Some(last), move || {
                    stopped_in.send("moving").unwrap();
                    let _ = go.recv_timeout(bound);
                });
            });
            let put = map.insert(
                Some(&miss),
                Stalling {
                    name: writer,
                    hash: shared,
                },
                StateCell::new(4),
                NO_SWEEP,
                |_| unreachable!("nothing dies"),
                |_| (),
            );
            assert!(put.is_ok());
        });
        assert_eq!(stopped.recv_timeout(bound), Ok("holding the lock"));
        assert!(
            map.shard(shared).lock.try_lock().is_err(),
            "the writer holds the lock"
        );
        let (answered_in, answered) = mpsc::channel();
        let first = scope.spawn(move || {
            let put = put_carried(map, newcomer.name, newcomer.hash, 10);
            answered_in.send(()).unwrap();
            put
        });
        // The first request waits for the writer holding the lock, which
        // then rebuilds, links its new table and stops in the move.
        let asleep = std::time::Instant::now();
        // Relaxed: the waiter counts itself once it found no room, with
        // the lock held; whether it then sees the link or sleeps, it is
        // at the gate before the rebuild links its table.
        while map.shard(shared).gate.waiters.load(Ordering::Relaxed) == 0 {
            assert!(
                asleep.elapsed() < bound,
                "the first request waits at the gate"
            );
            thread::yield_now();
        }
        go_in.send(()).unwrap();
        assert_eq!(stopped.recv_timeout(bound), Ok("moving"));
        let in_time = answered.recv_timeout(std::time::Duration::from_secs(30));
        go_in.send(()).unwrap();
        assert!(
            in_time.is_ok(),
            "a first request that met a full table waited for the rebuild's move"
        );
        assert!(first.join().unwrap(), "the newcomer inserted once");
        rebuild.join().unwrap();
        // Relaxed: after the joins. The writer's one check, as it took the
        // lock, and the request's two, before its sleep and once the link
        // woke it (a few spurious wake-ups aside): it slept, not spun.
        let checks = map.shard(shared).gate.checks.load(Ordering::Relaxed);
        assert!(
            (3..=6).contains(&checks),
            "it slept at the gate: {checks} checks"
        );
    });
    let newcomer = Stalling {
        name: 1,
        hash: carried(11, 0x2000_0000),
    };
    assert_eq!(map.get(&newcomer, StateCell::load).ok(), Some(10));
    assert_eq!(word_carried(map, writer, shared), Some(4));
    assert_eq!(word_carried(map, twin, shared), Some(3));
    assert_eq!(word_carried(map, last, last_hash), Some(2));
    assert_published_whole(map, last_hash);
}
