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
//! Counts reach the recorder when a limiter publishes them
//! ([`Sent::deltas`]): what was counted since the last publication is
//! added to each counter, so two limiters of one name add up.

use core::cell::Cell;

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
pub(crate) struct Tally<const N: usize> {
    /// One stripe per slot, then the shared one (index [`STRIPES`]). An
    /// array, so that a slot below `STRIPES` needs no bounds check.
    stripes: Box<[Stripe<N>; STRIPES + 1]>,
}

impl<const N: usize> Tally<N> {
    pub(crate) fn new() -> Self {
        Self {
            stripes: Box::new(core::array::from_fn(|_| {
                CachePadded::new(core::array::from_fn(|_| PlainAtomicU64::new(0)))
            })),
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

/// What a [`Tally`] of `N` counters has published, and when it publishes
/// next.
pub(crate) struct Sent<const N: usize> {
    /// The sums last published. Taken by publishers only, never by a
    /// count; a check that finds it taken leaves the publishing to its
    /// holder.
    last: Mutex<[u64; N]>,
    /// The clock reading from which the next check publishes.
    next_at: PlainAtomicU64,
}

impl<const N: usize> Sent<N> {
    /// How long, in the limiter's clock's nanoseconds, checks wait between
    /// publications.
    pub(crate) const PERIOD: u64 = 1_000_000_000;

    pub(crate) fn new() -> Self {
        Self {
            last: Mutex::new([0; N]),
            next_at: PlainAtomicU64::new(0),
        }
    }

    /// Whether a check at the reading `now` should publish: one load and a
    /// comparison.
    #[inline]
    pub(crate) fn due(&self, now: u64) -> bool {
        // Relaxed: a time, publishing nothing; a stale one only publishes
        // once more, or a check later.
        now >= self.next_at.load(Ordering::Relaxed)
    }

    /// Claims the publication due at `now`: true for one check of those
    /// that find it due.
    pub(crate) fn claim(&self, now: u64) -> bool {
        // Relaxed: as in `due`; the exchange makes one claimant.
        let next = self.next_at.load(Ordering::Relaxed);
        now >= next
            && self
                .next_at
                .compare_exchange(
                    next,
                    now.saturating_add(Self::PERIOD),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
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

/// A limiter's decisions, as its checks count them: admitted and denied,
/// and the units beyond the first that each asked for.
pub(crate) struct Decisions {
    tally: Tally<4>,
    sent: Sent<4>,
}

impl Decisions {
    const ADMITTED: usize = 0;
    const DENIED: usize = 1;
    /// Where the units beyond the first go: the counter of the decision's
    /// outcome plus this.
    const EXTRA: usize = 2;

    pub(crate) fn new() -> Self {
        Self {
            tally: Tally::new(),
            sent: Sent::new(),
        }
    }

    /// Counts a decision on `cost` (at least 1) units.
    #[inline]
    pub(crate) fn record(&self, admitted: bool, cost: u64) {
        let i = usize::from(!admitted);
        self.tally.count(i, i + Self::EXTRA, cost.saturating_sub(1));
    }

    /// Whether a check at `now` should publish; see [`Sent::due`].
    #[inline]
    pub(crate) fn due(&self, now: u64) -> bool {
        self.sent.due(now)
    }

    /// See [`Sent::claim`].
    pub(crate) fn claim(&self, now: u64) -> bool {
        self.sent.claim(now)
    }

    /// Adds what was counted since the last publication to the
    /// `tollgate_decisions_total` and `tollgate_units_total` counters of
    /// `limiter`; false if another thread was publishing and `wait` is
    /// false.
    pub(crate) fn publish(&self, limiter: &Name, wait: bool) -> bool {
        let Some(deltas) = self.sent.deltas(&self.tally, wait) else {
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
    /// is due a period later.
    #[test]
    fn a_publication_is_claimed_once_a_period() {
        let sent = Sent::<1>::new();
        assert!(sent.due(0));
        assert!(sent.claim(5));
        assert!(!sent.claim(5));
        assert!(!sent.due(5 + Sent::<1>::PERIOD - 1));
        assert!(sent.claim(5 + Sent::<1>::PERIOD));
    }
}
