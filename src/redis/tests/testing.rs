//! What the Redis limiters' unit tests share: a `redis-server` of the
//! test's own on a free loopback port (without the binary a test says why
//! and passes, unless `CI=true`), a runtime, and limiters on a test clock.

use core::time::Duration;

use crate::clock::ManualClock;
use crate::redis::{RedisAlgorithm, RedisBuilder, RedisLimiter};

/// A `redis-server` of this test's own: the integration suites' own
/// (`tests/redis_server/process.rs`), included by its path.
#[allow(dead_code, unreachable_pub)] // the suites' interface, in part
#[path = "../../../tests/redis_server/process.rs"]
mod process;
pub(super) use process::{Server, PATIENCE};

impl Server {
    /// Holds every client's commands for `ms`: a call sent meanwhile stays
    /// in flight until then (or until the server dies).
    pub(super) fn pause(&self, ms: u64) {
        let () = ::redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(ms)
            .arg("ALL")
            .query(&mut self.sync())
            .unwrap();
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
/// timeout no loaded machine reaches ([`PATIENCE`]).
pub(super) fn on_clock<A: RedisAlgorithm>(
    builder: RedisBuilder<A>,
    clock: &ManualClock,
) -> RedisLimiter<A> {
    builder
        .fail_policy(crate::redis::FailPolicy::FailClosed)
        .timeout(PATIENCE)
        .build_on_test_clock(clock.clone())
        .unwrap()
}

/// The helpers' own promise: a server that stalls for longer than redis-rs
/// (500 ms) or the limiter (100 ms) wait by default still answers a check
/// on the test connection and [`on_clock`]'s limiter, so a loaded machine
/// cannot turn Redis's answer into the fail policy's.
#[test]
fn a_check_on_the_test_connection_outwaits_a_stalled_server() {
    let Some(server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let clock = server.clock();
    let limiter = on_clock(
        crate::FixedWindow::builder()
            .limit(3)
            .window(Duration::from_secs(3_600))
            .redis(rt.block_on(server.manager()), "stalled"),
        &clock,
    );
    rt.block_on(async {
        assert_eq!(limiter.check("a").await.unwrap().remaining(), 2);
        server.pause(1_200);
        let started = std::time::Instant::now();
        let d = limiter.check("a").await.unwrap();
        assert_eq!(d.remaining(), 1, "Redis's answer, after the stall");
        assert!(started.elapsed() >= Duration::from_millis(1_000));
        let s = limiter.stats();
        assert_eq!((s.timeouts, s.errors, s.fail_closed), (0, 0, 0), "{s:?}");
    });
}
