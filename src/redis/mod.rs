//! Limiters whose state lives in Redis, shared by every process that
//! points at the same Redis: the `redis` feature.
//!
//! Build one from the same builder as an in-process limiter, adding the
//! connection and a key prefix with [`Builder::redis`]; the quota's
//! semantics are the algorithm's own (see the crate's docs). Each check is
//! one round trip: a Lua script, sent by `EVALSHA` (and loaded again if
//! Redis lost it), that reads Redis's own clock (`TIME`), decides, writes
//! the new state with an expiry at the instant it becomes idle, and
//! answers. The limiter is asked through [`AsyncCheck`], like every
//! limiter, so it plugs into the HTTP layer of the `tower` feature as it is.
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
//! A client's state is one key, `{prefix}:{tag}:{{client}}`, where `tag`
//! names the algorithm (`tb`, `fw`, `swc`, `swl`) and the client's bytes
//! are a Redis Cluster hash tag: each client's key maps to one slot, and
//! clients spread over the cluster. Every write sets the key to expire when
//! its state becomes idle (a full bucket, a window that has passed, an
//! empty log), so Redis holds only clients that still carry information.
//!
//! # Time and exactness
//!
//! Time is Redis's (`TIME`), so every process agrees on it whatever its own
//! clock says, and windows are aligned to the Unix epoch. Lua counts in
//! doubles, so the scripts count whole microseconds: a window must be a
//! whole number of µs, a token's interval is rounded up to one (erring
//! toward denying, as the in-process bucket rounds to the ns), and the
//! builder rejects any setting that would take a stored value past
//! 2<sup>53</sup> (see [`RedisBuilder::build`]).
//!
//! # When Redis fails
//!
//! A check that times out or cannot reach Redis is answered by the
//! [`FailPolicy`], and the limiter backs off: until the backoff is over,
//! checks skip Redis and go straight to the policy, then one probe at a
//! time goes through, doubling the backoff (up to a cap) each time it
//! fails. A state under a client's key that the limiter did not write is
//! that client's problem only: its checks fail ([`CheckErrorKind::Corrupt`],
//! answered by the policy) without backing off, until the key is deleted
//! or expires.

mod guard;
mod script;
mod shortcut;

use core::fmt;
use core::future::Future;
use core::marker::PhantomData;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Script, Value};

pub use guard::RedisStats;
use guard::{bump, Breaker, Counters, Gate};
use script::Spec;
use shortcut::DenyCache;

use crate::algorithm::{
    FixedWindow, FromParams, Params, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use crate::builder::Builder;
use crate::cell::Algorithm;
use crate::check::{AsyncCheck, CheckError, CheckErrorKind, Quota};
use crate::clock::MonotonicClock;
use crate::decision::Decision;
use crate::error::{ConfigError, CostError};
use crate::limiter::Limiter;
use crate::memory::Memory;

/// What a Redis limiter answers when Redis does not: it timed out, could
/// not be reached, refused the command, or holds a state under the
/// client's key that the limiter did not write.
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
    /// Admit the request. The decision reports the full quota
    /// (`remaining == limit`, both waits zero), since nothing is known.
    FailOpen,
    /// Answer the check with the [`CheckError`] (kind
    /// [`Timeout`](CheckErrorKind::Timeout),
    /// [`Unavailable`](CheckErrorKind::Unavailable),
    /// [`Corrupt`](CheckErrorKind::Corrupt) or
    /// [`Protocol`](CheckErrorKind::Protocol)): the HTTP layer answers
    /// `503 Service Unavailable`.
    FailClosed,
    /// Decide with an in-process limiter of the same quota, one per
    /// process: while Redis is down each replica enforces the quota on its
    /// own, so a client gets at most the quota per replica. The default:
    /// an outage of the limiter's store neither takes the service down nor
    /// lifts every limit.
    #[default]
    Local,
}

/// A client key that a Redis limiter can name: the bytes that go between
/// the key's braces.
///
/// Implemented for strings, byte strings, IP addresses (their text form)
/// and integers (their decimal form), and references to them. Two keys with
/// the same bytes are the same client, so `"alice"` and
/// `String::from("alice")` share a budget.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::redis::RedisKey;
///
/// let mut out = Vec::new();
/// IpAddr::from([10, 0, 0, 1]).write_key(&mut out);
/// assert_eq!(out, b"10.0.0.1");
/// ```
pub trait RedisKey {
    /// Appends the key's bytes to `out`.
    fn write_key(&self, out: &mut Vec<u8>);
}

impl RedisKey for str {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
}

impl RedisKey for String {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
}

impl RedisKey for [u8] {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

impl RedisKey for Vec<u8> {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

impl<T: RedisKey + ?Sized> RedisKey for &T {
    fn write_key(&self, out: &mut Vec<u8>) {
        T::write_key(self, out);
    }
}

macro_rules! display_key {
    ($($t:ty),*) => {$(
        impl RedisKey for $t {
            fn write_key(&self, out: &mut Vec<u8>) {
                use std::io::Write;
                // Writing to a `Vec` never fails.
                let _ = write!(out, "{self}");
            }
        }
    )*};
}
display_key!(IpAddr, Ipv4Addr, Ipv6Addr, u16, u32, u64, u128, i32, i64, i128, usize);

mod sealed {
    /// How an algorithm runs in Redis. Sealed: only tollgate's four
    /// algorithms implement it.
    #[allow(unreachable_pub)] // a sealed supertrait, named only here
    pub trait Sealed: crate::algorithm::FromParams {
        fn spec(&self) -> Result<super::Spec, crate::ConfigError>;
    }
}

/// An algorithm that a [`RedisLimiter`] can run: all four of tollgate's.
///
/// # Examples
///
/// ```
/// fn runs_in_redis<A: tollgate::redis::RedisAlgorithm>() {}
/// runs_in_redis::<tollgate::SlidingWindowLog>();
/// ```
pub trait RedisAlgorithm: Algorithm + sealed::Sealed {}

impl sealed::Sealed for TokenBucket {
    fn spec(&self) -> Result<Spec, ConfigError> {
        Spec::bucket(self)
    }
}
impl RedisAlgorithm for TokenBucket {}

impl sealed::Sealed for FixedWindow {
    fn spec(&self) -> Result<Spec, ConfigError> {
        Spec::fixed(self)
    }
}
impl RedisAlgorithm for FixedWindow {}

impl sealed::Sealed for SlidingWindowCounter {
    fn spec(&self) -> Result<Spec, ConfigError> {
        Spec::sliding(self)
    }
}
impl RedisAlgorithm for SlidingWindowCounter {}

impl sealed::Sealed for SlidingWindowLog {
    fn spec(&self) -> Result<Spec, ConfigError> {
        Spec::log(self)
    }
}
impl RedisAlgorithm for SlidingWindowLog {}

impl<A, K, C> Builder<A, K, C> {
    /// Keeps the state in Redis instead of this process: the limiter that
    /// [`RedisBuilder::build`] makes shares each client's budget with every
    /// process using the same Redis and `prefix`. The algorithm's settings
    /// carry over; the key type and clock do not (keys are any
    /// [`RedisKey`], time is Redis's), and the memory settings
    /// ([`max_clients`](Builder::max_clients) and the rest) apply to the
    /// in-process limiter of [`FailPolicy::Local`].
    ///
    /// `conn` is a [`ConnectionManager`], which multiplexes every check
    /// over one connection and reconnects by itself after Redis comes
    /// back, or a [`ClusterConnection`] for Redis Cluster, which sends each
    /// check to the node holding its client's slot (every key of one
    /// client carries the client as its hash tag); see [`RedisConnection`].
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::SlidingWindowCounter;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let conn = redis::aio::ConnectionManager::new(client).await?;
    /// let limiter = SlidingWindowCounter::builder()
    ///     .limit(100)
    ///     .window(Duration::from_secs(60))
    ///     .redis(conn, "api")
    ///     .build()?;
    /// assert!(limiter.check("alice").await?.is_allowed());
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn redis(
        self,
        conn: impl Into<RedisConnection>,
        prefix: impl Into<String>,
    ) -> RedisBuilder<A> {
        RedisBuilder {
            params: self.params,
            memory: self.memory,
            conn: conn.into(),
            prefix: prefix.into(),
            timeout: Duration::from_millis(100),
            policy: FailPolicy::default(),
            backoff: (Duration::from_millis(100), Duration::from_secs(5)),
            shortcut: Some(4_096),
            _algorithm: PhantomData,
        }
    }
}

/// How a Redis limiter reaches Redis: one server (or a primary behind
/// Sentinel's address) through a [`ConnectionManager`], or Redis Cluster
/// through a [`ClusterConnection`]. [`Builder::redis`] takes either.
///
/// Every key a check touches belongs to one client and carries that client
/// as its hash tag (`{prefix}:{tag}:{<client>}`), so each check's script
/// runs on the one node that holds the client's slot, and a cluster shares
/// each client's budget exactly as one server does.
///
/// # Examples
///
/// `no_run`: it needs a Redis Cluster on localhost.
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::TokenBucket;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let nodes = vec!["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"];
/// let cluster = redis::cluster::ClusterClient::new(nodes)?;
/// let conn = cluster.get_async_connection().await?;
/// let limiter = TokenBucket::builder()
///     .rate(100, Duration::from_secs(60))
///     .redis(conn, "api")
///     .build()?;
/// assert!(limiter.check("alice").await?.is_allowed());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub enum RedisConnection {
    /// One server: every check over one multiplexed connection.
    Single(ConnectionManager),
    /// Redis Cluster: each check to the node holding its client's slot.
    Cluster(ClusterConnection),
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Single(_) => "RedisConnection::Single",
            Self::Cluster(_) => "RedisConnection::Cluster",
        })
    }
}

impl From<ConnectionManager> for RedisConnection {
    fn from(conn: ConnectionManager) -> Self {
        Self::Single(conn)
    }
}

impl From<ClusterConnection> for RedisConnection {
    fn from(conn: ClusterConnection) -> Self {
        Self::Cluster(conn)
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
        }
    }
}

/// Builds a [`RedisLimiter`]: the algorithm's settings from the
/// [`Builder`], and how to talk to Redis. Made by [`Builder::redis`].
///
/// # Examples
///
/// `no_run`: it needs a Redis server on localhost.
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::redis::FailPolicy;
/// use tollgate::FixedWindow;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let conn = redis::aio::ConnectionManager::new(redis::Client::open("redis://127.0.0.1/")?).await?;
/// let limiter = FixedWindow::builder()
///     .limit(1_000)
///     .window(Duration::from_secs(3_600))
///     .redis(conn, "hourly")
///     .timeout(Duration::from_millis(20))
///     .fail_policy(FailPolicy::FailOpen)
///     .backoff(Duration::from_millis(50), Duration::from_secs(2))
///     .deny_shortcut(16_384)
///     .build()?;
/// # let _ = limiter;
/// # Ok(())
/// # }
/// ```
pub struct RedisBuilder<A> {
    params: Params,
    memory: Memory,
    conn: RedisConnection,
    prefix: String,
    timeout: Duration,
    policy: FailPolicy,
    backoff: (Duration, Duration),
    shortcut: Option<usize>,
    _algorithm: PhantomData<fn() -> A>,
}

impl<A> fmt::Debug for RedisBuilder<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBuilder")
            .field("algorithm", &core::any::type_name::<A>())
            .field("params", &self.params)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("policy", &self.policy)
            .field("backoff", &self.backoff)
            .field("shortcut", &self.shortcut)
            .finish_non_exhaustive()
    }
}

impl<A> RedisBuilder<A> {
    /// The longest a check waits for Redis before the
    /// [`FailPolicy`] answers it. Default 100 ms; [`build`](Self::build)
    /// requires 1 ms to 1 hour.
    ///
    /// A check that timed out may still have been recorded by Redis, which
    /// errs toward denying that client's later requests.
    ///
    /// # Examples
    ///
    /// See [`RedisBuilder`].
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What to answer when Redis fails. Default [`FailPolicy::Local`].
    ///
    /// # Examples
    ///
    /// See [`RedisBuilder`].
    #[must_use]
    pub fn fail_policy(mut self, policy: FailPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// After a failure, checks skip Redis for `first`, then one probe goes
    /// through; each failed probe doubles the wait, up to `max`. Default
    /// 100 ms and 5 s; [`build`](Self::build) requires
    /// `1 ms ≤ first ≤ max ≤ 1 hour`.
    ///
    /// # Examples
    ///
    /// See [`RedisBuilder`].
    #[must_use]
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = (first, max);
        self
    }

    /// The local deny shortcut's table: `slots` entries of 8 bytes, rounded
    /// up to a power of two (default 4 096, 32 KiB). A client that Redis
    /// denies with nothing left (`remaining() == 0`) is denied in this
    /// process, without a round trip, until its quota next grows
    /// ([`Decision::replenish_after`], counted from when the check was
    /// sent, so never past the real instant). [`build`](Self::build)
    /// requires 1 to 2<sup>24</sup> slots.
    ///
    /// # Examples
    ///
    /// See [`RedisBuilder`].
    #[must_use]
    pub fn deny_shortcut(mut self, slots: usize) -> Self {
        self.shortcut = Some(slots);
        self
    }

    /// Turns the deny shortcut off: every check goes to Redis.
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
    ///     .redis(conn, "exact")
    ///     .no_deny_shortcut()
    ///     .build()?;
    /// # let _ = limiter;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn no_deny_shortcut(mut self) -> Self {
        self.shortcut = None;
        self
    }
}

impl<A: RedisAlgorithm> RedisBuilder<A> {
    /// Validates the settings and builds the limiter. Sends nothing to
    /// Redis: the first check loads the script.
    ///
    /// # Errors
    ///
    /// Every error of [`Builder::build`] for the algorithm's settings, and
    /// [`ConfigError::OutOfRange`] naming the setting when:
    ///
    /// - `window` is not a whole number of microseconds, or is longer than
    ///   2<sup>52</sup> µs (142 years);
    /// - a bucket's refill time, `capacity × per / tokens` (the interval
    ///   rounded up to whole µs), exceeds 2<sup>52</sup> µs (`capacity`);
    /// - a sliding window counter's `limit × window` in µs reaches
    ///   2<sup>53</sup> (`limit`), the largest integer Lua counts exactly;
    /// - `timeout`, `backoff` or `deny_shortcut` is out of its range.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::FixedWindow;
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) {
    /// let err = FixedWindow::builder()
    ///     .limit(10)
    ///     .window(Duration::from_nanos(1_500))
    ///     .redis(conn, "api")
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "window");
    /// # }
    /// ```
    pub fn build(self) -> Result<RedisLimiter<A>, ConfigError> {
        let algorithm = A::from_params(&self.params)?;
        let spec = algorithm.spec()?;
        let memory = self.memory.validate()?;
        let ms = |d: Duration| d.as_millis().min(u128::from(u64::MAX));
        let hour = 3_600_000;
        ConfigError::check_range(
            "timeout",
            ms(self.timeout),
            (1, hour),
            "ms",
            "a call's timeout",
        )?;
        let (first, max) = self.backoff;
        ConfigError::check_range("backoff", ms(first), (1, hour), "ms", "the first backoff")?;
        ConfigError::check_range(
            "backoff",
            ms(max),
            (ms(first), hour),
            "ms",
            "the largest backoff is at least the first",
        )?;
        let shortcut = match self.shortcut {
            None => None,
            Some(slots) => {
                ConfigError::check_range(
                    "deny_shortcut",
                    slots as u128,
                    (1, 1 << 24),
                    "slots",
                    "the deny shortcut's table holds 8 bytes per slot",
                )?;
                Some(DenyCache::new(slots.next_power_of_two()))
            }
        };
        let quota = {
            let (limit, window) = FromParams::granted(&algorithm);
            Quota::new(limit, Duration::from_nanos(window))
        };
        let local = (self.policy == FailPolicy::Local)
            .then(|| Limiter::new(algorithm, MonotonicClock::new(), memory));
        let mut prefix = self.prefix.into_bytes();
        prefix.extend_from_slice(format!(":{}:{{", spec.tag()).as_bytes());
        Ok(RedisLimiter {
            inner: Arc::new(Inner {
                script: Script::new(&spec.source()),
                conn: self.conn,
                prefix,
                spec,
                quota,
                timeout: self.timeout,
                policy: self.policy,
                breaker: Breaker::new(first, max),
                counters: Counters::default(),
                shortcut,
                local,
            }),
        })
    }
}

/// A limiter whose state lives in Redis: every process that checks through
/// the same Redis and prefix shares each client's budget exactly. Built by
/// [`Builder::redis`]; cheap to clone (an `Arc`).
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
            .field("spec", &self.inner.spec)
            .field("prefix", &String::from_utf8_lossy(&self.inner.prefix))
            .field("timeout", &self.inner.timeout)
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

struct Inner<A: Algorithm> {
    script: Script,
    conn: RedisConnection,
    /// `{prefix}:{tag}:{`: a key is this, the client's bytes, and `}`.
    prefix: Vec<u8>,
    spec: Spec,
    quota: Quota,
    timeout: Duration,
    policy: FailPolicy,
    breaker: Breaker,
    counters: Counters,
    shortcut: Option<DenyCache>,
    /// The in-process limiter of [`FailPolicy::Local`], keyed by the
    /// client's bytes.
    local: Option<Limiter<A, Vec<u8>>>,
}

impl<A: RedisAlgorithm> RedisLimiter<A> {
    /// Checks, and if admitted records, one request from `key`.
    ///
    /// # Errors
    ///
    /// Only under [`FailPolicy::FailClosed`]: a [`CheckError`] when Redis
    /// timed out, could not be reached, or holds something else under the
    /// client's key (see [`CheckErrorKind`]).
    ///
    /// # Examples
    ///
    /// See [`RedisLimiter`].
    pub fn check<K: RedisKey + ?Sized>(&self, key: &K) -> RedisCheck {
        self.check_n(key, 1)
    }

    /// Checks a request that costs `cost` units at once: all of it is
    /// admitted or none. A cost of 0 is admitted and records nothing (it
    /// still asks Redis, for the figures).
    ///
    /// # Errors
    ///
    /// [`CheckErrorKind::Cost`] (with no round trip) if `cost` exceeds the
    /// capacity or limit, and the errors of [`check`](Self::check).
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
        let inner = &self.inner;
        bump(&inner.counters.checks);
        let capacity = inner.spec.capacity();
        if cost > capacity {
            let err = CostError { cost, capacity };
            return RedisCheck::ready(Err(CheckError::with_kind(CheckErrorKind::Cost, err)));
        }
        let mut full = Vec::with_capacity(inner.prefix.len() + 32);
        full.extend_from_slice(&inner.prefix);
        key.write_key(&mut full);
        let client = full.len() - inner.prefix.len();
        full.push(b'}');
        let now = inner.breaker.now();
        if let Some(cache) = inner.shortcut.as_ref().filter(|_| cost > 0) {
            if let Some(wait) = cache.denied(&full[inner.prefix.len()..][..client], now) {
                bump(&inner.counters.denied_locally);
                return RedisCheck::ready(Ok(Decision {
                    allowed: false,
                    limit: capacity,
                    remaining: 0,
                    retry_after: wait,
                    replenish_after: wait,
                    window: inner.spec.window(),
                }));
            }
        }
        let probe = match inner.breaker.gate(now) {
            Gate::Pass => false,
            Gate::Probe => {
                bump(&inner.counters.probes);
                true
            }
            Gate::Down(wait) => {
                let err = CheckError::with_kind(
                    CheckErrorKind::Unavailable,
                    format!("Redis failed recently; the next probe goes in {wait:?}"),
                );
                return RedisCheck::ready(inner.fallback(&full, client, cost, err));
            }
        };
        let inner = Arc::clone(inner);
        RedisCheck(State::Waiting(Box::pin(async move {
            let mut abandon = ProbeGuard(probe.then_some(&inner.breaker));
            let [first, second] = inner.spec.args();
            let mut conn = inner.conn.clone();
            let mut call = inner.script.key(&full[..]);
            call.arg(first).arg(second).arg(cost);
            bump(&inner.counters.round_trips);
            let reply =
                tokio::time::timeout(inner.timeout, call.invoke_async::<Vec<i64>>(&mut conn)).await;
            abandon.0 = None;
            let err = match reply {
                Ok(Ok(reply)) => match inner.spec.decode(&reply, cost) {
                    Ok(decision) => {
                        inner.breaker.succeeded(probe);
                        inner.remember(&full, client, now, &decision);
                        return Ok(decision);
                    }
                    Err(err) => {
                        inner.breaker.succeeded(probe);
                        bump(&inner.counters.errors);
                        let key = String::from_utf8_lossy(&full);
                        CheckError::with_kind(
                            CheckErrorKind::Corrupt,
                            format!("{err} (under the key {key})"),
                        )
                    }
                },
                Ok(Err(err)) => {
                    bump(&inner.counters.errors);
                    let kind = classify(&err);
                    if kind == CheckErrorKind::Corrupt {
                        inner.breaker.succeeded(probe);
                        let key = String::from_utf8_lossy(&full);
                        CheckError::with_kind(kind, format!("{err} (under the key {key})"))
                    } else {
                        inner.breaker.failed(probe, inner.breaker.now());
                        CheckError::with_kind(kind, err)
                    }
                }
                Err(_elapsed) => {
                    bump(&inner.counters.timeouts);
                    inner.breaker.failed(probe, inner.breaker.now());
                    CheckError::with_kind(
                        CheckErrorKind::Timeout,
                        format!("Redis did not answer within {:?}", inner.timeout),
                    )
                }
            };
            inner.fallback(&full, client, cost, err)
        })))
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
        self.inner.quota
    }

    /// A snapshot of the limiter's counters: round trips, the calls the
    /// deny shortcut saved, failures and how the fail policy answered.
    ///
    /// # Examples
    ///
    /// See [`RedisLimiter`].
    pub fn stats(&self) -> RedisStats {
        self.inner.counters.snapshot()
    }
}

impl<A: RedisAlgorithm> Inner<A> {
    /// The fail policy's answer to a check that Redis could not make.
    fn fallback(
        &self,
        full: &[u8],
        client: usize,
        cost: u64,
        err: CheckError,
    ) -> Result<Decision, CheckError> {
        match self.policy {
            FailPolicy::FailOpen => {
                bump(&self.counters.fail_open);
                let limit = self.spec.capacity();
                Ok(Decision {
                    allowed: true,
                    limit,
                    remaining: limit,
                    retry_after: Duration::ZERO,
                    replenish_after: Duration::ZERO,
                    window: self.spec.window(),
                })
            }
            FailPolicy::FailClosed => {
                bump(&self.counters.fail_closed);
                Err(err)
            }
            FailPolicy::Local => {
                bump(&self.counters.fail_local);
                let local = self.local.as_ref().ok_or(err)?;
                let client = &full[self.prefix.len()..][..client];
                local
                    .check_n(client, cost)
                    .map_err(|err| CheckError::with_kind(CheckErrorKind::Cost, err))
            }
        }
    }

    /// Feeds the deny shortcut: a client left with nothing stays denied
    /// until its quota next grows, counted from `sent`, when the check
    /// left (Redis's reading came later, so the shortcut never outlasts
    /// the real denial).
    fn remember(&self, full: &[u8], client: usize, sent: u64, decision: &Decision) {
        let Some(cache) = &self.shortcut else { return };
        let client = &full[self.prefix.len()..][..client];
        if decision.remaining == 0 && decision.replenish_after >= Duration::from_millis(1) {
            let wait = u64::try_from(decision.replenish_after.as_nanos()).unwrap_or(u64::MAX);
            cache.deny(client, sent.saturating_add(wait));
        } else if decision.is_allowed() {
            cache.forget(client);
        }
    }
}

/// The kind of a failed round trip. An error that concerns one client's
/// key (a value of the wrong type, or one the scripts refuse) is
/// [`CheckErrorKind::Corrupt`] and does not make the limiter back off.
fn classify(err: &RedisError) -> CheckErrorKind {
    if let Some("TOLLGATE" | "WRONGTYPE") = err.code() {
        return CheckErrorKind::Corrupt;
    }
    match err.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => CheckErrorKind::Protocol,
        _ => CheckErrorKind::Unavailable,
    }
}

/// Lets another probe go if this one's future is dropped unfinished.
struct ProbeGuard<'a>(Option<&'a Breaker>);

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if let Some(breaker) = self.0 {
            breaker.abandoned();
        }
    }
}

impl<A: RedisAlgorithm, K: RedisKey + ?Sized> AsyncCheck<K> for RedisLimiter<A> {
    type Future = RedisCheck;

    fn check(&self, key: &K, cost: u64) -> RedisCheck {
        self.check_n(key, cost)
    }

    fn quota(&self) -> Quota {
        self.inner.quota
    }
}

type Waiting = Pin<Box<dyn Future<Output = Result<Decision, CheckError>> + Send>>;

enum State {
    /// Decided without Redis (the shortcut, a cost error, the fail policy
    /// while Redis is down); taken by the first poll.
    Ready(Option<Result<Decision, CheckError>>),
    /// A round trip.
    Waiting(Waiting),
}

/// The future of a [`RedisLimiter`] check: ready at once when decided
/// without Redis, otherwise when Redis answers or the timeout passes.
///
/// # Examples
///
/// See [`RedisLimiter`].
#[must_use = "a check does nothing unless awaited"]
pub struct RedisCheck(State);

impl RedisCheck {
    fn ready(result: Result<Decision, CheckError>) -> Self {
        Self(State::Ready(Some(result)))
    }
}

impl fmt::Debug for RedisCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.0 {
            State::Ready(_) => "ready",
            State::Waiting(_) => "waiting for Redis",
        };
        f.debug_tuple("RedisCheck").field(&state).finish()
    }
}

impl Future for RedisCheck {
    type Output = Result<Decision, CheckError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            State::Ready(result) => Poll::Ready(result.take().unwrap_or_else(|| {
                Err(CheckError::new(
                    "a rate-limit check was polled after it completed",
                ))
            })),
            State::Waiting(future) => future.as_mut().poll(cx),
        }
    }
}
