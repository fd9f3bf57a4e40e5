//! The loom-aware stand-in for the store's map, shared by the first-request
//! model (`insert.rs`) and the eviction model (`eviction.rs`).
//!
//! The store's table keeps its control words in std's atomics (loom cannot
//! follow its epoch-based reclamation), so the models run the crate's own
//! protocols (`get_or_insert`, `check_or_insert`) over [`StandIn`], a
//! `loom::sync::Mutex<HashMap<..>>` with the same [`Index`] + [`Purge`]
//! contract: `insert` adds a key only if it is absent and otherwise hands
//! the value back, `with` sees every insert that happened before it, and
//! `remove_if` removes only an entry whose cell meets the condition. The
//! lock is taken only to look up, insert, remove or relocate, and the
//! caller's closure runs after it is released, so checks on a found cell
//! race freely, as they do over the table's lock-free reads. Like the
//! table, [`StandIn::relocate`] moves an entry to a new cell the way a
//! rebuild does, while checks may hold the old one.

use std::borrow::Borrow;
use std::collections::hash_map::{Entry, HashMap};
use std::hash::Hash;
use std::sync::Arc as StdArc;

use loom::sync::Mutex;
use tollgate::__loom::{Index, Mortal, Purge, Relocation};

/// A loom-aware map with the `Index` + `Purge` contract; see the module
/// docs.
#[derive(Debug)]
pub(crate) struct StandIn<V> {
    map: Mutex<HashMap<String, StdArc<V>>>,
    /// Break the contract: `insert` replaces a present key instead of
    /// handing the value back. Only the broken twins set this.
    replace_on_insert: bool,
}

impl<V> StandIn<V> {
    /// An empty map; `replace_on_insert` breaks the insert contract.
    pub(crate) fn new(replace_on_insert: bool) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            replace_on_insert,
        }
    }

    /// A map holding `cell` for `key`.
    pub(crate) fn holding(key: &str, cell: V) -> Self {
        let map = Self::new(false);
        map.map
            .lock()
            .unwrap()
            .insert(key.to_owned(), StdArc::new(cell));
        map
    }

    /// A copy of the entries, for a model's final assertions.
    pub(crate) fn snapshot(&self) -> HashMap<String, StdArc<V>> {
        self.map.lock().unwrap().clone()
    }
}

impl<V> Index<String, V> for StandIn<V> {
    fn with<Q, R, F>(&self, key: &Q, f: F) -> Result<R, F>
    where
        F: FnOnce(&V) -> R,
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The `Arc` keeps the cell alive once the lock is released, as
        // the epoch guard does over the table.
        let found = self.map.lock().unwrap().get(key).cloned();
        match found {
            Some(cell) => Ok(f(&cell)),
            None => Err(f),
        }
    }

    fn insert<R>(&self, key: String, value: V, f: impl FnOnce(&V) -> R) -> Result<R, V> {
        let mut map = self.map.lock().unwrap();
        let value = StdArc::new(value);
        if self.replace_on_insert {
            map.insert(key, StdArc::clone(&value));
        } else {
            match map.entry(key) {
                Entry::Occupied(_) => {
                    drop(map);
                    return Err(StdArc::into_inner(value).expect("not shared yet"));
                }
                Entry::Vacant(slot) => {
                    slot.insert(StdArc::clone(&value));
                }
            }
        }
        drop(map);
        Ok(f(&value))
    }
}

impl<V: Mortal> StandIn<V> {
    /// Moves `key`'s entry as the table's rebuild does, holding the lock:
    /// `relocate` says what goes in the new entry (the crate's
    /// `Mortal::relocate`, or a broken twin's). A thread that looked the
    /// entry up before keeps the old cell.
    pub(crate) fn relocate(&self, key: &str, relocate: impl FnOnce(&V) -> Relocation<V>) {
        let mut map = self.map.lock().unwrap();
        let Some(cell) = map.get(key).cloned() else {
            return;
        };
        match relocate(&cell) {
            Relocation::Dead => {
                map.remove(key);
            }
            // A handle: the new entry shares the state the old one names.
            Relocation::Same => {}
            Relocation::Moved(moved) => {
                map.insert(key.to_owned(), StdArc::new(moved));
            }
        }
    }
}

impl<V> Purge<String, V> for StandIn<V> {
    fn remove_if<Q, F>(&self, key: &Q, condition: F) -> bool
    where
        F: FnOnce(&V) -> bool,
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut map = self.map.lock().unwrap();
        if map.get(key).is_some_and(|cell| condition(cell)) {
            map.remove(key);
            true
        } else {
            false
        }
    }
}
