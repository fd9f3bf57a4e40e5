//! One specification, two implementations: the same operation sequences
//! run through an in-process limiter on a [`ManualClock`] and a Redis
//! limiter on the same clock (its scripts told each instant), on a real
//! `redis-server`, and every answer must be the same: each decision's
//! outcome, limit, remaining, retry-after, replenish-after and window
//! (the in-process waits rounded up to whole microseconds, the instants
//! at which a script can run), each limit's figures for a pair, and cost
//! errors alike.
//!
//! The operations: time moving on (by nothing, within a window, to and
//! across its edges, by long idle spells), checks and peeks of costs from
//! 0 to past the largest limit, resets and removals, and quota changes of
//! tier 0 and of a tier of its own, drawn from a few quotas per case, so
//! that limits are lowered, raised, lowered then raised, rates and
//! capacities change, and windows change. Clients named `pro-…` are in
//! tier 1. The deny shortcut is on, so its local denials are compared
//! too.
//!
//! The Redis side is a fleet of one to three replicas on one prefix and
//! one clock, built every way (coalescing or not, packed states or text),
//! each operation on any of them, with checks of several clients at once
//! (one batch on a coalescing replica): every answer must still be the
//! one in-process limiter's. `reset` and `remove` go to every replica;
//! quota changes and the deny shortcut only where the fleet is one
//! limiter (the Redis guide says why).
//!
//! The in-process limiter is tiered (`reconfigurable`); the sliding window
//! log, which in-process tiers do not run, is compared without quota
//! changes.
//!
//! What may differ is listed in the table in `crate::guide::redis`, each
//! row naming the test that shows it: here, the booleans `reset` and
//! `remove` answer (whether a key was deleted, against whether the
//! in-process limiter held the client) are not compared.

use core::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::testing::{gap, on_clock, runner, runtime, Server};
use crate::algorithm::Both;
use crate::builder::Builder;
use crate::clock::ManualClock;
use crate::decision::Decision;
use crate::limiter::{Limiter, TierAlgorithm};
use crate::redis::{RedisAlgorithm, RedisBuilder, RedisLimiter};
use crate::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, Tiered, TokenBucket};

/// The clients: two in tier 0, two in tier 1.
const CLIENTS: [&str; 4] = ["a", "b", "pro-c", "pro-d"];

fn tier_of(client: &[u8]) -> u16 {
    u16::from(client.starts_with(b"pro-"))
}

/// One operation on both limiters.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// The clock moves on by this many µs.
    Advance(u64),
    Check {
        client: usize,
        cost: u64,
    },
    Peek {
        client: usize,
        cost: u64,
    },
    /// Checks of cost `cost` of `n` clients from `first` on, all at once
    /// (one batch on a coalescing limiter), each answer compared.
    Together {
        first: usize,
        n: usize,
        cost: u64,
    },
    Reset(usize),
    Remove(usize),
    /// Tier `tier` gets the case's quota number `quota`.
    SetQuota {
        tier: u16,
        quota: usize,
    },
    /// A booking of `cost` waiting at most `max_wait` µs (`None`: any).
    Reserve {
        client: usize,
        cost: u64,
        max_wait: Option<u64>,
    },
    /// The `booking`-th booking still held is cancelled, or committed.
    Settle {
        booking: usize,
        cancel: bool,
    },
}

fn ops(
    unit: u64,
    max_cost: u64,
    quotas: usize,
    changes: bool,
    books: bool,
) -> impl Strategy<Value = Vec<Op>> {
    let client = 0..CLIENTS.len();
    let cost = 0..=max_cost + 1;
    let wait = prop_oneof![Just(None), Just(Some(0)), (0..=4 * unit).prop_map(Some)];
    let books = u32::from(books);
    let op = prop_oneof![
        3 * books => (client.clone(), cost.clone(), wait)
            .prop_map(|(client, cost, max_wait)| Op::Reserve { client, cost, max_wait }),
        2 * books => (0..4usize, prop::bool::ANY)
            .prop_map(|(booking, cancel)| Op::Settle { booking, cancel }),
        4 => gap(unit, 30_000_000).prop_map(Op::Advance),
        6 => (client.clone(), cost.clone()).prop_map(|(client, cost)| Op::Check { client, cost }),
        2 => (client.clone(), cost.clone()).prop_map(|(client, cost)| Op::Peek { client, cost }),
        2 => (client.clone(), 2..=CLIENTS.len(), cost)
            .prop_map(|(first, n, cost)| Op::Together { first, n, cost }),
        1 => client.clone().prop_map(Op::Reset),
        1 => client.prop_map(Op::Remove),
        if changes { 2 } else { 0 } => (0..2u16, 0..quotas).prop_map(|(tier, quota)| Op::SetQuota { tier, quota }),
    ];
    proptest::collection::vec(op, 1..48)
}

/// The in-process decision with its waits rounded up to whole µs.
fn rounded(mut d: Decision) -> Decision {
    crate::redis::script::state::round_figures(&mut d);
    d
}

/// Two answers to one request, compared.
fn same(
    step: usize,
    op: &Op,
    here: Result<Decision, crate::CostError>,
    there: Result<Decision, crate::CheckError>,
) -> Result<(), TestCaseError> {
    match (here, there) {
        (Ok(here), Ok(there)) => {
            prop_assert_eq!(rounded(here), there, "step {}: {:?}", step, op);
        }
        (Err(_), Err(err)) => {
            prop_assert_eq!(
                err.kind(),
                crate::CheckErrorKind::Cost,
                "step {}: {:?}",
                step,
                op
            );
        }
        (here, there) => {
            return Err(TestCaseError::fail(format!(
                "step {step}: {op:?}: in-process {here:?}, Redis {there:?}"
            )))
        }
    }
    Ok(())
}

/// The checks of a `Together`: each client's, made at once on `there`
/// (each its own task, so that a coalescing limiter sends them in one
/// batch), answered in order.
fn together<A: RedisAlgorithm>(
    rt: &tokio::runtime::Runtime,
    there: &RedisLimiter<A>,
    (first, n, cost): (usize, usize, u64),
) -> Vec<Result<Decision, crate::CheckError>> {
    rt.block_on(async {
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let there = there.clone();
                let client = CLIENTS[(first + i) % CLIENTS.len()];
                tokio::spawn(async move { there.check_n(client, cost).await })
            })
            .collect();
        let mut answers = Vec::with_capacity(n);
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        answers
    })
}

/// The clients of a `Together`, in order.
fn clients_of(first: usize, n: usize) -> impl Iterator<Item = &'static str> {
    (0..n).map(move |i| CLIENTS[(first + i) % CLIENTS.len()])
}

/// How one replica of a fleet is built.
#[derive(Debug, Clone, Copy)]
struct Build {
    coalesce: bool,
    shortcut: bool,
    packed: bool,
}

/// A fleet of replicas on one prefix and one clock, and which replica
/// runs each operation.
#[derive(Debug, Clone)]
struct Fleet {
    builds: Vec<Build>,
    /// The replica of the i-th operation (modulo the fleet's size).
    who: Vec<usize>,
}

impl Fleet {
    /// One limiter as built by default, with the deny shortcut.
    fn one() -> Self {
        Fleet {
            builds: vec![Build {
                coalesce: false,
                shortcut: true,
                packed: false,
            }],
            who: vec![0],
        }
    }

    /// One to three replicas built every way (the deny shortcut only
    /// where there is one), each operation on any of them.
    fn any() -> impl Strategy<Value = Self> {
        (
            proptest::collection::vec(
                (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
                    |(coalesce, shortcut, packed)| Build {
                        coalesce,
                        shortcut,
                        packed,
                    },
                ),
                1..=3,
            ),
            proptest::collection::vec(0..3usize, 48),
        )
            .prop_map(|(mut builds, who)| {
                if builds.len() > 1 {
                    // A deny shortcut keeps what Redis last told its own
                    // process: another's spending (or a cancel) since
                    // makes its figures stale for up to a second, as
                    // documented; that bound is tested apart.
                    for b in &mut builds {
                        b.shortcut = false;
                    }
                }
                Fleet { builds, who }
            })
    }

    fn build<A: RedisAlgorithm>(
        &self,
        builder: impl Fn() -> RedisBuilder<A>,
        clock: &ManualClock,
    ) -> Vec<RedisLimiter<A>> {
        self.builds
            .iter()
            .map(|b| {
                let builder = builder().coalesce(b.coalesce).packed_state(b.packed);
                let builder = if b.shortcut {
                    builder
                } else {
                    builder.no_deny_shortcut()
                };
                on_clock(builder, clock)
            })
            .collect()
    }

    /// The replica of operation `step`.
    fn of<'a, T>(&self, replicas: &'a [T], step: usize) -> &'a T {
        &replicas[self.who[step % self.who.len()] % replicas.len()]
    }
}

/// Marks every booking of a client other than `c` disturbed: `c` was
/// reset or removed.
fn disturb<A: crate::cell::Algorithm>(bookings: &mut [Held<'_, A>], c: usize) {
    for b in bookings.iter_mut().filter(|b| b.client != c) {
        b.disturbed = true;
    }
}

/// An algorithm family: its quotas, as data that builds either limiter.
trait Family {
    type A: RedisAlgorithm
        + TierAlgorithm
        + crate::builder::Tierable<Base = Self::A>
        + TryFrom<Builder<Self::A>, Error = crate::ConfigError>;
    type Quota: core::fmt::Debug + Clone;

    fn quota() -> BoxedStrategy<Self::Quota>;
    fn builder(quota: &Self::Quota) -> Builder<Self::A>;
    /// A characteristic time of the quota, µs: a window or a token's
    /// interval.
    fn unit(quota: &Self::Quota) -> u64;
    fn capacity(quota: &Self::Quota) -> u64;

    /// Whether the family books ahead.
    const BOOKS: bool = false;

    /// Books on both limiters (the families that book ahead).
    fn book<'a>(
        here: &'a InProcess<Self::A>,
        there: &RedisLimiter<Self::A>,
        rt: &tokio::runtime::Runtime,
        client: &str,
        cost: u64,
        max_wait: Duration,
    ) -> Booked<'a, Tiered<Self::A>>
    where
        Tiered<Self::A>: crate::cell::Algorithm,
    {
        let _ = (here, there, rt, client, cost, max_wait);
        unreachable!("this family does not book ahead")
    }
}

/// A family's `book`, for the families that book ahead.
macro_rules! books {
    () => {
        const BOOKS: bool = true;
        fn book<'a>(
            here: &'a InProcess<Self::A>,
            there: &RedisLimiter<Self::A>,
            rt: &tokio::runtime::Runtime,
            client: &str,
            cost: u64,
            max_wait: Duration,
        ) -> Booked<'a, Tiered<Self::A>> {
            (
                here.reserve_n(client, cost, max_wait),
                rt.block_on(there.reserve_n(client, cost, max_wait)),
            )
        }
    };
}

/// A family's in-process limiter.
type InProcess<A> = Limiter<Tiered<A>, String, ManualClock>;

/// A booking made on both limiters.
type Booked<'a, A> = (
    Result<crate::Reservation<'a, A, String, ManualClock>, crate::ReserveError>,
    Result<crate::redis::RedisReservation, crate::redis::RedisReserveError>,
);

/// Both limiters' bookings still held, and whether another client was
/// reset or removed since each was made (in-process, that may end its
/// cancellability, for a client of the same stripe: see the table of
/// differences), or, for the log, another booking was made.
struct Held<'a, A: crate::cell::Algorithm> {
    here: crate::Reservation<'a, A, String, ManualClock>,
    there: crate::redis::RedisReservation,
    client: usize,
    disturbed: bool,
}

/// Compares two bookings' answers, and keeps them if both were made.
fn booked<'a, A: crate::cell::Algorithm>(
    step: usize,
    op: &Op,
    client: usize,
    (here, there): Booked<'a, A>,
    held: &mut Vec<Held<'a, A>>,
) -> Result<(), TestCaseError> {
    match (here, there) {
        (Ok(here), Ok(there)) => {
            prop_assert_eq!(
                crate::redis::script::state::round_up_to_us(here.wait()),
                there.wait(),
                "step {}: {:?}",
                step,
                op
            );
            prop_assert_eq!(here.cost(), there.cost());
            held.push(Held {
                here,
                there,
                client,
                disturbed: false,
            });
        }
        (Err(here), Err(crate::redis::RedisReserveError::Reserve(there))) => {
            let here = match here {
                crate::ReserveError::TooLong { wait } => crate::ReserveError::TooLong {
                    wait: crate::redis::script::state::round_up_to_us(wait),
                },
                other => other,
            };
            prop_assert_eq!(here, there, "step {}: {:?}", step, op);
        }
        (here, there) => {
            return Err(TestCaseError::fail(format!(
                "step {step}: {op:?}: in-process {here:?}, Redis {there:?}"
            )))
        }
    }
    Ok(())
}

/// Cancels (or commits) a booking on both limiters, comparing what the
/// cancellations give back; whether both gave back.
fn settle<A: crate::cell::Algorithm>(
    rt: &tokio::runtime::Runtime,
    step: usize,
    op: &Op,
    held: &mut Vec<Held<'_, A>>,
    booking: usize,
    cancel: bool,
) -> Result<bool, TestCaseError> {
    if held.is_empty() {
        return Ok(false);
    }
    let h = held.remove(booking % held.len());
    if cancel && !h.disturbed {
        let here = h.here.cancel();
        let there = rt.block_on(h.there.cancel()).unwrap();
        prop_assert_eq!(here, there, "step {}: {:?}", step, op);
        return Ok(here);
    }
    h.here.commit();
    h.there.commit();
    Ok(false)
}

/// A server, a runtime and a connection to the server; `None` where no
/// `redis-server` can start.
fn started() -> Option<(
    Server,
    tokio::runtime::Runtime,
    ::redis::aio::ConnectionManager,
)> {
    let server = Server::start()?;
    let rt = runtime();
    let conn = rt.block_on(server.manager());
    Some((server, rt, conn))
}

/// Runs `cases` sequences of each family on one server.
fn run<F: Family>(cases_default: u32)
where
    Tiered<F::A>: crate::cell::Algorithm,
{
    let Some((server, rt, conn)) = started() else {
        return;
    };
    let mut runner = runner(cases_default);
    let strategy = proptest::collection::vec(F::quota(), 3).prop_flat_map(|quotas| {
        let unit = F::unit(&quotas[0]);
        let max = quotas.iter().map(F::capacity).max().unwrap_or(1);
        (
            Just(quotas),
            ops(unit, max, 3, true, F::BOOKS),
            Fleet::any(),
        )
    });
    let n = std::cell::Cell::new(0u64);
    runner
        .run(&strategy, |(quotas, ops, fleet)| {
            n.set(n.get() + 1);
            case::<F>(&server, &rt, &conn, (n.get(), &fleet), &quotas, &ops).map(drop)
        })
        .unwrap();
}

/// One sequence of operations on the in-process limiter and on a fleet of
/// Redis limiters on a fresh prefix (`n`) of `server`, each operation on
/// the replica `fleet` names for it (`reset` and `remove` on every
/// replica: another process's deny shortcut may outlive a reset by up to
/// a second, a difference shown apart); how many cancels gave back on
/// both. Quota changes only where the fleet is one limiter: a process
/// converts a state another wrote at its reading, not at the change (the
/// Redis guide).
fn case<F: Family>(
    server: &Server,
    rt: &tokio::runtime::Runtime,
    conn: &::redis::aio::ConnectionManager,
    (n, fleet): (u64, &Fleet),
    quotas: &[F::Quota],
    ops: &[Op],
) -> Result<usize, TestCaseError>
where
    Tiered<F::A>: crate::cell::Algorithm,
{
    let mut given = 0;
    let clock = server.clock();
    let here = F::builder(&quotas[0])
        .reconfigurable()
        .tier_by(|client: &String| tier_of(client.as_bytes()))
        .clock(clock.clone())
        .build()
        .unwrap();
    let prefix = format!("differ{}-{}", std::process::id(), n);
    let replicas = fleet.build(
        || {
            F::builder(&quotas[0])
                .redis(conn.clone(), prefix.clone())
                .tier_by(tier_of)
        },
        &clock,
    );
    let mut bookings: Vec<Held<'_, Tiered<F::A>>> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let client = |i: usize| CLIENTS[i];
        let there = fleet.of(&replicas, step);
        match *op {
            Op::Advance(us) => clock.advance(Duration::from_micros(us)),
            Op::Check { client: c, cost } => {
                same(
                    step,
                    op,
                    here.check_n(client(c), cost),
                    rt.block_on(there.check_n(client(c), cost)),
                )?;
            }
            Op::Peek { client: c, cost } => same(
                step,
                op,
                here.peek_n(client(c), cost),
                rt.block_on(there.peek_n(client(c), cost)),
            )?,
            Op::Together { first, n, cost } => {
                let answers = together(rt, there, (first, n, cost));
                for (c, answer) in clients_of(first, n).zip(answers) {
                    same(step, op, here.check_n(c, cost), answer)?;
                }
            }
            Op::Reset(c) => {
                disturb(&mut bookings, c);
                let _ = here.reset(client(c));
                for there in &replicas {
                    rt.block_on(there.reset(client(c))).unwrap();
                }
            }
            Op::Remove(c) => {
                disturb(&mut bookings, c);
                let _ = here.remove(client(c));
                for there in &replicas {
                    rt.block_on(there.remove(client(c))).unwrap();
                }
            }
            Op::SetQuota { .. } if replicas.len() > 1 => {}
            Op::SetQuota { tier, quota } => {
                here.set_quota(tier, F::builder(&quotas[quota])).unwrap();
                there.set_quota(tier, F::builder(&quotas[quota])).unwrap();
            }
            Op::Reserve {
                client: c,
                cost,
                max_wait,
            } => {
                let max_wait = max_wait.map_or(Duration::MAX, Duration::from_micros);
                let both = F::book(&here, there, rt, client(c), cost, max_wait);
                booked(step, op, c, both, &mut bookings)?;
            }
            Op::Settle { booking, cancel } => {
                given += usize::from(settle(rt, step, op, &mut bookings, booking, cancel)?);
            }
        }
    }
    Ok(given)
}

/// Windows (and token intervals) of a few µs, a millisecond, a quarter
/// second, and twice those.
fn unit() -> impl Strategy<Value = u64> {
    (prop::sample::select(vec![7u64, 1_000, 250_000]), 1..=2u64).prop_map(|(u, m)| u * m)
}

#[derive(Debug, Clone, Copy)]
struct Window {
    limit: u64,
    window_us: u64,
}

fn window() -> BoxedStrategy<Window> {
    (1..=6u64, unit())
        .prop_map(|(limit, window_us)| Window { limit, window_us })
        .boxed()
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: u64,
    interval_us: u64,
    capacity: u64,
}

fn bucket() -> BoxedStrategy<Bucket> {
    (1..=3u64, unit(), 1..=6u64)
        .prop_map(|(tokens, interval_us, capacity)| Bucket {
            tokens,
            interval_us,
            capacity,
        })
        .boxed()
}

fn bucket_builder(q: &Bucket) -> Builder<TokenBucket> {
    TokenBucket::builder()
        .rate(q.tokens, Duration::from_micros(q.tokens * q.interval_us))
        .capacity(q.capacity)
}

struct Buckets;
impl Family for Buckets {
    type A = TokenBucket;
    type Quota = Bucket;
    fn quota() -> BoxedStrategy<Bucket> {
        bucket()
    }
    fn builder(q: &Bucket) -> Builder<TokenBucket> {
        bucket_builder(q)
    }
    fn unit(q: &Bucket) -> u64 {
        q.interval_us
    }
    fn capacity(q: &Bucket) -> u64 {
        q.capacity
    }
    books!();
}

struct Fixed;
impl Family for Fixed {
    type A = FixedWindow;
    type Quota = Window;
    fn quota() -> BoxedStrategy<Window> {
        window()
    }
    fn builder(q: &Window) -> Builder<FixedWindow> {
        FixedWindow::builder()
            .limit(q.limit)
            .window(Duration::from_micros(q.window_us))
    }
    fn unit(q: &Window) -> u64 {
        q.window_us
    }
    fn capacity(q: &Window) -> u64 {
        q.limit
    }
    books!();
}

struct Counter;
impl Family for Counter {
    type A = SlidingWindowCounter;
    type Quota = Window;
    fn quota() -> BoxedStrategy<Window> {
        window()
    }
    fn builder(q: &Window) -> Builder<SlidingWindowCounter> {
        SlidingWindowCounter::builder()
            .limit(q.limit)
            .window(Duration::from_micros(q.window_us))
    }
    fn unit(q: &Window) -> u64 {
        q.window_us
    }
    fn capacity(q: &Window) -> u64 {
        q.limit
    }
}

struct BucketAndWindow;
impl Family for BucketAndWindow {
    type A = Both<TokenBucket, FixedWindow>;
    type Quota = (Bucket, Window);
    fn quota() -> BoxedStrategy<(Bucket, Window)> {
        (bucket(), window()).boxed()
    }
    fn builder(q: &(Bucket, Window)) -> Builder<Self::A> {
        bucket_builder(&q.0).and(Fixed::builder(&q.1))
    }
    fn unit(q: &(Bucket, Window)) -> u64 {
        q.0.interval_us
    }
    fn capacity(q: &(Bucket, Window)) -> u64 {
        q.0.capacity.min(q.1.limit)
    }
    books!();
}

struct CounterAndBucket;
impl Family for CounterAndBucket {
    type A = Both<SlidingWindowCounter, TokenBucket>;
    type Quota = (Window, Bucket);
    fn quota() -> BoxedStrategy<(Window, Bucket)> {
        (window(), bucket()).boxed()
    }
    fn builder(q: &(Window, Bucket)) -> Builder<Self::A> {
        Counter::builder(&q.0).and(bucket_builder(&q.1))
    }
    fn unit(q: &(Window, Bucket)) -> u64 {
        q.0.window_us
    }
    fn capacity(q: &(Window, Bucket)) -> u64 {
        q.0.limit.min(q.1.capacity)
    }
}

#[test]
fn the_token_bucket_on_redis_decides_as_in_process() {
    run::<Buckets>(48);
}

#[test]
fn the_fixed_window_on_redis_decides_as_in_process() {
    run::<Fixed>(48);
}

#[test]
fn the_sliding_window_counter_on_redis_decides_as_in_process() {
    run::<Counter>(48);
}

#[test]
fn a_pair_of_a_bucket_and_a_window_on_redis_decides_as_in_process() {
    run::<BucketAndWindow>(32);
}

/// Three bookings of one client that wait, cancelled last first, then a
/// check: each cancel gives its booking back (the state is what that
/// booking left, once the later ones are undone), as in-process.
fn cancelled_last_first<F: Family>(quota: F::Quota)
where
    Tiered<F::A>: crate::cell::Algorithm,
{
    let Some((server, rt, conn)) = started() else {
        return;
    };
    let reserve = Op::Reserve {
        client: 2,
        cost: 1,
        max_wait: None,
    };
    let cancel = |booking| Op::Settle {
        booking,
        cancel: true,
    };
    let check = Op::Check { client: 2, cost: 1 };
    // The first check takes the capacity: every booking waits.
    let ops = [
        check,
        reserve,
        reserve,
        reserve,
        cancel(2),
        cancel(1),
        cancel(0),
        check,
    ];
    let given = case::<F>(&server, &rt, &conn, (1, &Fleet::one()), &[quota], &ops).unwrap();
    assert_eq!(given, 3, "every cancel compared, and each gave back");
}

#[test]
fn bucket_bookings_cancelled_last_first_are_each_given_back() {
    cancelled_last_first::<Buckets>(Bucket {
        tokens: 1,
        interval_us: 250_000,
        capacity: 1,
    });
}

#[test]
fn fixed_window_bookings_cancelled_last_first_are_each_given_back() {
    cancelled_last_first::<Fixed>(Window {
        limit: 1,
        window_us: 250_000,
    });
}

#[test]
fn pair_bookings_cancelled_last_first_are_each_given_back() {
    cancelled_last_first::<BucketAndWindow>((
        Bucket {
            tokens: 1,
            interval_us: 250_000,
            capacity: 1,
        },
        Window {
            limit: 2,
            window_us: 250_000,
        },
    ));
}

/// A sequence the search found: bookings of a tier-1 client made after
/// its tier's quota changed, one cancelled while an earlier one of the
/// same client is still held.
#[test]
fn a_pair_cancels_as_in_process_after_its_tiers_quota_changed() {
    let Some((server, rt, conn)) = started() else {
        return;
    };
    let bucket = |tokens, interval_us, capacity| Bucket {
        tokens,
        interval_us,
        capacity,
    };
    let window = |limit, window_us| Window { limit, window_us };
    let quotas = [
        (bucket(2, 7, 6), window(4, 7)),
        (bucket(2, 250_000, 5), window(5, 7)),
        (bucket(3, 1_000, 1), window(5, 14)),
    ];
    let reserve = |client, cost, max_wait| Op::Reserve {
        client,
        cost,
        max_wait,
    };
    let check = |client, cost| Op::Check { client, cost };
    let ops = [
        reserve(0, 0, Some(0)),
        reserve(1, 2, Some(8)),
        Op::Advance(14_085_562),
        Op::Advance(2),
        check(3, 3),
        check(0, 0),
        reserve(3, 4, Some(0)),
        Op::Advance(3),
        reserve(3, 3, Some(0)),
        Op::Remove(3),
        Op::Advance(8),
        check(0, 2),
        check(1, 3),
        check(0, 2),
        check(2, 4),
        Op::SetQuota { tier: 1, quota: 0 },
        Op::Reset(0),
        Op::SetQuota { tier: 1, quota: 1 },
        check(2, 4),
        Op::Peek { client: 3, cost: 1 },
        Op::Advance(0),
        check(1, 6),
        Op::Peek { client: 3, cost: 3 },
        Op::Advance(8),
        reserve(0, 5, Some(24)),
        reserve(2, 5, None),
        reserve(2, 4, None),
        reserve(2, 5, Some(0)),
        reserve(1, 6, Some(14)),
        Op::Settle {
            booking: 3,
            cancel: true,
        },
        check(2, 2),
        Op::Settle {
            booking: 2,
            cancel: true,
        },
        Op::Reset(2),
        check(3, 6),
    ];
    case::<BucketAndWindow>(&server, &rt, &conn, (1, &Fleet::one()), &quotas, &ops).unwrap();
}

#[test]
fn a_pair_of_a_counter_and_a_bucket_on_redis_decides_as_in_process() {
    run::<CounterAndBucket>(32);
}

/// The sliding window log, without quota changes (the in-process log has
/// none), on a fleet as the others.
#[test]
fn the_sliding_window_log_on_redis_decides_as_in_process() {
    let Some((server, rt, conn)) = started() else {
        return;
    };
    let mut runner = runner(48);
    let strategy = window().prop_flat_map(|q| {
        (
            Just(q),
            ops(q.window_us, q.limit, 1, false, true),
            Fleet::any(),
        )
    });
    let n = std::cell::Cell::new(0u64);
    runner
        .run(&strategy, |(q, ops, fleet)| {
            n.set(n.get() + 1);
            let clock = server.clock();
            let builder = || {
                SlidingWindowLog::builder()
                    .limit(q.limit)
                    .window(Duration::from_micros(q.window_us))
            };
            let here: Limiter<SlidingWindowLog, String, ManualClock> =
                builder().clock(clock.clone()).build().unwrap();
            let prefix = format!("differlog{}-{}", std::process::id(), n.get());
            let replicas = fleet.build(|| builder().redis(conn.clone(), prefix.clone()), &clock);
            let mut bookings: Vec<Held<'_, SlidingWindowLog>> = Vec::new();
            for (step, op) in ops.iter().enumerate() {
                let there = fleet.of(&replicas, step);
                match *op {
                    Op::Advance(us) => clock.advance(Duration::from_micros(us)),
                    Op::Check { client, cost } => same(
                        step,
                        op,
                        here.check_n(CLIENTS[client], cost),
                        rt.block_on(there.check_n(CLIENTS[client], cost)),
                    )?,
                    Op::Peek { client, cost } => same(
                        step,
                        op,
                        here.peek_n(CLIENTS[client], cost),
                        rt.block_on(there.peek_n(CLIENTS[client], cost)),
                    )?,
                    Op::Together { first, n, cost } => {
                        let answers = together(&rt, there, (first, n, cost));
                        for (c, answer) in clients_of(first, n).zip(answers) {
                            same(step, op, here.check_n(c, cost), answer)?;
                        }
                    }
                    Op::Reset(client) => {
                        disturb(&mut bookings, client);
                        let _ = here.reset(CLIENTS[client]);
                        for there in &replicas {
                            rt.block_on(there.reset(CLIENTS[client])).unwrap();
                        }
                    }
                    Op::Remove(client) => {
                        disturb(&mut bookings, client);
                        let _ = here.remove(CLIENTS[client]);
                        for there in &replicas {
                            rt.block_on(there.remove(CLIENTS[client])).unwrap();
                        }
                    }
                    Op::SetQuota { .. } => {}
                    Op::Reserve {
                        client,
                        cost,
                        max_wait,
                    } => {
                        let max_wait = max_wait.map_or(Duration::MAX, Duration::from_micros);
                        let both = (
                            here.reserve_n(CLIENTS[client], cost, max_wait),
                            rt.block_on(there.reserve_n(CLIENTS[client], cost, max_wait)),
                        );
                        // A later booking of the client may claim an
                        // earlier one's entries: which of them it takes
                        // differs (see the table of differences).
                        for b in bookings.iter_mut().filter(|b| b.client == client) {
                            b.disturbed = true;
                        }
                        booked(step, op, client, both, &mut bookings)?;
                    }
                    Op::Settle { booking, cancel } => {
                        settle(&rt, step, op, &mut bookings, booking, cancel)?;
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}

// ---------------------------------------------------------------------------
// The differences that stay, each shown (see the table in the guide).

/// `reset` and `remove` answer whether Redis held a key for the client
/// (deleted now); in-process, whether the limiter held the client, which
/// a reset in place keeps holding.
#[test]
fn reset_answers_whether_a_key_was_deleted() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    let builder = || {
        FixedWindow::builder()
            .limit(2)
            .window(Duration::from_secs(1))
    };
    let here = builder().clock(clock.clone()).build().unwrap();
    let there = on_clock(
        builder().redis(rt.block_on(server.manager()), "differ-reset"),
        &clock,
    );
    assert!(here.check("a").is_allowed());
    assert!(rt.block_on(there.check("a")).unwrap().is_allowed());
    assert!(here.reset("a"));
    assert!(rt.block_on(there.reset("a")).unwrap());
    assert!(here.reset("a"), "in-process: still held, fresh");
    assert!(!rt.block_on(there.reset("a")).unwrap(), "on Redis: no key");
}

/// A peek of a client neither limiter holds yet is judged under its
/// tier's quota, as a check would be, in-process as on Redis.
#[test]
fn an_unheld_clients_peek_is_judged_by_its_own_tier() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    let builder = |limit| {
        FixedWindow::builder()
            .limit(limit)
            .window(Duration::from_secs(1))
    };
    let here = builder(2)
        .reconfigurable()
        .tier_by(|client: &String| tier_of(client.as_bytes()))
        .clock(clock.clone())
        .build()
        .unwrap();
    here.set_quota(1, builder(5)).unwrap();
    let there = on_clock(
        builder(2)
            .redis(rt.block_on(server.manager()), "differ-unheld")
            .tier_by(tier_of),
        &clock,
    );
    there.set_quota(1, builder(5)).unwrap();
    assert_eq!(here.peek("pro-x").limit(), 5, "in-process: its tier's");
    assert_eq!(rt.block_on(there.peek("pro-x")).unwrap().limit(), 5);
    assert_eq!(here.check("pro-x").limit(), 5, "a check: its tier's");
}

/// A reset of one client never ends the cancellability of another's
/// booking on Redis; in-process it does for a client of the same stripe
/// (one in 256), whose bookings then give nothing back.
#[test]
fn a_reset_of_another_client_never_ends_a_bookings_cancel_on_redis() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    let there = on_clock(
        TokenBucket::builder()
            .rate(1, Duration::from_secs(60))
            .redis(rt.block_on(server.manager()), "differ-stripe"),
        &clock,
    );
    for client in 0..64u32 {
        let client = format!("c{client}");
        rt.block_on(there.reserve(client.as_str(), Duration::MAX))
            .unwrap()
            .commit();
        let booked = rt
            .block_on(there.reserve(client.as_str(), Duration::MAX))
            .unwrap();
        assert!(booked.wait() > Duration::ZERO);
        rt.block_on(there.reset(format!("other-{client}").as_str()))
            .unwrap();
        assert!(rt.block_on(booked.cancel()).unwrap(), "{client}");
    }
}
