//! Leases: a process takes a block of a token bucket's units for a client
//! in one call and spends them here, through the lock-free
//! [`LeaseCell`](crate::cell::LeaseCell), until it needs more. A floor
//! above `check`, whose calls and fail policy it uses; the units sit in
//! `table`'s lease table.
//!
//! # The rules
//!
//! - **A unit is spent only after Redis granted it.** A grant is a
//!   script that admits up to `want` units at once exactly as a check of
//!   that cost would (the same state written), and gives them their
//!   consecutive slots on Redis's clock. A unit is spent no later than its
//!   slot starts, on this process's estimate of Redis's clock, which is
//!   never earlier than it (allowing for the clocks' drift since the last
//!   reply): so every admission, leased or not, keeps the
//!   bucket's exact bound in every span of time (see
//!   `crate::algorithm::lease`). That estimate is the lease's own, made
//!   from the replies to its calls alone, which come from the node that
//!   holds the client's key: on Redis Cluster, another node's clock (which
//!   answered the limiter's other calls) may be behind the one the slots
//!   are on, and would spend units whose slots have passed.
//! - **More is asked before the lease runs out**, by one call at a time
//!   per client: when the units left fall to what two round trips spend
//!   at the recent rate (at most a quarter of the last grant), a task
//!   asks for the units this process is expected to spend in the lease's
//!   horizon at that rate (at least twice the last grant when it was spent
//!   whole), so that the lease holds at most `max_units` unspent; while
//!   the bucket has room, a grant reaches at least a horizon ahead, since
//!   its slots pass at the bucket's rate whether spent or not. So a lease
//!   holds at most `max(max_units, ⌈horizon / interval⌉)` units. A check
//!   that finds the lease empty while a call is on its way waits for that
//!   call (or, the bucket dry at the last call, is denied at once).
//! - **Nothing to give**: when the bucket has no unit, checks are denied
//!   here without asking until its first unit frees (at most one second).
//! - **Unused units go back** when the client goes quiet (no spend, grant
//!   or call for a horizon), if no process took units after them (the bucket has one
//!   theoretical arrival time, no holes, so only the tail can go back
//!   exactly); otherwise they lapse as their slots pass. A grant that does
//!   not continue the lease (another process took slots between) waits
//!   behind it, and takes its place once its units are spent or passed
//!   (see `crate::cell::LeaseCell`).
//! - **A process that dies** loses the units of its lease: they lapse by
//!   the end of its slots, at most what a lease holds.
//!
//! Redis keeps each process's current lease of a client in a sorted set
//! beside the client's key (registered from the lease's cursor at each
//! call), so that [`reset`](crate::redis::RedisLimiter::reset) and
//! [`remove`](crate::redis::RedisLimiter::remove) keep the slots leased to
//! processes theirs: the bucket restarts full from the end of the latest
//! lease outstanding (at most one refill of the bucket ahead), never
//! granting a slot a lease holds a second time. Every bucket limiter's
//! reset reads the set, whether or not its own builder leases.
//!
//! Every conversion of a bucket's state to another quota (by any bucket
//! limiter, leasing or not: `Tiers::settle`) keeps its TAT no earlier
//! than the end of the latest lease in that set: another process may
//! still spend those units under the quota they were granted under, so a
//! TAT pulled back before them would grant their slots again (and the
//! key, expiring when that bucket fills, would come back a full bucket
//! while they are out).
//!
//! A lease's units are spent only under the quota they were granted
//! under (interval, capacity, and the generation of the limiter's quota
//! for the client's tier): a check judged under another (a tier move,
//! [`set_quota`](crate::redis::RedisLimiter::set_quota)) drops the lease, whose
//! units lapse. A check that must wait for a call has one timeout in all.

use core::time::Duration;
use std::sync::Arc;

use ::redis::RedisResult;

use crate::cell::Spent;
use crate::check::CheckError;
use crate::decision::Decision;
use crate::redis::check::decide::Failure;
use crate::redis::quota::{algorithm::RedisAlgorithm, tier::Judged};
use crate::redis::script::spec::{Half, Spec};
use crate::redis::script::state::{decision, DecodeError};
use crate::redis::shared::limiter::Inner;
#[cfg(feature = "metrics")]
use crate::redis::table::answers::{Outcome, Path};
use crate::redis::table::lease::{leases_key, Entry};
use crate::redis::table::request::{Mode, Request};
use crate::redis::wire::call::Redirect;
use crate::redis::wire::guard::{bump, bump_by};
use crate::sync::Ordering;

/// What a call for units answered.
enum Answer {
    Granted {
        units: u64,
        start: u64,
        end: u64,
        /// Redis's reading when it granted them, µs.
        at: u64,
    },
    Nothing {
        until: u64,
    },
    /// A state written under other settings: the check goes one call
    /// alone, which converts it.
    Convert,
}

/// The longest a check is held here on a `Nothing` answer, µs.
const HOLD_MAX: u64 = 1_000_000;

/// How long after a call for more began (µs) a check that finds the
/// lease empty, the bucket spent at the last call, is denied at once
/// rather than waiting for the call: past it the call is late (or its task
/// has not run yet), and the check waits.
const IN_FLIGHT_DENIAL: u64 = 1_000;

/// How many times a check waits for another's call before going alone.
const ROUNDS: usize = 4;

/// The `asking` flag of an entry, held by the call on its way: given
/// back, and the checks waiting for the call woken, when the call ends or
/// is dropped (a check whose caller gave up on it), so that no flag is
/// left held by a call that will never end.
struct Asking<'a>(&'a Entry);

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        // Release: publishes the grant installed to the next check that
        // takes the flag (its Acquire compare-and-swap in `leased`).
        self.0.asking.store(false, Ordering::Release);
        self.0.answered.notify_waiters();
    }
}

/// What a check's lease did at once.
pub(crate) enum AtOnce {
    /// Answered it.
    Answered(Decision),
    /// The check must wait for a call ([`Inner::leased`]).
    Wait,
    /// The client has no lease and was not met in the last horizon: the
    /// check goes one call alone, as without leases.
    Cold,
}

/// Whether `request` is one a lease answers: a check of a cost the tier
/// can ever admit.
pub(crate) fn leases(request: &Request) -> bool {
    request.cost > 0 && !request.beyond && matches!(request.spec(), Spec::One(_))
}

impl<A: RedisAlgorithm> Inner<A> {
    /// This process's clock now, µs: for the leases' own bookkeeping
    /// (when a client was seen, when a call began), never for a unit.
    fn local_us(&self) -> u64 {
        self.calls.clock.local_ns() / 1_000
    }

    /// Spends `cost` of `entry`'s units at `now`, counting the units a
    /// range that waited behind the lease displaced on taking its place.
    #[inline]
    fn spend(&self, entry: &Entry, now: u64, cost: u64) -> Spent {
        let (spent, displaced) = entry.cell.spend(now, cost);
        self.lapsed(displaced);
        spent
    }

    /// Counts `units` lapsed: displaced from a lease, never spent.
    fn lapsed(&self, units: u64) {
        if units > 0 {
            bump_by(&self.calls.counters.lease_lapsed, units);
        }
    }

    /// Redis's clock now, µs, as the latest reply of any call lets this
    /// process estimate it (see `redis_now`), rounded up: on Redis Cluster
    /// perhaps another node's clock than the client's, so only for a hint
    /// (`met_recently`), never for a unit.
    fn lease_now(&self) -> u64 {
        self.redis_now() / 1_000 + 1
    }

    /// The clock of the node holding `entry`'s client now, µs, as the
    /// lease's own latest reply lets this process estimate it (see
    /// `Entry::now`): the clock its units are spent on. `None` before the
    /// lease's first reply.
    fn entry_now(&self, entry: &Entry) -> Option<u64> {
        entry.now(&self.calls.clock)
    }

    /// A check answered from the client's lease without waiting, if it
    /// can be: admitted on a unit leased, denied under a hold, or denied
    /// at once when the lease is empty, the bucket was spent at the last
    /// call and another call is on its way.
    pub(crate) fn lease_now_or_never(
        self: &Arc<Self>,
        client: &[u8],
        judged: &Judged,
        cost: u64,
    ) -> AtOnce {
        let Some(leases) = &self.leases else {
            return AtOnce::Cold;
        };
        let Spec::One(half) = judged.quota.spec else {
            return AtOnce::Cold;
        };
        // Looked up without cloning the entry: a check answered here
        // writes only the lease's word (and a counter).
        let map = leases.map.pin();
        let generation = judged.quota.generation;
        let found = map.get(client).map(|entry| {
            if !entry.fits(&half, generation) {
                return (None, None, 0, 0);
            }
            // Spent on its own node's clock; before the lease's first
            // reply the check waits for a call.
            let Some(now) = self.entry_now(entry) else {
                return (None, None, 0, 0);
            };
            let spent = self.spend(entry, now, cost);
            if let Spent::Admitted { .. } = spent {
                // Relaxed: a sizing figure, on the line the spend holds.
                entry.used.fetch_add(cost, Ordering::Relaxed);
            }
            // Relaxed: a sizing figure; `asking` as in `leased`.
            let ahead = match spent {
                Spent::Admitted { left }
                    if due_ahead(left, entry.ahead.load(Ordering::Relaxed)) =>
                {
                    Some(Arc::clone(entry))
                }
                Spent::Ask { .. }
                    if entry.dry.load(Ordering::Relaxed)
                        && entry.asking.load(Ordering::Acquire)
                        && self.local_us()
                            < entry.asked_at.load(Ordering::Relaxed) + IN_FLIGHT_DENIAL =>
                {
                    return (
                        Some(Spent::Held {
                            until: now + half.a,
                        }),
                        None,
                        now,
                        // Relaxed: as below.
                        entry.frees.load(Ordering::Relaxed),
                    );
                }
                _ => None,
            };
            // Relaxed: a figure for the decision, as `dry`.
            let frees = entry.frees.load(Ordering::Relaxed);
            (Some(spent), ahead, now, frees)
        });
        let Some((spent, ahead, now, frees)) = found else {
            // No lease: a client met in the last horizon gets one, any
            // other goes one call alone, as without leases.
            return if leases.met_recently(client, self.lease_now()) {
                AtOnce::Wait
            } else {
                AtOnce::Cold
            };
        };
        if let Some(entry) = ahead {
            self.ask_ahead(&entry, client, judged);
        }
        match spent.and_then(|spent| self.lease_decision(spent, &half, (now, frees), cost)) {
            Some(decision) => AtOnce::Answered(decision),
            None => AtOnce::Wait,
        }
    }

    /// The decision on what a spend did at `now`, `None` if it must ask;
    /// `frees`: when Redis last said the bucket's next unit beyond the
    /// lease frees (the entry's `frees`).
    fn lease_decision(
        &self,
        spent: Spent,
        half: &Half,
        (now, frees): (u64, u64),
        cost: u64,
    ) -> Option<Decision> {
        let (interval, capacity) = (half.a, half.b);
        let ns = Spec::One(*half).ns().expect("a word algorithm");
        let (allowed, tat) = match spent {
            // The figures of a bucket holding the units left here.
            Spent::Admitted { left } => (true, now + capacity.saturating_sub(left) * interval),
            // Of a spent bucket whose next unit frees at `until`, or
            // later, when Redis said so: the hold ends within a second,
            // the bucket's wait may be longer.
            Spent::Held { until } => (false, until.max(frees) + (capacity - 1) * interval),
            Spent::Ask { .. } => return None,
        };
        let counters = &self.calls.counters;
        bump(if allowed {
            &counters.leased
        } else {
            &counters.lease_held
        });
        #[cfg(feature = "metrics")]
        self.answered(
            Path::Lease,
            if allowed {
                Outcome::Admitted
            } else {
                Outcome::Denied
            },
            cost,
        );
        Some(decision(&ns, allowed, u128::from(tat * 1_000), now, cost))
    }

    /// A check the lease could not answer at once: it asks Redis for more
    /// (or waits for the call on its way), then spends.
    pub(crate) async fn leased(
        self: Arc<Self>,
        request: Request,
        probe_due: bool,
    ) -> Result<Decision, CheckError> {
        let Some(leases) = &self.leases else {
            return self.single(&request, probe_due).await;
        };
        let Spec::One(half) = request.spec() else {
            return self.single(&request, probe_due).await;
        };
        let quota = (&half, request.judged.quota.generation);
        let Some(entry) =
            leases.entry(&request.client, quota, (self.local_us(), &self.calls.clock))
        else {
            return self.single(&request, probe_due).await;
        };
        let cost = request.cost;
        // One timeout for the whole check, from its first poll: waiting
        // for another task's call and then calling itself never takes it
        // past that.
        let deadline = self.deadline();
        // The reading at which this check's own call was granted: the
        // check spends at it, as a check of its own call is decided at
        // Redis's reading (so the first unit of a grant to an idle bucket,
        // whose slot starts at that reading, is this check's).
        let mut granted_at = None;
        for _ in 0..ROUNDS {
            // On the lease's own node's clock; before its first reply
            // nothing is spent, and the check asks (or waits for the call
            // on its way).
            let (spent, now) = match granted_at.take().or_else(|| self.entry_now(&entry)) {
                Some(now) => (self.spend(&entry, now, cost), now),
                None => (
                    Spent::Ask {
                        epoch: entry.cell.epoch(),
                    },
                    0,
                ),
            };
            if let Spent::Admitted { .. } = spent {
                // Relaxed: as in `lease_now_or_never`.
                entry.used.fetch_add(cost, Ordering::Relaxed);
            }
            let epoch = match spent {
                Spent::Ask { epoch } => epoch,
                _ => {
                    // Relaxed: as in `lease_now_or_never`.
                    if matches!(spent, Spent::Admitted { left } if due_ahead(left, entry.ahead.load(Ordering::Relaxed)))
                    {
                        self.ask_ahead(&entry, &request.client, &request.judged);
                    }
                    // Relaxed: as in `lease_now_or_never`.
                    let frees = entry.frees.load(Ordering::Relaxed);
                    return Ok(self
                        .lease_decision(spent, &half, (now, frees), cost)
                        .expect("spent or held"));
                }
            };
            if tokio::time::Instant::now() >= deadline {
                return self.timed_out(&request);
            }
            // Acquire/Release: pairs with the Release store that ends a
            // call, so a check that takes the flag sees the grant that
            // call installed.
            if entry
                .asking
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                match self
                    .ask(&entry, &request, epoch, (true, probe_due), deadline)
                    .await
                {
                    Ok(Some(at)) => {
                        granted_at = at;
                        continue;
                    }
                    Ok(None) => return self.single_until(&request, false, deadline).await,
                    Err(err) => return self.fallback(&request, err),
                }
            }
            let answered = entry.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            // Acquire: pairs with the Release store ending the call, as
            // above.
            if entry.asking.load(Ordering::Acquire) {
                // Past the deadline the loop looks at the lease once more
                // (the call may have ended just then), then times out.
                let _ = tokio::time::timeout_at(deadline, answered).await;
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return self.timed_out(&request);
        }
        self.single_until(&request, probe_due, deadline).await
    }

    /// Starts a call for more before the lease runs out, unless one is on
    /// its way (or there is no runtime to run it on).
    fn ask_ahead(self: &Arc<Self>, entry: &Arc<Entry>, client: &[u8], judged: &Judged) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Acquire: as in `leased`.
        if entry
            .asking
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let epoch = entry.cell.epoch();
        let (inner, entry) = (Arc::clone(self), Arc::clone(entry));
        let request = Request {
            judged: judged.clone(),
            client: client.to_vec(),
            key: self.layout.key(client),
            cost: 1,
            beyond: false,
            mode: Mode::Check,
            cache_key: None,
        };
        runtime.spawn(async move {
            let deadline = inner.deadline();
            let _ = inner
                .ask(&entry, &request, epoch, (false, false), deadline)
                .await;
        });
    }

    /// One call for units, made by the holder of `asking`, which it gives
    /// back when the call ends or its future is dropped: `Ok(Some(_))` if
    /// the lease may now answer (with Redis's reading of a grant),
    /// `Ok(None)` if the state must be converted by a check of its own, or
    /// the failure (a timeout at `deadline`). `ran_out`: the lease ran out
    /// (else the call asks ahead); `probe_due`: the gate found a probe due.
    async fn ask(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        request: &Request,
        epoch: u64,
        (ran_out, probe_due): (bool, bool),
        deadline: tokio::time::Instant,
    ) -> Result<Option<Option<u64>>, CheckError> {
        let _asking = Asking(entry);
        let leases = self.leases.as_ref().expect("a leasing limiter");
        let probe_due = match self.gate(self.calls.clock.local_ns(), &request.key) {
            Ok(due) => due || probe_due,
            Err(err) => return Err(err),
        };
        // Sizing only: before the lease's first reply it holds nothing.
        let want = leases.want(
            entry,
            self.local_us(),
            self.entry_now(entry).unwrap_or(0),
            request.cost,
            ran_out,
        );
        let (answer, sent) = self
            .guarded_until(
                deadline,
                probe_due,
                &request.key,
                self.grant(entry, request, want),
            )
            .await?;
        // On the clock of the node that replied: `grant` noted its reading
        // (none for `Convert`, which installs nothing).
        let now = self.entry_now(entry).unwrap_or(0);
        // The call's round trip, µs (`sent` is local ns).
        let rtt = self.calls.clock.local_ns().saturating_sub(sent) / 1_000;
        match answer {
            Answer::Granted {
                units,
                start,
                end,
                at,
            } => {
                bump(&self.calls.counters.lease_calls);
                bump_by(&self.calls.counters.lease_units, units);
                entry.last.store(units, Ordering::Relaxed);
                // Relaxed: sizing figures, as in `want`.
                let (spent, elapsed) = (
                    entry.pace.0.load(Ordering::Relaxed),
                    entry.pace.1.load(Ordering::Relaxed),
                );
                entry
                    .ahead
                    .store(ahead_at(units, spent, elapsed, rtt), Ordering::Relaxed);
                // Relaxed: a hint for the checks that find the lease empty.
                entry.dry.store(units < want, Ordering::Relaxed);
                // What Redis has left beside the grant: the bucket's, its
                // TAT now at the grant's end, at Redis's reading `at`; its
                // next unit frees a capacity less one before that end.
                if let Spec::One(half) = request.spec() {
                    let owed = end.saturating_sub(at).div_ceil(half.a.max(1));
                    self.hold_local(request, half.b.saturating_sub(owed));
                    // Relaxed: a figure for the decisions, as `dry`.
                    entry
                        .frees
                        .store(end.saturating_sub((half.b - 1) * half.a), Ordering::Relaxed);
                }
                self.lapsed(entry.cell.grant(now, start, end));
                self.quiet_later(entry, request);
                Ok(Some(Some(at)))
            }
            Answer::Nothing { until } => {
                bump(&self.calls.counters.lease_calls);
                // Redis has nothing left for the client until `until`.
                self.hold_local(request, 0);
                // Relaxed: as above.
                entry.dry.store(true, Ordering::Relaxed);
                entry.frees.store(until, Ordering::Relaxed);
                self.lapsed(entry.cell.nothing(
                    now,
                    epoch,
                    until.min(now.saturating_add(HOLD_MAX)),
                ));
                self.quiet_later(entry, request);
                Ok(Some(None))
            }
            Answer::Convert => Ok(None),
        }
    }

    /// The grant's round trip: `want` units of `request`'s client.
    async fn grant(&self, entry: &Entry, request: &Request, want: u64) -> Result<Answer, Failure> {
        let leases = self.leases.as_ref().expect("a leasing limiter");
        let Spec::One(half) = request.spec() else {
            return Ok(Answer::Convert);
        };
        let head = request.judged.head();
        // Relaxed: a number unique to this call, nothing more.
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let set = leases_key(&request.key);
        let sent = self.calls.clock.local_ns();
        // Relaxed: written by the one call asking at a time (this one).
        let registered = (
            entry.registered.0.load(Ordering::Relaxed),
            entry.registered.1.load(Ordering::Relaxed),
        );
        let reply: RedisResult<Vec<i64>> = self
            .calls
            .eval_keys(&leases.scripts.grant, &[&request.key, &set], |cmd| {
                cmd.arg(half.a)
                    .arg(half.b)
                    .arg(&*head)
                    .arg(serial)
                    .arg(want)
                    .arg(&self.owner)
                    .arg(registered.0)
                    .arg(registered.1)
                    .arg(entry.cell.cursor())
                    .arg(leases.settings.horizon_us);
            })
            .await;
        let reply = match reply {
            // The slot is moving and the client's key and its leases' set
            // are split between two nodes (or, the set not made yet, will
            // be until the slot has moved): the check goes as a check of
            // its own, on the client's key alone.
            Err(err) if Redirect::of(&err).is_some() => return Ok(Answer::Convert),
            reply => reply?,
        };
        let field = |i: usize| reply.get(i).and_then(|v| u64::try_from(*v).ok());
        let bad = || Failure::Decode(DecodeError::Range("a lease's grant of an unexpected shape"));
        match reply.first().copied() {
            Some(-1) => Ok(Answer::Convert),
            Some(0) => {
                let (until, now) = (field(1).ok_or_else(bad)?, field(2).ok_or_else(bad)?);
                self.judged(sent, now);
                entry.judged(sent, now);
                // Relaxed: as above.
                entry
                    .registered
                    .0
                    .store(field(3).unwrap_or(0), Ordering::Relaxed);
                entry
                    .registered
                    .1
                    .store(field(4).unwrap_or(0), Ordering::Relaxed);
                Ok(Answer::Nothing { until })
            }
            Some(_) => {
                let units = field(0).ok_or_else(bad)?;
                let from = field(4).ok_or_else(bad)?;
                let (start, end, now) = (
                    field(1).ok_or_else(bad)?,
                    field(2).ok_or_else(bad)?,
                    field(3).ok_or_else(bad)?,
                );
                // Before the grant is installed: every spend of it reads
                // the clock of the node that granted it through an
                // estimate made from this reply or a later one of that
                // node, each no earlier than its clock (see `Entry::now`).
                self.judged(sent, now);
                entry.judged(sent, now);
                if end <= start || from > start || end > crate::algorithm::lease::TIME_MAX {
                    return Err(bad());
                }
                // Relaxed: as above.
                entry.registered.0.store(from, Ordering::Relaxed);
                entry.registered.1.store(end, Ordering::Relaxed);
                Ok(Answer::Granted {
                    units,
                    start,
                    end,
                    at: now,
                })
            }
            None => Err(bad()),
        }
    }

    /// Arms the client's quiet timer, unless it is armed: once a horizon
    /// passes with no spend, grant or call, and no hold, the timer takes
    /// the `asking` flag (so no call races it), takes the lease's unpassed
    /// units out, gives them back (if no process took units after them)
    /// and forgets the entry.
    fn quiet_later(self: &Arc<Self>, entry: &Arc<Entry>, request: &Request) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Relaxed: one timer per entry; what it reads is the word's own.
        if entry.quiet.swap(true, Ordering::Relaxed) {
            return;
        }
        let leases = self.leases.as_ref().expect("a leasing limiter");
        let horizon = Duration::from_micros(leases.settings.horizon_us.max(1_000));
        let (inner, entry) = (Arc::clone(self), Arc::clone(entry));
        let (key, client, judged) = (
            request.key.clone(),
            request.client.clone(),
            request.judged.clone(),
        );
        runtime.spawn(async move {
            let mut seen = entry.cell.word();
            let _asking = loop {
                tokio::time::sleep(horizon).await;
                let word = entry.cell.word();
                // Armed after the lease's first reply: its clock is known.
                let now = inner.entry_now(&entry).unwrap_or(0);
                let held = entry.cell.held(now).is_some();
                // Acquire: as the checks take the flag, in `leased`.
                if word == seen
                    && !held
                    && entry
                        .asking
                        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    break Asking(&entry);
                }
                seen = word;
            };
            let now = inner.entry_now(&entry).unwrap_or(0);
            // Relaxed: written by the one holding `asking`, this timer now.
            let registered = (
                entry.registered.0.swap(0, Ordering::Relaxed),
                entry.registered.1.swap(0, Ordering::Relaxed),
            );
            // Only a range that ends where the registered slots end can go
            // back: the script frees from its start to that end, so any
            // other would free slots between that the bucket gave others.
            // The rest lapses.
            let mut held = None;
            for range in entry.cell.take_out(now).into_iter().flatten() {
                if held.is_none() && range.1 == registered.1 {
                    held = Some(range);
                } else {
                    inner.lapsed(entry.cell.units(Some(range)));
                }
            }
            // Nothing to give back and the registered slots passed: the
            // set forgets the lease by itself.
            if registered.1 > now || held.is_some() {
                let (from, to) = held.unwrap_or((registered.1, registered.1));
                let _ = tokio::time::timeout(
                    inner.timeout,
                    inner.give_back(&key, &judged, registered, from, to),
                )
                .await;
            }
            let leases = inner.leases.as_ref().expect("a leasing limiter");
            let _ = leases
                .map
                .pin()
                .remove_if(&client[..], |_, e| Arc::ptr_eq(e, &entry));
            entry.quiet.store(false, Ordering::Relaxed);
        });
    }

    /// Gives the slots `[from, to)` back, if no unit was taken after them.
    async fn give_back(
        &self,
        key: &[u8],
        judged: &Judged,
        registered: (u64, u64),
        from: u64,
        to: u64,
    ) -> Result<(), Failure> {
        let leases = self.leases.as_ref().expect("a leasing limiter");
        let Spec::One(half) = judged.quota.spec else {
            return Ok(());
        };
        let head = judged.head();
        // Relaxed: a number unique to this call, nothing more.
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let set = leases_key(key);
        let reply: Vec<i64> = self
            .calls
            .eval_keys(&leases.scripts.give_back, &[key, &set], |cmd| {
                cmd.arg(half.a)
                    .arg(half.b)
                    .arg(&*head)
                    .arg(serial)
                    .arg(&self.owner)
                    .arg(registered.0)
                    .arg(registered.1)
                    .arg(from);
            })
            .await?;
        let given = reply.first().copied().unwrap_or(0).max(0) as u64;
        let units = given / half.a.max(1);
        bump_by(&self.calls.counters.lease_returned, units);
        self.lapsed(((to - from) / half.a.max(1)).saturating_sub(units));
        Ok(())
    }
}

/// Whether a lease with `left` units asks for more ahead of need, at the
/// threshold `ahead` its last grant set (0: never).
fn due_ahead(left: u64, ahead: u64) -> bool {
    ahead > 0 && left <= ahead
}

/// The threshold at which a grant of `units` asks for more ahead of need:
/// the units the recent rate (`spent` over `elapsed` µs) spends in two
/// round trips of `rtt` µs, so that the next grant lands before this one
/// runs out and little of it is left for a grant that does not continue
/// it to displace; at least 1, at most a quarter of the grant. None (0)
/// for grants under 4: a client's first grow by asking when they run out,
/// so that a client checked a few times costs no call ahead.
fn ahead_at(units: u64, spent: u64, elapsed: u64, rtt: u64) -> u64 {
    if units < 4 {
        return 0;
    }
    let need = u128::from(spent) * u128::from(2 * rtt.max(1)) / u128::from(elapsed.max(1));
    u64::try_from(need).unwrap_or(u64::MAX).clamp(1, units / 4)
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn asking_ahead_waits_for_two_round_trips_of_spending() {
        // 1 000 units in 1 000 µs, round trips of 10 µs: 20 units.
        assert_eq!(ahead_at(400, 1_000, 1_000, 10), 20);
        // Never more than a quarter, never under one, none under 4.
        assert_eq!(ahead_at(40, 1_000, 1_000, 100), 10);
        assert_eq!(ahead_at(40, 0, 1_000, 100), 1);
        assert_eq!(ahead_at(3, 1_000, 1, 1_000), 0);
        assert!(!due_ahead(0, 0) && due_ahead(20, 20) && !due_ahead(21, 20));
    }
}
