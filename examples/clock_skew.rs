//! How far can one thread's clock reading lag another thread's *causally
//! earlier* reading? Two threads pass a reading back and forth through an
//! atomic: the sender reads its clock and publishes the reading (`Release`);
//! the receiver acquires it, reads its own clock, and records `sent − read`
//! if its own reading is smaller (a backward step across threads); then it
//! sends its reading back. Every hop is a pair of readings ordered by
//! happens-before, so with a perfect clock no hop could ever go backwards.
//!
//! Run with
//!
//! ```text
//! cargo run --release --example clock_skew [-- --iters N --clock monotonic|instant|fenced|all]
//! ```
//!
//! `--iters` is the number of round trips (two hops each; default
//! 2 000 000), cut short after 4 s per clock; `--clock` picks
//! `MonotonicClock` (the CPU's time-stamp counter through `quanta`, the
//! default clock), `InstantClock` (the OS clock), `fenced` (x86-64 only:
//! the same counter read behind an `lfence`, a diagnostic), or all of them
//! side by side (the default).
//!
//! The threads are not pinned (std has no affinity API). With both threads
//! spinning on a 2-core machine the scheduler keeps them on different cores;
//! the report names the CPU each thread ran on at its start and its end
//! (Linux only, from `/proc/thread-self/stat`). It also reports, per
//! direction, the smallest forward gap `read − sent`: the one-way hand-off
//! time plus the offset between the two threads' clocks, so the offset is
//! bounded by the two minima (`−min(B→A) ≤ offset(B − A) ≤ min(A→B)`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::{Clock, InstantClock, MonotonicClock};

/// Longest a run of one clock may take.
const DEADLINE: Duration = Duration::from_secs(4);

struct Options {
    iters: u64,
    monotonic: bool,
    instant: bool,
    fenced: bool,
}

/// A diagnostic third clock: `MonotonicClock`'s counter read behind an
/// `lfence`, so that the read waits for every earlier instruction (the
/// acquire load that received the other thread's reading included). `rdtsc`
/// alone is not ordered with loads: the processor may read the counter
/// while the load is still waiting for the other core's cache line. If the
/// backward steps vanish behind the fence, they came from that reordering,
/// not from counters that differ between cores.
#[cfg(target_arch = "x86_64")]
struct FencedTsc {
    clock: quanta::Clock,
    origin: u64,
}

#[cfg(target_arch = "x86_64")]
impl Clock for FencedTsc {
    fn now_nanos(&self) -> u64 {
        // SAFETY: `lfence` is part of SSE2, which every x86-64 processor has.
        unsafe { std::arch::x86_64::_mm_lfence() };
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        iters: 2_000_000,
        monotonic: true,
        instant: true,
        fenced: cfg!(target_arch = "x86_64"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--iters" => {
                let v = args.next().ok_or("--iters needs a value")?;
                o.iters = match v.parse::<u64>() {
                    Ok(n) if (1..=1_000_000_000).contains(&n) => n,
                    _ => return Err(format!("--iters: `{v}` is not a count (1-10^9)")),
                };
            }
            "--clock" => {
                let v = args.next().ok_or("--clock needs a value")?;
                let x86 = cfg!(target_arch = "x86_64");
                (o.monotonic, o.instant, o.fenced) = match v.as_str() {
                    "monotonic" => (true, false, false),
                    "instant" => (false, true, false),
                    "fenced" if x86 => (false, false, true),
                    "all" => (true, true, x86),
                    _ => {
                        return Err(format!(
                            "--clock: `{v}` is not monotonic, instant, fenced (x86-64) or all"
                        ))
                    }
                };
            }
            "-h" | "--help" => {
                return Err(
                    "usage: clock_skew [--iters N] [--clock monotonic|instant|fenced|all]".into(),
                )
            }
            _ => return Err(format!("unknown argument `{arg}`; try --help")),
        }
    }
    Ok(o)
}

/// What one thread saw as a receiver: one direction of the hand-off.
#[derive(Default)]
struct Direction {
    hops: u64,
    /// `sent − read` for every hop whose reading was smaller than the one
    /// sent before it.
    lags: Vec<u64>,
    /// The smallest `read − sent`, signed.
    min_gap: Option<i128>,
    cpus: (Option<u32>, Option<u32>),
}

/// The CPU the calling thread last ran on (Linux), from field 39 of
/// `/proc/thread-self/stat`.
fn current_cpu() -> Option<u32> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // The command name (field 2) may hold spaces; count from after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(36)?.parse().ok()
}

/// One side of the ping-pong. `turn` counts hops; this side receives on
/// hops of parity `side` and sends the next.
fn play(
    clock: &dyn Clock,
    side: u64,
    rounds: u64,
    turn: &AtomicU64,
    value: &AtomicU64,
    stop: &AtomicBool,
    start: Instant,
) -> Direction {
    let mut d = Direction {
        cpus: (current_cpu(), None),
        ..Direction::default()
    };
    let mut next = side;
    while next < 2 * rounds {
        // Wait for the other side's hop; spin, then yield if starved.
        let mut spins = 0u32;
        while turn.load(Ordering::Acquire) != next {
            if stop.load(Ordering::Relaxed) {
                d.cpus.1 = current_cpu();
                return d;
            }
            spins += 1;
            if spins < 1 << 14 {
                std::hint::spin_loop();
            } else {
                // Starved (the other thread is not running): give way, and
                // keep to the deadline even while hardly any hop completes.
                std::thread::yield_now();
                if start.elapsed() > DEADLINE {
                    stop.store(true, Ordering::Relaxed);
                }
            }
        }
        // Acquire above: the sender's clock read happens before this one.
        let sent = value.load(Ordering::Relaxed);
        let read = clock.now_nanos();
        if next != 0 {
            // Hop 0 starts the game: nothing was sent before it.
            d.hops += 1;
            if read < sent {
                d.lags.push(sent - read);
            }
            let gap = i128::from(read) - i128::from(sent);
            d.min_gap = Some(d.min_gap.map_or(gap, |m| m.min(gap)));
        }
        value.store(read, Ordering::Relaxed);
        turn.store(next + 1, Ordering::Release);
        next += 2;
        if next % 512 < 2 && start.elapsed() > DEADLINE {
            stop.store(true, Ordering::Relaxed);
        }
    }
    d.cpus.1 = current_cpu();
    d
}

/// Runs `rounds` round trips of the ping-pong over `clock`.
fn measure(clock: Arc<dyn Clock>, rounds: u64) -> (Direction, Direction, Duration) {
    let turn = Arc::new(AtomicU64::new(0));
    let value = Arc::new(AtomicU64::new(clock.now_nanos()));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let spawn = |side: u64| {
        let (clock, turn, value, stop) = (clock.clone(), turn.clone(), value.clone(), stop.clone());
        std::thread::spawn(move || play(&*clock, side, rounds, &turn, &value, &stop, start))
    };
    // Side 0 (A) receives on even hops, so it receives from B; side 1 (B)
    // receives from A.
    let a = spawn(0);
    let b = spawn(1);
    let from_b = a.join().expect("thread A");
    let from_a = b.join().expect("thread B");
    (from_a, from_b, start.elapsed())
}

/// The `q`-quantile of the lag over all `hops` (hops that did not go
/// backwards lag 0).
fn quantile(sorted_lags: &[u64], hops: u64, q: f64) -> u64 {
    if hops == 0 {
        return 0;
    }
    // Rank of the quantile among all hops, counted from the largest.
    let from_top = ((1.0 - q) * hops as f64).floor() as usize;
    if from_top >= sorted_lags.len() {
        0
    } else {
        sorted_lags[sorted_lags.len() - 1 - from_top]
    }
}

fn cpus(c: (Option<u32>, Option<u32>)) -> String {
    let s = |c: Option<u32>| c.map_or_else(|| "?".to_string(), |c| c.to_string());
    format!("{}→{}", s(c.0), s(c.1))
}

/// ns per reading on one thread, for context.
fn read_cost(clock: &dyn Clock) -> f64 {
    let n = 1_000_000u32;
    let start = Instant::now();
    let mut x = 0u64;
    for _ in 0..n {
        x = x.wrapping_add(std::hint::black_box(clock).now_nanos());
    }
    std::hint::black_box(x);
    start.elapsed().as_nanos() as f64 / f64::from(n)
}

fn main() -> std::process::ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flag = |f: &str| {
        flags
            .lines()
            .find(|l| l.starts_with("flags"))
            .is_some_and(|l| l.split_whitespace().any(|w| w == f))
    };
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .map_or_else(|_| "?".to_string(), |s| s.trim().to_string());
    println!(
        "{cores} cores; constant_tsc {}, nonstop_tsc {}; kernel clocksource {source}; \
         threads not pinned (std cannot), CPU each thread ran on shown as start→end",
        flag("constant_tsc"),
        flag("nonstop_tsc"),
    );
    println!(
        "{} round trips requested per clock, stopped after {} s\n",
        o.iters,
        DEADLINE.as_secs()
    );
    println!(
        "| clock | ns/read | direction | hops | backward | max lag ns | p99.9 lag ns (all hops) | p99.9 lag ns (backward hops) | min gap ns | cpus (receiver) |"
    );
    println!("|---|--:|---|--:|--:|--:|--:|--:|--:|---|");
    let mut clocks: Vec<(&str, Arc<dyn Clock>)> = Vec::new();
    if o.monotonic {
        clocks.push(("MonotonicClock", Arc::new(MonotonicClock::new())));
    }
    if o.instant {
        clocks.push(("InstantClock", Arc::new(InstantClock::new())));
    }
    #[cfg(target_arch = "x86_64")]
    if o.fenced {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        clocks.push(("lfence+TSC", Arc::new(FencedTsc { clock, origin })));
    }
    let mut summary = Vec::new();
    for (name, clock) in clocks {
        let cost = read_cost(&*clock);
        let (from_a, from_b, took) = measure(clock, o.iters);
        let hops = from_a.hops + from_b.hops;
        // `from_a` was received by B, `from_b` by A.
        let (a_cpus, b_cpus) = (from_b.cpus, from_a.cpus);
        let shared = [(a_cpus.0, b_cpus.0), (a_cpus.1, b_cpus.1)]
            .iter()
            .any(|&(a, b)| a.is_some() && a == b);
        let mut offset = (None, None);
        for (label, mut d) in [("A→B", from_a), ("B→A", from_b)] {
            d.lags.sort_unstable();
            let max = d.lags.last().copied().unwrap_or(0);
            let p_all = quantile(&d.lags, d.hops, 0.999);
            let p_back = quantile(&d.lags, d.lags.len() as u64, 0.999);
            let gap = d.min_gap.map_or_else(|| "-".to_string(), |g| g.to_string());
            println!(
                "| {name} | {cost:.1} | {label} | {} | {} | {max} | {p_all} | {p_back} | {gap} | {} |",
                d.hops,
                d.lags.len(),
                cpus(d.cpus),
            );
            if label == "A→B" {
                offset.1 = d.min_gap;
            } else {
                offset.0 = d.min_gap.map(|g| -g);
            }
        }
        let offset = match offset {
            (Some(lo), Some(hi)) if lo <= hi => {
                format!("B's clock − A's clock lies in [{lo}, {hi}] ns")
            }
            (Some(_), Some(_)) => "both directions stepped back, so no constant offset \
                                   between the threads' clocks explains it: the readings \
                                   were not ordered with the hand-off"
                .to_string(),
            _ => "no hops".to_string(),
        };
        let shared = if shared {
            "; WARNING: both threads were seen on one CPU (a busy machine), \
             so some hops crossed no core: rerun when it is quieter"
        } else {
            ""
        };
        summary.push(format!(
            "{name}: {hops} hops ({} round trips) in {:.2} s; {offset}{shared}",
            hops / 2,
            took.as_secs_f64()
        ));
    }
    println!();
    for line in summary {
        println!("{line}");
    }
    std::process::ExitCode::SUCCESS
}
