//! What out-of-range settings, costs and clock readings give.
//!
//! - **Settings.** Zero, missing or oversized settings are a
//!   [`ConfigError`](crate::ConfigError) naming the setting that is out of
//!   range and the range it must lie in.
//! - **Costs.** A cost larger than the capacity is a
//!   [`CostError`](crate::CostError) (it could never pass); a cost of 0 is
//!   admitted and records nothing.
//! - **Clocks.** A user clock that steps backwards never causes a panic,
//!   and on a state the limiter holds never an extra admission (a step
//!   back of `d` delays by at most `d`). A client forgotten before the
//!   step comes back fresh: admitted early by at most its capacity, once
//!   (see the [memory guide](crate::guide::memory)). Readings past 2^63 ns
//!   are treated as the last instant. A wait that
//!   would end only after that instant is reported as
//!   `retry_after() == Duration::MAX`: never.
//! - **Reservations.** A cost of 0 is ready at once and charges nothing,
//!   one above the capacity is a `ReserveError::Cost`, and one that would
//!   be ready only after the last instant is `ReserveError::TooLong` with a
//!   wait of `Duration::MAX`, with nothing charged.
//! - **Floods of unique ids.** A cap
//!   ([`max_clients(n)`](crate::Builder::max_clients)) holds the limiter to
//!   `n` clients whatever arrives, and idle clients are forgotten as new
//!   ones fill the table and by [`sweep`](crate::Limiter::sweep) (see
//!   [`memory`](super::memory)).
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{ConfigError, TokenBucket};
//!
//! let err = TokenBucket::builder().rate(0, Duration::from_secs(1)).build().unwrap_err();
//! assert!(matches!(err, ConfigError::OutOfRange { .. }));
//! println!("{err}"); // names the setting and its range
//!
//! let limiter = TokenBucket::builder().rate(10, Duration::from_secs(1)).build()?;
//! assert!(limiter.check_n("alice", 11).is_err()); // above the capacity: a CostError
//! assert!(limiter.check_n("alice", 0)?.is_allowed()); // free
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
