//! The Redis limiters on a Redis Cluster of three primaries started on
//! loopback by the test itself (see `redis_server::Cluster`): every client
//! id keeps its limit whatever bytes it holds, a failover under load
//! admits nothing over the quota, and a lease granted by a node whose
//! clock runs ahead of the others' is spent on that node's clock.

mod redis_server;

use std::time::{Duration, Instant};

use redis_server::{admitted, at_once, prefix, runtime, Cluster, Patient, HOUR};
use tollgate::redis::{FailPolicy, Lease};
use tollgate::{FixedWindow, SlidingWindowCounter, TokenBucket};

/// Client ids and prefixes that hold Redis Cluster's hash-tag braces (or
/// nothing at all) are each held to their limit by a pair on a cluster:
/// no id can leave a key without its tag, split a client over two slots,
/// or make Redis refuse the script.
#[test]
fn a_pair_on_a_cluster_limits_every_client_id() {
    let Some(cluster) = Cluster::start(3, 0) else {
        return;
    };
    cluster.nodes[0].away_from_hour_boundary(Duration::from_secs(60));
    runtime().block_on(async {
        let conn = cluster.connection().await;
        for p in [prefix("ids"), format!("{}{{}}", prefix("ids")), "{".into()] {
            let limiter = FixedWindow::builder()
                .limit(3)
                .window(HOUR)
                .and(TokenBucket::builder().rate(10, HOUR))
                .redis(conn.clone(), &p)
                .patient()
                .fail_policy(FailPolicy::FailOpen)
                .build()
                .unwrap();
            for client in ["", "}", "}abc", "{", "{}", "a{b}c", "%", "plain"] {
                let mut admitted = 0;
                for _ in 0..10 {
                    admitted += u32::from(limiter.check(client).await.unwrap().is_allowed());
                }
                assert_eq!(
                    admitted,
                    3,
                    "prefix {p:?}, client {client:?}: {:?}",
                    limiter.stats()
                );
            }
            let s = limiter.stats();
            assert_eq!((s.errors, s.fail_open), (0, 0), "prefix {p:?}: {s:?}");
        }
    });
}

/// Three primaries, each with a replica; a pair limiter hammered by 8
/// tasks over 16 clients, each with more quota than the load spends;
/// mid-load, a replica takes over its primary (`CLUSTER FAILOVER`, which
/// waits for the replica to catch up). Checks that fail meanwhile are
/// errors (`FailClosed`), never admissions; and once the load is over,
/// topping each client up admits exactly what its limit leaves: no
/// admission was lost with the old primary, none made twice. The cluster
/// takes about a second to start and the failover about one more.
#[test]
fn a_failover_under_load_admits_nothing_over_the_quota() {
    const CLIENTS: usize = 16;
    const LIMIT: u64 = 100;
    let Some(cluster) = Cluster::start(3, 1) else {
        return;
    };
    cluster.nodes[0].away_from_hour_boundary(Duration::from_secs(120));
    let rt = runtime();
    let limiter = rt.block_on(async {
        FixedWindow::builder()
            .limit(LIMIT)
            .window(HOUR)
            .and(TokenBucket::builder().rate(1_000, HOUR))
            .redis(cluster.connection().await, prefix("failover"))
            .fail_policy(FailPolicy::FailClosed)
            .timeout(Duration::from_secs(2))
            .backoff(Duration::from_millis(10), Duration::from_millis(100))
            .no_deny_shortcut()
            .build()
            .unwrap()
    });
    let replica = cluster
        .nodes
        .iter()
        .find(|n| !Cluster::is_primary(n))
        .expect("a replica");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (admitted, errors, checks) = rt.block_on(async {
        let tasks: Vec<_> = (0..8)
            .map(|task| {
                let limiter = limiter.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut admitted = [0u64; CLIENTS];
                    let (mut errors, mut checks) = (0u64, 0u64);
                    let mut i = task;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let c = i % CLIENTS;
                        i += 1;
                        checks += 1;
                        match limiter.check(format!("client-{c}").as_str()).await {
                            Ok(d) => admitted[c] += u64::from(d.is_allowed()),
                            Err(_) => errors += 1,
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    (admitted, errors, checks)
                })
            })
            .collect();
        // Mid-load: the replica takes over. A manual failover that timed
        // out (a loaded machine) leaves it a replica: it is asked again,
        // at most twice more. The load goes on until it is a primary, and
        // a little after.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut asked = 0;
        let mut deadline = std::time::Instant::now();
        while !Cluster::is_primary(replica) {
            if std::time::Instant::now() >= deadline {
                assert!(asked < 3, "no failover after {asked} requests");
                let _: () = redis::cmd("CLUSTER")
                    .arg("FAILOVER")
                    .query(&mut replica.sync())
                    .unwrap();
                asked += 1;
                deadline = std::time::Instant::now() + Duration::from_secs(6);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut admitted = [0u64; CLIENTS];
        let (mut errors, mut checks) = (0, 0);
        for task in tasks {
            let (a, e, n) = task.await.unwrap();
            for (total, n) in admitted.iter_mut().zip(a) {
                *total += n;
            }
            errors += e;
            checks += n;
        }
        (admitted, errors, checks)
    });
    cluster.wait_until_ok(6, Duration::from_secs(20));
    for (c, n) in admitted.iter().enumerate() {
        assert!(*n <= LIMIT, "client-{c}: {n} admitted, limit {LIMIT}");
    }
    // Every admission made is in Redis: topping each client up admits
    // exactly what is left.
    rt.block_on(async {
        for (c, n) in admitted.iter().enumerate() {
            let client = format!("client-{c}");
            let mut more = 0;
            loop {
                match limiter.check(client.as_str()).await {
                    Ok(d) if d.is_allowed() => more += 1,
                    Ok(_) => break,
                    // Still settling: the breaker backs off, then probes.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
            assert_eq!(n + more, LIMIT, "client-{c}: {n} under load, {more} after");
        }
    });
    eprintln!("failover: {checks} checks under load, {errors} failed (none admitted)");
}

/// Coalescing on a cluster: 48 tasks check four clients (their keys on
/// different primaries) at once, 3 checks each, on limiters that coalesce
/// (each word algorithm and a pair): each client is admitted exactly its
/// quota of 10 out of 36 checks, the admissions' `remaining` figures are
/// 9, 8, …, 0 once each (every check, batched or not, decided on the
/// state the ones before it left), and checks rode another's call.
#[test]
fn coalesced_checks_on_a_cluster_admit_exactly_the_quota() {
    const QUOTA: u64 = 10;
    let Some(cluster) = Cluster::start(3, 0) else {
        return;
    };
    cluster.nodes[0].away_from_hour_boundary(Duration::from_secs(60));
    // Keys whose slots fall under each of the three primaries' ranges
    // (`redis-cli --cluster create` splits the 16 384 slots in thirds).
    let clients = ["alpha", "beta", "gamma", "delta"];
    let mut admin = cluster.nodes[0].sync();
    let thirds: std::collections::BTreeSet<i64> = clients
        .iter()
        .map(|c| {
            let slot: i64 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(*c)
                .query(&mut admin)
                .unwrap();
            slot * 3 / 16_384
        })
        .collect();
    assert_eq!(thirds.len(), 3, "the clients' keys span every primary");
    let expected: Vec<u64> = (0..QUOTA).collect();
    runtime().block_on(async {
        let conn = cluster.connection().await;
        macro_rules! case {
            ($builder:expr, $name:literal) => {{
                let limiter = $builder
                    .redis(conn.clone(), prefix($name))
                    .fail_policy(FailPolicy::FailClosed)
                    .patient()
                    .no_deny_shortcut()
                    .coalesce(true)
                    .build()
                    .unwrap();
                for (client, decisions) in
                    clients.iter().zip(at_once(&limiter, &clients, 12, 3).await)
                {
                    let left = admitted(&decisions);
                    assert_eq!(left, expected, "{}, {client}: {:?}", $name, limiter.stats());
                }
                let s = limiter.stats();
                assert!(
                    s.coalesced > 0,
                    "{}: no check rode another's call: {s:?}",
                    $name
                );
                assert_eq!(
                    (s.errors, s.timeouts, s.fail_closed),
                    (0, 0, 0),
                    "{}: {s:?}",
                    $name
                );
            }};
        }
        case!(FixedWindow::builder().limit(QUOTA).window(HOUR), "cfw");
        case!(
            SlidingWindowCounter::builder().limit(QUOTA).window(HOUR),
            "cswc"
        );
        case!(TokenBucket::builder().rate(QUOTA, HOUR), "ctb");
        case!(
            FixedWindow::builder()
                .limit(QUOTA)
                .window(HOUR)
                .and(TokenBucket::builder().rate(2 * QUOTA, HOUR)),
            "cpair"
        );
    });
}

/// The units a limiter holds leased and unspent.
fn held(s: tollgate::redis::RedisStats) -> u64 {
    s.lease_units - s.leased - s.lease_lapsed - s.lease_returned
}

/// On `cluster`, whose node `ahead` runs `ahead_ms` ahead of node 0 (as
/// checked): a client whose key lives on that node, and one whose key
/// lives on another.
fn apart(cluster: &Cluster, ahead: usize, ahead_ms: i64) -> (String, String) {
    let (mut on, mut off) = (None, None);
    for client in (0..64).map(|i| format!("client-{i}")) {
        let node = cluster.node_of(&client);
        if node == ahead && on.is_none() {
            on = Some(client);
        } else if node != ahead && off.is_none() {
            off = Some(client);
        }
    }
    let server_now = |node: usize| -> i64 {
        let (s, us): (i64, i64) = redis::cmd("TIME")
            .query(&mut cluster.nodes[node].sync())
            .unwrap();
        s * 1_000 + us / 1_000
    };
    let apart = server_now(ahead) - server_now(0);
    assert!(
        (ahead_ms - 500..=ahead_ms + 500).contains(&apart),
        "the node's clock is {apart} ms ahead, not {ahead_ms}"
    );
    (on.unwrap(), off.unwrap())
}

/// A cluster whose nodes' clocks differ: one primary runs 2 s ahead of
/// the others (the clock shim, `tests/support/clockshift.c`). A leasing
/// limiter (a bucket of 100, one unit per 20 ms, leases of up to 100
/// units for a horizon of 2 s) leases the units of a client whose key
/// lives on the node ahead; the limiter also checks a client whose key
/// lives on a node of the host's clock, one call each (the table holds
/// one lease), between every two checks of the first, so that most of
/// its replies come from the other node. The lease is taken, left unspent
/// for 1.2 s (more than half of its slots pass), then spent in a burst:
/// the burst admits at most the bucket's exact bound over its span,
/// `100 + ⌊span / 20 ms⌋`. Spending the lease on the other node's clock,
/// 2 s behind the one its slots are on, would spend the units whose slots
/// passed as if they had not: up to 100 more.
#[test]
fn a_lease_is_spent_on_the_clock_of_the_node_that_granted_it() {
    const CAPACITY: u64 = 100;
    const INTERVAL: Duration = Duration::from_millis(20);
    const AHEAD_MS: i64 = 2_000;
    let Some(cluster) = Cluster::start_shifted(3, 0, &[0, AHEAD_MS, 0]) else {
        return;
    };
    let (leased, other) = apart(&cluster, 1, AHEAD_MS);
    runtime().block_on(async {
        let limiter = TokenBucket::builder()
            .rate(1, INTERVAL)
            .capacity(CAPACITY)
            .redis(cluster.connection().await, prefix("node-clock"))
            .fail_policy(FailPolicy::FailClosed)
            .patient()
            .no_deny_shortcut()
            .lease(
                Lease::new(Duration::from_secs(2))
                    .max_units(CAPACITY)
                    .max_clients(1),
            )
            .build()
            .unwrap();
        let check = |client: &str| {
            let (limiter, client) = (limiter.clone(), client.to_owned());
            async move { limiter.check(client.as_str()).await.unwrap().is_allowed() }
        };
        // The client gets its lease (its first checks go one call each,
        // until it is hot).
        let mut before = 0;
        for _ in 0..200 {
            before += u64::from(check(&leased).await);
            if before >= 8 && held(limiter.stats()) > 0 {
                break;
            }
        }
        let then = held(limiter.stats());
        assert!(then > 0, "no lease: {:?}", limiter.stats());
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        // The latest reply from the other node.
        check(&other).await;
        let started = Instant::now();
        let mut burst = 0;
        for _ in 0..3 * CAPACITY {
            burst += u64::from(check(&leased).await);
            check(&other).await;
        }
        let span = started.elapsed();
        let bound = CAPACITY + (span.as_nanos() / INTERVAL.as_nanos()) as u64;
        eprintln!(
            "node clock: {burst} admitted in the burst of {span:?} against a bound of {bound} \
             ({then} units held before it; {:?})",
            limiter.stats()
        );
        assert!(
            burst <= bound,
            "{burst} admitted in {span:?} against the exact bound of {bound}: {:?}",
            limiter.stats()
        );
    });
}

/// A booking's wait left is read on the clock of the node that booked it:
/// on a cluster whose node holding the client's key runs 2 s ahead, a
/// booking of a 1 s wait, followed by a check answered by another node,
/// says at most 1 s is left (never to wait past the instant). The other
/// node's clock would say about 3 s.
#[test]
fn a_booking_waits_on_the_clock_of_the_node_that_booked_it() {
    const AHEAD_MS: i64 = 2_000;
    let Some(cluster) = Cluster::start_shifted(3, 0, &[0, AHEAD_MS, 0]) else {
        return;
    };
    let (booked, other) = apart(&cluster, 1, AHEAD_MS);
    runtime().block_on(async {
        let limiter = TokenBucket::builder()
            .rate(1, Duration::from_secs(1))
            .capacity(1)
            .redis(cluster.connection().await, prefix("node-book"))
            .fail_policy(FailPolicy::FailClosed)
            .patient()
            .build()
            .unwrap();
        let first = limiter
            .reserve(booked.as_str(), Duration::ZERO)
            .await
            .unwrap();
        assert!(first.wait().is_zero());
        first.commit();
        let second = limiter
            .reserve(booked.as_str(), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(second.wait() > Duration::from_millis(500), "{second:?}");
        // The latest reply from the other node.
        let _ = limiter.check(other.as_str()).await.unwrap();
        let left = second.remaining_wait();
        assert!(
            left <= second.wait(),
            "{left:?} left of a wait of {:?}",
            second.wait()
        );
        second.commit();
    });
}
