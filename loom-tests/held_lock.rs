//! Model 17: removing or resetting a client never waits for a writer that
//! holds its shard, and loses or doubles no admission.
//!
//! The client's state has spent its capacity of 1 at the frozen instant
//! `NOW`. One thread stands for a writer of the client's shard stalled
//! holding its lock (an insert, a sweep, a rebuild descheduled): it takes
//! the stand-in's writers' lock, yields, and lets go. A third thread checks
//! the client once. The main thread removes the client (`Limiter::remove`:
//! the crate's `forget_client`) or resets it (`Limiter::reset`: the
//! crate's `reset_client`, in place for a token bucket, by forgetting for
//! a log); afterwards one more check drains.
//!
//! Properties, in every interleaving: the main thread never found the
//! writers' lock held, that is, never waited for it (the stand-in records
//! every thread that did; the racing check may, on its insert path, where
//! waiting is allowed), and loom reaches the interleavings where the whole
//! removal runs while the writer holds the lock; the removal (reset)
//! reports the live client; exactly one of the two checks is admitted (the
//! racing check's if it came after, else the drain's); and the map ends
//! holding one live cell: a dead entry the removal had to leave behind
//! reads as absent, and the next check takes it out.
//!
//! The broken twin removes as the store did before: retire, then a removal
//! that takes the writers' lock, waiting for it. Loom finds the
//! interleaving where the writer holds it.

use std::sync::atomic::{AtomicBool as StdAtomicBool, Ordering::Relaxed};
use std::sync::Arc as StdArc;

use loom::sync::Arc;
use loom::thread;

use crate::arrival::Room;
use crate::eviction::{bucket, check, check_at, log};
use crate::stand_in::StandIn;
use tollgate::__loom::{forget_client, reset_client, Algorithm, Index, Mortal, Purge};

const KEY: &str = "alice";

/// The frozen instant of every check: the admission at `NOW` is spent.
const NOW: u64 = 100;

/// What the main thread does to the client.
type Act<A> = fn(&A, &StandIn<<A as Algorithm>::Cell>, &Room) -> bool;

/// `Limiter::remove`: the reading recorded as an eviction's, then the
/// crate's `forget_client`.
fn remove<A: Algorithm>(algorithm: &A, index: &StandIn<A::Cell>, room: &Room) -> bool {
    room.evicting(NOW);
    forget_client(index, KEY, |cell| algorithm.force_evict(cell))
}

/// `Limiter::reset`: the crate's `reset_client`, a log forgotten.
fn reset<A: Algorithm>(algorithm: &A, index: &StandIn<A::Cell>, room: &Room) -> bool {
    reset_client(
        index,
        KEY,
        |cell| algorithm.reset(cell, NOW),
        || remove(algorithm, index, room),
    )
}

/// The broken twin: retire, then remove the dead entry by the removal that
/// waits for the writers' lock.
fn remove_waiting<A: Algorithm>(algorithm: &A, index: &StandIn<A::Cell>, room: &Room) -> bool {
    room.evicting(NOW);
    let retired = Index::with(index, KEY, |cell| algorithm.force_evict(cell)).unwrap_or(false);
    if retired {
        let _ = Purge::remove_if(index, KEY, Mortal::is_dead);
    }
    retired
}

/// The race; returns the interleavings, the fewest and most racing checks
/// admitted, and whether any removal left a dead entry in place because
/// the writer held the lock.
fn race<A>(name: &str, algorithm: A, act: Act<A>) -> (usize, u64, u64, bool)
where
    A: Algorithm + Copy,
{
    assert_eq!(algorithm.capacity(), 1);
    let label = name.to_owned();
    // Outside the model: whether any interleaving left an entry behind.
    let left = StdArc::new(StdAtomicBool::new(false));
    let seen = StdArc::clone(&left);
    let (runs, min, max) = check(name, move || {
        let spent = algorithm.new_cell();
        assert!(algorithm.admit(&spent, NOW, 1));
        let index = Arc::new(StandIn::holding(KEY, spent));
        let room = Arc::new(Room::holding(1, None));
        let writer = {
            let index = Arc::clone(&index);
            thread::spawn(move || {
                let held = index.hold_writers();
                thread::yield_now();
                drop(held);
            })
        };
        let checker = {
            let (index, room) = (Arc::clone(&index), Arc::clone(&room));
            thread::spawn(move || check_at(algorithm, &index, &room, NOW, false))
        };
        let done = act(&algorithm, &index, &room);
        let waited = index.waited(thread::current().id());
        writer.join().unwrap();
        let theirs = checker.join().unwrap();
        let name = &label;
        assert!(!waited, "{name}: waited for the writers' lock");
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
        if index.left_one() {
            seen.store(true, Relaxed);
        }
        u64::from(theirs)
    });
    (runs, min, max, left.load(Relaxed))
}

#[test]
fn remove_vs_a_held_lock_and_a_check_token_bucket() {
    // The racing check is admitted iff it came after the removal; some
    // removals ran while the writer held the lock, and left the dead entry.
    let (_, min, max, left) = race("held_lock/remove/token_bucket", bucket(), remove);
    assert_eq!((min, max), (0, 1), "both orders reached");
    assert!(left, "no removal met the held lock");
}

#[test]
fn reset_vs_a_held_lock_and_a_check_token_bucket() {
    // In place: the writers' lock is never needed.
    let (_, min, max, left) = race("held_lock/reset/token_bucket", bucket(), reset);
    assert_eq!((min, max), (0, 1), "both orders reached");
    assert!(!left);
}

#[test]
fn reset_vs_a_held_lock_and_a_check_sliding_window_log() {
    let (_, min, max, left) = race("held_lock/reset/sliding_window_log", log(), reset);
    assert_eq!((min, max), (0, 1), "both orders reached");
    assert!(left, "no removal met the held lock");
}

#[test]
#[should_panic(expected = "waited for the writers' lock")]
fn a_removal_that_waits_for_the_lock_is_caught() {
    let _ = race("held_lock/broken/token_bucket", bucket(), remove_waiting);
}
