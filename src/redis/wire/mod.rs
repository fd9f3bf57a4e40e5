//! One call to Redis: the connection (`connection`), a script run on one
//! key by `EVALSHA` and loaded again if Redis lost it, on the limiter's
//! clock (`call`), and the breaker that backs off while Redis is down,
//! with the counters every call bumps (`guard`), one per node of a
//! cluster (`nodes`). Knows nothing of what the
//! scripts decide, and uses no other floor.

pub(crate) mod call;
pub(crate) mod connection;
pub(crate) mod guard;
pub(crate) mod nodes;
