//! Booking ahead, and waiting for capacity.
//!
//! A client that would rather wait than be refused books its request
//! ahead. [`reserve`](crate::Limiter::reserve) charges it at once (so
//! waiting clients are served in the order they booked) and says how long
//! to wait; the wait is exact, the instant the request conforms and not a
//! nanosecond earlier. The token bucket, the fixed window and the sliding
//! window log book ahead, and so does a pair of token buckets and fixed
//! windows.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{ManualClock, ReserveError, TokenBucket};
//!
//! let clock = ManualClock::new();
//! let limiter = TokenBucket::builder()
//!     .rate(1, Duration::from_secs(1))
//!     .capacity(1)
//!     .clock(clock.clone())
//!     .build()?;
//! assert!(limiter.allow_request("alice"));
//!
//! // Willing to wait up to 5 s: booked, charged now, ready in 1 s.
//! let reservation = limiter.reserve("alice", Duration::from_secs(5)).unwrap();
//! assert_eq!(reservation.wait(), Duration::from_secs(1));
//! clock.advance(reservation.wait()); // std::thread::sleep(reservation.wait())
//! reservation.commit();              // proceed: the charge stands
//!
//! // Not willing to wait 1 s: nothing is charged.
//! let err = limiter.reserve("alice", Duration::from_millis(10)).unwrap_err();
//! assert!(matches!(err, ReserveError::TooLong { .. }));
//!
//! // Giving up before its time gives the charge back.
//! let second = limiter.reserve("alice", Duration::MAX).unwrap();
//! assert!(second.cancel());
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # Cancelling
//!
//! [`cancel`](crate::Reservation::cancel), or dropping the reservation
//! before its ready time, gives the charge back if nothing was charged to
//! the client since: the client's state goes back to exactly what it was
//! before the booking. If another check or booking came after it, nothing
//! is given back, since that request's wait was computed on top of this
//! one (handing the units out again would admit two requests in one slot).
//! Cancelling newest first gives everything back. A booking acts only on
//! the state it was made on: after the client was reset, removed, evicted
//! or carried to a new quota, cancelling it gives nothing back. To keep
//! each client's state one word, this is tracked per stripe of clients (1
//! in 256, by the key's hash): replacing one client's state also makes the
//! pending bookings of the other clients of its stripe give nothing back
//! (the safe direction), and a quota change does so for every client. A
//! cancel never waits for another thread: not for a reset, nor for another
//! cancel, however long that one is held up (a reservation dropped on an
//! async worker never stalls on another task's slow key `Hash` or clock).
//! Once its time has come, a reservation is consumed: dropping it does
//! nothing.
//!
//! Call [`commit`](crate::Reservation::commit) when you act on a
//! reservation. Dropping an uncommitted one cancels it if the limiter's
//! clock has not yet reached `ready_at()`, and a `CoarseClock` can still be
//! short of it when your sleep ends.
//!
//! # Errors
//!
//! [`ReserveError`](crate::ReserveError), with nothing charged: `TooLong`
//! beyond `max_wait` (a wait of `Duration::MAX` means never), `Cost` above
//! the capacity, `Full` for a new client at a `DenyNew` cap, and
//! `Unsupported` for a fixed window whose limit lies in the top half of its
//! range (its count needs room for twice the limit to book ahead). A cost
//! of 0 is ready at once and charges nothing.
//!
//! # Per algorithm
//!
//! - **The fixed window** books a request that does not fit into the
//!   first later window where it fits, ready at that window's start, and
//!   closes the windows before it: requests are served in the order they
//!   booked, so a check in the current window is denied once a booking has
//!   gone to the next one.
//! - **Two limits at once** book a request for the first instant at which
//!   both limits conform, and charge it to both as a check at that instant
//!   would, in one 128-bit exchange.
//! - **The sliding window log** books a request of cost `n` for the first
//!   instant at which `n` of its slots are free, and charges it now by
//!   claiming those slots with the expiry of an admission at that instant.
//!   Cancelling before its time gives back what no later booking has
//!   claimed from it: as many slots as it booked units, of those that
//!   still hold an admission at its instant, each get back one of the
//!   admissions the booking replaced, the latest first. Which slot held
//!   which admission never matters: a client forgotten while idle is
//!   given back exactly what a held one would be. A booking of several
//!   units claims its slots one by one; if a check or another booking
//!   takes one of them first, it gives back what it claimed and is timed
//!   again, and a check that meets it halfway may be denied (never
//!   wrongly admitted).
//! - **The sliding window counter** does not book ahead, and the compiler
//!   says so: `reserve` needs a [`Reservable`](crate::Reservable)
//!   algorithm. A booking ready at `r` must be charged now as the check at
//!   `r` would charge it, and when `r` is the next window's start or
//!   later, the word (an index and two counts) has no room to mark the
//!   current window closed, as the fixed window's does: a check read in
//!   the current window could be let in ahead of the booking.
//!
//! ```compile_fail,E0277
//! use std::time::Duration;
//! use tollgate::SlidingWindowCounter;
//!
//! let limiter = SlidingWindowCounter::builder()
//!     .limit(10)
//!     .window(Duration::from_secs(1))
//!     .build()?;
//! let _ = limiter.reserve("alice", Duration::MAX); // not Reservable
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # Waiting on tokio
//!
//! With the `tokio` feature, `limiter.until_ready(&key).await` and
//! `until_ready_n(&key, n).await` book and sleep on tokio's timer until
//! the request may proceed; `until_ready_jittered(&key, n, max_jitter)`
//! adds up to `max_jitter` so that clients woken by one refill spread out.
//! Dropping the future while it sleeps cancels its booking. In tests on
//! tokio's paused time (`#[tokio::test(start_paused = true)]`), build the
//! limiter with `.clock(TokioClock::new())`: it reads tokio's time, so the
//! limiter refills as `tokio::time::advance` moves it and `until_ready`
//! returns after exactly its wait, in no real time.
//!
//! # One budget for everyone
//!
//! A [`DirectLimiter`](crate::DirectLimiter)
//! ([`build_direct`](crate::Builder::build_direct)) books ahead as a keyed
//! limiter does, on its one budget:
//! [`reserve`](crate::DirectLimiter::reserve) and
//! [`reserve_n`](crate::DirectLimiter::reserve_n) take no key and answer a
//! [`Reservation`](crate::Reservation) with the same waits, the same
//! errors and the same cancel (the tail rule) as a keyed limiter with a
//! single client; with the `tokio` feature, `until_ready()` and
//! `until_ready_n(n)` wait on it. The same algorithms book ahead. Nothing
//! replaces a direct limiter's state (it has no `reset`, `remove` or quota
//! change), so a booking's cancel never gives nothing back for that
//! reason: only the tail rule and the ready time decide.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{ManualClock, SlidingWindowLog};
//!
//! let clock = ManualClock::new();
//! // At most 2 calls to the upstream in any 10 s, from all callers together.
//! let upstream = SlidingWindowLog::builder()
//!     .limit(2)
//!     .window(Duration::from_secs(10))
//!     .clock(clock.clone())
//!     .build_direct()?;
//! assert!(upstream.allow());
//! clock.advance(Duration::from_secs(4));
//! assert!(upstream.allow());
//!
//! // The next slot frees at 10 s, 6 s from now: booked, and charged now.
//! let third = upstream.reserve(Duration::from_secs(60)).unwrap();
//! assert_eq!(third.wait(), Duration::from_secs(6));
//! assert!(upstream.check().is_denied(), "the booking holds the slot");
//!
//! // Given up before its time: the slot is free again at 10 s.
//! assert!(third.cancel());
//! clock.advance(Duration::from_secs(6));
//! assert!(upstream.allow());
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! A direct limiter also implements [`RateLimiter`](crate::RateLimiter)
//! and [`AsyncCheck`](crate::AsyncCheck) for any key type, ignoring the
//! key: every caller, whatever its key, draws on the one budget. It stands
//! beside keyed limiters behind a `dyn RateLimiter`, and behind the HTTP
//! layer (the `tower` feature) with `GlobalKey` it is a global limit on
//! every request that passes the layer; the
//! [`DirectLimiter`](crate::DirectLimiter) documentation shows both.
