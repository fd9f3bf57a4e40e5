//! What a limiter keeps in this process between calls, each a table that
//! makes no call: the request a check carries (`request`), the deny
//! shortcut's states (`shortcut`), the checks waiting for their client's
//! call (`flight`, for coalescing), the leases' units (`lease`) and the
//! answers counted for the `metrics` feature (`answers`). Uses `quota`
//! (what a request is judged by), `wire` and `script`.

#[cfg(feature = "metrics")]
pub(crate) mod answers;
pub(crate) mod flight;
pub(crate) mod lease;
pub(crate) mod request;
pub(crate) mod shortcut;
