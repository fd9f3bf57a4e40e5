//! Bounded memory: forgetting idle clients, and a hard cap.
//!
//! A per-client map that only grows is a memory leak, and a denial of
//! service for anyone who can mint client ids (an IPv6 /64, fresh API
//! keys). Two things bound tollgate's map: a hard cap, if you set one
//! ([`max_clients(n)`](crate::Builder::max_clients): never more than `n`
//! clients, however many new ids arrive), and forgetting idle clients, as
//! new clients fill the table (no background thread, no call to remember)
//! and on [`sweep`](crate::Limiter::sweep), after which no client that was
//! idle is held.
//!
//! # Bytes per client
//!
//! Each client is its key and its state word side by side in one slot of
//! the limiter's own table, with no allocation per client beyond the key's
//! own: about 28 bytes with `u64` keys, 53 with `IpAddr` keys and 90 with
//! 16-character `String` keys for the token bucket and both windows,
//! table overhead included (`docs/PERFORMANCE.md` has the measurement). A
//! sliding window log holds `limit` 64-bit slots per client besides.
//!
//! # How idle clients are forgotten
//!
//! A client whose state equals a fresh client's (a full bucket, windows
//! that have fully passed, an empty log) carries no information: forgetting
//! it changes no decision, ever. tollgate forgets such clients in two ways:
//!
//! - **As new clients arrive.** When a new client fills a shard's table,
//!   the rebuild that makes room for it leaves behind the clients that
//!   have been idle for at least the state's own lifetime (a bucket's full
//!   refill time, two windows, one window), instead of moving them, and
//!   sizes the new table for the rest; a client that comes back soon is
//!   not forgotten and re-inserted over and over. Forgetting a client
//!   there costs less than moving it, so this sweep is nearly free. While
//!   new clients keep arriving, the map of a server that only ever calls
//!   `allow_request` holds at most about twice the clients active within
//!   the last two such lifetimes (1.5 times measured), plus a few slots
//!   per shard; the forgetting happens as tables fill, so the clients of a
//!   burst that went idle are held until new clients fill their shards
//!   again, or until a sweep. For a tighter map,
//!   add a paced sweep with [`auto_sweep`](crate::Builder::auto_sweep)
//!   (every `every` new clients, `slice` entries visited); turn both off
//!   with [`no_auto_sweep`](crate::Builder::no_auto_sweep).
//! - **On demand.** [`sweep`](crate::Limiter::sweep) visits the whole map
//!   and returns how many clients it removed.
//!
//! Neither loses or doubles an admission: the sweep retires an idle state
//! by a compare-and-swap to a tombstone value before removing it, and a
//! check that meets the tombstone retries on a fresh state.
//!
//! # A hard cap
//!
//! There is no cap unless you set one.
//! [`max_clients(n)`](crate::Builder::max_clients) caps the clients held;
//! concurrent inserts never overshoot it. A new client that finds the map
//! full first makes idle clients go (which changes nothing). If none is
//! idle, an [`Overflow`](crate::Overflow) policy decides. However many first
//! requests of one new client race into the last room, the client gets one
//! budget.
//!
//! | `Overflow` | what happens to the new client | held clients |
//! |---|---|---|
//! | `EvictSampled { sample: 5 }` (default) | tracked, after forgetting one of 5 sampled clients: the one whose state becomes idle soonest | the forgotten one starts afresh: **the only policy that changes a tracked client's decisions** |
//! | `DenyNew` | denied, `retry_after` set to the longest a state stays busy | untouched |
//! | `AdmitUntracked` | decided on a fresh state that is not stored: admitted, and unlimited until room frees up | untouched |
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{ManualClock, Overflow, TokenBucket};
//!
//! let clock = ManualClock::new();
//! let limiter = TokenBucket::builder()
//!     .rate(10, Duration::from_secs(1))
//!     .max_clients(1_000)
//!     .overflow(Overflow::DenyNew)
//!     .key_type::<u64>()
//!     .clock(clock.clone())
//!     .build()?;
//! for id in 0..1_000 {
//!     assert!(limiter.allow_request(&id));
//! }
//! assert!(!limiter.allow_request(&1_000));    // full: the new client is denied
//! assert_eq!(limiter.len(), 1_000);
//! assert_eq!(limiter.stats().denied_new, 1);
//!
//! clock.advance(Duration::from_secs(1));      // every bucket has refilled
//! assert_eq!(limiter.sweep(), 1_000);
//! assert!(limiter.is_empty());
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! [`stats`](crate::Limiter::stats) counts every eviction and every
//! application of the policy; a known client's check never touches the
//! counters.
