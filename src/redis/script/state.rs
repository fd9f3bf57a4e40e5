//! A client's state as Redis holds it, and back: the scripts' replies
//! decoded into [`Decision`]s by the in-process algorithms' own code, a
//! word algorithm's hash fields read into the in-process word and written
//! from it, and the sliding window log's figures.
//!
//! Each script decides admission only. It returns the state it leaves (or,
//! on a denial, the state it read, after any window rollover) and the
//! instant it judged at; the figures of the [`Decision`] (remaining,
//! retry-after, replenish-after) are then computed here by the very code
//! the in-process limiters run, on the state scaled to nanoseconds
//! (`× 1 000`, exact), and rounded up to whole microseconds, the instants
//! at which a script can next run.

use core::time::Duration;

use super::moved::carried;
use super::spec::{word_of, Half, Ns, Spec, WordSpec, EXACT_MAX, LINGER_MAX_MS, SPAN_MAX_US};
use crate::algorithm::{SlidingWindowLog, Transitions};
use crate::cell::{describe, look, Applied};
use crate::decision::Decision;

/// Why a reply could not become a decision.
#[derive(Debug)]
pub(crate) enum DecodeError {
    /// Not the number of values the script returns.
    Shape(usize),
    /// A value out of the range the limiter writes.
    Range(&'static str),
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Shape(n) => write!(
                f,
                "the script's reply has {n} values, not the expected number"
            ),
            Self::Range(what) => write!(f, "the state read from Redis holds {what}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A number a script returned or a field held, within what the scripts
/// write.
fn exact(n: i64, what: &'static str) -> Result<u64, DecodeError> {
    u64::try_from(n)
        .ok()
        .filter(|&n| n <= EXACT_MAX)
        .ok_or(DecodeError::Range(what))
}

/// How many values one limit's state takes in a reply or in its fields.
fn width(half: &Half) -> usize {
    half.fields().len()
}

/// One limit's in-process word from its state's values (µs, as Redis
/// holds them), if they are in range.
fn half_word(half: &Half, v: &[u64]) -> Result<u64, DecodeError> {
    let word = match half.ns {
        WordSpec::Bucket(_) => {
            let (t, r) = (v[0], v[1]);
            if r > 999 {
                return Err(DecodeError::Range("a TAT's nanoseconds above 999"));
            }
            Some(t * 1_000 + r)
        }
        WordSpec::Fixed(ns) => ns.word(v[0], v[1]),
        WordSpec::Sliding(ns) => ns.word(v[0], v[1], v[2]),
    };
    word.ok_or(DecodeError::Range("a count or window index out of range"))
}

/// One limit's state values from its in-process word: what the scripts
/// store.
fn half_values(half: &Half, word: u64) -> Vec<u64> {
    match half.ns {
        WordSpec::Bucket(_) => vec![word / 1_000, word % 1_000],
        WordSpec::Fixed(ns) => {
            let (k, c) = ns.parts(word);
            vec![k, c]
        }
        WordSpec::Sliding(ns) => {
            let (k, c, p) = ns.parts(word);
            vec![k, c, p]
        }
    }
}

/// A word algorithm's fast-path reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fast {
    /// The key holds a state written under other settings or an older
    /// quota of this limiter: the slow path converts it.
    Convert,
    /// Decided: the outcome, the state left (or read), and the instant, µs.
    Decided { allowed: bool, word: u128, now: u64 },
}

/// Decodes a word algorithm's fast-path reply (see `lua::word_script`).
pub(crate) fn decode_fast(spec: &Spec, reply: &[i64]) -> Result<Fast, DecodeError> {
    if reply == [-1] {
        return Ok(Fast::Convert);
    }
    let halves = spec.halves();
    let want = 2 + halves.iter().map(|(h, _)| width(h)).sum::<usize>();
    if reply.len() != want {
        return Err(DecodeError::Shape(reply.len()));
    }
    let allowed = match reply[0] {
        0 => false,
        1 => true,
        _ => return Err(DecodeError::Range("an outcome that is neither 0 nor 1")),
    };
    let now = exact(reply[want - 1], "a reading of TIME out of range")?;
    let mut at = 1;
    let mut words = Vec::with_capacity(2);
    for (half, _) in &halves {
        let n = width(half);
        let values = reply[at..at + n]
            .iter()
            .map(|&v| exact(v, "a value out of range"))
            .collect::<Result<Vec<_>, _>>()?;
        words.push(half_word(half, &values)?);
        at += n;
    }
    Ok(Fast::Decided {
        allowed,
        word: word_of(&words),
        now,
    })
}

/// The decision on `word` at `now` (µs) for a request of `cost`, figured
/// as the in-process limiter figures it and rounded up to whole µs.
pub(crate) fn decision(ns: &Ns, allowed: bool, word: u128, now: u64, cost: u64) -> Decision {
    let applied = if allowed {
        Applied::Admitted(word)
    } else {
        Applied::Denied(word)
    };
    let mut d = describe(ns, applied, now * 1_000, cost).expect("a live word");
    round_figures(&mut d);
    d
}

/// A peek of `cost` on `word` at `now` (µs), as the in-process limiter's
/// peek: whether a check would admit it (and when it would, if not), with
/// the figures of the state as it stands, rounded up to whole µs.
pub(crate) fn peek_decision(ns: &Ns, word: u128, now: u64, cost: u64) -> Decision {
    let mut d = look(ns, word, now * 1_000, cost);
    round_figures(&mut d);
    d
}

/// Rounds a decision's waits up to whole microseconds.
pub(crate) fn round_figures(d: &mut Decision) {
    d.map_waits(round_up_to_us);
}

/// A wait rounded up to whole microseconds: the first instant at which a
/// script, which reads time in µs, sees it over. "Never" stays never.
pub(crate) fn round_up_to_us(wait: Duration) -> Duration {
    if wait == Duration::MAX {
        return wait;
    }
    let ns = wait.as_nanos().div_ceil(1_000) * 1_000;
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// A word algorithm's key as the read script returned it: the instant
/// (µs), the key's expiry (ms; negative for none), the end of the latest
/// lease of the client outstanding (µs; 0 for none, `None` for not known:
/// the slot moving) and the value, `None` for no key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    pub(crate) now: u64,
    pub(crate) expiry: i64,
    pub(crate) leased: Option<u64>,
    pub(crate) value: Option<String>,
}

impl Stored {
    /// The value's `|`-separated fields: settings, `tier:generation`,
    /// `writer.call`, then the state.
    fn fields(&self) -> Option<Vec<&str>> {
        self.value.as_deref().map(|v| v.split('|').collect())
    }

    /// The settings the state was written under; `None` for no key.
    pub(crate) fn stamp(&self) -> Option<&str> {
        self.value
            .as_deref()
            .map(|v| v.split('|').next().unwrap_or(""))
    }

    /// The writer's id and its `<tier>:<generation>` (the linger after
    /// them left out).
    pub(crate) fn writer(&self) -> (Option<&str>, Option<&str>) {
        let mut fields = self.value.as_deref().map(|v| v.split('|').skip(1));
        let generation = fields.as_mut().and_then(Iterator::next).map(|g| {
            // `tier:generation:linger`; an earlier release wrote the first
            // two alone.
            match g.match_indices(':').nth(1) {
                Some((at, _)) => &g[..at],
                None => g,
            }
        });
        let writer = fields
            .as_mut()
            .and_then(Iterator::next)
            .and_then(|w| w.split_once('.'))
            .map(|(writer, _)| writer);
        (writer, generation)
    }

    /// How long (ms) the key lingers past its state's idle instant, as its
    /// writer wrote it (see `Spec::linger_ms`): 0 for no key, and for a
    /// value without one (an earlier release's, which expired at the idle
    /// instant).
    pub(crate) fn linger(&self) -> u64 {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let Some(field) = self.value.as_deref().and_then(|v| v.split('|').nth(1)) else {
            return 0;
        };
        // As the scripts read it: `<digits>:<digits>:<digits>`, else none.
        let parts: Vec<&str> = field.split(':').collect();
        match parts[..] {
            [tier, generation, linger] if digits(tier) && digits(generation) && digits(linger) => {
                linger
                    .parse::<u64>()
                    .map_or(LINGER_MAX_MS, |l| l.min(LINGER_MAX_MS))
            }
            _ => 0,
        }
    }

    /// The state's in-process word under `spec`, the settings it was
    /// written under; `None` for no key.
    pub(crate) fn word(&self, spec: &Spec) -> Result<Option<u128>, DecodeError> {
        let Some(fields) = self.fields() else {
            return Ok(None);
        };
        let halves = spec.halves();
        let want = 3 + halves.iter().map(|(h, _)| width(h)).sum::<usize>();
        if fields.len() != want {
            return Err(DecodeError::Range("a value of another shape"));
        }
        let mut at = 3;
        let mut words = Vec::with_capacity(2);
        for (half, _) in halves {
            let n = width(&half);
            let values = fields[at..at + n]
                .iter()
                .map(|v| {
                    v.parse::<u64>()
                        .ok()
                        .filter(|&n| n <= EXACT_MAX)
                        .ok_or(DecodeError::Range("a field that is not a whole number"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let values = match (spec, half.ns) {
                (Spec::One(_), WordSpec::Bucket(_)) => carried(&values, self.expiry, self.linger()),
                _ => values,
            };
            words.push(half_word(&half, &values)?);
            at += n;
        }
        Ok(Some(word_of(&words)))
    }
}

/// The value a word algorithm's key holds for `word` under `spec`, written
/// by call `call`: the head (`settings|tier:generation:linger|writer.`), the
/// call, the state.
pub(crate) fn value_of(head: &str, call: u64, spec: &Spec, word: u128) -> String {
    let halves = spec.halves();
    let words = [word as u64, (word >> 64) as u64];
    let mut value = format!("{head}{call}");
    for (i, (half, _)) in halves.iter().enumerate() {
        for v in half_values(half, words[i]) {
            value.push('|');
            value.push_str(&v.to_string());
        }
    }
    value
}

/// Whether two word algorithm values hold the same state under the same
/// settings and tier generation, whoever wrote them: every field but the
/// `writer.call` one is equal.
pub(crate) fn same_but_writer(a: &str, b: &str) -> bool {
    let (mut a, mut b) = (a.split('|'), b.split('|'));
    let mut field = 0;
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) if field == 2 || x == y => field += 1,
            _ => return false,
        }
    }
}

/// The instant (ms) at which a key holding `word` under `ns` expires, for
/// `PEXPIREAT`: the first ms past the instant it becomes idle, and
/// `linger` ms more (see `Spec::linger_ms`); 0 for a word idle at every
/// instant (no state: no key).
pub(crate) fn expiry_ms(ns: &Ns, word: u128, linger: u64) -> u64 {
    let idle = ns.idle_at(word);
    if idle == 0 {
        0
    } else {
        idle / 1_000_000 + 1 + linger
    }
}

/// The log's decision from its reply: `used` entries after it, the oldest
/// entry's instant, and for a denial the instant of the entry whose expiry
/// frees enough room for the denied cost (the script picked it).
pub(crate) fn log_decision(
    reply: &[i64],
    window: u64,
    limit: u64,
) -> Result<Decision, DecodeError> {
    if reply.len() != 5 {
        return Err(DecodeError::Shape(reply.len()));
    }
    let allowed = match reply[0] {
        0 => false,
        1 => true,
        _ => return Err(DecodeError::Range("an outcome that is neither 0 nor 1")),
    };
    let now = exact(reply[4], "a reading of TIME out of range")?;
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

/// The fresh decision of a limiter that knows nothing of the client:
/// everything left, nothing to wait for (a pair's two limits each full).
pub(crate) fn fresh_decision(spec: &Spec) -> Decision {
    match spec.ns() {
        Some(ns) => {
            let word = ns.fresh_at(0);
            let mut d = describe(&ns, Applied::Admitted(word), 0, 0).expect("a live word");
            round_figures(&mut d);
            d
        }
        None => {
            let limit = spec.capacity();
            Decision::new(
                true,
                limit,
                limit,
                Duration::ZERO,
                Duration::ZERO,
                spec.window(),
            )
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::algorithm::{FixedWindow, TokenBucket};

    #[test]
    fn replies_out_of_shape_or_range_are_errors_not_panics() {
        let tb = TokenBucket::new(1, Duration::from_secs(1), 2).unwrap();
        let spec = Spec::bucket(&tb).unwrap();
        for reply in [
            &[][..],
            &[1, 2][..],
            &[2, 0, 0, 0][..],
            &[1, -5, 0, 0][..],
            &[1, 0, 0, i64::MAX][..],
            &[0, i64::MIN, 0, 1][..],
            &[1, 5, 1_000, 1][..],
        ] {
            assert!(decode_fast(&spec, reply).is_err(), "{reply:?}");
        }
        assert_eq!(decode_fast(&spec, &[-1]).unwrap(), Fast::Convert);
        let Fast::Decided { allowed, word, now } =
            decode_fast(&spec, &[1, 2_000_000, 0, 1_000_000]).unwrap()
        else {
            panic!()
        };
        let d = decision(&spec.ns().unwrap(), allowed, word, now, 1);
        assert_eq!((d.is_allowed(), d.remaining()), (true, 1));
        let fw = FixedWindow::new(5, Duration::from_secs(1)).unwrap();
        let spec = Spec::fixed(&fw).unwrap();
        assert!(
            decode_fast(&spec, &[0, 3, 11, 3_500_000]).is_err(),
            "count above twice the limit"
        );
        let Fast::Decided { allowed, word, now } =
            decode_fast(&spec, &[0, 3, 5, 3_250_000]).unwrap()
        else {
            panic!()
        };
        let d = decision(&spec.ns().unwrap(), allowed, word, now, 1);
        assert_eq!(d.retry_after(), Duration::from_millis(750));
        let d = log_decision(&[0, 4_097, 0, 0, 10], 1_000, 2);
        assert!(d.is_err());
        // More entries than the limit (a larger quota wrote them): none left.
        let d = log_decision(&[0, 3, 100, 400, 1_000], 1_000, 2).unwrap();
        assert_eq!(
            (d.remaining(), d.retry_after()),
            (0, Duration::from_micros(400))
        );
    }

    #[test]
    fn stored_values_round_trip_through_the_word() {
        let tb = Spec::bucket(&TokenBucket::new(1, Duration::from_millis(1), 9).unwrap()).unwrap();
        let fw = Spec::fixed(&FixedWindow::new(5, Duration::from_secs(60)).unwrap()).unwrap();
        let pair = Spec::pair(&tb, &fw).unwrap();
        let ns = pair.ns().unwrap();
        let word = ns.admit(ns.fresh_at(0), 1_234_567_891, 3).unwrap();
        let head = format!("{}|0:7|me.", pair.stamp());
        let value = value_of(&head, 12, &pair, word);
        assert_eq!(value, format!("{head}12|1237567|891|0|3"));
        let stored = Stored {
            now: 0,
            expiry: -1,
            leased: Some(0),
            value: Some(value),
        };
        assert_eq!(stored.word(&pair).unwrap(), Some(word));
        assert_eq!(stored.stamp(), Some(pair.stamp().as_str()));
        assert_eq!(stored.writer(), (Some("me"), Some("0:7")));
        let none = Stored {
            now: 0,
            expiry: -2,
            leased: Some(0),
            value: None,
        };
        assert_eq!(none.word(&pair).unwrap(), None);
        for junk in ["", "x", "a|b|c|1|2|3", "a|b|c|1|2|3|x", "a|b|c|1|1000|0|3"] {
            let junk = Stored {
                now: 0,
                expiry: -1,
                leased: Some(0),
                value: Some(junk.into()),
            };
            assert!(junk.word(&pair).is_err(), "{junk:?}");
        }
    }

    #[test]
    fn a_bucket_moved_to_another_clock_is_read_on_it() {
        let tb = Spec::bucket(&TokenBucket::new(1, Duration::from_millis(1), 9).unwrap()).unwrap();
        // A TAT of 5 000 123.456 ms: written to expire at 5 000 124 ms.
        let stored = |expiry| Stored {
            now: 0,
            expiry,
            leased: Some(0),
            value: Some("tb:1000:9|0:1|me.1|5000123456|0".into()),
        };
        let word = |expiry| stored(expiry).word(&tb).unwrap().unwrap();
        let at = 5_000_123_456_000;
        // Where it was written (or within a ms of rounding), or with no
        // expiry: as it is.
        for expiry in [5_000_124, 5_000_123, 5_000_125, -1] {
            assert_eq!(word(expiry), at, "{expiry}");
        }
        // A node 2 s ahead, or behind: the TAT carried by as much.
        assert_eq!(word(5_002_124), at + 2_000_000_000);
        assert_eq!(word(4_998_124), at - 2_000_000_000);
        // The earliest an expiry carries it: within the ms it expires.
        assert_eq!(word(1), 456_000);
        // A pair's halves are not carried.
        let fw = Spec::fixed(&FixedWindow::new(5, Duration::from_secs(60)).unwrap()).unwrap();
        let pair = Spec::pair(&tb, &fw).unwrap();
        let value = Stored {
            now: 0,
            expiry: 9_999_999,
            leased: Some(0),
            value: Some(format!("{}|0:1|me.1|5000123456|0|3|1", pair.stamp())),
        };
        assert_eq!(
            value.word(&pair).unwrap().unwrap() & u128::from(u64::MAX),
            at
        );
    }

    #[test]
    fn values_differing_only_in_their_writer_hold_the_same_state() {
        let a = "tb:7:5|0:3|w1.17|1000|5";
        assert!(super::same_but_writer(a, "tb:7:5|0:3|w2.4|1000|5"));
        assert!(super::same_but_writer(a, a));
        // Another state, settings, generation or number of fields.
        assert!(!super::same_but_writer(a, "tb:7:5|0:3|w1.17|1000|6"));
        assert!(!super::same_but_writer(a, "tb:7:6|0:3|w1.17|1000|5"));
        assert!(!super::same_but_writer(a, "tb:7:5|0:4|w1.17|1000|5"));
        assert!(!super::same_but_writer(a, "tb:7:5|0:3|w1.17|1000"));
        assert!(!super::same_but_writer(a, "tb:7:5|0:3|w1.17|1000|5|0"));
    }

    #[test]
    fn a_value_names_its_linger_or_none_as_the_scripts_read_it() {
        let at = |value: &str| Stored {
            now: 0,
            expiry: -1,
            leased: None,
            value: Some(value.to_owned()),
        };
        let v = at("tb:7:5|2:3:60000|w1.17|1000|5");
        assert_eq!(v.linger(), 60_000);
        assert_eq!(v.writer(), (Some("w1"), Some("2:3")));
        // An earlier release's: none, its generation as it was.
        let old = at("tb:7:5|2:3|w1.17|1000|5");
        assert_eq!((old.linger(), old.writer().1), (0, Some("2:3")));
        // Anything but three runs of digits names none; more than the
        // longest a limiter writes, the longest.
        for junk in ["2:3:", "2:3:6x", ":3:6", "2:3:6:7", "2:3:-6"] {
            assert_eq!(
                at(&format!("tb:7:5|{junk}|w1.17|1000|5")).linger(),
                0,
                "{junk}"
            );
        }
        let long = at("tb:7:5|2:3:99999999999999999999999|w1.17|1000|5");
        assert_eq!(long.linger(), LINGER_MAX_MS);
        assert_eq!(Stored { value: None, ..v }.linger(), 0);
    }
}
