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
