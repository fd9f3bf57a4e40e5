//! The oracle's Redis half: one state machine that drives every public
//! operation of a fleet of Redis limiters, built differently, in any
//! order, with faults, against a real `redis-server` (or a Cluster whose
//! nodes' clocks run apart), and holds every client's admissions to the
//! token bucket's exact bound plus what the guide allows.
//!
//! Each case builds three replicas of one token bucket (or of one window
//! algorithm, windows of a day, or of a pair, no leases) on one prefix,
//! each drawn with or without leases (of up to 2 to 16 units, for 1 to 4
//! clients at once), coalescing or one call per check, with or without
//! the deny shortcut, writing states packed or as text (`packed_state`:
//! every replica reads both), with a fail policy (`FailClosed`, `FailOpen`,
//! or `Local` with `local_share(3)`), and with capacities of its own for a
//! paying tier 0 and a free tier 1 (16 to 32 and 2 to 5, later 2 to 32).
//! One resolver, shared by the three, puts each client in its tier. The
//! operations, on four clients:
//!
//! - `check_n` (costs 0 to 2), runs of checks that make a client hot (and
//!   so leased), runs of two clients' checks in turn, and tasks checking
//!   several clients at once (one batch on a coalescing replica);
//! - `peek_n`, `reserve_n` with no wait, then `commit` or `cancel` later,
//!   after any other operations;
//! - `reset` and `remove`, by any replica, leasing or not;
//! - `set_quota` on one replica, and moves of a client between tiers;
//! - faults: `FLUSHALL`, `SCRIPT FLUSH`, outages (`CLIENT PAUSE` while
//!   the operations go on), the server killed and started again (empty)
//!   while they go on, a replica's process killed and started again;
//!   pauses; the server stopped while each replica checks; on patient
//!   replicas, slow replies (`CLIENT PAUSE` well within their timeout),
//!   and a check that spends its client while it waits in Redis's queue
//!   (a script keeps Redis busy);
//!   on the cluster, a client's slot moved to a node whose clock differs
//!   while the operations go on (`reshard.rs`);
//! - one client's checks all at once (a batch that spends it), and a
//!   hash under one client's key while every client checks at once.
//!
//! The property, as the docs state it for a bucket (leased units
//! included) and for quota changes and tier moves: over every span of
//! operations after a client's latest reset or removal, every replica
//! together admits the client at most the largest capacity any replica
//! held it to in the span, plus the units refilled over the span (for a
//! window: that limit in each window the span touches), plus what the
//! guide allows: the units leased out when Redis lost its states (a
//! `FLUSHALL`, a server killed), each answer of `FailOpen`, and what a
//! `Local` replica's fallback may have held of the client when it decided
//! in process: its share of what Redis last told it was left (a share of
//! the slack under the bound then), or its full share for a client it
//! never heard of, plus its refill; and for each move of a client's slot
//! to a node whose clock differs, `⌈3 ms / T⌉` units and the units leased
//! out then. A booking counts from its operation
//! on, and stops counting where its cancel says it was given back.
//!
//! And, answer by answer (`oracle_redis/told.rs`, `oracle_redis/faults.rs`):
//! each `Local` replica's fallback within what Redis last told that
//! replica, and never refusing a check while it surely holds its cost
//! (a fallback that refuses for too long); each wait the deny shortcut
//! tells no shorter than Redis's, asked at once, while only the replica's
//! own checks of the client ran since Redis last answered it (a client
//! that honours the wait is admitted then); a slow reply never counted as a failure, and with no node
//! answering each check goes to the fail policy with the breaker open; a
//! foreign value failing its own client's checks only.
//!
//! Without a `redis-server` binary the test prints why and passes, unless
//! `CI=true`, where a missing server fails it. `PROPTEST_CASES` sets the
//! number of cases (64 by default).

#![cfg(not(feature = "loom"))]

#[path = "oracle_redis/faults.rs"]
mod faults;
mod redis_server;
#[path = "oracle_redis/reshard.rs"]
mod reshard;
#[path = "oracle_redis/shrunk.rs"]
mod shrunk;
#[path = "oracle_redis/told.rs"]
mod told;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis_server::{prefix, runtime, Cluster, Server};
use tollgate::redis::{
    FailPolicy, Lease, RedisAlgorithm, RedisConnection, RedisLimiter, RedisReservation, RedisStats,
};
use tollgate::{Both, Builder, FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};

/// The clients of a case.
const CLIENTS: usize = 4;
/// The replicas of a case.
const REPLICAS: usize = 3;
/// Every quota's interval on one server: a unit per 10 minutes, so that a
/// case's span refills nothing and the bound is the capacity.
const INTERVAL: Duration = Duration::from_secs(600);
/// The windows' length: a day, so that a case of seconds seldom crosses
/// into another window (the bound counts the windows a span touches).
const DAY: Duration = Duration::from_secs(86_400);

/// A booking's future.
type Booking = Pin<Box<dyn Future<Output = Option<RedisReservation>> + Send>>;

/// The algorithm a case's replicas share, and what its bound is.
trait Family: 'static {
    type A: RedisAlgorithm;
    /// Whether it leases.
    const LEASES: bool;
    /// Whether it counts in windows (else it is the bucket).
    const WINDOWED: bool;
    /// Whether each `Local` replica's fallback is bounded from what Redis
    /// last told it (`told.rs`): the token bucket alone.
    const TOLD: bool = false;
    /// A quota of `limit` per `unit` (a bucket's capacity and one unit's
    /// refill interval; a window's limit and length).
    fn quota(limit: u64, unit: Duration) -> Builder<Self::A>;
    /// The most a client held to at most `most` can be admitted from
    /// `began` (on the wall clock, which Redis's `TIME` reads on this host)
    /// to now.
    fn bound(most: u64, unit: Duration, began: SystemTime) -> u64;
    /// Books `n` units of `client` with no wait, if the algorithm books.
    fn reserve(limiter: &RedisLimiter<Self::A>, client: &str, n: u64) -> Booking;
}

/// Where a booking is made: its reservation, or none.
fn book<A: RedisAlgorithm + tollgate::Reservable>(
    limiter: &RedisLimiter<A>,
    client: &str,
    n: u64,
) -> Booking {
    let booking = limiter.reserve_n(client, n, Duration::ZERO);
    Box::pin(async move { booking.await.ok() })
}

/// Ns on the wall clock at `t`.
fn wall(t: SystemTime) -> u128 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos()
}

/// The windows of `unit` (aligned on the Unix epoch) that `began` to now
/// touches, a second either side for the clocks' readings.
fn windows(unit: Duration, began: SystemTime) -> u64 {
    let slack = Duration::from_secs(1).as_nanos();
    let (from, to) = (
        wall(began).saturating_sub(slack),
        wall(SystemTime::now()) + slack,
    );
    (to / unit.as_nanos() - from / unit.as_nanos() + 1) as u64
}

struct Bucket;
impl Family for Bucket {
    type A = TokenBucket;
    const LEASES: bool = true;
    const WINDOWED: bool = false;
    const TOLD: bool = true;
    fn quota(limit: u64, unit: Duration) -> Builder<TokenBucket> {
        TokenBucket::builder().rate(1, unit).capacity(limit)
    }
    fn bound(most: u64, unit: Duration, began: SystemTime) -> u64 {
        let elapsed = began.elapsed().unwrap_or_default();
        most + (elapsed.as_nanos() / unit.as_nanos()) as u64
    }
    fn reserve(limiter: &RedisLimiter<TokenBucket>, client: &str, n: u64) -> Booking {
        book(limiter, client, n)
    }
}

struct Fixed;
impl Family for Fixed {
    type A = FixedWindow;
    const LEASES: bool = false;
    const WINDOWED: bool = true;
    fn quota(limit: u64, unit: Duration) -> Builder<FixedWindow> {
        FixedWindow::builder().limit(limit).window(unit)
    }
    fn bound(most: u64, unit: Duration, began: SystemTime) -> u64 {
        most * windows(unit, began)
    }
    fn reserve(limiter: &RedisLimiter<FixedWindow>, client: &str, n: u64) -> Booking {
        book(limiter, client, n)
    }
}

struct Counter;
impl Family for Counter {
    type A = SlidingWindowCounter;
    const LEASES: bool = false;
    const WINDOWED: bool = true;
    fn quota(limit: u64, unit: Duration) -> Builder<SlidingWindowCounter> {
        SlidingWindowCounter::builder().limit(limit).window(unit)
    }
    fn bound(most: u64, unit: Duration, began: SystemTime) -> u64 {
        most * windows(unit, began)
    }
    fn reserve(_: &RedisLimiter<SlidingWindowCounter>, _: &str, _: u64) -> Booking {
        // It does not book ahead.
        Box::pin(async { None })
    }
}

/// A bucket of the limit, a unit per `unit`, and a fixed window of twice
/// the limit a day: within both bounds.
struct Pair;
impl Family for Pair {
    type A = Both<TokenBucket, FixedWindow>;
    const LEASES: bool = false;
    // The bucket's refill bounds its fallback's.
    const WINDOWED: bool = false;
    fn quota(limit: u64, unit: Duration) -> Builder<Self::A> {
        Bucket::quota(limit, unit).and(Fixed::quota(2 * limit, DAY))
    }
    fn bound(most: u64, unit: Duration, began: SystemTime) -> u64 {
        Bucket::bound(most, unit, began).min(Fixed::bound(2 * most, DAY, began))
    }
    fn reserve(limiter: &RedisLimiter<Self::A>, client: &str, n: u64) -> Booking {
        book(limiter, client, n)
    }
}

struct Log;
impl Family for Log {
    type A = SlidingWindowLog;
    const LEASES: bool = false;
    const WINDOWED: bool = true;
    fn quota(limit: u64, unit: Duration) -> Builder<SlidingWindowLog> {
        SlidingWindowLog::builder().limit(limit).window(unit)
    }
    fn bound(most: u64, unit: Duration, began: SystemTime) -> u64 {
        let elapsed = began.elapsed().unwrap_or_default() + Duration::from_secs(2);
        most * (elapsed.as_nanos().div_ceil(unit.as_nanos())) as u64
    }
    fn reserve(limiter: &RedisLimiter<SlidingWindowLog>, client: &str, n: u64) -> Booking {
        book(limiter, client, n)
    }
}
/// On the cluster whose nodes' clocks differ: a unit per 20 ms, so that
/// spending on the wrong node's clock shows (2 s is 100 units).
const FAST: Duration = Duration::from_millis(20);
/// How far each primary's clock runs ahead of the host's, ms. With three
/// primaries, the hash tags `c0` and `c3` live on the second (300 ms
/// ahead), `c1` on the third (2 s ahead) and `c2` on the first, until a
/// case moves their slots.
const SHIFTS_MS: [i64; 3] = [0, 300, 2_000];

/// What a case runs on: a connection, the server where a case may kill it,
/// and the cluster where a case may move slots between its nodes.
type Fleet<'a> = (
    &'a RedisConnection,
    Option<&'a Arc<Mutex<Server>>>,
    Option<&'a Arc<Cluster>>,
);

/// How one replica is built.
#[derive(Clone, Debug)]
struct Setup {
    /// `Some(max_units)`: it leases.
    lease: Option<u64>,
    /// The most clients it leases to at once (the others go one call
    /// each).
    lease_clients: usize,
    coalesce: bool,
    shortcut: bool,
    /// Its fail policy (`Local` with `local_share(REPLICAS)`).
    policy: FailPolicy,
    /// Tier 0's and tier 1's capacities.
    caps: [u64; 2],
    /// Whether it writes word states packed (`packed_state`); every
    /// replica reads both forms.
    packed: bool,
}

#[derive(Clone, Debug)]
enum Op {
    Check {
        r: usize,
        c: usize,
        cost: u64,
    },
    /// `n` checks in a row: a client this hot is leased.
    Run {
        r: usize,
        c: usize,
        n: usize,
    },
    /// `n` checks of client `c`, each followed by one of client `with`:
    /// two hot clients' traffic interleaved (on a cluster, replies from two
    /// nodes in turn).
    Alternate {
        r: usize,
        c: usize,
        with: usize,
        n: usize,
    },
    /// `n` tasks at once, the i-th checking client `i % CLIENTS`.
    Together {
        r: usize,
        n: usize,
    },
    /// `n` tasks at once, each checking client `c`: one client's checks
    /// in one batch on a coalescing replica, enough to spend it.
    Burst {
        r: usize,
        c: usize,
        n: usize,
    },
    Peek {
        r: usize,
        c: usize,
        cost: u64,
    },
    Reserve {
        r: usize,
        c: usize,
        n: u64,
    },
    /// Settles the `i`-th booking held (modulo their number).
    Settle {
        i: usize,
        cancel: bool,
    },
    Reset {
        r: usize,
        c: usize,
    },
    Remove {
        r: usize,
        c: usize,
    },
    SetQuota {
        r: usize,
        tier: u16,
        cap: u64,
    },
    Move {
        c: usize,
        tier: u16,
    },
    Pause {
        ms: u64,
    },
    /// `FLUSHALL` (every state lost, the leases out kept by their
    /// holders), or `SCRIPT FLUSH` (the scripts loaded again).
    Flush {
        scripts: bool,
    },
    /// `CLIENT PAUSE ms ALL`: Redis answers nothing for `ms` while the
    /// operations after this one go on (each replica's timeout is 100 ms).
    Outage {
        ms: u64,
    },
    /// Replica `r`'s process killed and started again: its leases, its
    /// in-process fallback and its bookings (kept) go with it.
    Restart {
        r: usize,
    },
    /// The `redis-server` killed, and started again (empty) `ms` later
    /// while the operations go on.
    Kill {
        ms: u64,
    },
    /// The `redis-server` stopped, one check of client 0 on each replica
    /// (no node answers: each is answered by the fail policy, and opens
    /// the replica's breaker, or finds it open), and the server started
    /// again (empty).
    Down,
    /// `CLIENT PAUSE ms ALL` on replicas whose timeout is patient: a slow
    /// reply, never a failure.
    Slow {
        ms: u64,
    },
    /// On replicas whose timeout is patient: what client `c` has left (as
    /// replica `r` peeks it) spent by one check on `r` that waits `ms` in
    /// Redis's queue (a script keeps Redis busy, within half a unit's
    /// refill) before Redis judges it, then two
    /// checks of `c` on `r`: a denial the deny shortcut makes from that
    /// late answer tells no shorter wait than Redis (`faults.rs`).
    Late {
        r: usize,
        c: usize,
        ms: u64,
    },
    /// A value of another type (a hash) under client `c`'s key, then `n`
    /// tasks at once on replica `r`, the i-th checking client `i %
    /// CLIENTS`: only client `c`'s checks fail (one batch on a coalescing
    /// replica); then the key deleted.
    Foreign {
        r: usize,
        c: usize,
        n: usize,
    },
    /// On a cluster, client `c`'s slot moved to node `to` (or the next
    /// node, if it is there), by `MIGRATE` a key at a time while the
    /// operations after this one go on (a live reshard, `ASK` and `MOVED`
    /// redirections on the way), to a node whose clock differs.
    Reshard {
        c: usize,
        to: usize,
    },
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop::option::of(2..=16u64),
        1..=CLIENTS,
        any::<bool>(),
        any::<bool>(),
        prop_oneof![
            Just(FailPolicy::FailClosed),
            Just(FailPolicy::FailOpen),
            Just(FailPolicy::Local),
        ],
        // A paying tier 0 and a free tier 1, so that a move down binds.
        [16..=32u64, 2..=5u64],
        any::<bool>(),
    )
        .prop_map(
            |(lease, lease_clients, coalesce, shortcut, policy, caps, packed)| Setup {
                lease,
                lease_clients,
                coalesce,
                shortcut,
                policy,
                caps,
                packed,
            },
        )
}

/// An operation; pauses up to 30 ms, or also of 100 to 800 ms if `long`
/// (for quotas that refill within a case, so that leased slots lapse).
/// Where pauses are long, two hot clients in turn and long pauses are
/// drawn four times as often: spending a lease on one node's clock after
/// replies from another's, once slots have passed, takes both.
fn op(long: bool) -> impl Strategy<Value = Op> {
    let (far, often) = if long {
        (100..=800u64, 4)
    } else {
        (0..=30u64, 1)
    };
    let r = 0..REPLICAS;
    let c = 0..CLIENTS;
    prop_oneof![
        6 => (r.clone(), c.clone(), 0..=2u64).prop_map(|(r, c, cost)| Op::Check { r, c, cost }),
        4 => (r.clone(), c.clone(), 4..=20usize).prop_map(|(r, c, n)| Op::Run { r, c, n }),
        2 * often => (r.clone(), c.clone(), c.clone(), 4..=20usize)
            .prop_map(|(r, c, with, n)| Op::Alternate { r, c, with, n }),
        2 => (r.clone(), 2..=16usize).prop_map(|(r, n)| Op::Together { r, n }),
        2 => (r.clone(), c.clone(), 2..=40usize).prop_map(|(r, c, n)| Op::Burst { r, c, n }),
        1 => (r.clone(), c.clone(), 0..=2u64).prop_map(|(r, c, cost)| Op::Peek { r, c, cost }),
        2 => (r.clone(), c.clone(), 1..=2u64).prop_map(|(r, c, n)| Op::Reserve { r, c, n }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(i, cancel)| Op::Settle { i, cancel }),
        2 => (r.clone(), c.clone()).prop_map(|(r, c)| Op::Reset { r, c }),
        1 => (r.clone(), c.clone()).prop_map(|(r, c)| Op::Remove { r, c }),
        2 => (r, 0..2u16, 2..=32u64).prop_map(|(r, tier, cap)| Op::SetQuota { r, tier, cap }),
        1 => (c.clone(), 0..3usize).prop_map(|(c, to)| Op::Reshard { c, to }),
        2 => (c, 0..2u16).prop_map(|(c, tier)| Op::Move { c, tier }),
        1 => (0..=30u64).prop_map(|ms| Op::Pause { ms }),
        often => far.prop_map(|ms| Op::Pause { ms }),
        1 => any::<bool>().prop_map(|scripts| Op::Flush { scripts }),
        1 => (100..=400u64).prop_map(|ms| Op::Outage { ms }),
        1 => (0..REPLICAS).prop_map(|r| Op::Restart { r }),
        1 => (100..=400u64).prop_map(|ms| Op::Kill { ms }),
        1 => Just(Op::Down),
        1 => (50..=400u64).prop_map(|ms| Op::Slow { ms }),
        2 => (0..REPLICAS, 0..CLIENTS, 20..=200u64).prop_map(|(r, c, ms)| Op::Late { r, c, ms }),
        1 => (0..REPLICAS, 0..CLIENTS, 4..=16usize).prop_map(|(r, c, n)| Op::Foreign { r, c, n }),
    ]
}

/// What the oracle knows of one client over the span from one operation
/// (since its latest reset) to now.
#[derive(Clone, Copy, Debug)]
struct Mark {
    /// The operation it began at.
    op: usize,
    began: SystemTime,
    admitted: u64,
    /// The largest capacity any replica held the client to since.
    most: u64,
}

/// What the oracle knows of a `Local` replica's in-process fallback for one
/// client.
#[derive(Clone, Copy, Debug)]
struct Fallback {
    /// The whole units it may hold, at most.
    level: u64,
    /// Whether a hold may have left a fraction of a unit on top.
    fraction: bool,
    /// Its refill since a whole unit was last counted, ns.
    refill: u128,
    /// The share of a capacity it was last held to.
    share: u64,
}

impl Fallback {
    /// A client it never heard of: its full share.
    fn fresh(share: u64) -> Self {
        Fallback {
            level: share,
            fraction: false,
            refill: 0,
            share,
        }
    }
}

/// A booking held, of `n` units of client `c`, made by operation `op` on
/// replica `r`.
struct Booked {
    r: usize,
    c: usize,
    op: usize,
    n: u64,
    held: RedisReservation,
}

struct Case<F: Family> {
    conn: RedisConnection,
    /// The server, where the case may kill it.
    server: Option<Arc<Mutex<Server>>>,
    /// The start of a server killed, under way.
    starting: Option<std::thread::JoinHandle<()>>,
    /// The cluster, where the case may move slots, and the move under way.
    cluster: Option<Arc<Cluster>>,
    moving: Option<std::thread::JoinHandle<()>>,
    /// Per client, what the guide allows over the bound for its slot's
    /// moves between nodes whose clocks differ (`reshard.rs`).
    moved: [u64; CLIENTS],
    /// The replicas' prefix.
    name: String,
    setups: Vec<Setup>,
    /// Every quota's interval.
    interval: Duration,
    /// Every replica's timeout.
    timeout: Duration,
    replicas: Vec<RedisLimiter<F::A>>,
    /// Each replica's capacity per tier, as set.
    caps: Vec<[u64; 2]>,
    tiers: Arc<[AtomicU16; CLIENTS]>,
    /// Each client's spans, one from each operation since its latest
    /// reset.
    marks: [Vec<Mark>; CLIENTS],
    booked: Vec<Booked>,
    /// What the Redis guide allows over the bound for every client: the
    /// units leased out at every `FLUSHALL` so far (Redis lost the
    /// states), and two units for each check answered by `FailOpen`
    /// (admitted without bound).
    allowance: u64,
    /// And for each client, what the `Local` replicas' fallbacks held of
    /// it when they decided in process (admitted over what Redis knows).
    local: [u64; CLIENTS],
    /// Per replica and client, what its fallback may hold.
    fallbacks: Vec<[Fallback; CLIENTS]>,
    /// When the fallbacks' refill was last counted.
    counted: SystemTime,
    /// Per replica, whether its process started again in the latest
    /// operation (its stats start again from 0).
    restarted: Vec<bool>,
    /// Per replica and client, what its fallback may hold by what Redis
    /// last told it (`told.rs`).
    told: Vec<[told::Told; CLIENTS]>,
    /// Per replica and client, whether only that replica's own checks of
    /// the client ran since Redis last answered one (`faults.rs`: the
    /// deny shortcut's waits).
    quiet: Vec<[bool; CLIENTS]>,
    /// Per replica, what the oracle last saw of its batch tasks
    /// (`told.rs`: a coalescing replica's late answers).
    batches: Vec<told::Batches>,
    /// Whether the operation asked Redis about a wait the shortcut told
    /// (a call that was not a check).
    peeked: bool,
    log: Vec<String>,
}

fn client(c: usize) -> String {
    format!("c{c}")
}

impl<F: Family> Case<F> {
    fn build(
        conn: &RedisConnection,
        name: &str,
        setups: &[Setup],
        (interval, timeout): (Duration, Duration),
    ) -> Self {
        let tiers: Arc<[AtomicU16; CLIENTS]> = Arc::new(Default::default());
        let mut case = Case {
            conn: conn.clone(),
            server: None,
            starting: None,
            cluster: None,
            moving: None,
            moved: [0; CLIENTS],
            name: name.to_owned(),
            setups: setups.to_vec(),
            interval,
            timeout,
            replicas: Vec::new(),
            caps: setups.iter().map(|s| s.caps).collect(),
            tiers,
            marks: Default::default(),
            booked: Vec::new(),
            allowance: 0,
            local: [0; CLIENTS],
            fallbacks: Vec::new(),
            counted: SystemTime::now(),
            restarted: vec![false; setups.len()],
            told: Vec::new(),
            quiet: vec![[false; CLIENTS]; setups.len()],
            batches: vec![told::Batches::default(); setups.len()],
            peeked: false,
            log: Vec::new(),
        };
        case.replicas = (0..setups.len()).map(|r| case.start(r)).collect();
        case.fallbacks = (0..setups.len())
            .map(|r| std::array::from_fn(|c| Fallback::fresh(case.share(r, c))))
            .collect();
        case.told = (0..setups.len())
            .map(|r| std::array::from_fn(|c| case.told_fresh(r, c)))
            .collect();
        case
    }

    /// Replica `r` as a process starting now would build it: as its setup
    /// says, with the capacities set so far.
    fn start(&self, r: usize) -> RedisLimiter<F::A> {
        let (s, caps, interval) = (&self.setups[r], self.caps[r], self.interval);
        let tiers = Arc::clone(&self.tiers);
        let mut b = F::quota(caps[0], interval)
            .redis(self.conn.clone(), &self.name)
            .fail_policy(s.policy)
            .local_share(REPLICAS as u32)
            .timeout(self.timeout)
            .coalesce(s.coalesce)
            .packed_state(s.packed)
            .tier_by(move |id| {
                let c = usize::from(id[1] - b'0');
                // Relaxed: the test sets a tier before the operations it
                // governs, on this thread or before spawning theirs.
                tiers[c].load(Ordering::Relaxed)
            });
        if let Some(units) = s.lease.filter(|_| F::LEASES) {
            // A lease holds at most the bucket's capacity.
            let units = units.min(caps[0]);
            // And a horizon within tier 0's refill.
            let refill = interval.saturating_mul(u32::try_from(caps[0]).unwrap());
            let horizon = refill.min(Duration::from_secs(60));
            b = b.lease(
                Lease::new(horizon)
                    .max_units(units)
                    .max_clients(s.lease_clients),
            );
        }
        if !s.shortcut {
            b = b.no_deny_shortcut();
        }
        let limiter = b.build().unwrap();
        limiter.set_quota(1, F::quota(caps[1], interval)).unwrap();
        limiter
    }

    /// The largest capacity any replica holds client `c` to now.
    fn held_to(&self, c: usize) -> u64 {
        let tier = usize::from(self.tiers[c].load(Ordering::Relaxed));
        self.caps.iter().map(|caps| caps[tier]).max().unwrap()
    }

    /// Every span takes in the capacity each client is held to now.
    fn held_to_now(&mut self) {
        for c in 0..CLIENTS {
            let most = self.held_to(c);
            for mark in &mut self.marks[c] {
                mark.most = mark.most.max(most);
            }
        }
    }

    fn admit(&mut self, c: usize, units: u64) {
        for mark in &mut self.marks[c] {
            mark.admitted += units;
        }
    }

    /// A reset: no span before it bounds what comes after.
    fn restart(&mut self, c: usize) {
        self.marks[c].clear();
    }

    /// Operation `i`, `op`, and the spans it begins: an error where an
    /// answer breaks what the guide states of it.
    async fn apply(&mut self, i: usize, op: &Op) -> Result<(), String> {
        for c in 0..CLIENTS {
            let most = self.held_to(c);
            self.marks[c].push(Mark {
                op: i,
                began: SystemTime::now(),
                admitted: 0,
                most,
            });
        }
        self.unquiet(op);
        match *op {
            Op::Check { r, c, cost } => self.checked(r, c, cost).await?,
            Op::Run { r, c, n } => {
                for _ in 0..n {
                    self.checked(r, c, 1).await?;
                }
            }
            Op::Alternate { r, c, with, n } => {
                for _ in 0..n {
                    for c in [c, with] {
                        self.checked(r, c, 1).await?;
                    }
                }
            }
            Op::Together { r, n } | Op::Burst { r, n, .. } => {
                let (sent, before) = (SystemTime::now(), self.replicas[r].stats());
                let one = match *op {
                    Op::Burst { c, .. } => Some(c),
                    _ => None,
                };
                let answers = self.together(r, n, one).await;
                if told::all_answered(&before, &self.replicas[r].stats()) {
                    // Every admission came from Redis (the shortcut only
                    // denies); a denial came from Redis, which held the
                    // fallback to what it said was left, or from the
                    // shortcut, which left it as it was.
                    for (c, d) in answers {
                        match d {
                            Ok(d) if d.is_allowed() => self.heard(r, c, d.remaining(), sent),
                            Ok(d) => self.low_heard(r, c, d.remaining(), sent),
                            Err(_) => {}
                        }
                    }
                } else {
                    // Some answered by the fail policy, in an order the
                    // oracle cannot tell.
                    for c in 0..CLIENTS {
                        self.low_unknown(r, c);
                    }
                }
            }
            Op::Peek { r, c, cost } => {
                let _ = self.replicas[r].peek_n(&client(c), cost).await;
            }
            Op::Reserve { r, c, n } => {
                if let Some(held) = F::reserve(&self.replicas[r], &client(c), n).await {
                    self.admit(c, n);
                    self.booked.push(Booked {
                        r,
                        c,
                        op: i,
                        n,
                        held,
                    });
                }
            }
            Op::Settle { i, cancel } => {
                if self.booked.is_empty() {
                    return Ok(());
                }
                let booked = self.booked.swap_remove(i % self.booked.len());
                if !cancel {
                    booked.held.commit();
                    return Ok(());
                }
                // A cancel that failed may still reach Redis: counted as
                // given back.
                let given_back = booked.held.cancel().await.unwrap_or(true);
                self.log.push(format!("  given back: {given_back}"));
                if given_back {
                    // Uncounted in every span that counted it: those
                    // begun by its operation or before, since the latest
                    // reset (one before the booking cleared them all).
                    for mark in &mut self.marks[booked.c] {
                        if mark.op <= booked.op {
                            mark.admitted -= booked.n;
                        }
                    }
                }
            }
            Op::Reset { r, c } => {
                // One that failed may still reach Redis: a reset all the
                // same.
                let _ = self.replicas[r].reset(&client(c)).await;
                self.restart(c);
                // Perhaps its fallback's state went too.
                self.told[r][c] = self.told_fresh(r, c);
            }
            Op::Remove { r, c } => {
                let _ = self.replicas[r].remove(&client(c)).await;
                self.restart(c);
                self.told[r][c] = self.told_fresh(r, c);
            }
            Op::SetQuota { r, tier, cap } => {
                match self.replicas[r].set_quota(tier, F::quota(cap, self.interval)) {
                    Ok(()) => self.caps[r][usize::from(tier)] = cap,
                    // A quota below the replica's lease size is refused,
                    // and changes nothing.
                    Err(err) => self.log.push(format!("  refused: {err}")),
                }
                self.held_to_now();
                self.told_reshare_all();
            }
            Op::Move { c, tier } => {
                // Relaxed: see the resolver.
                self.tiers[c].store(tier, Ordering::Relaxed);
                self.held_to_now();
                self.told_reshare_all();
            }
            Op::Pause { ms } => tokio::time::sleep(Duration::from_millis(ms)).await,
            Op::Down => self.down().await?,
            Op::Foreign { r, c, n } => self.foreign(r, c, n).await?,
            Op::Reshard { c, to } => self.reshard(c, to),
            Op::Restart { r } => {
                let fresh = self.start(r);
                drop(std::mem::replace(&mut self.replicas[r], fresh));
                // Its bookings stand as made.
                let (gone, kept) = std::mem::take(&mut self.booked)
                    .into_iter()
                    .partition(|b| b.r == r);
                self.booked = kept;
                for booked in gone {
                    booked.held.commit();
                }
                // A fallback of its own, each client's full share again.
                for c in 0..CLIENTS {
                    self.fallbacks[r][c] = Fallback::fresh(self.share(r, c));
                    self.told[r][c] = self.told_fresh(r, c);
                }
                // Its counters start again from 0; the old process's
                // tasks hold its own fallback, not this one's.
                self.batches[r] = told::Batches::default();
                self.restarted[r] = true;
            }
            // Either fails only while the server is killed: nothing to do.
            Op::Outage { ms } | Op::Slow { ms } => self.pause(ms).await,
            Op::Late { r, c, ms } => {
                let left = self.replicas[r]
                    .peek_n(&client(c), 0)
                    .await
                    .map_or(1, |d| d.remaining().max(1));
                // Within half a unit's refill, so that what the late
                // answer left still denies when it comes back.
                let most = u64::try_from(self.interval.as_millis() / 2).unwrap_or(u64::MAX);
                let busy = self.busy(ms.min(most)).await;
                self.checked(r, c, left).await?;
                let _ = busy.await;
                self.checked(r, c, 1).await?;
                self.checked(r, c, 1).await?;
            }
            Op::Flush { scripts: true } => {
                let _: Result<(), _> = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut self.conn)
                    .await;
            }
            Op::Flush { scripts: false } => {
                // One that fails (the server killed) loses nothing more.
                let flushed: Result<(), _> =
                    redis::cmd("FLUSHALL").query_async(&mut self.conn).await;
                self.states_lost(flushed.is_ok());
            }
            Op::Kill { ms } => {
                let Some(server) = self.server.clone() else {
                    return Ok(());
                };
                self.started();
                server.lock().unwrap().stop();
                self.states_lost(true);
                self.starting = Some(std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    server.lock().unwrap().run();
                }));
            }
        }
        // What the fallbacks surely hold is followed through single
        // checks, and through what touches Redis alone; anything else may
        // have spent a fallback by an amount the oracle cannot tell
        // (`told.rs`): from now on, nothing is sure.
        match op {
            Op::Check { .. }
            | Op::Run { .. }
            | Op::Alternate { .. }
            | Op::Together { .. }
            | Op::Burst { .. }
            | Op::Pause { .. }
            | Op::Outage { .. }
            | Op::Slow { .. }
            | Op::Kill { .. }
            | Op::Flush { .. }
            | Op::Reshard { .. }
            | Op::Restart { .. } => {}
            _ => self.low_unknown_all(),
        }
        self.settle_all();
        Ok(())
    }

    /// Redis lost every state (if `lost`): each client starts afresh, and
    /// the units leased out then may be spent on top (the guide's
    /// allowance).
    fn states_lost(&mut self, lost: bool) {
        if !lost {
            return;
        }
        self.leased_out();
        for c in 0..CLIENTS {
            self.restart(c);
        }
    }

    /// The units leased out now, which a replica may spend on top of a
    /// state Redis lost or a client's key deleted: added to the
    /// allowance.
    fn leased_out(&mut self) {
        let held: u64 = self
            .replicas
            .iter()
            .map(|r| {
                let s = r.stats();
                s.lease_units - s.leased - s.lease_lapsed - s.lease_returned
            })
            .sum();
        self.allowance += held;
        self.log.push(format!("  {held} units leased out"));
    }

    /// Waits for a killed server to be running again.
    fn started(&mut self) {
        if let Some(starting) = self.starting.take() {
            starting.join().unwrap();
        }
        self.moves_done();
    }

    /// Replica `r`'s share of the capacity it holds client `c` to: what
    /// its fallback holds of a client it never heard of.
    fn share(&self, r: usize, c: usize) -> u64 {
        let tier = usize::from(self.tiers[c].load(Ordering::Relaxed));
        (self.caps[r][tier] / REPLICAS as u64).max(1)
    }

    /// Per client, how far under its bound it is now, at most: no more
    /// than that can be left in Redis (the bound holds, and a fallback's
    /// admissions are within its allowance).
    fn slack(&self) -> [u64; CLIENTS] {
        std::array::from_fn(|c| {
            let more = self.allowance + self.local[c] + self.moved[c];
            self.marks[c]
                .iter()
                .map(|m| (self.bound(m) + more).saturating_sub(m.admitted))
                .fold(self.held_to(c) + more, u64::min)
        })
    }

    /// The most the algorithm admits over `m`'s span, to a client held to
    /// at most `m.most`.
    fn bound(&self, m: &Mark) -> u64 {
        F::bound(m.most, self.interval, m.began)
    }

    /// What the fail policies answered in operation `op`, since the
    /// replicas' stats read `before`: `FailOpen`'s answers, and what each
    /// `Local` fallback may have admitted, go into the allowances; a
    /// fallback a reply held goes down to a replica's share of what Redis
    /// can have had left. (Redis's answers were the operation's latest
    /// calls: what it left then is still left, but for the refill since,
    /// and so within the slack now.)
    fn account(&mut self, op: &Op, before: &[RedisStats]) {
        let slack = self.slack();
        // The fallbacks refill: a bucket at a replica's share of the rate,
        // a window's share over its length at most, and whole at a new
        // window.
        let elapsed = self.counted.elapsed().unwrap_or_default().as_nanos();
        let crossed = F::WINDOWED && windows(self.interval, self.counted) > 1;
        self.counted = SystemTime::now();
        // The replica an operation ran on, the clients it decided, and
        // whether every call it made was a check of that one client.
        let all: Vec<usize> = (0..CLIENTS).collect();
        let (on, clients, one) = match *op {
            Op::Check { r, c, .. } | Op::Run { r, c, .. } => (Some(r), vec![c], true),
            Op::Peek { r, c, .. }
            | Op::Reserve { r, c, .. }
            | Op::Reset { r, c }
            | Op::Remove { r, c } => (Some(r), vec![c], false),
            Op::Alternate { r, c, with, .. } => (Some(r), vec![c, with], false),
            // Every client checks, one with a foreign value.
            Op::Foreign { r, .. } => (Some(r), all.clone(), false),
            Op::Together { r, .. } => (Some(r), all.clone(), false),
            Op::Burst { r, c, .. } => (Some(r), vec![c], false),
            _ => (None, all.clone(), false),
        };
        for r in 0..self.replicas.len() {
            let now = self.replicas[r].stats();
            let before = if std::mem::take(&mut self.restarted[r]) {
                RedisStats::default()
            } else {
                before[r]
            };
            match self.setups[r].policy {
                FailPolicy::FailOpen => {
                    self.allowance += 2 * (now.fail_open - before.fail_open);
                    continue;
                }
                FailPolicy::Local => {}
                // `FailClosed` admits nothing.
                _ => continue,
            }
            for c in 0..CLIENTS {
                let share = self.share(r, c);
                let unit = if F::WINDOWED {
                    self.interval.as_nanos() / u128::from(share)
                } else {
                    self.interval.as_nanos() * REPLICAS as u128
                };
                let f = &mut self.fallbacks[r][c];
                f.refill += elapsed;
                f.level += (f.refill / unit) as u64;
                f.refill %= unit;
                if crossed {
                    f.level = f.level.max(share);
                }
                // A raised capacity raises what it holds by as much.
                f.level += share.saturating_sub(f.share);
                f.share = share;
            }
            let mine = on == Some(r);
            if mine && matches!(op, Op::Reset { .. } | Op::Remove { .. }) {
                // Perhaps its fallback's state went too.
                let f = &mut self.fallbacks[r][clients[0]];
                f.level = f.level.max(f.share);
            }
            if now.fail_local > before.fail_local {
                // Every unit it may hold, admitted perhaps.
                for &c in if mine { &clients } else { &all } {
                    let f = &mut self.fallbacks[r][c];
                    self.local[c] += f.level + u64::from(f.fraction);
                    f.level = 0;
                    f.fraction = false;
                }
            } else if mine
                && one
                && !self.peeked
                && now.round_trips > before.round_trips
                && (now.timeouts, now.errors, now.lease_returned)
                    == (before.timeouts, before.errors, before.lease_returned)
            {
                // Redis answered each call, each a check of this client:
                // its fallback holds the client to a share of what was
                // left, a fraction of a unit aside.
                let c = clients[0];
                let held = slack[c] / REPLICAS as u64;
                let f = &mut self.fallbacks[r][c];
                if held < f.level {
                    *f = Fallback {
                        level: held,
                        fraction: true,
                        refill: 0,
                        share: f.share,
                    };
                }
            }
        }
    }

    /// `CLIENT PAUSE ms ALL`: Redis answers nothing for `ms`, from now.
    async fn pause(&mut self, ms: u64) {
        // One that fails (the server killed) pauses nothing.
        let _: Result<(), _> = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(ms)
            .arg("ALL")
            .query_async(&mut self.conn)
            .await;
    }

    /// Redis busy for `ms` from about now, running a script that waits
    /// for its clock (`CLIENT PAUSE` ends only at the server's next tick,
    /// up to 100 ms late): a command sent meanwhile waits in its queue.
    async fn busy(&mut self, ms: u64) -> tokio::task::JoinHandle<()> {
        const SPIN: &str = "local t = redis.call('TIME') \
            local e = t[1] * 1000000 + t[2] + tonumber(ARGV[1]) * 1000 \
            repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= e";
        let mut conn = self.conn.clone();
        let spin = tokio::spawn(async move {
            // One that fails (the server killed) keeps nothing busy.
            let _: Result<(), _> = redis::cmd("EVAL")
                .arg(SPIN)
                .arg(0)
                .arg(ms + 2)
                .query_async(&mut conn)
                .await;
        });
        tokio::time::sleep(Duration::from_millis(2)).await;
        spin
    }

    /// Every client within the bound of every span.
    fn check_bounds(&self) -> Result<(), String> {
        for (c, marks) in self.marks.iter().enumerate() {
            for m in marks {
                let bound = self.bound(m) + self.allowance + self.local[c] + self.moved[c];
                if m.admitted <= bound {
                    continue;
                }
                return Err(format!(
                    "client {c}: {} admitted from operation {} on against a bound of {bound} \
                     (largest capacity held to {}, {} allowed for flushes and `FailOpen`, {} \
                     for `Local` fallbacks, {} for slot moves); stats {:?}\n{}",
                    m.admitted,
                    m.op,
                    m.most,
                    self.allowance,
                    self.local[c],
                    self.moved[c],
                    self.replicas.iter().map(|r| r.stats()).collect::<Vec<_>>(),
                    self.log.join("\n"),
                ));
            }
        }
        Ok(())
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

/// Runs `ops` on replicas built as `setups`, under the prefix `name`:
/// the first span over its bound, if any.
async fn run<F: Family>(
    (conn, server, cluster): Fleet<'_>,
    name: &str,
    (setups, interval): (&[Setup], Duration),
    ops: &[Op],
) -> Result<(), String> {
    let faulty = |op: &Op| matches!(op, Op::Outage { .. } | Op::Kill { .. });
    let timeout = if ops.iter().any(faulty) {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(10)
    };
    let mut case = Case::<F>::build(conn, name, setups, (interval, timeout));
    case.server = server.cloned();
    case.cluster = cluster.cloned();
    let result = run_case(&mut case, ops).await;
    // The server running again for the next case.
    case.started();
    result
}

/// The operations of one case, each followed by the bounds' check.
async fn run_case<F: Family>(case: &mut Case<F>, ops: &[Op]) -> Result<(), String> {
    for (i, op) in ops.iter().enumerate() {
        case.log.push(format!("{i}: {op:?}"));
        let before: Vec<_> = case.replicas.iter().map(|r| r.stats()).collect();
        case.apply(i, op).await?;
        case.account(op, &before);
        case.check_bounds()?;
        case.check_breakers(op, &before)?;
    }
    // What is still booked is committed: nothing is given back.
    for booked in case.booked.drain(..) {
        booked.held.commit();
    }
    Ok(())
}

/// One operation, or (where `spent`) also, as often, a client spent in
/// one batch on a replica, an outage, and that client's checks on the
/// same replica through it: the fallback must start from what the batch's
/// answers said was left. Or (where `moved`) also, as often, a client
/// spent, its slot moved to another node, and its checks again while the
/// move goes on: a bucket judged on the new node's clock as written would
/// be full again on a node ahead.
fn chunk(
    op: impl Strategy<Value = Op> + 'static,
    spent: bool,
    moved: bool,
    faults: bool,
) -> BoxedStrategy<Vec<Op>> {
    let one = op.prop_map(|op| vec![op]);
    // (With faults, also as often: a client checked a few times, an
    // outage, and its checks on the same replica through it: a `Local`
    // fallback must admit what Redis's last answer left it, `told.rs`.)
    let one = if faults && !spent {
        let heard = (
            0..REPLICAS,
            0..CLIENTS,
            1..=6usize,
            100..=400u64,
            8..=30usize,
        )
            .prop_map(|(r, c, before, ms, n)| {
                vec![
                    Op::Run { r, c, n: before },
                    Op::Outage { ms },
                    Op::Run { r, c, n },
                ]
            });
        prop_oneof![5 => one, 1 => heard].boxed()
    } else {
        one.boxed()
    };
    if spent {
        let spent =
            (0..REPLICAS, 0..CLIENTS, 8..=40usize, 100..=400u64).prop_map(|(r, c, n, ms)| {
                vec![
                    Op::Burst { r, c, n },
                    Op::Outage { ms },
                    Op::Run { r, c, n: n / 2 },
                ]
            });
        return prop_oneof![4 => one, 1 => spent].boxed();
    }
    if moved {
        let moved = (0..REPLICAS, 0..CLIENTS, 0..3usize, 16..=40usize).prop_map(|(r, c, to, n)| {
            vec![
                Op::Run { r, c, n },
                Op::Reshard { c, to },
                Op::Run { r, c, n },
            ]
        });
        return prop_oneof![4 => one, 1 => moved].boxed();
    }
    one.boxed()
}

/// What a drive draws.
#[derive(Clone, Copy)]
struct Drive {
    /// Every quota's unit of refill.
    interval: Duration,
    /// `FLUSHALL`, outages and the server killed (timeouts of 100 ms);
    /// else slow replies (patient timeouts).
    faults: bool,
    /// Pauses of 100 to 800 ms, drawn four times as often.
    long: bool,
    /// The server stopped while each replica checks.
    down: bool,
    /// Every replica `Local`, coalescing, without leases: each fallback
    /// bounded by what Redis last told it (`told.rs`) at every outage.
    local: bool,
    /// Replicas may lease (as drawn); else none does.
    leases: bool,
    /// Clients' slots moved between the cluster's nodes (`reshard.rs`).
    reshard: bool,
}

impl Drive {
    fn new(interval: Duration, faults: bool) -> Self {
        Drive {
            interval,
            faults,
            long: false,
            down: false,
            local: false,
            leases: true,
            reshard: false,
        }
    }
}

/// The state machine on `conn`, quotas of one unit per `interval`,
/// `FLUSHALL`, outages and the server killed (where it is given) among the
/// operations if `faults`.
fn drive<F: Family>(rt: &tokio::runtime::Runtime, conn: Fleet<'_>, drive: Drive, cases: u32) {
    let Drive {
        interval,
        faults,
        long,
        down,
        local,
        leases,
        reshard,
    } = drive;
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    });
    let n = std::sync::atomic::AtomicU64::new(0);
    // Faults where the timeout is short; slow replies where it is
    // patient.
    let ops = op(long).prop_filter("no fault", move |op| match op {
        Op::Flush { .. } | Op::Outage { .. } | Op::Kill { .. } => faults,
        Op::Slow { .. } | Op::Late { .. } => !faults,
        Op::Down => down,
        Op::Reshard { .. } => reshard,
        _ => true,
    });
    let strategy = (
        prop::collection::vec(
            setup().prop_map(move |s| {
                let s = if leases {
                    s
                } else {
                    Setup { lease: None, ..s }
                };
                if local {
                    Setup {
                        lease: None,
                        coalesce: true,
                        policy: FailPolicy::Local,
                        ..s
                    }
                } else {
                    s
                }
            }),
            REPLICAS,
        ),
        prop::collection::vec(chunk(ops, local, reshard, faults), 1..40)
            .prop_map(|chunks| chunks.concat()),
    );
    let result = runner.run(&strategy, |(setups, ops)| {
        // Relaxed: a counter for unique names, on this thread.
        let case = n.fetch_add(1, Ordering::Relaxed);
        let name = prefix(&format!("oracle-{case}"));
        rt.block_on(run::<F>(conn, &name, (&setups, interval), &ops))
            .map_err(TestCaseError::fail)
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// Every public operation of three replicas built differently, in any
/// order, keeps each client within the bucket's exact bound over every
/// span since its latest reset.
#[test]
fn a_fleet_built_every_way_keeps_each_client_within_its_bound() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let conn = rt.block_on(server.manager()).into();
    let server = Arc::new(Mutex::new(server));
    drive::<Bucket>(
        &rt,
        (&conn, Some(&server), None),
        Drive::new(INTERVAL, true),
        cases(),
    );
}

/// The same for the other algorithms (no leases), windows of a day: each
/// client within the largest limit it was held to in every window its
/// span touches (a log: every window's length), plus what the guide
/// allows; and a pair of a bucket and a window, within both. A quarter of
/// the cases each.
#[test]
fn a_fleet_of_windows_built_every_way_keeps_each_client_within_its_bound() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let conn = rt.block_on(server.manager()).into();
    let server = Arc::new(Mutex::new(server));
    let fleet = (&conn, Some(&server), None);
    let cases = cases().div_ceil(4);
    drive::<Fixed>(&rt, fleet, Drive::new(DAY, true), cases);
    drive::<Counter>(&rt, fleet, Drive::new(DAY, true), cases);
    drive::<Log>(&rt, fleet, Drive::new(DAY, true), cases);
    drive::<Pair>(&rt, fleet, Drive::new(INTERVAL, true), cases);
}

/// The same on a Redis Cluster of three primaries whose clocks run apart
/// (an `LD_PRELOAD` shim over two of them: [`SHIFTS_MS`]), quotas of a
/// unit per 20 ms: each client's bucket lives on its own node's clock, and
/// the bound counts the refill over each span. No `FLUSHALL` (it would
/// reach one node). No replica leases here. Clients' slots move between
/// the nodes while the operations go on, each move within the guide's
/// `⌈3 ms / T⌉` units (`reshard.rs`). Quotas that refill within a case let
/// a bucket's key expire, a linger past its idle instant (see
/// `shrunk::a_shrunk_case_a_raise_finds_the_key_expired_at_the_lower_capacity`).
#[test]
fn a_fleet_on_a_cluster_with_a_node_s_clock_ahead_keeps_each_client_within_its_bound() {
    on_the_cluster(false);
}

/// As above, the replicas leasing as drawn: each client's leases are spent
/// on its own node's clock, and its slot's moves allow the units leased
/// out at each.
#[test]
fn a_leasing_fleet_on_a_cluster_with_a_node_s_clock_ahead_keeps_each_client_within_its_bound() {
    on_the_cluster(true);
}

/// The cluster's drive on one server: quotas that refill within a case,
/// so that keys expire, replicas leasing as drawn. Before keys lingered
/// past their idle instant, it found a larger quota meeting a key a
/// smaller one let expire within a minute at 300 cases.
#[test]
fn a_fleet_whose_keys_expire_within_a_case_keeps_each_client_within_its_bound() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let conn = rt.block_on(server.manager()).into();
    let how = Drive {
        long: true,
        leases: true,
        ..Drive::new(FAST, false)
    };
    drive::<Bucket>(&rt, (&conn, None, None), how, cases().div_ceil(5));
}

/// The cluster drive, replicas leasing or not.
fn on_the_cluster(leases: bool) {
    let Some(cluster) = Cluster::start_shifted(3, 0, &SHIFTS_MS) else {
        return;
    };
    let rt = runtime();
    let conn = rt.block_on(cluster.connection()).into();
    let cluster = Arc::new(cluster);
    // A fifth of the cases: its long pauses make a case last seconds.
    let how = Drive {
        long: true,
        leases,
        reshard: true,
        ..Drive::new(FAST, false)
    };
    drive::<Bucket>(&rt, (&conn, None, Some(&cluster)), how, cases().div_ceil(5));
}

/// Quotas that refill within a case (a unit per 20 ms, a bucket of 16 to
/// 32 refilled in under a second), with outages and the server killed
/// while the operations go on: each client within the bound of every
/// span (its refill included), and each `Local` replica's fallback within
/// what Redis last told that replica, plus its refill (`told.rs`); and
/// the server stopped while each replica checks (`faults.rs`). A tenth of
/// the cases: half with every replica `Local`, coalescing and without
/// leases.
#[test]
fn a_fleet_whose_quotas_refill_through_outages_keeps_each_client_within_its_bound() {
    let how = Drive {
        down: true,
        ..Drive::new(FAST, true)
    };
    let local = Drive { local: true, ..how };
    on_a_server(&[(how, cases().div_ceil(20)), (local, cases().div_ceil(20))]);
}

/// The state machine of the token bucket on a server of its own, each
/// drive of `drives` for its number of cases.
fn on_a_server(drives: &[(Drive, u32)]) {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let conn = rt.block_on(server.manager()).into();
    let server = Arc::new(Mutex::new(server));
    for &(how, cases) in drives {
        drive::<Bucket>(&rt, (&conn, Some(&server), None), how, cases);
    }
}

/// Patient timeouts (10 s) and a server that stalls for up to 400 ms
/// (`CLIENT PAUSE`), or stops: a slow reply is never a failure (no
/// timeout, no breaker opened), and with no node answering each replica's
/// check goes to its fail policy and opens its breaker. A tenth of the
/// cases.
#[test]
fn a_slow_reply_opens_no_breaker_and_no_answer_opens_it() {
    let how = Drive {
        down: true,
        ..Drive::new(FAST, false)
    };
    on_a_server(&[(how, cases().div_ceil(10))]);
}
