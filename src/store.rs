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

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use std::sync::Arc;

use scc::{Guard, HashIndex};

/// The hasher every store uses: foldhash's quality variant, seeded afresh
/// for each store from a per-process random seed.
pub(crate) type DefaultHasher = foldhash::quality::RandomState;

/// A concurrent map from `K` to a shared, never-moving `V`.
pub(crate) struct Store<K, V, S: BuildHasher = DefaultHasher> {
    map: HashIndex<K, Arc<V>, S>,
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

    /// Runs `f` on the cell for `key`, if the key has one.
    ///
    /// Allocates nothing and takes no lock.
    #[inline]
    pub(crate) fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let guard = Guard::new();
        self.map.peek(key, &guard).map(|cell| f(cell))
    }

    /// Runs `f` on the cell for `key`, creating it with `make` first if the
    /// key has none.
    ///
    /// A known key costs what [`Store::get`] costs. Of two threads that
    /// create the same key at once, one insert wins and both run `f` on the
    /// winner's cell, so no update is made to a cell the map does not hold.
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
        let guard = Guard::new();
        if let Some(cell) = self.map.peek(key, &guard) {
            return f(cell);
        }
        self.insert_then(key, make, f)
    }

    #[cold]
    fn insert_then<Q, R>(&self, key: &Q, make: impl FnOnce() -> V, f: impl FnOnce(&V) -> R) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut cell = Arc::new(make());
        loop {
            match self.map.insert_sync(key.to_owned(), Arc::clone(&cell)) {
                Ok(()) => return f(&cell),
                Err((_, ours)) => {
                    cell = ours;
                    // Another thread inserted first: use its cell. If that
                    // entry is already gone again, insert ours after all.
                    let guard = Guard::new();
                    if let Some(winner) = self.map.peek(key, &guard) {
                        return f(winner);
                    }
                }
            }
        }
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
