//! Holding a client to two limits at once.
//!
//! A client can be held to two limits together, say 10 a second **and**
//! 1 000 an hour: a request is admitted only if both admit it, and is then
//! charged to both; a denial charges neither.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{FixedWindow, ManualClock, TokenBucket};
//!
//! let clock = ManualClock::new();
//! let limiter = TokenBucket::builder()
//!     .rate(10, Duration::from_secs(1))
//!     .and_rate(1000, Duration::from_secs(3600))   // a second token bucket
//!     .clock(clock.clone())
//!     .build()?;
//! assert_eq!((0..15).filter(|_| limiter.allow_request("alice")).count(), 10);
//! let denied = limiter.check("alice");
//! assert_eq!(denied.limit(), 10);                  // the limit that binds
//! assert_eq!(denied.retry_after(), Duration::from_millis(100));
//!
//! // Any two of the token bucket, sliding window counter and fixed window:
//! let bursty_but_capped = TokenBucket::builder()
//!     .rate(1, Duration::from_secs(1))
//!     .capacity(20)
//!     .and(FixedWindow::builder().limit(100).window(Duration::from_secs(86_400)))
//!     .build()?;
//! assert!(bursty_but_capped.allow_request("bob"));
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! A [`Decision`](crate::Decision) reports the limit that binds: `limit()`
//! of the one with fewer requests left (the smaller on a tie), the smaller
//! `remaining()`, and the longer `retry_after()`, which is exact: each
//! limit, once it would admit a request, keeps admitting it as time
//! passes, so both admit from the later of their two instants on. The
//! largest cost a check may ask for is the smaller capacity.
//!
//! Checking two limiters one after the other is not the same: when the
//! second denies, the first has already been charged, so a client held
//! back by a per-second limit burns its hourly budget on requests that were
//! never served. tollgate keeps both limits' states side by side in 16
//! bytes and updates them with one 128-bit compare-and-swap (`cmpxchg16b`
//! on x86-64, detected at run time; AArch64 has its own), so the pair
//! changes at once or not at all. [`Both::is_lock_free`](crate::Both::is_lock_free)
//! says whether this machine has the instruction; without it the update
//! takes a short lock.
//!
//! A pair of token buckets and fixed windows books requests ahead on both
//! limits at once (see [`reservations`](super::reservations)), and a pair
//! can have tiers (see [`tiers`](super::tiers)).
