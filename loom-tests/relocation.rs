//! Model 8: a table rebuild moving a client's cell while checks run on it.
//!
//! The store's table grows (and shrinks) by rebuilding a shard into a new
//! table, and a check may still hold a reference into the old one: it
//! looked the client up just before the move. The rebuild *relocates* each
//! cell (`Mortal::relocate`): a word cell is frozen by exchanging its word
//! for the tombstone, and that word is carried into the new copy; so a
//! compare-and-swap through the old copy either lands before the freeze
//! (and is carried) or fails against the tombstone, and its thread goes
//! round through the map to the new copy. A log is a handle to state that
//! never moves, and is moved as it is.
//!
//! The models run the crate's own protocol (`check_or_insert`) over the
//! loom-aware stand-in, whose `relocate` moves the entry as a rebuild does,
//! holding the lock, while a check may hold the old cell:
//!
//! * a known client, checked by two threads, one of which first relocates
//!   the entry: exactly `capacity` (1) admissions, and the map ends with one
//!   live cell that shows it;
//! * a new client: one thread brings it in while the other relocates its
//!   unborn (or claimed, which the freeze waits for) cell and then checks:
//!   again exactly one admission and one live entry.
//!
//! The broken twin copies the word without freezing it: a check holding
//! the old copy admits there, after the copy was taken, and the other
//! check admits again on the new copy. Loom finds that interleaving.

use loom::sync::Arc;
use loom::thread;

use crate::arrival::Room;
use crate::eviction::{bucket, check, check_at, log};
use crate::stand_in::StandIn;
use tollgate::__loom::{Algorithm, Mortal, Relocation, StateCell};

const KEY: &str = "alice";

/// A frozen instant at which a fresh state admits exactly one check.
const NOW: u64 = 100;

/// How the rebuild moves a word cell: the crate's freeze, or the bug.
type Move = fn(&StateCell) -> Relocation<StateCell>;

fn freeze(cell: &StateCell) -> Relocation<StateCell> {
    cell.relocate()
}

/// The bug: the new copy takes the word as it is now, and the old copy
/// stays live for whoever holds it.
fn copy_without_freezing(cell: &StateCell) -> Relocation<StateCell> {
    Relocation::Moved(StateCell::new(cell.load()))
}

/// Two checks race a relocation of `start`'s entry (a fresh live cell, or
/// none: a new client); exactly one must be admitted, and the map must end
/// with one live cell that shows it.
pub(crate) fn race<A>(
    name: &str,
    algorithm: A,
    known: bool,
    relocate: fn(&A::Cell) -> Relocation<A::Cell>,
) -> (usize, u64, u64)
where
    A: Algorithm + Copy,
{
    assert_eq!(algorithm.capacity(), 1);
    let label = name.to_owned();
    check(name, move || {
        let index = Arc::new(if known {
            StandIn::holding(KEY, algorithm.new_cell())
        } else {
            StandIn::new(false)
        });
        // A known client already holds its unit of room.
        let room = Arc::new(Room::holding(u64::from(known), None));
        let mover = {
            let (index, room) = (Arc::clone(&index), Arc::clone(&room));
            thread::spawn(move || {
                index.relocate(KEY, relocate);
                check_at(algorithm, &index, &room, NOW, false)
            })
        };
        let ours = check_at(algorithm, &index, &room, NOW, false);
        let theirs = mover.join().unwrap();
        let admitted = u64::from(ours) + u64::from(theirs);
        let name = &label;
        assert!(
            admitted <= 1,
            "{name}: over-admitted: {admitted} admitted with capacity 1"
        );
        assert!(
            admitted >= 1,
            "{name}: under-admitted: none of the two checks"
        );
        let map = index.snapshot();
        assert_eq!(map.len(), 1, "{name}: one client, one entry");
        let kept = &map[KEY];
        assert!(!kept.is_dead(), "{name}: the map kept a dead cell");
        assert_eq!(
            algorithm.peek(kept, NOW, 1).remaining(),
            0,
            "{name}: lost an admission: the kept cell does not show it"
        );
        assert_eq!(room.held(), 1, "{name}: the client holds one unit of room");
        admitted
    })
}

#[test]
fn relocation_vs_checks_known_client_token_bucket() {
    let (_, min, max) = race(
        "relocation/known/token_bucket",
        bucket(),
        true,
        freeze as Move,
    );
    assert_eq!((min, max), (1, 1));
}

#[test]
fn relocation_vs_checks_new_client_token_bucket() {
    let (_, min, max) = race(
        "relocation/new/token_bucket",
        bucket(),
        false,
        freeze as Move,
    );
    assert_eq!((min, max), (1, 1));
}

#[test]
fn relocation_vs_checks_known_client_sliding_window_log() {
    let (_, min, max) = race(
        "relocation/known/sliding_window_log",
        log(),
        true,
        Mortal::relocate,
    );
    assert_eq!((min, max), (1, 1));
}

#[test]
#[should_panic(expected = "over-admitted")]
fn relocation_without_freezing_is_caught() {
    let _ = race(
        "relocation/broken/token_bucket",
        bucket(),
        true,
        copy_without_freezing as Move,
    );
}
