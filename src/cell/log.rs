//! The sliding window log's cell: a ring of timestamp slots, each claimed by
//! its own compare-and-swap.
//!
//! Each slot holds the expiry of one admission (see
//! [`crate::algorithm`]'s `sliding_log` module). A check looks for a free
//! slot (expiry `≤ now`) and claims it by exchanging its old value for the new
//! expiry. Two threads can never take the same slot, since only one
//! exchange from a given old value succeeds; an admission is never lost,
//! since it is exactly one successful exchange; and it is never counted
//! twice, since a slot is taken only while free. A denial is a full read of
//! the slots with no write.
//!
//! A request of cost `n > 1` first counts the free slots without writing,
//! then claims `n` of them one by one. If a race leaves it short, it gives
//! back what it claimed: while it holds them, a concurrent check may see too
//! few free slots and be denied, an error toward denying, never admitting.
//!
//! # Orderings
//!
//! As for the word cell: each slot publishes nothing but itself, so the
//! exchanges alone make the count exact. Loads are `Acquire` and successful
//! exchanges `AcqRel`, pairing with each other as in `cell::StateCell`. The
//! `next` hint is `Relaxed`: any value of it is correct, it only decides
//! where the search starts. Eviction's handshake (below) needs nothing
//! stronger.
//!
//! # Bookings
//!
//! A booking of cost `n` at `now` ([`Algorithm::reserve`]) reads every
//! slot, and is ready at the `n`-th smallest expiry (or at `now`, if `n`
//! slots are free): the first instant at which a check of `n` would pass,
//! if nothing else were admitted. It is charged at once: it claims those
//! `n` slots (the smallest expiries, ties by index), each by an exchange
//! from the very expiry it was timed on, writing the expiry of an
//! admission at its ready time, `ready_at + W`. If any exchange fails, a
//! slot changed since the booking read it: it gives back what it claimed
//! (an exchange from its own expiry to the old one) and is timed again on
//! a fresh read. Each claim is a read-modify-write like a check's, so the
//! eviction handshake is the same, and a booking ends with the same load
//! of `life` (`confirm`): void if the log was retired meanwhile.
//!
//! Why this never over-admits: a slot records a sequence of admissions one
//! after another, and an admission replaces a slot's expiry `e` only if it
//! is timed at `e` or later (a check when `e ≤ now`, a booking when
//! `e ≤ ready_at`), so the windows `[t, t + W)` recorded in one slot never
//! overlap, and at any instant each slot holds at most one admission in
//! the window. The booking's unchosen slots all expire at `ready_at` or
//! later, so no check passes before the booking's time, and every later
//! booking is timed after it: served in booking order.
//!
//! **Cancelling** (before `ready_at`) takes the booking's expiry
//! `ready_at + W` out of as many slots as it claimed, where slots still
//! hold it, and puts back the expiries its claims replaced, the latest
//! first; a slot holding any other value is left as it is. Slots that
//! hold one expiry are interchangeable, whoever wrote it, so the slots
//! given back need not be the ones the booking claimed: where a later
//! booking has claimed some of them, other slots that hold the same expiry
//! (a booking or a check that shares it) are given back instead, and
//! where there are too few, the expiries not put back are the earliest.
//! What a cancel gives back so depends only on the expiries the log holds,
//! never on which slot holds which, and so neither does any later answer:
//! a client forgotten while idle, whose fresh log places its admissions in
//! other slots, answers as if it had been held.
//!
//! Why this never over-admits. Think of each slot as the sequence of
//! admissions recorded in it, whose windows never overlap, the last one
//! ending at the slot's expiry. Any two slots that hold the same expiry
//! `e` may trade the admissions before the one ending at `e` (those end by
//! `e − W`, where the last starts), and a slot claimed from `e` (by a check
//! or a booking timed at `e` or later) may take in any admission that ends
//! at `e`, since its own window starts at `e` or later. A cancel of `k`
//! claims that finds `j ≤ k` slots holding its expiry rewrites `j` of them:
//! trade so that those `j` slots hold the booking's own admissions before
//! their last, ending at the `j` latest expiries it replaced; give each
//! other admission ending at the expiry, of whoever made it, to one of the
//! slots claimed from the booking's (there are at least as many of those
//! as the booking lost); drop the booking's own. Every slot's windows
//! still follow one another, so at each instant each slot holds at most
//! one admission in the window, as before. Putting back the booking's old
//! expiries without the exchange from its own expiry would not be safe: a
//! booking that claimed a slot from this one would lose its claim, and a
//! check would be let in beside it.
//!
//! The exchange from the expiry also makes a cancel need no tail rule,
//! unlike the word algorithms: a later booking or check holds slots of its
//! own, timed on slots it claimed by exchange, so giving back a slot it
//! did not claim changes nothing it relies on (it may only make it wait
//! longer than it now needs to, an error toward denying).
//!
//! # Eviction: a handshake on the `life` word
//!
//! A log's state is many words, so no single exchange can both check that
//! it is idle and retire it. The cell carries one more word, `life`: live
//! (with a generation count), *pending* (an evictor is checking), or
//! [`DEAD`]. The two sides:
//!
//! * **evictor** (`try_evict`): live → pending by exchange, then re-reads
//!   every slot *by a read-modify-write* (`fetch_add(0)`); if all are free
//!   it commits pending → dead by exchange from the exact pending value it
//!   wrote, otherwise it reverts to live;
//! * **check** (`admit`, admitted or denied): after its slot work, one
//!   `Acquire` load of `life`. Live: the decision stands. Pending: it aborts
//!   the eviction by exchanging pending → live, and the decision stands.
//!   Dead: the decision is void, and the limiter retries on the map's next
//!   entry.
//!
//! Why this is enough, with no `SeqCst`: every write to a slot is a
//! read-modify-write, so each slot's modification order is one chain of
//! them. Take a claim and the evictor's re-read of the same slot. If the
//! re-read comes later in the chain, it reads the claim (a read-modify-write
//! always reads the latest value), finds the slot taken, and reverts. If it
//! comes earlier, the claim reads from the re-read's chain, so the re-read
//! (`AcqRel`) synchronises with the claim, the exchange to pending happens
//! before the check's load of `life`, and that load sees pending or later:
//! the check aborts the eviction or retries. The same holds for a denial
//! made because of a claim that a retired log later voids. Plain loads for
//! the re-read would allow the store-buffering outcome in which neither
//! side sees the other (unless both sides were `SeqCst`); reading by
//! read-modify-write moves that cost onto the evictor, which pays it only
//! for a log it already found idle, and keeps the check path to one
//! `Acquire` load. The generation, bumped by every abort and revert, stops
//! an evictor from committing a pending value that a later evictor wrote
//! (ABA). A check never waits for an evictor: at worst it aborts one.

mod birth;
mod book;

use self::birth::Birth;
use super::{Algorithm, Booking, Life, Mortal, Relocation, Seal};
use crate::algorithm::{FromParams, Params, SlidingWindowLog, Ticket};
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::sync::{AtomicU64, Ordering};

/// One client's log: a handle to its state, which never moves, so that the
/// store can move the handle to a new table bit for bit while checks run on
/// the state (see `Mortal::relocate`). Public only as the sealed
/// [`Algorithm::Cell`] of [`SlidingWindowLog`].
#[doc(hidden)]
#[derive(Debug)]
pub struct LogCell(Box<LogState>);

impl core::ops::Deref for LogCell {
    type Target = LogState;

    fn deref(&self) -> &LogState {
        &self.0
    }
}

impl From<LogState> for LogCell {
    fn from(state: LogState) -> Self {
        Self(Box::new(state))
    }
}

/// A log's state: `limit` slots of admission expiries, and its life.
#[doc(hidden)]
#[derive(Debug)]
pub struct LogState {
    /// Where the next search starts: just past the last slot claimed. Since
    /// slots are mostly claimed in turn, that is usually the oldest one.
    next: AtomicU64,
    /// Live (`generation << 1`), pending (`generation << 1 | 1`) or
    /// [`DEAD`]: see "Eviction" above.
    life: AtomicU64,
    slots: Box<[AtomicU64]>,
    /// Unborn, claimed, born or refused (see "Birth" in `crate::cell`).
    /// An unborn log's `life` is [`DEAD`], so no check claims a slot in it.
    birth: Birth,
}

/// The `life` of a retired log. Live and pending values are smaller: the
/// generation would need 2^63 aborted evictions to reach it.
const DEAD: u64 = u64::MAX;

/// The low bit of `life`: an evictor is checking the slots.
const PENDING: u64 = 1;

impl LogState {
    /// A live log, empty from `floor` on: every slot expires at `floor`,
    /// so it is the most restrictive log idle from then on (see
    /// `WordAlgorithm::fresh_at` for the word cells' equivalent), and a
    /// reading before `floor` finds it full.
    fn new(limit: u64, floor: u64) -> Self {
        Self {
            next: AtomicU64::new(0),
            life: AtomicU64::new(0),
            slots: (0..limit).map(|_| AtomicU64::new(floor)).collect(),
            birth: Birth::born(),
        }
    }

    /// An unborn log: dead to checks until a claimer brings it to life.
    fn unborn(limit: u64, floor: u64) -> Self {
        Self {
            life: AtomicU64::new(DEAD),
            birth: Birth::unborn(),
            ..Self::new(limit, floor)
        }
    }

    /// Brings a claimed log to life.
    fn bear(&self) {
        // Release: pairs with the Acquire loads of `life` in `admit` and
        // `confirm`; the birth word's own Release follows.
        self.life.store(0, Ordering::Release);
        self.birth.bear();
    }

    /// Live or evicted, for a log known to be born.
    fn born_life(&self) -> Life {
        if self.reads_dead() {
            Life::Evicted
        } else {
            Life::Live
        }
    }

    /// The check's half of the handshake, after its slot work: whether its
    /// decision `admitted` stands (`Some`) or the log was retired (`None`).
    #[inline]
    fn confirm(&self, admitted: bool) -> Option<bool> {
        // Acquire: pairs with the AcqRel slot re-read in `try_evict` through
        // the claim (or the denial's slot loads): if the re-read preceded our
        // claim, the exchange to pending happens before this load; see
        // "Eviction" above.
        let life = self.life.load(Ordering::Acquire);
        if life & PENDING == 0 {
            return Some(admitted);
        }
        self.confirm_contended(life, admitted)
    }

    /// `confirm` when an evictor is at work: abort it, or find the log dead.
    #[cold]
    #[inline(never)]
    fn confirm_contended(&self, mut life: u64, admitted: bool) -> Option<bool> {
        loop {
            if life == DEAD {
                return None;
            }
            if life & PENDING == 0 {
                return Some(admitted);
            }
            // AcqRel/Acquire: the abort and the evictor's commit are
            // exchanges on one word; whichever is first in its modification
            // order makes the other fail.
            match self.life.compare_exchange(
                life,
                life + 1, // pending → live, next generation
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(admitted),
                Err(seen) => life = seen,
            }
        }
    }

    /// The evictor's half: retires the log if every slot is free at `now`.
    fn try_evict(&self, log: &SlidingWindowLog, now: u64, forgetting: &dyn Fn(u64)) -> bool {
        // Acquire: as in `try_claim`. A cheap look first, writing nothing.
        let life = self.life.load(Ordering::Acquire);
        if life & PENDING != 0 || self.free(log, now) < log.limit() {
            return false;
        }
        // AcqRel: its Release half is what the slot re-reads below carry to
        // a later claim; see "Eviction" above.
        if self
            .life
            .compare_exchange(life, life | PENDING, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // The re-read, by read-modify-write so that it reads the latest claim
        // (AcqRel: it releases our pending to any claim that reads from it,
        // and acquires the claims it reads). Stop at the first taken slot.
        let mut idle_at = 0;
        let idle = self.slots.iter().all(|s| {
            let expiry = s.fetch_add(0, Ordering::AcqRel);
            idle_at = idle_at.max(expiry);
            log.is_free(expiry, now)
        });
        if idle {
            // Every slot free: the log is idle from its latest expiry on.
            forgetting(idle_at);
        }
        let pending = life | PENDING;
        // AcqRel: publishes the retirement to the checks that load `life`.
        if idle
            && self
                .life
                .compare_exchange(pending, DEAD, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            return true;
        }
        // Not idle after all, or a check aborted us: revert, unless a check
        // already did. AcqRel: as for the abort in `confirm_contended`.
        let _ =
            self.life
                .compare_exchange(pending, pending + 1, Ordering::AcqRel, Ordering::Relaxed);
        false
    }

    /// Retires the log whatever it holds.
    fn retire(&self) -> bool {
        // AcqRel: as the commit in `try_evict`.
        self.life.swap(DEAD, Ordering::AcqRel) != DEAD
    }

    /// Slot indices in search order: from the hint to the end, then from the
    /// start to the hint.
    fn search_order(&self) -> impl Iterator<Item = usize> {
        let n = self.slots.len();
        // Relaxed: a hint; see "Orderings".
        let start = (self.next.load(Ordering::Relaxed) % n as u64) as usize;
        (start..n).chain(0..start)
    }

    /// Claims slot `index` for `stamp` if it is free at `now`.
    #[inline]
    fn try_claim(&self, log: &SlidingWindowLog, index: usize, now: u64, stamp: u64) -> Option<u64> {
        let slot = self.slot(index);
        // Acquire: pairs with the exchange that wrote the slot.
        let mut seen = slot.load(Ordering::Acquire);
        while log.is_free(seen, now) {
            // AcqRel on success, Acquire on failure: as in `StateCell::apply`.
            // The Acquire half also pairs with an evictor's AcqRel re-read
            // of this slot (see "Eviction" above).
            match slot.compare_exchange(seen, stamp, Ordering::AcqRel, Ordering::Acquire) {
                Ok(old) => {
                    // Relaxed: a hint; see "Orderings".
                    self.next.store(index as u64 + 1, Ordering::Relaxed);
                    return Some(old);
                }
                // Another thread took the slot first; if it is somehow still
                // free, try again, else move on.
                Err(now_there) => seen = now_there,
            }
        }
        None
    }

    /// Admits `cost` at `now` if that many slots are free; `None` if the
    /// log was retired, in which case nothing it did counts.
    #[inline]
    fn admit(&self, log: &SlidingWindowLog, now: u64, cost: u64) -> Option<bool> {
        // A log that is not alive yet (or any more) takes no claim: a claim
        // in an unborn log would still be there once it came alive.
        // Acquire: as in `confirm`; a live log never becomes unborn again,
        // and eviction after this load is `confirm`'s business.
        if self.life.load(Ordering::Acquire) == DEAD {
            return None;
        }
        let stamp = log.stamp(now);
        let admitted = if cost == 1 {
            self.search_order()
                .any(|i| self.try_claim(log, i, now, stamp).is_some())
        } else {
            self.admit_many(log, now, cost, stamp)
        };
        self.confirm(admitted)
    }

    /// Whether the log reads as retired, for peeks: a retired log reads as
    /// a fresh one.
    fn reads_dead(&self) -> bool {
        // Acquire: as in `try_claim`; a peek needs no handshake.
        self.life.load(Ordering::Acquire) == DEAD
    }

    #[cold]
    fn admit_many(&self, log: &SlidingWindowLog, now: u64, cost: u64, stamp: u64) -> bool {
        if self.free(log, now) < cost {
            return false;
        }
        let mut claimed = Vec::with_capacity(cost as usize);
        // (A claim here on a log retired meanwhile is harmless: `confirm`
        // then voids the decision, and the log is never read again.)
        for i in self.search_order() {
            if let Some(old) = self.try_claim(log, i, now, stamp) {
                claimed.push((i, old));
                if claimed.len() as u64 == cost {
                    return true;
                }
            }
        }
        // Raced short: give back as many slots holding our stamp as we
        // claimed (`restore`: any slot holding it, since slots of one
        // expiry are interchangeable; one claimed from ours is left).
        self.restore(&claimed, stamp);
        false
    }

    /// Slot `index`: the expiry of the admission that claimed it last.
    #[inline]
    pub(crate) fn slot(&self, index: usize) -> &AtomicU64 {
        &self.slots[index]
    }

    /// Every slot's expiry, each read once.
    fn expiries(&self) -> Vec<u64> {
        // Acquire: as in `try_claim`.
        self.slots
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .collect()
    }

    /// How many slots are free at `now`.
    fn free(&self, log: &SlidingWindowLog, now: u64) -> u64 {
        self.slots
            .iter()
            // Acquire: as in `try_claim`.
            .filter(|s| log.is_free(s.load(Ordering::Acquire), now))
            .count() as u64
    }

    fn describe(&self, log: &SlidingWindowLog, allowed: bool, now: u64, cost: u64) -> Decision {
        let expiries = self.expiries();
        let free = expiries.iter().filter(|&&e| log.is_free(e, now)).count() as u64;
        let retry_after = if allowed {
            0
        } else {
            log.retry_after(expiries.clone(), now, cost)
        };
        // The quota grows when the earliest logged admission expires.
        let replenish_after = if free >= log.limit() {
            0
        } else {
            log.retry_after(expiries, now, free + 1)
        };
        Decision {
            allowed,
            limit: log.limit(),
            remaining: free,
            retry_after,
            replenish_after,
            window: log.window(),
            pair: None,
        }
    }
}

impl Mortal for LogCell {
    fn life(&self) -> Life {
        self.birth.life(|| self.born_life())
    }

    fn claim(&self) -> Result<(), Life> {
        self.birth.claim(|| self.born_life())
    }

    fn unclaim(&self) {
        self.birth.unclaim();
    }

    fn refuse(&self) -> Result<(), Life> {
        self.birth.refuse(|| self.born_life())
    }

    /// The handle moves; the state it names stays where checks find it.
    fn relocate(&self) -> Relocation<Self> {
        if self.is_dead() {
            Relocation::Dead
        } else {
            Relocation::Same
        }
    }

    /// Never called: a handle is moved as it is, with no copy to forward.
    fn forward(&self, _seal: Seal) -> bool {
        true
    }

    /// Never called, as for `forward`: a lapsed log is retired by
    /// `Lapse::retire_if_lapsed`.
    fn retire_sealed(&self, _seal: Seal) -> bool {
        false
    }

    /// Never called, as for `forward`.
    fn refresh(&self, _newer: Self) {}
}

impl Algorithm for SlidingWindowLog {
    const BORN_AT_READING: bool = true;

    type Cell = LogCell;

    fn from_settings(params: &Params) -> Result<Self, ConfigError> {
        <Self as FromParams>::from_params(params)
    }

    fn quota_granted(&self) -> (u64, u64) {
        FromParams::granted(self)
    }

    fn fresh_cell(&self, floor: u64) -> LogCell {
        LogState::new(self.limit(), floor).into()
    }

    fn unborn_cell(&self, floor: u64) -> LogCell {
        LogState::unborn(self.limit(), floor).into()
    }

    fn activate(&self, cell: &LogCell, _floor: u64) {
        // The reading the log is fresh from was set when it was made, by
        // the thread that inserted it, which read the clock after the look
        // at the map that found the client absent.
        cell.bear();
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.limit()
    }

    #[inline]
    fn try_admit(&self, cell: &LogCell, now: u64, cost: u64) -> Option<bool> {
        cell.admit(self, now, cost)
    }

    fn decide(&self, cell: &LogCell, now: u64, cost: u64) -> Option<Decision> {
        let allowed = cell.admit(self, now, cost)?;
        Some(cell.describe(self, allowed, now, cost))
    }

    fn peek(&self, cell: &LogCell, now: u64, cost: u64) -> Decision {
        if cell.reads_dead() {
            return self.peek(&self.new_cell(), now, cost);
        }
        let allowed = cell.free(self, now) >= cost;
        // The figures of the log as it stands: a peek takes no slot.
        cell.describe(self, allowed, now, cost)
    }

    fn quota(&self, cell: &LogCell, now: u64) -> Decision {
        if cell.reads_dead() {
            return self.quota(&self.new_cell(), now);
        }
        cell.describe(self, true, now, 1)
    }

    fn try_evict(&self, cell: &LogCell, now: u64, forgetting: &dyn Fn(u64)) -> bool {
        cell.try_evict(self, now, forgetting)
    }

    fn force_evict(&self, cell: &LogCell) -> bool {
        cell.retire()
    }

    fn reset(&self, _: &LogCell, _: u64) -> Option<bool> {
        None
    }

    fn idle_at(&self, cell: &LogCell) -> u64 {
        if cell.reads_dead() {
            return 0;
        }
        // The last expiry: every slot is free from then on.
        cell.expiries().into_iter().max().unwrap_or(0)
    }

    fn horizon(&self) -> u64 {
        self.window()
    }

    fn can_reserve(&self) -> bool {
        true
    }

    fn reserve(&self, cell: &LogCell, now: u64, cost: u64, max_wait: u64) -> Option<Booking> {
        cell.book(self, now, cost, max_wait)
    }

    fn unreserve(&self, cell: &LogCell, now: u64, ticket: &Ticket) -> Option<bool> {
        cell.unbook(self, now, ticket)
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use core::time::Duration;

    fn log(limit: u64, window_ns: u64) -> SlidingWindowLog {
        SlidingWindowLog::new(limit, Duration::from_nanos(window_ns)).unwrap()
    }

    #[test]
    fn admits_while_a_slot_is_free() {
        let l = log(2, 100);
        let cell = l.new_cell();
        assert!(Algorithm::admit(&l, &cell, 10, 1));
        assert!(Algorithm::admit(&l, &cell, 20, 1));
        assert!(!Algorithm::admit(&l, &cell, 109, 1));
        assert!(Algorithm::admit(&l, &cell, 110, 1));
        assert!(!Algorithm::admit(&l, &cell, 119, 1));
        let d = l.peek(&cell, 119, 1);
        assert_eq!(
            (d.is_allowed(), d.remaining(), d.retry_after()),
            (false, 0, Duration::from_nanos(1))
        );
    }

    #[test]
    fn a_multi_claim_needs_every_slot_free() {
        let l = log(3, 100);
        let cell = l.new_cell();
        assert!(Algorithm::admit(&l, &cell, 0, 1));
        assert!(!Algorithm::admit(&l, &cell, 50, 3));
        assert_eq!(cell.free(&l, 50), 2);
        assert!(Algorithm::admit(&l, &cell, 50, 2));
        assert_eq!(cell.free(&l, 50), 0);
        // At 100 one slot is free again: too few for two, and none is taken.
        assert!(!Algorithm::admit(&l, &cell, 100, 2));
        assert_eq!(cell.expiries(), [100, 150, 150]);
    }

    #[test]
    fn eviction_needs_every_slot_free_and_voids_later_checks() {
        let l = log(2, 100);
        let cell = l.new_cell();
        assert!(Algorithm::admit(&l, &cell, 10, 1));
        assert_eq!(l.idle_at(&cell), 110);
        assert!(
            !l.try_evict(&cell, 109, &|_| ()),
            "a slot is still in the window"
        );
        assert_eq!(cell.life.load(Ordering::Relaxed), 0, "nothing written");
        assert!(l.try_evict(&cell, 110, &|_| ()));
        assert!(cell.is_dead());
        assert!(!l.try_evict(&cell, 110, &|_| ()), "retired once only");
        assert_eq!(l.try_admit(&cell, 110, 1), None);
        assert_eq!(l.decide(&cell, 110, 2), None);
        // A retired log reads as a fresh one.
        assert_eq!(l.peek(&cell, 110, 2).remaining(), 2);
        assert!(l.peek(&cell, 110, 2).is_allowed());
        assert_eq!(l.quota(&cell, 110).remaining(), 2);
    }

    #[test]
    fn a_booking_claims_the_first_slots_to_free_up_and_a_cancel_restores_them() {
        let l = log(3, 100);
        let cell = l.new_cell();
        assert!(Algorithm::admit(&l, &cell, 0, 1));
        assert!(Algorithm::admit(&l, &cell, 20, 2));
        // Expiries 100, 120, 120: two units are ready at 120, claimed at 220.
        let Some(Booking::Granted(ticket, wait)) = l.reserve(&cell, 50, 2, u64::MAX) else {
            panic!("booked");
        };
        assert_eq!((ticket.ready_at(), wait), (120, 70));
        let mut after = cell.expiries();
        after.sort_unstable();
        assert_eq!(after, [120, 220, 220]);
        assert_eq!(
            l.reserve(&cell, 50, 1, 69),
            Some(Booking::TooLong(70)),
            "nothing charged over the limit on the wait"
        );
        assert_eq!(
            l.unreserve(&cell, 120, &ticket),
            Some(false),
            "its time came"
        );
        assert_eq!(l.unreserve(&cell, 60, &ticket), Some(true));
        let mut back = cell.expiries();
        back.sort_unstable();
        assert_eq!(back, [100, 120, 120], "as if it had never been made");
        assert_eq!(l.unreserve(&cell, 60, &ticket), Some(false), "once only");
        // A retired log books and cancels nothing.
        assert!(l.force_evict(&cell));
        assert_eq!(l.reserve(&cell, 50, 1, u64::MAX), None);
        assert_eq!(l.unreserve(&cell, 60, &ticket), None);
    }

    #[test]
    fn a_booking_ready_at_the_last_instant_is_made_and_one_past_it_never() {
        use crate::algorithm::{NEVER, NOW_MAX};
        let l = log(1, 100);
        // The slot frees at the last instant: booked then, 100 away; and
        // refused as too long by a wait allowed a nanosecond less.
        let cell = l.new_cell();
        assert!(Algorithm::admit(&l, &cell, NOW_MAX - 100, 1));
        assert_eq!(
            l.reserve(&cell, NOW_MAX - 100, 1, 99),
            Some(Booking::TooLong(100))
        );
        let Some(Booking::Granted(ticket, wait)) = l.reserve(&cell, NOW_MAX - 100, 1, 100) else {
            panic!("booked");
        };
        assert_eq!((ticket.ready_at(), wait), (NOW_MAX, 100));
        // A slot that frees past the last instant: never, whatever the
        // wait allowed.
        let cell = l.new_cell();
        assert!(Algorithm::admit(&l, &cell, NOW_MAX - 99, 1));
        for max_wait in [100, u64::MAX] {
            assert_eq!(
                l.reserve(&cell, NOW_MAX - 99, 1, max_wait),
                Some(Booking::TooLong(NEVER))
            );
        }
    }

    #[test]
    fn a_check_aborts_a_pending_eviction() {
        let l = log(1, 100);
        let cell = l.new_cell();
        // An evictor has announced itself but not yet committed.
        cell.life.store(PENDING, Ordering::Relaxed);
        assert_eq!(l.try_admit(&cell, 0, 1), Some(true));
        assert_eq!(
            cell.life.load(Ordering::Relaxed),
            2,
            "live, next generation"
        );
        // The stale evictor's commit from its own pending value now fails.
        assert!(cell
            .life
            .compare_exchange(PENDING, DEAD, Ordering::AcqRel, Ordering::Relaxed)
            .is_err());
        assert_eq!(l.try_admit(&cell, 0, 1), Some(false));
        assert!(l.force_evict(&cell));
        assert!(!l.force_evict(&cell));
        assert_eq!(l.try_admit(&cell, 0, 1), None);
    }
}
