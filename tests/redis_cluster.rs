//! The Redis limiters on a Redis Cluster of three primaries started on
//! loopback by the test itself (see `redis_server::Cluster`): every client
//! id keeps its limit whatever bytes it holds, and a failover under load
//! admits nothing over the quota.

mod redis_server;

use std::time::Duration;

use redis_server::{prefix, runtime, Cluster, HOUR};
use tollgate::redis::FailPolicy;
use tollgate::{FixedWindow, TokenBucket};

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
