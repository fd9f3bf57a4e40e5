//! Bookings on Redis: [`RedisLimiter::reserve`], [`reserve_n`](RedisLimiter::reserve_n),
//! [`until_ready`](RedisLimiter::until_ready) and the
//! [`RedisReservation`] they make, as the in-process limiter's
//! [`Limiter::reserve_n`](crate::Limiter::reserve_n) and
//! [`Reservation`](crate::Reservation).
//!
//! A word algorithm's booking reads the client's state (the slow path's
//! read), books on it with the in-process algorithm's own `reserve` (the
//! token bucket's, the fixed window's, a pair's), and writes the state it
//! leaves by compare-and-set, trying again if the state changed between.
//! Its cancellation is the tail rule as one compare-and-set: the state
//! before the booking is written back iff the key still holds exactly the
//! state the booking wrote (its stamp and incarnation included, so a key
//! reset and made again never matches) and the booking's time has not
//! come. What it writes back is the very value the booking read, when that
//! held the same state under the same settings, so that bookings cancelled
//! last first each give back in turn. A quota change of this limiter ends every booking's
//! cancellability, as in-process. The sliding window log books in one
//! script: the entries whose expiries make room are taken out and the
//! booking's own added at the instant the last of them expires; a
//! cancellation takes out each of the booking's entries that no later
//! booking has claimed, and puts back the entry it replaced.

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::time::Duration;
use std::sync::Arc;

use ::redis::Value;

use super::decide::{Cas, Failure, ATTEMPTS};
use crate::algorithm::{Reserve, Transitions, NEVER};
use crate::check::{CheckError, CheckErrorKind};
use crate::decision::Decision;
use crate::error::{CostError, ReserveError};
use crate::redis::quota::{algorithm::RedisAlgorithm, tier::Judged};
use crate::redis::script::key::{client_bytes, RedisKey};
use crate::redis::script::spec::{Spec, WordSpec, EXACT_MAX};
use crate::redis::script::state::{expiry_ms, round_up_to_us, same_but_writer, DecodeError};
use crate::redis::shared::limiter::{FailPolicy, Inner, RedisLimiter};
#[cfg(feature = "metrics")]
use crate::redis::table::answers::{Outcome, Path};
use crate::redis::wire::call;
use crate::redis::wire::guard::bump;
use crate::reservation::Reservable;
use crate::sync::Ordering;

/// Why a booking on Redis was not made.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::redis::RedisReserveError;
/// use tollgate::ReserveError;
///
/// let err = RedisReserveError::from(ReserveError::TooLong { wait: Duration::from_secs(3) });
/// assert!(err.to_string().contains("3s"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum RedisReserveError {
    /// As in-process: the request would wait too long, costs more than the
    /// capacity, or this quota cannot book ahead.
    Reserve(ReserveError),
    /// Redis failed, and the [`FailPolicy`] answered with the error.
    Check(CheckError),
}

impl fmt::Display for RedisReserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Reserve(err) => err.fmt(f),
            Self::Check(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for RedisReserveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Reserve(err) => Some(err),
            Self::Check(err) => Some(err),
        }
    }
}

impl From<ReserveError> for RedisReserveError {
    fn from(err: ReserveError) -> Self {
        Self::Reserve(err)
    }
}

impl From<CheckError> for RedisReserveError {
    fn from(err: CheckError) -> Self {
        Self::Check(err)
    }
}

/// What cancelling a booking needs: the client, and how to undo it.
#[derive(Debug)]
enum Ticket {
    /// A word algorithm's: the value the booking wrote (expected at the
    /// cancel), and the value before it (written back, `""`: no key),
    /// with its expiry; and the quota generation it was made under.
    Word {
        wrote: Option<String>,
        before: String,
        expiry: u64,
        generation: u64,
    },
    /// A log's: the call's token and cost, and the entries it took out
    /// (member, score).
    Log {
        token: String,
        cost: u64,
        taken: Vec<(String, String)>,
    },
}

/// A booking's undoing, held until it is committed or cancelled.
#[derive(Debug)]
struct Pending {
    key: Vec<u8>,
    client: Vec<u8>,
    tier: u16,
    /// Ready at this instant (µs on Redis's clock).
    ready: u64,
    ticket: Ticket,
}

/// A cancellation under way: whether anything was given back.
type Undo = Pin<Box<dyn Future<Output = Result<bool, CheckError>> + Send>>;

/// What a [`RedisReservation`] needs of its limiter.
trait Booker: Send + Sync {
    /// The clock of the server that gave `reading` (see
    /// `call::sync_word`) now, as this process estimates it (ns): no
    /// earlier than it.
    fn redis_now(&self, reading: u128) -> u64;

    /// Cancels `pending`: whether anything was given back.
    fn give_back(self: Arc<Self>, pending: Pending) -> Undo;
}

/// A request booked ahead on Redis: charged now, allowed from
/// [`ready_at`](Self::ready_at), [`wait`](Self::wait) after Redis judged
/// it. Made by [`RedisLimiter::reserve`] and
/// [`RedisLimiter::reserve_n`].
///
/// As an in-process [`Reservation`](crate::Reservation): proceed once the
/// wait is over and [`commit`](Self::commit), or
/// [`cancel`](Self::cancel) to give the charge back if nothing was
/// charged since. Dropping it before its time cancels it in the
/// background (on the tokio runtime the drop runs on; outside one,
/// nothing is given back). A booking made while Redis was down (by the
/// [`FailPolicy`]) cannot be cancelled.
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
/// let limiter = TokenBucket::builder().rate(10, Duration::from_secs(1)).redis(conn, "jobs").build()?;
/// let booked = limiter.reserve_n("alice", 10, Duration::ZERO).await?;
/// booked.commit();
/// // A token takes 0.1 s to refill: booked, and charged already.
/// let next = limiter.reserve("alice", Duration::from_secs(1)).await?;
/// assert!(next.wait() > Duration::ZERO);
/// assert!(next.cancel().await?, "nothing was charged since: given back");
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping a reservation before its time cancels it; call `commit` when you proceed"]
pub struct RedisReservation {
    wait: Duration,
    ready_at: u64,
    /// The reply that booked it read this of Redis's clock (see
    /// `call::sync_word`): the clock of the node holding the client's key,
    /// on which `ready_at` lies.
    reading: u128,
    cost: u64,
    pending: Option<Pending>,
    booker: Option<Arc<dyn Booker>>,
}

impl fmt::Debug for RedisReservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisReservation")
            .field("wait", &self.wait)
            .field("ready_at", &self.ready_at())
            .field("cost", &self.cost)
            .field("cancellable", &self.pending.is_some())
            .finish()
    }
}

impl RedisReservation {
    /// How long the request waits, from the instant Redis judged it.
    ///
    /// # Examples
    ///
    /// See [`RedisReservation`].
    #[must_use]
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The instant the request conforms, on Redis's clock, as time since
    /// the Unix epoch.
    ///
    /// # Examples
    ///
    /// See [`RedisReservation`].
    #[must_use]
    pub fn ready_at(&self) -> Duration {
        Duration::from_nanos(self.ready_at)
    }

    /// How long is left to wait, as this process reads Redis's clock (on
    /// Redis Cluster, the clock of the node that booked it): at most the
    /// true wait (it never says to wait past the instant).
    ///
    /// # Examples
    ///
    /// See [`RedisReservation`].
    #[must_use]
    pub fn remaining_wait(&self) -> Duration {
        let now = self
            .booker
            .as_ref()
            .map_or(u64::MAX, |b| b.redis_now(self.reading));
        Duration::from_nanos(self.ready_at.saturating_sub(now))
    }

    /// The units booked.
    ///
    /// # Examples
    ///
    /// See [`RedisReservation`].
    #[must_use]
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Proceeds with the request: the booking stands.
    ///
    /// # Examples
    ///
    /// See [`RedisReservation`].
    pub fn commit(mut self) {
        self.pending = None;
    }

    /// Gives the charge back, as the in-process
    /// [`Reservation::cancel`](crate::Reservation::cancel) does: iff the
    /// booking's time has not come and nothing was charged to the client
    /// since (a token bucket, a fixed window or a pair: the tail rule; a
    /// log: each of its entries no later booking has claimed). The answer
    /// is whether anything was given back.
    ///
    /// # Errors
    ///
    /// A [`CheckError`] when Redis did not answer: nothing is known to
    /// have been given back.
    ///
    /// # Examples
    ///
    /// See [`RedisReservation`].
    pub fn cancel(mut self) -> impl Future<Output = Result<bool, CheckError>> + Send + 'static {
        let undo = self.undo();
        async move {
            match undo {
                Some(undo) => undo.await,
                None => Ok(false),
            }
        }
    }

    /// The cancellation, if there is one to make.
    fn undo(&mut self) -> Option<Undo> {
        let pending = self.pending.take()?;
        let booker = self.booker.clone()?;
        Some(booker.give_back(pending))
    }
}

impl Drop for RedisReservation {
    /// Cancels the booking in the background (see [`RedisReservation`])
    /// unless it was committed, cancelled, or its time has come.
    fn drop(&mut self) {
        if self.pending.is_none() || self.remaining_wait().is_zero() {
            return;
        }
        if let (Ok(runtime), Some(undo)) = (tokio::runtime::Handle::try_current(), self.undo()) {
            runtime.spawn(async move {
                let _ = undo.await;
            });
        }
    }
}

impl<A: RedisAlgorithm> Booker for Inner<A> {
    fn redis_now(&self, reading: u128) -> u64 {
        self.calls.clock.estimate(reading)
    }

    fn give_back(self: Arc<Self>, pending: Pending) -> Undo {
        Box::pin(async move {
            let key = pending.key.clone();
            let undo = self.undo(&pending);
            let (given, _) = self.guarded(false, &key, undo).await?;
            if given {
                // The state is more permissive than any entry made since.
                if let Some(cache) = &self.shortcut {
                    cache.forget(cache.key(cache.generation(), pending.tier, &pending.client));
                }
            }
            Ok(given)
        })
    }
}

impl<A: RedisAlgorithm> Inner<A> {
    /// A cancellation's round trip.
    async fn undo(&self, pending: &Pending) -> Result<bool, Failure> {
        match &pending.ticket {
            Ticket::Word {
                wrote,
                before,
                expiry,
                generation,
            } => {
                if *generation != self.tiers.generation() {
                    return Ok(false);
                }
                let done = self
                    // The booking's instant guards a cancel on a node
                    // whose clock is ahead (it has passed there); on one
                    // behind, the state put back lies in its future and
                    // refuses more, never admits more.
                    .cas(
                        &pending.key,
                        (wrote, None),
                        before,
                        Some(pending.ready),
                        *expiry,
                    )
                    .await?;
                Ok(done == Cas::Written)
            }
            Ticket::Log { token, cost, taken } => {
                let reply: Vec<i64> = self
                    .calls
                    .eval(&self.scripts.cas, &pending.key, |cmd| {
                        cmd.arg(pending.ready)
                            .arg(token)
                            .arg(*cost)
                            .arg(taken.len());
                        for (member, score) in taken {
                            cmd.arg(member).arg(score);
                        }
                    })
                    .await?;
                Ok(reply.first().is_some_and(|&given| given > 0))
            }
        }
    }

    /// A word algorithm's booking: read, book, compare-and-set.
    async fn book_word(
        &self,
        judged: &Judged,
        key: &[u8],
        cost: u64,
        max_wait: u64,
    ) -> Result<Booked, Failure> {
        let spec = judged.quota.spec;
        let ns = spec.ns().expect("a word algorithm");
        for _ in 0..ATTEMPTS {
            let stored = self.read(key).await?;
            let generation = self.tiers.generation();
            let settled = self.tiers.settle(judged, &stored, &self.owner)?;
            let word = settled.map_or_else(|| ns.fresh_at(0), |s| s.word);
            let now = stored.now * 1_000;
            let (next, ready_at) = match ns.reserve(word, now, cost) {
                Reserve::Never => return Ok(Booked::TooLong(NEVER)),
                Reserve::At { word, ready_at } => (word, ready_at),
            };
            let wait = crate::algorithm::until(now, ready_at);
            if wait > max_wait.min(NEVER - 1) {
                return Ok(Booked::TooLong(wait));
            }
            let serial = self.serial.fetch_add(1, crate::sync::Ordering::Relaxed);
            let (new, linger) = self.stamped(judged, &stored, &spec, next, serial);
            let done = self
                .cas(
                    key,
                    (&stored.value, Some(stored.expiry)),
                    &new,
                    None,
                    expiry_ms(&ns, next, linger),
                )
                .await?;
            if done != Cas::Written {
                continue;
            }
            // The state before: the very value read, when it already held
            // that state under this booking's settings and tier generation,
            // so that cancelling bookings last first gives each earlier
            // one back its own value, and with it its cancellability (the
            // tail rule, as in-process). Otherwise stamped as the booking
            // stamped it (a state converted on the way keeps its
            // conversion) and marked as the cancel's own write. No state
            // before: the cancel takes the key out.
            let before = if settled.is_some() {
                let undo = self.serial.fetch_add(1, crate::sync::Ordering::Relaxed);
                let (fresh, _) = self.stamped(judged, &stored, &spec, word, undo);
                match &stored.value {
                    Some(read) if same_but_writer(read, &fresh) => read.clone(),
                    _ => fresh,
                }
            } else {
                String::new()
            };
            let ticket = Ticket::Word {
                wrote: Some(new),
                before,
                expiry: expiry_ms(&ns, word, linger),
                generation,
            };
            return Ok(Booked::Granted {
                ready: ready_at.div_ceil(1_000),
                now: stored.now,
                ticket: Some(ticket),
            });
        }
        Err(Failure::Contended)
    }

    /// A log's booking, in one script.
    async fn book_log(
        &self,
        key: &[u8],
        window_us: u64,
        limit: u64,
        cost: u64,
        max_wait: u64,
    ) -> Result<Booked, Failure> {
        let token = self.token();
        let most = if max_wait >= EXACT_MAX * 1_000 {
            -1
        } else {
            i64::try_from(max_wait / 1_000).unwrap_or(i64::MAX)
        };
        let reply: Vec<Value> = self
            .calls
            .eval(&self.scripts.read, key, |cmd| {
                cmd.arg(window_us)
                    .arg(limit)
                    .arg(cost)
                    .arg(&token)
                    .arg(most);
            })
            .await?;
        let int =
            |v: Option<&Value>| -> Result<u64, Failure> {
                match v {
                    Some(Value::Int(n)) => u64::try_from(*n)
                        .ok()
                        .filter(|&n| n <= EXACT_MAX)
                        .ok_or(Failure::Decode(DecodeError::Range(
                            "an instant out of range",
                        ))),
                    _ => Err(Failure::Decode(DecodeError::Shape(reply.len()))),
                }
            };
        let (code, ready, now) = (int(reply.first())?, int(reply.get(1))?, int(reply.get(2))?);
        if code == 0 {
            return Ok(Booked::TooLong(ready.saturating_sub(now) * 1_000));
        }
        let text = |v: &Value| -> Result<String, Failure> {
            match v {
                Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
                _ => Err(Failure::Decode(DecodeError::Shape(reply.len()))),
            }
        };
        let taken = reply[3..]
            .chunks(2)
            .map(|pair| Ok((text(&pair[0])?, text(pair.get(1).unwrap_or(&Value::Nil))?)))
            .collect::<Result<Vec<_>, Failure>>()?;
        Ok(Booked::Granted {
            ready,
            now,
            ticket: (ready > now).then_some(Ticket::Log { token, cost, taken }),
        })
    }
}

/// What a booking's round trip made.
enum Booked {
    /// Charged: ready at `ready`, judged at `now` (µs on Redis's clock).
    Granted {
        ready: u64,
        now: u64,
        ticket: Option<Ticket>,
    },
    /// It would wait this long (ns, `NEVER` for never): nothing charged.
    TooLong(u64),
}

/// Whether `spec` books ahead on Redis: as in-process, and for a fixed
/// window, with room in Lua's exact integers for the windows a booking
/// closes.
fn reserves(spec: &Spec) -> bool {
    match spec {
        Spec::Log { .. } => true,
        _ => {
            spec.ns().is_some_and(|ns| ns.reserves())
                && spec
                    .halves()
                    .iter()
                    .all(|(h, _)| !matches!(h.ns, WordSpec::Fixed(_)) || h.b <= EXACT_MAX / 2)
        }
    }
}

impl<A: RedisAlgorithm + Reservable> RedisLimiter<A> {
    /// Books one request for `key`: see [`reserve_n`](Self::reserve_n).
    ///
    /// # Errors
    ///
    /// As [`reserve_n`](Self::reserve_n)'s.
    ///
    /// # Examples
    ///
    /// See [`RedisReservation`].
    pub fn reserve<K: RedisKey + ?Sized>(
        &self,
        key: &K,
        max_wait: Duration,
    ) -> impl Future<Output = Result<RedisReservation, RedisReserveError>> + Send + 'static {
        self.reserve_n(key, 1, max_wait)
    }

    /// Books a request of `cost` units for `key`, to proceed as soon as it
    /// conforms, for every process sharing the Redis: as in-process
    /// [`Limiter::reserve_n`](crate::Limiter::reserve_n), the units are
    /// charged now however long the request must wait, so clients that
    /// wait are served in the order they booked, and the
    /// [`RedisReservation`] says how long to wait. The token bucket, the
    /// fixed window, the sliding window log and a pair of the first two
    /// book ahead (the [`Reservable`] algorithms), each by its in-process
    /// rule. A cost of 0 is ready at once and charges nothing.
    ///
    /// # Errors
    ///
    /// Nothing is charged on an error.
    ///
    /// - [`RedisReserveError::Reserve`]: as in-process,
    ///   [`ReserveError::TooLong`] if the request would wait longer than
    ///   `max_wait` (or, above the client's tier's capacity, forever),
    ///   [`ReserveError::Cost`] above every tier's capacity,
    ///   [`ReserveError::Unsupported`] for a fixed window whose limit lies
    ///   in the top half of its range (on Redis, above 2<sup>52</sup>);
    /// - [`RedisReserveError::Check`]: Redis failed and the
    ///   [`FailPolicy`] answered with the error (under `FailOpen`, a
    ///   booking Redis cannot make in time is ready at once and charges
    ///   nothing; under `Local`, the fallback books it, for good).
    ///
    /// # Examples
    ///
    /// See [`RedisReservation`].
    pub fn reserve_n<K: RedisKey + ?Sized>(
        &self,
        key: &K,
        cost: u64,
        max_wait: Duration,
    ) -> impl Future<Output = Result<RedisReservation, RedisReserveError>> + Send + 'static {
        let inner = Arc::clone(&self.inner);
        let client = client_bytes(key);
        async move { inner.reserve(client, cost, max_wait).await }
    }

    /// Waits until one request for `key` conforms, booking it at once (so
    /// requests are served in the order they waited): see
    /// [`until_ready_n`](Self::until_ready_n).
    ///
    /// # Errors
    ///
    /// As [`until_ready_n`](Self::until_ready_n)'s.
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
    /// let limiter = TokenBucket::builder().rate(10, Duration::from_secs(1)).redis(conn, "jobs").build()?;
    /// for _ in 0..20 {
    ///     limiter.until_ready("crawler").await?;
    ///     // … one request, at most 10 a second …
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn until_ready<K: RedisKey + ?Sized>(
        &self,
        key: &K,
    ) -> Result<(), RedisReserveError> {
        self.until_ready_n(key, 1).await
    }

    /// Waits until a request of `cost` units for `key` conforms: books it
    /// ([`reserve_n`](Self::reserve_n) with no bound on the wait), sleeps
    /// on tokio's timer for the booking's wait, counted from when Redis's
    /// answer arrived (so never before the booking's instant), and
    /// proceeds. Dropping the future while it sleeps cancels the booking
    /// (see [`RedisReservation`]).
    ///
    /// # Errors
    ///
    /// As [`reserve_n`](Self::reserve_n)'s; a request that would never
    /// conform is [`ReserveError::TooLong`] with `Duration::MAX`.
    ///
    /// # Examples
    ///
    /// See [`until_ready`](Self::until_ready).
    pub async fn until_ready_n<K: RedisKey + ?Sized>(
        &self,
        key: &K,
        cost: u64,
    ) -> Result<(), RedisReserveError> {
        let booked = self.reserve_n(key, cost, Duration::MAX).await?;
        if !booked.wait().is_zero() {
            tokio::time::sleep(booked.wait()).await;
        }
        booked.commit();
        Ok(())
    }
}

impl<A: RedisAlgorithm> Inner<A> {
    /// A booking, from the checks before any round trip to the fail
    /// policy's answer.
    async fn reserve(
        self: Arc<Self>,
        client: Vec<u8>,
        cost: u64,
        max_wait: Duration,
    ) -> Result<RedisReservation, RedisReserveError> {
        bump(&self.calls.counters.checks);
        let judged = self.tiers.judge(&client);
        if cost > judged.max_capacity {
            let err = CostError {
                cost,
                capacity: judged.max_capacity,
            };
            return Err(ReserveError::Cost(err).into());
        }
        let spec = judged.quota.spec;
        if !reserves(&spec) {
            return Err(ReserveError::Unsupported.into());
        }
        // Relaxed: as in `redis_now`. A booking that makes no call is
        // ready at once, on the latest reply's clock.
        let latest = self.clock_sync.load(Ordering::Relaxed);
        let now = self.calls.clock.estimate(latest);
        let ready_now = |booker: Option<Arc<dyn Booker>>| RedisReservation {
            wait: Duration::ZERO,
            ready_at: now,
            reading: latest,
            cost,
            pending: None,
            booker,
        };
        if cost == 0 {
            return Ok(ready_now(Some(self.clone())));
        }
        if cost > spec.capacity() {
            // Above the client's own tier's capacity: it never conforms. A
            // denial, as in-process, decided here without a round trip.
            #[cfg(feature = "metrics")]
            self.answered(Path::Redis, Outcome::Denied, cost);
            let wait = Decision::wait(NEVER);
            return Err(ReserveError::TooLong { wait }.into());
        }
        let max_wait = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        let key = self.layout.key(&client);
        let booked = match self.gate(self.calls.clock.local_ns(), &key) {
            Ok(probe_due) => {
                let work = async {
                    match spec {
                        Spec::Log { window_us, limit } => {
                            self.book_log(&key, window_us, limit, cost, max_wait).await
                        }
                        _ => self.book_word(&judged, &key, cost, max_wait).await,
                    }
                };
                self.guarded(probe_due, &key, work).await
            }
            Err(err) => Err(err),
        };
        match booked {
            Ok((Booked::TooLong(wait), _)) => {
                #[cfg(feature = "metrics")]
                self.answered(Path::Redis, Outcome::Denied, cost);
                Err(ReserveError::TooLong {
                    wait: round_up_to_us(Decision::wait(wait)),
                }
                .into())
            }
            Ok((Booked::Granted { ready, now, ticket }, sent)) => {
                #[cfg(feature = "metrics")]
                self.answered(Path::Redis, Outcome::Admitted, cost);
                self.judged(sent, now);
                // Its wait runs on the clock of the node that booked it.
                let reading = call::reading(sent, now);
                // The state changed: whatever the shortcut kept is stale.
                if let Some(cache) = &self.shortcut {
                    cache.forget(cache.key(cache.generation(), judged.tier, &client));
                }
                let wait = Duration::from_micros(ready.saturating_sub(now));
                Ok(RedisReservation {
                    wait,
                    ready_at: ready * 1_000,
                    reading,
                    cost,
                    pending: ticket.filter(|_| !wait.is_zero()).map(|ticket| Pending {
                        key,
                        client,
                        tier: judged.tier,
                        ready,
                        ticket,
                    }),
                    booker: Some(self),
                })
            }
            Err(err) => {
                let counters = &self.calls.counters;
                match self.policy {
                    FailPolicy::FailOpen
                        if matches!(
                            err.kind(),
                            CheckErrorKind::Timeout | CheckErrorKind::Unavailable
                        ) =>
                    {
                        bump(&counters.fail_open);
                        #[cfg(feature = "metrics")]
                        self.answered(Path::FailOpen, Outcome::Admitted, cost);
                        Ok(ready_now(None))
                    }
                    FailPolicy::Local => {
                        bump(&counters.fail_local);
                        let Some(local) = &self.fallback else {
                            return Err(err.into());
                        };
                        let wait = local.reserve(
                            &client,
                            judged.tier,
                            cost,
                            Duration::from_nanos(max_wait),
                        );
                        #[cfg(feature = "metrics")]
                        self.answered(
                            Path::Local,
                            match &wait {
                                Ok(_) => Outcome::Admitted,
                                Err(ReserveError::TooLong { .. } | ReserveError::Full { .. }) => {
                                    Outcome::Denied
                                }
                                Err(_) => Outcome::Refused,
                            },
                            cost,
                        );
                        let wait = wait?;
                        Ok(RedisReservation {
                            wait,
                            ready_at: now
                                .saturating_add(u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX)),
                            reading: latest,
                            cost,
                            pending: None,
                            booker: None,
                        })
                    }
                    _ => {
                        bump(&counters.fail_closed);
                        #[cfg(feature = "metrics")]
                        self.answered(
                            if matches!(
                                err.kind(),
                                CheckErrorKind::Timeout | CheckErrorKind::Unavailable
                            ) {
                                Path::FailClosed
                            } else {
                                Path::KeyRefused
                            },
                            Outcome::Refused,
                            cost,
                        );
                        Err(err.into())
                    }
                }
            }
        }
    }
}
