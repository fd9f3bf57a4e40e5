//! Lock-free, per-client rate limiting.
//!
//! A server calls [`RateLimiter::allow_request`] on every request, for every
//! client (API key, user id, IP address). Each client's state is one packed
//! 64-bit word in a lock-free map, updated by compare-and-swap: no lock on
//! the check path of a tracked client, no wait for another thread even
//! while the map rebuilds its tables, and a denied request writes nothing.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{RateLimiter, SlidingWindowCounter, TokenBucket};
//!
//! // Swapping the algorithm changes the constructor, never the call site.
//! let allow_bursts = std::env::args().count() > 99;
//! let limiter: Box<dyn RateLimiter> = if allow_bursts {
//!     Box::new(TokenBucket::builder().rate(100, Duration::from_secs(60)).build()?)
//! } else {
//!     Box::new(SlidingWindowCounter::builder().limit(100).window(Duration::from_secs(60)).build()?)
//! };
//! assert!(limiter.allow_request("alice"));
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # Algorithms
//!
//! - [`TokenBucket`]: bursts up to a capacity, continuous refill (GCRA).
//! - [`SlidingWindowCounter`]: the weighted two-window estimate.
//! - [`SlidingWindowLog`]: the exact count over the last window, one
//!   timestamp per admission.
//! - [`FixedWindow`]: a count per clock-aligned window.
//!
//! Each is built with its `builder()`, which validates the settings into a
//! [`ConfigError`] naming the field, and yields a [`Limiter`]. Besides
//! `allow_request`, a limiter offers [`Limiter::check`] and
//! [`Limiter::check_n`] (a [`Decision`] with the remaining quota and the
//! retry-after duration) and [`Limiter::peek`]. A token bucket, a fixed
//! window (or a pair of them) or a sliding window log also books requests
//! ahead: [`Limiter::reserve`] charges now and
//! says how long to wait (a [`Reservation`], given back if cancelled before
//! its time), and with the `tokio` feature `Limiter::until_ready` sleeps
//! until then.
//!
//! # Time
//!
//! A limiter reads its [`Clock`] once per check; [`MonotonicClock`] (the
//! CPU's time-stamp counter) is the default, [`CoarseClock`] trades up to
//! its resolution of accuracy for a reading that is one load from memory,
//! and [`ManualClock`] drives time by hand in tests. Windows are aligned to the clock's origin. Inside a
//! client's state time never runs backwards: if a user clock steps back, a
//! windowed algorithm treats the reading as the start of the window it last
//! recorded, and the token bucket simply sees a bucket no fuller than
//! before, so a backward step can delay admissions by at most its own length
//! and never admits more.
//!
//! # Eviction
//!
//! A client whose state has become *idle* (a full bucket, windows that have
//! fully passed, an empty log) carries no information: it decides every
//! future request exactly as a fresh client would. Forgetting it changes no
//! decision, so a limiter forgets idle clients:
//!
//! - incrementally, with no background thread: every 64 new clients, the
//!   thread adding the last one visits the next 256 entries of the map and
//!   removes the idle ones ([`Builder::auto_sweep`] sets the pace), so a
//!   server that only ever calls `allow_request` stays bounded under a flood
//!   of unique ids;
//! - all at once, on [`Limiter::sweep`].
//!
//! Eviction never loses or doubles an admission. The evictor retires an
//! idle state by a compare-and-swap to a tombstone value that no algorithm
//! produces, and only then removes the entry; a check that meets the
//! tombstone admits nothing on it and retries on a fresh state, at a clock
//! reading taken after the eviction. A check on a live client pays one
//! comparison for this, and writes nothing more.
//!
//! [`Builder::max_clients`] adds a hard cap. When the map is full and
//! nothing is idle, an [`Overflow`] policy decides: forget the sampled
//! client whose state expires first (the default, and the only policy that
//! may change a tracked client's decisions), deny the new client, or admit
//! it untracked. [`Limiter::stats`] counts every such event.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{ManualClock, Overflow, TokenBucket};
//!
//! let clock = ManualClock::new();
//! let limiter = TokenBucket::builder()
//!     .rate(10, Duration::from_secs(1))
//!     .max_clients(100_000)
//!     .overflow(Overflow::DenyNew)
//!     .key_type::<u64>()
//!     .clock(clock.clone())
//!     .build()?;
//! for id in 0..1_000 {
//!     assert!(limiter.allow_request(&id));
//! }
//! clock.advance(Duration::from_secs(1)); // every bucket has refilled
//! assert_eq!(limiter.sweep(), 1_000);
//! assert!(limiter.is_empty());
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # HTTP servers
//!
//! With the `tower` feature, `tower::RateLimitLayer` puts any limiter in
//! front of a tower service (axum, tonic, hyper with tower): keys from the
//! peer address, trusted proxies' `X-Forwarded-For`, an API key header or a
//! closure; `429` with `Retry-After` and the IETF `RateLimit` headers.
//!
//! # Beyond one machine
//!
//! With the `redis` feature, `Builder::redis` moves a limiter's state to
//! Redis (`tollgate::redis`), so that every replica shares each client's
//! budget; such a limiter is asked through [`AsyncCheck`], which every
//! in-process [`Limiter`] implements too.
//!
//! # Layers
//!
//! clock → algorithm (pure transitions of the word) → atomic cell (the one
//! CAS loop) → keyed store → the public limiter. `docs/DESIGN.md` in the
//! repository has the bit layouts and the measurements behind each choice.

#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
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
mod check;
mod clock;
mod decision;
mod error;
mod limiter;
mod memory;
#[cfg(feature = "redis")]
pub mod redis;
mod reservation;
mod store;
mod sync;
#[cfg(feature = "tower")]
pub mod tower;
#[cfg(feature = "tokio")]
mod wait;

pub use algorithm::{Both, FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};
pub use builder::{Builder, Tierable};
pub use cell::{Algorithm, Tier, Tiered};
pub use check::{AsyncCheck, CheckError, CheckErrorKind, Quota};
pub use clock::{Clock, CoarseClock, InstantClock, ManualClock, MonotonicClock};
pub use decision::Decision;
pub use error::{ConfigError, CostError, ReserveError};
pub use limiter::{Limiter, RateLimiter};
pub use memory::{Overflow, Stats};
pub use reservation::Reservation;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
