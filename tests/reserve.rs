//! Reservations (`Limiter::reserve_n`) and their cancellation, against a
//! sequential exact model of the chosen rule, and the property that
//! matters whatever the rule: executing every booking that was not given
//! back at its ready time, with every admitted check at its own time, never
//! admits more than the exact token bucket allows.

#![cfg(not(feature = "loom"))]

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{BucketConfig, BucketModel, Fixed, Model, Pair, PairModel, Subject, WindowConfig};
use proptest::prelude::*;
use tollgate::{FixedWindow, ManualClock, Overflow, ReserveError, SlidingWindowLog, TokenBucket};

const US: u64 = 1_000;
const SEC: u64 = 1_000_000_000;

/// A sequential exact model of one client's bookings and checks, and of
/// the rule that cancels them: what [`drive`] holds a limiter to.
trait BookingModel {
    /// A booking at `now`: its ready time, or `Err(wait)` over `max_wait`.
    fn reserve(&mut self, id: usize, now: u64, cost: u64, max_wait: u64) -> Result<u64, u64>;
    /// A check at `now`: admitted or not.
    fn check(&mut self, now: u64, cost: u64) -> bool;
    /// The cancellation of booking `id` at `now`: given back or not.
    fn cancel(&mut self, id: usize, now: u64) -> bool;
    /// How long a unit request would wait at `now`.
    fn wait(&self, now: u64) -> u64;
}

/// The sequential exact model of the reservation rule: the standing
/// admissions of one client, in the order they were charged, each at the
/// instant it executes (a check at its own reading, a booking at its ready
/// time). Ready times never decrease along the list.
#[derive(Debug)]
struct Bookings {
    config: BucketConfig,
    /// (executes at, cost, booking id or `None` for a check).
    standing: Vec<(u64, u64, Option<usize>)>,
}

impl Bookings {
    fn new(config: BucketConfig) -> Self {
        Self {
            config,
            standing: Vec::new(),
        }
    }

    /// The exact bucket after every standing admission.
    fn model(&self) -> BucketModel {
        let mut model = self.config.model();
        for &(at, cost, _) in &self.standing {
            assert!(model.admit(at, cost), "the model's own history conforms");
        }
        model
    }

    fn last(&self) -> u64 {
        self.standing.last().map_or(0, |s| s.0)
    }
}

impl BookingModel for Bookings {
    /// A booking at `now`: served after everything standing, at the first
    /// instant the exact bucket admits it. `Err(wait)` if over `max_wait`.
    fn reserve(&mut self, id: usize, now: u64, cost: u64, max_wait: u64) -> Result<u64, u64> {
        let from = now.max(self.last());
        let ready = from + self.model().retry_after(from, cost);
        if ready - now > max_wait {
            return Err(ready - now);
        }
        self.standing.push((ready, cost, Some(id)));
        Ok(ready)
    }

    /// A check at `now`: admitted iff nothing booked is still waiting and
    /// the exact bucket admits it now.
    fn check(&mut self, now: u64, cost: u64) -> bool {
        let ok = now >= self.last() && self.model().admit(now, cost);
        if ok {
            self.standing.push((now, cost, None));
        }
        ok
    }

    /// The tail rule: given back iff booking `id` is the last standing
    /// admission and its time has not come.
    fn cancel(&mut self, id: usize, now: u64) -> bool {
        match self.standing.last() {
            Some(&(ready, _, Some(tail))) if tail == id && now < ready => {
                self.standing.pop();
                true
            }
            _ => false,
        }
    }

    fn wait(&self, now: u64) -> u64 {
        let from = now.max(self.last());
        from - now + self.model().retry_after(from, 1)
    }
}

#[derive(Clone, Debug)]
enum Op {
    Reserve { cost: u64, max_wait: Option<u64> },
    Check { cost: u64 },
    Cancel { pick: usize },
    Drop { pick: usize },
    Commit { pick: usize },
}

fn op(capacity: u64, interval: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (1..=capacity, prop_oneof![Just(None), Just(Some(0)), (0..4 * capacity * interval).prop_map(Some)])
            .prop_map(|(cost, max_wait)| Op::Reserve { cost, max_wait }),
        2 => (1..=capacity).prop_map(|cost| Op::Check { cost }),
        2 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Drop { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Commit { pick }),
    ]
}

fn config() -> impl Strategy<Value = BucketConfig> {
    (1..=4u64, prop_oneof![1..50u64, 1_000..2_000u64], 1..=5u64).prop_map(
        |(tokens, interval_us, capacity)| BucketConfig {
            tokens,
            per: tokens * interval_us * US,
            capacity,
        },
    )
}

fn scenario() -> impl Strategy<Value = (BucketConfig, Vec<(u64, Op)>)> {
    config().prop_flat_map(|config| {
        let interval = config.per / config.tokens;
        let gap = prop_oneof![3 => Just(0u64), 3 => 0..2 * interval, 1 => 0..8 * interval];
        (
            Just(config),
            prop::collection::vec((gap, op(config.capacity, interval)), 1..60),
        )
    })
}

/// Executing the standing admissions at their times: every one conforms to
/// the exact bucket.
fn assert_no_over_admission(config: &BucketConfig, mut executed: Vec<(u64, u64)>) {
    // Stable: admissions at one instant keep the order they were charged.
    executed.sort_by_key(|e| e.0);
    let mut exact = config.model();
    for (at, cost) in executed {
        assert!(
            exact.admit(at, cost),
            "{config:?}: {cost} at {at} ns is beyond what the exact bucket admits"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Every booking's ready time and every refusal's wait, every check and
    /// every cancellation equal the sequential exact model's; then what the
    /// limiter let through never exceeds the exact bucket.
    #[test]
    fn reservations_match_the_exact_model((config, ops) in scenario()) {
        let clock = ManualClock::new();
        let limiter = config.limiter(clock.clone());
        let standing = drive(&limiter, &clock, &mut Bookings::new(config), ops)?;
        assert_no_over_admission(&config, standing);
    }
}

/// Runs `ops` on client 0 of `limiter` (whose clock is `clock`) and on
/// `model` side by side: every booking's ready time and wait, every
/// refusal's wait, every check, every cancellation (and every drop, whose
/// effect the next step's wait checks) agree, and after every step so does
/// the wait of a unit request. Returns the standing admissions, `(at,
/// cost)`: the admitted checks and the bookings not given back.
fn drive<A: tollgate::Reservable>(
    limiter: &tollgate::Limiter<A, u64, ManualClock>,
    clock: &ManualClock,
    model: &mut impl BookingModel,
    ops: Vec<(u64, Op)>,
) -> Result<Vec<(u64, u64)>, TestCaseError> {
    let mut held = Vec::new(); // (id, reservation) still held
    let mut executed = Vec::new(); // (at, cost, id) as the limiter reported
    let mut given_back = Vec::new();
    let mut now = 0;
    for (id, (gap, op)) in ops.into_iter().enumerate() {
        now += gap;
        clock.set(Duration::from_nanos(now));
        match op {
            Op::Reserve { cost, max_wait } => {
                let max = max_wait.map_or(Duration::MAX, Duration::from_nanos);
                let got = limiter.reserve_n(&0, cost, max);
                let want = model.reserve(id, now, cost, max_wait.unwrap_or(u64::MAX));
                match (got, want) {
                    (Ok(r), Ok(ready)) => {
                        prop_assert_eq!(r.ready_at(), Duration::from_nanos(ready));
                        prop_assert_eq!(r.wait(), Duration::from_nanos(ready - now));
                        prop_assert_eq!(r.cost(), cost);
                        executed.push((ready, cost, Some(id)));
                        held.push((id, r));
                    }
                    (Err(ReserveError::TooLong { wait }), Err(w)) => {
                        prop_assert_eq!(wait, Duration::from_nanos(w));
                    }
                    (got, want) => prop_assert!(false, "{:?} vs model {:?}", got, want),
                }
            }
            Op::Check { cost } => {
                let allowed = limiter.check_n(&0, cost).unwrap().is_allowed();
                prop_assert_eq!(
                    allowed,
                    model.check(now, cost),
                    "check of {} at {}",
                    cost,
                    now
                );
                if allowed {
                    executed.push((now, cost, None));
                }
            }
            Op::Cancel { pick } | Op::Drop { pick } | Op::Commit { pick } if !held.is_empty() => {
                let (rid, r) = held.remove(pick % held.len());
                let gave = match op {
                    Op::Commit { .. } => {
                        r.commit();
                        false
                    }
                    Op::Cancel { .. } => {
                        let gave = r.cancel();
                        prop_assert_eq!(
                            gave,
                            model.cancel(rid, now),
                            "cancel of {} at {}",
                            rid,
                            now
                        );
                        gave
                    }
                    // What a drop gave back shows in the wait checked below.
                    _ => {
                        drop(r);
                        model.cancel(rid, now)
                    }
                };
                if gave {
                    given_back.push(rid);
                }
            }
            _ => {}
        }
        prop_assert_eq!(
            limiter.peek(&0).retry_after(),
            Duration::from_nanos(model.wait(now)),
            "the next unit's wait at {}",
            now
        );
    }
    for (_, r) in held {
        r.commit();
    }
    Ok(executed
        .into_iter()
        .filter(|e| e.2.is_none_or(|id| !given_back.contains(&id)))
        .map(|e| (e.0, e.1))
        .collect())
}

/// Why a cancellation gives back nothing once something was charged after
/// it: the later booking's wait was computed on top of it. Subtracting the
/// cancelled booking's charge anyway (what a cancel by `fetch_sub` does)
/// hands the slot of virtual time the later booking holds to a newcomer,
/// and both execute at once, beyond the exact bucket.
#[test]
fn a_blind_refund_under_later_bookings_over_admits() {
    let interval = 10;
    let (capacity, tolerance) = (1, 0);
    // GCRA by hand: the bucket is empty at 0 (TAT = 10).
    let tat = interval;
    let (r1_ready, tat) = (tat - tolerance, tat + interval); // R1 at 10, TAT 20
    let (r2_ready, tat) = (tat - tolerance, tat + interval); // R2 at 20, TAT 30
    let tat = tat - interval; // R1 cancelled blindly at 0: TAT 20
    let r3_ready = tat - tolerance; // R3 at 20, beside R2
    assert_eq!((r1_ready, r2_ready, r3_ready), (10, 20, 20));
    let mut exact = BucketModel::new(1, interval, capacity);
    assert!(exact.admit(0, 1) && exact.admit(r2_ready, 1));
    assert!(
        !exact.admit(r3_ready, 1),
        "R2 and R3 both at 20: over-admitted"
    );

    // The limiter's tail rule: R1's cancel gives nothing back, and R3
    // waits for its own slot after R2.
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_nanos(interval))
        .capacity(capacity)
        .clock(clock)
        .build()
        .unwrap();
    assert!(limiter.allow_request("a"));
    let r1 = limiter.reserve("a", Duration::MAX).unwrap();
    let r2 = limiter.reserve("a", Duration::MAX).unwrap();
    assert!(!r1.cancel());
    let r3 = limiter.reserve("a", Duration::MAX).unwrap();
    assert_eq!(
        (r2.wait(), r3.wait()),
        (Duration::from_nanos(20), Duration::from_nanos(30))
    );
    r2.commit();
    r3.commit();
}

/// x/time/rate's rule gives back `n − (units charged after)`, which in
/// GCRA terms is `TAT −= max(0, n·I − (TAT − to))`. It is safe too (it
/// never gives back what later bookings were timed on): this random search
/// over its GCRA translation finds no over-admission. The limiter keeps the
/// tail rule anyway, because it restores an exact earlier state (one that a
/// history of admissions produces) and never computes with time on cancel.
#[test]
fn the_partial_refund_rule_of_x_time_rate_is_also_safe() {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for _ in 0..20_000 {
        let capacity = 1 + next(3);
        let interval = 1 + next(3);
        let (mut tat, mut now) = (0u64, 0u64);
        let mut bookings: Vec<(u64, u64, u64, bool)> = Vec::new(); // (to, ready, cost, standing)
        let mut executed = Vec::new();
        for _ in 0..1 + next(8) {
            now += [0, 0, 0, 1, 2][next(5) as usize];
            match next(10) {
                0..=4 => {
                    let cost = 1 + next(capacity);
                    let ready = now.max(tat.saturating_sub((capacity - cost) * interval));
                    tat = tat.max(now) + cost * interval;
                    bookings.push((tat, ready, cost, true));
                }
                5 | 6 => {
                    let cost = 1 + next(capacity);
                    if tat.max(now) - now <= (capacity - cost) * interval {
                        tat = tat.max(now) + cost * interval;
                        executed.push((now, cost));
                    }
                }
                _ if !bookings.is_empty() => {
                    let i = next(bookings.len() as u64) as usize;
                    let (to, ready, cost, standing) = bookings[i];
                    if standing && now < ready {
                        let after = tat.saturating_sub(to);
                        tat -= (cost * interval).saturating_sub(after);
                        bookings[i].3 = false;
                    }
                }
                _ => {}
            }
        }
        executed.extend(bookings.iter().filter(|b| b.3).map(|b| (b.1, b.2)));
        let cost = 1 + next(capacity);
        executed.push((
            now.max(tat.saturating_sub((capacity - cost) * interval)),
            cost,
        ));
        let tokens = 1;
        assert_no_over_admission(
            &BucketConfig {
                tokens,
                per: interval,
                capacity,
            },
            executed,
        );
    }
}

fn bucket(
    per: Duration,
    capacity: u64,
    clock: &ManualClock,
) -> tollgate::Limiter<TokenBucket, String, ManualClock> {
    TokenBucket::builder()
        .rate(1, per)
        .capacity(capacity)
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn dropping_before_its_time_cancels_and_after_keeps() {
    let clock = ManualClock::new();
    let limiter = bucket(Duration::from_secs(1), 1, &clock);
    assert!(limiter.allow_request("a"));
    drop(limiter.reserve("a", Duration::MAX).unwrap());
    assert_eq!(
        limiter.peek("a").retry_after(),
        Duration::from_secs(1),
        "given back"
    );

    let r = limiter.reserve("a", Duration::MAX).unwrap();
    assert!(!r.is_ready(), "a second to wait");
    let shown = format!("{r:?}");
    for field in [
        "Reservation",
        "wait: 1s",
        "ready_at: 1s",
        "cost: 1",
        "cancellable: true",
    ] {
        assert!(shown.contains(field), "{field} in {shown}");
    }
    clock.advance(Duration::from_millis(999));
    assert!(!r.is_ready(), "1 ms to wait");
    clock.advance(Duration::from_millis(1));
    assert!(r.is_ready());
    drop(r); // its time came: consumed
    assert_eq!(limiter.peek("a").retry_after(), Duration::from_secs(1));

    let r = limiter.reserve("a", Duration::MAX).unwrap();
    r.commit(); // early, on purpose: kept
    assert_eq!(limiter.peek("a").retry_after(), Duration::from_secs(2));
    let r = limiter.reserve("a", Duration::MAX).unwrap();
    assert_eq!(
        (r.wait(), r.remaining_wait()),
        (Duration::from_secs(2), Duration::from_secs(2))
    );
    clock.advance(Duration::from_secs(2));
    assert!(!r.cancel(), "ready: nothing to give back");
}

#[test]
fn bad_input_never_panics_and_charges_nothing() {
    let clock = ManualClock::new();
    let limiter = bucket(Duration::from_secs(1), 3, &clock);
    // Cost 0: ready now, nothing charged.
    let r = limiter.reserve_n("a", 0, Duration::ZERO).unwrap();
    assert_eq!((r.wait(), r.cost()), (Duration::ZERO, 0));
    assert!(!r.cancel());
    assert!(limiter.is_empty(), "no state made for a cost of 0");
    assert_eq!(limiter.peek_n("a", 0).unwrap().remaining(), 3);
    // Above the capacity: the cost error, nothing charged.
    assert!(matches!(
        limiter.reserve_n("a", 4, Duration::MAX),
        Err(ReserveError::Cost(e)) if e.cost() == 4 && e.capacity() == 3
    ));
    // max_wait zero: only what conforms now.
    limiter.reserve_n("a", 3, Duration::ZERO).unwrap().commit();
    assert_eq!(
        limiter.reserve("a", Duration::ZERO).unwrap_err(),
        ReserveError::TooLong {
            wait: Duration::from_secs(1)
        }
    );
    assert_eq!(limiter.peek("a").retry_after(), Duration::from_secs(1));
    assert!(limiter
        .reserve("a", Duration::from_secs(1))
        .unwrap()
        .cancel());
    assert!(ReserveError::TooLong {
        wait: Duration::MAX
    }
    .to_string()
    .contains("never"));
}

#[test]
fn waits_near_the_end_of_time_are_never_and_never_overflow() {
    const NOW_MAX: u64 = (1 << 63) - 1;
    let clock = ManualClock::new();
    // One token per 100 years, 2 of them.
    let limiter = bucket(Duration::from_secs(100 * 365 * 86_400), 2, &clock);
    for now in [NOW_MAX - SEC, NOW_MAX, u64::MAX] {
        clock.set(Duration::from_nanos(now));
        let mut made = Vec::new();
        loop {
            match limiter.reserve_n("a", 2, Duration::MAX) {
                Ok(r) => made.push(r),
                Err(ReserveError::TooLong { wait }) => {
                    assert_eq!(wait, Duration::MAX);
                    break;
                }
                Err(e) => panic!("{e}"),
            }
            assert!(made.len() < 10);
        }
        for r in made {
            assert!(r.wait() <= Duration::from_nanos(NOW_MAX));
            r.commit();
        }
        assert!(limiter.peek("a").is_denied());
    }
    // A later booking at a huge max_wait on a fresh client is immediate.
    assert_eq!(
        limiter.reserve("b", Duration::MAX).unwrap().wait(),
        Duration::ZERO
    );
}

#[test]
fn a_full_limiter_refuses_to_book_for_new_clients() {
    // (The sliding window counter cannot book ahead at all: `reserve` on it
    // does not compile, a `compile_fail` doctest on `Limiter::reserve_n`.)
    let w = Duration::from_secs(1);
    let full = TokenBucket::builder()
        .rate(1, w)
        .max_clients(1)
        .overflow(Overflow::DenyNew)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    full.reserve("a", Duration::ZERO).unwrap().commit();
    assert_eq!(
        full.reserve("b", Duration::MAX).unwrap_err(),
        ReserveError::Full { retry_after: w }
    );
}

#[test]
fn a_client_with_a_booking_pending_is_never_swept() {
    let clock = ManualClock::new();
    let limiter = bucket(Duration::from_secs(1), 1, &clock);
    assert!(limiter.allow_request("a"));
    let r = limiter.reserve("a", Duration::MAX).unwrap();
    for _ in 0..3 {
        assert_eq!(limiter.sweep(), 0);
        clock.advance(Duration::from_millis(500));
    }
    // At 1.5 s the booking is ready, and the bucket is idle only at 2 s.
    assert!(!r.cancel());
    assert_eq!(limiter.sweep(), 0);
    clock.advance(Duration::from_millis(500));
    assert_eq!(limiter.sweep(), 1);
}

/// Eight threads book on one client at a frozen instant: every booking's
/// ready time is exactly the GCRA schedule of the units booked before it,
/// whatever the order the threads won, and the state after them all shows
/// every unit.
#[test]
fn eight_threads_booking_at_a_frozen_instant_count_exactly() {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 200;
    let interval = 1_000;
    let capacity = 5;
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(SEC));
    let limiter = Arc::new(bucket(Duration::from_nanos(interval), capacity, &clock));
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (limiter, barrier) = (Arc::clone(&limiter), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let mut got = Vec::new();
                for i in 0..PER_THREAD {
                    let cost = 1 + (t + i) % capacity;
                    let r = limiter.reserve_n("hot", cost, Duration::MAX).unwrap();
                    got.push((r.ready_at().as_nanos() as u64 - SEC, cost));
                    r.commit();
                }
                got
            })
        })
        .collect();
    let mut all: Vec<(u64, u64)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_unstable();
    let booked: u64 = all.iter().map(|b| b.1).sum();
    // Ready times strictly increase once bookings wait; each is exactly
    // (units booked before + its own − capacity) intervals.
    let at_once: u64 = all.iter().filter(|b| b.0 == 0).map(|b| b.1).sum();
    assert!(at_once <= capacity);
    let mut before = at_once;
    for &(ready, cost) in all.iter().filter(|b| b.0 > 0) {
        assert_eq!(ready, (before + cost - capacity) * interval);
        before += cost;
    }
    assert_eq!(before, booked);
    let next = limiter.peek("hot").retry_after().as_nanos() as u64;
    assert_eq!(next, (booked + 1 - capacity) * interval);
}

/// Eight threads book unit requests on one client held to a bucket and a
/// fixed window, at a frozen instant: the ready times, sorted, are exactly
/// the schedule the pair of exact models gives that many unit bookings one
/// after another (each at the first instant, from the one before, at which
/// both admit), whatever the order the threads won; so every unit was
/// charged to both limits once, and the wait after them all is exact too.
#[test]
fn eight_threads_booking_on_a_pair_at_a_frozen_instant_count_exactly() {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 100;
    let (interval, capacity, limit, window) = (1_000, 5, 7, 10_000);
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(SEC));
    let limiter = Arc::new(
        TokenBucket::builder()
            .rate(1, Duration::from_nanos(interval))
            .capacity(capacity)
            .and(
                FixedWindow::builder()
                    .limit(limit)
                    .window(Duration::from_nanos(window)),
            )
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (limiter, barrier) = (Arc::clone(&limiter), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let mut got = Vec::new();
                for _ in 0..PER_THREAD {
                    let r = limiter.reserve("hot", Duration::MAX).unwrap();
                    got.push(r.ready_at().as_nanos() as u64);
                    r.commit();
                }
                // Each thread's own bookings are served in its order.
                assert!(got.windows(2).all(|w| w[0] <= w[1]));
                got
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_unstable();
    let mut exact = PairModel {
        first: BucketModel::new(1, interval, capacity),
        second: common::FixedModel::new(limit, window),
    };
    let mut from = SEC;
    for (i, &ready) in all.iter().enumerate() {
        let want = from + exact.retry_after(from, 1);
        assert_eq!(ready, want, "booking {i} of the schedule");
        assert!(exact.admit(want, 1));
        from = want;
    }
    let next = limiter.peek("hot").retry_after().as_nanos() as u64;
    assert_eq!(SEC + next, from + exact.retry_after(from, 1));
}

/// Threads booking and cancelling at once: whatever the races, executing
/// the bookings not given back never exceeds the exact bucket, and once
/// every booking has been cancelled newest-first by one thread the
/// cancellations compose.
#[test]
fn eight_threads_booking_and_cancelling_never_over_admit() {
    const THREADS: u64 = 8;
    let interval = 1_000;
    let capacity = 3;
    for round in 0..20 {
        let clock = ManualClock::new();
        let limiter = Arc::new(bucket(Duration::from_nanos(interval), capacity, &clock));
        let barrier = Arc::new(Barrier::new(THREADS as usize));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (limiter, barrier) = (Arc::clone(&limiter), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    let mut kept = Vec::new();
                    for i in 0..50u64 {
                        let cost = 1 + (t + i + round) % capacity;
                        let r = limiter.reserve_n("hot", cost, Duration::MAX).unwrap();
                        let entry = (r.ready_at().as_nanos() as u64, cost);
                        if (t + i) % 3 == 0 {
                            if !r.cancel() {
                                kept.push(entry);
                            }
                        } else {
                            r.commit();
                            kept.push(entry);
                        }
                    }
                    kept
                })
            })
            .collect();
        let mut kept: Vec<(u64, u64)> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        let r = limiter.reserve("hot", Duration::MAX).unwrap();
        kept.push((r.ready_at().as_nanos() as u64, 1));
        r.commit();
        assert_no_over_admission(
            &BucketConfig {
                tokens: 1,
                per: interval,
                capacity,
            },
            kept,
        );
    }
}

/// The fixed window's bookings, as a sequential exact model: a booking
/// takes the first window, no earlier than its reading's and than any
/// window an earlier booking went to, in which its cost fits; a booking
/// that goes to a later window closes the windows before it (requests are
/// served in the order they booked). A check passes iff its window is not
/// closed and the cost fits. Cancelling the tail restores the state before
/// it.
#[derive(Clone, Debug, Default)]
struct FixedState {
    closed_before: u64,
    counts: std::collections::BTreeMap<u64, u64>,
}

#[derive(Debug)]
struct FixedBookings {
    limit: u64,
    window: u64,
    state: FixedState,
    /// (executes at, id or `None` for a check, state before it).
    standing: Vec<(u64, Option<usize>, FixedState)>,
}

impl FixedBookings {
    fn first_fit(&self, now: u64, cost: u64) -> u64 {
        let mut w = (now / self.window).max(self.state.closed_before);
        while self.state.counts.get(&w).copied().unwrap_or(0) + cost > self.limit {
            w += 1;
        }
        w
    }

    fn ready(&self, now: u64, w: u64) -> u64 {
        if w == now / self.window {
            now
        } else {
            w * self.window
        }
    }
}

impl BookingModel for FixedBookings {
    fn reserve(&mut self, id: usize, now: u64, cost: u64, max_wait: u64) -> Result<u64, u64> {
        let w = self.first_fit(now, cost);
        let ready = self.ready(now, w);
        if ready - now > max_wait {
            return Err(ready - now);
        }
        let before = self.state.clone();
        *self.state.counts.entry(w).or_default() += cost;
        self.state.closed_before = self.state.closed_before.max(w);
        self.standing.push((ready, Some(id), before));
        Ok(ready)
    }

    fn check(&mut self, now: u64, cost: u64) -> bool {
        let j = now / self.window;
        let ok = j >= self.state.closed_before
            && self.state.counts.get(&j).copied().unwrap_or(0) + cost <= self.limit;
        if ok {
            let before = self.state.clone();
            *self.state.counts.entry(j).or_default() += cost;
            self.standing.push((now, None, before));
        }
        ok
    }

    fn cancel(&mut self, id: usize, now: u64) -> bool {
        match self.standing.last() {
            Some((ready, Some(tail), _)) if *tail == id && now < *ready => {
                self.state = self.standing.pop().unwrap().2;
                true
            }
            _ => false,
        }
    }

    fn wait(&self, now: u64) -> u64 {
        self.ready(now, self.first_fit(now, 1)) - now
    }
}

fn fixed_scenario() -> impl Strategy<Value = (u64, u64, Vec<(u64, Op)>)> {
    (
        1..=4u64,
        prop_oneof![Just(100u64), Just(1_000), 100..500u64],
    )
        .prop_flat_map(|(limit, window)| {
            let gap = prop_oneof![3 => Just(0u64), 3 => 0..window, 1 => 0..4 * window];
            (
                Just(limit),
                Just(window),
                prop::collection::vec((gap, op(limit, window)), 1..60),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// The fixed window against its sequential exact model; then what it
    /// let through never exceeds the plain exact fixed window.
    #[test]
    fn fixed_window_reservations_match_the_exact_model((limit, window, ops) in fixed_scenario()) {
        let clock = ManualClock::new();
        let limiter = FixedWindow::builder()
            .limit(limit)
            .window(Duration::from_nanos(window))
            .key_type::<u64>()
            .clock(clock.clone())
            .build()
            .unwrap();
        let mut model = FixedBookings { limit, window, state: FixedState::default(), standing: Vec::new() };
        let mut standing = drive(&limiter, &clock, &mut model, ops)?;
        // Stable: admissions at one instant keep the order they were charged.
        standing.sort_by_key(|e| e.0);
        let mut exact = common::FixedModel::new(limit, window);
        for (at, cost) in standing {
            prop_assert!(exact.admit(at, cost), "{} at {} beyond the exact fixed window", cost, at);
        }
    }
}

/// A pair of limits' bookings, as a sequential exact model over the pair
/// of exact models (`common::PairModel`): the standing admissions of one
/// client in the order they were charged, each executed at its instant. A
/// booking is served from the latest of them on, at the first instant at
/// which both limits admit it; a check passes iff nothing booked is still
/// waiting and both limits admit it now; the tail rule cancels.
#[derive(Debug)]
struct PairBookings<M> {
    fresh: M,
    /// (executes at, cost, booking id or `None` for a check).
    standing: Vec<(u64, u64, Option<usize>)>,
}

impl<M: Model> PairBookings<M> {
    fn model(&self) -> M {
        let mut model = self.fresh.clone();
        for &(at, cost, _) in &self.standing {
            assert!(model.admit(at, cost), "the model's own history conforms");
        }
        model
    }

    fn last(&self) -> u64 {
        self.standing.last().map_or(0, |s| s.0)
    }
}

impl<M: Model> BookingModel for PairBookings<M> {
    fn reserve(&mut self, id: usize, now: u64, cost: u64, max_wait: u64) -> Result<u64, u64> {
        let from = now.max(self.last());
        let ready = from + self.model().retry_after(from, cost);
        if ready - now > max_wait {
            return Err(ready - now);
        }
        self.standing.push((ready, cost, Some(id)));
        Ok(ready)
    }

    fn check(&mut self, now: u64, cost: u64) -> bool {
        let ok = now >= self.last() && self.model().admit(now, cost);
        if ok {
            self.standing.push((now, cost, None));
        }
        ok
    }

    fn cancel(&mut self, id: usize, now: u64) -> bool {
        match self.standing.last() {
            Some(&(ready, _, Some(tail))) if tail == id && now < ready => {
                self.standing.pop();
                true
            }
            _ => false,
        }
    }

    fn wait(&self, now: u64) -> u64 {
        let from = now.max(self.last());
        from - now + self.model().retry_after(from, 1)
    }
}

/// A fixed window on the scale of the buckets of [`config`], so that
/// either limit of a pair may bind.
fn fixed_config() -> impl Strategy<Value = Fixed> {
    (
        1..=4u64,
        prop_oneof![1_000..200_000u64, 1_000_000..5_000_000u64],
    )
        .prop_map(|(limit, window)| Fixed(WindowConfig { limit, window }))
}

/// Ops on a pair whose capacity is `capacity` and whose slower limit
/// refills over about `unit` ns.
fn pair_ops(capacity: u64, unit: u64) -> impl Strategy<Value = Vec<(u64, Op)>> {
    let gap = prop_oneof![3 => Just(0u64), 3 => 0..2 * unit, 1 => 0..8 * unit];
    prop::collection::vec((gap, op(capacity, unit)), 1..60)
}

/// Runs `ops` on a limiter held to `pair` and on the pair's booking model;
/// then what the limiter let through never exceeds the plain pair of exact
/// models.
fn pair_case<S: Subject>(pair: &S, ops: Vec<(u64, Op)>) -> Result<(), TestCaseError>
where
    S::Algo: tollgate::Reservable,
{
    let clock = ManualClock::new();
    let limiter = pair.limiter(clock.clone());
    let mut model = PairBookings {
        fresh: pair.model(),
        standing: Vec::new(),
    };
    let mut standing = drive(&limiter, &clock, &mut model, ops)?;
    // Stable: admissions at one instant keep the order they were charged.
    standing.sort_by_key(|e| e.0);
    let mut exact = pair.model();
    for (at, cost) in standing {
        prop_assert!(
            exact.admit(at, cost),
            "{:?}: {} at {} beyond the exact pair",
            pair,
            cost,
            at
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Two buckets held together, against the pair of exact buckets.
    #[test]
    fn pair_of_buckets_reservations_match_the_exact_model(
        (pair, ops) in (config(), config()).prop_flat_map(|(a, b)| {
            let unit = (a.per / a.tokens).max(b.per / b.tokens);
            (Just(Pair(a, b)), pair_ops(a.capacity.min(b.capacity), unit))
        })
    ) {
        pair_case(&pair, ops)?;
    }

    /// A bucket and a fixed window, in both orders, against the pair of
    /// exact models.
    #[test]
    fn bucket_and_window_reservations_match_the_exact_model(
        (a, b, flip, ops) in (config(), fixed_config(), any::<bool>()).prop_flat_map(|(a, b, flip)| {
            let unit = (a.per / a.tokens).max(b.0.window);
            (Just(a), Just(b), Just(flip), pair_ops(a.capacity.min(b.0.limit), unit))
        })
    ) {
        if flip {
            pair_case(&Pair(b, a), ops)?;
        } else {
            pair_case(&Pair(a, b), ops)?;
        }
    }

    /// Two fixed windows held together, against the pair of exact windows.
    #[test]
    fn pair_of_windows_reservations_match_the_exact_model(
        (pair, ops) in (fixed_config(), fixed_config()).prop_flat_map(|(a, b)| {
            let unit = a.0.window.max(b.0.window);
            (Just(Pair(a, b)), pair_ops(a.0.limit.min(b.0.limit), unit))
        })
    ) {
        pair_case(&pair, ops)?;
    }
}

#[test]
fn a_fixed_window_books_the_next_window_and_closes_this_one() {
    let clock = ManualClock::new();
    let limiter = FixedWindow::builder()
        .limit(3)
        .window(Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.check_n("a", 2).unwrap().is_allowed());
    let big = limiter.reserve_n("a", 2, Duration::MAX).unwrap();
    assert_eq!(big.wait(), Duration::from_secs(1));
    // Served in order: this window is closed to later requests now.
    assert!(limiter.check("a").is_denied());
    let next = limiter.reserve_n("a", 1, Duration::MAX).unwrap();
    assert_eq!(next.wait(), Duration::from_secs(1));
    let after = limiter.reserve_n("a", 2, Duration::MAX).unwrap();
    assert_eq!(after.wait(), Duration::from_secs(2));
    assert!(
        after.cancel() && next.cancel() && big.cancel(),
        "newest first: all back"
    );
    assert!(limiter.check("a").is_allowed());
    // A limit in the top half of the count's range cannot book ahead.
    let wide = FixedWindow::builder()
        .limit((1 << 29) + 1)
        .window(Duration::from_secs(1))
        .build()
        .unwrap();
    assert_eq!(
        wide.reserve("a", Duration::MAX).unwrap_err(),
        ReserveError::Unsupported
    );
}

#[test]
fn a_fixed_window_client_with_a_booking_pending_is_never_swept() {
    let clock = ManualClock::new();
    let limiter = FixedWindow::builder()
        .limit(1)
        .window(Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.allow_request("a"));
    let booked = limiter.reserve("a", Duration::MAX).unwrap();
    assert_eq!(booked.wait(), Duration::from_secs(1));
    booked.commit();
    clock.advance(Duration::from_millis(1_500));
    assert_eq!(limiter.sweep(), 0, "the booking counts in window 1");
    assert!(limiter.check("a").is_denied());
    clock.advance(Duration::from_millis(500));
    assert_eq!(limiter.sweep(), 1);
}

/// A reservation can be handed to another thread (and shared), and the
/// async wait is a `Send` future, so it can be spawned.
#[test]
fn reservations_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<tollgate::Reservation<'static, TokenBucket>>();
    send_sync::<tollgate::Reservation<'static, FixedWindow, u64, ManualClock>>();
    send_sync::<ReserveError>();
}

/// The sliding window log's bookings, as a sequential model over the log's
/// slots: each slot holds the expiry of the admission it records (0 never
/// used). A booking of cost `n` at `now` is ready at the `n`-th smallest
/// expiry (or `now`, if `n` slots are free), and claims the `n` slots with
/// the smallest expiries (ties by index) with the expiry of an admission at
/// its ready time. A check claims free slots from just past the last slot
/// a check claimed, as the log does. Cancelling a booking before its time
/// puts back, in as many slots as it claimed of those that hold its
/// expiry (whoever wrote it), the expiries its claims replaced, the latest
/// first; it gave back iff any slot did. Other bookings and checks made
/// since keep their times.
#[derive(Debug)]
struct LogBookings {
    window: u64,
    slots: Vec<u64>,
    /// Where a check's search starts.
    next: usize,
    /// Booking id → (ready at, the slots it claimed with their old expiries).
    booked: std::collections::HashMap<usize, (u64, Vec<(usize, u64)>)>,
}

impl LogBookings {
    fn new(limit: u64, window: u64) -> Self {
        Self {
            window,
            slots: vec![0; limit as usize],
            next: 0,
            booked: Default::default(),
        }
    }

    /// The `cost` slots that free up first, and when the last of them does.
    fn first_free(&self, now: u64, cost: u64) -> (Vec<usize>, u64) {
        let mut order: Vec<usize> = (0..self.slots.len()).collect();
        order.sort_by_key(|&i| (self.slots[i], i));
        order.truncate(cost as usize);
        let ready = self.slots[*order.last().unwrap()].max(now);
        (order, ready)
    }
}

impl BookingModel for LogBookings {
    fn reserve(&mut self, id: usize, now: u64, cost: u64, max_wait: u64) -> Result<u64, u64> {
        let (order, ready) = self.first_free(now, cost);
        if ready - now > max_wait {
            return Err(ready - now);
        }
        let claims = order.iter().map(|&i| (i, self.slots[i])).collect();
        for &i in &order {
            self.slots[i] = ready + self.window;
        }
        self.booked.insert(id, (ready, claims));
        Ok(ready)
    }

    fn check(&mut self, now: u64, cost: u64) -> bool {
        let n = self.slots.len();
        if self.slots.iter().filter(|&&e| e <= now).count() < cost as usize {
            return false;
        }
        let start = self.next % n;
        let free: Vec<usize> = (start..n)
            .chain(0..start)
            .filter(|&i| self.slots[i] <= now)
            .take(cost as usize)
            .collect();
        for i in free {
            self.slots[i] = now + self.window;
            self.next = i + 1;
        }
        true
    }

    fn cancel(&mut self, id: usize, now: u64) -> bool {
        let (ready, claims) = self.booked.remove(&id).expect("a booking made");
        if now >= ready {
            return false;
        }
        let mut olds: Vec<u64> = claims.iter().map(|&(_, old)| old).collect();
        olds.sort_unstable_by(|a, b| b.cmp(a));
        let stamp = ready + self.window;
        let holding: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i] == stamp)
            .collect();
        for (&i, &old) in holding.iter().zip(&olds) {
            self.slots[i] = old;
        }
        !holding.is_empty()
    }

    fn wait(&self, now: u64) -> u64 {
        self.first_free(now, 1).1 - now
    }
}

fn log_scenario() -> impl Strategy<Value = (u64, u64, Vec<(u64, Op)>)> {
    (1..=5u64, prop_oneof![Just(100u64), Just(1_000), 10..500u64]).prop_flat_map(
        |(limit, window)| {
            let gap = prop_oneof![3 => Just(0u64), 3 => 0..window / 2 + 1, 1 => 0..3 * window];
            let interval = (window / limit).max(1);
            (
                Just(limit),
                Just(window),
                prop::collection::vec((gap, op(limit, interval)), 1..60),
            )
        },
    )
}

/// What was executed fits the log's definition: at most `limit` units in
/// any window `(t − W, t]`.
fn assert_within_the_log(limit: u64, window: u64, mut executed: Vec<(u64, u64)>) {
    executed.sort_by_key(|e| e.0);
    let mut exact = common::LogModel::new(limit, window);
    for &(at, cost) in &executed {
        assert!(
            common::Model::admit(&mut exact, at, cost),
            "{cost} at {at} ns: more than {limit} in a window of {window} ns: {executed:?}"
        );
    }
}

fn log_limiter(
    limit: u64,
    window: u64,
    clock: &ManualClock,
) -> tollgate::Limiter<SlidingWindowLog, u64, ManualClock> {
    SlidingWindowLog::builder()
        .limit(limit)
        .window(Duration::from_nanos(window))
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// The sliding window log against its sequential model of the slots;
    /// then what it let through (checks at their readings, bookings not
    /// given back at their ready times) never exceeds the log's definition.
    #[test]
    fn log_reservations_match_the_exact_model((limit, window, ops) in log_scenario()) {
        let clock = ManualClock::new();
        let limiter = log_limiter(limit, window, &clock);
        let standing = drive(&limiter, &clock, &mut LogBookings::new(limit, window), ops)?;
        assert_within_the_log(limit, window, standing);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// A log's answers depend on the admissions it holds, never on which
    /// slots hold them: two clients that hold the same admissions, one in
    /// the slots after `spent` admissions long expired, the other (fresh)
    /// in the first, answer every check, booking, cancel and peek alike.
    #[test]
    fn two_logs_holding_the_same_admissions_in_other_slots_answer_alike(
        (limit, window, ops) in log_scenario(),
        spent in 0..5u64,
    ) {
        let spent = spent % limit;
        let clock = ManualClock::new();
        let limiter = log_limiter(limit, window, &clock);
        let (a, b) = (1, 2);
        if spent > 0 {
            prop_assert!(limiter.check_n(&a, spent).unwrap().is_allowed());
        }
        // Both admit one just before the first admissions expire: from
        // `window` on, both hold that one alone.
        clock.set(Duration::from_nanos(window - 1));
        prop_assert!(limiter.allow_request(&a));
        prop_assert!(limiter.allow_request(&b));
        clock.set(Duration::from_nanos(window));
        let mut booked = Vec::new();
        for (gap, op) in ops {
            clock.advance(Duration::from_nanos(gap));
            let pick = |pick: usize, booked: &mut Vec<(_, _)>| {
                (!booked.is_empty()).then(|| booked.remove(pick % booked.len()))
            };
            match op {
                Op::Check { cost } => {
                    prop_assert_eq!(limiter.check_n(&a, cost), limiter.check_n(&b, cost), "{:?}", op);
                }
                Op::Reserve { cost, max_wait } => {
                    let max_wait = max_wait.map_or(Duration::MAX, Duration::from_nanos);
                    let (x, y) = (
                        limiter.reserve_n(&a, cost, max_wait),
                        limiter.reserve_n(&b, cost, max_wait),
                    );
                    match (x, y) {
                        (Ok(x), Ok(y)) => {
                            prop_assert_eq!((x.wait(), x.ready_at()), (y.wait(), y.ready_at()));
                            booked.push((x, y));
                        }
                        (x, y) => prop_assert_eq!(x.err(), y.err(), "{:?}", op),
                    }
                }
                Op::Cancel { pick: p } | Op::Drop { pick: p } => {
                    if let Some((x, y)) = pick(p, &mut booked) {
                        prop_assert_eq!(x.cancel(), y.cancel(), "{:?}", op);
                    }
                }
                Op::Commit { pick: p } => {
                    if let Some((x, y)) = pick(p, &mut booked) {
                        x.commit();
                        y.commit();
                    }
                }
            }
            prop_assert_eq!(limiter.peek(&a), limiter.peek(&b));
        }
    }
}

/// A log's booking waits for the slots that free up first, and is served
/// before anything asked after it; cancelling it gives back only the slots
/// that still hold it.
#[test]
fn a_log_books_the_first_slots_to_free_up() {
    let clock = ManualClock::new();
    let limiter = log_limiter(2, 100, &clock);
    assert!(limiter.allow_request(&0));
    clock.set(Duration::from_nanos(30));
    assert!(limiter.allow_request(&0));
    // Slots expire at 100 and 130: one unit at 100, two at 130.
    let one = limiter.reserve(&0, Duration::MAX).unwrap();
    assert_eq!(one.ready_at(), Duration::from_nanos(100));
    assert_eq!(one.wait(), Duration::from_nanos(70));
    let two = limiter.reserve_n(&0, 2, Duration::MAX).unwrap();
    // The first booking holds its slot until 200, the other frees at 130.
    assert_eq!(two.ready_at(), Duration::from_nanos(200));
    assert!(matches!(
        limiter.reserve(&0, Duration::from_nanos(100)),
        Err(ReserveError::TooLong { wait }) if wait == Duration::from_nanos(270)
    ));
    // The first booking's slot was claimed by the second: nothing of it
    // can go back. The second's two slots can.
    assert!(!one.cancel());
    assert!(two.cancel());
    // Back: the first booking's slot (to 200) and the check's (to 130).
    assert_eq!(limiter.peek(&0).retry_after(), Duration::from_nanos(100));
    clock.set(Duration::from_nanos(130));
    assert!(limiter.allow_request(&0));
    assert!(!limiter.allow_request(&0));
}

/// A log's cancel gives back the same whichever slots held what. Two
/// clients of 5 a second hold the same admission at 1 s, one in the slot
/// after three admissions long expired, the other (fresh) in the first
/// slot. Each books 5 (for 2 s), then 1 (for 3 s, claiming the first slot
/// of the 5), and cancels the 5: each still counts its admission at 1 s
/// until 2 s, beside the booking for 3 s. (The fresh client lost it when a
/// cancel gave back only the slots it had claimed, and was told 4 left.)
#[test]
fn a_log_cancel_gives_back_the_same_whichever_slots_held_what() {
    let clock = ManualClock::new();
    let limiter = log_limiter(5, 1_000_000_000, &clock);
    assert!(limiter.check_n(&1, 3).unwrap().is_allowed());
    clock.set(Duration::from_secs(1));
    for client in [1, 2] {
        assert!(limiter.check_n(&client, 1).unwrap().is_allowed());
        let five = limiter
            .reserve_n(&client, 5, Duration::from_secs(1))
            .unwrap();
        assert_eq!(five.ready_at(), Duration::from_secs(2));
        let one = limiter
            .reserve_n(&client, 1, Duration::from_secs(7_200))
            .unwrap();
        assert_eq!(one.ready_at(), Duration::from_secs(3));
        one.commit();
        assert!(five.cancel());
        let now = limiter.peek(&client);
        assert_eq!(
            (now.remaining(), now.replenish_after()),
            (3, Duration::from_secs(1)),
            "client {client}"
        );
        assert!(limiter.check_n(&client, 3).unwrap().is_allowed());
        assert!(!limiter.check(&client).is_allowed(), "client {client}");
    }
}

/// A log whose booking is still pending is never idle, so never swept.
#[test]
fn a_log_client_with_a_booking_pending_is_never_swept() {
    let clock = ManualClock::new();
    let limiter = log_limiter(1, 100, &clock);
    assert!(limiter.allow_request(&0));
    let r = limiter.reserve(&0, Duration::MAX).unwrap();
    assert_eq!(r.ready_at(), Duration::from_nanos(100));
    clock.set(Duration::from_nanos(150));
    assert_eq!(limiter.sweep(), 0, "the booking holds its slot until 200");
    r.commit();
    clock.set(Duration::from_nanos(200));
    assert_eq!(limiter.sweep(), 1);
}

/// Eight threads book on one log client at a frozen instant: unit
/// bookings, each timed on the latest slots and claimed by an exchange
/// from the very expiry it was timed on, so the ready times, sorted, are
/// exactly the schedule of that many unit bookings one after another
/// (`limit` per window), whatever the order the threads won.
#[test]
fn eight_threads_booking_on_a_log_at_a_frozen_instant_count_exactly() {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 50;
    let (limit, window) = (5, 1_000);
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(SEC));
    let limiter = Arc::new(log_limiter(limit, window, &clock));
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (limiter, barrier) = (Arc::clone(&limiter), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let mut got = Vec::new();
                for _ in 0..PER_THREAD {
                    let r = limiter.reserve(&0, Duration::MAX).unwrap();
                    got.push(r.ready_at().as_nanos() as u64 - SEC);
                    r.commit();
                }
                got
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_unstable();
    let want: Vec<u64> = (0..THREADS * PER_THREAD)
        .map(|k| k / limit * window)
        .collect();
    assert_eq!(all, want);
    let booked = THREADS * PER_THREAD;
    assert_eq!(
        limiter.peek(&0).retry_after(),
        Duration::from_nanos(booked / limit * window)
    );
}

/// Eight threads book several units at once on one log client while
/// others check and cancel: what is executed never exceeds the log's
/// definition, whatever the interleaving.
#[test]
fn eight_threads_booking_checking_and_cancelling_on_a_log_never_over_admit() {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 100;
    let (limit, window) = (4, 1_000);
    let clock = ManualClock::new();
    let limiter = Arc::new(log_limiter(limit, window, &clock));
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (limiter, barrier) = (Arc::clone(&limiter), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let mut executed = Vec::new();
                for i in 0..PER_THREAD {
                    let cost = 1 + (t + i) % 3;
                    if t % 4 == 0 {
                        if limiter.check_n(&0, cost).unwrap().is_allowed() {
                            executed.push((0, cost));
                        }
                        continue;
                    }
                    let r = limiter.reserve_n(&0, cost, Duration::MAX).unwrap();
                    let at = r.ready_at().as_nanos() as u64;
                    if (t + i) % 3 == 0 && r.wait() > Duration::ZERO {
                        if !r.cancel() {
                            // Not given back: it still executes.
                            executed.push((at, cost));
                        }
                    } else {
                        r.commit();
                        executed.push((at, cost));
                    }
                }
                executed
            })
        })
        .collect();
    let executed: Vec<(u64, u64)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_within_the_log(limit, window, executed);
}
