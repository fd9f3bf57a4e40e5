//! Two limits held together in Redis: [`Both`] of two word algorithms (a
//! limiter built with [`Builder::and`](crate::Builder::and) or
//! [`and_rate`](crate::Builder::and_rate), then
//! [`redis`](crate::Builder::redis)).
//!
//! A client's two states are two sets of fields of its one key
//! (`<prefix>:{<client>}:<tag1>+<tag2>`, the first limit's fields numbered
//! 1, the second's 2), so one script reads and writes both atomically, on
//! one node of a cluster. The script decides each limit without
//! recording, and records both only if both admit; a denial charges
//! neither. The figures are then the in-process pair's own: the two
//! states become the pair's 128-bit word, described by [`Both`]'s
//! transitions.

use super::algorithm::{sealed, RedisAlgorithm};
use super::fallback::{self, Fallback};
use crate::algorithm::{Both, FromParams, Transitions, WordAlgorithm};
use crate::cell::{Algorithm, Tiered};
use crate::error::ConfigError;
use crate::limiter::TierAlgorithm;
use crate::redis::script::spec::Spec;

impl<A, B> sealed::Sealed for Both<A, B>
where
    A: RedisAlgorithm + WordAlgorithm,
    B: RedisAlgorithm + WordAlgorithm,
    Self: TierAlgorithm + FromParams + Transitions<Word = u128>,
    Tiered<Self>: Algorithm,
{
    fn spec(&self) -> Result<Spec, ConfigError> {
        Spec::pair(&self.first().spec()?, &self.second().spec()?)
    }

    fn fallback(settings: &fallback::Settings) -> Result<Box<dyn Fallback>, ConfigError> {
        fallback::tiered::<Self>(settings)
    }
}

/// Two limits held together in Redis: any two of the token bucket, the
/// fixed window and the sliding window counter.
impl<A, B> RedisAlgorithm for Both<A, B>
where
    A: RedisAlgorithm + WordAlgorithm,
    B: RedisAlgorithm + WordAlgorithm,
    Self: Algorithm + TierAlgorithm + FromParams + Transitions<Word = u128>,
    Tiered<Self>: Algorithm,
{
}
