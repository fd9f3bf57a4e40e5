//! How a limiter keeps its memory bounded: the overflow policy at a full
//! cap, the sweeps that forget idle clients, and a new client's way in
//! ([`Arrival`], which the store's check-or-insert protocol drives).

use core::cell::Cell;
use core::hash::{BuildHasher, Hash};

use super::Limiter;
use crate::cell::{Algorithm, Life, Mortal};
use crate::clock::Clock;
use crate::memory::{Counters, Memory, Overflow};
use crate::store::{Cursor, Lapse, Newcomer, Visit};

impl<A, K, C> Limiter<A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// The cap is reached: forget whatever idle clients a short slice finds
    /// (which changes nothing), then, under [`Overflow::EvictSampled`],
    /// forget a sampled client. True iff a unit of room is now the caller's.
    ///
    /// The short slice backs off while it finds nothing (see
    /// `Counters::full_scan_due`): in a flood of new clients against busy
    /// ones it would otherwise cost each of them eight cache misses for
    /// nothing.
    #[cold]
    #[inline(never)]
    pub(super) fn overflow(&self, now: u64) -> bool {
        #[cfg(feature = "tracing")]
        self.cap_reached(now);
        let max = self.memory.max_clients;
        if self.counters.full_scan_due(now) {
            let retired = self.sweep_slice(now, Memory::FULL_SLICE);
            let idle_from = now.saturating_add(self.busy_for(now));
            self.counters.full_scan_found(retired, now, idle_from);
            if self.store.reserve(max) {
                return true;
            }
        }
        let Overflow::EvictSampled { sample } = self.memory.overflow else {
            // The policy answers once the new client's cell is refused.
            return false;
        };
        Counters::add(&self.counters.overflows, 1);
        // The room an eviction makes is ours: no other thread can take it
        // between the eviction and our insert. After four samples that
        // forgot no one (only clients on their way in, or a victim's table
        // rebuilt under the sample), the client goes untracked
        // (`Arrival::refused`).
        (0..4).any(|_| self.evict_sampled(now, sample.into()) || self.store.reserve(max))
    }

    /// Visits `budget` entries from the sweep's position, forgetting those
    /// already idle at `idle_by` (a state only lapses further as time
    /// passes). Does nothing if another thread is sweeping a slice.
    pub(super) fn sweep_slice(&self, idle_by: u64, budget: u64) -> u64 {
        let algorithm = &self.algorithm;
        let mut retired = 0;
        self.counters.forgetting(idle_by);
        let _ = self.store.sweep_slice(budget, |cell| {
            let gone = algorithm.try_evict(cell, idle_by, &|_| ());
            retired += u64::from(gone);
            gone
        });
        Counters::add(&self.counters.evicted_idle, retired);
        retired
    }

    /// Forgets one client from a sample of `sample`, taken where this
    /// thread's last sample ended (see `SAMPLE_AT`): an idle one if the
    /// sample holds any, otherwise the live one that would become idle
    /// soonest. Returns whether a unit of room is now the caller's, as if
    /// [`Store::reserve`] had granted it.
    ///
    /// The live one is forgotten where the sample found it, under its
    /// shard's lock and through the reference the walk holds: retired
    /// first, then removed, so a check racing this sees the tombstone and
    /// retries on a fresh cell; its key is neither cloned nor looked up
    /// again.
    pub(super) fn evict_sampled(&self, now: u64, sample: u64) -> bool {
        let algorithm = &self.algorithm;
        let mut retired = 0;
        let mut sampled = 0;
        let mut forced = false;
        let mut cursor = SAMPLE_AT
            .with(Cell::get)
            .unwrap_or_else(|| self.store.cursor_at(draw()));
        // Idle clients it forgets are judged at `now`.
        self.counters.forgetting(now);
        let swept = self.store.sample(
            &mut cursor,
            // One more than the sample: the new client's own unborn entry
            // is in the map, and is no candidate.
            sample + 1,
            |cell| {
                // Only a live client can be forgotten: an unborn one is
                // some other new client's, on its way in (a dead one the
                // store removes).
                if retired > 0 || sampled == sample || cell.life() != Life::Live {
                    return Visit::Keep;
                }
                // Idle from `idle_at` on: then retired as idle, which
                // changes no decision (unless a check admitted meanwhile).
                let idle_at = algorithm.idle_at(cell);
                if idle_at <= now && algorithm.try_evict(cell, now, &|_| ()) {
                    retired += 1;
                    return Visit::Remove;
                }
                sampled += 1;
                Visit::Rank(idle_at)
            },
            |key, cell| {
                // Forgetting live state: old bookings' tickets must not
                // touch the state the client comes back with (see
                // `crate::reservation`).
                forced = self
                    .renewals
                    .renew(self.store.hash_of(key), || algorithm.force_evict(cell));
                forced
            },
        );
        SAMPLE_AT.with(|at| at.set(Some(cursor)));
        Counters::add(&self.counters.evicted_idle, retired);
        Counters::add(&self.counters.evicted_live, u64::from(forced));
        swept.kept
    }

    /// Forgets every client whose state is idle now, that is, equal to a
    /// fresh client's, so that forgetting it changes no decision; returns
    /// how many were removed.
    ///
    /// A full pass over the map. Checks run on concurrently, and a check on
    /// a client the sweep keeps never waits for it: a check that races the
    /// removal of its own client's entry is applied either to the entry
    /// before it is retired (which then is not idle, and stays) or to a
    /// fresh one afterwards, inserted as a new client's is. New clients
    /// already forget lapsed clients as they arrive (see
    /// [`auto_sweep`](crate::Builder::auto_sweep)), so calling this is
    /// optional; call it to forget idle clients when no new client
    /// arrives, after a burst (see the [memory guide](crate::guide::memory),
    /// "The bound"). It gives back before it returns the memory of every
    /// client forgotten or removed, whatever other threads do: if they are
    /// checking, it waits for the checks they have in flight to end,
    /// sleeping and holding no lock (so no check waits for it), for at
    /// most a second; a check held up longer leaves the memory it could
    /// still read to a later write (see the guide, "When memory is given
    /// back").
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, SlidingWindowCounter};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = SlidingWindowCounter::builder()
    ///     .limit(10)
    ///     .window(Duration::from_secs(1))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// clock.advance(Duration::from_secs(1));
    /// assert!(limiter.allow_request("bob"));
    /// // alice's request still weighs on the sliding window.
    /// assert_eq!(limiter.sweep(), 0);
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(limiter.sweep(), 1);
    /// assert_eq!(limiter.len(), 1);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn sweep(&self) -> usize {
        let removed = self.sweep_at(self.clock.now_nanos(), 0);
        // The tables it shrank, and the keys they hold, freed now rather
        // than by a later write, once the lookups in flight have ended.
        self.store.reclaim();
        removed
    }

    /// A full pass over the map, forgetting the clients already idle at
    /// `idle_by`, and shrinking the tables of more than `small` slots left
    /// under a quarter full; returns how many entries it removed, dead ones
    /// included.
    fn sweep_at(&self, idle_by: u64, small: usize) -> usize {
        let algorithm = &self.algorithm;
        let mut retired = 0;
        self.counters.forgetting(idle_by);
        let removed = self.store.sweep(small, |cell| {
            let gone = algorithm.try_evict(cell, idle_by, &|_| ());
            retired += u64::from(gone);
            gone
        });
        Counters::add(&self.counters.evicted_idle, retired);
        usize::try_from(removed).unwrap_or(usize::MAX)
    }

    /// The sweeping a new client arriving at the reading `now` does: its
    /// share of the paced sweep, if the limiter has one (see
    /// [`auto_sweep`](crate::Builder::auto_sweep)); and, at most once a
    /// horizon, a pass over the whole map that forgets every client idle a
    /// whole horizon already. The pass is what bounds the map by the
    /// clients active lately, whatever the pattern of arrivals: a table
    /// that never fills again (after a burst, new clients only trickle in)
    /// would otherwise keep its lapsed clients (see the memory guide).
    #[cold]
    #[inline(never)]
    fn sweep_for_newcomer(&self, now: u64) {
        let horizon = self.algorithm.horizon();
        // Only clients idle for a whole horizon already: one idle for less
        // may well be back, and forgetting it, though it changes no
        // decision, would cost it a fresh insert. Claimed first, so that
        // the pass judges by the reading of the pass before it.
        let pass = self.memory.sweep_on_rebuild
            && self
                .counters
                .claim_pass(now, horizon, self.memory.auto_sweep.is_some());
        let lapsed = self.counters.trusted(now.saturating_sub(horizon));
        if let Some(pace) = self.memory.auto_sweep {
            if self.counters.next_insert() % pace.every == pace.every - 1 {
                Counters::add(&self.counters.auto_sweeps, 1);
                let _ = self.sweep_slice(lapsed, pace.slice);
            }
        }
        if pass {
            // A map this small may keep its lapsed clients: the pass's
            // visit of every shard would cost more than they do.
            if self.store.len() > Memory::PASS_SPARES {
                Counters::add(&self.counters.auto_sweeps, 1);
                let _ = self.sweep_at(lapsed, Memory::PASS_KEEPS_SLOTS);
            }
        }
    }
}

/// A rebuild's look for lapsed clients, on behalf of the arrival whose
/// insert set it off (see [`Newcomer::lapsed`]).
struct Lapsing<'b, 'a, A: Algorithm, K, C, F> {
    arrival: &'b Arrival<'a, A, K, C, F>,
    /// Set by the first cell the rebuild offers: the reading by which a
    /// state must be idle to be forgotten.
    idle_by: Option<u64>,
}

impl<A, K, C, F> Lapsing<'_, '_, A, K, C, F>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    #[inline]
    fn idle_by(&mut self) -> u64 {
        *self
            .idle_by
            .get_or_insert_with(|| self.arrival.start_sweep())
    }
}

impl<A, K, C, F> Lapse<A::Cell> for Lapsing<'_, '_, A, K, C, F>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    #[inline]
    fn has_lapsed(&mut self, copy: &A::Cell) -> bool {
        // `is_idle(word, t)` iff `t >= idle_at(word)`, for every algorithm.
        let idle_by = self.idle_by();
        // Left behind, so forgotten, if idle by then.
        self.arrival.limiter.algorithm.idle_at(copy) <= idle_by
    }

    fn retire_if_lapsed(&mut self, cell: &A::Cell) -> bool {
        let idle_by = self.idle_by();
        let limiter = self.arrival.limiter;
        let gone = limiter.algorithm.try_evict(cell, idle_by, &|_| ());
        if gone {
            Counters::add(&limiter.counters.evicted_idle, 1);
        }
        gone
    }

    fn retired(&mut self) {
        Counters::add(&self.arrival.limiter.counters.evicted_idle, 1);
    }
}

/// The reading a new client's state is fresh from, for a request at `now`
/// (see `Algorithm::BORN_AT_READING`): `now`, or 0 (fresh at every
/// reading).
fn birth<A: Algorithm>(now: u64) -> u64 {
    if A::BORN_AT_READING {
        now
    } else {
        0
    }
}

std::thread_local! {
    /// Where this thread's next sampled eviction starts: where its last
    /// one ended, so that a thread's samples walk the map in order, over
    /// lines its last sample has just brought into its cache, and threads
    /// share no cursor. Any position is valid in any limiter's map (a
    /// thread serving several limiters only starts their samples at
    /// arbitrary places); the first is drawn at random.
    static SAMPLE_AT: Cell<Option<Cursor>> = const { Cell::new(None) };
}

/// Uniform bits for a thread's first sample's position, mixed from the
/// thread's own address by a randomly seeded hasher, so that threads start
/// apart and no client can predict where a sample starts.
fn draw() -> u64 {
    let seed = foldhash::fast::RandomState::default();
    SAMPLE_AT.with(|at| seed.hash_one(core::ptr::from_ref(at) as usize))
}

/// A new client on its way in: how the store's protocol reads the clock,
/// makes cells, takes room and applies the overflow policy, for one check.
pub(super) struct Arrival<'a, A: Algorithm, K, C, F> {
    pub(super) limiter: &'a Limiter<A, K, C>,
    /// The request's one clock reading.
    pub(super) reading: u64,
    /// The answer for a new client denied by [`Overflow::DenyNew`], given
    /// its wait in ns (see [`Limiter::busy_for`]).
    pub(super) refuse: F,
}

impl<A, K, C, F> Arrival<'_, A, K, C, F>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// A rebuild's look for lapsed clients begins: returns the reading by
    /// which a state must be idle to be forgotten, a horizon before this
    /// request's.
    #[cold]
    fn start_sweep(&self) -> u64 {
        let limiter = self.limiter;
        Counters::add(&limiter.counters.auto_sweeps, 1);
        let idle_by = limiter
            .counters
            .trusted(self.reading.saturating_sub(limiter.algorithm.horizon()));
        limiter.counters.forgetting(idle_by);
        idle_by
    }

    /// A new client's share of sweeping: nothing, on the way in, unless a
    /// pass over the map has come due or the limiter has a paced sweep
    /// (see [`Limiter::sweep_for_newcomer`]).
    #[inline]
    fn pace(&self) {
        if self.limiter.counters.sweep_due(self.reading) {
            self.limiter.sweep_for_newcomer(self.reading);
        }
    }
}

impl<A, K, C, R, F> Newcomer<K, A::Cell, R> for Arrival<'_, A, K, C, F>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    F: Fn(&A, u64) -> R,
{
    #[inline]
    fn now(&self) -> u64 {
        self.limiter.clock.now_nanos()
    }

    #[inline]
    fn judges_at(&self, reading: u64) -> bool {
        self.limiter.counters.judges_at(reading)
    }

    /// The rebuild's look for lapsed clients: those idle for a whole
    /// horizon already, as the paced sweep forgets (one idle for less may
    /// well be back). Forgetting one costs less than moving it.
    fn lapsed<'b>(&'b self) -> Option<impl Lapse<A::Cell> + 'b>
    where
        A::Cell: 'b,
    {
        self.limiter.memory.sweep_on_rebuild.then_some(Lapsing {
            arrival: self,
            idle_by: None,
        })
    }

    fn born(&self, key: &K, now: u64) -> Option<A::Cell> {
        let limiter = self.limiter;
        if limiter.memory.max_clients.is_some() || !A::BORN_BEFORE_INSERT {
            return None;
        }
        // First, so that a resolver that panics leaves nothing behind.
        let tier = limiter.resolve_tier(key);
        self.pace();
        Some(limiter.algorithm.fresh_in(tier, birth::<A>(now)))
    }

    fn unborn(&self, key: &K, now: u64) -> A::Cell {
        let limiter = self.limiter;
        // First, so that a resolver that panics leaves nothing behind.
        let tier = limiter.resolve_tier(key);
        self.pace();
        limiter.algorithm.unborn_in(tier, birth::<A>(now))
    }

    fn fresh(&self, key: &K, now: u64) -> A::Cell {
        let limiter = self.limiter;
        limiter.algorithm.fresh_in(limiter.resolve_tier(key), now)
    }

    #[inline]
    fn reserve(&self) -> bool {
        self.limiter.store.reserve(self.limiter.memory.max_clients)
    }

    fn make_room(&self, now: u64) -> bool {
        self.limiter.overflow(now)
    }

    fn release(&self) {
        self.limiter.store.release(1);
    }

    fn activate(&self, cell: &A::Cell, now: u64) {
        self.limiter.algorithm.activate(cell, birth::<A>(now));
    }

    fn turn_away(&self, now: u64) -> bool {
        let limiter = self.limiter;
        // Sampled eviction makes room for every new client; the other
        // policies answer without tracking it, so at a full cap it need not
        // be inserted (and then removed, leaving a slot that only a rebuild
        // of its shard reclaims).
        if matches!(limiter.memory.overflow, Overflow::EvictSampled { .. })
            || !limiter.store.is_full(limiter.memory.max_clients)
        {
            return false;
        }
        // The short scan for idle clients, as a client inserted at a full cap
        // gets; if it freed room, let the client in the usual way.
        if limiter.overflow(now) {
            limiter.store.release(1);
            return false;
        }
        true
    }

    fn refused(&self, now: u64) -> Option<R> {
        let counters = &self.limiter.counters;
        match self.limiter.memory.overflow {
            Overflow::DenyNew => {
                Counters::add(&counters.overflows, 1);
                Counters::add(&counters.denied_new, 1);
                Some((self.refuse)(
                    &self.limiter.algorithm,
                    self.limiter.busy_for(now),
                ))
            }
            Overflow::AdmitUntracked => {
                Counters::add(&counters.overflows, 1);
                Counters::add(&counters.admitted_untracked, 1);
                None
            }
            // The overflow was counted when sampled eviction was tried.
            Overflow::EvictSampled { .. } => {
                Counters::add(&counters.admitted_untracked, 1);
                None
            }
        }
    }
}
