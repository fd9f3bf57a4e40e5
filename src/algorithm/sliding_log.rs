//! The sliding window log: the exact count of admissions in the last
//! window, kept as one timestamp per admission.
//!
//! # The slots
//!
//! A client's log is `limit` slots, each a `u64` holding the **expiry** of
//! one admission: `t + W` for a request admitted at `t`, or 0 for a slot
//! never used. A slot is free at `now` iff its expiry `≤ now`, that is iff
//! its admission lies outside `(now − W, now]`. Only admitted requests are
//! logged and only free slots are overwritten, so the used slots are exactly
//! the admissions still in the window, and
//!
//! * a request of cost `n` is admitted iff at least `n` slots are free, and
//!   then `n` free slots take the expiry `now + W`;
//! * a fresh client is all zeros; an idle gap of any length frees every slot.
//!
//! Which free slot an admission takes does not matter, which is what lets
//! [`crate::cell`] claim slots with independent compare-and-swaps.
//!
//! # Ranges
//!
//! `now` is clamped to [`NOW_MAX`](super::NOW_MAX) and `W ≤ NOW_MAX`, so an
//! expiry never overflows. Memory is `8 · limit` bytes per client, so the
//! limit is capped at [`SlidingWindowLog::MAX_LIMIT`].

use core::fmt;
use core::time::Duration;

use super::{clamp_now, NOW_MAX};
use crate::error::ConfigError;

/// The sliding window log: at most `limit` admissions in any window of
/// length `window`, counted exactly.
///
/// The most accurate algorithm and the most expensive: memory per client is
/// `8 · limit` bytes (one timestamp per admission in the window), and a
/// denial reads every slot. Use it when exactness is a hard requirement and
/// limits are small. Build a limiter with [`SlidingWindowLog::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, SlidingWindowLog};
///
/// let clock = ManualClock::new();
/// let limiter = SlidingWindowLog::builder()
///     .limit(2)
///     .window(Duration::from_secs(10))
///     .clock(clock.clone())
///     .build()?;
/// assert!(limiter.allow_request("alice"));
/// clock.advance(Duration::from_secs(6));
/// assert!(limiter.allow_request("alice"));
/// assert!(!limiter.allow_request("alice"));
/// // The first admission leaves the window 10 s after it was made.
/// clock.advance(Duration::from_secs(4));
/// assert!(limiter.allow_request("alice"));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
///
/// A request that may wait books the first slot to free up
/// ([`Limiter::reserve`](crate::Limiter::reserve)), and is served before
/// anything asked after it:
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, SlidingWindowLog};
///
/// let clock = ManualClock::new();
/// let limiter = SlidingWindowLog::builder()
///     .limit(1)
///     .window(Duration::from_secs(10))
///     .clock(clock.clone())
///     .build()?;
/// assert!(limiter.allow_request("alice"));
/// let booked = limiter.reserve("alice", Duration::MAX).unwrap();
/// assert_eq!(booked.wait(), Duration::from_secs(10));
/// clock.advance(booked.wait());
/// booked.commit();
/// // The booking holds the slot for its own window.
/// assert!(!limiter.allow_request("alice"));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindowLog {
    window: u64,
    limit: u64,
}

impl SlidingWindowLog {
    /// The largest `limit` a log may have: 4 096 slots, 32 KiB per client.
    /// Past this, the memory per client and the cost of a denial (which reads
    /// every slot) make [`SlidingWindowCounter`](crate::SlidingWindowCounter)
    /// the better tool.
    pub const MAX_LIMIT: u64 = 4_096;

    pub(crate) fn new(limit: u64, window: Duration) -> Result<Self, ConfigError> {
        let window = window.as_nanos();
        ConfigError::check_range(
            "window",
            window,
            (1, u128::from(NOW_MAX)),
            "ns",
            "a window lasts at least 1 ns and at most 2^63 - 1 ns (292 years)",
        )?;
        ConfigError::check_range(
            "limit",
            u128::from(limit),
            (1, u128::from(Self::MAX_LIMIT)),
            "requests",
            "the log keeps one 8-byte slot per request in the window",
        )?;
        Ok(Self {
            window: window as u64,
            limit,
        })
    }

    /// The number of slots, and the largest cost.
    #[inline]
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// The window's length, ns: how long a slot stays taken.
    #[inline]
    pub(crate) fn window(&self) -> u64 {
        self.window
    }

    /// The slot value that records an admission at `now`: its expiry.
    #[inline]
    pub(crate) fn stamp(&self, now: u64) -> u64 {
        // clamp_now(now) ≤ NOW_MAX and window ≤ NOW_MAX: no overflow.
        clamp_now(now) + self.window
    }

    /// Whether a slot holding `expiry` is free at `now`.
    #[inline]
    pub(crate) fn is_free(&self, expiry: u64, now: u64) -> bool {
        expiry <= clamp_now(now)
    }

    /// Nanoseconds from `now` until `cost` slots are free, given every
    /// slot's expiry, if nothing else is admitted in between.
    pub(crate) fn retry_after(&self, mut expiries: Vec<u64>, now: u64, cost: u64) -> u64 {
        let now = clamp_now(now);
        // The cost-th earliest expiry is when the cost-th slot frees up.
        let k = (cost as usize).clamp(1, expiries.len()) - 1;
        let (_, &mut kth, _) = expiries.select_nth_unstable(k);
        super::until(now, kth)
    }
}

impl fmt::Debug for SlidingWindowLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingWindowLog")
            .field("limit", &self.limit)
            .field("window", &Duration::from_nanos(self.window))
            .finish()
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn free_iff_outside_the_window() {
        let log = SlidingWindowLog::new(2, Duration::from_nanos(100)).unwrap();
        let stamp = log.stamp(50);
        assert_eq!(stamp, 150);
        assert!(!log.is_free(stamp, 149));
        assert!(log.is_free(stamp, 150));
        assert!(log.is_free(0, 0), "a never-used slot is free at once");
        assert_eq!(log.stamp(u64::MAX), NOW_MAX + 100);
    }

    #[test]
    fn retry_after_waits_for_the_cost_th_slot() {
        let log = SlidingWindowLog::new(3, Duration::from_nanos(100)).unwrap();
        let expiries = vec![170, 120, 0];
        assert_eq!(log.retry_after(expiries.clone(), 110, 1), 0);
        assert_eq!(log.retry_after(expiries.clone(), 110, 2), 10);
        assert_eq!(log.retry_after(expiries, 110, 3), 60);
    }

    #[test]
    fn limits() {
        let w = Duration::from_secs(1);
        assert_eq!(SlidingWindowLog::new(0, w).unwrap_err().field(), "limit");
        assert!(SlidingWindowLog::new(SlidingWindowLog::MAX_LIMIT, w).is_ok());
        assert_eq!(
            SlidingWindowLog::new(SlidingWindowLog::MAX_LIMIT + 1, w)
                .unwrap_err()
                .field(),
            "limit"
        );
        assert_eq!(
            SlidingWindowLog::new(1, Duration::ZERO)
                .unwrap_err()
                .field(),
            "window"
        );
    }
}
