//! Eviction costs (issue 6).
//!
//! ```text
//! cargo bench --bench eviction
//! ```
//!
//! * `sweep_2m_stale`: one full sweep over 2 M clients that have all gone
//!   idle, tollgate's `Limiter::sweep` against governor 0.10's
//!   `retain_recent` (its DashMap store), both token buckets keyed by `u64`
//!   with a hand-driven clock. Divide by 2 M for the cost per entry.
//! * `new_client`: the cost of one request from a client never seen before
//!   (an insert): with no cap, and with a full `max_clients` cap under each
//!   overflow policy. Every held client is busy (a frozen clock), so the
//!   policy applies on every request.
//!
//! A standalone bench; the compare runner (`compare/src/main.rs`) belongs to
//! another change.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode};
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use tollgate::{ManualClock, Overflow, TokenBucket};

const STALE: u64 = 2_000_000;

fn tollgate_full_of_stale(n: u64) -> tollgate::Limiter<TokenBucket, u64, ManualClock> {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .no_auto_sweep()
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    for id in 0..n {
        assert!(limiter.allow_request(&id));
    }
    clock.advance(Duration::from_secs(2));
    limiter
}

type Governor = RateLimiter<
    u64,
    governor::state::keyed::DefaultKeyedStateStore<u64>,
    FakeRelativeClock,
    governor::middleware::NoOpMiddleware<governor::nanos::Nanos>,
>;

fn governor_full_of_stale(n: u64) -> Governor {
    let clock = FakeRelativeClock::default();
    let limiter = RateLimiter::dashmap_with_clock(
        Quota::per_second(NonZeroU32::new(1).unwrap()),
        clock.clone(),
    );
    for id in 0..n {
        assert!(limiter.check_key(&id).is_ok());
    }
    clock.advance(Duration::from_secs(2));
    limiter
}

fn sweep(c: &mut Criterion) {
    let mut group = c.benchmark_group("sweep_2m_stale");
    // Each iteration first fills a map of 2 M clients (untimed): keep the
    // iteration count down.
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_millis(500));
    group.bench_function("tollgate_sweep", |b| {
        b.iter_batched(
            || tollgate_full_of_stale(STALE),
            |limiter| {
                assert_eq!(limiter.sweep(), STALE as usize);
                limiter
            },
            BatchSize::PerIteration,
        );
    });
    group.bench_function("governor_retain_recent", |b| {
        b.iter_batched(
            || governor_full_of_stale(STALE),
            |limiter| {
                limiter.retain_recent();
                assert_eq!(limiter.len(), 0);
                limiter
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

fn new_client(c: &mut Criterion) {
    const CAP: u64 = 100_000;
    let mut group = c.benchmark_group("new_client");
    let policies: [(&str, Option<Overflow>); 4] = [
        ("no_cap", None),
        (
            "cap_full/evict_sampled",
            Some(Overflow::EvictSampled { sample: 5 }),
        ),
        ("cap_full/deny_new", Some(Overflow::DenyNew)),
        ("cap_full/admit_untracked", Some(Overflow::AdmitUntracked)),
    ];
    for (name, policy) in policies {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut builder = TokenBucket::builder()
                    .rate(1, Duration::from_secs(3600))
                    .key_type::<u64>()
                    .clock(ManualClock::new());
                if let Some(policy) = policy {
                    builder = builder.max_clients(CAP).overflow(policy);
                }
                let limiter = builder.build().unwrap();
                // Fill to the cap first (or as far, without one).
                for id in 0..CAP {
                    let _ = limiter.allow_request(&id);
                }
                let start = Instant::now();
                for id in CAP..CAP + iters {
                    black_box(limiter.allow_request(&id));
                }
                start.elapsed()
            });
        });
    }
    group.finish();
}

criterion_group!(benches, sweep, new_client);
criterion_main!(benches);
