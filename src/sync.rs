//! The one place that names the concurrency primitives.
//!
//! Every other module takes its atomics, `Arc`, `Mutex` (the sweep cursor's,
//! never on the check path) and spin hint from here, so that
//! `--features loom` swaps them all for loom's model-checked versions at once.
//! A test (`tests/sync_shim.rs`) fails the build's test run if any other file
//! imports `std::sync::atomic` directly.

#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc, Mutex,
};

#[cfg(feature = "loom")]
pub(crate) use loom::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

/// The sweep cursor's lock is std's in both builds: it guards no state a
/// model checks (the sweep runs over `scc`'s map, which loom cannot model),
/// and it is only ever `try_lock`ed.
#[cfg(feature = "loom")]
pub(crate) use std::sync::Mutex;

/// Backoff for the compare-and-swap retry loop: crossbeam's exponential
/// spin normally; under loom a yield to the model's scheduler, which has no
/// use for spinning.
#[cfg(not(feature = "loom"))]
pub(crate) use crossbeam_utils::Backoff;

#[cfg(feature = "loom")]
#[derive(Debug, Default)]
pub(crate) struct Backoff;

#[cfg(feature = "loom")]
impl Backoff {
    pub(crate) fn new() -> Self {
        Self
    }

    pub(crate) fn spin(&self) {
        loom::thread::yield_now();
    }

    pub(crate) fn snooze(&self) {
        loom::thread::yield_now();
    }
}

/// A hint that this thread is waiting on another: the CPU's spin-loop hint
/// normally, a yield to the model's scheduler under loom.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(not(feature = "loom"))]
    core::hint::spin_loop();
    #[cfg(feature = "loom")]
    loom::thread::yield_now();
}
