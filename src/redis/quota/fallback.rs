//! The in-process limiter of [`FailPolicy::Local`](crate::redis::FailPolicy::Local):
//! one per Redis limiter, holding each client by its bytes, with the same
//! tiers and quotas, so that while Redis is down this process enforces
//! the quota on its own.
//!
//! For the algorithms whose in-process limiters change quotas at run time
//! (the token bucket, the fixed window, the sliding window counter, and a
//! pair of them) it is a tiered in-process limiter, and a quota set on
//! the Redis limiter is set on it too: each client's state is carried
//! over by the in-process rule, as `Limiter::set_quota` carries it. The
//! sliding window log's in-process state has no such conversion: its
//! fallback keeps a limiter per tier, kept as it is when a tier's quota is
//! set to the same settings, and a new one when they change, which holds
//! each client to what every limiter the tier had before still has left
//! for it (at most the new limit), until their windows pass: a quota
//! change never hands a client a fresh budget.

use core::time::Duration;
use std::sync::{Arc, PoisonError, RwLock};

use crate::algorithm::{FromParams, Params, SlidingWindowLog};
use crate::cell::{Algorithm, Packed, Tier, Tiered};
use crate::clock::{unix_nanos, Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::{ConfigError, CostError, ReserveError};
use crate::limiter::{Limiter, TierAlgorithm};
use crate::memory::Memory;

/// The resolver of [`RedisBuilder::tier_by`](crate::redis::RedisBuilder::tier_by).
pub(crate) type Resolver = dyn Fn(&[u8]) -> Tier + Send + Sync;

/// What the Redis limiter asks of its fallback.
#[allow(unreachable_pub)] // named only through a sealed trait's method
pub trait Fallback: Send + Sync {
    /// Decides a request of `cost` from `client` of `tier` (recording it
    /// unless `peek`).
    fn decide(
        &self,
        client: &[u8],
        tier: Tier,
        cost: u64,
        peek: bool,
    ) -> Result<Decision, CostError>;

    /// Books a request of `cost` from `client` (of `tier`), committed at
    /// once: the wait.
    fn reserve(
        &self,
        client: &[u8],
        tier: Tier,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, ReserveError>;

    /// Gives `tier` the quota of `params` (validated already).
    fn set_quota(&self, tier: Tier, params: &Params);

    /// Forgets `client`.
    fn remove(&self, client: &[u8]);

    /// Holds `client` (of `tier`) to at most `units` remaining, this
    /// fallback's share of what Redis last said the fleet has left: its
    /// state here is spent down to that if it holds more, and left as it
    /// is if it holds less (nothing is given back).
    fn hold_to(&self, client: &[u8], tier: Tier, units: u64);
}

/// A decision of `limiter` for `client` (recording it unless `peek`).
fn decide_on<A: Algorithm>(
    limiter: &Limiter<A, Vec<u8>>,
    client: &[u8],
    cost: u64,
    peek: bool,
) -> Result<Decision, CostError> {
    if peek {
        limiter.peek_n(client, cost)
    } else {
        limiter.check_n(client, cost)
    }
}

/// Spends `client`'s state in `limiter` down to `units` remaining, if it
/// holds more.
fn hold_on<A: Algorithm>(limiter: &Limiter<A, Vec<u8>>, client: &[u8], units: u64) {
    let left = limiter.peek_n(client, 0).map_or(0, |d| d.remaining());
    if left > units {
        // The excess is at most the capacity, so the cost is one the
        // limiter takes; spent at once, as a check of that many would be.
        let _ = limiter.check_n(client, left - units);
    }
}

/// A booking by `limiter` for `client`, committed at once: its wait.
fn book_on<A: Algorithm>(
    limiter: &Limiter<A, Vec<u8>>,
    client: &[u8],
    cost: u64,
    max_wait: Duration,
) -> Result<Duration, ReserveError> {
    let booked = limiter.book_n(client, cost, max_wait)?;
    let wait = booked.wait();
    booked.commit();
    Ok(wait)
}

/// What a fallback is made from: tier 0's settings, the memory settings
/// and the resolver of tiers.
#[allow(unreachable_pub)] // named only through a sealed trait's method
pub struct Settings {
    pub(crate) params: Params,
    pub(crate) memory: Memory,
    pub(crate) resolver: Option<Arc<Resolver>>,
}

impl core::fmt::Debug for Settings {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Settings")
            .field("params", &self.params)
            .field("memory", &self.memory)
            .field("tiers", &self.resolver.is_some())
            .finish()
    }
}

/// The resolver as the in-process limiter's: the client's tier from its
/// bytes.
fn tier_by(resolver: Option<&Arc<Resolver>>) -> Option<crate::limiter::TierBy<Vec<u8>>> {
    resolver.map(|resolve| {
        let resolve = Arc::clone(resolve);
        Box::new(move |client: &Vec<u8>| resolve(client)) as crate::limiter::TierBy<Vec<u8>>
    })
}

/// A tiered in-process limiter of `A`, with tier 0 at `params`.
pub(crate) fn tiered<A>(settings: &Settings) -> Result<Box<dyn Fallback>, ConfigError>
where
    A: TierAlgorithm + FromParams + crate::algorithm::Transitions,
    A::Word: Packed,
    Tiered<A>: Algorithm,
{
    let clock = MonotonicClock::new();
    // Windows start on the Unix epoch's multiples, as on Redis.
    let mut params = settings.params.clone();
    params.on_origin(unix_nanos(clock.unix_origin()));
    let algorithm = Tiered::<A>::from_params(&params)?;
    let limiter = Limiter::new(algorithm, clock, settings.memory);
    Ok(Box::new(
        limiter.with_tier_by(tier_by(settings.resolver.as_ref())),
    ))
}

impl<A> Fallback for Limiter<Tiered<A>, Vec<u8>>
where
    A: TierAlgorithm + FromParams + crate::algorithm::Transitions,
    A::Word: Packed,
    Tiered<A>: Algorithm,
{
    fn decide(
        &self,
        client: &[u8],
        _tier: Tier,
        cost: u64,
        peek: bool,
    ) -> Result<Decision, CostError> {
        decide_on(self, client, cost, peek)
    }

    fn reserve(
        &self,
        client: &[u8],
        _tier: Tier,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, ReserveError> {
        book_on(self, client, cost, max_wait)
    }

    fn set_quota(&self, tier: Tier, params: &Params) {
        if let Ok(quota) = A::from_params(params) {
            // The algorithm's own value: nothing left to validate.
            let _ = Limiter::set_quota(self, tier, quota);
        }
    }

    fn remove(&self, client: &[u8]) {
        Limiter::remove(self, client);
    }

    fn hold_to(&self, client: &[u8], _tier: Tier, units: u64) {
        let left = self.peek_n(client, 0).map_or(0, |d| d.remaining());
        // Recorded even where nothing is spent: a client this fallback
        // never decided on would otherwise stay a fresh one, which a
        // quota raised or a move to a larger tier makes full at the new
        // share, where a client held to what Redis said keeps that and
        // the refill since (a move never adds to what a client may take).
        // The excess is at most the capacity, so the cost is one the
        // limiter takes; a cost of 0 records the state as it stands.
        if left >= units {
            let _ = self.record_n(client, left - units);
        }
    }
}

/// A sliding window log's in-process limiter.
type LogLimiter = Arc<Limiter<SlidingWindowLog, Vec<u8>>>;

/// One tier's log: its settings, its in-process limiter, and the limiters
/// it had before, each until its window has passed since it was replaced
/// (ns on the fallback's clock): every entry they hold has expired then.
struct LogTier {
    log: SlidingWindowLog,
    limiter: LogLimiter,
    before: Vec<(LogLimiter, u64)>,
}

/// The sliding window log's fallback: a limiter per tier.
pub(crate) struct LogFallback {
    // A lock, on the fallback path only (Redis already failed this check,
    // after a timeout or a refused connection): read to find a tier's
    // limiter, written only when `set_quota` adds or changes a tier. No
    // in-process limiter's check takes it.
    tiers: RwLock<Vec<Option<LogTier>>>,
    memory: Memory,
    resolver: Option<Arc<Resolver>>,
    /// When a tier's earlier limiters stop holding its clients.
    clock: MonotonicClock,
}

impl LogFallback {
    pub(crate) fn boxed(settings: &Settings) -> Result<Box<dyn Fallback>, ConfigError> {
        let log = SlidingWindowLog::from_params(&settings.params)?;
        let limiter = Arc::new(Limiter::new(log, MonotonicClock::new(), settings.memory));
        Ok(Box::new(Self {
            tiers: RwLock::new(vec![Some(LogTier {
                log,
                limiter,
                before: Vec::new(),
            })]),
            memory: settings.memory,
            resolver: settings.resolver.clone(),
            clock: MonotonicClock::new(),
        }))
    }

    /// The limiter of `client`'s tier (`tier` without a resolver), the
    /// client held first to what each limiter the tier had before still
    /// has left for it.
    fn limiter(&self, client: &[u8], tier: Tier) -> LogLimiter {
        let tier = self
            .resolver
            .as_ref()
            .map_or(tier, |resolve| resolve(client));
        // A writer that panicked left the table whole (it swaps one slot).
        let table = self.tiers.read().unwrap_or_else(PoisonError::into_inner);
        let own = table.get(usize::from(tier)).and_then(Option::as_ref);
        let now = self.clock.now_nanos();
        let tier = own.or(table[0].as_ref()).expect("tier 0 is always set");
        for (before, until) in &tier.before {
            if now < *until {
                // A client with nothing in its window there (one it never
                // saw, or whose entries expired) is not held by it.
                if let Ok(d) = before.peek_n(client, 0) {
                    if d.remaining() < d.limit() {
                        hold_on(&tier.limiter, client, d.remaining());
                    }
                }
            }
        }
        Arc::clone(&tier.limiter)
    }
}

impl Fallback for LogFallback {
    fn decide(
        &self,
        client: &[u8],
        tier: Tier,
        cost: u64,
        peek: bool,
    ) -> Result<Decision, CostError> {
        decide_on(&self.limiter(client, tier), client, cost, peek)
    }

    fn reserve(
        &self,
        client: &[u8],
        tier: Tier,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, ReserveError> {
        book_on(&self.limiter(client, tier), client, cost, max_wait)
    }

    fn set_quota(&self, tier: Tier, params: &Params) {
        let Ok(log) = SlidingWindowLog::from_params(params) else {
            return;
        };
        let mut table = self.tiers.write().unwrap_or_else(PoisonError::into_inner);
        let slot = usize::from(tier);
        if table.len() <= slot {
            table.resize_with(slot + 1, || None);
        }
        if table[slot].as_ref().is_some_and(|t| t.log == log) {
            return;
        }
        let limiter = Arc::new(Limiter::new(log, MonotonicClock::new(), self.memory));
        let now = self.clock.now_nanos();
        // The limiters this tier had (or, for a tier set the first time,
        // tier 0's, which held its clients until now) keep holding its
        // clients until their windows have passed.
        let mut before = Vec::new();
        let old = table[slot].take().or_else(|| {
            table[0].as_ref().map(|t| LogTier {
                log: t.log,
                limiter: Arc::clone(&t.limiter),
                before: t.before.clone(),
            })
        });
        if let Some(old) = old {
            before = old.before;
            before.push((old.limiter, now.saturating_add(old.log.window())));
            before.retain(|(_, until)| now < *until);
        }
        table[slot] = Some(LogTier {
            log,
            limiter,
            before,
        });
    }

    fn remove(&self, client: &[u8]) {
        let table = self.tiers.read().unwrap_or_else(PoisonError::into_inner);
        for tier in table.iter().flatten() {
            tier.limiter.remove(client);
            for (before, _) in &tier.before {
                before.remove(client);
            }
        }
    }

    fn hold_to(&self, client: &[u8], tier: Tier, units: u64) {
        hold_on(&self.limiter(client, tier), client, units);
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::algorithm::FixedWindow;

    const HOUR: Duration = Duration::from_secs(3600);

    /// A limit of `limit` an hour.
    fn hourly(limit: u64) -> Params {
        Params {
            limit: Some(limit),
            window: Some(HOUR),
            ..Params::default()
        }
    }

    /// Both kinds of fallback for `settings`: the fixed window's (a tiered
    /// in-process limiter) and the sliding window log's (a limiter per
    /// tier). What each test asserts holds of both.
    fn both(settings: &Settings) -> [(&'static str, Box<dyn Fallback>); 2] {
        [
            ("fixed window", tiered::<FixedWindow>(settings).unwrap()),
            ("log", LogFallback::boxed(settings).unwrap()),
        ]
    }

    fn of(limit: u64) -> Settings {
        Settings {
            params: hourly(limit),
            memory: Memory::default(),
            resolver: None,
        }
    }

    fn left(fallback: &dyn Fallback, client: &[u8]) -> u64 {
        fallback.decide(client, 0, 0, true).unwrap().remaining()
    }

    /// Held to what Redis said is left: spent down to it if it holds more,
    /// left as it is if it holds less, and a client it never decided on
    /// held as well.
    #[test]
    fn a_fallback_is_held_to_what_redis_said_and_gives_nothing_back() {
        for (name, fallback) in both(&of(5)) {
            let fallback = &*fallback;
            assert!(fallback.decide(b"c", 0, 1, false).unwrap().is_allowed());
            assert_eq!(left(fallback, b"c"), 4, "{name}");
            fallback.hold_to(b"c", 0, 2);
            assert_eq!(left(fallback, b"c"), 2, "{name}: spent down to it");
            fallback.hold_to(b"c", 0, 3);
            assert_eq!(left(fallback, b"c"), 2, "{name}: nothing given back");
            fallback.hold_to(b"c", 0, 0);
            assert!(
                fallback.decide(b"c", 0, 1, false).unwrap().is_denied(),
                "{name}"
            );
            fallback.hold_to(b"never", 0, 1);
            assert_eq!(left(fallback, b"never"), 1, "{name}: never decided on");
        }
    }

    /// A booking the fallback takes is committed at once: its units are
    /// spent, and a booking beyond what is left waits for them.
    #[test]
    fn a_fallback_s_booking_spends_its_units_and_tells_its_wait() {
        for (name, fallback) in both(&of(5)) {
            let fallback = &*fallback;
            assert_eq!(
                fallback.reserve(b"c", 0, 3, HOUR),
                Ok(Duration::ZERO),
                "{name}"
            );
            assert_eq!(left(fallback, b"c"), 2, "{name}: booked units spent");
            let wait = fallback.reserve(b"c", 0, 3, 2 * HOUR).unwrap();
            assert!(wait > Duration::ZERO && wait <= HOUR, "{name}: {wait:?}");
            assert_eq!(left(fallback, b"c"), 0, "{name}");
        }
    }

    /// A quota change holds each client to what it had left (the log: its
    /// new limiter holds each client to what the one before still has left
    /// for it); a client with nothing spent gets the new limit. `remove`
    /// forgets a client.
    #[test]
    fn a_fallback_s_new_quota_keeps_what_each_client_had_left() {
        for (name, fallback) in both(&of(5)) {
            let fallback = &*fallback;
            for _ in 0..3 {
                assert!(fallback.decide(b"c", 0, 1, false).unwrap().is_allowed());
            }
            fallback.set_quota(0, &hourly(10));
            assert_eq!(left(fallback, b"c"), 2, "{name}: what it had left");
            assert_eq!(left(fallback, b"other"), 10, "{name}: the new limit");
            fallback.set_quota(0, &hourly(3));
            assert_eq!(left(fallback, b"c"), 2, "{name}: what it had left");
            fallback.remove(b"c");
            assert_eq!(left(fallback, b"c"), 3, "{name}: forgotten, fresh");
        }
    }

    /// A quota set for a tier the log's fallback had not seen gives it a
    /// limiter of its own, which holds the tier's clients to what tier 0's
    /// still has left for them (they were held there until then); the
    /// resolver names each client's tier.
    #[test]
    fn a_log_fallback_s_new_tier_holds_its_clients_to_what_tier_0_left() {
        let resolver: Arc<Resolver> =
            Arc::new(|client: &[u8]| u16::from(client.starts_with(b"big")));
        let settings = Settings {
            params: hourly(5),
            memory: Memory::default(),
            resolver: Some(resolver),
        };
        let fallback = LogFallback::boxed(&settings).unwrap();
        for _ in 0..2 {
            assert!(fallback.decide(b"big-1", 0, 1, false).unwrap().is_allowed());
        }
        // Tier 2 first: the table grows past the tier set after it.
        fallback.set_quota(2, &hourly(7));
        fallback.set_quota(1, &hourly(9));
        assert_eq!(left(&*fallback, b"big-1"), 3, "held to tier 0's 3 left");
        assert_eq!(left(&*fallback, b"big-2"), 9);
        assert_eq!(left(&*fallback, b"small"), 5);
    }

    /// The resolver names each client's tier, whatever tier the caller
    /// passes: the in-process limiter holds it to that tier's quota.
    #[test]
    fn a_tiered_fallback_asks_the_resolver_for_the_client_s_tier() {
        let mut params = hourly(5);
        params.tiers = vec![(1, hourly(9))];
        let resolver: Arc<Resolver> = Arc::new(|client: &[u8]| u16::from(client == b"big"));
        let settings = Settings {
            params,
            memory: Memory::default(),
            resolver: Some(resolver),
        };
        let fallback = tiered::<FixedWindow>(&settings).unwrap();
        assert_eq!(left(&*fallback, b"big"), 9);
        assert_eq!(left(&*fallback, b"small"), 5);
    }
}
