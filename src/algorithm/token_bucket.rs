//! The token bucket, as GCRA (the generic cell rate algorithm).
//!
//! # The word
//!
//! ```text
//!  63                                                              0
//! +----------------------------------------------------------------+
//! |        TAT: theoretical arrival time, ns since clock origin     |
//! +----------------------------------------------------------------+
//! ```
//!
//! A bucket of `capacity` tokens refilled continuously at one token per
//! `interval` ns holds, at time `now`,
//! `min(capacity, capacity − (TAT − now) / interval)` tokens: TAT is the
//! instant at which the bucket will be full again. One number in virtual time
//! thus replaces the pair (tokens, last refill), and
//!
//! * a request of cost `n` is admitted iff `TAT − now ≤ (capacity − n)·interval`,
//!   and then `TAT ← max(TAT, now) + n·interval`;
//! * a fresh client is TAT = 0, a full bucket at any time;
//! * an idle gap of any length is `max(TAT, now)`: no wraparound, no
//!   accumulated rounding, so a slow rate refills however often it is checked.
//!
//! # Ranges
//!
//! `now` is clamped to [`NOW_MAX`] = 2<sup>63</sup> − 1, and the builder keeps
//! `capacity · interval ≤ NOW_MAX − 4`, so TAT never exceeds
//! [`WORD_MAX`] = 2<sup>64</sup> − 6 (the five words above it say that a
//! cell is not alive) and no step overflows.
//!
//! # Rounding
//!
//! `interval = ceil(per / tokens)` in ns. When `per` is a whole multiple of
//! `tokens` ns (always so for whole-microsecond intervals) every decision is
//! exact. Otherwise each token costs up to 1 ns more than the exact rate, so
//! rounding only ever denies, never over-admits.

use core::fmt;
use core::time::Duration;

use super::{clamp_now, until, Reserve, WordAlgorithm, FRESH, NOW_MAX, WORD_MAX};

/// The longest refill of a full bucket, `capacity · interval`: so that TAT,
/// at most `NOW_MAX` plus this, stays a live word (at most [`WORD_MAX`]).
const REFILL_MAX: u64 = WORD_MAX - NOW_MAX;
use crate::error::ConfigError;

/// The token bucket algorithm: bursts of up to `capacity`, refilled
/// continuously at `rate`.
///
/// Build a limiter with [`TokenBucket::builder`]. A new client starts with a
/// full bucket; memory per client is one `u64`.
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
///     .capacity(2)
///     .clock(clock.clone())
///     .build()?;
/// assert!(limiter.allow_request("alice"));
/// assert!(limiter.allow_request("alice"));
/// assert!(!limiter.allow_request("alice"));
/// clock.advance(Duration::from_secs(1));
/// assert!(limiter.allow_request("alice"));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    /// Nanoseconds per token, rounded up.
    interval: u64,
    capacity: u64,
}

impl TokenBucket {
    /// Validates a rate of `tokens` per `per` and a capacity.
    pub(crate) fn new(tokens: u64, per: Duration, capacity: u64) -> Result<Self, ConfigError> {
        let per = per.as_nanos();
        // A token's interval, per / tokens rounded up, must leave room for a
        // bucket of one (`capacity` ≥ 1): at most `REFILL_MAX` ns. So the
        // period's bound depends on the tokens (checked next, at least 1).
        let max_per = u128::from(REFILL_MAX)
            .saturating_mul(u128::from(tokens.max(1)))
            .min(u128::from(NOW_MAX));
        ConfigError::check_range(
            "rate",
            per,
            (1, max_per),
            "ns",
            "the rate's period must be at least 1 ns and at most 2^63 - 1 ns (292 years), and one token's share of it at most 2^63 - 5 ns",
        )?;
        ConfigError::check_range(
            "rate",
            u128::from(tokens),
            (1, per),
            "tokens",
            "a rate adds at least 1 token per period and at most 1 token per nanosecond",
        )?;
        // per ≤ NOW_MAX and tokens ≥ 1, so both fit and the quotient is ≥ 1.
        let per = per as u64;
        let interval = per.div_ceil(tokens);
        ConfigError::check_range(
            "capacity",
            u128::from(capacity),
            (1, u128::from(REFILL_MAX / interval)),
            "tokens",
            "the time to refill a full bucket, capacity × (per / tokens), must fit in 2^63 - 5 ns",
        )?;
        Ok(Self { interval, capacity })
    }

    /// Nanoseconds per token, rounded up.
    #[cfg(all(test, not(feature = "loom")))]
    pub(crate) fn interval(&self) -> u64 {
        self.interval
    }

    /// How far TAT may run ahead of `now` for a request of `cost` to pass.
    #[inline]
    fn tolerance(&self, cost: u64) -> u64 {
        // cost ≤ capacity, and capacity · interval ≤ REFILL_MAX.
        (self.capacity - cost) * self.interval
    }
}

impl fmt::Debug for TokenBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucket")
            .field("interval", &Duration::from_nanos(self.interval))
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl WordAlgorithm for TokenBucket {
    #[inline]
    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn fresh_at(&self, floor: u64) -> u64 {
        // A full bucket at `floor`, and emptier before it: TAT is the
        // instant from which the bucket is full.
        clamp_now(floor)
    }

    #[inline]
    fn admit(&self, tat: u64, now: u64, cost: u64) -> Option<u64> {
        let now = clamp_now(now);
        let tat = tat.max(now);
        // tat ≥ now; past the test, tat + cost·interval ≤ now +
        // capacity·interval ≤ NOW_MAX + REFILL_MAX: no overflow.
        if tat - now <= self.tolerance(cost) {
            Some(tat + cost * self.interval)
        } else {
            None
        }
    }

    fn remaining(&self, tat: u64, now: u64) -> u64 {
        let now = clamp_now(now);
        let debt = tat.saturating_sub(now);
        // Tokens missing from a full bucket, rounded up: a token is usable
        // only once it has wholly refilled.
        self.capacity.saturating_sub(debt.div_ceil(self.interval))
    }

    fn retry_after(&self, tat: u64, now: u64, cost: u64) -> u64 {
        let now = clamp_now(now);
        let wait = tat.saturating_sub(now).saturating_sub(self.tolerance(cost));
        // now ≤ NOW_MAX and wait < 2^64 − NOW_MAX: the sum fits.
        until(now, now + wait)
    }

    fn is_idle(&self, tat: u64, now: u64) -> bool {
        tat <= clamp_now(now)
    }

    fn idle_at(&self, tat: u64) -> u64 {
        tat
    }

    fn horizon(&self) -> u64 {
        // capacity · interval ≤ REFILL_MAX, checked by `new`.
        self.capacity * self.interval
    }

    /// A move never adds to what the client may take, at `now` or at any
    /// reading before it, and what it may take grows at the new rate up to
    /// the new capacity (Bucket4j's "as is"). The tokens the client holds
    /// are kept, at most the new capacity (rounded down to whole
    /// nanoseconds of the new refill). A full bucket holds the old
    /// capacity and what the new rate has refilled since it was full
    /// toward a larger one (so a client full for a whole new refill moves
    /// as a fresh client); at a reading before `now` (the clock back from
    /// a reading ahead) it is no fuller than a bucket empty when the old
    /// one was, refilling at the new rate. A bucket in debt at `now` (a booking ahead, or a reading
    /// behind the state's) stays empty until the same instant, then
    /// refills at the new rate. A client that never made a request stays
    /// one.
    ///
    /// So over any span a client admits at most the largest capacity
    /// involved plus the span times the fastest rate involved, and one
    /// moved to a slower quota with any of a token in hand waits at most
    /// one new interval for its next.
    fn convert(&self, tat: u64, now: u64, to: &Self) -> u64 {
        if self == to || tat == FRESH {
            // The same quota (a pair's other limit changed): as it is. A
            // client that never made a request (or was reset) stays one.
            return tat;
        }
        let now = clamp_now(now);
        // Every figure below is at most NOW_MAX plus two horizons (a word's
        // TAT is at most a horizon past NOW_MAX: a booking's is its ready
        // instant plus at most the horizon), well within 128 bits.
        let (tat, now) = (u128::from(tat), u128::from(now));
        let (horizon, to_horizon) = (u128::from(self.horizon()), u128::from(to.horizon()));
        let word = if tat <= now {
            // Full since `tat`: the old capacity, and the new rate's refill
            // since toward a larger one. And, at readings before `now`, no
            // fuller than a bucket empty when the old one was, refilling at
            // the new rate (a reading behind `now`, the clock back from one
            // ahead, finds it no fuller than the old one), though full at
            // `now` when the old one is.
            let more = u128::from(to.capacity.saturating_sub(self.capacity) * to.interval);
            let timed = (tat + to_horizon).saturating_sub(horizon).min(now);
            (tat + more).max(timed).min(now + to_horizon)
        } else if now + horizon < tat {
            // In debt: empty until the same instant, then the new refill.
            tat - horizon + to_horizon
        } else {
            // Partly spent: the tokens held, in nanoseconds of the new
            // refill, rounded down, at most the new bucket.
            let held = (now + horizon - tat) * u128::from(to.interval) / u128::from(self.interval);
            now + to_horizon - held.min(to_horizon)
        };
        // Each case lies at most a new horizon past `now`, or past the old
        // empty instant in debt (at most NOW_MAX): a live word. Never the
        // fresh word, which stands for a client with no history: a TAT of
        // 1 decides as it does at every reading but 0.
        (word as u64).max(1)
    }

    fn window(&self) -> u64 {
        // The refill of an empty bucket: capacity · interval.
        self.horizon()
    }

    fn reserves(&self) -> bool {
        true
    }

    /// GCRA's booking: `TAT ← max(TAT, now) + cost·interval` whatever the
    /// tolerance, ready once `TAT − ready_at ≤ (capacity − cost)·interval`
    /// held of the old TAT, i.e. at `max(now, TAT − tolerance)`: exactly
    /// `now + retry_after`, and exactly where `admit` would first pass (and
    /// write the same word).
    fn reserve(&self, tat: u64, now: u64, cost: u64) -> Reserve {
        let now = clamp_now(now);
        let ready_at = tat.saturating_sub(self.tolerance(cost)).max(now);
        if ready_at > NOW_MAX {
            return Reserve::Never;
        }
        // max(tat, now) ≤ ready_at + tolerance, so the new TAT is at most
        // ready_at + capacity·interval ≤ NOW_MAX + REFILL_MAX = WORD_MAX.
        Reserve::At {
            word: tat.max(now) + cost * self.interval,
            ready_at,
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::algorithm::{FRESH, NOW_MAX};

    const SEC: u64 = 1_000_000_000;

    fn bucket(tokens: u64, per_ns: u64, capacity: u64) -> TokenBucket {
        TokenBucket::new(tokens, Duration::from_nanos(per_ns), capacity).unwrap()
    }

    #[test]
    fn fresh_word_is_a_full_bucket_at_any_time() {
        let b = bucket(1, SEC, 3);
        for now in [0, 1, SEC, NOW_MAX, u64::MAX] {
            assert_eq!(b.remaining(FRESH, now), 3);
            assert!(b.is_idle(FRESH, now));
            assert_eq!(b.retry_after(FRESH, now, 3), 0);
        }
    }

    #[test]
    fn idle_from_the_tat_and_never_the_tombstone() {
        let b = bucket(1, SEC, 3);
        let w = b.admit(b.admit(FRESH, 5, 1).unwrap(), 5, 1).unwrap();
        assert_eq!(b.idle_at(w), 5 + 2 * SEC);
        assert!(!b.is_idle(w, b.idle_at(w) - 1));
        assert!(b.is_idle(w, b.idle_at(w)));
        assert_eq!(b.idle_at(FRESH), 0);
        assert_eq!(b.horizon(), 3 * SEC);
        // The largest TAT any admission reaches is a live word.
        let widest = bucket(1, REFILL_MAX, 1);
        let top = widest.admit(FRESH, u64::MAX, 1).unwrap();
        assert_eq!(top, WORD_MAX);
        assert!(top < crate::algorithm::NOT_ALIVE);
    }

    #[test]
    fn drains_then_refills_one_token_per_interval() {
        let b = bucket(1, SEC, 2);
        let w = b.admit(FRESH, 0, 1).unwrap();
        let w = b.admit(w, 0, 1).unwrap();
        assert_eq!(b.admit(w, 0, 1), None);
        assert_eq!(b.retry_after(w, 0, 1), SEC);
        assert_eq!(b.admit(w, SEC - 1, 1), None);
        assert_eq!(b.remaining(w, SEC - 1), 0);
        let w2 = b.admit(w, SEC, 1).unwrap();
        assert_eq!(b.admit(w2, SEC, 1), None);
        assert!(!b.is_idle(w2, SEC));
        assert!(b.is_idle(w2, 3 * SEC));
    }

    #[test]
    fn cost_n_needs_n_tokens_at_once() {
        let b = bucket(1, SEC, 5);
        let w = b.admit(FRESH, 0, 3).unwrap();
        assert_eq!(b.remaining(w, 0), 2);
        assert_eq!(b.admit(w, 0, 3), None);
        assert_eq!(b.retry_after(w, 0, 3), SEC);
        assert!(b.admit(w, SEC, 3).is_some());
        assert!(b.admit(w, 0, 2).is_some());
    }

    #[test]
    fn interval_rounds_up_so_rounding_denies() {
        // 3 per second: 333_333_333.3 ns exactly, 333_333_334 stored.
        let b = bucket(3, SEC, 1);
        assert_eq!(b.interval(), 333_333_334);
        let w = b.admit(FRESH, 0, 1).unwrap();
        assert_eq!(b.admit(w, 333_333_333, 1), None);
        assert!(b.admit(w, 333_333_334, 1).is_some());
    }

    #[test]
    fn slow_rate_refills_when_checked_every_millisecond() {
        // Requirement (b): 1 token per day, checked every ms for 2 days.
        const DAY: u64 = 86_400 * SEC;
        let b = bucket(1, DAY, 1);
        let mut w = FRESH;
        let mut admitted_at = Vec::new();
        let mut now = 0;
        while now <= 2 * DAY {
            if let Some(next) = b.admit(w, now, 1) {
                w = next;
                admitted_at.push(now);
            }
            now += 1_000_000;
        }
        assert_eq!(admitted_at, vec![0, DAY, 2 * DAY]);
    }

    #[test]
    fn backward_clock_never_admits_more() {
        let b = bucket(1, SEC, 1);
        let w = b.admit(FRESH, 10 * SEC, 1).unwrap();
        // The clock steps back 5 s: the bucket looks emptier, not fuller.
        assert_eq!(b.admit(w, 5 * SEC, 1), None);
        assert_eq!(b.retry_after(w, 5 * SEC, 1), 6 * SEC);
        assert!(b.admit(w, 11 * SEC, 1).is_some());
    }

    #[test]
    fn extreme_words_and_times_do_not_overflow() {
        let b = bucket(1, REFILL_MAX, 1);
        let w = b.admit(FRESH, NOW_MAX, 1).unwrap();
        assert_eq!(w, WORD_MAX);
        assert_eq!(b.admit(w, u64::MAX, 1), None);
        assert_eq!(b.remaining(w, 0), 0);
        // The token would come back only at TAT, past the last instant any
        // reading reaches: never.
        assert_eq!(b.retry_after(w, 0, 1), crate::algorithm::NEVER);
        assert_eq!(b.retry_after(w, NOW_MAX, 1), crate::algorithm::NEVER);
        let fast = bucket(1, 1, REFILL_MAX);
        let w = fast.admit(FRESH, u64::MAX, REFILL_MAX).unwrap();
        assert_eq!(w, WORD_MAX);
        assert!(TokenBucket::new(1, Duration::from_nanos(1), REFILL_MAX + 1).is_err());
    }

    #[test]
    fn a_booking_is_ready_exactly_where_admit_first_passes() {
        let b = bucket(1, 10, 3);
        let mut tat = FRESH;
        for (now, cost) in [(0, 3), (0, 1), (0, 2), (5, 3), (100, 1), (100, 3), (101, 2)] {
            let Reserve::At { word, ready_at } = b.reserve(tat, now, cost) else {
                panic!("never")
            };
            assert_eq!(ready_at, now + b.retry_after(tat, now, cost));
            assert_eq!(b.admit(tat, ready_at, cost), Some(word), "same word");
            if ready_at > now {
                assert_eq!(b.admit(tat, ready_at - 1, cost), None, "not earlier");
                // A booking that waits leaves the bucket empty at ready_at.
                assert_eq!(word, ready_at + 3 * 10);
            }
            tat = word;
        }
    }

    #[test]
    fn a_booking_past_the_end_of_time_is_never_and_nothing_overflows() {
        let b = bucket(1, REFILL_MAX, 1);
        let Reserve::At { word, ready_at } = b.reserve(FRESH, NOW_MAX, 1) else {
            panic!("a full bucket books at once")
        };
        assert_eq!((word, ready_at), (WORD_MAX, NOW_MAX));
        assert_eq!(b.reserve(word, NOW_MAX, 1), Reserve::Never);
        assert_eq!(b.reserve(word, 0, 1), Reserve::Never);
        assert_eq!(b.reserve(WORD_MAX, u64::MAX, 1), Reserve::Never);
        // The last bookable instant: ready exactly at NOW_MAX.
        let fast = bucket(1, 1, 2);
        let Reserve::At { word, ready_at } = fast.reserve(NOW_MAX, 0, 2) else {
            panic!("ready at NOW_MAX")
        };
        assert_eq!((word, ready_at), (NOW_MAX + 2, NOW_MAX));
        assert_eq!(fast.reserve(word, 0, 1), Reserve::Never);
    }

    #[test]
    fn cancelling_the_tail_restores_the_word_before_it() {
        use crate::algorithm::{unreserve, Ticket};
        let b = bucket(1, 10, 1);
        let full = b.admit(FRESH, 0, 1).unwrap();
        let Reserve::At { word, ready_at } = b.reserve(full, 0, 1) else {
            panic!()
        };
        let t = Ticket {
            from: full.into(),
            to: word.into(),
            ready_at,
            cost: 1,
            claims: None,
        };
        assert_eq!(unreserve(word, 0, &t), Some(full));
        assert_eq!(unreserve(word, ready_at - 1, &t), Some(full));
        assert_eq!(unreserve(word, ready_at, &t), None, "its time came");
        assert_eq!(unreserve(word + 10, 0, &t), None, "not the tail");
        assert_eq!(unreserve(crate::algorithm::TOMBSTONE, 0, &t), None);
    }

    #[test]
    fn configuration_ranges() {
        let err = |t, per, c| TokenBucket::new(t, Duration::from_nanos(per), c).unwrap_err();
        assert_eq!(err(0, SEC, 1).field(), "rate");
        assert_eq!(err(1, 0, 1).field(), "rate");
        assert_eq!(err(2, 1, 1).field(), "rate");
        assert_eq!(err(1, SEC, 0).field(), "capacity");
        assert_eq!(err(1, SEC, NOW_MAX / SEC + 1).field(), "capacity");
        assert!(TokenBucket::new(1, Duration::from_nanos(SEC), NOW_MAX / SEC).is_ok());
        let too_long = Duration::from_secs(u64::MAX);
        assert_eq!(
            TokenBucket::new(1, too_long, 1).unwrap_err().field(),
            "rate"
        );
    }
}
