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
//! Neither ever waits for another thread, as a check never does:
//!
//! - a removal whose client's part of the table another thread is writing
//!   at that instant (adding a client, sweeping, or rebuilding it, perhaps
//!   descheduled half way) leaves the retired entry in the table for
//!   later. The client reads as absent at once, but the entry keeps its
//!   unit of room under `max_clients`, and [`len`](crate::Limiter::len)
//!   counts it, until it is next met: by the client's next request, a
//!   sweep, a rebuild of that part of the table, or another reset or
//!   removal of it;
//! - a reset that meets a reservation's cancel in progress on a client of
//!   its stripe (see [`reservations`](super::reservations)) cannot put a
//!   fresh state in the same cell, so it forgets the client instead, as a
//!   removal does: the client starts afresh all the same, and takes a unit
//!   of room again on its next request.
//!
//! A booking made before a reset or a removal belongs to the state it was
//! made on: cancelling it afterwards gives nothing back (see
//! [`reservations`](super::reservations)).
