//! The Redis limiters' tests that reach inside them, each against a real
//! `redis-server` of its own (`testing`), kept out of the production files.

mod batch_equal;
mod breaker;
mod cas_moved;
mod differ;
mod lease_exact;
mod linger;
mod lua_equal;
mod outage;
mod testing;
