//! A guide to tollgate: how each feature behaves, with examples.
//!
//! This module holds documentation only. Every code block in it is a
//! doctest, compiled and run by `cargo test`.
//!
//! - [`algorithms`]: the four algorithms, what each admits, and the one
//!   call site they share.
//! - [`reset_and_remove`]: starting one client afresh, or forgetting it.
//! - [`several_limits`]: holding a client to two limits in one exchange.
//! - [`tiers`]: quotas of their own for groups of clients, and quotas that
//!   change while the limiter runs.
//! - [`reservations`]: booking a request ahead and waiting for capacity.
//! - [`memory`]: how idle clients are forgotten, and the hard cap.
//! - [`bad_input`]: what every out-of-range setting, cost and clock reading
//!   gives.
//! - [`http`]: the tower layer for axum, tonic and hyper.
//! - [`redis`]: one budget per client shared by every replica.
//! - [`observability`]: the series a limiter publishes (`metrics`), and
//!   its events (`tracing`).
//!
//! The repository's `docs/` folder has the measurements
//! (`docs/PERFORMANCE.md`), the model checking (`docs/VERIFICATION.md`) and
//! the design, bit layouts and orderings (`docs/DESIGN.md`).

pub mod algorithms;
pub mod bad_input;
pub mod http;
pub mod memory;
pub mod observability;
pub mod redis;
pub mod reservations;
pub mod reset_and_remove;
pub mod several_limits;
pub mod tiers;
