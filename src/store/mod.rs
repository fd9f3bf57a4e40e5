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
//! each word it moves as forwarded, by one exchange from the very word it
//! copied, so a compare-and-swap through a stale reference fails instead
//! of landing in a copy, and no thread reaches the copy before that
//! exchange. `docs/DESIGN.md` ("Keyed
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
//! finds a dead cell removes the entry itself on the same condition, raises
//! its reading to the eviction's and inserts a fresh cell, so it never
//! depends on the evictor finishing. Since a dead cell stays dead, "remove if dead" never
//! removes a live entry, whoever runs it and however late. A cell a table's
//! rebuild has moved reads as forwarded through its old copy, and the check
//! that meets it goes round the same way, to find the live copy in the new
//! table (where "remove if dead" sees it alive, and leaves it without
//! taking any lock). A retired or refused cell is never forwarded: while a
//! rebuild holds its shard it is still the client's entry, dead, and a
//! check that meets it waits for the rebuild to leave it behind (giving
//! its room back) before bringing the client in afresh.

mod keyed;
mod map;

use core::borrow::Borrow;
use core::hash::Hash;

pub(crate) use self::keyed::Store;
pub(crate) use self::map::{Cursor, Visit};
use crate::cell::{Life, Mortal};
use crate::sync::Backoff;

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

    /// What a lookup that missed leaves for an insert of the same key (for
    /// the store: the key's hash and the epoch pin, so that a new client's
    /// request hashes its key and pins once).
    type Miss;

    /// As [`Index::with`], and a miss also hands back what an insert of the
    /// same key can reuse.
    ///
    /// # Errors
    ///
    /// Hands `f` back, not run, and the miss, if the key is absent.
    fn lookup<Q, R, F>(&self, key: &Q, f: F) -> Result<R, (F, Self::Miss)>
    where
        F: FnOnce(&V) -> R,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized;

    /// Inserts `value` for `key` if the key is absent, then runs `f` on the
    /// value inserted (after any lock the insert took is released); `miss`
    /// is a lookup's of this very key, if there was one. If the
    /// insert rebuilds a table to make room, the values `lapsed` (if any)
    /// retires as they would move ([`Lapse`]) are left behind instead,
    /// their entries removed, and the new table is sized for the rest.
    ///
    /// # Errors
    ///
    /// Hands `value` back (`Some`) if the key was found present; `None` if
    /// another insert of the key won a race with this one, and `value` is
    /// kept, read by no one, until the index drops it: the caller looks the
    /// key up again.
    fn insert<R>(
        &self,
        miss: Option<&Self::Miss>,
        key: K,
        value: V,
        lapsed: Option<impl Lapse<V>>,
        f: impl FnOnce(&V) -> R,
    ) -> Result<R, Option<V>>;
}

/// How a table rebuild that an insert sets off forgets lapsed clients (see
/// [`Index::insert`]): clients idle long enough to forget, whose entries
/// it leaves behind instead of moving them.
///
/// Public (but unreachable outside `--features loom`) for the same reason
/// as [`Index`].
#[allow(unreachable_pub)]
pub trait Lapse<V> {
    /// Whether the state a move read from a client's cell, held in `copy`
    /// (which no other thread can reach), has lapsed. The move then retires
    /// the cell from that very state ([`Mortal::retire_sealed`]: the
    /// tombstone a sweep's retirement leaves, by an exchange that fails the
    /// same way if a check changed the state first) without placing the
    /// copy, and leaves the entry behind.
    fn has_lapsed(&mut self, copy: &V) -> bool;

    /// For a cell the move carries as it is (a handle to state that does
    /// not move): retires it if its client has lapsed; true iff it did.
    fn retire_if_lapsed(&mut self, cell: &V) -> bool;

    /// The move retired a cell whose copy [`Lapse::has_lapsed`] judged.
    fn retired(&mut self);
}

/// A rebuild that forgets no one.
#[derive(Debug, Clone, Copy)]
#[allow(unreachable_pub)]
pub struct NoLapse;

impl<V> Lapse<V> for NoLapse {
    fn has_lapsed(&mut self, _: &V) -> bool {
        false
    }

    fn retire_if_lapsed(&mut self, _: &V) -> bool {
        false
    }

    fn retired(&mut self) {}
}

/// What eviction adds to [`Index`]: removing an entry on a condition.
///
/// Contract: the condition is tested on the entry the map holds at the
/// moment of removal, atomically with it, and holds only of dead cells
/// ([`Mortal::is_dead`]). A key absent, or whose client's cell is alive,
/// is answered `false` without waiting for any other thread. Removing a
/// dead entry may have to wait for the map's other writers (`remove_if`),
/// or be left to whoever meets the entry next (`try_remove_if`): the entry
/// then stays in the map, dead, and every lookup reads it as the dead cell
/// it is.
#[allow(unreachable_pub)] // re-exported by `tollgate::__loom`
pub trait Purge<K, V>: Index<K, V> {
    /// Removes `key`'s entry if `condition` holds for its value; true iff
    /// this call removed it. May wait for another writer of the map.
    fn remove_if<Q, F>(&self, key: &Q, condition: F) -> bool
    where
        F: FnOnce(&V) -> bool,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized;

    /// As `remove_if`, but never waits for another thread: `None` if the
    /// entry is dead and removing it now would wait for another writer, in
    /// which case the entry is left in the map, dead; `Some` of
    /// `remove_if`'s answer otherwise.
    fn try_remove_if<Q, F>(&self, key: &Q, condition: F) -> Option<bool>
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
    /// A clock reading taken now: a new client's request is judged at a
    /// reading taken after the look at the map that found it absent (or
    /// dead), so never before the reading of the eviction whose effect that
    /// look saw. A state is forgotten only once idle at its evictor's
    /// reading, where it decides as a fresh one from then on: so the fresh
    /// state that replaces it, judged no earlier, decides as it would have,
    /// and forgetting changes no decision (with a clock whose readings
    /// never go back). Called holding no claim: it may run user code.
    fn now(&self) -> u64;

    /// Whether `reading`, taken before the look at the map that found the
    /// key absent, may judge the new client all the same, sparing a second
    /// reading: only if no client forgotten as idle, whose removal that
    /// look may have seen, was judged idle at a later reading (see
    /// [`Newcomer::now`]). Read after the look. `false` (the default): a
    /// reading is always taken after it.
    fn judges_at(&self, reading: u64) -> bool {
        let _ = reading;
        false
    }

    /// Without a cap, a live cell for `key`'s client, fresh from the
    /// reading `now` on (see `WordAlgorithm::fresh_at`: at an earlier
    /// reading, a lagging one, it is never more permissive than any state
    /// forgotten by then): the client is born with its first decision
    /// already in its word, before any other thread can see it, and needs
    /// no claim. `None` (the default) where room must be taken first: the
    /// cell is then inserted unborn and settled. Runs before the cell is
    /// inserted, holding no lock.
    fn born(&self, key: &K, now: u64) -> Option<V> {
        let _ = (key, now);
        None
    }

    /// For a table rebuild that this newcomer's insert may set off: how it
    /// tells and forgets lapsed clients (been idle long enough to forget),
    /// whose entries it then leaves behind. `None` (the default): the
    /// rebuild forgets no one.
    fn lapsed<'a>(&'a self) -> Option<impl Lapse<V> + 'a>
    where
        V: 'a,
    {
        None::<NoLapse>
    }

    /// An unborn cell for `key`'s client, to be fresh from the reading
    /// `now` on. Runs before the cell is inserted, holding no lock: if it
    /// panics, nothing has been recorded.
    fn unborn(&self, key: &K, now: u64) -> V;

    /// A live cell for `key`'s client, fresh from the reading `now` on,
    /// never stored: for a client the overflow policy admits untracked.
    fn fresh(&self, key: &K, now: u64) -> V;

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

    /// Brings a cell this thread claimed to life, with a state fresh from
    /// the reading `now` on; it keeps the unit of room just taken.
    fn activate(&self, cell: &V, now: u64);

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
/// answers (`op` judging at a reading taken after each look at the map):
///
/// 1. a dead entry (evicted or refused) is removed, if it is still there
///    (any thread may; the removal gives back the room it held);
/// 2. an absent key gets a cell fresh from a reading taken after the last
///    look at the map ([`Newcomer::now`]; or, the first time, the caller's
///    `now` if [`Newcomer::judges_at`] allows it), and is judged at that
///    reading:
///    never before the reading at which any cell it replaces was forgotten
///    as idle, and a lagging reading that later finds the new cell is never
///    judged more permissively on it than on the one forgotten; of two
///    threads inserting at once, one insert wins. Where no room need be taken
///    ([`Newcomer::born`]), the cell is alive and `op` has already run on
///    it when the insert publishes it: the request is answered;
/// 3. otherwise the cell is unborn, and brought to life by whichever thread
///    claims it and takes room for it, or refused by one that found none
///    ([`Mortal::claim`], [`Mortal::refuse`]: exchanges on one word, so the
///    two never both happen, and every racer sees the same outcome);
/// 4. `op` runs on the live cell.
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
    let miss = match index.lookup(key, |cell| op(cell, now)) {
        Ok(Some(answer)) => return answer,
        Ok(None) => None,
        Err((_, miss)) => Some(miss),
    };
    check_slow(index, key, now, miss, op, newcomer)
}

/// What [`act_on_live`]'s step made of the cell it found.
enum Acted<R> {
    /// The action answered.
    Done(R),
    /// The cell is dead (evicted, refused, or forwarded by a rebuild while
    /// this thread looked): remove it if it is still there, and look again.
    Dead,
    /// The cell is not alive yet: a new client, already fresh.
    Unborn,
}

/// Runs `act` on the live cell the map holds for `key`: `act` answers
/// `None` if it found the cell not alive, having changed nothing. A dead
/// cell (retired, or forwarded by a table rebuild) is looked past: removed
/// if it is still the key's entry, and the key looked up again, so an action
/// on a client the map holds is never lost to a concurrent rebuild or
/// eviction. Returns `None` if the key has no cell, only one not alive yet
/// (a new client coming in, which is fresh anyway), or only a dead one
/// that could not be removed without waiting for another writer of the
/// map ([`Purge::try_remove_if`]): the client's state is then forgotten
/// already, and its dead entry is left for whoever meets it next. Never
/// waits for another thread.
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
                // Removed, or not dead on a second look (a copy moved while
                // we looked: the live one is in the new table), or gone:
                // look again. Left in place: it is the client's entry, and
                // dead, so the client has no live state.
                index.try_remove_if(key, V::is_dead)?;
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
///
/// Never waits for another thread: if another writer holds the entry's
/// part of the map (an insert, a sweep, a rebuild), the retired entry is
/// left there, dead, with its room, for whoever meets it next
/// ([`Purge::try_remove_if`]).
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
    // removed it first, or another writer holds its shard now).
    if retired {
        let _ = index.try_remove_if(key, V::is_dead);
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
    before: u64,
    miss: Option<I::Miss>,
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
    // One pin for the whole slow path: the map's own pins inside it are
    // then nested, which costs no locked instruction. A miss holds the
    // lookup's pin already.
    let _pinned = miss.is_none().then(crossbeam_epoch::pin);
    let mut absent = miss.is_some();
    // The lookup's miss serves the first insert only: after that, this
    // thread has looked again.
    let mut first = miss.as_ref();
    // The reading taken before the fast path's look, if it may judge the
    // client that look found absent: no eviction it may have seen judged
    // later.
    let mut before = (absent && newcomer.judges_at(before)).then_some(before);
    loop {
        // Read each round, after the look at the map that sent us here
        // (the fast path's, or the last round's): no earlier than the
        // reading of any eviction whose effect that look saw.
        let now = before.take().unwrap_or_else(|| newcomer.now());
        let settled = if absent && newcomer.turn_away(now) {
            // The room was all taken when we looked, perhaps by a first
            // request of this very client racing us: its entry is visible
            // now if its unit was, so look again, and settle its cell.
            match index.with(key, |cell| settle(cell, now, &mut op, newcomer)) {
                Ok(settled) => settled,
                Err(_) => Settled::TurnedAway(newcomer.refused(now)),
            }
        } else if absent {
            let key = key.to_owned();
            if let Some(born) = newcomer.born(&key, now) {
                // Decided before it is published: no other thread can see
                // this cell until the insert does (a `Release` store that
                // every lookup's `Acquire` pairs with). A fresh cell is
                // alive, so `op` answers.
                if let Some(answer) = op(&born, now) {
                    let lapsed = newcomer.lapsed();
                    if index
                        .insert(first.take(), key, born, lapsed, |_| ())
                        .is_ok()
                    {
                        return answer;
                    }
                    // Another thread inserted first: the decision taken on
                    // this cell, seen by no one, is dropped with it, and the
                    // request is decided on the other thread's cell.
                    absent = false;
                    continue;
                }
            }
            let ours = newcomer.unborn(&key, now);
            let lapsed = newcomer.lapsed();
            let settle = |cell: &V| settle(cell, now, &mut op, newcomer);
            match index.insert(first.take(), key, ours, lapsed, settle) {
                Ok(settled) => settled,
                // Another thread inserted first: settle its cell.
                Err(_) => {
                    absent = false;
                    continue;
                }
            }
        } else {
            match index.with(key, |cell| settle(cell, now, &mut op, newcomer)) {
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
                // Nothing removed: the cell this thread met was forwarded by
                // a table rebuild (or removed by another thread), so look
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
/// thread refuses it. `op` judges at `now`, a reading taken after the
/// look at the map that found `cell`.
fn settle<K, V, R, N>(
    cell: &V,
    now: u64,
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
    let backoff = Backoff::new();
    let mut life = cell.life();
    loop {
        life = match life {
            Life::Live => {
                return match op(cell, now) {
                    Some(answer) => Settled::Answer(answer),
                    // Evicted since: go round through the map.
                    None => Settled::Dead,
                };
            }
            // Forwarded: the live copy is in the table the rebuild links.
            Life::Evicted | Life::Refused | Life::Forwarded => return Settled::Dead,
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
                    // Claimed: nothing but the store's count and the cell's
                    // word until the claim is settled.
                    if newcomer.reserve() {
                        newcomer.activate(cell, now);
                        Life::Live
                    } else {
                        // No room: let others claim while the policy looks
                        // (which may run user code: the clock, a key's
                        // `Hash`).
                        cell.unclaim();
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

    type Miss = I::Miss;

    fn lookup<Q, R, F>(&self, key: &Q, f: F) -> Result<R, (F, I::Miss)>
    where
        F: FnOnce(&V) -> R,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.lookup(key, f)
    }

    fn insert<R>(
        &self,
        miss: Option<&I::Miss>,
        key: K,
        value: V,
        lapsed: Option<impl Lapse<V>>,
        f: impl FnOnce(&V) -> R,
    ) -> Result<R, Option<V>> {
        self.0.insert(miss, key, value, lapsed, f)
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

    fn try_remove_if<Q, F>(&self, _: &Q, _: F) -> Option<bool>
    where
        F: FnOnce(&V) -> bool,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // As `remove_if`.
        Some(false)
    }
}
