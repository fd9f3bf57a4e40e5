//! The table's own tests: lookups, removals, rebuilds and sweeps, alone
//! and racing, a module per subject; the helpers they share are here.

use std::collections::HashMap;
use std::sync::Barrier;
use std::thread;

use super::table::{
    groups_for, max_used, zero_bytes, Counts, DEAD_SPARES, FULL, LANES, MOVED, SHARD_BITS,
};
use super::*;
use crate::cell::{Life, StateCell};
use crate::sync::PlainAtomicU64;

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

mod claims;
mod lookups;
mod rebuilds;
mod reclaim;
mod removals;
mod walks;
