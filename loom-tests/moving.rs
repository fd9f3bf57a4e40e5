//! Model 18: a move racing the other writers of the word it moves.
//!
//! A table rebuild moves a word cell in steps, holding the writers' lock:
//! it reads the cell, places a copy in the new table, then forwards the old
//! cell by one exchange from the very state read (`Mortal::forward`, to a
//! mark of its own), and retags the old slot; if the exchange fails it
//! reads the cell again, and a cell it finds dead it leaves behind (the
//! copy given up, the cell reported to `on_dead`, which gives back its
//! room, then its slot retagged deleted). A lookup goes on to the linked
//! table only from a forwarded cell or a miss: a retired or refused cell,
//! which no move carries, is the client's entry until it is removed.
//!
//! The stand-in's move takes each of those steps as its own loom step, so
//! loom stalls the move between any two of them while these race it:
//!
//! * a removal (`forget_client`, as `Limiter::remove`), a reset in place
//!   (`reset_client`) or a cancel of the client's booking (`act_on_live`
//!   and the tail rule, as `Limiter::give_back`), each followed on its
//!   thread by a flag and two checks, with a third thread checking once
//!   meanwhile: no more than the capacity (1) is admitted on the state
//!   those writers leave (the drain's checks, and the racing check if it
//!   saw the flag), the writer reports the client it acted on, and the map
//!   ends holding one live cell that shows an admission;
//! * a quota change's carry (`Tiered` cells, each move converting the
//!   state to the new quota) racing a removal and three checks after it:
//!   exactly the new capacity (2) admitted after the removal;
//! * a refusal of a new client's unborn cell (no room) while another
//!   thread frees a unit of room and checks the client: every unit of room
//!   taken is held by an entry the map keeps;
//! * a rebuild that forgets the client as lapsed (retired from the state
//!   read, `Mortal::retire_sealed`, and left behind) racing the client's
//!   return at a full cap, under a policy that turns a new client away: the
//!   client is never turned away, its room being its own.
//!
//! The broken twin is the rule before forwarding had its own mark: a
//! lookup goes on to the linked table from any dead cell ("dead means
//! moved"). A check after a removal then reaches the copy the move gives
//! up (and is admitted there, then again on the fresh state), a check
//! after a refusal claims that copy and its unit of room is never given
//! back, and a returning client meets a miss while its own dead entry
//! still holds the room. Loom finds each of these.

use loom::sync::atomic::{AtomicBool, Ordering::Acquire, Ordering::Release};
use loom::sync::Arc;
use loom::thread;

use crate::arrival::{Arrival, Room};
use crate::eviction::{bucket, check};
use crate::quota::Coming;
use crate::stand_in::StandIn;
use tollgate::__loom::{
    act_on_live, carry, change_quota, check_or_insert, forget_client, reset_client, tiered,
    token_bucket, Algorithm, Booking, Index, Life, Mortal, Newcomer, Purge, Relocation, StateCell,
    TierCell,
};
use tollgate::TokenBucket;

const KEY: &str = "alice";

/// The frozen instant of every reading.
const NOW: u64 = 100;

/// Which lookup rule the stand-in follows: the crate's, or the twin's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// A lookup goes on only from a forwarded cell (or a miss).
    Forwarded,
    /// The bug: a lookup goes on from any dead cell.
    DeadMeansMoved,
}

fn map<V: Mortal>(rule: Rule, map: StandIn<V>) -> StandIn<V> {
    match rule {
        Rule::Forwarded => map,
        Rule::DeadMeansMoved => map.dead_means_moved(),
    }
}

/// What races the move on the client's word, then reports whether it
/// acted on a live client.
type Act = fn(&TokenBucket, &StandIn<StateCell>, &Room, &Booked) -> bool;

/// A booking made before the race, for the cancel to give back.
type Booked = Option<tollgate::__loom::Ticket>;

/// The rebuild's move of `KEY` (`relocate` saying what goes in the new
/// table, the crate's `Mortal::forward` handing the client to it), a cell
/// found dead giving back the room it holds as the rebuild leaves it
/// behind.
fn move_giving_back(
    index: &StandIn<StateCell>,
    room: &Room,
    relocate: impl FnMut(&StateCell) -> Relocation<StateCell>,
) {
    index.relocate_leaving(KEY, relocate, Mortal::forward, |cell| {
        if cell.holds_room() {
            room.release();
        }
    });
}

/// `Limiter::remove`: the reading recorded as an eviction's, then the
/// crate's `forget_client`.
fn remove(algorithm: &TokenBucket, index: &StandIn<StateCell>, room: &Room, _: &Booked) -> bool {
    room.evicting(NOW);
    forget_client(index, KEY, |cell| algorithm.force_evict(cell))
}

/// `Limiter::reset` of a token bucket: the state replaced in place.
fn reset(algorithm: &TokenBucket, index: &StandIn<StateCell>, room: &Room, b: &Booked) -> bool {
    reset_client(
        index,
        KEY,
        |cell| algorithm.reset(cell, NOW),
        || remove(algorithm, index, room, b),
    )
}

/// `Limiter::give_back` of the booking made before the race (the stamps
/// aside: no reset races it here): the tail rule's exchange on the cell
/// the client has now.
fn cancel(algorithm: &TokenBucket, index: &StandIn<StateCell>, _: &Room, b: &Booked) -> bool {
    let ticket = b.as_ref().expect("booked before the race");
    act_on_live(index, KEY, |cell| algorithm.unreserve(cell, NOW, ticket)) == Some(true)
}

/// The limiter's side of a check with no cap, as the limiter brings a
/// word cell in then: born alive with its first decision in it before the
/// insert publishes it, no claim (so no thread ever waits for another's
/// claim in these three-thread models).
struct Born<'a>(Arrival<'a, TokenBucket>);

impl Newcomer<String, StateCell, bool> for Born<'_> {
    fn now(&self) -> u64 {
        self.0.now()
    }
    fn born(&self, _: &String, now: u64) -> Option<StateCell> {
        Some(
            self.0
                .algorithm
                .fresh_cell(crate::arrival::birth::<TokenBucket>(now)),
        )
    }
    fn unborn(&self, key: &String, now: u64) -> StateCell {
        self.0.unborn(key, now)
    }
    fn fresh(&self, key: &String, now: u64) -> StateCell {
        self.0.fresh(key, now)
    }
    fn reserve(&self) -> bool {
        self.0.reserve()
    }
    fn make_room(&self, now: u64) -> bool {
        self.0.make_room(now)
    }
    fn release(&self) {
        self.0.release();
    }
    fn activate(&self, cell: &StateCell, now: u64) {
        self.0.activate(cell, now);
    }
    fn refused(&self, now: u64) -> Option<bool> {
        self.0.refused(now)
    }
}

/// One unit check of `KEY` at `reading`, no cap.
fn check_born(index: &StandIn<StateCell>, room: &Room, reading: u64) -> bool {
    let algorithm = bucket();
    let born = Born(Arrival::at(algorithm, room, reading, false));
    check_or_insert(
        index,
        KEY,
        reading,
        |cell: &StateCell, now| algorithm.try_admit(cell, now, 1),
        &born,
    )
}

/// The state before the race: fresh, checked at `NOW`; or, for a cancel,
/// one token spent at `NOW` and the next booked (ready 10 ns later), with
/// the checks at that later instant, where the cancelled booking's token
/// is the one on offer.
fn before(book: bool) -> (StateCell, Booked, u64) {
    let algorithm = bucket();
    let cell = algorithm.new_cell();
    if !book {
        return (cell, None, NOW);
    }
    assert!(algorithm.admit(&cell, NOW, 1));
    let ticket = match algorithm.reserve(&cell, NOW, 1, u64::MAX) {
        Some(Booking::Granted(ticket, _)) => ticket,
        other => panic!("a booking with no limit on its wait: {other:?}"),
    };
    (cell, Some(ticket), NOW + 10)
}

/// A move racing `act`, a check, and two checks after `act`; see the
/// module docs. Returns the interleavings and the fewest and most
/// admissions after the act.
fn race(name: &str, act: Act, book: bool, rule: Rule) -> (usize, u64, u64) {
    let algorithm = bucket();
    assert_eq!(algorithm.capacity(), 1);
    let label = name.to_owned();
    check(name, move || {
        let (cell, booked, reading) = before(book);
        let index = Arc::new(map(rule, StandIn::holding(KEY, cell)));
        let room = Arc::new(Room::holding(1, None));
        let after = Arc::new(AtomicBool::new(false));
        let mover = {
            let (index, room) = (Arc::clone(&index), Arc::clone(&room));
            thread::spawn(move || move_giving_back(&index, &room, Mortal::relocate))
        };
        let checker = {
            let (index, room, after) = (Arc::clone(&index), Arc::clone(&room), Arc::clone(&after));
            thread::spawn(move || {
                // Acquire: pairs with the Release below, so a check that
                // sees the flag comes after the act.
                let late = after.load(Acquire);
                (late, check_born(&index, &room, reading))
            })
        };
        let acted = act(&algorithm, &index, &room, &booked);
        after.store(true, Release);
        let drain = u64::from(check_born(&index, &room, reading))
            + u64::from(check_born(&index, &room, reading));
        mover.join().unwrap();
        let (late, theirs) = checker.join().unwrap();
        let name = &label;
        assert!(acted, "{name}: the act found no live client");
        let admitted = drain + u64::from(late && theirs);
        assert!(
            admitted <= 1,
            "{name}: over-admitted: {admitted} admitted after the act, capacity 1"
        );
        let map = index.snapshot();
        assert_eq!(map.len(), 1, "{name}: one client, one entry");
        let kept = &map[KEY];
        assert_eq!(kept.life(), Life::Live, "{name}: the map kept a dead cell");
        assert_eq!(
            algorithm.peek(kept, reading, 1).remaining(),
            0,
            "{name}: lost an admission: the kept cell does not show it"
        );
        admitted
    })
}

#[test]
fn a_removal_racing_a_move_and_a_check() {
    let (_, min, max) = race("moving/remove", remove, false, Rule::Forwarded);
    assert_eq!((min, max), (0, 1));
}

#[test]
fn a_reset_racing_a_move_and_a_check() {
    let (_, min, max) = race("moving/reset", reset, false, Rule::Forwarded);
    assert_eq!((min, max), (0, 1));
}

#[test]
fn a_cancel_racing_a_move_and_a_check() {
    let (_, min, max) = race("moving/cancel", cancel, true, Rule::Forwarded);
    assert_eq!((min, max), (0, 1));
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_removal_racing_a_move_under_dead_means_moved_is_caught() {
    let _ = race("moving/broken/remove", remove, false, Rule::DeadMeansMoved);
}

fn every(ns: u64) -> TokenBucket {
    token_bucket(1, std::time::Duration::from_nanos(ns), 2).unwrap()
}

/// A quota change (its carry the move) racing a removal followed by three
/// checks: exactly the new capacity, 2, admitted after the removal.
fn carry_race(name: &str, rule: Rule) -> (usize, u64, u64) {
    let label = name.to_owned();
    check(name, move || {
        let tiered = Arc::new(tiered(every(10)));
        let index = Arc::new(map(rule, StandIn::holding(KEY, tiered.fresh_cell(0))));
        let changer = {
            let (tiered, index) = (Arc::clone(&tiered), Arc::clone(&index));
            thread::spawn(move || {
                change_quota(&tiered, every(20), || {
                    index.relocate(KEY, |cell| carry(&tiered, cell, NOW));
                });
            })
        };
        let removed = forget_client(&*index, KEY, |cell: &TierCell| tiered.force_evict(cell));
        let coming = Coming(&tiered);
        let admitted: u64 = (0..3)
            .map(|_| {
                u64::from(check_or_insert(
                    &*index,
                    KEY,
                    NOW,
                    |cell: &TierCell, now| tiered.try_admit(cell, now, 1),
                    &coming,
                ))
            })
            .sum();
        changer.join().unwrap();
        let name = &label;
        assert!(removed, "{name}: the removal found no live client");
        assert!(
            admitted <= 2,
            "{name}: over-admitted: {admitted} admitted after the removal, capacity 2"
        );
        assert!(
            admitted >= 2,
            "{name}: under-admitted: {admitted} admitted after the removal, capacity 2"
        );
        admitted
    })
}

#[test]
fn a_removal_racing_a_quota_change() {
    let (_, min, max) = carry_race("moving/carry", Rule::Forwarded);
    assert_eq!((min, max), (2, 2));
}

#[test]
#[should_panic(expected = "over-admitted")]
fn a_removal_racing_a_quota_change_under_dead_means_moved_is_caught() {
    let _ = carry_race("moving/broken/carry", Rule::DeadMeansMoved);
}

/// A check of `KEY` at `NOW` through `check_or_insert`, turning a new
/// client away at a full cap if `turn_away`.
fn check_turning_away(index: &StandIn<StateCell>, room: &Room, turn_away: bool) -> bool {
    let algorithm = bucket();
    let arrival = Arrival::at(algorithm, room, NOW, turn_away);
    check_or_insert(
        index,
        KEY,
        NOW,
        |cell: &StateCell, now| algorithm.try_admit(cell, now, 1),
        &arrival,
    )
}

/// A new client's unborn cell (its inserter descheduled) is moved while a
/// check finds no room and refuses it, and another thread frees a unit of
/// room and checks the client: every unit of room taken ends held by an
/// entry the map keeps.
fn refusal_race(name: &str, rule: Rule) -> (usize, u64, u64) {
    let algorithm = bucket();
    let label = name.to_owned();
    check(name, move || {
        let index = Arc::new(map(rule, StandIn::holding(KEY, algorithm.unborn_cell(NOW))));
        // The one unit of room is another client's, who leaves below.
        let room = Arc::new(Room::holding(1, Some(1)));
        let mover = {
            let (index, room) = (Arc::clone(&index), Arc::clone(&room));
            thread::spawn(move || move_giving_back(&index, &room, Mortal::relocate))
        };
        // The refusal of a check that found no room (its claim, given back,
        // left out: the move waits for a claim, and two threads waiting
        // for one claim can yield to each other for ever under loom), then
        // its removal of the refused entry, which waits for the mover.
        let refuser = {
            let index = Arc::clone(&index);
            thread::spawn(move || {
                if matches!(index.with(KEY, |cell| cell.refuse().is_ok()), Ok(true)) {
                    let _ = index.remove_if(KEY, Mortal::is_dead);
                }
            })
        };
        room.release();
        let ours = check_turning_away(&index, &room, false);
        mover.join().unwrap();
        refuser.join().unwrap();
        let name = &label;
        let map = index.snapshot();
        let holding = map.values().filter(|cell| cell.holds_room()).count() as u64;
        assert_eq!(
            room.held(),
            holding,
            "{name}: a unit of room leaked: {} taken, {holding} held by the map's entries",
            room.held()
        );
        u64::from(ours)
    })
}

#[test]
fn a_refusal_racing_a_move() {
    let (_, min, max) = refusal_race("moving/refuse", Rule::Forwarded);
    assert_eq!((min, max), (1, 1), "the client comes in on the freed unit");
}

#[test]
#[should_panic(expected = "a unit of room leaked")]
fn a_refusal_racing_a_move_under_dead_means_moved_is_caught() {
    let _ = refusal_race("moving/broken/refuse", Rule::DeadMeansMoved);
}

/// A rebuild that forgets the client as lapsed (its state, admitted at 0,
/// is idle at `NOW`) races the client's return at a full cap, under a
/// policy that turns new clients away: the client is admitted, never
/// turned away.
fn lapse_race(name: &str, rule: Rule) -> (usize, u64, u64) {
    let algorithm = bucket();
    let label = name.to_owned();
    check(name, move || {
        let cell = algorithm.new_cell();
        assert!(algorithm.admit(&cell, 0, 1));
        let index = Arc::new(map(rule, StandIn::holding(KEY, cell)));
        // The cap is full: the client's own unit is the only one.
        let room = Arc::new(Room::holding(1, Some(1)));
        let rebuilder = {
            let (index, room) = (Arc::clone(&index), Arc::clone(&room));
            thread::spawn(move || {
                room.evicting(NOW);
                let lapsing = |cell: &StateCell| match cell.relocate() {
                    Relocation::Moved(copy, seal)
                        if algorithm.idle_at(&copy) <= NOW && cell.retire_sealed(seal) =>
                    {
                        Relocation::Dead
                    }
                    relocation => relocation,
                };
                move_giving_back(&index, &room, lapsing);
            })
        };
        let admitted = check_turning_away(&index, &room, true);
        rebuilder.join().unwrap();
        let name = &label;
        assert_eq!(
            room.refusals(),
            0,
            "{name}: a returning client was turned away at a full cap while its own entry held the room"
        );
        assert!(admitted, "{name}: an idle client's first request denied");
        assert_eq!(room.held(), 1, "{name}: one unit, the client's");
        u64::from(admitted)
    })
}

#[test]
fn a_lapse_racing_the_clients_return() {
    let (_, min, max) = lapse_race("moving/lapse", Rule::Forwarded);
    assert_eq!((min, max), (1, 1));
}

#[test]
#[should_panic(expected = "turned away at a full cap")]
fn a_lapse_racing_the_clients_return_under_dead_means_moved_is_caught() {
    let _ = lapse_race("moving/broken/lapse", Rule::DeadMeansMoved);
}
