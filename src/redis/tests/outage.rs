//! What an outage costs under `FailPolicy::Local` with `local_share`: each
//! replica holds a client to its share of what Redis last told that
//! replica was left, so a replica that heard early (before the others
//! spent the client's quota) still holds its share of what it heard.

use core::time::Duration;

use super::testing::{runtime, Server, PATIENCE};
use crate::redis::{FailPolicy, RedisLimiter};
use crate::TokenBucket;

/// The bucket's interval: 1 000 an hour.
const T: Duration = Duration::from_millis(3_600);

/// Four replicas of a bucket of 1 000 (one unit per 3.6 s), each with
/// `local_share(4)`. Replica 0 checks a client once and hears 999 left;
/// the other three spend the rest and each last hears 0 left. Then Redis
/// stops. Each replica decides alone on its share of what it last heard:
/// replica 0 admits ⌊999/4⌋ = 249, the others nothing, each plus its
/// refill at a quarter of the rate (one unit per 14.4 s). So the fleet's
/// outage bound is the sum over the replicas of a share of what each last
/// heard, plus the refill: here 249 where Redis had 0 left when the
/// outage began. (No replica can do better: one that heard early hears
/// nothing more of the client until it checks it.)
#[test]
fn an_outage_admits_each_replica_s_share_of_what_it_last_heard() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let replicas: Vec<RedisLimiter<TokenBucket>> = rt.block_on(async {
        let mut replicas = Vec::new();
        for _ in 0..4 {
            replicas.push(
                TokenBucket::builder()
                    .rate(1, T)
                    .capacity(1_000)
                    .redis(server.manager().await, "early")
                    .fail_policy(FailPolicy::Local)
                    .local_share(4)
                    .no_deny_shortcut()
                    .timeout(PATIENCE)
                    .build()
                    .unwrap(),
            );
        }
        replicas
    });
    let heard = rt.block_on(async {
        let left = |d: crate::Decision| d.remaining();
        let mut heard = [0u64; 4];
        heard[0] = left(replicas[0].check("c").await.unwrap());
        assert_eq!(heard[0], 999);
        heard[1] = left(replicas[1].check_n("c", 997).await.unwrap());
        heard[2] = left(replicas[2].check("c").await.unwrap());
        heard[3] = left(replicas[3].check("c").await.unwrap());
        // Denied: each hears 0 left.
        for (r, h) in heard.iter_mut().enumerate().skip(1) {
            let d = replicas[r].check("c").await.unwrap();
            assert!(d.is_denied(), "{d:?}");
            *h = left(d);
        }
        heard
    });
    assert_eq!(heard, [999, 0, 0, 0]);
    let stopped = std::time::Instant::now();
    server.stop();
    let admitted: Vec<u64> = rt.block_on(async {
        let mut admitted = Vec::new();
        for replica in &replicas {
            let mut n = 0;
            for _ in 0..1_000 {
                n += u64::from(replica.check("c").await.unwrap().is_allowed());
            }
            admitted.push(n);
        }
        admitted
    });
    // Each replica's refill, at a quarter of the rate, over the outage so
    // far, rounded up.
    let refill = stopped.elapsed().as_nanos().div_ceil(4 * T.as_nanos()) as u64;
    for (r, (&a, &h)) in admitted.iter().zip(&heard).enumerate() {
        assert!(
            (h / 4..=h / 4 + refill).contains(&a),
            "replica {r} heard {h} and admitted {a} (refill {refill}): {admitted:?}"
        );
    }
    let total: u64 = admitted.iter().sum();
    assert!(
        total >= 249,
        "the early replica holds its share: {admitted:?}"
    );
    for replica in &replicas {
        assert!(replica.stats().fail_local > 0, "{:?}", replica.stats());
    }
}
