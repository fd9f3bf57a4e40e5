//! Model 20: a lease's units spent here while a refill, a reset, a
//! take-out, a stale "nothing until" and the move of a range waiting
//! behind the lease race them.
//!
//! A Redis limiter leases a block of a token bucket's units in one call:
//! the slots `[start, end)` (µs, one unit every `INTERVAL`), which this
//! process then spends through one cell (`__loom::LeaseCell`, the crate's
//! compare-and-swap loop over the pure transitions of
//! `crate::algorithm::lease`). A spend at `now` takes the slots
//! `[max(cursor, now), +cost·INTERVAL)` and must end by `end`. A grant that
//! does not continue the lease while it still holds units waits behind it
//! (a second word); a caller that finds the lease short takes the waiting
//! range by one exchange and installs it in the lease's place. The races:
//!
//! * two spenders (two spends and one) on a lease of 2 units at a frozen
//!   `NOW`, racing a refill that grants 2 more units and a reset: a grant
//!   that continues the range (extends it), and one that does not (waits
//!   behind the units left, or takes the place of a lease spent out);
//! * a spender and a "nothing until" answered to a request asked at the
//!   epoch before the reset, on a drained lease, racing the reset;
//! * two spenders and a take-out on a lease of 2 units racing a grant
//!   that continues the range (or, once taken out, starts a new one);
//! * two spenders and a refill while a clock thread moves the clock by one
//!   unit's slot (every thread spawned, the main thread joining);
//! * a lease of 1 unit with 2 units waiting behind it: three spenders (so
//!   two find the lease short and race to move the waiting range) and a
//!   take-out; two spenders and a grant of a further range that continues
//!   neither (it replaces the waiting range, or waits behind the moved
//!   one).
//!
//! The properties, in every interleaving: each admitted spend took slots
//! of `cost·INTERVAL` that start no earlier than the clock reading it was
//! made at and lie within a granted range; no slot is spent twice, nor
//! both spent and handed back (displaced by a grant or a move, or taken
//! out); after the race the units left are all spendable (a drain spends
//! exactly `left`, the waiting range's included), and the units spent plus
//! those handed back equal the units granted with a frozen clock, and fall
//! short of them by at most the units whose slots the clock passed
//! otherwise; the reset always took effect (the epoch moved on) and never
//! lost a grant installed beside it; a "nothing" asked before the reset
//! never holds a check after it. Both orders of each race are reached
//! (flags, and the range of units spent in the race): of the grant and
//! the reset, of the two spenders racing to move the waiting range, of
//! the move and the take-out or the grant, and a spender asking while
//! another caller holds the waiting range between its exchange and its
//! install.
//!
//! Broken twins (`twins::BrokenLease`, over the crate's pure transitions
//! and its compare-and-swap loop): a spend by a load and a store; a reset
//! that stores an empty word; a reset by a load and a store of the right
//! transition; an install of "nothing" that ignores the epoch asked at; the
//! waiting range taken by a load and a store instead of one exchange.

use std::sync::atomic::{AtomicBool as StdAtomicBool, Ordering::Relaxed};
use std::sync::Arc as StdArc;
use std::time::Duration;

use loom::sync::Arc;
use loom::thread;

use crate::harness::{assert_reached, check, check_bounded, Explored, WIDE_RACE_BOUND};
use crate::twins::{BrokenLease, LeaseBug};
use tollgate::__loom::{lease, LeaseCell, Spent, SpentSlots};
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

    /// A grant of `[start, end)`: the ranges it displaced.
    fn grant(&self, now: u64, start: u64, end: u64) -> Vec<(u64, u64)> {
        match self {
            Self::Real(c) => c.grant_ranges(now, start, end),
            Self::Broken(c) => c.grant(now, start, end),
        }
    }

    /// "Nothing until `until`": the ranges it displaced.
    fn nothing(&self, now: u64, epoch: u64, until: u64) -> Vec<(u64, u64)> {
        match self {
            Self::Real(c) => c.nothing_ranges(now, epoch, until),
            Self::Broken(c) => c.nothing(now, epoch, until),
        }
    }

    fn reset(&self) {
        match self {
            Self::Real(c) => c.reset(),
            Self::Broken(c) => c.reset(),
        }
    }

    /// The lease's unpassed units, then the waiting range's.
    fn take_out(&self, now: u64) -> [Option<(u64, u64)>; 2] {
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

    /// Whether the word is a hold (no range, checks denied until its
    /// cursor).
    fn holds(&self) -> bool {
        let (cursor, end, _) = lease::parts(match self {
            Self::Real(c) => c.word(),
            Self::Broken(c) => c.word(),
        });
        end == 0 && cursor > 0
    }

    /// The lease's end (µs; 0 for no range).
    fn end(&self) -> u64 {
        let (_, end, _) = lease::parts(match self {
            Self::Real(c) => c.word(),
            Self::Broken(c) => c.word(),
        });
        end
    }
}

/// An admitted spend: the clock reading it was made at and its slots.
type Slot = (u64, (u64, u64));

/// What a spend answered, the slots it took if admitted, and the ranges
/// it displaced.
type Out = SpentSlots;

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

    /// Notes one spend of a unit at `now`, and the ranges it displaced:
    /// whether it was admitted.
    fn spend(&mut self, now: u64, out: Out) -> bool {
        let (spent, slots, displaced) = out;
        self.returned.extend(displaced);
        match (spent, slots) {
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
            let answer = out.0;
            assert!(
                self.spend(now, out),
                "{name}: lost units: {left} left, but spend {} of them refused: {answer:?}",
                n + 1
            );
        }
        let out = cell.spend(now, 1);
        let answer = out.0;
        assert!(
            !self.spend(now, out),
            "{name}: over-spent: a spend admitted past the {left} units left"
        );
        assert_eq!(
            answer,
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
/// frozen `NOW`, a refill granting `refill` (continuing the range, or
/// not: then it waits behind the lease while units are left), and the
/// main thread's reset. Returns what was explored and which of (the grant
/// before the reset, the reset before the grant, the lease spent out when
/// the grant came, units left then, the grant left waiting behind the
/// lease) were reached.
fn refill_racing_spends_and_reset(
    name: &str,
    make: Make,
    refill: (u64, u64),
) -> (Explored, [bool; 5]) {
    let label = name.to_owned();
    let orders = flags::<5>();
    let reached = StdArc::clone(&orders);
    let explored = check(name, move |tally| {
        let name = &label;
        let cell = Arc::new(make.cell());
        let e0 = cell.epoch();
        let mut ledger = Ledger {
            granted: vec![(NOW, NOW + 2 * INTERVAL), refill],
            ..Ledger::default()
        };
        assert!(cell.grant(NOW, NOW, NOW + 2 * INTERVAL).is_empty());

        let a = spender(&cell, 2);
        let b = spender(&cell, 1);
        let refiller = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                let before = cell.epoch();
                // Only the grant adds units: none left now, none then.
                let left = cell.left(NOW);
                let displaced = cell.grant(NOW, refill.0, refill.1);
                // The lease still ends where it did: the grant waits.
                let waiting = cell.end() == NOW + 2 * INTERVAL;
                (before, left, displaced, waiting, cell.epoch())
            })
        };
        cell.reset();

        let mut spent = 0;
        for out in a.join().unwrap().into_iter().chain(b.join().unwrap()) {
            spent += u64::from(ledger.spend(NOW, out));
        }
        let (before, left, displaced, waiting, after) = refiller.join().unwrap();
        if before != e0 {
            reached[1].store(true, Relaxed);
        }
        if after == e0 {
            reached[0].store(true, Relaxed);
        }
        // Nothing waited before it: nothing for it to displace.
        assert!(
            displaced.is_empty(),
            "{name}: a grant with nothing waiting displaced {displaced:?}"
        );
        reached[2 + usize::from(left > 0)].store(true, Relaxed);
        if waiting {
            reached[4].store(true, Relaxed);
        }
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
        assert!(cell.grant(NOW, NOW, NOW + INTERVAL).is_empty());
        assert!(ledger.spend(NOW, cell.spend(NOW, 1)));
        // The request: asked at the epoch the drained lease names.
        let (asked, _, _) = cell.spend(NOW, 1);
        let Spent::Ask { epoch: e0 } = asked else {
            panic!("{name}: a drained lease answered {asked:?}");
        };

        let answer = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || {
                let before = cell.epoch();
                let displaced = cell.nothing(NOW, e0, UNTIL);
                (before, displaced, cell.epoch())
            })
        };
        let racer = spender(&cell, 1);
        cell.reset();
        let (before, displaced, after) = answer.join().unwrap();
        assert!(
            displaced.is_empty(),
            "{name}: a nothing with nothing waiting displaced {displaced:?}"
        );
        let (out, slots, displaced) = racer.join().unwrap().remove(0);
        assert!(
            displaced.is_empty(),
            "{name}: a spend with nothing waiting displaced {displaced:?}"
        );
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
        let (check, _, _) = cell.spend(NOW, 1);
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
        assert!(cell.grant(NOW, NOW, NOW + 2 * INTERVAL).is_empty());
        let a = spender(&cell, 1);
        let b = spender(&cell, 1);
        let taker = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || cell.take_out(NOW))
        };
        let displaced = cell.grant(NOW, NOW + 2 * INTERVAL, NOW + 4 * INTERVAL);
        assert!(
            displaced.is_empty(),
            "{name}: a continuing grant, or one on an empty lease, displaced {displaced:?}"
        );
        let mut spent = 0;
        for out in a.join().unwrap().into_iter().chain(b.join().unwrap()) {
            spent += u64::from(ledger.spend(NOW, out));
        }
        let [taken, waiting] = taker.join().unwrap();
        assert_eq!(
            waiting, None,
            "{name}: nothing ever waited, yet {waiting:?} was taken out"
        );
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
        assert!(cell.grant(NOW, NOW, NOW + 3 * INTERVAL).is_empty());
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
                cell.grant(now, NOW + 3 * INTERVAL, NOW + 5 * INTERVAL)
            })
        };
        let mut spent = 0;
        for client in clients {
            let (now, out) = client.join().unwrap();
            spent += u64::from(ledger.spend(now, out));
        }
        let displaced = refiller.join().unwrap();
        assert!(
            displaced.is_empty(),
            "{name}: a continuing grant displaced {displaced:?}"
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

/// The range granted behind the lease in the promotion races: it does not
/// continue the lease `[NOW, NOW + INTERVAL)`, so it waits.
const WAITING: (u64, u64) = (NOW + 10 * INTERVAL, NOW + 12 * INTERVAL);

/// What races the spenders in a promotion race, on the main thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rival {
    /// A take-out of the lease and the range waiting behind it.
    TakeOut,
    /// A grant of a further range that continues neither.
    Grant((u64, u64)),
    /// The shared bucket's "nothing until `UNTIL`", answered to a request
    /// asked at the epoch the race starts at.
    Nothing,
}

/// A lease of 1 unit, `[NOW, NOW + INTERVAL)`, with [`WAITING`] (2 units)
/// granted behind it, at the frozen `NOW`: `spenders` threads spend one
/// unit each, so that all but one find the lease short and race to move
/// the waiting range into its place, while the main thread takes the lease
/// out or grants a further range. Returns what was explored and which of
/// (the rival took or displaced the waiting range, it found it moved,
/// spender 0 took the waiting range's first slot, spender 1 did, a spender
/// asked while another caller was moving the waiting range) were reached.
///
/// With `in_order`, also that a spender's move of the waiting range never
/// displaced units: the range waiting is older than any grant after it, so
/// it must never take the place of a later grant's units (the Redis
/// limiter gives back only the latest range, ending where its registered
/// slots end).
fn promotion_race(
    name: &str,
    make: Make,
    spenders: usize,
    rival: Rival,
    in_order: bool,
) -> (Explored, [bool; 5]) {
    let label = name.to_owned();
    let seen = flags::<5>();
    let reached = StdArc::clone(&seen);
    let explored = check(name, move |tally| {
        let name = &label;
        let cell = Arc::new(make.cell());
        let e0 = cell.epoch();
        let mut ledger = Ledger {
            granted: vec![(NOW, NOW + INTERVAL), WAITING],
            ..Ledger::default()
        };
        assert!(cell.grant(NOW, NOW, NOW + INTERVAL).is_empty());
        assert!(cell.grant(NOW, WAITING.0, WAITING.1).is_empty());
        assert_eq!(
            (cell.left(NOW), cell.end()),
            (3, NOW + INTERVAL),
            "{name}: a range that does not continue the lease waits behind it"
        );

        let threads: Vec<_> = (0..spenders).map(|_| spender(&cell, 1)).collect();
        let displaced_waiting = match rival {
            Rival::TakeOut => {
                let [own, waiting] = cell.take_out(NOW);
                ledger.returned.extend(own);
                ledger.returned.extend(waiting);
                waiting.is_some()
            }
            Rival::Grant(range) => {
                ledger.granted.push(range);
                let displaced = cell.grant(NOW, range.0, range.1);
                let hit = displaced.contains(&WAITING);
                ledger.returned.extend(displaced);
                hit
            }
            Rival::Nothing => {
                ledger.returned.extend(cell.nothing(NOW, e0, UNTIL));
                // Read at once: whether the hold was installed (the lease
                // spent out and the waiting range moved by a spender not
                // yet installed), or not.
                cell.holds()
            }
        };
        reached[usize::from(!displaced_waiting)].store(true, Relaxed);

        let mut spent = 0;
        let mut asked = false;
        for (i, thread) in threads.into_iter().enumerate() {
            let out = thread.join().unwrap().remove(0);
            if out.1 == Some((WAITING.0, WAITING.0 + INTERVAL)) && i < 2 {
                reached[2 + i].store(true, Relaxed);
            }
            assert!(
                !in_order || out.2.is_empty(),
                "{name}: out of order: the waiting range {WAITING:?}, moved into \
                 the lease's place, displaced the later grant's {:?}",
                out.2
            );
            asked |= matches!(out.0, Spent::Ask { .. });
            spent += u64::from(ledger.spend(NOW, out));
        }
        // A spender asked (the lease short, nothing waiting) while another
        // caller had taken the waiting range and not yet installed it: the
        // range was moved (neither taken out nor displaced), and units
        // came back after the take-out emptied the lease; with a grant and
        // two spenders, the one left could not have spent the range out.
        let in_flight = match rival {
            Rival::TakeOut => cell.left(NOW) > 0,
            Rival::Grant(_) => spenders == 2,
            Rival::Nothing => false,
        };
        if asked && !displaced_waiting && in_flight {
            reached[4].store(true, Relaxed);
        }
        tally.record(spent);
        ledger.drain(name, &cell, NOW, e0);
        ledger.audit(name, 0, 0);
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
        [true, true, true, true, false],
        "the grant both before and after the reset, on a lease spent out          and not, never left waiting"
    );
}

#[test]
fn a_refill_that_does_not_continue_waits_behind_the_units_left() {
    let (explored, orders) =
        refill_racing_spends_and_reset("lease/wait_vs_spends_vs_reset", REAL, (200, 220));
    // A spend refused before the refill (2 spent), or none (3): a spender
    // that finds the lease short moves the waiting range into its place.
    assert_reached(explored, 2, 3);
    assert_eq!(
        orders, [true; 5],
        "the grant both before and after the reset, on a lease spent out          (installed at once) and not, and left waiting behind it"
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

#[test]
fn spenders_racing_to_move_the_waiting_range_and_a_take_out_keep_every_slot_once() {
    let (explored, seen) = promotion_race(
        "lease/promote_vs_spends_vs_take_out",
        REAL,
        3,
        Rival::TakeOut,
        true,
    );
    // The take-out first (nothing spent), or after all three spends.
    assert_reached(explored, 0, 3);
    assert_eq!(
        seen, [true; 5],
        "the take-out before and after the move, each spender taking the \
         moved range's first slot, a spender asking while the range was moved"
    );
}

#[test]
fn spenders_racing_to_move_the_waiting_range_and_a_further_grant_keep_every_slot_once() {
    let (explored, seen) = promotion_race(
        "lease/promote_vs_spends_vs_grant",
        REAL,
        2,
        Rival::Grant((NOW + 20 * INTERVAL, NOW + 22 * INTERVAL)),
        false,
    );
    assert_reached(explored, 1, 2);
    assert_eq!(
        seen, [true; 5],
        "the grant displacing the waiting range and finding it moved, each \
         spender taking the moved range's first slot, a spender asking \
         while the range was moved"
    );
}

/// A "nothing until" racing two spenders over a lease of 1 unit with 2
/// waiting behind it: the hold is installed only while a spender holds the
/// waiting range between its exchange and its install, and that install
/// replaces the hold, so no hold ever hides units (the drain after the
/// race spends exactly the units left, then asks); the ledger balances.
/// Both orders are reached: a hold installed and overwritten, and none.
#[test]
fn a_nothing_racing_the_move_of_the_waiting_range_never_hides_its_units() {
    let (explored, seen) = promotion_race(
        "lease/promote_vs_spends_vs_nothing",
        REAL,
        2,
        Rival::Nothing,
        true,
    );
    // A spender held (the hold installed while the other moved the range),
    // or both spent.
    assert_reached(explored, 1, 2);
    assert_eq!(
        [seen[0], seen[1]],
        [true, true],
        "the hold installed (a move in flight) and not"
    );
}

/// A spender that took the waiting range by its exchange installs it
/// after a later grant, finding the lease spent out, was placed in the
/// lease: the later grant stays (its units never displaced), and the
/// moved range waits behind it again.
#[test]
fn a_move_of_the_waiting_range_never_displaces_a_later_grant() {
    let _ = promotion_race(
        "lease/promote_vs_spends_vs_grant/in_order",
        REAL,
        2,
        Rival::Grant((NOW + 20 * INTERVAL, NOW + 22 * INTERVAL)),
        true,
    );
}

#[test]
#[should_panic(expected = "over-spent")]
fn a_waiting_range_moved_by_load_and_store_is_caught() {
    let _ = promotion_race(
        "lease/promote_vs_spends_vs_take_out/promote_by_load_store",
        Make::Broken(LeaseBug::PromoteByLoadStore),
        3,
        Rival::TakeOut,
        true,
    );
}
