//! tollgate under contention, side by side with a map of per-client mutexes
//! (`mutex-map`), one global mutex (`global-mutex`) and governor's
//! keyed limiter. `cargo run --release -p compare` runs the same
//! workloads in under a minute and prints ratios; this suite is the slower,
//! criterion-grade version of it.
//!
//! ```text
//! cargo bench --bench contention                       # everything, several minutes on 2 cores
//! cargo bench --bench contention -- hot_allowed        # one scenario
//! cargo bench --bench contention -- 'hot_denied/tollgate/token-bucket/String'
//! cargo bench --bench contention -- '/2t$'             # only the 2-thread runs
//! ```
//!
//! Ids are `scenario/implementation/algorithm/key/Nt`. Groups (scenarios):
//!
//! * `hot_allowed`: every thread checks one client whose quota never runs
//!   out (the admit path: a compare-and-swap on one shared word).
//! * `hot_denied`: every thread checks one client whose quota (1 per hour)
//!   is spent: a deny flood.
//! * `uniform_100k`: 100 000 known clients, picked uniformly at random.
//! * `uniform_1m`: 1 000 000 known clients, picked uniformly at random (the
//!   map far beyond the caches; filling it takes a few seconds per
//!   implementation).
//! * `insert`: every check is a client never seen before; each sample starts
//!   from an empty limiter.
//!
//! Each runs at 1, 2 and 4 threads (more threads than cores is a real
//! server's situation) with `String` and `u64` keys. A pool of long-lived
//! threads starts each sample together from a `Barrier` inside
//! `iter_custom`; each thread makes `iters` checks, and the
//! reported time is the wall time from the first thread's start to the last
//! one's end divided by `iters`: the cost of one check as each thread sees it.
//! The throughput line is all threads together.
//!
//! Timing is short (0.3 s warm-up, 1 s measurement, 10 samples) so the whole
//! suite finishes in minutes; pass `--measurement-time 5` for tighter bounds.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

// The baselines and the workloads are shared with the comparison runner
// (`compare/src/main.rs`), which includes the same files, so the two can
// never measure different things. They are not part of the library, and
// cargo has no other way to share code between a bench target and another
// package's binary.
#[path = "support/baselines.rs"]
mod baselines;
#[path = "support/workload.rs"]
#[allow(dead_code)] // the sample's figures are read by the runner, not here
mod workload;

use workload::{fresh_keys, impls, make, prepare, Data, Key, Load, Pool, Scenario, SCENARIOS};

const THREADS: &[usize] = &[1, 2, 4];

fn scenario<K: Key>(c: &mut Criterion, scenario: Scenario, data: &Data<K>, pools: &[Pool]) {
    let mut group = c.benchmark_group(scenario.name());
    for imp in impls() {
        // One limiter for every thread count; the insert scenario makes a
        // fresh one per sample instead.
        let subject = (scenario != Scenario::Insert).then(|| {
            let subject = make::<K>(imp, scenario);
            prepare(subject.as_ref(), scenario, data);
            subject
        });
        for pool in pools {
            let threads = pool.threads();
            let id = BenchmarkId::new(imp.label(), format!("{}/{threads}t", K::NAME));
            group.throughput(Throughput::Elements(threads as u64));
            group.bench_function(id, |b| {
                b.iter_custom(|iters| match &subject {
                    Some(subject) => pool.run(subject, data.load(scenario, iters)).wall,
                    None => {
                        let keys = fresh_keys::<K>(threads, iters);
                        let subject = make::<K>(imp, scenario);
                        pool.run(&subject, Load::Insert { keys }).wall
                    }
                })
            });
        }
    }
    group.finish();
}

fn contention(c: &mut Criterion) {
    let strings = Data::<String>::new(workload::UNIFORM_CLIENTS);
    let numbers = Data::<u64>::new(workload::UNIFORM_CLIENTS);
    // Long-lived threads, shared by every benchmark: see `Pool`.
    let pools: Vec<Pool> = THREADS.iter().map(|&t| Pool::new(t)).collect();
    for &s in SCENARIOS {
        scenario(c, s, &strings, &pools);
        scenario(c, s, &numbers, &pools);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(10);
    targets = contention
}
criterion_main!(benches);
