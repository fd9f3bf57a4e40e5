//! Model 5 (issue 6): eviction racing checks on the same client.
//!
//! The client's entry holds a state that is idle at the frozen instant of
//! the model (a request admitted long ago), so the evictor may retire it
//! while two checks race it. Each check runs the crate's own protocol,
//! `check_or_insert` (the function the limiter calls), and the evictor the
//! crate's own step of a sweep, `__loom::evict` (retire the cell if idle,
//! by compare-and-swap to the tombstone; then remove the entry only if its
//! cell is dead), over a loom-aware stand-in for the map with the
//! `Index` + `Purge` contract: a `loom::sync::Mutex<HashMap<..>>` that is
//! locked only to look up, insert or remove, never while a check runs on a
//! cell.
//!
//! Since the old state is idle, it is equivalent to a fresh one: in every
//! interleaving exactly `capacity` of the checks are admitted (none lost,
//! none doubled), and at the end the map holds one live cell that shows all
//! of them. Both cells are modelled: the word cell (token bucket) and the
//! log cell, whose multi-word eviction is a handshake on its `life` word.
//!
//! The broken twin evicts without the tombstone: it checks that the cell is
//! idle and then removes the entry. A check that admits between the two is
//! lost with the entry, and a later check admits again on a fresh one;
//! loom finds that interleaving.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

use loom::sync::Arc;
use loom::thread;

use crate::arrival::{Arrival, Room};
use crate::stand_in::StandIn;
use tollgate::__loom::{check_or_insert, Algorithm, Index, Lapse, Mortal, Purge};

/// The client every thread asks for.
const KEY: &str = "alice";

/// The frozen instant of every check and of the evictor: long after the
/// old state's one admission at 0, which it has forgotten by now.
const NOW: u64 = 100;

/// How the evictor treats the entry: the crate's step, or the bug.
type Evict<A> = fn(&A, &StandIn<<A as Algorithm>::Cell>, &str, u64) -> bool;

/// The checker with the suite's bound (3, as `harness.rs`; overridden by
/// `LOOM_MAX_PREEMPTIONS`), never stopping early. Returns the interleavings
/// run and the fewest and most admissions seen.
pub(crate) fn check<F: Fn() -> u64 + Send + Sync + 'static>(
    name: &str,
    body: F,
) -> (usize, u64, u64) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.max_duration = None;
    builder.max_permutations = None;
    let runs = StdArc::new(AtomicUsize::new(0));
    let min = StdArc::new(AtomicU64::new(u64::MAX));
    let max = StdArc::new(AtomicU64::new(0));
    let start = Instant::now();
    {
        let (runs, min, max) = (runs.clone(), min.clone(), max.clone());
        builder.check(move || {
            runs.fetch_add(1, Relaxed);
            let admitted = body();
            min.fetch_min(admitted, Relaxed);
            max.fetch_max(admitted, Relaxed);
        });
    }
    let out = (runs.load(Relaxed), min.load(Relaxed), max.load(Relaxed));
    eprintln!(
        "loom model {name}: {} interleavings, {:.2?}, admitted {}..={}",
        out.0,
        start.elapsed(),
        out.1,
        out.2
    );
    out
}

/// Two checks of cost 1 and one evictor race on a client whose state
/// (`old`, idle at `NOW`) is in the map; `capacity` of the checks must be
/// admitted, and the map must end holding one live cell that shows them.
fn race<A>(name: &str, algorithm: A, old: fn(&A) -> A::Cell, evict: Evict<A>) -> (usize, u64, u64)
where
    A: Algorithm + Copy,
{
    let capacity = algorithm.capacity();
    assert!(capacity < 2, "two checks must offer more than the capacity");
    let label = name.to_owned();
    check(name, move || {
        let index = Arc::new(StandIn::holding(KEY, old(&algorithm)));
        let room = Arc::new(Room::new(None));
        let client = move |index: &StandIn<A::Cell>, room: &Room| -> u64 {
            u64::from(check_at(algorithm, index, room, NOW, false))
        };
        let evictor = {
            let (index, room) = (Arc::clone(&index), Arc::clone(&room));
            thread::spawn(move || {
                room.evicting(NOW);
                evict(&algorithm, &index, KEY, NOW)
            })
        };
        let other = {
            let (index, room) = (Arc::clone(&index), Arc::clone(&room));
            thread::spawn(move || client(&index, &room))
        };
        let mut admitted = client(&index, &room);
        admitted += other.join().unwrap();
        let _ = evictor.join().unwrap();

        let name = &label;
        assert!(
            admitted <= capacity,
            "{name}: over-admitted: {admitted} admitted with capacity {capacity}"
        );
        assert!(
            admitted >= capacity,
            "{name}: under-admitted: {admitted} admitted with capacity {capacity}"
        );
        let map = index.snapshot();
        assert_eq!(map.len(), 1, "{name}: one client, one entry");
        let kept = &map[KEY];
        assert!(!kept.is_dead(), "{name}: the map kept a dead cell");
        assert_eq!(
            algorithm.peek(kept, NOW, 1).remaining(),
            0,
            "{name}: lost an admission: the kept cell does not show it"
        );
        admitted
    })
}

/// One unit check of `KEY` through the crate's `check_or_insert`, by a
/// thread whose clock reads `reading` first (and, on the slow way, reads
/// again, unless `stale`).
pub(crate) fn check_at<A: Algorithm + Copy>(
    algorithm: A,
    index: &StandIn<A::Cell>,
    room: &Room,
    reading: u64,
    stale: bool,
) -> bool {
    check_coming(algorithm, index, room, reading, stale, false)
}

/// As [`check_at`], with a word algorithm's new client brought in born,
/// its first decision made before anyone can see it, as a limiter with no
/// cap brings it in (a log's comes in unborn, fresh from its reading).
fn check_born_at<A: Algorithm + Copy>(
    algorithm: A,
    index: &StandIn<A::Cell>,
    room: &Room,
    reading: u64,
    stale: bool,
) -> bool {
    check_coming(algorithm, index, room, reading, stale, !A::BORN_AT_READING)
}

fn check_coming<A: Algorithm + Copy>(
    algorithm: A,
    index: &StandIn<A::Cell>,
    room: &Room,
    reading: u64,
    stale: bool,
    born: bool,
) -> bool {
    let arrival = Arrival {
        stale,
        born,
        ..Arrival::at(algorithm, room, reading, false)
    };
    check_or_insert(
        index,
        KEY,
        reading,
        |cell: &A::Cell, now| algorithm.try_admit(cell, now, 1),
        &arrival,
    )
}

/// A check whose clock reading predates an eviction must not be judged on
/// the fresh state that replaces the evicted one at that reading.
///
/// The client's state admitted its capacity of 1 at 0 (idle from 10 on).
/// Thread X checks with a reading of 5, racing a thread that evicts the
/// state at 10 and then checks at 10 (Y), re-inserting the client. Once
/// both are done, Z checks at 15. X's reading sees a state that admitted at
/// 0 and is not idle until 10: judged on that state, X is denied; if X
/// finds the client gone, it reads its clock again, after the look that
/// found it so, and is judged no earlier than the eviction. Either way
/// exactly one of X, Y and Z is admitted, as the token rate allows. The
/// broken twin judges a new state at the reading taken before the look
/// (as with no second reading), so X can spend on it a refill that had
/// not happened by 5, and Z then gets a second admission within 10 ns of
/// X's.
///
/// Two racing threads, not three: a check that meets a new client's cell
/// while another thread is giving it room waits for that thread's next few
/// instructions, and two such waiters could yield to each other forever in
/// loom's unfair scheduler.
fn stale_reading<A>(name: &str, algorithm: A, stale: bool) -> (usize, u64, u64)
where
    A: Algorithm + Copy,
{
    assert_eq!(algorithm.capacity(), 1);
    let label = name.to_owned();
    check(name, move || {
        let index = Arc::new(StandIn::holding(KEY, admitted_at_zero(&algorithm)));
        let room = Arc::new(Room::new(None));
        let x = {
            let (index, room) = (Arc::clone(&index), Arc::clone(&room));
            thread::spawn(move || check_born_at(algorithm, &index, &room, 5, stale))
        };
        room.evicting(10);
        let _ = tollgate::__loom::evict(&algorithm, &*index, KEY, 10, &|t| room.evicting(t));
        let y = check_born_at(algorithm, &index, &room, 10, stale);
        let x = x.join().unwrap();
        let z = check_born_at(algorithm, &index, &room, 15, stale);
        let admitted = u64::from(x) + u64::from(y) + u64::from(z);
        let name = &label;
        assert!(
            admitted <= 1,
            "{name}: over-admitted: X(5) {x}, Y(10) {y}, Z(15) {z} after an admission at 0, capacity 1 per 10 ns"
        );
        assert!(admitted >= 1, "{name}: under-admitted: none of X, Y, Z");
        admitted
    })
}

#[test]
fn stale_reading_after_eviction_token_bucket() {
    let (_, min, max) = stale_reading("stale_reading/token_bucket", bucket(), false);
    assert_eq!((min, max), (1, 1));
}

#[test]
fn stale_reading_after_eviction_fixed_window() {
    let (_, min, max) = stale_reading("stale_reading/fixed_window", fixed(), false);
    assert_eq!((min, max), (1, 1));
}

#[test]
fn stale_reading_after_eviction_sliding_window_log() {
    let (_, min, max) = stale_reading("stale_reading/sliding_window_log", log(), false);
    assert_eq!((min, max), (1, 1));
}

#[test]
#[should_panic(expected = "over-admitted")]
fn stale_reading_judged_before_the_look_is_caught_token_bucket() {
    let _ = stale_reading("stale_reading/broken/token_bucket", bucket(), true);
}

#[test]
#[should_panic(expected = "over-admitted")]
fn stale_reading_judged_before_the_look_is_caught_fixed_window() {
    let _ = stale_reading("stale_reading/broken/fixed_window", fixed(), true);
}

#[test]
#[should_panic(expected = "over-admitted")]
fn stale_reading_judged_before_the_look_is_caught_sliding_window_log() {
    let _ = stale_reading("stale_reading/broken/sliding_window_log", log(), true);
}

fn fixed() -> tollgate::FixedWindow {
    // One request per 10 ns window: the window of 0 ends at 10.
    tollgate::__loom::fixed_window(1, Duration::from_nanos(10)).unwrap()
}

pub(crate) fn bucket() -> tollgate::TokenBucket {
    // One token per 10 ns: an admission at 0 is forgotten from 10 ns on.
    tollgate::__loom::token_bucket(1, Duration::from_nanos(10), 1).unwrap()
}

pub(crate) fn log() -> tollgate::SlidingWindowLog {
    tollgate::__loom::sliding_window_log(1, Duration::from_nanos(10)).unwrap()
}

/// The state after one admission at 0.
fn admitted_at_zero<A: Algorithm>(algorithm: &A) -> A::Cell {
    let cell = algorithm.new_cell();
    assert!(algorithm.admit(&cell, 0, 1));
    cell
}

#[test]
fn eviction_vs_checks_token_bucket() {
    let (_, min, max) = race(
        "eviction/token_bucket",
        bucket(),
        admitted_at_zero,
        evict_idle,
    );
    assert_eq!((min, max), (1, 1));
}

#[test]
fn eviction_vs_checks_sliding_window_log() {
    let (_, min, max) = race(
        "eviction/sliding_window_log",
        log(),
        admitted_at_zero,
        evict_idle,
    );
    assert_eq!((min, max), (1, 1));
}

#[test]
#[should_panic(expected = "over-admitted")]
fn eviction_without_tombstone_is_caught_token_bucket() {
    let _ = race(
        "eviction/broken/token_bucket",
        bucket(),
        admitted_at_zero,
        evict_without_tombstone,
    );
}

#[test]
#[should_panic(expected = "over-admitted")]
fn eviction_without_tombstone_is_caught_sliding_window_log() {
    let _ = race(
        "eviction/broken/sliding_window_log",
        log(),
        admitted_at_zero,
        evict_without_tombstone,
    );
}

/// The stand-in with a sweep's removal (`StandIn::remove_locked`) as its
/// `remove_if`: the broken evictor below removes a live entry, which
/// `Map::remove_if` never does, but a sweep under the shard's lock does.
struct Sweeping<'a, V>(&'a StandIn<V>);

impl<V: Mortal> Index<String, V> for Sweeping<'_, V> {
    fn with<Q, R, F>(&self, key: &Q, f: F) -> Result<R, F>
    where
        F: FnOnce(&V) -> R,
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.with(key, f)
    }

    type Miss = ();

    fn lookup<Q, R, F>(&self, key: &Q, f: F) -> Result<R, (F, ())>
    where
        F: FnOnce(&V) -> R,
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.lookup(key, f)
    }

    fn insert<R>(
        &self,
        miss: Option<&()>,
        key: String,
        value: V,
        lapsed: Option<impl Lapse<V>>,
        f: impl FnOnce(&V) -> R,
    ) -> Result<R, Option<V>> {
        self.0.insert(miss, key, value, lapsed, f)
    }
}

impl<V: Mortal> Purge<String, V> for Sweeping<'_, V> {
    fn remove_if<Q, F>(&self, key: &Q, condition: F) -> bool
    where
        F: FnOnce(&V) -> bool,
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.remove_locked(key, condition)
    }

    fn try_remove_if<Q, F>(&self, key: &Q, condition: F) -> Option<bool>
    where
        F: FnOnce(&V) -> bool,
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        Some(self.0.remove_locked(key, condition))
    }
}

/// The broken twin of `__loom::evict`: an evictor that checks that the
/// cell is idle and then removes the entry as a sweep does, with no
/// tombstone in between.
/// The crate's eviction; the race records the evictor's reading first
/// (`Room::evicting`).
fn evict_idle<A: Algorithm>(algorithm: &A, index: &StandIn<A::Cell>, key: &str, now: u64) -> bool {
    tollgate::__loom::evict(algorithm, index, key, now, &|_| ())
}

fn evict_without_tombstone<A: Algorithm>(
    algorithm: &A,
    index: &StandIn<A::Cell>,
    key: &str,
    now: u64,
) -> bool {
    crate::twins::evict_without_tombstone(algorithm, &Sweeping(index), key, now)
}
