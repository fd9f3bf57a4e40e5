//! Layer 4: the keyed store, a concurrent map from client id to that
//! client's cell.
//!
//! The map is the store's own table ([`map`]): a client's key and its cell
//! (for the word algorithms, its one state word) sit side by side in one
//! slot, with no allocation per client beyond what the key itself owns.
//! Lookups take no lock and write no shared memory: two threads checking
//! one hot key touch only that slot's line, and never wait for another
//! thread, a table rebuild included. A slot is never refilled while a
//! reader could hold a reference into it, and a table being replaced marks
//! each word it moves as moved, by one exchange from the very word it
//! copied, so a compare-and-swap through a stale reference fails instead
//! of landing in a copy. `docs/DESIGN.md` ("Keyed
//! store") has the measurements behind this design.
//!
//! Keys are hashed with a randomly seeded hasher, because clients choose
//! their own ids and could otherwise aim them all at one probe sequence.
//!
//! The lookup-or-insert protocol is written once, in [`check_or_insert`],
//! over the operations of the [`Index`] and [`Purge`] traits, so that the
//! loom models can run the very same protocol over a loom-aware stand-in
//! for the map.
//!
//! # Eviction
//!
//! An entry leaves the map only once its cell is dead ([`Mortal`]): an
//! evictor first retires the cell (the cell layer's tombstone), then removes
//! the entry on the condition that the cell it holds is dead. A check that
//! finds a dead cell removes the entry itself on the same condition, reads
//! the clock again and inserts a fresh cell, so it never depends on the
//! evictor finishing. Since a dead cell stays dead, "remove if dead" never
//! removes a live entry, whoever runs it and however late. A cell a table's
//! rebuild has moved reads as dead through its old copy, and the check that
//! meets it goes round the same way, to find the live copy in the new table
//! (where "remove if dead" sees it alive, and leaves it without taking any
//! lock).

mod map;

use core::borrow::Borrow;
use core::cell::Cell;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use std::sync::TryLockError;

use self::map::{Cursor, Map};

use crate::cell::{Life, Mortal, Relocation};
// Mutex: only the sweep cursor, only ever try_lock-ed on the insert and
// sweep paths; a check never touches it (see `Store::cursor`).
use crate::sync::{AtomicU64, Backoff, Mutex, Ordering};

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
/// the value back; `with` sees every insert that happened before it; both
/// run `f` while the value is protected, and `with` writes nothing shared
/// itself.
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

    /// Inserts `value` for `key` if the key is absent, then runs `f` on the
    /// value inserted (after any lock the insert took is released).
    ///
    /// # Errors
    ///
    /// Hands `value` back if the key was present.
    fn insert<R>(&self, key: K, value: V, f: impl FnOnce(&V) -> R) -> Result<R, V>;
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

/// What the store's protocol needs from the limiter to bring a client in:
/// clock readings, cells, room, and the overflow policy's answer.
///
/// Public (but unreachable outside `--features loom`, where
/// `tollgate::__loom` re-exports it) so that the loom models can drive the
/// protocol with their own.
#[allow(unreachable_pub)]
pub trait Newcomer<K, V, R> {
    /// A clock reading no earlier than any eviction's (see
    /// `Counters::not_before`).
    fn now(&self) -> u64;

    /// An unborn cell for `key`'s client whose state is never judged
    /// earlier than `floor`. Runs before the cell is inserted, holding no
    /// lock: if it panics, nothing has been recorded.
    fn unborn(&self, key: &K, floor: u64) -> V;

    /// A live fresh cell for `key`'s client, never stored: for a client the
    /// overflow policy admits untracked.
    fn fresh(&self, key: &K, floor: u64) -> V;

    /// Takes one unit of room if the cap allows, without the overflow
    /// policy.
    fn reserve(&self) -> bool;

    /// The cap is reached: takes a unit of room by the overflow policy's
    /// means if it can (forgetting idle clients; sampled eviction), and
    /// says whether it did.
    fn make_room(&self, now: u64) -> bool;

    /// Gives back a unit of room taken by `reserve` or `make_room` and not
    /// used.
    fn release(&self);

    /// Brings a cell this thread claimed to life, with a fresh state never
    /// judged earlier than `floor`; it keeps the unit of room just taken.
    fn activate(&self, cell: &V, floor: u64);

    /// The answer for a client that found no room, once this thread has
    /// refused its cell (or turned it away): `Some` answer (a denial), or
    /// `None` to decide the request on an untracked fresh cell.
    fn refused(&self, now: u64) -> Option<R>;

    /// Whether a new client should be turned away before it is inserted:
    /// the cap is reached, no room could be made, and the policy never
    /// forgets a tracked client for a new one. `true` must come from a look
    /// at the room that sees, with every unit taken before it, the entry
    /// that unit was taken for (an `Acquire` load pairing with the taker's
    /// `Release`), so that the caller's next lookup finds a racing first
    /// request of this very client. By default no client is turned away:
    /// each is inserted unborn, then settled.
    fn turn_away(&self, now: u64) -> bool {
        let _ = now;
        false
    }
}

/// Runs `op` on the live cell for `key` in `index`, bringing one to life
/// first if the key has none, and returns its answer.
///
/// `op(cell, now)` answers `None` if the cell is not alive, having recorded
/// nothing that counts. A known live key costs one lookup and one `op` at
/// the caller's reading `now`: this is the check path. Otherwise, in a loop
/// that ends once `op` answers on a live cell or the overflow policy
/// answers:
///
/// 1. a dead entry (evicted or refused) is removed, if it is still there
///    (any thread may; the removal gives back the room it held);
/// 2. an absent key gets an unborn cell, made at a fresh reading
///    ([`Newcomer::now`]), so no earlier than the eviction of any cell it
///    replaces; of two threads inserting at once, one insert wins;
/// 3. an unborn cell is brought to life by whichever thread claims it and
///    takes room for it, or refused by one that found none
///    ([`Mortal::claim`], [`Mortal::refuse`]: exchanges on one word, so the
///    two never both happen, and every racer sees the same outcome);
/// 4. `op` runs on the live cell at a fresh reading.
///
/// So one client has at most one live cell, every update lands in the cell
/// the map holds, and a client's first requests racing at a full cap share
/// one budget: either the cell came alive and they all run on it, or it was
/// refused and the policy answers each of them.
#[inline]
#[allow(unreachable_pub)] // re-exported by `tollgate::__loom`
pub fn check_or_insert<K, V, Q, R, I, N>(
    index: &I,
    key: &Q,
    now: u64,
    mut op: impl FnMut(&V, u64) -> Option<R>,
    newcomer: &N,
) -> R
where
    I: Purge<K, V>,
    V: Mortal,
    N: Newcomer<K, V, R>,
    K: Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    let absent = match index.with(key, |cell| op(cell, now)) {
        Ok(Some(answer)) => return answer,
        Ok(None) => false,
        Err(_) => true,
    };
    check_slow(index, key, absent, op, newcomer)
}

/// What [`act_on_live`]'s step made of the cell it found.
enum Acted<R> {
    /// The action answered.
    Done(R),
    /// The cell is dead (evicted, refused, or moved by a rebuild while this
    /// thread looked): remove it if it is still there, and look again.
    Dead,
    /// The cell is not alive yet: a new client, already fresh.
    Unborn,
}

/// Runs `act` on the live cell the map holds for `key`: `act` answers
/// `None` if it found the cell not alive, having changed nothing. A dead
/// cell (retired, or moved by a table rebuild) is looked past:
/// removed if it is still the key's entry, and the key looked up again, so
/// an action on a client the map holds is never lost to a concurrent
/// rebuild or eviction. Returns `None` if the key has no cell, or only one
/// not alive yet (a new client coming in, which is fresh anyway).
#[allow(unreachable_pub)] // re-exported by `tollgate::__loom`
pub fn act_on_live<K, V, Q, R, I>(
    index: &I,
    key: &Q,
    mut act: impl FnMut(&V) -> Option<R>,
) -> Option<R>
where
    I: Purge<K, V>,
    V: Mortal,
    K: Borrow<Q>,
    Q: Hash + Eq + ?Sized,
{
    loop {
        let acted = index.with(key, |cell| match act(cell) {
            Some(answer) => Acted::Done(answer),
            None if cell.is_dead() => Acted::Dead,
            None => Acted::Unborn,
        });
        match acted {
            Ok(Acted::Done(answer)) => return Some(answer),
            Ok(Acted::Unborn) | Err(_) => return None,
            Ok(Acted::Dead) => {
                let _ = index.remove_if(key, V::is_dead);
            }
        }
    }
}

/// Forgets `key`'s client: retires its live cell by `retire` (an
/// unconditional exchange to the tombstone; false if the cell was no longer
/// alive), then removes the entry if it is dead, which gives its room back
/// as it leaves. A cell not yet alive is left to come in: the forgetting is
/// ordered before its birth. True iff this call retired a live cell. The
/// caller records the reading first, as an eviction's, so that the client's
/// next state is never judged earlier.
#[allow(unreachable_pub)] // re-exported by `tollgate::__loom`
pub fn forget_client<K, V, Q, I>(index: &I, key: &Q, retire: impl Fn(&V) -> bool) -> bool
where
    I: Purge<K, V>,
    V: Mortal,
    K: Borrow<Q>,
    Q: Hash + Eq + ?Sized,
{
    let retired = act_on_live(index, key, |cell| {
        (cell.life() == Life::Live && retire(cell)).then_some(())
    })
    .is_some();
    // The entry this call retired goes (unless a rebuild or a check has
    // removed it first).
    if retired {
        let _ = index.remove_if(key, V::is_dead);
    }
    retired
}

/// Puts `key`'s client back to a fresh state: `reset` exchanges a live
/// cell's state for a fresh one in place (`Some(was_live)`), or answers
/// `None` for a state no single exchange can reset, which `forget` then
/// forgets instead. True iff the client had a live state.
#[allow(unreachable_pub)] // re-exported by `tollgate::__loom`
pub fn reset_client<K, V, Q, I>(
    index: &I,
    key: &Q,
    reset: impl Fn(&V) -> Option<bool>,
    forget: impl FnOnce() -> bool,
) -> bool
where
    I: Purge<K, V>,
    V: Mortal,
    K: Borrow<Q>,
    Q: Hash + Eq + ?Sized,
{
    let reset = act_on_live(index, key, |cell| match reset(cell) {
        Some(true) => Some(true),
        // Not alive: look past it.
        Some(false) => None,
        // Many words: forget it instead.
        None => Some(false),
    });
    match reset {
        Some(true) => true,
        Some(false) => forget(),
        None => false,
    }
}

/// What [`settle`] made of a cell.
enum Settled<R> {
    /// `op` answered on the live cell.
    Answer(R),
    /// The cell is dead: remove it and go round.
    Dead,
    /// This thread refused the cell: remove it, then answer with this.
    Refused(Option<R>),
    /// The client was turned away before it was inserted: answer with this.
    TurnedAway(Option<R>),
}

#[cold]
#[inline(never)]
fn check_slow<K, V, Q, R, I, N>(
    index: &I,
    key: &Q,
    mut absent: bool,
    mut op: impl FnMut(&V, u64) -> Option<R>,
    newcomer: &N,
) -> R
where
    I: Purge<K, V>,
    V: Mortal,
    N: Newcomer<K, V, R>,
    K: Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    loop {
        // One reading per round, taken after the look at the map that sent
        // us here (the fast path's, or the last round's), so no earlier than
        // any eviction that look saw.
        let now = newcomer.now();
        let settled = if absent && newcomer.turn_away(now) {
            // The room was all taken when we looked, perhaps by a first
            // request of this very client racing us: its entry is visible
            // now if its unit was, so look again, and settle its cell.
            match index.with(key, |cell| settle(cell, None, &mut op, newcomer)) {
                Ok(settled) => settled,
                Err(_) => Settled::TurnedAway(newcomer.refused(now)),
            }
        } else if absent {
            let key = key.to_owned();
            let ours = newcomer.unborn(&key, now);
            match index.insert(key, ours, |cell| settle(cell, Some(now), &mut op, newcomer)) {
                Ok(settled) => settled,
                // Another thread inserted first: settle its cell.
                Err(_) => {
                    absent = false;
                    continue;
                }
            }
        } else {
            match index.with(key, |cell| settle(cell, None, &mut op, newcomer)) {
                Ok(settled) => settled,
                Err(_) => {
                    absent = true;
                    continue;
                }
            }
        };
        // After a removal, the key is most likely absent.
        absent = true;
        // A refused cell is in the map, to be removed; a client turned
        // away never was.
        let refused = matches!(settled, Settled::Refused(_));
        match settled {
            Settled::Answer(answer) => return answer,
            Settled::Dead => {
                // Nothing removed: the cell this thread met was moved by a
                // table rebuild (or removed by another thread), so look
                // again rather than insert, which would wait for the
                // rebuild's lock.
                absent = index.remove_if(key, V::is_dead);
            }
            Settled::Refused(answer) | Settled::TurnedAway(answer) => {
                if refused {
                    let _ = index.remove_if(key, V::is_dead);
                }
                if let Some(answer) = answer {
                    return answer;
                }
                // Untracked: decide on a fresh cell that is never stored. A
                // fresh cell is alive, so `op` answers. Pinned, as every
                // access to a cell in the map is: a cell may name state the
                // epoch collector keeps alive for pinned threads (a tiered
                // client's quota).
                let _pinned = crossbeam_epoch::pin();
                if let Some(answer) = op(&newcomer.fresh(&key.to_owned(), now), now) {
                    return answer;
                }
            }
        }
    }
}

/// Drives `cell` until `op` answers on it alive, or it is dead, or this
/// thread refuses it.
///
/// `ours` is the reading the caller made this cell at, if it inserted it:
/// a floor for its fresh state and the reading to judge by. A cell found in
/// the map gets a reading taken after it was found, since whoever inserted
/// it may have seen an eviction later than the caller's last reading.
fn settle<K, V, R, N>(
    cell: &V,
    ours: Option<u64>,
    op: &mut impl FnMut(&V, u64) -> Option<R>,
    newcomer: &N,
) -> Settled<R>
where
    V: Mortal,
    N: Newcomer<K, V, R>,
{
    // Each step acts on the life the previous one observed; a failed
    // exchange reports the life it found, which is never older than what
    // this thread has seen, so no step re-reads a stale birth word.
    let now = || ours.unwrap_or_else(|| newcomer.now());
    let backoff = Backoff::new();
    let mut life = cell.life();
    loop {
        life = match life {
            Life::Live => {
                return match op(cell, now()) {
                    Some(answer) => Settled::Answer(answer),
                    // Evicted since: go round through the map.
                    None => Settled::Dead,
                };
            }
            Life::Evicted | Life::Refused => return Settled::Dead,
            Life::Claimed => {
                // Its claimer is between two of its own steps (taking room
                // and writing the fresh state): wait those few instructions,
                // yielding the processor if the claimer is not running.
                backoff.snooze();
                cell.life()
            }
            Life::Unborn => match cell.claim() {
                Err(found) => found,
                Ok(()) => {
                    if newcomer.reserve() {
                        newcomer.activate(cell, now());
                        Life::Live
                    } else {
                        // No room: let others claim while the policy looks.
                        cell.unclaim();
                        let now = now();
                        if newcomer.make_room(now) {
                            match cell.claim() {
                                Ok(()) => {
                                    newcomer.activate(cell, now);
                                    Life::Live
                                }
                                Err(found) => {
                                    // Claimed, born or refused meanwhile.
                                    newcomer.release();
                                    found
                                }
                            }
                        } else {
                            match cell.refuse() {
                                Ok(()) => return Settled::Refused(newcomer.refused(now)),
                                Err(found) => found,
                            }
                        }
                    }
                }
            },
        };
    }
}

/// The first protocol, for an index whose cells are never evicted and a
/// limiter with no cap: runs `f` on the cell for `key`, creating it with
/// `make` (a live cell) first if the key has none. [`check_or_insert`] with
/// an `op` that never finds a dead cell; kept for the loom models of first
/// insertion.
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
        // `op` answers on its first call on a live cell, so `f` runs exactly
        // once.
        |cell, _| f.take().map(|f| f(cell)),
        &Born(make),
    )
}

/// The newcomer of [`get_or_insert`]: cells are made alive, and room is
/// never short.
#[cfg_attr(not(feature = "loom"), allow(dead_code))]
struct Born<F>(F);

impl<K, V, R, F: Fn() -> V> Newcomer<K, V, R> for Born<F> {
    fn now(&self) -> u64 {
        0
    }
    fn unborn(&self, _: &K, _: u64) -> V {
        (self.0)()
    }
    fn fresh(&self, _: &K, _: u64) -> V {
        (self.0)()
    }
    fn reserve(&self) -> bool {
        true
    }
    fn make_room(&self, _: u64) -> bool {
        true
    }
    fn release(&self) {}
    fn activate(&self, _: &V, _: u64) {
        // Reached only for an unborn cell, which `make` never makes.
    }
    fn refused(&self, _: u64) -> Option<R> {
        None
    }
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

    fn insert<R>(&self, key: K, value: V, f: impl FnOnce(&V) -> R) -> Result<R, V> {
        self.0.insert(key, value, f)
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

/// The keyed store: the map, and the count of room its entries hold.
pub(crate) struct Store<K, V, S: BuildHasher = DefaultHasher> {
    map: Map<K, V, S>,
    /// Units of room taken: one per live or evicted entry (an evicted one
    /// gives its unit back just before it leaves the map, under the map's
    /// lock for its shard), plus units taken for a cell about to come
    /// alive. Unborn and refused entries hold none. A cap on this count is a
    /// hard cap on the clients tracked. Kept only under a cap: without one,
    /// a shared count written by every new client would be pure cost, and
    /// `len()` sums the table's shards instead.
    held: AtomicU64,
    /// Whether the limiter has a cap, so that `held` is kept.
    capped: bool,
    /// Where the next sweep slice starts. Taken only with `try_lock`, by
    /// sweeps, never by a check.
    cursor: Mutex<Cursor>,
}

impl<K, V, S> Index<K, V> for Store<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Mortal + Send + Sync + 'static,
    S: BuildHasher,
{
    #[inline]
    fn with<Q, R, F>(&self, key: &Q, f: F) -> Result<R, F>
    where
        F: FnOnce(&V) -> R,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(key, f)
    }

    /// A rebuild on the way gives back the room of the dead entries it
    /// leaves behind (see [`Store::leaving`]).
    fn insert<R>(&self, key: K, value: V, f: impl FnOnce(&V) -> R) -> Result<R, V> {
        self.map.insert(
            key,
            value,
            |cell| {
                self.leaving(cell, false);
            },
            f,
        )
    }
}

impl<K, V, S> Purge<K, V> for Store<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Mortal + Send + Sync + 'static,
    S: BuildHasher,
{
    /// Gives back the room the removed cell held (see [`Store::leaving`]).
    fn remove_if<Q, F>(&self, key: &Q, condition: F) -> bool
    where
        F: FnOnce(&V) -> bool,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.remove_if(key, |cell| {
            let gone = condition(cell);
            if gone {
                self.leaving(cell, false);
            }
            gone
        })
    }
}

/// What a sweep slice did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Swept {
    /// Whether the caller was handed a removed entry's unit of room.
    pub(crate) kept: bool,
}

impl<K, V, S> Store<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Mortal + Send + Sync + 'static,
    S: BuildHasher,
{
    /// An empty store; `capped` if the limiter caps its clients (see
    /// `held`).
    pub(crate) fn with_hasher(hasher: S, capped: bool) -> Self {
        Self {
            map: Map::with_hasher(hasher),
            held: AtomicU64::new(0),
            capped,
            cursor: Mutex::new(Cursor::default()),
        }
    }

    /// Puts `relocate`'s answer in place of every entry, shard by shard
    /// (see [`Map::rebuild_all`]); an entry found dead on the way leaves
    /// and gives back its room.
    pub(crate) fn rebuild_all(&self, relocate: impl FnMut(&V) -> Relocation<V>) {
        self.map.rebuild_all(relocate, |cell| {
            self.leaving(cell, false);
        });
    }

    /// `key`'s hash under the store's randomly seeded hasher: unpredictable
    /// to clients, different for every store.
    #[cfg(feature = "tokio")]
    pub(crate) fn hash_of<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.map.hash(key)
    }

    /// Runs `f` on the cell for `key`, if the key has one. Allocates nothing,
    /// takes no lock and never waits. A cell that reads as dead is looked
    /// past once: if a table rebuild moved it just after the lookup found
    /// it, the second lookup finds the live copy; a cell still dead the
    /// second time is the client's, and `f` runs on it.
    #[inline]
    pub(crate) fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut f = Some(f);
        let mut dead: Option<*const V> = None;
        loop {
            let found = self.with(key, |cell| {
                let at = core::ptr::from_ref(cell);
                if cell.is_dead() && dead != Some(at) {
                    return Err(at);
                }
                Ok((f.take().expect("runs once"))(cell))
            });
            match found {
                Ok(Ok(answer)) => return Some(answer),
                Ok(Err(at)) => dead = Some(at),
                Err(_) => return None,
            }
        }
    }

    /// The entry holding `cell` is about to leave the map, and the caller
    /// holds its shard's lock: gives back the unit of room the cell holds,
    /// if any, or with `keep` hands it to the caller. Called before the
    /// removal, so a thread that then finds the entry gone (having taken
    /// that lock after the removal) also finds the room free. True iff the
    /// caller now holds the unit.
    fn leaving(&self, cell: &V, keep: bool) -> bool {
        if !cell.holds_room() {
            return false;
        }
        if !keep {
            self.release(1);
        }
        keep
    }

    /// Takes a unit of room if fewer than `max` are taken; `None` for no
    /// cap. The unit must then go to a cell coming alive, or back through
    /// [`Store::release`].
    #[inline]
    pub(crate) fn reserve(&self, max: Option<u64>) -> bool {
        // No cap, no count (see `held`).
        let Some(max) = max else {
            return true;
        };
        // Look before writing, so that a flood against a full map only reads.
        // Relaxed: a hint; the exchange below decides.
        if self.held.load(Ordering::Relaxed) >= max {
            return false;
        }
        // Release: publishes the entry this unit is taken for (inserted
        // before it) to whoever sees the unit taken (`is_full`).
        if self.held.fetch_add(1, Ordering::Release) < max {
            true
        } else {
            self.release(1);
            false
        }
    }

    /// Whether no unit of room is left under `max`.
    pub(crate) fn is_full(&self, max: Option<u64>) -> bool {
        // Acquire: pairs with the Release of every unit taken in `reserve`
        // (and, through the release sequence, with later read-modify-writes
        // of the count), so a caller that sees a unit taken also sees the
        // entry it was taken for: a first request turned away at a full cap
        // looks the client up again after this, and finds a racing first
        // request's entry (`Newcomer::turn_away`).
        max.is_some_and(|max| self.held.load(Ordering::Acquire) >= max)
    }

    /// Removes `key`'s entry if `condition` holds of its cell, handing the
    /// unit of room it held to the caller instead of giving it back (see
    /// `keep_one` in [`Store::sweep_slice`]). True iff the caller now holds
    /// a unit.
    pub(crate) fn take_if<Q>(&self, key: &Q, condition: impl FnOnce(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut room = false;
        let removed = self.map.remove_if(key, |cell| {
            let gone = condition(cell);
            room = gone && self.leaving(cell, true);
            gone
        });
        removed && room
    }

    /// The number of clients tracked (plus any coming alive at this
    /// instant).
    pub(crate) fn len(&self) -> usize {
        let held = if self.capped {
            // Relaxed: a count that publishes nothing.
            self.held.load(Ordering::Relaxed)
        } else {
            self.map.len()
        };
        usize::try_from(held).unwrap_or(usize::MAX)
    }

    /// Visits every entry once and removes those for which `evict` is true
    /// (it must retire the cell first) or whose cell is already dead, giving
    /// back the room of each shard's removed entries before that shard's
    /// lock is released, then shrinks tables left mostly empty. Returns how
    /// many were removed.
    pub(crate) fn sweep(&self, mut evict: impl FnMut(&V) -> bool) -> u64 {
        // Units to give back for the shard being swept: one shared
        // `fetch_sub` per shard instead of one per entry. Still before the
        // shard's lock is released, so a thread that finds one of these
        // entries gone (having taken that lock after the removal) also
        // finds its room free, as `leaving` promises.
        let freed = Cell::new(0);
        let leaving = |cell: &V| {
            if cell.holds_room() {
                freed.set(freed.get() + 1);
            }
        };
        self.map.retain(
            |_, cell| {
                let gone = evict(cell) || cell.is_dead();
                if gone {
                    leaving(cell);
                }
                gone
            },
            leaving,
            || self.release(freed.replace(0)),
        )
    }

    /// Visits up to `budget` entries from where the last slice stopped,
    /// removing those for which `visit` is true (it must retire the cell
    /// first) or whose cell is already dead; the next slice starts at the
    /// beginning once one reaches the end. Returns what it did, or `None` if
    /// another thread is sweeping a slice (this one then does nothing).
    ///
    /// With `keep_one`, the first removed entry's unit of room is not given
    /// back but handed to the caller, as [`Store::reserve`] would have: a
    /// new client then takes the room its own eviction made, which no other
    /// thread can take first.
    pub(crate) fn sweep_slice(
        &self,
        budget: u64,
        mut visit: impl FnMut(&K, &V) -> bool,
        keep_one: bool,
    ) -> Option<Swept> {
        let mut cursor = match self.cursor.try_lock() {
            Ok(cursor) => cursor,
            Err(TryLockError::WouldBlock) => return None,
            // A panic in `visit` left the cursor at some position: still
            // valid.
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        };
        let mut kept = false;
        self.map.sweep_slice(&mut cursor, budget, |key, cell| {
            let gone = visit(key, cell) || cell.is_dead();
            if gone && self.leaving(cell, keep_one && !kept) {
                kept = true;
            }
            gone
        });
        drop(cursor);
        Some(Swept { kept })
    }
}

impl<K, V, S: BuildHasher> Store<K, V, S> {
    /// Gives back `n` units of room.
    pub(crate) fn release(&self, n: u64) {
        if self.capped && n > 0 {
            // Relaxed: a count that publishes nothing (the Release half of
            // `reserve` is for units taken, not given back).
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
