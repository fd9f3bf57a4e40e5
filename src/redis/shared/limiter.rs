//! The limiter every floor above works on: [`RedisLimiter`], the `Inner`
//! its clones share, and the [`FailPolicy`].

use core::fmt;
use core::marker::PhantomData;
use core::time::Duration;
use std::sync::Arc;

use crate::cell::Algorithm;
use crate::check::{CheckError, CheckErrorKind};
use crate::redis::quota::{fallback, tier};
use crate::redis::script::key::Layout;
#[cfg(feature = "metrics")]
use crate::redis::table::answers::Answers;
use crate::redis::table::{flight::InFlight, lease, request::Mode, shortcut::DenyCache};
use crate::redis::wire::{call, nodes::Breakers};
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
    /// own, so a client gets at most the quota per replica, or with
    /// [`RedisBuilder::local_share`](crate::redis::RedisBuilder::local_share)
    /// set to the fleet's size, about one quota across the fleet. The
    /// default: an outage of the limiter's store neither takes the service
    /// down nor lifts every limit.
    #[default]
    Local,
}

/// A limiter whose state lives in Redis: every process that checks through
/// the same Redis and prefix shares each client's budget exactly. Built by
/// [`Builder::redis`](crate::Builder::redis); cheap to clone (an `Arc`).
///
/// Ask it with [`check`](Self::check) or [`check_n`](Self::check_n), or
/// through [`AsyncCheck`](crate::AsyncCheck) (which the HTTP layer of the `tower` feature
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
/// let conn = redis::aio::ConnectionManager::new_lazy_with_config(
///     redis::Client::open("redis://127.0.0.1/")?,
///     redis::aio::ConnectionManagerConfig::new(),
/// )?;
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
    pub(crate) inner: Arc<Inner<A>>,
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

/// A limiter's scripts (see `lua`): a check and a peek, and for a word
/// algorithm the slow path's read and compare-and-set, for the log its
/// booking and cancellation.
pub(crate) struct Scripts {
    pub(crate) check: call::Script,
    pub(crate) peek: call::Script,
    /// Read, or the log's booking.
    pub(crate) read: call::Script,
    /// Compare-and-set, or the log's cancellation.
    pub(crate) cas: call::Script,
    /// A word algorithm's coalesced checks.
    pub(crate) batch: Option<call::Script>,
    /// A lone token bucket's reset and removal, which keeps the slots of
    /// the leases outstanding (see `lua::lease_reset_script`), whether or
    /// not this limiter leases: another replica sharing the key may.
    pub(crate) reset: Option<call::Script>,
}

impl Scripts {
    /// The script deciding a request in `mode`.
    pub(crate) fn decide(&self, mode: Mode) -> &call::Script {
        match mode {
            Mode::Check => &self.check,
            Mode::Peek => &self.peek,
        }
    }
}

pub(crate) struct Inner<A> {
    pub(crate) calls: call::Calls,
    pub(crate) scripts: Scripts,
    pub(crate) layout: Layout,
    /// Each tier's quota, and the history of quota changes.
    pub(crate) tiers: tier::Tiers,
    /// The in-process limiter of [`FailPolicy::Local`].
    pub(crate) fallback: Option<Box<dyn fallback::Fallback>>,
    /// How many equal shares of each quota there are, the fallback
    /// deciding on one (see [`RedisBuilder::local_share`](crate::redis::RedisBuilder::local_share)).
    pub(crate) local_share: u32,
    pub(crate) timeout: Duration,
    pub(crate) policy: FailPolicy,
    /// The breaker, or on Redis Cluster one per node.
    pub(crate) breakers: Breakers,
    pub(crate) shortcut: Option<DenyCache>,
    /// The clients with a call in flight, when checks coalesce.
    pub(crate) coalesce: Option<InFlight>,
    /// The clients' leases, when the limiter leases units.
    pub(crate) leases: Option<lease::Leases>,
    /// This limiter's id, written with every state it writes.
    pub(crate) owner: String,
    /// Calls made, numbered: the incarnation of a key a call creates.
    pub(crate) serial: AtomicU64,
    /// What the latest reply read of Redis's clock (see
    /// [`call::sync_word`]): on Redis Cluster, of the clock of whichever
    /// node replied last, so that it serves only what needs no particular
    /// node's clock; a lease keeps its own (see `lease`).
    pub(crate) clock_sync: AtomicU128,
    /// The builder's [`name`](crate::Builder::name), or `"default"`.
    pub(crate) name: std::borrow::Cow<'static, str>,
    /// The checks' answers, by path and outcome, and their publication
    /// (the `metrics` feature).
    #[cfg(feature = "metrics")]
    pub(crate) answers: Answers,
    pub(crate) _algorithm: PhantomData<fn() -> A>,
}

impl<A> Inner<A> {
    /// A token unique to a call: this limiter's id and the call's number.
    pub(crate) fn token(&self) -> String {
        // Relaxed: a number unique to this call, nothing more.
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        format!("{}.{serial}", self.owner)
    }

    /// Redis's clock now, in ns, as this process estimates it from the
    /// latest reply (see [`Clock::estimate`](call::Clock::estimate)): no
    /// earlier than the clock of the server that gave it (on Redis
    /// Cluster, of the node that replied last).
    pub(crate) fn redis_now(&self) -> u64 {
        // Relaxed: an estimate, published by nothing; the word keeps each
        // reply's two halves together.
        self.calls
            .clock
            .estimate(self.clock_sync.load(Ordering::Relaxed))
    }

    /// Notes a reply judged at `judged` (µs on Redis's clock) for a call
    /// sent at `sent` (ns on the local clock).
    pub(crate) fn judged(&self, sent: u64, judged: u64) {
        self.clock_sync.store(
            call::reading(sent, judged),
            // Relaxed: see `redis_now`.
            Ordering::Relaxed,
        );
    }
}

/// A [`CheckError`] of `kind` about `key`.
pub(crate) fn failure(kind: CheckErrorKind, key: &[u8], cause: impl fmt::Display) -> CheckError {
    let key = String::from_utf8_lossy(key);
    CheckError::with_kind(kind, format!("{cause} (under the key {key})"))
}
