//! The top floor, what a user calls: the builder (`builder`); a check's
//! entry, which sends it by its lease, a batch or a call of its own, the
//! limiter's figures and its tiers' quotas (`limiter`); and peeks, resets
//! and removals (`control`). Uses every floor below; `redis`'s own
//! `mod.rs` re-exports the public types.

pub(crate) mod builder;
mod control;
mod limiter;
