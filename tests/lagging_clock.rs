//! What a thread whose clock lags can do to a client.
//!
//! A check reads the clock and then acts on the client's state, so the
//! reading it acts on may lie behind true time: that core's counter lags
//! another core's, or the thread read its clock and was held up before its
//! compare-and-swap. To the limiter the two are the same thing. The test
//! drives one client with checks at non-decreasing true times
//! `t₁ ≤ t₂ ≤ …`; each check reads `rᵢ = tᵢ − λᵢ` with `0 ≤ λᵢ ≤ L` (a
//! lagging thread) or `rᵢ = tᵢ` (the accurate thread), so readings may go
//! backwards from one check to the next. Every statement below is checked
//! against the exact models of `tests/common/mod.rs` (integer arithmetic),
//! check by check, for all four algorithms.
//!
//! **Exact where nothing lags.** A check whose reading is no earlier than
//! any reading admitted so far (every check of the accurate thread, and so
//! every check when `L = 0`) gets exactly the exact model's decision,
//! remaining quota and retry-after at its reading, on the history admitted
//! so far, whatever lagging checks did before it.
//!
//! **Never over-admits, in this sense.** Move each admission back in time by
//! at most the lag, to an instant `sᵢ ∈ [tᵢ − L, tᵢ]`: the admitted requests
//! at those instants form a history that the exact model admits in full.
//! Which instants depends on the algorithm:
//!
//! - token bucket, fixed window, sliding window counter: `sᵢ` = the latest
//!   reading among the admissions so far, this one included. Fed the
//!   admissions at those (non-decreasing) instants, the exact model admits
//!   every one and ends in the limiter's own state.
//! - sliding window log and token bucket: `sᵢ` = the admission's own
//!   reading, the admissions taken in time order.
//!
//! The fixed window and the sliding window counter fail the second form (a
//! reading from before the recorded window is counted in that window, not
//! at its own instant), and the log fails the first (a lagging admission's
//! slot frees a window after its own reading, not after the latest one);
//! asserting either makes the test fail.
//!
//! Relative to true time, then, the limiter admits in any interval `[a, b]`
//! at most what the exact model admits over `[a − L, b]`: for the bucket
//! `capacity + ⌊(b − a + L)·rate⌋` tokens; for the fixed window `limit` per
//! aligned window that `[a − L, b]` touches; for the log `limit` per `W` of
//! it, `limit · ⌈(b − a + L + 1)/W⌉`. The sliding window counter keeps at
//! most `limit` in each aligned window that `[a − L, b]` touches (a looser
//! bound than its exact model's; the shifted history above is its tight
//! statement). A lag of `L` lengthens every interval by `L` and does
//! nothing more, and the `*_bound_is_reached` tests meet each bound exactly
//! with a lag, so none of it is slack.
//!
//! **Denies for at most the lag.** A check denied at a reading that lags by
//! `λ` reports a wait `d` with `d* ≤ d ≤ d* + λ` and `d > 0`, where `d*` is
//! the exact model's wait at the true instant on the history admitted so
//! far (0 if the exact model would admit there). So a request denied only
//! because of the lag is told to wait at most `λ`; any other wait is
//! overstated by at most `λ` and never understated (waiting `d` from the
//! true instant of the denial always suffices); and the denial reports no
//! more remaining quota than the exact model at the true instant. When
//! `d* > 0` the wait ends exactly where the exact model's does: the
//! bucket's is `d* + λ` (`a_lagging_denial_overstates_the_wait_by_the_lag`),
//! the log's `d* + (t − max(r, floor))`.
//!
//! Mutations of the algorithms that this test catches (each tried on a
//! scratch copy): a bucket that resynchronises (TAT ← the reading) on a
//! reading more than a full refill behind its TAT; a bucket that tells such
//! a reading to wait for its whole debt; windows that treat a reading from
//! before the recorded window as a new window, or keep its offset, or judge
//! it at the recorded window's end; a fixed window that denies such a
//! reading until the next window; a log that frees a slot stamped more than
//! one window after the reading.

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

mod common;

use std::time::Duration;

use common::{BucketConfig, Fixed, Log, Model, Sliding, Subject, WindowConfig};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::ManualClock;

const SEC: u64 = 1_000_000_000;

/// One check: the true instant, the reading its thread took, and its cost.
#[derive(Clone, Copy, Debug)]
struct Check {
    t: u64,
    reading: u64,
    cost: u64,
}

/// What holds for one algorithm under a lagging clock.
trait Lagged: Subject {
    /// The admitted requests, each placed at the latest reading among the
    /// admissions so far, are a history the exact model admits in full,
    /// and that history is the limiter's state.
    const AT_LATEST: bool;
    /// The admitted requests, each placed at its own (judged) reading and
    /// taken in time order, are a history the exact model admits in full.
    const AT_OWN_READING: bool;
    /// Whether `judged` is the instant every check is judged at (the
    /// windows judge a reading from before the recorded window at that
    /// window's start, which the test does not model).
    const JUDGED: bool;
    /// The reading a check is judged at, given the reading at which the
    /// client was first seen.
    fn judged(&self, reading: u64, first: u64) -> u64 {
        let _ = first;
        reading
    }
    /// The most the exact model admits over `[from, to]` (true instants).
    fn most_admitted(&self, from: u64, to: u64) -> u64;
}

impl Lagged for BucketConfig {
    const JUDGED: bool = true;
    const AT_LATEST: bool = true;
    const AT_OWN_READING: bool = true;
    fn most_admitted(&self, from: u64, to: u64) -> u64 {
        self.admission_bound(to - from)
    }
}

/// `limit` per aligned window that `[from, to]` touches.
fn per_window(c: &WindowConfig, from: u64, to: u64) -> u64 {
    c.limit * (to / c.window - from / c.window + 1)
}

impl Lagged for Fixed {
    const JUDGED: bool = false;
    const AT_LATEST: bool = true;
    const AT_OWN_READING: bool = false;
    fn most_admitted(&self, from: u64, to: u64) -> u64 {
        per_window(&self.0, from, to)
    }
}

impl Lagged for Sliding {
    const JUDGED: bool = false;
    const AT_LATEST: bool = true;
    const AT_OWN_READING: bool = false;
    fn most_admitted(&self, from: u64, to: u64) -> u64 {
        per_window(&self.0, from, to)
    }
}

impl Lagged for Log {
    const JUDGED: bool = true;
    const AT_LATEST: bool = false;
    const AT_OWN_READING: bool = true;
    fn most_admitted(&self, from: u64, to: u64) -> u64 {
        self.0.limit * (to - from + 1).div_ceil(self.0.window)
    }
}

/// Feeds `history` (instant, cost) to a fresh exact model in time order;
/// the index of the first request it refuses, if any.
fn replay<S: Subject>(subject: &S, history: &[(u64, u64)]) -> Result<S::Model, usize> {
    let mut sorted: Vec<(usize, (u64, u64))> = history.iter().copied().enumerate().collect();
    sorted.sort_by_key(|&(_, (at, _))| at);
    let mut model = subject.model();
    for (i, (at, cost)) in sorted {
        if !model.admit(at, cost) {
            return Err(i);
        }
    }
    Ok(model)
}

/// Runs `checks` through one limiter and asserts every property of the
/// module documentation. Returns the true instants and costs of the
/// admissions.
fn run<S: Lagged>(
    subject: &S,
    lag_max: u64,
    checks: &[Check],
) -> Result<Vec<(u64, u64)>, TestCaseError> {
    let clock = ManualClock::new();
    let limiter = subject.limiter(clock.clone());
    // The exact model fed every admission at the latest admitted reading.
    let mut at_latest = subject.model();
    let mut latest: Option<u64> = None;
    // Every admission's true instant and cost, and its (judged) reading and
    // cost.
    let mut admitted: Vec<(u64, u64)> = Vec::new();
    let mut own_readings: Vec<(u64, u64)> = Vec::new();
    let mut first = None;
    for (i, c) in checks.iter().enumerate() {
        let ctx = || format!("check {i} {c:?}, L = {lag_max}, {subject:?}");
        let lag = c.t - c.reading;
        prop_assert!(lag <= lag_max);
        let first = *first.get_or_insert(c.reading);
        let judged = subject.judged(c.reading, first);

        // The exact model on the admitted history, at the true instant.
        let exact = if S::AT_LATEST {
            at_latest.clone()
        } else {
            replay(subject, &own_readings).expect("checked at each admission")
        };
        let exact_wait = exact.retry_after(c.t, c.cost);

        clock.set(Duration::from_nanos(c.reading));
        let d = limiter.check_n(&0, c.cost).unwrap();
        let wait = u64::try_from(d.retry_after().as_nanos()).unwrap();

        if latest.is_none_or(|m| m <= c.reading) {
            // No admission so far was made at a later reading (the accurate
            // thread always, a lagging one sometimes): exactly the exact
            // model at this reading.
            let mut after = exact.clone();
            let admits = after.admit(c.reading, c.cost);
            prop_assert_eq!(d.is_allowed(), admits, "decision, {}", ctx());
            prop_assert_eq!(
                d.remaining(),
                after.remaining(c.reading),
                "remaining, {}",
                ctx()
            );
            let expected_wait = if admits {
                0
            } else {
                exact.retry_after(c.reading, c.cost)
            };
            prop_assert_eq!(wait, expected_wait, "retry_after, {}", ctx());
        }

        if d.is_allowed() {
            admitted.push((c.t, c.cost));
            let s = latest.map_or(c.reading, |m| m.max(c.reading));
            prop_assert!(c.t - lag_max <= s && s <= c.t, "shift, {}", ctx());
            latest = Some(s);
            if S::AT_LATEST {
                prop_assert!(
                    at_latest.admit(s, c.cost),
                    "over-admitted: the exact model refuses it at the latest reading {s}, {}",
                    ctx()
                );
            }
            own_readings.push((judged, c.cost));
            if S::AT_OWN_READING {
                let refused = replay(subject, &own_readings).err();
                prop_assert!(
                    refused.is_none(),
                    "over-admitted: at their own readings the exact model refuses admission {:?}, {}",
                    refused,
                    ctx()
                );
            }
        } else {
            // Denied: the wait is the exact one at the true instant, plus at
            // most the lag; never zero.
            prop_assert!(wait > 0, "denied with no wait, {}", ctx());
            prop_assert!(
                exact_wait <= wait && wait <= exact_wait + lag,
                "retry_after {wait} ns, exact {exact_wait} ns, lag {lag} ns, {}",
                ctx()
            );
            if S::JUDGED && exact_wait > 0 {
                // Waiting from the instant it was judged at, to the very
                // instant the exact model admits.
                prop_assert_eq!(wait, exact_wait + (c.t - judged), "retry_after, {}", ctx());
            }
            prop_assert!(
                d.remaining() <= exact.remaining(c.t),
                "remaining {} > the exact model's {}, {}",
                d.remaining(),
                exact.remaining(c.t),
                ctx()
            );
        }
    }

    // Relative to true time: at most the exact model's most over [a − L, b].
    for (i, &(a, _)) in admitted.iter().enumerate() {
        let mut units = 0;
        for &(b, cost) in &admitted[i..] {
            units += cost;
            let bound = subject.most_admitted(a.saturating_sub(lag_max), b);
            prop_assert!(
                units <= bound,
                "{units} admitted over true [{a}, {b}], L = {lag_max}: more than {bound}, {subject:?}"
            );
        }
    }
    Ok(admitted)
}

/// Gaps of true time between checks.
#[derive(Clone, Copy, Debug)]
enum Gap {
    Nanos(u64),
    /// Thousandths of the algorithm's scale (a full refill, a window).
    Scale(u64),
}

/// One check before it is placed: its gap, its lag (thousandths of `L`,
/// `None` for the accurate thread) and its cost.
type Raw = (Gap, Option<u64>, u64);

fn raw_checks() -> impl Strategy<Value = Vec<Raw>> {
    let gap = prop_oneof![
        3 => Just(Gap::Nanos(0)),
        2 => (1..4u64).prop_map(Gap::Nanos),
        3 => (0..200u64).prop_map(Gap::Scale),
        2 => (0..2_500u64).prop_map(Gap::Scale),
    ];
    let lag = prop_oneof![
        3 => Just(None),
        1 => Just(Some(1_000)),
        2 => (0..=1_000u64).prop_map(Some),
    ];
    prop::collection::vec((gap, lag, 1..=5u64), 1..60)
}

/// The largest lag: none, a few ns, or up to twice the scale.
#[derive(Clone, Copy, Debug)]
enum LagMax {
    Zero,
    Nanos(u64),
    Scale(u64),
}

fn lag_bound() -> impl Strategy<Value = LagMax> {
    prop_oneof![
        1 => Just(LagMax::Zero),
        1 => (1..=3u64).prop_map(LagMax::Nanos),
        3 => (1..=2_000u64).prop_map(LagMax::Scale),
    ]
}

/// Places the checks in true time from `start` (thousandths of the scale,
/// so that windows are met at any phase) and derives each reading.
fn place(scale: u64, capacity: u64, lag_max: LagMax, start: u64, raw: &[Raw]) -> (u64, Vec<Check>) {
    let of_scale = |k: u64| (u128::from(scale) * u128::from(k) / 1_000) as u64;
    let l = match lag_max {
        LagMax::Zero => 0,
        LagMax::Nanos(n) => n,
        LagMax::Scale(k) => of_scale(k),
    };
    let mut t = l + of_scale(start);
    let checks = raw
        .iter()
        .map(|&(gap, lag, cost)| {
            t += match gap {
                Gap::Nanos(n) => n,
                Gap::Scale(k) => of_scale(k),
            };
            let lag = lag.map_or(0, |k| l * k / 1_000);
            Check {
                t,
                reading: t - lag,
                cost: cost.min(capacity),
            }
        })
        .collect();
    (l, checks)
}

/// Token buckets whose interval is a whole number of ns (the exact model
/// then decides exactly as the limiter), from 1 ns to 1 s per token.
fn bucket() -> impl Strategy<Value = BucketConfig> {
    (
        1..=4u64,
        prop_oneof![1..=50u64, 1_000..=2_000u64, Just(SEC)],
        1..=5u64,
    )
        .prop_map(|(tokens, interval, capacity)| BucketConfig {
            tokens,
            per: tokens * interval,
            capacity,
        })
}

fn window() -> impl Strategy<Value = WindowConfig> {
    (
        1..=5u64,
        prop_oneof![100..=200u64, 201..=5_000u64, Just(SEC)],
    )
        .prop_map(|(limit, window)| WindowConfig { limit, window })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn token_bucket_under_a_lagging_clock(
        config in bucket(), l in lag_bound(), start in 0..2_000u64, raw in raw_checks(),
    ) {
        let scale = config.capacity * (config.per / config.tokens);
        let (l, checks) = place(scale, config.capacity, l, start, &raw);
        run(&config, l, &checks)?;
    }

    #[test]
    fn fixed_window_under_a_lagging_clock(
        config in window(), l in lag_bound(), start in 0..2_000u64, raw in raw_checks(),
    ) {
        let (l, checks) = place(config.window, config.limit, l, start, &raw);
        run(&Fixed(config), l, &checks)?;
    }

    #[test]
    fn sliding_window_counter_under_a_lagging_clock(
        config in window(), l in lag_bound(), start in 0..2_000u64, raw in raw_checks(),
    ) {
        let (l, checks) = place(config.window, config.limit, l, start, &raw);
        run(&Sliding(config), l, &checks)?;
    }

    #[test]
    fn sliding_window_log_under_a_lagging_clock(
        config in window(), l in lag_bound(), start in 0..2_000u64, raw in raw_checks(),
    ) {
        let (l, checks) = place(config.window, config.limit, l, start, &raw);
        run(&Log(config), l, &checks)?;
    }
}

/// Runs `checks` (true instant, lag, cost) and returns the units admitted,
/// after asserting every property.
fn admitted_units<S: Lagged>(subject: &S, lag_max: u64, checks: &[(u64, u64, u64)]) -> u64 {
    let checks: Vec<Check> = checks
        .iter()
        .map(|&(t, lag, cost)| Check {
            t,
            reading: t - lag,
            cost,
        })
        .collect();
    let admitted = run(subject, lag_max, &checks).unwrap_or_else(|e| panic!("{e}"));
    admitted.iter().map(|&(_, cost)| cost).sum()
}

/// Capacity 3, a token per µs, L = 2 µs. At true 10 µs a lagging thread
/// reads 8 µs and takes the full bucket (3); the accurate thread at 10 µs
/// then finds 2 µs of refill (2 more). 5 in an instant: the bound for
/// `[a − L, b]`, 2 more than the bound for `[a, b]`.
#[test]
fn token_bucket_bound_is_reached() {
    const US: u64 = 1_000;
    let config = BucketConfig {
        tokens: 1,
        per: US,
        capacity: 3,
    };
    let l = 2 * US;
    let t = 10 * US;
    let units = admitted_units(&config, l, &[(t, l, 3), (t, 0, 1), (t, 0, 1), (t, 0, 1)]);
    assert_eq!(units, config.most_admitted(t - l, t));
    assert_eq!(units, config.most_admitted(t, t) + 2);
}

/// Limit 2, W = 1 000 ns, L = 1 ns: at true 3 000 a lagging thread reads
/// 2 999 and fills window 2; the accurate thread then fills window 3. 4 in
/// an instant: two windows' worth, as `[2 999, 3 000]` touches two.
#[test]
fn fixed_window_bound_is_reached() {
    let config = Fixed(WindowConfig {
        limit: 2,
        window: 1_000,
    });
    let units = admitted_units(&config, 1, &[(3_000, 1, 2), (3_000, 0, 2), (3_000, 0, 1)]);
    assert_eq!(units, config.most_admitted(2_999, 3_000));
    assert_eq!(units, 2 * config.most_admitted(3_000, 3_000));
}

/// Limit 2, W = 1 000 ns, L = 1 000 ns: at true 3 000 a lagging thread reads
/// 2 000 and fills window 2 (nothing before it); the accurate thread, whose
/// window 3 weighs window 2 by `(W − e)/W`, is denied at 3 000, admitted at
/// 3 500 and again at 3 999. 4 within `[3 000, 3 999]`, which without the
/// lag holds at most 2.
#[test]
fn sliding_window_counter_bound_is_reached() {
    let config = Sliding(WindowConfig {
        limit: 2,
        window: 1_000,
    });
    let units = admitted_units(
        &config,
        1_000,
        &[
            (3_000, 1_000, 2),
            (3_000, 0, 1),
            (3_500, 0, 1),
            (3_999, 0, 1),
        ],
    );
    assert_eq!(units, config.most_admitted(2_000, 3_999));
    assert_eq!(units, 2 * config.most_admitted(3_000, 3_999));
}

/// Limit 2, W = 1 000 ns, L = 300 ns: at true 5 000 a lagging thread reads
/// 4 700 and takes both slots, which free at 5 700; the accurate thread
/// takes them again at 5 700. 4 within 701 ns of true time, where no lag
/// allows 2; `[4 700, 5 700]` is 1 001 ns, so the exact model allows 4.
#[test]
fn sliding_window_log_bound_is_reached() {
    let config = Log(WindowConfig {
        limit: 2,
        window: 1_000,
    });
    let units = admitted_units(
        &config,
        300,
        &[(5_000, 300, 2), (5_700, 0, 2), (5_700, 0, 1)],
    );
    assert_eq!(units, config.most_admitted(4_700, 5_700));
    assert_eq!(units, 2 * config.most_admitted(5_000, 5_700));
}

/// The wait a lagging denial reports, against the truth: the bucket's is
/// the exact wait plus the whole lag.
#[test]
fn a_lagging_denial_overstates_the_wait_by_the_lag() {
    let clock = ManualClock::new();
    let config = BucketConfig {
        tokens: 1,
        per: 1_000,
        capacity: 1,
    };
    let limiter = config.limiter(clock.clone());
    clock.set(Duration::from_nanos(10_000));
    assert!(limiter.allow_request(&0)); // full again at 11 000
                                        // True 10 600, read 10 400: the truth is 400 ns, the lagging thread says
                                        // 600 ns (read + 600 = 11 000).
    clock.set(Duration::from_nanos(10_400));
    let d = limiter.check(&0);
    assert!(d.is_denied());
    assert_eq!(d.retry_after(), Duration::from_nanos(600));
    // True 11 100, read 10 900: the exact model admits; the lag alone
    // denies, for 100 ns, within the 200 ns lag.
    clock.set(Duration::from_nanos(10_900));
    assert_eq!(limiter.check(&0).retry_after(), Duration::from_nanos(100));
}
