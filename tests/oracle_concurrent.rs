//! The oracle's concurrent half: the public operations from several threads
//! with real interleavings, and the exact bound checked over the admissions
//! each client received in every span of readings.
//!
//! The clock moves in phases: within a phase every thread sees one
//! reading, and between phases the driver moves it forward. In each phase
//! four threads race checks of a few tracked clients (costs 1 to 3), peeks,
//! bookings ready at once then given back or kept (where the algorithm
//! books), sweeps, removals of one-off clients and floods of new ones
//! (which set off the pass and rebuilds); on a tiered limiter, also quota
//! changes of either tier between two quotas and moves of tracked clients
//! between the tiers. Afterwards, for every tracked client and every span
//! of phases `[i, j]`, the units admitted (less those a cancel gave back)
//! are at most what the exact algorithm allows over that span, at the
//! largest quota involved where quotas change:
//!
//! - token bucket: `capacity + ⌊rate · (tⱼ − tᵢ)⌋`;
//! - fixed window and sliding window counter: `limit` per aligned window
//!   the span touches;
//! - sliding window log: `limit` per window length, `⌈(tⱼ − tᵢ + 1) / W⌉`.
//!
//! The phases' gates never wait for a thread that has died: a worker that
//! panics breaks them, the others leave, and the test fails at once with
//! the worker's panic message; a gate that stays shut for a minute fails
//! the test saying how many threads had arrived (see [`phases`]).

// Plain `cargo test` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tollgate::{
    Algorithm, Builder, FixedWindow, Limiter, ManualClock, Reservable, SlidingWindowCounter,
    SlidingWindowLog, Tier, TokenBucket,
};

const THREADS: usize = 4;
const PHASES: usize = 48;
const TRACKED: u64 = 3;
const MS: u64 = 1_000_000;

/// The exact bound on the units a client can be admitted over readings
/// `[a, b]`, for a limit (a bucket's rate and capacity, a window's limit).
type Bound = fn(u64, u64, u64) -> u64;

/// Books `cost` units of a client ready now, then cancels the booking (if
/// asked) or keeps it: the units admitted less those given back.
type Book<A> = fn(&Limiter<A, u64, ManualClock>, u64, u64, bool) -> u64;

/// A quota change or a move of a tracked client, drawn.
type Change<A> = Arc<dyn Fn(&Limiter<A, u64, ManualClock>, &mut Draw) + Send + Sync>;

/// What the limiter under test does beside checks.
struct Extras<A: Algorithm> {
    book: Option<Book<A>>,
    change: Option<Change<A>>,
    /// The largest limit any quota of the run holds a client to.
    most: u64,
}

/// A small deterministic generator (xorshift), one per thread and round.
struct Draw(u64);

impl Draw {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn run<A: Algorithm>(
    name: &str,
    builder: impl Fn() -> Builder<A, u64>,
    extras: &Extras<A>,
    bound: Bound,
    seed: u64,
) {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_000));
    let limiter: Limiter<A, u64, ManualClock> = builder().clock(clock.clone()).build().unwrap();
    // admitted[phase][client], in units.
    let admitted: Vec<Vec<AtomicU64>> = (0..PHASES)
        .map(|_| (0..TRACKED).map(|_| AtomicU64::new(0)).collect())
        .collect();
    let fresh = AtomicU64::new(1 << 40);
    let mut readings = Vec::with_capacity(PHASES);
    let mut draw = Draw(seed | 1);
    let worker = |t: usize, phase: usize| {
        // One generator per thread and phase, so that a phase's draws do
        // not depend on how the phases before it interleaved.
        let mut draw = Draw(
            seed.wrapping_mul(31)
                .wrapping_add(t as u64 + 1)
                .wrapping_mul(1_000_003)
                .wrapping_add(phase as u64)
                | 1,
        );
        for _ in 0..40 {
            match draw.next(24) {
                0..=11 => {
                    let (client, cost) = (draw.next(TRACKED), 1 + draw.next(3));
                    if let Ok(d) = limiter.check_n(&client, cost) {
                        if d.is_allowed() {
                            admitted[phase][client as usize].fetch_add(cost, Ordering::Relaxed);
                        }
                    }
                }
                12 => {
                    let _ = limiter.peek(&draw.next(TRACKED));
                }
                13 => {
                    let _ = limiter.sweep();
                }
                14 | 15 => {
                    // A one-off client, then gone.
                    let id = fresh.fetch_add(1, Ordering::Relaxed);
                    let _ = limiter.check(&id);
                    let _ = limiter.remove(&id);
                }
                16..=19 => {
                    // A flood of new clients.
                    for _ in 0..(20 + draw.next(200)) {
                        let id = fresh.fetch_add(1, Ordering::Relaxed);
                        let _ = limiter.check(&id);
                    }
                }
                20 | 21 => {
                    let (client, cost) = (draw.next(TRACKED), 1 + draw.next(3));
                    if let Some(book) = extras.book {
                        let units = book(&limiter, client, cost, draw.next(2) == 0);
                        admitted[phase][client as usize].fetch_add(units, Ordering::Relaxed);
                    }
                }
                _ => {
                    if let Some(change) = &extras.change {
                        change(&limiter, &mut draw);
                    }
                }
            }
        }
    };
    let between = |_phase: usize| {
        readings.push(clock_now(&clock));
    };
    let after = |_phase: usize| {
        // Forward by up to about two windows, sometimes not at all.
        let step = match draw.next(4) {
            0 => 0,
            1 => draw.next(50) * MS,
            _ => draw.next(2_500) * MS,
        };
        clock.advance(Duration::from_nanos(step));
    };
    if let Err(why) = phases(THREADS, PHASES, GATE_TIMEOUT, worker, between, after) {
        panic!("{name} (seed {seed}): {why}");
    }
    for client in 0..TRACKED as usize {
        // The client's units, phase by phase.
        let by_phase: Vec<u64> = admitted
            .iter()
            .map(|phase| phase[client].load(Ordering::Relaxed))
            .collect();
        for i in 0..PHASES {
            let mut units = 0;
            for j in i..PHASES {
                units += by_phase[j];
                let most = bound(extras.most, readings[i], readings[j]);
                assert!(
                    units <= most,
                    "{name} (seed {seed}): client {client} admitted {units} units over \
                     phases {i}..={j} (readings {}..={}), the exact bound is {most}",
                    readings[i],
                    readings[j]
                );
            }
        }
    }
}

/// The longest any thread waits for the others at a phase's start or end:
/// a healthy phase takes milliseconds, so a wait this long means a thread
/// is stuck, and the run fails saying so instead of hanging.
const GATE_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `phases` phases of `threads` worker threads: in each, every thread
/// runs `worker(thread, phase)` while the driver waits, with `before(phase)`
/// run by the driver before the phase starts and `after(phase)` once every
/// thread has finished it.
///
/// Every wait is bounded and no thread waits on one that has died: a
/// worker that panics breaks both gates, the others leave at their next
/// gate, and the run answers an error naming the worker and its panic's
/// message; a gate that no one opens within `timeout` answers an error
/// naming how many threads had arrived.
fn phases<W, B, F>(
    threads: usize,
    phases: usize,
    timeout: Duration,
    worker: W,
    mut before: B,
    mut after: F,
) -> Result<(), String>
where
    W: Fn(usize, usize) + Sync,
    B: FnMut(usize),
    F: FnMut(usize),
{
    let start = Gate::new(threads + 1, timeout, "start");
    let done = Gate::new(threads + 1, timeout, "end");
    thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (start, done, worker) = (&start, &done, &worker);
                scope.spawn(move || {
                    // Breaks both gates if this thread unwinds, so that no
                    // one waits for it.
                    let _watch = Watch {
                        gates: [start, done],
                        who: t,
                    };
                    for phase in 0..phases {
                        if start.wait().is_err() {
                            return;
                        }
                        worker(t, phase);
                        if done.wait().is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        let mut outcome = Ok(());
        for phase in 0..phases {
            before(phase);
            if let Err(why) = start.wait().and_then(|()| done.wait()) {
                outcome = Err(format!("phase {phase}: {why}"));
                break;
            }
            after(phase);
        }
        // Every worker has left (a broken gate lets them all go): join
        // each, and report each panic with its message.
        for (t, handle) in workers.into_iter().enumerate() {
            if let Err(payload) = handle.join() {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic with no message".to_owned());
                let line = format!("worker {t} panicked: {message}");
                outcome = Err(match outcome {
                    Ok(()) => line,
                    Err(why) => format!("{why}; {line}"),
                });
            }
        }
        outcome
    })
}

/// A barrier for `parties` threads whose every wait is bounded, and which
/// a thread can break so that no one waits for it any more.
struct Gate {
    parties: usize,
    timeout: Duration,
    name: &'static str,
    state: Mutex<GateState>,
    turn: Condvar,
}

struct GateState {
    arrived: usize,
    /// Counts the times the gate opened.
    opened: u64,
    /// Why the gate is broken, once it is: every wait then fails with it.
    broken: Option<String>,
}

impl Gate {
    fn new(parties: usize, timeout: Duration, name: &'static str) -> Self {
        Self {
            parties,
            timeout,
            name,
            state: Mutex::new(GateState {
                arrived: 0,
                opened: 0,
                broken: None,
            }),
            turn: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        // A panic never happens while the lock is held, but a poisoned
        // lock must not hide the gate's state either.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until every party has arrived: `Err` with the reason if the
    /// gate is (or gets) broken, or if `timeout` passes first (which breaks
    /// it for everyone).
    fn wait(&self) -> Result<(), String> {
        let mut state = self.lock();
        if let Some(why) = &state.broken {
            return Err(why.clone());
        }
        let opened = state.opened;
        state.arrived += 1;
        if state.arrived == self.parties {
            state.arrived = 0;
            state.opened += 1;
            self.turn.notify_all();
            return Ok(());
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            if state.opened != opened {
                return Ok(());
            }
            if let Some(why) = &state.broken {
                return Err(why.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let why = format!(
                    "no thread moved for {:?} at the {} gate: {} of {} had arrived",
                    self.timeout, self.name, state.arrived, self.parties
                );
                state.broken = Some(why.clone());
                self.turn.notify_all();
                return Err(why);
            }
            state = self
                .turn
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Breaks the gate (unless it is already): every wait fails with `why`.
    fn break_with(&self, why: String) {
        let mut state = self.lock();
        state.broken.get_or_insert(why);
        self.turn.notify_all();
    }
}

/// Breaks its gates if its thread unwinds.
struct Watch<'a> {
    gates: [&'a Gate; 2],
    who: usize,
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            for gate in self.gates {
                gate.break_with(format!("worker {} panicked", self.who));
            }
        }
    }
}

fn clock_now(clock: &ManualClock) -> u64 {
    use tollgate::Clock;
    clock.now_nanos()
}

/// 10 a second, bursts of 10; windows of 1 s for 10. Where quotas change,
/// each tier moves between this and twice it.
const RATE: u64 = 10;
const SEC: u64 = 1_000_000_000;

fn bucket_bound(rate: u64, a: u64, b: u64) -> u64 {
    rate + (b - a) * rate / SEC
}

fn window_bound(limit: u64, a: u64, b: u64) -> u64 {
    // Windows start on the Unix epoch's multiples; a ManualClock reads 0 at
    // the Unix epoch's 0.
    limit * (b / SEC - a / SEC + 1)
}

fn log_bound(limit: u64, a: u64, b: u64) -> u64 {
    limit * (b - a + 1).div_ceil(SEC)
}

fn seeds() -> u64 {
    std::env::var("ORACLE_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2)
}

/// See [`Book`]. A booking with no wait allowed is ready at once.
fn book<A: Reservable>(
    limiter: &Limiter<A, u64, ManualClock>,
    client: u64,
    cost: u64,
    cancel: bool,
) -> u64 {
    let Ok(booking) = limiter.reserve_n(&client, cost, Duration::ZERO) else {
        return 0;
    };
    assert_eq!(booking.wait(), Duration::ZERO, "a booking allowed no wait");
    if cancel && booking.cancel() {
        0
    } else {
        cost
    }
}

/// What an untiered limiter does beside checks: bookings if it books.
fn plain<A: Algorithm>(book: Option<Book<A>>) -> Extras<A> {
    Extras {
        book,
        change: None,
        most: RATE,
    }
}

#[test]
fn racing_operations_keep_every_token_bucket_client_within_the_exact_bound() {
    for seed in 1..=seeds() {
        run(
            "token bucket",
            || {
                TokenBucket::builder()
                    .rate(RATE, Duration::from_secs(1))
                    .key_type::<u64>()
            },
            &plain(Some(book)),
            bucket_bound,
            seed,
        );
    }
}

#[test]
fn racing_operations_keep_every_fixed_window_client_within_the_exact_bound() {
    for seed in 1..=seeds() {
        run(
            "fixed window",
            || {
                FixedWindow::builder()
                    .limit(RATE)
                    .window(Duration::from_secs(1))
                    .key_type::<u64>()
            },
            &plain(Some(book)),
            window_bound,
            seed,
        );
    }
}

#[test]
fn racing_operations_keep_every_sliding_counter_client_within_the_exact_bound() {
    for seed in 1..=seeds() {
        run(
            "sliding window counter",
            || {
                SlidingWindowCounter::builder()
                    .limit(RATE)
                    .window(Duration::from_secs(1))
                    .key_type::<u64>()
            },
            &plain(None),
            window_bound,
            seed,
        );
    }
}

#[test]
fn racing_operations_keep_every_sliding_log_client_within_the_exact_bound() {
    for seed in 1..=seeds() {
        run(
            "sliding window log",
            || {
                SlidingWindowLog::builder()
                    .limit(RATE)
                    .window(Duration::from_secs(1))
                    .key_type::<u64>()
            },
            &plain(Some(book)),
            log_bound,
            seed,
        );
    }
}

/// A tiered limiter of `$quota` (a limit to its builder) for two tiers,
/// each starting at `RATE`, whose tracked clients' tiers the run moves,
/// with its extras: bookings (`$book`), and quota changes of either tier
/// to `RATE` or twice it and moves of tracked clients, racing the rest.
macro_rules! moving {
    ($quota:expr, $book:expr) => {{
        let tiers: Arc<[AtomicU16; TRACKED as usize]> = Arc::default();
        let resolve = Arc::clone(&tiers);
        let builder = move || {
            let resolve = Arc::clone(&resolve);
            $quota(RATE).tier(1, $quota(RATE)).tier_by(move |id: &u64| {
                // Relaxed: a tier is a hint the next `retier` reads again;
                // every order of a move and a check is one the bound
                // allows.
                resolve
                    .get(*id as usize)
                    .map_or(0, |t| t.load(Ordering::Relaxed))
            })
        };
        let change: Change<_> = Arc::new(move |limiter, draw: &mut Draw| {
            let tier = draw.next(2) as Tier;
            if draw.next(2) == 0 {
                let limit = RATE * (1 + draw.next(2));
                limiter.set_quota(tier, $quota(limit)).unwrap();
            } else {
                let client = draw.next(TRACKED);
                // Relaxed: see the resolver.
                tiers[client as usize].store(tier, Ordering::Relaxed);
                let _ = limiter.retier(&client);
            }
        });
        let extras = Extras {
            book: $book,
            change: Some(change),
            most: 2 * RATE,
        };
        (builder, extras)
    }};
}

#[test]
fn racing_quota_changes_and_moves_keep_every_token_bucket_client_within_the_bound() {
    let (builder, extras) = moving!(
        |limit| TokenBucket::builder().rate(limit, Duration::from_secs(1)),
        Some(book)
    );
    for seed in 1..=seeds() {
        run("tiered token bucket", &builder, &extras, bucket_bound, seed);
    }
}

#[test]
fn racing_quota_changes_and_moves_keep_every_fixed_window_client_within_the_bound() {
    let (builder, extras) = moving!(
        |limit| FixedWindow::builder()
            .limit(limit)
            .window(Duration::from_secs(1)),
        Some(book)
    );
    for seed in 1..=seeds() {
        run("tiered fixed window", &builder, &extras, window_bound, seed);
    }
}

#[test]
fn racing_quota_changes_and_moves_keep_every_sliding_counter_client_within_the_bound() {
    let (builder, extras) = moving!(
        |limit| SlidingWindowCounter::builder()
            .limit(limit)
            .window(Duration::from_secs(1)),
        None
    );
    for seed in 1..=seeds() {
        run(
            "tiered sliding window counter",
            &builder,
            &extras,
            window_bound,
            seed,
        );
    }
}

/// A worker that panics (an overflow in a planted bug, say) fails the run
/// at once with a message naming it and its panic, instead of leaving the
/// others and the driver waiting for it at a gate for ever.
#[test]
fn a_worker_that_panics_fails_the_run_with_its_message() {
    let began = Instant::now();
    let mut phases_done = 0;
    let outcome = phases(
        THREADS,
        PHASES,
        GATE_TIMEOUT,
        |t, phase| {
            if t == 2 && phase == 3 {
                panic!("attempt to add with overflow");
            }
        },
        |_| {},
        |_| phases_done += 1,
    );
    let why = outcome.expect_err("a worker panicked");
    assert!(
        why.contains("worker 2 panicked") && why.contains("attempt to add with overflow"),
        "{why}"
    );
    assert_eq!(phases_done, 3, "the phases before the panic ran");
    assert!(
        began.elapsed() < GATE_TIMEOUT / 4,
        "no one waited for the dead worker: {:?}",
        began.elapsed()
    );
}

/// A worker stuck past the gate's timeout fails the run with a message
/// saying where, instead of a hang.
#[test]
fn a_worker_stuck_past_the_timeout_fails_the_run_with_a_message() {
    let outcome = phases(
        THREADS,
        4,
        Duration::from_millis(100),
        |t, phase| {
            if t == 1 && phase == 2 {
                thread::sleep(Duration::from_millis(600));
            }
        },
        |_| {},
        |_| {},
    );
    let why = outcome.expect_err("a worker was stuck");
    assert!(why.contains("phase 2") && why.contains("end gate"), "{why}");
}

/// A healthy run opens every gate.
#[test]
fn healthy_phases_all_run() {
    let ran = AtomicU64::new(0);
    let mut after = 0;
    phases(
        THREADS,
        PHASES,
        GATE_TIMEOUT,
        |_, _| {
            ran.fetch_add(1, Ordering::Relaxed);
        },
        |_| {},
        |_| after += 1,
    )
    .unwrap();
    assert_eq!(ran.load(Ordering::Relaxed), (THREADS * PHASES) as u64);
    assert_eq!(after, PHASES);
}
