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
//! The deliberately broken cells the models must catch are here too:
//! [`StateCell::new_racy`] for the word algorithms and [`racy_log_cell`] for
//! the sliding window log.

use core::time::Duration;

pub use crate::algorithm::Ticket;
pub use crate::cell::{Algorithm, Booking, Life, Mortal, PairCell, Relocation, Seal, StateCell};
pub use crate::cell::{TierCell, Tiered};
pub use crate::store::{
    act_on_live, check_or_insert, forget_client, get_or_insert, reset_client, Index, Newcomer,
    Purge,
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

/// The bug the pair-booking model must catch: a booking of `cost` at
/// `now` that settles its ready time on one look at the pair, then charges
/// each limit by its own compare-and-swap loop, booking that limit for the
/// ready time it settled on (the other half left as each loop finds it).
/// A check that lands between the look and the charges is missed by the
/// ready time: both can take one limit's last unit. Answers the ready time
/// it reports.
pub fn book_pair_apart(
    pair: &Both<TokenBucket, FixedWindow>,
    cell: &PairCell,
    now: u64,
    cost: u64,
) -> u64 {
    use crate::algorithm::{first, join, second, Reserve, Transitions, WordAlgorithm};
    let seen = cell.load();
    let ready_at = now + Transitions::retry_after(pair, seen, now, cost);
    let booked = |limit: &dyn Fn(u64) -> Reserve, word: u64| match limit(word) {
        Reserve::At { word, .. } => Some(word),
        Reserve::Never => None,
    };
    let _ = cell.apply(|p| {
        booked(
            &|w| WordAlgorithm::reserve(pair.first(), w, ready_at, cost),
            first(p),
        )
        .map(|a| join(a, second(p)))
    });
    let _ = cell.apply(|p| {
        booked(
            &|w| WordAlgorithm::reserve(pair.second(), w, ready_at, cost),
            second(p),
        )
        .map(|b| join(first(p), b))
    });
    ready_at
}

/// The bug the pair-cancellation model must catch: give a pair booking's
/// charge back by subtracting it from the pair's state, whether or not the
/// booking is still the tail. The exchange itself is atomic (the one CAS
/// loop); the rule it applies is what is wrong.
pub fn give_back_pair_blindly(cell: &PairCell, ticket: &Ticket) {
    let charge = ticket.to - ticket.from;
    let _ = cell.apply(|p| Some(p.wrapping_sub(charge)));
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

/// A deliberately broken cell for `log`, as [`Algorithm::new_cell`] would
/// make but with each slot claimed by a load followed by a store instead of
/// a compare-and-swap: two threads can both be admitted on one free slot.
/// Everything else (the count, the give-back, eviction's handshake) is the
/// real code.
pub fn racy_log_cell(log: &SlidingWindowLog) -> LogCell {
    log.new_racy_cell()
}

/// The broken cancellation the log's booking model must catch: put back
/// every slot `ticket`'s booking claimed, whatever each holds now, instead
/// of only those that still hold the booking's own expiry.
pub fn unbook_log_blindly(cell: &LogCell, ticket: &Ticket) {
    cell.unbook_blindly(ticket);
}

/// One step of a sweep, as the limiter runs it for each entry it visits:
/// retire `key`'s cell if it is idle at `now`, then remove the entry only
/// if the cell it holds is dead. True iff this call retired the cell.
///
/// (The limiter's sweeps do the same while holding the shard's lock,
/// removing that very entry.)
pub fn evict<A, I>(algorithm: &A, index: &I, key: &str, now: u64) -> bool
where
    A: Algorithm,
    I: Purge<String, A::Cell>,
{
    let retired = index
        .with(key, |cell| algorithm.try_evict(cell, now))
        .unwrap_or(false);
    if retired {
        let _ = index.remove_if(key, Mortal::is_dead);
    }
    retired
}

/// The bug the eviction model must catch: an evictor that checks that the
/// cell is idle and then removes the entry, with no tombstone in between.
/// A check that admits between the two is lost with the entry.
pub fn evict_without_tombstone<A, I>(algorithm: &A, index: &I, key: &str, now: u64) -> bool
where
    A: Algorithm,
    I: Purge<String, A::Cell>,
{
    let idle = index
        .with(key, |cell| algorithm.idle_at(cell) <= now)
        .unwrap_or(false);
    idle && index.remove_if(key, |_| true)
}

/// A tiered token bucket with every client in tier 0, whose quota the
/// models change with [`change_quota`].
pub fn tiered(quota: TokenBucket) -> Tiered<TokenBucket> {
    Tiered::single(quota)
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

/// The broken twin of a tiered check: see `Tiered::reading_quotas_first`.
pub fn check_reading_quotas_first(
    tiered: &Tiered<TokenBucket>,
) -> impl Fn(&TierCell, u64) -> Option<bool> {
    tiered.reading_quotas_first()
}

/// Whether the caller runs inside a loom model: what decides, when each of
/// the crate's atomics is made, whether it is loom's or std's (see
/// `src/sync.rs`). For the loom tests that check that decision.
pub fn in_model() -> bool {
    crate::sync::in_model()
}
