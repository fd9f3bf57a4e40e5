//! Exact reference models of the algorithms, and the glue that runs a
//! limiter and a model side by side. Shared by the integration tests.
//!
//! Each model follows the seed's Python logic (`shared/seed`), with exact
//! integer or rational arithmetic instead of floats, windows aligned to the
//! clock's zero, and the crate's documented generalisation to a cost of `n`
//! (all `n` unit requests made at one instant must pass).

#![allow(dead_code, unused_macros)] // each test binary uses its own part

/// Runs the generic test `$f` once for each algorithm's subject, as returned
/// by the calling file's `subjects()`: (bucket, sliding, fixed, log).
macro_rules! for_each_subject {
    ($f:ident) => {{
        let (bucket, sliding, fixed, log) = subjects();
        $f(&bucket);
        $f(&sliding);
        $f(&fixed);
        $f(&log);
    }};
}

pub mod strategies;

use std::time::Duration;

use tollgate::{
    Algorithm, Both, Builder, Decision, DirectLimiter, FixedWindow, Limiter, ManualClock,
    SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};

/// One client's state in an exact model.
pub trait Model: Clone + std::fmt::Debug {
    /// Admits `cost` at `now` (never earlier than the last call's `now`).
    fn admit(&mut self, now: u64, cost: u64) -> bool;

    /// The largest cost ever admissible.
    fn capacity(&self) -> u64;

    /// The limit a decision reports at `now`: the capacity, or for a pair
    /// the capacity of the limit that binds.
    fn limit(&self, _now: u64) -> u64 {
        self.capacity()
    }

    /// How many unit requests would pass now, one after another.
    fn remaining(&self, now: u64) -> u64 {
        let mut probe = self.clone();
        let mut n = 0;
        while probe.admit(now, 1) {
            n += 1;
        }
        n
    }

    /// The first instant at or after `now` at which `cost` would pass, found
    /// by search: admissibility is monotone in time for every algorithm
    /// here, so a binary search finds the exact instant.
    fn retry_after(&self, now: u64, cost: u64) -> u64 {
        if self.clone().admit(now, cost) {
            return 0;
        }
        let (mut lo, mut hi) = (0u64, 1u64);
        while !self.clone().admit(now + hi, cost) {
            lo = hi;
            hi *= 2;
        }
        // Invariant: fails at now + lo, passes at now + hi.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.clone().admit(now + mid, cost) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }
}

/// The seed's token bucket in exact arithmetic: tokens are counted in units
/// of `1 / per` of a token, so that refill by `elapsed · tokens / per` is a
/// whole number of units.
#[derive(Clone, Debug)]
pub struct BucketModel {
    tokens_per_period: u128,
    per: u128,
    capacity: u64,
    /// Tokens held, times `per`: below zero after a move to a smaller
    /// bucket, until the tokens spent have refilled.
    scaled: i128,
    last_refill: u64,
}

impl BucketModel {
    pub fn new(tokens: u64, per: u64, capacity: u64) -> Self {
        Self {
            tokens_per_period: tokens.into(),
            per: per.into(),
            capacity,
            scaled: i128::from(capacity) * i128::from(per),
            last_refill: 0,
        }
    }
}

impl Model for BucketModel {
    fn admit(&mut self, now: u64, cost: u64) -> bool {
        if now > self.last_refill {
            let refill = i128::from(now - self.last_refill) * self.tokens_per_period as i128;
            let cap = i128::from(self.capacity) * self.per as i128;
            self.scaled = (self.scaled + refill).min(cap);
            self.last_refill = now;
        }
        let need = i128::from(cost) * self.per as i128;
        if self.scaled >= need {
            self.scaled -= need;
            true
        } else {
            false
        }
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }
}

impl BucketModel {
    /// This client's state carried over to the quota of `to` (a fresh
    /// model) at `now`, by the move rule (`Limiter::set_quota`, "as is"):
    /// the tokens it holds are kept (rounded down to whole nanoseconds of
    /// the new refill), at most the new capacity; a full bucket holds the
    /// old capacity and the new rate's refill since it was full toward a
    /// larger one, and no more than a bucket empty when it was, refilling
    /// at the new rate, would hold before `now`; a bucket in debt
    /// stays empty until the same instant. A client that never made a
    /// request stays one. Token intervals must be whole nanoseconds.
    pub fn convert(&self, now: u64, to: &Self) -> Self {
        let rate = self.tokens_per_period as i128;
        let cap = i128::from(self.capacity) * self.per as i128;
        let interval = self.per as i128 / rate;
        let to_rate = to.tokens_per_period as i128;
        let to_interval = to.per as i128 / to_rate;
        let now = i128::from(now);
        // When this bucket is (or was) full, and when it was (or will be)
        // empty.
        let full_at = i128::from(self.last_refill) + (cap - self.scaled + rate - 1) / rate;
        if full_at <= 0 {
            // Never made a request: stays so.
            return to.clone();
        }
        let empty_at = full_at - i128::from(self.capacity) * interval;
        let to_fill = i128::from(to.capacity) * to_interval;
        // When the new bucket is full.
        let to_full_at = if now >= full_at {
            let more = (i128::from(to.capacity) - i128::from(self.capacity)).max(0) * to_interval;
            (full_at + more)
                .max((empty_at + to_fill).min(now))
                .min(now + to_fill)
        } else if now < empty_at {
            empty_at + to_fill
        } else {
            let held = (now - empty_at) * to_interval / interval;
            now + to_fill - held.min(to_fill)
        };
        // A state with a history never becomes the fresh one (full from 0).
        let to_full_at = to_full_at.max(1);
        let mut out = to.clone();
        if to_full_at <= now {
            out.scaled = i128::from(to.capacity) * to.per as i128;
            out.last_refill = u64::try_from(to_full_at.max(0)).unwrap();
        } else {
            out.scaled = i128::from(to.capacity) * to.per as i128 - (to_full_at - now) * to_rate;
            out.last_refill = u64::try_from(now).unwrap();
        }
        out
    }
}

impl FixedModel {
    /// Carried over to `to`'s quota at `now`, by the move rule: a client
    /// that counted nothing since the new window began running at `now`
    /// began is fresh there; otherwise what it has left in the window
    /// running at `now` (at most the new limit) is what it has left in the
    /// new quota's window running at `now`.
    pub fn convert(&self, now: u64, to: &Self) -> Self {
        if self.fresh {
            // Never made a request: stays so.
            return to.clone();
        }
        let here = now / to.window;
        // A state with nothing counted was left so by a move: it may hold
        // requests of its window.
        let idle_at = (self.index + 1) * self.window;
        if idle_at <= here * to.window {
            // Fresh there: as the crate writes it, the window before the
            // first new boundary not before `idle_at` full (so that a
            // reading behind finds no more than the old state left).
            return Self {
                index: idle_at.div_ceil(to.window) - 1,
                count: to.limit,
                fresh: false,
                ..to.clone()
            };
        }
        let count = {
            let used = if now / self.window == self.index {
                self.count
            } else {
                0
            };
            let left = (self.limit - used).min(to.limit);
            to.limit - left
        };
        Self {
            index: here,
            count,
            fresh: false,
            ..to.clone()
        }
    }
}

impl SlidingModel {
    /// Carried over to `to`'s quota at `now`, by the move rule: a client
    /// whose counts weigh nothing since the new window began running at
    /// `now` began is fresh there; otherwise the whole requests the
    /// estimate `curr + prev·(W−e)/W` leaves (at most the new limit) are
    /// what it has left in the new quota's window running at `now`, with
    /// nothing before it.
    pub fn convert(&self, now: u64, to: &Self) -> Self {
        if self.fresh {
            // Never made a request: stays so.
            return to.clone();
        }
        let here = now / to.window * to.window;
        // Empty counts were left so by a move: they may hold requests of
        // their window.
        let idle_at = if self.curr > 0 || self.prev == 0 {
            self.start + 2 * self.window
        } else {
            self.start + self.window
        };
        if idle_at <= here {
            // Fresh there: as the crate writes it, a full window before the
            // first new boundary not before `idle_at`.
            return Self {
                start: idle_at.div_ceil(to.window) * to.window - to.window,
                prev: to.limit,
                fresh: false,
                ..to.clone()
            };
        }
        let mut m = self.clone();
        let elapsed = now - m.start;
        if elapsed >= m.window {
            let passed = elapsed / m.window;
            m.prev = if passed == 1 { m.curr } else { 0 };
            m.curr = 0;
            m.start += passed * m.window;
        }
        let w = i128::from(m.window);
        let room = i128::from(m.limit) * w
            - i128::from(m.curr) * w
            - i128::from(m.prev) * (w - i128::from(now - m.start));
        let left = (room.max(0) / w).min(i128::from(to.limit)) as u64;
        Self {
            prev: 0,
            curr: to.limit - left,
            start: here,
            fresh: false,
            ..to.clone()
        }
    }
}

/// The seed's sliding window counter with windows aligned to zero, and the
/// weighted estimate compared exactly: `curr + (n-1) + prev·(W−e)/W < limit`.
#[derive(Clone, Debug)]
pub struct SlidingModel {
    limit: u64,
    window: u64,
    prev: u64,
    curr: u64,
    start: u64,
    /// Never admitted a request: a move leaves it so.
    fresh: bool,
}

impl SlidingModel {
    pub fn new(limit: u64, window: u64) -> Self {
        Self {
            limit,
            window,
            prev: 0,
            curr: 0,
            start: 0,
            fresh: true,
        }
    }
}

impl Model for SlidingModel {
    fn admit(&mut self, now: u64, cost: u64) -> bool {
        let mut elapsed = now - self.start;
        if elapsed >= self.window {
            let passed = elapsed / self.window;
            self.prev = if passed == 1 { self.curr } else { 0 };
            self.curr = 0;
            self.start += passed * self.window;
            elapsed = now - self.start;
        }
        let w = u128::from(self.window);
        let lhs = u128::from(self.curr + cost - 1) * w
            + u128::from(self.prev) * (w - u128::from(elapsed));
        if lhs < u128::from(self.limit) * w {
            self.curr += cost;
            self.fresh = false;
            true
        } else {
            false
        }
    }

    fn capacity(&self) -> u64 {
        self.limit
    }
}

/// A fixed window counter with windows aligned to zero.
#[derive(Clone, Debug)]
pub struct FixedModel {
    limit: u64,
    window: u64,
    index: u64,
    count: u64,
    /// Never admitted a request: a move leaves it so.
    fresh: bool,
}

impl FixedModel {
    pub fn new(limit: u64, window: u64) -> Self {
        Self {
            limit,
            window,
            index: 0,
            count: 0,
            fresh: true,
        }
    }
}

impl Model for FixedModel {
    fn admit(&mut self, now: u64, cost: u64) -> bool {
        let index = now / self.window;
        if index != self.index {
            self.index = index;
            self.count = 0;
        }
        if self.count + cost <= self.limit {
            self.count += cost;
            self.fresh &= cost == 0;
            true
        } else {
            false
        }
    }

    fn capacity(&self) -> u64 {
        self.limit
    }
}

/// The sliding window log as its definition: every admission time kept,
/// admit iff fewer than `limit - n + 1` of them lie in `(now − W, now]`.
#[derive(Clone, Debug)]
pub struct LogModel {
    limit: u64,
    window: u64,
    admitted: std::collections::VecDeque<u64>,
}

impl LogModel {
    pub fn new(limit: u64, window: u64) -> Self {
        Self {
            limit,
            window,
            admitted: Default::default(),
        }
    }
}

impl Model for LogModel {
    fn admit(&mut self, now: u64, cost: u64) -> bool {
        let in_window = self
            .admitted
            .iter()
            .filter(|&&t| t + self.window > now)
            .count() as u64;
        if in_window + cost <= self.limit {
            self.admitted
                .extend(std::iter::repeat_n(now, cost as usize));
            true
        } else {
            false
        }
    }

    fn capacity(&self) -> u64 {
        self.limit
    }
}

/// Two exact models held together: a request is admitted iff both admit
/// it, and then charged to both; a denial charges neither.
#[derive(Clone, Debug)]
pub struct PairModel<A, B> {
    pub first: A,
    pub second: B,
}

impl<A: Model, B: Model> Model for PairModel<A, B> {
    fn admit(&mut self, now: u64, cost: u64) -> bool {
        let (mut first, mut second) = (self.first.clone(), self.second.clone());
        if first.admit(now, cost) && second.admit(now, cost) {
            (self.first, self.second) = (first, second);
            true
        } else {
            false
        }
    }

    fn capacity(&self) -> u64 {
        self.first.capacity().min(self.second.capacity())
    }

    /// The limit with the fewer remaining binds; on a tie the smaller, and
    /// on a tie again the first.
    fn limit(&self, now: u64) -> u64 {
        let (a, b) = (self.first.remaining(now), self.second.remaining(now));
        let (cap_a, cap_b) = (self.first.capacity(), self.second.capacity());
        if a < b || (a == b && cap_a <= cap_b) {
            cap_a
        } else {
            cap_b
        }
    }
}

/// Two configurations held together by `Builder::and`, against the pair of
/// their models.
#[derive(Clone, Copy, Debug)]
pub struct Pair<A, B>(pub A, pub B);

impl<A: Subject, B: Subject> Subject for Pair<A, B>
where
    Both<A::Algo, B::Algo>: Algorithm,
{
    type Algo = Both<A::Algo, B::Algo>;
    type Model = PairModel<A::Model, B::Model>;
    fn settings(&self) -> Builder<Self::Algo, u64> {
        self.0.settings().and(self.1.settings())
    }
    fn model(&self) -> Self::Model {
        PairModel {
            first: self.0.model(),
            second: self.1.model(),
        }
    }
    fn admission_bound(&self, elapsed: u64) -> u64 {
        self.0
            .admission_bound(elapsed)
            .min(self.1.admission_bound(elapsed))
    }
}

/// A limiter under test with its model, built from one configuration.
pub trait Subject: std::fmt::Debug {
    type Algo: Algorithm;
    type Model: Model;
    /// The algorithm settings of this configuration, keyed by `u64`: a
    /// quota for `Builder::and`, `Builder::tier` or `Limiter::set_quota`
    /// (which take no clock).
    fn settings(&self) -> Builder<Self::Algo, u64>;
    /// The builder for this configuration, keyed by `u64`, reading `clock`.
    fn builder(&self, clock: ManualClock) -> Builder<Self::Algo, u64, ManualClock> {
        self.settings().clock(clock)
    }
    fn limiter(&self, clock: ManualClock) -> Limiter<Self::Algo, u64, ManualClock> {
        self.builder(clock).build().unwrap()
    }
    /// A limiter with no clients (`build_direct`) of this configuration.
    fn direct(&self, clock: ManualClock) -> DirectLimiter<Self::Algo, ManualClock> {
        self.builder(clock).build_direct().unwrap()
    }
    fn model(&self) -> Self::Model;
    /// The most admissions possible over `[0, elapsed]` from fresh state:
    /// the "never over-admits" bound for concurrent tests.
    fn admission_bound(&self, elapsed: u64) -> u64;
}

#[derive(Clone, Copy, Debug)]
pub struct BucketConfig {
    pub tokens: u64,
    pub per: u64,
    pub capacity: u64,
}

impl Subject for BucketConfig {
    type Algo = TokenBucket;
    type Model = BucketModel;
    fn settings(&self) -> Builder<TokenBucket, u64> {
        TokenBucket::builder()
            .rate(self.tokens, Duration::from_nanos(self.per))
            .capacity(self.capacity)
            .key_type::<u64>()
    }
    fn model(&self) -> BucketModel {
        BucketModel::new(self.tokens, self.per, self.capacity)
    }
    fn admission_bound(&self, elapsed: u64) -> u64 {
        self.capacity
            + (u128::from(elapsed) * u128::from(self.tokens) / u128::from(self.per)) as u64
    }
}

#[derive(Clone, Copy, Debug)]
pub struct WindowConfig {
    pub limit: u64,
    pub window: u64,
}

/// The sliding window counter under a [`WindowConfig`].
#[derive(Clone, Copy, Debug)]
pub struct Sliding(pub WindowConfig);

/// The fixed window under a [`WindowConfig`].
#[derive(Clone, Copy, Debug)]
pub struct Fixed(pub WindowConfig);

/// The sliding window log under a [`WindowConfig`].
#[derive(Clone, Copy, Debug)]
pub struct Log(pub WindowConfig);

/// The windowed algorithms share one configuration shape, so one macro
/// writes their subjects: at most `limit` admissions per aligned window
/// touched (the log: in any window of length W, which implies it).
macro_rules! window_subject {
    ($subject:ident, $algo:ident, $model:ident) => {
        impl Subject for $subject {
            type Algo = $algo;
            type Model = $model;
            fn settings(&self) -> Builder<$algo, u64> {
                $algo::builder()
                    .limit(self.0.limit)
                    .window(Duration::from_nanos(self.0.window))
                    .key_type::<u64>()
            }
            fn model(&self) -> $model {
                $model::new(self.0.limit, self.0.window)
            }
            fn admission_bound(&self, elapsed: u64) -> u64 {
                self.0.limit * (elapsed / self.0.window + 1)
            }
        }
    };
}

window_subject!(Sliding, SlidingWindowCounter, SlidingModel);
window_subject!(Fixed, FixedWindow, FixedModel);
window_subject!(Log, SlidingWindowLog, LogModel);

/// How far the clock moves before a step.
#[derive(Clone, Copy, Debug)]
pub enum Gap {
    /// By this many nanoseconds.
    Nanos(u64),
    /// To the instant the step's request would first pass, per the model,
    /// offset by -1, 0 or +1 ns: the boundary where off-by-one errors live.
    Boundary(i8),
}

/// One step of a scenario: let time pass, then one client asks.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub gap: Gap,
    pub client: u64,
    pub cost: u64,
    pub peek: bool,
}

/// Runs `steps` through a limiter and through one model per client, and
/// checks that they agree decision by decision: admitted or not, remaining
/// quota, and retry-after. Each client also has a direct limiter of its own
/// (`build_direct`), which must decide exactly as the keyed one.
pub fn agree_with_model<S: Subject>(subject: &S, steps: &[Step]) {
    let clock = ManualClock::new();
    let limiter = subject.limiter(clock.clone());
    let mut models: std::collections::HashMap<u64, S::Model> = Default::default();
    let mut directs: std::collections::HashMap<u64, DirectLimiter<S::Algo, ManualClock>> =
        Default::default();
    let mut now = 0u64;
    for (i, step) in steps.iter().enumerate() {
        let model = models.entry(step.client).or_insert_with(|| subject.model());
        let cost = step.cost.clamp(1, model.capacity());
        now = match step.gap {
            Gap::Nanos(gap) => now + gap,
            Gap::Boundary(offset) => {
                let at = now + model.retry_after(now, cost);
                at.saturating_add_signed(offset.into()).max(now)
            }
        };
        clock.set(Duration::from_nanos(now));
        let expected_retry = model.retry_after(now, cost);
        let got: Decision = if step.peek {
            limiter.peek_n(&step.client, cost).unwrap()
        } else {
            limiter.check_n(&step.client, cost).unwrap()
        };
        let direct = directs
            .entry(step.client)
            .or_insert_with(|| subject.direct(clock.clone()));
        let direct_got = if step.peek {
            direct.peek_n(cost).unwrap()
        } else {
            direct.check_n(cost).unwrap()
        };
        // A peek answers whether a check would admit, on a copy of the
        // state, and reports the quota as it stands, taking nothing.
        let expected = if step.peek {
            model.clone().admit(now, cost)
        } else {
            model.admit(now, cost)
        };
        let ctx = || {
            format!(
                "step {i} {step:?} at {now} ns, config {subject:?}",
                subject = std::any::type_name::<S>()
            )
        };
        assert_eq!(direct_got, got, "the direct limiter, {}", ctx());
        assert_eq!(got.is_allowed(), expected, "decision, {}", ctx());
        assert_eq!(
            got.remaining(),
            model.remaining(now),
            "remaining, {}",
            ctx()
        );
        let retry = if expected { 0 } else { expected_retry };
        assert_eq!(
            got.retry_after(),
            Duration::from_nanos(retry),
            "retry_after, {}",
            ctx()
        );
        assert_eq!(got.limit(), model.limit(now), "limit, {}", ctx());
        // When the quota next grows: the wait for one more unit than
        // remains, on the state the decision left (zero when full).
        let left = model.remaining(now);
        let replenish = if left >= model.capacity() {
            0
        } else {
            model.retry_after(now, left + 1)
        };
        assert_eq!(
            got.replenish_after(),
            Duration::from_nanos(replenish),
            "replenish_after, {}",
            ctx()
        );
        if !got.is_allowed() {
            assert!(got.replenish_after() <= got.retry_after(), "{}", ctx());
        }
    }
}
