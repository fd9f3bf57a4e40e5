//! Quotas per client and quotas that change at run time: [`Tiered`].
//!
//! # The cell
//!
//! A tiered client's cell is its state word (a [`StateCell`], run by the
//! same compare-and-swap loop as any word algorithm's) and a *tag* word:
//! the client's tier (16 bits, chosen once when the client's state is
//! created) and the *generation* of the quota table its word was last
//! written under (48 bits, wrapping). The tag is written while the cell is
//! not alive (its creator writes the tier; its claimer the generation,
//! before the fresh word is born with a `Release` store) and never again:
//! a cell's state moves to a new quota only by being frozen and carried to
//! a new cell, as a table rebuild moves it.
//!
//! # Changing a quota
//!
//! The quotas live in one table behind a [`Published`] pointer: for each
//! tier the current quota and the one before. Changing one (the limiter's
//! `set_quota`, one change at a time) publishes a table one generation on,
//! then rebuilds every shard of the store, and each live cell of the old
//! generation is frozen (its word exchanged for the tombstone, exactly as a
//! rebuild freezes it) and carried to a new cell of the new generation with
//! its word converted by the algorithm's rule (`WordAlgorithm::convert`).
//!
//! A check reads the tag, then the table, *inside* its transition, after
//! the `Acquire` load of the word it transforms. So:
//!
//! - a word of the new generation was carried after the table was
//!   published, and the check's table load sees that table or a later one,
//!   in which the generation is current or the one before: the check
//!   decides under the new quota;
//! - a word of the old generation is decided under the old quota (it is
//!   the previous one in any table the check can load, since the next
//!   change publishes only once every old cell has been carried); if it is
//!   frozen meanwhile, the check's exchange fails against the tombstone and
//!   it looks the client up again, finding the converted cell.
//!
//! Each client's change is therefore one step in its history: every check
//! lands wholly before it, under the old quota, or wholly after, under the
//! new one, and the conversion carries exactly the state the last check
//! before it left. A check never waits for a change, except one that meets
//! a frozen cell, which looks again after the shard's rebuild.

use core::fmt;

use super::{describe, Algorithm, Applied, Booking, Life, Mortal, Relocation, StateCell};
use crate::algorithm::{FromParams, Params, WordAlgorithm, NEVER, UNBORN};
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::sync::{AtomicU64, Ordering, Pinned, Published};

/// A client's tier: which quota of a [`Tiered`] limiter it is held to.
/// Tier 0 is the builder's own quota; a tier with no quota of its own is
/// held to tier 0's.
pub type Tier = u16;

/// Bits of the tag that hold the generation.
const GEN_BITS: u32 = 48;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;

fn tag(tier: Tier, generation: u64) -> u64 {
    (u64::from(tier) << GEN_BITS) | (generation & GEN_MASK)
}

fn tier_of(tag: u64) -> Tier {
    // The top 16 bits: fits.
    (tag >> GEN_BITS) as Tier
}

/// The quotas of every tier, at one generation.
#[derive(Clone)]
struct Table<A> {
    generation: u64,
    /// Indexed by tier; `None` is held to tier 0's quota.
    current: Vec<Option<A>>,
    /// The quotas of the generation before: the words of cells not yet
    /// carried over to this one are read under these.
    previous: Vec<Option<A>>,
}

impl<A> Table<A> {
    fn pick(list: &[Option<A>], tier: Tier) -> &A {
        match list.get(usize::from(tier)) {
            Some(Some(quota)) => quota,
            _ => list[0].as_ref().expect("tier 0 always has a quota"),
        }
    }

    /// The quota a word written under `tag` is read under.
    fn quota(&self, tag: u64) -> &A {
        let generation = tag & GEN_MASK;
        let list = if generation == self.generation.wrapping_sub(1) & GEN_MASK {
            &self.previous
        } else {
            // The current generation; or a cell that has just been frozen
            // by a change since, whose exchange will fail (see the module
            // docs): any quota serves for a transition whose result is
            // discarded.
            &self.current
        };
        Self::pick(list, tier_of(tag))
    }

    fn current(&self, tier: Tier) -> &A {
        Self::pick(&self.current, tier)
    }
}

/// An algorithm whose clients each have a tier, and whose tiers' quotas can
/// change while it runs: what a limiter built with
/// [`Builder::tier`](crate::Builder::tier),
/// [`tier_by`](crate::Builder::tier_by) or
/// [`reconfigurable`](crate::Builder::reconfigurable) runs. `A` is the
/// algorithm of every tier: a [`TokenBucket`](crate::TokenBucket), a
/// [`FixedWindow`](crate::FixedWindow) or a
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter).
///
/// Memory per client is one more `u64` than `A`'s (the tier and the
/// generation of quotas its state was written under); a check on a known
/// client reads its tier's quota from a shared table and calls nothing of
/// the caller's.
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
}

impl<A: WordAlgorithm + Clone> Tiered<A> {
    pub(crate) fn new(default: A, tiers: Vec<(Tier, A)>) -> Self {
        let len = tiers
            .iter()
            .map(|&(tier, _)| usize::from(tier) + 1)
            .max()
            .unwrap_or(1);
        let mut current = vec![None; len];
        current[0] = Some(default);
        for (tier, quota) in tiers {
            current[usize::from(tier)] = Some(quota);
        }
        Self {
            table: Published::new(Table {
                generation: 0,
                previous: current.clone(),
                current,
            }),
        }
    }

    /// Publishes a table one generation on, with `quota` for `tier`. The
    /// caller then carries every live cell over ([`Tiered::carry`]) before
    /// any further change.
    pub(crate) fn publish(&self, tier: Tier, quota: A) {
        let pinned = self.table.pin();
        let old = pinned.load();
        let mut current = old.current.clone();
        if current.len() <= usize::from(tier) {
            current.resize(usize::from(tier) + 1, None);
        }
        current[usize::from(tier)] = Some(quota);
        self.table.replace(Table {
            generation: (old.generation + 1) & GEN_MASK,
            previous: old.current.clone(),
            current,
        });
    }

    /// The quota `tier` is held to now.
    pub(crate) fn quota_of(&self, tier: Tier) -> A {
        self.table.pin().load().current(tier).clone()
    }

    /// What a rebuild carrying cells to the current generation puts in
    /// `cell`'s place: its state frozen, and carried over with its word
    /// converted at `now()` (read after the freeze) if it was written
    /// under an earlier quota.
    pub(crate) fn carry(&self, cell: &TierCell, now: impl FnOnce() -> u64) -> Relocation<TierCell> {
        let Relocation::Moved(state) = cell.state.relocate() else {
            return Relocation::Dead;
        };
        // Relaxed: the freeze's exchange (AcqRel) read the word the tag was
        // published with, so the tag is the one that word was written under.
        let old = cell.tag.load(Ordering::Relaxed);
        let pinned = self.table.pin();
        let table = pinned.load();
        let new = tag(tier_of(old), table.generation);
        let word = state.load();
        if word >= UNBORN || old == new {
            // Not alive yet (its claimer tags it when it is born), or
            // written under the current quotas already.
            return Relocation::Moved(TierCell::with(state, new));
        }
        let to = table.current(tier_of(old));
        let word = table.quota(old).convert(word, now(), to);
        Relocation::Moved(TierCell::with(StateCell::holding(word), new))
    }

    /// The largest capacity of any tier.
    fn max_of(&self, f: impl Fn(&A) -> u64) -> u64 {
        let pinned = self.table.pin();
        let table = pinned.load();
        table.current.iter().flatten().map(f).max().unwrap_or(0)
    }

    /// Runs one attempt of `transition` under the quota `cell`'s word was
    /// written under: to be called inside the CAS loop, after the word's
    /// `Acquire` load.
    #[inline]
    fn under<'p, R>(
        pinned: &'p Pinned<'_, Table<A>>,
        cell: &TierCell,
        f: impl FnOnce(&'p A) -> R,
    ) -> R {
        // Relaxed: read after the Acquire load of a live word, which the
        // claimer's (or the carrying rebuild's) Release published with it.
        f(pinned.load().quota(cell.tag.load(Ordering::Relaxed)))
    }
}

impl<A: fmt::Debug> fmt::Debug for Tiered<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pinned = self.table.pin();
        let table = pinned.load();
        let tiers: Vec<_> = table
            .current
            .iter()
            .enumerate()
            .filter_map(|(tier, quota)| Some((tier, quota.as_ref()?)))
            .collect();
        f.debug_struct("Tiered")
            .field("generation", &table.generation)
            .field("tiers", &tiers)
            .finish()
    }
}

/// A tiered client's cell: its state word, and its tier and quota
/// generation (see the module docs).
#[doc(hidden)]
pub struct TierCell {
    state: StateCell,
    tag: AtomicU64,
}

impl TierCell {
    fn with(state: StateCell, tag: u64) -> Self {
        Self {
            state,
            tag: AtomicU64::new(tag),
        }
    }

    /// The client's tier.
    pub(crate) fn tier(&self) -> Tier {
        // Relaxed: the tier is written before the cell is shared.
        tier_of(self.tag.load(Ordering::Relaxed))
    }
}

impl fmt::Debug for TierCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TierCell")
            .field("state", &self.state.load())
            .field("tier", &self.tier())
            .finish()
    }
}

impl Mortal for TierCell {
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

    /// A rebuild that changes no quota: the state is frozen and carried
    /// with its tag as it is.
    fn relocate(&self) -> Relocation<Self> {
        match self.state.relocate() {
            // Relaxed: as in `Tiered::carry`.
            Relocation::Moved(state) => {
                Relocation::Moved(Self::with(state, self.tag.load(Ordering::Relaxed)))
            }
            _ => Relocation::Dead,
        }
    }
}

impl<A: WordAlgorithm + FromParams + Clone> FromParams for Tiered<A> {
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

impl<A: WordAlgorithm + FromParams + Clone> Algorithm for Tiered<A> {
    type Cell = TierCell;

    fn fresh_cell(&self, floor: u64) -> TierCell {
        self.fresh_in(0, floor)
    }

    fn unborn_cell(&self, floor: u64) -> TierCell {
        self.unborn_in(0, floor)
    }

    fn unborn_in(&self, tier: Tier, _floor: u64) -> TierCell {
        // The generation is the claimer's to write, with the fresh word.
        TierCell::with(StateCell::unborn(), tag(tier, 0))
    }

    fn fresh_in(&self, tier: Tier, floor: u64) -> TierCell {
        let pinned = self.table.pin();
        let table = pinned.load();
        let word = table.current(tier).fresh_at(floor);
        TierCell::with(StateCell::holding(word), tag(tier, table.generation))
    }

    fn activate(&self, cell: &TierCell, floor: u64) {
        let pinned = self.table.pin();
        let table = pinned.load();
        let tier = cell.tier();
        // Relaxed: published by `bear`'s Release store of the fresh word,
        // which every reader of the tag loads (Acquire) first.
        cell.tag
            .store(tag(tier, table.generation), Ordering::Relaxed);
        cell.state.bear(table.current(tier).fresh_at(floor));
    }

    /// The largest capacity of any tier: a cost above it is an error for
    /// every client; one above the client's own tier's is denied.
    fn capacity(&self) -> u64 {
        self.max_of(|quota| quota.capacity())
    }

    #[inline]
    fn try_admit(&self, cell: &TierCell, now: u64, cost: u64) -> Option<bool> {
        let pinned = self.table.pin();
        let applied = cell.state.apply(|word| {
            Self::under(&pinned, cell, |quota| {
                (cost <= quota.capacity()).then(|| quota.admit(word, now, cost))?
            })
        });
        match applied {
            Applied::Admitted(_) => Some(true),
            Applied::Denied(_) => Some(false),
            Applied::Dead => None,
        }
    }

    fn decide(&self, cell: &TierCell, now: u64, cost: u64) -> Option<Decision> {
        let pinned = self.table.pin();
        // The quota the last attempt ran under: the one that decided.
        let used = core::cell::Cell::new(None);
        let applied = cell.state.apply(|word| {
            Self::under(&pinned, cell, |quota| {
                used.set(Some(quota));
                (cost <= quota.capacity()).then(|| quota.admit(word, now, cost))?
            })
        });
        let quota = used.get()?;
        describe_within(quota, applied, now, cost)
    }

    fn peek(&self, cell: &TierCell, now: u64, cost: u64) -> Decision {
        let pinned = self.table.pin();
        let word = cell.state.live_word();
        Self::under(&pinned, cell, |quota| {
            let applied = match (cost <= quota.capacity()).then(|| quota.admit(word, now, cost)) {
                Some(Some(next)) => Applied::Admitted(next),
                _ => Applied::Denied(word),
            };
            describe_within(quota, applied, now, cost).expect("a live word is never dead")
        })
    }

    fn quota(&self, cell: &TierCell, now: u64) -> Decision {
        let pinned = self.table.pin();
        let word = cell.state.live_word();
        Self::under(&pinned, cell, |quota| {
            describe(quota, Applied::Admitted(word), now, 0).expect("a live word")
        })
    }

    fn try_evict(&self, cell: &TierCell, now: u64) -> bool {
        let pinned = self.table.pin();
        cell.state
            .try_retire(|word| Self::under(&pinned, cell, |quota| quota.is_idle(word, now)))
    }

    fn force_evict(&self, cell: &TierCell) -> bool {
        cell.state.retire()
    }

    fn reset(&self, cell: &TierCell, floor: u64) -> Option<bool> {
        let pinned = self.table.pin();
        let applied = cell
            .state
            .apply(|_| Self::under(&pinned, cell, |quota| Some(quota.fresh_at(floor))));
        Some(matches!(applied, Applied::Admitted(_)))
    }

    fn idle_at(&self, cell: &TierCell) -> u64 {
        let pinned = self.table.pin();
        let word = cell.state.live_word();
        Self::under(&pinned, cell, |quota| quota.idle_at(word))
    }

    /// The longest horizon of any tier.
    fn horizon(&self) -> u64 {
        self.max_of(|quota| quota.horizon())
    }

    fn reserve(&self, _: &TierCell, _: u64, _: u64, _: u64) -> Option<Booking> {
        Some(Booking::Unsupported)
    }
}

/// [`describe`] for a cost that may exceed the tier's capacity: such a
/// request is denied and would never pass.
fn describe_within<A: WordAlgorithm>(
    quota: &A,
    applied: Applied,
    now: u64,
    cost: u64,
) -> Option<Decision> {
    if cost <= quota.capacity() {
        return describe(quota, applied, now, cost);
    }
    let mut decision = describe(quota, applied, now, 0)?;
    decision.allowed = false;
    decision.retry_after = Decision::wait(NEVER);
    Some(decision)
}

#[cfg(feature = "loom")]
impl<A: WordAlgorithm + FromParams + Clone> Tiered<A> {
    /// A tiered algorithm whose every client is held to `quota`, for the
    /// loom models.
    pub(crate) fn single(quota: A) -> Self {
        Self::new(quota, Vec::new())
    }

    /// The broken twin of [`Algorithm::try_admit`] the loom models must
    /// catch: the quota table is read once, before the client is looked up
    /// (as a plain limiter reads its one quota), instead of inside the
    /// transition after the word's `Acquire` load. A check that read the
    /// table before a change and finds the cell the change carried decides
    /// the new state under the old quota.
    pub(crate) fn reading_quotas_first(&self) -> impl Fn(&TierCell, u64) -> Option<bool> {
        let table = self.table.pin().load().clone();
        move |cell, now| {
            let quota = table.quota(cell.tag.load(Ordering::Relaxed));
            match cell.state.apply(|word| quota.admit(word, now, 1)) {
                Applied::Admitted(_) => Some(true),
                Applied::Denied(_) => Some(false),
                Applied::Dead => None,
            }
        }
    }
}
