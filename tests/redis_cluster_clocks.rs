//! The Redis limiters on Redis Clusters whose nodes' clocks differ (the
//! clock shim, `tests/support/clockshift.c`, run under one node or more):
//! a lease and a booking are read on the clock of the node that holds
//! the client's key, and a token bucket's slot moved between two such
//! nodes keeps the bucket's bound.

mod redis_server;

use std::time::{Duration, Instant};

use redis_server::{move_slot, prefix, runtime, slot_of, Cluster, Patient};
use tollgate::redis::{FailPolicy, Lease};
use tollgate::TokenBucket;

/// The units a limiter holds leased and unspent.
fn held(s: tollgate::redis::RedisStats) -> u64 {
    s.lease_units - s.leased - s.lease_lapsed - s.lease_returned
}

/// On `cluster`, whose node `ahead` runs `ahead_ms` ahead of node 0 (as
/// checked): a client whose key lives on that node, and one whose key
/// lives on another.
fn apart(cluster: &Cluster, ahead: usize, ahead_ms: i64) -> (String, String) {
    let (mut on, mut off) = (None, None);
    for client in (0..64).map(|i| format!("client-{i}")) {
        let node = cluster.node_of(&client);
        if node == ahead && on.is_none() {
            on = Some(client);
        } else if node != ahead && off.is_none() {
            off = Some(client);
        }
    }
    let server_now = |node: usize| -> i64 {
        let (s, us): (i64, i64) = redis::cmd("TIME")
            .query(&mut cluster.nodes[node].sync())
            .unwrap();
        s * 1_000 + us / 1_000
    };
    let apart = server_now(ahead) - server_now(0);
    assert!(
        (ahead_ms - SHIFT_SLACK_MS..=ahead_ms + SHIFT_SLACK_MS).contains(&apart),
        "the node's clock is {apart} ms ahead, not {ahead_ms}"
    );
    (on.unwrap(), off.unwrap())
}

/// A cluster whose nodes' clocks differ: one primary runs 2 s ahead of
/// the others (the clock shim, `tests/support/clockshift.c`). A leasing
/// limiter (a bucket of 100, one unit per 20 ms, leases of up to 100
/// units for a horizon of 2 s) leases the units of a client whose key
/// lives on the node ahead; the limiter also checks a client whose key
/// lives on a node of the host's clock, one call each (the table holds
/// one lease), between every two checks of the first, so that most of
/// its replies come from the other node. The lease is taken, left unspent
/// for 1.2 s (more than half of its slots pass), then spent in a burst:
/// the burst admits at most the bucket's exact bound over its span,
/// `100 + ⌊span / 20 ms⌋`. Spending the lease on the other node's clock,
/// 2 s behind the one its slots are on, would spend the units whose slots
/// passed as if they had not: up to 100 more.
#[test]
fn a_lease_is_spent_on_the_clock_of_the_node_that_granted_it() {
    const CAPACITY: u64 = 100;
    const INTERVAL: Duration = Duration::from_millis(20);
    const AHEAD_MS: i64 = 2_000;
    let Some(cluster) = Cluster::start_shifted(3, 0, &[0, AHEAD_MS, 0]) else {
        return;
    };
    let (leased, other) = apart(&cluster, 1, AHEAD_MS);
    runtime().block_on(async {
        let limiter = TokenBucket::builder()
            .rate(1, INTERVAL)
            .capacity(CAPACITY)
            .redis(cluster.connection().await, prefix("node-clock"))
            .fail_policy(FailPolicy::FailClosed)
            .patient()
            .no_deny_shortcut()
            .lease(
                Lease::new(Duration::from_secs(2))
                    .max_units(CAPACITY)
                    .max_clients(1),
            )
            .build()
            .unwrap();
        let check = |client: &str| {
            let (limiter, client) = (limiter.clone(), client.to_owned());
            async move { limiter.check(client.as_str()).await.unwrap().is_allowed() }
        };
        // The client gets its lease (its first checks go one call each,
        // until it is hot).
        let mut before = 0;
        for _ in 0..200 {
            before += u64::from(check(&leased).await);
            if before >= 8 && held(limiter.stats()) > 0 {
                break;
            }
        }
        let then = held(limiter.stats());
        assert!(then > 0, "no lease: {:?}", limiter.stats());
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        // The latest reply from the other node.
        check(&other).await;
        let started = Instant::now();
        let mut burst = 0;
        for _ in 0..3 * CAPACITY {
            burst += u64::from(check(&leased).await);
            check(&other).await;
        }
        let span = started.elapsed();
        let bound = CAPACITY + (span.as_nanos() / INTERVAL.as_nanos()) as u64;
        eprintln!(
            "node clock: {burst} admitted in the burst of {span:?} against a bound of {bound} \
             ({then} units held before it; {:?})",
            limiter.stats()
        );
        assert!(
            burst <= bound,
            "{burst} admitted in {span:?} against the exact bound of {bound}: {:?}",
            limiter.stats()
        );
    });
}

/// A booking's wait left is read on the clock of the node that booked it:
/// on a cluster whose node holding the client's key runs 2 s ahead, a
/// booking of a 1 s wait, followed by a check answered by another node,
/// says at most 1 s is left (never to wait past the instant). The other
/// node's clock would say about 3 s.
#[test]
fn a_booking_waits_on_the_clock_of_the_node_that_booked_it() {
    const AHEAD_MS: i64 = 2_000;
    let Some(cluster) = Cluster::start_shifted(3, 0, &[0, AHEAD_MS, 0]) else {
        return;
    };
    let (booked, other) = apart(&cluster, 1, AHEAD_MS);
    runtime().block_on(async {
        let limiter = TokenBucket::builder()
            .rate(1, Duration::from_secs(1))
            .capacity(1)
            .redis(cluster.connection().await, prefix("node-book"))
            .fail_policy(FailPolicy::FailClosed)
            .patient()
            .build()
            .unwrap();
        let first = limiter
            .reserve(booked.as_str(), Duration::ZERO)
            .await
            .unwrap();
        assert!(first.wait().is_zero());
        first.commit();
        let second = limiter
            .reserve(booked.as_str(), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(second.wait() > Duration::from_millis(500), "{second:?}");
        // The latest reply from the other node.
        let _ = limiter.check(other.as_str()).await.unwrap();
        let left = second.remaining_wait();
        assert!(
            left <= second.wait(),
            "{left:?} left of a wait of {:?}",
            second.wait()
        );
        second.commit();
    });
}

/// The bucket of the slot-move tests: 100, one unit per 10 ms.
const CAPACITY: u64 = 100;
const INTERVAL: Duration = Duration::from_millis(10);
/// How far the shifted nodes' clocks are from the host's (ms), and the
/// most the shim's reading may differ from that (`apart` checks).
const SHIFT_MS: i64 = 2_000;
const SHIFT_SLACK_MS: i64 = 500;

/// A cluster of three primaries: node 0 on the host's clock, node 1
/// [`SHIFT_MS`] ahead, node 2 as far behind.
fn shifted() -> Option<Cluster> {
    let cluster = Cluster::start_shifted(3, 0, &[0, SHIFT_MS, -SHIFT_MS])?;
    // The shim took: each node's clock as set.
    let _ = apart(&cluster, 1, SHIFT_MS);
    let _ = apart(&cluster, 2, -SHIFT_MS);
    Some(cluster)
}

/// The `n`-th client (from 0) whose key lives on node 0, and its slot.
fn on_node_0(cluster: &Cluster, n: usize) -> (String, u16) {
    let client = (0..)
        .map(|i| format!("mover-{i}"))
        .filter(|c| cluster.node_of(c) == 0)
        .nth(n)
        .unwrap();
    let slot = slot_of(client.as_bytes());
    (client, slot)
}

/// A limiter of the bucket on `cluster`, each check Redis's answer (or a
/// lease's, leases of up to 10 units for 50 ms).
async fn bucket(
    cluster: &Cluster,
    name: &str,
    lease: bool,
) -> tollgate::redis::RedisLimiter<TokenBucket> {
    let builder = TokenBucket::builder()
        .rate(1, INTERVAL)
        .capacity(CAPACITY)
        .redis(cluster.connection().await, prefix(name))
        .fail_policy(FailPolicy::FailClosed)
        .patient()
        .no_deny_shortcut();
    let builder = if lease {
        builder.lease(Lease::new(Duration::from_millis(50)).max_units(10))
    } else {
        builder
    };
    builder.build().unwrap()
}

/// Asserts that `admitted` since `started` is within the bucket's exact
/// bound plus what one slot move may cost: `⌈3 ms / INTERVAL⌉` units, the
/// key's expiry telling the new node the old one's clock to within 3 ms.
#[track_caller]
fn within_a_move_s_bound(admitted: u64, started: Instant, context: &str) {
    let span = started.elapsed();
    let bound = CAPACITY + (span.as_nanos() / INTERVAL.as_nanos()) as u64;
    let rounding = Duration::from_millis(3)
        .as_nanos()
        .div_ceil(INTERVAL.as_nanos()) as u64;
    assert!(
        admitted <= bound + rounding,
        "{admitted} admitted in {span:?}: the exact bound is {bound}, the rounding {rounding}; \
         {context}"
    );
}

/// A client's slot moved to a node whose clock is ahead: the client spends
/// its bucket on node 0, its slot moves to node 1 (2 s ahead), and it
/// spends what it is given there; with and without leases. Over the
/// whole span the client is admitted at most the exact bound plus one
/// unit: the key's expiry, which `MIGRATE` carries as a time to live in
/// whole ms, tells the new node how far its clock is from the old one's
/// to within 3 ms (a unit is 10 ms). Judged on the new node's clock as it
/// stood, the client got the whole bucket again: 202 admitted in 36 ms
/// where the exact bound is 103.
#[test]
fn a_slot_moved_to_a_clock_ahead_keeps_the_bucket_s_bound() {
    let Some(cluster) = shifted() else {
        return;
    };
    for lease in [false, true] {
        let (client, slot) = on_node_0(&cluster, usize::from(lease));
        runtime().block_on(async {
            let limiter = bucket(&cluster, &format!("ahead-{lease}"), lease).await;
            let started = Instant::now();
            let mut admitted = 0;
            while limiter.check(client.as_str()).await.unwrap().is_allowed() {
                admitted += 1;
            }
            move_slot(&cluster, slot, 0, 1, Duration::ZERO);
            while limiter.check(client.as_str()).await.unwrap().is_allowed() {
                admitted += 1;
            }
            within_a_move_s_bound(
                admitted,
                started,
                &format!("leases {lease}: {:?}", limiter.stats()),
            );
        });
    }
}

/// A booking cancelled after its client's slot moved to a node whose
/// clock is ahead: the client spends its bucket on node 0 and books one
/// more unit, its slot moves to node 1 (2 s ahead), and the booking is
/// cancelled there. A cancel gives back only before the booking's instant
/// comes, read on the node it lands on: on a clock ahead, that instant has
/// passed, and nothing is given back. Had the state from before the
/// booking been put back, its TAT, of the old node's clock, would lie 2 s
/// in the new one's past: a full bucket again. Over the whole span the
/// client stays within the exact bound plus a unit, as any move.
#[test]
fn a_booking_cancelled_after_its_slot_moved_gives_back_nothing_on_the_new_clock() {
    let Some(cluster) = shifted() else {
        return;
    };
    let (client, slot) = on_node_0(&cluster, 2);
    runtime().block_on(async {
        let limiter = bucket(&cluster, "cancel-moved", false).await;
        let started = Instant::now();
        let mut admitted = 0;
        while limiter.check(client.as_str()).await.unwrap().is_allowed() {
            admitted += 1;
        }
        let booked = limiter
            .reserve(client.as_str(), Duration::from_secs(5))
            .await
            .unwrap();
        move_slot(&cluster, slot, 0, 1, Duration::ZERO);
        assert!(
            !booked.cancel().await.unwrap(),
            "nothing given back past the booking's instant on the new clock"
        );
        while limiter.check(client.as_str()).await.unwrap().is_allowed() {
            admitted += 1;
        }
        within_a_move_s_bound(admitted, started, &format!("{:?}", limiter.stats()));
    });
}

/// A client's slot moved to a node whose clock is behind: the client
/// spends one unit of 100 on node 0, its slot moves to node 2 (2 s
/// behind), and its next check is admitted, 98 left. Judged on the new
/// node's clock as it stood, its state lay 2 s in the future: refused for
/// about a second with 99 of 100 left.
#[test]
fn a_slot_moved_to_a_clock_behind_admits_what_is_left() {
    let Some(cluster) = shifted() else {
        return;
    };
    let (client, slot) = on_node_0(&cluster, 0);
    runtime().block_on(async {
        let limiter = bucket(&cluster, "behind", false).await;
        let d = limiter.check(client.as_str()).await.unwrap();
        assert_eq!((d.is_allowed(), d.remaining()), (true, CAPACITY - 1));
        move_slot(&cluster, slot, 0, 2, Duration::ZERO);
        let d = limiter.check(client.as_str()).await.unwrap();
        assert!(d.is_allowed(), "99 of 100 left, refused: {d:?}");
        assert!(d.remaining() >= CAPACITY - 2, "{d:?}");
    });
}
