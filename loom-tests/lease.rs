//! Model 20: a lease's units spent here while a refill, a reset, a
//! take-out and a stale "nothing until" race them.
//!
//! A Redis limiter leases a block of a token bucket's units in one call:
//! the slots `[start, end)` (µs, one unit every `INTERVAL`), which this
//! process then spends through one cell (`__loom::LeaseCell`, the crate's
//! compare-and-swap loop over the pure transitions of
//! `crate::algorithm::lease`). A spend at `now` takes the slots
//! `[max(cursor, now), +cost·INTERVAL)` and must end by `end`. The races:
//!
//! * two spenders (two spends and one) on a lease of 2 units at a frozen
//!   `NOW`, racing a refill that installs a second grant of 2 units and a
//!   reset: a grant that continues the range (extends it), and one that
//!   does not (replaces it, handing back the unpassed rest);
//! * a spender and a "nothing until" answered to a request asked at the
//!   epoch before the reset, on a drained lease, racing the reset;
//! * two spenders and a take-out on a lease of 2 units racing a grant
//!   that continues the range (or, once taken out, starts a new one);
//! * two spenders and a refill while a clock thread moves the clock by one
//!   unit's slot (every thread spawned, the main thread joining).
//!
//! The properties, in every interleaving: each admitted spend took slots
//! of `cost·INTERVAL` that start no earlier than the clock reading it was
//! made at and lie within a granted range; no slot is spent twice, nor
//! both spent and handed back (displaced or taken out); after the race the
//! units left are all spendable (a drain spends exactly `left`), and the
//! units spent plus those handed back equal the units granted with a
//! frozen clock, and fall short of them by at most the units whose slots
//! the clock passed otherwise; the reset always took effect (the epoch
//! moved on) and never lost a grant installed beside it; a "nothing" asked
//! before the reset never holds a check after it. Both orders of each race
//! are reached (flags, and the range of units spent in the race).
//!
//! Broken twins (`twins::BrokenLease`, over the crate's pure transitions
//! and its compare-and-swap loop): a spend by a load and a store; a reset
//! that stores an empty word; a reset by a load and a store of the right
//! transition; an install of "nothing" that ignores the epoch asked at.

use std::sync::atomic::{AtomicBool as StdAtomicBool, Ordering::Relaxed};
use std::sync::Arc as StdArc;
use std::time::Duration;

use loom::sync::Arc;
use loom::thread;

use crate::harness::{assert_reached, check, check_bounded, Explored, WIDE_RACE_BOUND};
use crate::twins::{BrokenLease, LeaseBug};
use tollgate::__loom::{LeaseCell, Spent};
use tollgate::{Clock, ManualClock};

/// µs per unit.
const INTERVAL: u64 = 10;

/// The frozen instant of every reading (the first slot's start).
const NOW: u64 = 100;

/// The instant a "nothing" answer holds checks until.
const UNTIL: u64 = 150;

/// The cell a model runs over: the crate's, or a broken twin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Make {
    Real,
    Broken(LeaseBug),
}

const REAL: Make = Make::Real;

#[derive(Debug)]
enum Cell {
    Real(LeaseCell),
    Broken(BrokenLease),
}

impl Make {
    fn cell(self) -> Cell {
        match self {
            Self::Real => Cell::Real(LeaseCell::new(INTERVAL)),
            Self::Broken(bug) => Cell::Broken(BrokenLease::new(INTERVAL, bug)),
        }
    }
}

impl Cell {
    fn spend(&self, now: u64, cost: u64) -> Out {
        match self {
            Self::Real(c) => c.spend_slots(now, cost),
            Self::Broken(c) => c.spend(now, cost),
        }
    }

    fn grant(&self, now: u64, epoch: u64, start: u64, end: u64) -> Option<(u64, u64)> {
        match self {
            Self::Real(c) => c.grant(now, epoch, start, end),
            Self::Broken(c) => c.grant(now, epoch, start, end),
        }
    }

    fn nothing(&self, now: u64, epoch: u64, until: u64) {
        match self {
            Self::Real(c) => c.nothing(now, epoch, until),
            Self::Broken(c) => c.nothing(now, epoch, until),
        }
    }

    fn reset(&self) {
        match self {
            Self::Real(c) => c.reset(),
            Self::Broken(c) => c.reset(),
        }
    }

    fn take_out(&self, now: u64) -> Option<(u64, u64)> {
        match self {
            Self::Real(c) => c.take_out(now),
            Self::Broken(c) => c.take_out(now),
        }
    }

    fn left(&self, now: u64) -> u64 {
        match self {
            Self::Real(c) => c.left(now),
            Self::Broken(c) => c.left(now),
        }
    }

    fn epoch(&self) -> u64 {
        match self {
            Self::Real(c) => c.epoch(),
            Self::Broken(c) => c.epoch(),
        }
    }
}

/// An admitted spend: the clock reading it was made at and its slots.
type Slot = (u64, (u64, u64));

/// What a spend answered, and the slots it took if admitted.
type Out = (Spent, Option<(u64, u64)>);

/// What was granted, spent and handed back, audited after the race.
#[derive(Debug, Default)]
struct Ledger {
    /// The granted ranges, µs.
    granted: Vec<(u64, u64)>,
    /// Every admitted spend of one unit.
    spent: Vec<Slot>,
    /// Ranges handed back: displaced by a grant, or taken out.
    returned: Vec<(u64, u64)>,
}

impl Ledger {
    fn units(range: (u64, u64)) -> u64 {
        (range.1 - range.0) / INTERVAL
    }

    fn granted_units(&self) -> u64 {
        self.granted.iter().map(|&r| Self::units(r)).sum()
    }

    /// Notes one spend of a unit at `now`.
    fn spend(&mut self, now: u64, out: Out) -> bool {
        match out {
            (Spent::Admitted { .. }, Some(slots)) => {
                self.spent.push((now, slots));
                true
            }
            (Spent::Admitted { .. }, None) => unreachable!("an admission with no slots"),
            _ => false,
        }
    }

    /// Spends what `left` says is left at `now`, one unit at a time, then
    /// once more: every unit left is spendable, and no more.
    fn drain(&mut self, name: &str, cell: &Cell, now: u64, epoch: u64) {
        let left = cell.left(now);
        for n in 0..left {
            let out = cell.spend(now, 1);
            assert!(
                self.spend(now, out),
                "{name}: lost units: {left} left, but spend {} of them refused: {out:?}",
                n + 1
            );
        }
        let out = cell.spend(now, 1);
        assert!(
            !self.spend(now, out),
            "{name}: over-spent: a spend admitted past the {left} units left"
        );
        assert_eq!(
            out.0,
            Spent::Ask { epoch },
            "{name}: a drained lease asks, at the epoch after the reset"
        );
    }

    /// The slot rules, and the count: what was spent and handed back
    /// equals what was granted, less at most `passed` units whose slots the
    /// clock passed. `left` units are still in the cell (0 after a drain).
    fn audit(&self, name: &str, left: u64, passed: u64) -> u64 {
        // Granted ranges that continue each other form one range.
        let mut granted = self.granted.clone();
        granted.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (s, e) in granted {
            match merged.last_mut() {
                Some(last) if last.1 == s => last.1 = e,
                _ => merged.push((s, e)),
            }
        }
        let within = |(from, to): (u64, u64)| merged.iter().any(|&(s, e)| s <= from && to <= e);
        let mut taken = Vec::new();
        for &(now, (from, to)) in &self.spent {
            assert_eq!(
                to - from,
                INTERVAL,
                "{name}: a unit's spend took {from}..{to}"
            );
            assert!(
                from >= now,
                "{name}: over-spent: a spend at {now} took the passed slot {from}..{to}"
            );
            assert!(
                within((from, to)),
                "{name}: over-spent: slot {from}..{to} outside the grants {merged:?}"
            );
            taken.push((from, to));
        }
        for &r in &self.returned {
            assert!(
                within(r),
                "{name}: over-spent: handed back {r:?} outside {merged:?}"
            );
            taken.push(r);
        }
        taken.sort_unstable();
        for pair in taken.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1,
                "{name}: over-spent: {:?} and {:?} overlap (spent {:?}, handed back {:?})",
                pair[0],
                pair[1],
                self.spent,
                self.returned
            );
        }
        let returned: u64 = self.returned.iter().map(|&r| Self::units(r)).sum();
        let count = self.spent.len() as u64 + returned + left;
        let granted = self.granted_units();
        assert!(
            count <= granted,
            "{name}: over-spent: {} spent, {returned} handed back, {left} left, of {granted} granted",
            self.spent.len()
        );
        assert!(
            count + passed >= granted,
            "{name}: lost units: {} spent, {returned} handed back, {left} left, of {granted} granted ({passed} may pass)",
            self.spent.len()
        );
        granted - count
    }
}

/// Runs `per` unit spends at `NOW` on `cell`: the spends' outcomes.
fn spender(cell: &Arc<Cell>, per: usize) -> thread::JoinHandle<Vec<Out>> {
    let cell = Arc::clone(cell);
    thread::spawn(move || (0..per).map(|_| cell.spend(NOW, 1)).collect())
}

/// Flags reached in some interleaving, kept outside the model.
fn flags<const N: usize>() -> StdArc<[StdAtomicBool; N]> {
    StdArc::new(std::array::from_fn(|_| StdAtomicBool::new(false)))
}

fn read<const N: usize>(flags: &[StdAtomicBool; N]) -> [bool; N] {
    std::array::from_fn(|i| flags[i].load(Relaxed))
}

/// Two spenders (two spends and one) on a lease of `[100, 120)` at the
/// frozen `NOW`, a refill installing `refill` (continuing the range, or
/// not), and the main thread's reset. Returns what was explored and which
/// of (the grant before the reset, the reset before the grant, the grant
/// displaced nothing, it displaced units) were reached.
fn refill_racing_spends_and_reset(
    name: &str,
    make: Make,
    refill: (u64, u64),
) -> (Explored, [bool; 4]) {
    let label = name.to_owned();
    let orders = flags::<4>();
    let reached = StdArc::clone(&orders);
    let explored = check(name, move |tally| {
        let name = &label;
        let cell = Arc::new(make.cell());
        let e0 = cell.epoch();
        let mut ledger = Ledger {
            granted: vec![(NOW, NOW + 2 * INTERVAL), refill],
            ..Ledger::default()
        };
        assert_eq!(cell.grant(NOW, e0, NOW, NOW + 2 * INTERVAL), None);
        let continuing = refill.0 == NOW + 2 * INTERVAL;

        let a = spender(&cell, 2);
        let b = spender(&cell, 1);
        let refiller = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                let before = cell.epoch();
                let displaced = cell.grant(NOW, e0, refill.0, refill.1);
                (before, displaced, cell.epoch())
            })
        };
        cell.reset();

        let mut spent = 0;
        for out in a.join().unwrap().into_iter().chain(b.join().unwrap()) {
            spent += u64::from(ledger.spend(NOW, out));
        }
        let (before, displaced, after) = refiller.join().unwrap();
        if before != e0 {
            reached[1].store(true, Relaxed);
        }
        if after == e0 {
            reached[0].store(true, Relaxed);
        }
        if continuing {
            assert_eq!(
                displaced, None,
                "{name}: a continuing grant displaced units"
            );
        }
        reached[2 + usize::from(displaced.is_some())].store(true, Relaxed);
        ledger.returned.extend(displaced);
        assert_eq!(cell.epoch(), e0 + 1, "{name}: the reset was lost");
        tally.record(spent);
        ledger.drain(name, &cell, NOW, e0 + 1);
        ledger.audit(name, 0, 0);
    });
    (explored, read(&orders))
}

/// A drained lease whose last request was asked at epoch `e0` and answered
/// "nothing until `UNTIL`": that answer is installed by one thread while
/// the main thread resets and another spends. Afterwards a check must not
/// be held. Returns what was explored and which of (the hold installed
/// before the reset, the reset before the install, a spender held, a
/// spender not held) were reached.
fn stale_nothing_racing_reset(name: &str, make: Make) -> (Explored, [bool; 4]) {
    let label = name.to_owned();
    let seen = flags::<4>();
    let reached = StdArc::clone(&seen);
    let explored = check(name, move |tally| {
        let name = &label;
        let cell = Arc::new(make.cell());
        let mut ledger = Ledger {
            granted: vec![(NOW, NOW + INTERVAL)],
            ..Ledger::default()
        };
        assert_eq!(cell.grant(NOW, cell.epoch(), NOW, NOW + INTERVAL), None);
        assert!(ledger.spend(NOW, cell.spend(NOW, 1)));
        // The request: asked at the epoch the drained lease names.
        let (asked, _) = cell.spend(NOW, 1);
        let Spent::Ask { epoch: e0 } = asked else {
            panic!("{name}: a drained lease answered {asked:?}");
        };

        let answer = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                let before = cell.epoch();
                cell.nothing(NOW, e0, UNTIL);
                (before, cell.epoch())
            })
        };
        let racer = spender(&cell, 1);
        cell.reset();
        let (before, after) = answer.join().unwrap();
        let (out, slots) = racer.join().unwrap()[0];
        assert_eq!(
            slots, None,
            "{name}: over-spent: a spend on a drained lease"
        );
        match out {
            Spent::Held { until } => {
                assert_eq!(until, UNTIL, "{name}: held until {until}");
                reached[2].store(true, Relaxed);
            }
            Spent::Ask { .. } => reached[3].store(true, Relaxed),
            Spent::Admitted { .. } => panic!("{name}: over-spent: {out:?} on a drained lease"),
        }
        if after == e0 {
            reached[0].store(true, Relaxed);
        }
        if before != e0 {
            reached[1].store(true, Relaxed);
        }
        // After the race: the reset came after the request, so a check is
        // asked for, never held.
        let (check, _) = cell.spend(NOW, 1);
        assert_eq!(
            check,
            Spent::Ask { epoch: e0 + 1 },
            "{name}: stale hold: a nothing asked at epoch {e0}, before the reset, answered {check:?} after it"
        );
        tally.record(u64::from(matches!(out, Spent::Held { .. })));
        ledger.audit(name, cell.left(NOW), 0);
    });
    (explored, read(&seen))
}

/// Two unit spenders and a take-out on a lease of `[100, 120)` at the
/// frozen `NOW`, racing the main thread's grant of `[120, 140)`, which
/// extends the range, or replaces it if the take-out emptied it first.
/// Returns what was explored and which of (the take-out handed back
/// nothing, it handed back units) were reached.
fn take_out_racing_spends_and_grant(name: &str, make: Make) -> (Explored, [bool; 2]) {
    let label = name.to_owned();
    let seen = flags::<2>();
    let reached = StdArc::clone(&seen);
    let explored = check(name, move |tally| {
        let name = &label;
        let cell = Arc::new(make.cell());
        let e0 = cell.epoch();
        let mut ledger = Ledger {
            granted: vec![
                (NOW, NOW + 2 * INTERVAL),
                (NOW + 2 * INTERVAL, NOW + 4 * INTERVAL),
            ],
            ..Ledger::default()
        };
        assert_eq!(cell.grant(NOW, e0, NOW, NOW + 2 * INTERVAL), None);
        let a = spender(&cell, 1);
        let b = spender(&cell, 1);
        let taker = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || cell.take_out(NOW))
        };
        let displaced = cell.grant(NOW, e0, NOW + 2 * INTERVAL, NOW + 4 * INTERVAL);
        assert_eq!(
            displaced, None,
            "{name}: a continuing grant, or one on an empty lease, displaced units"
        );
        let mut spent = 0;
        for out in a.join().unwrap().into_iter().chain(b.join().unwrap()) {
            spent += u64::from(ledger.spend(NOW, out));
        }
        let taken = taker.join().unwrap();
        reached[usize::from(taken.is_some())].store(true, Relaxed);
        ledger.returned.extend(taken);
        tally.record(spent);
        ledger.drain(name, &cell, NOW, e0);
        ledger.audit(name, 0, 0);
    });
    (explored, read(&seen))
}

/// Two spenders (one unit each) and a refill continuing the range
/// (`[130, 150)`) on a lease of `[100, 130)`, while a clock thread moves
/// the clock from `NOW` by one unit's slot; every thread spawned. Each
/// spend reads the clock first. Returns what was explored and the fewest
/// and most units lost to the clock (their slots passed unspent).
fn ticking(name: &str, make: Make) -> (Explored, [bool; 2]) {
    let label = name.to_owned();
    let seen = flags::<2>();
    let reached = StdArc::clone(&seen);
    let explored = check_bounded(name, WIDE_RACE_BOUND, move |tally| {
        let name = &label;
        let cell = Arc::new(make.cell());
        let e0 = cell.epoch();
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(NOW));
        let mut ledger = Ledger {
            granted: vec![
                (NOW, NOW + 3 * INTERVAL),
                (NOW + 3 * INTERVAL, NOW + 5 * INTERVAL),
            ],
            ..Ledger::default()
        };
        assert_eq!(cell.grant(NOW, e0, NOW, NOW + 3 * INTERVAL), None);
        let ticker = {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(Duration::from_nanos(INTERVAL)))
        };
        let clients: Vec<_> = (0..2)
            .map(|_| {
                let (cell, clock) = (Arc::clone(&cell), clock.clone());
                thread::spawn(move || {
                    let now = clock.now_nanos();
                    (now, cell.spend(now, 1))
                })
            })
            .collect();
        let refiller = {
            let (cell, clock) = (Arc::clone(&cell), clock.clone());
            thread::spawn(move || {
                let now = clock.now_nanos();
                cell.grant(now, e0, NOW + 3 * INTERVAL, NOW + 5 * INTERVAL)
            })
        };
        let mut spent = 0;
        for client in clients {
            let (now, out) = client.join().unwrap();
            spent += u64::from(ledger.spend(now, out));
        }
        assert_eq!(
            refiller.join().unwrap(),
            None,
            "{name}: a continuing grant displaced units"
        );
        ticker.join().unwrap();
        let end = clock.now_nanos();
        assert_eq!(end, NOW + INTERVAL);
        tally.record(spent);
        ledger.drain(name, &cell, end, e0);
        // At most the one slot `[NOW, NOW + INTERVAL)` passed.
        let lost = ledger.audit(name, 0, 1);
        reached[usize::try_from(lost).unwrap()].store(true, Relaxed);
    });
    (explored, read(&seen))
}

#[test]
fn a_continuing_refill_racing_spends_and_a_reset_extends_the_lease() {
    let (explored, orders) =
        refill_racing_spends_and_reset("lease/extend_vs_spends_vs_reset", REAL, (120, 140));
    // A spend refused before the refill (2 spent), or none (3).
    assert_reached(explored, 2, 3);
    assert_eq!(
        orders,
        [true, true, true, false],
        "the grant both before and after the reset, never displacing"
    );
}

#[test]
fn a_replacing_refill_racing_spends_and_a_reset_hands_back_the_rest() {
    let (explored, orders) =
        refill_racing_spends_and_reset("lease/replace_vs_spends_vs_reset", REAL, (200, 220));
    assert_reached(explored, 2, 3);
    assert_eq!(
        orders, [true; 4],
        "the grant both before and after the reset, displacing units and none"
    );
}

#[test]
fn a_nothing_asked_before_a_reset_never_holds_after_it() {
    let (explored, seen) = stale_nothing_racing_reset("lease/stale_nothing_vs_reset", REAL);
    // The racing spender held (the hold before the reset) or not.
    assert_reached(explored, 0, 1);
    assert_eq!(
        seen, [true; 4],
        "both orders of the install and the reset, spender held and not"
    );
}

#[test]
fn a_take_out_racing_spends_and_a_grant_hands_back_exactly_the_rest() {
    let (explored, seen) =
        take_out_racing_spends_and_grant("lease/take_out_vs_spends_vs_grant", REAL);
    assert_reached(explored, 0, 2);
    assert_eq!(seen, [true, true], "the take-out found units, and none");
}

#[test]
fn spends_and_a_refill_while_the_clock_moves_never_spend_a_passed_slot() {
    let (explored, lost) = ticking("lease/ticking", REAL);
    // Both spends are always admitted: 3 units are there at either reading.
    assert_reached(explored, 2, 2);
    assert_eq!(lost, [true, true], "a unit's slot both passed and not");
}

#[test]
#[should_panic(expected = "over-spent")]
fn a_spend_by_load_and_store_is_caught() {
    let _ = refill_racing_spends_and_reset(
        "lease/extend_vs_spends_vs_reset/spend_by_load_store",
        Make::Broken(LeaseBug::SpendByLoadStore),
        (120, 140),
    );
}

#[test]
#[should_panic(expected = "lost units")]
fn a_reset_that_empties_the_word_is_caught() {
    let _ = refill_racing_spends_and_reset(
        "lease/extend_vs_spends_vs_reset/reset_to_empty",
        Make::Broken(LeaseBug::ResetToEmpty),
        (120, 140),
    );
}

#[test]
#[should_panic(expected = "over-spent")]
fn a_reset_by_load_and_store_is_caught() {
    let _ = refill_racing_spends_and_reset(
        "lease/extend_vs_spends_vs_reset/reset_by_load_store",
        Make::Broken(LeaseBug::ResetByLoadStore),
        (120, 140),
    );
}

#[test]
#[should_panic(expected = "stale hold")]
fn a_nothing_that_ignores_the_epoch_is_caught() {
    let _ = stale_nothing_racing_reset(
        "lease/stale_nothing_vs_reset/ignoring_epoch",
        Make::Broken(LeaseBug::NothingIgnoringEpoch),
    );
}
