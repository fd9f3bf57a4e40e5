//! Proof that the models bite: every model of `token_bucket.rs`,
//! `windows.rs` and `insert.rs`, run again over the deliberately broken
//! cell (`twins::RacyCell`, whose update is a load followed by a store),
//! must fail, and does: loom finds an interleaving that admits more than
//! the model's bound. A model that also passed here would be worthless.
//!
//! Each test is the very model function its real twin calls, with `RACY` in
//! place of `REAL`, and expects the model's over-admission assertion (not
//! just any panic). One more breaks the map instead of the cell: a stand-in
//! whose `insert` replaces a present key, against the `Index` contract.

use crate::harness::RACY;
use crate::{insert, log, token_bucket as tb, windows as win};

/// `name: model call;` becomes a test that expects the model to catch an
/// over-admission.
macro_rules! over_admits {
    ($($name:ident: $model:expr;)*) => {$(
        #[test]
        #[should_panic(expected = "over-admitted")]
        fn $name() {
            let _ = $model;
        }
    )*};
}

over_admits! {
    token_bucket_frozen_2_threads_capacity_1: tb::frozen(RACY, 2, 1, 1);
    token_bucket_frozen_2_threads_capacity_2: tb::frozen(RACY, 2, 2, 2);
    token_bucket_frozen_3_threads_capacity_1: tb::frozen(RACY, 3, 1, 1);
    token_bucket_frozen_3_threads_capacity_2: tb::frozen(RACY, 3, 2, 1);
    token_bucket_ticking_2_threads_capacity_1: tb::ticking(RACY, 2, 1, 2, 1);
    token_bucket_ticking_2_threads_capacity_2: tb::ticking(RACY, 2, 2, 2, 1);
    token_bucket_ticking_3_threads_capacity_1: tb::ticking(RACY, 3, 1, 1, 1);

    counter_frozen_2_threads_limit_1: win::counter_frozen(RACY, 2, 1, 1);
    counter_frozen_2_threads_limit_2: win::counter_frozen(RACY, 2, 2, 2);
    counter_frozen_3_threads_limit_1: win::counter_frozen(RACY, 3, 1, 1);
    counter_frozen_3_threads_limit_2: win::counter_frozen(RACY, 3, 2, 1);
    counter_onto_boundary_2_threads_limit_1: win::counter_onto_boundary(RACY, 2, 1, 2);
    counter_onto_boundary_2_threads_limit_2: win::counter_onto_boundary(RACY, 2, 2, 2);
    counter_onto_boundary_3_threads_limit_2: win::counter_onto_boundary(RACY, 3, 2, 1);
    counter_past_boundary_2_threads_limit_1: win::counter_past_boundary(RACY, 2, 1, 2);
    counter_past_boundary_2_threads_limit_2: win::counter_past_boundary(RACY, 2, 2, 2);
    counter_past_boundary_3_threads_limit_1: win::counter_past_boundary(RACY, 3, 1, 1);

    fixed_frozen_2_threads_limit_1: win::fixed_frozen(RACY, 2, 1, 1);
    fixed_frozen_2_threads_limit_2: win::fixed_frozen(RACY, 2, 2, 2);
    fixed_frozen_3_threads_limit_1: win::fixed_frozen(RACY, 3, 1, 1);
    fixed_frozen_3_threads_limit_2: win::fixed_frozen(RACY, 3, 2, 1);
    fixed_across_boundary_2_threads_limit_1: win::fixed_across_boundary(RACY, 2, 1, 2);
    fixed_across_boundary_2_threads_limit_2: win::fixed_across_boundary(RACY, 2, 2, 3);
    fixed_across_boundary_3_threads_limit_1: win::fixed_across_boundary(RACY, 3, 1, 1);

    first_request_2_threads_capacity_1: insert::first_request(RACY, false, 2, 1, 1);
    first_request_2_threads_capacity_2: insert::first_request(RACY, false, 2, 2, 2);
    first_request_3_threads_capacity_2: insert::first_request(RACY, false, 3, 2, 1);
    log_frozen_2_threads_limit_1: log::frozen(RACY, 2, 1);
    log_frozen_2_threads_limit_2: log::frozen(RACY, 2, 2);
    log_frozen_3_threads_limit_1: log::frozen(RACY, 3, 1);
    log_frozen_3_threads_limit_2: log::frozen(RACY, 3, 2);
    log_multi_cost_2_vs_1_limit_2: log::multi_cost(RACY, 1);
    log_multi_cost_2_vs_1_1_limit_2: log::multi_cost(RACY, 2);
    log_across_boundary_2_threads_limit_1_full: log::across_boundary(RACY, 2, 1, 1);
    log_across_boundary_2_threads_limit_2: log::across_boundary(RACY, 2, 2, 1);

    first_request_replacing_map: insert::first_request(crate::harness::REAL, true, 2, 1, 1);
}
