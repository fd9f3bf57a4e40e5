//! The slow path's compare-and-set as a Cluster runs it, on a real
//! `redis-server`: a key whose expiry changed since it was read, its value
//! the same (as `MIGRATE` leaves a key whose slot moved to a node whose
//! clock differs: the value as it was, the expiry carried as a time to
//! live), is not written. The slow path reads it again where it lives.

use core::time::Duration;

use super::testing::Server;
use crate::algorithm::TokenBucket;
use crate::redis::script::lua::{cas_script, CLOCK};
use crate::redis::script::spec::Spec;

#[test]
fn a_write_refuses_a_key_whose_expiry_moved_since_it_was_read() {
    let Some(server) = Server::start() else {
        return;
    };
    let mut c = server.sync();
    let spec = Spec::bucket(&TokenBucket::new(1, Duration::from_millis(10), 100).unwrap()).unwrap();
    let (now_ms, _): (u64, u64) = ::redis::cmd("TIME").query(&mut c).unwrap();
    let read = i64::try_from(now_ms * 1_000 + 60_000).unwrap();
    let (held, new) = (
        "tb:10000:100|0:0:1000|w.1|5000|0",
        "tb:10000:100|0:0:1000|w.2|6000|0",
    );
    // The key as read, then as a node 2 s ahead holds it after a move.
    let set = |value: &str, expiry: i64, c: &mut ::redis::Connection| {
        let () = ::redis::cmd("SET")
            .arg("k")
            .arg(value)
            .arg("PXAT")
            .arg(expiry)
            .query(c)
            .unwrap();
    };
    let cas = |moves: bool, read_expiry: &str, c: &mut ::redis::Connection| -> i64 {
        let reply: Vec<i64> = ::redis::Script::new(&cas_script(&spec, CLOCK, moves))
            .key("k")
            .arg(held)
            .arg(-1)
            .arg(new)
            .arg(read + 5_000)
            .arg(read_expiry)
            .invoke(c)
            .unwrap();
        reply[0]
    };
    let value =
        |c: &mut ::redis::Connection| -> String { ::redis::cmd("GET").arg("k").query(c).unwrap() };
    set(held, read + 2_000, &mut c);
    assert_eq!(cas(true, &read.to_string(), &mut c), 0, "refused: moved");
    assert_eq!(value(&mut c), held);
    // Read where it lives now: written.
    assert_eq!(cas(true, &(read + 2_000).to_string(), &mut c), 1);
    assert_eq!(value(&mut c), new);
    // Not compared when not given, nor by one server's script (no slot
    // moves there).
    set(held, read + 2_000, &mut c);
    assert_eq!(cas(true, "", &mut c), 1);
    set(held, read + 2_000, &mut c);
    assert_eq!(cas(false, &read.to_string(), &mut c), 1);
}
