//! Layer 4: the keyed store, a concurrent map from client id to that
//! client's cell.
//!
//! The map is [`scc::HashIndex`], whose lookups take no lock and write no
//! shared memory: two threads checking one hot key touch only the cell's own
//! word. `HashIndex` relocates entries when it resizes, and a reader may hold
//! a reference to the old copy, so each cell lives behind an [`Arc`]: the map
//! moves the pointer, never the word, and a compare-and-swap through any copy
//! of the pointer lands in the one live word. `docs/DESIGN.md` ("Keyed store")
//! has the measurements behind this choice.
//!
//! Keys are hashed with a randomly seeded hasher, because clients choose
//! their own ids and could otherwise aim them all at one bucket.
//!
//! The lookup-or-insert protocol is written once, in [`get_or_insert`], over
//! the two operations of the [`Index`] trait, so that the loom models can run
//! the very same protocol over a loom-aware stand-in for the map.

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use std::sync::Arc;

use scc::{Guard, HashIndex};

/// The hasher every store uses: foldhash's quality variant, seeded afresh
/// for each store from a per-process random seed.
pub(crate) type DefaultHasher = foldhash::quality::RandomState;

/// The two map operations the store's protocol needs.
///
/// Public (but unreachable outside `--features loom`, where
/// `tollgate::__loom` re-exports it) so that the loom models can implement it
/// for a loom-aware stand-in.
///
/// Contract: `insert` adds `key` only if it is absent, and otherwise hands
/// the value back; `with` sees every insert that happened before it, and
/// runs `f` while the value is protected, writing nothing shared itself.
#[allow(unreachable_pub)]
pub trait Index<K, V> {
    /// Runs `f` on the value for `key`.
    ///
    /// # Errors
    ///
    /// Hands `f` back, not run, if the key is absent.
    fn with<Q, R, F>(&self, key: &Q, f: F) -> Result<R, F>
    where
        F: FnOnce(&V) -> R,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized;

    /// Inserts `value` for `key` if the key is absent.
    ///
    /// # Errors
    ///
    /// Hands `value` back if the key was present.
    fn insert(&self, key: K, value: Arc<V>) -> Result<(), Arc<V>>;
}

/// Runs `f` on the value for `key` in `index`, creating it with `make` first
/// if the key has none.
///
/// A known key costs one lookup. Of two threads that create the same key at
/// once, one insert wins and both run `f` on the winner's value, so no update
/// is ever made to a value the map does not hold.
#[inline]
#[allow(unreachable_pub)] // re-exported by `tollgate::__loom`
pub fn get_or_insert<K, V, Q, R, I>(
    index: &I,
    key: &Q,
    make: impl FnOnce() -> V,
    f: impl FnOnce(&V) -> R,
) -> R
where
    I: Index<K, V>,
    K: Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    match index.with(key, f) {
        Ok(result) => result,
        Err(f) => insert_then(index, key, make, f),
    }
}

#[cold]
fn insert_then<K, V, Q, R, I>(
    index: &I,
    key: &Q,
    make: impl FnOnce() -> V,
    f: impl FnOnce(&V) -> R,
) -> R
where
    I: Index<K, V>,
    K: Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    let mut ours = Arc::new(make());
    let mut f = f;
    loop {
        match index.insert(key.to_owned(), Arc::clone(&ours)) {
            Ok(()) => return f(&ours),
            Err(back) => {
                ours = back;
                // Another thread inserted first: use its value. If that
                // entry is already gone again, insert ours after all.
                match index.with(key, f) {
                    Ok(result) => return result,
                    Err(back) => f = back,
                }
            }
        }
    }
}

/// A concurrent map from `K` to a shared, never-moving `V`.
pub(crate) struct Store<K, V, S: BuildHasher = DefaultHasher> {
    map: HashIndex<K, Arc<V>, S>,
}

impl<K, V, S> Index<K, V> for Store<K, V, S>
where
    K: Hash + Eq + Clone + 'static,
    V: 'static,
    S: BuildHasher,
{
    #[inline]
    fn with<Q, R, F>(&self, key: &Q, f: F) -> Result<R, F>
    where
        F: FnOnce(&V) -> R,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The guard keeps the entry's memory alive while `f` runs; entering
        // it touches only this thread's own epoch slot.
        let guard = Guard::new();
        match self.map.peek(key, &guard) {
            Some(cell) => Ok(f(cell)),
            None => Err(f),
        }
    }

    fn insert(&self, key: K, value: Arc<V>) -> Result<(), Arc<V>> {
        self.map.insert_sync(key, value).map_err(|(_, value)| value)
    }
}

impl<K, V, S> Store<K, V, S>
where
    K: Hash + Eq + Clone + 'static,
    V: 'static,
    S: BuildHasher,
{
    pub(crate) fn with_hasher(hasher: S) -> Self {
        Self {
            map: HashIndex::with_hasher(hasher),
        }
    }

    /// Runs `f` on the cell for `key`, if the key has one. Allocates nothing
    /// and takes no lock.
    #[inline]
    pub(crate) fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.with(key, f).ok()
    }

    /// Runs `f` on the cell for `key`, creating it first if need be; see
    /// [`get_or_insert`].
    #[inline]
    pub(crate) fn get_or_insert<Q, R>(
        &self,
        key: &Q,
        make: impl FnOnce() -> V,
        f: impl FnOnce(&V) -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        get_or_insert(self, key, make, f)
    }

    /// The number of clients held.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

impl<K, V, S: BuildHasher> fmt::Debug for Store<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Reading a concurrent map's contents in Debug would race with
        // checks; print the shape only.
        f.debug_struct("Store").finish_non_exhaustive()
    }
}
