//! A lease's cell: the units a Redis limiter took for one client in one
//! call, spent by this process's checks through the one compare-and-swap
//! loop ([`StateCell::apply`]) over the pure transitions of
//! `crate::algorithm::lease`.
//!
//! Every write of the word is an `apply` (a spend, a grant installed, a
//! hold, a reset, a take-out), so the word is the lease's whole state and
//! each unit is spent at most once: a spend and a grant racing each other
//! are ordered by the exchange, and a grant that replaces a range hands
//! back exactly the unpassed units of the range it replaced, which no
//! spend can then take. No ordering of its own: `apply`'s (see the module
//! docs of `crate::cell`).
#![cfg_attr(not(feature = "loom"), allow(unreachable_pub))]

use core::cell::Cell;

use super::{Applied, StateCell};
use crate::algorithm::lease::{Grant, Lease, Parts, Short};

/// What a spend did.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spent {
    /// Spent, and this many whole units are left at the reading.
    Admitted { left: u64 },
    /// Denied here until `until` (µs): the shared bucket had nothing.
    Held { until: u64 },
    /// Not enough left: the shared bucket must be asked, and `epoch` is
    /// the epoch to ask at (see [`LeaseCell::nothing`]).
    Ask { epoch: u64 },
}

/// One client's lease in this process: a 128-bit word (see
/// `crate::algorithm::lease`) and the interval of one unit.
#[doc(hidden)]
#[derive(Debug)]
pub struct LeaseCell {
    word: StateCell<u128>,
    lease: Lease,
}

impl LeaseCell {
    /// An empty lease whose units are `interval` µs apart (at least 1).
    pub fn new(interval: u64) -> Self {
        Self {
            word: StateCell::holding(Parts::of(0).word()),
            lease: Lease {
                interval: interval.max(1),
            },
        }
    }

    /// The interval of one unit, µs.
    pub fn interval(&self) -> u64 {
        self.lease.interval
    }

    /// Spends `cost` units at `now` (µs on the shared clock, as estimated
    /// no earlier than it).
    #[inline]
    pub fn spend(&self, now: u64, cost: u64) -> Spent {
        self.spend_word(now, cost).0
    }

    /// [`spend`](Self::spend), with the word its exchange installed, if
    /// admitted.
    #[inline]
    fn spend_word(&self, now: u64, cost: u64) -> (Spent, Option<u128>) {
        let lease = self.lease;
        match self.word.apply(|w| lease.spend(w, now, cost)) {
            Applied::Admitted(w) => (
                Spent::Admitted {
                    left: lease.left(w, now),
                },
                Some(w),
            ),
            Applied::Denied(w) => match lease.short(w, now) {
                Short::Held(until) => (Spent::Held { until }, None),
                Short::Ask(epoch) => (Spent::Ask { epoch }, None),
            },
            // The low half is a cursor below 2^52: never a life word.
            Applied::Dead => (Spent::Ask { epoch: 0 }, None),
        }
    }

    /// [`spend`](Self::spend), with the slots it took, `[from, to)` (µs),
    /// if admitted: read from the very word its exchange installed (the
    /// cursor moved to `to`, `cost` intervals past `from`), for the loom
    /// models' ledger of slots.
    #[cfg(feature = "loom")]
    pub fn spend_slots(&self, now: u64, cost: u64) -> (Spent, Option<(u64, u64)>) {
        let (spent, word) = self.spend_word(now, cost);
        let slots = word.map(|w| {
            let to = Parts::of(w).cursor;
            (to - cost * self.lease.interval, to)
        });
        (spent, slots)
    }

    /// Installs the slots `[start, end)` (µs) granted to a request asked at
    /// `epoch`: the unpassed units of the range it replaced, `[from, end)`,
    /// if it replaced one (a grant that continues the range extends it).
    pub fn grant(&self, now: u64, epoch: u64, start: u64, end: u64) -> Option<(u64, u64)> {
        self.install(now, epoch, Grant::Range { start, end })
    }

    /// Notes that the shared bucket had nothing until `until` (µs) for a
    /// request asked at `epoch`: checks are held here until then, unless a
    /// reset came since the request or units are left.
    pub fn nothing(&self, now: u64, epoch: u64, until: u64) {
        self.install(now, epoch, Grant::Nothing { until });
    }

    fn install(&self, now: u64, epoch: u64, grant: Grant) -> Option<(u64, u64)> {
        let lease = self.lease;
        // The transition may run more than once: the displaced range of
        // the run whose word was installed is the last one computed.
        let displaced = Cell::new(None);
        let applied = self.word.apply(|w| {
            let (next, gone) = lease.install(w, now, epoch, grant)?;
            displaced.set(gone);
            Some(next)
        });
        match applied {
            Applied::Admitted(_) => displaced.get(),
            Applied::Denied(_) | Applied::Dead => None,
        }
    }

    /// A reset by this process: a hold goes, the epoch moves on, the
    /// range stays.
    pub fn reset(&self) {
        let _ = self.word.apply(|w| Some(Lease::reset(w)));
    }

    /// Empties the lease at `now`: the unpassed units it held, `[from,
    /// end)` (µs), if any, which no spend can take any more.
    pub fn take_out(&self, now: u64) -> Option<(u64, u64)> {
        let lease = self.lease;
        let held = Cell::new(None);
        let _ = self.word.apply(|w| {
            let (next, units) = lease.take_out(w, now);
            held.set(units);
            Some(next)
        });
        held.get()
    }

    /// The whole units left to spend at `now`.
    pub fn left(&self, now: u64) -> u64 {
        self.lease.left(self.word.load(), now)
    }

    /// The word: it changes with every spend, grant and reset.
    pub fn word(&self) -> u128 {
        self.word.load()
    }

    /// Where the next unit's slot would start, µs (0 for no range).
    pub fn cursor(&self) -> u64 {
        let p = Parts::of(self.word.load());
        if p.end > 0 {
            p.cursor
        } else {
            0
        }
    }

    /// Whether checks are held at `now`: until when.
    pub fn held(&self, now: u64) -> Option<u64> {
        match self.lease.short(self.word.load(), now) {
            Short::Held(until) => Some(until),
            Short::Ask(_) => None,
        }
    }

    /// The epoch a request asked now would carry.
    pub fn epoch(&self) -> u64 {
        Parts::of(self.word.load()).epoch
    }
}
