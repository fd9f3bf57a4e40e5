//! Internals the loom models in `loom-tests/` drive directly. Compiled only
//! with `--features loom`; not part of the API and outside semver.
//!
//! The models check the cell layer (the compare-and-swap loop over each
//! algorithm's pure transition) and the store's lookup-or-insert protocol
//! over a loom-aware stand-in for the map, because `scc`'s map is not
//! loom-aware.

use core::time::Duration;

pub use crate::cell::{Algorithm, StateCell};
pub use crate::store::{get_or_insert, Index};
use crate::{ConfigError, FixedWindow, SlidingWindowCounter, TokenBucket};

/// A validated token bucket of `capacity`, refilled `tokens` per `per`.
///
/// # Errors
///
/// As the builder's.
pub fn token_bucket(tokens: u64, per: Duration, capacity: u64) -> Result<TokenBucket, ConfigError> {
    TokenBucket::new(tokens, per, capacity)
}

/// A validated sliding window counter.
///
/// # Errors
///
/// As the builder's.
pub fn sliding_window_counter(
    limit: u64,
    window: Duration,
) -> Result<SlidingWindowCounter, ConfigError> {
    SlidingWindowCounter::new(limit, window)
}

/// A validated fixed window.
///
/// # Errors
///
/// As the builder's.
pub fn fixed_window(limit: u64, window: Duration) -> Result<FixedWindow, ConfigError> {
    FixedWindow::new(limit, window)
}
