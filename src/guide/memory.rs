//! Bounded memory: forgetting idle clients, and a hard cap.
//!
//! A per-client map that only grows is a memory leak, and a denial of
//! service for anyone who can mint client ids (an IPv6 /64, fresh API
//! keys). Two things bound tollgate's map: a hard cap, if you set one
//! ([`max_clients(n)`](crate::Builder::max_clients): never more than `n`
//! clients, however many new ids arrive), and forgetting idle clients, as
//! new clients arrive (no background thread; see "The bound" for exactly
//! what that bounds, and when to call `sweep`) and on
//! [`sweep`](crate::Limiter::sweep), after which no client that was idle
//! is held.
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
//! it changes no decision while the clock never steps back (a new
//! client's request is judged at a reading taken after the look at the
//! map that found it absent, so never before the reading that forgot its
//! old state). A user clock that reads ahead and comes back is held to
//! two bounds: a client the limiter never saw decides exactly as a fresh
//! client, and a client not checked while the clock read ahead for less
//! than a horizon decides as if it never had (the sweeps that arrivals
//! make trust a reading only a horizon after it). A client forgotten
//! before the clock steps back (by [`sweep`](crate::Limiter::sweep) at a
//! reading ahead, or while it read ahead for longer than a horizon) comes
//! back fresh: it may be admitted early by at most its capacity, once.
//! tollgate forgets such clients in two ways:
//!
//! - **As new clients arrive.** A new client's request pays for the
//!   forgetting, in two ways; a known client's check never does:
//!   - when its insert fills a shard's table, the rebuild that makes room
//!     leaves behind the clients that have been idle for at least the
//!     state's own lifetime (its *horizon*: a bucket's full refill time,
//!     two windows for the sliding window counter, one window for the
//!     fixed window and the log), instead of moving them, and sizes the
//!     new table for the rest. Forgetting a client there costs less than
//!     moving it.
//!   - at most once per horizon, the first new client to arrive makes one
//!     pass over the whole map (if it holds more than 512 clients),
//!     forgetting every client idle for a horizon already, and rebuilding
//!     smaller each table left under a quarter full: tables that no longer
//!     fill up (after a burst, new clients only trickle in) do not keep
//!     their lapsed clients. Checks go on during the pass and never wait
//!     for it, but the request that makes it takes as long as the pass:
//!     one visit per held client, shard by shard (about 16 ns per `u64`
//!     client, `docs/PERFORMANCE.md`).
//!
//!   A tiered or reconfigurable limiter's horizon is its longest tier's,
//!   and it counts a client as idle only once its state has been idle for
//!   that horizon (so that a later move changes nothing; see the
//!   [tiers guide](crate::guide::tiers)).
//!
//!   A client idle for less than a horizon is kept: one that comes back
//!   soon is not forgotten and re-inserted over and over. For a tighter
//!   map, add a paced sweep with [`auto_sweep`](crate::Builder::auto_sweep)
//!   (every `every` new clients, `slice` entries visited); turn all of this
//!   off with [`no_auto_sweep`](crate::Builder::no_auto_sweep).
//! - **On demand.** [`sweep`](crate::Limiter::sweep) visits the whole map
//!   and returns how many clients it removed: it forgets every client idle
//!   at that instant.
//!
//! # The bound
//!
//! Without a cap, after any call, the limiter holds no more clients
//! ([`len`](crate::Limiter::len)) than made a request within the three
//! horizons before the latest new client arrived, or since, or within the
//! horizon before the pass before the latest (a pass trusts the reading of
//! the one before it: after a silence, the first new client's pass
//! forgets only what was idle then, and the next, a horizon later, the
//! rest); plus 512 (8 per shard of its map). A booking counts as a request
//! at the instant it is due; a client the limiter forgot counts as new when
//! it comes back; a tiered limiter's clients count as idle a horizon late.
//! (With several threads: once the pass that arrival set off is over.) So
//! while new clients keep arriving the map follows the clients active
//! lately, and a flood of one-off ids costs memory for about three
//! horizons of them.
//!
//! # When memory is given back
//!
//! A forgotten or removed client's key and state stay in its shard's
//! table until that table is rebuilt, which a shard is when a new client
//! fills it; when a removal (a [`remove`](crate::Limiter::remove), a
//! [`reset`](crate::Limiter::reset) that forgets, an eviction, a sweep
//! slice) leaves it with more removed entries than live ones, and more
//! than 28; when the pass or a [`sweep`](crate::Limiter::sweep) leaves it
//! under a quarter full (tables of up to 32 slots keep their size; `sweep`
//! rebuilds those too); or when a quota changes. So after any call the
//! tables hold at most twice as many keys as the limiter holds clients
//! ([`len`](crate::Limiter::len), which counts a removed client whose
//! entry is still in place), plus 1 792 (28 per shard of 64); and a
//! rebuild a removal makes comes after more removals than entries it
//! moves, so it costs each of them a constant share.
//!
//! The table a rebuild replaces, and the keys of removed clients it holds,
//! is freed once no thread can still be reading it. A `remove`, a `reset`
//! or a `sweep` that rebuilt a table frees it before it returns if no
//! other thread is inside a call on a limiter (the limiters of a process
//! share one epoch collector, `crossbeam-epoch`'s); otherwise, and after a new
//! client's rebuild, the first *write* that finds it expired frees it (a
//! new client's first request, a `remove`, a `reset`, a sweep), outside
//! any lock. A check of a client the limiter holds never frees anything,
//! because it never runs another client's key's `Drop`. So after a burst
//! and then only known clients, the burst's keys stay allocated until the
//! next write, or the next [`sweep`](crate::Limiter::sweep).
//!
//! `sweep` gives back everything before it returns, whatever other
//! threads do: it rebuilds every table that holds a forgotten or removed
//! client, then frees the old tables. If other threads are checking, it
//! waits for the checks they have in flight to end (checks begun since
//! never read the old tables), sleeping and holding no lock, so that no
//! check waits for it. It waits for at most a second: a check held up
//! longer than that (a key's `Eq` that blocks, a thread stopped inside a
//! call) leaves the tables it could still read to the first write after
//! it ends. The limiter then owns about one key per client it holds
//! (`tests/memory_return.rs` shows both with a key type that counts its
//! values, the second with two threads checking throughout).
//!
//! What is bounded is counted in calls, not in time: no thread runs, so
//! after a burst of new clients followed by silence, or by known clients
//! only, the map keeps the burst's clients until new clients arrive again
//! (whose requests then make the passes: the first after a silence
//! forgets only what was idle at the pass before it, the next, a horizon
//! later, the rest). To forget them without
//! waiting for one, call [`sweep`](crate::Limiter::sweep), every horizon or
//! so from a timer you already have, say: it leaves only the clients not
//! idle at that instant. With [`no_auto_sweep`](crate::Builder::no_auto_sweep)
//! no arrival forgets anyone, and the map grows until `sweep` is called
//! or a cap binds.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{ManualClock, TokenBucket};
//!
//! let clock = ManualClock::new();
//! let limiter = TokenBucket::builder()
//!     .rate(10, Duration::from_secs(1)) // a horizon of 1 s
//!     .key_type::<u64>()
//!     .clock(clock.clone())
//!     .build()?;
//! for id in 0..10_000 {
//!     assert!(limiter.allow_request(&id)); // a burst of one-off clients
//! }
//! clock.advance(Duration::from_secs(5));
//! assert!(limiter.allow_request(&7)); // a known client: nothing forgotten
//! assert_eq!(limiter.len(), 10_000);
//! // A new one passes over the map, forgetting what was idle at the last
//! // pass's reading (the burst's, at 0 s) as well as at its own: nothing.
//! assert!(limiter.allow_request(&10_000));
//! assert_eq!(limiter.len(), 10_001);
//! // The next pass, a horizon later, trusts the reading of 5 s: the burst
//! // goes.
//! clock.advance(Duration::from_secs(1));
//! assert!(limiter.allow_request(&10_001));
//! assert_eq!(limiter.len(), 3);
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
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
//! | `DenyNew` | denied, `retry_after` set to the longest a held client can stay busy: a horizon past now, or past the instant the latest booking falls due if later | untouched |
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
