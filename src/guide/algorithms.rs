//! The four algorithms.
//!
//! | algorithm | state per client | bursts | accuracy |
//! |---|---|---|---|
//! | [`TokenBucket`](crate::TokenBucket) (GCRA) | one `u64`, a virtual time | up to `capacity` after idling, by design | exact; a rate whose token interval is not a whole nanosecond rounds toward denying |
//! | [`SlidingWindowCounter`](crate::SlidingWindowCounter) | one `u64`: window index and two counts | no boundary spike: the previous window still weighs in | the weighted estimate of the last window, computed exactly |
//! | [`SlidingWindowLog`](crate::SlidingWindowLog) | `limit` × `u64`, one expiry per admission in the window | none: exactly `limit` in any window of length `W` | exact; `limit ≤ 4 096` |
//! | [`FixedWindow`](crate::FixedWindow) | one `u64`: window index and count | up to `2 × limit` across a window boundary | exact count per clock-aligned window |
//!
//! Every limiter offers [`check`](crate::Limiter::check) (a
//! [`Decision`](crate::Decision) with `remaining()` and `retry_after()` for
//! `RateLimit` and `Retry-After` headers), [`check_n`](crate::Limiter::check_n)
//! for weighted requests, and [`peek`](crate::Limiter::peek) and
//! [`peek_n`](crate::Limiter::peek_n), which report without consuming. The
//! windowed algorithms pack the full window index beside their counts, so
//! their largest `limit` depends on the window (32 767 for one second and
//! 262 143 for a minute for the sliding window counter); `build()` names
//! the bound when a limit does not fit.
//!
//! # One call site
//!
//! Swapping the algorithm changes the constructor, never the call site:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tollgate::{FixedWindow, RateLimiter, SlidingWindowLog, TokenBucket};
//!
//! fn handle(limiter: &dyn RateLimiter, client: &str) -> u16 {
//!     if limiter.allow_request(client) { 200 } else { 429 }
//! }
//!
//! let second = Duration::from_secs(1);
//! let limiters: Vec<Arc<dyn RateLimiter>> = vec![
//!     Arc::new(TokenBucket::builder().rate(5, second).build()?),
//!     Arc::new(SlidingWindowLog::builder().limit(5).window(second).build()?),
//!     Arc::new(FixedWindow::builder().limit(5).window(second).build()?),
//! ];
//! for limiter in &limiters {
//!     let codes: Vec<u16> = (0..6).map(|_| handle(limiter.as_ref(), "alice")).collect();
//!     assert_eq!(codes, [200, 200, 200, 200, 200, 429]);
//! }
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # The boundary spike
//!
//! `cargo run --release --example swap` runs one piece of middleware,
//! holding an `Arc<dyn RateLimiter>`, over all four algorithms: 5 requests
//! 1 ms before a window boundary, 5 just after, 5 more half a window later
//! (limit 5 per second):
//!
//! ```text
//!                          | t=999ms   | t=1001ms  | t=1500ms  | admitted
//!             token bucket | ✓ ✓ ✓ ✓ ✓ | ✗ ✗ ✗ ✗ ✗ | ✓ ✓ ✗ ✗ ✗ | 7
//!   sliding window counter | ✓ ✓ ✓ ✓ ✓ | ✓ ✗ ✗ ✗ ✗ | ✓ ✓ ✗ ✗ ✗ | 8
//!       sliding window log | ✓ ✓ ✓ ✓ ✓ | ✗ ✗ ✗ ✗ ✗ | ✗ ✗ ✗ ✗ ✗ | 5
//!             fixed window | ✓ ✓ ✓ ✓ ✓ | ✓ ✓ ✓ ✓ ✓ | ✗ ✗ ✗ ✗ ✗ | 10
//! ```
//!
//! Only the fixed window admits twice the limit within 2 ms.
//!
//! # Time
//!
//! The default clock, [`MonotonicClock`](crate::MonotonicClock), reads the
//! CPU's time-stamp counter. Where a millisecond of accuracy is plenty,
//! [`CoarseClock`](crate::CoarseClock) reads a word that a background
//! thread updates every millisecond instead, and a check is judged as if
//! made up to the resolution earlier. Tests drive time by hand with
//! [`ManualClock`](crate::ManualClock):
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{ManualClock, TokenBucket};
//!
//! let clock = ManualClock::new();
//! let limiter = TokenBucket::builder()
//!     .rate(1, Duration::from_secs(1))
//!     .clock(clock.clone())
//!     .build()?;
//! assert!(limiter.allow_request("alice"));
//! assert_eq!(limiter.check("alice").retry_after(), Duration::from_secs(1));
//! clock.advance(Duration::from_secs(1));
//! assert!(limiter.allow_request("alice"));
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
