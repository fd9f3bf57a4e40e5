//! Each `Local` replica's fallback, bounded from what Redis last told that
//! replica, as the Redis guide states it: every answer from Redis spends
//! the client's in-process state down to what it says is left; with
//! `local_share(n)` the replica holds the client to an `n`-th of that, and
//! refills at an `n`-th of the rate, up to its share of the capacity; a
//! client it never heard of starts from its full share. So, between two
//! answers from Redis, what a replica admits in process is at most an
//! `n`-th of what Redis last told it was left, plus its refill since, plus
//! a fraction of a unit.
//!
//! It also keeps a lower bound of what the fallback surely holds, the other
//! direction: a fallback never refuses a check it holds the units for. The
//! lower bound starts at the full share, goes down to an n-th of what each
//! answer from Redis said was left (the units `hold_to` keeps, whole),
//! goes down by each admission decided in process, refills only over
//! time known to have passed between two of the oracle's readings, and
//! goes to 0 at anything the oracle does not follow (checks at once some
//! of which the fail policy answered, a booking,
//! a peek, a reset, a quota change or a tier move, a fault's checks). A
//! check the fallback refused while the lower bound held its cost fails
//! the case: a fallback that refuses for too long. On a coalescing
//! replica a batch task goes on after a check it carries is answered at
//! its timeout, and Redis's late answer holds the fallback down at an
//! instant the oracle cannot see: after a timeout in an operation that
//! started a batch task, nothing is sure of the replica's fallbacks until
//! its stats show every batch task ended (`batch_tasks_done` equal to
//! `batch_tasks`, read after the operation, when none can start); from
//! that reading on, the lower bound starts again from 0 and refills.
//!
//! The oracle keeps, per replica and client, an upper bound of what the
//! fallback may hold (in ns of the replica's refill: one unit is `n`
//! intervals), lowers it to each answer it sees come from Redis (a check
//! whose call went out and came back, nothing answered by the fail policy),
//! spends it by each admission it sees decided in process, and asserts it
//! never goes a unit below zero. Where it cannot tell which check was
//! answered how (tasks at once with some answered by the fail policy), it
//! neither lowers nor spends: it only ever errs toward more. Token bucket
//! replicas that lease are left to the span bound (a leased check is
//! answered without Redis, and a grant's answer counts the units handed
//! out).

use std::time::SystemTime;

use tollgate::redis::{FailPolicy, RedisStats};

use super::{Case, Family, CLIENTS, REPLICAS};

/// What one replica's fallback may hold of one client, at most.
#[derive(Clone, Copy, Debug)]
pub(super) struct Told {
    /// ns of the replica's refill (a unit is `REPLICAS` intervals).
    credit: i128,
    /// Its capacity: the replica's share, in the same ns.
    cap: i128,
    /// When its refill was last counted.
    at: SystemTime,
    /// What the fallback surely holds, at least, in the same ns.
    low: i128,
    /// What `low` refills to, at most: the share of the tier the fallback
    /// holds the client in, or after a move or a quota change, the least
    /// share of any tier (the fallback moves the client at its own pace).
    low_cap: i128,
    /// Since when `low`'s refill is not counted yet: always a reading
    /// taken after the event that set it.
    low_at: SystemTime,
}

/// What the oracle last saw of a replica's batch tasks: whether a late
/// answer from Redis, to a check answered at its timeout, may still hold
/// its fallbacks down unseen.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Batches {
    /// `batch_tasks` when the replica was last settled: no task running.
    started: u64,
    /// `timeouts` then.
    timeouts: u64,
    /// Whether a task that may answer late was running at the latest look.
    late: bool,
}

impl Batches {
    /// Whether, since it was last settled, the replica started a batch
    /// task and answered a check at its timeout: a late answer may come.
    fn may_answer_late(&self, now: &RedisStats) -> bool {
        self.late || (now.batch_tasks != self.started && now.timeouts != self.timeouts)
    }
}

/// How a call's answer came, from the replica's stats around it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Came {
    /// From Redis: a call went out and came back, and nothing else.
    Redis,
    /// Decided in process by the fallback.
    Local,
    /// Otherwise (the deny shortcut, a lease, an error, a timeout).
    Other,
}

/// Whether every check between two snapshots was answered by Redis or
/// by the deny shortcut (which only denies): none by the fail policy, no
/// timeout, no error, no lease.
pub(super) fn all_answered(before: &RedisStats, after: &RedisStats) -> bool {
    (after.timeouts, after.errors, after.leased, after.lease_held)
        == (
            before.timeouts,
            before.errors,
            before.leased,
            before.lease_held,
        )
        && (after.fail_open, after.fail_closed, after.fail_local)
            == (before.fail_open, before.fail_closed, before.fail_local)
}

pub(super) fn came(before: &RedisStats, after: &RedisStats) -> Came {
    let quiet = (
        after.timeouts,
        after.errors,
        after.denied_locally,
        after.leased,
    ) == (
        before.timeouts,
        before.errors,
        before.denied_locally,
        before.leased,
    ) && (after.fail_open, after.fail_closed, after.lease_held)
        == (before.fail_open, before.fail_closed, before.lease_held);
    if after.fail_local > before.fail_local {
        Came::Local
    } else if quiet && after.round_trips > before.round_trips {
        Came::Redis
    } else {
        Came::Other
    }
}

fn ns_since(t: SystemTime) -> i128 {
    t.elapsed().unwrap_or_default().as_nanos() as i128
}

impl<F: Family> Case<F> {
    /// Whether replica `r`'s fallback is bounded here: a `Local` bucket
    /// replica that does not lease.
    pub(super) fn told_bounds(&self, r: usize) -> bool {
        F::TOLD && self.setups[r].policy == FailPolicy::Local && self.setups[r].lease.is_none()
    }

    /// A unit of a replica's fallback, in ns: `REPLICAS` intervals.
    fn told_unit(&self) -> i128 {
        self.interval.as_nanos() as i128 * REPLICAS as i128
    }

    /// A fallback that never heard of the client: its full share.
    pub(super) fn told_fresh(&self, r: usize, c: usize) -> Told {
        let cap = i128::from(self.share(r, c)) * self.told_unit();
        let now = SystemTime::now();
        Told {
            credit: cap,
            cap,
            at: now,
            low: cap,
            low_cap: cap,
            low_at: now,
        }
    }

    /// The lower bound refilled up to `to`, a reading taken before the
    /// event to come: only time surely passed.
    fn low_refill(&mut self, r: usize, c: usize, to: SystemTime) {
        let t = &mut self.told[r][c];
        if let Ok(passed) = to.duration_since(t.low_at) {
            t.low = (t.low + passed.as_nanos() as i128).min(t.low_cap);
            t.low_at = to;
        }
    }

    /// Something the oracle does not follow may have spent replica `r`'s
    /// fallback of client `c`: nothing is sure of it any more.
    pub(super) fn low_unknown(&mut self, r: usize, c: usize) {
        let t = &mut self.told[r][c];
        t.low = 0;
        t.low_at = SystemTime::now();
    }

    /// After an operation, when no batch task can start: each replica
    /// whose batch tasks may have answered late since it was last settled
    /// settles if none runs now, every lower bound of its fallbacks
    /// starting again from 0 at this reading (the tasks' answers were
    /// kept before it); else it stays unsettled.
    pub(super) fn settle_all(&mut self) {
        for r in 0..self.replicas.len() {
            let now = self.replicas[r].stats();
            let b = &mut self.batches[r];
            let late = b.may_answer_late(&now);
            if late && now.batch_tasks != now.batch_tasks_done {
                b.late = true;
                continue;
            }
            *b = Batches {
                started: now.batch_tasks,
                timeouts: now.timeouts,
                late: false,
            };
            if late {
                for c in 0..CLIENTS {
                    self.low_unknown(r, c);
                }
            }
        }
    }

    /// As [`Case::low_unknown`], of every client of every replica.
    pub(super) fn low_unknown_all(&mut self) {
        for r in 0..self.told.len() {
            for c in 0..CLIENTS {
                self.low_unknown(r, c);
            }
        }
    }

    /// Replica `r`'s fallback admitted `units` of client `c` in a check
    /// sent at `sent`: the lower bound goes down by as much.
    pub(super) fn low_spent(&mut self, r: usize, c: usize, units: u64, sent: SystemTime) {
        if !self.told_bounds(r) {
            return;
        }
        self.low_refill(r, c, sent);
        let unit = self.told_unit();
        let t = &mut self.told[r][c];
        t.low = (t.low - i128::from(units) * unit).max(0);
        t.low_at = SystemTime::now();
    }

    /// Replica `r`'s fallback refused `cost` units of client `c` in a
    /// check sent at `sent`: an error if it surely held them.
    pub(super) fn refused_locally(
        &mut self,
        r: usize,
        c: usize,
        cost: u64,
        sent: SystemTime,
    ) -> Result<(), String> {
        // A batch task may still hold the fallback down by a late answer:
        // nothing is sure until the replica settles.
        if !self.told_bounds(r) || self.batches[r].may_answer_late(&self.replicas[r].stats()) {
            return Ok(());
        }
        self.low_refill(r, c, sent);
        let unit = self.told_unit();
        let t = &self.told[r][c];
        if t.low >= i128::from(cost) * unit {
            return Err(format!(
                "replica {r}'s fallback refused {cost} of client {c} while it surely held {:.2} \
                 units (a share of {} units): it refuses for too long\n{}",
                t.low as f64 / unit as f64,
                t.cap / unit,
                self.log.join("\n"),
            ));
        }
        Ok(())
    }

    /// Counts the refill since it was last counted.
    fn told_refill(&mut self, r: usize, c: usize) {
        let t = &mut self.told[r][c];
        t.credit = (t.credit + ns_since(t.at)).min(t.cap);
        t.at = SystemTime::now();
    }

    /// Redis told replica `r` that `remaining` units of client `c` were
    /// left, in a call sent at `sent`.
    pub(super) fn heard(&mut self, r: usize, c: usize, remaining: u64, sent: SystemTime) {
        if !self.told_bounds(r) {
            return;
        }
        self.told_refill(r, c);
        // An n-th of what is left, as ns of the replica's refill: each of
        // its units is n intervals. Refilled since the call went out.
        let held = i128::from(remaining) * self.interval.as_nanos() as i128 + ns_since(sent);
        let t = &mut self.told[r][c];
        t.credit = t.credit.min(held);
        self.low_heard(r, c, remaining, sent);
    }

    /// Redis may have told replica `r` that `remaining` units of client
    /// `c` were left, in a call sent at `sent`: the lower bound goes down
    /// as [`Case::heard`] takes it down, the upper one stays.
    pub(super) fn low_heard(&mut self, r: usize, c: usize, remaining: u64, sent: SystemTime) {
        if !self.told_bounds(r) {
            return;
        }
        // The fallback is held to an n-th of it, in whole units, at some
        // instant between the call's sending and now.
        self.low_refill(r, c, sent);
        let kept = i128::from(remaining / REPLICAS as u64) * self.told_unit();
        let t = &mut self.told[r][c];
        t.low = t.low.min(kept);
        t.low_at = SystemTime::now();
    }

    /// Replica `r` admitted `units` of client `c` in process: within what
    /// Redis last told it, its refill since, and a fraction of a unit.
    pub(super) fn spent_locally(&mut self, r: usize, c: usize, units: u64) -> Result<(), String> {
        if !self.told_bounds(r) || units == 0 {
            return Ok(());
        }
        self.told_refill(r, c);
        let unit = self.told_unit();
        let t = &mut self.told[r][c];
        t.credit -= i128::from(units) * unit;
        if t.credit < -unit {
            return Err(format!(
                "replica {r} admitted client {c} in process beyond what Redis last told it was \
                 left and its refill since: {:.2} units over (a share of {} units)\n{}",
                (-t.credit - unit) as f64 / unit as f64,
                t.cap / unit,
                self.log.join("\n"),
            ));
        }
        Ok(())
    }

    /// Replica `r`'s quotas or client `c`'s tier changed: a raise raises
    /// what the fallback may hold by as much, at most. (A lower share is
    /// not taken as a bound: the fallback, an in-process tiered limiter,
    /// holds a client in the tier it found it in, and a move reaches it
    /// only at the fallback's own pace.) For the same reason the raise is
    /// the largest share of any of the replica's tiers, not of the tier the
    /// resolver names now: after a move, a raise of the tier the client
    /// left raises what a fallback that still holds it there may admit (a
    /// move to tier 1 then tier 0's quota raised let a `Local` replica
    /// admit a unit beyond the share of the tier the client had left).
    pub(super) fn told_reshare(&mut self, r: usize, c: usize) {
        if !self.told_bounds(r) {
            return;
        }
        self.told_refill(r, c);
        let shares = || {
            self.caps[r]
                .iter()
                .map(|&cap| (cap / REPLICAS as u64).max(1))
        };
        let unit = self.told_unit();
        let (widest, narrowest) = (shares().max(), shares().min());
        let cap = i128::from(widest.unwrap_or(1)) * unit;
        let narrowest = i128::from(narrowest.unwrap_or(1)) * unit;
        let t = &mut self.told[r][c];
        t.credit += (cap - t.cap).max(0);
        t.cap = t.cap.max(cap);
        // The fallback converts the client at its own pace, and a lower
        // quota clamps it: nothing is sure of it, and it may hold the
        // client in any tier, the narrowest too.
        t.low_cap = t.low_cap.min(narrowest);
        self.low_unknown(r, c);
    }

    /// Every replica's fallback of every client, after a change that may
    /// reach any.
    pub(super) fn told_reshare_all(&mut self) {
        for r in 0..self.setups.len() {
            for c in 0..CLIENTS {
                self.told_reshare(r, c);
            }
        }
    }
}
