//! Counts that checks keep without sharing a write, published through the
//! `metrics` crate's facade off the check path (the `metrics` feature).
//!
//! A check must not pay a shared atomic for being counted: one counter
//! written by every thread would bounce its cache line between cores on
//! every check, which is what the keyed store avoids for the checks
//! themselves. So each thread that counts gets a *slot* (`0..STRIPES`),
//! claimed once from a process-wide set and given back when the thread
//! ends, and every [`Tally`] holds one stripe of counters per slot, each on
//! a cache line of its own. A stripe is written by its slot's thread only,
//! with a plain load and store (no locked instruction); a thread that finds
//! every slot taken counts on the tally's one shared stripe, with
//! `fetch_add`. Publishing sums the stripes.
//!
//! Counts reach the recorder when they are published ([`Sent::deltas`]):
//! what was counted since the last publication is added to each counter,
//! so two limiters of one name add up. The *publishing thread* (named
//! `tollgate-metrics`) publishes every set of counts that has joined it
//! ([`register`]) about once a second of real time, whatever the limiters'
//! clocks read and whether or not checks go on; it holds each only weakly,
//! and ends when the last is dropped. A check publishes too, but only what
//! the thread cannot reach (a keyed limiter's gauges): the first check
//! after each of the thread's rounds ([`Sent::due`]).

use core::cell::Cell;
use core::time::Duration;
use std::sync::{Arc, OnceLock, Weak};

use crossbeam_utils::CachePadded;

use crate::sync::{Mutex, Ordering, PlainAtomicU64};

/// Threads with a stripe of their own in every tally; the rest share one.
pub(crate) const STRIPES: usize = 64;

/// A thread that has not asked for a slot yet (or found none free).
const UNASSIGNED: usize = usize::MAX;
/// A thread whose slot is gone (its thread-local destructors are running):
/// it counts on the shared stripe from now on.
const SHARED: usize = STRIPES;

/// The slots taken, one bit each.
static TAKEN: PlainAtomicU64 = PlainAtomicU64::new(0);

std::thread_local! {
    /// This thread's slot: an index below [`STRIPES`], [`SHARED`] or
    /// [`UNASSIGNED`]. Constant-initialised with no destructor, so reading
    /// it is one thread-local load, and it can be read while the thread's
    /// other thread-locals are being destroyed.
    static SLOT: Cell<usize> = const { Cell::new(UNASSIGNED) };
    /// Gives this thread's slot back when the thread ends. Touched once,
    /// when the slot is claimed, which registers its destructor.
    static GIVE_BACK: GiveBack = const { GiveBack };
}

struct GiveBack;

impl Drop for GiveBack {
    fn drop(&mut self) {
        // From here on this thread counts on the shared stripes, so its
        // slot can go to another thread.
        let slot = SLOT.with(|slot| slot.replace(SHARED));
        if slot < STRIPES {
            // Release: pairs with the Acquire of `claim`'s exchange, so the
            // thread that takes this slot next sees every count this thread
            // stored in the slot's stripes, and its plain load and store
            // continue from there.
            TAKEN.fetch_and(!(1 << slot), Ordering::Release);
        }
    }
}

/// Claims a free slot for this thread: the slot, or [`UNASSIGNED`] if all
/// are taken (the thread asks again on its next count), or [`SHARED`] if
/// the thread is ending.
#[cold]
#[inline(never)]
fn claim() -> usize {
    // Relaxed: a guess for the exchange, which decides.
    let mut taken = TAKEN.load(Ordering::Relaxed);
    let slot = loop {
        if taken == u64::MAX {
            return UNASSIGNED;
        }
        let slot = (!taken).trailing_zeros() as usize;
        // Acquire (success): pairs with the Release of the `fetch_and` that
        // gave the slot back, so this thread's first plain load of each
        // stripe of the slot reads the last count its previous owner
        // stored. Relaxed (failure): a fresh guess only.
        match TAKEN.compare_exchange_weak(
            taken,
            taken | 1 << slot,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => break slot,
            Err(now) => taken = now,
        }
    };
    // Registers the destructor that gives the slot back; a thread whose
    // destructors are already running gives it back at once.
    if GIVE_BACK.try_with(|_| ()).is_err() {
        // Release: as in `GiveBack::drop` (nothing was counted in it).
        TAKEN.fetch_and(!(1 << slot), Ordering::Release);
        SLOT.with(|cell| cell.set(SHARED));
        return SHARED;
    }
    SLOT.with(|cell| cell.set(slot));
    slot
}

/// One stripe: `N` counters on a cache line (or two) of their own.
type Stripe<const N: usize> = CachePadded<[PlainAtomicU64; N]>;

/// `N` counters, kept per thread (see the module docs). Exact: every count
/// added is in the sum of a later [`Tally::sum`] that happens after it.
/// Held in the [`Arc`] that a limiter shares with the publishing thread, so
/// the stripes are inline: a count loads the one pointer it loaded before
/// the thread existed.
pub(crate) struct Tally<const N: usize> {
    /// One stripe per slot, then the shared one (index [`STRIPES`]). An
    /// array, so that a slot below `STRIPES` needs no bounds check.
    stripes: [Stripe<N>; STRIPES + 1],
}

impl<const N: usize> Tally<N> {
    pub(crate) fn new() -> Self {
        Self {
            stripes: core::array::from_fn(|_| {
                CachePadded::new(core::array::from_fn(|_| PlainAtomicU64::new(0)))
            }),
        }
    }

    /// Adds 1 to counter `i` and `extra` to counter `j`, on this thread's
    /// stripe: two plain loads and stores (one where `extra` is 0), no
    /// locked instruction, no shared line.
    #[inline]
    pub(crate) fn count(&self, i: usize, j: usize, extra: u64) {
        let slot = SLOT.with(Cell::get);
        if slot < STRIPES {
            let stripe = &self.stripes[slot];
            bump(&stripe[i], 1);
            if extra != 0 {
                bump(&stripe[j], extra);
            }
        } else {
            self.count_shared(slot, i, j, extra);
        }
    }

    /// Adds 1 to counter `i` on this thread's stripe if it has one (a
    /// plain load and store, as [`Tally::count`]); false, having counted
    /// nothing, for a thread without one, which must count with
    /// [`Tally::count`].
    #[inline]
    fn bump_own(&self, i: usize) -> bool {
        let slot = SLOT.with(Cell::get);
        if slot < STRIPES {
            bump(&self.stripes[slot][i], 1);
            true
        } else {
            false
        }
    }

    /// [`Tally::count`] for a thread without a slot: claims one, or counts
    /// on the shared stripe.
    #[cold]
    #[inline(never)]
    fn count_shared(&self, slot: usize, i: usize, j: usize, extra: u64) {
        if slot == UNASSIGNED && claim() < STRIPES {
            return self.count(i, j, extra);
        }
        let shared = &self.stripes[STRIPES];
        // Relaxed: as in `bump`; a read-modify-write, since threads without
        // a slot share this stripe.
        shared[i].fetch_add(1, Ordering::Relaxed);
        if extra != 0 {
            shared[j].fetch_add(extra, Ordering::Relaxed);
        }
    }

    /// Counter `i` summed over every stripe.
    pub(crate) fn sum(&self, i: usize) -> u64 {
        self.stripes
            .iter()
            // Relaxed: see `bump`.
            .map(|stripe| stripe[i].load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

/// Adds `n` to a counter only this thread writes.
#[inline]
fn bump(counter: &PlainAtomicU64, n: u64) {
    // Relaxed: a tally that publishes nothing. The stripe's thread is its
    // only writer (the slot's previous owner's stores were ordered before
    // this thread's claim, see `claim`), so a load and a store lose no
    // count; a reader sees each counter's values in the order they were
    // stored (coherence), so sums never go back.
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// What a [`Tally`] of `N` counters has published, and when a check
/// publishes next.
pub(crate) struct Sent<const N: usize> {
    /// The sums last published. Taken by publishers only, never by a
    /// count; a check (or the publishing thread) that finds it taken
    /// leaves the publishing to its holder.
    last: Mutex<[u64; N]>,
    /// The reading of the limiter's clock from which a check publishes: 0
    /// at first (the first check publishes, and joins the counts to the
    /// publishing thread), then `u64::MAX` while the thread publishes them
    /// (back to 0 after each of its rounds where the check has something
    /// of its own to publish, see [`Sent::rearm`]); a period after the
    /// last publication where no thread could be started.
    next_at: PlainAtomicU64,
    /// [`ALONE`] until the counts join the publishing thread, then
    /// [`JOINED`]; [`ALONE`] for good if no thread could be started.
    mode: PlainAtomicU64,
}

/// Counts the publishing thread does not publish: checks publish them once
/// a period of the limiter's clock.
const ALONE: u64 = 0;
/// Counts the publishing thread publishes.
const JOINED: u64 = 1;

impl<const N: usize> Sent<N> {
    /// How long, in the limiter's clock's nanoseconds, checks wait between
    /// publications where no publishing thread could be started.
    pub(crate) const PERIOD: u64 = 1_000_000_000;

    pub(crate) fn new() -> Self {
        Self {
            last: Mutex::new([0; N]),
            next_at: PlainAtomicU64::new(0),
            mode: PlainAtomicU64::new(ALONE),
        }
    }

    /// Whether a check at the reading `now` should publish: one load and a
    /// comparison.
    #[inline]
    pub(crate) fn due(&self, now: u64) -> bool {
        // Relaxed, paired with nothing: a time that publishes no other
        // memory (the counts are summed under `last`'s lock); a stale one
        // only publishes once more, or a check later.
        now >= self.next_at.load(Ordering::Relaxed)
    }

    /// Claims the publication due at `now`: true for one check of those
    /// that find it due. The next is due when the publishing thread asks
    /// for it ([`Sent::rearm`]) if the counts joined it, else a period
    /// later.
    pub(crate) fn claim(&self, now: u64) -> bool {
        // Relaxed, paired with nothing (the store in `joined` is Relaxed
        // too): a mode that publishes no other memory; read stale (just
        // before the counts joined the thread), it only makes one more
        // publication a period later.
        let then = if self.mode.load(Ordering::Relaxed) == JOINED {
            u64::MAX
        } else {
            now.saturating_add(Self::PERIOD)
        };
        // Relaxed (load, and the exchange's success and failure), paired
        // with nothing, as in `due`: the exchange only makes one claimant.
        let next = self.next_at.load(Ordering::Relaxed);
        now >= next
            && self
                .next_at
                .compare_exchange(next, then, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Makes the next check publish, whatever its clock reads: the
    /// publishing thread's call, after each round, for counts whose
    /// limiter publishes something the thread cannot (its gauges).
    pub(crate) fn rearm(&self) {
        // Relaxed, paired with nothing, as in `due`. A claim that raced
        // with this store either published already or publishes now;
        // either way one check publishes after the round.
        self.next_at.store(0, Ordering::Relaxed);
    }

    /// Records whether the counts joined the publishing thread.
    pub(crate) fn joined(&self, joined: bool) {
        // Relaxed, paired with nothing: see the load in `claim`.
        self.mode
            .store(if joined { JOINED } else { ALONE }, Ordering::Relaxed);
    }

    /// What `tally` counted since the last publication, counter by
    /// counter, now marked published; `None` if another thread is
    /// publishing and `wait` is false.
    pub(crate) fn deltas(&self, tally: &Tally<N>, wait: bool) -> Option<[u64; N]> {
        let mut last = if wait {
            self.last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        } else {
            match self.last.try_lock() {
                Ok(last) => last,
                Err(std::sync::TryLockError::WouldBlock) => return None,
                Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            }
        };
        Some(core::array::from_fn(|i| {
            let now = tally.sum(i);
            // Sums never go back (see `bump`), and each publisher reads
            // them after the last one did (the lock orders them).
            let delta = now.wrapping_sub(last[i]);
            last[i] = now;
            delta
        }))
    }
}

/// Counts kept per thread, what was published of them, and the name they
/// are published under: what a limiter shares with the publishing thread.
/// `X`: counts of another kind beside them (the HTTP layer's responses by
/// status), published with them.
pub(crate) struct Counts<const N: usize, X = ()> {
    pub(crate) tally: Tally<N>,
    pub(crate) sent: Sent<N>,
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) extra: X,
    /// The `limiter` label, set as the counts join the publishing thread.
    name: OnceLock<Name>,
    /// Whether the limiter publishes something of its own that the thread
    /// cannot reach (a keyed limiter's gauges, a Redis limiter's round
    /// trips and breaker): the thread then has the first check after each
    /// of its rounds publish ([`Sent::rearm`]).
    refresh: bool,
    /// Publishes the counts under a name, waiting for another publisher if
    /// asked; false if it left the publishing to that one.
    publish: fn(&Self, &Name, bool) -> bool,
}

impl<const N: usize, X: Send + Sync + 'static> Counts<N, X> {
    /// Counts, with `extra` beside them, that `publish` publishes;
    /// `refresh`: see the field.
    pub(crate) fn new(
        refresh: bool,
        extra: X,
        publish: fn(&Self, &Name, bool) -> bool,
    ) -> Arc<Self> {
        Arc::new(Self {
            tally: Tally::new(),
            sent: Sent::new(),
            extra,
            name: OnceLock::new(),
            refresh,
            publish,
        })
    }

    /// Joins `this` to the publishing thread under `name`, the first time
    /// only (later calls do nothing): from then on it publishes them about
    /// once a second, whatever the checks do. Off the check path: called
    /// by the first check, where it publishes.
    pub(crate) fn join(this: &Arc<Self>, name: &Name) {
        if this.name.get().is_some() || this.name.set(name.clone()).is_err() {
            return;
        }
        let weak: Weak<dyn Publish> = Arc::downgrade(this) as Weak<dyn Publish>;
        this.sent.joined(register(weak));
    }

    /// Claims the publication due at `now` ([`Sent::claim`]), having
    /// joined `this` to the publishing thread under `name` first, the
    /// first time.
    pub(crate) fn claim(this: &Arc<Self>, now: u64, name: &Name) -> bool {
        Self::join(this, name);
        this.sent.claim(now)
    }

    /// What `tally` counted since the last publication; see [`Sent::deltas`].
    pub(crate) fn deltas(&self, wait: bool) -> Option<[u64; N]> {
        self.sent.deltas(&self.tally, wait)
    }
}

impl<const N: usize, X: Send + Sync + 'static> Publish for Counts<N, X> {
    fn publish_round(&self) {
        let Some(name) = self.name.get() else {
            return;
        };
        // Never waits: a publisher held up in the recorder holds up no
        // round of the thread's, whose other limiters go on.
        (self.publish)(self, name, false);
        if self.refresh {
            self.sent.rearm();
        }
    }
}

/// Counts the publishing thread publishes.
pub(crate) trait Publish: Send + Sync {
    /// Publishes what was counted since the last publication, leaving it
    /// to another publisher that is at it.
    fn publish_round(&self);
}

/// How long the publishing thread sleeps between rounds, in real time.
const ROUND: Duration = Duration::from_secs(1);

/// The counts the publishing thread publishes, held weakly, and whether
/// the thread runs.
struct Registry {
    entries: Vec<Weak<dyn Publish>>,
    /// Whether the thread runs: set as it starts, cleared as it ends under
    /// the same lock, so a registration either reaches a running thread or
    /// starts a new one.
    running: bool,
    /// Entries held after the last pruning: a registration prunes the
    /// dropped ones again once there are twice as many, so the dropped
    /// limiters' memory (which a `Weak` keeps) stays in proportion to the
    /// live ones' between the thread's rounds.
    pruned_at: usize,
}

static REGISTRY: std::sync::Mutex<Registry> = std::sync::Mutex::new(Registry {
    entries: Vec::new(),
    running: false,
    pruned_at: 0,
});

/// The registry, whatever a panic left it as (a `Vec` of `Weak`s and two
/// plain fields are never left half-written).
fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Has the publishing thread publish `entry` about once a second until it
/// is dropped, starting the thread if none runs. False if no thread could
/// be started (a target without threads): `entry` is not held then.
pub(crate) fn register(entry: Weak<dyn Publish>) -> bool {
    let mut registry = registry();
    if !registry.running {
        let started = std::thread::Builder::new()
            .name("tollgate-metrics".into())
            .spawn(publish_rounds);
        if started.is_err() {
            return false;
        }
        registry.running = true;
    }
    if registry.entries.len() >= 2 * registry.pruned_at.max(8) {
        registry.entries.retain(|entry| entry.strong_count() > 0);
        registry.pruned_at = registry.entries.len();
    }
    registry.entries.push(entry);
    true
}

/// The publishing thread: every [`ROUND`] of real time, publishes each set
/// of counts still alive, and ends once none is.
fn publish_rounds() {
    loop {
        std::thread::sleep(ROUND);
        let live: Vec<Arc<dyn Publish>> = {
            let mut registry = registry();
            registry.entries.retain(|entry| entry.strong_count() > 0);
            let live: Vec<_> = registry.entries.iter().filter_map(Weak::upgrade).collect();
            if live.is_empty() {
                registry.entries = Vec::new();
                registry.pruned_at = 0;
                registry.running = false;
                return;
            }
            registry.pruned_at = registry.entries.len();
            live
        };
        // Outside the registry's lock: the recorder's code runs here, and
        // a limiter built meanwhile registers without waiting for it.
        for entry in live {
            // A recorder that panics loses this round of this entry, not
            // the thread.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                entry.publish_round();
            }));
        }
    }
}

/// A limiter's decisions, as its checks count them: admitted and denied,
/// and the units beyond the first that each asked for.
pub(crate) struct Decisions {
    counts: Arc<Counts<4>>,
}

impl Decisions {
    /// The admitted counter at 1 and the denied at 0, so that a check's
    /// counter is its outcome as a number (one instruction fewer).
    const ADMITTED: usize = 1;
    const DENIED: usize = 0;
    /// Where the units beyond the first go: the counter of the decision's
    /// outcome plus this.
    const EXTRA: usize = 2;

    /// The decisions of a keyed limiter, whose checks publish its gauges:
    /// the first check after each of the publishing thread's rounds does.
    pub(crate) fn new() -> Self {
        Self {
            counts: Counts::new(true, (), Self::publish_counts),
        }
    }

    /// The decisions of a limiter with nothing to publish but them (a
    /// direct limiter): once they join the publishing thread, no check
    /// publishes.
    pub(crate) fn without_gauges() -> Self {
        Self {
            counts: Counts::new(false, (), Self::publish_counts),
        }
    }

    /// Counts a decision on `cost` (at least 1) units.
    #[inline]
    pub(crate) fn record(&self, admitted: bool, cost: u64) {
        let i = usize::from(admitted);
        self.counts
            .tally
            .count(i, i + Self::EXTRA, cost.saturating_sub(1));
    }

    /// Counts a decision on one unit, out of line: for a check whose whole
    /// body is smaller than the counting inline (a direct limiter's
    /// `allow`), which, with this call in place of the counting, still fits
    /// the inliner's threshold at its call site. Out of line it costs a
    /// call and a return more than inline, where inline it would cost the
    /// check its own inlining (a call, a prologue, an epilogue and
    /// spills). Its own rare case (a thread without a stripe of its own
    /// yet, or beyond the stripes) is a tail call, so the common one saves
    /// no register: a thread-local read, a comparison and one increment.
    #[inline(never)]
    pub(crate) fn record_one(&self, admitted: bool) {
        let tally = &self.counts.tally;
        if !tally.bump_own(usize::from(admitted)) {
            Self::record_one_shared(tally, admitted);
        }
    }

    /// [`Decisions::record_one`] for a thread without a stripe of its
    /// own: claims one, or counts on the shared stripe.
    #[cold]
    #[inline(never)]
    fn record_one_shared(tally: &Tally<4>, admitted: bool) {
        let i = usize::from(admitted);
        tally.count(i, i + Self::EXTRA, 0);
    }

    /// Counts a decision on `cost` (at least 1) units made at `now`, and
    /// says whether a publication is due then ([`Sent::due`]). Reads the
    /// instant before it counts, so the counts' address is loaded once.
    #[inline]
    pub(crate) fn record_at(&self, admitted: bool, cost: u64, now: u64) -> bool {
        let due = self.counts.sent.due(now);
        self.record(admitted, cost);
        due
    }

    /// Whether a check at `now` should publish; see [`Sent::due`].
    #[inline]
    pub(crate) fn due(&self, now: u64) -> bool {
        self.counts.sent.due(now)
    }

    /// Claims the publication due at `now` ([`Sent::claim`]), having
    /// joined the publishing thread under `limiter` first, the first time.
    pub(crate) fn claim(&self, now: u64, limiter: &Name) -> bool {
        Counts::claim(&self.counts, now, limiter)
    }

    /// Joins the publishing thread under `limiter` ([`Counts::join`]).
    pub(crate) fn join(&self, limiter: &Name) {
        Counts::join(&self.counts, limiter);
    }

    /// Adds what was counted since the last publication to the
    /// `tollgate_decisions_total` and `tollgate_units_total` counters of
    /// `limiter`; false if another thread was publishing and `wait` is
    /// false.
    pub(crate) fn publish(&self, limiter: &Name, wait: bool) -> bool {
        Self::publish_counts(&self.counts, limiter, wait)
    }

    fn publish_counts(counts: &Counts<4>, limiter: &Name, wait: bool) -> bool {
        let Some(deltas) = counts.deltas(wait) else {
            return false;
        };
        for (i, outcome) in [(Self::ADMITTED, "admitted"), (Self::DENIED, "denied")] {
            let decisions = deltas[i];
            counter(DECISIONS, limiter, &[("outcome", outcome)]).increment(decisions);
            let units = decisions.wrapping_add(deltas[i + Self::EXTRA]);
            counter(UNITS, limiter, &[("outcome", outcome)]).increment(units);
        }
        true
    }
}

/// A limiter's name, as its series carry it in their `limiter` label.
pub(crate) type Name = std::borrow::Cow<'static, str>;

/// Decisions, by `limiter` and `outcome` (`admitted`, `denied`).
pub(crate) const DECISIONS: &str = "tollgate_decisions_total";
/// Units asked for by decisions, by `limiter` and `outcome`.
pub(crate) const UNITS: &str = "tollgate_units_total";

/// The recorder's counter `name` for `limiter`, with `labels` besides.
pub(crate) fn counter(
    name: &'static str,
    limiter: &Name,
    labels: &[(&'static str, &'static str)],
) -> metrics::Counter {
    metrics::counter!(name, self::labels(limiter, labels))
}

/// The recorder's gauge `name` for `limiter`, with `labels` besides.
pub(crate) fn gauge(
    name: &'static str,
    limiter: &Name,
    labels: &[(&'static str, &'static str)],
) -> metrics::Gauge {
    metrics::gauge!(name, self::labels(limiter, labels))
}

fn labels(limiter: &Name, labels: &[(&'static str, &'static str)]) -> Vec<metrics::Label> {
    core::iter::once(metrics::Label::new("limiter", limiter.clone()))
        .chain(
            labels
                .iter()
                .map(|&(key, value)| metrics::Label::new(key, value)),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts from many threads (more than there are slots, so some share
    /// the shared stripe, and slots are given back and taken again) sum
    /// exactly.
    #[test]
    fn counts_from_many_threads_sum_exactly() {
        let tally = Tally::<2>::new();
        std::thread::scope(|scope| {
            for round in 0..3 {
                let handles: Vec<_> = (0..STRIPES + 8)
                    .map(|t| {
                        let tally = &tally;
                        scope.spawn(move || {
                            for k in 0..100 {
                                tally.count(0, 1, (t + k + round) as u64 % 3);
                            }
                        })
                    })
                    .collect();
                for handle in handles {
                    handle.join().unwrap();
                }
            }
        });
        let extra: u64 = (0..3)
            .flat_map(|round| {
                (0..STRIPES + 8)
                    .flat_map(move |t| (0..100).map(move |k| (t + k + round) as u64 % 3))
            })
            .sum();
        assert_eq!(tally.sum(0), 3 * (STRIPES as u64 + 8) * 100);
        assert_eq!(tally.sum(1), extra);
    }

    /// Each publication hands out what was counted since the last, once.
    #[test]
    fn deltas_hand_out_each_count_once() {
        let tally = Tally::<1>::new();
        let sent = Sent::<1>::new();
        tally.count(0, 0, 4);
        assert_eq!(sent.deltas(&tally, true), Some([5]));
        assert_eq!(sent.deltas(&tally, false), Some([0]));
        tally.count(0, 0, 0);
        assert_eq!(sent.deltas(&tally, true), Some([1]));
    }

    /// One check of those that find a publication due claims it; the next
    /// is due a period later while no thread publishes the counts.
    #[test]
    fn a_publication_is_claimed_once_a_period_alone() {
        let sent = Sent::<1>::new();
        assert!(sent.due(0));
        assert!(sent.claim(5));
        assert!(!sent.claim(5));
        assert!(!sent.due(5 + Sent::<1>::PERIOD - 1));
        assert!(sent.claim(5 + Sent::<1>::PERIOD));
    }

    /// Once the publishing thread publishes the counts, a check publishes
    /// only when the thread asks, whatever its clock reads: after a step
    /// back as after a step forward.
    #[test]
    fn a_joined_publication_is_due_when_the_thread_asks() {
        let sent = Sent::<1>::new();
        sent.joined(true);
        assert!(sent.claim(5), "the first check publishes");
        assert!(!sent.due(u64::MAX - 1), "however late");
        sent.rearm();
        assert!(sent.due(0), "however early");
        assert!(sent.claim(0));
        assert!(!sent.claim(0));
    }
}
