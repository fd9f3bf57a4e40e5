//! A `redis-server` of each test's own, started on a free loopback port in
//! a temporary directory with persistence off, and killed when the test
//! ends; and the builders the Redis suites share.
//!
//! Without a `redis-server` binary the tests print why and pass, unless
//! `CI=true`, where a missing server fails them.

#![allow(dead_code)] // each suite uses its own part

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tollgate::redis::{RedisBuilder, RedisConnection};
use tollgate::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};

pub const HOUR: Duration = Duration::from_secs(3_600);

/// A `redis-server` of this test's own.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    /// Arguments beyond the defaults (cluster mode).
    extra: Vec<String>,
}

impl Server {
    /// Starts one, or `None` (after saying why) if there is no binary and
    /// this is not CI.
    pub fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// As [`Server::start`], with `extra` arguments for `redis-server`.
    pub fn start_with(extra: &[&str]) -> Option<Self> {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "redis-server is not installed, and CI=true requires the Redis tests to run"
            );
            eprintln!("SKIPPED: no redis-server on PATH (install it to run the Redis tests)");
            return None;
        }
        // A port found free may be taken by another test's server before
        // ours binds it: then ours exits at once, and we try another.
        for _ in 0..10 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let dir =
                std::env::temp_dir().join(format!("tollgate-redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let mut server = Self {
                child: None,
                port,
                dir,
                extra: extra.iter().map(|a| (*a).to_owned()).collect(),
            };
            if server.try_run() {
                return Some(server);
            }
        }
        panic!("no redis-server would start on a free loopback port");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts the process and waits until it answers.
    pub fn run(&mut self) {
        assert!(self.try_run(), "redis-server did not start");
    }

    /// Starts the process and waits until it answers: false if it exited
    /// first (its port was taken).
    pub fn try_run(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(child) = self.child.as_mut() {
                if child.try_wait().ok().flatten().is_some() {
                    self.child = None;
                    return false;
                }
            }
            let client = redis::Client::open(self.url()).unwrap();
            if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) {
                // Ours, not another test's that holds the port.
                let pid = self.child.as_ref().map(Child::id);
                if let Ok(info) = redis::cmd("INFO").arg("server").query::<String>(&mut c) {
                    return info
                        .lines()
                        .any(|l| pid.is_some_and(|pid| l == format!("process_id:{pid}")));
                }
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A plain connection, for arranging state and reading it back.
    pub fn sync(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    pub async fn manager(&self) -> ConnectionManager {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(200)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(100));
        ConnectionManager::new_with_config(redis::Client::open(self.url()).unwrap(), config)
            .await
            .unwrap()
    }

    /// A connection that waits for Redis's answers for up to 10 s: for a
    /// test that pauses the server, on a loaded machine.
    pub async fn patient_manager(&self) -> ConnectionManager {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(10)));
        ConnectionManager::new_with_config(redis::Client::open(self.url()).unwrap(), config)
            .await
            .unwrap()
    }

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

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A prefix no other test (or run) shares.
pub fn prefix(name: &str) -> String {
    format!("t{}-{name}", std::process::id())
}

/// The four algorithms, limited to `n` per `window` (the bucket: capacity
/// `n`, refilled at `n` per `window`), as builders waiting for Redis.
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
            .redis(conn.clone(), p),
        SlidingWindowCounter::builder()
            .limit(n)
            .window(window)
            .redis(conn.clone(), p),
        FixedWindow::builder()
            .limit(n)
            .window(window)
            .redis(conn.clone(), p),
        SlidingWindowLog::builder()
            .limit(n)
            .window(window)
            .redis(conn.clone(), p),
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
        let args = ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"];
        let first = Server::start_with(&args)?;
        let mut nodes = vec![first];
        for _ in 1..primaries * (1 + replicas) {
            nodes.push(Server::start_with(&args).expect("redis-server starts"));
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

    /// Every node's URL, for a `ClusterClient`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// A cluster connection that follows failovers.
    pub async fn connection(&self) -> redis::cluster_async::ClusterConnection {
        redis::cluster::ClusterClientBuilder::new(self.urls())
            .connection_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_secs(2))
            .retries(8)
            .build()
            .unwrap()
            .get_async_connection()
            .await
            .unwrap()
    }
}
