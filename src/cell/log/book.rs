//! Bookings on a log (see "Bookings" in the log's module): a booking
//! claims the slots that free up first, each by an exchange from the very
//! expiry it was timed on; a cancellation puts back the expiries it
//! replaced in slots that still hold the booking's expiry.

use super::{LogState, DEAD};
use crate::algorithm::{clamp_now, until, SlidingWindowLog, Ticket, NEVER, NOW_MAX};
use crate::cell::Booking;
use crate::sync::Ordering;

impl LogState {
    /// Books `cost` at `now` (see "Bookings" above): claims the `cost`
    /// slots that free up first, each by an exchange from the very expiry
    /// the booking was timed on, with the expiry of an admission at the
    /// booking's ready time. `None` if the log was retired, in which case
    /// nothing it did counts.
    #[cold]
    pub(super) fn book(
        &self,
        log: &SlidingWindowLog,
        now: u64,
        cost: u64,
        max_wait: u64,
    ) -> Option<Booking> {
        // As in `admit`: a dead log takes no claim.
        // Acquire: as in `confirm`.
        if self.life.load(Ordering::Acquire) == DEAD {
            return None;
        }
        let reading = clamp_now(now);
        let n = cost as usize;
        loop {
            let expiries = self.expiries();
            // The `cost` smallest expiries, ties by index: one total order,
            // so the slots chosen are a function of the values read.
            let mut order: Vec<usize> = (0..expiries.len()).collect();
            order.sort_unstable_by_key(|&i| (expiries[i], i));
            order.truncate(n);
            // The cost-th slot to free up frees it for the whole booking.
            let ready_at = expiries[order[n - 1]].max(now);
            let wait = until(reading, ready_at);
            if ready_at > NOW_MAX || wait > max_wait {
                // A refusal is a decision on the slots read: it stands only
                // if the log was not retired meanwhile, as a denial's does.
                let wait = if ready_at > NOW_MAX { NEVER } else { wait };
                return self.confirm(false).map(|_| Booking::TooLong(wait));
            }
            let stamp = log.stamp(ready_at);
            let mut claims = Vec::with_capacity(n);
            for &i in &order {
                if !self.claim_from(i, expiries[i], stamp) {
                    break;
                }
                claims.push((i, expiries[i]));
            }
            if claims.len() == n {
                let ticket = Ticket {
                    from: 0,
                    to: 0,
                    ready_at,
                    cost,
                    claims: Some(claims.into_boxed_slice()),
                };
                return self.confirm(true).map(|_| Booking::Granted(ticket, wait));
            }
            // A slot changed since it was read: the booking was timed on a
            // state that is gone. Give back what it claimed, and time it
            // again. (While it held them, a check may have been denied: an
            // error toward denying, as in `admit_many`.)
            self.restore(&claims, stamp);
        }
    }

    /// Slot `index` from exactly `seen` to `stamp`: whether it was there.
    fn claim_from(&self, index: usize, seen: u64, stamp: u64) -> bool {
        let slot = self.slot(index);
        // AcqRel on success, Acquire on failure: as in `try_claim`; the
        // Acquire half also pairs with an evictor's AcqRel re-read of this
        // slot (see "Eviction" above).
        slot.compare_exchange(seen, stamp, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Gives back `claims` made with `stamp`: slots that hold `stamp`, at
    /// most one for each claim, get back the expiries the claims replaced,
    /// the latest first. How many did.
    ///
    /// Slots that hold one expiry are interchangeable, whoever wrote it:
    /// where a later booking has claimed some of the claims' slots, other
    /// slots holding `stamp` are given back instead, if there are any, and
    /// the expiries not put back are the earliest. So what a cancel gives
    /// back depends on the expiries the log holds, not on which slot holds
    /// which (see "Bookings" in the log's module).
    pub(super) fn restore(&self, claims: &[(usize, u64)], stamp: u64) -> usize {
        let mut olds: Vec<u64> = claims.iter().map(|&(_, old)| old).collect();
        olds.sort_unstable_by(|a, b| b.cmp(a));
        let mut given = 0;
        for slot in self.slots.iter() {
            let Some(&old) = olds.get(given) else { break };
            // Acquire: as in `try_claim`; a look first, so that a cancel
            // writes only to the slots that hold its stamp.
            // AcqRel/Acquire on the exchange: as in `try_claim`; it fails
            // if anything replaced the stamp since the look.
            if slot.load(Ordering::Acquire) == stamp
                && slot
                    .compare_exchange(stamp, old, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                given += 1;
            }
        }
        given
    }

    /// Cancels the booking `ticket` made on this log at `now`: before its
    /// time, every slot it claimed that still holds its expiry gets back
    /// the expiry it held before. Whether any did; `None` if the log was
    /// retired.
    #[cold]
    pub(super) fn unbook(&self, log: &SlidingWindowLog, now: u64, ticket: &Ticket) -> Option<bool> {
        let claims = ticket.claims.as_deref().unwrap_or_default();
        let given = now < ticket.ready_at && self.restore(claims, log.stamp(ticket.ready_at)) > 0;
        // The handshake, as for a check: a give-back on a log retired
        // meanwhile gave nothing back that anyone will read.
        self.confirm(given)
    }
}
