//! The Redis limiters on a Redis Cluster of three primaries started on
//! loopback by the test itself (see `redis_server::Cluster`): every client
//! id keeps its limit whatever bytes it holds, a failover under load
//! admits nothing over the quota, checks coalesce, a live reshard is no
//! outage, and a lost node opens its own breaker only. The clusters whose
//! nodes' clocks differ are `redis_cluster_clocks`'s.

mod redis_server;

use std::time::{Duration, Instant};

use redis_server::{
    admitted, at_once, clients_of_one_slot, migrate_key, move_slot, prefix, runtime, start_move,
    Cluster, Patient, HOUR,
};
use tollgate::redis::{FailPolicy, Lease};
use tollgate::{CheckErrorKind, FixedWindow, SlidingWindowCounter, TokenBucket};

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

/// A live reshard is no outage: 64 tasks check 16 clients whose keys
/// share one slot, on a coalescing limiter (a fixed window of 200 an hour)
/// and a leasing one (a bucket of 200 a day), while that slot moves to
/// another primary key by key and back, three times. The connection
/// follows no redirection itself (no retries), so the limiter's own
/// handling is what answers `ASK`, `MOVED`, `TRYAGAIN` and a script that
/// met a key gone midway. Every check is answered by Redis (`FailClosed`:
/// none fails), no call fails, the breaker never opens; each client of
/// the window is admitted exactly its quota over the load and what is left
/// after it; and every unit the buckets gave is accounted for, none taken
/// by a grant that failed after writing.
#[test]
fn a_live_reshard_is_never_an_outage() {
    const DAY: Duration = Duration::from_secs(86_400);
    const CLIENTS: usize = 16;
    const LIMIT: u64 = 200;
    let Some(cluster) = Cluster::start(3, 0) else {
        return;
    };
    cluster.nodes[0].away_from_hour_boundary(Duration::from_secs(120));
    let (clients, slot) = clients_of_one_slot(CLIENTS);
    let home = cluster.node_of(&clients[0]);
    let away = (home + 1) % 3;
    let rt = runtime();
    let (window, bucket) = rt.block_on(async {
        // A connection that follows no redirection itself (no retries):
        // the limiter's own handling is what is tested.
        let conn = redis::cluster::ClusterClientBuilder::new(cluster.urls())
            .connection_timeout(Duration::from_millis(500))
            .response_timeout(redis_server::PATIENCE)
            .retries(0)
            .build()
            .unwrap()
            .get_async_connection()
            .await
            .unwrap();
        let window = FixedWindow::builder()
            .limit(LIMIT)
            .window(HOUR)
            .redis(conn.clone(), prefix("reshard-fw"))
            .fail_policy(FailPolicy::FailClosed)
            .patient()
            .no_deny_shortcut()
            .coalesce(true)
            .build()
            .unwrap();
        let bucket = TokenBucket::builder()
            .rate(LIMIT, DAY)
            .redis(conn, prefix("reshard-tb"))
            .fail_policy(FailPolicy::FailClosed)
            .patient()
            .no_deny_shortcut()
            .lease(
                Lease::new(Duration::from_secs(2))
                    .max_units(8)
                    .max_clients(CLIENTS),
            )
            .build()
            .unwrap();
        (window, bucket)
    });
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|task| {
            let (window, bucket, stop) = (window.clone(), bucket.clone(), stop.clone());
            let client = clients[task % CLIENTS].clone();
            rt.spawn(async move {
                let (mut fw, mut tb, mut failed) = (0u64, 0u64, Vec::new());
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match window.check(client.as_str()).await {
                        Ok(d) => fw += u64::from(d.is_allowed()),
                        Err(err) => failed.push(format!("window: {err}")),
                    }
                    match bucket.check(client.as_str()).await {
                        Ok(d) => tb += u64::from(d.is_allowed()),
                        Err(err) => failed.push(format!("bucket: {err}")),
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                (task % CLIENTS, fw, tb, failed)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut moved = 0;
    for _ in 0..3 {
        moved += move_slot(&cluster, slot, home, away, Duration::from_millis(5));
        moved += move_slot(&cluster, slot, away, home, Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut fw = [0u64; CLIENTS];
    let mut tb = [0u64; CLIENTS];
    let mut failed = Vec::new();
    for task in tasks {
        let (c, a, b, f) = rt.block_on(task).unwrap();
        fw[c] += a;
        tb[c] += b;
        failed.extend(f);
    }
    let span = started.elapsed();
    let (ws, bs) = (window.stats(), bucket.stats());
    eprintln!("reshard: {moved} keys moved in {span:?}; window {ws:?}; bucket {bs:?}");
    failed.truncate(5);
    assert!(failed.is_empty(), "checks failed: {failed:?}");
    for s in [ws, bs] {
        assert_eq!(
            (s.breaker_opened, s.fail_closed, s.fail_open, s.fail_local),
            (0, 0, 0, 0),
            "{s:?}"
        );
        assert_eq!((s.errors, s.timeouts), (0, 0), "no call failed: {s:?}");
    }
    // The bucket's exact bound: its capacity and what refilled meanwhile.
    let refilled = (span.as_secs_f64() * LIMIT as f64 / DAY.as_secs_f64()).ceil() as u64;
    let mut bucket_left = 0;
    rt.block_on(async {
        for (c, client) in clients.iter().enumerate() {
            bucket_left += bucket.peek(client.as_str()).await.unwrap().remaining();
            assert!(
                tb[c] <= LIMIT + refilled,
                "{client}: bucket admitted {}, bound {}",
                tb[c],
                LIMIT + refilled
            );
            let left = window.peek(client.as_str()).await.unwrap().remaining();
            assert_eq!(
                fw[c] + left,
                LIMIT,
                "{client}: window admitted {} under load, {left} left",
                fw[c]
            );
        }
    });
    // Every unit the buckets gave is accounted for: admitted by a check
    // of its own, granted to a lease (and spent, held, lapsed or given
    // back), or left. A grant that wrote its state and then failed would
    // take units no one knows of.
    let taken = tb.iter().sum::<u64>() - bs.leased + bs.lease_units - bs.lease_returned;
    let all = CLIENTS as u64 * LIMIT;
    assert!(
        (all..=all + CLIENTS as u64 * refilled).contains(&(taken + bucket_left)),
        "{taken} units taken and {bucket_left} left of {all} (and up to {refilled} refilled each): {bs:?}"
    );
}

/// A breaker per node: on a cluster of three primaries (the others
/// answering while one is lost), one primary is frozen (`SIGSTOP`), then
/// resumed and later killed, while 8 tasks check clients whose keys it
/// holds and 8 check clients of the other two, on one limiter (timeout
/// 500 ms: the timeout is what this test is about). Whatever the machine's
/// speed, the lost node's clients meet its breaker open (checks failed
/// fast by `Unavailable` "Redis failed recently") at least once in each
/// phase, so an outage of one node is no storm of calls each waiting the
/// timeout; the healthy nodes' clients never do unless one of their own
/// calls timed out first (only a machine too slow to answer loopback in
/// 500 ms opens their breaker), and are answered by Redis.
///
/// With one breaker for the whole cluster, the healthy nodes' replies kept
/// it closed: the frozen node's clients each waited the timeout, the
/// breaker opened 0 times.
#[test]
fn a_slow_or_dead_node_opens_its_own_breaker_only() {
    let Some(mut cluster) = partial_cluster() else {
        return;
    };
    cluster.nodes[0].away_from_hour_boundary(Duration::from_secs(60));
    let sick = 1;
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for client in (0..200).map(|i| format!("client-{i}")) {
        if cluster.node_of(&client) == sick {
            on.push(client);
        } else {
            off.push(client);
        }
    }
    on.truncate(8);
    off.truncate(8);
    let rt = runtime();
    let limiter = breaking(&rt, &cluster, "per-node");
    let all: Vec<String> = on.iter().chain(&off).cloned().collect();
    // What each client's checks met over `span`.
    let load = |span: Duration| seen_over(&rt, &limiter, &all, span);
    let judge = |what: &str, results: &[Seen]| {
        let (sick, healthy) = results.split_at(on.len());
        let stats = limiter.stats();
        let slow = healthy.iter().any(|s| s.timeouts > 0);
        for (c, s) in healthy.iter().enumerate() {
            assert!(
                slow || (s.open, s.other) == (0, 0),
                "{what}: {} of a healthy node met a breaker: {s:?}, {stats:?}",
                off[c]
            );
        }
        assert!(
            healthy.iter().map(|s| s.ok).sum::<u32>() > 0,
            "{what}: {healthy:?}"
        );
        assert!(
            sick.iter().any(|s| s.open > 0),
            "{what}: the lost node's breaker never opened: {sick:?}, {stats:?}"
        );
    };
    // Warm: every client answered, and the limiter has read the slot map
    // (its first read starts at the first check).
    let warm = load(Duration::from_millis(1_000));
    assert!(warm.iter().all(|s| s.ok > 0), "{warm:?}");
    cluster.nodes[sick].signal("STOP");
    let frozen = load(Duration::from_millis(2_500));
    cluster.nodes[sick].signal("CONT");
    judge("frozen", &frozen);
    let opened = limiter.stats().breaker_opened;
    assert!(opened > 0, "{:?}", limiter.stats());
    // Back: each client of the node answered again once a probe finds it.
    let back = load(Duration::from_millis(1_500));
    assert!(back[..on.len()].iter().any(|s| s.ok > 0), "{back:?}");
    cluster.nodes[sick].stop();
    let killed = load(Duration::from_millis(2_500));
    judge("killed", &killed);
    assert!(
        limiter.stats().breaker_opened > opened,
        "{:?}",
        limiter.stats()
    );
}

/// The slot map is read when first needed and then when due (every ten
/// seconds, or a second after a call failed), not on each check: a
/// healthy cluster's load of 3 s, every check answered, reads it at most
/// twice more (`CLUSTER SLOTS`, counted on every node); a loaded machine
/// whose checks met a timeout reads it at most once a second more. Read on
/// each check, it was read hundreds of times.
#[test]
fn a_healthy_cluster_s_slot_map_is_read_when_due_not_on_each_check() {
    let Some(cluster) = Cluster::start(3, 0) else {
        return;
    };
    cluster.nodes[0].away_from_hour_boundary(Duration::from_secs(60));
    let reads = || -> u64 {
        cluster
            .nodes
            .iter()
            .map(|node| {
                let info: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query(&mut node.sync())
                    .unwrap();
                info.lines()
                    .filter(|l| l.starts_with("cmdstat_cluster|slots:"))
                    .flat_map(|l| l.split([':', ',']))
                    .filter_map(|field| field.strip_prefix("calls="))
                    .map(|n| n.parse::<u64>().unwrap())
                    .sum::<u64>()
            })
            .sum()
    };
    let rt = runtime();
    let limiter = breaking(&rt, &cluster, "map-reads");
    let clients: Vec<String> = (0..16).map(|i| format!("client-{i}")).collect();
    let warm = seen_over(&rt, &limiter, &clients, Duration::from_millis(500));
    assert!(warm.iter().all(|s| s.ok > 0), "{warm:?}");
    let before = reads();
    let load = seen_over(&rt, &limiter, &clients, Duration::from_secs(3));
    let read = reads() - before;
    let checks: u32 = load.iter().map(|s| s.ok).sum();
    let failed = load
        .iter()
        .any(|s| s.ok == 0 || s.timeouts + s.open + s.other > 0);
    assert!(checks > 100, "{load:?}");
    let most = if failed { 6 } else { 2 };
    assert!(
        read <= most,
        "the slot map was read {read} times over {checks} checks: {load:?}"
    );
}

/// Three primaries, no replicas, that go on serving the slots they hold
/// while one of them is lost (`cluster-require-full-coverage no`).
fn partial_cluster() -> Option<Cluster> {
    Cluster::start_args(3, 0, &["--cluster-require-full-coverage", "no"])
}

/// A limiter for the breaker tests: a quota no load reaches, `FailClosed`,
/// a timeout of 500 ms (only a machine too slow to answer loopback in that
/// time opens a healthy node's breaker) and a probe within 400 ms.
fn breaking(
    rt: &tokio::runtime::Runtime,
    cluster: &Cluster,
    name: &str,
) -> tollgate::redis::RedisLimiter<FixedWindow> {
    rt.block_on(async {
        FixedWindow::builder()
            .limit(1_000_000)
            .window(HOUR)
            .redis(cluster.connection().await, prefix(name))
            .fail_policy(FailPolicy::FailClosed)
            .timeout(Duration::from_millis(500))
            .backoff(Duration::from_millis(100), Duration::from_millis(400))
            .build()
            .unwrap()
    })
}

/// What one client's checks met over a load.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    ok: u32,
    timeouts: u32,
    /// Answered by an open breaker.
    open: u32,
    other: u32,
}

/// A node killed midway through a slot move. Eight clients share a slot;
/// each spends 4 of a fixed window's 10; the slot starts to move to
/// another primary (`IMPORTING`, `MIGRATING`) and four clients' keys go
/// over, then that primary is killed (no replicas: their state is lost
/// with it). The four whose keys stayed are answered by the slot's
/// primary, exactly: 6 more each, then refused. The four whose keys were
/// lost are sent on by `ASK` to a node that is gone, and are refused
/// (`FailClosed`): never admitted, whatever the connection does. No check
/// hangs or panics.
#[test]
fn a_node_killed_midway_through_a_slot_move_loses_no_exactness_and_fails_closed() {
    const LIMIT: u64 = 10;
    let Some(mut cluster) = partial_cluster() else {
        return;
    };
    cluster.nodes[0].away_from_hour_boundary(Duration::from_secs(120));
    let (clients, slot) = clients_of_one_slot(8);
    let home = cluster.node_of(&clients[0]);
    let away = (home + 1) % 3;
    let rt = runtime();
    let limiter = rt.block_on(async {
        let conn = redis::cluster::ClusterClientBuilder::new(cluster.urls())
            .connection_timeout(Duration::from_millis(500))
            .response_timeout(redis_server::PATIENCE)
            .retries(0)
            .build()
            .unwrap()
            .get_async_connection()
            .await
            .unwrap();
        FixedWindow::builder()
            .limit(LIMIT)
            .window(HOUR)
            .redis(conn, prefix("kill-move"))
            .fail_policy(FailPolicy::FailClosed)
            .patient()
            .no_deny_shortcut()
            .build()
            .unwrap()
    });
    let admits = |client: &str, checks: usize| {
        rt.block_on(async {
            let mut admitted = 0;
            for _ in 0..checks {
                let answer =
                    tokio::time::timeout(redis_server::PATIENCE * 4, limiter.check(client))
                        .await
                        .expect("a check hung");
                admitted += u64::from(matches!(answer, Ok(d) if d.is_allowed()));
            }
            admitted
        })
    };
    for client in &clients {
        assert_eq!(admits(client, 4), 4, "{client}");
    }
    start_move(&cluster, slot, home, away);
    let (lost, kept) = clients.split_at(4);
    let mut src = cluster.nodes[home].sync();
    for client in lost {
        migrate_key(&mut src, &cluster, away, &limiter.key(client.as_str()));
    }
    cluster.nodes[away].stop();
    for client in kept {
        assert_eq!(admits(client, 10), LIMIT - 4, "{client}");
    }
    for client in lost {
        assert_eq!(admits(client, 10), 0, "{client}");
    }
    let s = limiter.stats();
    assert!(s.fail_closed > 0, "{s:?}");
}

/// What each of `clients`' checks on `limiter` met over `span`, one task a
/// client, a check every 10 ms.
fn seen_over(
    rt: &tokio::runtime::Runtime,
    limiter: &tollgate::redis::RedisLimiter<FixedWindow>,
    clients: &[String],
    span: Duration,
) -> Vec<Seen> {
    let tasks: Vec<_> = clients
        .iter()
        .map(|client| {
            let (limiter, client) = (limiter.clone(), client.clone());
            rt.spawn(async move {
                let end = Instant::now() + span;
                let mut seen = Seen::default();
                while Instant::now() < end {
                    match limiter.check(client.as_str()).await {
                        Ok(_) => seen.ok += 1,
                        Err(e) if e.kind() == CheckErrorKind::Timeout => seen.timeouts += 1,
                        Err(e)
                            if e.kind() == CheckErrorKind::Unavailable
                                && e.to_string().contains("failed recently") =>
                        {
                            seen.open += 1;
                        }
                        Err(_) => seen.other += 1,
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                seen
            })
        })
        .collect();
    tasks.into_iter().map(|t| rt.block_on(t).unwrap()).collect()
}

/// A slot moved to another primary whose old primary is then lost. The
/// limiter's slot map still names the old node for the moved slot until
/// it is read again, so the moved clients' replies (redirected to the new
/// node) would be counted on the old node's breaker and hold it closed:
/// the lost node's own clients would each wait the whole timeout until
/// the next scheduled read, 10 s on. A timeout or a failure has the map
/// read again soon: the moved clients are then judged by their new node
/// and answered throughout, and the lost node's clients meet its open
/// breaker (failed fast) within the load.
#[test]
fn a_moved_slot_s_clients_follow_it_and_leave_the_lost_node_s_breaker_to_open() {
    let Some(mut cluster) = partial_cluster() else {
        return;
    };
    cluster.nodes[0].away_from_hour_boundary(Duration::from_secs(60));
    let (moved, slot) = clients_of_one_slot(4);
    let old = cluster.node_of(&moved[0]);
    let new = (old + 1) % 3;
    let stay: Vec<String> = (0..400)
        .map(|i| format!("client-{i}"))
        .filter(|c| cluster.node_of(c) == old && redis_server::slot_of(c.as_bytes()) != slot)
        .take(4)
        .collect();
    let rt = runtime();
    let limiter = breaking(&rt, &cluster, "follow");
    let all: Vec<String> = moved.iter().chain(&stay).cloned().collect();
    let warm = seen_over(&rt, &limiter, &all, Duration::from_millis(1_000));
    assert!(warm.iter().all(|s| s.ok > 0), "{warm:?}");
    move_slot(&cluster, slot, old, new, Duration::ZERO);
    cluster.nodes[old].stop();
    let lost = seen_over(&rt, &limiter, &all, Duration::from_millis(4_000));
    let (m, s) = lost.split_at(moved.len());
    let stats = limiter.stats();
    assert!(
        m.iter().all(|s| s.ok > 0 && (s.open, s.timeouts) == (0, 0)),
        "the moved clients: {lost:?}, {stats:?}"
    );
    assert!(
        s.iter().any(|s| s.open > 0) && stats.breaker_opened > 0,
        "the lost node's breaker never opened: {lost:?}, {stats:?}"
    );
}
