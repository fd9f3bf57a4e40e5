//! Limiters whose state lives in Redis, shared by every process that
//! points at the same Redis: the `redis` feature.
//!
//! Build one from the same builder as an in-process limiter, adding the
//! connection and a key prefix with [`Builder::redis`](crate::Builder::redis);
//! it decides as the in-process limiter of the same settings does (see
//! "One semantics" below). Each check is one round trip: a Lua script,
//! sent by `EVALSHA` (and loaded again if Redis lost it), that reads
//! Redis's own clock (`TIME`), decides, writes the new state with an
//! expiry at the instant it becomes idle, and answers. The limiter is
//! asked through [`AsyncCheck`], like every limiter, so it plugs into the
//! HTTP layer of the `tower` feature as it is.
//!
//! ```no_run
//! # // `no_run`: it needs a Redis server on localhost.
//! use std::time::Duration;
//! use tollgate::redis::FailPolicy;
//! use tollgate::TokenBucket;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! // Connects on first use: see "Starting while Redis is down".
//! let conn = redis::aio::ConnectionManager::new_lazy_with_config(
//!     client,
//!     redis::aio::ConnectionManagerConfig::new(),
//! )?;
//! let limiter = TokenBucket::builder()
//!     .rate(100, Duration::from_secs(60))
//!     .redis(conn, "api")
//!     .timeout(Duration::from_millis(50))
//!     .fail_policy(FailPolicy::Local)
//!     .build()?;
//! let decision = limiter.check("alice").await?;
//! if decision.is_denied() {
//!     println!("retry in {:?}", decision.retry_after());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Keys
//!
//! A client's state is one key, `<prefix>:{<client>}:<tag>`, where `tag`
//! names the algorithm (`tb`, `fw`, `swc`, `swl`, or a pair's two joined
//! by `+`): [`RedisLimiter::key`] names it. The client's bytes are a Redis
//! Cluster hash tag, so each client's key maps to one slot and clients
//! spread over the cluster. The prefix and the client's bytes are escaped
//! (`%`, `{` and `}` as `%25`, `%7B` and `%7D`; an empty client as `%`),
//! so the tag is never empty, no client id can change the slot or reach
//! another client's key, and no two prefixes share a key. Every write sets
//! the key to expire when its state becomes idle (a window that has
//! passed, an empty log), so Redis holds only clients that still carry
//! information. A token bucket's key lingers a refill (capacity × the
//! interval of a token, the longest of every quota that wrote it) past the
//! instant the bucket is full again: full under a small quota is not full
//! under a larger one, which carries the state on until then.
//!
//! # Time and exactness
//!
//! Time is Redis's (`TIME`), so every process agrees on it whatever its own
//! clock says, and windows start on the Unix epoch, as the in-process
//! limiters' do. Lua counts in doubles, so the scripts count whole
//! microseconds: a window must be a whole number of µs, a token's interval
//! is rounded up to one (erring toward denying, as the in-process bucket
//! rounds to the ns), and the builder rejects any setting that would take
//! a stored value past 2<sup>53</sup> (see [`RedisBuilder::build`]).
//!
//! # When Redis fails
//!
//! A check that times out or cannot reach Redis is answered by the
//! [`FailPolicy`], and the limiter backs off: until the backoff is over,
//! checks skip Redis and go straight to the policy, then one probe at a
//! time goes through, doubling the backoff (up to a cap) each time it
//! fails. Only a failure to reach Redis backs off, and only such a
//! failure ([`CheckErrorKind::Timeout`], [`CheckErrorKind::Unavailable`])
//! is admitted by [`FailPolicy::FailOpen`]. A value under a client's key
//! that the limiter cannot read ([`CheckErrorKind::Corrupt`]: another
//! program's value, or a value of another type) and an error reply about
//! one request ([`CheckErrorKind::Other`]) fail that client's checks only,
//! without backing off: `FailClosed` and `FailOpen` answer them with the
//! error, `Local` decides them in process.
//!
//! # Starting while Redis is down
//!
//! Make the connection with `ConnectionManager::new_lazy_with_config`, as
//! above: it connects on the first check, so a replica started (or
//! restarted) during an outage builds its limiter and serves, its checks
//! answered by the [`FailPolicy`] until Redis is back, and then by Redis,
//! with no restart. `ConnectionManager::new` connects before it returns,
//! and fails while Redis is down ("Connection refused"): a replica that
//! waits for it does not come up until Redis does.
//!
//! # Control, tiers and pairs
//!
//! As an in-process limiter, a Redis limiter can
//! [`peek`](RedisLimiter::peek), [`reset`](RedisLimiter::reset) and
//! [`remove`](RedisLimiter::remove) a client (for every process sharing
//! the Redis), put clients in tiers ([`RedisBuilder::tier_by`],
//! [`RedisLimiter::set_quota`]), hold two limits at once, atomically in
//! one key (a builder made with `and` or `and_rate`), and book requests
//! ahead ([`RedisLimiter::reserve_n`], [`RedisLimiter::until_ready`],
//! [`RedisReservation::cancel`]).
//!
//! # One semantics
//!
//! The scripts decide the common case; a quota change, a booking and a
//! state written under other settings run the in-process algorithms' own
//! code on the state read from Redis, written back by compare-and-set. The
//! guide's Redis page ([`crate::guide::redis`]) lists what a fault does
//! to decisions, each with its test, and the few differences from the
//! in-process limiters that stay.
//!
//! # Replicas with different quotas
//!
//! Every state is stamped with the settings it was written under. A
//! replica that reads a state written under other settings (a rolling
//! deploy that changed the limit, the rate or the window) converts it as
//! the in-process limiters' `set_quota` does, once, and writes it back:
//! what the client spent above a lower limit counts as that limit, a
//! higher limit admits the difference, a bucket keeps the tokens it is
//! missing, and a window's counts move to the new window. The sliding
//! window log keeps every entry and judges them by the reader's limit and
//! window.

// Floors, bottom to top, each importing only the floors below it
// (`scripts/check_layers.py`): script, wire, quota, table, shared, check,
// lease, api.
mod api;
mod check;
mod lease;
mod quota;
mod script;
mod shared;
mod table;
#[cfg(all(test, not(feature = "loom")))]
mod tests;
mod wire;

#[cfg(doc)]
use crate::check::{AsyncCheck, CheckErrorKind};
pub use api::builder::RedisBuilder;
pub use check::book::{RedisReservation, RedisReserveError};
pub use check::decide::RedisCheck;
pub use quota::algorithm::RedisAlgorithm;
pub use script::key::RedisKey;
pub use shared::limiter::{FailPolicy, RedisLimiter};
pub use table::lease::Lease;
pub use wire::connection::RedisConnection;
pub use wire::guard::RedisStats;
