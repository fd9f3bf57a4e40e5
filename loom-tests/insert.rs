//! Model 4: the first request from a new client.
//!
//! Threads that see an unknown client at the same moment must create one
//! state between them, and every admission must land in the state the map
//! keeps: an admission recorded in a cell that lost the insert race would be
//! forgotten, and the client could spend its capacity twice.
//!
//! **A stand-in for the map.** The store's table is not loom-aware, so
//! this model runs the store's protocol (the crate's own
//! `get_or_insert`, the function `Store` calls) over [`StandIn`] (`stand_in.rs`), a
//! `loom::sync::Mutex<HashMap<..>>` that implements the same
//! [`Index`](tollgate::__loom::Index) contract: `insert` adds a key only if
//! it is absent and otherwise hands the value back, and `with` sees every
//! insert that happened before it. The table's own correctness is checked
//! by its tests, under Miri and ThreadSanitizer; tollgate's protocol on top
//! of it is what this checks. The stand-in takes its lock only to look up or insert and runs the caller's
//! closure after releasing it, so checks on the found cell race freely, as
//! they do over the table's lock-free reads.

use std::sync::Arc as StdArc;
use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use tollgate::__loom::{get_or_insert, Algorithm};
use tollgate::TokenBucket;

use crate::harness::{assert_reached, check, Explored, MakeCell, WordCell, REAL};
use crate::stand_in::StandIn;

/// The client every thread asks for.
const KEY: &str = "alice";

/// `threads` threads each make `per_thread` checks for a client no thread
/// has seen, through `get_or_insert` over a fresh [`StandIn`], with a
/// frozen clock and a token bucket of `capacity` (more requests than that in
/// all). In every interleaving: the map holds exactly one cell, every check
/// ran on that cell, exactly `capacity` were admitted, and the cell's word
/// shows all of them.
pub(crate) fn first_request(
    make: MakeCell,
    replace_on_insert: bool,
    threads: usize,
    capacity: u64,
    per_thread: u64,
) -> Explored {
    let bucket: TokenBucket =
        tollgate::__loom::token_bucket(1, Duration::from_nanos(1), capacity).unwrap();
    assert!(threads as u64 * per_thread > capacity);
    let broken = if replace_on_insert {
        "/replacing_map"
    } else {
        ""
    };
    let label = format!("first_request{broken}/{threads}x{per_thread}/cap{capacity}");
    let name = label.clone();
    check(&label, move |tally| {
        let index = Arc::new(StandIn::<WordCell>::new(replace_on_insert));
        // One client thread's checks: how many were admitted, and the
        // address of every cell a check ran on.
        let client = move |index: &StandIn<WordCell>| {
            let mut admitted = 0;
            let mut used = Vec::new();
            for _ in 0..per_thread {
                let fresh = bucket.new_cell().load();
                let ok = get_or_insert(
                    index,
                    KEY,
                    || make.word(fresh),
                    |cell: &WordCell| {
                        used.push(std::ptr::from_ref(cell) as usize);
                        cell.admit(&bucket, 0, 1)
                    },
                );
                admitted += u64::from(ok);
            }
            (admitted, used)
        };
        let others: Vec<_> = (1..threads)
            .map(|_| {
                let index = Arc::clone(&index);
                thread::spawn(move || client(&index))
            })
            .collect();
        let (mut admitted, mut used) = client(&index);
        for other in others {
            let (a, u) = other.join().unwrap();
            admitted += a;
            used.extend(u);
        }
        tally.record(admitted);

        assert!(
            admitted <= capacity,
            "{name}: over-admitted: {admitted} admitted with capacity {capacity}"
        );
        assert!(
            admitted >= capacity,
            "{name}: under-admitted: {admitted} admitted with capacity {capacity}"
        );
        let map = index.snapshot();
        assert_eq!(map.len(), 1, "{name}: one client, one cell");
        let kept = &map[KEY];
        let kept_at = StdArc::as_ptr(kept) as usize;
        assert!(
            used.iter().all(|&at| at == kept_at),
            "{name}: lost an admission: a check ran on a cell the map does not hold"
        );
        assert!(
            kept.remaining(&bucket, 0) == 0,
            "{name}: over-admitted via a lost update: the kept cell's word does not show every admission"
        );
    })
}

#[test]
fn two_threads_create_one_cell_capacity_1() {
    assert_reached(first_request(REAL, false, 2, 1, 1), 1, 1);
}

#[test]
fn two_threads_create_one_cell_capacity_2() {
    assert_reached(first_request(REAL, false, 2, 2, 2), 2, 2);
}

#[test]
fn three_threads_create_one_cell_capacity_2() {
    assert_reached(first_request(REAL, false, 3, 2, 1), 2, 2);
}
