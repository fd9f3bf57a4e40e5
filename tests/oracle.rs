//! The oracle: one state machine that drives every public operation of an
//! in-process limiter in any order, and checks every answer against what
//! the docs promise.
//!
//! Each run builds two limiters on one [`ManualClock`]:
//!
//! - the *subject*, which forgets: the once-a-horizon pass, rebuilds that
//!   leave lapsed clients behind, a paced sweep or a cap with an overflow
//!   policy, `sweep()`, and floods of one-off clients that set those off;
//! - its *twin*, built alike but never forgetting (`no_auto_sweep`, no cap,
//!   never swept, no flood).
//!
//! Both receive the same operations on a few tracked clients: `check_n`
//! (costs 0 to capacity + 1), `peek_n`, `reserve_n` then `commit` or
//! `cancel` in any order, `reset`, `remove`, `set_quota` on either tier,
//! moves between tiers (the resolver's records changed, then `retier`),
//! and clock readings that go forward, stand still, jump far ahead and
//! come back. The properties, stated as the docs state them:
//!
//! 1. **Forgetting changes no decision**: while the clock never steps back,
//!    subject and twin answer alike, decision by decision (a denial for a
//!    new client at a full cap under `Overflow::DenyNew` aside); once it
//!    has, a limiter that forgets admits nothing that the same limiter
//!    never forgetting would refuse (checked on each client up to its
//!    first difference, which must be a refusal by the subject). A log
//!    may reuse another of its free slots than the twin, which shows only
//!    after a step back: it admits nothing the twin would refuse `d`
//!    later, `d` the deepest step back so far. A cancel is compared while
//!    no other client's state was replaced since its booking (stamps are
//!    kept per stripe of clients, and stripes differ by hash seed).
//! 2. **Moves never refill**: no sequence of quota changes or tier moves
//!    at one instant admits more than the largest capacity involved.
//! 3. **One budget, with or without a table**: a [`DirectLimiter`] and a
//!    keyed limiter's one client, on the same readings (backward ones
//!    included), answer alike.
//!
//! The shrunk cases of the defects this oracle found are kept below as
//! plain tests.

// Plain `cargo test` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::{
    Algorithm, Both, Builder, Decision, FixedWindow, Limiter, ManualClock, Overflow, Reservable,
    Reservation, SlidingWindowCounter, SlidingWindowLog, Tiered, TokenBucket,
};

const SEC: u64 = 1_000_000_000;
const MINUTE: u64 = 60 * SEC;
const HOUR: u64 = 3_600 * SEC;
const DAY: u64 = 86_400 * SEC;
/// The tracked clients' ids: 0 to 3. Flood clients are numbered from
/// `FLOOD_BASE` on, so they never meet a tracked one.
const CLIENTS: u64 = 4;
const FLOOD_BASE: u64 = 1 << 40;

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
    Reserve {
        client: u64,
        cost: u64,
    },
    /// Commit the booking at this index (modulo how many are open).
    Commit(usize),
    /// Cancel the booking at this index (modulo how many are open).
    Cancel(usize),
    Reset(u64),
    Remove(u64),
    SetQuota {
        tier: u16,
        quota: usize,
    },
    /// The client's tier changes in the resolver's records, then `retier`.
    Move {
        client: u64,
        tier: u16,
    },
    Sweep,
    /// This many one-off clients, one check each, on the subject only.
    Flood(u64),
    Clock(Step),
}

/// A move of the shared clock.
#[derive(Clone, Copy, Debug)]
enum Step {
    Still,
    Forward(u64),
    FarAhead(u64),
    /// Back by this much (saturating at 0).
    Back(u64),
}

/// How the subject keeps its memory bounded (the twin never forgets).
#[derive(Clone, Copy, Debug)]
enum Memory {
    /// The defaults: the once-a-horizon pass and rebuilds that forget.
    Passes,
    /// A paced sweep as well.
    Paced,
    /// A cap that denies new clients once full.
    DenyNew(u64),
    /// A cap that forgets a sampled live client (which may change its
    /// decisions, as documented): property 1 is checked only until the
    /// first such eviction.
    EvictSampled(u64),
    /// A cap that decides a new client on a fresh state it does not keep,
    /// once full: such a client is not limited (as documented), and is no
    /// longer compared; every other client still is.
    AdmitUntracked(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Still),
        6 => (0..2 * MINUTE).prop_map(Step::Forward),
        2 => (0..3 * HOUR).prop_map(Step::Forward),
        2 => (DAY..3_650 * DAY).prop_map(Step::FarAhead),
        3 => (0..3_650 * DAY).prop_map(Step::Back),
    ]
}

fn ops(max_cost: u64, quotas: usize) -> impl Strategy<Value = Vec<Op>> {
    let client = 0..CLIENTS;
    let op = prop_oneof![
        12 => (client.clone(), 0..=max_cost).prop_map(|(client, cost)| Op::Check { client, cost }),
        2 => (client.clone(), 0..=max_cost).prop_map(|(client, cost)| Op::Peek { client, cost }),
        3 => (client.clone(), 0..=max_cost).prop_map(|(client, cost)| Op::Reserve { client, cost }),
        1 => any::<usize>().prop_map(Op::Commit),
        2 => any::<usize>().prop_map(Op::Cancel),
        1 => client.clone().prop_map(Op::Reset),
        1 => client.clone().prop_map(Op::Remove),
        2 => (0..2u16, 0..quotas).prop_map(|(tier, quota)| Op::SetQuota { tier, quota }),
        3 => (client, 0..2u16).prop_map(|(client, tier)| Op::Move { client, tier }),
        1 => Just(Op::Sweep),
        1 => prop_oneof![1..40u64, 500..700u64].prop_map(Op::Flood),
        6 => step().prop_map(Op::Clock),
    ];
    prop::collection::vec(op, 1..80)
}

fn memory() -> impl Strategy<Value = Memory> {
    prop_oneof![
        Just(Memory::Passes),
        Just(Memory::Paced),
        (8..64u64).prop_map(Memory::DenyNew),
        (8..64u64).prop_map(Memory::EvictSampled),
        (8..64u64).prop_map(Memory::AdmitUntracked),
    ]
}

/// Who each tracked client is in the resolver's records.
type Records = Arc<Mutex<HashMap<u64, u16>>>;

fn resolver(records: &Records) -> impl Fn(&u64) -> u16 + Send + Sync + 'static {
    let records = Arc::clone(records);
    move |client| records.lock().unwrap().get(client).copied().unwrap_or(0)
}

/// A booking of either limiter, whatever its type.
trait Booked {
    fn wait(&self) -> Duration;
    fn commit(self: Box<Self>);
    fn cancel(self: Box<Self>) -> bool;
}

impl<A, C> Booked for Reservation<'_, A, u64, C>
where
    A: Algorithm,
    C: tollgate::Clock,
{
    fn wait(&self) -> Duration {
        Reservation::wait(self)
    }
    fn commit(self: Box<Self>) {
        Reservation::commit(*self);
    }
    fn cancel(self: Box<Self>) -> bool {
        Reservation::cancel(*self)
    }
}

/// A booking open on both limiters, with its client.
/// An open booking: its client, the subject's and the twin's, and whether
/// another client's state was replaced since it was made.
type Booking<'a> = (u64, Box<dyn Booked + 'a>, Box<dyn Booked + 'a>, bool);

/// One family of limiters the oracle drives: how to build it with its two
/// tiers on quotas from its list, and what it supports.
trait Family {
    type A: Algorithm;
    /// How many quotas the family's list holds.
    const QUOTAS: usize;
    /// Whether its clients can change tier and quota.
    const TIERED: bool;
    /// Whether an admission may reuse any free part of the state (a log's
    /// free slots), so that which one it reuses shows only at readings
    /// before the admission's: after the clock steps back.
    const FREE_CHOICE: bool = false;
    /// The most a client can be admitted at one instant under quota `q`.
    fn capacity(q: usize) -> u64;
    /// Tiers 0 and 1 on quotas `q0` and `q1`, resolved from `records`.
    fn builder(q0: usize, q1: usize, records: &Records) -> Builder<Self::A, u64, ManualClock>;
    fn set_quota(limiter: &Limiter<Self::A, u64, ManualClock>, tier: u16, q: usize);
    fn retier(limiter: &Limiter<Self::A, u64, ManualClock>, client: u64);
    fn tier_of(limiter: &Limiter<Self::A, u64, ManualClock>, client: u64) -> u16;
    /// `None` if the family books no requests ahead.
    fn reserve(
        limiter: &Limiter<Self::A, u64, ManualClock>,
        client: u64,
        cost: u64,
    ) -> Option<Result<Box<dyn Booked + '_>, ()>>;
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

/// (tokens, per, capacity): two quotas of one interval and two capacities
/// (the reviewers' 20 and 10 a minute), one slow, one fast.
const BUCKETS: [(u64, u64, u64); 4] = [
    (20, MINUTE, 20),
    (10, MINUTE, 10),
    (1, HOUR, 3),
    (5, SEC, 5),
];
/// (limit, window).
const WINDOWS: [(u64, u64); 4] = [(20, MINUTE), (10, MINUTE), (3, HOUR), (5, SEC)];

fn reserve_on<A: Reservable>(
    limiter: &Limiter<A, u64, ManualClock>,
    client: u64,
    cost: u64,
) -> Option<Result<Box<dyn Booked + '_>, ()>> {
    Some(
        limiter
            .reserve_n(&client, cost, Duration::from_secs(2 * 3_600))
            .map(|r| Box::new(r) as Box<dyn Booked + '_>)
            .map_err(|_| ()),
    )
}

macro_rules! tiered_family {
    ($family:ident, $algorithm:ty, $quota:expr, $capacity:expr, $reserve:ident) => {
        struct $family;
        impl Family for $family {
            type A = Tiered<$algorithm>;
            const QUOTAS: usize = 4;
            const TIERED: bool = true;
            fn capacity(q: usize) -> u64 {
                $capacity(q)
            }
            fn builder(
                q0: usize,
                q1: usize,
                records: &Records,
            ) -> Builder<Self::A, u64, ManualClock> {
                $quota(q0)
                    .tier(1, $quota(q1))
                    .tier_by(resolver(records))
                    .clock(ManualClock::new())
            }
            fn set_quota(limiter: &Limiter<Self::A, u64, ManualClock>, tier: u16, q: usize) {
                limiter.set_quota(tier, $quota(q)).unwrap();
            }
            fn retier(limiter: &Limiter<Self::A, u64, ManualClock>, client: u64) {
                let _ = limiter.retier(&client);
            }
            fn tier_of(limiter: &Limiter<Self::A, u64, ManualClock>, client: u64) -> u16 {
                limiter.tier_of(&client)
            }
            fn reserve(
                limiter: &Limiter<Self::A, u64, ManualClock>,
                client: u64,
                cost: u64,
            ) -> Option<Result<Box<dyn Booked + '_>, ()>> {
                $reserve(limiter, client, cost)
            }
        }
    };
}

fn no_reserve<A: Algorithm>(
    _: &Limiter<A, u64, ManualClock>,
    _: u64,
    _: u64,
) -> Option<Result<Box<dyn Booked + '_>, ()>> {
    None
}

tiered_family!(
    Buckets,
    TokenBucket,
    bucket,
    |q: usize| BUCKETS[q].2,
    reserve_on
);
tiered_family!(
    Fixed,
    FixedWindow,
    fixed,
    |q: usize| WINDOWS[q].0,
    reserve_on
);
tiered_family!(
    Sliding,
    SlidingWindowCounter,
    sliding,
    |q: usize| WINDOWS[q].0,
    no_reserve
);
tiered_family!(
    Pair,
    Both<TokenBucket, FixedWindow>,
    |q: usize| bucket(q).and(fixed(q)),
    |q: usize| BUCKETS[q].2.min(WINDOWS[q].0),
    reserve_on
);

/// The sliding window log: one quota, no tiers.
struct Log;
impl Family for Log {
    type A = SlidingWindowLog;
    const QUOTAS: usize = 1;
    const TIERED: bool = false;
    const FREE_CHOICE: bool = true;
    fn capacity(_: usize) -> u64 {
        5
    }
    fn builder(_: usize, _: usize, _: &Records) -> Builder<Self::A, u64, ManualClock> {
        SlidingWindowLog::builder()
            .limit(5)
            .window(Duration::from_secs(1))
            .key_type::<u64>()
            .clock(ManualClock::new())
    }
    fn set_quota(_: &Limiter<Self::A, u64, ManualClock>, _: u16, _: usize) {}
    fn retier(_: &Limiter<Self::A, u64, ManualClock>, _: u64) {}
    fn tier_of(_: &Limiter<Self::A, u64, ManualClock>, _: u64) -> u16 {
        0
    }
    fn reserve(
        limiter: &Limiter<Self::A, u64, ManualClock>,
        client: u64,
        cost: u64,
    ) -> Option<Result<Box<dyn Booked + '_>, ()>> {
        reserve_on(limiter, client, cost)
    }
}

/// A decision as the oracle compares it: `None` for a cost error.
type Answer = Option<Decision>;

/// Where each tracked client stands in property 1.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Track {
    /// Answered alike so far.
    Alike,
    /// The subject refused where the twin admitted, after the clock
    /// stepped back or at a full cap: its later answers differ by design.
    Stricter,
    /// Converted to another quota after the clock stepped back, or while
    /// idle. After a step back the twin converts a state from later
    /// readings, which counts their whole lead as spent; the subject may
    /// have forgotten that state, and its replacement is held to the floor
    /// in time. An idle client the subject may have forgotten comes back
    /// fresh under the new quota, where the twin's keeps what it held (a
    /// move never adds to what a client may take; the move rule's own
    /// bound is checked at every instant below, and exactly against an
    /// independent model by `tests/oracle_model.rs`). They are no longer
    /// compared.
    Converted,
    /// A cancel gave back on one limiter only, after another client's
    /// replacement renewed its stripe's stamps on the other (see
    /// `Booking`): no longer compared.
    Renewed,
    /// Decided on a fresh state the subject did not keep, at a full cap
    /// under `Overflow::AdmitUntracked`: no longer compared.
    Untracked,
    /// Answered more permissively than the twin after the clock stepped
    /// back: forgotten before the step (see the comparison): no longer
    /// compared.
    Forgotten,
}

/// Whether `client`'s state on `limiter` decides as a fresh client's now
/// (all of its quota left, none of it refilling): what a limiter that
/// forgets may have forgotten.
fn idle_on<A: Algorithm>(limiter: &Limiter<A, u64, ManualClock>, client: u64) -> bool {
    let peek = limiter.peek(&client);
    peek.remaining() == peek.limit() && peek.replenish_after().is_zero()
}

/// Runs `ops` on a subject and its twin of family `F`.
fn run<F: Family>(q0: usize, q1: usize, memory: Memory, ops: &[Op]) -> Result<(), TestCaseError> {
    let records: Records = Arc::default();
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_000));
    let subject_builder = F::builder(q0, q1, &records).clock(clock.clone());
    let subject_builder = match memory {
        Memory::Passes => subject_builder,
        Memory::Paced => subject_builder.auto_sweep(4, 64),
        Memory::DenyNew(cap) => subject_builder.max_clients(cap).overflow(Overflow::DenyNew),
        Memory::EvictSampled(cap) => subject_builder
            .max_clients(cap)
            .overflow(Overflow::EvictSampled { sample: 5 }),
        Memory::AdmitUntracked(cap) => subject_builder
            .max_clients(cap)
            .overflow(Overflow::AdmitUntracked),
    };
    let subject = subject_builder.build().unwrap();
    let twin = F::builder(q0, q1, &records)
        .clock(clock.clone())
        .no_auto_sweep()
        .build()
        .unwrap();
    let mut quotas = [q0, q1];
    let mut bookings: Vec<Booking<'_>> = Vec::new();
    let mut track = [Track::Alike; CLIENTS as usize];
    // Property 2: per client, the units admitted at the current reading and
    // the largest capacity it was held to at it.
    let mut at_instant = [(0u64, 0u64); CLIENTS as usize];
    let mut stepped_back = false;
    let mut high = clock_now(&clock);
    // The deepest any reading has been below the highest before it.
    let mut depth = 0u64;
    let mut flood_id = FLOOD_BASE;
    let capacity_now = |limiter: &Limiter<F::A, u64, ManualClock>, quotas: &[usize; 2], c: u64| {
        F::capacity(quotas[usize::from(F::tier_of(limiter, c).min(1))])
    };
    for (i, op) in ops.iter().enumerate() {
        // Under `DenyNew`, a client the subject forgot is a new client
        // again, denied (by design) while the cap is full.
        let full = match memory {
            Memory::DenyNew(cap) => subject.len() as u64 + 1 >= cap,
            _ => false,
        };
        // Decisions on untracked states so far: one more after this
        // operation's call, and its client was decided untracked.
        let untracked_before = subject.stats().admitted_untracked;
        let untracked_now = || {
            matches!(memory, Memory::AdmitUntracked(_))
                && subject.stats().admitted_untracked > untracked_before
        };
        // Property 1 on one pair of answers for `client`.
        // `later`: the twin's answer `depth` after this reading, where a
        // free choice (`Family::FREE_CHOICE`) can have shown.
        let mut compare = |client: u64, ours: Answer, theirs: Answer, later: Answer, what: &str| {
            let t = &mut track[client as usize];
            if untracked_now() {
                *t = Track::Untracked;
            }
            if *t != Track::Alike || ours == theirs {
                return Ok(());
            }
            // A live client forgotten to make room starts afresh, as
            // documented: which one is not told, so every client is then
            // off the comparison.
            let stats = subject.stats();
            let evicted = matches!(memory, Memory::EvictSampled(_));
            if stats.evicted_live > 0 || (evicted && stats.admitted_untracked > 0) {
                *t = Track::Stricter;
                return Ok(());
            }
            // What a decision grants: admitted or not, and how many unit
            // requests would have passed before it.
            let cost = match *op {
                Op::Check { cost, .. } => cost,
                _ => 0,
            };
            let grant = |a: &Answer| {
                a.map(|d| {
                    let spent = if d.is_allowed() { cost } else { 0 };
                    (d.is_allowed(), d.remaining() + spent)
                })
            };
            let (g_ours, g_theirs) = (grant(&ours), grant(&theirs));
            let looser = match (g_ours, g_theirs) {
                (Some((a, r)), Some((b, q))) => (a && !b) || r > q,
                (a, b) => a != b,
            };
            // Which free slot a log's admission reused shows after a step
            // back, and the limiter that forgot may have chosen another:
            // it admits nothing the twin would refuse `depth` later.
            if looser && F::FREE_CHOICE && stepped_back {
                let admitted = |a: &Answer| a.is_some_and(|d| d.is_allowed());
                if !admitted(&ours) || admitted(&later) {
                    return Ok(());
                }
            }
            // A client the subject forgot before the clock stepped back
            // comes back fresh at the earlier readings, where the twin's
            // state still holds what it spent: it may be admitted early, by
            // at most its capacity, once (the docs' bound; the capacity at
            // one instant is checked below), and is no longer compared.
            if looser && stepped_back {
                *t = Track::Forgotten;
                return Ok(());
            }
            if !looser && (stepped_back || full) {
                if g_ours != g_theirs {
                    *t = Track::Stricter;
                }
                // Equal grants, other figures apart: the states differ by
                // less than a unit, which the later answers will show.
                return Ok(());
            }
            Err(TestCaseError::fail(format!(
                "op {i} {op:?}: {what} of client {client}: the forgetting limiter answered {ours:?}, \
                 the one that never forgets {theirs:?} (clock stepped back: {stepped_back})"
            )))
        };
        match *op {
            Op::Check { client, cost } => {
                // The capacity it is held to now is involved at this instant.
                let cap = capacity_now(&subject, &quotas, client);
                let slot = &mut at_instant[client as usize];
                slot.1 = slot.1.max(cap);
                let later = (F::FREE_CHOICE && stepped_back)
                    .then(|| peek_later(&twin, &clock, depth, client, cost))
                    .flatten();
                let ours = subject.check_n(&client, cost).ok();
                let theirs = twin.check_n(&client, cost).ok();
                for (limiter, answer) in [(&subject, ours), (&twin, theirs)] {
                    let _ = limiter;
                    if let Some(d) = answer {
                        prop_assert!(
                            d.is_allowed() || cost > 0,
                            "op {i}: a cost of 0 is always admitted"
                        );
                    }
                }
                if ours.is_some_and(|d| d.is_allowed())
                    && !matches!(memory, Memory::EvictSampled(_))
                    && !untracked_now()
                {
                    slot.0 += cost;
                    prop_assert!(
                        slot.0 <= slot.1,
                        "op {i} {op:?}: client {client} admitted {} units at one instant, \
                         more than the largest capacity involved ({})",
                        slot.0,
                        slot.1
                    );
                }
                compare(client, ours, theirs, later, "check")?;
            }
            Op::Peek { client, cost } => {
                let later = (F::FREE_CHOICE && stepped_back)
                    .then(|| peek_later(&twin, &clock, depth, client, cost))
                    .flatten();
                let ours = subject.peek_n(&client, cost).ok();
                let theirs = twin.peek_n(&client, cost).ok();
                compare(client, ours, theirs, later, "peek")?;
            }
            Op::Reserve { client, cost } => {
                let (Some(ours), Some(theirs)) = (
                    F::reserve(&subject, client, cost),
                    F::reserve(&twin, client, cost),
                ) else {
                    continue;
                };
                if untracked_now() {
                    track[client as usize] = Track::Untracked;
                }
                let wait = |r: &Result<Box<dyn Booked + '_>, ()>| r.as_ref().ok().map(|b| b.wait());
                let (w_ours, w_theirs) = (wait(&ours), wait(&theirs));
                if track[client as usize] == Track::Alike && w_ours != w_theirs {
                    // A booking ready now is an admission; a later or
                    // refused one is the subject being stricter.
                    let stricter = w_ours.is_none_or(|w| w_theirs.is_some_and(|t| w > t));
                    // A log's free choice (see `compare`): up to `depth`
                    // earlier than the twin's, and answering alike.
                    // (A booking the twin refused as too long: its wait
                    // is its peek's.)
                    let chosen = F::FREE_CHOICE
                        && stepped_back
                        && w_ours.is_some_and(|w| {
                            let t = w_theirs.unwrap_or_else(|| {
                                twin.peek_n(&client, cost)
                                    .map_or(Duration::MAX, |d| d.retry_after())
                            });
                            w + Duration::from_nanos(depth) >= t
                        });
                    if chosen {
                        if let (Ok(a), Ok(b)) = (ours, theirs) {
                            bookings.push((client, a, b, false));
                        }
                        continue;
                    }
                    // Forgotten before the clock stepped back (see
                    // `Track::Forgotten`): no longer compared.
                    if stepped_back && !stricter {
                        track[client as usize] = Track::Forgotten;
                        continue;
                    }
                    let stats = subject.stats();
                    let forced = stats.evicted_live > 0
                        || stats.admitted_untracked > 0
                        || track[client as usize] == Track::Untracked;
                    prop_assert!(
                        forced || ((stepped_back || full) && stricter),
                        "op {i} {op:?}: the forgetting limiter booked {w_ours:?}, the one that \
                         never forgets {w_theirs:?}"
                    );
                    if track[client as usize] == Track::Alike {
                        track[client as usize] = Track::Stricter;
                    }
                }
                if let (Ok(a), Ok(b)) = (ours, theirs) {
                    bookings.push((client, a, b, false));
                }
            }
            Op::Commit(k) | Op::Cancel(k) if !bookings.is_empty() => {
                let (client, a, b, others) = bookings.remove(k % bookings.len());
                if let Op::Commit(_) = op {
                    a.commit();
                    b.commit();
                } else {
                    let (ga, gb) = (a.cancel(), b.cancel());
                    // While the client answers alike on a clock that never
                    // stepped back, and no cap decided for the subject.
                    // A replacement of another client's state ends the
                    // cancellability of its stripe's bookings, and the
                    // stripes differ with each limiter's hash seed: the
                    // answers may then differ.
                    if track[client as usize] == Track::Alike
                        && !stepped_back
                        && !others
                        && matches!(memory, Memory::Passes | Memory::Paced)
                    {
                        prop_assert_eq!(ga, gb, "op {}: a cancel gave back differently", i);
                    } else if others && ga != gb && track[client as usize] == Track::Alike {
                        track[client as usize] = Track::Renewed;
                    }
                }
            }
            Op::Commit(_) | Op::Cancel(_) => {}
            Op::Reset(client) => {
                replaced(&mut bookings, Some(client));
                let _ = subject.reset(&client);
                let _ = twin.reset(&client);
                at_instant[client as usize] = (0, 0);
            }
            Op::Remove(client) => {
                replaced(&mut bookings, Some(client));
                let _ = subject.remove(&client);
                let _ = twin.remove(&client);
                at_instant[client as usize] = (0, 0);
            }
            Op::SetQuota { tier, quota } if F::TIERED => {
                let quota = quota % F::QUOTAS;
                if stepped_back {
                    // See `Track::Converted`.
                    track = [Track::Converted; CLIENTS as usize];
                }
                for c in 0..CLIENTS {
                    if F::tier_of(&twin, c) == tier && idle_on(&twin, c) {
                        // See `Track::Converted`.
                        track[c as usize] = Track::Converted;
                    }
                }
                replaced(&mut bookings, None);
                F::set_quota(&subject, tier, quota);
                F::set_quota(&twin, tier, quota);
                quotas[usize::from(tier)] = quota;
            }
            Op::Move { client, tier } if F::TIERED => {
                if stepped_back || idle_on(&twin, client) {
                    track[client as usize] = Track::Converted;
                }
                replaced(&mut bookings, Some(client));
                records.lock().unwrap().insert(client, tier);
                F::retier(&subject, client);
                F::retier(&twin, client);
            }
            Op::SetQuota { .. } | Op::Move { .. } => {}
            Op::Sweep => {
                let _ = subject.sweep();
            }
            Op::Flood(n) => {
                for _ in 0..n {
                    let _ = subject.check(&flood_id);
                    flood_id += 1;
                }
            }
            Op::Clock(step) => {
                let now = clock_now(&clock);
                let to = move_clock(&clock, step);
                if to < high {
                    stepped_back = true;
                    depth = depth.max(high - to);
                }
                high = high.max(to);
                if to != now {
                    at_instant = [(0, 0); CLIENTS as usize];
                }
            }
        }
        // Every quota a client is held to at this instant is involved.
        for c in 0..CLIENTS {
            let cap = capacity_now(&subject, &quotas, c);
            let slot = &mut at_instant[c as usize];
            if slot.0 > 0 || slot.1 > 0 {
                slot.1 = slot.1.max(cap);
            }
        }
    }
    Ok(())
}

/// `limiter`'s peek for `client` at `depth` after the clock's reading; the
/// clock is set back after.
fn peek_later<A: Algorithm>(
    limiter: &Limiter<A, u64, ManualClock>,
    clock: &ManualClock,
    depth: u64,
    client: u64,
    cost: u64,
) -> Answer {
    let now = clock_now(clock);
    clock.set(Duration::from_nanos(now.saturating_add(depth)));
    let answer = limiter.peek_n(&client, cost).ok();
    clock.set(Duration::from_nanos(now));
    answer
}

/// Marks the open bookings of clients other than `client` (of every
/// client, for `None`) as made before a replacement of another state.
fn replaced(bookings: &mut [Booking<'_>], client: Option<u64>) {
    for booking in bookings.iter_mut().filter(|b| Some(b.0) != client) {
        booking.3 = true;
    }
}

/// Moves the shared clock by `step` (a step back saturates at 0); returns
/// the new reading.
fn move_clock(clock: &ManualClock, step: Step) -> u64 {
    let now = clock_now(clock);
    let to = match step {
        Step::Still => now,
        Step::Forward(by) | Step::FarAhead(by) => now.saturating_add(by),
        Step::Back(by) => now.saturating_sub(by),
    };
    clock.set(Duration::from_nanos(to));
    to
}

fn clock_now(clock: &ManualClock) -> u64 {
    use tollgate::Clock;
    clock.now_nanos()
}

fn config(quotas: usize) -> impl Strategy<Value = (usize, usize, Memory)> {
    (0..quotas, 0..quotas, memory())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn token_buckets_forget_and_move_within_the_exact_bound(
        (q0, q1, memory) in config(4),
        ops in ops(21, 4),
    ) {
        run::<Buckets>(q0, q1, memory, &ops)?;
    }

    #[test]
    fn fixed_windows_forget_and_move_within_the_exact_bound(
        (q0, q1, memory) in config(4),
        ops in ops(21, 4),
    ) {
        run::<Fixed>(q0, q1, memory, &ops)?;
    }

    #[test]
    fn sliding_windows_forget_and_move_within_the_exact_bound(
        (q0, q1, memory) in config(4),
        ops in ops(21, 4),
    ) {
        run::<Sliding>(q0, q1, memory, &ops)?;
    }

    #[test]
    fn pairs_forget_and_move_within_the_exact_bound(
        (q0, q1, memory) in config(4),
        ops in ops(21, 4),
    ) {
        run::<Pair>(q0, q1, memory, &ops)?;
    }

    #[test]
    fn sliding_logs_forget_within_the_exact_bound(
        (_, _, memory) in config(1),
        ops in ops(6, 1),
    ) {
        run::<Log>(0, 0, memory, &ops)?;
    }

    #[test]
    fn a_direct_limiter_decides_as_a_keyed_limiters_one_client(
        q in 0..4usize,
        family in 0..4u8,
        steps in prop::collection::vec((step(), 0..=21u64, any::<bool>()), 1..120),
    ) {
        match family {
            0 => direct_alike(|| bucket(q), &steps)?,
            1 => direct_alike(|| fixed(q), &steps)?,
            2 => direct_alike(|| sliding(q), &steps)?,
            _ => direct_alike(
                || SlidingWindowLog::builder().limit(WINDOWS[q].0).window(Duration::from_nanos(WINDOWS[q].1)),
                &steps,
            )?,
        }
    }
}

/// Property 3: the same readings and costs, peeks and checks, on a direct
/// limiter and a keyed limiter's one client that never forgets.
fn direct_alike<A: Algorithm>(
    builder: impl Fn() -> Builder<A>,
    steps: &[(Step, u64, bool)],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_000));
    let direct = builder().clock(clock.clone()).build_direct().unwrap();
    let keyed = builder()
        .key_type::<u64>()
        .clock(clock.clone())
        .no_auto_sweep()
        .build()
        .unwrap();
    let (mut high, mut stepped_back) = (clock_now(&clock), false);
    // A keyed client is fresh from its first request's reading (a lagging
    // reading never spends on it what a forgotten one spent); a direct
    // limiter has one life, fresh at every reading. Compared while no
    // reading lies before the keyed client's first.
    let mut born = None;
    for (i, &(step, cost, peek)) in steps.iter().enumerate() {
        let to = move_clock(&clock, step);
        if born.is_some_and(|born| to < born) {
            return Ok(());
        }
        let (a, b) = if peek {
            (direct.peek_n(cost).ok(), keyed.peek_n(&0, cost).ok())
        } else {
            (direct.check_n(cost).ok(), keyed.check_n(&0, cost).ok())
        };
        if !peek && cost > 0 && b.is_some() {
            born.get_or_insert(to);
        }
        if to < high {
            stepped_back = true;
        }
        high = high.max(to);
        if stepped_back {
            // Only grants are promised alike once the clock has stepped back.
            let grant = |a: Option<Decision>| a.map(|d| (d.is_allowed(), d.remaining()));
            prop_assert_eq!(
                grant(a),
                grant(b),
                "step {}: {:?} cost {} peek {}",
                i,
                step,
                cost,
                peek
            );
        } else {
            prop_assert_eq!(a, b, "step {}: {:?} cost {} peek {}", i, step, cost, peek);
        }
    }
    Ok(())
}

/// 64 cases a family under `cargo test` (about a second each, in debug);
/// `PROPTEST_CASES` raises it for a soak.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

// The defects the oracle found, each as its shrunk case, kept as plain
// tests.

/// One reading far ahead (a new client's first request a day ahead, an NTP
/// step that comes back) made the once-a-horizon pass forget every spent
/// client, which the clock's return then admitted again.
#[test]
fn a_pass_at_a_reading_far_ahead_forgets_no_spent_client() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(3_600))
        .capacity(1)
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    clock.set(Duration::from_secs(1_000));
    for id in 0..1_000u64 {
        assert!(limiter.allow_request(&id));
    }
    clock.set(Duration::from_secs(1_000 + 86_400));
    assert!(limiter.allow_request(&1_000_000));
    let stats = limiter.stats();
    assert!(stats.auto_sweeps >= 2, "the pass ran: {stats:?}");
    assert_eq!(
        stats.evicted_idle, 0,
        "it trusted the reading of the pass before it"
    );
    clock.set(Duration::from_secs(1_001));
    let again = (0..1_000u64).filter(|id| limiter.allow_request(id)).count();
    assert_eq!(again, 0, "the exact model admits none of them again");
}

/// `sweep()` at a later reading, then a step back: the swept limiter,
/// which forgot the client, admits it at most its capacity more than its
/// twin that never forgets, once; then no more than the twin.
#[test]
fn a_sweep_before_a_step_back_admits_at_most_a_capacity_more_once() {
    fn case<A: Algorithm>(builder: impl Fn() -> Builder<A>) {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(1_000));
        let make = |sweeps: bool| {
            let b = builder().key_type::<u64>().clock(clock.clone());
            if sweeps { b } else { b.no_auto_sweep() }.build().unwrap()
        };
        let (swept, twin) = (make(true), make(false));
        let spend =
            |l: &Limiter<A, u64, ManualClock>| (0..30).filter(|_| l.allow_request(&7)).count();
        assert_eq!(spend(&swept), spend(&twin));
        clock.set(Duration::from_secs(1_000 + 3_600));
        assert_eq!(swept.sweep(), 1);
        clock.set(Duration::from_secs(1_001));
        let name = std::any::type_name::<A>();
        let capacity = swept.check(&7).limit();
        let (ours, theirs) = (spend(&swept), spend(&twin));
        assert!(
            ours <= theirs + capacity as usize,
            "{name}: {ours} against {theirs}"
        );
        assert!(
            ours > theirs,
            "{name}: forgotten, so fresh at the earlier reading"
        );
        assert!(spend(&swept) <= spend(&twin), "{name}: once");
    }
    case(|| bucket(0));
    case(|| fixed(0));
    case(|| sliding(0));
    case(|| {
        SlidingWindowLog::builder()
            .limit(20)
            .window(Duration::from_secs(60))
    });
}

/// A reading far ahead during one `remove` used to hold every client
/// created later to that reading (1 of 20, then a day's wait): forgetting
/// a client on purpose raises no floor.
#[test]
fn a_far_reading_during_remove_leaves_later_clients_alone() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(10, Duration::from_secs(1))
        .capacity(20)
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    clock.set(Duration::from_secs(1_000));
    assert!(limiter.allow_request(&1));
    clock.set(Duration::from_secs(1_000 + 86_400));
    assert!(limiter.remove(&1));
    clock.set(Duration::from_secs(1_001));
    assert_eq!((0..30).filter(|_| limiter.allow_request(&2)).count(), 20);
    assert_eq!((0..30).filter(|_| limiter.allow_request(&1)).count(), 20);
}

/// Five round trips between a 20-a-minute and a 10-a-minute plan at one
/// instant gave a spent 20-capacity client 70 more admissions; five
/// cycles of `set_quota` down and up, 50. The bound is the largest
/// capacity involved: 20 in all.
#[test]
fn moving_between_plans_at_one_instant_never_refills() {
    let records: Records = Arc::default();
    let limiter = bucket(0)
        .tier(1, bucket(1))
        .tier_by(resolver(&records))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let mut admitted = (0..30).filter(|_| limiter.allow_request(&7)).count();
    for _ in 0..5 {
        for tier in [1, 0] {
            records.lock().unwrap().insert(7, tier);
            assert_eq!(limiter.retier(&7), tier);
            admitted += (0..30).filter(|_| limiter.allow_request(&7)).count();
        }
    }
    assert_eq!(admitted, 20);
    let mut admitted = (0..30).filter(|_| limiter.allow_request(&8)).count();
    for _ in 0..5 {
        for q in [1, 0] {
            limiter.set_quota(0, bucket(q)).unwrap();
            admitted += (0..30).filter(|_| limiter.allow_request(&8)).count();
        }
    }
    assert_eq!(admitted, 20);
}

/// Moves between two plans of one rate, spread over time: a client that
/// spends a bucket of 32, then goes down to a bucket of 2 and back up each
/// second (one token a second in both), gets at most the largest capacity
/// and the rate's refill over the span: 32 + 10 in 10 s (it gets 32: back
/// in the large bucket, a debt past the small one counts as the large one
/// spent). Keeping only the share of the bucket turned each second's
/// refill of the small bucket (half of it) into half of the large one:
/// 192 in 10 s. With a resolver's moves (`retier`) and with `set_quota`.
#[test]
fn moving_between_plans_of_one_rate_never_outruns_the_rate() {
    let second = Duration::from_secs(1);
    let plan = |capacity| TokenBucket::builder().rate(1, second).capacity(capacity);
    let records: Records = Arc::default();
    let clock = ManualClock::new();
    let limiter = plan(32)
        .tier(1, plan(2))
        .tier_by(resolver(&records))
        .clock(clock.clone())
        .build()
        .unwrap();
    let spend = |client: u64| (0..100).filter(|_| limiter.allow_request(&client)).count();
    let mut admitted = spend(7);
    for _ in 0..10 {
        records.lock().unwrap().insert(7, 1);
        limiter.retier(&7);
        admitted += spend(7);
        clock.advance(second);
        records.lock().unwrap().insert(7, 0);
        limiter.retier(&7);
        admitted += spend(7);
    }
    assert!((32..=32 + 10).contains(&admitted), "moves: {admitted}");
    let mut admitted = spend(8);
    for _ in 0..10 {
        limiter.set_quota(0, plan(2)).unwrap();
        admitted += spend(8);
        clock.advance(second);
        limiter.set_quota(0, plan(32)).unwrap();
        admitted += spend(8);
    }
    assert!(
        (32..=32 + 10).contains(&admitted),
        "quota changes: {admitted}"
    );
}

/// A window recorded at a reading far ahead (a quota change made then)
/// and a clock that comes back: the empty count of that window is not a
/// fresh state before the window starts (its window still counts there),
/// so the pass must not forget it. Found by the oracle in CI: the limiter
/// that forgot admitted a window's limit again each window, where its twin
/// kept counting in the far window.
#[test]
fn an_empty_window_recorded_far_ahead_is_not_forgotten_before_it_starts() {
    macro_rules! case {
        ($quota:expr, $other:expr) => {{
            let clock = ManualClock::new();
            clock.set(Duration::from_secs(1_000));
            let make = |forgets: bool| {
                let b = $quota
                    .reconfigurable()
                    .key_type::<u64>()
                    .clock(clock.clone());
                if forgets { b } else { b.no_auto_sweep() }.build().unwrap()
            };
            let (forgets, twin) = (make(true), make(false));
            let spend =
                |l: &Limiter<_, u64, ManualClock>| (0..30).filter(|_| l.allow_request(&7)).count();
            assert_eq!(spend(&forgets), spend(&twin));
            // A quota change a year ahead records the client's window there.
            clock.set(Duration::from_secs(1_000 + 365 * 86_400));
            forgets.set_quota(0, $other).unwrap();
            twin.set_quota(0, $other).unwrap();
            clock.set(Duration::from_secs(2_000));
            for id in 1_000..1_700u64 {
                let _ = forgets.check(&id);
            }
            let _ = forgets.sweep();
            for round in 0..5 {
                assert_eq!(spend(&forgets), spend(&twin), "round {round}");
                clock.advance(Duration::from_secs(61));
            }
        }};
    }
    case!(fixed(1), fixed(0));
    case!(sliding(1), sliding(0));
}

/// Found by a soak (`PROPTEST_CASES=25000`), about once in 300 runs: a
/// cancel of client 0's booking gave back on one limiter and not on the
/// other. Not a forgetting: a move of client 3 renewed the stamps of its
/// stripe, which held client 0's booking too on one limiter's hash seed
/// (the stripes differ by seed), and a renewed stripe's bookings give
/// nothing back, as documented. The oracle now compares a cancel only
/// while no other client's state was replaced since its booking; this
/// sequence must pass on every seed (`for i in $(seq 600); do
/// target/debug/deps/oracle-* a_soak_case -q || break; done`).
#[test]
fn a_soak_case_a_cancel_after_a_move() {
    let ops = vec![
        Op::Reserve {
            client: 1,
            cost: 14,
        },
        Op::Clock(Step::Forward(22135146261)),
        Op::Remove(1),
        Op::SetQuota { tier: 1, quota: 1 },
        Op::Check { client: 1, cost: 8 },
        Op::Check {
            client: 1,
            cost: 13,
        },
        Op::Clock(Step::Forward(7882310116714)),
        Op::Check { client: 3, cost: 3 },
        Op::Move { client: 3, tier: 1 },
        Op::Check { client: 2, cost: 9 },
        Op::Cancel(13405152489894326183),
        Op::Check {
            client: 0,
            cost: 19,
        },
        Op::Check {
            client: 2,
            cost: 18,
        },
        Op::Reserve {
            client: 0,
            cost: 13,
        },
        Op::Move { client: 0, tier: 0 },
        Op::Move { client: 3, tier: 0 },
        Op::Check { client: 2, cost: 9 },
        Op::Cancel(10167889513223133291),
        Op::Reserve { client: 0, cost: 5 },
        Op::Check { client: 2, cost: 3 },
        Op::Clock(Step::Back(231224831940246696)),
        Op::Move { client: 3, tier: 1 },
        Op::Clock(Step::Forward(7945891160730)),
        Op::Commit(3803658945864060638),
        Op::Check { client: 1, cost: 9 },
        Op::Check {
            client: 1,
            cost: 18,
        },
        Op::Check {
            client: 2,
            cost: 16,
        },
        Op::Reset(1),
        Op::Move { client: 0, tier: 1 },
        Op::Check {
            client: 1,
            cost: 18,
        },
        Op::Reserve { client: 3, cost: 5 },
        Op::Clock(Step::Forward(77826388919)),
        Op::Reserve {
            client: 0,
            cost: 20,
        },
        Op::Check { client: 0, cost: 9 },
        Op::Check {
            client: 1,
            cost: 21,
        },
        Op::Move { client: 0, tier: 0 },
        Op::Clock(Step::Still),
        Op::Peek {
            client: 2,
            cost: 15,
        },
        Op::Check { client: 2, cost: 6 },
        Op::Reserve {
            client: 0,
            cost: 10,
        },
        Op::Check { client: 2, cost: 8 },
        Op::Clock(Step::Forward(397172985132)),
        Op::SetQuota { tier: 0, quota: 2 },
        Op::Check { client: 0, cost: 2 },
        Op::Cancel(4280625517744045343),
        Op::Move { client: 0, tier: 0 },
        Op::Check {
            client: 3,
            cost: 11,
        },
        Op::SetQuota { tier: 1, quota: 0 },
        Op::Sweep,
        Op::Sweep,
        Op::Cancel(10948023201490151698),
        Op::Clock(Step::Back(79060693585890686)),
        Op::Flood(581),
        Op::Reserve { client: 2, cost: 1 },
        Op::Check {
            client: 3,
            cost: 18,
        },
        Op::Clock(Step::Back(51154129300337818)),
        Op::Clock(Step::Forward(111286837476)),
        Op::Peek {
            client: 3,
            cost: 12,
        },
        Op::Check {
            client: 3,
            cost: 15,
        },
        Op::Check { client: 0, cost: 2 },
        Op::Check { client: 2, cost: 4 },
        Op::Check { client: 0, cost: 5 },
        Op::Move { client: 2, tier: 1 },
        Op::Check { client: 0, cost: 1 },
        Op::Check {
            client: 1,
            cost: 12,
        },
    ];
    run::<Buckets>(0, 2, Memory::Passes, &ops).unwrap();
}

/// Found by the same soak: after a sweep forgot a log client and the
/// clock stepped back by 1 ns, the forgetting limiter booked a request with
/// no wait where the twin waited 1 ns. A check at 1 003 s had reused a
/// different free slot on each (the search starts where the last check
/// ended, and the forgotten log's record of that was gone): the slot
/// reused shows only at readings before the check's, so a log that forgot
/// admits nothing the twin would refuse `d` later, after a step back of
/// `d` (below what the exact log, which drops every expired admission,
/// admits). The oracle checks that bound.
#[test]
fn a_soak_case_a_log_booked_after_a_step_back() {
    let ops = vec![
        Op::Check { client: 3, cost: 1 },
        Op::Clock(Step::Forward(1_000_000_000)),
        Op::Sweep,
        Op::Reserve { client: 3, cost: 5 },
        Op::Reserve { client: 3, cost: 1 },
        Op::Clock(Step::Forward(2_000_000_000)),
        Op::Check { client: 3, cost: 1 },
        Op::Clock(Step::Back(1)),
        Op::Reserve { client: 3, cost: 4 },
    ];
    run::<Log>(0, 0, Memory::Passes, &ops).unwrap();
}

/// Found by a soak once the bound above was in place: the twin refuses a
/// booking as longer than its two hours, where the forgetting log reused
/// another slot a day earlier and books it at once; the twin's wait, 1 ns
/// past two hours, is within the step back of two hours and 1 ns.
#[test]
fn a_soak_case_a_log_booking_the_twin_refuses_as_too_long() {
    let ops = vec![
        Op::Check { client: 1, cost: 3 },
        Op::Reserve { client: 1, cost: 1 },
        Op::Check { client: 0, cost: 0 },
        Op::Clock(Step::Forward(2 * SEC)),
        Op::Sweep,
        Op::Clock(Step::FarAhead(DAY)),
        Op::Reserve { client: 1, cost: 4 },
        Op::Check { client: 0, cost: 0 },
        Op::Clock(Step::Forward(SEC)),
        Op::Check { client: 1, cost: 1 },
        Op::Clock(Step::Back(2 * HOUR + 1)),
        Op::Reserve { client: 1, cost: 1 },
    ];
    run::<Log>(0, 0, Memory::Paced, &ops).unwrap();
}
