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
//! The lookup-or-insert protocol is written once, in [`check_or_insert`],
//! over the operations of the [`Index`] and [`Purge`] traits, so that the
//! loom models can run the very same protocol over a loom-aware stand-in for
//! the map.
//!
//! # Eviction
//!
//! An entry leaves the map only once its cell is dead ([`Mortal`]): an
//! evictor first retires the cell (the cell layer's tombstone), then removes
//! the entry on the condition that the cell it holds is dead. A check that
//! finds a dead cell removes the entry itself on the same condition, reads
//! the clock again and inserts a fresh cell, so it never depends on the
//! evictor finishing. Since a dead cell stays dead, "remove if dead" never
//! removes a live entry, whoever runs it and however late.

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use std::sync::{Arc, TryLockError};

use scc::{Guard, HashIndex};

use crate::cell::Mortal;
// Mutex: only the sweep cursor, only ever try_lock-ed on the insert and
// sweep paths; a check never touches it (see `Store::cursor`).
use crate::sync::{AtomicU64, Mutex, Ordering};

/// The hasher every store uses: foldhash's quality variant, seeded afresh
/// for each store from a per-process random seed.
pub(crate) type DefaultHasher = foldhash::quality::RandomState;

/// The two map operations the store's protocol needs to find and create
/// entries.
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

/// What eviction adds to [`Index`]: removing an entry on a condition.
///
/// Contract: the condition is tested on the entry the map holds at the
/// moment of removal, atomically with it.
#[allow(unreachable_pub)] // re-exported by `tollgate::__loom`
pub trait Purge<K, V>: Index<K, V> {
    /// Removes `key`'s entry if `condition` holds for its value; true iff
    /// this call removed it.
    fn remove_if<Q, F>(&self, key: &Q, condition: F) -> bool
    where
        F: FnOnce(&V) -> bool,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized;
}

/// Runs `op` on the live cell for `key` in `index`, creating one first if
/// the key has none or only a dead one, and returns its answer.
///
/// `op(cell, now)` answers `None` if the cell is dead (evicted), having
/// recorded nothing that counts. A known live key costs one lookup and one
/// `op`: this is the check path. Otherwise, in a loop that ends as soon as
/// `op` answers on a live cell:
///
/// 1. a dead entry is removed, if it is still there ([`Purge::remove_if`]
///    on [`Mortal::is_dead`]; any thread may, and the evictor does too);
/// 2. `clock` is read again, so that a fresh cell is judged at an instant
///    no earlier than the eviction that retired the client's last one;
/// 3. `fresh(now)` makes a cell, or answers for the client without one (a
///    full limiter's overflow policy);
/// 4. the cell is inserted; if another thread inserted first, `op` runs on
///    that thread's cell instead.
///
/// Of two threads that create the same key at once, one insert wins and
/// both run `op` on the winner's cell, so no update is ever made to a cell
/// the map does not hold, or will not hold once a racing removal of a dead
/// cell is done.
#[inline]
#[allow(unreachable_pub)] // re-exported by `tollgate::__loom`
pub fn check_or_insert<K, V, Q, R, I>(
    index: &I,
    key: &Q,
    now: u64,
    mut op: impl FnMut(&V, u64) -> Option<R>,
    fresh: impl FnMut(u64) -> Result<V, R>,
    clock: impl FnMut() -> u64,
) -> R
where
    I: Purge<K, V>,
    V: Mortal,
    K: Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    let dead = match index.with(key, |cell| op(cell, now)) {
        Ok(Some(answer)) => return answer,
        Ok(None) => true,
        Err(_) => false,
    };
    check_slow(index, key, dead, op, fresh, clock)
}

#[cold]
#[inline(never)]
fn check_slow<K, V, Q, R, I>(
    index: &I,
    key: &Q,
    mut dead: bool,
    mut op: impl FnMut(&V, u64) -> Option<R>,
    mut fresh: impl FnMut(u64) -> Result<V, R>,
    mut clock: impl FnMut() -> u64,
) -> R
where
    I: Purge<K, V>,
    V: Mortal,
    K: Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    loop {
        if dead {
            let _ = index.remove_if(key, V::is_dead);
        }
        let now = clock();
        let ours = match fresh(now) {
            Ok(cell) => Arc::new(cell),
            Err(answer) => return answer,
        };
        dead = match index.insert(key.to_owned(), Arc::clone(&ours)) {
            Ok(()) => match op(&ours, now) {
                Some(answer) => return answer,
                // Evicted between our insert and our check: go again.
                None => true,
            },
            // Another thread inserted first: use its cell. If that entry is
            // already gone again, or dead, go round.
            Err(_) => match index.with(key, |cell| op(cell, now)) {
                Ok(Some(answer)) => return answer,
                Ok(None) => true,
                Err(_) => false,
            },
        };
    }
}

/// The first protocol, for an index whose cells are never evicted: runs
/// `f` on the cell for `key`, creating it with `make` first if the key has
/// none. [`check_or_insert`] with an `op` that never finds a dead cell; kept
/// for the loom models of first insertion.
#[inline]
#[allow(unreachable_pub)] // re-exported by `tollgate::__loom`
#[cfg_attr(not(feature = "loom"), allow(dead_code))]
pub fn get_or_insert<K, V, Q, R, I>(
    index: &I,
    key: &Q,
    make: impl Fn() -> V,
    f: impl FnOnce(&V) -> R,
) -> R
where
    I: Index<K, V>,
    V: Mortal,
    K: Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    let mut f = Some(f);
    check_or_insert(
        &Permanent(index),
        key,
        0,
        // `op` answers on its first call (no cell here is ever dead), so `f`
        // runs exactly once.
        |cell, _| f.take().map(|f| f(cell)),
        |_| Ok(make()),
        || 0,
    )
}

/// An [`Index`] whose cells are never evicted, as a [`Purge`] that never
/// needs to remove anything.
#[cfg_attr(not(feature = "loom"), allow(dead_code))]
struct Permanent<'a, I>(&'a I);

impl<K, V, I: Index<K, V>> Index<K, V> for Permanent<'_, I> {
    fn with<Q, R, F>(&self, key: &Q, f: F) -> Result<R, F>
    where
        F: FnOnce(&V) -> R,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.with(key, f)
    }

    fn insert(&self, key: K, value: Arc<V>) -> Result<(), Arc<V>> {
        self.0.insert(key, value)
    }
}

impl<K, V, I: Index<K, V>> Purge<K, V> for Permanent<'_, I> {
    fn remove_if<Q, F>(&self, _: &Q, _: F) -> bool
    where
        F: FnOnce(&V) -> bool,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // Reached only if a cell reported itself dead, which none does here.
        false
    }
}

/// A concurrent map from `K` to a shared, never-moving `V`.
pub(crate) struct Store<K, V, S: BuildHasher = DefaultHasher> {
    map: HashIndex<K, Arc<V>, S>,
    /// Entries held plus insertions under way: a slot is reserved before an
    /// insert and released if the insert fails, so this is never below the
    /// number of entries, and a cap on it is a hard cap on them.
    held: AtomicU64,
    /// Where the next sweep slice starts: the key of the first entry it has
    /// not visited, or `None` for the map's beginning. Taken only with
    /// `try_lock`, by sweeps, never by a check.
    cursor: Mutex<Option<K>>,
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

    /// Every call must hold a slot from [`Store::reserve`]: a failed insert
    /// releases it, a successful one hands it to the entry.
    fn insert(&self, key: K, value: Arc<V>) -> Result<(), Arc<V>> {
        self.map.insert_sync(key, value).map_err(|(_, value)| {
            self.release(1);
            value
        })
    }
}

impl<K, V, S> Purge<K, V> for Store<K, V, S>
where
    K: Hash + Eq + Clone + 'static,
    V: 'static,
    S: BuildHasher,
{
    fn remove_if<Q, F>(&self, key: &Q, condition: F) -> bool
    where
        F: FnOnce(&V) -> bool,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let removed = self.map.remove_if_sync(key, |cell| condition(cell));
        if removed {
            self.release(1);
        }
        removed
    }
}

impl<K, V, S> Store<K, V, S>
where
    K: Hash + Eq + Clone + 'static,
    V: Mortal + 'static,
    S: BuildHasher,
{
    pub(crate) fn with_hasher(hasher: S) -> Self {
        Self {
            map: HashIndex::with_hasher(hasher),
            held: AtomicU64::new(0),
            cursor: Mutex::new(None),
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

    /// Reserves room for one more entry if fewer than `max` are held or
    /// being inserted; `None` for no cap. The slot must then go to
    /// [`Index::insert`].
    #[inline]
    pub(crate) fn reserve(&self, max: Option<u64>) -> bool {
        // Relaxed: a lone count that publishes nothing; the map's own
        // synchronisation orders the entries themselves.
        let Some(max) = max else {
            self.held.fetch_add(1, Ordering::Relaxed);
            return true;
        };
        // Look before writing, so that a flood against a full map only reads.
        if self.held.load(Ordering::Relaxed) >= max {
            return false;
        }
        if self.held.fetch_add(1, Ordering::Relaxed) < max {
            true
        } else {
            self.release(1);
            false
        }
    }

    /// Removes `key`'s entry if `condition` holds of its cell, handing the
    /// removed entry's slot to the caller instead of giving it back (see
    /// `keep_one` in [`Store::sweep_slice`]). Returns whether it removed.
    pub(crate) fn take_if<Q>(&self, key: &Q, condition: impl FnOnce(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.remove_if_sync(key, |cell| condition(cell))
    }

    /// The number of clients held (plus any being inserted at this instant).
    pub(crate) fn len(&self) -> usize {
        // Relaxed: as in `reserve`.
        usize::try_from(self.held.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    /// Visits every entry once and removes those for which `evict` is true
    /// (it must retire the cell first) or whose cell is already dead.
    /// Returns how many were removed.
    pub(crate) fn sweep(&self, mut evict: impl FnMut(&V) -> bool) -> u64 {
        let mut removed = 0;
        self.map.retain_sync(|_, cell| {
            let gone = evict(cell) || cell.is_dead();
            removed += u64::from(gone);
            !gone
        });
        self.release(removed);
        removed
    }

    /// Visits up to `budget` entries from where the last slice stopped,
    /// removing those for which `visit` is true (it must retire the cell
    /// first) or whose cell is already dead; wraps to the beginning once it
    /// reaches the end. Returns how many were removed, or `None` if another
    /// thread is sweeping a slice (this one then does nothing).
    ///
    /// With `keep_one`, one removed entry's slot is not given back but
    /// handed to the caller, as [`Store::reserve`] would have: a new client
    /// then takes the room its own eviction made, which no other thread can
    /// take first.
    pub(crate) fn sweep_slice(
        &self,
        budget: u64,
        mut visit: impl FnMut(&K, &Arc<V>) -> bool,
        keep_one: bool,
    ) -> Option<u64> {
        let mut cursor = match self.cursor.try_lock() {
            Ok(cursor) => cursor,
            Err(TryLockError::WouldBlock) => return None,
            // A panic in `visit` left the cursor as it was: still valid.
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        };
        // Resume at the recorded key; if it has left the map, start over.
        let mut entry = cursor
            .take()
            .and_then(|key| self.map.get_sync(&key))
            .or_else(|| self.map.begin_sync());
        let mut removed = 0;
        for _ in 0..budget {
            let Some(here) = entry else { break };
            // `here` holds its bucket's write lock (checks read without it).
            let gone = visit(here.key(), here.get()) || here.get().is_dead();
            entry = if gone {
                removed += 1;
                here.remove_and_sync()
            } else {
                here.next_sync()
            };
        }
        *cursor = entry.map(|here| here.key().clone());
        drop(cursor);
        self.release(removed - u64::from(keep_one && removed > 0));
        Some(removed)
    }
}

impl<K, V, S: BuildHasher> Store<K, V, S> {
    /// Gives back `n` reserved slots: failed inserts, or removed entries.
    fn release(&self, n: u64) {
        if n > 0 {
            // Relaxed: as in `reserve`.
            self.held.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

impl<K, V, S: BuildHasher> fmt::Debug for Store<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Reading a concurrent map's contents in Debug would race with
        // checks; print the shape only.
        f.debug_struct("Store").finish_non_exhaustive()
    }
}
