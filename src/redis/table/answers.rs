//! The `metrics` feature's count of a Redis limiter's answers, by the
//! path that gave each and its outcome, and its publication as series
//! (`shared::metrics` publishes the rest).

use std::sync::{Arc, Mutex};

use crate::redis::wire::guard::RedisStats;
use crate::telemetry::{self, Counts, Name};

/// Checks, by `limiter`, `answered_by` and `outcome`.
const CHECKS: &str = "tollgate_redis_checks_total";
/// What answered a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// A round trip: Redis decided.
    Redis = 0,
    /// The deny shortcut, without a round trip.
    Shortcut = 1,
    /// [`FailPolicy::FailOpen`](crate::redis::FailPolicy::FailOpen), Redis
    /// unreachable or slow.
    FailOpen = 2,
    /// Refused with an error, Redis unreachable or slow
    /// ([`FailPolicy::FailClosed`](crate::redis::FailPolicy::FailClosed)).
    FailClosed = 3,
    /// Refused with an error about the client's key or the request (a
    /// value the limiter cannot read, an error reply), Redis up.
    KeyRefused = 4,
    /// The in-process limiter of
    /// [`FailPolicy::Local`](crate::redis::FailPolicy::Local).
    Local = 5,
    /// The client's lease, without a round trip.
    Lease = 6,
}

/// How a check was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Admitted = 0,
    Denied = 1,
    /// An error, no decision.
    Refused = 2,
}

const PATHS: [&str; 7] = [
    "redis",
    "shortcut",
    "fail_open",
    "fail_closed",
    "key_refused",
    "local",
    "lease",
];
const ANSWERS: [&str; 3] = ["admitted", "denied", "refused"];
/// The `(path, answer)` pairs a check can end in: each is published, at 0
/// until it happens, so both sides of every ratio exist.
const PAIRS: [(Path, Outcome); 12] = [
    (Path::Redis, Outcome::Admitted),
    (Path::Redis, Outcome::Denied),
    (Path::Shortcut, Outcome::Denied),
    (Path::FailOpen, Outcome::Admitted),
    (Path::FailOpen, Outcome::Denied),
    (Path::FailClosed, Outcome::Refused),
    (Path::KeyRefused, Outcome::Refused),
    (Path::Local, Outcome::Admitted),
    (Path::Local, Outcome::Denied),
    (Path::Local, Outcome::Refused),
    (Path::Lease, Outcome::Admitted),
    (Path::Lease, Outcome::Denied),
];
/// Counters: `path * 3 + answer`, then the units beyond the first that
/// admitted and denied checks asked for.
const N: usize = 23;
const EXTRA: usize = 21;

/// A Redis limiter's answers and what it last published.
pub(crate) struct Answers {
    /// Shared with the publishing thread, which publishes them (the
    /// [`RedisStats`] and the breaker, in the limiter, it cannot reach).
    pub(crate) counts: Arc<Counts<N>>,
    /// The [`RedisStats`] last published; taken by publishers only.
    pub(crate) stats: Mutex<RedisStats>,
}

impl Answers {
    pub(crate) fn new() -> Self {
        Self {
            counts: Counts::new(true, (), publish_checks),
            stats: Mutex::new(RedisStats::default()),
        }
    }

    /// Counts a check on `cost` units answered by `path` with `answer`.
    pub(crate) fn count(&self, path: Path, answer: Outcome, cost: u64) {
        let extra = match answer {
            Outcome::Refused => 0,
            _ => cost.saturating_sub(1),
        };
        let i = path as usize * 3 + answer as usize;
        self.counts
            .tally
            .count(i, EXTRA + (answer as usize).min(1), extra);
    }
}

/// Adds what `counts` counted since the last publication to the checks',
/// decisions' and units' counters of `name`; waits for another publisher
/// if `wait`, else leaves it to that one (and answers false).
pub(crate) fn publish_checks(counts: &Counts<N>, name: &Name, wait: bool) -> bool {
    let Some(deltas) = counts.deltas(wait) else {
        return false;
    };
    for (path, answer) in PAIRS {
        let i = path as usize * 3 + answer as usize;
        telemetry::counter(
            CHECKS,
            name,
            &[
                ("answered_by", PATHS[path as usize]),
                ("outcome", ANSWERS[answer as usize]),
            ],
        )
        .increment(deltas[i]);
    }
    for (answer, outcome) in [(Outcome::Admitted, "admitted"), (Outcome::Denied, "denied")] {
        let a = answer as usize;
        let decisions = (0..PATHS.len())
            .map(|path| deltas[path * 3 + a])
            .fold(0, u64::wrapping_add);
        telemetry::counter(telemetry::DECISIONS, name, &[("outcome", outcome)])
            .increment(decisions);
        telemetry::counter(telemetry::UNITS, name, &[("outcome", outcome)])
            .increment(decisions.wrapping_add(deltas[EXTRA + a]));
    }
    true
}
