//! The memory bound without a cap, whatever the pattern of arrivals (the
//! memory guide, "The bound"): after any call, the map holds no more
//! clients than made a request within the three horizons before the latest
//! new client arrived, or since (a booking counting as a request at the
//! instant it is due), plus 8 per shard (512). No thread runs: new clients' arrivals do the
//! forgetting, so between them (after a burst, in silence, or while only
//! known clients return) the map keeps what it held, and `sweep` forgets
//! every idle client at once.

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use proptest::prelude::*;
use tollgate::{
    Algorithm, Builder, Clock, FixedWindow, Limiter, ManualClock, SlidingWindowCounter,
    SlidingWindowLog, TokenBucket, Windowed,
};

/// ns in a millisecond.
const MS: u64 = 1_000_000;

/// The bound's allowance: 8 clients per shard of the map's 64.
const SPARES: usize = 512;

/// The clients a limiter may hold by the documented bound: when each made
/// a request last, and those among them within the window the latest new
/// client's arrival sets.
#[derive(Debug)]
struct Bound {
    /// Client → the latest reading it made a request at (or a booking of
    /// its falls due at).
    last: HashMap<u64, u64>,
    /// (`last`, client) of the clients within the window: a request at
    /// `at` counts while `at + 3 · horizon` is past the latest new client's
    /// arrival. Arrivals only move the window on, so a client left behind
    /// comes back only with a request of its own.
    within: BTreeSet<(u64, u64)>,
    /// The reading the latest new client arrived at.
    latest_new: Option<u64>,
    /// The readings of the latest pass over the map and of the one before
    /// it (a new client makes one once a horizon has passed since the
    /// last), and when the next is due.
    pass: Option<u64>,
    pass_before: u64,
    pass_due: u64,
    horizon: u64,
}

impl Bound {
    /// A request of `client` at the reading `now`, counted at `at` (the
    /// instant a booking falls due; `now` for a check).
    /// `inserted`: the limiter took the client in as a new one (one it
    /// never saw, or had forgotten), which makes the pass once it is due.
    fn request(&mut self, client: u64, now: u64, at: u64, inserted: bool) {
        if inserted && now >= self.pass_due {
            self.pass_before = self.pass.unwrap_or(0);
            self.pass = Some(now);
            self.pass_due = now + self.horizon;
        }
        match self.last.get(&client) {
            None => {
                self.latest_new = Some(now);
                // The window moves on: drop those now outside it, those
                // that made no request within the three horizons before
                // this arrival, nor within the horizon before the pass
                // before the latest.
                let h = i128::from(self.horizon);
                let start = (i128::from(now) - 3 * h).min(i128::from(self.pass_before) - h);
                while let Some(&(first, id)) = self.within.first() {
                    if i128::from(first) > start {
                        break;
                    }
                    self.within.remove(&(first, id));
                }
            }
            Some(&was) if at > was => {
                self.within.remove(&(was, client));
            }
            Some(_) => return,
        }
        self.last.insert(client, at);
        self.within.insert((at, client));
    }

    /// The most clients the map may hold: those that made a request within
    /// the three horizons before the latest new client's arrival, or
    /// within the horizon before the pass before the latest, or since, and
    /// the allowance.
    fn most(&self) -> usize {
        if self.latest_new.is_none() {
            return 0;
        }
        self.within.len() + SPARES
    }
}

/// A limiter under test, its clock, and the bound it is held to.
struct Subject<A: Algorithm> {
    limiter: Limiter<A, u64, ManualClock>,
    bound: Bound,
    capacity: u64,
    /// The most clients held at once.
    peak: usize,
}

impl<A: Algorithm> Subject<A> {
    fn new(limiter: Limiter<A, u64, ManualClock>, capacity: u64, horizon: u64) -> Self {
        Self {
            limiter,
            bound: Bound {
                last: HashMap::new(),
                within: BTreeSet::new(),
                latest_new: None,
                pass: None,
                pass_before: 0,
                pass_due: 0,
                horizon,
            },
            capacity,
            peak: 0,
        }
    }

    fn now(&self) -> u64 {
        self.limiter.clock().now_nanos()
    }

    /// How many clients the limiter has taken in so far: those it holds
    /// and those it forgot (nothing here is removed).
    fn inserts(&self) -> u64 {
        let stats = self.limiter.stats();
        stats.clients as u64 + stats.evicted_idle + stats.evicted_live
    }

    fn advance(&self, ns: u64) {
        self.limiter.clock().advance(Duration::from_nanos(ns));
    }

    /// A check of `client` for `cost` units (brought within the capacity).
    fn check(&mut self, client: u64, cost: u64) {
        let now = self.now();
        let cost = cost.clamp(1, self.capacity);
        let before = self.inserts();
        let _ = self.limiter.check_n(&client, cost).unwrap();
        let inserted = self.inserts() > before;
        self.bound.request(client, now, now, inserted);
        self.assert_bound();
    }

    fn assert_bound(&mut self) {
        let (held, most) = (self.limiter.len(), self.bound.most());
        self.peak = self.peak.max(held);
        assert!(
            held <= most,
            "the map held {held} clients; the bound is {most} (latest new client at {:?} ns, now {} ns, horizon {} ns, passes at {:?} and {} ns); {:?}",
            self.bound.latest_new,
            self.now(),
            self.bound.horizon,
            self.bound.pass,
            self.bound.pass_before,
            self.limiter.stats()
        );
    }
}

impl Subject<TokenBucket> {
    /// A booking of `client` for `cost` units, however long it waits,
    /// committed: counted as a request at the instant it falls due.
    fn book(&mut self, client: u64, cost: u64) {
        let now = self.now();
        let cost = cost.clamp(1, self.capacity);
        let before = self.inserts();
        let booked = self
            .limiter
            .reserve_n(&client, cost, Duration::MAX)
            .unwrap();
        let due = u64::try_from(booked.ready_at().as_nanos()).unwrap();
        booked.commit();
        let inserted = self.inserts() > before;
        self.bound.request(client, now, due, inserted);
        self.assert_bound();
    }
}

/// A token bucket of 4 refilled one per millisecond: a horizon of 4 ms.
fn bucket() -> Subject<TokenBucket> {
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_millis(1))
        .capacity(4)
        .key_type::<u64>()
        .clock(ManualClock::new())
        .build()
        .unwrap();
    Subject::new(limiter, 4, 4 * MS)
}

/// A window algorithm of limit 4 over 2 ms, whose horizon is `horizon`.
fn windowed<A>(builder: Builder<A>, horizon: u64) -> Subject<A>
where
    A: Algorithm + Windowed,
{
    let limiter = builder
        .limit(4)
        .window(Duration::from_millis(2))
        .key_type::<u64>()
        .clock(ManualClock::new())
        .build()
        .unwrap();
    Subject::new(limiter, 4, horizon)
}

/// The reproduction: a burst of 20 000 one-shot clients, then one client
/// that keeps coming back, then a trickle of new clients.
#[test]
fn a_burst_is_forgotten_once_new_clients_arrive_again() {
    let mut subject = bucket();
    for id in 0..20_000 {
        subject.check(id, 1);
    }
    let burst = subject.limiter.len();
    assert_eq!(burst, 20_000);
    // Only a known client, for 100 horizons: no new client arrives, so
    // nothing is forgotten (no thread runs), as the bound allows.
    for _ in 0..1_000 {
        subject.advance(MS / 2);
        subject.check(7, 1);
    }
    assert_eq!(subject.limiter.len(), burst, "nothing forgotten meanwhile");
    // One new client: its pass trusts the reading of the pass before it,
    // during the burst, so the burst stays; a new client a horizon later,
    // and the burst is gone.
    subject.check(1_000_000, 1);
    assert_eq!(subject.limiter.len(), burst + 1);
    subject.advance(4 * MS);
    subject.check(1_000_001, 1);
    assert!(
        subject.limiter.len() <= 3,
        "{} held after new clients arrived",
        subject.limiter.len()
    );
    // A trickle of new clients, one every half horizon, and the known one,
    // for 2 000 horizons: held to the bound throughout.
    for id in 1_000_001..1_004_000 {
        subject.advance(2 * MS);
        subject.check(id, 1);
        subject.check(7, 1);
    }
    assert!(
        subject.limiter.len() <= 8 + SPARES,
        "{:?}",
        subject.limiter.stats()
    );
}

/// After a burst and a silence, `sweep` forgets every idle client at once,
/// with no new client needed.
#[test]
fn sweep_forgets_a_burst_at_once() {
    let mut subject = bucket();
    for id in 0..20_000 {
        subject.check(id, 1);
    }
    subject.advance(4 * MS);
    subject.check(7, 1);
    assert_eq!(subject.limiter.sweep(), 19_999);
    assert_eq!(subject.limiter.len(), 1);
}

/// A map of at most 512 clients is not passed over (the pass would cost
/// more than they do); one of more is. A pass forgets every lapsed client;
/// the new client's insert may also rebuild its own shard's table (one of
/// 64) if it grows, which forgets that shard's lapsed clients, a few of
/// the 500, and no more.
#[test]
fn a_pass_spares_a_map_of_at_most_512_clients() {
    for burst in [500u64, 600] {
        let mut subject = bucket();
        for id in 0..burst {
            subject.check(id, 1);
        }
        subject.advance(8 * MS); // two horizons: every one has lapsed
        subject.check(1_000_000, 1);
        // The pass trusts the reading of the pass before it (during the
        // burst); the next, a horizon later, a reading past it.
        subject.advance(4 * MS);
        subject.check(1_000_001, 1);
        let held = subject.limiter.len();
        if burst <= 512 {
            assert!(
                held as u64 > burst / 2,
                "after a burst of {burst}: {held} held"
            );
        } else {
            assert_eq!(held, 2, "after a burst of {burst}");
        }
    }
}

/// With `no_auto_sweep`, no arrival forgets anyone: the map grows until
/// `sweep` is called.
#[test]
fn without_auto_sweep_no_arrival_forgets_anyone() {
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_millis(1))
        .capacity(4)
        .key_type::<u64>()
        .clock(ManualClock::new())
        .no_auto_sweep()
        .build()
        .unwrap();
    for id in 0..2_000u64 {
        assert!(limiter.allow_request(&id));
    }
    for id in 2_000..2_100u64 {
        limiter.clock().advance(Duration::from_millis(8));
        assert!(limiter.allow_request(&id));
    }
    assert_eq!(limiter.len(), 2_100);
    assert_eq!(limiter.stats().evicted_idle, 0);
    assert_eq!(limiter.sweep(), 2_099);
}

/// One step of an arrival pattern.
#[derive(Debug, Clone)]
enum Step {
    /// `new` new clients at one instant, each checked once for `cost`.
    Burst { new: u16, cost: u64 },
    /// No call for `ns`.
    Silence { ns: u64 },
    /// `calls` calls `every` ns apart, each by a new client if `new_every`
    /// divides its index (never if 0), else by a known one picked by
    /// `pick`; each a check for `cost`, or (a token bucket's, if `book`) a
    /// booking.
    Trickle {
        calls: u16,
        every: u64,
        new_every: u16,
        pick: u64,
        cost: u64,
        book: bool,
    },
}

fn step(horizon: u64) -> impl Strategy<Value = Step> {
    prop_oneof![
        (1..3_000u16, 1..5u64).prop_map(|(new, cost)| Step::Burst { new, cost }),
        prop_oneof![0..horizon, horizon..10 * horizon].prop_map(|ns| Step::Silence { ns }),
        (
            1..200u16,
            prop_oneof![0..horizon / 4, 0..2 * horizon],
            0..5u16,
            any::<u64>(),
            1..5u64,
            any::<bool>()
        )
            .prop_map(
                |(calls, every, new_every, pick, cost, book)| Step::Trickle {
                    calls,
                    every,
                    new_every,
                    pick,
                    cost,
                    book,
                }
            ),
    ]
}

/// Runs `steps` on `subject` (bookings only if `book` is given), the
/// bound asserted after every call.
fn run<A: Algorithm>(
    subject: &mut Subject<A>,
    steps: &[Step],
    book: Option<fn(&mut Subject<A>, u64, u64)>,
) {
    let mut next = 0u64;
    for step in steps {
        match *step {
            Step::Burst { new, cost } => {
                for _ in 0..new {
                    subject.check(next, cost);
                    next += 1;
                }
            }
            Step::Silence { ns } => subject.advance(ns),
            Step::Trickle {
                calls,
                every,
                new_every,
                mut pick,
                cost,
                book: booking,
            } => {
                for call in 0..calls {
                    subject.advance(every);
                    let client = if next == 0 || (new_every > 0 && call % new_every == 0) {
                        next += 1;
                        next - 1
                    } else {
                        // xorshift: a known client, any of them.
                        pick ^= pick << 13;
                        pick ^= pick >> 7;
                        pick ^= pick << 17;
                        pick % next
                    };
                    match book {
                        Some(book) if booking => book(subject, client, cost),
                        _ => subject.check(client, cost),
                    }
                }
            }
        }
    }
}

fn steps(horizon: u64) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(horizon), 1..12)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_bound_holds_for_any_arrivals_token_bucket(steps in steps(4 * MS)) {
        let mut subject = bucket();
        run(&mut subject, &steps, Some(Subject::<TokenBucket>::book));
    }

    #[test]
    fn the_bound_holds_for_any_arrivals_fixed_window(steps in steps(2 * MS)) {
        let mut subject = windowed(FixedWindow::builder(), 2 * MS);
        run(&mut subject, &steps, None);
    }

    #[test]
    fn the_bound_holds_for_any_arrivals_sliding_window_counter(steps in steps(4 * MS)) {
        let mut subject = windowed(SlidingWindowCounter::builder(), 4 * MS);
        run(&mut subject, &steps, None);
    }

    #[test]
    fn the_bound_holds_for_any_arrivals_sliding_window_log(steps in steps(2 * MS)) {
        let mut subject = windowed(SlidingWindowLog::builder(), 2 * MS);
        run(&mut subject, &steps, None);
    }

    #[test]
    fn the_bound_holds_with_a_paced_sweep(steps in steps(4 * MS)) {
        let limiter = TokenBucket::builder()
            .rate(1, Duration::from_millis(1))
            .capacity(4)
            .key_type::<u64>()
            .clock(ManualClock::new())
            .auto_sweep(8, 32)
            .build()
            .unwrap();
        run(&mut Subject::new(limiter, 4, 4 * MS), &steps, Some(Subject::<TokenBucket>::book));
    }
}
