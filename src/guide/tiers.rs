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
//! A client keeps what it has spent, and at least the same share of its
//! quota: `max(spent, spent · new / old)`, rounded up, at most the whole
//! new quota. A client that spent 8 of 10 has spent 16 of 20 after an
//! upgrade, and 5 of 5 after a downgrade. So no sequence of quota changes
//! or tier moves at one instant admits more than the largest quota
//! involved: moving a client back and forth between plans never refills
//! it.
//!
//! - The token bucket keeps its missing tokens so (a full bucket stays
//!   full; an empty one starts the new quota empty, refilling at the new
//!   rate), and keeps every token it is missing even beyond the new
//!   bucket: a client moved from a bucket of 32 it emptied to one of 2
//!   waits until it has refilled 32 tokens' worth. So a refill earned in
//!   a small bucket is never multiplied by a move back to a large one:
//!   over any span, a client moved among plans gets at most the largest
//!   capacity involved and the refill at the fastest rate involved.
//! - The fixed window keeps the count of the window that is running so, in
//!   the new quota's window that is running.
//! - The sliding window counter keeps both windows' counts so with the
//!   same window; with another window, the client's estimate for the last
//!   window (rounded up) is kept so in the new window that is running.
//! - Two limits held together each keep their state by their own rule.
//! - A client whose own quota did not change keeps its state exactly.
//!
//! # Guarantees
//!
//! - **Linearizable.** Each client's change is one step in its history: a
//!   check lands wholly before it, under the old quota, or wholly after,
//!   under the new one.
//! - **Checks do not wait.** `set_quota` and `retier` take a lock that
//!   serialises changes; checks never take it. (A new client's first
//!   request is inserted under a lock per shard of the table, which a
//!   change holds while it carries that shard.)
//! - **Bookings.** A booking made before its own tier's quota changes
//!   keeps its ready time; its charge is carried with the rest of the state
//!   (at most one new bucket or window of it), and cancelling it
//!   afterwards gives nothing back.
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
