//! A loom-aware stand-in for the limiter's side of the store's protocol:
//! the [`Newcomer`] that `check_or_insert` asks for clock readings, cells
//! and room.
//!
//! The limiter's own `Arrival` reads a clock, sweeps and counts statistics
//! through the store's table, none of which loom can model; this one keeps only what the
//! protocol's correctness rests on: the floor from which a new state is
//! idle (the latest idle instant of a forgotten state, as
//! `Counters::floor`), a count
//! of room with an optional cap (as `Store::reserve`), and the policy
//! "admit untracked" for a client refused room. Its broken variants are the
//! bugs the models must catch.

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

    /// Records that a state idle from `now` on is about to be forgotten,
    /// as the limiter's `Counters::forgetting`: no write if `now` or later
    /// is already recorded. (A model may call it with the evictor's
    /// reading, a floor no lower than the state's idle instant.)
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

/// One check's newcomer (the protocol judges at the reading the check
/// hands it).
#[derive(Debug)]
pub(crate) struct Arrival<'a, A> {
    pub(crate) algorithm: A,
    pub(crate) room: &'a Room,
    /// The bug of the stale-reading models: a new state starts at 0, as if
    /// no eviction had happened, instead of at the floor.
    pub(crate) forget_floor: bool,
    /// Turn a new client away at a full cap before inserting it, as the
    /// limiter does under its non-evicting policies.
    pub(crate) turn_away: bool,
}

impl<A: Algorithm> Arrival<'_, A> {
    fn floor_of(&self, floor: u64) -> u64 {
        if self.forget_floor {
            0
        } else {
            floor
        }
    }
}

impl<A: Algorithm> Newcomer<String, A::Cell, bool> for Arrival<'_, A> {
    fn floor(&self) -> u64 {
        self.room.evicting_at.load(Relaxed)
    }

    fn unborn(&self, _: &String, floor: u64) -> A::Cell {
        self.algorithm.unborn_cell(self.floor_of(floor))
    }

    fn fresh(&self, _: &String, floor: u64) -> A::Cell {
        self.algorithm.fresh_cell(floor)
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

    fn activate(&self, cell: &A::Cell, floor: u64) {
        self.algorithm.activate(cell, self.floor_of(floor));
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
