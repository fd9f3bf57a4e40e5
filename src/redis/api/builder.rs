//! The Redis limiter's builder (its connection is `wire::connection`'s).

use core::fmt;
use core::marker::PhantomData;
use core::time::Duration;
use std::sync::Arc;

use core::hash::{BuildHasher, Hash, Hasher};

#[cfg(doc)]
use ::redis::{aio::ConnectionManager, cluster_async::ClusterConnection};

use crate::algorithm::Params;
use crate::builder::Builder;
use crate::error::ConfigError;
use crate::memory::Memory;
use crate::redis::check::coalesce::coalesces;
use crate::redis::quota::algorithm::RedisAlgorithm;
use crate::redis::quota::fallback::{Resolver, Settings};
use crate::redis::quota::tier::Tiers;
use crate::redis::script::key::Layout;
use crate::redis::script::log::{log_book_script, log_cancel_script, log_script};
use crate::redis::script::lua::{
    batch_script, cas_script, lease_reset_script, lease_return_script, lease_script, read_script,
    word_script, CLOCK,
};
use crate::redis::script::spec::{Half, Spec, WordSpec};
use crate::redis::shared::limiter::{FailPolicy, Inner, RedisLimiter, Scripts};
use crate::redis::table::flight::InFlight;
use crate::redis::table::lease::{Lease, LeaseScripts, Leases};
use crate::redis::table::shortcut::DenyCache;
use crate::redis::wire::call::{sync_word, Calls, Clock, Script};
use crate::redis::wire::connection::RedisConnection;
use crate::redis::wire::guard::Counters;
use crate::redis::wire::nodes::Breakers;
use crate::sync::{AtomicU128, AtomicU64};

impl<A, K, C> Builder<A, K, C> {
    /// Keeps the state in Redis instead of this process: the limiter that
    /// [`RedisBuilder::build`] makes shares each client's budget with every
    /// process using the same Redis and `prefix`. The algorithm's settings
    /// carry over; the key type and clock do not (keys are any
    /// [`RedisKey`](crate::redis::RedisKey), time is Redis's), and the memory settings
    /// ([`max_clients`](Builder::max_clients) and the rest) apply to the
    /// in-process limiter of [`FailPolicy::Local`].
    ///
    /// `conn` is a [`ConnectionManager`], which multiplexes every check
    /// over one connection and reconnects by itself after Redis comes
    /// back, or a [`ClusterConnection`] for Redis Cluster, which sends each
    /// check to the node holding its client's slot (a client's one key
    /// carries the client as its hash tag); see [`RedisConnection`].
    ///
    /// A setting of this builder that a Redis limiter would not apply is
    /// reported by [`RedisBuilder::build`] as
    /// [`ConfigError::Conflict`], as in-process: a clock (time is
    /// Redis's), a resolver of tiers given here (give it to
    /// [`RedisBuilder::tier_by`], which takes the client's bytes), and a
    /// second limit's clock or memory setting (`and.clock`).
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
    /// // Connected on the first check: see the module docs, "Starting
    /// // while Redis is down".
    /// let conn = redis::aio::ConnectionManager::new_lazy_with_config(
    ///     client,
    ///     redis::aio::ConnectionManagerConfig::new(),
    /// )?;
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
        let conflict = self.redis_conflict();
        RedisBuilder {
            params: self.params,
            memory: self.memory,
            conflict,
            conn: conn.into(),
            prefix: prefix.into(),
            timeout: Duration::from_millis(100),
            policy: FailPolicy::default(),
            local_share: 1,
            backoff: (Duration::from_millis(100), Duration::from_secs(5)),
            shortcut: Some(4_096),
            coalesce: true,
            packed: false,
            lease: None,
            tier_by: None,
            name: self.name,
            _algorithm: PhantomData,
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
/// let conn = redis::aio::ConnectionManager::new_lazy_with_config(
///     redis::Client::open("redis://127.0.0.1/")?,
///     redis::aio::ConnectionManagerConfig::new(),
/// )?;
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
    /// A setting of the builder that would not apply, reported by `build`.
    conflict: Option<ConfigError>,
    conn: RedisConnection,
    prefix: String,
    timeout: Duration,
    policy: FailPolicy,
    /// How many replicas share the quota while each decides alone.
    local_share: u32,
    backoff: (Duration, Duration),
    shortcut: Option<usize>,
    coalesce: bool,
    /// Whether the scripts write each state packed (`packed_state`).
    packed: bool,
    lease: Option<Lease>,
    pub(super) tier_by: Option<Arc<Resolver>>,
    /// The builder's [`name`](crate::Builder::name).
    name: Option<std::borrow::Cow<'static, str>>,
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
            .field("local_share", &self.local_share)
            .field("backoff", &self.backoff)
            .field("shortcut", &self.shortcut)
            .field("coalesce", &self.coalesce)
            .field("packed", &self.packed)
            .field("lease", &self.lease)
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

    /// Under [`FailPolicy::Local`], the number of replicas (processes, or
    /// limiters) that share this limiter's quotas: while Redis is away,
    /// each decides alone on a `replicas`-th share of each quota (a bucket
    /// that refills `replicas` times slower and holds a `replicas`-th of
    /// its capacity; a window with a `replicas`-th of its limit; each at
    /// least 1), so that the fleet together stays near one quota rather
    /// than `replicas` of them. Default 1: each replica decides on the
    /// whole quota. A quota set later with
    /// [`RedisLimiter::set_quota`](crate::redis::RedisLimiter::set_quota)
    /// is shared alike. Set it to the fleet's size, or more (a fleet
    /// larger than the setting gets more than one quota during an outage;
    /// one smaller, less).
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with [`ConfigError::OutOfRange`]
    /// (field `local_share`) for 0, or for a share whose slower refill
    /// period does not fit a `Duration`.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), Box<dyn std::error::Error>> {
    /// // Four replicas: while Redis is away, each admits a client 25 a
    /// // minute, the fleet about 100.
    /// let limiter = TokenBucket::builder()
    ///     .rate(100, Duration::from_secs(60))
    ///     .redis(conn, "api")
    ///     .local_share(4)
    ///     .build()?;
    /// # let _ = limiter;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn local_share(mut self, replicas: u32) -> Self {
        self.local_share = replicas;
        self
    }

    /// After a failure to reach Redis (a refused connection, or a call
    /// that timed out with no reply to any call since it was sent: a
    /// timeout while Redis answers others is a slow reply, which opens
    /// nothing), checks skip Redis for `first`, then one probe goes
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

    /// The local deny shortcut's table: `slots` entries of 56 bytes,
    /// rounded up to a power of two (default 4 096, 224 KiB). When Redis
    /// leaves a client with few units (at most 255, and fewer than its
    /// limit), the state it returned is kept here for at most one second;
    /// a request from that client that the state denies is denied in this
    /// process, without a round trip. It is judged at an instant no
    /// earlier than Redis's clock (the shortcut never outlasts the real
    /// denial), and told with the figures the in-process limiter computes
    /// on that state at an instant no later than Redis's clock: the wait
    /// it tells is never shorter than Redis's, and longer by at most the
    /// round trip that brought the state.
    /// A state deleted from Redis behind the limiter's back (a `FLUSHALL`,
    /// another process's `reset`) is believed at most that second;
    /// this limiter's own `reset`, `remove` and `set_quota` forget every
    /// entry made before them. For the sliding window log, only a request
    /// of one unit more than is left is denied here.
    /// [`build`](Self::build) requires 1 to 2<sup>20</sup> slots.
    ///
    /// # Examples
    ///
    /// See [`RedisBuilder`].
    #[must_use]
    pub fn deny_shortcut(mut self, slots: usize) -> Self {
        self.shortcut = Some(slots);
        self
    }

    /// Whether the scripts write each client's state packed (default
    /// off): the settings as text, then the state's numbers as binary
    /// doubles, which Lua reads and writes in one call each, where the
    /// text form parses and formats each number (about 4 % fewer
    /// instructions inside Redis per check, 6 % in a batch). Every process
    /// of this release reads both forms, and the next check rewrites the
    /// state in the form its limiter writes. A process of an earlier
    /// release cannot read a packed state: it answers that client through
    /// its [`FailPolicy`] until the key expires or a text writer rewrites
    /// it. So turn this on once every process sharing the prefix runs this
    /// release or a later one (see the [Redis guide](crate::guide::redis),
    /// "Upgrading").
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
    /// // Every replica sharing the prefix "api" runs this release.
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .redis(conn, "api")
    ///     .packed_state(true)
    ///     .build()?;
    /// # let _ = limiter;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn packed_state(mut self, on: bool) -> Self {
        self.packed = on;
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

    /// Whether checks coalesce (default on). While a call of this
    /// limiter is in flight, the further checks on this limiter in this
    /// process wait, and the next call carries all of them, of every
    /// client: one script decides each client on its own key, its checks in
    /// the order they were made, each exactly as a call of its own would
    /// have been decided in the batch's place (the same outcome and
    /// figures), reads Redis's clock once, and writes each client's state
    /// once. On a Redis Cluster a call holds one slot's keys, so there only
    /// the checks of one client share a call. Up to two calls are in
    /// flight at once: a check that finds fewer goes at once, alone, so a
    /// lone check waits for nothing; a batch carries at most 256 checks.
    /// Busy traffic then costs a round trip per batch rather than per
    /// check ([`RedisStats::coalesced`](crate::redis::RedisStats::coalesced)
    /// counts the checks that rode another's call). Peeks, bookings, a
    /// cost beyond the client's tier and the sliding window log's checks
    /// go one call each either way.
    ///
    /// A waiting check is answered by the fail policy if its batch's call
    /// fails, or once the [`timeout`](Self::timeout) has passed since it
    /// was first polled (counted in `timeouts`). The deny shortcut and the
    /// breaker are asked for each check when its batch goes. Batches go
    /// from a task spawned on the tokio runtime where the call before them
    /// ended; with none there, or if that runtime shuts down first, the
    /// checks waiting are answered by the fail policy. A check that goes
    /// alone is carried by its own task: one polled once and then left
    /// unpolled (neither awaited nor dropped) keeps its place in flight,
    /// and with both places so held the checks waiting behind them are
    /// answered only at their timeout.
    ///
    /// On by default: a lone check goes at once, so it costs a lone
    /// client nothing measurable, and busy traffic over many clients
    /// shares Redis's fixed cost per call (figures in the performance
    /// notes). Turn it off to make every check a call of its own.
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
    ///     .redis(conn, "one-call-each")
    ///     .coalesce(false)
    ///     .build()?;
    /// # let _ = limiter;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn coalesce(mut self, on: bool) -> Self {
        self.coalesce = on;
        self
    }

    /// Leases the bucket's units (default off): each process takes a
    /// block of a client's units from Redis in one call and spends it
    /// locally, in a lock-free cell, asking for more before it runs out.
    /// A hot client then costs one call per block instead of one per
    /// check; a client's checks this process cannot answer from its lease
    /// go to Redis as without leases.
    ///
    /// The fleet never admits more than the bucket allows: a unit is
    /// spent only after Redis granted it, and no later than its slot in
    /// the bucket's schedule. What leases cost is accuracy the other way:
    /// a process may be denied while other processes hold units they have
    /// not spent, at most `max(max_units, a horizon's refill)` each (see [`Lease`], and the guide's
    /// Redis chapter, [`crate::guide::redis`], for the bound and when to
    /// turn leases on).
    ///
    /// With leases, [`RedisLimiter::reset`](crate::redis::RedisLimiter::reset)
    /// and [`remove`](crate::redis::RedisLimiter::remove) keep the units leased
    /// to processes theirs, and the bucket restarts full from the end of
    /// the latest lease outstanding (at most one refill ahead; at once if
    /// none is), whichever replica resets, leasing or not;
    /// [`set_quota`](crate::redis::RedisLimiter::set_quota), or a client moved to
    /// another tier, gives up this process's lease granted under the old
    /// quota (its units lapse) and judges the next checks under the new
    /// one; [`peek`](crate::redis::RedisLimiter::peek) reads
    /// Redis's state, not this process's lease; when Redis fails, the
    /// units already leased are still spent and the fail policy answers
    /// the checks they cannot.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) answers [`ConfigError::Conflict`] (field
    /// `lease`) for any algorithm but a token bucket alone, and
    /// [`ConfigError::OutOfRange`] (field `lease`) for a horizon not
    /// within 1 µs and the bucket's refill time, or `max_units` not within
    /// 1 and the capacity.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::redis::Lease;
    /// use tollgate::TokenBucket;
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = TokenBucket::builder()
    ///     .rate(10_000, Duration::from_secs(1))
    ///     .redis(conn, "api")
    ///     .lease(Lease::new(Duration::from_millis(20)).max_units(200))
    ///     .build()?;
    /// assert!(limiter.check("tenant-7").await?.is_allowed());
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn lease(mut self, lease: Lease) -> Self {
        self.lease = Some(lease);
        self
    }
}

impl<A: RedisAlgorithm> RedisBuilder<A> {
    /// Validates the settings and builds the limiter. Sends nothing to
    /// Redis: the first check loads the script.
    ///
    /// # Errors
    ///
    /// Every error of [`Builder::build`] for the algorithm's settings;
    /// [`ConfigError::Conflict`] for a setting of the builder the Redis
    /// limiter would not apply (see [`Builder::redis`]); and
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
        self.build_on(Clock::new())
    }

    /// A limiter whose scripts and local bookkeeping read `clock` (the
    /// crate's tests).
    #[cfg(all(test, not(feature = "loom")))]
    pub(crate) fn build_on_test_clock(
        self,
        clock: crate::clock::ManualClock,
    ) -> Result<RedisLimiter<A>, ConfigError> {
        self.build_on(Clock::Test(clock, 0))
    }

    /// The same, with the local clock running `slow_ppm` parts per million
    /// slower than `clock`, which the scripts read.
    #[cfg(all(test, not(feature = "loom")))]
    pub(crate) fn build_on_slow_test_clock(
        self,
        clock: crate::clock::ManualClock,
        slow_ppm: u64,
    ) -> Result<RedisLimiter<A>, ConfigError> {
        self.build_on(Clock::Test(clock, slow_ppm))
    }

    fn build_on(self, clock: Clock) -> Result<RedisLimiter<A>, ConfigError> {
        if let Some(conflict) = self.conflict {
            return Err(conflict);
        }
        let name = crate::builder::valid_name(self.name)?;
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
                    (1, 1 << 20),
                    "slots",
                    "the deny shortcut's table holds 56 bytes per slot",
                )?;
                Some(DenyCache::new(slots.next_power_of_two()))
            }
        };
        if self.local_share == 0 {
            return Err(ConfigError::OutOfRange {
                field: "local_share",
                value: 0,
                min: 1,
                max: u128::from(u32::MAX),
                unit: "replicas",
                reason: "the quota is shared among at least one replica",
            });
        }
        let fallback = match self.policy {
            FailPolicy::Local => Some(A::fallback(&Settings {
                params: self.params.share(self.local_share)?,
                memory,
                resolver: self.tier_by.clone(),
            })?),
            _ => None,
        };
        let owner = owner_id();
        // A Cluster's call holds one slot's keys: there a batch carries one
        // client's checks; on one server, any clients'.
        let per_client = matches!(self.conn, RedisConnection::Cluster(_));
        let tiers = Tiers::new::<A>(self.params, self.tier_by, owner.clone())?;
        let scripts = scripts(&spec, &clock, per_client, self.packed);
        let leases = match self.lease {
            None => None,
            Some(lease) => {
                let valid = lease.validate(&spec)?;
                Some(Leases::new(valid, lease_scripts(&spec, &clock, per_client)))
            }
        };
        // Until the first reply: this host's own clock, from now.
        let built = clock.local_ns();
        let offset = unix_ns().wrapping_sub(built);
        // On Redis Cluster, a breaker per node.
        let breakers = match &self.conn {
            RedisConnection::Cluster(cluster) => {
                Breakers::cluster(first, max, cluster.clone(), self.timeout)
            }
            RedisConnection::Single(_) => Breakers::single(first, max),
        };
        breakers.map_now(clock.local_ns());
        Ok(RedisLimiter {
            inner: Arc::new(Inner {
                calls: Calls {
                    conn: self.conn,
                    clock,
                    counters: Counters::default(),
                },
                scripts,
                layout: Layout::new(&self.prefix, &spec.tag()),
                tiers,
                fallback,
                local_share: self.local_share,
                timeout: self.timeout,
                policy: self.policy,
                breakers,
                shortcut,
                coalesce: (self.coalesce && coalesces(&spec)).then(|| InFlight::new(per_client)),
                leases,
                owner,
                serial: AtomicU64::new(0),
                clock_sync: AtomicU128::new(sync_word(offset, built)),
                name,
                #[cfg(feature = "metrics")]
                answers: crate::redis::table::answers::Answers::new(),
                _algorithm: PhantomData,
            }),
        })
    }
}

/// The Lua that reads the clock a limiter's scripts judge at.
fn script_clock(clock: &Clock) -> &'static str {
    #[cfg(test)]
    let at = if clock.reads_redis() {
        CLOCK
    } else {
        crate::redis::script::lua::TEST_CLOCK
    };
    #[cfg(not(test))]
    let at = {
        debug_assert!(clock.reads_redis());
        CLOCK
    };
    at
}

/// A limiter's scripts, for its spec, on its clock; `moves`: on Redis
/// Cluster, whose slots move between nodes (a bucket's scripts then carry
/// a key moved onto its new node's clock); `packed`: they write states
/// packed (see [`RedisBuilder::packed_state`]).
fn scripts(spec: &Spec, clock: &Clock, moves: bool, packed: bool) -> Scripts {
    let at = script_clock(clock);
    match spec {
        Spec::Log { .. } => Scripts {
            check: Script::new(log_script(at, true)),
            peek: Script::new(log_script(at, false)),
            read: Script::new(log_book_script(at)),
            cas: Script::new(log_cancel_script(at)),
            batch: None,
            reset: None,
        },
        _ => Scripts {
            check: Script::new(word_script(spec, at, moves, true, packed)),
            peek: Script::new(word_script(spec, at, moves, false, packed)),
            read: Script::new(read_script(spec, at, moves)),
            cas: Script::new(cas_script(spec, at, moves)),
            batch: Some(Script::new(batch_script(spec, at, moves, packed))),
            // Any bucket's, leasing or not: another replica of the same
            // settings may lease the client's units.
            reset: matches!(
                spec,
                Spec::One(Half {
                    ns: WordSpec::Bucket(_),
                    ..
                })
            )
            .then(|| Script::new(lease_reset_script(at))),
        },
    }
}

/// A leasing limiter's scripts, for its spec, on its clock (`moves`: as
/// for [`scripts`]).
fn lease_scripts(spec: &Spec, clock: &Clock, moves: bool) -> LeaseScripts {
    let at = script_clock(clock);
    LeaseScripts {
        grant: Script::new(lease_script(spec, at, moves)),
        give_back: Script::new(lease_return_script(spec, at, moves)),
    }
}

/// The Unix time now, ns.
fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A limiter's id, written with every state it writes: 16 hex digits of a
/// randomly keyed hash of the time and this process.
fn owner_id() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    unix_ns().hash(&mut hasher);
    std::process::id().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

impl<A, K, C> Builder<A, K, C> {
    /// The first setting of this builder a Redis limiter would not apply.
    fn redis_conflict(&self) -> Option<ConfigError> {
        self.conflict().or_else(|| {
            let conflict = |field, reason| Some(ConfigError::Conflict { field, reason });
            if self.has_clock() {
                conflict(
                    "clock",
                    "a Redis limiter reads Redis's clock: give no clock to its builder",
                )
            } else if self.has_tier_by() {
                conflict(
                    "tier_by",
                    "a Redis limiter's tiers are resolved from the client's bytes: give the resolver to `RedisBuilder::tier_by`",
                )
            } else {
                None
            }
        })
    }
}
