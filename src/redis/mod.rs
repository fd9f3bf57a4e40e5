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
//! let conn = redis::aio::ConnectionManager::new(client).await?;
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
//! the key to expire when its state becomes idle (a full bucket, a window
//! that has passed, an empty log), so Redis holds only clients that still
//! carry information.
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

mod book;
mod builder;
mod call;
mod coalesce;
mod control;
mod decide;
#[cfg(feature = "tracing")]
mod events;
mod fallback;
mod guard;
mod key;
mod lease;
mod lua;
#[cfg(feature = "metrics")]
mod metrics;
mod pair;
mod shortcut;
mod spec;
mod state;
#[cfg(all(test, not(feature = "loom")))]
mod tests;
mod tier;

use core::fmt;
use core::marker::PhantomData;
use core::time::Duration;
use std::sync::Arc;

pub use book::{RedisReservation, RedisReserveError};
pub use builder::{RedisBuilder, RedisConnection};
pub use decide::RedisCheck;
use guard::Breaker;
pub use guard::RedisStats;
use key::Layout;
pub use key::RedisKey;
pub use lease::Lease;
use shortcut::DenyCache;
use spec::Spec;

use crate::algorithm::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};
use crate::cell::Algorithm;
use crate::check::{AsyncCheck, CheckError, CheckErrorKind, Quota};
use crate::error::ConfigError;
use crate::sync::{AtomicU128, AtomicU64, Ordering};

/// What a Redis limiter answers when Redis does not: it timed out, could
/// not be reached, refused the command, or holds a value under the
/// client's key that the limiter cannot read.
///
/// # Examples
///
/// ```
/// use tollgate::redis::FailPolicy;
///
/// assert_eq!(FailPolicy::default(), FailPolicy::Local);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailPolicy {
    /// Admit the request when Redis timed out or could not be reached
    /// ([`Timeout`](CheckErrorKind::Timeout),
    /// [`Unavailable`](CheckErrorKind::Unavailable)). The decision reports
    /// the full quota (`remaining == limit`, both waits zero; a pair's two
    /// limits each full), since nothing is known. Any other failure (a
    /// value the limiter cannot read, an error reply, a reply not
    /// understood) is answered with the [`CheckError`], as under
    /// `FailClosed`: it would recur on every request of that client, and
    /// admitting it would lift its limit.
    FailOpen,
    /// Answer the check with the [`CheckError`] (kind
    /// [`Timeout`](CheckErrorKind::Timeout),
    /// [`Unavailable`](CheckErrorKind::Unavailable),
    /// [`Corrupt`](CheckErrorKind::Corrupt),
    /// [`Protocol`](CheckErrorKind::Protocol) or
    /// [`Other`](CheckErrorKind::Other)): the HTTP layer answers
    /// `503 Service Unavailable`.
    FailClosed,
    /// Decide with an in-process limiter of the same quotas, one per
    /// process: while Redis is down each replica enforces the quota on its
    /// own, so a client gets at most the quota per replica. The default:
    /// an outage of the limiter's store neither takes the service down nor
    /// lifts every limit.
    #[default]
    Local,
}

mod sealed {
    /// How an algorithm runs in Redis. Sealed: only tollgate's four
    /// algorithms and their pairs implement it.
    #[allow(unreachable_pub)] // a sealed supertrait, named only here
    pub trait Sealed: crate::algorithm::FromParams {
        /// The settings as the scripts run them.
        fn spec(&self) -> Result<super::Spec, crate::ConfigError>;

        /// The in-process limiter of `FailPolicy::Local`.
        fn fallback(
            settings: &super::fallback::Settings,
        ) -> Result<Box<dyn super::fallback::Fallback>, crate::ConfigError>;
    }
}

/// An algorithm that a [`RedisLimiter`] can run: all four of tollgate's,
/// and two of the token bucket, the fixed window and the sliding window
/// counter held together.
///
/// # Examples
///
/// ```
/// fn runs_in_redis<A: tollgate::redis::RedisAlgorithm>() {}
/// runs_in_redis::<tollgate::SlidingWindowLog>();
/// ```
pub trait RedisAlgorithm: Algorithm + sealed::Sealed {}

macro_rules! word_algorithm {
    ($algorithm:ty, $spec:ident) => {
        impl sealed::Sealed for $algorithm {
            fn spec(&self) -> Result<Spec, ConfigError> {
                Spec::$spec(self)
            }

            fn fallback(
                settings: &fallback::Settings,
            ) -> Result<Box<dyn fallback::Fallback>, ConfigError> {
                fallback::tiered::<Self>(settings)
            }
        }
        impl RedisAlgorithm for $algorithm {}
    };
}
word_algorithm!(TokenBucket, bucket);
word_algorithm!(FixedWindow, fixed);
word_algorithm!(SlidingWindowCounter, sliding);

impl sealed::Sealed for SlidingWindowLog {
    fn spec(&self) -> Result<Spec, ConfigError> {
        Spec::log(self)
    }

    fn fallback(settings: &fallback::Settings) -> Result<Box<dyn fallback::Fallback>, ConfigError> {
        fallback::LogFallback::boxed(settings)
    }
}
impl RedisAlgorithm for SlidingWindowLog {}

/// A limiter whose state lives in Redis: every process that checks through
/// the same Redis and prefix shares each client's budget exactly. Built by
/// [`Builder::redis`](crate::Builder::redis); cheap to clone (an `Arc`).
///
/// Ask it with [`check`](Self::check) or [`check_n`](Self::check_n), or
/// through [`AsyncCheck`] (which the HTTP layer of the `tower` feature
/// uses). A check needs a tokio runtime with its timer enabled.
///
/// # Examples
///
/// `no_run`: it needs a Redis server on localhost.
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::SlidingWindowLog;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let conn = redis::aio::ConnectionManager::new(redis::Client::open("redis://127.0.0.1/")?).await?;
/// let limiter = SlidingWindowLog::builder()
///     .limit(2)
///     .window(Duration::from_secs(10))
///     .redis(conn, "login")
///     .build()?;
/// assert!(limiter.check("alice").await?.is_allowed());
/// assert_eq!(limiter.check("alice").await?.remaining(), 0);
/// assert!(limiter.check("alice").await?.is_denied());
/// println!("{:?}", limiter.stats());
/// # Ok(())
/// # }
/// ```
pub struct RedisLimiter<A: Algorithm> {
    inner: Arc<Inner<A>>,
}

impl<A: Algorithm> Clone for RedisLimiter<A> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<A: Algorithm> fmt::Debug for RedisLimiter<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("spec", &self.inner.tiers.get(0).spec)
            .field("layout", &self.inner.layout)
            .field("timeout", &self.inner.timeout)
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

/// What a round trip does: check (decide and record) or peek (decide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Check,
    Peek,
}

/// A limiter's scripts (see `lua`): a check and a peek, and for a word
/// algorithm the slow path's read and compare-and-set, for the log its
/// booking and cancellation.
struct Scripts {
    check: call::Script,
    peek: call::Script,
    /// Read, or the log's booking.
    read: call::Script,
    /// Compare-and-set, or the log's cancellation.
    cas: call::Script,
    /// A word algorithm's coalesced checks.
    batch: Option<call::Script>,
    /// A lone token bucket's reset and removal, which keeps the slots of
    /// the leases outstanding (see `lua::lease_reset_script`), whether or
    /// not this limiter leases: another replica sharing the key may.
    reset: Option<call::Script>,
}

impl Scripts {
    /// The script deciding a request in `mode`.
    fn decide(&self, mode: Mode) -> &call::Script {
        match mode {
            Mode::Check => &self.check,
            Mode::Peek => &self.peek,
        }
    }
}

struct Inner<A> {
    calls: call::Calls,
    scripts: Scripts,
    layout: Layout,
    /// Each tier's quota, and the history of quota changes.
    tiers: tier::Tiers,
    /// The in-process limiter of [`FailPolicy::Local`].
    fallback: Option<Box<dyn fallback::Fallback>>,
    timeout: Duration,
    policy: FailPolicy,
    breaker: Breaker,
    shortcut: Option<DenyCache>,
    /// The clients with a call in flight, when checks coalesce.
    coalesce: Option<coalesce::InFlight>,
    /// The clients' leases, when the limiter leases units.
    leases: Option<lease::Leases>,
    /// This limiter's id, written with every state it writes.
    owner: String,
    /// Calls made, numbered: the incarnation of a key a call creates.
    serial: AtomicU64,
    /// What the latest reply read of Redis's clock: the low half, Redis's
    /// clock less the local clock (ns, wrapping); the high half, the local
    /// instant (ns) its call was sent. One word, so that an estimate
    /// never pairs one reply's offset with another's instant.
    clock_sync: AtomicU128,
    /// The builder's [`name`](crate::Builder::name), or `"default"`.
    name: std::borrow::Cow<'static, str>,
    /// The checks' answers, by path and outcome, and their publication
    /// (the `metrics` feature).
    #[cfg(feature = "metrics")]
    answers: metrics::Answers,
    _algorithm: PhantomData<fn() -> A>,
}

/// The word of [`Inner::clock_sync`].
fn sync_word(offset: u64, sent: u64) -> u128 {
    u128::from(sent) << 64 | u128::from(offset)
}

impl<A> Inner<A> {
    /// A token unique to a call: this limiter's id and the call's number.
    fn token(&self) -> String {
        // Relaxed: a number unique to this call, nothing more.
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        format!("{}.{serial}", self.owner)
    }

    /// Redis's clock now, in ns, as this process estimates it: no earlier
    /// than Redis's own. A reply read Redis's clock at `judged`, after its
    /// call was sent at `sent` on the local clock, so Redis's clock at local
    /// instant `t` is at most `judged + (t − sent)` while both clocks run at
    /// one rate; and since they may part by up to [`call::DRIFT`], the
    /// estimate adds that share of the time since `sent`.
    fn redis_now(&self) -> u64 {
        // Relaxed: an estimate, published by nothing; the word keeps each
        // reply's two halves together.
        let sync = self.clock_sync.load(Ordering::Relaxed);
        let (offset, sent) = (sync as u64, (sync >> 64) as u64);
        let local = self.calls.clock.local_ns();
        local
            .wrapping_add(offset)
            .wrapping_add(self.calls.clock.drift(local.saturating_sub(sent)))
    }

    /// Notes a reply judged at `judged` (µs on Redis's clock) for a call
    /// sent at `sent` (ns on the local clock).
    fn judged(&self, sent: u64, judged: u64) {
        self.clock_sync.store(
            sync_word(judged.saturating_mul(1_000).wrapping_sub(sent), sent),
            // Relaxed: see `redis_now`.
            Ordering::Relaxed,
        );
    }
}

impl<A: RedisAlgorithm> RedisLimiter<A> {
    /// Checks, and if admitted records, one request from `key`.
    ///
    /// # Errors
    ///
    /// A [`CheckError`] when Redis fails and the [`FailPolicy`] answers
    /// with it: under `FailClosed` for any failure, under `FailOpen` for a
    /// failure other than Redis being unreachable or slow (see the
    /// module's docs), under `Local` never.
    ///
    /// # Examples
    ///
    /// See [`RedisLimiter`].
    pub fn check<K: RedisKey + ?Sized>(&self, key: &K) -> RedisCheck {
        self.check_n(key, 1)
    }

    /// Checks a request that costs `cost` units at once: all of it is
    /// admitted or none. A cost of 0 is admitted and records nothing (it
    /// still asks Redis, for the figures). As in-process, a cost above the
    /// client's tier's capacity but within another tier's is denied, and
    /// would never pass.
    ///
    /// # Errors
    ///
    /// [`CheckErrorKind::Cost`] (with no round trip) if `cost` exceeds the
    /// capacity or limit of every tier, and the errors of
    /// [`check`](Self::check).
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::{CheckErrorKind, TokenBucket};
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .redis(conn, "batch")
    ///     .build()?;
    /// assert!(limiter.check_n("alice", 7).await?.is_allowed());
    /// assert!(limiter.check_n("alice", 7).await?.is_denied());
    /// assert_eq!(limiter.check_n("alice", 11).await.unwrap_err().kind(), CheckErrorKind::Cost);
    /// # Ok(())
    /// # }
    /// ```
    pub fn check_n<K: RedisKey + ?Sized>(&self, key: &K, cost: u64) -> RedisCheck {
        self.decide(key, cost, Mode::Check)
    }

    /// The Redis key that holds `client`'s state (see the module's docs on
    /// keys): for inspecting it, or for operations of your own.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), tollgate::ConfigError> {
    /// let limiter = TokenBucket::builder().rate(10, Duration::from_secs(1)).redis(conn, "api").build()?;
    /// assert_eq!(limiter.key("alice"), b"api:{alice}:tb");
    /// assert_eq!(limiter.key("a{b}"), b"api:{a%7Bb%7D}:tb");
    /// assert_eq!(limiter.key(""), b"api:{%}:tb");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn key<K: RedisKey + ?Sized>(&self, client: &K) -> Vec<u8> {
        self.inner.layout.key(&key::client_bytes(client))
    }

    /// The quota this limiter grants, as for an in-process limiter of the
    /// same settings.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::{Quota, TokenBucket};
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), tollgate::ConfigError> {
    /// let limiter = TokenBucket::builder().rate(10, Duration::from_secs(60)).redis(conn, "q").build()?;
    /// assert_eq!(limiter.quota(), Quota::new(10, Duration::from_secs(60)));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn quota(&self) -> Quota {
        self.inner.tiers.get(0).quota
    }

    /// A snapshot of the limiter's counters: round trips, the calls the
    /// deny shortcut saved, failures and how the fail policy answered.
    ///
    /// # Examples
    ///
    /// See [`RedisLimiter`].
    pub fn stats(&self) -> RedisStats {
        self.inner.calls.counters.snapshot()
    }

    /// The limiter's name: the one given to its builder
    /// ([`name`](crate::Builder::name)), or `"default"`.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), tollgate::ConfigError> {
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .name("login")
    ///     .redis(conn, "login")
    ///     .build()?;
    /// assert_eq!(limiter.name(), "login");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }
}

impl<A: RedisAlgorithm, K: RedisKey + ?Sized> AsyncCheck<K> for RedisLimiter<A> {
    type Future = RedisCheck;

    fn check(&self, key: &K, cost: u64) -> RedisCheck {
        self.check_n(key, cost)
    }

    fn quota(&self) -> Quota {
        self.inner.tiers.get(0).quota
    }

    fn name(&self) -> &str {
        RedisLimiter::name(self)
    }

    #[cfg(feature = "metrics")]
    fn publish_metrics(&self) {
        RedisLimiter::publish_metrics(self);
    }
}

/// A [`CheckError`] of `kind` about `key`.
fn failure(kind: CheckErrorKind, key: &[u8], cause: impl fmt::Display) -> CheckError {
    let key = String::from_utf8_lossy(key);
    CheckError::with_kind(kind, format!("{cause} (under the key {key})"))
}
