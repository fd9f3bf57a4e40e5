//! What every model shares: the checker with the suite's preemption bound,
//! the race of client threads over one cell, and the measurements.
//!
//! The counters here are `std` atomics on purpose. They live outside the
//! model, in the test crate only, to count the interleavings loom runs and
//! the range of outcomes they reach; loom never sees them, and the shim rule
//! (`tests/sync_shim.rs`) covers `src/`, not the tests.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

use loom::sync::Arc;
use loom::thread;
use tollgate::__loom::{Algorithm, Life, LogCell, Mortal, Relocation, StateCell, Transitions};
use tollgate::{Clock, ManualClock, SlidingWindowLog};

use crate::twins::{RacyCell, RacyLog};

/// The suite's preemption bound. See "Bounds" in `main.rs` for why 3 is
/// enough; `LOOM_MAX_PREEMPTIONS` overrides it, and
/// `TOLLGATE_LOOM_UNBOUNDED=1` removes it (exhaustive search).
pub(crate) const PREEMPTION_BOUND: usize = 3;

/// The bound for races of five loom threads (three clients, a clock thread
/// and the joining main thread): at 3 each of these explores 0.6–0.9 M
/// interleavings (50–75 s); at 2 they still reach both ends of their
/// admission range and catch every racy twin, in a few seconds.
pub(crate) const WIDE_RACE_BOUND: usize = 2;

/// Which cell a model runs over: the real compare-and-swap cell, or the
/// deliberately broken one. The same model body takes either, for the word
/// cell ([`MakeCell::word`]) and the log cell ([`MakeCell::log`]) alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MakeCell {
    /// The crate's own cell.
    Real,
    /// The broken cell: a load followed by a store where the real one
    /// compares and swaps.
    Racy,
}

/// The real cell: its update (word) or slot claim (log) is a
/// compare-and-swap.
pub(crate) const REAL: MakeCell = MakeCell::Real;

/// The broken cell: its update (word) or slot claim (log) is a load
/// followed by a store.
pub(crate) const RACY: MakeCell = MakeCell::Racy;

impl MakeCell {
    /// A word cell holding `word`: the crate's `StateCell`, or the
    /// [`RacyCell`] twin.
    pub(crate) fn word(self, word: u64) -> WordCell {
        match self {
            Self::Real => WordCell::Real(StateCell::new(word)),
            Self::Racy => WordCell::Racy(RacyCell::new(word)),
        }
    }

    /// A fresh log cell for `log`: its own `new_cell`, or the [`RacyLog`]
    /// twin.
    pub(crate) fn log(self, log: &SlidingWindowLog) -> AnyLog {
        match self {
            Self::Real => AnyLog::Real(log.new_cell()),
            Self::Racy => AnyLog::Racy(RacyLog::new(log)),
        }
    }
}

/// A word cell a model runs over: the crate's, through the crate's own
/// `Algorithm` methods, or the broken twin, through the same pure
/// transitions.
#[derive(Debug)]
pub(crate) enum WordCell {
    Real(StateCell),
    Racy(RacyCell),
}

impl WordCell {
    /// A check of `cost` at `now`.
    pub(crate) fn admit<A>(&self, algorithm: &A, now: u64, cost: u64) -> bool
    where
        A: Algorithm<Cell = StateCell> + Transitions<Word = u64>,
    {
        match self {
            Self::Real(cell) => Algorithm::admit(algorithm, cell, now, cost),
            Self::Racy(cell) => cell.admit(algorithm, now, cost),
        }
    }

    /// How many unit requests the cell would admit at `now`.
    pub(crate) fn remaining<A>(&self, algorithm: &A, now: u64) -> u64
    where
        A: Algorithm<Cell = StateCell> + Transitions<Word = u64>,
    {
        match self {
            Self::Real(cell) => Algorithm::peek(algorithm, cell, now, 1).remaining(),
            Self::Racy(cell) => <A as Transitions>::remaining(algorithm, cell.load(), now),
        }
    }

    /// A booking of `cost` at `now`, however long it waits: its ready time.
    pub(crate) fn book<A>(&self, algorithm: &A, now: u64, cost: u64) -> u64
    where
        A: Algorithm<Cell = StateCell> + Transitions<Word = u64>,
    {
        match self {
            Self::Real(cell) => match Algorithm::reserve(algorithm, cell, now, cost, u64::MAX) {
                Some(tollgate::__loom::Booking::Granted(ticket, _)) => ticket.ready_at(),
                other => panic!("a booking with no limit on its wait: {other:?}"),
            },
            Self::Racy(cell) => cell.book(algorithm, now, cost),
        }
    }
}

impl Mortal for WordCell {
    fn life(&self) -> Life {
        match self {
            Self::Real(cell) => cell.life(),
            Self::Racy(cell) => cell.life(),
        }
    }

    fn claim(&self) -> Result<(), Life> {
        match self {
            Self::Real(cell) => cell.claim(),
            Self::Racy(cell) => cell.claim(),
        }
    }

    fn unclaim(&self) {
        match self {
            Self::Real(cell) => cell.unclaim(),
            Self::Racy(cell) => cell.unclaim(),
        }
    }

    fn refuse(&self) -> Result<(), Life> {
        match self {
            Self::Real(cell) => cell.refuse(),
            Self::Racy(cell) => cell.refuse(),
        }
    }

    fn relocate(&self) -> Relocation<Self> {
        match self {
            Self::Real(cell) => match cell.relocate() {
                Relocation::Dead => Relocation::Dead,
                Relocation::Same => Relocation::Same,
                Relocation::Moved(cell, seal) => Relocation::Moved(Self::Real(cell), seal),
            },
            Self::Racy(_) => Relocation::Same,
        }
    }

    fn forward(&self, seal: tollgate::__loom::Seal) -> bool {
        match self {
            Self::Real(cell) => cell.forward(seal),
            Self::Racy(_) => unreachable!("a racy cell moves as a handle, never forwarded"),
        }
    }

    fn retire_sealed(&self, seal: tollgate::__loom::Seal) -> bool {
        match self {
            Self::Real(cell) => cell.retire_sealed(seal),
            Self::Racy(_) => unreachable!("a racy cell moves as a handle, never retired so"),
        }
    }

    fn refresh(&self, newer: Self) {
        match (self, newer) {
            (Self::Real(cell), Self::Real(newer)) => cell.refresh(newer),
            _ => unreachable!("only a real cell's copy is refreshed"),
        }
    }
}

/// A log cell a model runs over: the crate's, through the crate's own
/// `Algorithm` methods, or the broken twin.
#[derive(Debug)]
pub(crate) enum AnyLog {
    Real(LogCell),
    Racy(RacyLog),
}

impl AnyLog {
    /// A check of `cost` at `now`.
    pub(crate) fn admit(&self, log: &SlidingWindowLog, now: u64, cost: u64) -> bool {
        match self {
            Self::Real(cell) => log.admit(cell, now, cost),
            Self::Racy(cell) => cell.admit(log, now, cost),
        }
    }

    /// How many slots are free at `now` (the quota's `remaining`).
    pub(crate) fn remaining(&self, log: &SlidingWindowLog, now: u64) -> u64 {
        match self {
            Self::Real(cell) => log.quota(cell, now).remaining(),
            Self::Racy(cell) => cell.free(log, now),
        }
    }

    /// Whether a unit check at `now` would pass (a peek).
    pub(crate) fn allows(&self, log: &SlidingWindowLog, now: u64) -> bool {
        match self {
            Self::Real(cell) => log.peek(cell, now, 1).is_allowed(),
            Self::Racy(cell) => cell.free(log, now) > 0,
        }
    }

    /// A booking of `cost` at `now`, however long it waits: its ready time.
    pub(crate) fn book(&self, log: &SlidingWindowLog, now: u64, cost: u64) -> u64 {
        match self {
            Self::Real(cell) => match log.reserve(cell, now, cost, u64::MAX) {
                Some(tollgate::__loom::Booking::Granted(ticket, _)) => ticket.ready_at(),
                other => panic!("a booking with no limit on its wait: {other:?}"),
            },
            Self::Racy(cell) => cell.book(log, now, cost),
        }
    }
}

/// What one run of [`check`] explored and reached.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Explored {
    /// Interleavings loom ran to completion.
    pub(crate) interleavings: usize,
    /// The fewest requests admitted in any of them.
    pub(crate) min_admitted: u64,
    /// The most requests admitted in any of them.
    pub(crate) max_admitted: u64,
}

/// Records the admissions of one interleaving; handed to the model body.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    min: StdArc<AtomicU64>,
    max: StdArc<AtomicU64>,
}

impl Tally {
    /// Notes that this interleaving admitted `n` requests.
    pub(crate) fn record(&self, n: u64) {
        self.min.fetch_min(n, Relaxed);
        self.max.fetch_max(n, Relaxed);
    }
}

/// Model-checks `body` under the suite's bound and reports what it took on
/// stderr (`-- --nocapture` shows it). `body` is run once per interleaving
/// and must [`Tally::record`] the admissions it saw.
pub(crate) fn check<F>(name: &str, body: F) -> Explored
where
    F: Fn(&Tally) + Send + Sync + 'static,
{
    check_bounded(name, PREEMPTION_BOUND, body)
}

/// [`check`] with a default bound of `bound` instead of the suite's.
pub(crate) fn check_bounded<F>(name: &str, bound: usize, body: F) -> Explored
where
    F: Fn(&Tally) + Send + Sync + 'static,
{
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("TOLLGATE_LOOM_UNBOUNDED").is_some() {
        builder.preemption_bound = None;
    } else if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(bound);
    }
    // Never stop early: a model passes only if every interleaving within the
    // bound passed.
    builder.max_duration = None;
    builder.max_permutations = None;
    let bound = builder.preemption_bound;

    let runs = StdArc::new(AtomicUsize::new(0));
    let tally = Tally {
        min: StdArc::new(AtomicU64::new(u64::MAX)),
        max: StdArc::new(AtomicU64::new(0)),
    };
    let start = Instant::now();
    let checked = {
        let runs = StdArc::clone(&runs);
        let tally = tally.clone();
        panic::catch_unwind(AssertUnwindSafe(|| {
            builder.check(move || {
                runs.fetch_add(1, Relaxed);
                body(&tally);
            });
        }))
    };
    if let Err(failure) = checked {
        // Loom stops at the first interleaving that fails; say which one,
        // then fail as the model did.
        eprintln!(
            "loom model {name}: FAILED in interleaving {} after {:.2?}",
            runs.load(Relaxed),
            start.elapsed()
        );
        panic::resume_unwind(failure);
    }
    let explored = Explored {
        interleavings: runs.load(Relaxed),
        min_admitted: tally.min.load(Relaxed),
        max_admitted: tally.max.load(Relaxed),
    };
    report(name, bound, explored, start.elapsed());
    explored
}

fn report(name: &str, bound: Option<usize>, e: Explored, took: Duration) {
    let bound = bound.map_or_else(|| "none".to_owned(), |b| b.to_string());
    eprintln!(
        "loom model {name}: preemption bound {bound}, {} interleavings, {:.2?}, admitted {}..={}",
        e.interleavings, took, e.min_admitted, e.max_admitted
    );
}

/// One race: `threads` clients check the same key `per_thread` times each,
/// reading the clock before every check, while (optionally) one more thread
/// moves the clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Race<A> {
    pub(crate) algorithm: A,
    /// Client threads, the model's main thread included.
    pub(crate) threads: usize,
    /// Unit-cost checks per client thread.
    pub(crate) per_thread: u64,
    /// The clock's reading before any check, ns.
    pub(crate) start: u64,
    /// If set, a clock thread advances the clock by this many ns once,
    /// racing the checks.
    pub(crate) advance: Option<u64>,
}

/// The state a race left behind, for the model's assertions.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Requests admitted, over all threads.
    pub(crate) admitted: u64,
    /// The clock's reading once every thread has finished, ns.
    pub(crate) end: u64,
    /// The client's cell.
    pub(crate) cell: Arc<WordCell>,
}

impl<A> Race<A>
where
    A: Algorithm<Cell = StateCell> + Transitions<Word = u64> + Copy,
{
    /// [`WIDE_RACE_BOUND`] for three clients and a clock thread, else the
    /// suite's bound.
    fn preemption_bound(&self) -> usize {
        if self.threads >= 3 && self.advance.is_some() {
            WIDE_RACE_BOUND
        } else {
            PREEMPTION_BOUND
        }
    }

    /// Total requests made.
    pub(crate) fn requests(&self) -> u64 {
        self.threads as u64 * self.per_thread
    }

    /// Runs the race once (one interleaving) over a cell made by `make`.
    pub(crate) fn run(&self, make: MakeCell) -> Outcome {
        let fresh = self.algorithm.new_cell().load();
        let cell = Arc::new(make.word(fresh));
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(self.start));

        let ticker = self.advance.map(|by| {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(Duration::from_nanos(by)))
        });
        // loom runs a spawned thread no earlier than the model's next sync
        // point, so a client on the main thread would always read the clock
        // before the ticker moves it. With a ticker, every client is spawned
        // and the main thread only joins them.
        let on_main = ticker.is_none();
        let spawned = self.threads - usize::from(on_main);
        let clients: Vec<_> = (0..spawned)
            .map(|_| {
                let (cell, clock, race) = (Arc::clone(&cell), clock.clone(), *self);
                thread::spawn(move || race.client(&cell, &clock))
            })
            .collect();
        let mut admitted = if on_main {
            self.client(&cell, &clock)
        } else {
            0
        };
        for client in clients {
            admitted += client.join().unwrap();
        }
        if let Some(ticker) = ticker {
            ticker.join().unwrap();
        }
        Outcome {
            admitted,
            end: clock.now_nanos(),
            cell,
        }
    }

    /// One client thread's checks; returns how many were admitted.
    fn client(&self, cell: &WordCell, clock: &ManualClock) -> u64 {
        (0..self.per_thread)
            .map(|_| u64::from(cell.admit(&self.algorithm, clock.now_nanos(), 1)))
            .sum()
    }
}

impl<A> Race<A>
where
    A: Algorithm<Cell = StateCell> + Transitions<Word = u64> + Copy,
{
    /// A model whose total is exact in every interleaving: the race offers
    /// more requests than `capacity()`, exactly `capacity()` are admitted,
    /// and the cell's word agrees (nothing left, so no admission was lost
    /// from it).
    pub(crate) fn exact(self, name: &str, make: MakeCell) -> Explored {
        let capacity = Algorithm::capacity(&self.algorithm);
        assert!(
            self.requests() > capacity,
            "{name}: offer more than capacity"
        );
        let label = name.to_owned();
        check_bounded(name, self.preemption_bound(), move |tally| {
            let name = &label;
            let out = self.run(make);
            tally.record(out.admitted);
            assert!(
                out.admitted <= capacity,
                "{name}: over-admitted: {} admitted with capacity {capacity}",
                out.admitted
            );
            assert!(
                out.admitted >= capacity,
                "{name}: under-admitted: {} admitted with capacity {capacity}",
                out.admitted
            );
            let left = out.cell.remaining(&self.algorithm, out.end);
            assert_eq!(
                left, 0,
                "{name}: over-admitted via a lost update: the word still offers {left} after {} admitted",
                out.admitted
            );
        })
    }

    /// A model with a moving clock, where the total is bounded: at least
    /// `capacity()` is admitted, and what was admitted plus what the word
    /// still offers at the end is at most `bound` (capacity plus what the
    /// clock's move refilled). `bound` comes from the algorithm's
    /// specification, worked out by each model.
    pub(crate) fn bounded(self, name: &str, make: MakeCell, bound: u64) -> Explored {
        let capacity = Algorithm::capacity(&self.algorithm);
        assert!(self.requests() > bound, "{name}: offer more than the bound");
        let label = name.to_owned();
        check_bounded(name, self.preemption_bound(), move |tally| {
            let name = &label;
            let out = self.run(make);
            tally.record(out.admitted);
            assert!(
                out.admitted <= bound,
                "{name}: over-admitted: {} admitted, bound {bound}",
                out.admitted
            );
            assert!(
                out.admitted >= capacity,
                "{name}: under-admitted: {} admitted with capacity {capacity}",
                out.admitted
            );
            let left = out.cell.remaining(&self.algorithm, out.end);
            assert!(
                out.admitted + left <= bound,
                "{name}: over-admitted via a lost update: {} admitted and {left} still on offer, bound {bound}",
                out.admitted
            );
        })
    }
}

/// Asserts that a real model's interleavings reached both ends of its
/// range, so the boundary paths (the last token, the refill, the rollover)
/// were really exercised and the bound is tight.
pub(crate) fn assert_reached(explored: Explored, min: u64, max: u64) {
    assert_eq!(
        (explored.min_admitted, explored.max_admitted),
        (min, max),
        "the model did not reach its boundary cases"
    );
}

/// Runs the ignored test `name` of this test binary alone, in a child
/// process, and returns whether it passed and what it wrote to stderr: for
/// a broken twin whose failure is a hang, which loom reports as a
/// deadlock by a panic it cannot unwind from (the process aborts).
pub(crate) fn run_ignored_alone(name: &str) -> (bool, String) {
    let this = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(this)
        .args([
            name,
            "--exact",
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .output()
        .expect("the test binary runs again");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts that the ignored test `name`, run alone by
/// [`run_ignored_alone`], fails with loom's report of a deadlock.
pub(crate) fn assert_deadlocks(name: &str) {
    let (passed, stderr) = run_ignored_alone(name);
    assert!(
        !passed && stderr.contains("deadlock; threads"),
        "{name}: no deadlock reported:\n{stderr}"
    );
}
