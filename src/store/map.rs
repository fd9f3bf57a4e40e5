//! The store's own hash table: each client's key and state cell inline in
//! one slot, lookups that take no lock and never wait, and entries that
//! never move while a reader can see them.
//!
//! # Shape
//!
//! The map is [`SHARDS`] shards, picked by the hash's top bits. A shard is a
//! writers' lock and a pointer to its current [`Table`] (`table.rs`): an
//! array of control bytes, one per slot, read eight at a time as a word,
//! an array of slots, each holding a key and its value side by side, and
//! a word counting the slots used and live. A control byte is `EMPTY`,
//! `FULL` with seven bits of the key's hash (an entry), `DELETED`,
//! `MOVED`, or one of an insert's steps: `CLAIMED`, `PENDING` with six
//! bits of the hash, `GIVEN_UP`; or `SEALED`, an empty slot a rebuild
//! closed. Probing is linear, by groups of eight slots, from a
//! home group picked by the hash's low bits (multiply-shift, so a table may
//! have any number of groups, and grow by less than double). A shard's lock
//! is in `shard.rs`; rebuilds in `migrate.rs`;
//! the walks that visit many entries under each shard's lock (a full
//! sweep, sweep slices and samples, a quota change's rebuild of every
//! shard) in `walk.rs`.
//!
//! # Readers
//!
//! A lookup pins the epoch ([`crossbeam_epoch`]: a store to this thread's
//! own slot), loads the shard's table, and probes: for each group, one
//! `Acquire` load of its control word, a key comparison per slot whose tag
//! matches, and a stop at the first group holding an `EMPTY` byte. It
//! takes no lock, writes nothing shared, and never waits for another
//! thread: a rebuild in progress costs it at most a second probe, in the
//! table the entries are moving to. The value it finds stays valid until
//! it unpins, whatever writers do meanwhile.
//!
//! # Writers
//!
//! Removals, sweeps and rebuilds of a shard hold its lock. An insert takes
//! no lock ([`Table::insert`], the protocol loom's model 21 checks in
//! `loom-tests/claim.rs`): it counts its slot, claims the first `EMPTY`
//! slot of its probe sequence by a compare-and-swap of the group's control
//! word, writes key and value, and publishes the slot by another, `FULL`
//! at once if no other slot of the key can be in its probe, else
//! `PENDING`, decided by a scan that leaves one slot of the key its entry:
//! so two first requests of one key make one entry, and a first request
//! never waits for another, nor for a removal or a sweep's walk. It takes
//! the lock only to make a rebuild (its table has no room, or the shard no
//! table) or to wait for one (its table has a new one linked, or a rebuild
//! sealed its claim). Every write of a control word an insert may
//! be changing too is a read-modify-write, which loses no other lane's
//! change and continues the release sequence of the write that published
//! a slot (which a lookup's `Acquire` load pairs with). A slot
//! is written once, by the one thread that claimed it (or, in a table no
//! other thread writes yet, a rebuild's), before its tag is published
//! with a `Release` write. A slot is never
//! refilled: removal turns its tag to `DELETED` and leaves key and value in
//! place, so a reader that found the entry keeps a valid reference to the
//! value it found, a dead cell, and can never be handed another client's
//! state through it. Room taken by deleted slots comes back only when the
//! shard is *rebuilt* into a new table: a removal (or a walk's) that
//! leaves the table with more deleted slots than live ones, and more than
//! 28, rebuilds it at once ([`Map::shed`]), so that a shard holds at most
//! twice its live entries plus 28 once its writer lets go, and the rebuild
//! is paid for by the removals since the last one, more than it moves.
//! A removal takes the lock only for
//! an entry whose cell is dead, which no check needs; and a removal that
//! must not wait ([`Map::try_remove_if`], for a client's removal or reset)
//! takes it only if no other writer holds it, and otherwise leaves the
//! dead entry where it is, for the next writer that meets it: a rebuild
//! leaves it behind, a sweep removes it, an insert of its key removes it
//! first. Until then the entry counts in [`Map::len`].
//!
//! # Rebuilds
//!
//! When an insert would take the table past 7/8 full (deleted slots
//! included), the shard is rebuilt into a new table sized for its live
//! entries at a load of 3/5, so it grows by about 1.46× while only
//! inserting, and shrinks when many entries were removed (`migrate.rs`).
//! The rebuild first seals the old table (every `EMPTY` slot `SEALED`, so
//! no insert claims one; a claim not yet published `MOVED`, so its
//! inserter takes its entry back, to the new table; a given-up slot
//! `DELETED`)
//! and decides every insert it caught `PENDING`, so that no entry appears
//! in it from then on; then makes the new table, for at least the entries
//! the old one holds (inserts with no lock may have brought more in since
//! the caller counted them), and links it from the old one, so readers can
//! reach both, and opens the shard's gate to the first requests that found
//! no room meanwhile (see `shard.rs`): they insert into the new table while
//! the entries move. Then it moves the live entries one at a time:
//!
//! 1. the key is hashed (a `Hash` that stalls here holds up only the
//!    rebuild: every entry is live in one table or the other);
//! 2. a word cell's state is copied ([`Mortal::relocate`]) into a slot of
//!    the new table, published with its tag, where no reader looks for it
//!    yet: a reader goes on to the new table only from a forwarded cell or
//!    a slot that no longer holds the key (below);
//! 3. the old cell is marked forwarded ([`Mortal::forward`]): one exchange
//!    of its word, from the very word copied, to the forwarding mark, which
//!    hands the client to the copy. A check that changed the word first
//!    makes the exchange fail, and the rebuild copies the newer word into
//!    the same slot and tries again; a check that comes after fails against
//!    the mark, and looks the client up again, following the link to the
//!    copy. A removal that retired the cell first (or a claim or refusal of
//!    an unborn one) makes the exchange fail for good: the cell is dead, so
//!    the copy, which no reader has reached, is given up (its slot marked
//!    `MOVED`, owning nothing), and the dead entry is left behind;
//! 4. the old slot's tag becomes `MOVED`, which hands the key and value to
//!    the new table.
//!
//! The rebuild walks the old table a group at a time: one load of the
//! group's control word, its `FULL` lanes taken from a bitmask, and one
//! store of the word once each of the group's entries has moved (or been
//! left behind), with every retag at once (a plain store: sealed and
//! settled, the table has no other writer left; see `migrate.rs`). Until that store a moved
//! entry's slot still reads `FULL` over a forwarded cell, which readers
//! pass by for the linked table. The store is made on unwind too, so a
//! panic half way through a group leaves no moved entry tagged `FULL`, and
//! the rebuild that finishes the job moves none twice.
//!
//! A reader searches the old table first: a forwarded cell there, or a
//! miss, sends it to the linked table; any other cell is the client's,
//! live, or dead and left behind by the rebuild (a dead cell is never
//! forwarded, so a client removed during the move never reaches the copy
//! the move gave up). A log, a handle to state that does not move, is
//! moved bit for bit, and both copies name the same state. Dead entries are
//! left behind, and their room is given back through the caller's
//! `on_dead` before their slots are retagged `DELETED`: a check that meets
//! such an entry waits for the shard's lock to remove it, and then finds
//! its room free. Once every entry is moved, the new table is published in the
//! shard with a `Release` store and the old one is retired (`reclaim.rs`):
//! the epoch collector is asked only to mark it expired once no reader can
//! hold a reference into it, and the map's own writers free it (with the
//! keys and values it still owns, in one pass) as they let a shard's lock
//! go, or as an insert that took none returns, outside any lock. A reader never frees a table, so a lookup runs no
//! key's `Drop`: a check on a tracked client runs no user code but its own
//! key's `Hash` and `Eq` (and, above the map, the clock). The writer that
//! retired a table flushes its thread's epoch bag as it lets the lock go,
//! so the table expires within a few more pins, not after dozens more
//! retirements have filled the bag (which, with the 64 shards growing
//! together, kept up to a generation of old tables in memory). A panic in a
//! key's `Hash` half way leaves both tables consistent; the next writer to
//! take the shard's lock finishes the rebuild.

#![allow(unsafe_code)]

mod migrate;
mod reclaim;
mod shard;
mod table;
#[cfg(test)]
mod tests;
mod walk;

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use core::ptr;

use crossbeam_epoch::{self as epoch, Atomic, Guard};
use crossbeam_utils::CachePadded;

use self::reclaim::Retired;
use self::shard::{Gate, Held, Locked, Shard, Wake};
pub(crate) use self::table::SHARDS;
use self::table::{Claim, Table, Vacancy, DELETED, ONE_LIVE, ONE_USED, SHARD_BITS};
pub(crate) use self::walk::{Cursor, Visit};
use crate::cell::{Life, Mortal, Relocation};
use crate::store::Lapse;
use crate::sync::{Mutex, Ordering};

/// What a lookup that missed leaves for an insert of the same key: the
/// key's hash, the lookup's pin, held on (see [`Map::lookup`]), and the
/// table it searched, with where its probe stopped, if it searched the
/// shard's table with no rebuild linked (an insert into that table then
/// need not search it again, and claims from where the probe stopped).
pub(crate) struct Miss {
    hash: u64,
    guard: Guard,
    searched: Option<(*const (), Option<Vacancy>)>,
}

/// A concurrent map from `K` to `V`, with values that stay where a reader
/// found them until it unpins (see the module docs).
pub(crate) struct Map<K, V, S> {
    /// An array, not a slice: indexed by the hash's top bits, which are
    /// always in range, so a lookup needs no bounds check.
    shards: Box<[CachePadded<Shard<K, V>>; SHARDS]>,
    hasher: S,
    /// Tables rebuilds retired, freed by the map's writers (`reclaim.rs`).
    retired: Retired<K, V>,
}

impl<K, V, S> Map<K, V, S>
where
    K: Hash + Eq + Send + Sync,
    V: Mortal + Send + Sync,
    S: BuildHasher,
{
    pub(crate) fn with_hasher(hasher: S) -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| {
                    CachePadded::new(Shard {
                        lock: Mutex::new(Held::default()),
                        gate: Gate::default(),
                        table: Atomic::null(),
                    })
                })
                .collect::<Box<[_]>>()
                .try_into()
                .unwrap_or_else(|_| unreachable!("SHARDS shards")),
            hasher,
            retired: Retired::new(),
        }
    }

    #[inline]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard<K, V> {
        &self.shards[(hash >> (64 - SHARD_BITS)) as usize]
    }

    /// The live entries of every shard's table, as counted now: exact once
    /// no writer is at work (an insert under way counts its entry from the
    /// moment it reserves its slot, until it wins or loses), and never
    /// locked.
    pub(crate) fn len(&self) -> u64 {
        let guard = epoch::pin();
        self.shards
            .iter()
            .filter_map(|shard| Self::current(shard, &guard))
            // A rebuild under way: the new table counts the entries it
            // will take, and the first requests made into it meanwhile.
            .map(|table| table.next(&guard).unwrap_or(table).counts().live as u64)
            .sum()
    }

    /// The removed entries whose keys and cells the tables still hold, until
    /// a rebuild of their shard (and the entries inserts that lost a race
    /// left given up), as counted now.
    #[cfg(feature = "metrics")]
    pub(crate) fn removed(&self) -> u64 {
        let guard = epoch::pin();
        self.shards
            .iter()
            .filter_map(|shard| Self::current(shard, &guard))
            .map(|table| {
                let counts = table.counts();
                counts.used.saturating_sub(counts.live) as u64
            })
            .sum()
    }

    /// The shard's current table, for a writer holding its lock or a reader.
    #[inline]
    fn current<'g>(shard: &Shard<K, V>, guard: &'g Guard) -> Option<&'g Table<K, V>> {
        // Acquire: pairs with the Release store in `Map::finish` (or the
        // first table's in `Map::rebuild`) that published the table, so its
        // slots and control words are visible.
        let table = shard.table.load(Ordering::Acquire, guard);
        // SAFETY: a table is freed only through `defer_destroy` after it has
        // been replaced, so it outlives every guard pinned before that; or
        // in `Drop for Map`, which no reader can overlap.
        unsafe { table.as_ref() }
    }

    /// Runs `f` on the value for `key`. Takes no lock, writes nothing
    /// shared, and never waits for another thread, a rebuilder included.
    ///
    /// # Errors
    ///
    /// Hands `f` back, not run, if the key is absent.
    #[inline]
    pub(crate) fn get<Q, R, F>(&self, key: &Q, f: F) -> Result<R, F>
    where
        F: FnOnce(&V) -> R,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.lookup(key, f).map_err(|(f, _)| f)
    }

    /// As [`Map::get`], and a miss hands back the key's hash and the pin,
    /// for an insert of the same key to reuse.
    ///
    /// # Errors
    ///
    /// Hands `f` back, not run, and the miss, if the key is absent.
    #[inline]
    pub(crate) fn lookup<Q, R, F>(&self, key: &Q, f: F) -> Result<R, (F, Miss)>
    where
        F: FnOnce(&V) -> R,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let guard = epoch::pin();
        // The common cases, inline: a hit in the shard's table with no
        // rebuild linked, and a miss in the newest table (the first steps
        // of `locate`, with its reasons).
        let shard = self.shard(hash);
        if let Some(table) = Self::current(shard, &guard) {
            if table.next(&guard).is_none() {
                let stopped = match table.search(hash, key) {
                    Ok((_, (_, value))) => return Ok(f(value)),
                    Err(stopped) => stopped,
                };
                if Self::absent(shard, table, &guard) {
                    let searched = Some((ptr::from_ref(table).cast(), stopped));
                    return Err((
                        f,
                        Miss {
                            hash,
                            guard,
                            searched,
                        },
                    ));
                }
            }
        }
        match self.locate(hash, key, &guard) {
            Some(value) => Ok(f(value)),
            None => Err((
                f,
                Miss {
                    hash,
                    guard,
                    searched: None,
                },
            )),
        }
    }

    /// After a miss in `table`, searched with no link seen: whether the key
    /// is absent, as `locate` decides it (no link seen since, and no newer
    /// table published). Out of line, to keep the hit path short.
    #[cold]
    #[inline(never)]
    fn absent(shard: &Shard<K, V>, table: &Table<K, V>, guard: &Guard) -> bool {
        table.next(guard).is_none()
            && Self::current(shard, guard).is_some_and(|current| ptr::eq(current, table))
    }

    /// The value `key`'s client has now: the copy a rebuild forwarded its
    /// cell to, if one did (see "Rebuilds" in the module docs), or the cell
    /// the table holds, live or dead; or, rarely, a cell forwarded after
    /// the search loaded its table's link, which a second lookup (made
    /// after the forward, which came after the link) follows. `None` if the
    /// key is absent.
    #[cold]
    #[inline(never)]
    fn locate<'g, Q>(&self, hash: u64, key: &Q, guard: &'g Guard) -> Option<&'g V>
    where
        K: Borrow<Q> + 'g,
        V: 'g,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(hash);
        let mut start = Self::current(shard, guard)?;
        let mut table = start;
        loop {
            // Loaded before the search: if a rebuild has begun, the search
            // sees every entry it moves (see `Table::next`).
            let next = table.next(guard);
            match (table.find(hash, key), next) {
                // Forwarded: the copy stands for the client, in the table
                // the rebuild links.
                (Some((_, (_, value))), Some(next)) if value.is_forwarded() => table = next,
                // Not moved: the client's, live or dead. A dead cell that no
                // move carries (retired, or refused) stays the client's
                // entry until it is removed; the copy a move may have placed
                // for it is given up, never reached. (With no link seen, a
                // cell is returned unread: one forwarded since the link was
                // loaded is the caller's to look past, as `remove_dead`
                // does.)
                (Some((_, (_, value))), _) => return Some(value),
                // Moved (the slot retagged once its cell was forwarded), or
                // absent here: what the rebuild carried is in the next
                // table.
                (None, Some(next)) => table = next,
                (None, None) => {
                    // A miss with no link seen. A `MOVED` tag the search
                    // read (Acquire) was stored after the link, which is
                    // visible now: search this table again, the link loaded
                    // first.
                    if table.next(guard).is_some() {
                        continue;
                    }
                    // A miss in the newest table linked: a rebuild finished
                    // since the search began may have published one with
                    // entries inserted since.
                    match Self::current(shard, guard) {
                        Some(current) if !ptr::eq(current, start) => {
                            start = current;
                            table = current;
                        }
                        _ => return None,
                    }
                }
            }
        }
    }

    /// Inserts `value` for `key` if the key is absent, then runs `f` on the
    /// inserted value (holding no lock, still protected). `miss`, a lookup's of this very
    /// key, spares hashing, pinning and searching again.
    ///
    /// With room in the shard's table and no rebuild under way, the insert
    /// takes no lock ([`Table::insert`]), nor while a rebuild moves the
    /// entries to the table it linked, which takes the insert
    /// ([`Map::insert_moving`]). With no room, or a rebuild sealing the
    /// table and deciding the inserts it caught there, it waits at the
    /// shard's gate ([`Map::wait_at_gate`]) for that rebuild's link, and
    /// then goes on into the linked table, or for the shard's lock, which
    /// it takes to rebuild; it takes the lock too, waiting, if the linked
    /// table is full as well. A rebuild it makes runs `lapsed` (if any) on
    /// every live value of the shard (see [`Map::rebuild_lapsing`]), and
    /// leaves dead entries behind, calling `on_dead` on each.
    ///
    /// # Errors
    ///
    /// `Err(Some(value))`, handed back, if the key was found present;
    /// `Err(None)` if another insert of the key won a race with this one:
    /// `value` then stays in the table, given up, read by no one, dropped
    /// with the table (the caller looks the key up again).
    pub(crate) fn insert<R>(
        &self,
        miss: Option<&Miss>,
        key: K,
        value: V,
        lapsed: Option<impl Lapse<V>>,
        on_dead: impl FnMut(&V),
        f: impl FnOnce(&V) -> R,
    ) -> Result<R, Option<V>> {
        let pinned;
        let (hash, guard, searched) = match miss {
            Some(miss) => (miss.hash, &miss.guard, miss.searched),
            None => {
                pinned = epoch::pin();
                (self.hash(&key), &pinned, None)
            }
        };
        let shard = self.shard(hash);
        let mut entry = (key, value);
        while let Some(table) = Self::current(shard, guard) {
            // The table the claim is made in, how it ended, and whether a
            // rebuild's link would let this request go on with no lock.
            let (into, claimed, gate) = match table.next(guard) {
                None => {
                    // A lookup of this very table missed: the claim probes
                    // from where that lookup's probe stopped (no group
                    // before it has an empty slot, then or since).
                    // Otherwise search first, and claim from where the
                    // search stopped.
                    let from = match searched {
                        Some((searched, stopped))
                            if ptr::eq(searched, ptr::from_ref(table).cast()) =>
                        {
                            stopped
                        }
                        _ => match table.search(hash, &entry.0) {
                            Ok(_) => return Err(Some(entry.1)),
                            Err(vacancy) => vacancy,
                        },
                    };
                    if table.reserve() {
                        (table, Self::claim(table, hash, from, entry, guard), true)
                    } else {
                        (table, Err(entry), true)
                    }
                }
                // A rebuild is moving the table's entries to `next`; unless
                // a panic cut it short (its lock poisoned), which the lock's
                // next holder finishes.
                Some(next) if !shard.lock.is_poisoned() => (
                    next,
                    Self::insert_moving(table, next, hash, entry, guard),
                    false,
                ),
                Some(_) => (table, Err(entry), false),
            };
            match claimed {
                Ok(done) => {
                    // A writer that takes no lock frees the retired tables
                    // the locked ones leave expired, as they do once they
                    // let the lock go.
                    self.free_expired();
                    // SAFETY: the claim answers a slot of `into` it filled
                    // and published.
                    return done.map(|index| f(unsafe { Self::value(into, index) }));
                }
                Err(back) => entry = back,
            }
            if !gate {
                // The new table is full, or sealed itself, or the move was
                // cut short: the rebuild's end (or its finish) is what
                // makes room, under the lock.
                break;
            }
            // No room, or sealed by a rebuild not yet linked: wait for the
            // lock, or for the link, whichever comes first.
            match self.wait_at_gate(shard, table, guard) {
                Wake::Locked(held) => {
                    return self.insert_held(held, shard, hash, entry, lapsed, on_dead, f, guard)
                }
                Wake::Moved => {}
            }
        }
        let held = self.lock(shard, guard);
        self.insert_held(held, shard, hash, entry, lapsed, on_dead, f, guard)
    }

    /// [`Map::insert`] while a rebuild moves `old`'s entries to `next`,
    /// the table it linked: with no lock, into `next`. `old` holds every
    /// entry it ever will (the rebuild sealed it and decided its claims
    /// before it linked `next`), and each keeps reading `FULL` there until
    /// its copy is published in `next`: so a key found in neither, searched
    /// in that order, is absent, and its insert races only other inserts of
    /// it, which the claim's resolution decides. The entry is handed back
    /// for the lock (which waits for the rebuild) if `next` has no room
    /// left beside the slots reserved for the moves, or is itself sealed
    /// (published and being rebuilt since this thread loaded `old`). A
    /// rebuild a panic leaves half done is finished by the lock's next
    /// holder: an insert that finds the lock poisoned goes to it, and one
    /// made into `next` before is among the entries that holder publishes.
    #[inline(never)]
    #[allow(clippy::type_complexity)]
    fn insert_moving(
        old: &Table<K, V>,
        next: &Table<K, V>,
        hash: u64,
        entry: (K, V),
        guard: &Guard,
    ) -> Result<Result<usize, Option<V>>, (K, V)> {
        if old.search(hash, &entry.0).is_ok() {
            return Ok(Err(Some(entry.1)));
        }
        if next.next(guard).is_some() {
            return Err(entry);
        }
        let from = match next.search(hash, &entry.0) {
            Ok(_) => return Ok(Err(Some(entry.1))),
            Err(vacancy) => vacancy,
        };
        if !next.reserve() {
            return Err(entry);
        }
        Self::claim(next, hash, from, entry, guard)
    }

    /// The claim of [`Map::insert`], the slot reserved in `table`: the
    /// slot it filled, or [`Map::insert`]'s error, or, if a rebuild sealed
    /// the table first, the entry handed back (the reservation given
    /// back).
    #[inline]
    #[allow(clippy::type_complexity)]
    fn claim(
        table: &Table<K, V>,
        hash: u64,
        from: Option<Vacancy>,
        entry: (K, V),
        guard: &Guard,
    ) -> Result<Result<usize, Option<V>>, (K, V)> {
        match table.insert(hash, from, entry, guard) {
            Claim::Won(index) => Ok(Ok(index)),
            Claim::Lost => {
                table.uncount(ONE_LIVE);
                Ok(Err(None))
            }
            Claim::Sealed(entry) => {
                table.uncount(ONE_USED | ONE_LIVE);
                Err(entry)
            }
        }
    }

    /// Frees the retired tables no reader can hold any more, if any (see
    /// `reclaim.rs`): what a writer does as it lets a shard's lock go, for
    /// an insert that took none.
    #[inline]
    fn free_expired(&self) {
        if self.retired.any_expired() {
            self.retired.free_expired();
        }
    }

    /// The value in slot `index` of `table`.
    ///
    /// # Safety
    ///
    /// This thread filled and published the slot, and the caller's guard,
    /// pinned before it looked `table` up, keeps the table alive however
    /// soon it is rebuilt.
    #[inline]
    unsafe fn value(table: &Table<K, V>, index: usize) -> &V {
        // SAFETY: by the caller's contract.
        let (_, value) = unsafe { table.entry(index) };
        value
    }

    /// [`Map::insert`] under the shard's lock, `held`: into a table with no
    /// rebuild under way (the lock waits for one, or finishes one a panic
    /// left), rebuilt first if it has no room (or the shard has none yet).
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn insert_held<R>(
        &self,
        mut held: Locked<'_, K, V>,
        shard: &Shard<K, V>,
        hash: u64,
        entry: (K, V),
        mut lapsed: Option<impl Lapse<V>>,
        mut on_dead: impl FnMut(&V),
        f: impl FnOnce(&V) -> R,
        guard: &Guard,
    ) -> Result<R, Option<V>> {
        let mut entry = entry;
        loop {
            let Some(table) = Self::current(shard, guard) else {
                let _ = self.rebuild(shard, &mut held, 1, &mut on_dead, V::relocate, guard);
                continue;
            };
            if table.search(hash, &entry.0).is_ok() {
                return Err(Some(entry.1));
            }
            if table.reserve() {
                match Self::claim(table, hash, None, entry, guard) {
                    Ok(Ok(index)) => {
                        // `f` runs with the lock let go: it may take it.
                        drop(held);
                        // SAFETY: `claim` answers a slot it filled and
                        // published.
                        return Ok(f(unsafe { Self::value(table, index) }));
                    }
                    Ok(Err(lost)) => return Err(lost),
                    // Sealed, though no rebuild seals a table while this
                    // thread holds the lock: by a rebuild a panic cut short
                    // before it linked the new table (in a key's `Hash` or
                    // `Eq`, deciding a pending insert). Rebuilt below.
                    Err(back) => entry = back,
                }
            }
            // No room, or sealed: rebuild, and claim in the new table.
            let room_for = table.counts().live + 1;
            self.rebuild_for_insert(
                shard,
                &mut held,
                room_for,
                lapsed.take(),
                &mut on_dead,
                guard,
            );
        }
    }

    /// The rebuild an insert with no room makes: for `room_for` live
    /// entries, forgetting those `lapsed` judges lapsed, if any.
    fn rebuild_for_insert(
        &self,
        shard: &Shard<K, V>,
        held: &mut Held,
        room_for: usize,
        lapsed: Option<impl Lapse<V>>,
        on_dead: impl FnMut(&V),
        guard: &Guard,
    ) {
        match lapsed {
            None => {
                let _ = self.rebuild(shard, held, room_for, on_dead, V::relocate, guard);
            }
            Some(lapsed) => {
                let _ = self.rebuild_lapsing(shard, held, room_for, lapsed, on_dead, guard);
            }
        }
    }

    /// A rebuild for `room_for` live entries that leaves behind the clients
    /// `lapsed` judges lapsed; if so many were left that the new table is
    /// under three quarters of the load it was sized for, it is rebuilt
    /// once more, for the entries it holds. So the table a flood of
    /// short-lived clients leaves is sized for the clients still active,
    /// and a rebuild that forgets no one costs one pass. Holding the
    /// shard's lock.
    ///
    /// A word cell is judged on the state the move reads anyway (the copy):
    /// if it has lapsed, the move retires the cell from that state without
    /// placing the copy ([`Mortal::retire_sealed`], the exchange a forward
    /// would have made, to the tombstone a sweep's retirement leaves), so
    /// the client is forgotten by the exchange that would have moved it,
    /// and its entry is left behind, its room given back. A handle is
    /// retired by `lapsed` itself.
    #[cold]
    #[inline(never)]
    fn rebuild_lapsing<'g>(
        &self,
        shard: &Shard<K, V>,
        held: &mut Held,
        room_for: usize,
        mut lapsed: impl Lapse<V>,
        mut on_dead: impl FnMut(&V),
        guard: &'g Guard,
    ) -> &'g Table<K, V> {
        let relocate = |value: &V| {
            let relocation = value.relocate();
            match &relocation {
                // Only a live state lapses: an unborn cell (a new client on
                // its way in, holding no room yet) is moved as it is. A
                // check that changed the state first makes the exchange
                // fail: not lapsed after all, and the move's own exchange
                // fails the same way and reads the cell again.
                Relocation::Moved(copy, seal)
                    if copy.life() == Life::Live
                        && lapsed.has_lapsed(copy)
                        && value.retire_sealed(*seal) =>
                {
                    // Retired from the lapsed state: left behind, as dead.
                    lapsed.retired();
                    Relocation::Dead
                }
                Relocation::Same if lapsed.retire_if_lapsed(value) => Relocation::Dead,
                _ => relocation,
            }
        };
        let table = self.rebuild(shard, held, room_for, &mut on_dead, relocate, guard);
        let live = table.counts().live;
        if live * 4 >= room_for * 3 {
            return table;
        }
        self.rebuild(shard, held, live + 1, on_dead, V::relocate, guard)
    }

    /// Removes `key`'s entry if `condition` (run under the shard's lock)
    /// holds for its value; true iff this call removed it. `condition` must
    /// hold only of dead cells ([`Mortal::is_dead`]): a key absent, or whose
    /// client's cell is alive, is answered without the lock, so a thread
    /// that met a copy a rebuild has just moved never waits for the
    /// rebuilder. A dead entry's removal waits for the shard's lock, which
    /// an insert, a sweep or a rebuild may hold: for the insert path, where
    /// waiting is allowed (see [`Map::try_remove_if`] for a removal that
    /// never waits). `on_dead` runs, under the lock, on the value removed
    /// just before its entry goes, and, if the removal leaves the table
    /// more than half dead, which rebuilds it ([`Map::shed`]), on each dead
    /// entry the rebuild leaves behind, as in [`Map::insert`].
    pub(crate) fn remove_if<Q>(
        &self,
        key: &Q,
        condition: impl FnOnce(&V) -> bool,
        on_dead: impl FnMut(&V),
    ) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // Never `None`: a removal that may wait always gets the lock.
        self.remove_dead(key, condition, on_dead, true)
            .unwrap_or(false)
    }

    /// As [`Map::remove_if`], but never waits for another thread: if the
    /// entry is dead and another thread holds the shard's lock, answers
    /// `None` at once and leaves the entry in the table. A dead entry left
    /// there reads as dead to every reader (a lookup returns it only when
    /// no live copy exists), still counts in [`Map::len`], and is removed
    /// by whoever next meets it holding the lock: a rebuild leaves it
    /// behind (`on_dead`), a sweep removes it, an insert of its key removes
    /// it first. `Some(removed)` otherwise, as [`Map::remove_if`] answers.
    pub(crate) fn try_remove_if<Q>(
        &self,
        key: &Q,
        condition: impl FnOnce(&V) -> bool,
        on_dead: impl FnMut(&V),
    ) -> Option<bool>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_dead(key, condition, on_dead, false)
    }

    /// The removal of [`Map::remove_if`] (`wait`) and
    /// [`Map::try_remove_if`]: `None` iff the entry is dead, `wait` is
    /// false, and another thread holds the shard's lock.
    fn remove_dead<Q>(
        &self,
        key: &Q,
        condition: impl FnOnce(&V) -> bool,
        mut on_dead: impl FnMut(&V),
        wait: bool,
    ) -> Option<bool>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        let guard = epoch::pin();
        let dead = loop {
            match self.locate(hash, key, &guard).map(Mortal::life) {
                // Forwarded after the lookup loaded its table's link: the
                // forward (seen by this Acquire load of the word) came after
                // the link, so a second lookup follows it to the copy.
                Some(Life::Forwarded) => {}
                found => break matches!(found, Some(Life::Evicted | Life::Refused)),
            }
        };
        if !dead {
            return Some(false);
        }
        // Dead: a cell stays dead, so the entry is still dead, or gone, when
        // the lock is ours.
        let mut held = if wait {
            self.lock(shard, &guard)
        } else {
            self.try_lock(shard, &guard)?
        };
        let Some(table) = Self::current(shard, &guard) else {
            return Some(false);
        };
        let Some((index, (_, value))) = table.find(hash, key) else {
            return Some(false);
        };
        if !condition(value) {
            return Some(false);
        }
        debug_assert!(value.is_dead(), "only dead entries are removed");
        on_dead(value);
        table.mark(index, DELETED);
        table.uncount(ONE_LIVE);
        let shed = self.shed(shard, &mut held, &mut on_dead, &guard);
        drop(held);
        drop(guard);
        if shed && !epoch::is_pinned() {
            // The old table, and the removed keys it holds, freed now
            // rather than by a later write (unless another thread still
            // reads it: see `reclaim`).
            self.reclaim();
        }
        Some(true)
    }

    /// The rebuild of [`Map::shed`]: the one an insert makes, for the live
    /// entries, forwarding each entry it moves (see "Rebuilds" in the
    /// module docs). Holding the shard's lock.
    #[cold]
    #[inline(never)]
    fn shed_now(
        &self,
        shard: &Shard<K, V>,
        held: &mut Held,
        room_for: usize,
        on_dead: impl FnMut(&V),
        guard: &Guard,
    ) {
        let _ = self.rebuild(shard, held, room_for, on_dead, V::relocate, guard);
    }

    /// After removals under the shard's lock: if they left its table more
    /// than half dead ([`table::Counts::half_dead`]), rebuilds it for its
    /// live entries, calling `on_dead` on the dead ones it leaves behind
    /// (as [`Map::insert`] does); true iff it did. Holding the shard's
    /// lock.
    #[inline]
    fn shed(
        &self,
        shard: &Shard<K, V>,
        held: &mut Held,
        on_dead: impl FnMut(&V),
        guard: &Guard,
    ) -> bool {
        let Some(counts) = Self::current(shard, guard).map(Table::counts) else {
            return false;
        };
        if !counts.half_dead() {
            return false;
        }
        self.shed_now(shard, held, counts.live, on_dead, guard);
        true
    }
}

impl<K, V, S> Map<K, V, S>
where
    K: Hash + Eq + Send + Sync,
    V: Mortal + Send + Sync,
    S: BuildHasher,
{
    /// Frees every retired table no reader can hold any more, after
    /// helping the epoch collector along: a table retired at epoch `e`
    /// expires once the global epoch reaches `e + 2`; each flush advances
    /// it by one if every pinned thread has caught up, and runs the expiry
    /// of a few bags of deferred functions (eight, in crossbeam-epoch 0.9),
    /// each rebuilt shard's being a bag of its own. So at most 2 + 64 / 8
    /// rounds free a full sweep's tables; the bound leaves room for other
    /// threads' bags. A thread pinned long ago (one held up inside a
    /// lookup) keeps its tables for a later writer. For a caller that holds
    /// no pin.
    pub(crate) fn reclaim(&self) {
        for _ in 0..64 {
            if !self.retired.any_pending() {
                return;
            }
            epoch::pin().flush();
            if self.retired.any_expired() {
                self.retired.free_expired();
            }
        }
    }

    /// As [`Map::reclaim`], and while retired tables are left (another
    /// thread is inside a lookup begun before they were retired), sleeps
    /// and tries again, the naps doubling from 1 µs to 1 ms, for at most
    /// [`Map::PATIENCE`] in all: so every table is freed once the lookups
    /// in flight have ended, however busy the other threads keep the map
    /// with lookups begun since, unless one is held up longer (its tables
    /// then go at a later write). Never holds up another thread: it holds
    /// no lock and no pin while it sleeps. For a caller that holds no pin
    /// and may wait (a full sweep).
    pub(crate) fn reclaim_waiting(&self) {
        let start = std::time::Instant::now();
        let mut nap = core::time::Duration::from_micros(1);
        loop {
            self.reclaim();
            if !self.retired.any_pending() || start.elapsed() >= Self::PATIENCE {
                return;
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(core::time::Duration::from_millis(1));
        }
    }

    /// How long [`Map::reclaim_waiting`] waits at most for the lookups in
    /// flight to end.
    pub(crate) const PATIENCE: core::time::Duration = core::time::Duration::from_secs(1);
}

impl<K, V, S> Drop for Map<K, V, S> {
    fn drop(&mut self) {
        for shard in self.shards.iter_mut() {
            // SAFETY: `&mut self`: no reader or writer can reach the map, so
            // the current tables can be freed now (retired ones are the
            // collector's), with any a rebuild left unfinished linked.
            let mut table = unsafe {
                let table = shard.table.load(Ordering::Relaxed, epoch::unprotected());
                (!table.is_null()).then(|| table.into_owned().into_box())
            };
            while let Some(mut current) = table {
                table = current.take_next();
                drop(current);
            }
        }
    }
}

impl<K, V, S> fmt::Debug for Map<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Reading a concurrent map's contents in Debug would race with
        // checks; print the shape only.
        f.debug_struct("Map")
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}
