//! What a client is held to: how each algorithm runs in Redis, its
//! script's settings and its in-process fallback (`algorithm`, `pair`),
//! the tiers' quotas and the history of their changes (`tier`), and the
//! in-process limiter of `FailPolicy::Local` (`fallback`). Uses `script`
//! for the settings and the stored states it converts.

pub(crate) mod algorithm;
pub(crate) mod fallback;
mod pair;
pub(crate) mod tier;
