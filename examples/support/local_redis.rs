//! What the Redis runners share (included by path from
//! `examples/redis_bench.rs`, `examples/redis_coalesce.rs` and
//! `examples/redis_lease.rs`): a
//! `redis-server` of the runner's own on a free loopback port, and the
//! script calls Redis has served.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `redis-server` of the runner's own, killed on drop.
pub struct Server(Child, std::path::PathBuf);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// Starts a `redis-server` on a free loopback port, persistence off, in a
/// temporary directory named after `runner`: its URL, and the guard that
/// kills it.
fn start_server(runner: &str) -> (String, Server) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("tollgate-{runner}-{port}"));
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server on PATH (or set REDIS_URL)");
    // Owned at once, so that any exit below kills and reaps it.
    let server = Server(child, dir);
    let url = format!("redis://127.0.0.1:{port}/");
    for _ in 0..200 {
        let ok = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection())
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok();
        if ok {
            return (url, server);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server did not start");
}

/// The Redis to run against: `REDIS_URL` if set, else a server of the
/// runner's own ([`start_server`]), with its guard.
pub fn redis_url(runner: &str) -> (String, Option<Server>) {
    match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let (url, server) = start_server(runner);
            (url, Some(server))
        }
    }
}

/// Round trips Redis has served for scripts so far: the calls of
/// `EVALSHA`, `EVAL` and `SCRIPT` (the commands a script runs inside are
/// counted apart, under their own names, and are not round trips).
pub fn script_calls(url: &str) -> u64 {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    info.lines()
        .filter(|l| {
            l.starts_with("cmdstat_evalsha:")
                || l.starts_with("cmdstat_eval:")
                || l.starts_with("cmdstat_script")
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
