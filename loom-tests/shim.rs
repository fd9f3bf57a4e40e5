//! The shim's choice (`src/sync.rs`): under `--features loom` the crate's
//! atomics are loom's when made inside a model and std's outside one, so
//! that the doctests, which run outside any model, work in this build too.
//! These tests pin that choice down, since the models rely on it.

use std::time::Duration;

use loom::thread;
use tollgate::__loom::in_model;
use tollgate::{Clock, ManualClock};

#[test]
fn shim_sees_the_model_on_every_thread() {
    assert!(!in_model(), "outside a model");
    loom::model(|| {
        assert!(in_model(), "on the model's first thread");
        thread::spawn(|| assert!(in_model(), "on a spawned thread"))
            .join()
            .unwrap();
    });
    assert!(!in_model(), "after the model");
}

#[test]
fn shim_uses_std_outside_a_model() {
    // A loom atomic would panic here: "cannot access Loom execution state".
    let clock = ManualClock::new();
    clock.clone().advance(Duration::from_nanos(5));
    assert_eq!(clock.now_nanos(), 5);
}

#[test]
#[should_panic(expected = "made outside a loom model is used inside one")]
fn shim_refuses_std_inside_a_model() {
    let clock = ManualClock::new();
    loom::model(move || {
        let _ = clock.now_nanos();
    });
}
