//! The loom-aware stand-in for the store's map, shared by the first-request
//! model (`insert.rs`) and the eviction model (`eviction.rs`).
//!
//! The store's map, `scc::HashIndex`, is not loom-aware, so the models run
//! the crate's own protocols (`get_or_insert`, `check_or_insert`) over
//! [`StandIn`], a `loom::sync::Mutex<HashMap<..>>` with the same
//! [`Index`] + [`Purge`] contract: `insert` adds a key only if it is absent
//! and otherwise hands the value back, `with` sees every insert that
//! happened before it, and `remove_if` removes only an entry whose cell
//! meets the condition. The map's own correctness is scc's job and is not
//! what the models check; tollgate's protocols on top of it are. The lock is
//! taken only to look up, insert or remove, and the caller's closure runs
//! after it is released, so checks on a found cell race freely, as they do
//! over scc's lock-free reads.

use std::borrow::Borrow;
use std::collections::hash_map::{Entry, HashMap};
use std::hash::Hash;
use std::sync::Arc as StdArc;

use loom::sync::Mutex;
use tollgate::__loom::{Index, Purge};

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
        // scc's guard does.
        let found = self.map.lock().unwrap().get(key).cloned();
        match found {
            Some(cell) => Ok(f(&cell)),
            None => Err(f),
        }
    }

    fn insert(&self, key: String, value: StdArc<V>) -> Result<(), StdArc<V>> {
        let mut map = self.map.lock().unwrap();
        if self.replace_on_insert {
            map.insert(key, value);
            return Ok(());
        }
        match map.entry(key) {
            Entry::Occupied(_) => Err(value),
            Entry::Vacant(slot) => {
                slot.insert(value);
                Ok(())
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
