//! Internals the loom models in `loom-tests/` drive directly. Compiled only
//! with `--features loom`; not part of the API and outside semver.
//!
//! The models check the cell layer (the compare-and-swap loop over each
//! algorithm's pure transition), the store's protocols (lookup-or-insert,
//! and the check-or-insert that eviction races) over a loom-aware stand-in
//! for the map, and eviction's retirement of a cell ([`evict`], the
//! sweep's step for one entry), and a table rebuild's relocation of a
//! cell ([`Mortal::relocate`]), because the store's table is not
//! loom-aware (see `crate::sync::PlainAtomicU64`).
//!
//! The deliberately broken cells and rules the models must catch are not
//! here: they are written in `loom-tests/twins.rs`, over the crate's pure
//! transitions ([`Transitions`]) and its compare-and-swap loop ([`apply`]).

use core::time::Duration;

pub use crate::algorithm::{Reserve, Ticket, Transitions};
pub use crate::cell::{
    Algorithm, Booking, Life, Mortal, Packed, PairCell, Relocation, Seal, StateCell,
};
pub use crate::cell::{LeaseCell, Spent, SpentSlots};
pub use crate::cell::{TierCell, Tiered};
pub use crate::reservation::Renewals;
pub use crate::store::{
    act_on_live, check_or_insert, forget_client, get_or_insert, reset_client, Index, Lapse,
    Newcomer, NoLapse, Purge,
};
use crate::{Both, ConfigError, FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};

/// A validated token bucket of `capacity`, refilled `tokens` per `per`.
///
/// # Errors
///
/// As the builder's.
pub fn token_bucket(tokens: u64, per: Duration, capacity: u64) -> Result<TokenBucket, ConfigError> {
    TokenBucket::new(tokens, per, capacity)
}

/// A validated sliding window counter.
///
/// # Errors
///
/// As the builder's.
pub fn sliding_window_counter(
    limit: u64,
    window: Duration,
) -> Result<SlidingWindowCounter, ConfigError> {
    SlidingWindowCounter::new(limit, window)
}

/// Two limits held together, as `Builder::and` builds them, for the
/// models of a client held to both.
pub fn both<A, B>(first: A, second: B) -> Both<A, B> {
    Both::new(first, second)
}

/// The two words of a pair cell: the first limit's and the second's.
pub fn pair_words(cell: &PairCell) -> (u64, u64) {
    let pair = cell.load();
    (
        crate::algorithm::first(pair),
        crate::algorithm::second(pair),
    )
}

/// A live pair cell holding `first` and `second`.
pub fn pair_cell(first: u64, second: u64) -> PairCell {
    PairCell::holding(crate::algorithm::join(first, second))
}

/// The first limit's word of a pair's state (the low half).
pub fn first_word(pair: u128) -> u64 {
    crate::algorithm::first(pair)
}

/// The second limit's word of a pair's state (the high half).
pub fn second_word(pair: u128) -> u64 {
    crate::algorithm::second(pair)
}

/// A pair's state from its two words.
pub fn join_words(first: u64, second: u64) -> u128 {
    crate::algorithm::join(first, second)
}

/// Runs `transition` through a cell's own compare-and-swap loop
/// (`StateCell::apply`), as a check does: `Some(Some(state))` with the
/// state it wrote, `Some(None)` if it refused the state (nothing written),
/// `None` if the cell is not alive. For the models' own transitions (the
/// broken rules in `loom-tests/twins.rs` among them).
pub fn apply<W: Packed>(
    cell: &StateCell<W>,
    transition: impl Fn(W) -> Option<W>,
) -> Option<Option<W>> {
    match cell.apply(transition) {
        crate::cell::Applied::Admitted(state) => Some(Some(state)),
        crate::cell::Applied::Denied(_) => Some(None),
        crate::cell::Applied::Dead => None,
    }
}

/// A booking's states, widened: before it and after it.
pub fn ticket_states(ticket: &Ticket) -> (u128, u128) {
    (ticket.from, ticket.to)
}

/// A validated fixed window.
///
/// # Errors
///
/// As the builder's.
pub fn fixed_window(limit: u64, window: Duration) -> Result<FixedWindow, ConfigError> {
    FixedWindow::new(limit, window)
}

/// A validated sliding window log.
///
/// # Errors
///
/// As the builder's.
pub fn sliding_window_log(limit: u64, window: Duration) -> Result<SlidingWindowLog, ConfigError> {
    SlidingWindowLog::new(limit, window)
}

/// The sliding window log's cell: a slot per admission, each claimed by
/// its own compare-and-swap.
pub type LogCell = <SlidingWindowLog as Algorithm>::Cell;

/// The expiry slot `index` of a log cell holds.
pub fn log_slot(cell: &LogCell, index: usize) -> u64 {
    // Acquire: as the log's own slot loads (pairs with the exchange that
    // wrote the slot).
    cell.slot(index).load(crate::sync::Ordering::Acquire)
}

/// Stores `expiry` in slot `index` of a log cell, whatever it holds: for
/// the models' own (broken) rules, never what the log itself does.
pub fn store_log_slot(cell: &LogCell, index: usize, expiry: u64) {
    // Release: as the log's own claims publish a slot.
    cell.slot(index)
        .store(expiry, crate::sync::Ordering::Release);
}

/// The slots a log booking claimed, each with the expiry it held before.
pub fn log_claims(ticket: &Ticket) -> Vec<(usize, u64)> {
    ticket.claims.as_deref().unwrap_or_default().to_vec()
}

/// The log's pure rules, for the models' own log cells: the expiry an
/// admission at `now` writes, and whether a slot holding `expiry` is free
/// at `now`.
pub fn log_stamp(log: &SlidingWindowLog, now: u64) -> u64 {
    log.stamp(now)
}

/// See [`log_stamp`].
pub fn log_is_free(log: &SlidingWindowLog, expiry: u64, now: u64) -> bool {
    log.is_free(expiry, now)
}

/// The log's limit: how many slots it holds.
pub fn log_limit(log: &SlidingWindowLog) -> u64 {
    log.limit()
}

/// One step of a sweep, as the limiter runs it for each entry it visits:
/// retire `key`'s cell if it is idle at `now`, then remove the entry only
/// if the cell it holds is dead. True iff this call retired the cell.
///
/// (The limiter's sweeps do the same while holding the shard's lock,
/// removing that very entry.)
pub fn evict<A, I>(algorithm: &A, index: &I, key: &str, now: u64, forgetting: &dyn Fn(u64)) -> bool
where
    A: Algorithm,
    I: Purge<String, A::Cell>,
{
    let retired = index
        .with(key, |cell| algorithm.try_evict(cell, now, forgetting))
        .unwrap_or(false);
    if retired {
        let _ = index.remove_if(key, Mortal::is_dead);
    }
    retired
}

/// A tiered token bucket with every client in tier 0, whose quota the
/// models change with [`change_quota`].
pub fn tiered(quota: TokenBucket) -> Tiered<TokenBucket> {
    Tiered::new(quota, Vec::new())
}

/// The quota a tier's clients are held to now, as the table stands.
pub fn tier_quota_now(tiered: &Tiered<TokenBucket>, tier: u16) -> TokenBucket {
    tiered.quota_of(tier)
}

/// A tiered client's state cell.
pub fn tier_state(cell: &TierCell) -> &StateCell {
    &cell.state
}

/// A quota change (`Limiter::set_quota`): publishes tier 0's new quota,
/// then runs `carry_all`, which carries each cell over as a rebuild
/// relocates it, with [`carry`].
pub fn change_quota(tiered: &Tiered<TokenBucket>, quota: TokenBucket, carry_all: impl FnOnce()) {
    tiered.change(0, quota, carry_all);
}

/// A quota change's relocation of one cell, converting its word at `now`.
pub fn carry(tiered: &Tiered<TokenBucket>, cell: &TierCell, now: u64) -> Relocation<TierCell> {
    tiered.carry(cell, || now)
}

/// Whether the caller runs inside a loom model: what decides, when each of
/// the crate's atomics is made, whether it is loom's or std's (see
/// `src/sync.rs`). For the loom tests that check that decision.
pub fn in_model() -> bool {
    crate::sync::in_model()
}

/// A lease's pure transitions (`crate::algorithm::lease`), for the broken
/// lease cells of `loom-tests/twins.rs`, which run them through
/// [`apply`] on `StateCell<u128>`s (the lease's word and the range
/// waiting behind it) with one thing wrong. `interval` is
/// the interval of one unit, µs, as [`LeaseCell::new`] takes it.
pub mod lease {
    use crate::algorithm::lease::{Grant, Lease, Parts, Short};

    use super::Spent;

    fn lease(interval: u64) -> Lease {
        Lease {
            interval: interval.max(1),
        }
    }

    /// An empty lease's word (epoch 0), as [`super::LeaseCell::new`] holds.
    pub fn empty() -> u128 {
        Parts::of(0).word()
    }

    /// The word's parts: `(cursor, end, epoch)`.
    pub fn parts(word: u128) -> (u64, u64, u64) {
        let p = Parts::of(word);
        (p.cursor, p.end, p.epoch)
    }

    /// A spend of `cost` at `now`: the word after, if admitted.
    pub fn spend(interval: u64, word: u128, now: u64, cost: u64) -> Option<u128> {
        lease(interval).spend(word, now, cost)
    }

    /// What a spend denied on `word` at `now` answers, as the cell's.
    pub fn short(interval: u64, word: u128, now: u64) -> Spent {
        match lease(interval).short(word, now) {
            Short::Held(until) => Spent::Held { until },
            Short::Ask(epoch) => Spent::Ask { epoch },
        }
    }

    /// The whole units spendable at `now`.
    pub fn left(interval: u64, word: u128, now: u64) -> u64 {
        lease(interval).left(word, now)
    }

    /// Installs the slots `[start, end)` granted to a request asked at
    /// `asked`: the word after and the unpassed units displaced.
    pub fn grant(
        interval: u64,
        word: u128,
        now: u64,
        asked: u64,
        start: u64,
        end: u64,
    ) -> Option<(u128, Option<(u64, u64)>)> {
        lease(interval).install(word, now, asked, Grant::Range { start, end })
    }

    /// Places the granted range `[start, end)` in `word`, as a grant does
    /// first: the word after and the unpassed units displaced, or `None`
    /// if the word still holds a unit the range does not continue (then
    /// the range waits behind it: [`queue`]).
    pub fn place(
        interval: u64,
        word: u128,
        now: u64,
        start: u64,
        end: u64,
    ) -> Option<(u128, Option<(u64, u64)>)> {
        lease(interval).place(word, now, start, end)
    }

    /// Puts the granted range `[start, end)` in the word of the range
    /// waiting behind a lease (`queued`): the word after and the unpassed
    /// units of a waiting range it replaced.
    pub fn queue(
        interval: u64,
        queued: u128,
        now: u64,
        start: u64,
        end: u64,
    ) -> (u128, Option<(u64, u64)>) {
        lease(interval).queue(queued, now, start, end)
    }

    /// Takes the range waiting behind a lease: the empty word and the
    /// range, or `None` if none waits.
    pub fn unqueue(queued: u128) -> Option<(u128, (u64, u64))> {
        Lease::unqueue(queued)
    }

    /// Moves the range `[start, end)` taken from behind the lease into
    /// its place for a spend of `need`: the word after and the range
    /// displaced, or `None` if the lease holds `need` units by now.
    pub fn promote(
        interval: u64,
        word: u128,
        now: u64,
        need: u64,
        start: u64,
        end: u64,
    ) -> Option<(u128, Option<(u64, u64)>)> {
        lease(interval).promote(word, now, need, (start, end))
    }

    /// The word of a range waiting behind the lease, `[start, end)`.
    pub fn waiting(start: u64, end: u64) -> u128 {
        Lease::waiting((start, end))
    }

    /// Installs "nothing until `until`" answered to a request asked at
    /// `asked`: the hold's word, or `None` if it changes nothing.
    pub fn nothing(interval: u64, word: u128, now: u64, asked: u64, until: u64) -> Option<u128> {
        lease(interval)
            .install(word, now, asked, Grant::Nothing { until })
            .map(|(next, _)| next)
    }

    /// A reset's word after `word`.
    pub fn reset(word: u128) -> u128 {
        Lease::reset(word)
    }

    /// A take-out at `now`: the empty word after, and the unpassed units.
    pub fn take_out(interval: u64, word: u128, now: u64) -> (u128, Option<(u64, u64)>) {
        lease(interval).take_out(word, now)
    }
}
