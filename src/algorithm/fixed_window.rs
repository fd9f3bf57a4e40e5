//! The fixed window counter.
//!
//! # The word
//!
//! ```text
//!  63                      64−I  63−I                     0
//! +---------------------------+---------------------------+
//! |  window index k (I bits)  |  count (64 − I bits)      |
//! +---------------------------+---------------------------+
//! ```
//!
//! `I = bits(NOW_MAX / W + 1)`, the full index with no wraparound, so the
//! limit may be at most 2<sup>64−I</sup> − 1: 2<sup>30</sup> − 1 for a
//! one-second window. A request of cost `n` is admitted iff
//! `count + n ≤ limit` in the current window; entering a later window resets
//! the count. A fresh client is the word 0.

use core::fmt;
use core::time::Duration;

use super::window::{check_limit, Windows};
use super::WordAlgorithm;
use crate::error::ConfigError;

/// The fixed window counter: at most `limit` requests in each clock-aligned
/// window.
///
/// The cheapest algorithm in the crate, at the price of the boundary spike:
/// a client may send `limit` requests at the end of one window and `limit`
/// more at the start of the next. Memory per client is one `u64`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{FixedWindow, ManualClock};
///
/// let clock = ManualClock::new();
/// let limiter = FixedWindow::builder()
///     .limit(1)
///     .window(Duration::from_secs(1))
///     .clock(clock.clone())
///     .build()?;
/// assert!(limiter.allow_request("alice"));
/// assert!(!limiter.allow_request("alice"));
/// clock.advance(Duration::from_secs(1));
/// assert!(limiter.allow_request("alice"));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    windows: Windows,
    limit: u64,
    count_bits: u32,
}

impl FixedWindow {
    pub(crate) fn new(limit: u64, window: Duration) -> Result<Self, ConfigError> {
        let windows = Windows::new(window)?;
        let count_bits = windows.spare_bits();
        // The largest word is 2^64 − 2^count_bits (the index never fills
        // its bits), and the top four words say a cell is not alive, so the
        // count needs two bits: windows of 1 and 2 ns have fewer.
        ConfigError::check_range(
            "window",
            u128::from(windows.width()),
            (3, u128::from(super::NOW_MAX)),
            "ns",
            "a fixed window lasts at least 3 ns, so that its state word keeps room for the count",
        )?;
        check_limit(limit, count_bits)?;
        Ok(Self {
            windows,
            limit,
            count_bits,
        })
    }

    /// The window index and the count as they stand at `now`.
    #[inline]
    fn at(&self, word: u64, now: u64) -> (u64, u64) {
        let recorded = word >> self.count_bits;
        let pos = self.windows.locate(recorded, now);
        let count = if pos.passed == 0 {
            word & ((1u64 << self.count_bits) - 1)
        } else {
            0
        };
        (pos.index, count)
    }
}

impl FixedWindow {
    /// The word holding `count` in window `index`, if both fit (a state
    /// read from outside the process, such as from Redis).
    #[cfg(feature = "redis")]
    pub(crate) fn word(&self, index: u64, count: u64) -> Option<u64> {
        let fits = count <= self.limit && index <= super::NOW_MAX / self.windows.width();
        fits.then(|| (index << self.count_bits) | count)
    }

    /// The window's length, ns.
    pub(crate) fn window_ns(&self) -> u64 {
        self.windows.width()
    }
}

impl fmt::Debug for FixedWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::window::debug_windowed(f, "FixedWindow", self.limit, &self.windows)
    }
}

impl WordAlgorithm for FixedWindow {
    #[inline]
    fn capacity(&self) -> u64 {
        self.limit
    }

    fn fresh_at(&self, floor: u64) -> u64 {
        // An empty count in `floor`'s window; an earlier reading is treated
        // as that window's start.
        self.windows.locate(0, floor).index << self.count_bits
    }

    #[inline]
    fn admit(&self, word: u64, now: u64, cost: u64) -> Option<u64> {
        let (index, count) = self.at(word, now);
        // count ≤ limit and cost ≤ limit, both below 2^63.
        (count + cost <= self.limit).then(|| (index << self.count_bits) | (count + cost))
    }

    fn remaining(&self, word: u64, now: u64) -> u64 {
        self.limit - self.at(word, now).1
    }

    fn retry_after(&self, word: u64, now: u64, cost: u64) -> u64 {
        let (index, count) = self.at(word, now);
        if count + cost <= self.limit {
            0
        } else {
            // The count resets only in the next window; past the last one
            // (a reading beyond `NOW_MAX`) it never does.
            let now = super::clamp_now(now).max(self.windows.start(index));
            super::until(now, self.windows.start(index + 1))
        }
    }

    fn is_idle(&self, word: u64, now: u64) -> bool {
        self.at(word, now).1 == 0
    }

    fn idle_at(&self, word: u64) -> u64 {
        let (index, count) = (
            word >> self.count_bits,
            word & ((1u64 << self.count_bits) - 1),
        );
        if count == 0 {
            0
        } else {
            self.windows.start(index + 1)
        }
    }

    fn horizon(&self) -> u64 {
        self.windows.width()
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::algorithm::{FRESH, NOW_MAX};

    fn fw(limit: u64, window_ns: u64) -> FixedWindow {
        FixedWindow::new(limit, Duration::from_nanos(window_ns)).unwrap()
    }

    #[test]
    fn counts_per_aligned_window() {
        let f = fw(2, 100);
        let w = f.admit(FRESH, 5, 1).unwrap();
        let w = f.admit(w, 99, 1).unwrap();
        assert_eq!(f.admit(w, 99, 1), None);
        assert_eq!(f.retry_after(w, 99, 1), 1);
        assert_eq!(f.remaining(w, 99), 0);
        // The boundary spike: two more right after the boundary.
        let w = f.admit(w, 100, 2).unwrap();
        assert_eq!(f.admit(w, 199, 1), None);
        assert!(f.is_idle(w, 200));
        assert!(f.is_idle(FRESH, u64::MAX));
    }

    #[test]
    fn backward_clock_stays_in_the_recorded_window() {
        let f = fw(1, 100);
        let w = f.admit(FRESH, 550, 1).unwrap();
        assert_eq!(f.admit(w, 120, 1), None);
        assert_eq!(f.retry_after(w, 120, 1), 100);
    }

    #[test]
    fn limit_bits_follow_the_window() {
        assert!(FixedWindow::new((1 << 30) - 1, Duration::from_secs(1)).is_ok());
        assert_eq!(
            FixedWindow::new(1 << 30, Duration::from_secs(1))
                .unwrap_err()
                .field(),
            "limit"
        );
        let f = fw((1 << 30) - 1, 1_000_000_000);
        let w = f.admit(FRESH, NOW_MAX, (1 << 30) - 1).unwrap();
        assert!(w <= crate::algorithm::WORD_MAX);
        // The shortest window keeps two count bits, so its largest word is
        // live too.
        let short = FixedWindow::new(3, Duration::from_nanos(3)).unwrap();
        let top = short.admit(FRESH, NOW_MAX, 3).unwrap();
        assert!(top <= crate::algorithm::WORD_MAX, "{top:#x}");
        assert_eq!(
            FixedWindow::new(1, Duration::from_nanos(2))
                .unwrap_err()
                .field(),
            "window"
        );
        assert_eq!(f.at(w, u64::MAX), (NOW_MAX / 1_000_000_000, (1 << 30) - 1));
    }

    #[test]
    fn idle_at_the_next_window() {
        let f = fw(3, 100);
        assert_eq!(f.idle_at(FRESH), 0);
        let w = f.admit(FRESH, 250, 2).unwrap();
        assert_eq!(f.idle_at(w), 300);
        assert!(!f.is_idle(w, 299));
        assert!(f.is_idle(w, 300));
        assert_eq!(f.horizon(), 100);
        // The tombstone is refused at any time.
        for now in [0, 250, NOW_MAX] {
            assert_eq!(f.admit(crate::algorithm::TOMBSTONE, now, 1), None);
        }
    }
}
