//! tollgate: lock-free, per-client rate limiting.
//!
//! Placeholder crate docs; replaced below.

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

#[cfg(feature = "loom")]
#[doc(hidden)]
#[path = "loom_support.rs"]
pub mod __loom;
mod algorithm;
mod builder;
mod cell;
mod clock;
mod decision;
mod error;
mod limiter;
mod store;
mod sync;

pub use algorithm::{FixedWindow, SlidingWindowCounter, TokenBucket};
pub use builder::Builder;
pub use cell::Algorithm;
pub use clock::{Clock, InstantClock, ManualClock, MonotonicClock};
pub use decision::Decision;
pub use error::{ConfigError, CostError};
pub use limiter::{Limiter, RateLimiter};
