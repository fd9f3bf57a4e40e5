//! Clock-aligned windows, shared by the fixed window and the sliding window
//! counter: which window a reading falls in, how far into it, and how many
//! bits a window index needs.

use core::time::Duration;

use super::{clamp_now, NOW_MAX};
use crate::error::ConfigError;

/// Windows of `width` ns aligned to the Unix epoch: with the clock reading
/// 0 at a Unix time `phase` past a multiple of `width` (ns), window `k`
/// covers the readings `[k·width − phase, (k+1)·width − phase)`, so that
/// every window starts on a multiple of its length in Unix time (window 0
/// is cut short by the clock's origin).
#[derive(Debug, Clone, Copy)]
pub(super) struct Windows {
    width: u64,
    /// Bits that hold every index up to `NOW_MAX / width` with room to spare,
    /// so that a packed index is never all ones (the all-ones word stays free).
    index_bits: u32,
    /// Less than `width`.
    phase: u64,
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
        let max_index = NOW_MAX / width;
        // max_index + 1 ≤ 2^63, so this is at most 64 and at least 1.
        let index_bits = u64::BITS - (max_index + 1).leading_zeros();
        Ok(Self {
            width,
            index_bits,
            phase: 0,
        })
    }

    /// These windows for a clock that reads 0 at the Unix time `origin`
    /// (ns).
    pub(super) fn aligned(self, origin: u64) -> Self {
        Self {
            phase: origin % self.width,
            ..self
        }
    }

    pub(super) fn width(&self) -> u64 {
        self.width
    }

    /// Bits of a 64-bit word left over once the index is packed.
    pub(super) fn spare_bits(&self) -> u32 {
        u64::BITS - self.index_bits
    }

    /// The reading at which window `index` starts (0 for the window the
    /// clock's origin cuts short).
    pub(super) fn start(&self, index: u64) -> u64 {
        self.instant(index, 0)
    }

    /// The reading `offset` ns into window `index`, 0 if that lies before
    /// the clock's origin.
    pub(super) fn instant(&self, index: u64, offset: u64) -> u64 {
        // index ≤ NOW_MAX / width + 2, so this is at most NOW_MAX + 3·width
        // before saturating.
        index
            .saturating_mul(self.width)
            .saturating_add(offset)
            .saturating_sub(self.phase)
    }

    /// Locates `now` against the recorded window `recorded`. A reading from
    /// before the recorded window (a clock that stepped back) is treated as
    /// the recorded window's start, the most conservative instant in it.
    #[inline]
    pub(super) fn locate(&self, recorded: u64, now: u64) -> Position {
        let now = clamp_now(clamp_now(now).saturating_add(self.phase));
        let index = now / self.width;
        if index < recorded {
            return Position {
                index: recorded,
                offset: 0,
                passed: 0,
            };
        }
        Position {
            index,
            offset: now - index * self.width,
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
            assert!(
                w.index_bits == 64 || max < (1u64 << w.index_bits) - 1,
                "{width}"
            );
            assert!(
                w.index_bits == 1 || max >= 1u64 << (w.index_bits - 2),
                "{width} wastes bits"
            );
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
    fn window_bounds() {
        assert_eq!(Windows::new(Duration::ZERO).unwrap_err().field(), "window");
        assert!(Windows::new(Duration::from_nanos(NOW_MAX)).is_ok());
        assert!(Windows::new(Duration::from_nanos(NOW_MAX + 1)).is_err());
    }
}
