//! Quotas per client and quotas that change at run time: [`Tiered`].
//!
//! # The cell
//!
//! A tiered client's cell is its state word (a [`StateCell`], run by the
//! same compare-and-swap loop as any word algorithm's) and a *quota* word:
//! the address of the quota its state word was written under, an entry of
//! one of the quota tables the limiter has published, with the client's
//! tier (chosen once, when its state is created) in the top 16 bits. The
//! quota word is written while the cell is not alive (its creator writes
//! the tier; its claimer the address, before the fresh word is born with a
//! `Release` store) and never again: a client's state moves to a new quota
//! only by being carried to a new cell, as a table rebuild moves it.
//!
//! A check reads the quota word *inside* its transition, after the
//! `Acquire` load of the state word it transforms: a live word was written
//! under the quota its cell names.
//!
//! # Changing a quota
//!
//! The quotas live in a table (one quota per tier) behind a [`Published`]
//! pointer. Changing one (the limiter's `set_quota`, one change at a time)
//! publishes a new table, then rebuilds every shard of the store, and each
//! live cell is carried, exactly as a rebuild moves it, to a new cell that
//! names its tier's entry in the new table, its word converted by the
//! algorithm's rule (`Transitions::convert`) from the quota its old cell
//! named; the old cell is then forwarded by one exchange from the very
//! word converted (a check that changed it first makes the rebuild convert
//! again). Only then is the old table retired, to the epoch collector:
//!
//! - a check on the old cell decides under the old quota; if the cell is
//!   forwarded meanwhile, the check's exchange fails against the
//!   forwarding mark and it looks the client up again, finding the carried
//!   cell, which it decides under the new quota;
//! - every access to a cell runs under the store's epoch guard (lookups,
//!   inserts and rebuilds pin, and so does the check of a client admitted
//!   untracked), so a thread that still holds an old cell was pinned before
//!   the old table's retirement, which keeps the table alive for it.
//!
//! Each client's change is therefore one step in its history: every check
//! lands wholly before it, under the old quota, or wholly after, under the
//! new one, and the conversion carries exactly the state the last check
//! before it left. A check never waits for a change: the carried cell is
//! in the new table before the old one is marked moved.

use core::fmt;

use super::{
    describe, look, Algorithm, Applied, Booking, Life, Mortal, Packed, Relocation, Seal, StateCell,
};
use crate::algorithm::{FromParams, Params, Transitions, NEVER, NOT_ALIVE};
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::sync::{AtomicU64, Ordering, Published};

/// A client's tier: which quota of a [`Tiered`] limiter it is held to.
/// Tier 0 is the builder's own quota; a tier with no quota of its own is
/// held to tier 0's.
pub type Tier = u16;

/// The bits of a quota word below the tier: the quota's address (user
/// space addresses fit in 48 bits on every 64-bit target Rust supports
/// with atomics of this width; `Tiered::quota_word` checks it).
const ADDRESS_BITS: u32 = 48;
const ADDRESS_MASK: u64 = (1 << ADDRESS_BITS) - 1;

fn tier_of(word: u64) -> Tier {
    // The top 16 bits: fits.
    (word >> ADDRESS_BITS) as Tier
}

/// The quota of every tier, at one point in the limiter's life.
#[derive(Clone)]
struct Table<A> {
    /// Indexed by tier; `None` is held to tier 0's quota.
    quotas: Vec<Option<A>>,
}

impl<A: Transitions> Table<A> {
    /// The largest capacity and horizon of any tier.
    fn maxima(&self) -> (u64, u64) {
        let quotas = self.quotas.iter().flatten();
        quotas.fold((0, 0), |(c, h), q| {
            (c.max(q.capacity()), h.max(q.horizon()))
        })
    }
}

impl<A> Table<A> {
    /// The quota `tier` is held to: its own, or tier 0's.
    fn quota(&self, tier: Tier) -> &A {
        match self.quotas.get(usize::from(tier)) {
            Some(Some(quota)) => quota,
            _ => self.quotas[0].as_ref().expect("tier 0 always has a quota"),
        }
    }
}

/// An algorithm whose clients each have a tier, and whose tiers' quotas can
/// change while it runs: what a limiter built with
/// [`Builder::tier`](crate::Builder::tier),
/// [`tier_by`](crate::Builder::tier_by) or
/// [`reconfigurable`](crate::Builder::reconfigurable) runs. `A` is the
/// algorithm of every tier: a [`TokenBucket`](crate::TokenBucket), a
/// [`FixedWindow`](crate::FixedWindow), a
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter), or two of them
/// held together ([`Both`](crate::Both)).
///
/// Memory per client is one more `u64` than `A`'s (the tier, and which
/// quota its state was written under); a check on a known client reads its
/// quota through that word and calls nothing of the caller's.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, TokenBucket};
///
/// let limiter = TokenBucket::builder()
///     .rate(2, Duration::from_secs(1))
///     .tier(1, TokenBucket::builder().rate(5, Duration::from_secs(1)))
///     .tier_by(|key: &String| if key.starts_with("pro-") { 1 } else { 0 })
///     .clock(ManualClock::new())
///     .build()?;
/// assert_eq!((0..9).filter(|_| limiter.allow_request("free-ann")).count(), 2);
/// assert_eq!((0..9).filter(|_| limiter.allow_request("pro-bob")).count(), 5);
/// assert_eq!(limiter.check("pro-bob").limit(), 5);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub struct Tiered<A> {
    table: Published<Table<A>>,
    /// The largest capacity and horizon of any tier, kept up to date by
    /// each change (read without the table, on every `check_n`).
    max_capacity: AtomicU64,
    max_horizon: AtomicU64,
}

impl<A: Transitions + Clone + PartialEq> Tiered<A>
where
    A::Word: Packed,
{
    pub(crate) fn new(default: A, tiers: Vec<(Tier, A)>) -> Self {
        let len = tiers
            .iter()
            .map(|&(tier, _)| usize::from(tier) + 1)
            .max()
            .unwrap_or(1);
        let mut quotas = vec![None; len];
        quotas[0] = Some(default);
        for (tier, quota) in tiers {
            quotas[usize::from(tier)] = Some(quota);
        }
        let table = Table { quotas };
        let (capacity, horizon) = table.maxima();
        Self {
            max_capacity: AtomicU64::new(capacity),
            max_horizon: AtomicU64::new(horizon),
            table: Published::new(table),
        }
    }

    /// Records `(capacity, horizon)`, the largest of any tier, or with
    /// `keep` the larger of them and the figures as they stand (while a
    /// change carries clients over, both tables are in use).
    fn note_maxima(&self, (capacity, horizon): (u64, u64), keep: bool) {
        // Relaxed: figures that publish nothing; a check that reads a stale
        // one only lets a cost through to its own tier's test, or sweeps by
        // a slightly other horizon.
        if keep {
            self.max_capacity.fetch_max(capacity, Ordering::Relaxed);
            self.max_horizon.fetch_max(horizon, Ordering::Relaxed);
        } else {
            self.max_capacity.store(capacity, Ordering::Relaxed);
            self.max_horizon.store(horizon, Ordering::Relaxed);
        }
    }

    /// Gives `tier` the quota `quota`: publishes a table with it, runs
    /// `carry_all` (which must carry every live cell over with
    /// [`Tiered::carry`]) while the old table is still alive, then retires
    /// the old table.
    pub(crate) fn change(&self, tier: Tier, quota: A, carry_all: impl FnOnce()) {
        let mut quotas = self.table.pin().load().quotas.clone();
        if quotas.len() <= usize::from(tier) {
            quotas.resize(usize::from(tier) + 1, None);
        }
        quotas[usize::from(tier)] = Some(quota);
        let table = Table { quotas };
        let maxima = table.maxima();
        self.note_maxima(maxima, true);
        self.table.replace(table, carry_all);
        self.note_maxima(maxima, false);
    }

    /// The quota `tier` is held to now.
    pub(crate) fn quota_of(&self, tier: Tier) -> A {
        self.table.pin().load().quota(tier).clone()
    }

    /// The quota word naming `quota` (an entry of a published table) for a
    /// client of `tier`.
    fn quota_word(tier: Tier, quota: &A) -> u64 {
        let address = (quota as *const A).expose_provenance() as u64;
        assert_eq!(
            address & !ADDRESS_MASK,
            0,
            "a quota's address fits in 48 bits"
        );
        (u64::from(tier) << ADDRESS_BITS) | address
    }

    /// What a rebuild carrying cells to the current table puts in `cell`'s
    /// place: a copy of its state, converted at `now()` (read after the
    /// state) if it was written under another quota, sealed with the state
    /// read, so that the move marks the old cell moved only if no check
    /// changed it since ([`Mortal::forward`]). To be called while the
    /// table the cell names is alive (inside [`Tiered::change`]'s
    /// `carry_all`, or a rebuild under the limiter's one-change-at-a-time
    /// lock, which runs under the store's lock for the cell's shard).
    pub(crate) fn carry(
        &self,
        cell: &TierCell<A::Word>,
        now: impl FnOnce() -> u64,
    ) -> Relocation<TierCell<A::Word>> {
        self.carry_to(cell, None, now)
    }

    /// As [`Tiered::carry`], moving the client to `tier` if given (a
    /// client's move between tiers: its state converted from its old
    /// tier's quota to the new one's by the same rule as a quota change).
    pub(crate) fn carry_to(
        &self,
        cell: &TierCell<A::Word>,
        tier: Option<Tier>,
        now: impl FnOnce() -> u64,
    ) -> Relocation<TierCell<A::Word>> {
        let Relocation::Moved(state, seal) = cell.state.relocate() else {
            return Relocation::Dead;
        };
        // Relaxed: read after the Acquire load of the live word the copy
        // holds, which the claimer (or the rebuild that filled this cell's
        // slot) published with it, so it names the quota that word was
        // written under.
        let old = cell.quota.load(Ordering::Relaxed);
        let tier = tier.unwrap_or_else(|| tier_of(old));
        let pinned = self.table.pin();
        let to = pinned.load().quota(tier);
        let new = Self::quota_word(tier, to);
        let word = state.load();
        if word.life_word() >= NOT_ALIVE || old == new {
            // Not alive yet (its claimer names the quota when it is born),
            // or written under the current quota already.
            return Relocation::Moved(TierCell::with(state, new), seal);
        }
        let from = cell.written_under::<A>(old);
        if from == to {
            // This client's own quota did not change (another tier's did,
            // or it moved to a tier held to the same quota): its state
            // stays exactly as it is, bookings included.
            return Relocation::Moved(TierCell::with(state, new), seal);
        }
        let word = from.convert(word, now(), to);
        Relocation::Moved(TierCell::with(StateCell::holding(word), new), seal)
    }
}

impl<A: fmt::Debug> fmt::Debug for Tiered<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pinned = self.table.pin();
        let tiers: Vec<_> = pinned
            .load()
            .quotas
            .iter()
            .enumerate()
            .filter_map(|(tier, quota)| Some((tier, quota.as_ref()?)))
            .collect();
        f.debug_struct("Tiered").field("tiers", &tiers).finish()
    }
}

/// A tiered client's cell: its state word, and its quota word (see the
/// module docs).
#[doc(hidden)]
pub struct TierCell<W: Packed = u64> {
    /// The client's state, in the crate's one compare-and-swap cell.
    pub(crate) state: StateCell<W>,
    quota: AtomicU64,
}

impl<W: Packed> TierCell<W> {
    fn with(state: StateCell<W>, quota: u64) -> Self {
        Self {
            state,
            quota: AtomicU64::new(quota),
        }
    }

    /// The client's tier.
    pub(crate) fn tier(&self) -> Tier {
        // Relaxed: the tier is written before the cell is shared.
        tier_of(self.quota.load(Ordering::Relaxed))
    }

    /// The quota the quota word `word`, read from this cell after an
    /// `Acquire` load of a live state word (or by the rebuild that froze
    /// one), names.
    #[inline]
    #[allow(unsafe_code)]
    fn written_under<A>(&self, word: u64) -> &A {
        let quota: *const A = core::ptr::with_exposed_provenance((word & ADDRESS_MASK) as usize);
        // SAFETY: a live state word is published (`Release`: its birth in
        // `activate`, or the slot that a rebuild's `carry` filled) after
        // the quota word naming an entry of a table that was published
        // then; the same holds of a word a move carried. That table is
        // retired only after a change has carried every cell naming it over
        // to a newer one (`Tiered::change`), and freed by the epoch
        // collector only once every thread pinned before the retirement
        // has unpinned. Every access to a cell runs pinned (the store's
        // lookups, inserts and rebuilds pin, and so does the check of a
        // client admitted untracked), and a thread reaches a cell naming a
        // retired table only if it found it before the change carried it,
        // so it was pinned before the retirement. The reference lives no
        // longer than `self`'s borrow, inside that pinned access.
        unsafe { &*quota }
    }

    /// The quota this cell's live word was written under; `None` if the
    /// cell has never been alive (its quota word names no quota yet).
    #[inline]
    fn quota<A>(&self) -> Option<&A> {
        // Relaxed: read after the Acquire load of a live word, which the
        // claimer's (or the carrying rebuild's) Release published with it.
        let word = self.quota.load(Ordering::Relaxed);
        (word & ADDRESS_MASK != 0).then(|| self.written_under(word))
    }
}

impl<W: Packed> fmt::Debug for TierCell<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TierCell")
            .field("state", &self.state.load())
            .field("tier", &self.tier())
            .finish()
    }
}

impl<W: Packed> Mortal for TierCell<W> {
    fn life(&self) -> Life {
        self.state.life()
    }

    fn claim(&self) -> Result<(), Life> {
        self.state.claim()
    }

    fn unclaim(&self) {
        self.state.unclaim();
    }

    fn refuse(&self) -> Result<(), Life> {
        self.state.refuse()
    }

    /// A rebuild that changes no quota: the state is copied with its quota
    /// word as it is.
    fn relocate(&self) -> Relocation<Self> {
        match self.state.relocate() {
            // Relaxed: as in `Tiered::carry`.
            Relocation::Moved(state, seal) => {
                Relocation::Moved(Self::with(state, self.quota.load(Ordering::Relaxed)), seal)
            }
            _ => Relocation::Dead,
        }
    }

    fn forward(&self, seal: Seal) -> bool {
        self.state.forward(seal)
    }

    fn retire_sealed(&self, seal: Seal) -> bool {
        self.state.retire_sealed(seal)
    }

    fn refresh(&self, newer: Self) {
        // Relaxed: as in `StateCell::refresh`; the quota word first, though
        // no thread reads either before the `forward` that publishes both.
        self.quota
            .store(newer.quota.load(Ordering::Relaxed), Ordering::Relaxed);
        self.state.refresh(newer.state);
    }
}

impl<A: Transitions + FromParams + Clone + PartialEq> FromParams for Tiered<A>
where
    A::Word: Packed,
{
    fn from_params(params: &Params) -> Result<Self, ConfigError> {
        let default = A::from_params(params)?;
        let tiers = params
            .tiers
            .iter()
            .map(|(tier, p)| Ok((*tier, A::from_params(p).map_err(ConfigError::in_tier)?)))
            .collect::<Result<Vec<_>, ConfigError>>()?;
        Ok(Self::new(default, tiers))
    }

    fn granted(&self) -> (u64, u64) {
        self.quota_of(0).granted()
    }
}

/// The decision on a request of `cost` under `quota`, which may be below
/// the cost: such a request is denied, and changes nothing.
#[inline]
fn admit_within<A: Transitions>(quota: &A, word: A::Word, now: u64, cost: u64) -> Option<A::Word> {
    (cost <= quota.capacity()).then(|| quota.admit(word, now, cost))?
}

impl<A: Transitions + FromParams + Clone + PartialEq> Tiered<A>
where
    A::Word: Packed,
{
    /// The quota a cell that is not (or no longer) alive reads as: its
    /// tier's current one.
    fn current_for(&self, cell: &TierCell<A::Word>) -> A {
        self.quota_of(cell.tier())
    }

    /// Runs `f` on `cell`'s live word and the quota it was written under,
    /// or, for a cell not alive, on the fresh word and its tier's quota now.
    fn read<R>(&self, cell: &TierCell<A::Word>, f: impl FnOnce(A::Word, &A) -> R) -> R {
        let word = cell.state.load();
        if word.life_word() < NOT_ALIVE {
            if let Some(quota) = cell.quota::<A>() {
                return f(word, quota);
            }
        }
        f(A::Word::FRESH, &self.current_for(cell))
    }
}

// Hidden from the docs: its bounds name the crate's internal traits (the
// trait's own docs list the algorithms).
#[doc(hidden)]
impl<A: Transitions + FromParams + Clone + PartialEq> Algorithm for Tiered<A>
where
    A::Word: Packed,
{
    type Cell = TierCell<A::Word>;

    // A fresh tiered cell names its tier's entry in the quota table of the
    // moment it is made: a quota change that carried the shard over before
    // the insert landed would leave it naming a retired table.
    const BORN_BEFORE_INSERT: bool = false;

    fn from_settings(params: &Params) -> Result<Self, ConfigError> {
        <Self as FromParams>::from_params(params)
    }

    fn quota_granted(&self) -> (u64, u64) {
        FromParams::granted(self)
    }

    fn fresh_cell(&self, floor: u64) -> Self::Cell {
        self.fresh_in(0, floor)
    }

    fn unborn_cell(&self, floor: u64) -> Self::Cell {
        self.unborn_in(0, floor)
    }

    fn unborn_in(&self, tier: Tier, _floor: u64) -> Self::Cell {
        // The quota is the claimer's to name, with the fresh word.
        TierCell::with(StateCell::unborn(), u64::from(tier) << ADDRESS_BITS)
    }

    fn fresh_in(&self, tier: Tier, floor: u64) -> Self::Cell {
        let pinned = self.table.pin();
        let quota = pinned.load().quota(tier);
        TierCell::with(
            StateCell::holding(quota.fresh_at(floor)),
            Self::quota_word(tier, quota),
        )
    }

    fn activate(&self, cell: &Self::Cell, floor: u64) {
        let pinned = self.table.pin();
        let tier = cell.tier();
        let quota = pinned.load().quota(tier);
        // Relaxed: published by `bear`'s Release store of the fresh word,
        // which every reader of the quota word loads (Acquire) first.
        cell.quota
            .store(Self::quota_word(tier, quota), Ordering::Relaxed);
        cell.state.bear(quota.fresh_at(floor));
    }

    /// The largest capacity of any tier: a cost above it is an error for
    /// every client; one above the client's own tier's is denied.
    fn capacity(&self) -> u64 {
        // Relaxed: see `note_maxima`.
        self.max_capacity.load(Ordering::Relaxed)
    }

    #[inline]
    fn try_admit(&self, cell: &Self::Cell, now: u64, cost: u64) -> Option<bool> {
        let applied = cell.state.apply(|word| {
            // Read after the Acquire load of the live `word`.
            let quota = cell.quota::<A>()?;
            admit_within(quota, word, now, cost)
        });
        match applied {
            Applied::Admitted(_) => Some(true),
            Applied::Denied(_) => Some(false),
            Applied::Dead => None,
        }
    }

    fn decide(&self, cell: &Self::Cell, now: u64, cost: u64) -> Option<Decision> {
        let applied = cell.state.apply(|word| {
            let quota = cell.quota::<A>()?;
            admit_within(quota, word, now, cost)
        });
        if matches!(applied, Applied::Dead) {
            return None;
        }
        // The quota the transition ran under: the cell's, fixed for life.
        describe_within(cell.quota::<A>()?, applied, now, cost)
    }

    fn peek(&self, cell: &Self::Cell, now: u64, cost: u64) -> Decision {
        self.read(cell, |word, quota| {
            if cost <= quota.capacity() {
                return look(quota, word, now, cost);
            }
            // Above the client's own tier's capacity: never admitted.
            let mut decision =
                describe(quota, Applied::Admitted(word), now, 0).expect("a live word");
            decision.allowed = false;
            decision.retry_after = NEVER;
            decision
        })
    }

    fn quota(&self, cell: &Self::Cell, now: u64) -> Decision {
        self.read(cell, |word, quota| {
            describe(quota, Applied::Admitted(word), now, 0).expect("a live word")
        })
    }

    /// Idle for the longest horizon of any tier, not just its own: a state
    /// that long idle converts to a fresh one under every quota a move can
    /// take it to (the move rule credits an idle state with what the new
    /// quota refills while it stays idle), so forgetting it changes no
    /// decision until the quotas change (a later quota past every one of
    /// them, or one lowered and raised again, may give the forgotten
    /// client at most that quota's capacity more, once: the tiers guide).
    /// One idle for less may still hold less than a fresh client of a
    /// larger quota would.
    fn try_evict(&self, cell: &Self::Cell, now: u64, forgetting: &dyn Fn(u64)) -> bool {
        let Some(judged) = now.checked_sub(self.horizon()) else {
            return false;
        };
        cell.state.try_retire(|word| {
            cell.quota::<A>().is_some_and(|q| {
                let idle = q.is_idle(word, judged);
                if idle {
                    forgetting(q.idle_at(word).saturating_add(self.horizon()));
                }
                idle
            })
        })
    }

    fn force_evict(&self, cell: &Self::Cell) -> bool {
        cell.state.retire()
    }

    fn reset(&self, cell: &Self::Cell, floor: u64) -> Option<bool> {
        let applied = cell
            .state
            .apply(|_| Some(cell.quota::<A>()?.fresh_at(floor)));
        Some(matches!(applied, Applied::Admitted(_)))
    }

    /// As [`Tiered::try_evict`] judges it: a horizon of the longest tier
    /// after the state's own idle instant.
    fn idle_at(&self, cell: &Self::Cell) -> u64 {
        let horizon = self.horizon();
        self.read(cell, |word, quota| {
            quota.idle_at(word).saturating_add(horizon)
        })
    }

    /// The longest horizon of any tier.
    fn horizon(&self) -> u64 {
        // Relaxed: see `note_maxima`.
        self.max_horizon.load(Ordering::Relaxed)
    }

    fn can_reserve(&self) -> bool {
        self.quota_of(0).reserves()
    }

    /// A booking under the quota the client's state was written under,
    /// which is fixed for the cell's life once it is alive: read once,
    /// after a load that shows the cell alive (which the quota word's
    /// publication precedes). A change carrying the cell over marks it
    /// moved, and the booking's exchange then fails: the limiter looks
    /// again.
    fn reserve(&self, cell: &Self::Cell, now: u64, cost: u64, max_wait: u64) -> Option<Booking> {
        if cell.state.load().life_word() >= NOT_ALIVE {
            return None;
        }
        let quota = cell.quota::<A>()?;
        if cost > quota.capacity() {
            // Above the client's own tier's capacity: it never conforms.
            return Some(Booking::TooLong(NEVER));
        }
        super::book(quota, &cell.state, now, cost, max_wait)
    }

    fn unreserve(
        &self,
        cell: &Self::Cell,
        now: u64,
        ticket: &crate::algorithm::Ticket,
    ) -> Option<bool> {
        super::cancel(&cell.state, now, ticket)
    }
}

/// [`describe`] for a cost that may exceed the tier's capacity: such a
/// request is denied and would never pass.
fn describe_within<A: Transitions>(
    quota: &A,
    applied: Applied<A::Word>,
    now: u64,
    cost: u64,
) -> Option<Decision> {
    if cost <= quota.capacity() {
        return describe(quota, applied, now, cost);
    }
    // Figured as a cost of 0, which every state admits: no algorithm is
    // asked for the wait of a cost of 0, which it does not define.
    let word = match applied {
        Applied::Admitted(word) | Applied::Denied(word) => word,
        Applied::Dead => return None,
    };
    let mut decision = describe(quota, Applied::Admitted(word), now, 0)?;
    decision.allowed = false;
    decision.retry_after = NEVER;
    Some(decision)
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use core::time::Duration;

    use super::*;
    use crate::{ManualClock, TokenBucket};

    /// A cost above a client's tier's limit (within another tier's) is
    /// denied for good, for every algorithm: the sliding window counter,
    /// which defines no wait for a cost of 0, is not asked for one.
    #[test]
    fn a_cost_above_the_tiers_limit_is_denied_for_every_algorithm() {
        let second = Duration::from_secs(1);
        let counter = |limit| {
            crate::SlidingWindowCounter::builder()
                .limit(limit)
                .window(second)
        };
        let limiter = counter(2)
            .tier(1, counter(1))
            .tier_by(|key: &String| Tier::from(key.starts_with("pro-")))
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let d = limiter.check_n("pro-a", 2).unwrap();
        assert!(d.is_denied(), "{d:?}");
        assert_eq!((d.limit(), d.remaining()), (1, 1));
        assert_eq!(d.retry_after(), Duration::MAX);
        assert!(limiter.check_n("b", 2).unwrap().is_allowed());
    }

    /// A quota set at run time starts its windows where the limiter's
    /// start: on the Unix epoch's multiples, for a clock whose origin lies
    /// 2 500 ns past the epoch.
    #[test]
    fn a_quota_set_at_run_time_shares_the_limiters_windows() {
        struct Late(ManualClock);
        impl crate::Clock for Late {
            fn now_nanos(&self) -> u64 {
                self.0.now_nanos()
            }
            fn unix_origin(&self) -> Duration {
                Duration::from_nanos(2_500)
            }
        }
        let window = |limit| {
            crate::FixedWindow::builder()
                .limit(limit)
                .window(Duration::from_nanos(1_000))
        };
        let limiter = window(1)
            .reconfigurable()
            .clock(Late(ManualClock::new()))
            .build()
            .unwrap();
        assert!(limiter.allow_request("a"));
        assert_eq!(limiter.check("a").retry_after(), Duration::from_nanos(500));
        limiter.set_quota(0, window(2)).unwrap();
        assert!(limiter.allow_request("b"));
        assert!(limiter.allow_request("b"));
        assert_eq!(limiter.check("b").retry_after(), Duration::from_nanos(500));
    }

    /// Checks on threads racing quota changes: every check reads the quota
    /// its cell names, each change retires the table before it, and no
    /// access outlives its table (run under Miri: see docs/VERIFICATION.md).
    #[test]
    fn checks_racing_changes_read_live_quotas_only() {
        let (keys, changes) = if cfg!(miri) { (8u64, 4u64) } else { (200, 50) };
        let bucket = |tokens| {
            TokenBucket::builder()
                .rate(tokens, Duration::from_secs(1))
                .key_type::<u64>()
        };
        let limiter = bucket(5)
            .tier(1, bucket(7))
            .tier_by(|key: &u64| (*key % 3) as Tier)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let limiter = &limiter;
                s.spawn(move || {
                    for round in 0..changes * 4 {
                        let key = (round * 7 + t) % keys;
                        let decision = limiter.check(&key);
                        // Tier 2 has no quota of its own until the last
                        // changes give it one.
                        assert!(decision.limit() >= 5, "{decision:?}");
                    }
                });
            }
            for change in 0..changes {
                let tier = (change % 3) as Tier;
                limiter.set_quota(tier, bucket(5 + change)).unwrap();
            }
        });
        assert!(limiter.len() as u64 <= keys);
        // After the last change, every tier holds its last quota.
        for key in 0..3u64 {
            let last = (0..changes).filter(|c| c % 3 == key).max().unwrap();
            assert_eq!(limiter.check(&(key + 3 * keys)).limit(), 5 + last);
        }
        for _ in 0..64 {
            crossbeam_epoch::pin().flush();
        }
    }

    #[test]
    fn quota_words_keep_the_tier_beside_the_address() {
        let word = Tiered::<TokenBucket>::quota_word(
            0xBEEF,
            &TokenBucket::new(1, Duration::from_secs(1), 1).unwrap(),
        );
        assert_eq!(tier_of(word), 0xBEEF);
        assert_ne!(word & ADDRESS_MASK, 0);
    }
}
