//! Model 8: a table rebuild moving a client's cell while checks run on it.
//!
//! The store's table grows (and shrinks) by rebuilding a shard into a new
//! table, and a check may still hold a reference into the old one: it
//! looked the client up just before the move. The rebuild links the new
//! table from the old one, then moves each entry: it copies the cell's
//! state (`Mortal::relocate`), places the copy in the new table, and
//! forwards the old cell by one exchange from the very state copied
//! (`Mortal::forward`, to a mark of its own); if a check changed the state
//! first, the exchange fails and the move copies again into the same slot.
//! A check through the old copy either lands before the exchange (and is
//! copied) or fails against the mark, and its thread finds the copy
//! through the link. (The other writers of the word racing a move, and a
//! lookup rule that follows the link from any dead cell, are model 18's:
//! `moving.rs`.)
//! A log is a handle to state that never moves, and is moved as it is.
//!
//! The models run the crate's own protocol (`check_or_insert`) over the
//! loom-aware stand-in, whose `relocate` moves the entry in the table's
//! steps, holding the writers' lock, each step its own loom step, so the
//! move is stalled between every two of them while a check may hold the
//! old cell:
//!
//! * a known client, checked by two threads, one of which first moves the
//!   entry: exactly `capacity` (1) admissions, the map ends with one live
//!   cell that shows it, and the other thread's check never found the
//!   writers' lock held (a check never waits for the rebuild);
//! * a new client: one thread brings it in while the other moves its
//!   unborn (or claimed, which the move waits for) cell and then checks:
//!   again exactly one admission and one live entry.
//!
//! The broken twin moves without the exchange: it marks the old cell moved
//! whatever it holds now. A check that admits on the old copy after the
//! copy was taken is lost with it, and the other check admits again on the
//! new copy. Loom finds that interleaving.

use loom::sync::Arc;
use loom::thread;

use crate::arrival::Room;
use crate::eviction::{bucket, check, check_at, log};
use crate::stand_in::StandIn;
use tollgate::__loom::{Algorithm, Mortal, Relocation, Seal, StateCell};

const KEY: &str = "alice";

/// A frozen instant at which a fresh state admits exactly one check.
const NOW: u64 = 100;

/// How the rebuild marks a moved word cell: the crate's exchange, or the
/// bug.
type Forward = fn(&StateCell, Seal) -> bool;

/// The bug: the old copy is marked moved whatever it holds now (an
/// unconditional retirement), not only from the state copied.
fn forward_without_the_exchange(cell: &StateCell, _seal: Seal) -> bool {
    let _ = bucket().force_evict(cell);
    true
}

/// Two checks race a relocation of `start`'s entry (a fresh live cell, or
/// none: a new client); exactly one must be admitted, and the map must end
/// with one live cell that shows it.
pub(crate) fn race<A>(
    name: &str,
    algorithm: A,
    known: bool,
    relocate: fn(&A::Cell) -> Relocation<A::Cell>,
    forward: fn(&A::Cell, Seal) -> bool,
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
                index.relocate_with(KEY, relocate, forward);
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
        if known {
            assert!(
                !index.anyone_waited(),
                "{name}: a check on a known client waited for the rebuild"
            );
        }
        admitted
    })
}

#[test]
fn relocation_vs_checks_known_client_token_bucket() {
    let (_, min, max) = race(
        "relocation/known/token_bucket",
        bucket(),
        true,
        Mortal::relocate,
        Mortal::forward as Forward,
    );
    assert_eq!((min, max), (1, 1));
}

#[test]
fn relocation_vs_checks_new_client_token_bucket() {
    let (_, min, max) = race(
        "relocation/new/token_bucket",
        bucket(),
        false,
        Mortal::relocate,
        Mortal::forward as Forward,
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
        Mortal::forward,
    );
    assert_eq!((min, max), (1, 1));
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_move_without_the_exchange_is_caught() {
    let _ = race(
        "relocation/broken/token_bucket",
        bucket(),
        true,
        Mortal::relocate,
        forward_without_the_exchange as Forward,
    );
}
