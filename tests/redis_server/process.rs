//! A `redis-server` of a test's own, started on a free loopback port in a
//! temporary directory with persistence off, and killed when dropped.
//! Without a `redis-server` binary, [`Server::start`] says why and gives
//! `None`, unless `CI=true`, where a missing server fails the test.
//!
//! Shared by the integration suites (`tests/redis_server/mod.rs`) and the
//! crate's own unit tests (`src/redis/tests/testing.rs`, which includes this
//! file by its path), so it names nothing of tollgate's.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a test's limiters and connections wait for Redis's answer: no
/// load on a small, busy CI machine delays a reply that long, so that a
/// test that is not about timeouts never hinges on one (redis-rs's own
/// default gives up after 500 ms, the limiter's after 100 ms).
pub const PATIENCE: Duration = Duration::from_secs(10);

/// The settings of a test's `ConnectionManager`: Redis's answers awaited
/// for [`PATIENCE`], a connection for 2 s; after a lost connection, one
/// retry 100 ms later (each later call tries again), so that a test that
/// restarts its server finds it soon.
pub fn manager_config() -> ::redis::aio::ConnectionManagerConfig {
    ::redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(PATIENCE))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(100))
}

/// A `redis-server` of this test's own.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    /// Arguments beyond the defaults (cluster mode).
    extra: Vec<String>,
    /// Environment variables set for the process (a clock shim's).
    env: Vec<(String, String)>,
}

impl Server {
    /// Starts one, or `None` (after saying why) if there is no binary and
    /// this is not CI.
    pub fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// As [`Server::start`], with `extra` arguments for `redis-server`.
    pub fn start_with(extra: &[&str]) -> Option<Self> {
        Self::start_with_env(extra, &[])
    }

    /// As [`Server::start_with`], the process run with the variables
    /// `env` set (an `LD_PRELOAD` shim and its setting).
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Option<Self> {
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
                env: env
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            };
            if server.try_run() {
                return Some(server);
            }
        }
        panic!("no redis-server would start on a free loopback port");
    }

    /// A server of this test's own that is not running yet: its port was
    /// free when chosen, and [`Server::run`] starts it there. `None`
    /// (after saying why) as [`Server::start`].
    pub fn unstarted() -> Option<Self> {
        let mut server = Self::start()?;
        server.stop();
        Some(server)
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
            .envs(self.env.iter().map(|(k, v)| (k, v)))
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
            let client = ::redis::Client::open(self.url()).unwrap();
            if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) {
                // Ours, not another test's that holds the port.
                let pid = self.child.as_ref().map(Child::id);
                if let Ok(info) = ::redis::cmd("INFO").arg("server").query::<String>(&mut c) {
                    return info
                        .lines()
                        .any(|l| pid.is_some_and(|pid| l == format!("process_id:{pid}")));
                }
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends the process `signal` (`STOP` freezes it: its connections stay
    /// open and unanswered; `CONT` resumes it).
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("a running server").id();
        let sent = Command::new("kill")
            .args(["-s", signal, &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill -s {signal} {pid} failed");
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A connection for limiters (see [`manager_config`]).
    pub async fn manager(&self) -> ::redis::aio::ConnectionManager {
        ::redis::aio::ConnectionManager::new_with_config(
            ::redis::Client::open(self.url()).unwrap(),
            manager_config(),
        )
        .await
        .unwrap()
    }

    /// A plain connection, for arranging state and reading it back.
    pub fn sync(&self) -> ::redis::Connection {
        ::redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
