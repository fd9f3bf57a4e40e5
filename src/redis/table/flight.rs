//! Coalescing's table (see `check::coalesce`): the lanes with a call in
//! flight (one for a limiter on one server, one per client on a Cluster),
//! and the checks waiting for the next.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use super::request::Request;
use crate::check::CheckError;
use crate::decision::Decision;

/// The most checks one batch call carries; more wait for the next call.
pub(crate) const BATCH_MAX: usize = 256;

/// A check waiting for the next call of its lane.
pub(crate) struct Waiter {
    pub(crate) request: Arc<Request>,
    pub(crate) reply: oneshot::Sender<Result<Decision, CheckError>>,
}

/// The most calls of one lane in flight at once (one limiter, one
/// process): a check that finds fewer goes at once, alone; one that finds
/// this many waits for the next call to end, and goes in the batch that
/// takes that call's place. Two let one call carry the checks that came
/// while the other was in flight, so that the lane is never without a
/// call on its way.
pub(crate) const DEPTH: usize = 2;

/// A lane with calls in flight.
#[derive(Default)]
struct Lane {
    /// Its calls in flight, at most [`DEPTH`].
    calls: usize,
    /// The checks waiting for the next call, in the order they came.
    queue: Vec<Waiter>,
}

/// One shard of [`InFlight`]: each lane with a call in flight.
///
/// A mutex, on the Redis path only and only with coalescing on: it is held
/// to join a lane's queue or take it (a map lookup, a push or a take),
/// never across an `await`, a Redis call or user code, beside a round trip
/// that costs thousands of times more. No in-process check takes it.
type Shard = Mutex<HashMap<Vec<u8>, Lane>>;

/// The lanes with a call in flight, and the checks waiting for the next.
pub(crate) struct InFlight {
    shards: Box<[Shard]>,
    hasher: RandomState,
    /// Whether each client is a lane of its own (a Cluster's calls hold
    /// one slot's keys), rather than the limiter one lane.
    per_client: bool,
}

impl core::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("InFlight")
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

/// What a check does on joining.
pub(crate) enum Joined {
    /// Fewer than [`DEPTH`] calls of the lane were in flight: go, then
    /// `check::coalesce`'s `finish`.
    Lead,
    /// Wait for the answer.
    Wait(oneshot::Receiver<Result<Decision, CheckError>>),
}

impl InFlight {
    /// The table for a limiter whose calls may hold many clients' keys
    /// (`per_client` false: one server) or one client's (a Cluster).
    pub(crate) fn new(per_client: bool) -> Self {
        let shards = if per_client {
            std::thread::available_parallelism()
                .map_or(8, |n| n.get() * 4)
                .next_power_of_two()
        } else {
            1
        };
        Self {
            shards: (0..shards).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            per_client,
        }
    }

    /// The lane of a request: its client's key, or the limiter's one lane
    /// (no bytes).
    pub(crate) fn lane<'r>(&self, request: &'r Request) -> &'r [u8] {
        if self.per_client {
            &request.key
        } else {
            &[]
        }
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        let hash = self.hasher.hash_one(key);
        &self.shards[(hash as usize) & (self.shards.len() - 1)]
    }

    /// Leads a call of the request's lane if fewer than [`DEPTH`] are in
    /// flight and no check waits before this one; else joins the next.
    pub(crate) fn join(&self, request: &Arc<Request>) -> Joined {
        let lane = self.lane(request);
        let mut shard = self
            .shard(lane)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(lane) = shard.get_mut(lane) {
            if lane.calls < DEPTH && lane.queue.is_empty() {
                lane.calls += 1;
                return Joined::Lead;
            }
            let (reply, answer) = oneshot::channel();
            lane.queue.push(Waiter {
                request: Arc::clone(request),
                reply,
            });
            return Joined::Wait(answer);
        }
        shard.insert(
            lane.to_vec(),
            Lane {
                calls: 1,
                queue: Vec::new(),
            },
        );
        Joined::Lead
    }

    /// One of `lane`'s calls ended: the checks waiting for the next, the
    /// call's place passing to them; or none, and the call's place is
    /// given up (the lane's entry going with its last).
    pub(crate) fn next(&self, lane: &[u8]) -> Vec<Waiter> {
        let mut shard = self
            .shard(lane)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = shard.get_mut(lane) else {
            return Vec::new();
        };
        if !entry.queue.is_empty() {
            return core::mem::take(&mut entry.queue);
        }
        entry.calls = entry.calls.saturating_sub(1);
        if entry.calls == 0 {
            shard.remove(lane);
        }
        Vec::new()
    }
}
