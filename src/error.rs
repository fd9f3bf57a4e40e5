//! The crate's error types: a rejected configuration, a cost that can never
//! be admitted, and a reservation that cannot be made.

use core::time::Duration;

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
    /// A setting was given where the limiter would not apply it: to the
    /// builder of a second limit ([`Builder::and`](crate::Builder::and)) or
    /// of a tier's quota ([`Builder::tier`](crate::Builder::tier),
    /// [`Limiter::set_quota`](crate::Limiter::set_quota)), whose clock and
    /// memory settings are the limiter's own; or a resolver of
    /// tiers ([`Builder::tier_by`](crate::Builder::tier_by)) that takes
    /// another key type than the limiter's.
    Conflict {
        /// The builder method whose setting would not apply, with `and.`
        /// or `tier.` in front for a second limit's or a tier's.
        field: &'static str,
        /// What to do instead.
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
            Self::Missing { field }
            | Self::OutOfRange { field, .. }
            | Self::Conflict { field, .. } => field,
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

impl ConfigError {
    /// The same error about the second of two limits (`Builder::and`):
    /// its field is named `and.<field>`.
    pub(crate) fn in_second(mut self) -> Self {
        let (Self::Missing { field }
        | Self::OutOfRange { field, .. }
        | Self::Conflict { field, .. }) = &mut self;
        *field = match *field {
            "rate" => "and.rate",
            "capacity" => "and.capacity",
            "limit" => "and.limit",
            "window" => "and.window",
            "clock" => "and.clock",
            "memory" => "and.memory",
            other => other,
        };
        self
    }
}

impl ConfigError {
    /// The same error about a tier's quota (`Builder::tier`,
    /// `Limiter::set_quota`): its field is named `tier.<field>`.
    pub(crate) fn in_tier(mut self) -> Self {
        let (Self::Missing { field }
        | Self::OutOfRange { field, .. }
        | Self::Conflict { field, .. }) = &mut self;
        *field = match *field {
            "rate" => "tier.rate",
            "capacity" => "tier.capacity",
            "limit" => "tier.limit",
            "window" => "tier.window",
            "and.rate" => "tier.and.rate",
            "and.capacity" => "tier.and.capacity",
            "and.limit" => "tier.and.limit",
            "and.window" => "tier.and.window",
            "clock" => "tier.clock",
            "memory" => "tier.memory",
            "and.clock" => "tier.and.clock",
            "and.memory" => "tier.and.memory",
            other => other,
        };
        self
    }
}

/// A conversion that cannot fail: a quota given as the algorithm itself
/// ([`Limiter::set_quota`](crate::Limiter::set_quota)).
impl From<core::convert::Infallible> for ConfigError {
    fn from(never: core::convert::Infallible) -> Self {
        match never {}
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing { field } => write!(f, "`{field}` must be set"),
            Self::Conflict { field, reason } => write!(f, "`{field}` would not apply: {reason}"),
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

/// A [`reserve`](crate::Limiter::reserve) that was not made: nothing was
/// charged.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ReserveError, TokenBucket};
///
/// let limiter = TokenBucket::builder()
///     .rate(1, Duration::from_secs(1))
///     .capacity(2)
///     .build()?;
/// let first = limiter.reserve_n("alice", 2, Duration::ZERO).unwrap();
/// first.commit();
/// // The next token comes in a second: more than we are willing to wait.
/// let err = limiter.reserve("alice", Duration::from_millis(10)).unwrap_err();
/// assert!(matches!(err, ReserveError::TooLong { wait } if wait > Duration::from_millis(900)));
/// assert!(matches!(limiter.reserve_n("alice", 3, Duration::MAX), Err(ReserveError::Cost(_))));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReserveError {
    /// The request would conform only after `wait`, longer than the caller
    /// allowed. `Duration::MAX` means never: the instant lies past the last
    /// one the limiter's clock can express.
    TooLong {
        /// How long the request would have had to wait.
        wait: Duration,
    },
    /// The cost exceeds the capacity (token bucket) or limit (windows), so
    /// the request could never conform.
    Cost(CostError),
    /// The client is new and the limiter, at its
    /// [`max_clients`](crate::Builder::max_clients) cap under
    /// [`Overflow::DenyNew`](crate::Overflow::DenyNew), has no room for it.
    Full {
        /// When room is likely: once the longest-lived state can have
        /// become idle.
        retry_after: Duration,
    },
    /// This limiter cannot book ahead with its present settings: a
    /// [`FixedWindow`](crate::FixedWindow) (or a pair or a tier holding
    /// one) whose limit lies in the top half of its range, where its state
    /// word has no room for the windows a booking closes. An algorithm that
    /// can never book ahead (the
    /// [`SlidingWindowCounter`](crate::SlidingWindowCounter)) offers no
    /// `reserve` at all: see [`Reservable`](crate::Reservable).
    Unsupported,
}

impl From<CostError> for ReserveError {
    fn from(err: CostError) -> Self {
        Self::Cost(err)
    }
}

impl fmt::Display for ReserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong { wait } if *wait == Duration::MAX => {
                f.write_str("the request would never conform")
            }
            Self::TooLong { wait } => {
                write!(
                    f,
                    "the request would conform only after {wait:?}, longer than allowed"
                )
            }
            Self::Cost(err) => err.fmt(f),
            Self::Full { retry_after } => write!(
                f,
                "the limiter is full and denies new clients; room is likely after {retry_after:?}"
            ),
            Self::Unsupported => {
                f.write_str("this limiter cannot book requests ahead: a fixed window books ahead only with a limit in the lower half of its range")
            }
        }
    }
}

impl std::error::Error for ReserveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Cost(err) => Some(err),
            _ => None,
        }
    }
}
