//! Resetting and forgetting one client.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::SlidingWindowCounter;
//!
//! let limiter = SlidingWindowCounter::builder()
//!     .limit(2)
//!     .window(Duration::from_secs(60))
//!     .build()?;
//! assert!(limiter.allow_request("alice") && limiter.allow_request("alice"));
//! assert!(!limiter.allow_request("alice"));
//! assert!(limiter.reset("alice"));   // fresh again, still tracked
//! assert!(limiter.allow_request("alice"));
//! assert!(limiter.remove("alice"));  // forgotten now; its room is free
//! assert!(limiter.is_empty());
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! Both are linearizable against concurrent checks of the client: a check
//! is decided wholly before (its admission is forgotten with the state) or
//! wholly after (on the fresh state). [`reset`](crate::Limiter::reset)
//! exchanges a one-word state for a fresh one in place, keeping the
//! client's place under `max_clients`; a sliding window log, many words, is
//! reset by forgetting it. [`remove`](crate::Limiter::remove) retires the
//! state by an exchange to a tombstone value, then removes the entry.
//!
//! Unlike a check, neither is wait-free: a reset waits for a reservation's
//! cancel already under way on a client of its stripe (see
//! [`reservations`](super::reservations)), and taking a removed entry out
//! of the table takes its shard's lock, which an insert or a table rebuild
//! may hold. A check on a known client never waits for either.
//!
//! A booking made before a reset or a removal belongs to the state it was
//! made on: cancelling it afterwards gives nothing back (see
//! [`reservations`](super::reservations)).
