//! The oracle against a reference model that shares no code with the
//! crate (`tests/model/`): one state machine drives a limiter through
//! every public operation in any order, and checks every answer, field by
//! field, against the model's.
//!
//! The limiter forgets as eagerly as it can (the once-a-horizon pass,
//! a pass every new client, `sweep()`, small caps under each overflow
//! policy, floods of one-off clients); the model never forgets. The
//! properties, as the docs state them:
//!
//! 1. **Exact**: while the clock never steps back, each answer (admitted
//!    or not, `limit`, `remaining`, `retry_after`, `replenish_after`,
//!    `window`, each limit's figures of a pair, and the errors) is the
//!    model's. Forgetting changes no decision. The exceptions are the
//!    documented ones: a new client turned away at a full cap
//!    (`Overflow::DenyNew`: the refusal's own figures, counted once in
//!    `denied_new`), decided untracked (`AdmitUntracked`: the model's
//!    answer, which it does not keep), or a live client forgotten by a
//!    sampled eviction (the client is compared again once reset or
//!    removed).
//! 2. **Bounded after a step back**: once the clock has stepped back by
//!    `d` (the deepest step so far), a limiter that forgot may be
//!    stricter than the model, never more lenient, and by at most `d`: it
//!    admits only what the model admits (a log: what the model admits `d`
//!    later), leaves no more remaining, and reports a wait between the
//!    model's and the model's plus `d`. A client is compared exactly
//!    again once reset or removed.
//! 3. **Live**: a client refused with `retry_after = r` that comes back
//!    exactly `r` later, nothing else having happened, is admitted; a
//!    nanosecond earlier it is not.
//! 4. **Counted**: a flood of new clients is admitted as fresh clients or
//!    turned away with the refusal's figures; `denied_new` grows by the
//!    refusals, and the clients held by the inserts less the forgotten;
//!    `sweep()` counts what it forgets; the cap is never passed.
//! 5. **One budget without a table**: a `DirectLimiter` answers its one
//!    client exactly as the model does, backward steps included (it
//!    never forgets).
//!
//! Quota changes and tier moves (`set_quota`, `retier`) follow the move
//! rule (`tests/model/limits.rs`, `Limit::convert`); they are drawn only by
//! the tests whose names contain `moves`, which also check two bounds of
//! the rule: over any span a bucket client is admitted at most the largest
//! capacity involved and the fastest rate's refill (and, for a client
//! forgotten before a raise, at most the raise more, once), and a bucket
//! client moved while holding tokens waits at most one new interval for a
//! unit. A client the limiter may have forgotten before a change is held
//! after it either as the rule carries it or as a fresh client, exactly
//! (`oracle_model/moves.rs`).
//!
//! `PROPTEST_CASES` raises the number of sequences (32 a test by default).

// Plain `cargo test` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

mod model;
#[path = "oracle_model/moves.rs"]
mod moves;

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use model::{Answer, BookErr, Cancel, CostErr, Limit, Model, Plan, NEVER};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::{
    Algorithm, Builder, Clock, CostError, Decision, DirectLimiter, FixedWindow, Limiter,
    ManualClock, Overflow, Reservable, Reservation, ReserveError, SlidingWindowCounter,
    SlidingWindowLog, Stats, TokenBucket,
};

const SEC: u64 = 1_000_000_000;
const MINUTE: u64 = 60 * SEC;
const HOUR: u64 = 3_600 * SEC;
const DAY: u64 = 86_400 * SEC;
/// The tracked clients: 0 to 3. Flood clients never meet them.
const CLIENTS: u64 = 4;
const FLOOD_BASE: u64 = 1 << 40;
/// The clock never goes past this (a century): far below the last instant.
const LATEST: u64 = 36_500 * DAY;

/// (tokens, per, capacity): one interval that is no whole number of ns
/// (3 a second), a slow plan and a fast one.
const BUCKETS: [(u64, u64, u64); 5] = [
    (20, MINUTE, 20),
    (10, MINUTE, 10),
    (1, HOUR, 3),
    (5, SEC, 5),
    (3, SEC, 2),
];
/// (limit, window): a window of 7 777 ns starts far from the clock's
/// origin's multiples.
const WINDOWS: [(u64, u64); 5] = [(20, MINUTE), (10, MINUTE), (3, HOUR), (5, SEC), (3, 7_777)];

/// A clock read by hand whose origin lies `origin` past the Unix epoch,
/// so that windows (which start on the epoch's multiples) start off the
/// clock's own.
#[derive(Clone)]
struct Clk {
    reading: ManualClock,
    origin: Duration,
}

impl Clock for Clk {
    fn now_nanos(&self) -> u64 {
        self.reading.now_nanos()
    }
    fn unix_origin(&self) -> Duration {
        self.origin
    }
}

/// One operation of the state machine.
#[derive(Clone, Debug)]
enum Op {
    Check {
        client: u64,
        cost: u64,
    },
    Peek {
        client: u64,
        cost: u64,
    },
    /// `reserve_n` with the longest wait allowed drawn from `WAITS`.
    Reserve {
        client: u64,
        cost: u64,
        wait: usize,
    },
    /// Commit the booking at this index (modulo how many are open).
    Commit(usize),
    Cancel(usize),
    /// Drop it (a cancel whose answer is not seen).
    Drop(usize),
    /// A check; if refused, the clock goes to a nanosecond before
    /// `retry_after` (a peek must refuse) and to `retry_after` (a check
    /// must pass).
    Honour {
        client: u64,
        cost: u64,
    },
    Reset(u64),
    Remove(u64),
    SetQuota {
        tier: u16,
        quota: usize,
    },
    /// The client's tier changes in the records, then `retier`.
    Move {
        client: u64,
        tier: u16,
    },
    Sweep,
    /// This many one-off clients, one check each.
    Flood(u64),
    Clock(Step),
}

const WAITS: [u64; 4] = [0, SEC, 2 * HOUR, u64::MAX];

#[derive(Clone, Copy, Debug)]
enum Step {
    Still,
    Forward(u64),
    FarAhead(u64),
    Back(u64),
}

/// How the limiter forgets (the model never does).
#[derive(Clone, Copy, Debug)]
enum Memory {
    /// The defaults: the once-a-horizon pass and rebuilds that forget.
    Passes,
    /// A paced sweep on every new client too.
    Paced,
    DenyNew(u64),
    EvictSampled(u64),
    AdmitUntracked(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Still),
        6 => (0..2 * MINUTE).prop_map(Step::Forward),
        2 => (0..3 * HOUR).prop_map(Step::Forward),
        1 => (DAY..3_650 * DAY).prop_map(Step::FarAhead),
        2 => prop_oneof![0..SEC, 0..3_650 * DAY].prop_map(Step::Back),
    ]
}

/// The operations: without quota changes and moves, or (`moves`) with.
fn ops(max_cost: u64, moves: bool, back: bool) -> impl Strategy<Value = Vec<Op>> {
    let client = 0..CLIENTS;
    let clock = if back {
        step().boxed()
    } else {
        step()
            .prop_map(|s| match s {
                Step::Back(_) => Step::Still,
                s => s,
            })
            .boxed()
    };
    let op = prop_oneof![
        12 => (client.clone(), 0..=max_cost).prop_map(|(client, cost)| Op::Check { client, cost }),
        2 => (client.clone(), 0..=max_cost).prop_map(|(client, cost)| Op::Peek { client, cost }),
        3 => (client.clone(), 0..=max_cost, 0..WAITS.len())
            .prop_map(|(client, cost, wait)| Op::Reserve { client, cost, wait }),
        1 => any::<usize>().prop_map(Op::Commit),
        2 => any::<usize>().prop_map(Op::Cancel),
        1 => any::<usize>().prop_map(Op::Drop),
        2 => (client.clone(), 1..=max_cost).prop_map(|(client, cost)| Op::Honour { client, cost }),
        1 => client.clone().prop_map(Op::Reset),
        1 => client.clone().prop_map(Op::Remove),
        (if moves { 2 } else { 1 }) => (0..2u16, 0..5usize)
            .prop_map(|(tier, quota)| Op::SetQuota { tier, quota }),
        (if moves { 3 } else { 1 }) => (client, 0..2u16)
            .prop_map(|(client, tier)| Op::Move { client, tier }),
        1 => Just(Op::Sweep),
        1 => prop_oneof![1..40u64, 500..700u64].prop_map(Op::Flood),
        6 => clock.prop_map(Op::Clock),
    ];
    prop::collection::vec(op, 1..80)
}

fn memory() -> impl Strategy<Value = Memory> {
    prop_oneof![
        Just(Memory::Passes),
        Just(Memory::Paced),
        (2..24u64).prop_map(Memory::DenyNew),
        (2..24u64).prop_map(Memory::EvictSampled),
        (2..24u64).prop_map(Memory::AdmitUntracked),
    ]
}

fn with_memory<A: Algorithm, K, C>(b: Builder<A, K, C>, memory: Memory) -> Builder<A, K, C> {
    match memory {
        Memory::Passes => b,
        Memory::Paced => b.auto_sweep(1, 64),
        Memory::DenyNew(cap) => b.max_clients(cap).overflow(Overflow::DenyNew),
        Memory::EvictSampled(cap) => b
            .max_clients(cap)
            .overflow(Overflow::EvictSampled { sample: 5 }),
        Memory::AdmitUntracked(cap) => b.max_clients(cap).overflow(Overflow::AdmitUntracked),
    }
}

/// Who each tracked client is in the resolver's records.
type Records = Arc<Mutex<HashMap<u64, u16>>>;

fn resolver(records: &Records) -> impl Fn(&u64) -> u16 + Send + Sync + 'static {
    let records = Arc::clone(records);
    move |client| records.lock().unwrap().get(client).copied().unwrap_or(0)
}

/// A booking of any limiter.
trait Booked {
    fn wait(&self) -> Duration;
    fn ready_at(&self) -> Duration;
    fn remaining_wait(&self) -> Duration;
    fn is_ready(&self) -> bool;
    fn commit(self: Box<Self>);
    fn cancel(self: Box<Self>) -> bool;
}

impl<A, K> Booked for Reservation<'_, A, K, Clk>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn wait(&self) -> Duration {
        Reservation::wait(self)
    }
    fn ready_at(&self) -> Duration {
        Reservation::ready_at(self)
    }
    fn remaining_wait(&self) -> Duration {
        Reservation::remaining_wait(self)
    }
    fn is_ready(&self) -> bool {
        Reservation::is_ready(self)
    }
    fn commit(self: Box<Self>) {
        Reservation::commit(*self);
    }
    fn cancel(self: Box<Self>) -> bool {
        Reservation::cancel(*self)
    }
}

type Book<'a> = Result<Box<dyn Booked + 'a>, ReserveError>;

/// A limiter under test, whatever its type: keyed (tiered or not) or
/// direct (which ignores the client).
trait Real {
    fn check_n(&self, client: u64, cost: u64) -> Result<Decision, CostError>;
    fn peek_n(&self, client: u64, cost: u64) -> Result<Decision, CostError>;
    /// `None` if it cannot book.
    fn reserve_n(&self, client: u64, cost: u64, max_wait: Duration) -> Option<Book<'_>>;
    fn reset(&self, client: u64) -> bool;
    fn remove(&self, client: u64) -> bool;
    fn set_quota(&self, tier: u16, quota: usize);
    fn retier(&self, client: u64) -> u16;
    fn sweep(&self) -> usize;
    fn stats(&self) -> Stats;
    fn len(&self) -> usize;
}

type Keyed<A> = Limiter<A, u64, Clk>;
/// `reserve_n` of a keyed limiter whose algorithm books.
type KeyedBooking<A> = for<'a> fn(&'a Keyed<A>, u64, u64, Duration) -> Book<'a>;
/// `reserve_n` of a direct limiter whose algorithm books.
type DirectBooking<A> = for<'a> fn(&'a DirectLimiter<A, Clk>, u64, Duration) -> Book<'a>;

/// A keyed limiter and what its type lets it do.
struct KeyedReal<A: Algorithm> {
    limiter: Keyed<A>,
    reserve: Option<KeyedBooking<A>>,
    set_quota: Option<fn(&Keyed<A>, u16, usize)>,
    retier: Option<fn(&Keyed<A>, u64) -> u16>,
}

fn reserve_keyed<A: Algorithm + Reservable>(
    l: &Keyed<A>,
    client: u64,
    cost: u64,
    max_wait: Duration,
) -> Book<'_> {
    l.reserve_n(&client, cost, max_wait)
        .map(|r| Box::new(r) as Box<dyn Booked + '_>)
}

impl<A: Algorithm> Real for KeyedReal<A> {
    fn check_n(&self, client: u64, cost: u64) -> Result<Decision, CostError> {
        self.limiter.check_n(&client, cost)
    }
    fn peek_n(&self, client: u64, cost: u64) -> Result<Decision, CostError> {
        self.limiter.peek_n(&client, cost)
    }
    fn reserve_n(&self, client: u64, cost: u64, max_wait: Duration) -> Option<Book<'_>> {
        self.reserve
            .map(|reserve| reserve(&self.limiter, client, cost, max_wait))
    }
    fn reset(&self, client: u64) -> bool {
        self.limiter.reset(&client)
    }
    fn remove(&self, client: u64) -> bool {
        self.limiter.remove(&client)
    }
    fn set_quota(&self, tier: u16, quota: usize) {
        (self.set_quota.expect("a tiered limiter"))(&self.limiter, tier, quota);
    }
    fn retier(&self, client: u64) -> u16 {
        (self.retier.expect("a tiered limiter"))(&self.limiter, client)
    }
    fn sweep(&self) -> usize {
        self.limiter.sweep()
    }
    fn stats(&self) -> Stats {
        self.limiter.stats()
    }
    fn len(&self) -> usize {
        self.limiter.len()
    }
}

struct DirectReal<A: Algorithm> {
    limiter: DirectLimiter<A, Clk>,
    reserve: Option<DirectBooking<A>>,
}

fn reserve_direct<A: Algorithm + Reservable>(
    l: &DirectLimiter<A, Clk>,
    cost: u64,
    max_wait: Duration,
) -> Book<'_> {
    l.reserve_n(cost, max_wait)
        .map(|r| Box::new(r) as Box<dyn Booked + '_>)
}

impl<A: Algorithm> Real for DirectReal<A> {
    fn check_n(&self, _: u64, cost: u64) -> Result<Decision, CostError> {
        self.limiter.check_n(cost)
    }
    fn peek_n(&self, _: u64, cost: u64) -> Result<Decision, CostError> {
        self.limiter.peek_n(cost)
    }
    fn reserve_n(&self, _: u64, cost: u64, max_wait: Duration) -> Option<Book<'_>> {
        self.reserve
            .map(|reserve| reserve(&self.limiter, cost, max_wait))
    }
    fn reset(&self, _: u64) -> bool {
        unreachable!("a direct limiter has no clients to reset")
    }
    fn remove(&self, _: u64) -> bool {
        unreachable!("a direct limiter has no clients to remove")
    }
    fn set_quota(&self, _: u16, _: usize) {
        unreachable!("a direct limiter has no tiers")
    }
    fn retier(&self, _: u64) -> u16 {
        unreachable!("a direct limiter has no tiers")
    }
    fn sweep(&self) -> usize {
        0
    }
    fn stats(&self) -> Stats {
        Stats::default()
    }
    fn len(&self) -> usize {
        0
    }
}

fn bucket(q: usize) -> Builder<TokenBucket> {
    let (tokens, per, capacity) = BUCKETS[q];
    TokenBucket::builder()
        .rate(tokens, Duration::from_nanos(per))
        .capacity(capacity)
}

fn fixed(q: usize) -> Builder<FixedWindow> {
    let (limit, window) = WINDOWS[q];
    FixedWindow::builder()
        .limit(limit)
        .window(Duration::from_nanos(window))
}

fn sliding(q: usize) -> Builder<SlidingWindowCounter> {
    let (limit, window) = WINDOWS[q];
    SlidingWindowCounter::builder()
        .limit(limit)
        .window(Duration::from_nanos(window))
}

fn log() -> Builder<SlidingWindowLog> {
    SlidingWindowLog::builder()
        .limit(5)
        .window(Duration::from_secs(1))
}

/// What a run is built from.
#[derive(Clone, Copy, Debug)]
struct Setup {
    q0: usize,
    q1: usize,
    memory: Memory,
    origin: u64,
    /// The clock's first reading: 0 (its first window cut short by its
    /// start, as a process's clock is) or later.
    start: u64,
    /// Whether clients have tiers (by their records; 1 and 3 start in
    /// tier 1) and the limiter's quotas can change.
    tiered: bool,
}

/// One family of limiters: its model plans and how to build each limiter.
trait Family {
    /// Whether an admission may take any free part of the state (the
    /// log's slots), which shows after a step back.
    const SLOTS: bool = false;
    fn plan(q: usize, origin: u64) -> Plan;
    fn keyed(setup: &Setup, records: &Records, clock: Clk) -> Box<dyn Real>;
    fn direct(q: usize, clock: Clk) -> Box<dyn Real>;
}

macro_rules! family {
    ($family:ident, $algorithm:ty, $quota:expr, $plan:expr, books: $books:tt) => {
        struct $family;
        impl Family for $family {
            fn plan(q: usize, origin: u64) -> Plan {
                $plan(q, origin)
            }
            fn keyed(setup: &Setup, records: &Records, clock: Clk) -> Box<dyn Real> {
                if setup.tiered {
                    let b = $quota(setup.q0)
                        .tier(1, $quota(setup.q1))
                        .tier_by(resolver(records))
                        .clock(clock);
                    let limiter = with_memory(b, setup.memory).build().unwrap();
                    Box::new(KeyedReal {
                        limiter,
                        reserve: family!(@reserve $books),
                        set_quota: Some(|l: &Keyed<tollgate::Tiered<$algorithm>>, tier, q| {
                            l.set_quota(tier, $quota(q)).unwrap()
                        }),
                        retier: Some(|l: &Keyed<tollgate::Tiered<$algorithm>>, client| {
                            l.retier(&client)
                        }),
                    })
                } else {
                    let b = $quota(setup.q0).key_type::<u64>().clock(clock);
                    let limiter = with_memory(b, setup.memory).build().unwrap();
                    Box::new(KeyedReal::<$algorithm> {
                        limiter,
                        reserve: family!(@reserve $books),
                        set_quota: None,
                        retier: None,
                    })
                }
            }
            fn direct(q: usize, clock: Clk) -> Box<dyn Real> {
                Box::new(DirectReal::<$algorithm> {
                    limiter: $quota(q).clock(clock).build_direct().unwrap(),
                    reserve: family!(@direct $books),
                })
            }
        }
    };
    (@reserve yes) => { Some(reserve_keyed) };
    (@reserve no) => { None };
    (@direct yes) => { Some(reserve_direct) };
    (@direct no) => { None };
}

family!(
    Buckets,
    TokenBucket,
    bucket,
    |q: usize, _| vec![{
        let (tokens, per, capacity) = BUCKETS[q];
        Limit::bucket(tokens, per, capacity)
    }],
    books: yes
);
family!(
    Fixed,
    FixedWindow,
    fixed,
    |q: usize, origin| vec![Limit::fixed(WINDOWS[q].0, WINDOWS[q].1, origin)],
    books: yes
);
family!(
    Sliding,
    SlidingWindowCounter,
    sliding,
    |q: usize, origin| vec![Limit::sliding(WINDOWS[q].0, WINDOWS[q].1, origin)],
    books: no
);
family!(
    Pair,
    tollgate::Both<TokenBucket, FixedWindow>,
    |q: usize| bucket(q).and(fixed(q)),
    |q: usize, origin| {
        let (tokens, per, capacity) = BUCKETS[q];
        vec![
            Limit::bucket(tokens, per, capacity),
            Limit::fixed(WINDOWS[q].0, WINDOWS[q].1, origin),
        ]
    },
    books: yes
);

family!(
    WindowPair,
    tollgate::Both<FixedWindow, SlidingWindowCounter>,
    |q: usize| fixed(q).and(sliding((q + 2) % WINDOWS.len())),
    |q: usize, origin| {
        let (limit, window) = WINDOWS[(q + 2) % WINDOWS.len()];
        vec![
            Limit::fixed(WINDOWS[q].0, WINDOWS[q].1, origin),
            Limit::sliding(limit, window, origin),
        ]
    },
    books: no
);

/// The sliding window log: one quota, no tiers.
struct Log;
impl Family for Log {
    const SLOTS: bool = true;
    fn plan(_: usize, _: u64) -> Plan {
        vec![Limit::log(5, SEC)]
    }
    fn keyed(setup: &Setup, _: &Records, clock: Clk) -> Box<dyn Real> {
        let b = log().key_type::<u64>().clock(clock);
        Box::new(KeyedReal {
            limiter: with_memory(b, setup.memory).build().unwrap(),
            reserve: Some(reserve_keyed),
            set_quota: None,
            retier: None,
        })
    }
    fn direct(_: usize, clock: Clk) -> Box<dyn Real> {
        Box::new(DirectReal {
            limiter: log().clock(clock).build_direct().unwrap(),
            reserve: Some(reserve_direct),
        })
    }
}

/// A decision's figures, as the model writes them.
fn figures(d: &Decision) -> Answer {
    let ns = |w: Duration| u64::try_from(w.as_nanos()).unwrap_or(NEVER);
    Answer {
        allowed: d.is_allowed(),
        limit: d.limit(),
        remaining: d.remaining(),
        retry_after: ns(d.retry_after()),
        replenish_after: ns(d.replenish_after()),
        window: ns(d.window()),
        pair: d.pair_limits().map(|each| {
            each.map(|f| {
                (
                    f.limit(),
                    f.remaining(),
                    ns(f.replenish_after()),
                    ns(f.window()),
                )
            })
        }),
    }
}

fn real_answer(r: Result<Decision, CostError>) -> Result<Answer, CostErr> {
    r.map(|d| figures(&d)).map_err(|e| CostErr {
        cost: e.cost(),
        capacity: e.capacity(),
    })
}

/// Where each tracked client stands against the model.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Track {
    /// Answered exactly as the model so far.
    Exact,
    /// Stricter than the model after a step back, or forgotten live by a
    /// sampled eviction: not compared until reset or removed.
    Apart,
}

/// What a run checks beyond the answers.
#[derive(Default)]
struct Counts {
    /// Each client's admissions: (reading, units; a cancel's negative),
    /// for the span bound.
    admitted: HashMap<u64, Vec<(u64, i64)>>,
    /// Each client's fresh starts after a change that found it forgotten:
    /// (reading, units above the carried state's).
    fresh: HashMap<u64, Vec<(u64, u64)>>,
}

impl Counts {
    /// A booking cancelled (or dropped): what it gave back, if it did, no
    /// longer counts at its ready time, the limiter's (`ready_at`, where
    /// it was counted).
    fn given_back(&mut self, booking: &model::Booking, ready_at: u64, gave: bool) {
        if gave {
            self.admitted
                .entry(booking.client)
                .or_default()
                .push((ready_at, -(booking.cost as i64)));
        }
    }
}

/// The state machine over one family.
struct Run<'a> {
    name: &'static str,
    setup: Setup,
    clock: &'a Clk,
    records: &'a Records,
    model: Model,
    real: &'a dyn Real,
    /// Whether the limiter under test forgets (a keyed one) or not.
    keyed: bool,
    slots: bool,
    track: HashMap<u64, Track>,
    /// The latest reading so far and the deepest step back.
    latest: u64,
    back: u64,
    bookings: Vec<(model::Booking, Box<dyn Booked + 'a>)>,
    counts: Counts,
    flood: u64,
    /// Whether the last check was turned away at a full cap.
    refused: bool,
    /// The latest instant a booking made so far falls due: a full cap's
    /// refusal waits a horizon past it (or past now, if later).
    due: u64,
    /// Whether quota changes and moves are compared by the move rule
    /// (else a client carried over is no longer compared).
    rule: bool,
    /// The family's plan of each quota.
    plan: fn(usize, u64) -> Plan,
    /// The clients that may be forgotten or held alike (see
    /// `oracle_model/moves.rs`).
    maybe_gone: HashSet<u64>,
}

fn now(clock: &Clk) -> u64 {
    clock.now_nanos()
}

impl<'a> Run<'a> {
    fn tier(&self, client: u64) -> u16 {
        if self.setup.tiered {
            self.records
                .lock()
                .unwrap()
                .get(&client)
                .copied()
                .unwrap_or(0)
        } else {
            0
        }
    }

    fn set_clock(&mut self, t: u64) {
        let t = t.min(LATEST);
        self.clock.reading.set(Duration::from_nanos(t));
        self.latest = self.latest.max(t);
        self.back = self.back.max(self.latest - t);
    }

    fn exact(&self, client: u64) -> bool {
        self.track.get(&client).copied().unwrap_or(Track::Exact) == Track::Exact
    }

    /// The refusal a full cap under `DenyNew` answers, at the clock's
    /// reading: it waits as long as a held client can stay busy, a horizon
    /// past the latest booking's instant, or past now if later.
    fn refusal(&self) -> Answer {
        let granted = self.model.tiers[0]
            .iter()
            .fold(None::<&Limit>, |best, l| match best {
                Some(b) if b.capacity() <= l.capacity() => Some(b),
                _ => Some(l),
            })
            .unwrap();
        let horizon = if self.setup.tiered {
            self.model.max_horizon()
        } else {
            self.model.tiers[0]
                .iter()
                .map(Limit::horizon)
                .max()
                .unwrap()
        };
        let wait = self
            .due
            .saturating_sub(now(self.clock))
            .saturating_add(horizon);
        Answer {
            allowed: false,
            limit: self.model.max_capacity(),
            remaining: 0,
            retry_after: wait,
            replenish_after: wait,
            window: granted.window(),
            pair: None,
        }
    }

    /// Compares an answer with the model's, by property 1 or 2. `later`:
    /// the model's answer at the reading `d` later (for a log).
    fn compare(
        &mut self,
        what: &str,
        client: u64,
        real: &Result<Answer, CostErr>,
        model: &Result<Answer, CostErr>,
        later: Option<Result<Answer, CostErr>>,
        cost: u64,
    ) -> Result<(), TestCaseError> {
        let at = now(self.clock);
        if real.is_err() || model.is_err() {
            // Errors depend on the cost and the quotas alone.
            prop_assert_eq!(
                real,
                model,
                "{} {}: client {} at {}",
                self.name,
                what,
                client,
                at
            );
            return Ok(());
        }
        if !self.exact(client) || real == model {
            return Ok(());
        }
        let (r, m) = (real.as_ref().unwrap(), model.as_ref().unwrap());
        let d = self.back;
        prop_assert!(
            self.keyed && d > 0,
            "{} {}: client {} at {}: the limiter answered {:?}, the model {:?}",
            self.name,
            what,
            client,
            at,
            r,
            m
        );
        // After a step back of d: stricter, by at most d; or a client the
        // limiter forgot before the step, fresh at the earlier reading
        // (admitted early by at most its capacity, once: the docs' bound),
        // which answers more permissively than the model's history and is
        // no longer compared.
        let admits = m.allowed || later.is_some_and(|l| l.is_ok_and(|l| l.allowed));
        // What the client held before the decision: no more than the
        // model says (a log aside, which may free another slot).
        let held = |a: &Answer| a.remaining + if a.allowed { cost } else { 0 };
        let stricter = (!r.allowed || admits)
            && (self.slots || held(r) <= held(m))
            && (r.allowed
                || (r.retry_after >= m.retry_after.saturating_sub(d)
                    && r.retry_after <= m.retry_after.saturating_add(d)));
        // Looser as a fresh client is: holding no less, admitting what the
        // model admits, and, refused, told to wait no longer than the model
        // (but for the step back). A refusal that waits longer is neither:
        // a client held past the model, beyond the slack.
        let looser_as_fresh = !stricter
            && r.remaining <= r.limit
            && held(r) >= held(m)
            && (r.allowed || !admits)
            && (r.allowed || r.retry_after <= m.retry_after.saturating_add(d));
        prop_assert!(
            stricter || looser_as_fresh,
            "{} {}: client {} at {} (deepest step back {}): the limiter answered {:?}, \
             beyond the model's {:?} by more than the step back allows",
            self.name,
            what,
            client,
            at,
            d,
            r,
            m
        );
        self.track.insert(client, Track::Apart);
        Ok(())
    }

    /// Reads the stats around `f` on the keyed limiter.
    fn around<R>(&self, f: impl FnOnce() -> R) -> (R, Stats, Stats) {
        let before = self.real.stats();
        let r = f();
        let after = self.real.stats();
        (r, before, after)
    }

    /// Marks apart every tracked client that a sampled eviction may have
    /// forgotten live (one idle in the model decides as a fresh one).
    /// (One idle in the model but not yet a longest horizon, which a
    /// tiered limiter counts as live, may be forgotten too: see
    /// `oracle_model/moves.rs`.)
    fn forgotten_live(&mut self, t: u64) {
        for client in 0..CLIENTS {
            if !self.model.is_idle(client, t) {
                self.track.insert(client, Track::Apart);
                self.restart(client);
            } else if self.model.clients.contains_key(&client) {
                self.maybe_gone.insert(client);
            }
        }
    }

    /// A client that starts afresh by design (reset, removed, forgotten
    /// live): no span before bounds what comes after.
    fn restart(&mut self, client: u64) {
        self.maybe_gone.remove(&client);
        self.counts.admitted.remove(&client);
        self.counts.fresh.remove(&client);
    }

    /// A tracked client's check, with the cap's exceptions: the answer.
    fn checked(
        &mut self,
        i: usize,
        client: u64,
        cost: u64,
    ) -> Result<Result<Answer, CostErr>, TestCaseError> {
        let t = now(self.clock);
        let tier = self.tier(client);
        self.refused = false;
        let (real, before, after) = self.around(|| self.real.check_n(client, cost));
        let real = real_answer(real);
        if after.evicted_live > before.evicted_live {
            self.forgotten_live(t);
        }
        let what = format!("step {i}: check_n({client}, {cost})");
        if after.denied_new > before.denied_new {
            // Turned away at a full cap: the refusal, counted once, and
            // only for a client the limiter may have forgotten.
            prop_assert_eq!(after.denied_new - before.denied_new, 1, "{}", what);
            prop_assert_eq!(after.overflows - before.overflows, 1, "{}", what);
            prop_assert!(
                self.model.is_idle(client, self.latest) || !self.exact(client),
                "{} {}: a client with a live state in the model was turned away as new",
                self.name,
                what
            );
            prop_assert_eq!(&real, &Ok(self.refusal()), "{} {}", self.name, what);
            self.refused = true;
            return Ok(real);
        }
        let untracked = after.admitted_untracked - before.admitted_untracked;
        let later = self
            .slots
            .then(|| self.model.check_unkept(client, tier, t + self.back, cost));
        let model = if untracked > 0 {
            // Decided on a fresh state that is not kept.
            prop_assert_eq!(untracked, 1, "{}", what);
            prop_assert!(
                self.model.is_idle(client, self.latest) || !self.exact(client),
                "{} {}: a client with a live state in the model was decided untracked",
                self.name,
                what
            );
            self.model.check_unkept(client, tier, t, cost)
        } else {
            self.model.check(client, tier, t, cost)
        };
        self.compare(&what, client, &real, &model, later, cost)?;
        if let Ok(a) = &real {
            // (A decision untracked is on a fresh state, not kept.)
            if a.allowed && cost > 0 && untracked == 0 {
                // Held full or fresh, the state is now the same.
                self.maybe_gone.remove(&client);
                self.counts
                    .admitted
                    .entry(client)
                    .or_default()
                    .push((t, cost as i64));
            }
        }
        Ok(real)
    }

    /// A tracked client's peek: the answer.
    fn peeked(
        &mut self,
        i: usize,
        client: u64,
        cost: u64,
    ) -> Result<Result<Answer, CostErr>, TestCaseError> {
        let t = now(self.clock);
        let tier = self.tier(client);
        let real = real_answer(self.real.peek_n(client, cost));
        if let (Memory::DenyNew(cap), Ok(r)) = (self.setup.memory, &real) {
            // A client not held, at a full cap: the refusal.
            if self.keyed
                && cost > 0
                && *r == self.refusal()
                && self.model.is_idle(client, self.latest)
                && self.real.len() as u64 >= cap
            {
                return Ok(real);
            }
        }
        let model = self.model.peek(client, tier, t, cost);
        let later = self
            .slots
            .then(|| self.model.peek(client, tier, t + self.back, cost));
        self.compare(
            &format!("step {i}: peek_n({client}, {cost})"),
            client,
            &real,
            &model,
            later,
            0,
        )?;
        Ok(real)
    }

    fn reserve(
        &mut self,
        i: usize,
        client: u64,
        cost: u64,
        max_wait: u64,
    ) -> Result<(), TestCaseError> {
        let t = now(self.clock);
        let tier = self.tier(client);
        let real_ref = self.real;
        let before = real_ref.stats();
        let Some(real) = real_ref.reserve_n(client, cost, Duration::from_nanos(max_wait)) else {
            return Ok(());
        };
        let after = real_ref.stats();
        let what = format!("step {i}: reserve_n({client}, {cost}, {max_wait} ns)");
        if after.evicted_live > before.evicted_live {
            self.forgotten_live(t);
        }
        if after.denied_new > before.denied_new {
            prop_assert_eq!(after.denied_new - before.denied_new, 1, "{}", what);
            prop_assert!(
                self.model.is_idle(client, self.latest) || !self.exact(client),
                "{}",
                what
            );
            let wait = self.refusal().retry_after;
            prop_assert!(
                matches!(&real, Err(ReserveError::Full { retry_after })
                    if *retry_after == Duration::from_nanos(wait)),
                "{} {}: turned away as new: {:?}",
                self.name,
                what,
                real.as_ref().map(|b| b.wait())
            );
            return Ok(());
        }
        let untracked = after.admitted_untracked > before.admitted_untracked;
        let model = if untracked {
            self.model.clone().reserve(client, tier, t, cost, max_wait)
        } else {
            self.model.reserve(client, tier, t, cost, max_wait)
        };
        let exact = self.exact(client);
        if let (Ok(b), true) = (&real, cost > 0) {
            let ready_at = u64::try_from(b.ready_at().as_nanos()).unwrap();
            self.due = self.due.max(ready_at);
        }
        let real_figures = match &real {
            Ok(b) => Ok((
                u64::try_from(b.wait().as_nanos()).unwrap(),
                u64::try_from(b.ready_at().as_nanos()).unwrap(),
            )),
            Err(ReserveError::TooLong { wait }) => Err(BookErr::TooLong {
                wait: u64::try_from(wait.as_nanos()).unwrap_or(NEVER),
            }),
            Err(ReserveError::Cost(e)) => Err(BookErr::Cost(CostErr {
                cost: e.cost(),
                capacity: e.capacity(),
            })),
            Err(ReserveError::Unsupported) => Err(BookErr::Unsupported),
            Err(other) => {
                prop_assert!(false, "{} {}: {:?}", self.name, what, other);
                unreachable!()
            }
        };
        let model_figures = model.as_ref().map(|b| (b.wait, b.ready_at)).map_err(|e| *e);
        if exact && real_figures != model_figures {
            let d = self.back;
            let cost_error = matches!(
                real_figures,
                Err(BookErr::Cost(_)) | Err(BookErr::Unsupported)
            ) || matches!(
                model_figures,
                Err(BookErr::Cost(_)) | Err(BookErr::Unsupported)
            );
            // After a step back: a wait at most d longer, or refused as
            // too long where the model's wait is within d of the limit.
            let model_wait = match model_figures {
                Ok((w, _)) | Err(BookErr::TooLong { wait: w }) => w,
                _ => 0,
            };
            // Or sooner, for a client forgotten before the step (see
            // `compare`): no longer compared.
            let stricter = match real_figures {
                Ok((w, _)) => w <= model_wait.saturating_add(d),
                Err(BookErr::TooLong { wait: w }) => {
                    w == NEVER || w <= model_wait.saturating_add(d)
                }
                _ => false,
            };
            prop_assert!(
                self.keyed && d > 0 && !cost_error && stricter,
                "{} {} at {} (deepest step back {}): the limiter answered {:?}, the model {:?}",
                self.name,
                what,
                t,
                d,
                real_figures,
                model_figures
            );
            self.track.insert(client, Track::Apart);
        }
        match (real, model) {
            (Ok(real), Ok(booking)) if !untracked => {
                if booking.cost > 0 {
                    self.maybe_gone.remove(&client);
                    // At the limiter's ready instant: the span bound is of
                    // what the limiter admits, and a client apart from the
                    // model (forgotten live) books from its own state.
                    let ready_at = u64::try_from(real.ready_at().as_nanos()).unwrap();
                    self.counts
                        .admitted
                        .entry(client)
                        .or_default()
                        .push((ready_at, booking.cost as i64));
                }
                self.bookings.push((booking, real));
            }
            (Ok(real), _) => real.commit(),
            _ => {}
        }
        if cost > 0 && !untracked {
            // The state the booking leaves, read by a peek of nothing:
            // after a step back, a booking's figures can agree with the
            // model's while its state does not (a client forgotten before
            // the step, booked from a fresh state).
            let real = real_answer(self.real.peek_n(client, 0));
            let model = self.model.peek(client, tier, t, 0);
            let later = self
                .slots
                .then(|| self.model.peek(client, tier, t + self.back, 0));
            self.compare(
                &format!("{what}, then peek_n({client}, 0)"),
                client,
                &real,
                &model,
                later,
                0,
            )?;
        }
        Ok(())
    }

    fn flood(&mut self, i: usize, n: u64) -> Result<(), TestCaseError> {
        let t = now(self.clock);
        let first = FLOOD_BASE + self.flood;
        self.flood += n;
        let real_ref = self.real;
        let before = real_ref.stats();
        let answers: Vec<_> = (first..first + n)
            .map(|id| real_answer(real_ref.check_n(id, 1)))
            .collect();
        let after = real_ref.stats();
        // A new client's first check: a fresh one's (its records put it
        // in tier 0), or the refusal.
        let fresh = self.model.check_unkept(first, 0, t, 1);
        let refusal = Ok(self.refusal());
        let deny_new = matches!(self.setup.memory, Memory::DenyNew(_));
        let mut refused = 0;
        for (k, answer) in answers.iter().enumerate() {
            if deny_new && *answer == refusal {
                refused += 1;
            } else if self.back == 0 {
                prop_assert_eq!(
                    answer,
                    &fresh,
                    "{} step {}: flood client {}",
                    self.name,
                    i,
                    k
                );
            } else {
                prop_assert!(
                    answer
                        .as_ref()
                        .is_ok_and(|a| !a.allowed || fresh.as_ref().is_ok_and(|f| f.allowed)),
                    "{} step {}: flood client {}: {:?}",
                    self.name,
                    i,
                    k,
                    answer
                );
            }
        }
        let d = |a: u64, b: u64| b - a;
        // After a step back a new client held to the floor can be refused
        // with the very figures of a refusal at a full cap.
        let counted = d(before.denied_new, after.denied_new);
        prop_assert!(
            counted == refused || (self.back > 0 && counted <= refused),
            "{} step {}: every new client turned away is counted once in denied_new: {} \
             refusals, {} counted",
            self.name,
            i,
            refused,
            counted
        );
        let held = before.clients as i64 + n as i64
            - counted as i64
            - d(before.admitted_untracked, after.admitted_untracked) as i64
            - d(before.evicted_idle, after.evicted_idle) as i64
            - d(before.evicted_live, after.evicted_live) as i64;
        prop_assert_eq!(
            after.clients as i64,
            held,
            "{} step {}: held = held before + inserts − forgotten ({:?} then {:?})",
            self.name,
            i,
            before,
            after
        );
        if after.evicted_live > before.evicted_live {
            self.forgotten_live(t);
        }
        Ok(())
    }

    fn step(&mut self, i: usize, op: &Op) -> Result<(), TestCaseError> {
        let t = now(self.clock);
        if self.rule {
            self.note_forgettable();
        }
        match *op {
            Op::Check { client, cost } => {
                let _ = self.checked(i, client, cost)?;
            }
            Op::Honour { client, cost } => {
                let Ok(first) = self.checked(i, client, cost)? else {
                    return Ok(());
                };
                let wait = first.retry_after;
                // A refusal at a full cap promises no room (its wait is
                // when room is likely). A reading behind the latest may
                // fall before a window recorded at a later one: a window
                // counts its wait from that window's start, which such a
                // reading has not reached.
                let behind = self.latest > t;
                if first.allowed || self.refused || behind || wait == NEVER || t + wait > LATEST {
                    return Ok(());
                }
                if wait > 0 {
                    self.set_clock(t + wait - 1);
                    let early = self.peeked(i, client, cost)?;
                    if self.back == 0 {
                        prop_assert!(
                            early.as_ref().is_ok_and(|a| !a.allowed),
                            "{} step {}: client {} refused at {} with retry_after {} passes a \
                             nanosecond early: {:?}",
                            self.name,
                            i,
                            client,
                            t,
                            wait,
                            early
                        );
                    }
                }
                self.set_clock(t + wait);
                let then = self.checked(i, client, cost)?;
                prop_assert!(
                    self.refused || then.as_ref().is_ok_and(|a| a.allowed),
                    "{} step {}: client {} refused at {} with retry_after {} ns came back then \
                     and was refused again: {:?}",
                    self.name,
                    i,
                    client,
                    t,
                    wait,
                    then
                );
            }
            Op::Peek { client, cost } => {
                let _ = self.peeked(i, client, cost)?;
            }
            Op::Reserve { client, cost, wait } => self.reserve(i, client, cost, WAITS[wait])?,
            Op::Commit(k) | Op::Cancel(k) | Op::Drop(k) => {
                if self.bookings.is_empty() {
                    return Ok(());
                }
                let (booking, real) = self.bookings.remove(k % self.bookings.len());
                // Read on the limiter's clock now.
                let ready_at = real.ready_at();
                let booked_at = u64::try_from(ready_at.as_nanos()).unwrap();
                let now = Duration::from_nanos(t);
                prop_assert_eq!(
                    (real.remaining_wait(), real.is_ready()),
                    (ready_at.saturating_sub(now), now >= ready_at),
                    "{} step {}: a booking ready at {:?} read at {:?}",
                    self.name,
                    i,
                    ready_at,
                    now
                );
                let expected = self.model.cancel_expected(&booking, t);
                let exact = self.exact(booking.client);
                match op {
                    Op::Commit(_) => real.commit(),
                    Op::Drop(_) if expected != Cancel::Either => {
                        drop(real);
                        if let Cancel::Is(gave) = expected {
                            self.model.cancel(&booking, gave);
                            self.counts.given_back(&booking, booked_at, gave);
                        }
                    }
                    _ => {
                        let gave = real.cancel();
                        match expected {
                            Cancel::Is(want) if exact && gave != want => {
                                prop_assert!(
                                    self.keyed && self.back > 0 && !gave,
                                    "{} step {}: cancel of {:?} at {} gave back {}, the model \
                                     says {}",
                                    self.name,
                                    i,
                                    booking,
                                    t,
                                    gave,
                                    want
                                );
                                self.track.insert(booking.client, Track::Apart);
                            }
                            _ => {}
                        }
                        self.model.cancel(&booking, gave);
                        self.counts.given_back(&booking, booked_at, gave);
                    }
                }
            }
            Op::Reset(client) => {
                let idle = self.model.is_idle(client, self.latest) || !self.exact(client);
                let held = self.real.reset(client);
                prop_assert!(
                    held || idle,
                    "{} step {}: reset of client {} found nothing, with a live state in the model",
                    self.name,
                    i,
                    client
                );
                self.model.reset(client);
                self.restart(client);
                self.track.insert(client, Track::Exact);
            }
            Op::Remove(client) => {
                let idle = self.model.is_idle(client, self.latest) || !self.exact(client);
                let (held, before, after) = self.around(|| self.real.remove(client));
                prop_assert!(
                    held || idle,
                    "{} step {}: remove of client {} found nothing, with a live state in the model",
                    self.name,
                    i,
                    client
                );
                if held {
                    prop_assert_eq!(
                        after.clients + 1,
                        before.clients,
                        "{} step {}: a removal gives its room back",
                        self.name,
                        i
                    );
                }
                self.model.remove(client);
                self.restart(client);
                self.track.insert(client, Track::Exact);
            }
            Op::SetQuota { .. } | Op::Move { .. } if !self.setup.tiered => {}
            Op::SetQuota { tier, quota } => {
                if !self.rule {
                    // Not compared: every client of the tier whose plan
                    // changes. The move rule is compared exactly elsewhere
                    // (`tests/quota.rs`, `tests/retier.rs`, the crate's
                    // own `algorithm::moves`); here an idle client the
                    // limiter may have forgotten comes back fresh, where a
                    // held one keeps what the rule gives it.
                    let plan = (self.plan)(quota, self.setup.origin);
                    let moved: Vec<u64> = (0..CLIENTS)
                        .filter(|c| {
                            self.model
                                .clients
                                .get(c)
                                .is_some_and(|held| held.tier == tier && held.plan != plan)
                        })
                        .collect();
                    for c in moved {
                        self.track.insert(c, Track::Apart);
                    }
                }
                let plan = (self.plan)(quota, self.setup.origin);
                let forgettable = if self.rule {
                    self.forgettable(|_, held| held.tier == tier && held.plan != plan)
                } else {
                    Vec::new()
                };
                self.real.set_quota(tier, quota);
                self.model.set_quota(tier, plan, t);
                self.forked(i, forgettable)?;
                self.after_move(i, None)?;
            }
            Op::Move { client, tier } => {
                if !self.rule {
                    let to = &self.model.tiers[usize::from(tier)];
                    if self
                        .model
                        .clients
                        .get(&client)
                        .is_some_and(|c| c.plan != *to)
                    {
                        self.track.insert(client, Track::Apart);
                    }
                }
                let forgettable = if self.rule {
                    self.forgettable(|c, held| c == client && held.tier != tier)
                } else {
                    Vec::new()
                };
                self.records.lock().unwrap().insert(client, tier);
                let got = self.real.retier(client);
                prop_assert_eq!(
                    got,
                    tier,
                    "{} step {}: retier answers the tier of the records",
                    self.name,
                    i
                );
                let before = self.model.clients.get(&client).cloned();
                self.model.retier(client, tier, t);
                self.forked(i, forgettable)?;
                self.after_move(i, before.map(|c| (client, c)))?;
            }
            Op::Sweep => {
                let (gone, before, after) = self.around(|| self.real.sweep());
                prop_assert_eq!(
                    after.evicted_idle - before.evicted_idle,
                    gone as u64,
                    "{} step {}: sweep() counts what it forgets",
                    self.name,
                    i
                );
                prop_assert_eq!(
                    before.clients - after.clients,
                    gone,
                    "{} step {}: sweep() forgets what it counts",
                    self.name,
                    i
                );
            }
            Op::Flood(n) => self.flood(i, n)?,
            Op::Clock(step) => {
                let t = match step {
                    Step::Still => t,
                    Step::Forward(d) | Step::FarAhead(d) => t + d,
                    Step::Back(d) => t.saturating_sub(d),
                };
                self.set_clock(t);
            }
        }
        let stats = self.real.stats();
        if let Memory::DenyNew(cap) | Memory::EvictSampled(cap) | Memory::AdmitUntracked(cap) =
            self.setup.memory
        {
            prop_assert!(
                stats.clients as u64 <= cap,
                "{} step {}: {:?}",
                self.name,
                i,
                stats
            );
        }
        prop_assert_eq!(stats.clients, self.real.len(), "{} step {}", self.name, i);
        Ok(())
    }
}

/// Runs `ops` on a keyed limiter of family `F` (and, unless `moves`, on
/// a direct one), each against its own model.
fn run<F: Family>(setup: Setup, ops: &[Op], moves: bool) -> Result<(), TestCaseError> {
    let origin = Duration::from_nanos(setup.origin);
    let plans = |tiered: bool| {
        let mut tiers = vec![F::plan(setup.q0, setup.origin)];
        if tiered {
            tiers.push(F::plan(setup.q1, setup.origin));
        }
        tiers
    };
    let mut quotas = vec![setup.q0, setup.q1];
    for op in ops {
        if let Op::SetQuota { quota, .. } = op {
            quotas.push(*quota);
        }
    }
    {
        let records: Records = Arc::default();
        if setup.tiered {
            records.lock().unwrap().extend([(1, 1), (3, 1)]);
        }
        let clock = Clk {
            reading: ManualClock::new(),
            origin,
        };
        clock.reading.set(Duration::from_nanos(setup.start));
        let real = F::keyed(&setup, &records, clock.clone());
        let mut run = Run {
            name: std::any::type_name::<F>(),
            setup,
            clock: &clock,
            records: &records,
            model: Model::new(plans(setup.tiered)),
            real: &*real,
            keyed: true,
            slots: F::SLOTS,
            track: HashMap::new(),
            latest: setup.start,
            back: 0,
            bookings: Vec::new(),
            counts: Counts::default(),
            flood: 0,
            refused: false,
            due: 0,
            rule: moves,
            plan: F::plan,
            maybe_gone: HashSet::new(),
        };
        for (i, op) in ops.iter().enumerate() {
            run.step(i, op)?;
        }
        if moves {
            run.finish(&quotas)?;
        }
    }
    if !moves {
        // The direct limiter: every client's checks, peeks and bookings
        // made on its one budget.
        let records: Records = Arc::default();
        // On the keyed run's clock: windows start on the Unix epoch's
        // multiples, as a keyed limiter's do.
        let clock = Clk {
            reading: ManualClock::new(),
            origin,
        };
        clock.reading.set(Duration::from_nanos(setup.start));
        let real = F::direct(setup.q0, clock.clone());
        let direct = Setup {
            tiered: false,
            memory: Memory::Passes,
            ..setup
        };
        let mut run = Run {
            name: "direct",
            setup: direct,
            clock: &clock,
            records: &records,
            model: Model::new(vec![F::plan(setup.q0, setup.origin)]),
            real: &*real,
            keyed: false,
            slots: F::SLOTS,
            track: HashMap::new(),
            latest: setup.start,
            back: 0,
            bookings: Vec::new(),
            counts: Counts::default(),
            flood: 0,
            refused: false,
            due: 0,
            rule: false,
            plan: F::plan,
            maybe_gone: HashSet::new(),
        };
        for (i, op) in ops.iter().enumerate() {
            let op = match *op {
                Op::Check { cost, .. } => Op::Check { client: 0, cost },
                Op::Peek { cost, .. } => Op::Peek { client: 0, cost },
                Op::Honour { cost, .. } => Op::Honour { client: 0, cost },
                Op::Reserve { cost, wait, .. } => Op::Reserve {
                    client: 0,
                    cost,
                    wait,
                },
                Op::Commit(_) | Op::Cancel(_) | Op::Drop(_) | Op::Clock(_) => op.clone(),
                _ => continue,
            };
            run.step(i, &op)?;
        }
    }
    Ok(())
}

/// 32 sequences a test under `cargo test`; `PROPTEST_CASES` raises it.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(32)
}

fn start() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0), Just(1_000 * SEC), 0..2 * MINUTE]
}

fn origin() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0), Just(1_234_567_890_123_456_789), 0..u64::MAX / 4]
}

fn setup(quotas: usize, tiers: bool) -> impl Strategy<Value = Setup> {
    (
        0..quotas,
        0..quotas,
        memory(),
        origin(),
        start(),
        any::<bool>(),
    )
        .prop_map(move |(q0, q1, memory, origin, start, tiered)| Setup {
            q0,
            q1,
            memory,
            origin,
            start,
            tiered: tiers && tiered,
        })
}

fn tiered(quotas: usize) -> impl Strategy<Value = Setup> {
    setup(quotas, true).prop_map(|s| Setup { tiered: true, ..s })
}

/// Each family's properties: its answers as the model's, with the clock
/// stepping back too, and, for a family that moves, the move rule with and
/// without steps back.
macro_rules! properties {
    ($($family:ident ($setup:expr, $cost:expr): $answers:ident, $back:ident
        $(, moves: $moves:ident, $moves_back:ident)?;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]
            $(
                #[test]
                fn $answers(setup in $setup, ops in ops($cost, false, false)) {
                    run::<$family>(setup, &ops, false)?;
                }

                #[test]
                fn $back(setup in $setup, ops in ops($cost, false, true)) {
                    run::<$family>(setup, &ops, false)?;
                }

                $(
                    #[test]
                    fn $moves(setup in tiered(5), ops in ops($cost, true, false)) {
                        run::<$family>(setup, &ops, true)?;
                    }

                    #[test]
                    fn $moves_back(setup in tiered(5), ops in ops($cost, true, true)) {
                        run::<$family>(setup, &ops, true)?;
                    }
                )?
            )*
        }
    };
}

properties! {
    Buckets (setup(5, true), 21):
        token_bucket_answers_as_the_model,
        token_bucket_after_steps_back_stays_within_the_slack,
        moves: token_bucket_moves_follow_the_rule,
        token_bucket_moves_with_steps_back_follow_the_rule;
    Fixed (setup(5, true), 21):
        fixed_window_answers_as_the_model,
        fixed_window_after_steps_back_stays_within_the_slack,
        moves: fixed_window_moves_follow_the_rule,
        fixed_window_moves_with_steps_back_follow_the_rule;
    Sliding (setup(5, true), 21):
        sliding_window_counter_answers_as_the_model,
        sliding_window_counter_after_steps_back_stays_within_the_slack,
        moves: sliding_window_counter_moves_follow_the_rule,
        sliding_window_counter_moves_with_steps_back_follow_the_rule;
    Log (setup(1, false), 6):
        sliding_window_log_answers_as_the_model,
        sliding_window_log_after_steps_back_stays_within_the_slack;
    Pair (setup(5, true), 21):
        a_pair_answers_as_the_model,
        a_pair_after_steps_back_stays_within_the_slack,
        moves: pair_moves_follow_the_rule,
        pair_moves_with_steps_back_follow_the_rule;
    WindowPair (setup(5, true), 21):
        a_window_pair_answers_as_the_model,
        a_window_pair_after_steps_back_stays_within_the_slack,
        moves: window_pair_moves_follow_the_rule,
        window_pair_moves_with_steps_back_follow_the_rule;
}

/// A direct limiter's windows start on the Unix epoch's multiples, as a
/// keyed limiter's do and as the docs say: on a clock that read 0 at the
/// Unix time 2 500 ns, a window of 1 000 ns ends at the reading 500.
#[test]
fn a_direct_limiters_windows_start_on_the_unix_epochs_multiples() {
    let clock = Clk {
        reading: ManualClock::new(),
        origin: Duration::from_nanos(2_500),
    };
    let window = || {
        FixedWindow::builder()
            .limit(1)
            .window(Duration::from_nanos(1_000))
            .clock(clock.clone())
    };
    let keyed = window().key_type::<u64>().build().unwrap();
    assert!(keyed.allow_request(&0));
    assert_eq!(keyed.check(&0).retry_after(), Duration::from_nanos(500));
    let direct = window().build_direct().unwrap();
    assert!(direct.allow());
    assert_eq!(direct.check().retry_after(), Duration::from_nanos(500));
}

/// The move-rule oracle's shrunk case: a fixed window of 20 a minute, 9
/// spent and 12 booked into the next minute, moved to 5 a second and back:
/// the move carries the booking into the next minute, closing it, and a
/// check in the running minute is refused with a wait counted from that
/// minute's start, not from the reading, so a client that honours it is
/// refused again (retry_after 60 s, then 20 s more).
#[test]
fn a_fixed_window_moved_with_bookings_ahead_waits_from_the_reading() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_000));
    let quota = |limit: u64, window: u64| {
        FixedWindow::builder()
            .limit(limit)
            .window(Duration::from_secs(window))
    };
    let limiter = quota(20, 60)
        .reconfigurable()
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.check_n(&2, 9).unwrap().is_allowed());
    let booked = limiter
        .reserve_n(&2, 12, Duration::from_secs(7_200))
        .unwrap();
    booked.commit();
    limiter.set_quota(0, quota(5, 1)).unwrap();
    limiter.set_quota(0, quota(20, 60)).unwrap();
    let refused = limiter.check(&2);
    assert!(!refused.is_allowed());
    clock.advance(refused.retry_after());
    let then = limiter.check(&2);
    assert!(
        then.is_allowed(),
        "refused with retry_after {:?}, then refused again after it: {then:?}",
        refused.retry_after()
    );
}

/// The move-rule oracle's shrunk case on a clock that starts at 0, in its
/// first window (cut short by the Unix-aligned boundary): a client that
/// spent 1 of 5 a second, moved to 20 a minute and then to 3 an hour, has
/// the whole new limit left, and a check of cost 0 reports all 3. Held
/// full instead until the first window ended, it was told 0 left.
#[test]
fn a_shrunk_case_a_client_moved_in_the_clock_s_first_window_keeps_what_it_had_left() {
    windowed_moves_from_the_clock_s_start(&[
        Op::Check { client: 2, cost: 1 },
        Op::SetQuota { tier: 0, quota: 0 },
        Op::SetQuota { tier: 0, quota: 2 },
        Op::Check { client: 2, cost: 0 },
    ]);
}

/// The setup of the move rule's shrunk cases: a clock that starts at 0,
/// quotas 3 (tier 0) and 0 (tier 1), forgetting by the defaults.
/// A shrunk case's setup: quotas 0 on a clock that starts at 0, with
/// `memory`, tiered or not.
const fn at_zero(memory: Memory, tiered: bool) -> Setup {
    Setup {
        q0: 0,
        q1: 0,
        memory,
        origin: 0,
        start: 0,
        tiered,
    }
}

const FROM_THE_CLOCK_S_START: Setup = Setup {
    q0: 3,
    q1: 0,
    memory: Memory::Passes,
    origin: 0,
    start: 0,
    tiered: true,
};

/// A shrunk case of the move rule's runs, on a clock that starts at 0 and
/// quotas 3 (tier 0) and 0 (tier 1), for each family with windows.
fn windowed_moves_from_the_clock_s_start(ops: &[Op]) {
    let setup = FROM_THE_CLOCK_S_START;
    run::<Fixed>(setup, ops, true).unwrap();
    run::<Sliding>(setup, ops, true).unwrap();
    run::<Pair>(setup, ops, true).unwrap();
    run::<WindowPair>(setup, ops, true).unwrap();
}

/// The move-rule oracle's shrunk case: a client of 20 a minute counts 1,
/// idles two minutes, and is moved to 5 a second and straight back. The
/// first move finds it fresh; the second must too, since it counted
/// nothing in the running minute. It was held to 3 (the fresh state in
/// the narrow windows was the second before the reading, full, which the
/// minute then counted).
#[test]
fn a_shrunk_case_an_idle_client_moved_to_narrower_windows_and_back_stays_fresh() {
    windowed_moves_from_the_clock_s_start(&[
        Op::Check { client: 1, cost: 1 },
        Op::Clock(Step::Forward(121 * SEC)),
        Op::Move { client: 1, tier: 0 },
        Op::Move { client: 1, tier: 1 },
    ]);
}

/// The move-rule oracle's shrunk case: a client forgotten at a reading a
/// minute on, with the clock then stepped back to just after its first
/// booking, is fresh to the limiter there and booked from a full bucket
/// (a window: an empty count), where the model's state still holds the
/// first booking. The booking's figures agree, so it showed only at the
/// next quota change, as a state neither carried nor fresh: after a step
/// back a client's state is compared after each booking, as after a check.
#[test]
fn a_shrunk_case_a_booking_after_a_step_back_is_compared_with_the_state_it_leaves() {
    for back in [60_800_000_000, 60_800_000_001] {
        let ops = [
            Op::Reserve {
                client: 0,
                cost: 1,
                wait: 0,
            },
            Op::Clock(Step::Forward(61 * SEC)),
            Op::Sweep,
            Op::Clock(Step::Back(back)),
            Op::Reserve {
                client: 0,
                cost: 3,
                wait: 0,
            },
            Op::SetQuota { tier: 0, quota: 0 },
        ];
        run::<Buckets>(FROM_THE_CLOCK_S_START, &ops, true).unwrap();
        run::<Pair>(FROM_THE_CLOCK_S_START, &ops, true).unwrap();
    }
}

/// The log oracle's shrunk case (5 a second): 3 spent at 0, the client
/// forgotten at 1 s and spending 1 there, then 5 booked for 2 s and 1 for
/// 3 s, which claims a slot of the first booking, and the first booking
/// cancelled. The forgotten client's fresh log held the admission at 1 s
/// in the slot the second booking took, where the model's held an expiry
/// long past, and the cancel put back only the slots it had claimed: the
/// admission at 1 s was lost (4 left rather than 3).
#[test]
fn a_shrunk_case_a_log_cancel_gives_back_the_same_wherever_its_admissions_sat() {
    let setup = at_zero(Memory::Passes, false);
    let ops = [
        Op::Check { client: 0, cost: 2 },
        Op::Check { client: 0, cost: 1 },
        Op::Clock(Step::Forward(SEC)),
        Op::Sweep,
        Op::Check { client: 0, cost: 1 },
        Op::Reserve {
            client: 0,
            cost: 5,
            wait: 1,
        },
        Op::Reserve {
            client: 0,
            cost: 1,
            wait: 2,
        },
        Op::Cancel(0),
        Op::Peek { client: 0, cost: 0 },
    ];
    run::<Log>(setup, &ops, false).unwrap();
}

/// The oracle's shrunk case of a floor for new clients (each new client
/// judged no earlier than the latest reading at which a client was
/// forgotten): a sweep a nanosecond ahead, a booking, the clock back a
/// nanosecond, and a flood of new clients at a full cap. Judged at the
/// floor, a new client was refused as if the cap's wait ran from there,
/// and counted in `denied_new` where no refusal was told.
#[test]
fn a_shrunk_case_a_new_client_is_judged_at_its_own_reading_after_a_sweep_ahead() {
    let setup = at_zero(Memory::DenyNew(4), false);
    let ops = [
        Op::Clock(Step::Forward(1)),
        Op::Sweep,
        Op::Reserve {
            client: 0,
            cost: 1,
            wait: 0,
        },
        Op::Clock(Step::Back(1)),
        Op::Flood(4),
    ];
    run::<Fixed>(setup, &ops, false).unwrap();
}

/// The oracle's shrunk case of a bucket's debt kept whole through a move
/// (its missing tokens kept in units, repaid at the new rate): a booking
/// of 7, then a quota change. The move rule keeps the tokens the bucket
/// holds (the model: 9 left); kept as a debt in units, 3 were.
#[test]
fn a_shrunk_case_a_booked_bucket_moved_keeps_its_tokens_not_its_debt() {
    let setup = at_zero(Memory::Passes, true);
    let ops = [
        Op::Check { client: 0, cost: 0 },
        Op::Reserve {
            client: 0,
            cost: 7,
            wait: 0,
        },
        Op::SetQuota { tier: 0, quota: 1 },
        Op::Check { client: 0, cost: 0 },
    ];
    run::<Buckets>(setup, &ops, true).unwrap();
}
