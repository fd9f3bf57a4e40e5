//! The crate's error types: a rejected configuration and a cost that can never
//! be admitted.

use core::fmt;

/// A builder was given a configuration that tollgate cannot honour exactly.
///
/// Every variant names the builder field at fault, and [`Display`](fmt::Display)
/// states the allowed range, so that the message alone tells a user what to
/// change.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ConfigError, TokenBucket};
///
/// let err = TokenBucket::builder()
///     .rate(0, Duration::from_secs(1))
///     .build()
///     .unwrap_err();
/// assert_eq!(err.field(), "rate");
/// assert!(err.to_string().contains("at least 1"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required field was never set.
    Missing {
        /// The builder method that sets it.
        field: &'static str,
    },
    /// A field's value lies outside the range the algorithm or its state
    /// word can represent exactly.
    OutOfRange {
        /// The builder method that set it.
        field: &'static str,
        /// The value given, in `unit`.
        value: u128,
        /// The smallest allowed value, in `unit`.
        min: u128,
        /// The largest allowed value, in `unit`, given the other fields.
        max: u128,
        /// What the numbers count, such as `"tokens"` or `"ns"`.
        unit: &'static str,
        /// Why the bound is what it is.
        reason: &'static str,
    },
}

impl ConfigError {
    /// The builder field at fault.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::SlidingWindowCounter;
    ///
    /// let err = SlidingWindowCounter::builder().limit(10).build().unwrap_err();
    /// assert_eq!(err.field(), "window");
    /// ```
    #[must_use]
    pub fn field(&self) -> &'static str {
        match self {
            Self::Missing { field } | Self::OutOfRange { field, .. } => field,
        }
    }

    /// Checks that `value` lies in `min..=max`.
    pub(crate) fn check_range(
        field: &'static str,
        value: u128,
        (min, max): (u128, u128),
        unit: &'static str,
        reason: &'static str,
    ) -> Result<(), Self> {
        if (min..=max).contains(&value) {
            Ok(())
        } else {
            Err(Self::OutOfRange {
                field,
                value,
                min,
                max,
                unit,
                reason,
            })
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing { field } => write!(f, "`{field}` must be set"),
            Self::OutOfRange {
                field,
                value,
                min,
                max,
                unit,
                reason,
            } => write!(
                f,
                "`{field}` is {value} {unit}, but must be at least {min} and at most {max} {unit}: {reason}"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A check asked for a cost larger than the limiter's capacity, so it could
/// never be admitted however long the client waited.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::TokenBucket;
///
/// let limiter = TokenBucket::builder()
///     .rate(10, Duration::from_secs(1))
///     .capacity(5)
///     .build()?;
/// let err = limiter.check_n("alice", 6).unwrap_err();
/// assert_eq!((err.cost(), err.capacity()), (6, 5));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostError {
    pub(crate) cost: u64,
    pub(crate) capacity: u64,
}

impl CostError {
    /// The cost that was asked for.
    #[must_use]
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The largest cost this limiter can ever admit at once.
    #[must_use]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}

impl fmt::Display for CostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a cost of {} can never be admitted: the capacity is {}",
            self.cost, self.capacity
        )
    }
}

impl std::error::Error for CostError {}
