//! Two limits held together in Redis: [`Both`] of two word algorithms (a
//! limiter built with [`Builder::and`](crate::Builder::and) or
//! [`and_rate`](crate::Builder::and_rate), then
//! [`redis`](crate::Builder::redis)).
//!
//! A client's two states are two keys under its one hash tag
//! (`{prefix}:{tag1}+{tag2}:{client}.1` and `….2`), so one script reads
//! and writes both atomically, on one node of a cluster. The script runs
//! each limit's own function without recording; only if both admit does it
//! run them again, recording; on a denial it reads both states as they
//! stand. The figures are then the in-process pair's own: the two states
//! become the pair's 128-bit word, described by [`Both`]'s transitions.

use super::script::Spec;
use super::{sealed, RedisAlgorithm};
use crate::algorithm::{
    Both, FixedWindow, Reserve, SlidingWindowCounter, TokenBucket, WordAlgorithm,
};
use crate::cell::Algorithm;
use crate::error::ConfigError;

/// One limit of a pair, as the in-process algorithm that computes its
/// figures: a word algorithm chosen at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(unreachable_pub)] // named only through a sealed trait's method
pub enum WordSpec {
    /// A token bucket, its interval in whole µs.
    Bucket(TokenBucket),
    /// A fixed window.
    Fixed(FixedWindow),
    /// A sliding window counter.
    Sliding(SlidingWindowCounter),
}

macro_rules! delegate {
    ($self:ident, $a:ident => $e:expr) => {
        match $self {
            WordSpec::Bucket($a) => $e,
            WordSpec::Fixed($a) => $e,
            WordSpec::Sliding($a) => $e,
        }
    };
}

impl WordAlgorithm for WordSpec {
    fn capacity(&self) -> u64 {
        delegate!(self, a => WordAlgorithm::capacity(a))
    }
    fn fresh_at(&self, floor: u64) -> u64 {
        delegate!(self, a => WordAlgorithm::fresh_at(a, floor))
    }
    fn admit(&self, word: u64, now: u64, cost: u64) -> Option<u64> {
        delegate!(self, a => WordAlgorithm::admit(a, word, now, cost))
    }
    fn remaining(&self, word: u64, now: u64) -> u64 {
        delegate!(self, a => WordAlgorithm::remaining(a, word, now))
    }
    fn retry_after(&self, word: u64, now: u64, cost: u64) -> u64 {
        delegate!(self, a => WordAlgorithm::retry_after(a, word, now, cost))
    }
    fn is_idle(&self, word: u64, now: u64) -> bool {
        delegate!(self, a => WordAlgorithm::is_idle(a, word, now))
    }
    fn idle_at(&self, word: u64) -> u64 {
        delegate!(self, a => WordAlgorithm::idle_at(a, word))
    }
    fn horizon(&self) -> u64 {
        delegate!(self, a => WordAlgorithm::horizon(a))
    }
    fn window(&self) -> u64 {
        delegate!(self, a => WordAlgorithm::window(a))
    }
    fn convert(&self, word: u64, now: u64, to: &Self) -> u64 {
        match (self, to) {
            (Self::Bucket(a), Self::Bucket(b)) => WordAlgorithm::convert(a, word, now, b),
            (Self::Fixed(a), Self::Fixed(b)) => WordAlgorithm::convert(a, word, now, b),
            (Self::Sliding(a), Self::Sliding(b)) => WordAlgorithm::convert(a, word, now, b),
            // A pair's limits keep their algorithms: never asked.
            _ => to.fresh_at(now),
        }
    }
    fn reserves(&self) -> bool {
        delegate!(self, a => WordAlgorithm::reserves(a))
    }
    fn reserve(&self, word: u64, now: u64, cost: u64) -> Reserve {
        delegate!(self, a => WordAlgorithm::reserve(a, word, now, cost))
    }
    fn book_at(&self, word: u64, now: u64, at: u64, cost: u64) -> u64 {
        delegate!(self, a => WordAlgorithm::book_at(a, word, now, at, cost))
    }
}

impl WordSpec {
    /// The limit's algorithm from a single limit's spec (a log cannot be
    /// half of a pair).
    pub(crate) fn of(spec: &Spec) -> Option<(Self, [u64; 2])> {
        let word = match *spec {
            Spec::Bucket { ns, .. } => Self::Bucket(ns),
            Spec::Fixed { ns, .. } => Self::Fixed(ns),
            Spec::Sliding { ns, .. } => Self::Sliding(ns),
            Spec::Log { .. } | Spec::Pair { .. } => return None,
        };
        Some((word, spec.args()))
    }

    /// The single limit's spec back.
    pub(crate) fn spec(self, args: [u64; 2]) -> Spec {
        let [a, b] = args;
        match self {
            Self::Bucket(ns) => Spec::Bucket {
                ns,
                interval_us: a,
                capacity: b,
            },
            Self::Fixed(ns) => Spec::Fixed {
                ns,
                window_us: a,
                limit: b,
            },
            Self::Sliding(ns) => Spec::Sliding {
                ns,
                window_us: a,
                limit: b,
            },
        }
    }
}

/// The entry point of a pair's script, after both limits' functions
/// (`decide1`, `decide2`). `WRITE` is replaced by `true` for a check and
/// `false` for a peek.
const PAIR: &str = r"
local k1, k2 = KEYS[1], KEYS[2]
local a1, b1 = tonumber(ARGV[1]), tonumber(ARGV[2])
local a2, b2, cost = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local r1 = decide1(k1, a1, b1, cost, false)
if r1.err then return r1 end
local r2 = decide2(k2, a2, b2, cost, false)
if r2.err then return r2 end
local ok = r1[1] == 1 and r2[1] == 1
if not ok then
  r1 = decide1(k1, a1, b1, 0, false)
  r2 = decide2(k2, a2, b2, 0, false)
elseif WRITE and cost > 0 then
  r1 = decide1(k1, a1, b1, cost, true)
  r2 = decide2(k2, a2, b2, cost, true)
end
local out = {ok and 1 or 0}
for i = 2, #r1 do out[#out + 1] = r1[i] end
for i = 2, #r2 do out[#out + 1] = r2[i] end
return out
";

/// A pair's script: the prelude and clock, both limits' functions, and
/// the entry point.
pub(crate) fn source(prelude_and_clock: &str, bodies: [&str; 2], write: bool) -> String {
    let rename = |body: &str, n: u8| {
        body.replace(
            "local function decide(",
            &format!("local function decide{n}("),
        )
    };
    format!(
        "{prelude_and_clock}{}{}{}",
        rename(bodies[0], 1),
        rename(bodies[1], 2),
        PAIR.replace("WRITE", if write { "true" } else { "false" })
    )
}

impl<A, B> sealed::Sealed for Both<A, B>
where
    A: RedisAlgorithm + WordAlgorithm,
    B: RedisAlgorithm + WordAlgorithm,
{
    fn spec(&self) -> Result<Spec, ConfigError> {
        Spec::pair(&self.first().spec()?, &self.second().spec()?)
    }
}

/// Two limits held together in Redis: any two of the token bucket, the
/// fixed window and the sliding window counter.
impl<A, B> RedisAlgorithm for Both<A, B>
where
    A: RedisAlgorithm + WordAlgorithm,
    B: RedisAlgorithm + WordAlgorithm,
    Self: Algorithm,
{
}
