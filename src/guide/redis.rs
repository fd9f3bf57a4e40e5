//! Beyond one machine: limiters whose state lives in Redis.
//!
//! With the `redis` feature, every algorithm also runs in Redis, so that
//! all the replicas of a service share one budget per client. The builder
//! is the same; `.redis(connection, prefix)` moves the state. The
//! `tollgate::redis` module's documentation has the full API and a
//! runnable example.
//!
//! ```toml
//! tollgate = { version = "0.1", features = ["redis"] }
//! ```
//!
//! - **Setup.** Redis 7 or later (the scripts read `TIME`, which needs
//!   effect replication, Redis 7's default).
//! - **Semantics.** The same decisions as in-process for the same quota, on
//!   Redis's clock: one round trip per check (a Lua script by `EVALSHA`),
//!   windows aligned to the Unix epoch, time counted in whole microseconds.
//!   Every key expires when its state becomes idle, and keys carry the
//!   client as a Redis Cluster hash tag, so a cluster connection works too.
//! - **When Redis fails** (timeout, unreachable, an error, or a key
//!   holding something else): `FailOpen` admits, `FailClosed` returns the
//!   error (the tower layer answers 503), `Local` decides with an
//!   in-process limiter of the same quota. After a failure, checks skip
//!   Redis for a backoff that doubles with each failed probe, and only one
//!   probe at a time goes through, so an outage never becomes a retry
//!   storm; when Redis is back the limiter recovers by itself.
//! - **Deny shortcut.** A client that Redis left with nothing is denied in
//!   the process, with no round trip, until its quota next grows: a flood
//!   of denied requests costs Redis almost nothing.
//! - **One interface.** [`AsyncCheck`](crate::AsyncCheck) is the interface
//!   that in-process and Redis limiters share, and the tower layer takes
//!   either.
