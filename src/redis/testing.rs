//! What the Redis limiters' unit tests share: a `redis-server` of the
//! test's own on a free loopback port (without the binary a test says why
//! and passes, unless `CI=true`), a runtime, and limiters on a test clock.

use core::time::Duration;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use super::{RedisAlgorithm, RedisBuilder, RedisLimiter};
use crate::clock::ManualClock;

/// A `redis-server` of this test's own.
pub(super) struct Server {
    child: Child,
    pub(super) url: String,
}

impl Server {
    pub(super) fn start() -> Option<Self> {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "redis-server is not installed, and CI=true requires the Redis tests to run"
            );
            eprintln!("SKIPPED: no redis-server on PATH");
            return None;
        }
        for _ in 0..10 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts");
            let url = format!("redis://127.0.0.1:{port}/");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if child.try_wait().ok().flatten().is_some() {
                    break; // the port was taken: try another
                }
                let client = ::redis::Client::open(url.as_str()).unwrap();
                if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) {
                    let info: String = ::redis::cmd("INFO").arg("server").query(&mut c).unwrap();
                    let ours = format!("process_id:{}", child.id());
                    if info.lines().any(|l| l == ours) {
                        return Some(Self { child, url });
                    }
                }
                assert!(Instant::now() < deadline, "redis-server did not start");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("no redis-server would start on a free loopback port");
    }

    /// Kills the server (`SIGKILL`) and reaps it: what was in flight is
    /// never answered, and the port refuses connections.
    pub(super) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A plain connection, for reading keys back.
    pub(super) fn sync(&self) -> ::redis::Connection {
        ::redis::Client::open(self.url.as_str())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// A connection for limiters.
    pub(super) async fn manager(&self) -> ::redis::aio::ConnectionManager {
        ::redis::aio::ConnectionManager::new(::redis::Client::open(self.url.as_str()).unwrap())
            .await
            .unwrap()
    }

    /// A manual clock two days past Redis's clock, in whole µs: no key a
    /// test's limiter writes expires while the test runs.
    pub(super) fn clock(&self) -> ManualClock {
        let (secs, micros): (u64, u64) = ::redis::cmd("TIME").query(&mut self.sync()).unwrap();
        let clock = ManualClock::new();
        clock.advance(Duration::from_micros(
            (secs + 2 * 86_400) * 1_000_000 + micros,
        ));
        clock
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A current-thread runtime with the timer.
pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A proptest runner of `PROPTEST_CASES` cases, or `default`, that keeps
/// no failure file (its cases need a server).
pub(super) fn runner(default: u32) -> proptest::test_runner::TestRunner {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default);
    proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })
}

/// Gaps (µs) that reach window edges and idle spells of up to `long` as
/// well as the instants between, for windows (or token intervals) of
/// `unit` µs.
pub(super) fn gap(unit: u64, long: u64) -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::prelude::*;
    prop_oneof![
        3 => Just(0u64),
        4 => 1..=unit,
        2 => Just(unit),
        1 => Just(unit - 1),
        1 => Just(unit + 1),
        1 => (2..=40u64).prop_map(move |n| n * unit),
        1 => 1_000_000u64..=long,
    ]
}

/// `builder`'s limiter on `clock`: failures answered with the error, a
/// timeout no loaded machine reaches.
pub(super) fn on_clock<A: RedisAlgorithm>(
    builder: RedisBuilder<A>,
    clock: &ManualClock,
) -> RedisLimiter<A> {
    builder
        .fail_policy(super::FailPolicy::FailClosed)
        .timeout(Duration::from_secs(30))
        .build_on_test_clock(clock.clone())
        .unwrap()
}
