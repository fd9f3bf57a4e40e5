//! What a Redis limiter runs, as data: each limit's settings in the
//! scripts' units (whole microseconds), the in-process algorithm that
//! computes the figures and every transition the scripts do not (the very
//! code the in-process limiters run), and the *stamp* a stored state
//! carries to say which settings it was written under.
//!
//! # Units and exactness
//!
//! Lua numbers are doubles, exact for integers up to 2<sup>53</sup>. Every
//! script counts time in whole microseconds since the Unix epoch (about
//! 1.8 · 10<sup>15</sup> today, below 2<sup>52</sup> until the year 2112),
//! and the constructors here keep every stored value and every product a
//! script forms below 2<sup>53</sup>: windows and refill times of at most
//! 2<sup>52</sup> µs, and for the sliding window counter
//! `limit · window ≤ 2^53 − 1`. The in-process twin runs in nanoseconds
//! (`× 1 000`, exact) on Redis's clock, so its windows start on the Unix
//! epoch.

use core::time::Duration;

use crate::algorithm::{
    join, Both, FixedWindow, Reserve, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
    Transitions, WordAlgorithm,
};
use crate::error::ConfigError;

/// The largest integer a double holds exactly, and so the largest value a
/// script may store or form: 2<sup>53</sup> − 1.
pub(crate) const EXACT_MAX: u64 = (1 << 53) - 1;

/// The longest window or refill time, in µs: 2<sup>52</sup> (142 years),
/// so that `now + window` stays below 2<sup>53</sup> until 2112.
pub(crate) const SPAN_MAX_US: u64 = 1 << 52;

/// The longest linger (ms) a key's value may name: a refill of
/// [`SPAN_MAX_US`], the longest the builders allow (see
/// [`Spec::linger_ms`]). A value naming more (not one a limiter wrote) is
/// read as naming this.
pub(crate) const LINGER_MAX_MS: u64 = SPAN_MAX_US.div_ceil(1_000);

/// One limit as a word algorithm chosen at run time: the in-process twin
/// of a token bucket (its interval in whole µs), a fixed window or a
/// sliding window counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(unreachable_pub)] // named only through a sealed trait's method
pub enum WordSpec {
    /// A token bucket.
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
            // A key's tag names its algorithms: never asked.
            _ => WordAlgorithm::fresh_at(to, now),
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

/// One limit of a word algorithm: its in-process twin and the script's two
/// settings, the interval or window in µs and the capacity or limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(unreachable_pub)] // named only through a sealed trait's method
pub struct Half {
    pub(crate) ns: WordSpec,
    pub(crate) a: u64,
    pub(crate) b: u64,
}

impl Half {
    /// The tag naming the algorithm in keys and stamps.
    pub(crate) fn tag(&self) -> &'static str {
        match self.ns {
            WordSpec::Bucket(_) => "tb",
            WordSpec::Fixed(_) => "fw",
            WordSpec::Sliding(_) => "swc",
        }
    }

    /// The names of the numbers holding the state, in the order the value
    /// and the scripts list them: a bucket's TAT in whole µs and the
    /// nanoseconds beyond (0 to 999); a window's index and count(s).
    pub(crate) fn fields(&self) -> &'static [&'static str] {
        match self.ns {
            WordSpec::Bucket(_) => &["t", "r"],
            WordSpec::Fixed(_) => &["k", "c"],
            WordSpec::Sliding(_) => &["k", "c", "p"],
        }
    }

    /// The settings as a stamp: `tb:<interval µs>:<capacity>`,
    /// `fw:<window µs>:<limit>` or `swc:<window µs>:<limit>`.
    fn stamp(&self) -> String {
        format!("{}:{}:{}", self.tag(), self.a, self.b)
    }

    /// A half back from its stamp, validated as the builder validates
    /// settings; `None` for anything else.
    fn parse_stamp(stamp: &str) -> Option<Self> {
        let mut parts = stamp.split(':');
        let (tag, a, b) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
        let us = Duration::from_micros(a);
        let spec = match tag {
            "tb" => Spec::bucket(&TokenBucket::new(1, us, b).ok()?),
            "fw" => Spec::fixed(&FixedWindow::new(b, us).ok()?),
            "swc" => Spec::sliding(&SlidingWindowCounter::new(b, us).ok()?),
            _ => return None,
        };
        match spec.ok()? {
            Spec::One(half) if half.a == a && half.b == b => Some(half),
            _ => None,
        }
    }
}

/// The in-process twin of a word algorithm's spec: one limit or two, over
/// a 128-bit word (one limit's word in the low half), so that one type
/// runs the transitions of both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ns {
    One(WordSpec),
    Two(Both<WordSpec, WordSpec>),
}

macro_rules! either {
    ($self:ident, $a:ident => $one:expr, $b:ident => $two:expr) => {
        match $self {
            Ns::One($a) => $one,
            Ns::Two($b) => $two,
        }
    };
}

impl Transitions for Ns {
    type Word = u128;

    fn capacity(&self) -> u64 {
        either!(self, a => WordAlgorithm::capacity(a), b => Transitions::capacity(b))
    }
    fn limit(&self, word: u128, now: u64) -> u64 {
        either!(self, a => WordAlgorithm::capacity(a), b => b.limit(word, now))
    }
    fn fresh_at(&self, floor: u64) -> u128 {
        either!(self, a => u128::from(WordAlgorithm::fresh_at(a, floor)), b => b.fresh_at(floor))
    }
    fn admit(&self, word: u128, now: u64, cost: u64) -> Option<u128> {
        either!(self, a => WordAlgorithm::admit(a, word as u64, now, cost).map(u128::from), b => b.admit(word, now, cost))
    }
    fn remaining(&self, word: u128, now: u64) -> u64 {
        either!(self, a => WordAlgorithm::remaining(a, word as u64, now), b => b.remaining(word, now))
    }
    fn retry_after(&self, word: u128, now: u64, cost: u64) -> u64 {
        either!(self, a => WordAlgorithm::retry_after(a, word as u64, now, cost), b => b.retry_after(word, now, cost))
    }
    fn is_idle(&self, word: u128, now: u64) -> bool {
        either!(self, a => WordAlgorithm::is_idle(a, word as u64, now), b => b.is_idle(word, now))
    }
    fn idle_at(&self, word: u128) -> u64 {
        either!(self, a => WordAlgorithm::idle_at(a, word as u64), b => b.idle_at(word))
    }
    fn horizon(&self) -> u64 {
        either!(self, a => WordAlgorithm::horizon(a), b => Transitions::horizon(b))
    }
    fn window(&self, word: u128, now: u64) -> u64 {
        either!(self, a => WordAlgorithm::window(a), b => b.window(word, now))
    }
    fn convert(&self, word: u128, now: u64, to: &Self) -> u128 {
        match (self, to) {
            (Ns::One(a), Ns::One(b)) => u128::from(WordAlgorithm::convert(a, word as u64, now, b)),
            (Ns::Two(a), Ns::Two(b)) => a.convert(word, now, b),
            // A key's tag says one limit or two: never asked.
            _ => Transitions::fresh_at(to, now),
        }
    }
    fn reserves(&self) -> bool {
        either!(self, a => WordAlgorithm::reserves(a), b => Transitions::reserves(b))
    }
    fn reserve(&self, word: u128, now: u64, cost: u64) -> Reserve<u128> {
        match self {
            Ns::One(a) => match WordAlgorithm::reserve(a, word as u64, now, cost) {
                Reserve::At { word, ready_at } => Reserve::At {
                    word: u128::from(word),
                    ready_at,
                },
                Reserve::Never => Reserve::Never,
            },
            Ns::Two(b) => b.reserve(word, now, cost),
        }
    }
    fn each(&self, word: u128, now: u64) -> Option<[crate::algorithm::Figures; 2]> {
        either!(self, _a => None, b => b.each(word, now))
    }
}

/// One algorithm as a Redis limiter runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(unreachable_pub)] // named only through a sealed trait's method
pub enum Spec {
    /// One word algorithm.
    One(Half),
    /// Two limits held together, in one key.
    Two(Half, Half),
    /// The sliding window log: a sorted set of admissions.
    Log { window_us: u64, limit: u64 },
}

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
        let capacity = WordAlgorithm::capacity(ns_bucket);
        // A full bucket's refill is capacity · interval, exactly.
        let interval_us = (WordAlgorithm::horizon(ns_bucket) / capacity).div_ceil(1_000);
        ConfigError::check_range(
            "capacity",
            u128::from(capacity),
            (1, u128::from(SPAN_MAX_US / interval_us)),
            "tokens",
            "in Redis a full bucket's refill time, capacity × (per / tokens) in whole µs, must be at most 2^52 µs",
        )?;
        // interval_us · 1 000 · capacity ≤ 2^52 · 1 000 < 2^63 − 4: valid.
        let ns = TokenBucket::new(1, Duration::from_micros(interval_us), capacity)?;
        Ok(Self::One(Half {
            ns: WordSpec::Bucket(ns),
            a: interval_us,
            b: capacity,
        }))
    }

    pub(crate) fn fixed(ns: &FixedWindow) -> Result<Self, ConfigError> {
        let limit = WordAlgorithm::capacity(ns);
        ConfigError::check_range(
            "limit",
            u128::from(limit),
            (1, u128::from(EXACT_MAX)),
            "requests",
            "in Redis the window's count must stay below 2^53, the largest integer Lua counts exactly",
        )?;
        let window = window_us(Duration::from_nanos(ns.window_ns()), "window")?;
        // The twin on Redis's clock: windows on the Unix epoch.
        let ns = FixedWindow::new(limit, Duration::from_micros(window))?;
        Ok(Self::One(Half {
            ns: WordSpec::Fixed(ns),
            a: window,
            b: limit,
        }))
    }

    pub(crate) fn sliding(ns: &SlidingWindowCounter) -> Result<Self, ConfigError> {
        let window = window_us(Duration::from_nanos(ns.window_ns()), "window")?;
        let limit = WordAlgorithm::capacity(ns);
        ConfigError::check_range(
            "limit",
            u128::from(limit),
            (1, u128::from(EXACT_MAX / window)),
            "requests",
            "in Redis the weighted estimate forms limit × window (µs), which must stay below 2^53",
        )?;
        let ns = SlidingWindowCounter::new(limit, Duration::from_micros(window))?;
        Ok(Self::One(Half {
            ns: WordSpec::Sliding(ns),
            a: window,
            b: limit,
        }))
    }

    pub(crate) fn log(ns: &SlidingWindowLog) -> Result<Self, ConfigError> {
        Ok(Self::Log {
            window_us: window_us(Duration::from_nanos(ns.window()), "window")?,
            limit: ns.limit(),
        })
    }

    /// Two limits held together.
    pub(crate) fn pair(first: &Spec, second: &Spec) -> Result<Self, ConfigError> {
        match (first, second) {
            (Self::One(a), Self::One(b)) => Ok(Self::Two(*a, *b)),
            _ => Err(ConfigError::OutOfRange {
                field: "algorithm",
                value: 0,
                min: 0,
                max: 0,
                unit: "",
                reason: "a pair holds two of the token bucket, the fixed window and the sliding window counter",
            }),
        }
    }

    /// The limits of a word algorithm's spec, with the suffix of their
    /// variables in the scripts: `""` for one limit, `"1"` and `"2"` for a
    /// pair's.
    pub(crate) fn halves(&self) -> Vec<(Half, &'static str)> {
        match *self {
            Self::One(a) => vec![(a, "")],
            Self::Two(a, b) => vec![(a, "1"), (b, "2")],
            Self::Log { .. } => Vec::new(),
        }
    }

    /// The in-process twin of a word algorithm's spec.
    pub(crate) fn ns(&self) -> Option<Ns> {
        match self {
            Self::One(a) => Some(Ns::One(a.ns)),
            Self::Two(a, b) => Some(Ns::Two(Both::new(a.ns, b.ns))),
            Self::Log { .. } => None,
        }
    }

    /// The tag naming the algorithm in a key, so that two algorithms
    /// sharing a prefix never read each other's state: `tb`, `fw`, `swc`,
    /// `swl`, or a pair's two joined by `+`.
    pub(crate) fn tag(&self) -> String {
        match self {
            Self::One(a) => a.tag().into(),
            Self::Two(a, b) => format!("{}+{}", a.tag(), b.tag()),
            Self::Log { .. } => "swl".into(),
        }
    }

    /// The stamp of the settings a state is written under (see the
    /// scripts' `s` field).
    pub(crate) fn stamp(&self) -> String {
        match self {
            Self::One(a) => a.stamp(),
            Self::Two(a, b) => format!("{}+{}", a.stamp(), b.stamp()),
            Self::Log { window_us, limit } => format!("swl:{window_us}:{limit}"),
        }
    }

    /// The spec a stamp names, if it is one of the same shape as `self`
    /// (the key's tag fixes the algorithms; the settings may differ).
    pub(crate) fn parse_stamp(&self, stamp: &str) -> Option<Self> {
        let spec = match stamp.split_once('+') {
            None => Self::One(Half::parse_stamp(stamp)?),
            Some((a, b)) => Self::Two(Half::parse_stamp(a)?, Half::parse_stamp(b)?),
        };
        (spec.tag() == self.tag()).then_some(spec)
    }

    /// The largest cost: capacity or limit (a pair's smaller).
    pub(crate) fn capacity(&self) -> u64 {
        match self {
            Self::Log { limit, .. } => *limit,
            _ => self.ns().map_or(0, |ns| ns.capacity()),
        }
    }

    /// How long (ms) a key written under these settings lingers past the
    /// instant its state becomes idle: a token bucket's refill time,
    /// capacity × interval, rounded up (a pair's longer; a window's and a
    /// log's 0, their idle state the same under any settings). A bucket
    /// full at that instant is full under its own capacity only: a reader
    /// with a larger one would carry it on from there, and finding no key
    /// would start fuller. Past a refill, a fresh bucket admits nothing
    /// the bound of any span over the writes does not (see
    /// `lua::word_script`). At most 2<sup>52</sup> µs (the builder's
    /// limit on a refill), so an expiry with it stays below 2<sup>53</sup>
    /// ms.
    pub(crate) fn linger_ms(&self) -> u64 {
        self.halves()
            .iter()
            .filter(|(h, _)| matches!(h.ns, WordSpec::Bucket(_)))
            .map(|(h, _)| h.a.saturating_mul(h.b).div_ceil(1_000))
            .max()
            .unwrap_or(0)
            .min(LINGER_MAX_MS)
    }

    /// The window over which the quota grants its capacity: the window, or
    /// the time to refill the bucket from empty (a pair's: the one of the
    /// limit that binds a fresh client, the smaller, the first on a tie).
    pub(crate) fn window(&self) -> Duration {
        match self {
            Self::Log { window_us, .. } => Duration::from_micros(*window_us),
            _ => {
                let ns = self.ns().expect("a word algorithm");
                Duration::from_nanos(ns.window(ns.fresh_at(0), 0))
            }
        }
    }
}

/// The word of a pair, from its halves' words; one limit's word in the low
/// half.
pub(crate) fn word_of(words: &[u64]) -> u128 {
    match *words {
        [a] => u128::from(a),
        [a, b] => join(a, b),
        _ => 0,
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::algorithm::{FromParams, Params};

    fn params(limit: u64, window: Duration) -> Params {
        Params {
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
        assert!(matches!(Spec::fixed(&fw), Ok(Spec::One(Half { a: 3, .. }))));
        let day = Duration::from_secs(86_400);
        let swc = SlidingWindowCounter::from_params(&params(8_000_000, day)).unwrap();
        assert_eq!(Spec::sliding(&swc).unwrap_err().field(), "limit");
    }

    #[test]
    fn bucket_interval_rounds_up_to_microseconds() {
        let tb = TokenBucket::new(3, Duration::from_micros(10), 2).unwrap();
        let Spec::One(half) = Spec::bucket(&tb).unwrap() else {
            unreachable!()
        };
        assert_eq!(half.a, 4);
        let long = TokenBucket::new(1, Duration::from_secs(3_600), 2_000_000).unwrap();
        assert_eq!(Spec::bucket(&long).unwrap_err().field(), "capacity");
    }

    #[test]
    fn stamps_name_their_settings_and_nothing_else() {
        let tb = Spec::bucket(&TokenBucket::new(1, Duration::from_millis(1), 7).unwrap()).unwrap();
        let fw = Spec::fixed(&FixedWindow::new(5, Duration::from_secs(60)).unwrap()).unwrap();
        let pair = Spec::pair(&tb, &fw).unwrap();
        assert_eq!(tb.stamp(), "tb:1000:7");
        assert_eq!(pair.stamp(), "tb:1000:7+fw:60000000:5");
        assert_eq!(pair.parse_stamp(&pair.stamp()), Some(pair));
        assert_eq!(tb.parse_stamp("tb:2000:9").map(|s| s.capacity()), Some(9));
        for junk in [
            "",
            "tb",
            "tb:1000",
            "tb:1000:7:1",
            "tb:x:7",
            "tb:0:7",
            "tb:1000:0",
            "fw:60000000:5",
            "tb:1000:7+fw:60000000:5",
            "xx:1:1",
            "tb:-1:7",
        ] {
            assert_eq!(tb.parse_stamp(junk), None, "{junk:?}");
        }
        assert_eq!(pair.parse_stamp("tb:1000:7"), None);
    }
}
