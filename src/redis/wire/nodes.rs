//! A breaker per node: on Redis Cluster each node is judged on its own,
//! so that one lost primary opens the breaker for the clients whose slots
//! it holds, and only for them; one server has one breaker.
//!
//! A key's node is found from its slot (CRC16 of its hash tag, as Redis
//! Cluster hashes it) through a map of each slot's owner, read from
//! `CLUSTER SLOTS` by a task of its own: when first needed, then at most
//! every ten seconds, and a second after any breaker opens or closes or a
//! call fails or times out (a failover or a reshard moves slots). A slot
//! whose owner is not known yet (before the first map, or past the most
//! nodes kept) shares one breaker, as a single server's checks do.

use core::time::Duration;
use std::sync::Mutex;

use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use ::redis::Value;

use super::guard::Breaker;
use crate::sync::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// Redis Cluster's hash slots.
const SLOTS: usize = 16_384;

/// The most nodes judged each on its own; the slots of any further node
/// share the breaker of the slots not known.
const NODES: usize = 255;

/// How long a slot map serves before it is read again (ns).
const REFRESH: u64 = 10_000_000_000;

/// How soon after a breaker opened or closed, or a call failed or timed
/// out, the map is read again (ns).
const SOON: u64 = 1_000_000_000;

/// A limiter's breakers: one, or (Redis Cluster) one per node.
#[derive(Debug)]
pub(crate) struct Breakers {
    /// A single server's breaker; on a cluster, the slots' whose owner is
    /// not known.
    whole: Breaker,
    nodes: Option<std::sync::Arc<Nodes>>,
}

/// The nodes of a cluster, each with its breaker, and each slot's owner.
struct Nodes {
    /// Each slot's owner: 0 for not known, else one more than its index
    /// in `breakers`.
    owners: Box<[AtomicU8]>,
    breakers: Box<[Breaker]>,
    /// The nodes' addresses (`host:port`), in the order of `breakers`:
    /// read and written by the one refresh on its way.
    names: Mutex<Vec<String>>,
    /// The local instant (ns) the next refresh is due at.
    due: AtomicU64,
    /// A refresh is on its way.
    refreshing: AtomicBool,
    conn: ClusterConnection,
    timeout: Duration,
}

impl core::fmt::Debug for Nodes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Nodes").finish_non_exhaustive()
    }
}

impl Breakers {
    /// One breaker, for a single server.
    pub(crate) fn single(base: Duration, max: Duration) -> Self {
        Self {
            whole: Breaker::new(base, max),
            nodes: None,
        }
    }

    /// A breaker per node of the cluster `conn` reaches; its slot map read
    /// with `timeout`.
    pub(crate) fn cluster(
        base: Duration,
        max: Duration,
        conn: ClusterConnection,
        timeout: Duration,
    ) -> Self {
        Self {
            whole: Breaker::new(base, max),
            nodes: Some(std::sync::Arc::new(Nodes {
                owners: (0..SLOTS).map(|_| AtomicU8::new(0)).collect(),
                breakers: (0..NODES).map(|_| Breaker::new(base, max)).collect(),
                names: Mutex::new(Vec::new()),
                due: AtomicU64::new(0),
                refreshing: AtomicBool::new(false),
                conn,
                timeout,
            })),
        }
    }

    /// Starts reading the slot map (a cluster's) at local instant `now`,
    /// on a task of its own if a runtime runs this: so that it is known by
    /// the first checks.
    pub(crate) fn map_now(&self, now: u64) {
        if let Some(nodes) = &self.nodes {
            refresh(nodes, now);
        }
    }

    /// The breaker that judges the node holding `key` (a client's key, or
    /// a name that starts with one), at local instant `now` (ns): the
    /// slot map read again first, by a task of its own, if it is due.
    pub(crate) fn of(&self, key: &[u8], now: u64) -> &Breaker {
        let Some(nodes) = &self.nodes else {
            return &self.whole;
        };
        // Relaxed: a hint; `refreshing` lets one refresh go.
        if now >= nodes.due.load(Ordering::Relaxed) {
            refresh(nodes, now);
        }
        // Relaxed: the owner is a hint of which node a call will reach;
        // a stale one judges the call by another node's breaker until the
        // next map, as a single server's one breaker always does.
        match nodes.owners[usize::from(slot_of(key))].load(Ordering::Relaxed) {
            0 => &self.whole,
            owner => &nodes.breakers[usize::from(owner) - 1],
        }
    }

    /// A breaker opened or closed, or a call failed or timed out, at
    /// `now`: slots may have moved (a failover, a reshard), so the map is
    /// read again soon. A stale map would judge a moved slot's clients by
    /// their old node's breaker, whose closing their redirected replies
    /// would then hold.
    pub(crate) fn moved(&self, now: u64) {
        if let Some(nodes) = &self.nodes {
            // Relaxed: as in `of`.
            nodes.due.fetch_min(now + SOON, Ordering::Relaxed);
        }
    }

    /// Whether any breaker is open.
    #[cfg(feature = "metrics")]
    pub(crate) fn is_open(&self) -> bool {
        self.whole.is_open()
            || self
                .nodes
                .as_ref()
                .is_some_and(|nodes| nodes.breakers.iter().any(Breaker::is_open))
    }
}

/// Reads the slot map again on a task of its own, unless a refresh is on
/// its way (or there is no runtime to run it on).
fn refresh(nodes: &std::sync::Arc<Nodes>, now: u64) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    // Acquire/Release: one refresh at a time; pairs with the Release
    // store that ends it, so the next one sees the names it wrote (the
    // mutex orders them too).
    if nodes
        .refreshing
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // Relaxed: as in `of`.
    nodes
        .due
        .store(now.saturating_add(REFRESH), Ordering::Relaxed);
    let nodes = std::sync::Arc::clone(nodes);
    runtime.spawn(async move {
        let mut conn = nodes.conn.clone();
        let ask = conn.route_command(
            ::redis::cmd("CLUSTER").arg("SLOTS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        );
        if let Ok(Ok(reply)) = tokio::time::timeout(nodes.timeout, ask).await {
            nodes.install(&reply);
        }
        // Release: see above.
        nodes.refreshing.store(false, Ordering::Release);
    });
}

impl Nodes {
    /// Installs the owners a `CLUSTER SLOTS` reply names: each range's
    /// primary, by its address.
    fn install(&self, reply: &Value) {
        let mut names = self
            .names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        place(&self.owners, &mut names, reply);
    }
}

/// Writes each slot's owner that a `CLUSTER SLOTS` reply names into
/// `owners`: one more than the index of its primary's address in `names`,
/// the address added there if new while `names` holds fewer than
/// [`NODES`], else 0 (not known). Ranges that are not well formed are
/// passed over, and a range's end past the last slot is read as the last.
fn place(owners: &[AtomicU8], names: &mut Vec<String>, reply: &Value) {
    let Value::Array(ranges) = reply else {
        return;
    };
    for range in ranges {
        let Some((from, to, name)) = owner(range) else {
            continue;
        };
        let index = match names.iter().position(|n| *n == name) {
            Some(index) => index + 1,
            None if names.len() < NODES => {
                names.push(name);
                names.len()
            }
            None => 0,
        };
        let index = u8::try_from(index).unwrap_or(0);
        for slot in owners.get(from..=to.min(SLOTS - 1)).unwrap_or_default() {
            // Relaxed: see `Breakers::of`.
            slot.store(index, Ordering::Relaxed);
        }
    }
}

/// A `CLUSTER SLOTS` range: its first and last slot and its primary's
/// address.
fn owner(range: &Value) -> Option<(usize, usize, String)> {
    let Value::Array(fields) = range else {
        return None;
    };
    let int = |v: &Value| match v {
        Value::Int(n) => usize::try_from(*n).ok(),
        _ => None,
    };
    let (from, to) = (int(fields.first()?)?, int(fields.get(1)?)?);
    let Value::Array(primary) = fields.get(2)? else {
        return None;
    };
    let host = match primary.first()? {
        Value::BulkString(host) => String::from_utf8_lossy(host).into_owned(),
        Value::SimpleString(host) => host.clone(),
        _ => return None,
    };
    let port = int(primary.get(1)?)?;
    Some((from, to, format!("{host}:{port}")))
}

/// Redis Cluster's slot of `key`: CRC16 (XMODEM) of its hash tag (the
/// bytes between its first `{` and the first `}` after it, if any), else
/// of the whole key, modulo 16 384.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    let tag = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &byte in tag.unwrap_or(key) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc % SLOTS as u16
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_cluster_s() {
        // `CLUSTER KEYSLOT` of each, asked of a redis-server 7.0.
        for (key, slot) in [
            (&b"foo"[..], 12_182),
            (b"123456789", 12_739),
            (b"p:{foo}:tb", 12_182),
            (b"{}foo", 9_500),
            (b"a{}{foo}", 700),
            (b"a{b}{c}", 3_300),
            (b"x{y", 2_740),
        ] {
            assert_eq!(slot_of(key), slot, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn a_slot_map_names_each_primary_once_and_at_most_nodes_of_them() {
        let node =
            |host: String| Value::Array(vec![Value::BulkString(host.into_bytes()), Value::Int(1)]);
        let range = |from: i64, to: i64, host: String| {
            Value::Array(vec![Value::Int(from), Value::Int(to), node(host)])
        };
        let owners: Vec<AtomicU8> = (0..SLOTS).map(|_| AtomicU8::new(0)).collect();
        let owner_of = |slot: usize| owners[slot].load(Ordering::Relaxed);
        let mut names = Vec::new();
        // Two ranges of one primary share its number; a range past the
        // last slot ends at it.
        let reply = Value::Array(vec![
            range(0, 99, "a".into()),
            range(100, 199, "b".into()),
            range(200, 20_000, "a".into()),
            Value::Int(3),
        ]);
        place(&owners, &mut names, &reply);
        assert_eq!(names, ["a:1", "b:1"]);
        assert_eq!(
            [0, 99, 100, 199, 200, SLOTS - 1].map(owner_of),
            [1, 1, 2, 2, 1, 1]
        );
        // Up to `NODES` primaries, each its own; past them, a new one's
        // slots are not known, and the names kept stop growing.
        let many = Value::Array(
            (0..NODES + 5)
                .map(|i| {
                    let slot = i64::try_from(i).unwrap();
                    range(slot, slot, format!("n{i}"))
                })
                .collect(),
        );
        place(&owners, &mut names, &many);
        assert_eq!(names.len(), NODES);
        assert_eq!(owner_of(0), 3, "the first new primary after a and b");
        assert_eq!(owner_of(NODES - 3), 255);
        assert_eq!(owner_of(NODES - 2), 0);
        assert_eq!(owner_of(NODES + 4), 0);
        // A known primary keeps its number.
        place(
            &owners,
            &mut names,
            &Value::Array(vec![range(7, 7, "b".into())]),
        );
        assert_eq!(owner_of(7), 2);
    }

    #[test]
    fn a_cluster_s_breakers_and_slot_table_take_about_28_kib() {
        let bytes =
            SLOTS * core::mem::size_of::<AtomicU8>() + NODES * core::mem::size_of::<Breaker>();
        assert!(bytes <= 28 * 1024, "{bytes} bytes");
    }

    #[test]
    fn a_cluster_slots_reply_names_each_range_s_primary() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |from: i64, to: i64, primary: Value| {
            Value::Array(vec![Value::Int(from), Value::Int(to), primary])
        };
        let reply = Value::Array(vec![
            range(0, 5_460, node("127.0.0.1", 7000)),
            range(5_461, 10_922, node("127.0.0.1", 7001)),
            range(10_923, 16_383, node("127.0.0.1", 7000)),
        ]);
        assert_eq!(
            owner(&range(0, 5, node("h", 1))),
            Some((0, 5, "h:1".to_owned()))
        );
        // A host as a simple string (as some servers that speak Redis's
        // protocol send it) names the node alike; a host of any other
        // type names none.
        let simple = Value::Array(vec![Value::SimpleString("h".to_owned()), Value::Int(1)]);
        assert_eq!(owner(&range(0, 5, simple)), Some((0, 5, "h:1".to_owned())));
        let number = Value::Array(vec![Value::Int(7), Value::Int(1)]);
        assert_eq!(owner(&range(0, 5, number)), None);
        let Value::Array(ranges) = &reply else {
            unreachable!()
        };
        let names: Vec<_> = ranges.iter().filter_map(owner).map(|o| o.2).collect();
        assert_eq!(
            names,
            ["127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7000"]
        );
    }
}
