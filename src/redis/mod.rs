//! Limiters whose state lives in Redis, shared by every process that
//! points at the same Redis: the `redis` feature.
//!
//! Build one from the same builder as an in-process limiter, adding the
//! connection and a key prefix with [`Builder::redis`](crate::Builder::redis); the quota's
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
//! fails. Only a failure to reach Redis backs off. A state under a
//! client's key that the limiter did not write is that client's problem
//! only: its checks fail ([`CheckErrorKind::Corrupt`], answered by the
//! policy) without backing off, until the key is deleted or expires; an
//! error reply about one request ([`CheckErrorKind::Other`]) is answered
//! by the policy for that request alone.
//!
//! # Control, tiers and pairs
//!
//! As an in-process limiter, a Redis limiter can
//! [`peek`](RedisLimiter::peek), [`reset`](RedisLimiter::reset) and
//! [`remove`](RedisLimiter::remove) a client (for every process sharing
//! the Redis), put clients in tiers ([`RedisBuilder::tier_by`],
//! [`RedisLimiter::set_quota`]), and hold two limits at once, atomically
//! in one script (a builder made with `and` or `and_rate`).
//!
//! # Replicas with different quotas
//!
//! A replica reads a state written under another limit (a rolling deploy)
//! as the in-process limiters' `set_quota` converts one: counts above its
//! limit count as its limit, so a lower limit denies a client that spent
//! more than it, and a higher one admits the difference. The sliding
//! window log keeps every entry and denies until enough of them expire.
//! A change of window for the fixed window or the sliding window counter
//! is not converted: give the new window a new prefix.

mod builder;
mod control;
mod guard;
mod key;
mod lua;
#[cfg(all(test, not(feature = "loom")))]
mod lua_equal;
mod pair;
mod peek;
mod script;
mod shortcut;
mod tier;

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::sync::Arc;

use ::redis::{Cmd, ErrorKind, RedisError, RedisResult, Script, ServerErrorKind};

pub use builder::{RedisBuilder, RedisConnection};
pub use guard::RedisStats;
use guard::{bump, Breaker, Counters, Gate};
pub use key::RedisKey;
use script::Spec;
use shortcut::{DenyCache, LEFT_MAX, REACH};

use crate::algorithm::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};
use crate::cell::Algorithm;
use crate::check::{AsyncCheck, CheckError, CheckErrorKind, Quota};
use crate::decision::Decision;
use crate::error::{ConfigError, CostError};

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
    /// [`Protocol`](CheckErrorKind::Protocol) or
    /// [`Other`](CheckErrorKind::Other)): the HTTP layer answers
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
            .field("prefix", &String::from_utf8_lossy(&self.inner.prefix))
            .field("timeout", &self.inner.timeout)
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

/// What a round trip does: check (decide and record) or peek (decide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Check = 0,
    Peek = 1,
}

struct Inner<A: Algorithm> {
    /// The scripts' hashes, for `EVALSHA`, by [`Mode`].
    scripts: [Script; 2],
    /// The scripts' sources, sent by `EVAL` when Redis lost them.
    sources: [String; 2],
    conn: RedisConnection,
    /// `{prefix}:{tag}:{`: a key is this, the client's bytes, and `}`.
    prefix: Vec<u8>,
    /// Each tier's quota, and the in-process limiter of
    /// [`FailPolicy::Local`] for it, keyed by the client's bytes.
    tiers: tier::Tiers<A>,
    timeout: Duration,
    policy: FailPolicy,
    breaker: Breaker,
    counters: Counters,
    shortcut: Option<DenyCache>,
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
        self.decide(key, cost, Mode::Check)
    }

    /// A check or a peek.
    fn decide<K: RedisKey + ?Sized>(&self, key: &K, cost: u64, mode: Mode) -> RedisCheck {
        let inner = &self.inner;
        bump(&inner.counters.checks);
        let mut full = Vec::with_capacity(inner.prefix.len() + 32);
        full.extend_from_slice(&inner.prefix);
        key.write_key(&mut full);
        let client = full.len() - inner.prefix.len();
        full.push(b'}');
        let tier = inner.tiers.of(&full[inner.prefix.len()..][..client]);
        let capacity = tier.spec.capacity();
        if cost > capacity {
            let err = CostError { cost, capacity };
            return RedisCheck::ready(Err(CheckError::with_kind(CheckErrorKind::Cost, err)));
        }
        let now = inner.breaker.now();
        if let Some(cache) = inner.shortcut.as_ref().filter(|_| mode == Mode::Check) {
            if let Some((wait, left)) =
                cache.denied(&full[inner.prefix.len()..][..client], now, cost)
            {
                bump(&inner.counters.denied_locally);
                return RedisCheck::ready(Ok(Decision::new(
                    false,
                    capacity,
                    left,
                    wait,
                    wait,
                    tier.spec.window(),
                )));
            }
        }
        let probe_due = match inner.breaker.gate(now) {
            Gate::Pass => false,
            Gate::Probe => true,
            Gate::Down(wait) => {
                let err = CheckError::with_kind(
                    CheckErrorKind::Unavailable,
                    format!("Redis failed recently; the next probe goes in {wait:?}"),
                );
                return RedisCheck::ready(inner.fallback(&tier, &full, client, cost, mode, err));
            }
        };
        let inner = Arc::clone(inner);
        RedisCheck(State::Waiting(Box::pin(async move {
            // The probe flag is taken here, at the first poll, and the
            // guard that gives it back exists from that instant: a future
            // dropped before its first poll never took it.
            let probe = probe_due && inner.breaker.take_probe();
            if probe_due && !probe {
                let err = CheckError::with_kind(
                    CheckErrorKind::Unavailable,
                    "Redis failed recently; another check is probing it",
                );
                return inner.fallback(&tier, &full, client, cost, mode, err);
            }
            if probe {
                bump(&inner.counters.probes);
            }
            let mut abandon = ProbeGuard(probe.then_some(&inner.breaker));
            let reply =
                tokio::time::timeout(inner.timeout, inner.call(&tier.spec, &full, cost, mode))
                    .await;
            abandon.0 = None;
            let err = match reply {
                Ok(Ok(reply)) => match tier.spec.decode_reply(mode, &reply, cost) {
                    Ok(decision) => {
                        inner.breaker.succeeded(probe);
                        if mode == Mode::Check {
                            inner.remember(&full, client, now, &decision);
                        }
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
                    if kind == CheckErrorKind::Unavailable {
                        inner.breaker.failed(probe, inner.breaker.now());
                        CheckError::with_kind(kind, err)
                    } else {
                        // About this request or this client's key only:
                        // Redis answered, so it is up.
                        inner.breaker.succeeded(probe);
                        let key = String::from_utf8_lossy(&full);
                        CheckError::with_kind(kind, format!("{err} (under the key {key})"))
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
            inner.fallback(&tier, &full, client, cost, mode, err)
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
        self.inner.tiers.get(0).quota
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
        tier: &tier::TierQuota<A>,
        full: &[u8],
        client: usize,
        cost: u64,
        mode: Mode,
        err: CheckError,
    ) -> Result<Decision, CheckError> {
        match self.policy {
            FailPolicy::FailOpen => {
                bump(&self.counters.fail_open);
                let limit = tier.spec.capacity();
                Ok(Decision::new(
                    true,
                    limit,
                    limit,
                    Duration::ZERO,
                    Duration::ZERO,
                    tier.spec.window(),
                ))
            }
            FailPolicy::FailClosed => {
                bump(&self.counters.fail_closed);
                Err(err)
            }
            FailPolicy::Local => {
                bump(&self.counters.fail_local);
                let local = tier.local.as_ref().ok_or(err)?;
                let client = &full[self.prefix.len()..][..client];
                match mode {
                    Mode::Check => local.check_n(client, cost),
                    Mode::Peek => local.peek_n(client, cost),
                }
                .map_err(|err| CheckError::with_kind(CheckErrorKind::Cost, err))
            }
        }
    }

    /// One check's script: `EVALSHA`, and if Redis lost the script, the
    /// script itself by `EVAL` (which also loads it again). Each command
    /// sent counts as a round trip.
    async fn call(&self, spec: &Spec, full: &[u8], cost: u64, mode: Mode) -> RedisResult<Vec<i64>> {
        let mut conn = self.conn.clone();
        let mut cmd = Cmd::new();
        cmd.arg("EVALSHA")
            .arg(self.scripts[mode as usize].get_hash());
        spec.push_call(&mut cmd, full, cost);
        bump(&self.counters.round_trips);
        match cmd.query_async(&mut conn).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                let mut cmd = Cmd::new();
                cmd.arg("EVAL").arg(&self.sources[mode as usize]);
                spec.push_call(&mut cmd, full, cost);
                bump(&self.counters.round_trips);
                cmd.query_async(&mut conn).await
            }
            reply => reply,
        }
    }

    /// Feeds the deny shortcut: a client left with `remaining` units (at
    /// most [`LEFT_MAX`], and fewer than the capacity) is sure to be
    /// denied every larger cost until its quota next grows, counted from
    /// `sent`, when the check left (Redis's reading came later, so the
    /// shortcut never outlasts the real denial), and at most [`REACH`],
    /// so that a state that vanished from Redis is believed at most that
    /// long.
    fn remember(&self, full: &[u8], client: usize, sent: u64, decision: &Decision) {
        let Some(cache) = &self.shortcut else { return };
        let client = &full[self.prefix.len()..][..client];
        let left = decision.remaining;
        if left <= LEFT_MAX
            && left < decision.limit
            && decision.replenish_after() >= Duration::from_millis(1)
        {
            let wait = u64::try_from(decision.replenish_after().as_nanos()).unwrap_or(u64::MAX);
            cache.deny(client, sent.saturating_add(wait.min(REACH)), left);
        } else {
            cache.forget(client);
        }
    }
}

/// The kind of a failed round trip. Only a failure to reach Redis
/// ([`CheckErrorKind::Unavailable`]: the connection, a server loading,
/// failing over or out of its cluster) makes the limiter back off. An
/// error about one client's key (a value of the wrong type, or one the
/// scripts refuse) is [`CheckErrorKind::Corrupt`]; any other error reply
/// (about this request, such as a script error) is
/// [`CheckErrorKind::Other`], and a reply not understood
/// [`CheckErrorKind::Protocol`]: Redis answered, so it is up.
fn classify(err: &RedisError) -> CheckErrorKind {
    if let Some("TOLLGATE" | "WRONGTYPE") = err.code() {
        return CheckErrorKind::Corrupt;
    }
    if err.is_io_error()
        || err.is_connection_refusal()
        || err.is_connection_dropped()
        || err.is_timeout()
    {
        return CheckErrorKind::Unavailable;
    }
    match err.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => CheckErrorKind::Protocol,
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask,
        )
        | ErrorKind::Io
        | ErrorKind::AuthenticationFailed
        | ErrorKind::ClusterConnectionNotFound
        | ErrorKind::Client
        | ErrorKind::InvalidClientConfig => CheckErrorKind::Unavailable,
        _ => CheckErrorKind::Other,
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
        self.inner.tiers.get(0).quota
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
