//! Clock-aligned windows, shared by the fixed window and the sliding window
//! counter: which window a reading falls in, how far into it, and how many
//! bits a window index needs.

use core::time::Duration;

use super::{clamp_now, NOW_MAX};
use crate::error::ConfigError;

/// Windows of `width` ns aligned to the Unix epoch.
///
/// With the clock reading 0 at a Unix time `phase` past a multiple of
/// `width` (ns), window `first + k` covers the readings
/// `[k·width − phase, (k+1)·width − phase)`, so that every window starts
/// on a multiple of its length in Unix time.
///
/// On a limiter's clock ([`aligned`](Self::aligned)), `first` is 1:
/// window 1 is the one the clock's origin cuts short, and window 0 lies
/// wholly before the clock's start. So the fresh word (window 0, nothing
/// counted) holds nothing in any window a reading falls in, and a state
/// with nothing counted in a window a reading falls in is never the fresh
/// word. Unaligned (`phase` and `first` 0), window `k` is the `k`-th since
/// the reading 0: the twin of Redis's windows, whose readings are Unix
/// times.
#[derive(Debug, Clone, Copy)]
pub(super) struct Windows {
    width: u64,
    /// Bits that hold every index a reading has (at most
    /// `NOW_MAX / width + 2`) with room to spare, so that a packed index
    /// is never all ones (the all-ones word stays free).
    index_bits: u32,
    /// Less than `width`.
    phase: u64,
    /// The index of the window the reading 0 falls in: 0 or 1.
    first: u64,
}

/// The same windows, whatever the clock's origin: a limiter's quotas all
/// share its clock, so two quotas of one length are the same quota.
impl PartialEq for Windows {
    fn eq(&self, other: &Self) -> bool {
        self.width == other.width
    }
}

impl Eq for Windows {}

/// Where a reading falls, relative to the window a word last recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    /// The window the reading falls in, never earlier than the recorded one.
    pub(super) index: u64,
    /// Nanoseconds from the window's start to the reading.
    pub(super) offset: u64,
    /// Windows since the recorded one: 0 while still in it.
    pub(super) passed: u64,
}

impl Windows {
    pub(super) fn new(width: Duration) -> Result<Self, ConfigError> {
        let width = width.as_nanos();
        ConfigError::check_range(
            "window",
            width,
            (1, u128::from(NOW_MAX)),
            "ns",
            "a window lasts at least 1 ns and at most 2^63 - 1 ns (292 years)",
        )?;
        let width = width as u64;
        // The largest index a reading has is at most NOW_MAX / width + 2
        // (counted from 1, plus one for a phase); + 3 ≤ 2^63 + 2, so this
        // is at most 64 and at least 2.
        let index_bits = u64::BITS - (NOW_MAX / width + 3).leading_zeros();
        Ok(Self {
            width,
            index_bits,
            phase: 0,
            first: 0,
        })
    }

    /// These windows for a clock that reads 0 at the Unix time `origin`
    /// (ns), counted from 1.
    pub(super) fn aligned(self, origin: u64) -> Self {
        Self {
            phase: origin % self.width,
            first: 1,
            ..self
        }
    }

    /// The index of the window the reading 0 falls in: 1 on a limiter's
    /// clock, 0 unaligned.
    pub(super) fn first(&self) -> u64 {
        self.first
    }

    pub(super) fn width(&self) -> u64 {
        self.width
    }

    /// Bits of a 64-bit word left over once the index is packed.
    pub(super) fn spare_bits(&self) -> u32 {
        u64::BITS - self.index_bits
    }

    /// The largest index a reading has: the window of `NOW_MAX`.
    #[cfg(any(feature = "redis", all(test, not(feature = "loom"))))]
    pub(super) fn last(&self) -> u64 {
        self.locate(0, NOW_MAX).index
    }

    /// The reading at which window `index` starts (0 for the window the
    /// clock's origin cuts short, and for any before it).
    pub(super) fn start(&self, index: u64) -> u64 {
        self.instant(index, 0)
    }

    /// The first instant a window starts at that is not before `at`: `at`
    /// itself on a boundary (or at the clock's start, where window 1
    /// starts), else the next window's start.
    pub(super) fn ceil(&self, at: u64) -> u64 {
        let index = self.locate(0, at).index;
        if self.start(index) == at {
            at
        } else {
            self.start(index + 1)
        }
    }

    /// The reading `offset` ns into window `index`: 0 if that lies before
    /// the clock's origin, `u64::MAX` if past it by more than a `u64`
    /// holds.
    pub(super) fn instant(&self, index: u64, offset: u64) -> u64 {
        let Some(k) = index.checked_sub(self.first) else {
            // Window 0 of a limiter's clock: wholly before its start.
            return 0;
        };
        // In u128: k·width + offset < 2^128 for any u64s.
        let at = (u128::from(k) * u128::from(self.width) + u128::from(offset))
            .saturating_sub(u128::from(self.phase));
        u64::try_from(at).unwrap_or(u64::MAX)
    }

    /// Locates `now` against the recorded window `recorded`. A reading from
    /// before the recorded window (a clock that stepped back) is treated as
    /// the recorded window's start, the most conservative instant in it.
    #[inline]
    pub(super) fn locate(&self, recorded: u64, now: u64) -> Position {
        let now = clamp_now(now);
        // One division gives both; the remainder and the phase are each
        // less than `width` ≤ 2^63 − 1, so their sum does not overflow.
        let (whole, rest) = (now / self.width, now % self.width + self.phase);
        let (index, offset) = if rest >= self.width {
            (whole + self.first + 1, rest - self.width)
        } else {
            (whole + self.first, rest)
        };
        if index < recorded {
            return Position {
                index: recorded,
                offset: 0,
                passed: 0,
            };
        }
        Position {
            index,
            offset,
            passed: index - recorded,
        }
    }
}

/// `Debug` for a windowed algorithm: its name, limit and window.
pub(super) fn debug_windowed(
    f: &mut core::fmt::Formatter<'_>,
    name: &str,
    limit: u64,
    windows: &Windows,
) -> core::fmt::Result {
    f.debug_struct(name)
        .field("limit", &limit)
        .field("window", &Duration::from_nanos(windows.width()))
        .finish()
}

/// The shortest window a packed counter supports: 3 ns leaves two bits
/// beside the index (a fixed window's count needs two, a sliding window's
/// two counts one each).
pub(super) const MIN_PACKED_WINDOW: u64 = 3;

/// Checks a packed counter's window against `MIN_PACKED_WINDOW..=NOW_MAX`.
pub(super) fn check_window(width: Duration, reason: &'static str) -> Result<(), ConfigError> {
    ConfigError::check_range(
        "window",
        width.as_nanos(),
        (u128::from(MIN_PACKED_WINDOW), u128::from(NOW_MAX)),
        "ns",
        reason,
    )
}

/// Builds the error for a limit that does not fit the bits left beside the
/// window index.
pub(super) fn check_limit(limit: u64, count_bits: u32) -> Result<(), ConfigError> {
    check_limit_for(
        limit,
        count_bits,
        "the state word holds the window index beside the counts, so a shorter window leaves fewer bits for the limit",
    )
}

/// As [`check_limit`], saying why the limit is bounded with `reason`.
pub(super) fn check_limit_for(
    limit: u64,
    count_bits: u32,
    reason: &'static str,
) -> Result<(), ConfigError> {
    ConfigError::check_range(
        "limit",
        u128::from(limit),
        (1, (1u128 << count_bits) - 1),
        "requests",
        reason,
    )
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn index_bits_cover_every_reading_with_a_spare_value() {
        for width in [
            1,
            2,
            3,
            7,
            1_000,
            1 << 30,
            1_000_000_007,
            NOW_MAX / 3,
            NOW_MAX,
        ] {
            let w = Windows::new(Duration::from_nanos(width)).unwrap();
            let max = w.locate(0, u64::MAX).index;
            assert_eq!(max, NOW_MAX / width);
            assert_eq!(max, w.last());
            // On a limiter's clock, whatever its origin: at most 2 more.
            for origin in [0, 1, width - 1, width / 2, 1_234_567_890_123_456_789] {
                let aligned = w.aligned(origin);
                let top = aligned.locate(0, u64::MAX).index;
                assert_eq!(top, aligned.last());
                assert!(top <= NOW_MAX / width + 2, "{width} {origin}");
                assert!(
                    w.index_bits == 64 || top < (1u64 << w.index_bits) - 1,
                    "{width} {origin}"
                );
                // The last window ends past the last reading.
                assert!(aligned.start(top + 1) > NOW_MAX, "{width} {origin}");
                assert!(aligned.start(top) <= NOW_MAX, "{width} {origin}");
            }
            // No more bits than the largest index counted from 1 needs.
            assert!(max + 2 >= 1u64 << (w.index_bits - 2), "{width} wastes bits");
        }
    }

    #[test]
    fn locate_aligns_to_the_origin_and_never_goes_back() {
        let w = Windows::new(Duration::from_nanos(10)).unwrap();
        assert_eq!(
            w.locate(0, 0),
            Position {
                index: 0,
                offset: 0,
                passed: 0
            }
        );
        assert_eq!(
            w.locate(0, 9),
            Position {
                index: 0,
                offset: 9,
                passed: 0
            }
        );
        assert_eq!(
            w.locate(0, 10),
            Position {
                index: 1,
                offset: 0,
                passed: 1
            }
        );
        assert_eq!(
            w.locate(3, 57),
            Position {
                index: 5,
                offset: 7,
                passed: 2
            }
        );
        assert_eq!(
            w.locate(7, 57),
            Position {
                index: 7,
                offset: 0,
                passed: 0
            }
        );
    }

    #[test]
    fn aligned_windows_count_from_one_on_the_unix_epoch_s_multiples() {
        // The clock reads 0 at the Unix time 1 234 ns: windows of 10 ns
        // start at the readings 6, 16, …; the one cut short is window 1.
        let w = Windows::new(Duration::from_nanos(10))
            .unwrap()
            .aligned(1_234);
        let at = |now| {
            let p = w.locate(0, now);
            (p.index, p.offset)
        };
        assert_eq!(at(0), (1, 4));
        assert_eq!(at(5), (1, 9));
        assert_eq!(at(6), (2, 0));
        assert_eq!(at(16), (3, 0));
        assert_eq!((w.start(0), w.start(1), w.start(2)), (0, 0, 6));
        assert_eq!(w.instant(2, 3), 9);
        // The first window start not before a reading.
        for (at, ceil) in [(0, 0), (1, 6), (6, 6), (7, 16), (16, 16)] {
            assert_eq!(w.ceil(at), ceil, "{at}");
        }
        // An origin on a boundary: the first window is whole.
        let w = Windows::new(Duration::from_nanos(10)).unwrap().aligned(20);
        assert_eq!(w.locate(0, 0).index, 1);
        assert_eq!((w.start(1), w.start(2)), (0, 10));
        // The widest window, 1 ns past a boundary at the clock's start:
        // window 1 holds the readings before NOW_MAX − 1, window 2 the rest,
        // and the index bits hold both with a value to spare.
        let w = Windows::new(Duration::from_nanos(NOW_MAX))
            .unwrap()
            .aligned(u64::MAX);
        for (now, index) in [(0, 1), (NOW_MAX - 2, 1), (NOW_MAX - 1, 2), (u64::MAX, 2)] {
            assert_eq!(w.locate(0, now).index, index, "{now}");
        }
        assert!(w.last() < (1 << w.index_bits) - 1);
        assert_eq!(w.start(3), 2 * NOW_MAX - 1);
    }

    #[test]
    fn window_bounds() {
        assert_eq!(Windows::new(Duration::ZERO).unwrap_err().field(), "window");
        assert!(Windows::new(Duration::from_nanos(NOW_MAX)).is_ok());
        assert!(Windows::new(Duration::from_nanos(NOW_MAX + 1)).is_err());
    }
}
