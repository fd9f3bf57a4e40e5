//! The Redis limiters against a real `redis-server`, started by each test
//! on a free loopback port in a temporary directory, with persistence off,
//! and killed when the test ends.
//!
//! Without a `redis-server` binary these tests print why and pass, unless
//! `CI=true`, where a missing server fails them.

mod redis_server;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis_server::{
    builders, manager_config, prefix, runtime, Cluster, Patient, Server, HOUR, PATIENCE,
};
use tollgate::redis::{FailPolicy, Lease, RedisAlgorithm, RedisConnection, RedisLimiter};
use tollgate::{AsyncCheck, CheckErrorKind, Decision, FixedWindow, SlidingWindowLog, TokenBucket};

// ---------------------------------------------------------------------------
// Exactness across processes.

const CHILD_ENV: &str = "TOLLGATE_REDIS_CHILD";
const TASKS: usize = 8;
const CHECKS_PER_TASK: usize = 40;

/// A child process of this test binary running `child_worker` on
/// `target` (a server's URL, or `cluster:` and the nodes'), `algo`'s
/// limiter under the prefix `name`, in `mode`; its output piped.
fn child(target: &str, algo: &str, name: &str, mode: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["child_worker", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{target}|{algo}|{name}|{mode}"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Run by the child processes of `exactly_the_quota_across_processes`
/// (and a no-op otherwise): `TASKS` tasks each check `CHECKS_PER_TASK`
/// times, and the process prints how many were admitted.
#[test]
fn child_worker() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split('|');
    let (url, algo, name, mode) = (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
        parts.next().unwrap_or("each").to_string(),
    );
    let coalesce = mode == "coalesce";
    if let Some(lease) = mode.strip_prefix("outage") {
        outage_worker(&url, &name, lease == "-lease");
        return;
    }
    let admitted = runtime().block_on(async move {
        let conn: RedisConnection = match url.strip_prefix("cluster:") {
            Some(nodes) => redis::cluster::ClusterClient::new(nodes.split(',').collect::<Vec<_>>())
                .unwrap()
                .get_async_connection()
                .await
                .unwrap()
                .into(),
            None => ConnectionManager::new_with_config(
                redis::Client::open(url).unwrap(),
                manager_config(),
            )
            .await
            .unwrap()
            .into(),
        };
        // Exactness, not latency, is under test: the builders are
        // patient, so a loaded machine only makes a reply slow.
        let (tb, swc, fw, swl) = builders(&conn, &name, 100, HOUR);
        let policy = FailPolicy::FailClosed;
        match algo.as_str() {
            "tb" if mode == "lease" || mode == "victim" => {
                let limiter = tb
                    .fail_policy(policy)
                    .lease(Lease::new(Duration::from_secs(60)).max_units(LEASE_UNITS))
                    .build()
                    .unwrap();
                let (admitted, coalesced) = if mode == "victim" {
                    hold_and_wait(limiter).await
                } else {
                    let admitted = hammer(limiter.clone()).await;
                    report_leases(&limiter);
                    admitted
                };
                (vec![admitted], coalesced)
            }
            "tb" => {
                let limiter = tb.fail_policy(policy);
                either(limiter.coalesce(coalesce).build().unwrap(), coalesce).await
            }
            "swc" => {
                let limiter = swc.fail_policy(policy);
                either(limiter.coalesce(coalesce).build().unwrap(), coalesce).await
            }
            "fw" => {
                let limiter = fw.fail_policy(policy);
                either(limiter.coalesce(coalesce).build().unwrap(), coalesce).await
            }
            "swl" => {
                let limiter = swl.fail_policy(policy);
                either(limiter.coalesce(coalesce).build().unwrap(), coalesce).await
            }
            other => panic!("unknown algorithm {other}"),
        }
    });
    // The shared client's admissions, then every client's.
    println!("ADMITTED={}", admitted.0[0]);
    let all: Vec<String> = admitted.0.iter().map(u64::to_string).collect();
    println!("ADMITTED_ALL={}", all.join(","));
    println!("COALESCED={}", admitted.1);
}

/// The most units one lease holds in the cross-process tests.
const LEASE_UNITS: u64 = 10;

/// The quota of the outage test: 40 an hour, for a fleet of `OUTAGE_FLEET`
/// processes.
const OUTAGE_QUOTA: u64 = 40;
const OUTAGE_FLEET: u32 = 2;

/// A child of `a_pause_costs_a_fleet_of_processes_no_more_than_was_left`:
/// four tasks check one client every 5 ms for 4 s, under the default
/// `Local` policy with the fleet's share, a 1 s timeout and no deny
/// shortcut (so that every check is a call while Redis answers), leasing
/// if `lease`; the process prints what it admitted and how many checks
/// its fallback decided. The timeout is short enough for the pause to
/// trip it, and long enough that no reply before the pause misses it on a
/// loaded machine (a first check timed out would be decided on a full
/// share, before Redis said what was left).
fn outage_worker(url: &str, name: &str, lease: bool) {
    runtime().block_on(async {
        let conn =
            ConnectionManager::new_with_config(redis::Client::open(url).unwrap(), manager_config())
                .await
                .unwrap();
        let mut builder = TokenBucket::builder()
            .rate(OUTAGE_QUOTA, HOUR)
            .redis(conn, name)
            .local_share(OUTAGE_FLEET)
            .timeout(Duration::from_secs(1))
            .no_deny_shortcut();
        if lease {
            builder = builder.lease(Lease::new(Duration::from_secs(60)).max_units(LEASE_UNITS));
        }
        let limiter = builder.build().unwrap();
        let until = Instant::now() + Duration::from_secs(4);
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let mut admitted = 0;
                    while Instant::now() < until {
                        admitted += u64::from(limiter.check("shared").await.unwrap().is_allowed());
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    admitted
                })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            admitted += task.await.unwrap();
        }
        println!("ADMITTED={admitted}");
        println!("FAIL_LOCAL={}", limiter.stats().fail_local);
    });
}

/// Two real processes share a bucket of 40 an hour under the default
/// `Local` policy (each on its half, `local_share(2)`), spend it, and then
/// Redis stops answering for 2.5 s (`CLIENT PAUSE`): each process decides
/// alone from what Redis last told it was left, nothing, so the fleet
/// admits exactly the quota, with and without leases. A fallback that
/// started from a full bucket admitted a full share more per process.
#[test]
fn a_pause_costs_a_fleet_of_processes_no_more_than_was_left() {
    let Some(server) = Server::start() else {
        return;
    };
    for mode in ["outage", "outage-lease"] {
        let name = prefix(mode);
        let children: Vec<_> = (0..OUTAGE_FLEET)
            .map(|_| child(&server.url(), "tb", &name, mode))
            .collect();
        // The quota is spent within a few hundred ms of the children's
        // start; then Redis pauses, for more than twice their timeout.
        std::thread::sleep(Duration::from_secs(1));
        let _: () = redis::cmd("CLIENT")
            .arg(&["PAUSE", "2500", "ALL"][..])
            .query(&mut server.sync())
            .unwrap();
        let (mut admitted, mut local) = (0, 0);
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{mode}: a child failed");
            let text = String::from_utf8_lossy(&out.stdout);
            let field = |what: &str| -> u64 {
                text.lines()
                    .find_map(|l| l.split_once(what).map(|(_, n)| n.trim().parse().unwrap()))
                    .unwrap_or_else(|| panic!("{mode}: no {what} in {text}"))
            };
            admitted += field("ADMITTED=");
            local += field("FAIL_LOCAL=");
        }
        assert!(local > 0, "{mode}: the pause sent checks to the fallback");
        assert_eq!(
            admitted, OUTAGE_QUOTA,
            "{mode}: {admitted} admitted ({local} checks decided in process) against a quota of {OUTAGE_QUOTA}"
        );
    }
}

/// Prints a leasing limiter's lease figures for the parent.
fn report_leases<A: RedisAlgorithm>(limiter: &RedisLimiter<A>) {
    let stats = limiter.stats();
    println!("LEASE_UNITS={}", stats.lease_units);
    println!("LEASED={}", stats.leased);
    println!("LAPSED={}", stats.lease_lapsed);
    println!("RETURNED={}", stats.lease_returned);
}

/// The process the parent kills: it admits at least 8 checks, until it
/// holds units of a lease (a client's first few go one call each, then it
/// is leased), lets its calls for more settle, reports what it holds, and
/// waits to be killed.
async fn hold_and_wait<A: RedisAlgorithm>(limiter: RedisLimiter<A>) -> (u64, u64) {
    let mut admitted = 0;
    // Until it holds units: how many a grant gives depends on the rate of
    // the checks before it, which a loaded machine slows.
    let held = |s: tollgate::redis::RedisStats| {
        s.lease_units - s.leased - s.lease_lapsed - s.lease_returned
    };
    for _ in 0..40 {
        admitted += u64::from(limiter.check("shared-client").await.unwrap().is_allowed());
        if admitted >= 8 && held(limiter.stats()) > 0 {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    println!("ADMITTED={admitted}");
    report_leases(&limiter);
    println!("READY");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    tokio::time::sleep(Duration::from_secs(120)).await;
    panic!("the parent kills this process");
}

/// The checks admitted, and those that rode another's call.
/// The clients a coalescing process's tasks check, in turn: the checks
/// of a batch are of many clients.
const MANY: [&str; 5] = ["shared-client", "m1", "m2", "m3", "m4"];

/// A coalescing process checks many clients ([`hammer_many`]); one that
/// is not, the shared client only ([`hammer`]).
async fn either<A: RedisAlgorithm>(limiter: RedisLimiter<A>, coalesce: bool) -> (Vec<u64>, u64) {
    if coalesce {
        hammer_many(limiter).await
    } else {
        let (admitted, coalesced) = hammer(limiter).await;
        (vec![admitted], coalesced)
    }
}

/// `TASKS` tasks × `CHECKS_PER_TASK` checks, each task going through
/// [`MANY`] in turn from its own start: each client's admissions, and how
/// many checks rode another's call.
async fn hammer_many<A: RedisAlgorithm>(limiter: RedisLimiter<A>) -> (Vec<u64>, u64) {
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut admitted = vec![0; MANY.len()];
                for i in 0..CHECKS_PER_TASK {
                    let c = (t + i) % MANY.len();
                    let d = limiter.check(MANY[c]).await.expect("Redis answers");
                    admitted[c] += u64::from(d.is_allowed());
                }
                admitted
            })
        })
        .collect();
    let mut total = vec![0; MANY.len()];
    for task in tasks {
        for (t, a) in total.iter_mut().zip(task.await.unwrap()) {
            *t += a;
        }
    }
    (total, limiter.stats().coalesced)
}

async fn hammer<A: RedisAlgorithm>(limiter: RedisLimiter<A>) -> (u64, u64) {
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..CHECKS_PER_TASK {
                    let d = limiter.check("shared-client").await.expect("Redis answers");
                    admitted += u64::from(d.is_allowed());
                }
                admitted
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    (total, limiter.stats().coalesced)
}

#[test]
fn exactly_the_quota_across_processes() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    across_processes(&server.url(), "procs", false);
}

/// The same with each process coalescing its tasks' checks of the client
/// (`RedisBuilder::coalesce`): exactly the quota still.
#[test]
fn exactly_the_quota_across_processes_coalesced() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    across_processes(&server.url(), "coalesced", true);
}

/// Four processes leasing a token bucket's units (100 an hour, leases of
/// at most 10): one takes a lease and is killed (SIGKILL) while it holds
/// it; then three run `TASKS` tasks × `CHECKS_PER_TASK` checks each. The
/// fleet never admits more than the bucket (its refill over the test
/// included), and falls short of it by no more than the units the dead
/// process held, the units that lapsed, and what each survivor may hold
/// unspent at its exit (at most a lease each).
#[test]
fn never_beyond_the_quota_across_processes_with_leases_one_killed() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let started = Instant::now();
    let name = prefix("leases");
    let spawn = |mode: &str| child(&server.url(), "tb", &name, mode);
    let field = |lines: &[String], what: &str| -> u64 {
        lines
            .iter()
            .find_map(|l| l.split_once(what).map(|(_, n)| n.trim().parse().unwrap()))
            .unwrap_or_else(|| panic!("no {what} in {lines:?}"))
    };
    // The victim: reads until it says it holds its lease, then dies.
    let mut victim = spawn("victim");
    let mut lines = Vec::new();
    for line in BufReader::new(victim.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let ready = line == "READY";
        lines.push(line);
        if ready {
            break;
        }
    }
    victim.kill().unwrap();
    victim.wait().unwrap();
    let victim_admitted = field(&lines, "ADMITTED=");
    // Every unit granted is spent, lapsed, given back or still held.
    let victim_held = field(&lines, "LEASE_UNITS=")
        - field(&lines, "LEASED=")
        - field(&lines, "LAPSED=")
        - field(&lines, "RETURNED=");
    assert!(
        victim_held > 0,
        "the victim holds units when killed: {lines:?}"
    );
    let survivors: Vec<_> = (0..3).map(|_| spawn("lease")).collect();
    let (mut admitted, mut lapsed) = (victim_admitted, field(&lines, "LAPSED="));
    for survivor in survivors {
        let out = survivor.wait_with_output().unwrap();
        assert!(out.status.success(), "a survivor failed");
        let lines: Vec<String> = BufReader::new(&out.stdout[..])
            .lines()
            .map(Result::unwrap)
            .collect();
        admitted += field(&lines, "ADMITTED=");
        lapsed += field(&lines, "LAPSED=");
    }
    let refill = started.elapsed().as_secs() * 100 / 3_600 + 1;
    assert!(
        admitted <= 100 + refill,
        "{admitted} admitted: beyond the quota"
    );
    let short = 100 - admitted.min(100);
    println!("leases, one killed: {admitted} admitted, victim held {victim_held}, {lapsed} lapsed");
    assert!(
        short <= victim_held + lapsed + 3 * LEASE_UNITS,
        "{short} short of the quota: beyond what the dead process held ({victim_held}), lapsed ({lapsed}) and 3 leases"
    );
}

/// For each algorithm, 4 child processes × `TASKS` tasks × `CHECKS_PER_TASK`
/// checks of one client against `target` (a server's URL, or `cluster:`
/// and the nodes' URLs), at 100 per hour, each process coalescing its
/// checks if `coalesce`: exactly 100 admitted in all.
fn across_processes(target: &str, label: &str, coalesce: bool) {
    let mode = if coalesce { "coalesce" } else { "each" };
    for algo in ["tb", "swc", "fw", "swl"] {
        let name = prefix(&format!("{label}-{algo}"));
        let children: Vec<_> = (0..4).map(|_| child(target, algo, &name, mode)).collect();
        let (mut total, mut coalesced) = (0, 0);
        let mut each = [0; MANY.len()];
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{algo}: a child failed");
            let reported = |what: &str| -> u64 {
                BufReader::new(&out.stdout[..])
                    .lines()
                    .map(Result::unwrap)
                    .find_map(|l| l.split_once(what).map(|(_, n)| n.trim().parse().unwrap()))
                    .unwrap_or_else(|| {
                        panic!(
                            "{algo}: the child did not report {what}: {}",
                            String::from_utf8_lossy(&out.stdout)
                        )
                    })
            };
            total += reported("ADMITTED=");
            coalesced += reported("COALESCED=");
            if coalesce {
                let all = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .find_map(|l| l.strip_prefix("ADMITTED_ALL=").map(str::to_owned))
                    .expect("each client's admissions");
                for (t, a) in each.iter_mut().zip(all.split(',')) {
                    *t += a.parse::<u64>().unwrap();
                }
            }
        }
        if coalesce {
            // 1 280 attempts over five clients, at least 256 each: every
            // client exactly its own quota, whatever its batch held.
            assert_eq!(
                each,
                [100; MANY.len()],
                "{algo}: each client's quota, across processes"
            );
        }
        // 4 processes × 8 tasks × 40 checks = 1 280 attempts (on one client
        // when not coalescing).
        assert_eq!(total, 100, "{algo}: exactly the quota, across processes");
        // The log's checks go one call each, coalescing or not.
        if coalesce && algo != "swl" {
            assert!(coalesced > 0, "{algo}: no check rode another's call");
        } else {
            assert_eq!(coalesced, 0, "{algo}");
        }
    }
}

/// Redis Cluster: three primaries on loopback, the 16 384 slots split
/// among them by `redis-cli --cluster create`. Every key of one client
/// carries it as the hash tag, so each check runs on the node holding that
/// client's slot, and the quota is exact across processes as on one server;
/// clients whose slots live on different nodes each get their own budget.
#[test]
fn exactly_the_quota_across_processes_on_a_cluster() {
    let Some(cluster) = Cluster::start(3, 0) else {
        return;
    };
    let nodes = &cluster.nodes;
    nodes[0].away_from_hour_boundary(Duration::from_secs(60));
    let urls = cluster.urls();
    across_processes(&format!("cluster:{}", urls.join(",")), "cluster", false);

    // Clients spread over the nodes: each its own budget, wherever its slot.
    let target = urls.clone();
    runtime().block_on(async move {
        let conn = redis::cluster::ClusterClient::new(target)
            .unwrap()
            .get_async_connection()
            .await
            .unwrap();
        let limiter = FixedWindow::builder()
            .limit(3)
            .window(HOUR)
            .redis(conn, prefix("spread"))
            .patient()
            .fail_policy(FailPolicy::FailClosed)
            .build()
            .unwrap();
        for client in 0..30 {
            let client = format!("client-{client}");
            let admitted = {
                let mut n = 0;
                for _ in 0..5 {
                    n += u64::from(limiter.check(client.as_str()).await.unwrap().is_allowed());
                }
                n
            };
            assert_eq!(admitted, 3, "{client}: its own budget");
        }
    });
    let mut slots_used = 0;
    for node in nodes {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*spread*")
            .query(&mut node.sync())
            .unwrap();
        slots_used += usize::from(!keys.is_empty());
    }
    assert!(
        slots_used >= 2,
        "30 clients' keys landed on {slots_used} node(s) only"
    );
}

// ---------------------------------------------------------------------------
// Decisions.

async fn count_down<A: RedisAlgorithm>(limiter: RedisLimiter<A>, window: Duration) {
    let name = std::any::type_name::<A>();
    for left in (0..5).rev() {
        let d = limiter.check("alice").await.unwrap();
        assert!(d.is_allowed(), "{name}");
        assert_eq!((d.limit(), d.remaining()), (5, left), "{name}");
        assert_eq!(d.retry_after(), Duration::ZERO);
        assert!(
            d.replenish_after() > Duration::ZERO && d.replenish_after() <= window,
            "{name}"
        );
    }
    let denied: Decision = limiter.check("alice").await.unwrap();
    assert!(denied.is_denied(), "{name}");
    assert_eq!(denied.remaining(), 0);
    assert!(
        denied.retry_after() > Duration::ZERO && denied.retry_after() <= window,
        "{name}"
    );
    assert!(denied.replenish_after() <= denied.retry_after(), "{name}");
    // A cost of 0 records nothing and reports the same quota.
    let zero = limiter.check_n("alice", 0).await.unwrap();
    assert!(zero.is_allowed() && zero.remaining() == 0, "{name}");
    // More than the limit can never pass, and costs no round trip.
    let trips = limiter.stats().round_trips;
    let err = limiter.check_n("alice", 6).await.unwrap_err();
    assert_eq!(err.kind(), CheckErrorKind::Cost);
    assert_eq!(limiter.stats().round_trips, trips);
    // Another client has its own budget.
    assert_eq!(limiter.check("bob").await.unwrap().remaining(), 4, "{name}");
}

#[test]
fn remaining_counts_down_exactly_and_waits_are_bounded() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(30));
    runtime().block_on(async {
        let conn = server.manager().await;
        let (tb, swc, fw, swl) = builders(&conn, &prefix("count"), 5, HOUR);
        // The bucket refills one token per 12 minutes: that bounds its wait.
        count_down(tb.no_deny_shortcut().build().unwrap(), HOUR / 5).await;
        count_down(swc.no_deny_shortcut().build().unwrap(), HOUR).await;
        count_down(fw.no_deny_shortcut().build().unwrap(), HOUR).await;
        count_down(swl.no_deny_shortcut().build().unwrap(), HOUR).await;
    });
}

#[test]
fn the_bucket_refills_on_redis_time() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let conn = server.manager().await;
        let limiter = TokenBucket::builder()
            .rate(1, Duration::from_millis(200))
            .capacity(2)
            .redis(conn, prefix("refill"))
            .patient()
            .no_deny_shortcut()
            .build()
            .unwrap();
        assert!(limiter.check("a").await.unwrap().is_allowed());
        assert!(limiter.check("a").await.unwrap().is_allowed());
        let denied = limiter.check("a").await.unwrap();
        assert!(denied.is_denied());
        assert!(denied.retry_after() <= Duration::from_millis(200));
        tokio::time::sleep(denied.retry_after()).await;
        assert!(
            limiter.check("a").await.unwrap().is_allowed(),
            "refilled after retry_after"
        );
        let log = SlidingWindowLog::builder()
            .limit(1)
            .window(Duration::from_millis(300))
            .redis(server.manager().await, prefix("refill"))
            .patient()
            .no_deny_shortcut()
            .build()
            .unwrap();
        assert!(log.check("a").await.unwrap().is_allowed());
        let denied = log.check("a").await.unwrap();
        assert!(denied.is_denied() && denied.retry_after() <= Duration::from_millis(300));
        tokio::time::sleep(denied.retry_after()).await;
        assert!(
            log.check("a").await.unwrap().is_allowed(),
            "expired after retry_after"
        );
    });
}

#[test]
fn every_key_expires_when_its_state_is_idle_and_a_bucket_s_a_refill_later() {
    let Some(server) = Server::start() else {
        return;
    };
    let keys = runtime().block_on(async {
        let conn = server.manager().await;
        let (tb, swc, fw, swl) = builders(&conn, &prefix("ttl"), 10, Duration::from_secs(100));
        let (tb, swc, fw, swl) = (
            tb.build().unwrap(),
            swc.build().unwrap(),
            fw.build().unwrap(),
            swl.build().unwrap(),
        );
        let _ = tb.check("c").await.unwrap();
        let _ = swc.check("c").await.unwrap();
        let _ = fw.check("c").await.unwrap();
        let _ = swl.check("c").await.unwrap();
        [tb.key("c"), swc.key("c"), fw.key("c"), swl.key("c")]
    });
    let mut c = server.sync();
    // One token of a bucket of 10 per 100 s refills in 10 s, and its key
    // lingers a whole refill (100 s) past that, so that a larger quota
    // reading it later carries it on rather than starting a full bucket;
    // a fixed window ends within 100 s, the counter's weighs on the next
    // one, the log's entry leaves after 100 s. The expiry is rounded up to
    // the millisecond, and `PTTL` counts from the current millisecond, so
    // a key set and read within one may show 1 ms more.
    let bucket = 10_000 + 100_000;
    for (key, (least, most)) in keys.iter().zip([
        (bucket - 5_000, bucket),
        (1, 200_000),
        (1, 100_000),
        (1, 100_000),
    ]) {
        let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut c).unwrap();
        let key = String::from_utf8_lossy(key);
        assert!(ttl >= least && ttl <= most + 1, "{key}: {ttl} ms");
    }
}

// ---------------------------------------------------------------------------
// Faults.

/// A limiter of each policy, 2 an hour, each under its own prefix, each
/// waiting `timeout` for Redis.
async fn policies(
    server: &Server,
    name: &str,
    timeout: Duration,
) -> [RedisLimiter<FixedWindow>; 3] {
    let conn = server.manager().await;
    let build = |policy| {
        FixedWindow::builder()
            .limit(2)
            .window(HOUR)
            .redis(conn.clone(), prefix(&format!("{name}-{policy:?}")))
            .timeout(timeout)
            .backoff(Duration::from_millis(50), Duration::from_millis(400))
            .fail_policy(policy)
            .no_deny_shortcut()
            .build()
            .unwrap()
    };
    [
        build(FailPolicy::FailOpen),
        build(FailPolicy::FailClosed),
        build(FailPolicy::Local),
    ]
}

#[test]
fn redis_down_each_policy_answers_in_time_then_recovers_by_itself() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let rt = runtime();
    // A stopped server refuses the connection at once: each policy
    // answers in time with no help from the timeout, which only has to
    // outlast a loaded machine's replies before the stop.
    let [open, closed, local] = rt.block_on(policies(&server, "down", PATIENCE));
    rt.block_on(async {
        for l in [&open, &closed, &local] {
            assert!(l.check("warm").await.unwrap().is_allowed());
        }
    });
    server.stop();
    rt.block_on(async {
        let timed = |started: Instant| {
            let took = started.elapsed();
            assert!(took < Duration::from_secs(1), "a check took {took:?}");
        };
        for i in 0..20 {
            let started = Instant::now();
            let d = open.check(&format!("o{i}")).await.unwrap();
            assert!(d.is_allowed() && d.remaining() == d.limit());
            timed(started);
            let started = Instant::now();
            let err = closed.check("c").await.unwrap_err();
            assert!(
                matches!(
                    err.kind(),
                    CheckErrorKind::Unavailable | CheckErrorKind::Timeout
                ),
                "{err}"
            );
            timed(started);
            let started = Instant::now();
            let d = local.check("l").await.unwrap();
            assert_eq!(
                d.is_allowed(),
                i < 2,
                "the local limiter enforces the quota"
            );
            timed(started);
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        for l in [&open, &closed, &local] {
            let s = l.stats();
            assert!(s.errors + s.timeouts >= 1, "{s:?}");
            assert!(s.probes >= 1, "backoff over, one probe went: {s:?}");
            // No retry storm: most checks skipped Redis while it was down
            // (the first check sent two commands, loading the script).
            assert!(s.round_trips <= 2 + 1 + s.probes, "{s:?}");
        }
        assert_eq!(open.stats().fail_open, 20);
        assert_eq!(closed.stats().fail_closed, 20);
        assert_eq!(local.stats().fail_local, 20);
    });
    server.run();
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match closed.check("back").await {
                Ok(d) => {
                    assert!(d.is_allowed());
                    break;
                }
                Err(_) => assert!(Instant::now() < deadline, "no recovery within 10 s"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Recovered: Redis answers again, and keeps the state it now holds.
        assert_eq!(closed.check("back").await.unwrap().remaining(), 0);
    });
}

/// A replica started while Redis is down comes up: its connection is made
/// on first use (the README's start-up), so building the limiter needs no
/// Redis; its checks are answered by the fail policy, within the timeout,
/// while nothing listens on the port; and once a server starts there, the
/// limiter reaches it by itself and Redis decides, keeping the state.
#[test]
fn a_limiter_started_while_redis_is_down_reaches_it_once_it_is_up() {
    let Some(mut server) = Server::unstarted() else {
        return;
    };
    let rt = runtime();
    let timeout = Duration::from_millis(500);
    let limiter = rt.block_on(async {
        // As the README starts one: connected on first use, with
        // redis-rs's default settings.
        let client = redis::Client::open(server.url()).unwrap();
        let conn = ConnectionManager::new_lazy_with_config(client, ConnectionManagerConfig::new())
            .unwrap();
        FixedWindow::builder()
            .limit(3)
            .window(HOUR)
            .redis(conn, prefix("lazy"))
            .timeout(timeout)
            .backoff(Duration::from_millis(20), Duration::from_millis(100))
            .fail_policy(FailPolicy::FailClosed)
            .no_deny_shortcut()
            .build()
            .unwrap()
    });
    rt.block_on(async {
        for _ in 0..3 {
            let started = Instant::now();
            let err = limiter.check("c").await.unwrap_err();
            assert!(
                matches!(
                    err.kind(),
                    CheckErrorKind::Unavailable | CheckErrorKind::Timeout
                ),
                "{err}"
            );
            // The timeout, and a loaded machine's scheduling.
            assert!(started.elapsed() < timeout * 4, "{:?}", started.elapsed());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    assert_eq!(limiter.stats().fail_closed, 3, "{:?}", limiter.stats());
    server.run();
    let first = rt.block_on(async {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(d) = limiter.check("c").await {
                break d;
            }
            assert!(
                Instant::now() < deadline,
                "Redis not reached {PATIENCE:?} after it started: {:?}",
                limiter.stats()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    // Redis's decisions: the first admission, then the state it holds.
    assert_eq!((first.is_allowed(), first.remaining()), (true, 2));
    let next = rt.block_on(limiter.check("c")).unwrap();
    assert_eq!((next.is_allowed(), next.remaining()), (true, 1));
    let exists: bool = redis::cmd("EXISTS")
        .arg(limiter.key("c"))
        .query(&mut server.sync())
        .unwrap();
    assert!(exists, "the state is in Redis");
}

#[test]
fn a_paused_server_trips_the_timeout() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let [open, closed, _] = rt.block_on(policies(&server, "slow", Duration::from_millis(200)));
    // The script loaded and the connection made by a patient twin of
    // `closed` (its settings and keys): however slow a loaded machine
    // makes that first reply, `closed` meets the pause with its breaker
    // closed and its one check of `x` recorded.
    let twin = rt.block_on(async {
        let twin = FixedWindow::builder()
            .limit(2)
            .window(HOUR)
            .redis(server.manager().await, prefix("slow-FailClosed"))
            .patient()
            .fail_policy(FailPolicy::FailClosed)
            .no_deny_shortcut()
            .build()
            .unwrap();
        assert!(twin.check("x").await.unwrap().is_allowed());
        twin
    });
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "800", "ALL"][..])
        .query(&mut server.sync())
        .unwrap();
    rt.block_on(async {
        let started = Instant::now();
        let err = closed.check("x").await.unwrap_err();
        assert_eq!(err.kind(), CheckErrorKind::Timeout, "{err}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(190) && took < Duration::from_millis(600),
            "{took:?}"
        );
        assert_eq!(closed.stats().timeouts, 1);
        let started = Instant::now();
        assert!(open.check("x").await.unwrap().is_allowed());
        assert!(started.elapsed() < Duration::from_millis(600));
        // The check that timed out runs once the pause is over: recorded,
        // which errs toward denying (the limit is 2; it was the second).
        // Read by the patient twin, as long as a loaded machine takes.
        let deadline = Instant::now() + PATIENCE;
        while twin.peek("x").await.unwrap().remaining() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let d = twin.check("x").await.unwrap();
        assert_eq!((d.is_denied(), d.remaining()), (true, 0), "{d:?}");
    });
}

#[test]
fn junk_under_a_key_is_a_clear_error_for_that_client_only() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let mut c = server.sync();
    rt.block_on(async {
        let conn = server.manager().await;
        let (tb, swc, fw, swl) = builders(&conn, &prefix("junk"), 5, HOUR);
        let tb = tb.fail_policy(FailPolicy::FailClosed).build().unwrap();
        let swc = swc.fail_policy(FailPolicy::FailClosed).build().unwrap();
        let fw = fw.fail_policy(FailPolicy::FailClosed).build().unwrap();
        let swl = swl.fail_policy(FailPolicy::FailOpen).build().unwrap();
        let junk: [(Vec<u8>, &[&str]); 6] = [
            (tb.key("victim"), &["SET", "hello"]),
            (tb.key("negative"), &["SET", "tb:720000000:5|0:0|o.1|-5|0"]),
            (fw.key("victim"), &["HSET", "k", "7"]),
            (fw.key("half"), &["SET", "fw:3600000000:5|0:0|o.1|12"]),
            (fw.key("bare"), &["SET", "12|1"]),
            (
                swc.key("victim"),
                &["SET", "swc:3600000000:5|0:0|o.1|1|many|0"],
            ),
        ];
        for (key, cmd) in junk {
            let _: () = redis::cmd(cmd[0])
                .arg(key)
                .arg(&cmd[1..])
                .query(&mut c)
                .unwrap();
        }
        // Packed (as the scripts write a state: `#`, then each field a
        // little-endian double), a TAT that is not a whole number of µs.
        let mut packed = b"tb:720000000:5|0:0|o.1#".to_vec();
        packed.extend(1.5f64.to_le_bytes());
        packed.extend(0f64.to_le_bytes());
        let _: () = redis::cmd("SET")
            .arg(tb.key("fraction"))
            .arg(packed)
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("ZADD")
            .arg(swl.key("victim"))
            .arg(&["99999999999999999999", "x"][..])
            .query(&mut c)
            .unwrap();
        for (client, err) in [
            ("victim", tb.check("victim").await.unwrap_err()),
            ("negative", tb.check("negative").await.unwrap_err()),
            ("fraction", tb.check("fraction").await.unwrap_err()),
            ("victim", fw.check("victim").await.unwrap_err()),
            ("half", fw.check("half").await.unwrap_err()),
            ("bare", fw.check("bare").await.unwrap_err()),
            ("victim", swc.check("victim").await.unwrap_err()),
        ] {
            assert_eq!(err.kind(), CheckErrorKind::Corrupt, "{client}: {err}");
            assert!(err.to_string().contains(client), "names the key: {err}");
        }
        // FailOpen admits only when Redis cannot be reached: junk under
        // the key is an error, never an admission.
        let err = swl.check("victim").await.unwrap_err();
        assert_eq!(err.kind(), CheckErrorKind::Corrupt, "{err}");
        assert_eq!((swl.stats().fail_open, swl.stats().fail_closed), (0, 1));
        // Other clients are unaffected: no backoff, Redis answers them.
        for l in [&tb as &dyn Probe, &fw, &swc, &swl] {
            l.fresh_client_is_admitted_by_redis().await;
        }
    });
}

/// A limiter of any algorithm, for the junk test's last loop.
trait Probe {
    fn fresh_client_is_admitted_by_redis(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>;
}

impl<A: RedisAlgorithm> Probe for RedisLimiter<A> {
    fn fresh_client_is_admitted_by_redis(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>> {
        Box::pin(async move {
            let before = self.stats();
            let d = self.check("innocent").await.unwrap();
            assert!(d.is_allowed() && d.remaining() == 4);
            let after = self.stats();
            assert_eq!(after.round_trips, before.round_trips + 1);
            assert_eq!(after.errors, before.errors);
        })
    }
}

// ---------------------------------------------------------------------------
// The deny shortcut and the async trait.

#[test]
fn denied_clients_are_denied_locally_until_their_quota_grows() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let conn = server.manager().await;
        let limiter = TokenBucket::builder()
            .rate(2, Duration::from_millis(600))
            .redis(conn, prefix("shortcut"))
            .patient()
            .build()
            .unwrap();
        assert!(limiter.check("flood").await.unwrap().is_allowed());
        assert!(limiter.check("flood").await.unwrap().is_allowed());
        let denied = limiter.check("flood").await.unwrap();
        assert!(denied.is_denied());
        for _ in 0..100 {
            let d = limiter.check("flood").await.unwrap();
            assert!(d.is_denied() && d.retry_after() <= denied.retry_after());
        }
        let s = limiter.stats();
        // The second admission left nothing, so even the first denial was
        // made locally; the first check sent two commands, loading the
        // script.
        assert_eq!((s.round_trips, s.denied_locally), (3, 101), "{s:?}");
        // Other clients still go to Redis.
        assert!(limiter.check("other").await.unwrap().is_allowed());
        // The shortcut ends no later than the token comes back.
        tokio::time::sleep(denied.replenish_after()).await;
        assert!(limiter.check("flood").await.unwrap().is_allowed());
    });
}

#[test]
fn in_process_and_redis_limiters_share_the_async_trait() {
    async fn spend<L: AsyncCheck<str>>(limiter: &L) -> Vec<u64> {
        let mut left = Vec::new();
        for _ in 0..3 {
            left.push(limiter.check("k", 1).await.unwrap().remaining());
        }
        left
    }
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let conn = server.manager().await;
        let remote = FixedWindow::builder()
            .limit(3)
            .window(HOUR)
            .redis(conn, prefix("trait"))
            .patient()
            .build()
            .unwrap();
        assert_eq!(spend(&remote).await, [2, 1, 0]);
        assert_eq!(
            AsyncCheck::<str>::quota(&remote),
            tollgate::Quota::new(3, HOUR)
        );
    });
}

// ---------------------------------------------------------------------------
// The HTTP layer in front of a Redis limiter.

/// `RateLimitLayer` takes a Redis limiter as it takes an in-process one:
/// the check is a real round trip, which the layer's response future
/// awaits, and the answers are the same: the decision in the request's
/// extensions, `RateLimit` headers, then a `429` with `Retry-After`; each
/// client address its own budget; and with Redis gone, `FailClosed` makes
/// the layer answer `503`.
#[cfg(feature = "tower")]
#[test]
fn the_tower_layer_takes_a_redis_limiter() {
    use http::{Request, Response, StatusCode};
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use tollgate::tower::{PeerIp, RateLimitLayer};
    use tower::{service_fn, Layer, ServiceExt};

    let Some(mut server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    // One runtime for all: the connection's driver runs on it.
    let rt = runtime();
    let conn = rt.block_on(server.manager());
    let limiter = FixedWindow::builder()
        .limit(2)
        .window(HOUR)
        .redis(conn, prefix("layer"))
        .patient()
        .fail_policy(FailPolicy::FailClosed)
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(limiter, PeerIp::new()).decision_extension(true);
    let service = layer.layer(service_fn(|request: Request<String>| async move {
        let remaining = request
            .extensions()
            .get::<Decision>()
            .map(Decision::remaining);
        Ok::<_, Infallible>(Response::new(format!("{remaining:?}")))
    }));
    let request = |peer: &str| {
        let mut request = Request::get("/").body(String::new()).unwrap();
        request
            .extensions_mut()
            .insert(peer.parse::<SocketAddr>().unwrap());
        request
    };
    let send = |peer: &str| rt.block_on(service.clone().oneshot(request(peer))).unwrap();
    for left in [1, 0] {
        let response = send("192.0.2.1:1000");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.body(), &format!("Some({left})"));
        let header = response.headers()["ratelimit"].to_str().unwrap().to_owned();
        assert!(header.contains(&format!(";r={left};")), "{header}");
    }
    let refused = send("192.0.2.1:1001");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=3_600).contains(&retry), "Retry-After {retry}");
    assert_eq!(
        send("192.0.2.2:1000").status(),
        StatusCode::OK,
        "another client"
    );

    server.stop();
    assert_eq!(
        send("192.0.2.3:1000").status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "FailClosed with Redis gone"
    );
}
