//! Two limits on one client at once: a composite of two word algorithms
//! whose state is the pair of their words.
//!
//! # The state
//!
//! ```text
//!  127                           64 63                            0
//! +------------------------------+--------------------------------+
//! |  second limit's word         |  first limit's word            |
//! +------------------------------+--------------------------------+
//! ```
//!
//! Each half is exactly the word its algorithm keeps alone, so every
//! transition here is the pair of the two algorithms' own: a request is
//! admitted iff **both** admit it, and then both words take their new
//! values together; a denial changes neither. The cell layer installs the
//! pair with one 128-bit compare-and-swap, so no thread ever sees one limit
//! charged without the other.
//!
//! # Figures
//!
//! * `remaining` is the smaller of the two: unit requests pass one after
//!   another while both limits pass them.
//! * `retry_after` is the larger of the two waits. Each algorithm's
//!   admissibility is monotone in time (once a request would pass it passes
//!   at every later instant, if nothing else is admitted), so both pass
//!   from the later of the two instants on, and neither before: the larger
//!   wait is exact.
//! * the limit a decision reports is the one that binds: the one with the
//!   fewer remaining, the smaller capacity on a tie.
//!
//! # Bookings
//!
//! A pair books ahead iff both its limits do (the token bucket and the
//! fixed window; not the sliding windows). A booking of `cost` at `now` is
//! ready at `T`, the later of the two limits' own first instants (each
//! limit's own booking's ready time: `now + retry_after` for a reading at or
//! after the word's last charge): by the argument above, the first instant
//! at which both limits conform, and both do at `T`.
//! Each limit is then charged as executing the request at `T`
//! ([`WordAlgorithm::book_at`]): the token bucket as `admit` at `T` would
//! charge it, the fixed window in `T`'s window, closing the windows before
//! it. Both words are written by one 128-bit exchange.
//!
//! Why this is exact, as the sequential model in `tests/reserve.rs` states
//! it (the standing admissions executed in order at their instants; a
//! booking served from the latest of them on; a check passes only from the
//! latest of them on, if the pair admits it there):
//!
//! * from `T` on, each word decides exactly as its limit would with the
//!   request executed at `T`: `book_at`'s contract.
//! * before `T`, every request is denied: `T` is the first instant of the
//!   limit that binds (the one whose own wait is the larger), and that
//!   limit's word denies every reading before its own first instant
//!   (`book_at`'s contract again: the token bucket is charged a full
//!   bucket's worth of virtual time past `T`; the fixed window is closed
//!   until `T`'s window, whose start `T` then is). So a check made while
//!   the booking waits is denied, and a booking made then waits for `T`
//!   or later: requests are served in the order they booked, on both
//!   limits at once.
//! * a booking made at the first instant at which only one limit conforms
//!   would charge that limit earlier than the request can run, and deny
//!   later requests that conform: charging both at `T` is what makes the
//!   pair's waits exact, and no limit is ever charged for a time the
//!   request does not run at.
//!
//! A cancellation is the tail rule on the pair's whole state
//! ([`unreserve`](super::unreserve)): both words go back together, iff
//! neither changed since the booking.

use super::Figures;
use super::{clamp_now, Reserve, WordAlgorithm, NOW_MAX};

/// The first word of a pair: its low half.
#[inline]
pub(crate) const fn first(pair: u128) -> u64 {
    pair as u64
}

/// The second word of a pair: its high half.
#[inline]
pub(crate) const fn second(pair: u128) -> u64 {
    (pair >> 64) as u64
}

/// The pair of `first` and `second`.
#[inline]
pub(crate) const fn join(first: u64, second: u64) -> u128 {
    (first as u128) | ((second as u128) << 64)
}

/// Two limits held together: a request is admitted only if both admit it,
/// and is then charged to both; a denial charges neither.
///
/// Build a limiter with [`Builder::and`](crate::Builder::and) (any two of
/// [`TokenBucket`](crate::TokenBucket),
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter) and
/// [`FixedWindow`](crate::FixedWindow)) or, for two token buckets,
/// [`Builder::and_rate`](crate::Builder::and_rate). A client's two states
/// are updated by one 128-bit compare-and-swap: 16 bytes per client, and
/// lock-free wherever [`Both::is_lock_free`] says so (x86-64 and AArch64).
///
/// A pair of token buckets and fixed windows also books requests ahead
/// ([`Limiter::reserve_n`](crate::Limiter::reserve_n)): ready at the first
/// instant at which both limits conform, charged to both as a check at
/// that instant would be, in the same one exchange, and given back to both
/// if cancelled while it is still the last thing charged. A pair holding
/// the sliding window counter cannot book
/// ([`ReserveError::Unsupported`](crate::ReserveError::Unsupported)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, TokenBucket};
///
/// let clock = ManualClock::new();
/// // 2 per second and 3 per hour.
/// let limiter = TokenBucket::builder()
///     .rate(2, Duration::from_secs(1))
///     .and_rate(3, Duration::from_secs(3600))
///     .clock(clock.clone())
///     .build()?;
/// assert!(limiter.allow_request("alice"));
/// assert!(limiter.allow_request("alice"));
/// let denied = limiter.check("alice");
/// assert!(denied.is_denied());
/// assert_eq!(denied.limit(), 2, "the per-second limit binds");
/// clock.advance(Duration::from_secs(1));
/// assert!(limiter.allow_request("alice"));
/// clock.advance(Duration::from_secs(1));
/// let denied = limiter.check("alice");
/// assert_eq!(denied.limit(), 3, "now the hourly limit binds");
/// assert_eq!(denied.retry_after(), Duration::from_secs(1198));
/// // A booking waits for both: the hourly limit binds.
/// let booked = limiter.reserve("alice", Duration::MAX).unwrap();
/// assert_eq!(booked.wait(), Duration::from_secs(1198));
/// assert!(booked.cancel(), "nothing was charged since: given back to both");
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Both<A, B> {
    first: A,
    second: B,
}

impl<A, B> Both<A, B> {
    pub(crate) fn new(first: A, second: B) -> Self {
        Self { first, second }
    }

    /// The first limit.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .and_rate(1000, Duration::from_secs(3600))
    ///     .build()?;
    /// let _bucket: &TokenBucket = limiter.algorithm().first();
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn first(&self) -> &A {
        &self.first
    }

    /// The second limit.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .and(FixedWindow::builder().limit(1000).window(Duration::from_secs(3600)))
    ///     .build()?;
    /// let _window: &FixedWindow = limiter.algorithm().second();
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn second(&self) -> &B {
        &self.second
    }

    /// Whether this machine updates a client's two states without a lock:
    /// true wherever the processor has a 128-bit compare-and-swap
    /// (`cmpxchg16b` on x86-64, found at run time; AArch64). Elsewhere the
    /// update takes a short lock, and everything else stays as documented.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Both, TokenBucket};
    ///
    /// if !Both::<TokenBucket, TokenBucket>::is_lock_free() {
    ///     eprintln!("two-limit clients take a lock on this machine");
    /// }
    /// ```
    #[must_use]
    pub fn is_lock_free() -> bool {
        crate::sync::pair_is_lock_free()
    }
}

impl<A: WordAlgorithm, B: WordAlgorithm> Both<A, B> {
    /// Whether the first limit is the one that binds in `pair` at `now`:
    /// the one with the fewer remaining, the smaller on a tie.
    fn first_binds(&self, pair: u128, now: u64) -> bool {
        let (a, b) = remainders(self, pair, now);
        a < b || (a == b && self.first.capacity() <= self.second.capacity())
    }
}

/// One limit's figures for a decision, as `describe` in the cell layer
/// makes them for a single limit.
fn figures<A: WordAlgorithm>(limit: &A, word: u64, now: u64) -> Figures {
    let (capacity, remaining) = (limit.capacity(), limit.remaining(word, now));
    let replenish_after = if remaining >= capacity {
        0
    } else {
        limit.retry_after(word, now, remaining + 1)
    };
    Figures {
        limit: capacity,
        remaining,
        replenish_after,
        window: limit.window(),
    }
}

/// Each limit's remaining unit requests in `pair` at `now`.
fn remainders<A: WordAlgorithm, B: WordAlgorithm>(
    both: &Both<A, B>,
    pair: u128,
    now: u64,
) -> (u64, u64) {
    (
        both.first.remaining(first(pair), now),
        both.second.remaining(second(pair), now),
    )
}

impl<A: WordAlgorithm, B: WordAlgorithm> super::Transitions for Both<A, B> {
    type Word = u128;

    #[inline]
    fn capacity(&self) -> u64 {
        self.first.capacity().min(self.second.capacity())
    }

    fn limit(&self, pair: u128, now: u64) -> u64 {
        if self.first_binds(pair, now) {
            self.first.capacity()
        } else {
            self.second.capacity()
        }
    }

    fn convert(&self, pair: u128, now: u64, to: &Self) -> u128 {
        join(
            self.first.convert(first(pair), now, &to.first),
            self.second.convert(second(pair), now, &to.second),
        )
    }

    fn window(&self, pair: u128, now: u64) -> u64 {
        if self.first_binds(pair, now) {
            WordAlgorithm::window(&self.first)
        } else {
            WordAlgorithm::window(&self.second)
        }
    }

    fn fresh_at(&self, floor: u64) -> u128 {
        join(self.first.fresh_at(floor), self.second.fresh_at(floor))
    }

    #[inline]
    fn admit(&self, pair: u128, now: u64, cost: u64) -> Option<u128> {
        let a = self.first.admit(first(pair), now, cost)?;
        let b = self.second.admit(second(pair), now, cost)?;
        Some(join(a, b))
    }

    fn remaining(&self, pair: u128, now: u64) -> u64 {
        let (a, b) = remainders(self, pair, now);
        a.min(b)
    }

    fn retry_after(&self, pair: u128, now: u64, cost: u64) -> u64 {
        // Both pass from the later of their first instants on (each is
        // monotone in time), and not before: `NEVER` is the largest wait.
        self.first
            .retry_after(first(pair), now, cost)
            .max(self.second.retry_after(second(pair), now, cost))
    }

    fn is_idle(&self, pair: u128, now: u64) -> bool {
        self.first.is_idle(first(pair), now) && self.second.is_idle(second(pair), now)
    }

    fn idle_at(&self, pair: u128) -> u64 {
        self.first
            .idle_at(first(pair))
            .max(self.second.idle_at(second(pair)))
    }

    fn horizon(&self) -> u64 {
        self.first.horizon().max(self.second.horizon()).min(NOW_MAX)
    }

    fn reserves(&self) -> bool {
        self.first.reserves() && self.second.reserves()
    }

    fn align(&mut self, origin: u64) {
        self.first.align(origin);
        self.second.align(origin);
    }

    fn each(&self, pair: u128, now: u64) -> Option<[Figures; 2]> {
        Some([
            figures(&self.first, first(pair), now),
            figures(&self.second, second(pair), now),
        ])
    }

    /// The first instant `T` at which both limits conform (the later of
    /// their own first instants), each charged as executing the request
    /// at `T`: see "Bookings" above.
    fn reserve(&self, pair: u128, now: u64, cost: u64) -> Reserve<u128> {
        let now = clamp_now(now);
        // Each limit's own first instant, as an instant: its own booking's
        // ready time (the one its bookings alone would get), which is
        // `now + retry_after` for a reading at or after the word's last
        // charge, and stays exact for a reading behind it (a fixed window
        // judges such a reading at its recorded window's start, and counts
        // its wait from the reading to the instant its count resets).
        let ready = |booked: Reserve| match booked {
            Reserve::At { ready_at, .. } => Some(ready_at),
            Reserve::Never => None,
        };
        let (Some(a), Some(b)) = (
            ready(self.first.reserve(first(pair), now, cost)),
            ready(self.second.reserve(second(pair), now, cost)),
        ) else {
            return Reserve::Never;
        };
        // Both conform from the later on (each is monotone in time), and
        // not before; both are at most `NOW_MAX`.
        let ready_at = a.max(b);
        Reserve::At {
            word: join(
                self.first.book_at(first(pair), now, ready_at, cost),
                self.second.book_at(second(pair), now, ready_at, cost),
            ),
            ready_at,
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use core::time::Duration;

    use super::{first, join, second, Both, NOW_MAX};
    use crate::algorithm::{FixedWindow, Reserve, TokenBucket, Transitions, NEVER, UNBORN};

    fn pair() -> Both<TokenBucket, FixedWindow> {
        Both::new(
            TokenBucket::new(2, Duration::from_nanos(20), 2).unwrap(),
            FixedWindow::new(3, Duration::from_nanos(100)).unwrap(),
        )
    }

    #[test]
    fn the_halves_round_trip_and_the_life_word_is_the_first() {
        for (a, b) in [(0, 0), (1, u64::MAX), (UNBORN, 0), (u64::MAX, 7)] {
            let p = join(a, b);
            assert_eq!((first(p), second(p)), (a, b));
            assert_eq!(p as u64, a);
        }
    }

    #[test]
    fn admits_iff_both_admit_and_a_denial_changes_nothing() {
        let both = pair();
        let mut p = both.fresh_at(0);
        assert_eq!(both.capacity(), 2);
        p = both.admit(p, 0, 2).unwrap();
        assert_eq!(both.admit(p, 0, 1), None, "the bucket is empty");
        assert_eq!(both.retry_after(p, 0, 1), 10);
        assert_eq!(both.limit(p, 0), 2);
        p = both.admit(p, 10, 1).unwrap();
        assert_eq!(both.admit(p, 20, 1), None, "the window's 3 are spent");
        assert_eq!(both.limit(p, 20), 3, "the window binds");
        assert_eq!(both.retry_after(p, 20, 1), 80);
        assert!(!both.is_idle(p, 99));
        assert_eq!(both.idle_at(p), 100);
        assert!(both.is_idle(p, 100));
        assert_eq!(both.horizon(), 100);
    }

    #[test]
    fn a_booking_waits_for_both_and_charges_both_at_that_instant() {
        let both = pair(); // 2 per 20 ns (1 per 10 ns), and 3 per 100 ns window
        assert!(both.reserves());
        let p = both.admit(both.fresh_at(0), 0, 2).unwrap();
        // The bucket binds: ready at 10, charged there in both.
        let Reserve::At { word, ready_at } = both.reserve(p, 0, 1) else {
            panic!()
        };
        assert_eq!(ready_at, 10);
        assert_eq!(word, both.admit(p, 10, 1).unwrap(), "admit at 10");
        assert_eq!(both.admit(word, 9, 1), None, "closed until its time");
        // The window (3 spent) binds next: ready at 100, the window closed
        // until then, and the bucket charged at 100, full again by then.
        let Reserve::At { word: w2, ready_at } = both.reserve(word, 0, 1) else {
            panic!()
        };
        assert_eq!(ready_at, 100);
        assert_eq!(both.admit(w2, 99, 1), None);
        assert_eq!(
            both.retry_after(w2, 0, 1),
            100,
            "the window's next has room for 2"
        );
        let after = both.admit(w2, 100, 1).unwrap();
        assert_eq!(
            both.admit(after, 100, 1),
            None,
            "the bucket holds 2: the booking and this"
        );
        assert_eq!(first(w2), first(both.admit(word, 100, 1).unwrap()));
        // A reading behind the window's recorded window (another thread
        // read the clock later and charged first): the window's own first
        // instant is its next window's start, an instant, not the reading
        // plus a wait counted from the recorded window's start.
        let lagging = both.admit(both.fresh_at(0), 150, 2).unwrap();
        let lagging = both.admit(lagging, 170, 1).unwrap();
        let Reserve::At { word, ready_at } = both.reserve(lagging, 50, 1) else {
            panic!()
        };
        assert_eq!(ready_at, 200);
        assert_eq!(both.admit(word, 199, 1), None);
        assert!(
            both.admit(word, 200, 1).is_some(),
            "the next window holds 1 of 3"
        );
        // A pair with a limit that cannot book cannot either.
        let with_sliding = Both::new(
            TokenBucket::new(1, Duration::from_nanos(10), 1).unwrap(),
            crate::algorithm::SlidingWindowCounter::new(1, Duration::from_nanos(100)).unwrap(),
        );
        assert!(!with_sliding.reserves());
    }

    #[test]
    fn never_is_the_largest_wait() {
        let both = pair();
        let p = both.admit(both.fresh_at(NOW_MAX), NOW_MAX, 2).unwrap();
        assert_eq!(both.retry_after(p, NOW_MAX, 1), NEVER);
        assert_eq!(both.reserve(p, NOW_MAX, 1), Reserve::Never);
    }
}
