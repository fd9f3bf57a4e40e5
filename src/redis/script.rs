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

#[cfg(test)]
use super::lua::TEST_CLOCK;
use super::lua::{
    expand, inline, CLOCK, FDIV, FIXED_WINDOW, PRELUDE, SLIDING_LOG, SLIDING_WINDOW, TOKEN_BUCKET,
};
use super::pair::WordSpec;
use crate::algorithm::{
    join, Both, FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use crate::cell::{describe, Applied};
use crate::decision::Decision;
use crate::error::ConfigError;

/// The largest integer a double holds exactly, and so the largest value a
/// script may store or form: 2<sup>53</sup> − 1.
const EXACT_MAX: u64 = (1 << 53) - 1;

/// The longest window or refill time, in µs: 2<sup>52</sup> (142 years),
/// so that `now + window` stays below 2<sup>53</sup> until 2112.
const SPAN_MAX_US: u64 = 1 << 52;

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
    /// Two limits held together: the in-process pair, and each limit's
    /// two settings.
    Pair {
        ns: Both<WordSpec, WordSpec>,
        args: [[u64; 2]; 2],
    },
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
        let capacity = ns_bucket.capacity();
        // A full bucket's refill is capacity · interval, exactly.
        let interval_us = (ns_bucket.horizon() / capacity).div_ceil(1_000);
        ConfigError::check_range(
            "capacity",
            u128::from(capacity),
            (1, u128::from(SPAN_MAX_US / interval_us)),
            "tokens",
            "in Redis a full bucket's refill time, capacity × (per / tokens) in whole µs, must be at most 2^52 µs",
        )?;
        // interval_us · 1 000 · capacity ≤ 2^52 · 1 000 < 2^63 − 5: valid.
        let ns = TokenBucket::new(1, Duration::from_micros(interval_us), capacity)?;
        Ok(Self::Bucket {
            ns,
            interval_us,
            capacity,
        })
    }

    pub(crate) fn fixed(ns: &FixedWindow) -> Result<Self, ConfigError> {
        use crate::algorithm::WordAlgorithm;
        let limit = ns.capacity();
        ConfigError::check_range(
            "limit",
            u128::from(limit),
            (1, u128::from(EXACT_MAX)),
            "requests",
            "in Redis the window's count must stay below 2^53, the largest integer Lua counts exactly",
        )?;
        Ok(Self::Fixed {
            ns: *ns,
            window_us: window_us(Duration::from_nanos(ns.window_ns()), "window")?,
            limit,
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

    /// Two limits held together.
    pub(crate) fn pair(first: &Spec, second: &Spec) -> Result<Self, ConfigError> {
        let half = |spec: &Spec| {
            WordSpec::of(spec).ok_or(ConfigError::OutOfRange {
                field: "algorithm",
                value: 0,
                min: 0,
                max: 0,
                unit: "",
                reason: "a pair holds two of the token bucket, the fixed window and the sliding window counter",
            })
        };
        let ((a, a_args), (b, b_args)) = (half(first)?, half(second)?);
        Ok(Self::Pair {
            ns: Both::new(a, b),
            args: [a_args, b_args],
        })
    }

    /// Limit `i` (0 or 1) of a pair, as a single limit.
    pub(crate) fn half(&self, i: usize) -> Option<Spec> {
        match self {
            Self::Pair { ns, args } => Some(if i == 0 {
                ns.first().spec(args[0])
            } else {
                ns.second().spec(args[1])
            }),
            _ => None,
        }
    }

    /// The check's script, which reads Redis's clock.
    pub(crate) fn source(&self) -> String {
        self.script(CLOCK, true)
    }

    /// The script that decides without recording.
    pub(crate) fn peek_source(&self) -> String {
        self.script(CLOCK, false)
    }

    /// The check's script judging at an instant (µs) passed as its last
    /// argument instead of `TIME`: the test wrapper.
    #[cfg(test)]
    pub(crate) fn source_at(&self) -> String {
        self.script(TEST_CLOCK, true)
    }

    /// The peek's script under the test clock.
    #[cfg(test)]
    pub(crate) fn peek_source_at(&self) -> String {
        self.script(TEST_CLOCK, false)
    }

    fn script(&self, clock: &str, write: bool) -> String {
        let fdiv = |bodies: &[&str]| {
            if bodies.iter().any(|b| b.contains("fdiv(")) {
                FDIV
            } else {
                ""
            }
        };
        let (Some(a), Some(b)) = (self.half(0), self.half(1)) else {
            let body = self.body();
            let helpers = fdiv(&[body]);
            return format!("{PRELUDE}{helpers}{clock}{}", inline(body, write));
        };
        let helpers = fdiv(&[a.body(), b.body()]);
        let bodies = [expand(a.body()), expand(b.body())];
        let head = format!("{PRELUDE}{helpers}{clock}");
        super::pair::source(&head, [&bodies[0], &bodies[1]], write)
    }

    fn body(&self) -> &'static str {
        match self {
            Self::Bucket { .. } => TOKEN_BUCKET,
            Self::Fixed { .. } => FIXED_WINDOW,
            Self::Sliding { .. } => SLIDING_WINDOW,
            Self::Log { .. } => SLIDING_LOG,
            Self::Pair { .. } => "",
        }
    }

    /// The tag between prefix and client in a key, so that two algorithms
    /// sharing a prefix never read each other's state.
    pub(crate) fn tag(&self) -> String {
        match self {
            Self::Bucket { .. } => "tb".into(),
            Self::Fixed { .. } => "fw".into(),
            Self::Sliding { .. } => "swc".into(),
            Self::Log { .. } => "swl".into(),
            Self::Pair { .. } => match (self.half(0), self.half(1)) {
                (Some(a), Some(b)) => format!("{}+{}", a.tag(), b.tag()),
                _ => "pair".into(),
            },
        }
    }

    /// The keys of a client whose key is `full`: one, or a pair's two
    /// (`full.1`, `full.2`, under the same hash tag).
    pub(crate) fn keys(&self, full: &[u8]) -> Vec<Vec<u8>> {
        match self {
            Self::Pair { .. } => vec![[full, b".1"].concat(), [full, b".2"].concat()],
            _ => vec![full.to_vec()],
        }
    }

    /// Appends a call's keys and settings, then `cost`, to `cmd`.
    pub(crate) fn push_call(&self, cmd: &mut ::redis::Cmd, full: &[u8], cost: u64) {
        match self {
            Self::Pair { args, .. } => {
                cmd.arg(2)
                    .arg([full, b".1"].concat())
                    .arg([full, b".2"].concat())
                    .arg(args[0][0])
                    .arg(args[0][1])
                    .arg(args[1][0])
                    .arg(args[1][1]);
            }
            _ => {
                let [a, b] = self.args();
                cmd.arg(1).arg(full).arg(a).arg(b);
            }
        }
        cmd.arg(cost);
    }

    /// Whether a key written under `self` means the same windows read
    /// under `other`: every window (not a bucket's rate) equal.
    pub(crate) fn shares_windows(&self, other: &Spec) -> bool {
        match (self.half(0), self.half(1), other.half(0), other.half(1)) {
            (Some(a), Some(b), Some(c), Some(d)) => a.shares_windows(&c) && b.shares_windows(&d),
            (None, None, None, None) => !self.windowed() || self.args()[0] == other.args()[0],
            _ => false,
        }
    }

    /// The script's two fixed arguments: the interval or window in µs, and
    /// the capacity or limit (a pair's first limit's).
    pub(crate) fn args(&self) -> [u64; 2] {
        match *self {
            Self::Pair { args, .. } => args[0],
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

    /// Whether the first setting is a window that every reader of a key
    /// must share.
    fn windowed(&self) -> bool {
        !matches!(self, Self::Bucket { .. })
    }

    /// The largest cost: capacity or limit (a pair's smaller).
    pub(crate) fn capacity(&self) -> u64 {
        match self {
            Self::Pair { ns, .. } => crate::algorithm::Transitions::capacity(ns),
            _ => self.args()[1],
        }
    }

    /// The window over which the quota grants its capacity: the window, or
    /// the time to refill the bucket from empty (a pair's: the one of the
    /// limit that binds a fresh client, the smaller, the first on a tie).
    pub(crate) fn window(&self) -> Duration {
        if let (Some(a), Some(b)) = (self.half(0), self.half(1)) {
            return if b.capacity() < a.capacity() {
                b.window()
            } else {
                a.window()
            };
        }
        let [first, capacity] = self.args();
        match self {
            Self::Bucket { .. } => Duration::from_micros(first.saturating_mul(capacity)),
            _ => Duration::from_micros(first),
        }
    }

    /// The decision a script's reply stands for, with every figure computed
    /// as the in-process limiter computes it.
    pub(crate) fn decode(&self, reply: &[i64], cost: u64) -> Result<Decision, DecodeError> {
        if let Self::Pair { ns, .. } = self {
            return self.decode_pair(ns, reply, cost);
        }
        if let Self::Log { window_us, limit } = *self {
            let want = self.reply_len();
            if reply.len() != want {
                return Err(DecodeError::Shape(reply.len()));
            }
            let allowed = match reply[0] {
                0 => false,
                1 => true,
                _ => return Err(DecodeError::Range("an outcome that is neither 0 nor 1")),
            };
            let now = u64::try_from(reply[want - 1])
                .ok()
                .filter(|&n| n <= EXACT_MAX)
                .ok_or(DecodeError::Range("a reading of TIME out of range"))?;
            return log_decision(reply, allowed, now, window_us, limit);
        }
        let (allowed, word, now_us) = self.state(reply)?;
        let now = now_us * 1_000;
        let applied = if allowed {
            Applied::Admitted(word)
        } else {
            Applied::Denied(word)
        };
        let decision = match self {
            Self::Bucket { ns, .. } => describe(ns, applied, now, cost),
            Self::Fixed { ns, .. } => describe(ns, applied, now, cost),
            Self::Sliding { ns, .. } => describe(ns, applied, now, cost),
            Self::Log { .. } | Self::Pair { .. } => None,
        };
        let mut decision = decision.ok_or(DecodeError::Range("a dead word"))?;
        decision.map_waits(round_up_to_us);
        Ok(decision)
    }
}

impl Spec {
    /// The length of a single limit's reply.
    pub(super) fn reply_len(&self) -> usize {
        match self {
            Self::Bucket { .. } => 3,
            Self::Fixed { .. } => 4,
            Self::Sliding { .. } | Self::Log { .. } => 5,
            Self::Pair { .. } => 0,
        }
    }

    /// A pair's reply: the outcome, then each limit's reply without its
    /// outcome. The figures are the in-process pair's, on the pair's word.
    fn decode_pair(
        &self,
        ns: &Both<WordSpec, WordSpec>,
        reply: &[i64],
        cost: u64,
    ) -> Result<Decision, DecodeError> {
        let (Some(a), Some(b)) = (self.half(0), self.half(1)) else {
            return Err(DecodeError::Shape(reply.len()));
        };
        let (la, lb) = (a.reply_len(), b.reply_len());
        if reply.len() != la + lb - 1 {
            return Err(DecodeError::Shape(reply.len()));
        }
        let first = &reply[..la];
        let second: Vec<i64> = core::iter::once(reply[0])
            .chain(reply[la..].iter().copied())
            .collect();
        // Both halves carry the outcome and the same instant.
        let (allowed, w1, now) = a.state(first)?;
        let (_, w2, _) = b.state(&second)?;
        let word = join(w1, w2);
        let applied = if allowed {
            Applied::Admitted(word)
        } else {
            Applied::Denied(word)
        };
        let mut decision =
            describe(ns, applied, now * 1_000, cost).ok_or(DecodeError::Range("a dead word"))?;
        decision.map_waits(round_up_to_us);
        Ok(decision)
    }

    /// A word algorithm's reply as (outcome, in-process word, instant in
    /// µs).
    fn state(&self, reply: &[i64]) -> Result<(bool, u64, u64), DecodeError> {
        let want = self.reply_len();
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
        let now = num(want - 1, "a reading of TIME out of range")?;
        let word = match self {
            Self::Bucket { .. } => num(1, "a TAT out of range")? * 1_000,
            Self::Fixed { ns, .. } => {
                fixed_word(ns, num(1, "a bad window index")?, num(2, "a bad count")?)
                    .ok_or(DecodeError::Range("a count or window index out of range"))?
            }
            Self::Sliding { ns, .. } => ns
                .word(
                    num(1, "a bad window index")?,
                    num(2, "a bad count")?,
                    num(3, "a bad count")?,
                )
                .ok_or(DecodeError::Range("a count or window index out of range"))?,
            Self::Log { .. } | Self::Pair { .. } => {
                return Err(DecodeError::Range("a state that is not one word"))
            }
        };
        Ok((allowed, word, now))
    }
}

/// The fixed window's word for `count` in window `index`, if both fit: the
/// empty word of the window's start, charged `count` there.
pub(super) fn fixed_word(ns: &FixedWindow, index: u64, count: u64) -> Option<u64> {
    use crate::algorithm::WordAlgorithm;
    let start = index.checked_mul(ns.window_ns())?;
    if start > crate::algorithm::NOW_MAX || count > ns.capacity() {
        return None;
    }
    let fresh = ns.fresh_at(start);
    if count == 0 {
        Some(fresh)
    } else {
        ns.admit(fresh, start, count)
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
    // More entries than the limit were written under a larger quota (at
    // most the largest limit).
    let used = u64::try_from(reply[1])
        .ok()
        .filter(|&n| n <= SlidingWindowLog::MAX_LIMIT)
        .ok_or(DecodeError::Range("more entries than the largest limit"))?;
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
    let free = limit.saturating_sub(used);
    let retry_after = if allowed { 0 } else { wait(instant(3)?) };
    let replenish_after = if free >= limit { 0 } else { wait(instant(2)?) };
    Ok(Decision::new(
        allowed,
        limit,
        free,
        Duration::from_micros(retry_after),
        Duration::from_micros(replenish_after),
        Duration::from_micros(window),
    ))
}

/// A wait rounded up to whole microseconds: the first instant at which a
/// script, which reads time in µs, sees it over. "Never" stays never.
pub(super) fn round_up_to_us(wait: Duration) -> Duration {
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
        assert!(spec.decode(&[0, 4_097, 0, 0, 10], 1).is_err());
        // More entries than the limit (a larger quota wrote them): none left.
        let d = spec.decode(&[0, 3, 100, 400, 1_000], 1).unwrap();
        assert_eq!(
            (d.remaining(), d.retry_after()),
            (0, Duration::from_micros(400))
        );
        let d = spec.decode(&[0, 2, 100, 400, 1_000], 2).unwrap();
        assert_eq!(d.retry_after(), Duration::from_micros(400));
        assert_eq!(d.replenish_after(), Duration::from_micros(100));
    }
}
