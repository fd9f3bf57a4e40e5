//! A `redis-server` of each test's own, started on a free loopback port in
//! a temporary directory with persistence off, and killed when the test
//! ends; and the builders the Redis suites share.
//!
//! Without a `redis-server` binary the tests print why and pass, unless
//! `CI=true`, where a missing server fails them.

#![allow(dead_code)] // each suite uses its own part

use std::process::Stdio;
use std::time::{Duration, Instant};

use tollgate::redis::{RedisBuilder, RedisConnection};
use tollgate::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};

pub const HOUR: Duration = Duration::from_secs(3_600);

mod process;
#[allow(unused_imports)] // each suite uses its own part
pub use process::{manager_config, Server, PATIENCE};

/// A limiter's timeout for a test that is not about timeouts. A test of an
/// outage by a stopped server needs no short timeout either: a stopped
/// server refuses the connection at once, and the fail policy answers.
pub trait Patient {
    /// Waits [`PATIENCE`] for each of Redis's answers: a slow reply on a
    /// loaded machine is still Redis's answer, never the fail policy's.
    #[must_use]
    fn patient(self) -> Self;
}

impl<A> Patient for RedisBuilder<A> {
    fn patient(self) -> Self {
        self.timeout(PATIENCE)
    }
}

impl Server {
    /// Sleeps past the next hour boundary of Redis's clock if it is less
    /// than `margin` away, so that an hour-long window cannot roll over
    /// during a test.
    pub fn away_from_hour_boundary(&self, margin: Duration) {
        let (secs, _): (u64, u64) = redis::cmd("TIME").query(&mut self.sync()).unwrap();
        let left = 3_600 - secs % 3_600;
        if left < margin.as_secs() {
            std::thread::sleep(Duration::from_secs(left + 1));
        }
    }
}

/// A prefix no other test (or run) shares.
pub fn prefix(name: &str) -> String {
    format!("t{}-{name}", std::process::id())
}

/// The four algorithms, limited to `n` per `window` (the bucket: capacity
/// `n`, refilled at `n` per `window`), as builders waiting for Redis, each
/// [`Patient`].
pub fn builders(
    conn: &(impl Clone + Into<RedisConnection>),
    p: &str,
    n: u64,
    window: Duration,
) -> (
    RedisBuilder<TokenBucket>,
    RedisBuilder<SlidingWindowCounter>,
    RedisBuilder<FixedWindow>,
    RedisBuilder<SlidingWindowLog>,
) {
    (
        TokenBucket::builder()
            .rate(n, window)
            .redis(conn.clone(), p)
            .patient(),
        SlidingWindowCounter::builder()
            .limit(n)
            .window(window)
            .redis(conn.clone(), p)
            .patient(),
        FixedWindow::builder()
            .limit(n)
            .window(window)
            .redis(conn.clone(), p)
            .patient(),
        SlidingWindowLog::builder()
            .limit(n)
            .window(window)
            .redis(conn.clone(), p)
            .patient(),
    )
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

/// A Redis Cluster on loopback: `primaries` primaries, each with
/// `replicas` replicas, made by `redis-cli --cluster create`, and torn
/// down (every node killed) when dropped.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    /// Starts the nodes and waits until every one reports
    /// `cluster_state:ok` and every primary has its replicas; `None` (after
    /// saying why) without a `redis-server`, as [`Server::start`].
    pub fn start(primaries: usize, replicas: usize) -> Option<Self> {
        Self::start_shifted(primaries, replicas, &[])
    }

    /// As [`Cluster::start`], node `i` running with its wall clock
    /// `shifts_ms[i]` ms off the host's (none past the slice's end) under
    /// the clock shim (see [`clockshift`]): Redis's `TIME`, its scripts'
    /// reading and its key expiries all follow that clock. `None` (after
    /// saying why) without a `redis-server`, or, when a node is shifted,
    /// without a C compiler to build the shim.
    pub fn start_shifted(primaries: usize, replicas: usize, shifts_ms: &[i64]) -> Option<Self> {
        Self::start_with(primaries, replicas, shifts_ms, &[])
    }

    /// As [`Cluster::start`], each node also given `extra` arguments (such
    /// as `--cluster-require-full-coverage no`, so that the other nodes
    /// keep answering while one primary is lost).
    pub fn start_args(primaries: usize, replicas: usize, extra: &[&str]) -> Option<Self> {
        Self::start_with(primaries, replicas, &[], extra)
    }

    fn start_with(
        primaries: usize,
        replicas: usize,
        shifts_ms: &[i64],
        extra: &[&str],
    ) -> Option<Self> {
        let mut args = vec!["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"];
        args.extend_from_slice(extra);
        let shim = if shifts_ms.iter().any(|&ms| ms != 0) {
            Some(clockshift()?)
        } else {
            None
        };
        let start = |i: usize| {
            let ms = shifts_ms.get(i).copied().unwrap_or(0);
            match &shim {
                Some(shim) if ms != 0 => {
                    let shim = shim.to_str().expect("a UTF-8 path");
                    Server::start_with_env(
                        &args,
                        &[("LD_PRELOAD", shim), ("CLOCKSHIFT_MS", &ms.to_string())],
                    )
                }
                _ => Server::start_with(&args),
            }
        };
        let first = start(0)?;
        let mut nodes = vec![first];
        for i in 1..primaries * (1 + replicas) {
            nodes.push(start(i).expect("redis-server starts"));
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = std::process::Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(created.success(), "redis-cli --cluster create failed");
        let cluster = Self { nodes };
        cluster.wait_until_ok(primaries * (1 + replicas), Duration::from_secs(30));
        cluster.wait_for_replicas(Duration::from_secs(30));
        Some(cluster)
    }

    /// Waits until every replica's link to its primary is up and its first
    /// sync is over.
    pub fn wait_for_replicas(&self, patience: Duration) {
        let deadline = Instant::now() + patience;
        for node in &self.nodes {
            loop {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut node.sync())
                    .unwrap();
                let replica = info.contains("role:slave");
                if !replica
                    || (info.contains("master_link_status:up")
                        && info.contains("master_sync_in_progress:0"))
                {
                    break;
                }
                assert!(Instant::now() < deadline, "a replica did not sync: {info}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Whether `node` is a primary now.
    pub fn is_primary(node: &Server) -> bool {
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut node.sync()).unwrap();
        matches!(&role[0], redis::Value::BulkString(r) if r == b"master")
    }

    /// Waits until every node says `cluster_state:ok` and knows `nodes`
    /// nodes, each primary with its replicas attached.
    pub fn wait_until_ok(&self, nodes: usize, patience: Duration) {
        let deadline = Instant::now() + patience;
        for node in &self.nodes {
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut node.sync())
                    .unwrap();
                let known = format!("cluster_known_nodes:{nodes}");
                if info.contains("cluster_state:ok") && info.contains(&known) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the cluster did not come up: {info}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The index in `nodes` of the primary that holds `client`'s slot (a
    /// client whose id has no braces: its keys' hash tag is the id).
    pub fn node_of(&self, client: &str) -> usize {
        let mut admin = self.nodes[0].sync();
        let slot: u64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(client)
            .query(&mut admin)
            .unwrap();
        let table: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut admin)
            .unwrap();
        for line in table.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 || !fields[2].contains("master") {
                continue;
            }
            let port: u16 = fields[1]
                .split(['@', ','])
                .next()
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| p.parse().ok())
                .expect("a node's address");
            let holds = fields[8..].iter().any(|range| {
                let mut ends = range.split('-').map(|n| n.parse::<u64>());
                match (ends.next(), ends.next()) {
                    (Some(Ok(a)), None) => slot == a,
                    (Some(Ok(a)), Some(Ok(b))) => (a..=b).contains(&slot),
                    _ => false,
                }
            });
            if holds {
                return self
                    .nodes
                    .iter()
                    .position(|n| n.port == port)
                    .expect("a node of this cluster");
            }
        }
        panic!("no primary holds slot {slot}: {table}");
    }

    /// Every node's URL, for a `ClusterClient`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// A cluster connection that follows failovers.
    pub async fn connection(&self) -> redis::cluster_async::ClusterConnection {
        redis::cluster::ClusterClientBuilder::new(self.urls())
            .connection_timeout(Duration::from_millis(500))
            .response_timeout(PATIENCE)
            .retries(8)
            .build()
            .unwrap()
            .get_async_connection()
            .await
            .unwrap()
    }
}

/// The clock shim, `tests/support/clockshift.c` (an `LD_PRELOAD` library
/// that shifts `CLOCK_REALTIME` by `CLOCKSHIFT_MS` ms), built once per test
/// process with `cc` into Cargo's temporary directory: its path, or `None`
/// (after saying why) without a C compiler, unless `CI=true`, where that
/// fails the test.
pub fn clockshift() -> Option<std::path::PathBuf> {
    static BUILT: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let source =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/clockshift.c");
            let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("libclockshift-{}.so", std::process::id()));
            let built = std::process::Command::new("cc")
                .args(["-shared", "-fPIC", "-O2", "-o"])
                .arg(&out)
                .arg(&source)
                .arg("-ldl")
                .status();
            match built {
                Ok(status) if status.success() => Some(out),
                Ok(status) => panic!("cc could not build the clock shim: {status}"),
                Err(err) => {
                    assert!(
                        std::env::var("CI").as_deref() != Ok("true"),
                        "no C compiler ({err}), and CI=true requires the clock-shift tests to run"
                    );
                    eprintln!("SKIPPED: no C compiler (cc) to build the clock shim: {err}");
                    None
                }
            }
        })
        .clone()
}

/// Every decision for each of `clients`, in no particular order, from
/// `tasks` tasks per client each checking it `each` times, all released
/// at once: on a limiter that coalesces, most checks wait for another's
/// call.
pub async fn at_once<A: tollgate::redis::RedisAlgorithm + 'static>(
    limiter: &tollgate::redis::RedisLimiter<A>,
    clients: &[&'static str],
    tasks: usize,
    each: usize,
) -> Vec<Vec<tollgate::Decision>> {
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(clients.len() * tasks));
    let handles: Vec<_> = (0..clients.len() * tasks)
        .map(|i| {
            let (limiter, start) = (limiter.clone(), start.clone());
            let (c, client) = (i % clients.len(), clients[i % clients.len()]);
            tokio::spawn(async move {
                start.wait().await;
                let mut decisions = Vec::with_capacity(each);
                for _ in 0..each {
                    decisions.push(limiter.check(client).await.unwrap());
                }
                (c, decisions)
            })
        })
        .collect();
    let mut out = vec![Vec::new(); clients.len()];
    for handle in handles {
        let (c, decisions) = handle.await.unwrap();
        out[c].extend(decisions);
    }
    out
}

/// The `remaining` figures of the admissions among `decisions`, sorted
/// (one each, for admissions of cost 1 decided each on the state the ones
/// before it left: `0, 1, …, admitted − 1`).
pub fn admitted(decisions: &[tollgate::Decision]) -> Vec<u64> {
    let mut left: Vec<u64> = decisions
        .iter()
        .filter(|d| d.is_allowed())
        .map(|d| d.remaining())
        .collect();
    left.sort_unstable();
    left
}

/// Redis Cluster's hash slot of a key whose hash tag is `tag` (CRC16,
/// XMODEM, modulo 16 384).
pub fn slot_of(tag: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in tag {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

/// `n` client ids (hash tags of their own) whose keys all fall in one
/// slot, and that slot.
pub fn clients_of_one_slot(n: usize) -> (Vec<String>, u16) {
    let mut by_slot: std::collections::HashMap<u16, Vec<String>> = Default::default();
    for i in 0.. {
        let client = format!("c{i}");
        let slot = slot_of(client.as_bytes());
        let same = by_slot.entry(slot).or_default();
        same.push(client);
        if same.len() == n {
            return (same.clone(), slot);
        }
    }
    unreachable!()
}

/// Starts moving `slot` from node `from` to node `to`, as `redis-cli
/// --cluster reshard` does: `IMPORTING` on the target, then `MIGRATING` on
/// the source. Returns the target's id.
pub fn start_move(cluster: &Cluster, slot: u16, from: usize, to: usize) -> String {
    let id = |node: usize| -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut cluster.nodes[node].sync())
            .unwrap()
    };
    let (source, target) = (id(from), id(to));
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("IMPORTING")
        .arg(&source)
        .query(&mut cluster.nodes[to].sync())
        .unwrap();
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("MIGRATING")
        .arg(&target)
        .query(&mut cluster.nodes[from].sync())
        .unwrap();
    target
}

/// Moves `key` (and its expiry) to node `to` by `MIGRATE`, sent on `src`,
/// a connection to the node that holds it.
pub fn migrate_key(src: &mut ::redis::Connection, cluster: &Cluster, to: usize, key: &[u8]) {
    let _: redis::Value = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(cluster.nodes[to].port)
        .arg("")
        .arg(0)
        .arg(5_000)
        .arg("KEYS")
        .arg(key)
        .query(src)
        .unwrap();
}

/// Moves `slot` from node `from` to node `to` of `cluster` as
/// `redis-cli --cluster reshard` does: `IMPORTING` on the target,
/// `MIGRATING` on the source, every key moved one by one by `MIGRATE …
/// KEYS` (`pause` between keys, so that checks meet the slot half moved),
/// then `SETSLOT … NODE` on every primary. Keys made meanwhile are made
/// on the target (the source sends their checks there by `ASK`).
pub fn move_slot(cluster: &Cluster, slot: u16, from: usize, to: usize, pause: Duration) -> usize {
    let target = start_move(cluster, slot, from, to);
    let mut src = cluster.nodes[from].sync();
    let mut moved = 0;
    loop {
        let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(1)
            .query(&mut src)
            .unwrap();
        let Some(key) = keys.first() else { break };
        migrate_key(&mut src, cluster, to, key);
        moved += 1;
        std::thread::sleep(pause);
    }
    for node in [to, from]
        .into_iter()
        .chain((0..cluster.nodes.len()).filter(|&n| n != to && n != from))
    {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&target)
            .query(&mut cluster.nodes[node].sync())
            .unwrap();
    }
    moved
}
