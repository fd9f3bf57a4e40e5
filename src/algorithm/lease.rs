//! A lease: a block of a token bucket's units that a process took from the
//! shared bucket in one call, spent here, as pure transitions of one
//! 128-bit word.
//!
//! # Slots
//!
//! The shared bucket is GCRA (see `token_bucket.rs`): admitting `n` units
//! at `now` gives them the *slots* `[max(TAT, now), max(TAT, now) + n·T)`
//! on the clock, `T` the interval of one unit, and requires the end of
//! those slots to be at most `now + capacity·T`. An admission's slot never
//! starts before the admission, and the slots of all admissions are
//! disjoint, so in any span `[a, b]` the admissions fit in
//! `[a, b + capacity·T]`: at most `capacity + (b − a)/T` of them, the
//! bucket's exact bound.
//!
//! A lease takes `g` units at once, so it is given `g` consecutive slots
//! `[start, end)`. Spending them later keeps the bound exactly if each unit
//! is spent no later than its slot starts: the spend at `now` takes the
//! slots `[max(cursor, now), max(cursor, now) + n·T)` and is allowed only
//! if they end by `end`. That is GCRA again, confined to the lease's
//! range, and a unit whose slot has passed unspent is gone, as a token
//! that overflows a full bucket is. Time here is the shared clock's, as
//! this process estimates it, never earlier than it, so an estimate only
//! ever spends less.
//!
//! # The word
//!
//! ```text
//!  127      116 115                                            64
//! +-----------+------------------------------------------------+
//! |   epoch   |            end (µs)                             |
//! +-----------+------------------------------------------------+
//!  63                                                           0
//! +-------------------------------------------------------------+
//! |            cursor (µs)                                      |
//! +-------------------------------------------------------------+
//! ```
//!
//! - a lease: `cursor ≤ end`, `end > 0`: the slots `[cursor, end)` are this
//!   process's to spend (however many have passed);
//! - a hold: `end = 0 < cursor`: the shared bucket had no unit to give
//!   until `cursor`, so checks are denied here until then without asking;
//! - empty: `cursor = end = 0`.
//!
//! The epoch counts the resets this process made (modulo 2<sup>12</sup>):
//! a hold learnt from a reading sent before a reset is stale and is not
//! installed, since the reset may have freed units. Times are µs below
//! 2<sup>52</sup> (the year 2112), so the cursor, the low half, stays far
//! below the five words that say a cell is not alive.

use super::{first, join, second};

/// The largest instant a lease's word holds, in µs.
pub(crate) const TIME_MAX: u64 = (1 << EPOCH_SHIFT) - 1;

/// Where the epoch starts in the high half.
const EPOCH_SHIFT: u32 = 52;

/// The epochs, modulo this many.
const EPOCHS: u64 = 1 << (64 - EPOCH_SHIFT);

/// A lease's word, taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parts {
    pub(crate) cursor: u64,
    pub(crate) end: u64,
    pub(crate) epoch: u64,
}

impl Parts {
    /// The word of these parts.
    pub(crate) const fn word(self) -> u128 {
        join(
            self.cursor,
            (self.epoch % EPOCHS) << EPOCH_SHIFT | (self.end & TIME_MAX),
        )
    }

    /// The parts of `word`.
    pub(crate) const fn of(word: u128) -> Self {
        let high = second(word);
        Self {
            cursor: first(word),
            end: high & TIME_MAX,
            epoch: high >> EPOCH_SHIFT,
        }
    }

    /// Whether the word holds a lease's range (spent or not).
    const fn is_range(self) -> bool {
        self.end > 0
    }
}

/// What a shared bucket answered a request for a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// The slots `[start, end)`, µs.
    Range { start: u64, end: u64 },
    /// Nothing until `until` (µs): the bucket's first unit frees then.
    Nothing { until: u64 },
}

/// A lease's local state, the only thing the transitions need: the
/// interval of one unit, µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lease {
    pub(crate) interval: u64,
}

/// What a spend found, when it could not spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Short {
    /// Denied here until this instant (µs), without asking.
    Held(u64),
    /// Not enough left: ask the shared bucket. The epoch seen.
    Ask(u64),
}

impl Lease {
    /// Spends `cost` units at `now` (µs): the word after, or `None` if the
    /// lease's unpassed slots cannot hold them (or the word is a hold or
    /// empty).
    #[inline]
    pub(crate) fn spend(self, word: u128, now: u64, cost: u64) -> Option<u128> {
        let p = Parts::of(word);
        if !p.is_range() {
            return None;
        }
        // Both below 2^52 and cost · interval at most a bucket's refill
        // (checked by the builder): no overflow.
        let from = p.cursor.max(now);
        let to = from.checked_add(cost.checked_mul(self.interval)?)?;
        (to <= p.end).then(|| Parts { cursor: to, ..p }.word())
    }

    /// The whole units still spendable at `now`.
    pub(crate) fn left(self, word: u128, now: u64) -> u64 {
        let p = Parts::of(word);
        if !p.is_range() {
            return 0;
        }
        p.end.saturating_sub(p.cursor.max(now)) / self.interval
    }

    /// Why a spend of `word` at `now` failed.
    pub(crate) fn short(self, word: u128, now: u64) -> Short {
        let p = Parts::of(word);
        if !p.is_range() && p.cursor > now {
            Short::Held(p.cursor)
        } else {
            Short::Ask(p.epoch)
        }
    }

    /// Installs a grant answered to a request sent at epoch `asked`: the
    /// word after, and the unpassed units the grant displaced (`[from,
    /// end)`, µs), if any. A range that continues the one held extends it;
    /// any other range replaces it. A `Nothing` becomes a hold only if no
    /// reset came since the request (`asked` is the epoch) and no unit is
    /// left to spend; otherwise it changes nothing (`None`).
    pub(crate) fn install(
        self,
        word: u128,
        now: u64,
        asked: u64,
        grant: Grant,
    ) -> Option<(u128, Option<(u64, u64)>)> {
        let p = Parts::of(word);
        match grant {
            Grant::Range { start, end } => {
                if p.is_range() && start == p.end && end > p.end {
                    return Some((Parts { end, ..p }.word(), None));
                }
                let from = p.cursor.max(now);
                let displaced = (p.is_range() && p.end >= from.saturating_add(self.interval))
                    .then_some((from, p.end));
                let next = Parts {
                    cursor: start,
                    end,
                    epoch: p.epoch,
                };
                Some((next.word(), displaced))
            }
            Grant::Nothing { until } => {
                let stale = p.epoch != asked % EPOCHS;
                if stale || self.left(word, now) > 0 {
                    return None;
                }
                let hold = Parts {
                    cursor: until,
                    end: 0,
                    epoch: p.epoch,
                };
                Some((hold.word(), None))
            }
        }
    }

    /// Installs a granted range `[start, end)` (µs) in `word`, unless the
    /// word still holds a unit at `now` that the range does not continue:
    /// then `None`, and the range waits behind it (see
    /// [`queue`](Self::queue)), so that no unit the word holds lapses for
    /// it. The word after, and the units it displaced (none: a range is
    /// replaced only once its units are spent or passed).
    pub(crate) fn place(
        self,
        word: u128,
        now: u64,
        start: u64,
        end: u64,
    ) -> Option<(u128, Option<(u64, u64)>)> {
        let p = Parts::of(word);
        let continues = p.is_range() && start == p.end && end > p.end;
        if !continues && self.left(word, now) > 0 {
            return None;
        }
        self.install(word, now, p.epoch, Grant::Range { start, end })
    }

    /// Puts the granted range `[start, end)` (µs) in the word of the range
    /// waiting behind the lease (same layout, epoch 0): extending the one
    /// waiting if it continues it, else replacing it. The word after, and
    /// the unpassed units of a range it replaced, if any.
    pub(crate) fn queue(
        self,
        queued: u128,
        now: u64,
        start: u64,
        end: u64,
    ) -> (u128, Option<(u64, u64)>) {
        self.install(queued, now, 0, Grant::Range { start, end })
            .unwrap_or((Parts::of(0).word(), None))
    }

    /// Moves a range taken from behind the lease, `[start, end)` (µs), into
    /// its place, for a spend of `need` units the lease could not hold: as
    /// a grant is installed (extending a lease it continues, else replacing
    /// it, the word after and the unpassed units displaced), unless the
    /// lease holds `need` units by now (a grant took its place since it was
    /// found short): then `None`, and the lease keeps them.
    pub(crate) fn promote(
        self,
        word: u128,
        now: u64,
        need: u64,
        (start, end): (u64, u64),
    ) -> Option<(u128, Option<(u64, u64)>)> {
        if self.left(word, now) >= need.max(1) {
            return None;
        }
        self.install(
            word,
            now,
            Parts::of(word).epoch,
            Grant::Range { start, end },
        )
    }

    /// The word of a range waiting behind the lease, `[start, end)` (µs).
    pub(crate) const fn waiting((start, end): (u64, u64)) -> u128 {
        Parts {
            cursor: start,
            end,
            epoch: 0,
        }
        .word()
    }

    /// Takes the range waiting behind the lease: the empty word, and the
    /// range `[cursor, end)`; `None` if none waits.
    pub(crate) fn unqueue(queued: u128) -> Option<(u128, (u64, u64))> {
        let p = Parts::of(queued);
        p.is_range()
            .then(|| (Parts::of(0).word(), (p.cursor, p.end)))
    }

    /// A reset made by this process: the epoch moves on and a hold goes
    /// (the reset may have freed units); a lease's range stays, its units
    /// still this process's.
    pub(crate) fn reset(word: u128) -> u128 {
        let p = Parts::of(word);
        let epoch = (p.epoch + 1) % EPOCHS;
        if p.is_range() {
            Parts { epoch, ..p }.word()
        } else {
            Parts {
                cursor: 0,
                end: 0,
                epoch,
            }
            .word()
        }
    }

    /// Empties the word: the word after, and the unpassed units it held
    /// (`[from, end)`, µs), if any.
    pub(crate) fn take_out(self, word: u128, now: u64) -> (u128, Option<(u64, u64)>) {
        let p = Parts::of(word);
        let from = p.cursor.max(now);
        let held =
            (p.is_range() && p.end >= from.saturating_add(self.interval)).then_some((from, p.end));
        let empty = Parts {
            cursor: 0,
            end: 0,
            epoch: p.epoch,
        };
        (empty.word(), held)
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    const LEASE: Lease = Lease { interval: 10 };

    fn range(cursor: u64, end: u64) -> u128 {
        Parts {
            cursor,
            end,
            epoch: 0,
        }
        .word()
    }

    /// Spends one unit at a time until refused: the instants admitted.
    fn drain(mut word: u128, times: &[u64]) -> Vec<u64> {
        let mut spent = Vec::new();
        for &now in times {
            if let Some(next) = LEASE.spend(word, now, 1) {
                word = next;
                spent.push(now);
            }
        }
        spent
    }

    #[test]
    fn a_range_spends_its_units_at_once_and_no_more() {
        // 3 units in the slots [100, 130), all in the future at 50.
        let w = range(100, 130);
        assert_eq!(LEASE.left(w, 50), 3);
        assert_eq!(drain(w, &[50, 50, 50, 50]), vec![50, 50, 50]);
        assert_eq!(LEASE.spend(w, 50, 3), Some(range(130, 130)));
        assert_eq!(LEASE.spend(w, 50, 4), None);
    }

    #[test]
    fn a_unit_is_gone_once_its_slot_has_passed() {
        // The slots [100, 130): at 105 the first has begun, so two are
        // left, and at 121 none.
        let w = range(100, 130);
        assert_eq!(LEASE.left(w, 105), 2);
        assert_eq!(drain(w, &[105, 105, 105]), vec![105, 105]);
        assert_eq!(LEASE.left(w, 121), 0);
        assert_eq!(LEASE.spend(w, 121, 1), None);
        // Spent one by one as time goes, each at its slot's start.
        assert_eq!(drain(w, &[100, 110, 120, 130]), vec![100, 110, 120]);
    }

    #[test]
    fn every_spend_takes_slots_that_start_no_earlier_than_it_and_lie_in_the_range() {
        // The property the exact bound rests on, over every reading order.
        for start in [0u64, 7, 100] {
            for len in 1..6u64 {
                let end = start + len * 10;
                let mut w = range(start, end);
                let mut taken = Vec::new();
                for now in (0..end + 20).step_by(3) {
                    let before = Parts::of(w).cursor;
                    if let Some(next) = LEASE.spend(w, now, 1) {
                        let slot = before.max(now);
                        assert!(slot >= now && slot + 10 <= end);
                        taken.push(slot);
                        w = next;
                    }
                }
                assert!(taken.windows(2).all(|p| p[1] >= p[0] + 10), "disjoint");
                assert!(taken.len() as u64 <= len);
            }
        }
    }

    #[test]
    fn a_continuing_grant_extends_and_another_replaces_giving_back_the_rest() {
        let w = LEASE.spend(range(100, 130), 50, 1).unwrap();
        let (x, gone) = LEASE
            .install(
                w,
                50,
                0,
                Grant::Range {
                    start: 130,
                    end: 150,
                },
            )
            .unwrap();
        assert_eq!(
            (Parts::of(x).cursor, Parts::of(x).end, gone),
            (110, 150, None)
        );
        // Not continuing: the rest [110, 130) is displaced.
        let (y, gone) = LEASE
            .install(
                w,
                50,
                0,
                Grant::Range {
                    start: 200,
                    end: 220,
                },
            )
            .unwrap();
        assert_eq!(Parts::of(y).cursor, 200);
        assert_eq!(gone, Some((110, 130)));
        // Nothing unpassed to displace once the slots are past.
        let (_, gone) = LEASE
            .install(
                w,
                125,
                0,
                Grant::Range {
                    start: 200,
                    end: 220,
                },
            )
            .unwrap();
        assert_eq!(gone, None);
    }

    #[test]
    fn a_hold_denies_until_it_ends_and_a_reset_since_the_request_voids_it() {
        let empty = Parts::of(0).word();
        let (held, _) = LEASE
            .install(empty, 50, 0, Grant::Nothing { until: 80 })
            .unwrap();
        assert_eq!(LEASE.spend(held, 60, 1), None);
        assert_eq!(LEASE.short(held, 60), Short::Held(80));
        assert_eq!(LEASE.short(held, 80), Short::Ask(0));
        // A reset since the request: the hold is stale.
        let reset = Lease::reset(empty);
        assert_eq!(
            LEASE.install(reset, 50, 0, Grant::Nothing { until: 80 }),
            None
        );
        // One asked after that reset is not: it holds.
        let (after, _) = LEASE
            .install(reset, 50, 1, Grant::Nothing { until: 80 })
            .unwrap();
        assert_eq!(LEASE.short(after, 60), Short::Held(80));
        // A reset clears a hold and keeps a range.
        assert_eq!(Parts::of(Lease::reset(held)).cursor, 0);
        let kept = Lease::reset(range(100, 130));
        assert_eq!(LEASE.left(kept, 50), 3);
        assert_eq!(Parts::of(kept).epoch, 1);
        // Units still left: a `Nothing` does not hide them behind a hold.
        assert_eq!(
            LEASE.install(range(100, 130), 50, 0, Grant::Nothing { until: 80 }),
            None
        );
    }

    #[test]
    fn the_epoch_wraps_and_never_reaches_the_times() {
        let mut w = range(5, TIME_MAX);
        for _ in 0..EPOCHS + 3 {
            w = Lease::reset(w);
        }
        let p = Parts::of(w);
        assert_eq!((p.cursor, p.end, p.epoch), (5, TIME_MAX, 3));
        assert!(first(w) < crate::algorithm::NOT_ALIVE);
    }

    #[test]
    fn a_grant_waits_behind_units_left_and_is_placed_once_they_are_gone() {
        let w = range(100, 130);
        // Continuing: extends, whatever is left.
        let (x, gone) = LEASE.place(w, 50, 130, 150).unwrap();
        assert_eq!(
            (Parts::of(x).cursor, Parts::of(x).end, gone),
            (100, 150, None)
        );
        // Not continuing, units left: it waits.
        assert_eq!(LEASE.place(w, 50, 200, 220), None);
        assert_eq!(LEASE.place(w, 119, 200, 220), None);
        // Not continuing, nothing left (the last slot began at 120):
        // replaces, displacing nothing.
        let (y, gone) = LEASE.place(w, 121, 200, 220).unwrap();
        assert_eq!(
            (Parts::of(y).cursor, Parts::of(y).end, gone),
            (200, 220, None)
        );
        // Spent whole: replaced too.
        let spent = LEASE.spend(w, 50, 3).unwrap();
        assert!(LEASE.place(spent, 50, 200, 220).is_some());
        // The epoch is kept.
        let reset = Lease::reset(spent);
        let (z, _) = LEASE.place(reset, 50, 200, 220).unwrap();
        assert_eq!(Parts::of(z).epoch, 1);
    }

    #[test]
    fn a_waiting_range_is_extended_replaced_and_taken_whole() {
        let empty = Parts::of(0).word();
        assert_eq!(Lease::unqueue(empty), None);
        let (q, gone) = LEASE.queue(empty, 50, 200, 220);
        assert_eq!((q, gone), (range(200, 220), None));
        let (q2, gone) = LEASE.queue(q, 50, 220, 240);
        assert_eq!((q2, gone), (range(200, 240), None));
        // Not continuing: replaced, its unpassed units displaced.
        let (q3, gone) = LEASE.queue(q2, 205, 300, 320);
        assert_eq!((q3, gone), (range(300, 320), Some((205, 240))));
        assert_eq!(Lease::unqueue(q3), Some((empty, (300, 320))));
    }

    #[test]
    fn a_range_moved_from_behind_never_displaces_units_a_spend_did_not_find_short() {
        let waiting = (200, 230);
        // The lease short of a spend of 2 (1 unit left): the range takes
        // its place, the unit left displaced.
        let (w, gone) = LEASE.promote(range(110, 120), 100, 2, waiting).unwrap();
        assert_eq!((w, gone), (range(200, 230), Some((110, 120))));
        // A later grant took the lease's place meanwhile, holding 2: it
        // stays, whatever the range moved.
        assert_eq!(LEASE.promote(range(300, 320), 100, 2, waiting), None);
        assert_eq!(LEASE.promote(range(300, 320), 100, 1, waiting), None);
        // Spent out: the range takes its place, keeping the epoch.
        let spent = Lease::reset(range(120, 120));
        let (w, gone) = LEASE.promote(spent, 100, 1, waiting).unwrap();
        assert_eq!(
            (Parts::of(w).cursor, Parts::of(w).epoch, gone),
            (200, 1, None)
        );
        assert_eq!(Lease::waiting(waiting), range(200, 230));
    }

    #[test]
    fn taking_out_empties_and_returns_the_unpassed_units() {
        let (w, held) = LEASE.take_out(range(100, 130), 105);
        assert_eq!((w, held), (Parts::of(0).word(), Some((105, 130))));
        assert_eq!(LEASE.take_out(range(100, 130), 125).1, None);
    }
}
