//! What the contention benchmarks measure, shared by `benches/contention.rs`
//! (criterion) and `compare/src/main.rs` (the comparison runner, `cargo run
//! --release -p compare`) so the two can never disagree: the
//! implementations, the algorithms, the quotas, the scenarios and the timed
//! multi-threaded loop.
//!
//! Adding an algorithm (the sliding window log, say) takes a variant in
//! [`Algo`], an entry in [`ALGOS`], a line each in [`Algo::name`],
//! [`Algo::spec`] and [`Algo::has_seed_port`], and an arm in [`make`] (plus
//! one `unreachable!` arm for its seed and global ports if `baselines.rs`
//! has none). Mind `--memory`: it checks a million clients with the
//! `insert` quota, so an algorithm whose state grows with the limit needs a
//! smaller one there.
//!
//! The eviction measurements (issue 6) live here too, for the runner only:
//! [`Scenario::InsertCapped`] (new clients against a full `max_clients` cap,
//! under each [`Policy`], built by [`make_capped`]) and [`Scenario::Sweep`]
//! (one full sweep of a map of idle clients, on a hand-driven clock: see
//! [`make_stale`]). `benches/eviction.rs` measures the same under criterion;
//! `benches/contention.rs` runs only [`SCENARIOS`].

use std::hash::Hash;
use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use governor::clock::FakeRelativeClock;
use tollgate::{
    Algorithm, Both, Builder, DirectLimiter, FixedWindow, Limiter, ManualClock, Overflow,
    RateLimiter, SlidingWindowCounter, SlidingWindowLog, Stats, TokenBucket,
};

use crate::baselines::{
    BucketConfig, BucketState, FixedState, GlobalMutex, MutexMap, SlidingState, WindowConfig,
};

/// Clients in the uniform scenario.
pub const UNIFORM_CLIENTS: usize = 100_000;
/// Clients in the `uniform_1m` scenario: a map far beyond the caches.
pub const UNIFORM_1M_CLIENTS: usize = 1_000_000;

/// A client id type the benchmarks run with.
pub trait Key: Hash + Eq + Clone + Send + Sync + 'static {
    /// The name printed in results.
    const NAME: &'static str;
    /// The `i`th distinct client id.
    fn nth(i: u64) -> Self;
}

impl Key for u64 {
    const NAME: &'static str = "u64";
    fn nth(i: u64) -> Self {
        i
    }
}

impl Key for String {
    const NAME: &'static str = "String";
    fn nth(i: u64) -> Self {
        // 16 bytes: the length of a short API key or an IPv6-ish address.
        format!("client-{i:09}")
    }
}

impl Key for IpAddr {
    const NAME: &'static str = "IpAddr";
    fn nth(i: u64) -> Self {
        // `2001:db8::/32` (the documentation prefix) with the index in the
        // low 64 bits, the interface identifier: always `IpAddr::V6`.
        IpAddr::V6(Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(i)))
    }
}

/// The rate-limiting algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    TokenBucket,
    SlidingWindowCounter,
    SlidingWindowLog,
    FixedWindow,
    /// Two token buckets held together (`Builder::and`): the bucket's
    /// quota, and the same number of tokens per hour.
    TwoBuckets,
    /// The token bucket as a limiter whose quota can change while it runs
    /// (`Builder::reconfigurable`): each check reads its client's quota
    /// from the shared quota table.
    TieredBucket,
}

/// Every algorithm tollgate has, in the order results are printed.
pub const ALGOS: &[Algo] = &[
    Algo::TokenBucket,
    Algo::SlidingWindowCounter,
    Algo::SlidingWindowLog,
    Algo::FixedWindow,
];

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::TokenBucket => "token-bucket",
            Algo::SlidingWindowCounter => "sliding-window-counter",
            Algo::SlidingWindowLog => "sliding-window-log",
            Algo::FixedWindow => "fixed-window",
            Algo::TwoBuckets => "two-token-buckets",
            Algo::TieredBucket => "tiered-token-bucket",
        }
    }

    /// Whether `baselines.rs` ports it to the seed's design (and so whether
    /// `mutex-map` runs it).
    pub fn has_seed_port(self) -> bool {
        match self {
            Algo::TokenBucket | Algo::SlidingWindowCounter | Algo::FixedWindow => true,
            Algo::SlidingWindowLog | Algo::TwoBuckets | Algo::TieredBucket => false,
        }
    }

    /// The quota this algorithm runs with in `scenario`.
    pub fn spec(self, scenario: Scenario) -> Spec {
        match self {
            Algo::TokenBucket | Algo::TwoBuckets | Algo::TieredBucket => scenario.bucket(),
            Algo::SlidingWindowCounter => scenario.sliding(),
            Algo::SlidingWindowLog => scenario.log(),
            Algo::FixedWindow => scenario.fixed(),
        }
    }
}

/// The implementations compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impl {
    Tollgate(Algo),
    /// The seed's design: structure-only map lock, a `Mutex` per client.
    MutexMap(Algo),
    /// One `Mutex<HashMap>`.
    GlobalMutex(Algo),
    /// governor's keyed limiter (GCRA, a token bucket) with its default
    /// DashMap store, hasher and clock.
    Governor,
    /// Two tollgate limiters checked one after the other (`a && b`), the
    /// way to hold a client to two limits without `Builder::and`: two
    /// lookups and two exchanges, and a denial by the second still charges
    /// the first.
    TwoLimiters,
    /// tollgate's limiter with no clients (`Builder::build_direct`): one
    /// budget, the token bucket. Runs only in [`Scenario::Direct`].
    TollgateDirect,
    /// governor's direct (unkeyed) limiter as it ships:
    /// `RateLimiter::direct`, its quanta clock. Runs only in
    /// [`Scenario::Direct`].
    GovernorDirect,
}

impl Impl {
    pub fn name(self) -> &'static str {
        match self {
            Impl::Tollgate(_) => "tollgate",
            Impl::MutexMap(_) => "mutex-map",
            Impl::GlobalMutex(_) => "global-mutex",
            Impl::Governor => "governor",
            Impl::TwoLimiters => "two-limiters",
            Impl::TollgateDirect => "tollgate-direct",
            Impl::GovernorDirect => "governor-direct",
        }
    }

    pub fn algo(self) -> Algo {
        match self {
            Impl::Tollgate(a) | Impl::MutexMap(a) | Impl::GlobalMutex(a) => a,
            Impl::Governor | Impl::TollgateDirect | Impl::GovernorDirect => Algo::TokenBucket,
            Impl::TwoLimiters => Algo::TwoBuckets,
        }
    }

    /// `implementation/algorithm`, as criterion ids and `--memory` show it.
    pub fn label(self) -> String {
        format!("{}/{}", self.name(), self.algo().name())
    }
}

/// Everything measured: tollgate and the seed's design for every algorithm,
/// then the global mutex (its cost is the lock, not the algorithm, so one
/// algorithm is enough) and governor.
pub fn impls() -> Vec<Impl> {
    let mut all: Vec<Impl> = ALGOS.iter().map(|&a| Impl::Tollgate(a)).collect();
    all.extend(
        ALGOS
            .iter()
            .filter(|a| a.has_seed_port())
            .map(|&a| Impl::MutexMap(a)),
    );
    all.push(Impl::GlobalMutex(Algo::TokenBucket));
    all.push(Impl::Governor);
    all
}

/// Measured only when named (`--impls`): two limits on one client, as
/// tollgate's `Both` and as two limiters.
pub fn two_limit_impls() -> Vec<Impl> {
    vec![Impl::Tollgate(Algo::TwoBuckets), Impl::TwoLimiters]
}

/// Measured only when named (`--impls`): the token bucket with quotas that
/// can change at run time.
pub fn tiered_impls() -> Vec<Impl> {
    vec![Impl::Tollgate(Algo::TieredBucket)]
}

/// What [`Scenario::Direct`] runs: the two direct limiters, and tollgate's
/// keyed token bucket on one hot key, the way to hold one budget without a
/// direct limiter.
pub fn direct_impls() -> Vec<Impl> {
    vec![
        Impl::TollgateDirect,
        Impl::GovernorDirect,
        Impl::Tollgate(Algo::TokenBucket),
    ]
}

/// Every implementation `--impls` may name.
pub fn all_impls() -> Vec<Impl> {
    let mut all = impls();
    all.extend(two_limit_impls());
    all.extend(tiered_impls());
    all.extend([Impl::TollgateDirect, Impl::GovernorDirect]);
    all
}

/// The second limit of [`Algo::TwoBuckets`] for a bucket `spec`: as many
/// tokens, per hour.
fn hourly<K, C>(
    spec: Spec,
    first: Builder<TokenBucket, K, C>,
) -> Builder<Both<TokenBucket, TokenBucket>, K, C> {
    let (tokens, _, capacity) = rate(spec);
    first.and(TokenBucket::builder().rate(tokens, HOUR).capacity(capacity))
}

/// Two limiters, checked one after the other.
struct TwoLimiters<K: Key>(Limiter<TokenBucket, K>, Limiter<TokenBucket, K>);

impl<K: Key> RateLimiter<K> for TwoLimiters<K> {
    fn allow_request(&self, key: &K) -> bool {
        self.0.allow_request(key) && self.1.allow_request(key)
    }
}

/// A quota, in the form each algorithm's builder takes.
#[derive(Debug, Clone, Copy)]
pub enum Spec {
    /// `tokens` every `per`, bursts of `capacity`.
    Rate {
        tokens: u64,
        per: Duration,
        capacity: u64,
    },
    /// `limit` requests per `window`.
    Window { limit: u64, window: Duration },
}

/// The workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Every thread checks one client whose quota is never exhausted: the
    /// admit path, a compare-and-swap on one shared word.
    HotAllowed,
    /// Every thread checks one client whose quota (1 per hour) is spent: a
    /// deny flood. tollgate's deny path only reads.
    HotDenied,
    /// 100k known clients picked uniformly at random: cache misses on the
    /// map and the state, no contention.
    Uniform,
    /// [`Uniform`](Scenario::Uniform) over 1M known clients: the map far
    /// beyond the caches.
    Uniform1M,
    /// Every check is a client never seen before: the insert path.
    Insert,
    /// `Insert` against a tollgate limiter already holding its
    /// `max_clients`, none of them idle (quotas per hour), so that every
    /// check applies the overflow [`Policy`]. Not in [`SCENARIOS`].
    InsertCapped,
    /// One full sweep of a map of clients that have all gone idle, against
    /// governor's `retain_recent`: not a check at all. The `insert` quotas,
    /// on a hand-driven clock. Not in [`SCENARIOS`].
    Sweep,
    /// One budget for every thread, never exhausted (the `hot_allowed`
    /// quota): the direct limiters, against tollgate's keyed limiter on
    /// one hot key ([`direct_impls`]). Not in [`SCENARIOS`].
    Direct,
}

pub const SCENARIOS: &[Scenario] = &[
    Scenario::HotAllowed,
    Scenario::HotDenied,
    Scenario::Uniform,
    Scenario::Uniform1M,
    Scenario::Insert,
];

/// The eviction measurements, which only the runner makes.
pub const EVICTION_SCENARIOS: &[Scenario] = &[Scenario::InsertCapped, Scenario::Sweep];

/// The direct limiters' scenario, which only the runner makes.
pub const DIRECT_SCENARIOS: &[Scenario] = &[Scenario::Direct];

const HOUR: Duration = Duration::from_secs(3600);
const SECOND: Duration = Duration::from_secs(1);

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::HotAllowed => "hot_allowed",
            Scenario::HotDenied => "hot_denied",
            Scenario::Uniform => "uniform_100k",
            Scenario::Uniform1M => "uniform_1m",
            Scenario::Insert => "insert",
            Scenario::InsertCapped => "insert_capped",
            Scenario::Sweep => "sweep",
            Scenario::Direct => "direct",
        }
    }

    fn bucket(self) -> Spec {
        match self {
            // One token per nanosecond and a second's burst: never empty.
            Scenario::HotAllowed | Scenario::Direct => Spec::Rate {
                tokens: 1_000_000_000,
                per: SECOND,
                capacity: 1_000_000_000,
            },
            Scenario::HotDenied => Spec::Rate {
                tokens: 1,
                per: HOUR,
                capacity: 1,
            },
            Scenario::Uniform | Scenario::Uniform1M | Scenario::Insert | Scenario::Sweep => {
                Spec::Rate {
                    tokens: 1000,
                    per: SECOND,
                    capacity: 1000,
                }
            }
            // A held client refills for an hour: never idle during a run.
            Scenario::InsertCapped => Spec::Rate {
                tokens: 1,
                per: HOUR,
                capacity: 1000,
            },
        }
    }

    fn sliding(self) -> Spec {
        match self {
            // The state word packs the window index beside two counts, so
            // the largest limit shrinks with the window: a 1 s window holds at
            // most 32 767. Only a tiny window admits ~10^8 checks a second;
            // 3 per 16 ns keeps the hot key on the admit path.
            Scenario::HotAllowed | Scenario::Direct => Spec::Window {
                limit: 3,
                window: Duration::from_nanos(16),
            },
            Scenario::HotDenied => Spec::Window {
                limit: 1,
                window: HOUR,
            },
            Scenario::Uniform | Scenario::Uniform1M | Scenario::Insert | Scenario::Sweep => {
                Spec::Window {
                    limit: 1000,
                    window: SECOND,
                }
            }
            Scenario::InsertCapped => Spec::Window {
                limit: 1000,
                window: HOUR,
            },
        }
    }

    fn log(self) -> Spec {
        match self {
            // One 8-byte slot per request in the window: 100 per second over
            // the uniform scenario's 100k clients is 80 MB of slots, and
            // first-seen clients (and `--memory`'s million) get 10.
            Scenario::Uniform => Spec::Window {
                limit: 100,
                window: SECOND,
            },
            // Ten times the clients, so each is checked a tenth as often:
            // 20 a second (160 MB of slots) still leaves room to spare.
            Scenario::Uniform1M => Spec::Window {
                limit: 20,
                window: SECOND,
            },
            Scenario::Insert | Scenario::Sweep => Spec::Window {
                limit: 10,
                window: SECOND,
            },
            Scenario::InsertCapped => Spec::Window {
                limit: 10,
                window: HOUR,
            },
            other => other.sliding(),
        }
    }

    fn fixed(self) -> Spec {
        match self {
            Scenario::HotAllowed | Scenario::Direct => Spec::Window {
                limit: 1_000_000,
                window: Duration::from_millis(1),
            },
            other => other.sliding(),
        }
    }
}

/// The input of one timed run. It owns (shares) its keys so that a
/// [`Pool`]'s long-lived threads can run it.
pub enum Load<K> {
    /// `ops` checks per thread of one key.
    Hot { key: K, ops: u64 },
    /// `ops` checks per thread of keys drawn uniformly from `keys`.
    Uniform { keys: Arc<Vec<K>>, ops: u64 },
    /// Each thread checks each of its own keys once, in order.
    Insert { keys: Arc<Vec<Vec<K>>> },
}

/// The result of one timed run.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// From the first thread's start to the last thread's end.
    pub wall: Duration,
    /// Checks made, all threads together.
    pub ops: u64,
    /// Checks admitted.
    pub allowed: u64,
    pub threads: usize,
}

impl Sample {
    /// The time one check costs as each thread sees it: wall time divided by
    /// the checks per thread. For one thread this is `1 / ops_per_sec`;
    /// for n threads that scale perfectly it stays flat.
    pub fn ns_per_op(&self) -> f64 {
        self.wall.as_nanos() as f64 * self.threads as f64 / self.ops.max(1) as f64
    }

    /// Checks per second, all threads together.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.wall.as_secs_f64().max(1e-12)
    }

    pub fn allowed_ratio(&self) -> f64 {
        self.allowed as f64 / self.ops.max(1) as f64
    }
}

/// A limiter under test, behind one object-safe trait so a list of them can
/// be held; each call to [`Subject::drive`] is a loop monomorphised for the
/// concrete limiter, so no check pays for dynamic dispatch.
pub trait Subject<K>: Send + Sync {
    /// Thread `t`'s share of `load`: (checks made, checks admitted).
    fn drive(&self, load: &Load<K>, t: usize) -> (u64, u64);
    /// One check, dynamically dispatched (for setup, not for timing).
    fn allow(&self, key: &K) -> bool;
    /// tollgate's memory counters, for a capped limiter.
    fn stats(&self) -> Option<Stats> {
        None
    }
}

struct Wrap<L>(L);

impl<K: Key, L: RateLimiter<K>> Subject<K> for Wrap<L> {
    fn drive(&self, load: &Load<K>, t: usize) -> (u64, u64) {
        drive(&self.0, load, t)
    }

    fn allow(&self, key: &K) -> bool {
        self.0.allow_request(key)
    }
}

/// Every key passes through `black_box`, so the compiler cannot hoist the
/// hashing of a loop-invariant key out of the loop, as no server could.
#[inline(never)]
fn drive<K, L: RateLimiter<K>>(limiter: &L, load: &Load<K>, t: usize) -> (u64, u64) {
    let mut allowed = 0;
    match load {
        Load::Hot { key, ops } => {
            for _ in 0..*ops {
                allowed += u64::from(limiter.allow_request(black_box(key)));
            }
            (*ops, allowed)
        }
        Load::Uniform { keys, ops } => {
            let n = keys.len() as u128;
            let mut x = 0x9E37_79B9_7F4A_7C15_u64 ^ (t as u64 + 1).wrapping_mul(0xA076_1D64);
            for _ in 0..*ops {
                // xorshift64, mapped onto 0..n without division.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = &keys[((u128::from(x) * n) >> 64) as usize];
                allowed += u64::from(limiter.allow_request(black_box(key)));
            }
            (*ops, allowed)
        }
        Load::Insert { keys } => {
            let keys = &keys[t];
            for key in keys {
                allowed += u64::from(limiter.allow_request(black_box(key)));
            }
            (keys.len() as u64, allowed)
        }
    }
}

type Job = Arc<dyn Fn(usize) -> (u64, u64) + Send + Sync>;

/// One thread's part of a run: (start, end, checks, admitted).
type Span = (Instant, Instant, u64, u64);

/// How long an idle worker keeps polling for the next run before it sleeps.
const SPIN: Duration = Duration::from_millis(50);
/// The generation that tells workers to exit.
const EXIT: u64 = u64::MAX;

struct Shared {
    /// Bumped to start a run.
    generation: AtomicU64,
    job: Mutex<Option<Job>>,
    spans: Mutex<Vec<Span>>,
    /// Sleeping workers wait here for the next generation.
    idle: Mutex<()>,
    wake: Condvar,
    /// The driver waits here for every worker to finish.
    finished: Mutex<usize>,
    all_done: Condvar,
}

/// `threads` long-lived worker threads that run each job together.
///
/// Between runs an idle worker polls (yielding its core to anything else
/// runnable) for up to 50 ms before it sleeps, so that back-to-back runs find
/// the workers already spread over the cores. Threads woken from sleep on a
/// busy machine tend to start on the waker's core and are spread out only
/// milliseconds later, which made short multi-threaded runs measure one core.
pub struct Pool {
    threads: usize,
    shared: Arc<Shared>,
    workers: Vec<thread::JoinHandle<()>>,
}

impl Pool {
    pub fn new(threads: usize) -> Self {
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
            spans: Mutex::new(Vec::with_capacity(threads)),
            idle: Mutex::new(()),
            wake: Condvar::new(),
            finished: Mutex::new(0),
            all_done: Condvar::new(),
        });
        let workers = (0..threads)
            .map(|t| {
                let shared = Arc::clone(&shared);
                thread::spawn(move || worker(&shared, t))
            })
            .collect();
        Self {
            threads,
            shared,
            workers,
        }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    fn start(&self, job: Option<Job>) {
        let exit = job.is_none();
        *self.shared.job.lock().unwrap() = job;
        *self.shared.finished.lock().unwrap() = 0;
        let _idle = self.shared.idle.lock().unwrap();
        if exit {
            self.shared.generation.store(EXIT, Ordering::Release);
        } else {
            self.shared.generation.fetch_add(1, Ordering::Release);
        }
        self.shared.wake.notify_all();
    }

    /// Runs `load` on every thread of the pool at once.
    pub fn run<K: Key>(&self, subject: &Arc<dyn Subject<K>>, load: Load<K>) -> Sample {
        let subject = Arc::clone(subject);
        self.start(Some(Arc::new(move |t| subject.drive(&load, t))));
        let mut finished = self.shared.finished.lock().unwrap();
        while *finished < self.threads {
            finished = self.shared.all_done.wait(finished).unwrap();
        }
        drop(finished);
        // The workers dropped their clones before finishing: the limiter is
        // released here or by the caller, outside the timed part.
        *self.shared.job.lock().unwrap() = None;
        let spans = std::mem::take(&mut *self.shared.spans.lock().unwrap());
        let start = spans.iter().map(|s| s.0).min().unwrap();
        let end = spans.iter().map(|s| s.1).max().unwrap();
        Sample {
            wall: end - start,
            ops: spans.iter().map(|s| s.2).sum(),
            allowed: spans.iter().map(|s| s.3).sum(),
            threads: self.threads,
        }
    }
}

fn worker(shared: &Shared, t: usize) {
    let mut seen = 0;
    loop {
        let idle_since = Instant::now();
        loop {
            let generation = shared.generation.load(Ordering::Acquire);
            if generation != seen {
                seen = generation;
                break;
            }
            if idle_since.elapsed() < SPIN {
                thread::yield_now();
            } else {
                let idle = shared.idle.lock().unwrap();
                if shared.generation.load(Ordering::Acquire) == seen {
                    let _ = shared.wake.wait_timeout(idle, SPIN).unwrap();
                }
            }
        }
        if seen == EXIT {
            return;
        }
        let job = shared.job.lock().unwrap().clone().expect("a job");
        let start = Instant::now();
        let (ops, allowed) = job(t);
        let end = Instant::now();
        drop(job);
        shared
            .spans
            .lock()
            .unwrap()
            .push((start, end, ops, allowed));
        let mut finished = shared.finished.lock().unwrap();
        *finished += 1;
        shared.all_done.notify_one();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.start(None);
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

fn wrap<K: Key, L: RateLimiter<K> + 'static>(limiter: L) -> Arc<dyn Subject<K>> {
    Arc::new(Wrap(limiter))
}

/// A tollgate limiter that reports its memory counters.
struct Tracked<A: Algorithm, K>(Limiter<A, K>);

impl<K: Key, A: Algorithm + 'static> Subject<K> for Tracked<A, K>
where
    Limiter<A, K>: Send + Sync,
{
    fn drive(&self, load: &Load<K>, t: usize) -> (u64, u64) {
        drive(&self.0, load, t)
    }

    fn allow(&self, key: &K) -> bool {
        self.0.allow_request(key)
    }

    fn stats(&self) -> Option<Stats> {
        Some(self.0.stats())
    }
}

/// The overflow policies of a full `max_clients` cap, in the order printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// `Overflow::EvictSampled { sample: 5 }`, the default.
    EvictSampled,
    DenyNew,
    AdmitUntracked,
}

pub const POLICIES: &[Policy] = &[
    Policy::EvictSampled,
    Policy::DenyNew,
    Policy::AdmitUntracked,
];

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::EvictSampled => "evict-sampled",
            Policy::DenyNew => "deny-new",
            Policy::AdmitUntracked => "admit-untracked",
        }
    }

    pub fn overflow(self) -> Overflow {
        match self {
            Policy::EvictSampled => Overflow::default(),
            Policy::DenyNew => Overflow::DenyNew,
            Policy::AdmitUntracked => Overflow::AdmitUntracked,
        }
    }
}

/// A fresh, empty tollgate limiter for `algo` with the
/// [`Scenario::InsertCapped`] quota, holding at most `cap` clients and
/// applying `policy` beyond; otherwise the defaults (auto-sweep included).
pub fn make_capped<K: Key>(algo: Algo, policy: Policy, cap: u64) -> Arc<dyn Subject<K>> {
    fn build<A: Algorithm + 'static, K: Key>(
        builder: Builder<A>,
        policy: Policy,
        cap: u64,
    ) -> Arc<dyn Subject<K>>
    where
        Limiter<A, K>: Send + Sync,
    {
        let limiter = builder
            .key_type::<K>()
            .max_clients(cap)
            .overflow(policy.overflow())
            .build()
            .unwrap();
        Arc::new(Tracked(limiter))
    }
    let spec = algo.spec(Scenario::InsertCapped);
    match algo {
        Algo::TokenBucket => {
            let (tokens, per, capacity) = rate(spec);
            let builder = TokenBucket::builder().rate(tokens, per).capacity(capacity);
            build(builder, policy, cap)
        }
        Algo::SlidingWindowCounter => {
            let (limit, w) = window(spec);
            build(
                SlidingWindowCounter::builder().limit(limit).window(w),
                policy,
                cap,
            )
        }
        Algo::SlidingWindowLog => {
            let (limit, w) = window(spec);
            build(
                SlidingWindowLog::builder().limit(limit).window(w),
                policy,
                cap,
            )
        }
        Algo::FixedWindow => {
            let (limit, w) = window(spec);
            build(FixedWindow::builder().limit(limit).window(w), policy, cap)
        }
        Algo::TwoBuckets => {
            let (tokens, per, capacity) = rate(spec);
            let first = TokenBucket::builder().rate(tokens, per).capacity(capacity);
            build(hourly(spec, first), policy, cap)
        }
        Algo::TieredBucket => {
            let (tokens, per, capacity) = rate(spec);
            let builder = TokenBucket::builder().rate(tokens, per).capacity(capacity);
            build(builder.reconfigurable(), policy, cap)
        }
    }
}

/// A limiter to fill with clients that then all go idle, for
/// [`Scenario::Sweep`]. Its clock is driven by hand, so nothing is idle
/// while it fills.
pub trait Stale<K>: Send + Sync {
    /// One check of each of `keys`; returns how many were admitted.
    fn fill(&self, keys: &[K]) -> u64;
    /// Moves the clock an hour on: every client is idle.
    fn age(&self);
    /// One full sweep: tollgate's `sweep()`, governor's `retain_recent()`.
    fn sweep(&self);
    /// Clients held.
    fn len(&self) -> usize;
}

/// tollgate with the `insert` quota, a [`ManualClock`] and no auto-sweep
/// (which would otherwise take part of the work while it fills).
struct StaleTollgate<A: Algorithm, K>(Limiter<A, K, ManualClock>);

impl<K: Key, A: Algorithm + 'static> Stale<K> for StaleTollgate<A, K>
where
    Limiter<A, K, ManualClock>: Send + Sync,
{
    fn fill(&self, keys: &[K]) -> u64 {
        keys.iter()
            .map(|k| u64::from(self.0.allow_request(k)))
            .sum()
    }

    fn age(&self) {
        self.0.clock().advance(HOUR);
    }

    fn sweep(&self) {
        black_box(self.0.sweep());
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

type FakeClockGovernor<K> = governor::RateLimiter<
    K,
    governor::state::keyed::DefaultKeyedStateStore<K>,
    FakeRelativeClock,
    governor::middleware::NoOpMiddleware<governor::nanos::Nanos>,
>;

/// governor's keyed limiter (its DashMap store) on its own hand-driven
/// clock, which `retain_recent` reads; as `benches/eviction.rs` makes it.
struct StaleGovernor<K: Key> {
    limiter: FakeClockGovernor<K>,
    clock: FakeRelativeClock,
}

impl<K: Key> Stale<K> for StaleGovernor<K> {
    fn fill(&self, keys: &[K]) -> u64 {
        keys.iter()
            .map(|k| u64::from(self.limiter.check_key(k).is_ok()))
            .sum()
    }

    fn age(&self) {
        self.clock.advance(HOUR);
    }

    fn sweep(&self) {
        self.limiter.retain_recent();
    }

    fn len(&self) -> usize {
        self.limiter.len()
    }
}

/// An empty [`Stale`] limiter: tollgate's `algo`, or governor.
pub fn make_stale<K: Key>(imp: Impl) -> Box<dyn Stale<K>> {
    fn build<A: Algorithm + 'static, K: Key>(builder: Builder<A>) -> Box<dyn Stale<K>>
    where
        Limiter<A, K, ManualClock>: Send + Sync,
    {
        let limiter = builder
            .no_auto_sweep()
            .key_type::<K>()
            .clock(ManualClock::new())
            .build()
            .unwrap();
        Box::new(StaleTollgate(limiter))
    }
    let spec = imp.algo().spec(Scenario::Sweep);
    match imp {
        Impl::Tollgate(Algo::TokenBucket) => {
            let (tokens, per, capacity) = rate(spec);
            build(TokenBucket::builder().rate(tokens, per).capacity(capacity))
        }
        Impl::Tollgate(Algo::SlidingWindowCounter) => {
            let (limit, w) = window(spec);
            build(SlidingWindowCounter::builder().limit(limit).window(w))
        }
        Impl::Tollgate(Algo::SlidingWindowLog) => {
            let (limit, w) = window(spec);
            build(SlidingWindowLog::builder().limit(limit).window(w))
        }
        Impl::Tollgate(Algo::FixedWindow) => {
            let (limit, w) = window(spec);
            build(FixedWindow::builder().limit(limit).window(w))
        }
        Impl::Tollgate(Algo::TwoBuckets) => {
            let (tokens, per, capacity) = rate(spec);
            build(hourly(
                spec,
                TokenBucket::builder().rate(tokens, per).capacity(capacity),
            ))
        }
        Impl::Tollgate(Algo::TieredBucket) => {
            let (tokens, per, capacity) = rate(spec);
            build(
                TokenBucket::builder()
                    .rate(tokens, per)
                    .capacity(capacity)
                    .reconfigurable(),
            )
        }
        Impl::Governor => {
            let clock = FakeRelativeClock::default();
            let limiter = governor::RateLimiter::dashmap_with_clock(
                governor_quota(rate(spec)),
                clock.clone(),
            );
            Box::new(StaleGovernor { limiter, clock })
        }
        Impl::MutexMap(_)
        | Impl::GlobalMutex(_)
        | Impl::TwoLimiters
        | Impl::TollgateDirect
        | Impl::GovernorDirect => {
            panic!("{} has no sweep", imp.label())
        }
    }
}

fn rate(spec: Spec) -> (u64, Duration, u64) {
    match spec {
        Spec::Rate {
            tokens,
            per,
            capacity,
        } => (tokens, per, capacity),
        Spec::Window { .. } => panic!("{spec:?} is not a rate"),
    }
}

fn window(spec: Spec) -> (u64, Duration) {
    match spec {
        Spec::Window { limit, window } => (limit, window),
        Spec::Rate { .. } => panic!("{spec:?} is not a window"),
    }
}

/// A fresh, empty limiter: `imp` with the quota `scenario` uses.
pub fn make<K: Key>(imp: Impl, scenario: Scenario) -> Arc<dyn Subject<K>> {
    let spec = imp.algo().spec(scenario);
    match imp {
        Impl::Tollgate(Algo::TokenBucket) => {
            let (tokens, per, capacity) = rate(spec);
            let builder = TokenBucket::builder().rate(tokens, per).capacity(capacity);
            wrap(builder.key_type::<K>().build().unwrap())
        }
        Impl::Tollgate(Algo::SlidingWindowCounter) => {
            let (limit, w) = window(spec);
            let builder = SlidingWindowCounter::builder().limit(limit).window(w);
            wrap(builder.key_type::<K>().build().unwrap())
        }
        Impl::Tollgate(Algo::SlidingWindowLog) => {
            let (limit, w) = window(spec);
            let builder = SlidingWindowLog::builder().limit(limit).window(w);
            wrap(builder.key_type::<K>().build().unwrap())
        }
        Impl::Tollgate(Algo::FixedWindow) => {
            let (limit, w) = window(spec);
            let builder = FixedWindow::builder().limit(limit).window(w);
            wrap(builder.key_type::<K>().build().unwrap())
        }
        Impl::Tollgate(Algo::TwoBuckets) => {
            let (tokens, per, capacity) = rate(spec);
            let first = TokenBucket::builder().rate(tokens, per).capacity(capacity);
            wrap(hourly(spec, first).key_type::<K>().build().unwrap())
        }
        Impl::Tollgate(Algo::TieredBucket) => {
            let (tokens, per, capacity) = rate(spec);
            let builder = TokenBucket::builder().rate(tokens, per).capacity(capacity);
            wrap(builder.key_type::<K>().reconfigurable().build().unwrap())
        }
        Impl::TwoLimiters => {
            let (tokens, per, capacity) = rate(spec);
            let one = |per| {
                TokenBucket::builder()
                    .rate(tokens, per)
                    .capacity(capacity)
                    .key_type::<K>()
                    .build()
                    .unwrap()
            };
            wrap(TwoLimiters(one(per), one(HOUR)))
        }
        Impl::MutexMap(Algo::TokenBucket) => {
            let (tokens, per, capacity) = rate(spec);
            let config = BucketConfig::new(tokens, per, capacity);
            wrap(MutexMap::<BucketState, K>::new(config))
        }
        Impl::MutexMap(Algo::SlidingWindowCounter) => {
            let (limit, w) = window(spec);
            wrap(MutexMap::<SlidingState, K>::new(WindowConfig::new(
                limit, w,
            )))
        }
        Impl::MutexMap(Algo::FixedWindow) => {
            let (limit, w) = window(spec);
            wrap(MutexMap::<FixedState, K>::new(WindowConfig::new(limit, w)))
        }
        Impl::GlobalMutex(Algo::TokenBucket) => {
            let (tokens, per, capacity) = rate(spec);
            let config = BucketConfig::new(tokens, per, capacity);
            wrap(GlobalMutex::<BucketState, K>::new(config))
        }
        Impl::GlobalMutex(Algo::SlidingWindowCounter) => {
            let (limit, w) = window(spec);
            wrap(GlobalMutex::<SlidingState, K>::new(WindowConfig::new(
                limit, w,
            )))
        }
        Impl::GlobalMutex(Algo::FixedWindow) => {
            let (limit, w) = window(spec);
            wrap(GlobalMutex::<FixedState, K>::new(WindowConfig::new(
                limit, w,
            )))
        }
        Impl::MutexMap(Algo::SlidingWindowLog | Algo::TwoBuckets | Algo::TieredBucket)
        | Impl::GlobalMutex(Algo::SlidingWindowLog | Algo::TwoBuckets | Algo::TieredBucket) => {
            unreachable!("no mutex port of the log or of two limits: has_seed_port is false")
        }
        Impl::Governor => wrap(Governor::<K>::new(rate(spec))),
        Impl::TollgateDirect => {
            let (tokens, per, capacity) = rate(spec);
            let builder = TokenBucket::builder().rate(tokens, per).capacity(capacity);
            wrap(Direct(builder.build_direct().unwrap()))
        }
        Impl::GovernorDirect => wrap(GovernorDirect(governor::RateLimiter::direct(
            governor_quota(rate(spec)),
        ))),
    }
}

/// tollgate's direct limiter, checked with whatever key the load holds:
/// it has no clients, and the key is never read.
struct Direct(DirectLimiter<TokenBucket>);

impl<K: Key> RateLimiter<K> for Direct {
    #[inline]
    fn allow_request(&self, _: &K) -> bool {
        self.0.allow()
    }
}

/// governor's direct limiter as it ships, likewise.
struct GovernorDirect(governor::DefaultDirectRateLimiter);

impl<K: Key> RateLimiter<K> for GovernorDirect {
    #[inline]
    fn allow_request(&self, _: &K) -> bool {
        self.0.check().is_ok()
    }
}

/// governor's keyed limiter as it ships: `RateLimiter::keyed`, a DashMap
/// with std's hasher, and its quanta clock.
struct Governor<K: Key>(governor::DefaultKeyedRateLimiter<K>);

impl<K: Key> Governor<K> {
    /// The keyed limiter with [`governor_quota`]`(rate)`.
    fn new(rate: (u64, Duration, u64)) -> Self {
        Self(governor::RateLimiter::keyed(governor_quota(rate)))
    }
}

/// The quota equivalent to a token bucket of `tokens` per `per` holding
/// `capacity`: one cell every `per / tokens`, bursts of `capacity`.
fn governor_quota((tokens, per, capacity): (u64, Duration, u64)) -> governor::Quota {
    let period = per / u32::try_from(tokens).unwrap();
    let burst = NonZeroU32::new(u32::try_from(capacity).unwrap()).unwrap();
    governor::Quota::with_period(period)
        .unwrap()
        .allow_burst(burst)
}

impl<K: Key> RateLimiter<K> for Governor<K> {
    #[inline]
    fn allow_request(&self, client_id: &K) -> bool {
        // `check_key` takes `&K`: the caller's prebuilt key, never a copy.
        self.0.check_key(client_id).is_ok()
    }
}

/// Prepares a fresh limiter for `scenario`: the hot key exists (and, for the
/// deny flood, has spent its quota); the uniform scenarios' clients exist
/// (checked once each, split across the cores).
pub fn prepare<K: Key>(subject: &dyn Subject<K>, scenario: Scenario, data: &Data<K>) {
    let fill = |keys: &[K]| {
        in_parallel(keys, |keys| {
            keys.iter().map(|k| u64::from(subject.allow(k))).sum()
        })
    };
    match scenario {
        Scenario::HotAllowed | Scenario::HotDenied | Scenario::Direct => {
            let _ = subject.allow(&data.hot);
            let _ = subject.allow(&data.hot);
        }
        Scenario::Uniform => {
            fill(&data.clients);
        }
        Scenario::Uniform1M => {
            fill(&data.many);
        }
        Scenario::Insert | Scenario::InsertCapped | Scenario::Sweep => {}
    }
}

/// `f` over `keys` split across the cores (setup, not timing); the sum of
/// its answers.
pub fn in_parallel<K: Sync>(keys: &[K], f: impl Fn(&[K]) -> u64 + Sync) -> u64 {
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = keys.len().div_ceil(cores).max(1);
    thread::scope(|scope| {
        let parts: Vec<_> = keys
            .chunks(chunk)
            .map(|part| scope.spawn(|| f(part)))
            .collect();
        parts.into_iter().map(|p| p.join().unwrap()).sum()
    })
}

/// The keys a run uses, built before any timing starts.
pub struct Data<K> {
    pub hot: K,
    /// The `uniform_100k` clients.
    pub clients: Arc<Vec<K>>,
    /// The `uniform_1m` clients.
    pub many: Arc<Vec<K>>,
}

impl<K: Key> Data<K> {
    /// [`UNIFORM_1M_CLIENTS`] clients for `uniform_1m` and `clients` for
    /// `uniform_100k`.
    #[allow(dead_code)] // the runner sizes `uniform_1m` itself, with `sized`
    pub fn new(clients: usize) -> Self {
        Self::sized(clients, UNIFORM_1M_CLIENTS)
    }

    /// `clients` for `uniform_100k` and `many` for `uniform_1m` (none if
    /// it does not run).
    pub fn sized(clients: usize, many: usize) -> Self {
        let keys = |n: usize| Arc::new((0..n as u64).map(K::nth).collect());
        Self {
            hot: K::nth(4242),
            clients: keys(clients),
            many: keys(many),
        }
    }

    /// The load of `scenario` for `ops` checks per thread.
    pub fn load(&self, scenario: Scenario, ops: u64) -> Load<K> {
        match scenario {
            Scenario::HotAllowed | Scenario::HotDenied | Scenario::Direct => Load::Hot {
                key: self.hot.clone(),
                ops,
            },
            Scenario::Uniform => Load::Uniform {
                keys: Arc::clone(&self.clients),
                ops,
            },
            Scenario::Uniform1M => Load::Uniform {
                keys: Arc::clone(&self.many),
                ops,
            },
            Scenario::Insert | Scenario::InsertCapped | Scenario::Sweep => {
                panic!("{} has no load of known keys", scenario.name())
            }
        }
    }
}

/// `per_thread` never-seen keys for each of `threads` threads, disjoint from
/// the hot and uniform keys.
pub fn fresh_keys<K: Key>(threads: usize, per_thread: u64) -> Arc<Vec<Vec<K>>> {
    fresh_keys_from(1 << 32, threads, per_thread)
}

/// [`fresh_keys`] numbered from `first` on, for runs that must not meet
/// each other's keys.
pub fn fresh_keys_from<K: Key>(first: u64, threads: usize, per_thread: u64) -> Arc<Vec<Vec<K>>> {
    Arc::new(
        (0..threads as u64)
            .map(|t| {
                let base = first + t * per_thread;
                (base..base + per_thread).map(K::nth).collect()
            })
            .collect(),
    )
}
