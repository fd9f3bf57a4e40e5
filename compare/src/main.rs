//! Compare tollgate with a map of per-client mutexes (`mutex-map`), one global
//! mutex and governor, on this machine, in a minute or two (most of it
//! filling maps: `uniform_1m`'s million clients per implementation and key
//! type, and the sweep's):
//!
//! ```text
//! cargo run --release -p compare                # markdown table
//! cargo run --release -p compare -- --memory    # + bytes per client at 1M clients
//! cargo run --release -p compare -- --json      # one JSON object per line
//! cargo run --release -p compare -- --threads 1,2,4,8
//! cargo run --release -p compare -- --quick     # seconds; checks it all works (CI)
//! cargo run --release -p compare -- --scenarios insert,insert_capped,sweep
//! cargo run --release -p compare -- --keys IpAddr   # every scenario keyed by IpAddr
//! ```
//!
//! A workspace member of its own (`compare/`), so that the command builds
//! tollgate, governor and foldhash only; the binary is
//! `target/release/compare` (for callgrind:
//! `--toggle-collect='compare::workload::drive*'`).
//!
//! Keys are `String`, `u64` and `IpAddr` (IPv6, as a server keys by
//! address); without `--keys`, `IpAddr` runs only the headline scenarios at
//! the token bucket.
//!
//! Besides the checks, it measures what bounding memory costs:
//! `insert_capped`, new clients against a full `max_clients` cap under each
//! overflow policy, and `sweep`, one full `sweep()` of a map of idle clients
//! against governor's `retain_recent()`. And `direct`, one budget for
//! every thread: tollgate's `DirectLimiter` against governor's direct
//! limiter and tollgate's own keyed limiter on one hot key.
//!
//! Every number is the median of several rounds; within a round the
//! implementations take turns, so a noisy moment hurts them all alike.
//! `benches/contention.rs` runs the same workloads under criterion.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

// The baselines and workloads are shared with `benches/contention.rs`, which
// includes the same files: cargo cannot share a module between a bench and an
// example any other way, and neither belongs in the library.
#[path = "../../benches/support/baselines.rs"]
mod baselines;
#[path = "../../benches/support/workload.rs"]
mod workload;

use workload::{
    all_impls, direct_impls, fresh_keys, fresh_keys_from, impls, in_parallel, make, make_capped,
    make_stale, prepare, Algo, Data, Impl, Key, Load, Policy, Pool, Sample, Scenario, Subject,
    DIRECT_SCENARIOS, EVICTION_SCENARIOS, POLICIES, SCENARIOS,
};

const HELP: &str = "\
compare: tollgate against a map of per-client mutexes, a global mutex and governor

USAGE:
    cargo run --release -p compare -- [OPTIONS]

OPTIONS:
    --threads LIST   thread counts to run, comma-separated [default: 1,2,4]
    --rounds N       interleaved rounds per figure; the median is reported
                     [default: 5; the sweep runs at most 3]
    --memory         also measure bytes per client at 1M clients, each
                     implementation in a fresh child process (RSS delta)
    --json           print one JSON object per line instead of tables:
                     {scenario, algorithm, implementation, threads, key_type,
                     ns_per_op, ops_per_sec, allowed_ratio}; memory rows are
                     {scenario: \"memory\", algorithm, implementation,
                     key_type, clients, bytes_per_client}. In insert_capped
                     rows, implementation names the overflow policy:
                     tollgate+evict-sampled, tollgate+deny-new or
                     tollgate+admit-untracked. In sweep rows (threads 1),
                     implementation is tollgate or governor, ns_per_op is
                     nanoseconds per entry swept, ops_per_sec entries per
                     second, allowed_ratio the fraction of entries removed
    --scenarios LIST only these scenarios, e.g. hot_allowed,insert,sweep
    --sweep-clients N
                     idle clients in the sweep [default: 400000: filling
                     the maps is the cost; 2000000 is governor's reference
                     figure, ~15 s more per round]
    --policies LIST  insert_capped under only these overflow policies:
                     evict-sampled, deny-new, admit-untracked [default: all]
    --impls LIST     only these implementations, by name or name/algorithm,
                     e.g. tollgate/token-bucket,governor. Two limits on one
                     client run only when named: tollgate/two-token-buckets
                     (`Builder::and`: the scenario's bucket and as many
                     tokens per hour, one exchange) and two-limiters (two
                     limiters checked one after the other); so does
                     tollgate/tiered-token-bucket (`Builder::reconfigurable`:
                     the scenario's bucket, its quota changeable at run time).
                     The direct scenario runs tollgate-direct,
                     governor-direct and tollgate/token-bucket (on one hot
                     key), or those of them named here
    --keys LIST      only these key types: String, u64, IpAddr (IPv6
                     addresses in 2001:db8::/32). Without --keys all three
                     run, but IpAddr only in hot_allowed, hot_denied,
                     uniform_100k, uniform_1m and insert, and only at the
                     token bucket (tollgate, mutex-map, global-mutex,
                     governor; --memory likewise); naming IpAddr in --keys
                     runs it everywhere, as --quick does
    --ops N          checks per thread per round instead of calibrating to
                     ~20 ms, or of insert's and insert_capped's fixed
                     totals (for profiling, e.g. under callgrind)
    --quick          a tiny run that checks everything works (for CI); its
                     times mean nothing and nothing about them is asserted
    -h, --help       print this help

Scenarios: hot_allowed (one client, admitted), hot_denied (one client, a
deny flood), uniform_100k (100k clients, uniformly random), uniform_1m
(1M clients, uniformly random: the map far beyond the caches; each
implementation is filled once per key type, and --quick uses 10k), insert
(every check a new client), insert_capped (every check a new client, tollgate
holding max_clients(100000) clients none of which is idle, once per
overflow policy), sweep (one full sweep of 400k idle clients, tollgate's
sweep() against governor's retain_recent(), single-threaded), direct (one
budget for every thread: tollgate's DirectLimiter against governor's direct
limiter and tollgate's keyed limiter on one hot key). The two eviction
scenarios run at most 3 rounds: filling their maps is slow. Keys: String,
u64 and IpAddr (see --keys).

ns/op is the cost of one check as each thread sees it (wall time x threads /
checks); Mops/s is all threads together. A ratio `x mutex-map` of 3.0 means
tollgate is 3 times as fast (cost and throughput ratios are the same thing at
a fixed thread count).

On a shared machine, give the run the cores (as root): other sessions'
compilers can otherwise take one in the middle of a two-thread round:
    setsid bash -c 'echo -19 > /proc/self/autogroup; exec cargo run --release -p compare'
";

/// Wall time aimed at for one timed run.
const ROUND_TARGET: Duration = Duration::from_millis(20);
/// New clients per round in the insert scenario, all threads together.
const INSERT_TOTAL: u64 = 60_000;
/// Clients in the memory measurement.
const MEMORY_CLIENTS: u64 = 1_000_000;
/// Idle clients in the sweep measurement: chosen as the most that kept the
/// default run (then without `uniform_1m`) under a minute on two cores
/// (filling the maps is the cost). The issue's figure for governor is at
/// 2M: pass `--sweep-clients 2000000`.
const SWEEP_CLIENTS: u64 = 400_000;
/// New clients per round in `insert_capped`, all threads together: enough
/// for a round of some milliseconds (a round of 2 400 took about one, and
/// one thread descheduled for a moment doubled its time).
const CAPPED_TOTAL: u64 = 24_000;
/// The most rounds of `insert_capped` and the sweep, whose setup (filling
/// maps) dominates the run.
const EVICTION_ROUNDS: usize = 3;
/// Hidden flag: run one memory measurement in this (child) process.
const MEMORY_CHILD: &str = "--memory-child";

#[derive(Debug, Clone)]
struct Options {
    threads: Vec<usize>,
    rounds: usize,
    memory: bool,
    json: bool,
    quick: bool,
    scenarios: Vec<Scenario>,
    impls: Vec<Impl>,
    /// Whether `--impls` was given: see [`Options::direct`].
    impls_given: bool,
    keys: Vec<&'static str>,
    /// Whether `--keys` was given: see [`Options::for_key`].
    keys_given: bool,
    ops: Option<u64>,
    sweep_clients: Option<u64>,
    /// The overflow policies `insert_capped` runs.
    policies: Vec<Policy>,
}

impl Options {
    /// Whether a filter left out part of the full matrix.
    fn filtered(&self) -> bool {
        self.scenarios.len() < all_scenarios().len()
            || self.impls.len() < impls().len()
            || self.keys.len() < KEYS.len()
            || self.policies.len() < POLICIES.len()
            || self.ip_headline_only()
    }

    /// Whether `IpAddr` runs only the headline: a full-length run without
    /// `--keys`.
    fn ip_headline_only(&self) -> bool {
        !self.keys_given && !self.quick && self.keys.contains(&"IpAddr")
    }

    /// What runs for `key`, or `None` if nothing does. Everything selected,
    /// except that without `--keys` (and outside `--quick`) `IpAddr` runs
    /// only the check scenarios at the token bucket, which keeps the
    /// default run shorter; `--keys IpAddr` runs it all.
    fn for_key(&self, key: &str) -> Option<Options> {
        let mut o = self.clone();
        if key == "IpAddr" && self.ip_headline_only() {
            o.scenarios.retain(|s| SCENARIOS.contains(s));
            o.impls.retain(|i| i.algo() == Algo::TokenBucket);
        }
        (!o.scenarios.is_empty() && !o.impls.is_empty()).then_some(o)
    }

    /// What the `direct` scenario runs: without `--impls`, the two direct
    /// limiters and tollgate's hot key; with it, those of them it names.
    fn direct(&self) -> Vec<Impl> {
        direct_impls()
            .into_iter()
            .filter(|i| !self.impls_given || self.impls.contains(i))
            .collect()
    }

    /// Each key type selected, with what runs for it.
    fn plan(&self) -> Vec<(&'static str, Options)> {
        self.keys
            .iter()
            .filter_map(|&k| self.for_key(k).map(|o| (k, o)))
            .collect()
    }
}

/// Every key type, in the order they run and print.
const KEYS: &[&str] = &["String", "u64", "IpAddr"];

/// The check scenarios, the direct limiters', then the eviction
/// measurements.
fn all_scenarios() -> Vec<Scenario> {
    SCENARIOS
        .iter()
        .chain(DIRECT_SCENARIOS)
        .chain(EVICTION_SCENARIOS)
        .copied()
        .collect()
}

/// The algorithms of the tollgate implementations selected.
fn tollgate_algos(o: &Options) -> Vec<Algo> {
    o.impls
        .iter()
        .filter_map(|i| match i {
            Impl::Tollgate(a) => Some(*a),
            _ => None,
        })
        .collect()
}

/// What the sweep measures: tollgate's algorithms and governor.
fn sweep_impls(o: &Options) -> Vec<Impl> {
    o.impls
        .iter()
        .copied()
        .filter(|i| matches!(i, Impl::Tollgate(_) | Impl::Governor))
        .collect()
}

/// The items of a comma-separated `list` that `matches` one of `all`.
fn select<T: Copy>(
    flag: &str,
    list: &str,
    all: &[T],
    matches: impl Fn(&T, &str) -> bool,
) -> Result<Vec<T>, String> {
    let wanted: Vec<&str> = list.split(',').map(str::trim).collect();
    for w in &wanted {
        if !all.iter().any(|t| matches(t, w)) {
            return Err(format!("{flag}: nothing is called `{w}`"));
        }
    }
    Ok(all
        .iter()
        .copied()
        .filter(|t| wanted.iter().any(|w| matches(t, w)))
        .collect())
}

fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let mut o = Options {
        threads: vec![1, 2, 4],
        rounds: 5,
        memory: false,
        json: false,
        quick: false,
        scenarios: all_scenarios(),
        impls: impls(),
        impls_given: false,
        keys: KEYS.to_vec(),
        keys_given: false,
        ops: None,
        sweep_clients: None,
        policies: POLICIES.to_vec(),
    };
    let mut threads_given = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--json" => o.json = true,
            "--memory" => o.memory = true,
            "--quick" => o.quick = true,
            "--threads" => {
                let list = value("--threads")?;
                o.threads = list
                    .split(',')
                    .map(|t| match t.trim().parse::<usize>() {
                        Ok(n) if (1..=256).contains(&n) => Ok(n),
                        _ => Err(format!("--threads: `{t}` is not a thread count (1-256)")),
                    })
                    .collect::<Result<_, _>>()?;
                threads_given = true;
            }
            "--scenarios" => {
                let list = value("--scenarios")?;
                o.scenarios = select("--scenarios", &list, &all_scenarios(), |s, w| s.name() == w)?;
            }
            "--impls" => {
                let list = value("--impls")?;
                o.impls = select("--impls", &list, &all_impls(), |i, w| {
                    i.name() == w || i.label() == w
                })?;
                o.impls_given = true;
            }
            "--keys" => {
                let list = value("--keys")?;
                o.keys = select("--keys", &list, KEYS, |k, w| *k == w)?;
                o.keys_given = true;
            }
            "--ops" => {
                let n = value("--ops")?;
                o.ops = match n.parse() {
                    Ok(n) if n >= 1 => Some(n),
                    _ => return Err(format!("--ops: `{n}` is not a positive number")),
                };
            }
            "--sweep-clients" => {
                let n = value("--sweep-clients")?;
                o.sweep_clients = match n.parse() {
                    Ok(n) if n >= 1 => Some(n),
                    _ => return Err(format!("--sweep-clients: `{n}` is not a positive number")),
                };
            }
            "--policies" => {
                let list = value("--policies")?;
                o.policies = select("--policies", &list, POLICIES, |p, w| p.name() == w)?;
            }
            "--rounds" => {
                let n = value("--rounds")?;
                o.rounds = match n.parse() {
                    Ok(n) if n >= 1 => n,
                    _ => return Err(format!("--rounds: `{n}` is not a positive number")),
                };
            }
            other => return Err(format!("unknown argument `{other}` (try --help)")),
        }
    }
    if o.quick {
        o.rounds = 1;
        if !threads_given {
            o.threads = vec![1, 2];
        }
    }
    Ok(Some(o))
}

/// The median-by-cost round of one implementation in one cell.
#[derive(Debug, Clone)]
struct Row {
    scenario: Scenario,
    imp: Impl,
    /// The overflow policy, in `insert_capped`.
    policy: Option<Policy>,
    /// In `insert_capped`: the share of new clients admitted untracked,
    /// over every round.
    untracked: Option<f64>,
    threads: usize,
    key: &'static str,
    sample: Sample,
}

impl Row {
    /// `tollgate+deny-new` for a capped row, else the implementation.
    fn implementation(&self) -> String {
        match self.policy {
            Some(p) => format!("{}+{}", self.imp.name(), p.name()),
            None => self.imp.name().to_owned(),
        }
    }

    fn json(&self) -> String {
        format!(
            "{{\"scenario\":{},\"algorithm\":{},\"implementation\":{},\"threads\":{},\"key_type\":{},\"ns_per_op\":{},\"ops_per_sec\":{},\"allowed_ratio\":{}}}",
            json_str(self.scenario.name()),
            json_str(self.imp.algo().name()),
            json_str(&self.implementation()),
            self.threads,
            json_str(self.key),
            json_num(self.sample.ns_per_op()),
            json_num(self.sample.ops_per_sec()),
            json_num(self.sample.allowed_ratio()),
        )
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_num(x: f64) -> String {
    if x.is_finite() {
        // Enough digits for nanoseconds and ratios; JSON has no NaN.
        let s = format!("{x:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        "null".to_owned()
    }
}

/// Progress on stderr, so stdout stays a clean table or JSON stream.
struct Progress {
    done: usize,
    total: usize,
    start: Instant,
}

impl Progress {
    fn step(&mut self, what: &str) {
        self.done += 1;
        eprintln!(
            "compare: [{:>2}/{}] {what} ({:.1} s)",
            self.done,
            self.total,
            self.start.elapsed().as_secs_f64()
        );
    }
}

struct Sizes {
    /// Uniform clients, and the cap in `insert_capped`.
    clients: usize,
    /// `uniform_1m`'s clients.
    many_clients: usize,
    insert_total: u64,
    /// New clients per round in `insert_capped`, all threads together.
    capped_total: u64,
    capped_rounds: usize,
    sweep_clients: u64,
    sweep_rounds: usize,
    /// Checks per thread when not calibrating (quick mode).
    fixed_ops: Option<u64>,
}

/// Every scenario for key type `K`, appending one row per implementation,
/// thread count and scenario.
fn run_key<K: Key>(
    o: &Options,
    sizes: &Sizes,
    pools: &[Pool],
    progress: &mut Progress,
    rows: &mut Vec<Row>,
    problems: &mut Vec<String>,
) {
    let many = if o.scenarios.contains(&Scenario::Uniform1M) {
        sizes.many_clients
    } else {
        0
    };
    let data = Data::<K>::sized(sizes.clients, many);
    let direct = o.direct();
    for &scenario in &o.scenarios {
        let all = if scenario == Scenario::Direct {
            &direct
        } else {
            &o.impls
        };
        if all.is_empty() {
            continue;
        }
        match scenario {
            Scenario::InsertCapped => {
                run_capped(o, sizes, &data, pools, progress, rows, problems);
                continue;
            }
            Scenario::Sweep => {
                run_sweep::<K>(o, sizes, progress, rows, problems);
                continue;
            }
            _ => {}
        }
        // Hot and uniform: one prepared limiter per implementation, shared by
        // every thread count and round.
        let subjects: Vec<Arc<dyn Subject<K>>> = if scenario == Scenario::Insert {
            Vec::new()
        } else {
            all.iter()
                .map(|&imp| {
                    let s = make::<K>(imp, scenario);
                    prepare(s.as_ref(), scenario, &data);
                    s
                })
                .collect()
        };
        for pool in pools {
            let threads = pool.threads();
            progress.step(&format!("{} {} {threads}t", scenario.name(), K::NAME));
            let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); all.len()];
            if scenario == Scenario::Insert {
                let per_thread = o
                    .ops
                    .unwrap_or((sizes.insert_total / threads as u64).max(1));
                let keys = fresh_keys::<K>(threads, per_thread);
                for round in 0..o.rounds {
                    for i in rotated(all.len(), round) {
                        let subject = make::<K>(all[i], scenario);
                        let load = Load::Insert {
                            keys: Arc::clone(&keys),
                        };
                        samples[i].push(pool.run(&subject, load));
                        // The limiter drops here, outside the timed run.
                    }
                }
            } else {
                let ops: Vec<u64> = subjects
                    .iter()
                    .map(|s| match o.ops.or(sizes.fixed_ops) {
                        Some(ops) => ops,
                        None => calibrate(pool, s, &data, scenario),
                    })
                    .collect();
                for round in 0..o.rounds {
                    for i in rotated(all.len(), round) {
                        let load = data.load(scenario, ops[i]);
                        samples[i].push(pool.run(&subjects[i], load));
                    }
                }
            }
            for (imp, s) in all.iter().zip(samples) {
                rows.push(Row {
                    scenario,
                    imp: *imp,
                    policy: None,
                    untracked: None,
                    threads,
                    key: K::NAME,
                    sample: median(s),
                });
            }
        }
    }
}

/// `insert_capped`: every check a never-seen client against a tollgate
/// limiter already holding its cap (the uniform clients, all busy for an
/// hour), once per algorithm and overflow policy. One limiter per pair
/// serves every round and thread count; each round brings keys no round
/// has used, so every check is a new client and applies the policy.
fn run_capped<K: Key>(
    o: &Options,
    sizes: &Sizes,
    data: &Data<K>,
    pools: &[Pool],
    progress: &mut Progress,
    rows: &mut Vec<Row>,
    problems: &mut Vec<String>,
) {
    let cap = data.clients.len() as u64;
    let subjects: Vec<(Algo, Policy, Arc<dyn Subject<K>>)> = tollgate_algos(o)
        .into_iter()
        .flat_map(|a| o.policies.iter().map(move |&p| (a, p)))
        .map(|(a, p)| {
            let s = make_capped::<K>(a, p, cap);
            in_parallel(&data.clients, |keys| {
                keys.iter().map(|k| u64::from(s.allow(k))).sum()
            });
            (a, p, s)
        })
        .collect();
    if subjects.is_empty() {
        return;
    }
    // Past the hot, uniform and insert keys.
    let mut next_key = 1u64 << 40;
    for pool in pools {
        let threads = pool.threads();
        progress.step(&format!("insert_capped {} {threads}t", K::NAME));
        let per_thread = o
            .ops
            .unwrap_or((sizes.capped_total / threads as u64).max(1));
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); subjects.len()];
        let mut untracked = vec![0u64; subjects.len()];
        for round in 0..sizes.capped_rounds {
            let keys = fresh_keys_from::<K>(next_key, threads, per_thread);
            next_key += per_thread * threads as u64;
            for i in rotated(subjects.len(), round) {
                let (algo, policy, subject) = &subjects[i];
                let before = subject.stats().expect("tollgate's counters");
                let load = Load::Insert {
                    keys: Arc::clone(&keys),
                };
                let sample = pool.run(subject, load);
                let after = subject.stats().expect("tollgate's counters");
                if let Err(e) = capped_outcome(*policy, cap, &sample, &before, &after) {
                    problems.push(format!(
                        "insert_capped tollgate+{}/{} {} {threads}t: {e}",
                        policy.name(),
                        algo.name(),
                        K::NAME
                    ));
                }
                untracked[i] += after.admitted_untracked - before.admitted_untracked;
                samples[i].push(sample);
            }
        }
        for (((algo, policy, _), s), u) in subjects.iter().zip(samples).zip(untracked) {
            let ops: u64 = s.iter().map(|s| s.ops).sum();
            rows.push(Row {
                scenario: Scenario::InsertCapped,
                imp: Impl::Tollgate(*algo),
                policy: Some(*policy),
                untracked: Some(u as f64 / ops.max(1) as f64),
                threads,
                key: K::NAME,
                sample: median(s),
            });
        }
    }
}

/// Whether a run against a full cap did what `policy` says: the map stays
/// full and every check applied the policy.
fn capped_outcome(
    policy: Policy,
    cap: u64,
    sample: &Sample,
    before: &tollgate::Stats,
    after: &tollgate::Stats,
) -> Result<(), String> {
    let ops = sample.ops;
    let overflows = after.overflows - before.overflows;
    let untracked = after.admitted_untracked - before.admitted_untracked;
    let denied = after.denied_new - before.denied_new;
    let evicted = after.evicted_live - before.evicted_live;
    let clients = after.clients as u64;
    // Concurrent evict-and-insert may leave a slot or so free.
    let full = if sample.threads == 1 {
        clients == cap
    } else {
        clients <= cap && clients + sample.threads as u64 >= cap
    };
    // A cell another thread has just inserted is idle until its first
    // check lands, and a sample may forget it (that check then retries,
    // and may overflow again): only sampled eviction inserts, so only it
    // may meet one.
    let idle = after.evicted_idle - before.evicted_idle;
    let ok = full
        && (idle == 0 || (policy == Policy::EvictSampled && sample.threads > 1))
        && match policy {
            // Each new client is tracked in a slot an eviction freed (its
            // own or, across threads, another's: then it may find room
            // without overflowing) or admitted untracked, after four
            // evictions taken by others.
            Policy::EvictSampled => {
                sample.allowed == ops
                    && denied == 0
                    && evicted > 0
                    && overflows <= ops + idle
                    && evicted + untracked == ops + (cap - clients)
                    && (sample.threads > 1 || (overflows == ops && evicted == ops))
            }
            Policy::DenyNew => {
                sample.allowed == 0 && overflows == ops && denied == ops && evicted == 0
            }
            Policy::AdmitUntracked => {
                sample.allowed == ops
                    && overflows == ops
                    && untracked == ops
                    && evicted == 0
                    && denied == 0
            }
        };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{ops} new clients, {} admitted; {clients} of {cap} held; counters {:?} -> {:?}",
            sample.allowed, before, after
        ))
    }
}

/// `sweep`: fill each implementation with the same idle clients on a
/// hand-driven clock, move it an hour on, and time one full sweep.
fn run_sweep<K: Key>(
    o: &Options,
    sizes: &Sizes,
    progress: &mut Progress,
    rows: &mut Vec<Row>,
    problems: &mut Vec<String>,
) {
    let subjects = sweep_impls(o);
    if subjects.is_empty() {
        return;
    }
    let n = sizes.sweep_clients;
    let keys: Vec<K> = (0..n).map(K::nth).collect();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); subjects.len()];
    for round in 0..sizes.sweep_rounds {
        progress.step(&format!(
            "sweep {} {n} clients, round {}",
            K::NAME,
            round + 1
        ));
        for i in rotated(subjects.len(), round) {
            let limiter = make_stale::<K>(subjects[i]);
            let admitted = in_parallel(&keys, |keys| limiter.fill(keys));
            limiter.age();
            let before = limiter.len();
            let start = Instant::now();
            limiter.sweep();
            let wall = start.elapsed();
            let after = limiter.len();
            if admitted != n || before as u64 != n || after != 0 {
                problems.push(format!(
                    "sweep {} {}: {admitted} of {n} admitted, {before} held, {after} left after the sweep",
                    subjects[i].label(),
                    K::NAME
                ));
            }
            samples[i].push(Sample {
                wall,
                ops: before as u64,
                allowed: before.saturating_sub(after) as u64,
                threads: 1,
            });
            // The sweep freed the entries: dropping the map is quick.
        }
    }
    for (imp, s) in subjects.iter().zip(samples) {
        rows.push(Row {
            scenario: Scenario::Sweep,
            imp: *imp,
            policy: None,
            untracked: None,
            threads: 1,
            key: K::NAME,
            sample: median(s),
        });
    }
}

/// The median-by-cost sample.
fn median(mut s: Vec<Sample>) -> Sample {
    s.sort_by(|a, b| a.ns_per_op().total_cmp(&b.ns_per_op()));
    s[s.len() / 2]
}

/// Round `round`'s order: each implementation goes first in turn.
fn rotated(n: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |i| (i + round) % n)
}

/// Checks per thread that make one run last about [`ROUND_TARGET`]. The
/// runs it makes double as warm-up.
fn calibrate<K: Key>(
    pool: &Pool,
    subject: &Arc<dyn Subject<K>>,
    data: &Data<K>,
    scenario: Scenario,
) -> u64 {
    let mut ops = 1_000u64;
    loop {
        let wall = pool.run(subject, data.load(scenario, ops)).wall;
        if wall >= ROUND_TARGET / 8 || ops >= 1 << 30 {
            let scaled = ops as f64 * ROUND_TARGET.as_secs_f64() / wall.as_secs_f64().max(1e-9);
            return (scaled as u64).clamp(1_000, 1 << 30);
        }
        ops *= 4;
    }
}

// ---------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------

fn find(rows: &[Row], r: &Row, imp: Impl) -> Option<f64> {
    rows.iter()
        .find(|x| {
            x.imp == imp
                && x.policy.is_none()
                && x.scenario == r.scenario
                && x.threads == r.threads
                && x.key == r.key
        })
        .map(|x| x.sample.ns_per_op())
}

fn cell(ns: Option<f64>) -> String {
    ns.map_or("–".to_owned(), |ns| format!("{ns:.1}"))
}

fn ratio(baseline: Option<f64>, ours: f64) -> String {
    baseline.map_or("–".to_owned(), |b| format!("{:.2}×", b / ours))
}

fn print_table(rows: &[Row]) {
    println!(
        "| scenario | key | threads | algorithm | tollgate ns/op | tollgate Mops/s | mutex-map ns/op | × mutex-map | global-mutex ns/op | governor ns/op | × governor | allowed |"
    );
    println!("|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    let checks = rows
        .iter()
        .filter(|r| SCENARIOS.contains(&r.scenario) && matches!(r.imp, Impl::Tollgate(_)));
    for r in checks {
        let ours = r.sample.ns_per_op();
        let algo = r.imp.algo();
        let mutex_map = find(rows, r, Impl::MutexMap(algo));
        let global = find(rows, r, Impl::GlobalMutex(algo));
        let governor = find(rows, r, Impl::Governor);
        println!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {:.0}% |",
            r.scenario.name(),
            r.key,
            r.threads,
            algo.name(),
            ours,
            r.sample.ops_per_sec() / 1e6,
            cell(mutex_map),
            ratio(mutex_map, ours),
            cell(global),
            cell(governor),
            ratio(governor, ours),
            r.sample.allowed_ratio() * 100.0,
        );
    }
    println!();
    println!(
        "ns/op: the cost of one check as each thread sees it (median of rounds). × X: X's ns/op over tollgate's; above 1 means tollgate is faster. global-mutex runs the token bucket only; governor is GCRA, its token bucket."
    );
}

/// Two limits on one client, if they ran: `Both` against the two-limiter
/// way and against one plain check.
fn print_two_limits(rows: &[Row]) {
    let both = Impl::Tollgate(Algo::TwoBuckets);
    let pairs: Vec<&Row> = rows
        .iter()
        .filter(|r| SCENARIOS.contains(&r.scenario) && r.imp == both)
        .collect();
    if pairs.is_empty() {
        return;
    }
    println!();
    println!(
        "| scenario | key | threads | two limits, one exchange ns/op | two limiters ns/op | × two limiters | one limit ns/op | × one limit |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|");
    for r in pairs {
        let ours = r.sample.ns_per_op();
        let two = find(rows, r, Impl::TwoLimiters);
        let one = find(rows, r, Impl::Tollgate(Algo::TokenBucket));
        println!(
            "| {} | {} | {} | {:.1} | {} | {} | {} | {} |",
            r.scenario.name(),
            r.key,
            r.threads,
            ours,
            cell(two),
            ratio(two, ours),
            cell(one),
            ratio(one, ours),
        );
    }
    println!();
    println!(
        "Two limits: the scenario's token bucket and as many tokens per hour, held by `Builder::and` (one lookup, one 128-bit exchange) or by two limiters checked one after the other (two lookups, two exchanges). × X: X's ns/op over the pair's."
    );
}

/// The reconfigurable token bucket, if it ran, against the plain one.
fn print_tiered(rows: &[Row]) {
    let tiered = Impl::Tollgate(Algo::TieredBucket);
    let ran: Vec<&Row> = rows
        .iter()
        .filter(|r| SCENARIOS.contains(&r.scenario) && r.imp == tiered)
        .collect();
    if ran.is_empty() {
        return;
    }
    println!();
    println!("| scenario | key | threads | reconfigurable ns/op | plain ns/op | × plain |");
    println!("|---|---|--:|--:|--:|--:|");
    for r in ran {
        let ours = r.sample.ns_per_op();
        let plain = find(rows, r, Impl::Tollgate(Algo::TokenBucket));
        println!(
            "| {} | {} | {} | {:.1} | {} | {} |",
            r.scenario.name(),
            r.key,
            r.threads,
            ours,
            cell(plain),
            ratio(plain, ours),
        );
    }
    println!();
    println!(
        "Reconfigurable: the token bucket built with `Builder::reconfigurable` (its quota can change at run time; each check reads its client's quota from the shared quota table). × plain: the plain bucket's ns/op over the reconfigurable one's."
    );
}

/// The direct limiters, if they ran: tollgate's against governor's and
/// against tollgate's keyed limiter on one hot key.
fn print_direct(rows: &[Row]) {
    let ran: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scenario == Scenario::Direct && r.imp == Impl::TollgateDirect)
        .collect();
    if ran.is_empty() {
        return;
    }
    println!();
    println!(
        "| scenario | key | threads | tollgate direct ns/op | governor direct ns/op | × governor direct | tollgate hot key ns/op | × hot key | allowed |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|");
    for r in ran {
        let ours = r.sample.ns_per_op();
        let governor = find(rows, r, Impl::GovernorDirect);
        let keyed = find(rows, r, Impl::Tollgate(Algo::TokenBucket));
        println!(
            "| {} | {} | {} | {:.1} | {} | {} | {} | {} | {:.0}% |",
            r.scenario.name(),
            r.key,
            r.threads,
            ours,
            cell(governor),
            ratio(governor, ours),
            cell(keyed),
            ratio(keyed, ours),
            r.sample.allowed_ratio() * 100.0,
        );
    }
    println!();
    println!(
        "Direct: one budget for every thread, never exhausted (the hot_allowed bucket). tollgate's `DirectLimiter` (`Builder::build_direct`), governor's `RateLimiter::direct`, and tollgate's keyed limiter checking one hot key of the row's key type (the direct limiters never read the key). × X: X's ns/op over tollgate direct's."
    );
}

/// The `insert_capped` and `sweep` tables, if either ran.
fn print_eviction(rows: &[Row], sizes: &Sizes, cap: usize) {
    let at = |scenario: Scenario, imp: Impl, policy: Option<Policy>, key: &str, threads: usize| {
        rows.iter()
            .find(|x| {
                x.scenario == scenario
                    && x.imp == imp
                    && x.policy == policy
                    && x.key == key
                    && x.threads == threads
            })
            .map(|x| x.sample)
    };
    // One line per algorithm, key and thread count: the first policy run.
    let first = rows
        .iter()
        .find(|r| r.scenario == Scenario::InsertCapped)
        .and_then(|r| r.policy);
    let capped: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scenario == Scenario::InsertCapped && r.policy == first)
        .collect();
    if !capped.is_empty() {
        println!();
        print!("| insert_capped | key | threads | algorithm | no cap ns/op |");
        for p in POLICIES {
            print!(" {} ns/op |", p.name());
        }
        println!(" governor ns/op | evict-sampled untracked |");
        println!("|---|---|--:|---|--:|--:|--:|--:|--:|--:|");
        for r in capped {
            let ns = |s: Option<Sample>| cell(s.map(|s| s.ns_per_op()));
            let (algo, key, t) = (r.imp.algo(), r.key, r.threads);
            print!(
                "| | {key} | {t} | {} | {} |",
                algo.name(),
                ns(at(Scenario::Insert, r.imp, None, key, t))
            );
            for &p in POLICIES {
                let s = at(Scenario::InsertCapped, r.imp, Some(p), key, t);
                print!(" {} |", ns(s));
            }
            println!(
                " {} | {} |",
                ns(at(Scenario::Insert, Impl::Governor, None, key, t)),
                r.untracked
                    .map_or("–".to_owned(), |u| format!("{:.0}%", u * 100.0))
            );
        }
        println!();
        println!(
            "insert_capped: every check is a client never seen before, against a limiter already holding its max_clients({cap}), none idle (quotas per hour), so every check applies the policy (median of rounds). no cap and governor: the insert scenario's figures, from an empty map. evict-sampled untracked: the share of new clients whose four samples found no client to forget, admitted untracked (all rounds)."
        );
    }
    let swept: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scenario == Scenario::Sweep && matches!(r.imp, Impl::Tollgate(_)))
        .collect();
    let governor_only = rows
        .iter()
        .any(|r| r.scenario == Scenario::Sweep && r.imp == Impl::Governor);
    if !swept.is_empty() || governor_only {
        println!();
        println!("| sweep | key | algorithm | clients | tollgate ms | tollgate ns/entry | governor ms | governor ns/entry | × governor |");
        println!("|---|---|---|--:|--:|--:|--:|--:|--:|");
        let keys: Vec<&str> = KEYS
            .iter()
            .copied()
            .filter(|k| {
                rows.iter()
                    .any(|r| r.scenario == Scenario::Sweep && r.key == *k)
            })
            .collect();
        for key in keys {
            let governor = at(Scenario::Sweep, Impl::Governor, None, key, 1);
            let ms = |s: Option<Sample>| {
                s.map_or("–".to_owned(), |s| {
                    format!("{:.1}", s.wall.as_secs_f64() * 1e3)
                })
            };
            let per = |s: Option<Sample>| cell(s.map(|s| s.ns_per_op()));
            let ours: Vec<&&Row> = swept.iter().filter(|r| r.key == key).collect();
            let lines: Vec<Option<Sample>> = if ours.is_empty() {
                vec![None]
            } else {
                ours.iter().map(|r| Some(r.sample)).collect()
            };
            for (i, s) in lines.into_iter().enumerate() {
                let algo = ours.get(i).map_or("–", |r| r.imp.algo().name());
                println!(
                    "| | {key} | {algo} | {} | {} | {} | {} | {} | {} |",
                    s.or(governor).map_or(0, |s| s.ops),
                    ms(s),
                    per(s),
                    ms(governor),
                    per(governor),
                    s.map_or("–".to_owned(), |s| ratio(
                        governor.map(|g| g.ns_per_op()),
                        s.ns_per_op()
                    )),
                );
            }
        }
        println!();
        println!(
            "sweep: one full pass over {} clients that have all gone idle (filled on a hand-driven clock, then moved an hour on; tollgate's auto-sweep off), single-threaded; ns/entry is the pass over the clients held. tollgate: Limiter::sweep(); governor: retain_recent() on its DashMap store. × governor above 1 means tollgate's sweep is faster. Median of {} rounds.",
            sizes.sweep_clients, sizes.sweep_rounds
        );
    }
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

struct Memory {
    imp: Impl,
    key: &'static str,
    clients: u64,
    bytes: u64,
}

impl Memory {
    fn per_client(&self) -> f64 {
        self.bytes as f64 / self.clients as f64
    }

    fn json(&self) -> String {
        format!(
            "{{\"scenario\":\"memory\",\"algorithm\":{},\"implementation\":{},\"key_type\":{},\"clients\":{},\"bytes_per_client\":{}}}",
            json_str(self.imp.algo().name()),
            json_str(self.imp.name()),
            json_str(self.key),
            self.clients,
            json_num(self.per_client()),
        )
    }
}

/// Resident set size in bytes, from `/proc/self/statm`.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("parse /proc/self/statm");
    pages * page_size()
}

/// The page size, from the auxiliary vector (`AT_PAGESZ`).
fn page_size() -> u64 {
    const AT_PAGESZ: u64 = 6;
    let auxv = std::fs::read("/proc/self/auxv").unwrap_or_default();
    auxv.chunks_exact(16)
        .map(|pair| {
            let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap());
            (word(&pair[..8]), word(&pair[8..]))
        })
        .find(|&(tag, _)| tag == AT_PAGESZ)
        .map_or(4096, |(_, size)| size)
}

/// In the child: the RSS growth from inserting `clients` new clients.
fn memory_child<K: Key>(imp: Impl, clients: u64) -> u64 {
    // The insert scenario's state, but with quotas per hour: with a quota
    // per second a client is idle a millisecond later, and tollgate's
    // auto-sweep would forget most of the million as they are inserted.
    let subject = make::<K>(imp, Scenario::InsertCapped);
    let before = rss();
    for i in 0..clients {
        // Each key is built, checked, and dropped; only the limiter's copy
        // of it stays.
        let admitted = subject.allow(&K::nth(i));
        debug_assert!(admitted);
    }
    let after = rss();
    drop(subject);
    after.saturating_sub(before)
}

fn run_child(args: &[String]) -> ExitCode {
    let [label, key, clients] = args else {
        eprintln!("{MEMORY_CHILD} takes IMPLEMENTATION/ALGORITHM KEY CLIENTS");
        return ExitCode::FAILURE;
    };
    let Some(imp) = all_impls().into_iter().find(|i| i.label() == *label) else {
        eprintln!("{MEMORY_CHILD}: no implementation `{label}`");
        return ExitCode::FAILURE;
    };
    let clients: u64 = clients.parse().expect("client count");
    let bytes = match key.as_str() {
        "String" => memory_child::<String>(imp, clients),
        "u64" => memory_child::<u64>(imp, clients),
        "IpAddr" => memory_child::<IpAddr>(imp, clients),
        other => {
            eprintln!("{MEMORY_CHILD}: no key type `{other}`");
            return ExitCode::FAILURE;
        }
    };
    println!("{bytes}");
    ExitCode::SUCCESS
}

/// tollgate's algorithms, the baselines' token bucket (a state costs the same
/// whichever algorithm fills it), and governor.
fn memory_impls(o: &Options) -> Vec<Impl> {
    o.impls
        .iter()
        .copied()
        .filter(|i| matches!(i, Impl::Tollgate(_)) || i.algo() == Algo::TokenBucket)
        .collect()
}

/// One fresh child process per implementation and key type, so no
/// measurement inherits another's heap.
fn measure_memory(o: &Options, clients: u64, progress: &mut Progress) -> Vec<Memory> {
    let exe = std::env::current_exe().expect("current_exe");
    let mut out = Vec::new();
    for (key, o) in o.plan() {
        for imp in memory_impls(&o) {
            progress.step(&format!("memory {} {key}", imp.label()));
            let output = Command::new(&exe)
                .args([MEMORY_CHILD, &imp.label(), key, &clients.to_string()])
                .output()
                .expect("spawn memory child");
            let text = String::from_utf8_lossy(&output.stdout);
            let bytes = match text.trim().parse() {
                Ok(bytes) if output.status.success() => bytes,
                _ => panic!(
                    "memory child for {} {key} failed: {}",
                    imp.label(),
                    String::from_utf8_lossy(&output.stderr)
                ),
            };
            out.push(Memory {
                imp,
                key,
                clients,
                bytes,
            });
        }
    }
    out
}

fn print_memory(rows: &[Memory]) {
    println!("| implementation | algorithm | key | bytes/client | vs governor |");
    println!("|---|---|---|--:|--:|");
    for m in rows {
        let governor = rows
            .iter()
            .find(|g| g.imp == Impl::Governor && g.key == m.key)
            .map(Memory::per_client);
        println!(
            "| {} | {} | {} | {:.1} | {} |",
            m.imp.name(),
            m.imp.algo().name(),
            m.key,
            m.per_client(),
            governor.map_or("–".to_owned(), |g| format!("{:.2}×", m.per_client() / g)),
        );
    }
    println!();
    println!(
        "RSS growth over {} new clients in a fresh process, divided by the count (keys included). vs governor: below 1 means smaller.",
        rows.first().map_or(0, |m| m.clients)
    );
}

// ---------------------------------------------------------------------------
// Quick-mode checks: outcomes, never times.
// ---------------------------------------------------------------------------

fn check(o: &Options, rows: &[Row], memory: &[Memory], problems: &[String]) -> Result<(), String> {
    if let Some(p) = problems.first() {
        return Err(format!("{} problem(s); the first: {p}", problems.len()));
    }
    let all = impls();
    let tollgates = all
        .iter()
        .filter(|i| matches!(i, Impl::Tollgate(_)))
        .count();
    let expected_cells = KEYS.len()
        * (SCENARIOS.len() * all.len() * o.threads.len()
            + direct_impls().len() * o.threads.len()
            + tollgates * POLICIES.len() * o.threads.len()
            + tollgates
            + 1);
    if !o.filtered() && rows.len() != expected_cells {
        return Err(format!("{} rows, expected {expected_cells}", rows.len()));
    }
    for r in rows {
        let what = format!(
            "{} {}/{} {} {}t",
            r.scenario.name(),
            r.implementation(),
            r.imp.algo().name(),
            r.key,
            r.threads
        );
        let allowed = r.sample.allowed_ratio();
        let ok = match r.scenario {
            // The quota is spent before timing starts.
            Scenario::HotDenied => r.sample.allowed == 0,
            // Quotas far above what the run can use.
            Scenario::Insert | Scenario::Uniform | Scenario::Uniform1M => {
                r.sample.allowed == r.sample.ops
            }
            Scenario::HotAllowed | Scenario::Direct => allowed > 0.5,
            Scenario::InsertCapped => match r.policy {
                Some(Policy::DenyNew) => r.sample.allowed == 0,
                Some(_) => r.sample.allowed == r.sample.ops,
                None => false,
            },
            // Every idle client removed.
            Scenario::Sweep => r.sample.allowed == r.sample.ops,
        };
        if !ok || r.sample.ops == 0 || !r.sample.ns_per_op().is_finite() {
            return Err(format!(
                "{what}: allowed {allowed:.3} of {} checks",
                r.sample.ops
            ));
        }
    }
    for m in memory {
        if m.bytes == 0 {
            return Err(format!(
                "memory {} {}: no growth measured",
                m.imp.label(),
                m.key
            ));
        }
    }
    for line in rows
        .iter()
        .map(Row::json)
        .chain(memory.iter().map(Memory::json))
    {
        if !(line.starts_with('{') && line.ends_with('}')) || line.contains("null") {
            return Err(format!("bad JSON line {line}"));
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(MEMORY_CHILD) {
        return run_child(&args[1..]);
    }
    let o = match parse(&args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("compare: {e}");
            return ExitCode::from(2);
        }
    };
    if cfg!(debug_assertions) && !o.quick {
        eprintln!("compare: a debug build; run with --release for meaningful numbers");
    }
    let sizes = if o.quick {
        Sizes {
            clients: 1_000,
            many_clients: 10_000,
            insert_total: 2_000,
            capped_total: 2_000,
            capped_rounds: 1,
            sweep_clients: o.sweep_clients.unwrap_or(2_000),
            sweep_rounds: 1,
            fixed_ops: Some(2_000),
        }
    } else {
        Sizes {
            clients: workload::UNIFORM_CLIENTS,
            many_clients: workload::UNIFORM_1M_CLIENTS,
            insert_total: INSERT_TOTAL,
            capped_total: CAPPED_TOTAL,
            capped_rounds: o.rounds.min(EVICTION_ROUNDS),
            sweep_clients: o.sweep_clients.unwrap_or(SWEEP_CLIENTS),
            sweep_rounds: o.rounds.min(EVICTION_ROUNDS),
            fixed_ops: None,
        }
    };
    // The quick run always exercises the memory path too, on fewer clients.
    let memory = o.memory || o.quick;
    let memory_clients = if o.quick { 20_000 } else { MEMORY_CLIENTS };
    let plan = o.plan();
    let memory_steps: usize = if memory {
        plan.iter().map(|(_, ko)| memory_impls(ko).len()).sum()
    } else {
        0
    };
    let steps: usize = plan
        .iter()
        .flat_map(|(_, ko)| {
            ko.scenarios.iter().map(|s| match s {
                Scenario::InsertCapped if tollgate_algos(ko).is_empty() => 0,
                Scenario::Sweep if sweep_impls(ko).is_empty() => 0,
                Scenario::Sweep => sizes.sweep_rounds,
                Scenario::Direct if ko.direct().is_empty() => 0,
                _ => o.threads.len(),
            })
        })
        .sum();
    let mut progress = Progress {
        done: 0,
        total: steps + memory_steps,
        start: Instant::now(),
    };
    eprintln!(
        "compare: {} implementations, threads {:?}, {} rounds each; {} cores here, load average {}",
        o.impls.len(),
        o.threads,
        o.rounds,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_owned))
            .unwrap_or_else(|| "unknown".to_owned()),
    );

    if o.scenarios.contains(&Scenario::Sweep) {
        eprintln!(
            "compare: the sweep fills {} clients per implementation and round, {} rounds",
            sizes.sweep_clients, sizes.sweep_rounds
        );
    }

    let mut rows = Vec::new();
    let mut problems = Vec::new();
    // Long-lived threads for every run: see `Pool`.
    let pools: Vec<Pool> = o.threads.iter().map(|&t| Pool::new(t)).collect();
    for (key, ko) in &plan {
        let (p, r, e) = (&mut progress, &mut rows, &mut problems);
        match *key {
            "String" => run_key::<String>(ko, &sizes, &pools, p, r, e),
            "u64" => run_key::<u64>(ko, &sizes, &pools, p, r, e),
            "IpAddr" => run_key::<IpAddr>(ko, &sizes, &pools, p, r, e),
            other => unreachable!("no key type {other}"),
        }
    }
    drop(pools);
    // Group the output by scenario, then key, then threads.
    let order = all_scenarios();
    rows.sort_by_key(|r| {
        let s = order.iter().position(|&s| s == r.scenario);
        let k = KEYS.iter().position(|&k| k == r.key);
        (s, k, r.threads)
    });
    let mem = if memory {
        measure_memory(&o, memory_clients, &mut progress)
    } else {
        Vec::new()
    };

    if o.json {
        for r in &rows {
            println!("{}", r.json());
        }
        for m in &mem {
            println!("{}", m.json());
        }
    } else {
        if rows.iter().any(|r| SCENARIOS.contains(&r.scenario)) {
            print_table(&rows);
            print_two_limits(&rows);
            print_tiered(&rows);
        }
        print_direct(&rows);
        print_eviction(&rows, &sizes, sizes.clients);
        if !mem.is_empty() {
            println!();
            print_memory(&mem);
        }
    }
    eprintln!(
        "compare: done in {:.1} s",
        progress.start.elapsed().as_secs_f64()
    );

    for p in &problems {
        eprintln!("compare: unexpected outcome: {p}");
    }
    if o.quick {
        if let Err(e) = check(&o, &rows, &mem, &problems) {
            eprintln!("compare --quick: FAILED: {e}");
            return ExitCode::FAILURE;
        }
        eprintln!("compare --quick: every implementation, scenario and output checked");
    }
    ExitCode::SUCCESS
}
