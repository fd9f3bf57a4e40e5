//! The four algorithms as Lua scripts run inside Redis, and the decoding of
//! their replies into [`Decision`]s with the in-process algorithms' own
//! integer code.
//!
//! # Units and exactness
//!
//! Lua numbers are doubles, exact for integers up to 2<sup>53</sup>. Every
//! script counts time in whole microseconds since the Unix epoch, read with
//! `TIME` inside the script (about 1.8 · 10<sup>15</sup> µs today, below
//! 2<sup>52</sup> until the year 2112), and [`spec`] keeps every stored
//! value and every product a script forms below 2<sup>53</sup>: windows and
//! refill times of at most 2<sup>52</sup> µs, and for the sliding window
//! counter `limit · window ≤ 2^53 − 1`. Integers cross the wire as
//! integer replies (exact) and are written with `%.0f` (exact digits).
//!
//! Each script decides admission only. It returns the state it leaves (or,
//! on a denial, the state it read, after any window rollover) and the
//! instant it judged at; the figures of the [`Decision`] (remaining,
//! retry-after, replenish-after) are then computed here by the very code
//! the in-process limiters run, on the state scaled to nanoseconds
//! (`× 1 000`, exact), and rounded up to whole microseconds, the instants
//! at which a script can next run.

use core::time::Duration;

use crate::algorithm::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};
use crate::cell::{describe, Applied};
use crate::decision::Decision;
use crate::error::ConfigError;

/// The largest integer a double holds exactly, and so the largest value a
/// script may store or form: 2<sup>53</sup> − 1.
const EXACT_MAX: u64 = (1 << 53) - 1;

/// The longest window or refill time, in µs: 2<sup>52</sup> (142 years),
/// so that `now + window` stays below 2<sup>53</sup> until 2112.
const SPAN_MAX_US: u64 = 1 << 52;

/// The helpers every script starts with: the reading, an integer parser
/// that tells absent from junk, exact floor division, and the error reply.
const PRELUDE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function int(v)
  if not v then return nil end
  local n = tonumber(v)
  if n == nil or n ~= n or n < 0 or n > 9007199254740991 or n ~= math.floor(n) then
    return false
  end
  return n
end
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function s(n) return string.format('%.0f', n) end
local function bad(what)
  return redis.error_reply('TOLLGATE the value under ' .. KEYS[1] .. ' is not a tollgate state: ' .. what)
end
";

/// GCRA on one string key holding the TAT. ARGV: interval (µs), capacity,
/// cost. Reply: allowed, TAT (stored, or as read), now.
const TOKEN_BUCKET: &str = r"
local interval, cap, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = int(redis.call('GET', KEYS[1]))
if tat == false then return bad('not a whole number of microseconds') end
if tat == nil then tat = 0 end
if cost == 0 then return {1, tat, now} end
local base = math.max(tat, now)
if base - now <= (cap - cost) * interval then
  local new = base + cost * interval
  redis.call('SET', KEYS[1], s(new), 'PXAT', s(fdiv(new + 999, 1000)))
  return {1, new, now}
end
return {0, tat, now}
";

/// A hash of the window index `k` and its count `c`. ARGV: window (µs),
/// limit, cost. Reply: allowed, k, c (after rollover), now.
const FIXED_WINDOW: &str = r"
local w, limit, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 'k', 'c')
local k, c = int(v[1]), int(v[2])
if k == false or c == false or (k == nil) ~= (c == nil) then return bad('fields k and c must be whole numbers') end
if c ~= nil and c > limit then return bad('a count above the limit') end
local idx = fdiv(now, w)
if k == nil or idx > k then k, c = idx, 0 end
if cost == 0 then return {1, k, c, now} end
if c + cost <= limit then
  c = c + cost
  redis.call('HSET', KEYS[1], 'k', s(k), 'c', s(c))
  redis.call('PEXPIREAT', KEYS[1], s(fdiv((k + 1) * w + 999, 1000)))
  return {1, k, c, now}
end
return {0, k, c, now}
";

/// A hash of the window index `k`, its count `c` and the previous
/// window's `p`. ARGV: window (µs), limit, cost. Reply: allowed, k, c, p
/// (after rollover), now.
const SLIDING_WINDOW: &str = r"
local w, limit, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 'k', 'c', 'p')
local k, c, p = int(v[1]), int(v[2]), int(v[3])
if k == false or c == false or p == false or (k == nil) ~= (c == nil) or (k == nil) ~= (p == nil) then
  return bad('fields k, c and p must be whole numbers')
end
if c ~= nil and (c > limit or p > limit) then return bad('a count above the limit') end
local idx = fdiv(now, w)
local e = 0
if k == nil then k, c, p = idx, 0, 0 end
if idx >= k then
  if idx == k + 1 then p, c = c, 0 elseif idx > k + 1 then p, c = 0, 0 end
  k = idx
  e = now - idx * w
end
if cost == 0 then return {1, k, c, p, now} end
local need = c + cost - 1
if need < limit and need * w < limit * w - p * (w - e) then
  c = c + cost
  redis.call('HSET', KEYS[1], 'k', s(k), 'c', s(c), 'p', s(p))
  redis.call('PEXPIREAT', KEYS[1], s(fdiv((k + 2) * w + 999, 1000)))
  return {1, k, c, p, now}
end
return {0, k, c, p, now}
";

/// A sorted set of admissions scored by their instant, trimmed to the
/// window. ARGV: window (µs), limit, cost. Reply: allowed, entries after
/// the decision, the oldest entry's instant (or -1), the instant of the
/// entry whose expiry frees room for a denied cost (or -1), now.
const SLIDING_LOG: &str = r"
local w, limit, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', s(now - w))
local used = redis.call('ZCARD', KEYS[1])
if used > limit then return bad('more entries than the limit') end
local function score(i)
  local r = redis.call('ZRANGE', KEYS[1], i, i, 'WITHSCORES')
  local n = int(r[2])
  if n == false or n == nil then return false end
  return n
end
if used > 0 and score(-1) == false then
  return bad('a score that is not a whole number of microseconds')
end
local allowed, kth = 0, -1
if cost == 0 or used + cost <= limit then
  allowed = 1
  if cost > 0 then
    local args = {}
    for i = 1, cost do
      args[#args + 1] = s(now)
      args[#args + 1] = s(now) .. ':' .. s(used + i)
    end
    redis.call('ZADD', KEYS[1], unpack(args))
    used = used + cost
    redis.call('PEXPIREAT', KEYS[1], s(fdiv(now + w + 999, 1000)))
  end
else
  kth = score(cost - (limit - used) - 1)
  if kth == false then return bad('a score that is not a whole number of microseconds') end
end
local oldest = -1
if used > 0 then
  oldest = score(0)
  if oldest == false then return bad('a score that is not a whole number of microseconds') end
end
return {allowed, used, oldest, kth, now}
";

/// One algorithm as a Redis limiter runs it: its script's arguments and
/// the in-process algorithm, in nanoseconds, that computes the figures.
#[derive(Debug, Clone, Copy)]
#[allow(unreachable_pub)] // named only through a sealed trait's method
pub enum Spec {
    /// GCRA; `ns` has the interval `interval_us · 1 000` ns.
    Bucket {
        ns: TokenBucket,
        interval_us: u64,
        capacity: u64,
    },
    /// The fixed window.
    Fixed {
        ns: FixedWindow,
        window_us: u64,
        limit: u64,
    },
    /// The sliding window counter.
    Sliding {
        ns: SlidingWindowCounter,
        window_us: u64,
        limit: u64,
    },
    /// The sliding window log.
    Log { window_us: u64, limit: u64 },
}

/// Why a reply could not become a decision.
#[derive(Debug)]
pub(crate) enum DecodeError {
    /// Not the number of integers the script returns.
    Shape(usize),
    /// A value out of the range the limiter writes.
    Range(&'static str),
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Shape(n) => write!(
                f,
                "the script's reply has {n} integers, not the expected number"
            ),
            Self::Range(what) => write!(f, "the state read from Redis holds {what}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A window as whole microseconds within the scripts' range.
fn window_us(window: Duration, field: &'static str) -> Result<u64, ConfigError> {
    let ns = window.as_nanos();
    let in_us = ns.div_ceil(1_000);
    ConfigError::check_range(
        field,
        in_us,
        (1, u128::from(SPAN_MAX_US)),
        "µs",
        "a Redis limiter's scripts count whole microseconds in doubles, exact below 2^53",
    )?;
    if !ns.is_multiple_of(1_000) {
        return Err(ConfigError::OutOfRange {
            field,
            value: ns,
            min: 1_000,
            max: u128::from(SPAN_MAX_US) * 1_000,
            unit: "ns",
            reason: "a Redis limiter counts time in whole microseconds, so its window must be one",
        });
    }
    // At most 2^52, checked above.
    Ok(in_us as u64)
}

impl Spec {
    pub(crate) fn bucket(ns_bucket: &TokenBucket) -> Result<Self, ConfigError> {
        use crate::algorithm::WordAlgorithm;
        let interval_us = ns_bucket.interval().div_ceil(1_000);
        let capacity = ns_bucket.capacity();
        ConfigError::check_range(
            "capacity",
            u128::from(capacity),
            (1, u128::from(SPAN_MAX_US / interval_us)),
            "tokens",
            "in Redis a full bucket's refill time, capacity × (per / tokens) in whole µs, must be at most 2^52 µs",
        )?;
        // interval_us · 1 000 · capacity ≤ 2^52 · 1 000 < 2^63 − 4: valid.
        let ns = TokenBucket::new(1, Duration::from_micros(interval_us), capacity)?;
        Ok(Self::Bucket {
            ns,
            interval_us,
            capacity,
        })
    }

    pub(crate) fn fixed(ns: &FixedWindow) -> Result<Self, ConfigError> {
        use crate::algorithm::WordAlgorithm;
        Ok(Self::Fixed {
            ns: *ns,
            window_us: window_us(Duration::from_nanos(ns.window_ns()), "window")?,
            limit: ns.capacity(),
        })
    }

    pub(crate) fn sliding(ns: &SlidingWindowCounter) -> Result<Self, ConfigError> {
        use crate::algorithm::WordAlgorithm;
        let window_us = window_us(Duration::from_nanos(ns.window_ns()), "window")?;
        let limit = ns.capacity();
        ConfigError::check_range(
            "limit",
            u128::from(limit),
            (1, u128::from(EXACT_MAX / window_us)),
            "requests",
            "in Redis the weighted estimate forms limit × window (µs), which must stay below 2^53",
        )?;
        Ok(Self::Sliding {
            ns: *ns,
            window_us,
            limit,
        })
    }

    pub(crate) fn log(ns: &SlidingWindowLog) -> Result<Self, ConfigError> {
        Ok(Self::Log {
            window_us: window_us(Duration::from_nanos(ns.window()), "window")?,
            limit: ns.limit(),
        })
    }

    /// The script's source, after the prelude.
    pub(crate) fn source(&self) -> String {
        let body = match self {
            Self::Bucket { .. } => TOKEN_BUCKET,
            Self::Fixed { .. } => FIXED_WINDOW,
            Self::Sliding { .. } => SLIDING_WINDOW,
            Self::Log { .. } => SLIDING_LOG,
        };
        format!("{PRELUDE}{body}")
    }

    /// The tag between prefix and client in a key, so that two algorithms
    /// sharing a prefix never read each other's state.
    pub(crate) fn tag(&self) -> &'static str {
        match self {
            Self::Bucket { .. } => "tb",
            Self::Fixed { .. } => "fw",
            Self::Sliding { .. } => "swc",
            Self::Log { .. } => "swl",
        }
    }

    /// The script's two fixed arguments: the interval or window in µs, and
    /// the capacity or limit.
    pub(crate) fn args(&self) -> [u64; 2] {
        match *self {
            Self::Bucket {
                interval_us,
                capacity,
                ..
            } => [interval_us, capacity],
            Self::Fixed {
                window_us, limit, ..
            }
            | Self::Sliding {
                window_us, limit, ..
            }
            | Self::Log { window_us, limit } => [window_us, limit],
        }
    }

    /// The largest cost: capacity or limit.
    pub(crate) fn capacity(&self) -> u64 {
        self.args()[1]
    }

    /// The window over which the quota grants its capacity: the window, or
    /// the time to refill the bucket from empty.
    pub(crate) fn window(&self) -> Duration {
        let [first, capacity] = self.args();
        match self {
            Self::Bucket { .. } => Duration::from_micros(first.saturating_mul(capacity)),
            _ => Duration::from_micros(first),
        }
    }

    /// The decision a script's reply stands for, with every figure computed
    /// as the in-process limiter computes it.
    pub(crate) fn decode(&self, reply: &[i64], cost: u64) -> Result<Decision, DecodeError> {
        let want = match self {
            Self::Bucket { .. } => 3,
            Self::Fixed { .. } => 4,
            Self::Sliding { .. } | Self::Log { .. } => 5,
        };
        if reply.len() != want {
            return Err(DecodeError::Shape(reply.len()));
        }
        let num = |i: usize, what: &'static str| -> Result<u64, DecodeError> {
            u64::try_from(reply[i])
                .ok()
                .filter(|&n| n <= EXACT_MAX)
                .ok_or(DecodeError::Range(what))
        };
        let allowed = match reply[0] {
            0 => false,
            1 => true,
            _ => return Err(DecodeError::Range("an outcome that is neither 0 nor 1")),
        };
        let now_us = num(want - 1, "a reading of TIME out of range")?;
        let now = now_us * 1_000;
        let applied = |word: u64| {
            if allowed {
                Applied::Admitted(word)
            } else {
                Applied::Denied(word)
            }
        };
        let decision = match self {
            Self::Bucket { ns, .. } => {
                let tat = num(1, "a TAT out of range")?;
                describe(ns, applied(tat * 1_000), now, cost)
            }
            Self::Fixed { ns, .. } => {
                let word = ns
                    .word(num(1, "a bad window index")?, num(2, "a bad count")?)
                    .ok_or(DecodeError::Range("a count or window index out of range"))?;
                describe(ns, applied(word), now, cost)
            }
            Self::Sliding { ns, .. } => {
                let word = ns
                    .word(
                        num(1, "a bad window index")?,
                        num(2, "a bad count")?,
                        num(3, "a bad count")?,
                    )
                    .ok_or(DecodeError::Range("a count or window index out of range"))?;
                describe(ns, applied(word), now, cost)
            }
            Self::Log { window_us, limit } => {
                return log_decision(reply, allowed, now_us, *window_us, *limit);
            }
        };
        let mut decision = decision.ok_or(DecodeError::Range("a dead word"))?;
        decision.retry_after = round_up_to_us(decision.retry_after);
        decision.replenish_after = round_up_to_us(decision.replenish_after);
        Ok(decision)
    }
}

/// The log's decision: `used` entries after it, the oldest entry's
/// instant, and for a denial the instant of the entry whose expiry frees
/// enough room for the denied cost (the script picked it).
fn log_decision(
    reply: &[i64],
    allowed: bool,
    now: u64,
    window: u64,
    limit: u64,
) -> Result<Decision, DecodeError> {
    let used = u64::try_from(reply[1])
        .ok()
        .filter(|&n| n <= limit)
        .ok_or(DecodeError::Range("more entries than the limit"))?;
    let instant = |i: usize| -> Result<Option<u64>, DecodeError> {
        match reply[i] {
            -1 => Ok(None),
            n => u64::try_from(n)
                .ok()
                .filter(|&n| n <= SPAN_MAX_US * 2)
                .map(Some)
                .ok_or(DecodeError::Range("an entry's instant out of range")),
        }
    };
    // An entry admitted at `t` frees its room at `t + window`.
    let wait = |t: Option<u64>| t.map_or(0, |t| (t + window).saturating_sub(now));
    let free = limit - used;
    let retry_after = if allowed { 0 } else { wait(instant(3)?) };
    let replenish_after = if free >= limit { 0 } else { wait(instant(2)?) };
    Ok(Decision {
        allowed,
        limit,
        remaining: free,
        retry_after: Duration::from_micros(retry_after),
        replenish_after: Duration::from_micros(replenish_after),
        window: Duration::from_micros(window),
    })
}

/// A wait rounded up to whole microseconds: the first instant at which a
/// script, which reads time in µs, sees it over. "Never" stays never.
fn round_up_to_us(wait: Duration) -> Duration {
    if wait == Duration::MAX {
        return wait;
    }
    let ns = wait.as_nanos().div_ceil(1_000) * 1_000;
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::algorithm::FromParams;

    fn params(limit: u64, window: Duration) -> crate::algorithm::Params {
        crate::algorithm::Params {
            limit: Some(limit),
            window: Some(window),
            ..Default::default()
        }
    }

    #[test]
    fn windows_must_be_whole_microseconds_within_range() {
        let fw = FixedWindow::from_params(&params(5, Duration::from_nanos(1_500))).unwrap();
        assert_eq!(Spec::fixed(&fw).unwrap_err().field(), "window");
        let fw = FixedWindow::from_params(&params(5, Duration::from_micros(3))).unwrap();
        assert!(matches!(
            Spec::fixed(&fw),
            Ok(Spec::Fixed { window_us: 3, .. })
        ));
        let day = Duration::from_secs(86_400);
        let swc = SlidingWindowCounter::from_params(&params(8_000_000, day)).unwrap();
        assert_eq!(Spec::sliding(&swc).unwrap_err().field(), "limit");
    }

    #[test]
    fn bucket_interval_rounds_up_to_microseconds() {
        let tb = TokenBucket::new(3, Duration::from_micros(10), 2).unwrap();
        let Spec::Bucket { interval_us, .. } = Spec::bucket(&tb).unwrap() else {
            unreachable!()
        };
        assert_eq!(interval_us, 4);
        let long = TokenBucket::new(1, Duration::from_secs(3_600), 2_000_000).unwrap();
        assert_eq!(Spec::bucket(&long).unwrap_err().field(), "capacity");
    }

    #[test]
    fn replies_out_of_shape_or_range_are_errors_not_panics() {
        let tb = TokenBucket::new(1, Duration::from_secs(1), 2).unwrap();
        let spec = Spec::bucket(&tb).unwrap();
        for reply in [
            &[][..],
            &[1, 2][..],
            &[2, 0, 0][..],
            &[1, -5, 0][..],
            &[1, 0, i64::MAX][..],
            &[0, i64::MIN, 1][..],
        ] {
            assert!(spec.decode(reply, 1).is_err(), "{reply:?}");
        }
        let d = spec.decode(&[1, 2_000_000, 1_000_000], 1).unwrap();
        assert_eq!((d.is_allowed(), d.remaining()), (true, 1));
        let fw = FixedWindow::from_params(&params(5, Duration::from_secs(1))).unwrap();
        let spec = Spec::fixed(&fw).unwrap();
        assert!(
            spec.decode(&[0, 3, 6, 3_500_000], 1).is_err(),
            "count above the limit"
        );
        let d = spec.decode(&[0, 3, 5, 3_250_000], 1).unwrap();
        assert_eq!(d.retry_after(), Duration::from_millis(750));
        let spec = Spec::Log {
            window_us: 1_000,
            limit: 2,
        };
        assert!(spec.decode(&[0, 3, 0, 0, 10], 1).is_err());
        let d = spec.decode(&[0, 2, 100, 400, 1_000], 2).unwrap();
        assert_eq!(d.retry_after(), Duration::from_micros(400));
        assert_eq!(d.replenish_after(), Duration::from_micros(100));
    }
}
