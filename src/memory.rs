//! Bounded memory: the settings that keep a limiter's map from growing
//! without end, what happens when its cap is reached, and the counters that
//! report it.
//!
//! See "Eviction" in the crate documentation for the whole story; this
//! module holds the public types ([`Overflow`], [`Stats`]) and the limiter's
//! internal settings and counters.

use core::fmt;

use crate::error::ConfigError;
use crate::sync::{AtomicU64, Ordering};

/// What a limiter with a [`max_clients`](crate::Builder::max_clients) cap
/// does with a new client when the cap is reached and no held client is
/// idle (an idle client is always forgotten first, since that changes no
/// decision).
///
/// Every application of the policy is counted in [`Stats::overflows`], and
/// in the policy's own counter.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{FixedWindow, Overflow};
///
/// let limiter = FixedWindow::builder()
///     .limit(1)
///     .window(Duration::from_secs(60))
///     .max_clients(1)
///     .overflow(Overflow::DenyNew)
///     .build()?;
/// assert!(limiter.allow_request("alice"));
/// // "alice" is not idle for another minute, and the map is full.
/// assert!(!limiter.allow_request("bob"));
/// assert_eq!(limiter.stats().denied_new, 1);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Overflow {
    /// Forget a held client to make room: of `sample` clients visited
    /// (each thread's samples walking the map from a random start, so in
    /// effect at random, as Redis samples), the one
    /// whose state would become idle soonest, the one carrying the least
    /// information. The new client is then tracked, in the room the
    /// forgotten one left, which no other thread can take first.
    ///
    /// **The only policy that may change a tracked client's decisions**:
    /// the forgotten client starts afresh on its next request, as though it
    /// had been idle. Counted in [`Stats::evicted_live`]. If four samples
    /// in a row find no client to forget (only new clients still on their
    /// way in), the request is admitted untracked instead (counted in
    /// [`Stats::admitted_untracked`]).
    ///
    /// The default policy, with `sample: 5`. `sample` must be in `1..=64`.
    EvictSampled {
        /// How many held clients to compare.
        sample: u32,
    },
    /// Deny the new client's request, tracking nothing; held clients are
    /// untouched. Counted in [`Stats::denied_new`]. A denial's
    /// [`retry_after`](crate::Decision::retry_after) is the longest a held
    /// client can stay busy, bookings included: a horizon (the longest any
    /// state stays non-idle after its last admission) past the later of
    /// now and the instant the latest booking made on the limiter falls
    /// due. By then every client held now is idle unless it has made
    /// another request, and a new client that honours the wait makes room
    /// by forgetting idle ones.
    DenyNew,
    /// Admit the new client's request as if it were its first (if its cost
    /// fits the capacity), tracking nothing; held clients are untouched.
    /// Counted in [`Stats::admitted_untracked`]. Until room frees up, such a
    /// client is not limited at all: choose this only where availability
    /// matters more than the limit.
    AdmitUntracked,
}

impl Default for Overflow {
    fn default() -> Self {
        Self::EvictSampled { sample: 5 }
    }
}

/// A snapshot of a limiter's memory counters, from
/// [`Limiter::stats`](crate::Limiter::stats). The counters only grow; read
/// two snapshots and subtract for a rate.
///
/// Known clients never touch a counter: they are written only when a client
/// is created, evicted or refused room.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, TokenBucket};
///
/// let clock = ManualClock::new();
/// let limiter = TokenBucket::builder()
///     .rate(1, Duration::from_secs(1))
///     .clock(clock.clone())
///     .build()?;
/// assert!(limiter.allow_request("alice"));
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(limiter.sweep(), 1);
/// let stats = limiter.stats();
/// assert_eq!((stats.clients, stats.evicted_idle), (0, 1));
/// println!("{stats:?}");
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[must_use = "a snapshot of counters does nothing unless read"]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Stats {
    /// Clients held now, as [`Limiter::len`](crate::Limiter::len).
    pub clients: usize,
    /// Clients forgotten because they were idle: no decision changed.
    pub evicted_idle: u64,
    /// Clients forgotten by [`Overflow::EvictSampled`] while not idle.
    pub evicted_live: u64,
    /// Times the cap was reached with nothing idle to forget, so that the
    /// [`Overflow`] policy applied.
    pub overflows: u64,
    /// Requests denied by [`Overflow::DenyNew`].
    pub denied_new: u64,
    /// Requests decided on an untracked fresh state by
    /// [`Overflow::AdmitUntracked`] (or by `EvictSampled`'s fallback).
    pub admitted_untracked: u64,
    /// Incremental sweeps run by inserting threads: table rebuilds that
    /// looked for lapsed clients, new clients' passes over the map, and
    /// paced slices (see [`auto_sweep`](crate::Builder::auto_sweep)).
    pub auto_sweeps: u64,
}

/// How a limiter bounds its memory: the builder's settings, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Memory {
    /// The most clients held at once, if capped.
    pub(crate) max_clients: Option<u64>,
    pub(crate) overflow: Overflow,
    /// Whether a table rebuild forgets the lapsed clients it meets (on by
    /// default; off with `no_auto_sweep`).
    pub(crate) sweep_on_rebuild: bool,
    /// Every `every` new clients, visit `slice` entries; `None` (the
    /// default): never.
    pub(crate) auto_sweep: Option<AutoSweep>,
}

/// The incremental sweep's pace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AutoSweep {
    pub(crate) every: u64,
    pub(crate) slice: u64,
}

impl Default for Memory {
    fn default() -> Self {
        Self {
            max_clients: None,
            overflow: Overflow::default(),
            sweep_on_rebuild: true,
            auto_sweep: None,
        }
    }
}

impl Memory {
    /// How many overflows in a row may skip the full-cap scan at most (see
    /// [`Counters::full_scan_due`]).
    pub(crate) const SCAN_SKIP_MAX: u64 = 64;

    /// Entries visited for idle ones when a capped map is full, before the
    /// overflow policy applies. Each visit is likely a cache miss and, in a
    /// flood of new clients against busy ones, finds nothing: at 32 this
    /// scan was most of a capped insert's 4–10 µs (`compare --scenarios
    /// insert_capped`), so it is kept short. Each scan starts where the last
    /// sweep slice stopped, so over many overflows the scans pass over the
    /// whole map.
    pub(crate) const FULL_SLICE: u64 = 8;

    /// The tables a new client's pass over the map leaves their size
    /// however empty: those of at most this many slots (four groups). On a
    /// map of short-lived clients spread thin over the shards, shrinking
    /// them on every pass, only for new clients to grow them again, made
    /// each pass rebuild most shards: with a horizon of 100 new clients, a
    /// new client cost 30% more instructions. 64 shards of 32 slots hold a
    /// few KiB per shard at most.
    pub(crate) const PASS_KEEPS_SLOTS: usize = 32;

    /// A new client's pass over the map is skipped while the map holds at
    /// most this many clients (8 per shard): the pass visits every shard,
    /// and on a map this small that costs more than the clients it could
    /// forget. With a horizon of 100 new clients (each pass then finding a
    /// few hundred clients), passes made a new client cost 11% more
    /// instructions; skipped, the same as without them.
    pub(crate) const PASS_SPARES: usize = 512;

    pub(crate) fn validate(self) -> Result<Self, ConfigError> {
        if let Some(max) = self.max_clients {
            ConfigError::check_range(
                "max_clients",
                u128::from(max),
                (1, u128::from(u64::MAX)),
                "clients",
                "a capped limiter must hold at least one client",
            )?;
        }
        if let Overflow::EvictSampled { sample } = self.overflow {
            ConfigError::check_range(
                "overflow",
                u128::from(sample),
                (1, 64),
                "sampled clients",
                "sampled eviction compares at least 1 and at most 64 clients",
            )?;
        }
        if let Some(AutoSweep { every, slice }) = self.auto_sweep {
            ConfigError::check_range(
                "auto_sweep",
                u128::from(every),
                (1, u128::from(u32::MAX / 2)),
                "new clients",
                "a sweep runs at most once per new client, and at least once per 2^31 - 1 of them (so that its slice, twice as many entries, fits)",
            )?;
            ConfigError::check_range(
                "auto_sweep",
                u128::from(slice),
                (2 * u128::from(every), u128::from(u32::MAX)),
                "entries",
                "each sweep must visit at least twice as many entries as clients were added since the last, or the map could outgrow it",
            )?;
        }
        Ok(self)
    }
}

/// The live counters behind [`Stats`], and the timing of the sweeps new
/// clients make. Written only off the known-client path; `Relaxed`, since
/// each is a lone tally (or a time) that publishes nothing.
pub(crate) struct Counters {
    pub(crate) inserts: AtomicU64,
    pub(crate) evicted_idle: AtomicU64,
    pub(crate) evicted_live: AtomicU64,
    pub(crate) overflows: AtomicU64,
    pub(crate) denied_new: AtomicU64,
    pub(crate) admitted_untracked: AtomicU64,
    pub(crate) auto_sweeps: AtomicU64,
    /// Full-cap scans still to skip, and the length of the current run of
    /// scans that found nothing idle (see [`Counters::full_scan_due`]).
    full_scan_skip: AtomicU64,
    full_scan_barren: AtomicU64,
    /// The reading from which a full-cap scan is due whatever is left to
    /// skip: every client held at the last scan, which found none idle, is
    /// idle by then.
    full_scan_from: AtomicU64,
    /// The reading from which a new client takes the slow way in (see
    /// [`Counters::sweep_due`]): the next pass's due reading, or 0 where
    /// every new client pays a paced slice, or `u64::MAX` where new clients
    /// sweep nothing.
    sweep_from: AtomicU64,
    /// A reading below which a new client takes the slow way in too: a
    /// period before the last pass's reading (a clock that went back).
    sweep_back: AtomicU64,
    /// The reading from which the next new client passes over the map,
    /// forgetting lapsed clients (see [`Counters::claim_pass`]).
    pass_due: AtomicU64,
    /// The reading of the pass before the latest one: what a sweep on a
    /// new client's behalf trusts (see [`Counters::trusted`]).
    trusted: AtomicU64,
    /// The latest instant a booking made so far falls due (see
    /// [`Counters::booked`]).
    due: AtomicU64,
    /// The latest reading at which a client was judged idle to be
    /// forgotten (see [`Counters::forgetting`]).
    forgot_at: AtomicU64,
}

impl Counters {
    /// Counters for a limiter with the memory settings `memory`: its first
    /// new client passes over the (empty) map, and so times the next pass.
    pub(crate) fn new(memory: &Memory) -> Self {
        let sweep_from = if memory.auto_sweep.is_some() || memory.sweep_on_rebuild {
            0
        } else {
            u64::MAX
        };
        Self {
            inserts: AtomicU64::new(0),
            evicted_idle: AtomicU64::new(0),
            evicted_live: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
            denied_new: AtomicU64::new(0),
            admitted_untracked: AtomicU64::new(0),
            auto_sweeps: AtomicU64::new(0),
            full_scan_skip: AtomicU64::new(0),
            full_scan_barren: AtomicU64::new(0),
            full_scan_from: AtomicU64::new(0),
            sweep_from: AtomicU64::new(sweep_from),
            sweep_back: AtomicU64::new(0),
            pass_due: AtomicU64::new(0),
            trusted: AtomicU64::new(0),
            due: AtomicU64::new(0),
            forgot_at: AtomicU64::new(0),
        }
    }

    /// Clients are about to be forgotten as idle at the reading `idle_by`:
    /// called before any of them is retired, so that a thread whose look at
    /// the map sees one gone (after the removal's `Release` store) sees
    /// this reading too, or a later one ([`Counters::judges_at`]).
    #[inline]
    pub(crate) fn forgetting(&self, idle_by: u64) {
        // Relaxed: ordered before the retirements and removals by program
        // order, and seen through their Release stores by the Acquire loads
        // of a look that sees them gone.
        if idle_by > self.forgot_at.load(Ordering::Relaxed) {
            self.forgot_at.fetch_max(idle_by, Ordering::Relaxed);
        }
    }

    /// Whether a new client's `reading`, taken before the look at the map
    /// that found it absent, may judge it: no client whose removal that
    /// look may have seen was judged idle at a later reading. Forgotten at
    /// `idle_by`, a state decides as a fresh one from `idle_by` on, so the
    /// fresh state judged at `reading` decides as it would have. Called
    /// after the look.
    #[inline]
    pub(crate) fn judges_at(&self, reading: u64) -> bool {
        // Relaxed: see `forgetting`; the look's Acquire loads order this
        // load after the removals it saw.
        reading >= self.forgot_at.load(Ordering::Relaxed)
    }

    /// A booking made falls due at the reading `due`: until then, and a
    /// horizon after, its client may stay busy (see [`Counters::busy_for`]).
    #[inline]
    pub(crate) fn booked(&self, due: u64) {
        // Relaxed: a time, publishing nothing; a stale look only costs the
        // exchange. Written only by a booking later than any before it.
        if due > self.due.load(Ordering::Relaxed) {
            self.due.fetch_max(due, Ordering::Relaxed);
        }
    }

    /// The longest a client held at the reading `now` may stay busy, with
    /// a state that becomes idle at most `horizon` after its last admission
    /// (a booking counting as an admission at the instant it falls due):
    /// the horizon after the latest booking's instant, or after `now`.
    /// [`Overflow::DenyNew`]'s wait: by then every client held now is idle
    /// (unless it made another request), and the first new client to come
    /// finds room.
    pub(crate) fn busy_for(&self, now: u64, horizon: u64) -> u64 {
        // Relaxed: as in `booked`; a booking this thread has not seen yet
        // was made after the refusal it answers, or at its very instant.
        let due = self.due.load(Ordering::Relaxed);
        due.saturating_sub(now).saturating_add(horizon)
    }

    /// Whether a new client arriving at the reading `reading` has sweeping
    /// to do: a paced slice, or a pass that has come due (or a clock that
    /// went back past the last pass). Two loads and two comparisons on the
    /// insert path.
    #[inline]
    pub(crate) fn sweep_due(&self, reading: u64) -> bool {
        // Relaxed: times, publishing nothing. A stale value only sends a
        // new client the slow way for nothing, or one new client later.
        reading >= self.sweep_from.load(Ordering::Relaxed)
            || reading < self.sweep_back.load(Ordering::Relaxed)
    }

    /// Claims the pass due by the reading `reading`, if one is: true for
    /// exactly one of the new clients that find it due, which then makes
    /// it; the next is due `period` later, or as soon as a reading lies a
    /// period before this one (a clock that went back: a reading a day
    /// ahead postpones no pass once the clock is back). `paced`: new
    /// clients take the slow way anyway, for their slices.
    pub(crate) fn claim_pass(&self, reading: u64, period: u64, paced: bool) -> bool {
        // Relaxed: as in `sweep_due`; the claim is one compare-and-swap, so
        // two new clients never both make the same pass.
        let period = period.max(1);
        let due = self.pass_due.load(Ordering::Relaxed);
        let back = due.saturating_sub(period.saturating_mul(2));
        if reading < due && reading >= back {
            return false;
        }
        let next = reading.saturating_add(period);
        if self
            .pass_due
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Relaxed: as in `sweep_due`. Two claims in a row may store out of
        // order; the other claim's value only sends new clients the slow
        // way for nothing until the next claim (or, for `trusted`, makes a
        // sweep trust an older reading: it forgets less).
        self.sweep_back
            .store(reading.saturating_sub(period), Ordering::Relaxed);
        self.trusted
            .store(due.saturating_sub(period), Ordering::Relaxed);
        if !paced {
            self.sweep_from.store(next, Ordering::Relaxed);
        }
        true
    }

    /// The reading by which a sweep made on a new client's behalf (the
    /// pass, a paced slice, a rebuild's look for lapsed clients) judges
    /// idleness, given that client's `reading`: the earlier of it and the
    /// reading of the pass before the latest. A state forgotten so is idle
    /// at two readings a period apart, so that a clock that reads ahead
    /// for less than a period (and comes back) forgets no client that it
    /// would not have forgotten without it.
    #[inline]
    pub(crate) fn trusted(&self, reading: u64) -> u64 {
        // Relaxed: a reading, publishing nothing; a stale one is older, and
        // only forgets less.
        reading.min(self.trusted.load(Ordering::Relaxed))
    }

    /// Whether a new client at a full cap, at the reading `now`, should
    /// scan a short slice for idle clients. After `k` scans in a row found
    /// nothing, the next `2^k − 1` (at most [`Memory::SCAN_SKIP_MAX`])
    /// overflows skip it, unless they come once every client held at the
    /// last scan is idle ([`Counters::full_scan_found`]'s `idle_from`);
    /// any scan that finds an idle client ends the run. So a flood against
    /// busy clients pays for a scan about once per 64 new clients, a map
    /// with idle clients in it is scanned on every overflow, and a new
    /// client that waits as [`Overflow::DenyNew`] tells it finds room.
    #[inline]
    pub(crate) fn full_scan_due(&self, now: u64) -> bool {
        // Relaxed: a heuristic tally; a race only scans once more or less.
        // A load and a store, not a locked read-modify-write: two threads
        // that skip at once may count one skip, which only scans sooner.
        let skip = self.full_scan_skip.load(Ordering::Relaxed);
        // Relaxed: a reading, publishing nothing; a stale one only scans
        // sooner, or skips as the tally says.
        if skip == 0 || now >= self.full_scan_from.load(Ordering::Relaxed) {
            return true;
        }
        self.full_scan_skip.store(skip - 1, Ordering::Relaxed);
        false
    }

    /// Records what a full-cap scan retired; see [`Counters::full_scan_due`].
    /// `idle_from`: the reading by which every client held at the scan, at
    /// the reading `now`, is idle, unless it has made another request
    /// ([`Counters::busy_for`]); the next scan is due then, or at the
    /// instant an earlier scan set, if that is still to come and sooner.
    pub(crate) fn full_scan_found(&self, retired: u64, now: u64, idle_from: u64) {
        // Relaxed: as in `full_scan_due`.
        if retired > 0 {
            self.full_scan_barren.store(0, Ordering::Relaxed);
            return;
        }
        // Kept if still ahead and sooner: a refusal before this one was
        // told to wait until then.
        let from = self.full_scan_from.load(Ordering::Relaxed);
        if from <= now || idle_from < from {
            self.full_scan_from.store(idle_from, Ordering::Relaxed);
        }
        let run = (self.full_scan_barren.fetch_add(1, Ordering::Relaxed) + 1).min(6);
        let skip = ((1u64 << run) - 1).min(Memory::SCAN_SKIP_MAX);
        self.full_scan_skip.store(skip, Ordering::Relaxed);
    }

    /// Adds `n` to `counter`.
    #[inline]
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            // Relaxed: a lone tally; see the type's docs.
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counts a new client; returns how many came before it.
    #[inline]
    pub(crate) fn next_insert(&self) -> u64 {
        // Relaxed: as in `add`.
        self.inserts.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn snapshot(&self, clients: usize) -> Stats {
        // Relaxed: as in `add`.
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            clients,
            evicted_idle: read(&self.evicted_idle),
            evicted_live: read(&self.evicted_live),
            overflows: read(&self.overflows),
            denied_new: read(&self.denied_new),
            admitted_untracked: read(&self.admitted_untracked),
            auto_sweeps: read(&self.auto_sweeps),
        }
    }
}

impl fmt::Debug for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counters").finish_non_exhaustive()
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    /// A pass is due at most once a period: the first arrival at or past
    /// the due reading claims it, and no other until a period later.
    #[test]
    fn a_pass_is_claimed_at_most_once_a_period() {
        let counters = Counters::new(&Memory::default());
        assert!(
            counters.sweep_due(0),
            "the first new client times the passes"
        );
        assert!(counters.claim_pass(0, 100, false));
        assert!(!counters.sweep_due(99), "none due within the period");
        assert!(!counters.claim_pass(99, 100, false));
        assert!(counters.sweep_due(100));
        assert!(counters.claim_pass(150, 100, false));
        assert!(!counters.claim_pass(150, 100, false), "claimed once");
        assert!(!counters.sweep_due(249));
        assert!(counters.sweep_due(250), "due a period after the claim");
    }

    /// Of many arrivals racing for one due pass, exactly one claims it.
    #[test]
    fn racing_arrivals_claim_a_pass_once() {
        let counters = Counters::new(&Memory::default());
        let claimed = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..1_000 {
                        if counters.claim_pass(7, 1_000, false) {
                            claimed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(claimed.load(Ordering::Relaxed), 1);
    }

    /// After `k` barren full-cap scans in a row the next `2^k − 1`
    /// overflows skip the scan (at most 63), unless they come once the
    /// clients held at the last scan are idle; a scan that retires anyone
    /// ends the run.
    #[test]
    fn barren_scans_back_off_until_the_held_clients_are_idle() {
        let counters = Counters::new(&Memory::default());
        assert!(counters.full_scan_due(0), "the first overflow scans");
        let idle_from = 1_000;
        for k in 1..=7u32 {
            counters.full_scan_found(0, 10, idle_from);
            let skips = ((1u64 << k.min(6)) - 1).min(Memory::SCAN_SKIP_MAX);
            for _ in 0..skips {
                assert!(!counters.full_scan_due(10), "skip after {k} barren scans");
            }
            assert!(counters.full_scan_due(10), "scans after {skips} skips");
        }
        // Skipping, but at the instant every held client is idle: scans.
        counters.full_scan_found(0, 10, idle_from);
        assert!(!counters.full_scan_due(999));
        assert!(counters.full_scan_due(idle_from));
        // A scan that found someone: the next overflow scans, and one
        // barren scan after it skips once.
        counters.full_scan_found(3, 1_500, 2_000);
        assert!(counters.full_scan_due(1_500));
        counters.full_scan_found(0, 1_500, 2_000);
        assert!(!counters.full_scan_due(1_500));
        assert!(counters.full_scan_due(1_500));
    }

    /// A paced limiter's new clients always take the slow way (for their
    /// slices); one that sweeps nothing never does.
    #[test]
    fn the_slow_way_follows_the_settings() {
        let paced = Counters::new(&Memory {
            auto_sweep: Some(AutoSweep { every: 1, slice: 2 }),
            ..Memory::default()
        });
        assert!(paced.claim_pass(0, 100, true));
        assert!(paced.sweep_due(1), "a paced new client has its slice to do");
        let off = Counters::new(&Memory {
            sweep_on_rebuild: false,
            ..Memory::default()
        });
        assert!(!off.sweep_due(u64::MAX - 1));
    }
}
