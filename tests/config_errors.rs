//! Every `ConfigError::OutOfRange` a builder returns names the setting
//! that is really out of range, with bounds that can be met: `min ≤ max`,
//! the value given lies outside them, and putting a value inside them
//! (either end) in that setting clears that error. Fixing the settings one
//! error at a time always ends in a limiter that builds.
//!
//! Covered: each algorithm alone, every pair of the word algorithms, a
//! tiered limiter of each of them, and the memory settings.

#![cfg(not(feature = "loom"))]

use std::time::Duration;

use proptest::prelude::*;
use tollgate::{
    Algorithm, Builder, ConfigError, FixedWindow, Overflow, SlidingWindowCounter, SlidingWindowLog,
    TokenBucket,
};

const NOW_MAX: u64 = (1 << 63) - 1;

/// One quota's settings.
#[derive(Clone, Debug)]
enum Quota {
    Bucket {
        tokens: u64,
        per: u64,
        capacity: u64,
    },
    Fixed {
        limit: u64,
        window: u64,
    },
    Sliding {
        limit: u64,
        window: u64,
    },
    Log {
        limit: u64,
        window: u64,
    },
}

#[derive(Clone, Debug, Default)]
struct Memory {
    max_clients: Option<u64>,
    sample: Option<u32>,
    sweep: Option<(u64, u64)>,
}

#[derive(Clone, Debug)]
struct Settings {
    first: Quota,
    /// A second limit held together with the first (`and`).
    second: Option<Quota>,
    /// A tier 1 quota of the first's kind (`tier`).
    tier: Option<Quota>,
    memory: Memory,
}

fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}

fn tb(q: &Quota) -> Builder<TokenBucket> {
    let Quota::Bucket {
        tokens,
        per,
        capacity,
    } = *q
    else {
        unreachable!()
    };
    TokenBucket::builder()
        .rate(tokens, ns(per))
        .capacity(capacity)
}

fn fw(q: &Quota) -> Builder<FixedWindow> {
    let Quota::Fixed { limit, window } = *q else {
        unreachable!()
    };
    FixedWindow::builder().limit(limit).window(ns(window))
}

fn sw(q: &Quota) -> Builder<SlidingWindowCounter> {
    let Quota::Sliding { limit, window } = *q else {
        unreachable!()
    };
    SlidingWindowCounter::builder()
        .limit(limit)
        .window(ns(window))
}

fn lg(q: &Quota) -> Builder<SlidingWindowLog> {
    let Quota::Log { limit, window } = *q else {
        unreachable!()
    };
    SlidingWindowLog::builder().limit(limit).window(ns(window))
}

fn finish<A: Algorithm>(builder: Builder<A>, m: &Memory) -> Result<(), ConfigError> {
    let mut builder = builder;
    if let Some(max) = m.max_clients {
        builder = builder.max_clients(max);
    }
    if let Some(sample) = m.sample {
        builder = builder.overflow(Overflow::EvictSampled { sample });
    }
    if let Some((every, slice)) = m.sweep {
        builder = builder.auto_sweep(every, slice);
    }
    builder.build().map(drop)
}

/// The first limit's builder paired with `second`.
macro_rules! paired {
    ($first:expr, $second:expr, $m:expr) => {
        match $second {
            q @ Quota::Bucket { .. } => finish($first.and(tb(q)), $m),
            q @ Quota::Fixed { .. } => finish($first.and(fw(q)), $m),
            q @ Quota::Sliding { .. } => finish($first.and(sw(q)), $m),
            Quota::Log { .. } => unreachable!("a log is never half of a pair"),
        }
    };
}

/// The first limit's builder, with a tier of the same kind if any.
macro_rules! tiered {
    ($first:expr, $tier:expr, $make:ident, $m:expr) => {
        match $tier {
            Some(q) => finish($first.tier(1, $make(q)), $m),
            None => finish($first, $m),
        }
    };
}

fn build(s: &Settings) -> Result<(), ConfigError> {
    let m = &s.memory;
    match (&s.first, &s.second) {
        (q @ Quota::Bucket { .. }, Some(second)) => paired!(tb(q), second, m),
        (q @ Quota::Fixed { .. }, Some(second)) => paired!(fw(q), second, m),
        (q @ Quota::Sliding { .. }, Some(second)) => paired!(sw(q), second, m),
        (q @ Quota::Bucket { .. }, None) => tiered!(tb(q), &s.tier, tb, m),
        (q @ Quota::Fixed { .. }, None) => tiered!(fw(q), &s.tier, fw, m),
        (q @ Quota::Sliding { .. }, None) => tiered!(sw(q), &s.tier, sw, m),
        (q @ Quota::Log { .. }, _) => finish(lg(q), m),
    }
}

fn narrow(v: u128) -> u64 {
    u64::try_from(v).expect("every bound of a u64 setting fits a u64")
}

impl Quota {
    fn set(&mut self, field: &str, unit: &str, v: u64) {
        match (self, field, unit) {
            (Quota::Bucket { per, .. }, "rate", "ns") => *per = v,
            (Quota::Bucket { tokens, .. }, "rate", "tokens") => *tokens = v,
            (Quota::Bucket { capacity, .. }, "capacity", _) => *capacity = v,
            (
                Quota::Fixed { limit, .. }
                | Quota::Sliding { limit, .. }
                | Quota::Log { limit, .. },
                "limit",
                _,
            ) => *limit = v,
            (
                Quota::Fixed { window, .. }
                | Quota::Sliding { window, .. }
                | Quota::Log { window, .. },
                "window",
                _,
            ) => *window = v,
            (q, field, unit) => panic!("`{field}` ({unit}) names no setting of {q:?}"),
        }
    }
}

impl Settings {
    /// Puts `v` in the setting an error names by `field` and `unit`.
    fn set(&mut self, field: &str, unit: &str, v: u64) {
        if let Some(rest) = field.strip_prefix("and.") {
            return self.second.as_mut().expect("a pair").set(rest, unit, v);
        }
        if let Some(rest) = field.strip_prefix("tier.") {
            return self.tier.as_mut().expect("a tier").set(rest, unit, v);
        }
        match (field, unit) {
            ("max_clients", _) => self.memory.max_clients = Some(v),
            ("overflow", _) => self.memory.sample = Some(u32::try_from(v).unwrap()),
            ("auto_sweep", "new clients") => self.memory.sweep.as_mut().unwrap().0 = v,
            ("auto_sweep", "entries") => self.memory.sweep.as_mut().unwrap().1 = v,
            _ => self.first.set(field, unit, v),
        }
    }
}

/// Builds `settings`, fixing one out-of-range setting at a time: every
/// error must have bounds that can be met, and the value at either bound
/// must clear it. Returns the errors met on the way.
fn settle(mut settings: Settings) -> Vec<ConfigError> {
    let mut seen = Vec::new();
    for _ in 0..16 {
        let err = match build(&settings) {
            Ok(()) => return seen,
            Err(err) => err,
        };
        let ConfigError::OutOfRange {
            field,
            value,
            min,
            max,
            unit,
            ..
        } = err
        else {
            panic!("every setting is given: {err:?}");
        };
        assert!(min <= max, "bounds that cannot be met: {err}");
        assert!(min >= 1, "a zero setting is never allowed here: {err}");
        assert!(
            !(min..=max).contains(&value),
            "a value inside its bounds refused: {err}"
        );
        for inside in [min, max] {
            let mut fixed = settings.clone();
            fixed.set(field, unit, narrow(inside));
            if let Err(ConfigError::OutOfRange {
                field: f, unit: u, ..
            }) = build(&fixed)
            {
                assert!(
                    (f, u) != (field, unit),
                    "`{field}` at {inside}, inside the bounds of \"{err}\", still refused: {}",
                    build(&fixed).unwrap_err()
                );
            }
        }
        settings.set(field, unit, narrow(value.clamp(min, max)));
        seen.push(err);
    }
    panic!("settings still refused after 16 fixes: {settings:?}");
}

fn edge() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(2),
        Just(3),
        2..100u64,
        Just(NOW_MAX - 4),
        Just(NOW_MAX - 3),
        Just(NOW_MAX),
        Just(NOW_MAX + 1),
        Just(u64::from(u32::MAX)),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

fn bucket() -> impl Strategy<Value = Quota> {
    (edge(), edge(), edge()).prop_map(|(tokens, per, capacity)| Quota::Bucket {
        tokens,
        per,
        capacity,
    })
}

fn window(kind: u8) -> impl Strategy<Value = Quota> {
    (edge(), edge()).prop_map(move |(limit, window)| match kind {
        0 => Quota::Fixed { limit, window },
        1 => Quota::Sliding { limit, window },
        _ => Quota::Log { limit, window },
    })
}

fn word() -> impl Strategy<Value = Quota> {
    prop_oneof![bucket(), window(0), window(1)]
}

fn memory() -> impl Strategy<Value = Memory> {
    (
        prop::option::of(edge()),
        prop::option::of(prop_oneof![Just(0u32), 1..=70u32, any::<u32>()]),
        prop::option::of((edge(), edge())),
    )
        .prop_map(|(max_clients, sample, sweep)| Memory {
            max_clients,
            sample,
            sweep,
        })
}

/// A tier of the same kind as `first`.
fn same_kind(first: &Quota) -> BoxedStrategy<Quota> {
    match first {
        Quota::Bucket { .. } => bucket().boxed(),
        Quota::Fixed { .. } => window(0).boxed(),
        Quota::Sliding { .. } => window(1).boxed(),
        Quota::Log { .. } => unreachable!(),
    }
}

fn settings() -> impl Strategy<Value = Settings> {
    prop_oneof![
        // Alone (the log only alone).
        (prop_oneof![word(), window(2)], memory()).prop_map(|(first, memory)| Settings {
            first,
            second: None,
            tier: None,
            memory,
        }),
        // A pair.
        (word(), word(), memory()).prop_map(|(first, second, memory)| Settings {
            first,
            second: Some(second),
            tier: None,
            memory,
        }),
        // A tiered limiter.
        (word(), memory())
            .prop_flat_map(|(first, memory)| {
                let tier = same_kind(&first);
                (Just(first), tier, Just(memory))
            })
            .prop_map(|(first, tier, memory)| Settings {
                first,
                second: None,
                tier: Some(tier),
                memory,
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn every_out_of_range_error_has_bounds_that_can_be_met(s in settings()) {
        settle(s);
    }
}

/// The message that once said "at least 1 and at most 0 tokens": a period
/// whose one token lasts longer than any bucket can refill. The rate is at
/// fault, with a bound that builds.
#[test]
fn a_rate_too_slow_for_any_bucket_names_the_rate() {
    let err = TokenBucket::builder()
        .rate(1, Duration::from_nanos(i64::MAX as u64))
        .capacity(1)
        .build()
        .unwrap_err();
    let ConfigError::OutOfRange {
        field,
        value,
        min,
        max,
        unit,
        ..
    } = err.clone()
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (field, unit, value, min),
        ("rate", "ns", i64::MAX as u128, 1)
    );
    assert!(max < value, "{err}");
    let builds = TokenBucket::builder()
        .rate(1, Duration::from_nanos(narrow(max)))
        .capacity(1)
        .build();
    assert!(builds.is_ok(), "{err}");
    // Two tokens over the same period fit.
    assert!(TokenBucket::builder()
        .rate(2, Duration::from_nanos(i64::MAX as u64))
        .capacity(1)
        .build()
        .is_ok());
}

/// Windows of 1 and 2 ns leave a packed counter no bits for its counts:
/// the window is at fault, not the limit.
#[test]
fn a_window_too_short_for_its_counts_names_the_window() {
    for window in [1, 2] {
        let err = SlidingWindowCounter::builder()
            .limit(1)
            .window(ns(window))
            .build()
            .unwrap_err();
        assert_eq!(err.field(), "window", "{err}");
        let err = FixedWindow::builder()
            .limit(1)
            .window(ns(window))
            .build()
            .unwrap_err();
        assert_eq!(err.field(), "window", "{err}");
    }
    assert!(SlidingWindowCounter::builder()
        .limit(1)
        .window(ns(3))
        .build()
        .is_ok());
}

/// A sweep every 2^32 - 1 new clients could never visit twice as many.
#[test]
fn a_sweep_too_rare_for_any_slice_names_its_period() {
    let err = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .auto_sweep(u64::from(u32::MAX), u64::from(u32::MAX))
        .build()
        .unwrap_err();
    let ConfigError::OutOfRange { unit, min, max, .. } = err else {
        panic!("{err:?}")
    };
    assert_eq!(unit, "new clients");
    assert!(min <= max);
}
