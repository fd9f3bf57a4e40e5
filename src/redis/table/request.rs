//! A check as the limiter carries it from its start to its answer: the
//! client, its key, the quota its tier is judged by, the cost, and whether
//! it checks or peeks.

use crate::redis::quota::tier::Judged;
use crate::redis::script::spec::Spec;

/// What a round trip does: check (decide and record) or peek (decide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Check,
    Peek,
}

/// One request, as the limiter carries it from the check to the answer.
pub(crate) struct Request {
    pub(crate) judged: Judged,
    pub(crate) client: Vec<u8>,
    pub(crate) key: Vec<u8>,
    /// The cost asked.
    pub(crate) cost: u64,
    /// Whether the cost exceeds the client's tier's capacity (but not
    /// every tier's): denied, and judged at cost 0 for the figures.
    pub(crate) beyond: bool,
    pub(crate) mode: Mode,
    /// The deny shortcut's key for the client, under the generation read
    /// before the request was sent.
    pub(crate) cache_key: Option<u64>,
}

impl Request {
    /// The cost the scripts judge.
    pub(crate) fn judged_cost(&self) -> u64 {
        if self.beyond {
            0
        } else {
            self.cost
        }
    }

    pub(crate) fn spec(&self) -> Spec {
        self.judged.quota.spec
    }
}
