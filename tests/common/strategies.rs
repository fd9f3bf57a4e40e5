//! The random scenarios the exact-model tests draw: configurations whose
//! token intervals and windows are whole nanoseconds, and sequences of steps
//! over a few clients.

use proptest::prelude::*;

use super::{BucketConfig, Gap, Step, WindowConfig};

pub const US: u64 = 1_000;
pub const SEC: u64 = 1_000_000_000;
pub const YEAR: u64 = 365 * 86_400 * SEC;

/// Gaps between requests: mostly none or short, with whole microseconds,
/// window-scale jumps, idle spells of up to ten years, and jumps to within a
/// nanosecond of the next admission.
pub fn gap() -> impl Strategy<Value = Gap> {
    prop_oneof![
        4 => Just(0u64).prop_map(Gap::Nanos),
        4 => (0..2_000u64).prop_map(Gap::Nanos),
        4 => (0..2_000u64).prop_map(|n| Gap::Nanos(n * US)),
        3 => (0..20 * SEC).prop_map(Gap::Nanos),
        1 => (0..10 * YEAR).prop_map(Gap::Nanos),
        1 => Just(Gap::Nanos(10 * YEAR)),
        4 => (-1..=1i8).prop_map(Gap::Boundary),
    ]
}

pub fn steps(clients: u64, max_cost: u64) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (gap(), 0..clients, 1..=max_cost, prop::bool::weighted(0.15)).prop_map(
            |(gap, client, cost, peek)| Step {
                gap,
                client,
                cost,
                peek,
            },
        ),
        1..120,
    )
}

/// Token intervals that are whole nanoseconds, from 1 µs to an hour.
pub fn bucket() -> impl Strategy<Value = BucketConfig> {
    (
        1..=6u64,
        prop_oneof![1..2_000u64, (1..3_600u64).prop_map(|s| s * 1_000_000)],
        1..=6u64,
    )
        .prop_map(|(tokens, interval_us, capacity)| BucketConfig {
            tokens,
            per: tokens * interval_us * US,
            capacity,
        })
}

pub fn window() -> impl Strategy<Value = WindowConfig> {
    (
        1..=6u64,
        prop_oneof![
            100..5_000u64,
            (1..3_600u64).prop_map(|s| s * SEC),
            1_000..SEC
        ],
    )
        .prop_map(|(limit, window)| WindowConfig { limit, window })
}
