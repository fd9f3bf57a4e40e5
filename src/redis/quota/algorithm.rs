//! How each of tollgate's algorithms runs in Redis: [`RedisAlgorithm`]
//! (sealed) gives its scripts' settings and its in-process fallback.

use super::fallback;
use crate::algorithm::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};
use crate::cell::Algorithm;
use crate::error::ConfigError;
use crate::redis::script::spec::Spec;

pub(crate) mod sealed {
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

/// An algorithm that a [`RedisLimiter`](crate::redis::RedisLimiter) can
/// run: all four of tollgate's, and two of the token bucket, the fixed
/// window and the sliding window counter held together.
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
