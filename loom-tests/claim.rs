//! Model 21 (a protocol model): a first request that claims its slot with
//! no lock, over a slot-level table of its own.
//!
//! The map runs this protocol (`src/store/map/table.rs`, `Table::insert`,
//! and the seal and resolution of `src/store/map/migrate.rs`), on std's
//! atomics: like every control word of the map's, its words are not loom's
//! (see `src/sync.rs`), so the map's own tests, Miri and ThreadSanitizer
//! check the code, and this file checks the protocol, on loom's atomics: a
//! small table of control words (four one-byte lanes per `u32`, every
//! key's probe starting at group 0) and slots whose keys sit in loom's
//! `UnsafeCell`, so that a key read before its writer published it is
//! reported as a data race.
//!
//! # The protocol
//!
//! A lane is `EMPTY`, `CLAIMED` (owned by one inserter, its key not yet
//! written, never read by anyone else), `PENDING` with six bits of the key
//! (key and value written, the entry not yet decided), `FULL` with seven
//! bits (an entry: the only state a lookup matches), `GIVEN_UP` (a slot
//! that lost its resolution, keeping key and value, which only its
//! inserter may publish again), `DELETED` (a slot that keeps its key and
//! value for good, owned by the table), `MOVED` (a slot that owns nothing)
//! or `SEALED` (an empty lane a rebuild closed: a probe stops there, as at
//! `EMPTY`, and no one claims it).
//!
//! 1. **Claim**: probe from the home group for the first group holding an
//!    `EMPTY` lane, and compare-and-swap its word with the lowest such lane
//!    `CLAIMED`. Since a lane never becomes `EMPTY` again, a claim always
//!    takes the first `EMPTY` lane of the probe sequence at its instant, so
//!    two inserters of one key claim in probe order, and every group before
//!    a claimed lane holds no `EMPTY` lane from then on.
//! 2. **Write** key and value into the claimed slot (no one else reads it).
//! 3. **Publish** `CLAIMED → PENDING` by a compare-and-swap (`AcqRel`: its
//!    release half publishes the key to every later reader of the word);
//!    or `CLAIMED → FULL`, decided at once, if its group still holds an
//!    `EMPTY` lane and no other lane tagged for the key (the
//!    compare-and-swap reads that word, in the same step), and every
//!    group before it in the probe is *settled*: it holds no lane that may
//!    yet become the key's entry, neither one tagged for the key nor one
//!    `CLAIMED` or `GIVEN_UP` (of any key: its key cannot be told, and it
//!    may yet be published). No other slot of the key can then become
//!    `FULL` without its resolution seeing this one:
//!    - one claimed before this claim in an earlier group: the claim
//!      passed that group with no `EMPTY` lane, after that other claim, so
//!      the check reads it `CLAIMED`, or published, or given up (a lane
//!      never becomes `EMPTY` again, so every read comes after the pass);
//!    - none can be claimed in an earlier group after this claim;
//!    - one claimed in this group: the compare-and-swaps on its word order
//!      the two publications, and the later one reads the earlier;
//!    - one claimed past this group: its claim found no `EMPTY` lane left
//!      here, so it read this word after this publication (which still
//!      saw one), as does its scan.
//!
//!    If a rebuild sealed the lane (`CLAIMED → MOVED`), the compare fails
//!    and the inserter takes its key and value back (no one read them) and
//!    waits at the gate (below) for the rebuild's link, then inserts again,
//!    into the linked table.
//! 4. **Resolve** its slot `s`: scan the probe sequence from the home group
//!    through the first group holding an `EMPTY` or `SEALED` lane, reading
//!    each word by a read-modify-write (`fetch_or(0, AcqRel)`), and for
//!    every other lane `t` holding the same key, `PENDING` or `FULL`:
//!    - `FULL`: the key has its entry; `s` gives itself up
//!      (`PENDING → GIVEN_UP`);
//!    - `PENDING`, earlier in probe order than `s`: `s` gives itself up;
//!    - `PENDING`, later: `s` gives `t` up (`PENDING → GIVEN_UP`); if `t`
//!      became `FULL` first, `s` gives itself up.
//!
//!    Then `PENDING → FULL` on `s`. An inserter whose slot was given up
//!    finds the winner: a `FULL` lane of its key, or else the earliest
//!    `PENDING` one, which it resolves itself (helping), and looks again.
//!    If it finds neither (the entry that won was removed since, its cell
//!    dead), it publishes its own slot again (`GIVEN_UP → PENDING`: a slot
//!    given up never was `FULL`, so it is still its inserter's) and
//!    resolves it; unless a rebuild has sealed the table, which turns
//!    every `GIVEN_UP` lane `DELETED`, and then it goes to the lock. No
//!    step waits for another thread: an inserter stalled for good after
//!    publishing is resolved by the next inserter of its key, and each
//!    resolution helped turns one `PENDING` lane `FULL` or `GIVEN_UP`.
//!
//!    A loser never takes its key back once published: other resolvers may
//!    be comparing it. The slot keeps key and value (dropped with the
//!    table), and the inserter decides on the winner's cell.
//!
//! **Why one entry.** Say slots `s` (earlier) and `t` of one key both
//! became `FULL`, by resolvers `R_s` and `R_t`, each of which read its slot
//! `PENDING` before its scan. The two publications are read-modify-writes
//! on their words, and so are the scans' reads: if `R_s`'s read of `t`'s
//! word came before `t`'s publication in that word's order, it synchronised
//! with it (release to acquire), so `s`'s publication happens before
//! `R_t`'s read of `s`'s word, which therefore sees `s` `PENDING` or later.
//! So one of them saw the other published (the store-buffering race that
//! plain loads would allow, and the broken twin below exhibits, is ruled
//! out). `R_t` seeing `s` `PENDING` (earlier) or `FULL` gives `t` up;
//! `R_s` seeing `t` `FULL` gives `s` up, and seeing it `PENDING` (later)
//! gives `t` up or, failing that, finds it `FULL` and gives `s` up. A
//! `GIVEN_UP` lane becomes `FULL` only through a new publication (its
//! inserter's), to which the argument applies afresh. So at most one of
//! them is `FULL`.
//! Both slots are in each scan's range: every group before a claimed lane
//! holds no `EMPTY` lane from the claim on, and a group is `SEALED` only
//! once no claim can be made in it.
//!
//! **A rebuild never waits and strands nothing.** Holding the writers'
//! lock, it (1) seals every group (`EMPTY → SEALED`, `CLAIMED → MOVED`,
//! `GIVEN_UP → DELETED`, one compare-and-swap per word), after which no
//! lane becomes `PENDING`; (2) resolves every `PENDING` lane itself, as
//! its inserter would; (3) links the new table (the map sizes it here, for
//! the entries the old one holds now that none can appear) and opens the
//! gate; (4) moves
//! every `FULL` entry (the forwarding protocol of `migrate.rs`, here a
//! copy) and retags it `MOVED`; (5) publishes the new table. Every group
//! is sealed before any lane is resolved or moved: a resolution after some
//! entries had left could miss a `FULL` lane already `MOVED`. A loser that
//! finds no entry of its key and its own slot sealed (`DELETED`) waits at
//! the gate, if the link is not there yet.
//!
//! **The gate.** An inserter whose claim a seal took waits, holding no
//! lock, for the writers' lock to be let go or the new table to be linked:
//! it checks both under the gate's mutex, and sleeps on its condition
//! variable; each event is announced under that mutex after it happened
//! (the link by the rebuild, every release of the writers' lock by its
//! holder). So no inserter sleeps past either: the mutex orders each
//! announcement before the check, which sees the event, or after the sleep
//! began, which it wakes. A seal always comes before its link, and the
//! link before the lock is let go, so every such inserter goes on into the
//! linked table, with no lock.
//!
//! **First requests during the moves.** Once the link is there, a first
//! request searches the old table, then the new one, and inserts a key it
//! found in neither into the new table with the protocol above, with no
//! lock. A move places its entry there as an insert does (claimed, then
//! published), but `FULL` at once: the key's entry reads `FULL` in the old
//! table until then, so no first request publishes the key in the new one.
//!
//! # The models, and their broken twins (`claim/models.rs`)
//!
//! * two inserters of one key, landing in two groups: one `FULL` entry,
//!   both inserters deciding on its cell (capacity 1: exactly one
//!   admitted); twins: a resolution that scans with plain `Acquire` loads,
//!   and an insert with no resolution at all, both over-admit;
//! * two keys into one group: both found, each decided once; twin: a claim
//!   made by a load and a store, which loses a key;
//! * an insert (or two of one key) racing a rebuild: the key found
//!   exactly once, in the new table, every old key moved, and every insert
//!   made with no lock; twins: a rebuild that does not seal, which strands
//!   the entry in the old table; a move placed by a load and a store, which
//!   writes the slot an insert into the linked table claimed; and an
//!   inserter that checks for the link and the lock before it takes the
//!   gate's mutex, which sleeps through the link's announcement (the model
//!   counts the gate's openings, and catches one between the check and the
//!   sleep: the hang itself is a deadlock loom cannot unwind from);
//! * a first request of a key the old table holds, racing that key's
//!   move: one entry, in the new table; twin: an insert into the linked
//!   table that does not search the old one, which makes two;
//! * an inserter stalled for good after publishing, a second inserter of
//!   its key and a removal of the entry: the second returns (it resolves
//!   the stalled slot itself) on a slot that held the entry, and the key
//!   has at most one entry; twin: a loser that only looks again, which
//!   loops for ever once the entry that won is removed (loom's bound on
//!   branches catches it);
//! * the same with a rebuild beside it: nothing left `FULL` or `PENDING`
//!   in the old table; twin: a seal that leaves given-up lanes revivable,
//!   which lets a loser publish again in a table the rebuild has left,
//!   stranding its entry there.

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize, Ordering};
use loom::sync::{Condvar, Mutex};
use loom::thread;

/// Lanes per control word.
const LANES: usize = 4;
/// Groups per table.
const GROUPS: usize = 2;

const EMPTY: u8 = 0x00;
const DELETED: u8 = 0x01;
const MOVED: u8 = 0x02;
const CLAIMED: u8 = 0x03;
const SEALED: u8 = 0x04;
const GIVEN_UP: u8 = 0x05;
/// `PENDING`'s two high bits; its low six are the key's.
const PENDING: u8 = 0x40;
/// `FULL`'s high bit; its low seven are the key's.
const FULL: u8 = 0x80;

fn pending(key: u8) -> u8 {
    PENDING | (key & 0x3F)
}

fn full(key: u8) -> u8 {
    FULL | (key & 0x7F)
}

fn lane(word: u32, lane: usize) -> u8 {
    (word >> (lane * 8)) as u8
}

fn with(word: u32, lane: usize, byte: u8) -> u32 {
    (word & !(0xFF << (lane * 8))) | (u32::from(byte) << (lane * 8))
}

/// Whether `byte` is a lane that may hold `key`, published: `PENDING` or
/// `FULL` with the key's bits.
fn may_hold(byte: u8, key: u8) -> bool {
    byte == pending(key) || byte == full(key)
}

/// Whether a probe stops after this group: it holds an `EMPTY` or a
/// `SEALED` lane.
fn stops(word: u32) -> bool {
    (0..LANES).any(|l| matches!(lane(word, l), EMPTY | SEALED))
}

/// How a model breaks the protocol (each broken twin sets one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Break {
    /// The protocol as designed.
    None,
    /// The resolution's scan reads words by plain `Acquire` loads.
    LoadScan,
    /// No resolution: a published slot is made `FULL` at once.
    NoResolve,
    /// A claim made by a load and a store.
    RacyClaim,
    /// A rebuild that moves `FULL` entries without sealing first.
    NoSeal,
    /// An inserter that lost, finding no entry (the one that won removed),
    /// looks again rather than publishing its slot again.
    NoRevive,
    /// A seal that leaves given-up lanes revivable.
    ReviveSealed,
    /// A publication made `FULL` at once whenever its own word holds no
    /// other lane tagged for the key, wherever the slot is.
    AloneAnywhere,
    /// A publication made `FULL` at once with no `EMPTY` lane left in its
    /// group (a racing inserter of the key may have gone on to the next
    /// group).
    AloneInAFullGroup,
    /// A publication past the home group made `FULL` at once when the
    /// groups before it hold no lane tagged for the key, a lane `CLAIMED`
    /// there (another inserter's, not yet published) passed over.
    PastAClaim,
    /// The same, a `GIVEN_UP` lane there (a loser's, which it may publish
    /// again) passed over.
    PastALoser,
    /// A rebuild's move placed by a load and a store of the word, as if no
    /// one else wrote the linked table.
    RacyPut,
    /// An insert into the linked table that does not search the old one
    /// first.
    NoOldSearch,
    /// A first request that checks for the lock and the link before it
    /// counts itself at the gate and takes the gate's mutex, and then
    /// sleeps there.
    CheckOutsideGate,
    /// An announcement that reads the count of waiters at the gate with a
    /// plain load, and a waiter that counts itself with a plain store.
    PlainWaiters,
}

/// How a resolution ended for the slot it resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolved {
    /// The slot is the key's entry.
    Won,
    /// The slot was given up: another is, or will be, the entry.
    Lost,
}

/// One table: control words, keys, and each slot's cell (a budget of one
/// unit: `0` unspent, `1` spent).
struct Table {
    ctrl: Vec<AtomicU32>,
    keys: Vec<UnsafeCell<u8>>,
    cells: Vec<AtomicU8>,
    /// Set by a rebuild before it seals the table (the map's link to the
    /// next table).
    sealed: AtomicBool,
}

impl Table {
    fn new() -> Self {
        Self {
            ctrl: (0..GROUPS).map(|_| AtomicU32::new(0)).collect(),
            keys: (0..GROUPS * LANES).map(|_| UnsafeCell::new(0)).collect(),
            cells: (0..GROUPS * LANES).map(|_| AtomicU8::new(0)).collect(),
            sealed: AtomicBool::new(false),
        }
    }

    /// A table holding `keys` `FULL` from slot 0 on, set up before the
    /// model's threads start.
    fn holding(keys: &[u8]) -> Self {
        let table = Self::new();
        for (index, &key) in keys.iter().enumerate() {
            table.keys[index].with_mut(|slot| {
                // SAFETY: no other thread exists yet.
                unsafe { *slot = key };
            });
            let group = &table.ctrl[index / LANES];
            // Relaxed: no other thread exists yet; spawning orders it.
            let word = group.load(Ordering::Relaxed);
            group.store(with(word, index % LANES, full(key)), Ordering::Relaxed);
        }
        table
    }

    /// A table holding `old`, and `key` published in the next slot
    /// (`PENDING`) by an inserter stalled for good, set up before the
    /// model's threads start.
    fn with_stalled(old: &[u8], key: u8) -> Self {
        Self::holding(old).then(&[(key, pending(key))])
    }

    /// This table with `lanes` (a key and its lane's tag each) in the slots
    /// after the `FULL` ones, in group 0, set up before the model's threads
    /// start.
    fn then(self, lanes: &[(u8, u8)]) -> Self {
        // Relaxed: no other thread exists yet; spawning orders it.
        let mut word = self.ctrl[0].load(Ordering::Relaxed);
        let first = (0..LANES)
            .find(|&l| lane(word, l) == EMPTY)
            .unwrap_or(LANES);
        for (index, &(key, tag)) in (first..).zip(lanes) {
            self.keys[index].with_mut(|slot| {
                // SAFETY: no other thread exists yet.
                unsafe { *slot = key };
            });
            word = with(word, index, tag);
        }
        // Relaxed: as above.
        self.ctrl[0].store(word, Ordering::Relaxed);
        self
    }

    /// The key in slot `index`, whose lane was read `PENDING` or `FULL` by
    /// an acquiring read of its word (or which this thread wrote).
    fn key(&self, index: usize) -> u8 {
        // SAFETY: the key was written before the release that published
        // the lane, which the caller's read acquired; it is never written
        // again while the table lives.
        self.keys[index].with(|slot| unsafe { *slot })
    }

    /// Reads group `group`'s word for a resolution: a read-modify-write
    /// that changes nothing (`AcqRel`: see "Why one entry"), or, for the
    /// broken twin, an `Acquire` load.
    fn scan_read(&self, group: usize, broken: Break) -> u32 {
        if broken == Break::LoadScan {
            // Acquire: pairs with the publishing compare-and-swap, but
            // orders nothing against this thread's own publication.
            self.ctrl[group].load(Ordering::Acquire)
        } else {
            // AcqRel: acquires the keys of the lanes it reads published,
            // and releases this thread's own publication to the next
            // read-modify-write of this word (see "Why one entry").
            self.ctrl[group].fetch_or(0, Ordering::AcqRel)
        }
    }

    /// Changes slot `index`'s lane from `from` to `to`, whatever the other
    /// lanes do meanwhile: `Err` with the lane found if it is not `from`.
    fn swap_lane(&self, index: usize, from: u8, to: u8) -> Result<(), u8> {
        let (group, l) = (&self.ctrl[index / LANES], index % LANES);
        // Acquire: the lane found is acted on (a `FULL` one's key read).
        let mut word = group.load(Ordering::Acquire);
        loop {
            if lane(word, l) != from {
                return Err(lane(word, l));
            }
            // AcqRel: release publishes what this thread wrote before (a
            // key, for `CLAIMED → PENDING`) and continues the word's
            // release sequence; acquire as above, on failure too.
            match group.compare_exchange(
                word,
                with(word, l, to),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(now) => word = now,
            }
        }
    }

    /// Claims the first `EMPTY` lane of the probe sequence: `None` if the
    /// probe meets a `SEALED` lane first (a rebuild is under way).
    fn claim(&self, broken: Break) -> Option<usize> {
        for (g, group) in self.ctrl.iter().enumerate() {
            // Acquire: as in `swap_lane`.
            let mut word = group.load(Ordering::Acquire);
            loop {
                if (0..LANES).any(|l| lane(word, l) == SEALED) {
                    return None;
                }
                let Some(l) = (0..LANES).find(|&l| lane(word, l) == EMPTY) else {
                    break;
                };
                if broken == Break::RacyClaim {
                    // The broken twin: nothing stops another claimer
                    // between this load and this store.
                    thread::yield_now();
                    group.store(with(word, l, CLAIMED), Ordering::Release);
                    return Some(g * LANES + l);
                }
                // Acquire on success and failure: as in `swap_lane`; the
                // claim publishes nothing (the slot is written after it).
                match group.compare_exchange(
                    word,
                    with(word, l, CLAIMED),
                    Ordering::Acquire,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Some(g * LANES + l),
                    Err(now) => word = now,
                }
            }
        }
        None
    }

    /// Resolves slot `s`, holding `key`, read `PENDING` by this thread (or
    /// published by it): see "The protocol", step 4.
    /// `known` is slot `s`'s group and its word as this thread's
    /// publication left it: the scan is then a publisher's (as the map's
    /// is): a `SeqCst` fence, that word as the compare-and-swap read it,
    /// and `Acquire` loads of the other groups. Without `known` (a helper,
    /// a publication again, the rebuild) every word is read by a
    /// read-modify-write. The twin `LoadScan` drops the fence (and reads by
    /// plain loads where a read-modify-write is due).
    fn resolve(&self, s: usize, key: u8, broken: Break, known: Option<(usize, u32)>) -> Resolved {
        let give_up = |table: &Self| match table.swap_lane(s, pending(key), GIVEN_UP) {
            // Given up by this call or another resolver's.
            Ok(()) | Err(GIVEN_UP | DELETED) => Resolved::Lost,
            // Made `FULL` (and maybe moved since) by another resolver,
            // whose scan found it the key's entry: the broken twins
            // reach this with two entries, which the models catch.
            Err(_) => Resolved::Won,
        };
        if known.is_some() && broken != Break::LoadScan {
            // SeqCst: pairs with every other publisher's fence: the
            // store-buffering outcome (both scans miss the other's
            // publication) is ruled out.
            loom::sync::atomic::fence(Ordering::SeqCst);
        }
        for g in 0..GROUPS {
            let word = match known {
                Some((at, word)) if at == g => word,
                // Acquire: the keys of the lanes published; the fence
                // orders it after this thread's publication.
                Some(_) => self.ctrl[g].load(Ordering::Acquire),
                None => self.scan_read(g, broken),
            };
            for l in 0..LANES {
                let t = g * LANES + l;
                let byte = lane(word, l);
                if t == s || !may_hold(byte, key) || self.key(t) != key {
                    continue;
                }
                if byte == full(key) || t < s {
                    return give_up(self);
                }
                // A later PENDING slot of the key: give it up.
                if self.swap_lane(t, pending(key), GIVEN_UP) == Err(full(key)) {
                    return give_up(self);
                }
            }
            if stops(word) {
                break;
            }
        }
        match self.swap_lane(s, pending(key), full(key)) {
            Ok(()) => Resolved::Won,
            Err(GIVEN_UP | DELETED) => Resolved::Lost,
            // Resolved `FULL` by a helper (and maybe moved since).
            Err(_) => Resolved::Won,
        }
    }

    /// The key's entry once its inserter's own slot `s` was given up: a
    /// `FULL` lane, or, helping, the earliest `PENDING` one resolved; or,
    /// if there is neither (the entry that won was removed since, its cell
    /// dead), `s` itself published again. `None` only if the table is
    /// sealed and neither is found (a rebuild moved the entry on).
    fn winner(&self, s: usize, key: u8, broken: Break) -> Option<usize> {
        loop {
            let mut earliest = None;
            'scan: for g in 0..GROUPS {
                let word = self.scan_read(g, broken);
                for l in 0..LANES {
                    let t = g * LANES + l;
                    let byte = lane(word, l);
                    if !may_hold(byte, key) || self.key(t) != key {
                        continue;
                    }
                    if byte == full(key) {
                        return Some(t);
                    }
                    if earliest.is_none() {
                        earliest = Some(t);
                    }
                }
                if stops(word) {
                    break 'scan;
                }
            }
            match earliest {
                Some(t) => {
                    let _ = self.resolve(t, key, broken, None);
                }
                // Sealed: the entry may have moved on.
                // Acquire: pairs with the rebuild's Release store.
                None if self.sealed.load(Ordering::Acquire) => return None,
                // The broken twin: look again, and again.
                None if broken == Break::NoRevive => {}
                // Not one published lane of the key: either the scan read a
                // group before the earliest slot's publication and a later
                // group after that slot gave the others up (the earliest
                // published slot is given up only once a `FULL` one exists),
                // or the entry that won has been removed since. Publish `s`
                // again (it never was `FULL`, so it is this inserter's to
                // revive: `DELETED → PENDING`) and resolve it as a new
                // publication: "Why one entry" holds of each publication.
                None => match self.swap_lane(s, GIVEN_UP, pending(key)) {
                    Ok(()) => {
                        if self.resolve(s, key, broken, None) == Resolved::Won {
                            return Some(s);
                        }
                    }
                    // Sealed (a rebuild under way, not linked yet): the
                    // entry is the new table's to take.
                    Err(DELETED) => return None,
                    Err(_) => {}
                },
            }
        }
    }

    /// Inserts `key` with no lock: the slot that holds its entry, or `None`
    /// if a rebuild sealed the claim (the caller goes to the lock).
    fn insert(&self, key: u8, broken: Break) -> Option<usize> {
        let s = self.claim(broken)?;
        self.keys[s].with_mut(|slot| {
            // SAFETY: the lane is CLAIMED by this thread: no one else reads
            // or writes the slot until it is published.
            unsafe { *slot = key };
        });
        let (_, word) = match self.publish(s, key, broken) {
            Err(sealed) => {
                debug_assert_eq!(sealed, MOVED);
                // Sealed by a rebuild: the key and value are this thread's
                // again (no one read them), and the slot owns nothing.
                let _ = self.key(s);
                return None;
            }
            // Alone in its probe: decided by the publication itself.
            Ok((tag, _)) if tag == full(key) => return Some(s),
            Ok(published) => published,
        };
        if broken == Break::NoResolve {
            let _ = self.swap_lane(s, pending(key), full(key));
            return Some(s);
        }
        match self.resolve(s, key, broken, Some((s / LANES, word))) {
            Resolved::Won => Some(s),
            Resolved::Lost => self.winner(s, key, broken),
        }
    }

    /// Whether every group before `group` in the probe (from group 0,
    /// every key's home) holds only lanes that can never become the key's
    /// entry: `FULL` or `PENDING` with another key's bits, `DELETED` or
    /// `MOVED` (the map's `Table::settled_before`). The claim passed each
    /// of them with no `EMPTY` lane, and a lane never becomes `EMPTY`
    /// again, so a lane another inserter of the key claimed there before
    /// this claim is read `CLAIMED` or later here, by any load. The twins
    /// pass over a `CLAIMED` lane, or a `GIVEN_UP` one.
    fn settled_before(&self, group: usize, key: u8, broken: Break) -> bool {
        self.ctrl[..group].iter().all(|ctrl| {
            // Relaxed: only the tags are read, and no key; coherence with
            // this thread's own earlier read of the word (its claim's pass)
            // is what the rule needs.
            let word = ctrl.load(Ordering::Relaxed);
            (0..LANES).all(|l| match lane(word, l) {
                CLAIMED => broken == Break::PastAClaim,
                GIVEN_UP => broken == Break::PastALoser,
                byte => !may_hold(byte, key),
            })
        })
    }

    /// Publishes claimed slot `s` (step 3): `FULL` at once if its group
    /// still holds an `EMPTY` lane and no other lane tagged for the key
    /// (the compare-and-swap reads that word), and every group before it
    /// is settled ([`Table::settled_before`]): then no other slot of the
    /// key can become `FULL` unless its resolution sees this one (see "The
    /// protocol", step 3); `PENDING` otherwise. The tag published and the word it left, or
    /// `Err` with the lane found if a rebuild sealed it.
    fn publish(&self, s: usize, key: u8, broken: Break) -> Result<(u8, u32), u8> {
        let (group, l) = (&self.ctrl[s / LANES], s % LANES);
        // Relaxed: the compare-and-swap checks what it read.
        let mut word = group.load(Ordering::Relaxed);
        loop {
            if lane(word, l) != CLAIMED {
                return Err(lane(word, l));
            }
            let untagged = (0..LANES).all(|o| !may_hold(lane(word, o), key));
            let has_empty = (0..LANES).any(|o| lane(word, o) == EMPTY);
            let alone = match broken {
                Break::AloneAnywhere => untagged,
                Break::AloneInAFullGroup => untagged && self.settled_before(s / LANES, key, broken),
                _ => has_empty && untagged && self.settled_before(s / LANES, key, broken),
            };
            let tag = if alone { full(key) } else { pending(key) };
            // AcqRel: the release half publishes the key; the acquire half
            // reads the other lanes, as the scan's read-modify-write does.
            let new = with(word, l, tag);
            match group.compare_exchange(word, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok((tag, new)),
                Err(now) => word = now,
            }
        }
    }

    /// Places `key`, moved from the old table, in the linked one (the map's
    /// `Table::put`): claimed as an insert claims, written, and published
    /// `FULL` at once by one add to its word, with no resolution (no other slot of the key is ever
    /// published: an insert into the linked table searches the old one
    /// first, where the key reads `FULL` until this publication). The twin
    /// `RacyPut` writes the slot of the first `EMPTY` lane and stores the
    /// word, as if it were the table's only writer.
    fn put(&self, key: u8, broken: Break) -> usize {
        if broken == Break::RacyPut {
            for (g, group) in self.ctrl.iter().enumerate() {
                // Acquire: as in `swap_lane`.
                let word = group.load(Ordering::Acquire);
                if let Some(l) = (0..LANES).find(|&l| lane(word, l) == EMPTY) {
                    let s = g * LANES + l;
                    self.keys[s].with_mut(|slot| {
                        // SAFETY: none: the broken twin's race, which loom
                        // reports.
                        unsafe { *slot = key };
                    });
                    // Release: publishes the key, but loses any lane
                    // claimed since the load.
                    group.store(with(word, l, full(key)), Ordering::Release);
                    return s;
                }
            }
            unreachable!("the linked table has room");
        }
        let s = self.claim(Break::None).expect("only a rebuild seals");
        self.keys[s].with_mut(|slot| {
            // SAFETY: the lane is CLAIMED by this thread.
            unsafe { *slot = key };
        });
        // One add takes the lane from CLAIMED to its tag (no carry): only a
        // seal changes a CLAIMED lane, and only this rebuild seals.
        // AcqRel: the release half publishes the key, as the insert's
        // publication does; a read-modify-write continues the word's
        // release sequence and loses no other lane.
        let before = self.ctrl[s / LANES].fetch_add(
            u32::from(full(key) - CLAIMED) << ((s % LANES) * 8),
            Ordering::AcqRel,
        );
        assert_eq!(
            lane(before, s % LANES),
            CLAIMED,
            "only a rebuild seals a claim"
        );
        s
    }

    /// Removes `key`'s entry, as a removal of a dead entry does under the
    /// writers' lock (which no claim takes): `FULL → DELETED`.
    fn remove(&self, key: u8) {
        for t in 0..GROUPS * LANES {
            // Acquire: the key of a lane read `FULL`.
            let word = self.ctrl[t / LANES].load(Ordering::Acquire);
            if lane(word, t % LANES) == full(key) && self.key(t) == key {
                let _ = self.swap_lane(t, full(key), DELETED);
            }
        }
    }

    /// The `FULL` slots holding `key`, for the checks after a model's race.
    fn entries(&self, key: u8) -> Vec<usize> {
        (0..GROUPS * LANES)
            .filter(|&t| {
                // Acquire: after the join, for the key's sake.
                let word = self.ctrl[t / LANES].load(Ordering::Acquire);
                lane(word, t % LANES) == full(key) && self.key(t) == key
            })
            .collect()
    }

    /// Decides one unit on the cell of slot `index`: true iff admitted.
    fn decide(&self, index: usize) -> bool {
        // AcqRel: the cell's own compare-and-swap (the crate's `apply`).
        self.cells[index]
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// The shard: its current table and the one a rebuild publishes, and the
/// writers' lock (rebuilds, and inserts whose claim a rebuild sealed).
struct Shard {
    tables: [Table; 2],
    current: AtomicUsize,
    writers: Mutex<()>,
    /// The gate (the map's `Gate`): its mutex, and the condition a first
    /// request whose claim a rebuild sealed sleeps on until the writers'
    /// lock is let go or the new table linked.
    gate: Mutex<()>,
    opened: Condvar,
    /// First requests at the gate, checking or asleep: an announcement
    /// takes the gate's mutex only if there is one.
    waiters: AtomicUsize,
}

impl Shard {
    /// A shard with `old` as its table and an empty one for a rebuild.
    fn new(old: Table) -> Self {
        Self {
            tables: [old, Table::new()],
            current: AtomicUsize::new(0),
            writers: Mutex::new(()),
            gate: Mutex::new(()),
            opened: Condvar::new(),
            waiters: AtomicUsize::new(0),
        }
    }

    /// Wakes the first requests sleeping at the gate: made by the thread
    /// that let the writers' lock go, or linked the new table, after it did;
    /// only if one is counted there (the map's `Gate::open`).
    fn open(&self, broken: Break) {
        let waiting = if broken == Break::PlainWaiters {
            // Acquire: a load, which may miss a waiter counted meanwhile.
            self.waiters.load(Ordering::Acquire)
        } else {
            // AcqRel: a read-modify-write that changes nothing, after the
            // event: it reads every waiter counted before it, and a waiter
            // counted after it synchronizes with it, and sees the event.
            self.waiters.fetch_add(0, Ordering::AcqRel)
        };
        if waiting != 0 {
            let _gate = self.gate.lock().unwrap();
            self.opened.notify_all();
        }
    }

    /// The writers' lock, held by `work`, then let go and announced at the
    /// gate (the map's `Locked`).
    fn with_writers<R>(&self, broken: Break, work: impl FnOnce() -> R) -> R {
        let held = self.writers.lock().unwrap();
        let done = work();
        drop(held);
        self.open(broken);
        done
    }

    /// An insert of a new key: with no lock into the current table, or,
    /// while a rebuild moves that table's entries to the one it linked,
    /// into the linked one (the map's `Map::insert_moving`; true); or, if
    /// the rebuild sealed the claim before it linked the new table, it
    /// waits at the gate (the map's `Map::wait_at_gate`) for the link, or
    /// the table published, and tries again (true), or for the writers'
    /// lock let go with neither, and inserts under it (false).
    fn insert(&self, key: u8, broken: Break) -> bool {
        // Acquire: pairs with the rebuild's Release stores.
        let current = self.current.load(Ordering::Acquire);
        let table = &self.tables[current];
        // Acquire: pairs with the rebuild's Release store (in the map, the
        // old table's link to the new one): the old table holds every
        // entry it ever will, each `FULL` until its copy is published in
        // the new one.
        if table.sealed.load(Ordering::Acquire) {
            let next = &self.tables[1];
            let found = (broken != Break::NoOldSearch && !table.entries(key).is_empty())
                || !next.entries(key).is_empty();
            if !found {
                let _ = next.insert(key, broken).expect("only a rebuild seals");
            }
            return true;
        }
        if table.insert(key, broken).is_some() {
            return true;
        }
        // Checked under the gate's mutex, counted at the gate (the twin
        // checks before either): an event announced after the check then
        // wakes the sleep.
        let outside = broken == Break::CheckOutsideGate;
        let mut waiting = None;
        if !outside {
            waiting = Some(self.gate.lock().unwrap());
            self.count_in(broken);
        }
        loop {
            // Acquire: as above.
            let now = self.current.load(Ordering::Acquire);
            let wake = if now != current || self.tables[now].sealed.load(Ordering::Acquire) {
                Some(true)
            } else {
                self.writers.try_lock().ok().map(|held| {
                    let table = &self.tables[now];
                    if table.entries(key).is_empty() {
                        let _ = table.insert(key, broken).expect("no seal in a new table");
                    }
                    drop(held);
                    false
                })
            };
            if let Some(moved) = wake {
                if waiting.is_some() || !outside {
                    // Relaxed: a count too high costs an announcement the
                    // mutex, no more.
                    self.waiters.fetch_sub(1, Ordering::Relaxed);
                }
                drop(waiting);
                if !moved {
                    self.open(broken);
                    return false;
                }
                return self.insert(key, broken);
            }
            let gate = match waiting.take() {
                Some(gate) => gate,
                None => {
                    let gate = self.gate.lock().unwrap();
                    self.count_in(broken);
                    gate
                }
            };
            waiting = Some(self.opened.wait(gate).unwrap());
        }
    }

    /// Counts a first request in at the gate, before its check.
    fn count_in(&self, broken: Break) {
        if broken == Break::PlainWaiters {
            // Relaxed: a load and a store, which an announcement's plain
            // load may miss.
            let now = self.waiters.load(Ordering::Relaxed);
            self.waiters.store(now + 1, Ordering::Relaxed);
        } else {
            // AcqRel: see `open`.
            self.waiters.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The rebuild: seal, resolve what is pending, move, publish (see the
    /// module docs). Holding the writers' lock; never waits for an
    /// inserter.
    fn rebuild(&self, broken: Break) {
        self.with_writers(broken, || self.rebuild_held(broken));
    }

    /// [`Shard::rebuild`], holding the writers' lock.
    fn rebuild_held(&self, broken: Break) {
        let (old, new) = (&self.tables[0], &self.tables[1]);
        if broken != Break::NoSeal {
            for group in &old.ctrl {
                // AcqRel: acquires each pending lane's key; continues the
                // word's release sequence.
                let _ = group.fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                    Some((0..LANES).fold(word, |sealed, l| match lane(word, l) {
                        EMPTY => with(sealed, l, SEALED),
                        CLAIMED => with(sealed, l, MOVED),
                        // No longer its inserter's to revive: it waits at
                        // the gate, for the table this rebuild links.
                        GIVEN_UP if broken != Break::ReviveSealed => with(sealed, l, DELETED),
                        _ => sealed,
                    }))
                });
            }
            for index in 0..GROUPS * LANES {
                // Acquire: the pending lane's key.
                let word = old.ctrl[index / LANES].load(Ordering::Acquire);
                let byte = lane(word, index % LANES);
                if byte & 0xC0 == PENDING {
                    let _ = old.resolve(index, old.key(index), broken, None);
                }
            }
        }
        // Linked only now, once no entry can appear in the old table (the
        // map sizes the new table here, for the entries it will move).
        // Release: pairs with the inserters' Acquire loads (in `insert` and
        // `winner`).
        old.sealed.store(true, Ordering::Release);
        // First requests sleeping at the gate go on into the new table.
        self.open(broken);
        for index in 0..GROUPS * LANES {
            // Acquire: as above.
            let word = old.ctrl[index / LANES].load(Ordering::Acquire);
            let byte = lane(word, index % LANES);
            if byte & FULL == 0 {
                continue;
            }
            let key = old.key(index);
            let to = new.put(key, broken);
            // Relaxed: the cell's state moves with the entry (the
            // forwarding protocol's part, not modelled here).
            new.cells[to].store(old.cells[index].load(Ordering::Relaxed), Ordering::Relaxed);
            let moved = old.swap_lane(index, byte, MOVED);
            assert!(moved.is_ok(), "a FULL lane changes only under the lock");
        }
        // Release: publishes the new table's entries to the inserters'
        // Acquire load.
        self.current.store(1, Ordering::Release);
    }
}

mod models;
