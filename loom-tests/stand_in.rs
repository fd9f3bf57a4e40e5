//! The loom-aware stand-in for the store's map, shared by the models that
//! run the store's protocols.
//!
//! The store's table keeps its control words in std's atomics (loom cannot
//! follow its epoch-based reclamation), so the models run the crate's own
//! protocols (`get_or_insert`, `check_or_insert`) over [`StandIn`], with
//! the same [`Index`] + [`Purge`] contract: `insert` adds a key only if it
//! is absent and otherwise hands the value back, `with` sees every insert
//! that happened before it, and `remove_if` removes only an entry whose
//! cell meets the condition.
//!
//! It mirrors the table's shape: a list of tables (the shard's current one,
//! and the one a rebuild links from it), `HashMap`s under one
//! `loom::sync::Mutex` whose every acquisition stands for one step of the
//! table's (one search, or one control-word store), never held while a
//! caller's closure runs; and a
//! writers' lock, held by inserts, removals and a whole rebuild, as the
//! shard's lock is. A lookup takes the steps the table's does (the link
//! loaded before the search of a table; a forwarded cell found there, or a
//! miss, sends it on to the linked table; any other cell, live or dead, is
//! the client's), and
//! [`StandIn::relocate`] moves an entry in the table's steps (link the new
//! table; copy; place the copy; forward the old cell by `forward`; retag
//! the old slot; or, for a cell found dead, give the copy up, report the
//! cell to `on_dead` and retag its slot deleted; publish the new table),
//! each a separate loom step,
//! so a model stalls the move between any two of them. (The table retags
//! a group's old slots with one store once the whole group has moved, so
//! a moved slot may read `FULL`, over its forwarded cell, for longer than one
//! step; other entries' moves in between touch no state of this key's, so
//! the separate retag step models that window too.)
//!
//! The stand-in records whether any thread other than the mover found the
//! writers' lock held, which the models of a known client's check assert
//! never happens: a check never waits for a rebuild. `try_remove_if` takes
//! the writers' lock only if it is free, and otherwise leaves the dead
//! entry in place, as `Map::try_remove_if` does; [`StandIn::hold_writers`]
//! stands for a writer stalled holding that lock.
//!
//! A stand-in made [`StandIn::dead_means_moved`] looks clients up by the
//! broken rule the models must catch: a lookup goes on to the linked table
//! from any dead cell, as if every dead cell were forwarded.

use std::borrow::Borrow;
use std::collections::hash_map::{Entry, HashMap};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc as StdArc;
use std::sync::TryLockError;

use loom::sync::{Mutex, MutexGuard};
use loom::thread::ThreadId;
use tollgate::__loom::{Index, Lapse, Life, Mortal, Purge, Relocation, Seal};

type Table<V> = HashMap<String, StdArc<V>>;

/// The shard's tables: every one it has had, oldest first (none is freed,
/// as the epoch collector frees none a reader can still reach), the last
/// one linked from the one before it while a rebuild moves entries; and
/// which one is current.
#[derive(Debug)]
struct Tables<V> {
    tables: Vec<Table<V>>,
    current: usize,
}

/// A loom-aware map with the `Index` + `Purge` contract; see the module
/// docs.
#[derive(Debug)]
pub(crate) struct StandIn<V> {
    /// One lock over every table: one acquisition is one step of the
    /// table's (one search, one control-word store).
    state: Mutex<Tables<V>>,
    /// The shard's writers' lock.
    writers: Mutex<()>,
    /// Whether a thread found the writers' lock held (see the module docs).
    waited: AtomicBool,
    /// The threads that found it held, each once. A std mutex: loom runs
    /// one model thread at a time, and it is never held across a step.
    waiters: std::sync::Mutex<Vec<ThreadId>>,
    /// Whether `try_remove_if` ever left a dead entry in place.
    left: AtomicBool,
    /// Break the contract: `insert` replaces a present key instead of
    /// handing the value back. Only the broken twins set this.
    replace_on_insert: bool,
    /// Break the lookup: go on to the linked table from any dead cell, not
    /// only a forwarded one. Only the broken twins set this.
    dead_means_moved: bool,
}

impl<V> StandIn<V> {
    /// An empty map; `replace_on_insert` breaks the insert contract.
    pub(crate) fn new(replace_on_insert: bool) -> Self {
        Self {
            state: Mutex::new(Tables {
                tables: vec![HashMap::new()],
                current: 0,
            }),
            writers: Mutex::new(()),
            waited: AtomicBool::new(false),
            waiters: std::sync::Mutex::new(Vec::new()),
            left: AtomicBool::new(false),
            replace_on_insert,
            dead_means_moved: false,
        }
    }

    /// This map, looking clients up by the broken rule: a dead cell sends
    /// a lookup on to the linked table, as a forwarded one does.
    pub(crate) fn dead_means_moved(mut self) -> Self {
        self.dead_means_moved = true;
        self
    }

    /// A map holding `cell` for `key`.
    pub(crate) fn holding(key: &str, cell: V) -> Self {
        let map = Self::new(false);
        map.state.lock().unwrap().tables[0].insert(key.to_owned(), StdArc::new(cell));
        map
    }

    /// A copy of the current table's entries, for a model's final
    /// assertions.
    pub(crate) fn snapshot(&self) -> HashMap<String, StdArc<V>> {
        let state = self.state.lock().unwrap();
        state.tables[state.current].clone()
    }

    /// Whether a thread other than a rebuilder ever found the writers'
    /// lock held.
    pub(crate) fn anyone_waited(&self) -> bool {
        // Relaxed: read after the model's threads have joined.
        self.waited.load(Ordering::Relaxed)
    }

    /// Whether `try_remove_if` ever found the writers' lock held, and left
    /// a dead entry in place.
    pub(crate) fn left_one(&self) -> bool {
        // Relaxed: read after the threads join.
        self.left.load(Ordering::Relaxed)
    }

    /// Whether the thread `id` ever found the writers' lock held.
    pub(crate) fn waited(&self, id: ThreadId) -> bool {
        self.waiters.lock().unwrap().contains(&id)
    }

    /// Takes the writers' lock, recording whether it was held, and by whom.
    fn write(&self) -> MutexGuard<'_, ()> {
        match self.writers.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::WouldBlock) => {
                // Relaxed: read after the threads join.
                self.waited.store(true, Ordering::Relaxed);
                let id = loom::thread::current().id();
                let mut waiters = self.waiters.lock().unwrap();
                if !waiters.contains(&id) {
                    waiters.push(id);
                }
                drop(waiters);
                self.writers.lock().unwrap()
            }
            Err(TryLockError::Poisoned(_)) => panic!("a model thread panicked"),
        }
    }
}

impl<V: Mortal> StandIn<V> {
    /// The cell `key`'s client has now, by the table's lookup
    /// (`Map::locate`): a forwarded cell (any dead one, by the broken rule)
    /// found in a table with a link is followed; any other cell, or one
    /// found with no link seen, is returned (one forwarded since is the
    /// caller's to look past).
    fn locate<Q>(&self, key: &Q) -> Option<StdArc<V>>
    where
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut start = self.state.lock().unwrap().current;
        let mut index = start;
        loop {
            // One search: the link loaded, then the table searched.
            let (found, linked) = {
                let state = self.state.lock().unwrap();
                (
                    state.tables[index].get(key).cloned(),
                    index + 1 < state.tables.len(),
                )
            };
            let moved = |cell: &V| {
                if self.dead_means_moved {
                    cell.is_dead()
                } else {
                    cell.is_forwarded()
                }
            };
            match found {
                Some(cell) if linked && moved(&cell) => index += 1,
                Some(cell) => return Some(cell),
                None if linked => index += 1,
                None => {
                    let current = self.state.lock().unwrap().current;
                    if current == start {
                        return None;
                    }
                    start = current;
                    index = current;
                }
            }
        }
    }
}

impl<V: Mortal> Index<String, V> for StandIn<V> {
    fn with<Q, R, F>(&self, key: &Q, f: F) -> Result<R, F>
    where
        F: FnOnce(&V) -> R,
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The `Arc` keeps the cell alive once the lock is released, as
        // the epoch guard does over the table.
        match self.locate(key) {
            Some(cell) => Ok(f(&cell)),
            None => Err(f),
        }
    }

    /// A miss carries nothing: the stand-in hashes nothing, and its cells
    /// are kept alive by their `Arc`s, not a pin.
    type Miss = ();

    fn lookup<Q, R, F>(&self, key: &Q, f: F) -> Result<R, (F, ())>
    where
        F: FnOnce(&V) -> R,
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.with(key, f).map_err(|f| (f, ()))
    }

    /// The stand-in's insert never rebuilds its table, so `lapsed` never
    /// runs (a rebuild's look for lapsed clients retires a cell as a
    /// sweep's does, holding the writers' lock: the eviction models cover
    /// that exchange).
    fn insert<R>(
        &self,
        _miss: Option<&()>,
        key: String,
        value: V,
        _lapsed: Option<impl Lapse<V>>,
        f: impl FnOnce(&V) -> R,
    ) -> Result<R, Option<V>> {
        let writers = self.write();
        let mut state = self.state.lock().unwrap();
        let current = state.current;
        let map = &mut state.tables[current];
        let value = StdArc::new(value);
        if self.replace_on_insert {
            map.insert(key, StdArc::clone(&value));
        } else {
            match map.entry(key) {
                Entry::Occupied(_) => {
                    drop(state);
                    drop(writers);
                    return Err(Some(StdArc::into_inner(value).expect("not shared yet")));
                }
                Entry::Vacant(slot) => {
                    slot.insert(StdArc::clone(&value));
                }
            }
        }
        drop(state);
        drop(writers);
        Ok(f(&value))
    }
}

impl<V: Mortal> StandIn<V> {
    /// Moves `key`'s entry as the table's rebuild does (`Map::rebuild`,
    /// `Map::move_entry`), holding the writers' lock: `relocate` says what
    /// goes in the new table (the crate's `Mortal::relocate`, or a quota
    /// change's carry), and the crate's `Mortal::forward` marks the old cell
    /// moved. A thread that looked the entry up before keeps the old cell.
    pub(crate) fn relocate(&self, key: &str, relocate: impl FnMut(&V) -> Relocation<V>) {
        self.relocate_with(key, relocate, V::forward);
    }

    /// As [`StandIn::relocate`], with `forward` marking the old cell moved
    /// (the crate's, or a broken twin's).
    pub(crate) fn relocate_with(
        &self,
        key: &str,
        relocate: impl FnMut(&V) -> Relocation<V>,
        forward: impl FnMut(&V, Seal) -> bool,
    ) {
        self.relocate_leaving(key, relocate, forward, |_| {});
    }

    /// As [`StandIn::relocate_with`], with `on_dead` run on a cell the move
    /// finds dead (the rebuild's, which gives back the room it holds),
    /// before its slot is retagged deleted.
    pub(crate) fn relocate_leaving(
        &self,
        key: &str,
        mut relocate: impl FnMut(&V) -> Relocation<V>,
        mut forward: impl FnMut(&V, Seal) -> bool,
        mut on_dead: impl FnMut(&V),
    ) {
        let writers = self.writers.lock().unwrap();
        // Link the new table, and find the entry.
        let (old, cell) = {
            let mut state = self.state.lock().unwrap();
            state.tables.push(HashMap::new());
            let old = state.current;
            (old, state.tables[old].get(key).cloned())
        };
        let new = old + 1;
        // One control-word store (or search) of one table.
        let step = |f: &mut dyn FnMut(&mut Tables<V>)| f(&mut self.state.lock().unwrap());
        if let Some(cell) = cell {
            let mut placed: Option<StdArc<V>> = None;
            loop {
                match relocate(&cell) {
                    Relocation::Dead => {
                        // Any copy placed is given up; the dead entry stays
                        // behind, reported, then marked deleted.
                        if placed.is_some() {
                            step(&mut |state| drop(state.tables[new].remove(key)));
                        }
                        on_dead(&cell);
                        step(&mut |state| drop(state.tables[old].remove(key)));
                        break;
                    }
                    Relocation::Same => {
                        step(&mut |state| {
                            drop(state.tables[new].insert(key.to_owned(), StdArc::clone(&cell)));
                        });
                        step(&mut |state| drop(state.tables[old].remove(key)));
                        break;
                    }
                    Relocation::Moved(copy, seal) => {
                        match &placed {
                            None => {
                                let copy = StdArc::new(copy);
                                step(&mut |state| {
                                    drop(
                                        state.tables[new]
                                            .insert(key.to_owned(), StdArc::clone(&copy)),
                                    );
                                });
                                placed = Some(copy);
                            }
                            Some(placed) => placed.refresh(copy),
                        }
                        if forward(&cell, seal) {
                            // The old slot's tag becomes MOVED.
                            step(&mut |state| drop(state.tables[old].remove(key)));
                            break;
                        }
                    }
                }
            }
        }
        // Publish the new table.
        step(&mut |state| state.current = new);
        drop(writers);
    }
}

impl<V: Mortal> StandIn<V> {
    /// Removes `key`'s entry if `condition` holds for the cell the current
    /// table holds, under the writers' lock, whatever the cell: a sweep's
    /// removal, which tests its own condition there.
    pub(crate) fn remove_locked<Q>(&self, key: &Q, condition: impl FnOnce(&V) -> bool) -> bool
    where
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let writers = self.write();
        let mut state = self.state.lock().unwrap();
        let current = state.current;
        let map = &mut state.tables[current];
        let removed = if map.get(key).is_some_and(|cell| condition(cell)) {
            map.remove(key);
            true
        } else {
            false
        };
        drop(state);
        drop(writers);
        removed
    }
}

impl<V: Mortal> StandIn<V> {
    /// Takes the writers' lock and holds it until the guard is dropped: a
    /// writer (an insert, a sweep, a rebuild) stalled holding it, for the
    /// models of a removal that must not wait for it.
    pub(crate) fn hold_writers(&self) -> MutexGuard<'_, ()> {
        self.writers.lock().unwrap()
    }

    /// As [`StandIn::remove_locked`] if the writers' lock is free now;
    /// `None` at once, the entry left in place, if another thread holds it.
    fn try_remove_locked<Q>(&self, key: &Q, condition: impl FnOnce(&V) -> bool) -> Option<bool>
    where
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let writers = match self.writers.try_lock() {
            Ok(writers) => writers,
            Err(TryLockError::WouldBlock) => {
                // Relaxed: read after the threads join.
                self.left.store(true, Ordering::Relaxed);
                return None;
            }
            Err(TryLockError::Poisoned(_)) => panic!("a model thread panicked"),
        };
        let mut state = self.state.lock().unwrap();
        let current = state.current;
        let map = &mut state.tables[current];
        let removed = map.get(key).is_some_and(|cell| condition(cell));
        if removed {
            map.remove(key);
        }
        drop(state);
        drop(writers);
        Some(removed)
    }
}

impl<V: Mortal> StandIn<V> {
    /// Whether `key`'s client's cell is dead, as `Map::remove_dead` tells
    /// it: a cell found forwarded (since the lookup loaded its table's
    /// link) is looked past, by a second lookup.
    fn dead<Q>(&self, key: &Q) -> bool
    where
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        loop {
            match self.locate(key).map(|cell| cell.life()) {
                Some(Life::Forwarded) => {}
                found => return matches!(found, Some(Life::Evicted | Life::Refused)),
            }
        }
    }
}

impl<V: Mortal> Purge<String, V> for StandIn<V> {
    /// As `Map::remove_if`: only a dead cell is removed, so a key whose
    /// client's cell is alive is answered without the writers' lock.
    fn remove_if<Q, F>(&self, key: &Q, condition: F) -> bool
    where
        F: FnOnce(&V) -> bool,
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if !self.dead(key) {
            return false;
        }
        self.remove_locked(key, condition)
    }

    /// As `Map::try_remove_if`: as `remove_if`, but a dead entry whose
    /// removal would wait for the writers' lock is left in place (`None`).
    fn try_remove_if<Q, F>(&self, key: &Q, condition: F) -> Option<bool>
    where
        F: FnOnce(&V) -> bool,
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if !self.dead(key) {
            return Some(false);
        }
        self.try_remove_locked(key, condition)
    }
}
