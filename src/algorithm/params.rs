//! The settings a builder collects, and how each algorithm validates them
//! into itself. Part of the algorithm layer, so that the layers above (the
//! cell's `Algorithm` trait, the builder) depend on it and not the reverse.

use core::time::Duration;

use super::WordAlgorithm;
use super::{Both, FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};
use crate::error::ConfigError;

/// Every setting any algorithm takes; each algorithm reads its own.
#[derive(Debug, Clone, Default)]
pub struct Params {
    pub(crate) rate: Option<(u64, Duration)>,
    pub(crate) capacity: Option<u64>,
    pub(crate) limit: Option<u64>,
    pub(crate) window: Option<Duration>,
    /// The second limit's settings, for [`Both`].
    pub(crate) second: Option<Box<Params>>,
    /// The Unix time (ns) at which the limiter's clock reads 0: the fixed
    /// window's and the sliding window counter's windows start on whole
    /// multiples of their length in Unix time (see
    /// [`Clock::unix_origin`](crate::Clock::unix_origin)).
    pub(crate) origin: u64,
    /// Further tiers' settings, for [`Tiered`](crate::Tiered): tier 0 is
    /// these settings themselves.
    pub(crate) tiers: Vec<(u16, Params)>,
}

impl Params {
    fn required<T>(value: Option<T>, field: &'static str) -> Result<T, ConfigError> {
        value.ok_or(ConfigError::Missing { field })
    }

    /// One of `replicas` equal shares of these settings, every limit's and
    /// every tier's: a bucket refills `replicas` times slower and holds a
    /// `replicas`-th of its capacity, a window admits a `replicas`-th of its
    /// limit (each at least 1), so that `replicas` limiters of the share
    /// admit together no more than one of these settings would, but for
    /// those rounded up to 1. An error where the slower refill period does
    /// not fit a `Duration`.
    #[cfg(feature = "redis")]
    pub(crate) fn share(&self, replicas: u32) -> Result<Self, ConfigError> {
        let n = u64::from(replicas);
        let mut shared = self.clone();
        if let Some((tokens, per)) = self.rate {
            let slower = per.checked_mul(replicas).ok_or(ConfigError::OutOfRange {
                field: "local_share",
                value: u128::from(replicas),
                min: 1,
                max: (Duration::MAX.as_nanos() / per.as_nanos().max(1)).min(u128::from(u32::MAX)),
                unit: "replicas",
                reason: "each replica's bucket refills that many times slower, in a period that must fit a Duration",
            })?;
            shared.rate = Some((tokens, slower));
            // A bucket holds one period's worth of tokens unless told
            // otherwise: a share holds a share of that.
            shared.capacity = Some((self.capacity.unwrap_or(tokens) / n).max(1));
        }
        shared.limit = self.limit.map(|limit| (limit / n).max(1));
        if let Some(second) = &self.second {
            shared.second = Some(Box::new(second.share(replicas)?));
        }
        shared.tiers = self
            .tiers
            .iter()
            .map(|(tier, params)| Ok((*tier, params.share(replicas)?)))
            .collect::<Result<_, ConfigError>>()?;
        Ok(shared)
    }

    /// These settings for a clock that reads 0 at the Unix time `origin`
    /// (ns): every limit's and every tier's.
    pub(crate) fn on_origin(&mut self, origin: u64) {
        self.origin = origin;
        if let Some(second) = self.second.as_mut() {
            second.on_origin(origin);
        }
        for (_, tier) in &mut self.tiers {
            tier.on_origin(origin);
        }
    }
}

mod sealed {
    /// How an algorithm validates the settings a
    /// [`Builder`](crate::Builder) collected. Sealed, like
    /// [`Algorithm`](crate::Algorithm).
    pub trait FromParams: Sized {
        fn from_params(params: &super::Params) -> Result<Self, crate::ConfigError>;

        /// The quota the settings grant, back out of the algorithm:
        /// `(limit, window in ns)`. For the token bucket, its capacity and
        /// the time to refill it from empty.
        fn granted(&self) -> (u64, u64);
    }
}
pub(crate) use sealed::FromParams;

impl FromParams for TokenBucket {
    fn from_params(p: &Params) -> Result<Self, ConfigError> {
        let (tokens, per) = Params::required(p.rate, "rate")?;
        // A bucket holds one period's worth of tokens unless told otherwise.
        TokenBucket::new(tokens, per, p.capacity.unwrap_or(tokens))
    }

    fn granted(&self) -> (u64, u64) {
        // capacity · interval: the refill time of a full bucket.
        (self.capacity(), self.horizon())
    }
}

impl FromParams for SlidingWindowCounter {
    fn from_params(p: &Params) -> Result<Self, ConfigError> {
        let limit = Params::required(p.limit, "limit")?;
        let mut counter = SlidingWindowCounter::new(limit, Params::required(p.window, "window")?)?;
        counter.align(p.origin);
        Ok(counter)
    }

    fn granted(&self) -> (u64, u64) {
        (self.capacity(), self.window_ns())
    }
}

impl FromParams for FixedWindow {
    fn from_params(p: &Params) -> Result<Self, ConfigError> {
        let limit = Params::required(p.limit, "limit")?;
        let mut window = FixedWindow::new(limit, Params::required(p.window, "window")?)?;
        window.align(p.origin);
        Ok(window)
    }

    fn granted(&self) -> (u64, u64) {
        (self.capacity(), self.window_ns())
    }
}

impl FromParams for SlidingWindowLog {
    fn from_params(p: &Params) -> Result<Self, ConfigError> {
        let limit = Params::required(p.limit, "limit")?;
        SlidingWindowLog::new(limit, Params::required(p.window, "window")?)
    }

    fn granted(&self) -> (u64, u64) {
        (self.limit(), self.window())
    }
}

impl<A, B> FromParams for Both<A, B>
where
    A: WordAlgorithm + FromParams,
    B: WordAlgorithm + FromParams,
{
    fn from_params(p: &Params) -> Result<Self, ConfigError> {
        let first = A::from_params(p)?;
        let second = Params::required(p.second.as_deref(), "and")?;
        let second = B::from_params(second).map_err(ConfigError::in_second)?;
        Ok(Both::new(first, second))
    }

    fn granted(&self) -> (u64, u64) {
        // The limit that binds a fresh client: the smaller capacity.
        let (a, b) = (self.first().granted(), self.second().granted());
        if b.0 < a.0 {
            b
        } else {
            a
        }
    }
}
