//! Model 11: resetting or removing one client while a table rebuild moves
//! its cell and a check runs on it.
//!
//! The client's state has spent its capacity of 1 at the frozen instant
//! `NOW`. One thread moves the entry as a rebuild does (copying its word to
//! a new cell, then marking the old copy moved by one exchange from that
//! word) and then checks; the other
//! resets (or removes) the client through the crate's own `reset_client`
//! (or `forget_client`) over the algorithm's `reset` (or `force_evict`),
//! the functions `Limiter::reset` and `Limiter::remove` run. Afterwards one
//! more check drains.
//!
//! The client is tracked throughout, so the reset (removal) must take
//! effect: it reports a live client, and of the two checks exactly one is
//! admitted (the relocating thread's, if it came after the reset; else the
//! drain). A reset that met the moved copy and gave up would be lost, and
//! neither check would be admitted.
//!
//! The broken twin looks once and does not look past a dead cell: loom
//! finds the interleaving where its one look is at the copy the rebuild
//! has just marked moved.

use loom::sync::Arc;
use loom::thread;

use crate::arrival::Room;
use crate::eviction::{bucket, check, check_at, log};
use crate::stand_in::StandIn;
use tollgate::__loom::{forget_client, reset_client, Algorithm, Index, Mortal};

const KEY: &str = "alice";

/// The frozen instant of every check: the admission at `NOW` is spent.
const NOW: u64 = 100;

/// What the other thread does to the client: the crate's way, or the bug.
type Act<A> = fn(&A, &StandIn<<A as Algorithm>::Cell>, &Room) -> bool;

/// `Limiter::reset`: the crate's `reset_client`, a log forgotten.
fn reset<A: Algorithm>(algorithm: &A, index: &StandIn<A::Cell>, room: &Room) -> bool {
    reset_client(
        index,
        KEY,
        |cell| algorithm.reset(cell, NOW),
        || remove(algorithm, index, room),
    )
}

/// `Limiter::remove`: record the reading as an eviction's, then the crate's
/// `forget_client`.
fn remove<A: Algorithm>(algorithm: &A, index: &StandIn<A::Cell>, room: &Room) -> bool {
    room.evicting(NOW);
    forget_client(index, KEY, |cell| algorithm.force_evict(cell))
}

/// The bug: one look at whatever cell the map showed, no second look past
/// a copy a rebuild froze meanwhile.
fn reset_looking_once<A: Algorithm>(algorithm: &A, index: &StandIn<A::Cell>, _: &Room) -> bool {
    Index::with(index, KEY, |cell| algorithm.reset(cell, NOW) == Some(true)).unwrap_or(false)
}

fn race<A>(name: &str, algorithm: A, act: Act<A>) -> (usize, u64, u64)
where
    A: Algorithm + Copy,
{
    assert_eq!(algorithm.capacity(), 1);
    let label = name.to_owned();
    check(name, move || {
        let spent = algorithm.new_cell();
        assert!(algorithm.admit(&spent, NOW, 1));
        let index = Arc::new(StandIn::holding(KEY, spent));
        let room = Arc::new(Room::holding(1, None));
        let mover = {
            let (index, room) = (Arc::clone(&index), Arc::clone(&room));
            thread::spawn(move || {
                index.relocate(KEY, Mortal::relocate);
                check_at(algorithm, &index, &room, NOW, false)
            })
        };
        let done = act(&algorithm, &index, &room);
        let theirs = mover.join().unwrap();
        let name = &label;
        assert!(done, "{name}: lost: the tracked client was not reset");
        let drain = check_at(algorithm, &index, &room, NOW, false);
        let admitted = u64::from(theirs) + u64::from(drain);
        assert!(
            admitted <= 1,
            "{name}: over-admitted: {admitted} admitted after one reset of capacity 1"
        );
        assert!(
            admitted >= 1,
            "{name}: under-admitted: the reset gave nothing back"
        );
        let map = index.snapshot();
        assert_eq!(map.len(), 1, "{name}: one client, one entry");
        assert!(!map[KEY].is_dead(), "{name}: the map kept a dead cell");
        admitted
    })
}

#[test]
fn reset_vs_relocation_and_check_token_bucket() {
    let (_, min, max) = race("reset/token_bucket", bucket(), reset);
    assert_eq!((min, max), (1, 1));
}

#[test]
fn remove_vs_relocation_and_check_token_bucket() {
    let (_, min, max) = race("remove/token_bucket", bucket(), remove);
    assert_eq!((min, max), (1, 1));
}

#[test]
fn reset_vs_relocation_and_check_sliding_window_log() {
    let (_, min, max) = race("reset/sliding_window_log", log(), reset);
    assert_eq!((min, max), (1, 1));
}

#[test]
#[should_panic(expected = "lost")]
fn reset_that_looks_once_is_caught() {
    let _ = race("reset/broken/token_bucket", bucket(), reset_looking_once);
}
