//! Quotas per client, and quotas that change at run time.
//!
//! Clients can have quotas of their own: give each tier its quota, and a
//! resolver that puts each new client in a tier. The resolver runs when
//! the client's state is created (its first request, or its first since it
//! was forgotten) and when you call
//! [`Limiter::retier`](crate::Limiter::retier); the tier is remembered
//! with the state, and a check on a known client neither calls it again
//! nor takes a lock. So when a client's plan changes in your own records,
//! call `retier` for it: the limiter holds it in its old tier until then.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::TokenBucket;
//!
//! let limiter = TokenBucket::builder()
//!     .rate(10, Duration::from_secs(1))                             // tier 0: everyone else
//!     .tier(1, TokenBucket::builder().rate(100, Duration::from_secs(1)))
//!     .tier(2, TokenBucket::builder().rate(1000, Duration::from_secs(1)).capacity(2000))
//!     .tier_by(|key: &String| match key.split_once('-') {
//!         Some(("pro", _)) => 1,
//!         Some(("partner", _)) => 2,
//!         _ => 0,
//!     })
//!     .build()?;
//! assert_eq!(limiter.check("pro-ann").limit(), 100);      // the client's own limit
//! assert_eq!(limiter.check("partner-bob").limit(), 2000);
//! assert_eq!(limiter.check("carol").limit(), 10);
//!
//! assert_eq!(limiter.tier_of("pro-ann"), 1);
//!
//! // Change a tier's quota while the limiter runs: every client of the
//! // tier, known or new, is held to it from now on.
//! limiter.set_quota(1, TokenBucket::builder().rate(200, Duration::from_secs(1)))?;
//! assert_eq!(limiter.check("pro-ann").limit(), 200);
//!
//! // A tier's quota is a value: give tier 2's to tier 1.
//! limiter.set_quota(1, limiter.tier_quota(2))?;
//! assert_eq!(limiter.check("pro-ann").limit(), 2000);
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # Moving a client to another tier
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::{Arc, RwLock};
//! use std::time::Duration;
//! use tollgate::TokenBucket;
//!
//! // The plans in your own records, which the resolver reads.
//! let plans: Arc<RwLock<HashMap<String, u16>>> = Arc::default();
//! let records = Arc::clone(&plans);
//! let limiter = TokenBucket::builder()
//!     .rate(10, Duration::from_secs(1))
//!     .tier(1, TokenBucket::builder().rate(100, Duration::from_secs(1)))
//!     .tier_by(move |key: &String| records.read().unwrap().get(key).copied().unwrap_or(0))
//!     .build()?;
//! assert_eq!(limiter.check("ann").limit(), 10);
//!
//! // Ann upgrades: the limiter still holds her in tier 0 ...
//! plans.write().unwrap().insert("ann".to_owned(), 1);
//! assert_eq!(limiter.check("ann").limit(), 10);
//! // ... until she is moved, keeping what she has spent.
//! assert_eq!(limiter.retier("ann"), 1);
//! assert_eq!(limiter.check("ann").limit(), 100);
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! A move converts the client's state by the rule below, as one step in
//! its history, and, like a quota change, costs a pass over the clients
//! held.
//!
//! The builder takes its settings in any order: `.tier(..)` before
//! `.rate(..)`, and `.tier_by(..)` before or after `.key_type::<K>()` (the
//! resolver's key type sets the limiter's). A setting that would not apply
//! (a clock or a memory setting given to a tier's builder) is a
//! [`ConfigError::Conflict`](crate::ConfigError::Conflict) from `build()`,
//! never silently dropped.
//!
//! [`Builder::reconfigurable`](crate::Builder::reconfigurable) makes a
//! limiter with one quota that can change the same way. Tiers and changes
//! are offered for the token bucket, the fixed window, the sliding window
//! counter, and two of them held together (a tier of
//! `TokenBucket::builder().rate(100, second).and_rate(100_000, day)` is a
//! plan with a burst rate and a daily allowance). The sliding window log
//! has no tiers.
//!
//! # What a client keeps when its quota changes
//!
//! One rule, for every algorithm and for both `set_quota` and `retier`:
//! **a move never adds to what a client may take**, now or at any earlier
//! reading (one exception for the sliding window counter, below), and
//! what it may take grows at the new quota's rate, up to the
//! new quota's capacity. Requests already booked stay charged. It gives
//! both bounds:
//!
//! - over any span, a client moved among plans is admitted at most the
//!   largest capacity involved plus the span's refill at the fastest rate
//!   involved (at one instant, at most the largest capacity: moving a
//!   client back and forth never refills it);
//! - a client moved to a slower plan waits at most one of that plan's
//!   intervals (a bucket's refill of one token, a window) for its next
//!   request, past what it had booked. A client downgraded from a
//!   thousand a minute to ten an hour waits at most six minutes, not the
//!   hours its spent tokens would take to refill at the new rate.
//!
//! By algorithm:
//!
//! - The token bucket keeps the tokens it holds, at most the new
//!   capacity, refilling at the new rate (a client that emptied a bucket
//!   of 1 000 a second and moves to one a second waits one second). A
//!   full bucket is credited with what the new rate has refilled since it
//!   was full toward a larger capacity, so a client idle for a whole new
//!   refill moves as a fresh client. Moved to a bucket that takes longer
//!   to refill from empty, a full bucket counts as full from the move (at
//!   an earlier reading it may hold no more than a bucket empty when the
//!   old one was, refilling at the new rate): moved again, it is credited
//!   the refill from then. A cut to one an hour and a restore to 20 a
//!   minute at once leave an idle client 1 token, and the other 19 come
//!   at 20 a minute (57 s). A bucket in debt (a booking ahead)
//!   stays empty until the same instant.
//! - The fixed window: what is left in the window that is running, at
//!   most the new limit, is what is left in the new quota's window that is
//!   running. A window closed by a booking stays closed, and the booked
//!   requests count in the new window where they run (a raise from 10 to
//!   11 a minute after 10 spent and 10 booked for the next minute leaves
//!   that minute 1 more). A client that counted nothing since before the
//!   new window began is a fresh client there.
//! - The sliding window counter: the whole requests the client's estimate
//!   leaves, at most the new limit, are what is left in the new window
//!   that is running; what it used weighs on it as the new windows slide
//!   past. A client whose counts weigh nothing since the new window began
//!   is a fresh client there. The exception to "never adds": at a reading
//!   behind the move (a clock that came back) in the window before, such
//!   a client is held as one of the new quota whose whole window before
//!   was full, which under a larger limit can leave it more than the old
//!   state did (10 of 10 used in one minute and moved to 20 two minutes
//!   on: at a reading half way through the minute after the one it used,
//!   it has 10 left, where the old state left 5). Never more than the new
//!   limit, so within the bounds below.
//! - For both, after a move that found a client fresh, a later move takes
//!   its last use as the first boundary of those windows not before it: a
//!   quota cut to a second and restored to a minute leaves an idle client
//!   the whole minute's limit, since a minute's boundaries are a
//!   second's. With window lengths that do not divide each other (7 s and
//!   a minute), a client that last counted within 7 s of the minute's
//!   start may be held as if it counted in the minute.
//! - Two limits held together each keep their state by their own rule; a
//!   limit whose settings did not change keeps its state exactly, and so
//!   does a client whose own quota did not change.
//!
//! An upgraded client keeps what it had left, and fills toward the new
//! quota at its rate. To give it a fresh start instead, reset it after
//! the move:
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{ManualClock, TokenBucket};
//!
//! let minute = Duration::from_secs(60);
//! let limiter = TokenBucket::builder()
//!     .rate(10, minute)
//!     .reconfigurable()
//!     .clock(ManualClock::new())
//!     .build()?;
//! assert_eq!((0..20).filter(|_| limiter.allow_request("ann")).count(), 10);
//! limiter.set_quota(0, TokenBucket::builder().rate(1_000, minute))?;
//! assert_eq!(limiter.peek("ann").remaining(), 0);
//! limiter.reset("ann");
//! assert_eq!(limiter.peek("ann").remaining(), 1_000);
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! A client the limiter has forgotten (idle, see the
//! [memory guide](crate::guide::memory)) comes back as a fresh client of
//! its tier. A tiered limiter forgets a client only once it has been idle
//! for the longest refill or window of any tier: by then the move rule
//! carries it to a fresh state under every quota the limiter has, so
//! forgetting it changes no decision until the quotas change. A later
//! change can set the two apart, once: a client the limiter forgot comes
//! back as a fresh client of its tier's quota then, where a held one is
//! carried by the rule, which never adds. So after a quota raised past
//! every quota the limiter had when it forgot the client, or one lowered
//! and raised again, the forgotten client may be admitted at most that
//! quota's capacity more than a held one would be, once, and is never
//! refused longer.
//!
//! # Guarantees
//!
//! - **Linearizable.** Each client's change is one step in its history: a
//!   check lands wholly before it, under the old quota, or wholly after,
//!   under the new one.
//! - **Checks do not wait.** `set_quota` and `retier` take a lock that
//!   serialises changes; checks never take it. (A new client's first
//!   request waits for a change while it carries the client's shard of the
//!   table, under that shard's lock.)
//! - **Bookings.** A booking made before its own tier's quota changes
//!   keeps its ready time; its charge is carried with the rest of the state
//!   (a booked request stays charged), and cancelling it afterwards gives
//!   nothing back.
//! - **Bad input.** A quota that does not validate is a
//!   [`ConfigError`](crate::ConfigError) naming its field with `tier.` in
//!   front (`tier.capacity`), from `build()` or from `set_quota`, which then
//!   changes nothing. A resolver that panics does so on the check that
//!   brings the client in, before anything is recorded and outside every
//!   lock: the panic reaches that check's caller, and the limiter serves
//!   everyone, that client included, as before. A tier with no quota of
//!   its own is held to tier 0's. A cost above the client's own tier's
//!   capacity is denied with `retry_after() == Duration::MAX`; above every
//!   tier's it is a [`CostError`](crate::CostError). Racing first requests
//!   of one new client may each call the resolver once; one state wins.
//!   Cancelling a booking made before a quota change, of any tier, gives
//!   nothing back.
//!
//! # Costs
//!
//! A tiered client holds one more `u64` (its tier, and the address of the
//! quota its state was written under). A check on a known client reads its
//! quota through that word, for about one instruction more than a plain
//! limiter's check. `set_quota` and `retier` visit every client once,
//! shard by shard.
