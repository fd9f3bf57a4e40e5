//! What keeps a Redis outage from becoming a retry storm: a breaker that
//! lets one probe through at a time while Redis is down, with capped
//! exponential backoff between probes; and the limiter's counters.

use core::time::Duration;

use crate::sync::{AtomicU64, Ordering};

/// Whether a check may go to Redis now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Redis is up: go.
    Pass,
    /// Redis was down and its backoff is over: this check may be the one
    /// probe, if it wins [`Breaker::take_probe`] when it starts.
    Probe,
    /// Redis is down: answer by the fail policy. The wait is until the next
    /// probe may go (zero while a probe is in flight).
    Down(Duration),
}

/// The breaker: `down_until` (ns on the limiter's local clock, 0 while
/// up), a probe flag, the count of consecutive failed probes that sets
/// the backoff, and the latest instant Redis answered a call, which tells
/// a slow reply from an unreachable Redis.
#[derive(Debug)]
pub(crate) struct Breaker {
    down_until: AtomicU64,
    probing: AtomicU64,
    failures: AtomicU64,
    answered: AtomicU64,
    base: u64,
    max: u64,
}

impl Breaker {
    pub(crate) fn new(base: Duration, max: Duration) -> Self {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX / 4);
        Self {
            down_until: AtomicU64::new(0),
            probing: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            base: ns(base).max(1),
            max: ns(max).max(1),
        }
    }

    pub(crate) fn gate(&self, now: u64) -> Gate {
        // Acquire: pairs with the Release stores in `failed` and
        // `succeeded`; the flag and the deadline are independent hints, so
        // nothing stronger is needed for correctness of a decision.
        let until = self.down_until.load(Ordering::Acquire);
        if until == 0 {
            return Gate::Pass;
        }
        if now < until {
            return Gate::Down(Duration::from_nanos(until - now));
        }
        // Relaxed: a hint only; `take_probe` decides.
        if self.probing.load(Ordering::Relaxed) == 0 {
            Gate::Probe
        } else {
            Gate::Down(Duration::ZERO)
        }
    }

    /// Takes the probe flag: true for the one check that may probe. Called
    /// when the check's future first runs, right before the guard that
    /// gives the flag back is made, so that a future dropped before its
    /// first poll never holds the flag.
    pub(crate) fn take_probe(&self) -> bool {
        // AcqRel: one winner among the checks that find the backoff over;
        // pairs with the Release stores that give the flag back.
        self.probing
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Redis answered a call at `now`: it is up. True for the one call that
    /// closed the breaker (it was open).
    pub(crate) fn succeeded(&self, probe: bool, now: u64) -> bool {
        // Relaxed: read by `answered_since` as a hint that Redis is
        // reachable; it orders nothing else.
        self.answered.fetch_max(now, Ordering::Relaxed);
        let mut closed = false;
        // Relaxed: a hint that spares the common case (up) a write; the
        // swap below decides.
        if self.down_until.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
            // Release: pairs with the Acquire load in `gate`, as the store
            // it replaces did. A swap, so that of two calls that find the
            // breaker open only one counts its closing.
            closed = self.down_until.swap(0, Ordering::Release) != 0;
        }
        if probe {
            self.probing.store(0, Ordering::Release);
        }
        closed
    }

    /// Whether the breaker is open (Redis failed and has not answered
    /// since).
    #[cfg(feature = "metrics")]
    pub(crate) fn is_open(&self) -> bool {
        // Relaxed: a reading for a gauge, publishing nothing.
        self.down_until.load(Ordering::Relaxed) != 0
    }

    /// Redis failed a check: down for the next backoff. A failed probe
    /// doubles the backoff (up to the cap); of the checks in flight when
    /// Redis goes down, only the first to fail sets it. True for the one
    /// call that opened the breaker (it was closed).
    pub(crate) fn failed(&self, probe: bool, now: u64) -> bool {
        if probe {
            let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
            // Release: pairs with the Acquire load in `gate`. A swap, so
            // that a probe failing after another check closed the breaker
            // counts its opening again.
            let was = self.down_until.swap(
                now.saturating_add(self.backoff(failures)).max(1),
                Ordering::Release,
            );
            self.probing.store(0, Ordering::Release);
            was == 0
        } else if self
            .down_until
            .compare_exchange(
                0,
                now.saturating_add(self.base).max(1),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            self.failures.store(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Whether Redis answered a call after `sent`: then a call sent at
    /// `sent` that timed out met a slow reply, not an unreachable Redis,
    /// and opens nothing.
    pub(crate) fn answered_since(&self, sent: u64) -> bool {
        // Relaxed: see `succeeded`; a reply missed here (a race with its
        // store) opens the breaker, as any timeout did before.
        self.answered.load(Ordering::Relaxed) > sent
    }

    /// A probe that never finished (its future was dropped): let another go.
    pub(crate) fn abandoned(&self) {
        self.probing.store(0, Ordering::Release);
    }

    /// The backoff after `failures` consecutive failures: `base · 2^(n−1)`,
    /// at most `max`.
    fn backoff(&self, failures: u64) -> u64 {
        let shift = u32::try_from(failures.saturating_sub(1))
            .unwrap_or(63)
            .min(62);
        self.base.saturating_mul(1 << shift).min(self.max)
    }
}

/// A snapshot of a Redis limiter's counters, from
/// [`RedisLimiter::stats`](crate::redis::RedisLimiter::stats). The counters only
/// grow; read two snapshots and subtract for a rate.
///
/// Every check is counted once in `checks`, and answered in exactly one of
/// these ways: by Redis (`round_trips` minus the failed ones, plus
/// `coalesced`, the checks that rode another's round trip), by the deny
/// shortcut (`denied_locally`), refused for its cost, or by the fail policy
/// (`fail_open + fail_closed + fail_local`).
///
/// # Examples
///
/// ```
/// use tollgate::redis::RedisStats;
///
/// let stats = RedisStats::default();
/// assert_eq!(stats.round_trips, 0);
/// println!("{stats:?}");
/// ```
#[must_use = "a snapshot of counters does nothing unless read"]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RedisStats {
    /// Checks and peeks asked of the limiter.
    pub checks: u64,
    /// Commands sent to Redis, each one round trip: one per check, and one
    /// more when Redis had lost the script (the script is then sent whole).
    pub round_trips: u64,
    /// Checks denied by the local deny shortcut, without a round trip:
    /// the Redis calls saved.
    pub denied_locally: u64,
    /// Round trips that ran past the timeout.
    pub timeouts: u64,
    /// Round trips that failed otherwise: Redis unreachable, an error
    /// reply, or a state under a key that the limiter did not write.
    pub errors: u64,
    /// Probes sent while Redis was down, to learn whether it is back.
    pub probes: u64,
    /// Checks admitted by [`FailPolicy::FailOpen`](crate::redis::FailPolicy::FailOpen).
    pub fail_open: u64,
    /// Checks answered with an error: by
    /// [`FailPolicy::FailClosed`](crate::redis::FailPolicy::FailClosed), and by
    /// [`FailPolicy::FailOpen`](crate::redis::FailPolicy::FailOpen) for a failure
    /// other than Redis being unreachable or slow.
    pub fail_closed: u64,
    /// Checks decided by the in-process limiter of
    /// [`FailPolicy::Local`](crate::redis::FailPolicy::Local).
    pub fail_local: u64,
    /// Scripts sent whole because Redis had lost them (a restart, a
    /// failover, `SCRIPT FLUSH`), which loads them again.
    pub script_reloads: u64,
    /// Times the breaker opened: Redis failed while it was up, and checks
    /// went to the fail policy until a probe found it back. On Redis
    /// Cluster, each node's breaker's openings, summed.
    pub breaker_opened: u64,
    /// Times the breaker closed: Redis answered again after it opened (on
    /// Redis Cluster, each node's, summed).
    pub breaker_closed: u64,
    /// Checks decided by Redis in a call that carried another check of
    /// the same client (see
    /// [`RedisBuilder::coalesce`](crate::redis::RedisBuilder::coalesce)): the
    /// round trips coalescing saved.
    pub coalesced: u64,
    /// Checks admitted on a unit leased before, without a round trip (see
    /// [`RedisBuilder::lease`](crate::redis::RedisBuilder::lease)).
    pub leased: u64,
    /// Checks denied by a lease without a round trip: while the bucket
    /// had no unit to give, or a call for more was on its way after it had
    /// none.
    pub lease_held: u64,
    /// Calls that asked Redis for a lease's units.
    pub lease_calls: u64,
    /// Units Redis granted to leases.
    pub lease_units: u64,
    /// Leased units given back to Redis unspent (a quiet client's).
    pub lease_returned: u64,
    /// Leased units that lapsed unspent: those of a quota changed under
    /// them, of a grant waiting behind the lease replaced by a later one,
    /// of a lease holding fewer than a check's cost when that check moved
    /// to the grant behind it, or of a quiet lease not given back because
    /// units were taken after them.
    pub lease_lapsed: u64,
    /// Tasks started to carry the checks that waited for a coalesced call
    /// (see [`RedisBuilder::coalesce`](crate::redis::RedisBuilder::coalesce)),
    /// each making calls until no check waits. A task goes on after a
    /// check it carries is answered at its timeout: Redis's late answer
    /// still holds [`FailPolicy::Local`](crate::redis::FailPolicy::Local)'s
    /// in-process limiter to what it says is left.
    pub batch_tasks: u64,
    /// Of [`batch_tasks`](Self::batch_tasks), those that have ended, every
    /// answer they got from Redis kept. While the two differ, a batch task
    /// is running; once a snapshot shows them equal, every answer that
    /// came before is kept, and a later check sees it.
    pub batch_tasks_done: u64,
}

/// The live counters behind [`RedisStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) checks: AtomicU64,
    pub(crate) round_trips: AtomicU64,
    pub(crate) denied_locally: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) probes: AtomicU64,
    pub(crate) fail_open: AtomicU64,
    pub(crate) fail_closed: AtomicU64,
    pub(crate) fail_local: AtomicU64,
    pub(crate) script_reloads: AtomicU64,
    pub(crate) breaker_opened: AtomicU64,
    pub(crate) breaker_closed: AtomicU64,
    pub(crate) coalesced: AtomicU64,
    pub(crate) leased: AtomicU64,
    pub(crate) lease_held: AtomicU64,
    pub(crate) lease_calls: AtomicU64,
    pub(crate) lease_units: AtomicU64,
    pub(crate) lease_returned: AtomicU64,
    pub(crate) lease_lapsed: AtomicU64,
    pub(crate) batch_tasks: AtomicU64,
    pub(crate) batch_tasks_done: AtomicU64,
}

/// Counts one event. Relaxed: the counters publish nothing but themselves.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Counts `n` events, as [`bump`].
pub(crate) fn bump_by(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// Counts a batch task ended, every answer it got kept. Release: pairs
/// with the `Acquire` load of `batch_tasks_done` in [`Counters::snapshot`],
/// so that a snapshot that counts the task ended sees what it kept.
pub(crate) fn batch_task_done(counters: &Counters) {
    counters.batch_tasks_done.fetch_add(1, Ordering::Release);
}

impl Counters {
    pub(crate) fn snapshot(&self) -> RedisStats {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        // Acquire: pairs with the `Release` of `batch_task_done`. Read
        // before `batch_tasks`, so that a task counted ended here is
        // counted started too.
        let batch_tasks_done = self.batch_tasks_done.load(Ordering::Acquire);
        RedisStats {
            checks: read(&self.checks),
            round_trips: read(&self.round_trips),
            denied_locally: read(&self.denied_locally),
            timeouts: read(&self.timeouts),
            errors: read(&self.errors),
            probes: read(&self.probes),
            fail_open: read(&self.fail_open),
            fail_closed: read(&self.fail_closed),
            fail_local: read(&self.fail_local),
            script_reloads: read(&self.script_reloads),
            breaker_opened: read(&self.breaker_opened),
            breaker_closed: read(&self.breaker_closed),
            coalesced: read(&self.coalesced),
            leased: read(&self.leased),
            lease_held: read(&self.lease_held),
            lease_calls: read(&self.lease_calls),
            lease_units: read(&self.lease_units),
            lease_returned: read(&self.lease_returned),
            lease_lapsed: read(&self.lease_lapsed),
            batch_tasks: read(&self.batch_tasks),
            batch_tasks_done,
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn one_probe_at_a_time_with_capped_exponential_backoff() {
        let b = Breaker::new(Duration::from_millis(10), Duration::from_millis(35));
        assert_eq!(b.gate(0), Gate::Pass);
        assert!(b.failed(false, 0), "opened");
        assert!(
            !b.failed(false, 0),
            "a second in-flight failure changes nothing"
        );
        assert_eq!(b.gate(5 * MS), Gate::Down(Duration::from_millis(5)));
        assert_eq!(b.gate(10 * MS), Gate::Probe);
        assert_eq!(b.gate(10 * MS), Gate::Probe, "nothing taken yet");
        assert!(b.take_probe());
        assert!(!b.take_probe(), "one probe at a time");
        assert_eq!(
            b.gate(10 * MS),
            Gate::Down(Duration::ZERO),
            "one probe at a time"
        );
        assert!(!b.failed(true, 10 * MS), "still open");
        assert_eq!(b.gate(10 * MS), Gate::Down(Duration::from_millis(20)));
        assert_eq!(b.gate(30 * MS), Gate::Probe);
        assert!(b.take_probe());
        assert!(!b.failed(true, 30 * MS));
        assert_eq!(
            b.gate(30 * MS),
            Gate::Down(Duration::from_millis(35)),
            "capped"
        );
        assert_eq!(b.gate(65 * MS), Gate::Probe);
        assert!(b.take_probe());
        b.abandoned();
        assert_eq!(
            b.gate(65 * MS),
            Gate::Probe,
            "a dropped probe lets another go"
        );
        assert!(b.take_probe());
        assert!(b.succeeded(true, 65 * MS), "closed");
        assert!(!b.succeeded(false, 65 * MS), "closed once");
        assert_eq!(b.gate(65 * MS), Gate::Pass);
        assert!(b.failed(false, 70 * MS), "opened again");
        assert_eq!(
            b.gate(70 * MS),
            Gate::Down(Duration::from_millis(10)),
            "backoff restarts"
        );
    }

    #[test]
    fn a_timeout_after_another_call_was_answered_is_a_slow_reply() {
        let b = Breaker::new(Duration::from_millis(10), Duration::from_millis(35));
        assert!(!b.answered_since(0), "nothing answered yet");
        // A call sent at 5 ms; another answered at 7 ms: Redis is up.
        assert!(!b.succeeded(false, 7 * MS));
        assert!(b.answered_since(5 * MS));
        assert!(!b.answered_since(7 * MS), "answered before, not since");
        // An older reply recorded late does not move the instant back.
        assert!(!b.succeeded(false, 6 * MS));
        assert!(b.answered_since(6 * MS));
    }
}
