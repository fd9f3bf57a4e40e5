//! Measurements behind two of `tollgate`'s design choices: which clock to read
//! on every decision, and which concurrent map (and hasher) holds per-key state.
//!
//! Run with:
//!
//! ```text
//! cargo bench --bench choices
//! ```
//!
//! (add a filter to run one group, e.g. `cargo bench --bench choices -- clock`).
//! Timing is kept short (0.5 s warm-up, 2 s measurement, 10 samples) so the
//! whole run stays within a few minutes; raise it locally for tighter bounds.
//!
//! Groups:
//!
//! * `clock`: one "nanoseconds since an origin as `u64`" read through
//!   `std::time::Instant::now()`, `quanta::Clock::now()`, and
//!   `quanta::Clock::raw()` + `Clock::delta_as_nanos`.
//! * `hash`: hashing a 5-byte and a 36-byte (UUID-like) `&str` with std's
//!   `RandomState`, `foldhash::fast::RandomState` and
//!   `foldhash::quality::RandomState`.
//! * `map_hot_read_1t`: one thread looking up the same hot key in a map of
//!   10 000 `String` keys by a prebuilt `&str` (no allocation per lookup), then
//!   either `load(Acquire)` on the state cell (`read`, the deny path) or one
//!   load + `compare_exchange(cur, cur + 1, AcqRel, Acquire)` loop (`cas`, the
//!   admit path). Candidates: `scc::HashMap<String, AtomicU64>` via
//!   `read_sync` (takes a shared bucket lock), `scc::HashIndex<String,
//!   Arc<AtomicU64>>` via `peek` under a fresh `scc::Guard` (values are moved on
//!   resize, hence the `Arc`), and `papaya::HashMap<String, AtomicU64>` via
//!   `pin()` + `get`; each with std's `RandomState` and with
//!   `foldhash::fast::RandomState`.
//! * `map_hot_read_2t`: the same loops run by two threads at once on the same
//!   hot key. The two threads live for the whole benchmark; for each sample
//!   they are released by a `std::sync::Barrier`, spin until both are running,
//!   and then each times its own `iters` operations. The reported time is
//!   `max(thread elapsed) / iters`, i.e. the per-operation latency each thread
//!   sees while the other thread hammers the same key (aggregate throughput is
//!   two operations per reported time).

use std::collections::hash_map::RandomState as StdState;
use std::hash::BuildHasher;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use foldhash::fast::RandomState as FoldFast;
use foldhash::quality::RandomState as FoldQuality;

/// Number of keys present in every map.
const MAP_SIZE: usize = 10_000;
/// Index of the key every lookup hits.
const HOT: usize = 4_242;

fn key(i: usize) -> String {
    format!("client-{i:05}")
}

/// Admit path: one load followed by a CAS loop adding one.
#[inline(always)]
fn admit(cell: &AtomicU64) -> u64 {
    let mut cur = cell.load(Ordering::Acquire);
    loop {
        match cell.compare_exchange(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(prev) => return prev,
            Err(actual) => cur = actual,
        }
    }
}

// ---------------------------------------------------------------------------
// Clock
// ---------------------------------------------------------------------------

fn bench_clock(c: &mut Criterion) {
    let mut g = c.benchmark_group("clock");

    let origin = Instant::now();
    g.bench_function("std_instant_now", |b| {
        b.iter(|| Instant::now().duration_since(black_box(origin)).as_nanos() as u64)
    });

    let clock = quanta::Clock::new();
    let q_origin = clock.now();
    g.bench_function("quanta_now", |b| {
        b.iter(|| {
            black_box(&clock)
                .now()
                .duration_since(black_box(q_origin))
                .as_nanos() as u64
        })
    });

    let raw_origin = clock.raw();
    g.bench_function("quanta_raw_delta", |b| {
        b.iter(|| {
            let clock = black_box(&clock);
            clock.delta_as_nanos(black_box(raw_origin), clock.raw())
        })
    });

    let monotonic = tollgate::MonotonicClock::new();
    g.bench_function("tollgate_monotonic", |b| {
        b.iter(|| tollgate::Clock::now_nanos(black_box(&monotonic)))
    });
    let coarse = tollgate::CoarseClock::new(Duration::from_millis(1)).unwrap();
    g.bench_function("tollgate_coarse_1ms", |b| {
        b.iter(|| tollgate::Clock::now_nanos(black_box(&coarse)))
    });
    g.finish();

    // What the clock is worth on the hot path: one admitted check of one
    // client, the rest of the check being the same.
    let mut g = c.benchmark_group("hot_check_by_clock");
    let rate = (1_000_000_000, Duration::from_secs(1));
    let exact = tollgate::TokenBucket::builder()
        .rate(rate.0, rate.1)
        .key_type::<u64>()
        .build()
        .unwrap();
    g.bench_function("monotonic", |b| {
        b.iter(|| exact.allow_request(black_box(&7)))
    });
    let coarse = tollgate::TokenBucket::builder()
        .rate(rate.0, rate.1)
        .key_type::<u64>()
        .clock(coarse)
        .build()
        .unwrap();
    g.bench_function("coarse_1ms", |b| {
        b.iter(|| coarse.allow_request(black_box(&7)))
    });
    g.finish();
}

// ---------------------------------------------------------------------------
// Hasher
// ---------------------------------------------------------------------------

fn bench_hash(c: &mut Criterion) {
    let mut g = c.benchmark_group("hash");
    let short = "ab123";
    let uuid = "67e55044-10b1-426f-9247-bb680e5fe0c8";
    debug_assert_eq!(short.len(), 5);
    debug_assert_eq!(uuid.len(), 36);

    fn one<S: BuildHasher>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, s: &S, input: &str) {
        g.bench_function(name, |b| b.iter(|| black_box(s).hash_one(black_box(input))));
    }

    let (std_s, fast, quality) = (StdState::new(), FoldFast::default(), FoldQuality::default());
    one(&mut g, "std_sip13/5B", &std_s, short);
    one(&mut g, "foldhash_fast/5B", &fast, short);
    one(&mut g, "foldhash_quality/5B", &quality, short);
    one(&mut g, "std_sip13/36B", &std_s, uuid);
    one(&mut g, "foldhash_fast/36B", &fast, uuid);
    one(&mut g, "foldhash_quality/36B", &quality, uuid);

    g.finish();
}

// ---------------------------------------------------------------------------
// Map candidates
// ---------------------------------------------------------------------------

/// Uniform access to a candidate map's hot-key lookup.
trait Candidate: Sync {
    /// Looks `key` up and applies `f` to its state cell; `None` if absent.
    fn with<R>(&self, key: &str, f: impl FnOnce(&AtomicU64) -> R) -> Option<R>;
}

struct SccMap<S: BuildHasher>(scc::HashMap<String, AtomicU64, S>);
struct SccIndex<S: BuildHasher>(scc::HashIndex<String, Arc<AtomicU64>, S>);
struct Papaya<S>(papaya::HashMap<String, AtomicU64, S>);

impl<S: BuildHasher + Sync> Candidate for SccMap<S> {
    #[inline(always)]
    fn with<R>(&self, key: &str, f: impl FnOnce(&AtomicU64) -> R) -> Option<R> {
        self.0.read_sync(key, |_, v| f(v))
    }
}

impl<S: BuildHasher + Sync> Candidate for SccIndex<S> {
    #[inline(always)]
    fn with<R>(&self, key: &str, f: impl FnOnce(&AtomicU64) -> R) -> Option<R> {
        let guard = scc::Guard::new();
        self.0.peek(key, &guard).map(|v| f(v))
    }
}

impl<S: BuildHasher + Sync + Send> Candidate for Papaya<S> {
    #[inline(always)]
    fn with<R>(&self, key: &str, f: impl FnOnce(&AtomicU64) -> R) -> Option<R> {
        self.0.pin().get(key).map(f)
    }
}

fn scc_map<S: BuildHasher>(s: S) -> SccMap<S> {
    let m = scc::HashMap::with_capacity_and_hasher(MAP_SIZE, s);
    for i in 0..MAP_SIZE {
        assert!(m.insert_sync(key(i), AtomicU64::new(0)).is_ok());
    }
    SccMap(m)
}

fn scc_index<S: BuildHasher>(s: S) -> SccIndex<S> {
    let m = scc::HashIndex::with_capacity_and_hasher(MAP_SIZE, s);
    for i in 0..MAP_SIZE {
        assert!(m.insert_sync(key(i), Arc::new(AtomicU64::new(0))).is_ok());
    }
    SccIndex(m)
}

fn papaya_map<S: BuildHasher>(s: S) -> Papaya<S> {
    let m = papaya::HashMap::with_capacity_and_hasher(MAP_SIZE, s);
    {
        let pinned = m.pin();
        for i in 0..MAP_SIZE {
            pinned.insert(key(i), AtomicU64::new(0));
        }
    }
    Papaya(m)
}

#[inline(always)]
fn read_once<M: Candidate>(m: &M, k: &str) -> u64 {
    m.with(black_box(k), |v| v.load(Ordering::Acquire))
        .expect("hot key present")
}

#[inline(always)]
fn admit_once<M: Candidate>(m: &M, k: &str) -> u64 {
    m.with(black_box(k), admit).expect("hot key present")
}

fn one_thread<M: Candidate>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, m: &M, k: &str) {
    g.bench_function(format!("{name}/read"), |b| b.iter(|| read_once(m, k)));
    g.bench_function(format!("{name}/cas"), |b| b.iter(|| admit_once(m, k)));
}

fn bench_map_1t(c: &mut Criterion) {
    let mut g = c.benchmark_group("map_hot_read_1t");
    let hot = key(HOT);
    let k = hot.as_str();

    one_thread(&mut g, "scc_hashmap/std", &scc_map(StdState::new()), k);
    one_thread(
        &mut g,
        "scc_hashmap/foldhash",
        &scc_map(FoldFast::default()),
        k,
    );
    one_thread(&mut g, "scc_hashindex/std", &scc_index(StdState::new()), k);
    one_thread(
        &mut g,
        "scc_hashindex/foldhash",
        &scc_index(FoldFast::default()),
        k,
    );
    one_thread(&mut g, "papaya/std", &papaya_map(StdState::new()), k);
    one_thread(
        &mut g,
        "papaya/foldhash",
        &papaya_map(FoldFast::default()),
        k,
    );

    g.finish();
}

// ---------------------------------------------------------------------------
// Two threads on one hot key
// ---------------------------------------------------------------------------

const THREADS: usize = 2;

/// Control block shared by the main (criterion) thread and the two workers.
struct Ctl {
    /// Releases the workers for one sample (workers + main thread).
    start: Barrier,
    /// Signals the end of one sample (workers + main thread).
    done: Barrier,
    /// Spin rendezvous so both workers start timing together.
    arrived: AtomicUsize,
    iters: AtomicU64,
    stop: AtomicBool,
    elapsed_ns: [AtomicU64; THREADS],
}

impl Ctl {
    fn new() -> Self {
        Ctl {
            start: Barrier::new(THREADS + 1),
            done: Barrier::new(THREADS + 1),
            arrived: AtomicUsize::new(0),
            iters: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            elapsed_ns: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    fn worker(&self, id: usize, work: &(impl Fn(u64) + Sync)) {
        let mut round = 0usize;
        loop {
            self.start.wait();
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            round += 1;
            self.arrived.fetch_add(1, Ordering::AcqRel);
            while self.arrived.load(Ordering::Acquire) < round * THREADS {
                std::hint::spin_loop();
            }
            let n = self.iters.load(Ordering::Acquire);
            let t = Instant::now();
            work(n);
            self.elapsed_ns[id].store(t.elapsed().as_nanos() as u64, Ordering::Release);
            self.done.wait();
        }
    }

    /// One sample: every worker runs `iters` ops; returns the slowest worker's time.
    fn sample(&self, iters: u64) -> Duration {
        self.iters.store(iters, Ordering::Release);
        self.start.wait();
        self.done.wait();
        let max = self
            .elapsed_ns
            .iter()
            .map(|e| e.load(Ordering::Acquire))
            .max()
            .unwrap_or(0);
        Duration::from_nanos(max)
    }

    fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        self.start.wait();
    }
}

fn two_threads(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, work: impl Fn(u64) + Sync) {
    let ctl = Ctl::new();
    thread::scope(|s| {
        for id in 0..THREADS {
            let (ctl, work) = (&ctl, &work);
            s.spawn(move || ctl.worker(id, work));
        }
        g.bench_function(name, |b| b.iter_custom(|iters| ctl.sample(iters)));
        ctl.shutdown();
    });
}

fn two_thread_reads<M: Candidate>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    m: &M,
    k: &str,
) {
    two_threads(g, &format!("{name}/read"), |n| {
        for _ in 0..n {
            black_box(read_once(m, k));
        }
    });
}

fn two_thread_cas<M: Candidate>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, m: &M, k: &str) {
    two_threads(g, &format!("{name}/cas"), |n| {
        for _ in 0..n {
            black_box(admit_once(m, k));
        }
    });
}

fn bench_map_2t(c: &mut Criterion) {
    let mut g = c.benchmark_group("map_hot_read_2t");
    let hot = key(HOT);
    let k = hot.as_str();

    let m = scc_map(StdState::new());
    two_thread_reads(&mut g, "scc_hashmap/std", &m, k);
    let m = scc_map(FoldFast::default());
    two_thread_reads(&mut g, "scc_hashmap/foldhash", &m, k);
    two_thread_cas(&mut g, "scc_hashmap/foldhash", &m, k);

    let m = scc_index(StdState::new());
    two_thread_reads(&mut g, "scc_hashindex/std", &m, k);
    let m = scc_index(FoldFast::default());
    two_thread_reads(&mut g, "scc_hashindex/foldhash", &m, k);
    two_thread_cas(&mut g, "scc_hashindex/foldhash", &m, k);

    let m = papaya_map(StdState::new());
    two_thread_reads(&mut g, "papaya/std", &m, k);
    let m = papaya_map(FoldFast::default());
    two_thread_reads(&mut g, "papaya/foldhash", &m, k);
    two_thread_cas(&mut g, "papaya/foldhash", &m, k);

    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_clock, bench_hash, bench_map_1t, bench_map_2t
}
criterion_main!(benches);
