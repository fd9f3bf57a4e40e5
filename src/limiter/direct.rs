//! One budget for every caller: [`DirectLimiter`], a limiter with no
//! clients, whose state is one cell beside its settings and clock, with no
//! table to look it up in.

use core::fmt;
use core::time::Duration;
use std::borrow::Cow;

use crossbeam_utils::CachePadded;

use super::booking::{book_on, terms};
use super::RateLimiter;
use crate::algorithm::Ticket;
use crate::cell::Algorithm;
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::{CostError, ReserveError};
use crate::reservation::{Booker, Reservable, Reservation, Stamp};
#[cfg(feature = "metrics")]
use crate::telemetry::Decisions;

/// A limiter with one budget for every caller (a whole service's calls to
/// an upstream API, a background job's writes), on the same algorithms and
/// [`Decision`]s as a keyed [`Limiter`](crate::Limiter), with no clients:
/// its state is one cell (for the word algorithms, one 64-bit word; for two
/// limits held together, two words updated as one), with no table and no
/// key to hash.
///
/// Build one with the same builder as a keyed limiter, ending in
/// [`build_direct`](crate::Builder::build_direct). A check reads the clock
/// once and, if it admits, makes one compare-and-swap of the state; a
/// denial writes nothing. Checks never take a lock or wait for another
/// thread. Share it by reference or in an `Arc`.
///
/// It books requests ahead as a keyed limiter does
/// ([`reserve_n`](DirectLimiter::reserve_n), and with the `tokio` feature
/// `until_ready`), by the same rules. It implements [`RateLimiter`] and
/// [`AsyncCheck`](crate::AsyncCheck) for every key type, and ignores the
/// key: every caller, whatever its key, draws on the one budget. So it
/// stands wherever a keyed limiter does (a `dyn RateLimiter`, the HTTP
/// layer's limiter for a global limit), and answers all its callers as
/// one client.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::TokenBucket;
///
/// // At most 100 calls a second to the upstream, in bursts of up to 10.
/// let upstream = TokenBucket::builder()
///     .rate(100, Duration::from_secs(1))
///     .capacity(10)
///     .build_direct()?;
/// let sent = (0..50).filter(|_| upstream.allow()).count();
/// assert!((10..50).contains(&sent));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
///
/// Beside keyed limiters, behind one `dyn RateLimiter`: the key is ignored.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate::{FixedWindow, RateLimiter, TokenBucket};
///
/// let second = Duration::from_secs(1);
/// let limiters: Vec<Arc<dyn RateLimiter>> = vec![
///     Arc::new(FixedWindow::builder().limit(1).window(second).build()?), // per client
///     Arc::new(FixedWindow::builder().limit(1).window(second).build_direct()?), // for all
/// ];
/// let admitted = |l: &Arc<dyn RateLimiter>| [l.allow_request("alice"), l.allow_request("bob")];
/// assert_eq!(admitted(&limiters[0]), [true, true]);
/// assert_eq!(admitted(&limiters[1]), [true, false], "alice and bob share the budget");
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
///
/// As the HTTP layer's limiter (the `tower` feature), a global limit on
/// every request that passes it, with `tollgate::tower::GlobalKey`:
///
/// ```
/// # #[cfg(feature = "tower")]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::convert::Infallible;
/// use std::time::Duration;
///
/// use http::{Request, Response, StatusCode};
/// use tollgate::tower::{GlobalKey, RateLimitLayer};
/// use tollgate::TokenBucket;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// // At most 2 requests a minute through this route, from all clients together.
/// let everyone = TokenBucket::builder()
///     .rate(2, Duration::from_secs(60))
///     .build_direct()?;
/// let layer = RateLimitLayer::new(everyone, GlobalKey);
/// let service = layer.layer(service_fn(|_: Request<String>| async {
///     Ok::<_, Infallible>(Response::new(String::from("hello")))
/// }));
/// let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// let statuses = runtime.block_on(async {
///     let mut statuses = Vec::new();
///     for _ in 0..3 {
///         let response = service.clone().oneshot(Request::new(String::new())).await?;
///         statuses.push(response.status());
///     }
///     Ok::<_, Infallible>(statuses)
/// })?;
/// assert_eq!(statuses, [StatusCode::OK, StatusCode::OK, StatusCode::TOO_MANY_REQUESTS]);
/// # Ok(())
/// # }
/// # #[cfg(not(feature = "tower"))]
/// # fn main() {}
/// ```
pub struct DirectLimiter<A: Algorithm, C = MonotonicClock> {
    /// On a cache line of its own: a check's exchange of it leaves the
    /// settings and the clock, which every check reads, where other cores
    /// keep them.
    cell: CachePadded<A::Cell>,
    algorithm: A,
    clock: C,
    /// The builder's [`name`](crate::Builder::name), or `"default"`.
    name: Cow<'static, str>,
    /// The checks' counts, kept per thread, and their publication.
    #[cfg(feature = "metrics")]
    decisions: Decisions,
}

impl<A: Algorithm, C: Clock> DirectLimiter<A, C> {
    pub(crate) fn new(algorithm: A, clock: C) -> Self {
        Self {
            cell: CachePadded::new(algorithm.new_cell()),
            algorithm,
            clock,
            name: Cow::Borrowed("default"),
            #[cfg(feature = "metrics")]
            decisions: Decisions::without_gauges(),
        }
    }

    /// Sets the limiter's name; with the `metrics` feature, joins the
    /// limiter's counts to the publishing thread under it, which publishes
    /// them from then on (a direct limiter has no gauges, so no check
    /// publishes).
    pub(crate) fn named(mut self, name: Cow<'static, str>) -> Self {
        #[cfg(feature = "metrics")]
        self.decisions.join(&name);
        self.name = name;
        self
    }

    /// Counts a one-unit decision (the `metrics` feature) and answers it:
    /// out of line (see `Decisions::record_one`), so that the check that
    /// counts it, [`allow`](DirectLimiter::allow), still inlines into its
    /// caller.
    #[cfg(feature = "metrics")]
    #[inline(always)]
    fn counted(&self, admitted: bool) -> bool {
        self.decisions.record_one(admitted);
        admitted
    }

    #[cfg(not(feature = "metrics"))]
    #[inline(always)]
    fn counted(&self, admitted: bool) -> bool {
        admitted
    }

    /// Counts a decision on `cost` units (the `metrics` feature): a
    /// thread-local read and a plain load and store of this thread's
    /// stripe, inlined; the rare paths (a thread's first count, a thread
    /// beyond the stripes) are out of line. Nothing else: publishing is
    /// the publishing thread's.
    #[inline]
    fn count(&self, admitted: bool, cost: u64) {
        #[cfg(feature = "metrics")]
        self.decisions.record(admitted, cost);
        #[cfg(not(feature = "metrics"))]
        let _ = (admitted, cost);
    }

    /// Publishes the limiter's counts through the `metrics` crate's facade,
    /// as [`Limiter::publish_metrics`](crate::Limiter::publish_metrics)
    /// does: what its checks counted since the last publication. There is
    /// no need to call it for a scrape: from its first check on, the
    /// counts are published about once a second of real time by a thread
    /// of tollgate's (see the [observability
    /// guide](crate::guide::observability)); call it for figures exact to
    /// the last check. Needs the `metrics` feature.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let upstream = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .name("upstream")
    ///     .build_direct()?;
    /// assert!(upstream.allow());
    /// upstream.publish_metrics();
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[cfg(feature = "metrics")]
    pub fn publish_metrics(&self) {
        let _ = self.decisions.publish(&self.name, true);
    }

    /// The limiter's name: the one given to its builder
    /// ([`name`](crate::Builder::name)), or `"default"`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let upstream = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .name("upstream")
    ///     .build_direct()?;
    /// assert_eq!(upstream.name(), "upstream");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether one request may proceed now. An admitted request is
    /// recorded; a denied one changes nothing. The fastest check: it
    /// computes no figures for a [`Decision`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::FixedWindow;
    ///
    /// let limiter = FixedWindow::builder()
    ///     .limit(2)
    ///     .window(Duration::from_secs(60))
    ///     .build_direct()?;
    /// assert!(limiter.allow());
    /// assert!(limiter.allow());
    /// assert!(!limiter.allow());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[inline]
    #[must_use]
    pub fn allow(&self) -> bool {
        let now = self.clock.now_nanos();
        // Never `None`: the cell is never retired (nothing evicts, resets
        // or moves it), so it is alive for the limiter's whole life.
        let admitted = self.algorithm.try_admit(&self.cell, now, 1) == Some(true);
        self.counted(admitted)
    }

    /// Checks one request and says how much quota is left and, if denied,
    /// when to retry.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(2, Duration::from_secs(1))
    ///     .build_direct()?;
    /// assert_eq!(limiter.check().remaining(), 1);
    /// assert_eq!(limiter.check().remaining(), 0);
    /// let denied = limiter.check();
    /// assert!(denied.is_denied());
    /// assert!(denied.retry_after() > Duration::ZERO);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn check(&self) -> Decision {
        self.decide(1)
    }

    /// Checks a request that costs `cost` units at once: all of it is
    /// admitted or none. A cost of 0 is always admitted and records
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` exceeds the capacity (token bucket) or limit
    /// (windows), since such a request could never be admitted.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .build_direct()?;
    /// assert!(limiter.check_n(7).unwrap().is_allowed());
    /// assert!(limiter.check_n(7).unwrap().is_denied());
    /// assert!(limiter.check_n(11).is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn check_n(&self, cost: u64) -> Result<Decision, CostError> {
        if cost == 0 {
            return self.peek_n(0);
        }
        self.check_cost(cost)?;
        Ok(self.decide(cost))
    }

    fn decide(&self, cost: u64) -> Decision {
        let now = self.clock.now_nanos();
        let decision = self
            .algorithm
            .decide(&self.cell, now, cost)
            .expect("a direct limiter's cell is never retired");
        self.count(decision.allowed, cost);
        decision
    }

    /// What [`check`](DirectLimiter::check) would decide now, recording
    /// nothing: whether it would admit, and when to retry if not, with the
    /// quota as it stands ([`remaining`](Decision::remaining) is what is
    /// left now, not what a check would leave).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::FixedWindow;
    ///
    /// let limiter = FixedWindow::builder()
    ///     .limit(3)
    ///     .window(Duration::from_secs(60))
    ///     .build_direct()?;
    /// assert!(limiter.allow());
    /// let peeked = limiter.peek();
    /// assert!(peeked.is_allowed());
    /// assert_eq!(peeked.remaining(), 2, "two left now");
    /// assert_eq!(limiter.check().remaining(), 1, "and one after a check");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn peek(&self) -> Decision {
        self.peek_cost(1)
    }

    /// What [`check_n`](DirectLimiter::check_n) would decide now,
    /// recording nothing, with the quota as it stands.
    ///
    /// # Errors
    ///
    /// [`CostError`] if `cost` exceeds the capacity or limit.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder().rate(5, Duration::from_secs(1)).build_direct()?;
    /// assert!(limiter.peek_n(5).unwrap().is_allowed());
    /// assert!(limiter.peek_n(6).is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn peek_n(&self, cost: u64) -> Result<Decision, CostError> {
        if cost == 0 {
            // Nothing to admit: allowed, with the quota as it stands.
            let now = self.clock.now_nanos();
            return Ok(self.algorithm.quota(&self.cell, now));
        }
        self.check_cost(cost)?;
        Ok(self.peek_cost(cost))
    }

    fn peek_cost(&self, cost: u64) -> Decision {
        let now = self.clock.now_nanos();
        self.algorithm.peek(&self.cell, now, cost)
    }

    fn check_cost(&self, cost: u64) -> Result<(), CostError> {
        super::within_capacity(&self.algorithm, cost)
    }

    /// Books one request, to proceed as soon as it conforms: see
    /// [`reserve_n`](DirectLimiter::reserve_n).
    ///
    /// # Errors
    ///
    /// As [`reserve_n`](DirectLimiter::reserve_n)'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let upstream = TokenBucket::builder().rate(10, Duration::from_secs(1)).build_direct()?;
    /// let reservation = upstream.reserve(Duration::from_secs(1)).unwrap();
    /// assert_eq!(reservation.wait(), Duration::ZERO);
    /// reservation.commit();
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn reserve(&self, max_wait: Duration) -> Result<Reservation<'_, A, (), C>, ReserveError>
    where
        A: Reservable,
    {
        self.reserve_n(1, max_wait)
    }

    /// Books a request of `cost` units, to proceed as soon as it conforms:
    /// the units are charged now, however long the request must wait, so
    /// callers that wait are served in the order they booked, and the
    /// [`Reservation`] says how long to wait. The same booking as a keyed
    /// limiter's ([`Limiter::reserve_n`](crate::Limiter::reserve_n)), on
    /// the one budget: the same waits, the same algorithms, the same
    /// errors.
    ///
    /// The wait is exact: the request conforms at
    /// [`ready_at`](Reservation::ready_at) and not a nanosecond earlier. A
    /// check made while a booking waits sees the units already taken. A
    /// cost of 0 is ready at once and charges nothing.
    ///
    /// [`commit`](Reservation::commit) the reservation when you proceed;
    /// [`cancel`](Reservation::cancel) it (or drop it) before its time to
    /// give the charge back, which it does iff nothing was charged to the
    /// limiter since (the newest booking goes back; on a
    /// [`SlidingWindowLog`](crate::SlidingWindowLog), each slot it claimed
    /// that no later booking has claimed from it). Nothing ever replaces
    /// a direct limiter's state, so a cancel never fails for that reason.
    ///
    /// The [`TokenBucket`](crate::TokenBucket), the
    /// [`FixedWindow`](crate::FixedWindow), the
    /// [`SlidingWindowLog`](crate::SlidingWindowLog) and pairs of the first
    /// two ([`Both`](crate::Both)) book ahead (they are [`Reservable`]).
    /// The [`SlidingWindowCounter`](crate::SlidingWindowCounter)'s state
    /// has no room for a charge that counts in a later window, so booking
    /// on it does not compile:
    ///
    /// ```compile_fail,E0277
    /// use std::time::Duration;
    /// use tollgate::SlidingWindowCounter;
    ///
    /// let limiter = SlidingWindowCounter::builder()
    ///     .limit(10)
    ///     .window(Duration::from_secs(1))
    ///     .build_direct()?;
    /// let _ = limiter.reserve_n(1, Duration::MAX); // not `Reservable`
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Nothing is charged on an error.
    ///
    /// - [`ReserveError::TooLong`] if the request would have to wait longer
    ///   than `max_wait` (`Duration::ZERO` books only what conforms now;
    ///   `Duration::MAX` waits however long it takes; a `wait` of
    ///   `Duration::MAX` in the error means never);
    /// - [`ReserveError::Cost`] if `cost` exceeds the capacity, since such
    ///   a request could never conform;
    /// - [`ReserveError::Unsupported`] for a fixed window (or a pair
    ///   holding one) whose limit lies in the top half of its range, where
    ///   its state word has no room for the windows a booking closes.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, ReserveError, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let upstream = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .capacity(10)
    ///     .clock(clock.clone())
    ///     .build_direct()?;
    /// upstream.reserve_n(10, Duration::ZERO).unwrap().commit();
    /// // 4 more tokens take 0.4 s to refill: booked, and charged already.
    /// let batch = upstream.reserve_n(4, Duration::from_secs(1)).unwrap();
    /// assert_eq!(batch.wait(), Duration::from_millis(400));
    /// assert!(matches!(
    ///     upstream.reserve(Duration::from_millis(100)),
    ///     Err(ReserveError::TooLong { .. })
    /// ));
    /// assert!(matches!(upstream.reserve_n(11, Duration::MAX), Err(ReserveError::Cost(_))));
    /// // Given back before its time: the next booking waits as if it never was.
    /// assert!(batch.cancel());
    /// assert_eq!(upstream.reserve(Duration::MAX).unwrap().wait(), Duration::from_millis(100));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn reserve_n(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Reservation<'_, A, (), C>, ReserveError>
    where
        A: Reservable,
    {
        let Some(max_wait) = terms(&self.algorithm, cost, max_wait)? else {
            let now = self.clock.now_nanos();
            return Ok(Reservation::new(self, None, now, || ()));
        };
        let now = self.clock.now_nanos();
        // Never `None`: the cell is never retired (see `allow`).
        let booked = book_on(&self.algorithm, &self.cell, now, cost, max_wait)
            .expect("a direct limiter's cell is never retired");
        match &booked {
            Ok(_) => self.count(true, cost),
            Err(ReserveError::TooLong { .. }) => self.count(false, cost),
            // No decision: the algorithm cannot book this.
            Err(_) => {}
        }
        // The stamp is always 0: nothing replaces the state, so a booking
        // may always be cancelled on it by the tail rule.
        let (ticket, wait) = booked?;
        Ok(Reservation::new(self, Some((ticket, wait, 0)), now, || ()))
    }

    /// The algorithm and its validated settings.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder().rate(5, Duration::from_secs(1)).build_direct()?;
    /// println!("{:?}", limiter.algorithm());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The clock the limiter reads.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(1))
    ///     .clock(ManualClock::new())
    ///     .build_direct()?;
    /// assert!(limiter.allow());
    /// assert!(!limiter.allow());
    /// limiter.clock().advance(Duration::from_secs(1));
    /// assert!(limiter.allow());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<A: Algorithm + fmt::Debug, C: fmt::Debug> fmt::Debug for DirectLimiter<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectLimiter")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// The key is ignored: every caller draws on the one budget.
impl<A: Algorithm, K: ?Sized, C: Clock> RateLimiter<K> for DirectLimiter<A, C> {
    #[inline]
    fn allow_request(&self, _client_id: &K) -> bool {
        self.allow()
    }
}

/// A reservation's way back to the one cell: the tail rule on it, with no
/// stamp to test (nothing replaces a direct limiter's state).
impl<A: Algorithm, C: Clock> Booker<()> for DirectLimiter<A, C> {
    fn now_nanos(&self) -> u64 {
        self.clock.now_nanos()
    }

    fn give_back(&self, _client: &(), ticket: &Ticket, _stamp: Stamp) -> bool {
        let now = self.clock.now_nanos();
        // `Some` always: the cell is never retired.
        self.algorithm.unreserve(&self.cell, now, ticket) == Some(true)
    }
}
