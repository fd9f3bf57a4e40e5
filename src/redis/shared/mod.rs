//! The limiter every floor above works on: [`RedisLimiter`] and its
//! `Inner`, which holds the floors below (the connection, the scripts,
//! the tiers, the tables) and this process's estimate of Redis's clock,
//! and the [`FailPolicy`] (`limiter`); and what it reports, the `tracing`
//! feature's events (`events`) and the `metrics` feature's publication
//! (`metrics`). Decides nothing.
//!
//! [`RedisLimiter`]: crate::redis::RedisLimiter
//! [`FailPolicy`]: crate::redis::FailPolicy

#[cfg(feature = "tracing")]
pub(crate) mod events;
pub(crate) mod limiter;
#[cfg(feature = "metrics")]
pub(crate) mod metrics;
