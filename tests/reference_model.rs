//! Every algorithm against its exact reference model, decision by decision,
//! over random sequences of clock advances, clients, costs and peeks.
//!
//! Requirement (c): with whole-microsecond token intervals, windows and gaps
//! the limiter must equal the exact model. The configurations here are
//! stricter than that: any interval or window that is a whole number of
//! nanoseconds, with gaps of any nanosecond length from 0 to ten years
//! (requirement (a)).

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

mod common;

use common::strategies::{bucket, steps, window, SEC};
use common::{agree_with_model, BucketConfig, Fixed, Log, Sliding};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn token_bucket_matches_exact_model(config in bucket(), steps in steps(3, 6)) {
        agree_with_model(&config, &steps);
    }

    #[test]
    fn sliding_window_counter_matches_exact_model(config in window(), steps in steps(3, 6)) {
        agree_with_model(&Sliding(config), &steps);
    }

    #[test]
    fn fixed_window_matches_exact_model(config in window(), steps in steps(3, 6)) {
        agree_with_model(&Fixed(config), &steps);
    }

    #[test]
    fn sliding_window_log_matches_exact_model(config in window(), steps in steps(3, 6)) {
        agree_with_model(&Log(config), &steps);
    }
}

/// Any rate at all, including token intervals that are not whole
/// nanoseconds (3 per second is 333 333 333.3 ns).
fn any_bucket() -> impl Strategy<Value = BucketConfig> {
    (1..=1_000u64, 1_000..=10 * SEC, 1..=6u64).prop_map(|(tokens, per, capacity)| BucketConfig {
        tokens,
        per,
        capacity,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Requirement (d): where the interval must be rounded, the limiter errs
    /// toward denying. Every request it admits, the exact model (fed the
    /// same admitted history) admits too.
    #[test]
    fn rounded_token_bucket_never_admits_what_the_exact_model_denies(
        config in any_bucket(),
        gaps in prop::collection::vec(
            prop_oneof![Just(None), Just(Some(0u64)), (0..10 * SEC).prop_map(Some)],
            1..200,
        ),
    ) {
        use common::{Model, Subject};
        let clock = tollgate::ManualClock::new();
        let limiter = config.limiter(clock.clone());
        let mut exact = config.model();
        let mut now = 0;
        let mut admitted = 0u32;
        for gap in gaps {
            // `None`: jump to the instant the limiter itself says the next
            // request passes, where any rounding toward admission shows.
            now += gap.unwrap_or_else(|| limiter.peek(&0).retry_after().as_nanos() as u64);
            clock.set(std::time::Duration::from_nanos(now));
            if limiter.allow_request(&0) {
                admitted += 1;
                prop_assert!(exact.admit(now, 1), "admitted at {} ns beyond the exact model", now);
            }
        }
        prop_assert!(admitted >= 1);
    }
}
