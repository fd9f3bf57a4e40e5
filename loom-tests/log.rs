//! Model 3: the sliding window log on one client.
//!
//! The log's cell (`src/cell/log.rs`) is a slot per admission holding its
//! expiry, each slot claimed by its own compare-and-swap, and a request of
//! cost `n > 1` claims `n` slots one by one and gives them back if a race
//! leaves it short. The models run that code (through `Algorithm::admit`)
//! with client threads racing for the log's last free slot:
//!
//! * **frozen**: `limit − 1` slots taken before the race, the clock frozen,
//!   2 or 3 threads making one unit check each: exactly one is admitted;
//! * **multi-cost**: an empty log of limit 2, a check of cost 2 racing
//!   checks of cost 1: the cost-2 check is admitted whole or gives back what
//!   it claimed;
//! * **across the boundary**: slots taken at 0 expire at `W` while a clock
//!   thread moves the clock from `W − 1` to `W` during the race.
//!
//! In every interleaving each model asserts:
//!
//! * the log's specification (the bound): in every window `(t − W, t]`
//!   ending at an admission, at most `limit` units were admitted, counting
//!   the pre-filled slots and timing each check by the clock reading it was
//!   made at;
//! * no slot claimed twice, no admission lost: once the threads are done,
//!   the slots the cell shows taken (`limit − quota().remaining()`) are
//!   exactly the admitted units still in the window, and `peek` agrees;
//! * the serial drain: more unit checks made afterwards, at the final
//!   instant, bring the admitted units in the window to exactly `limit`, so
//!   a multi-cost check that lost its race gave back every slot it held;
//! * the model's own lower bound (the one free slot is always taken), and,
//!   through `assert_reached`, that both ends of its range were reached.
//!
//! The broken twins in `broken.rs` run these very functions over
//! the `RacyLog` twin (`twins.rs`), whose slot claim is a load followed by a store:
//! two threads both claim the last slot, and the bound (or the slot count)
//! catches the over-admission.

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use tollgate::{Clock, ManualClock, SlidingWindowLog};

use crate::harness::{assert_reached, check, AnyLog, Explored, MakeCell, REAL};

/// Window width, ns. Any width works: the log keeps exact expiries.
const W: u64 = 10;

fn log(limit: u64) -> SlidingWindowLog {
    tollgate::__loom::sliding_window_log(limit, Duration::from_nanos(W)).unwrap()
}

/// One race on a log: `prefill` unit admissions at 0 before it, then one
/// client thread per entry of `costs` (the main thread takes the first)
/// making a check of each cost in turn, while (optionally) a clock thread
/// moves the clock.
#[derive(Debug, Clone, Copy)]
struct LogRace {
    limit: u64,
    /// Slots taken at instant 0, before any thread starts.
    prefill: u64,
    /// The clock's reading when the race starts, ns.
    start: u64,
    /// If set, a clock thread advances the clock by this many ns once.
    advance: Option<u64>,
    /// Each client thread's checks, by cost.
    costs: &'static [&'static [u64]],
    /// The fewest units the race must admit in every interleaving.
    at_least: u64,
}

/// What one interleaving of a [`LogRace`] left behind.
struct Outcome {
    /// The clock reading of every unit admitted during the race.
    times: Vec<u64>,
    /// The clock's reading once every thread has finished, ns.
    end: u64,
    cell: Arc<AnyLog>,
}

impl LogRace {
    /// Runs the race once (one interleaving) over a cell made by `make`.
    fn run(self, make: MakeCell) -> Outcome {
        let algorithm = log(self.limit);
        let cell = Arc::new(make.log(&algorithm));
        for _ in 0..self.prefill {
            assert!(cell.admit(&algorithm, 0, 1), "pre-fill");
        }
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(self.start));

        let ticker = self.advance.map(|by| {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(Duration::from_nanos(by)))
        });
        // With a clock thread, every client is a spawned thread and the
        // main thread only joins them: loom never schedules the clock
        // thread ahead of the main thread's first clock reading (measured:
        // in no interleaving does a client on the main thread read the
        // moved clock), so that client would never check after the
        // crossing, and the broken twin would go uncaught. With a frozen
        // clock the main thread is the first client, which spares loom a
        // thread.
        let on_main = if self.advance.is_some() { 0 } else { 1 };
        let clients: Vec<_> = self.costs[on_main..]
            .iter()
            .map(|&costs| {
                let (cell, clock) = (Arc::clone(&cell), clock.clone());
                thread::spawn(move || client(algorithm, &cell, &clock, costs))
            })
            .collect();
        let mut times = if on_main == 1 {
            client(algorithm, &cell, &clock, self.costs[0])
        } else {
            Vec::new()
        };
        for c in clients {
            times.extend(c.join().unwrap());
        }
        if let Some(ticker) = ticker {
            ticker.join().unwrap();
        }
        Outcome {
            times,
            end: clock.now_nanos(),
            cell,
        }
    }

    /// Model-checks the race over a cell made by `make`; see the module
    /// docs for what each interleaving must satisfy.
    fn check(self, name: &str, make: MakeCell) -> Explored {
        let requested: u64 = self.costs.iter().flat_map(|c| c.iter()).sum();
        assert!(
            self.prefill + requested > self.limit,
            "{name}: offer more than the limit"
        );
        let label = name.to_owned();
        check(name, move |tally| {
            let name = &label;
            let limit = self.limit;
            let algorithm = log(limit);
            let out = self.run(make);
            let units = out.times.len() as u64;
            tally.record(units);

            // The bound: at most `limit` units in any window (t − W, t].
            let mut all = vec![0; self.prefill as usize];
            all.extend(&out.times);
            for &t in &all {
                let in_window = all.iter().filter(|&&u| u <= t && u + W > t).count();
                assert!(
                    in_window as u64 <= limit,
                    "{name}: over-admitted: {in_window} units in the window ending at {t} ns, limit {limit} (race admitted at {:?})",
                    out.times
                );
            }
            assert!(
                units >= self.at_least,
                "{name}: under-admitted: {units} units admitted, at least {} expected",
                self.at_least
            );

            // No slot claimed twice, no admission lost.
            let live = all.iter().filter(|&&u| u + W > out.end).count() as u64;
            let free = out.cell.remaining(&algorithm, out.end);
            let taken = limit - free;
            assert!(
                taken >= live,
                "{name}: over-admitted via a slot claimed twice: {live} units in the window, {taken} slots taken"
            );
            assert!(
                taken <= live,
                "{name}: a slot held with no admission: {live} units in the window, {taken} slots taken"
            );
            assert_eq!(
                out.cell.allows(&algorithm, out.end),
                free > 0,
                "{name}: peek disagrees with the slots"
            );

            // The serial drain: the rest of the limit, and no more.
            let mut drained = 0;
            while drained <= limit && out.cell.admit(&algorithm, out.end, 1) {
                drained += 1;
            }
            assert!(
                live + drained <= limit,
                "{name}: over-admitted: the drain admitted {drained} on top of {live} in the window, limit {limit}"
            );
            assert!(
                live + drained >= limit,
                "{name}: under-admitted: the drain admitted {drained} on top of {live} in the window, limit {limit}: a slot was not given back"
            );
        })
    }
}

/// One client thread's checks, each at the clock's reading just before it;
/// returns the reading of every unit admitted.
fn client(
    algorithm: SlidingWindowLog,
    cell: &AnyLog,
    clock: &ManualClock,
    costs: &[u64],
) -> Vec<u64> {
    let mut times = Vec::new();
    for &cost in costs {
        let now = clock.now_nanos();
        if cell.admit(&algorithm, now, cost) {
            times.extend((0..cost).map(|_| now));
        }
    }
    times
}

/// Unit checks, one per thread.
const ONE_EACH_2: &[&[u64]] = &[&[1], &[1]];
const ONE_EACH_3: &[&[u64]] = &[&[1], &[1], &[1]];

/// Frozen clock, `limit − 1` slots taken: `threads` unit checks race for the
/// last free slot, and exactly one is admitted.
pub(crate) fn frozen(make: MakeCell, threads: usize, limit: u64) -> Explored {
    LogRace {
        limit,
        prefill: limit - 1,
        start: W - 1,
        advance: None,
        costs: if threads == 2 { ONE_EACH_2 } else { ONE_EACH_3 },
        at_least: 1,
    }
    .check(
        &format!("sliding_window_log/frozen/{threads}x1/limit{limit}"),
        make,
    )
}

/// Frozen clock, empty log of limit 2: a check of cost 2 (the main thread)
/// races `ones` checks of cost 1. Whoever wins, the units in the log plus
/// the serial drain come to exactly 2: a cost-2 check raced short gives its
/// slot back. With two checks of cost 1 the cost-2 check's brief hold can
/// make them both be denied (an error toward denying), so the race alone
/// admits 1 or 2.
pub(crate) fn multi_cost(make: MakeCell, ones: usize) -> Explored {
    const TWO_VS_ONE: &[&[u64]] = &[&[2], &[1]];
    const TWO_VS_TWO_ONES: &[&[u64]] = &[&[2], &[1], &[1]];
    LogRace {
        limit: 2,
        prefill: 0,
        start: W - 1,
        advance: None,
        costs: if ones == 1 {
            TWO_VS_ONE
        } else {
            TWO_VS_TWO_ONES
        },
        at_least: 1,
    }
    .check(
        &format!("sliding_window_log/multi_cost/2_vs_{ones}x1/limit2"),
        make,
    )
}

/// The clock moves from `W − 1` to `W` during the race, freeing the
/// `prefill` slots taken at 0. Unit checks, one per thread, are judged at
/// the reading each made: before the crossing only the `limit − prefill`
/// free slots can be taken, after it every slot.
pub(crate) fn across_boundary(
    make: MakeCell,
    threads: usize,
    limit: u64,
    prefill: u64,
) -> Explored {
    LogRace {
        limit,
        prefill,
        start: W - 1,
        advance: Some(1),
        costs: if threads == 2 { ONE_EACH_2 } else { ONE_EACH_3 },
        // A slot is free throughout unless the log starts full.
        at_least: u64::from(prefill < limit),
    }
    .check(
        &format!("sliding_window_log/across_boundary/{threads}x1/limit{limit}/prefill{prefill}"),
        make,
    )
}

#[test]
fn frozen_2_threads_limit_1() {
    assert_reached(frozen(REAL, 2, 1), 1, 1);
}

#[test]
fn frozen_2_threads_limit_2() {
    assert_reached(frozen(REAL, 2, 2), 1, 1);
}

#[test]
fn frozen_3_threads_limit_1() {
    assert_reached(frozen(REAL, 3, 1), 1, 1);
}

#[test]
fn frozen_3_threads_limit_2() {
    assert_reached(frozen(REAL, 3, 2), 1, 1);
}

#[test]
fn multi_cost_2_vs_1_limit_2() {
    assert_reached(multi_cost(REAL, 1), 1, 2);
}

#[test]
fn multi_cost_2_vs_1_1_limit_2() {
    assert_reached(multi_cost(REAL, 2), 1, 2);
}

#[test]
fn across_boundary_2_threads_limit_1_full() {
    assert_reached(across_boundary(REAL, 2, 1, 1), 0, 1);
}

#[test]
fn across_boundary_2_threads_limit_2() {
    assert_reached(across_boundary(REAL, 2, 2, 1), 1, 2);
}
