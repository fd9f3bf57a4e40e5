//! A loom-aware stand-in for the limiter's side of the store's protocol:
//! the [`Newcomer`] that `check_or_insert` asks for clock readings, cells
//! and room.
//!
//! The limiter's own `Arrival` reads a clock, sweeps and counts statistics
//! through the store's table, none of which loom can model; this one keeps only what the
//! protocol's correctness rests on: a clock read after the look at the map
//! that sent a check the slow way (modelled as the check's own reading or
//! the latest reading an evictor recorded before forgetting a state,
//! whichever is later: a look that saw an eviction's effect is ordered
//! after the evictor's reading), a count of room with an optional cap (as
//! `Store::reserve`), and the policy "admit untracked" for a client
//! refused room. Its broken variants are the bugs the models must catch.

use loom::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use tollgate::__loom::{Algorithm, Newcomer};

/// The room a model's limiter has, and the latest eviction's reading.
#[derive(Debug)]
pub(crate) struct Room {
    held: AtomicU64,
    max: Option<u64>,
    evicting_at: AtomicU64,
    /// Clients answered by the policy (admitted untracked).
    refusals: AtomicU64,
}

impl Room {
    pub(crate) fn new(max: Option<u64>) -> Self {
        Self::holding(0, max)
    }

    /// Room for `max` clients of which `held` units are taken.
    pub(crate) fn holding(held: u64, max: Option<u64>) -> Self {
        Self {
            held: AtomicU64::new(held),
            max,
            evicting_at: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
        }
    }

    /// Gives back a unit, as a sweep removing an evicted client does.
    pub(crate) fn release(&self) {
        self.held.fetch_sub(1, Relaxed);
    }

    /// How many clients the policy answered.
    pub(crate) fn refusals(&self) -> u64 {
        self.refusals.load(Relaxed)
    }

    /// Records an evictor's clock reading `now`, taken before it forgets
    /// a state: the model's clock has reached it, so a reading taken after
    /// a look that saw the eviction is no earlier.
    pub(crate) fn evicting(&self, now: u64) {
        if self.evicting_at.load(Relaxed) < now {
            self.evicting_at.fetch_max(now, Relaxed);
        }
    }

    /// Units of room taken.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Relaxed)
    }
}

/// The reading a new client's state is fresh from, as the limiter makes
/// it (`Algorithm::BORN_AT_READING`): `now` for a log, 0 (fresh at every
/// reading) for the word algorithms.
pub(crate) fn birth<A: Algorithm>(now: u64) -> u64 {
    if A::BORN_AT_READING {
        now
    } else {
        0
    }
}

/// One check's newcomer.
#[derive(Debug)]
pub(crate) struct Arrival<'a, A> {
    pub(crate) algorithm: A,
    pub(crate) room: &'a Room,
    /// The check's own reading, taken before its first look at the map.
    pub(crate) reading: u64,
    /// The bug of the stale-reading models: the slow way judges at the
    /// check's first reading, taken before the look that found the client
    /// forgotten, instead of reading the clock again after it.
    pub(crate) stale: bool,
    /// Turn a new client away at a full cap before inserting it, as the
    /// limiter does under its non-evicting policies.
    pub(crate) turn_away: bool,
    /// Bring a new client in born, its first decision made before the
    /// insert publishes it, as a limiter with no cap does.
    pub(crate) born: bool,
}

impl<'a, A> Arrival<'a, A> {
    /// A check at `reading` that reads the clock again on the slow way.
    pub(crate) fn at(algorithm: A, room: &'a Room, reading: u64, turn_away: bool) -> Self {
        Self {
            algorithm,
            room,
            reading,
            stale: false,
            turn_away,
            born: false,
        }
    }
}

impl<A: Algorithm> Newcomer<String, A::Cell, bool> for Arrival<'_, A> {
    fn now(&self) -> u64 {
        if self.stale {
            self.reading
        } else {
            self.reading.max(self.room.evicting_at.load(Relaxed))
        }
    }

    /// As the limiter judges (`Counters::judges_at`): the first reading
    /// serves when no eviction the look may have seen was at a later one,
    /// by the record every evictor makes before it forgets.
    fn judges_at(&self, reading: u64) -> bool {
        reading >= self.room.evicting_at.load(Relaxed)
    }

    fn born(&self, _: &String, now: u64) -> Option<A::Cell> {
        self.born
            .then(|| self.algorithm.fresh_cell(birth::<A>(now)))
    }

    fn unborn(&self, _: &String, now: u64) -> A::Cell {
        self.algorithm.unborn_cell(birth::<A>(now))
    }

    fn fresh(&self, _: &String, now: u64) -> A::Cell {
        self.algorithm.fresh_cell(birth::<A>(now))
    }

    fn reserve(&self) -> bool {
        let Some(max) = self.room.max else {
            self.room.held.fetch_add(1, Relaxed);
            return true;
        };
        // Release: as `Store::reserve`, for `turn_away`'s Acquire.
        if self.room.held.fetch_add(1, Release) < max {
            true
        } else {
            self.release();
            false
        }
    }

    fn make_room(&self, _: u64) -> bool {
        false
    }

    fn release(&self) {
        self.room.release();
    }

    fn activate(&self, cell: &A::Cell, now: u64) {
        self.algorithm.activate(cell, birth::<A>(now));
    }

    fn turn_away(&self, _: u64) -> bool {
        // Acquire: as `Store::is_full`.
        self.turn_away
            && self
                .room
                .max
                .is_some_and(|max| self.room.held.load(Acquire) >= max)
    }

    fn refused(&self, _: u64) -> Option<bool> {
        // Admit untracked: the policy under which a second budget shows as
        // an over-admission.
        self.room.refusals.fetch_add(1, Relaxed);
        None
    }
}
