//! A new client's first requests racing into the last room of a capped
//! limiter.
//!
//! The limiter has room for one client and holds none. Two threads check
//! the same new client at once (cost 1, capacity 1) through the crate's
//! `check_or_insert`, with the policy that admits a client refused room
//! untracked. The client must get one budget: in every interleaving exactly
//! one check is admitted, the map ends holding one live cell that shows it,
//! and exactly one unit of room is taken.
//!
//! The broken twin is the protocol before cells were inserted unborn: take
//! room first, then insert a live cell; a thread that finds no room applies
//! the policy at once, though the room it lacks was taken by a racer for
//! this very client, which then tracks it with a second budget.

use loom::sync::Arc;
use loom::thread;

use crate::arrival::{Arrival, Room};
use crate::eviction::{bucket, check, log};
use crate::stand_in::StandIn;
use tollgate::__loom::{check_or_insert, Algorithm, Index, Mortal, Newcomer, NoLapse};

const KEY: &str = "alice";

/// How a thread checks the new client.
type Protocol<A> = fn(A, &StandIn<<A as Algorithm>::Cell>, &Room) -> bool;

/// The crate's protocol.
fn crate_protocol<A: Algorithm + Copy>(
    algorithm: A,
    index: &StandIn<A::Cell>,
    room: &Room,
) -> bool {
    protocol_turning_away(algorithm, index, room, false)
}

/// The crate's protocol with a new client turned away at a full cap before
/// it is inserted (the limiter's non-evicting policies).
fn crate_protocol_turning_away<A: Algorithm + Copy>(
    algorithm: A,
    index: &StandIn<A::Cell>,
    room: &Room,
) -> bool {
    protocol_turning_away(algorithm, index, room, true)
}

fn protocol_turning_away<A: Algorithm + Copy>(
    algorithm: A,
    index: &StandIn<A::Cell>,
    room: &Room,
    turn_away: bool,
) -> bool {
    let arrival = Arrival::at(algorithm, room, 0, turn_away);
    check_or_insert(
        index,
        KEY,
        0,
        |cell: &A::Cell, now| algorithm.try_admit(cell, now, 1),
        &arrival,
    )
}

/// The bug: room first, then a live cell; no room means the policy.
fn room_first<A: Algorithm + Copy>(algorithm: A, index: &StandIn<A::Cell>, room: &Room) -> bool {
    let op = |cell: &A::Cell| algorithm.try_admit(cell, 0, 1);
    if let Ok(Some(admitted)) = index.with(KEY, op) {
        return admitted;
    }
    let arrival = Arrival::at(algorithm, room, 0, false);
    if !arrival.reserve() {
        // Admit untracked, on a fresh state that is never stored.
        return op(&algorithm.fresh_cell(0)) == Some(true);
    }
    match index.insert(
        None,
        KEY.to_owned(),
        algorithm.fresh_cell(0),
        None::<NoLapse>,
        op,
    ) {
        Ok(admitted) => admitted == Some(true),
        Err(_) => {
            arrival.release();
            index.with(KEY, op).ok().flatten() == Some(true)
        }
    }
}

/// The bug: a client that finds the room all taken is turned away at once,
/// though the last unit may have been taken by a racer for this very
/// client, which then tracks it with a second budget.
fn turned_away_without_looking_again<A: Algorithm + Copy>(
    algorithm: A,
    index: &StandIn<A::Cell>,
    room: &Room,
) -> bool {
    let op = |cell: &A::Cell| algorithm.try_admit(cell, 0, 1);
    if let Ok(Some(admitted)) = index.with(KEY, op) {
        return admitted;
    }
    let arrival = Arrival::at(algorithm, room, 0, true);
    if arrival.turn_away(0) {
        // Admit untracked, on a fresh state that is never stored.
        return op(&algorithm.fresh_cell(0)) == Some(true);
    }
    crate_protocol(algorithm, index, room)
}

fn race<A: Algorithm + Copy>(name: &str, algorithm: A, protocol: Protocol<A>) -> (usize, u64, u64) {
    assert_eq!(algorithm.capacity(), 1);
    let label = name.to_owned();
    check(name, move || {
        let index = Arc::new(StandIn::<A::Cell>::new(false));
        let room = Arc::new(Room::new(Some(1)));
        let other = {
            let (index, room) = (Arc::clone(&index), Arc::clone(&room));
            thread::spawn(move || protocol(algorithm, &index, &room))
        };
        let mine = protocol(algorithm, &index, &room);
        let theirs = other.join().unwrap();
        let admitted = u64::from(mine) + u64::from(theirs);
        let name = &label;
        assert!(
            admitted <= 1,
            "{name}: over-admitted: both first requests admitted at capacity 1"
        );
        assert!(admitted >= 1, "{name}: under-admitted: neither admitted");
        let map = index.snapshot();
        assert_eq!(map.len(), 1, "{name}: one client, one entry");
        assert!(
            map[KEY].life() == tollgate::__loom::Life::Live,
            "{name}: the entry is alive"
        );
        assert!(
            algorithm.peek(&map[KEY], 0, 1).is_denied(),
            "{name}: the kept cell does not show the admission"
        );
        assert_eq!(room.held(), 1, "{name}: one unit of room, taken once");
        admitted
    })
}

#[test]
fn first_requests_into_the_last_room_token_bucket() {
    let (_, min, max) = race("cap/token_bucket", bucket(), crate_protocol);
    assert_eq!((min, max), (1, 1));
}

#[test]
fn first_requests_into_the_last_room_sliding_window_log() {
    let (_, min, max) = race("cap/sliding_window_log", log(), crate_protocol);
    assert_eq!((min, max), (1, 1));
}

#[test]
fn first_requests_into_the_last_room_turned_away_token_bucket() {
    let (_, min, max) = race(
        "cap/turn_away/token_bucket",
        bucket(),
        crate_protocol_turning_away,
    );
    assert_eq!((min, max), (1, 1));
}

#[test]
#[should_panic(expected = "over-admitted")]
fn turning_away_without_looking_again_is_caught() {
    let _ = race(
        "cap/broken/turned_away_at_once",
        bucket(),
        turned_away_without_looking_again,
    );
}

#[test]
#[should_panic(expected = "over-admitted")]
fn room_before_insert_is_caught() {
    let _ = race("cap/broken/room_first", bucket(), room_first);
}

/// Room accounting when room frees up during the race: a limiter with room
/// for one client, already full, whose one unit a sweep gives back while two
/// first requests of a new client race. Each racer either runs on the cell
/// that got the room or, having found none, is answered by the policy
/// (admit untracked). In every interleaving: the map ends with no unborn or
/// refused entry, the units taken equal the live entries (no unit leaked or
/// counted twice), and the tracked admissions are at most the capacity.
fn room_freed(name: &str, protocol: Protocol<tollgate::TokenBucket>) {
    let algorithm = bucket();
    let (runs, _, _) = check(name, move || {
        let index = Arc::new(StandIn::<<tollgate::TokenBucket as Algorithm>::Cell>::new(
            false,
        ));
        let room = Arc::new(Room::holding(1, Some(1)));
        let sweeper = {
            let room = Arc::clone(&room);
            thread::spawn(move || room.release())
        };
        let other = {
            let (index, room) = (Arc::clone(&index), Arc::clone(&room));
            thread::spawn(move || protocol(algorithm, &index, &room))
        };
        let mine = protocol(algorithm, &index, &room);
        let theirs = other.join().unwrap();
        sweeper.join().unwrap();
        let map = index.snapshot();
        let live = map
            .values()
            .filter(|cell| cell.life() == tollgate::__loom::Life::Live)
            .count() as u64;
        assert_eq!(
            live,
            map.len() as u64,
            "an unborn or refused entry was left behind"
        );
        assert_eq!(
            room.held(),
            live,
            "room taken does not match the live entries"
        );
        let admitted = u64::from(mine) + u64::from(theirs);
        assert!(
            admitted <= 1 + room.refusals(),
            "over-admitted: {admitted} admitted, {} of them untracked",
            room.refusals()
        );
        admitted
    });
    assert!(runs > 1);
}

#[test]
fn room_freed_during_the_race_is_counted_once() {
    room_freed("cap/room_freed_mid_race", crate_protocol);
}

#[test]
fn room_freed_during_the_race_is_counted_once_turning_away() {
    room_freed(
        "cap/room_freed_mid_race/turn_away",
        crate_protocol_turning_away,
    );
}
