//! A lease's cell: the units a Redis limiter took for one client in one
//! call, spent by this process's checks through the one compare-and-swap
//! loop ([`StateCell::apply`]) over the pure transitions of
//! `crate::algorithm::lease`.
//!
//! Two words: the lease's range, which checks spend, and a range granted
//! behind it that waits until the lease's units are spent or passed (a
//! grant that does not continue the range, because another process took
//! slots between, would otherwise displace the units still left). Every
//! write of either word is an `apply` (a spend, a grant installed or
//! queued, a hold, a reset, a take-out, the waiting range taken), so each
//! unit is in one place at a time and spent at most once: a spend and a
//! grant racing each other are ordered by the exchange; the waiting range
//! is taken whole by one exchange, by whichever caller finds the lease
//! short first, before it is installed in the lease's place; and a range
//! replaced hands back exactly its unpassed units, which no spend can then
//! take. No ordering of its own: `apply`'s (see the module docs of
//! `crate::cell`).
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

/// What a spend answered, the slots it took, `[from, to)` (µs), if
/// admitted, and the ranges it displaced: for the loom models' ledger of
/// slots.
#[cfg(feature = "loom")]
#[doc(hidden)]
pub type SpentSlots = (Spent, Option<(u64, u64)>, Vec<(u64, u64)>);

/// One client's lease in this process: a 128-bit word (see
/// `crate::algorithm::lease`), the range granted behind it that waits for
/// its units to be spent or passed (a word of the same layout, or empty),
/// and the interval of one unit.
#[doc(hidden)]
#[derive(Debug)]
pub struct LeaseCell {
    word: StateCell<u128>,
    queued: StateCell<u128>,
    lease: Lease,
}

impl LeaseCell {
    /// An empty lease whose units are `interval` µs apart (at least 1).
    pub fn new(interval: u64) -> Self {
        Self {
            word: StateCell::holding(Parts::of(0).word()),
            queued: StateCell::holding(Parts::of(0).word()),
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
    /// no earlier than it), and the units it displaced: when the lease
    /// cannot hold `cost` and a range waits behind it, that range takes the
    /// lease's place (the units the lease held, fewer than `cost`,
    /// displaced) and the spend is tried on it.
    #[inline]
    pub fn spend(&self, now: u64, cost: u64) -> (Spent, u64) {
        let mut displaced = 0;
        let (spent, _) =
            self.spend_word(now, cost, &mut |gone| displaced += self.units(Some(gone)));
        (spent, displaced)
    }

    /// [`spend`](Self::spend), with the word its exchange installed, if
    /// admitted; each range displaced is handed to `gone`.
    #[inline]
    fn spend_word(
        &self,
        now: u64,
        cost: u64,
        gone: &mut impl FnMut((u64, u64)),
    ) -> (Spent, Option<u128>) {
        let lease = self.lease;
        loop {
            return match self.word.apply(|w| lease.spend(w, now, cost)) {
                Applied::Admitted(w) => (
                    Spent::Admitted {
                        left: lease.left(w, now) + lease.left(self.queued.load(), now),
                    },
                    Some(w),
                ),
                // Short, or held: a range waiting behind the lease takes its
                // place first. (A hold installed while it waited, by a
                // "nothing" that found the lease's last unit unspent before
                // a spend took it, must not hide it.)
                Applied::Denied(w) => {
                    if self.promote(now, cost, gone) {
                        continue;
                    }
                    match lease.short(w, now) {
                        Short::Held(until) => (Spent::Held { until }, None),
                        Short::Ask(epoch) => (Spent::Ask { epoch }, None),
                    }
                }
                // The low half is a cursor below 2^52: never a life word.
                Applied::Dead => (Spent::Ask { epoch: 0 }, None),
            };
        }
    }

    /// Moves the range waiting behind the lease into its place, if one
    /// waits, for a spend of `need` units: taken whole by one exchange (so
    /// no two callers move it), then installed as a grant is, extending
    /// the lease if it continues it, else replacing it (the range
    /// displaced handed to `gone`). If by then the lease holds `need`
    /// units (a grant took its place since it was found short), the lease
    /// keeps them and the range waits behind them again; or, if another
    /// range waits by then, its unpassed units are handed to `gone`.
    /// Whether one waited.
    fn promote(&self, now: u64, need: u64, gone: &mut impl FnMut((u64, u64))) -> bool {
        let lease = self.lease;
        let taken = Cell::new(None);
        let applied = self.queued.apply(|q| {
            let (empty, range) = Lease::unqueue(q)?;
            taken.set(Some(range));
            Some(empty)
        });
        let (Applied::Admitted(_), Some(range)) = (applied, taken.get()) else {
            return false;
        };
        // The transition may run more than once: the displaced range of
        // the run whose word was installed is the last one computed.
        let out = Cell::new(None);
        let moved = self.word.apply(|w| {
            let (next, out_here) = lease.promote(w, now, need, range)?;
            out.set(out_here);
            Some(next)
        });
        if let Applied::Admitted(_) = moved {
            if let Some(displaced) = out.get() {
                gone(displaced);
            }
            return true;
        }
        let back = self
            .queued
            .apply(|q| Lease::unqueue(q).is_none().then(|| Lease::waiting(range)));
        if !matches!(back, Applied::Admitted(_)) {
            if let (_, Some(units)) = lease.take_out(Lease::waiting(range), now) {
                gone(units);
            }
        }
        true
    }

    /// The whole units in a range handed back, `[from, to)` (µs).
    pub fn units(&self, range: Option<(u64, u64)>) -> u64 {
        range.map_or(0, |(from, to)| (to - from) / self.lease.interval)
    }

    /// [`spend`](Self::spend), with the slots it took, `[from, to)` (µs),
    /// if admitted: read from the very word its exchange installed (the
    /// cursor moved to `to`, `cost` intervals past `from`), and the ranges
    /// it displaced, for the loom models' ledger of slots.
    #[cfg(feature = "loom")]
    pub fn spend_slots(&self, now: u64, cost: u64) -> SpentSlots {
        let mut displaced = Vec::new();
        let (spent, word) = self.spend_word(now, cost, &mut |gone| displaced.push(gone));
        let slots = word.map(|w| {
            let to = Parts::of(w).cursor;
            (to - cost * self.lease.interval, to)
        });
        (spent, slots, displaced)
    }

    /// Installs the slots `[start, end)` (µs) granted to a request: a
    /// grant that continues the lease extends it; one that does not takes
    /// its place once its units are spent or passed, waiting behind it
    /// until then (replacing a range that waited, which it would not
    /// continue). The units displaced, which no spend can take any more.
    pub fn grant(&self, now: u64, start: u64, end: u64) -> u64 {
        let mut displaced = 0;
        self.grant_to(now, start, end, &mut |gone| {
            displaced += self.units(Some(gone))
        });
        displaced
    }

    /// [`grant`](Self::grant), with the ranges it displaced, for the loom
    /// models' ledger of slots.
    #[cfg(feature = "loom")]
    pub fn grant_ranges(&self, now: u64, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut displaced = Vec::new();
        self.grant_to(now, start, end, &mut |gone| displaced.push(gone));
        displaced
    }

    /// [`grant`](Self::grant), each range displaced handed to `gone`.
    fn grant_to(&self, now: u64, start: u64, end: u64, gone: &mut impl FnMut((u64, u64))) {
        let lease = self.lease;
        // A range waiting behind a lease spent out goes first.
        if self.left_here(now) == 0 {
            self.promote(now, 1, gone);
        }
        // The transitions may run more than once: the displaced range of
        // the run whose word was installed is the last one computed.
        let out = Cell::new(None);
        let placed = self.word.apply(|w| {
            let (next, out_here) = lease.place(w, now, start, end)?;
            out.set(out_here);
            Some(next)
        });
        if let Applied::Denied(_) = placed {
            let _ = self.queued.apply(|q| {
                let (next, out_here) = lease.queue(q, now, start, end);
                out.set(out_here);
                Some(next)
            });
        }
        if let Some(range) = out.get() {
            gone(range);
        }
    }

    /// Notes that the shared bucket had nothing until `until` (µs) for a
    /// request asked at `epoch`: checks are held here until then, unless a
    /// reset came since the request or units are left (a range waiting
    /// behind a lease spent out takes its place first). The units
    /// displaced.
    pub fn nothing(&self, now: u64, epoch: u64, until: u64) -> u64 {
        let mut displaced = 0;
        self.nothing_to(now, epoch, until, &mut |gone| {
            displaced += self.units(Some(gone))
        });
        displaced
    }

    /// [`nothing`](Self::nothing), with the ranges it displaced, for the
    /// loom models' ledger of slots.
    #[cfg(feature = "loom")]
    pub fn nothing_ranges(&self, now: u64, epoch: u64, until: u64) -> Vec<(u64, u64)> {
        let mut displaced = Vec::new();
        self.nothing_to(now, epoch, until, &mut |gone| displaced.push(gone));
        displaced
    }

    /// [`nothing`](Self::nothing), each range displaced handed to `gone`.
    fn nothing_to(&self, now: u64, epoch: u64, until: u64, gone: &mut impl FnMut((u64, u64))) {
        if self.left_here(now) == 0 {
            self.promote(now, 1, gone);
        }
        let _ = self.install(now, epoch, Grant::Nothing { until });
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
    /// end)` (µs), if any, then those of the range waiting behind it, if
    /// any, which no spend can take any more.
    pub fn take_out(&self, now: u64) -> [Option<(u64, u64)>; 2] {
        let lease = self.lease;
        let take = |cell: &StateCell<u128>| {
            let held = Cell::new(None);
            let _ = cell.apply(|w| {
                let (next, units) = lease.take_out(w, now);
                held.set(units);
                Some(next)
            });
            held.get()
        };
        [take(&self.word), take(&self.queued)]
    }

    /// The whole units left to spend at `now`, the range waiting behind
    /// the lease's included.
    pub fn left(&self, now: u64) -> u64 {
        self.left_here(now) + self.lease.left(self.queued.load(), now)
    }

    /// The whole units left to spend at `now` in the lease's own range.
    fn left_here(&self, now: u64) -> u64 {
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

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    /// A lease of `[100, 120)` (2 units of 10 µs) with a grant of `[200,
    /// 230)` behind it, at 100.
    fn with_a_grant_behind() -> LeaseCell {
        let cell = LeaseCell::new(10);
        assert_eq!(cell.grant(100, 100, 120), 0);
        assert_eq!(cell.grant(100, 200, 230), 0, "waits: nothing displaced");
        assert_eq!(cell.left(100), 5);
        cell
    }

    #[test]
    fn a_grant_behind_the_lease_is_spent_once_the_lease_is() {
        let cell = with_a_grant_behind();
        let mut slots = Vec::new();
        for _ in 0..6 {
            let before = Parts::of(cell.word()).cursor;
            match cell.spend(100, 1) {
                (Spent::Admitted { left }, 0) => {
                    let after = Parts::of(cell.word()).cursor;
                    slots.push(after - 10);
                    assert!(before <= after);
                    assert_eq!(left, cell.left(100));
                }
                (other, displaced) => {
                    assert_eq!((other, displaced), (Spent::Ask { epoch: 0 }, 0));
                }
            }
        }
        assert_eq!(slots, [100, 110, 200, 210, 220], "each slot once, in order");
        assert_eq!(cell.left(100), 0);
    }

    #[test]
    fn a_grant_continuing_the_one_behind_extends_it_and_another_replaces_it() {
        let cell = with_a_grant_behind();
        assert_eq!(cell.grant(100, 230, 250), 0);
        assert_eq!(cell.left(100), 7);
        // Not continuing either range: the waiting one's 5 units go.
        assert_eq!(cell.grant(100, 300, 310), 5);
        assert_eq!(cell.left(100), 3);
    }

    #[test]
    fn a_check_the_lease_cannot_hold_moves_to_the_grant_behind_it() {
        let cell = with_a_grant_behind();
        assert!(matches!(cell.spend(100, 1), (Spent::Admitted { .. }, 0)));
        // One unit left, a check of 2: the grant behind takes the lease's
        // place, the unit left displaced.
        assert_eq!(cell.spend(100, 2), (Spent::Admitted { left: 1 }, 1));
        assert_eq!(Parts::of(cell.word()).cursor, 220);
    }

    #[test]
    fn a_grant_waits_only_while_the_lease_holds_a_unit() {
        let cell = with_a_grant_behind();
        // At 120 the lease's last slot has begun: nothing left, so the
        // grant behind takes its place before the next one is placed.
        assert_eq!(cell.left(120), 3);
        assert_eq!(cell.grant(120, 300, 310), 0);
        assert_eq!(cell.left(120), 4);
        assert_eq!(Parts::of(cell.word()).end, 230);
    }

    #[test]
    fn a_hold_never_hides_a_grant_behind_a_lease_spent_out() {
        let cell = with_a_grant_behind();
        for _ in 0..2 {
            assert!(matches!(cell.spend(100, 1), (Spent::Admitted { .. }, 0)));
        }
        cell.nothing(100, 0, 150);
        assert_eq!(cell.held(100), None);
        assert!(matches!(cell.spend(100, 1), (Spent::Admitted { .. }, 0)));
    }

    /// What a cell tells the process holding it: where its next unit's
    /// slot starts (a hold is no range), until when checks are held, and
    /// the epoch a request carries, one more with each reset.
    #[test]
    fn a_cell_tells_its_cursor_its_hold_and_its_epoch() {
        let cell = LeaseCell::new(10);
        assert_eq!((cell.cursor(), cell.held(100), cell.epoch()), (0, None, 0));
        cell.nothing(100, 0, 150);
        assert_eq!(cell.held(100), Some(150));
        assert_eq!(cell.cursor(), 0, "a hold has no slot to spend");
        cell.reset();
        assert_eq!((cell.held(100), cell.epoch()), (None, 1));
        cell.reset();
        assert_eq!(cell.epoch(), 2);
        assert_eq!(cell.grant(100, 100, 120), 0);
        assert!(matches!(cell.spend(100, 1), (Spent::Admitted { .. }, 0)));
        assert_eq!(cell.cursor(), 110);
    }

    #[test]
    fn taking_out_empties_both_ranges() {
        let cell = with_a_grant_behind();
        assert_eq!(cell.take_out(105), [Some((105, 120)), Some((200, 230))]);
        assert_eq!(cell.left(105), 0);
        assert_eq!(cell.take_out(105), [None, None]);
    }
}
