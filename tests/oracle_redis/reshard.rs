//! Live resharding on the cluster whose nodes' clocks run apart: a
//! client's slot moved to another node by `MIGRATE`, a key at a time,
//! while the operations go on (their checks meet `ASK` and `MOVED`).
//!
//! What the bound allows for each move: a token bucket's state is carried
//! onto the new node's clock to within 3 ms (the Redis guide), so
//! `⌈3 ms / T⌉` units; and the instants a leasing process keeps are of the
//! old node's clock (not carried), so one lease's units of each leasing
//! replica, a lease granted before the move and settled after it.
//!
//! Each move starts once every node agrees on who holds the slot, and
//! ends once every node agrees it moved, each within [`AGREED_WITHIN`],
//! or the test fails saying so (never a hang on a cluster whose nodes
//! disagree, whose redirections would send a check round for ever).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::redis_server::{move_slot, slot_of, Cluster};
use super::{client, Case, Family};

/// How far apart the new node's reading of the writer's clock may be, by
/// the guide: the key's expiry tells it to within 3 ms.
const CARRIED_WITHIN: Duration = Duration::from_millis(3);

/// How long the nodes may take to agree on a slot's owner.
const AGREED_WITHIN: Duration = Duration::from_secs(10);

/// Set once the nodes failed to agree: every later move fails at once, so
/// that shrinking a case on a cluster left so ends quickly.
static DISAGREED: AtomicBool = AtomicBool::new(false);

impl<F: Family> Case<F> {
    /// Client `c`'s slot moved to node `to` (the next node if it is there
    /// already), while the operations after this one go on.
    pub(super) fn reshard(&mut self, c: usize, to: usize) {
        let Some(cluster) = self.cluster.clone() else {
            return;
        };
        // One move at a time.
        self.moves_done();
        let slot = slot_of(client(c).as_bytes());
        let nodes = cluster.nodes.len();
        let from = agreed(&cluster, slot, None);
        let to = if to % nodes == from {
            (to + 1) % nodes
        } else {
            to % nodes
        };
        let carried = CARRIED_WITHIN.as_nanos().div_ceil(self.interval.as_nanos());
        let leased: u64 = if F::LEASES {
            self.setups
                .iter()
                .zip(&self.caps)
                .filter_map(|(s, caps)| s.lease.map(|units| units.min(caps[0])))
                .sum()
        } else {
            0
        };
        self.moved[c] += u64::try_from(carried).unwrap() + leased;
        self.log.push(format!(
            "  slot {slot} from node {from} to {to}: {carried} carried, {leased} leased allowed"
        ));
        self.moving = Some(std::thread::spawn(move || {
            epochs_agreed(&cluster);
            move_slot(&cluster, slot, from, to, Duration::from_millis(2));
            settled(&cluster, slot, to);
        }));
    }

    /// Waits for a slot's move under way to end.
    pub(super) fn moves_done(&mut self) {
        if let Some(moving) = self.moving.take() {
            if let Err(panic) = moving.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

/// Makes `to`'s claim on `slot` stick, and waits until every node says
/// `to` holds it: `to` takes a config epoch above every other node's
/// (`CLUSTER BUMPEPOCH`), and a node that says otherwise is told again
/// (`CLUSTER SETSLOT … NODE`), as `redis-cli --cluster fix` does. Without
/// the bump, a node that took the slot may hear the old owner's claim,
/// sent before the old owner let it go under a higher epoch, and give the
/// slot back; the two would then send each other its commands for ever.
fn settled(cluster: &Cluster, slot: u16, to: usize) {
    let mut owner = cluster.nodes[to].sync();
    let id: String = redis::cmd("CLUSTER").arg("MYID").query(&mut owner).unwrap();
    let started = Instant::now();
    while started.elapsed() < AGREED_WITHIN {
        let _: redis::RedisResult<String> =
            redis::cmd("CLUSTER").arg("BUMPEPOCH").query(&mut owner);
        let mut all = true;
        for node in &cluster.nodes {
            let mut conn = node.sync();
            if owner_seen(cluster, &mut conn, slot) != Some(to) {
                all = false;
                let _: redis::RedisResult<()> = redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&id)
                    .query(&mut conn);
            }
        }
        if all {
            epochs_agreed(cluster);
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    disagreed(format!(
        "the cluster's nodes do not agree that node {to} holds slot {slot} after {AGREED_WITHIN:?}"
    ));
}

/// Waits until every node of `cluster` knows every node's config epoch
/// alike. A move's target takes an epoch above every one it knows when it
/// takes the slot; were another node's higher epoch still on its way to
/// it, the old owner's claim on the slot, sent before it let the slot go,
/// would win over the target's on arrival, and the two nodes would each
/// name the other as the slot's owner.
fn epochs_agreed(cluster: &Cluster) {
    let started = Instant::now();
    loop {
        let views: Vec<Option<Vec<(String, String)>>> = cluster
            .nodes
            .iter()
            .map(|node| {
                let table: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut node.sync())
                    .ok()?;
                let mut epochs: Vec<(String, String)> = table
                    .lines()
                    .filter_map(|line| {
                        let fields: Vec<&str> = line.split_whitespace().collect();
                        (fields.len() > 6).then(|| (fields[0].to_owned(), fields[6].to_owned()))
                    })
                    .collect();
                epochs.sort();
                Some(epochs)
            })
            .collect();
        if views.iter().all(|v| v.is_some() && *v == views[0]) {
            return;
        }
        if started.elapsed() >= AGREED_WITHIN {
            disagreed(format!(
                "the cluster's nodes do not agree on each other's config epochs after \
                 {AGREED_WITHIN:?}: {views:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Fails the test, and every later move of this run at once (so that
/// shrinking a case on a cluster left so ends quickly).
fn disagreed(why: String) -> ! {
    // Relaxed: a flag of this test's, no data behind it.
    DISAGREED.store(true, Ordering::Relaxed);
    panic!("{why}");
}

/// The node every node of `cluster` says holds `slot`, with no move of it
/// under way, once they agree (on `to`, if given); panics if they do not
/// within [`AGREED_WITHIN`]. Nodes that still disagree after
/// [`REPAIR_AFTER`], with no move under way, are told the owner, as
/// `redis-cli --cluster fix` does: the node that holds the slot's keys,
/// else the one most nodes name. (A node was once seen to name a slot's
/// old owner again after every node had agreed on the new one, the old
/// owner naming the new: each sent the slot's commands to the other.)
fn agreed(cluster: &Cluster, slot: u16, to: Option<usize>) -> usize {
    let started = Instant::now();
    loop {
        if let Some(owner) = agreed_within(cluster, slot, to, REPAIR_AFTER) {
            return owner;
        }
        if started.elapsed() >= AGREED_WITHIN {
            disagreed(format!(
                "the cluster's nodes do not agree on slot {slot}'s owner (wanted {to:?}) after \
                 {AGREED_WITHIN:?}, told it"
            ));
        }
        let owner = to.unwrap_or_else(|| rightful(cluster, slot));
        eprintln!("slot {slot}: the nodes disagree on its owner; telling them node {owner}");
        settled(cluster, slot, owner);
    }
}

/// How long nodes may disagree on a slot's owner before they are told it.
const REPAIR_AFTER: Duration = Duration::from_secs(1);

/// The node that should hold `slot`: the one that holds keys of it (the
/// first, if several do), else the one most nodes name.
fn rightful(cluster: &Cluster, slot: u16) -> usize {
    let keys: Vec<u64> = cluster
        .nodes
        .iter()
        .map(|node| {
            redis::cmd("CLUSTER")
                .arg("COUNTKEYSINSLOT")
                .arg(slot)
                .query(&mut node.sync())
                .unwrap_or(0)
        })
        .collect();
    if let Some(holder) = keys.iter().position(|&n| n > 0) {
        return holder;
    }
    let mut named = vec![0usize; cluster.nodes.len()];
    for node in &cluster.nodes {
        if let Some(owner) = owner_seen(cluster, &mut node.sync(), slot) {
            named[owner] += 1;
        }
    }
    (0..named.len()).max_by_key(|&n| named[n]).unwrap_or(0)
}

/// As [`agreed`], waiting at most `patience`: `None` if they do not agree
/// by then.
fn agreed_within(
    cluster: &Cluster,
    slot: u16,
    to: Option<usize>,
    patience: Duration,
) -> Option<usize> {
    // Relaxed: a flag of this test's, no data behind it.
    assert!(
        !DISAGREED.load(Ordering::Relaxed),
        "the cluster's nodes disagreed on a slot's owner earlier in this run"
    );
    let started = Instant::now();
    loop {
        let views: Vec<Option<usize>> = cluster
            .nodes
            .iter()
            .map(|node| owner_seen(cluster, &mut node.sync(), slot))
            .collect();
        if let Some(Some(owner)) = views.first().copied() {
            if views.iter().all(|v| *v == Some(owner)) && to.is_none_or(|to| to == owner) {
                return Some(owner);
            }
        }
        if started.elapsed() >= patience {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The node that `view`'s `CLUSTER NODES` says holds `slot`, if one does
/// and no move of the slot is under way there.
fn owner_seen(cluster: &Cluster, view: &mut redis::Connection, slot: u16) -> Option<usize> {
    let table: String = redis::cmd("CLUSTER").arg("NODES").query(view).ok()?;
    let mut owner = None;
    for line in table.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            continue;
        }
        for range in &fields[8..] {
            if let Some(moving) = range.strip_prefix('[') {
                // `[slot->-id]` or `[slot-<-id]`: a move under way.
                if moving.split('-').next() == Some(&slot.to_string()) {
                    return None;
                }
                continue;
            }
            let mut ends = range.split('-').map(str::parse::<u16>);
            let holds = match (ends.next(), ends.next()) {
                (Some(Ok(a)), None) => a == slot,
                (Some(Ok(a)), Some(Ok(b))) => (a..=b).contains(&slot),
                _ => false,
            };
            if holds && fields[2].contains("master") {
                let port: u16 = fields[1]
                    .split(['@', ','])
                    .next()
                    .and_then(|a| a.rsplit(':').next())
                    .and_then(|p| p.parse().ok())?;
                owner = cluster.nodes.iter().position(|n| n.port == port);
            }
        }
    }
    owner
}
