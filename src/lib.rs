//! Per-client rate limiting, checked in-process on every request: a budget
//! per API key, user or IP address (or one for every caller), with four
//! algorithms behind one call site, two limits on one key, plans that
//! change at run time, a tower layer for HTTP servers and Redis-backed
//! limiters that share one budget across replicas.
//!
//! # What to use when
//!
//! **Which algorithm.** Each is built with its `builder()` and checked
//! through the same calls:
//!
//! - [`TokenBucket`] (GCRA, governor's algorithm): bursts up to a
//!   capacity, then a steady rate. The usual choice.
//! - [`SlidingWindowCounter`]: about `limit` per window with no boundary
//!   spike, in one word: the previous window's count weighted by its
//!   overlap, plus this window's (an estimate, computed exactly).
//! - [`SlidingWindowLog`]: exactly `limit` in any window, at one
//!   timestamp per admission; for small limits.
//! - [`FixedWindow`]: `limit` per clock-aligned window, counts that reset
//!   on the clock (up to twice the limit across a boundary).
//!
//! **One budget, or one per client.** [`Builder::build`] makes a
//! [`Limiter`], keyed: each client (a `String` by default, checked by
//! `&str`; any `Hash + Eq` type with [`Builder::key_type`]) has a budget of
//! its own. [`Builder::build_direct`] makes a [`DirectLimiter`]: one budget
//! for every caller (calls to an upstream API, a job's writes), its state
//! one cell with no table and no key.
//!
//! **Two limits on one key.** [`Builder::and`] holds each client to two
//! limits at once (10 a second and 1 000 a day), admitting a request only
//! if both do and charging both in one exchange ([`Both`]).
//!
//! **Plans.** [`Builder::tier`] gives a tier a quota of its own and
//! [`Builder::tier_by`] picks a new client's tier; [`Limiter::set_quota`]
//! changes a tier's quota while the limiter runs, and [`Limiter::retier`]
//! moves a client whose plan changed, keeping what it has spent.
//!
//! **Waiting instead of refusing.** A token bucket, a fixed window or a
//! sliding window log (or a pair of them) books requests ahead:
//! [`Limiter::reserve`] charges now and says how long to wait (a
//! [`Reservation`], given back if cancelled before its time), and with the
//! `tokio` feature `until_ready` sleeps until then.
//!
//! **HTTP.** With the `tower` feature, [`tower::RateLimitLayer`] puts any
//! limiter in front of a tower service (axum, tonic, hyper with tower):
//! keys from the peer address, trusted proxies' `X-Forwarded-For`, an API
//! key header or a closure; `429` with `Retry-After` and the IETF
//! `RateLimit` headers. See the [`tower`] module and [`guide::http`].
//!
//! **Several replicas.** With the `redis` feature, `Builder::redis` moves a
//! limiter's state to Redis (the [`redis`] module), so that every replica
//! shares each client's budget; such a limiter is asked through
//! [`AsyncCheck`], which every in-process [`Limiter`] implements too.
//!
//! # Quick start
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{TokenBucket, TokenBucketLimiter};
//!
//! /// A request handler's first step: `Err(wait)` means answer
//! /// 429 Too Many Requests, with `Retry-After: wait`.
//! fn admit(limiter: &TokenBucketLimiter, api_key: &str) -> Result<(), Duration> {
//!     let decision = limiter.check(api_key);
//!     if decision.is_allowed() {
//!         Ok(())
//!     } else {
//!         Err(decision.retry_after())
//!     }
//! }
//!
//! fn main() -> Result<(), tollgate::ConfigError> {
//!     // 100 requests an hour per API key, in bursts of up to 10.
//!     let limiter = TokenBucket::builder()
//!         .rate(100, Duration::from_secs(3600))
//!         .capacity(10)
//!         .build()?;
//!     for _ in 0..10 {
//!         assert!(admit(&limiter, "key-1").is_ok());
//!     }
//!     let wait = admit(&limiter, "key-1").unwrap_err();
//!     assert!(wait <= Duration::from_secs(36)); // one token's refill
//!     assert!(admit(&limiter, "key-2").is_ok()); // each key has its own budget
//!     Ok(())
//! }
//! ```
//!
//! The [`guide`] walks through every feature with examples: the
//! [algorithms](guide::algorithms), [two limits at
//! once](guide::several_limits), [tiers and quotas that change at run
//! time](guide::tiers), [booking ahead](guide::reservations), [reset and
//! remove](guide::reset_and_remove), [memory and the cap](guide::memory),
//! [bad input](guide::bad_input), [HTTP servers](guide::http),
//! [Redis](guide::redis) and [observability](guide::observability). The
//! HTTP layer is the [`tower`] module and the Redis-backed limiters the
//! [`redis`] module, each behind its feature.
//!
//! # Features
//!
//! | feature | what it brings | extra dependencies |
//! |---|---|---|
//! | *(none)* | the in-process limiters: [`TokenBucket`], [`SlidingWindowCounter`], [`SlidingWindowLog`], [`FixedWindow`], pairs, tiers, reservations, [`DirectLimiter`] | `crossbeam-epoch`, `crossbeam-utils`, `quanta`, `foldhash`, `portable-atomic` |
//! | `tower` | [`tower::RateLimitLayer`] for axum, tonic and hyper: client-IP and API-key extraction, IETF `RateLimit` headers, `429` with `Retry-After` | `tower`, `http`, `pin-project-lite` |
//! | `axum` | `tower`, and `PeerIp` and `TrustedProxyIp` reading axum's `ConnectInfo` by themselves | `axum` (its `tokio` feature only) |
//! | `tokio` | `until_ready` on [`Limiter`] and [`DirectLimiter`]: book a request and sleep until it may proceed; [`TokioClock`], a clock that follows tokio's paused time in tests | `tokio` (`time` only) |
//! | `redis` | `tollgate::redis`: the same limiters with their state in Redis 7+, shared by every replica | `redis`, `tokio`, `papaya` |
//! | `metrics` | counters and gauges on the `metrics` facade (decisions by limiter and outcome, clients held, the layer's requests, a Redis limiter's round trips and breaker), for whichever recorder the application installs; `cargo run --features axum,metrics --example metrics` serves them to Prometheus | `metrics` |
//! | `tracing` | `tracing` events for what an operator must see once: a client cap reached, a quota changed, a Redis breaker opening or closing | `tracing` |
//!
//! The README says which versions and features of `redis`, `tonic` and
//! `metrics-exporter-prometheus` to add beside these.
//!
//! (`loom` is for the crate's own model checking, `cargo test --features
//! loom`: never enable it in a build.)
//!
//! # Coming from governor
//!
//! The [`TokenBucket`] is the GCRA that governor implements: on the same
//! quota and the same clock readings it makes the same decisions, and a
//! denied single check reports the same wait, to the nanosecond.
//!
//! | governor 0.10 | tollgate |
//! |---|---|
//! | `Quota::per_second(n)` (`per_minute`, `per_hour`) | `TokenBucket::builder().rate(n, Duration::from_secs(1))` (60 s, 3 600 s); the capacity defaults to `n`, as governor's burst does |
//! | `Quota::with_period(p)?.allow_burst(b)` | `.rate(1, p).capacity(b)` |
//! | `RateLimiter::keyed(quota)`, `DefaultKeyedRateLimiter<K>` | `TokenBucket::builder()…key_type::<K>().build()?`, [`TokenBucketLimiter<K>`](TokenBucketLimiter) |
//! | `RateLimiter::direct(quota)`, `DefaultDirectRateLimiter` | `TokenBucket::builder()…build_direct()?`, [`DirectLimiter<TokenBucket>`](DirectLimiter) |
//! | `check_key(&k)`: `Result<(), NotUntil>` | [`check(&k)`](Limiter::check): a [`Decision`] (`is_allowed()`, `remaining()`, `retry_after()`); or [`allow_request(&k)`](Limiter::allow_request): a `bool` |
//! | `not_until.wait_time_from(clock.now())` | [`decision.retry_after()`](Decision::retry_after) |
//! | `check_key_n(&k, n)`, direct `check_n(n)`: `Result<Result<(), NotUntil>, InsufficientCapacity>` | [`check_n(&k, n)`](Limiter::check_n), direct [`check_n(n)`](DirectLimiter::check_n): `Result<Decision, CostError>` |
//! | `retain_recent()`, `len()` | [`sweep()`](Limiter::sweep), [`len()`](Limiter::len); idle clients are also forgotten as new ones arrive, and [`max_clients(n)`](Builder::max_clients) caps the table |
//! | `until_ready()`, `until_key_ready(&k)` | `until_ready()`, `until_ready(&k)` (`tokio` feature) |
//! | `until_key_ready_with_jitter(&k, Jitter::up_to(d))` | `until_ready_jittered(&k, 1, d)` (`tokio` feature) |
//! | `RateLimiter::dashmap_with_clock(quota, clock)`, `FakeRelativeClock` | [`.clock(clock)`](Builder::clock) on the builder, [`ManualClock`] (or, on tokio's paused time, [`TokioClock`]) |
//! | tower_governor's `GovernorLayer::new(config)` | [`tower::RateLimitLayer`]`::new(limiter, key)` (`tower` feature) |
//! | tower_governor's `GovernorConfigBuilder::default().per_second(s).burst_size(b)`: one request every `s` seconds | `.rate(1, Duration::from_secs(s)).capacity(b)` |
//! | tower_governor's `PeerIpKeyExtractor`, `GlobalKeyExtractor` | `PeerIp` (IPv6 grouped by `/64` unless `.ipv6_prefix(128)`), `GlobalKey` (with a direct limiter) |
//! | tower_governor's `SmartIpKeyExtractor` (trusts forwarding headers from any peer) | `TrustedProxyIp::new(proxies)` (reads `X-Forwarded-For`, or `Forwarded`, only from the proxies you list) |
//!
//! Two differences in the numbers: a period that is not a whole number of
//! nanoseconds (`Quota::per_second(3)`) is rounded down by governor and up
//! by tollgate, which errs toward denying, so the two part by a nanosecond
//! per token; and governor's `retain_recent` keeps a key one emission
//! interval after its state is a fresh one's, where `sweep` forgets it
//! then. The repository's `tests/from_governor.rs` runs every row beside
//! governor's (and tower_governor's) on clocks moved together. The rows
//! that need no feature, here:
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{ManualClock, TokenBucket};
//!
//! let clock = ManualClock::new(); // FakeRelativeClock
//! // RateLimiter::dashmap_with_clock(Quota::per_second(10), clock)
//! let keyed = TokenBucket::builder()
//!     .rate(10, Duration::from_secs(1))
//!     .clock(clock.clone())
//!     .build()?;
//! // RateLimiter::direct_with_clock(
//! //     Quota::with_period(100 ms).allow_burst(5), clock)
//! let direct = TokenBucket::builder()
//!     .rate(1, Duration::from_millis(100))
//!     .capacity(5)
//!     .clock(clock.clone())
//!     .build_direct()?;
//!
//! for _ in 0..10 {
//!     assert!(keyed.allow_request("alice")); // check_key(..).is_ok()
//! }
//! let decision = keyed.check("alice"); // check_key(&k)
//! assert!(decision.is_denied());
//! // NotUntil::wait_time_from(clock.now())
//! assert_eq!(decision.retry_after(), Duration::from_millis(100));
//!
//! assert!(direct.check_n(5)?.is_allowed()); // check_n(5)
//! assert!(direct.check_n(6).is_err()); // Err(InsufficientCapacity)
//!
//! clock.advance(Duration::from_secs(1));
//! assert_eq!(keyed.sweep(), 1); // retain_recent()
//! assert!(keyed.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Algorithms
//!
//! Each is built with its `builder()`, which validates the settings into a
//! [`ConfigError`] naming the field, and yields a [`Limiter`]. Besides
//! `allow_request`, a limiter offers [`Limiter::check`] and
//! [`Limiter::check_n`] (a [`Decision`] with the remaining quota and the
//! retry-after duration) and [`Limiter::peek`]. The
//! [algorithms chapter](guide::algorithms) of the guide compares them
//! request by request.
//!
//! # Time
//!
//! A limiter reads its [`Clock`] once per check; [`MonotonicClock`] (the
//! CPU's time-stamp counter) is the default, [`CoarseClock`] trades up to
//! its resolution of accuracy for a reading that is one load from memory,
//! and [`ManualClock`] drives time by hand in tests; with the `tokio`
//! feature, [`TokioClock`] follows tokio's paused time in async tests. Windows start on the
//! Unix epoch's multiples of their length ([`Clock::unix_origin`]). Inside a
//! client's state time never runs backwards: if a user clock steps back, a
//! windowed algorithm treats the reading as the start of the window it last
//! recorded, and the token bucket simply sees a bucket no fuller than
//! before, so a backward step can delay admissions by at most its own length
//! and never admits more.
//!
//! # Eviction
//!
//! What bounds a limiter's memory is a hard cap, [`Builder::max_clients`]
//! (never more than `n` clients held, however many new ids arrive, and
//! concurrent inserts never overshoot it), and forgetting idle clients. A
//! client whose state has become *idle* (a full bucket, windows that have
//! fully passed, an empty log) carries no information: it decides every
//! future request exactly as a fresh client would. Forgetting it changes no
//! decision, so a limiter forgets idle clients:
//!
//! - incrementally, with no background thread: when a new client fills a
//!   shard's table, the rebuild that makes room leaves behind the clients
//!   idle for a whole horizon instead of moving them, and sizes the new
//!   table for the rest; and at most once a horizon a new client passes
//!   over the whole map. So while new ids keep arriving the table holds
//!   the recently active clients rather than every id ever seen, and a
//!   flood is forgotten once new clients arrive again (the bound, and
//!   figures, in [`guide::memory`]; [`Builder::auto_sweep`] adds a paced
//!   sweep that keeps the map tighter still);
//! - all at once, on [`Limiter::sweep`]: afterwards the limiter holds no
//!   client that was idle when the sweep visited it.
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
//! # How it works
//!
//! Each client's state lives in a table of the limiter's own and is
//! updated by compare-and-swap: one 64-bit word for the token bucket and
//! both window counters, two words exchanged as one for a client held to
//! two limits ([`Both`]), and one slot per admission for the sliding
//! window log (a client with a tier of its own keeps a word naming its
//! quota beside its state, [`Tiered`]). A check on a client the limiter
//! holds takes no lock and never waits for another thread, even while the
//! table rebuilds, and a denied request writes nothing to the client's
//! state (with the `metrics` feature, the one check a second that
//! publishes the counts runs the installed recorder's code; see the
//! [observability guide](crate::guide::observability); and a check reads
//! its clock, which for a [`TokioClock`] on paused time means tokio's own
//! lock). A client's first request takes no lock either: it claims its
//! slot with a compare-and-swap, and never waits for another first
//! request, a removal or a sweep's walk over its shard, nor for a rebuild
//! moving its shard's entries (while one moves, it claims its slot in the
//! rebuild's new table). A rebuild of a shard's table (as the table grows,
//! as a sweep or removals shrink it, or as a quota changes) holds a lock
//! per shard, and a first request waits for it only while it seals the old
//! table (deciding the first requests caught half way) and links the new
//! one, or if the new table fills before the move ends. A first request
//! that finds its shard's table full makes that rebuild itself, and so
//! first waits for any writer holding the shard's lock (a removal, a
//! sweep's walk) to let it go. Two limits at once stay
//! lock-free where the CPU has a 128-bit compare-and-swap
//! ([`Both::is_lock_free`]: x86-64, AArch64).
//!
//! # Platforms
//!
//! tollgate needs `std`: it is not `no_std`. It uses threads
//! ([`CoarseClock`]'s updater, the `metrics` feature's publisher), std's
//! clocks ([`InstantClock`], and the wall clock that [`MonotonicClock`]
//! reads once to place windows on Unix time), and `crossbeam-epoch` and
//! `quanta` built with std. WebAssembly is not supported: no wasm32 target
//! is built or tested, and on `wasm32-unknown-unknown` std's clocks, which
//! the default clock reads when it is made, panic when read.
//!
//! # Layers
//!
//! clock → algorithm (pure transitions of the word) → atomic cell (the one
//! CAS loop) → keyed store → the public limiter. `docs/DESIGN.md` in the
//! repository has the bit layouts and the measurements behind each choice.
//!

// The modules behind a feature link to themselves when built with it (as
// on docs.rs), and to docs.rs otherwise.
#![cfg_attr(feature = "tower", doc = "[`tower`]: crate::tower")]
#![cfg_attr(
    feature = "tower",
    doc = "[`tower::RateLimitLayer`]: crate::tower::RateLimitLayer"
)]
#![cfg_attr(
    not(feature = "tower"),
    doc = "[`tower`]: https://docs.rs/tollgate/latest/tollgate/tower/index.html"
)]
#![cfg_attr(
    not(feature = "tower"),
    doc = "[`tower::RateLimitLayer`]: https://docs.rs/tollgate/latest/tollgate/tower/struct.RateLimitLayer.html"
)]
#![cfg_attr(feature = "tokio", doc = "[`TokioClock`]: crate::TokioClock")]
#![cfg_attr(
    not(feature = "tokio"),
    doc = "[`TokioClock`]: https://docs.rs/tollgate/latest/tollgate/struct.TokioClock.html"
)]
#![cfg_attr(feature = "redis", doc = "[`redis`]: crate::redis")]
#![cfg_attr(
    feature = "redis",
    doc = "[`redis::RedisLimiter`]: crate::redis::RedisLimiter"
)]
#![cfg_attr(
    not(feature = "redis"),
    doc = "[`redis`]: https://docs.rs/tollgate/latest/tollgate/redis/index.html"
)]
#![cfg_attr(
    not(feature = "redis"),
    doc = "[`redis::RedisLimiter`]: https://docs.rs/tollgate/latest/tollgate/redis/struct.RedisLimiter.html"
)]
#![cfg_attr(docsrs, feature(doc_cfg))]
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
pub mod guide;
mod limiter;
mod memory;
#[cfg(feature = "redis")]
pub mod redis;
mod reservation;
mod store;
mod sync;
#[cfg(feature = "metrics")]
mod telemetry;
#[cfg(feature = "tower")]
pub mod tower;
#[cfg(feature = "tokio")]
mod wait;

pub use algorithm::{Both, FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};
pub use builder::{Builder, Tierable, Windowed};
pub use cell::{Algorithm, Tier, Tiered};
pub use check::{AsyncCheck, CheckError, CheckErrorKind, Quota};
#[cfg(feature = "tokio")]
pub use clock::TokioClock;
pub use clock::{Clock, CoarseClock, InstantClock, ManualClock, MonotonicClock};
pub use decision::{Decision, LimitFigures};
pub use error::{ConfigError, CostError, ReserveError};
pub use limiter::{DirectLimiter, Limiter, RateLimiter, TierAlgorithm};
pub use memory::{Overflow, Stats};
pub use reservation::{Reservable, Reservation};

/// A token bucket limiter keyed by `K` (`String` by default), reading the
/// default clock: `Limiter<TokenBucket, K>`, for a struct field.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{FixedWindowLimiter, TokenBucket, TokenBucketLimiter};
///
/// struct Api {
///     per_user: TokenBucketLimiter,
///     per_ip: FixedWindowLimiter<std::net::IpAddr>,
/// }
///
/// let api = Api {
///     per_user: TokenBucket::builder().rate(10, Duration::from_secs(1)).build()?,
///     per_ip: tollgate::FixedWindow::builder()
///         .limit(100)
///         .window(Duration::from_secs(60))
///         .key_type()
///         .build()?,
/// };
/// assert!(api.per_user.allow_request("alice"));
/// assert!(api.per_ip.allow_request(&std::net::IpAddr::from([127, 0, 0, 1])));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub type TokenBucketLimiter<K = String> = Limiter<TokenBucket, K>;

/// A fixed window limiter keyed by `K` (`String` by default), reading the
/// default clock: `Limiter<FixedWindow, K>`. See [`TokenBucketLimiter`]
/// for a struct holding one.
pub type FixedWindowLimiter<K = String> = Limiter<FixedWindow, K>;

/// A sliding window counter limiter keyed by `K` (`String` by default),
/// reading the default clock: `Limiter<SlidingWindowCounter, K>`.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate::{SlidingWindowCounter, SlidingWindowCounterLimiter};
///
/// #[derive(Clone)]
/// struct AppState {
///     limiter: Arc<SlidingWindowCounterLimiter<u64>>,
/// }
///
/// let state = AppState {
///     limiter: Arc::new(
///         SlidingWindowCounter::builder()
///             .limit(60)
///             .window(Duration::from_secs(60))
///             .key_type()
///             .build()?,
///     ),
/// };
/// assert!(state.clone().limiter.allow_request(&7));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub type SlidingWindowCounterLimiter<K = String> = Limiter<SlidingWindowCounter, K>;

/// A sliding window log limiter keyed by `K` (`String` by default), reading
/// the default clock: `Limiter<SlidingWindowLog, K>`. See
/// [`TokenBucketLimiter`] for a struct holding one.
pub type SlidingWindowLogLimiter<K = String> = Limiter<SlidingWindowLog, K>;

/// A limiter whose clients have tiers, each with a quota of the algorithm
/// `A` that can change while it runs, keyed by `K` (`String` by default):
/// `Limiter<Tiered<A>, K>`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{TieredLimiter, TokenBucket};
///
/// struct Plans {
///     limiter: TieredLimiter<TokenBucket, u64>,
/// }
///
/// let second = Duration::from_secs(1);
/// let plans = Plans {
///     limiter: TokenBucket::builder()
///         .rate(1, second)
///         .tier(1, TokenBucket::builder().rate(100, second))
///         .tier_by(|account: &u64| u16::from(*account < 1000))
///         .build()?,
/// };
/// assert_eq!(plans.limiter.tier_of(&7), 1);
/// plans.limiter.set_quota(1, plans.limiter.tier_quota(0))?;
/// assert_eq!(plans.limiter.check(&7).limit(), 1);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub type TieredLimiter<A, K = String> = Limiter<Tiered<A>, K>;

// Every public limiter type, and what a limiter hands out, is `Send + Sync`:
// checked whenever the crate compiles.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Limiter<TokenBucket>>();
    send_sync::<Limiter<FixedWindow, u64, ManualClock>>();
    send_sync::<Limiter<SlidingWindowCounter, std::net::IpAddr, CoarseClock>>();
    send_sync::<Limiter<SlidingWindowLog, String, InstantClock>>();
    send_sync::<Limiter<Both<TokenBucket, FixedWindow>>>();
    send_sync::<Limiter<Both<SlidingWindowCounter, TokenBucket>>>();
    send_sync::<Limiter<Tiered<TokenBucket>>>();
    send_sync::<Limiter<Tiered<Both<FixedWindow, SlidingWindowCounter>>, u64>>();
    send_sync::<Builder<Tiered<TokenBucket>, u64, ManualClock>>();
    send_sync::<Reservation<'static, TokenBucket>>();
    send_sync::<Reservation<'static, Tiered<Both<TokenBucket, FixedWindow>>, u64>>();
    send_sync::<Reservation<'static, SlidingWindowLog, String, ManualClock>>();
    send_sync::<Box<dyn RateLimiter>>();
    send_sync::<DirectLimiter<TokenBucket>>();
    send_sync::<DirectLimiter<SlidingWindowLog, ManualClock>>();
    send_sync::<DirectLimiter<Both<TokenBucket, FixedWindow>, CoarseClock>>();
    send_sync::<Decision>();
    send_sync::<Quota>();
    send_sync::<CheckError>();
    send_sync::<ConfigError>();
    send_sync::<ReserveError>();
    send_sync::<Stats>();
    #[cfg(feature = "tower")]
    {
        send_sync::<tower::RateLimitLayer<Limiter<TokenBucket>, tower::HeaderKey>>();
        send_sync::<
            tower::RateLimitLayer<std::sync::Arc<Limiter<Tiered<TokenBucket>>>, tower::PeerIp>,
        >();
        send_sync::<
            tower::RateLimitService<(), Limiter<Both<TokenBucket, FixedWindow>>, tower::PeerIp>,
        >();
    }
    #[cfg(feature = "redis")]
    {
        send_sync::<redis::RedisLimiter<TokenBucket>>();
        send_sync::<redis::RedisLimiter<SlidingWindowLog>>();
        send_sync::<redis::RedisLimiter<Both<TokenBucket, FixedWindow>>>();
    }
};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
