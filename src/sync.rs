//! The one place that names the concurrency primitives.
//!
//! Every other module takes its atomics, `Arc`, `Mutex` (the store's,
//! never on the check path) and spin hint from here, so that
//! `--features loom` swaps them all for loom's model-checked versions at once.
//! A test (`tests/sync_shim.rs`) fails the build's test run if any other file
//! imports `std::sync::atomic` directly.
//!
//! Without the feature these are std's own types, re-exported as they are.
//! With it, `AtomicU64` and `Arc` are two-way wrappers (`loom_shim`): loom's
//! type when made inside a loom model, std's when made outside one. Loom's
//! types panic outside a model, and `cargo test --features loom` also runs
//! the doctests, which link against this same build of the library and call
//! it from an ordinary `main`; no attribute or `cfg` can skip a doctest per
//! feature. Everything the models make is made inside the model, so the
//! models still run the crate's code on loom's atomics only.

#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc, Mutex,
};

/// The flag of a Redis limiter's lease that one call for more is on its
/// way: on the Redis path only, which no loom model runs.
#[cfg(feature = "redis")]
pub(crate) use std::sync::atomic::AtomicBool;

/// Each slot's owner in a Redis limiter's map of a cluster's nodes: on
/// the Redis path only, which no loom model runs.
#[cfg(feature = "redis")]
pub(crate) use std::sync::atomic::AtomicU8;

#[cfg(feature = "loom")]
pub(crate) use loom::sync::atomic::Ordering;

#[cfg(feature = "loom")]
pub(crate) use self::loom_shim::{in_model, Arc, AtomicU128, AtomicU64};

/// A 128-bit atomic for the two words of a client held to two limits
/// (`cell::PairCell`): `portable-atomic`'s, which on x86-64 is a
/// `cmpxchg16b` (lock-free; detected at run time unless the build enables
/// the `cmpxchg16b` target feature) and on AArch64 an `ldxp`/`stxp` or
/// `casp` pair. Where the target has no 128-bit compare-and-swap it falls
/// back to a lock; [`pair_is_lock_free`] says which.
#[cfg(not(feature = "loom"))]
pub(crate) use portable_atomic::AtomicU128;

/// The fences of the Redis deny shortcut's sequence lock
/// (`redis::shortcut`): std's in every build, since no loom model runs
/// the Redis limiters.
#[cfg(feature = "redis")]
pub(crate) use std::sync::atomic::fence;

/// Whether the 128-bit atomic behind a two-limit client is lock-free on
/// this machine (it is wherever `cmpxchg16b` or its equivalent exists).
pub(crate) fn pair_is_lock_free() -> bool {
    portable_atomic::AtomicU128::is_lock_free()
}

/// The store's locks (its table's writers' locks and the sweep cursor's)
/// are std's in both builds: they guard no state a model checks (the models
/// run the store's protocol over a stand-in for its table), and a check
/// never takes them.
#[cfg(feature = "loom")]
pub(crate) use std::sync::Mutex;

/// std's `AtomicU64` in every build, loom's included: the store's table
/// (`store::map`) keeps its control words in it. The loom models never run
/// that table; they run the store's protocol over a loom-aware stand-in
/// (`loom-tests/stand_in.rs`), and the table is checked by its own tests,
/// under Miri and ThreadSanitizer.
pub(crate) use std::sync::atomic::AtomicU64 as PlainAtomicU64;

/// std's fence in every build, loom's included, for the store's table,
/// whose control words are std's atomics ([`PlainAtomicU64`]): an insert's
/// scan orders its loads after its publication with it.
pub(crate) use std::sync::atomic::fence as plain_fence;

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
        spin_hint();
    }

    pub(crate) fn snooze(&self) {
        spin_hint();
    }
}

/// A hint that this thread is waiting on another, for the loom build's
/// `Backoff`: a yield to the model's scheduler inside a loom model, the
/// CPU's spin-loop hint outside one.
#[cfg(feature = "loom")]
#[inline]
fn spin_hint() {
    if in_model() {
        loom::thread::yield_now();
    } else {
        core::hint::spin_loop();
    }
}

/// `--features loom` only: atomics and `Arc` that are loom's inside a model
/// and std's outside one, chosen when each is made.
#[cfg(feature = "loom")]
mod loom_shim {
    use core::ops::Deref;

    use super::Ordering;

    /// Whether the caller runs inside a loom model.
    ///
    /// loom 0.7 has no public call for this. It runs every thread of a model,
    /// the model's first thread included, as a `generator` coroutine, and
    /// nothing else in this crate's build uses that crate, so "on a
    /// coroutine" is "inside a model". `loom-tests/main.rs` checks this
    /// (`shim_*` tests), and the deliberately broken models would stop failing if it broke.
    pub(crate) fn in_model() -> bool {
        generator::is_generator()
    }

    /// A std value used inside a model would be invisible to loom: fail as
    /// loom does for the opposite mistake, instead of checking less.
    #[track_caller]
    fn std_outside_model() {
        assert!(
            !in_model(),
            "tollgate: a primitive made outside a loom model is used inside one"
        );
    }

    /// `AtomicU64`: loom's inside a model, std's outside one.
    #[derive(Debug)]
    pub enum AtomicU64 {
        Loom(loom::sync::atomic::AtomicU64),
        Std(std::sync::atomic::AtomicU64),
    }

    /// Forwards `&self` methods of the same name and signature to whichever
    /// atomic `self` holds.
    macro_rules! forward {
        ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?;)*) => {$(
            // The shim offers std's whole API, whatever the crate uses today.
            #[allow(dead_code)]
            #[track_caller]
            pub(crate) fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
                match self {
                    Self::Loom(atomic) => atomic.$name($($arg),*),
                    Self::Std(atomic) => {
                        std_outside_model();
                        atomic.$name($($arg),*)
                    }
                }
            }
        )*};
    }

    impl AtomicU64 {
        #[track_caller]
        pub(crate) fn new(value: u64) -> Self {
            if in_model() {
                Self::Loom(loom::sync::atomic::AtomicU64::new(value))
            } else {
                Self::Std(std::sync::atomic::AtomicU64::new(value))
            }
        }

        forward! {
            fn load(&self, order: Ordering) -> u64;
            fn store(&self, value: u64, order: Ordering);
            fn swap(&self, value: u64, order: Ordering) -> u64;
            fn compare_exchange(
                &self,
                current: u64,
                new: u64,
                success: Ordering,
                failure: Ordering
            ) -> Result<u64, u64>;
            fn compare_exchange_weak(
                &self,
                current: u64,
                new: u64,
                success: Ordering,
                failure: Ordering
            ) -> Result<u64, u64>;
            fn fetch_add(&self, value: u64, order: Ordering) -> u64;
            fn fetch_sub(&self, value: u64, order: Ordering) -> u64;
            fn fetch_and(&self, value: u64, order: Ordering) -> u64;
            fn fetch_or(&self, value: u64, order: Ordering) -> u64;
            fn fetch_xor(&self, value: u64, order: Ordering) -> u64;
            fn fetch_max(&self, value: u64, order: Ordering) -> u64;
            fn fetch_min(&self, value: u64, order: Ordering) -> u64;
        }

        #[allow(dead_code)]
        #[track_caller]
        pub(crate) fn fetch_update<F>(
            &self,
            set_order: Ordering,
            fetch_order: Ordering,
            f: F,
        ) -> Result<u64, u64>
        where
            F: FnMut(u64) -> Option<u64>,
        {
            match self {
                Self::Loom(atomic) => atomic.fetch_update(set_order, fetch_order, f),
                Self::Std(atomic) => {
                    std_outside_model();
                    atomic.fetch_update(set_order, fetch_order, f)
                }
            }
        }
    }

    /// `AtomicU128`: inside a model a stand-in, a `loom::sync::Mutex`
    /// around the value, outside one `portable-atomic`'s. loom has no
    /// 128-bit atomic, so the stand-in models the operation's atomicity and
    /// every interleaving of it with the other threads' operations, but
    /// not its memory orderings: a lock orders more than an `AcqRel`
    /// exchange does. The cell that uses it publishes nothing through it
    /// (see "Orderings" in `crate::cell`), so atomicity is what its
    /// exactness rests on, and that is what the models check.
    #[derive(Debug)]
    pub enum AtomicU128 {
        Loom(loom::sync::Mutex<u128>),
        Std(portable_atomic::AtomicU128),
    }

    impl AtomicU128 {
        #[track_caller]
        pub(crate) fn new(value: u128) -> Self {
            if in_model() {
                Self::Loom(loom::sync::Mutex::new(value))
            } else {
                Self::Std(portable_atomic::AtomicU128::new(value))
            }
        }

        /// Runs `model` on the stand-in's value under its lock, or `real`
        /// on the real atomic.
        #[track_caller]
        fn either<R>(
            &self,
            model: impl FnOnce(&mut u128) -> R,
            real: impl FnOnce(&portable_atomic::AtomicU128) -> R,
        ) -> R {
            match self {
                Self::Loom(value) => model(&mut value.lock().unwrap()),
                Self::Std(atomic) => {
                    std_outside_model();
                    real(atomic)
                }
            }
        }

        #[track_caller]
        pub(crate) fn load(&self, order: Ordering) -> u128 {
            self.either(|value| *value, |atomic| atomic.load(order))
        }

        #[track_caller]
        pub(crate) fn store(&self, new: u128, order: Ordering) {
            self.either(|value| *value = new, |atomic| atomic.store(new, order));
        }

        #[track_caller]
        pub(crate) fn compare_exchange(
            &self,
            current: u128,
            new: u128,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u128, u128> {
            self.either(
                |value| exchange(value, current, new),
                |atomic| atomic.compare_exchange(current, new, success, failure),
            )
        }

        /// Inside a model, the strong exchange: the stand-in never fails
        /// spuriously, which the retry loops that use it do not rely on.
        #[track_caller]
        pub(crate) fn compare_exchange_weak(
            &self,
            current: u128,
            new: u128,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u128, u128> {
            self.either(
                |value| exchange(value, current, new),
                |atomic| atomic.compare_exchange_weak(current, new, success, failure),
            )
        }
    }

    /// The stand-in's exchange, under its lock.
    fn exchange(value: &mut u128, current: u128, new: u128) -> Result<u128, u128> {
        if *value == current {
            *value = new;
            Ok(current)
        } else {
            Err(*value)
        }
    }

    impl Default for AtomicU64 {
        fn default() -> Self {
            Self::new(0)
        }
    }

    /// `Arc`: loom's inside a model, std's outside one.
    #[derive(Debug)]
    pub(crate) enum Arc<T> {
        Loom(loom::sync::Arc<T>),
        Std(std::sync::Arc<T>),
    }

    impl<T> Arc<T> {
        #[track_caller]
        pub(crate) fn new(value: T) -> Self {
            if in_model() {
                Self::Loom(loom::sync::Arc::new(value))
            } else {
                Self::Std(std::sync::Arc::new(value))
            }
        }
    }

    impl<T> Arc<T> {
        pub(crate) fn strong_count(this: &Self) -> usize {
            match this {
                Self::Loom(arc) => loom::sync::Arc::strong_count(arc),
                Self::Std(arc) => std::sync::Arc::strong_count(arc),
            }
        }
    }

    impl<T> Clone for Arc<T> {
        #[track_caller]
        fn clone(&self) -> Self {
            match self {
                Self::Loom(arc) => Self::Loom(loom::sync::Arc::clone(arc)),
                Self::Std(arc) => {
                    std_outside_model();
                    Self::Std(std::sync::Arc::clone(arc))
                }
            }
        }
    }

    impl<T> Deref for Arc<T> {
        type Target = T;

        fn deref(&self) -> &T {
            match self {
                Self::Loom(arc) => arc,
                Self::Std(arc) => arc,
            }
        }
    }
}

/// A value that readers load without a lock while a writer may replace it:
/// the quota table of a limiter whose quotas change at run time. Readers
/// [`pin`](Published::pin) once, then [`load`](Pinned::load) as often as
/// they like; a replaced value is freed only once every reader pinned
/// before the replacement has unpinned (crossbeam-epoch's collector, which
/// the store's table uses too).
#[cfg(not(feature = "loom"))]
pub(crate) struct Published<T> {
    value: crossbeam_epoch::Atomic<T>,
}

/// A reader of a [`Published`] value, pinned.
#[cfg(not(feature = "loom"))]
pub(crate) struct Pinned<'a, T> {
    published: &'a Published<T>,
    guard: crossbeam_epoch::Guard,
}

#[cfg(not(feature = "loom"))]
#[allow(unsafe_code)]
impl<T: Send + Sync> Published<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            value: crossbeam_epoch::Atomic::new(value),
        }
    }

    /// Publishes `value` in place of the current one, runs `then` while
    /// the old one is still alive (readers that loaded it, and references
    /// into it that `then` is to replace, stay valid), and then retires the
    /// old one: it is freed once no reader pinned before the retirement is
    /// still pinned. Callers replace one at a time (the limiter's control
    /// lock orders them).
    pub(crate) fn replace(&self, value: T, then: impl FnOnce()) {
        let old = {
            let guard = crossbeam_epoch::pin();
            // AcqRel: the Release half publishes `value`'s contents to the
            // Acquire loads in `Pinned::load`; the Acquire half orders the
            // destruction below after the old value's own publication.
            let old = self
                .value
                .swap(crossbeam_epoch::Owned::new(value), Ordering::AcqRel, &guard);
            // Unreachable from `self` now: this call owns it, and keeps it
            // without a pin while `then` runs (a long pin would hold back
            // every other retirement, the store's old tables included).
            old.as_raw()
        };
        then();
        let guard = crossbeam_epoch::pin();
        // SAFETY: `old` was made by `Owned::new` and is owned by this call
        // alone (swapped out above, never freed since); `then` has replaced
        // every reference into it that outlives this call (the caller's
        // contract), and the collector runs the destructor only after every
        // guard pinned before this point, which any reader still holding
        // such a reference holds, is dropped.
        unsafe { guard.defer_destroy(crossbeam_epoch::Shared::from(old)) };
    }
}

#[cfg(not(feature = "loom"))]
impl<T> Published<T> {
    /// Pins this thread (cheaply, if it is pinned already, as a check is
    /// inside the store's lookup) so that loaded values stay alive.
    #[inline]
    pub(crate) fn pin(&self) -> Pinned<'_, T> {
        Pinned {
            published: self,
            guard: crossbeam_epoch::pin(),
        }
    }
}

#[cfg(not(feature = "loom"))]
#[allow(unsafe_code)]
impl<T> Pinned<'_, T> {
    /// The value published last.
    #[inline]
    pub(crate) fn load(&self) -> &T {
        // Acquire: pairs with the Release half of the swap in
        // `Published::replace` (or the initial store), so the value's
        // contents are visible.
        let shared = self.published.value.load(Ordering::Acquire, &self.guard);
        // SAFETY: never null (`new` stores a value, `replace` swaps in
        // another); freed only through `defer_destroy` after it has been
        // replaced, which waits for this guard, or by `Drop`, which no
        // reader can overlap.
        unsafe { shared.deref() }
    }
}

#[cfg(not(feature = "loom"))]
#[allow(unsafe_code)]
impl<T> Drop for Published<T> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader holds a guard into this value.
        let guard = unsafe { crossbeam_epoch::unprotected() };
        // Relaxed: exclusive access, nothing to synchronise with.
        let value = self.value.load(Ordering::Relaxed, guard);
        // SAFETY: the value was made by `Owned::new` and is reachable from
        // nowhere else; it is dropped once, here.
        drop(unsafe { value.into_owned() });
    }
}

/// Under loom, the published value sits behind a std lock, and replaced
/// values are kept until the `Published` is dropped: the models check the
/// protocol around it (which quota a client's state is read under), not
/// the pointer swap and its reclamation, which are crossbeam-epoch's and
/// are checked by its own tests (and by Miri here). The lock is std's, as
/// for the store's table, so that limiters made outside a model (the
/// doctests) work.
#[cfg(feature = "loom")]
pub(crate) struct Published<T> {
    value: std::sync::Mutex<std::sync::Arc<T>>,
    retired: std::sync::Mutex<Vec<std::sync::Arc<T>>>,
}

/// A reader of a [`Published`] value.
#[cfg(feature = "loom")]
pub(crate) struct Pinned<'a, T> {
    published: &'a Published<T>,
    held: core::cell::RefCell<Vec<std::sync::Arc<T>>>,
}

#[cfg(feature = "loom")]
impl<T: Send + Sync> Published<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            value: std::sync::Mutex::new(std::sync::Arc::new(value)),
            retired: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn replace(&self, value: T, then: impl FnOnce()) {
        let old = core::mem::replace(
            &mut *self.value.lock().unwrap_or_else(|e| e.into_inner()),
            std::sync::Arc::new(value),
        );
        then();
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(old);
    }
}

#[cfg(feature = "loom")]
impl<T> Published<T> {
    pub(crate) fn pin(&self) -> Pinned<'_, T> {
        Pinned {
            published: self,
            held: core::cell::RefCell::new(Vec::new()),
        }
    }
}

#[cfg(feature = "loom")]
impl<T> Pinned<'_, T> {
    pub(crate) fn load(&self) -> &T {
        let value = std::sync::Arc::clone(
            &self
                .published
                .value
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let ptr: *const T = &*value;
        self.held.borrow_mut().push(value);
        // Kept alive by `held` for as long as `self`.
        #[allow(unsafe_code)]
        // SAFETY: `held` owns a strong reference to the value until `self`
        // is dropped, and the returned borrow cannot outlive `self`.
        unsafe {
            &*ptr
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    /// Readers pinned across a replacement keep reading the value they
    /// loaded, whole; a later load sees a value at least as new. (Run
    /// under Miri too: see docs/VERIFICATION.md.)
    #[test]
    fn readers_see_whole_values_while_a_writer_replaces_them() {
        let rounds = if cfg!(miri) { 20 } else { 2_000 };
        let published = Published::new(vec![0u64; 8]);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let mut last = 0;
                    for _ in 0..rounds {
                        let pinned = published.pin();
                        let value = pinned.load();
                        assert!(value.iter().all(|&x| x == value[0]), "torn: {value:?}");
                        assert!(value[0] >= last, "went back");
                        last = value[0];
                        // The same pin may load again, and sees no older value.
                        assert!(pinned.load()[0] >= last);
                    }
                });
            }
            for round in 1..=rounds {
                published.replace(vec![round; 8], || {});
            }
        });
        assert_eq!(published.pin().load()[0], rounds);
        drop(published);
        // Let the collector run the replaced values' destructors (Miri
        // reports any it has not run by the end as leaks).
        for _ in 0..64 {
            crossbeam_epoch::pin().flush();
        }
    }
}
