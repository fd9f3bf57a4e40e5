//! Coalescing's table (see `check::coalesce`): the clients with a call in
//! flight, and the checks waiting for the next.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use super::request::Request;
use crate::check::CheckError;
use crate::decision::Decision;

/// The most checks one batch call carries; more wait for the next call.
pub(crate) const BATCH_MAX: usize = 256;

/// A check waiting for the next call of its client.
pub(crate) struct Waiter {
    pub(crate) request: Arc<Request>,
    pub(crate) reply: oneshot::Sender<Result<Decision, CheckError>>,
}

/// The most calls of one client in flight at once (one limiter, one
/// process): a check that finds fewer goes at once, alone; one that finds
/// this many waits for the next call to end, and goes in the batch that
/// takes that call's place. Two let one call carry the checks that came
/// while the other was in flight, so that the client is never without a
/// call on its way.
pub(crate) const DEPTH: usize = 2;

/// A client with calls in flight.
#[derive(Default)]
struct Client {
    /// Its calls in flight, at most [`DEPTH`].
    calls: usize,
    /// The checks waiting for the next call, in the order they came.
    queue: Vec<Waiter>,
}

/// One shard of [`InFlight`]: each client's key with a call in flight.
///
/// A mutex, on the Redis path only and only with coalescing on: it is held
/// to join a client's queue or take it (a map lookup, a push or a take),
/// never across an `await`, a Redis call or user code, beside a round trip
/// that costs thousands of times more. No in-process check takes it.
type Shard = Mutex<HashMap<Vec<u8>, Client>>;

/// The clients with a call in flight, and the checks waiting for the next.
pub(crate) struct InFlight {
    shards: Box<[Shard]>,
    hasher: RandomState,
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
    /// Fewer than [`DEPTH`] calls of the client were in flight: go, then
    /// `check::coalesce`'s `finish`.
    Lead,
    /// Wait for the answer.
    Wait(oneshot::Receiver<Result<Decision, CheckError>>),
}

impl InFlight {
    pub(crate) fn new() -> Self {
        let shards = std::thread::available_parallelism()
            .map_or(8, |n| n.get() * 4)
            .next_power_of_two();
        Self {
            shards: (0..shards).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        let hash = self.hasher.hash_one(key);
        &self.shards[(hash as usize) & (self.shards.len() - 1)]
    }

    /// Leads a call of the client if fewer than [`DEPTH`] are in flight
    /// and no check waits before this one; else joins the next.
    pub(crate) fn join(&self, request: &Arc<Request>) -> Joined {
        let mut shard = self
            .shard(&request.key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = shard.get_mut(&request.key) {
            if client.calls < DEPTH && client.queue.is_empty() {
                client.calls += 1;
                return Joined::Lead;
            }
            let (reply, answer) = oneshot::channel();
            client.queue.push(Waiter {
                request: Arc::clone(request),
                reply,
            });
            return Joined::Wait(answer);
        }
        shard.insert(
            request.key.clone(),
            Client {
                calls: 1,
                queue: Vec::new(),
            },
        );
        Joined::Lead
    }

    /// One of `key`'s calls ended: the checks waiting for the next, the
    /// call's place passing to them; or none, and the call's place is
    /// given up (the client's entry going with its last).
    pub(crate) fn next(&self, key: &[u8]) -> Vec<Waiter> {
        let mut shard = self
            .shard(key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(client) = shard.get_mut(key) else {
            return Vec::new();
        };
        if !client.queue.is_empty() {
            return core::mem::take(&mut client.queue);
        }
        client.calls = client.calls.saturating_sub(1);
        if client.calls == 0 {
            shard.remove(key);
        }
        Vec::new()
    }
}
