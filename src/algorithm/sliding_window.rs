//! The sliding window counter: the classic weighted estimate over two
//! clock-aligned windows.
//!
//! # The word
//!
//! ```text
//!  63                 2C+1 2C           C+1  C             0
//! +----------------------+-----------------+----------------+
//! |  window index k      |  curr (C bits)  |  prev (C bits) |
//! +----------------------+-----------------+----------------+
//! ```
//!
//! `k` is the full index of the window `curr` counts (no wraparound: it has
//! the bits to reach 2<sup>63</sup> ns), `prev` counts the window before it.
//! The index (counted from 1, the window the clock starts in) needs
//! `I = bits(NOW_MAX / W + 3)` bits, and the counts share what
//! is left: `C = (64 − I) / 2`, so the limit may be at most 2<sup>C</sup> − 1.
//! A one-second window leaves C = 15 (limit ≤ 32 767), a minute C = 18, an
//! hour C = 21; [`ConfigError`] names the bound when a limit does not fit.
//!
//! # Decision
//!
//! At offset `e` into window `k`, a request of cost `n` is admitted iff
//!
//! ```text
//! curr + (n − 1) + prev · (W − e) / W  <  limit
//! ```
//!
//! evaluated exactly as `(curr + n − 1)·W + prev·(W − e) < limit·W` in
//! 128-bit integers: the classic estimate for `n = 1`, and for larger `n` the
//! condition that each of `n` unit requests made at that instant would pass.
//! Entering window `k + 1` makes `prev ← curr, curr ← 0`; entering any later
//! window zeroes both. A fresh client is the word 0.

use core::fmt;
use core::time::Duration;

use super::window::{check_limit_for, check_window, Position, Windows};
use super::{clamp_now, WordAlgorithm, FRESH};
use crate::error::ConfigError;

/// Why a sliding window counter's limit is bounded: the cap its window
/// sets, with the caps of the usual windows (the table in docs/DESIGN.md).
const LIMIT_CAP: &str = "a sliding window counter keeps its window's index and two counts in one 64-bit word, so its limit is capped by its window: at most 1 023 at 1 ms, 32 767 at 1 s, 262 143 at 1 min, 2 097 151 at 1 h, 8 388 607 at 1 day; for a higher limit, take a longer window, or a FixedWindow or TokenBucket";

/// The sliding window counter: an O(1) estimate of the requests in the last
/// `window`, weighting the previous fixed window by how much of it the
/// sliding window still covers.
///
/// Build a limiter with [`SlidingWindowCounter::builder`]. Memory per client
/// is one `u64`. It cannot burst to twice the limit across a window boundary
/// as [`FixedWindow`](crate::FixedWindow) can.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, SlidingWindowCounter};
///
/// let clock = ManualClock::new();
/// let limiter = SlidingWindowCounter::builder()
///     .limit(2)
///     .window(Duration::from_secs(10))
///     .clock(clock.clone())
///     .build()?;
/// assert!(limiter.allow_request("alice"));
/// assert!(limiter.allow_request("alice"));
/// assert!(!limiter.allow_request("alice"));
/// // Halfway into the next window, the previous one still weighs 2 × 0.5 = 1.
/// clock.advance(Duration::from_secs(15));
/// assert!(limiter.allow_request("alice"));
/// assert!(!limiter.allow_request("alice"));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindowCounter {
    windows: Windows,
    limit: u64,
    count_bits: u32,
}

/// A word, unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    index: u64,
    curr: u64,
    prev: u64,
}

impl SlidingWindowCounter {
    pub(crate) fn new(limit: u64, window: Duration) -> Result<Self, ConfigError> {
        // Two counts share the bits the index leaves: windows of 1 and 2 ns
        // leave none for them (the limit's range would be empty).
        check_window(window, "a sliding window lasts at least 3 ns, so that its state word keeps room for two counts, and at most 2^63 - 1 ns (292 years)")?;
        let windows = Windows::new(window)?;
        let count_bits = windows.spare_bits() / 2;
        check_limit_for(limit, count_bits, LIMIT_CAP)?;
        Ok(Self {
            windows,
            limit,
            count_bits,
        })
    }

    #[inline]
    fn unpack(&self, word: u64) -> Counts {
        let mask = (1u64 << self.count_bits) - 1;
        Counts {
            index: word >> (2 * self.count_bits),
            curr: (word >> self.count_bits) & mask,
            prev: word & mask,
        }
    }

    #[inline]
    fn pack(&self, c: Counts) -> u64 {
        (c.index << (2 * self.count_bits)) | (c.curr << self.count_bits) | c.prev
    }

    /// The counts as they stand at `now`, after any window rollover.
    #[inline]
    fn at(&self, word: u64, now: u64) -> (Counts, Position) {
        let c = self.unpack(word);
        let pos = self.windows.locate(c.index, now);
        let (curr, prev) = match pos.passed {
            0 => (c.curr, c.prev),
            1 => (0, c.curr),
            _ => (0, 0),
        };
        let counts = Counts {
            index: pos.index,
            curr,
            prev,
        };
        (counts, pos)
    }

    /// `limit·W − prev·(W − offset)`: the room the weighted previous window
    /// leaves, in request·ns.
    #[inline]
    fn room(&self, prev: u64, offset: u64) -> u128 {
        let w = u128::from(self.windows.width());
        // prev ≤ limit and offset < W, so this never goes below zero.
        u128::from(self.limit) * w - u128::from(prev) * (w - u128::from(offset))
    }

    /// The first offset at or after `from` in a window with these counts at
    /// which `cost` would pass, if any.
    fn first_pass(&self, curr: u64, prev: u64, from: u64, cost: u64) -> Option<u64> {
        let w = u128::from(self.windows.width());
        // Whole requests of room left once the new ones are counted.
        let spare_units = u128::from(self.limit).checked_sub(u128::from(curr + cost - 1))?;
        if spare_units == 0 {
            return None;
        }
        if prev == 0 {
            return Some(from);
        }
        // Need prev·(W − e) < spare_units·W, i.e. W − e ≤ ceil(spare·W / prev) − 1.
        let max_tail = (spare_units * w).div_ceil(u128::from(prev)) - 1;
        let earliest = w.saturating_sub(max_tail);
        let e = earliest.max(u128::from(from));
        (e < w).then_some(e as u64)
    }
}

impl SlidingWindowCounter {
    /// The word holding these counts in window `index`, if they fit (a
    /// state read from outside the process, such as from Redis).
    #[cfg(feature = "redis")]
    pub(crate) fn word(&self, index: u64, curr: u64, prev: u64) -> Option<u64> {
        let fits = curr <= self.limit && prev <= self.limit && index <= self.windows.last();
        fits.then(|| self.pack(Counts { index, curr, prev }))
    }

    /// The window index and the two counts a word holds, as recorded
    /// (a state written outside the process, such as to Redis).
    #[cfg(feature = "redis")]
    pub(crate) fn parts(&self, word: u64) -> (u64, u64, u64) {
        let c = self.unpack(word);
        (c.index, c.curr, c.prev)
    }

    /// The window's length, ns.
    pub(crate) fn window_ns(&self) -> u64 {
        self.windows.width()
    }
}

impl fmt::Debug for SlidingWindowCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::window::debug_windowed(f, "SlidingWindowCounter", self.limit, &self.windows)
    }
}

impl WordAlgorithm for SlidingWindowCounter {
    #[inline]
    fn capacity(&self) -> u64 {
        self.limit
    }

    fn fresh_at(&self, floor: u64) -> u64 {
        // A full window just before `floor`'s, as the previous count of the
        // window before that: idle from `floor`'s window on (so at
        // `floor`), and the most any state idle by then weighs at an earlier
        // reading (which is treated as the start of the window recorded). A
        // floor in the clock's first window (or unaligned, in window 0):
        // the fresh word, idle at every reading as that would be.
        match self.windows.locate(0, floor).index {
            index if index <= self.windows.first() => FRESH,
            index => self.pack(Counts {
                index: index - 1,
                curr: 0,
                prev: self.limit,
            }),
        }
    }

    #[inline]
    fn admit(&self, word: u64, now: u64, cost: u64) -> Option<u64> {
        let (c, pos) = self.at(word, now);
        if cost == 0 {
            // Nothing taken: the state as it stands at `now` (a fallback
            // recording a hold; a check of 0 is a peek and never comes here).
            return Some(self.pack(c));
        }
        let w = u128::from(self.windows.width());
        // curr + cost ≤ 2·limit < 2^32: no overflow anywhere below.
        let need = u128::from(c.curr + cost - 1) * w;
        if need < self.room(c.prev, pos.offset) {
            Some(self.pack(Counts {
                curr: c.curr + cost,
                ..c
            }))
        } else {
            None
        }
    }

    fn remaining(&self, word: u64, now: u64) -> u64 {
        let (c, pos) = self.at(word, now);
        let w = u128::from(self.windows.width());
        // Unit requests i = 0, 1, … pass while (curr + i)·W < room.
        let passes = self.room(c.prev, pos.offset).div_ceil(w) as u64;
        passes.saturating_sub(c.curr)
    }

    fn retry_after(&self, word: u64, now: u64, cost: u64) -> u64 {
        let (c, pos) = self.at(word, now);
        let now = self.windows.instant(pos.index, pos.offset);
        let at = match self.first_pass(c.curr, c.prev, pos.offset, cost) {
            Some(e) => self.windows.instant(pos.index, e),
            None => match self.first_pass(0, c.curr, 0, cost) {
                // Saturating: the next window may start past `NOW_MAX`, in
                // which case `until` reports that it never comes.
                Some(e) => self.windows.instant(pos.index + 1, e),
                // An empty window admits any cost up to the limit at once.
                None => self.windows.start(pos.index + 2),
            },
        };
        super::until(now, at)
    }

    fn is_idle(&self, word: u64, now: u64) -> bool {
        now.min(super::NOW_MAX) >= self.idle_at(word)
    }

    fn window(&self) -> u64 {
        self.windows.width()
    }

    fn align(&mut self, origin: u64) {
        self.windows = self.windows.aligned(origin);
    }

    /// A move never adds to what the client may take now: the whole
    /// requests the estimate at `now` leaves (`limit − curr − prev ·
    /// (W − e) / W`, rounded down, at most the new limit) are what it
    /// has left in the new quota's window `now` falls in, with nothing
    /// before it; what it had used then weighs on it as the new windows
    /// slide past. A reading before the recorded window is judged at that
    /// window's start, as every check judges it. A state whose counts
    /// weigh nothing since the new window began is a fresh client
    /// there, as a client forgotten then would come back.
    fn convert(&self, word: u64, now: u64, to: &Self) -> u64 {
        if self == to || word == FRESH {
            // The same quota (a pair's other limit changed): as it is. A
            // client that never made a request (or was reset) stays one.
            return word;
        }
        let (c, pos) = self.at(word, now);
        let at = clamp_now(now).max(self.windows.start(c.index));
        let here = to.windows.locate(0, at).index;
        // Until when the state may weigh: its idle instant, or for empty
        // counts (a state a move left with nothing used), the end of the
        // window after its own, since a move may have counted requests of
        // its window in what it left.
        let recorded = self.unpack(word);
        let busy_until = if recorded.curr == 0 && recorded.prev == 0 {
            self.windows.start(recorded.index + 2)
        } else {
            self.idle_at(word)
        };
        if busy_until <= to.windows.start(here) {
            // Nothing counted since the new window began, nor in the
            // window before that: a fresh client there, idle from the
            // first new boundary not before `busy_until`, as the fixed
            // window's (at the latest, this window's start).
            return to.fresh_at(to.windows.ceil(busy_until));
        }
        let w = u128::from(self.windows.width());
        // The room left, in request·ns (`room` is at least prev's weight
        // below limit·W), less the current count's, in whole requests.
        let room = self.room(c.prev, pos.offset);
        let used = u128::from(c.curr) * w;
        let left = (room.saturating_sub(used) / w).min(u128::from(to.limit)) as u64;
        // On a limiter's clock `here` is at least 1 (windows count from
        // 1), so empty counts are never the fresh word; unaligned, in
        // window 0 they would be, and the client is held full there as
        // the fixed window's is.
        let curr = if here == 0 && left == to.limit {
            to.limit
        } else {
            to.limit - left
        };
        to.pack(Counts {
            index: here,
            curr,
            prev: 0,
        })
    }

    fn idle_at(&self, word: u64) -> u64 {
        let c = self.unpack(word);
        if c.curr > 0 {
            self.windows.start(c.index + 2)
        } else if c.prev > 0 {
            self.windows.start(c.index + 1)
        } else {
            // Empty counts decide as a fresh word from their window's start
            // on; before it (a user clock that stepped back past a window
            // recorded later), their window would still count.
            self.windows.start(c.index)
        }
    }

    fn horizon(&self) -> u64 {
        self.windows.width().saturating_mul(2)
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::algorithm::{FRESH, NOW_MAX};

    fn swc(limit: u64, window_ns: u64) -> SlidingWindowCounter {
        SlidingWindowCounter::new(limit, Duration::from_nanos(window_ns)).unwrap()
    }

    /// A cost of 0 (a fallback recording a hold) takes nothing and is
    /// always admitted, the state as it stands: what is left is the same,
    /// now and at every later reading, for an empty, a partly spent and a
    /// full window.
    #[test]
    fn a_cost_of_zero_records_the_state_as_it_stands() {
        let s = swc(4, 100);
        let part = s.admit(FRESH, 10, 2).unwrap();
        let full = s.admit(part, 20, 2).unwrap();
        for (word, now) in [(FRESH, 10), (part, 30), (full, 40), (full, 150)] {
            let kept = s.admit(word, now, 0).expect("a cost of 0 is admitted");
            for later in [now, now + 1, now + 60, now + 100, now + 250] {
                assert_eq!(
                    s.remaining(kept, later),
                    s.remaining(word, later),
                    "{word} at {now}, read at {later}"
                );
            }
        }
    }

    #[test]
    fn fresh_word_is_empty_at_any_time() {
        let s = swc(5, 100);
        for now in [0, 99, 100, 12_345, NOW_MAX, u64::MAX] {
            assert!(s.is_idle(FRESH, now));
            assert_eq!(s.remaining(FRESH, now), 5);
            assert_eq!(s.retry_after(FRESH, now, 5), 0);
        }
    }

    #[test]
    fn windows_start_on_the_unix_epochs_multiples() {
        // The clock read 0 at the Unix time 250 ns: windows of 100 ns start
        // at the readings 50, 150, …
        let mut s = swc(2, 100);
        s.align(250);
        let w = s.admit(FRESH, 0, 2).unwrap();
        // Window 1 (from 50) lets one in once the first weighs under 1.
        assert_eq!(s.retry_after(w, 0, 1), 51);
        // At offset 50 of the next window: 2 · 0.5 = 1 < 2 admits one.
        let w = s.admit(w, 100, 1).unwrap();
        assert_eq!(s.admit(w, 100, 1), None);
        assert!(s.is_idle(w, 250));
        assert!(!s.is_idle(w, 249));
    }

    #[test]
    fn seed_weighted_estimate() {
        // limit 4, W = 100: fill window 0, then probe window 1.
        let s = swc(4, 100);
        let mut w = FRESH;
        for _ in 0..4 {
            w = s.admit(w, 10, 1).unwrap();
        }
        assert_eq!(s.admit(w, 99, 1), None);
        // At offset 50 of window 1: 0 + 4·0.5 = 2 < 4, admits twice.
        let w1 = s.admit(w, 150, 1).unwrap();
        let w2 = s.admit(w1, 150, 1).unwrap();
        assert_eq!(s.admit(w2, 150, 1), None);
        // At offset 75: 2 + 4·0.25 = 3 < 4 admits; then 3 + 1 = 4 denies.
        let w3 = s.admit(w2, 175, 1).unwrap();
        assert_eq!(s.admit(w3, 175, 1), None);
        // Two windows on, everything has expired.
        assert!(s.is_idle(w3, 300));
        assert_eq!(s.remaining(w3, 300), 4);
    }

    #[test]
    fn strict_inequality_at_exact_weights() {
        // limit 2, prev 2 at offset 50 of W 100: 0 + 2·0.5 = 1 < 2 passes once.
        let s = swc(2, 100);
        let w = s.admit(s.admit(FRESH, 0, 1).unwrap(), 0, 1).unwrap();
        let w = s.admit(w, 150, 1).unwrap();
        // 1 + 1 = 2, not < 2.
        assert_eq!(s.admit(w, 150, 1), None);
        assert_eq!(s.retry_after(w, 150, 1), 1);
        assert!(s.admit(w, 151, 1).is_some());
    }

    #[test]
    fn retry_after_is_the_first_passing_instant() {
        let s = swc(3, 1000);
        let mut w = FRESH;
        for now in [0, 400, 999] {
            w = s.admit(w, now, 1).unwrap();
        }
        for now in [999, 1000, 1001, 1333, 1334, 1500, 1999, 2000, 2500] {
            for cost in 1..=3 {
                let d = s.retry_after(w, now, cost);
                assert!(s.admit(w, now + d, cost).is_some(), "now {now} cost {cost}");
                if d > 0 {
                    assert_eq!(s.admit(w, now + d - 1, cost), None, "now {now} cost {cost}");
                }
            }
        }
    }

    #[test]
    fn backward_clock_is_the_start_of_the_recorded_window() {
        let s = swc(2, 100);
        let w = s.admit(FRESH, 250, 1).unwrap();
        let w = s.admit(w, 250, 1).unwrap();
        // Back to window 1: seen as the start of window 2, still full.
        assert_eq!(s.admit(w, 150, 1), None);
        assert_eq!(s.remaining(w, 150), 0);
    }

    #[test]
    fn limit_bits_follow_the_window() {
        let sec = 1_000_000_000;
        assert!(SlidingWindowCounter::new(32_767, Duration::from_nanos(sec)).is_ok());
        let err = SlidingWindowCounter::new(32_768, Duration::from_nanos(sec)).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::OutOfRange {
                field: "limit",
                max: 32_767,
                ..
            }
        ));
        // The message names the cap and says that the window sets it.
        let message = err.to_string();
        assert!(
            message.contains("at most 32767 requests")
                && message.contains("capped by its window")
                && message.contains("32 767 at 1 s"),
            "{message}"
        );
        // The table in docs/DESIGN.md: window → largest limit.
        for (window, max) in [
            (Duration::from_millis(1), 1_023),
            (Duration::from_secs(1), 32_767),
            (Duration::from_secs(60), 262_143),
            (Duration::from_secs(3_600), 2_097_151),
            (Duration::from_secs(86_400), 8_388_607),
        ] {
            assert!(SlidingWindowCounter::new(max, window).is_ok());
            assert!(SlidingWindowCounter::new(max + 1, window).is_err());
        }
        assert_eq!(
            SlidingWindowCounter::new(0, Duration::from_secs(1))
                .unwrap_err()
                .field(),
            "limit"
        );
        // Windows of 1 and 2 ns leave no bits for the counts at all: the
        // window is at fault, whatever the limit.
        for ns in [1, 2] {
            assert_eq!(
                SlidingWindowCounter::new(1, Duration::from_nanos(ns))
                    .unwrap_err()
                    .field(),
                "window"
            );
        }
    }

    #[test]
    fn full_counts_at_the_last_window_pack_and_unpack() {
        let s = swc(32_767, 1_000_000_000);
        let c = Counts {
            index: NOW_MAX / 1_000_000_000,
            curr: 32_767,
            prev: 32_767,
        };
        assert_eq!(s.unpack(s.pack(c)), c);
        assert!(s.pack(c) <= crate::algorithm::WORD_MAX);
        // The shortest window has one bit per count, and its largest word
        // is still live.
        let short = swc(1, 3);
        let top = short.pack(Counts {
            index: NOW_MAX / 3,
            curr: 1,
            prev: 1,
        });
        assert!(top <= crate::algorithm::WORD_MAX, "{top:#x}");
    }

    #[test]
    fn idle_at_once_both_windows_are_empty() {
        let s = swc(4, 100);
        assert_eq!(s.idle_at(FRESH), 0);
        let w = s.admit(FRESH, 150, 1).unwrap();
        // curr > 0 in window 1: it weighs on window 2, idle from window 3.
        assert_eq!(s.idle_at(w), 300);
        assert!(!s.is_idle(w, 299));
        assert!(s.is_idle(w, 300));
        // Rolled into window 2 by a denied-free admission, prev = 1.
        let c = s.unpack(w);
        let rolled = s.pack(Counts {
            index: c.index + 1,
            curr: 0,
            prev: c.curr,
        });
        assert_eq!(s.idle_at(rolled), 300);
        assert!(!s.is_idle(rolled, 299));
        assert_eq!(s.horizon(), 200);
    }
}
