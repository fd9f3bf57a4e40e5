//! How a Redis limiter reaches Redis: one server, or Redis Cluster.

use core::fmt;

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, Pipeline, RedisFuture, Value};

/// How a Redis limiter reaches Redis: one server (or a primary behind
/// Sentinel's address) through a [`ConnectionManager`], or Redis Cluster
/// through a [`ClusterConnection`]. [`Builder::redis`](crate::Builder::redis) takes either.
///
/// Every check touches one key, its client's, which carries the client as
/// its hash tag (`<prefix>:{<client>}:<tag>`), so each check's script runs
/// on the one node that holds the client's slot, and a cluster shares each
/// client's budget exactly as one server does.
///
/// # Examples
///
/// `no_run`: it needs a Redis Cluster on localhost.
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::TokenBucket;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let nodes = vec!["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"];
/// let cluster = redis::cluster::ClusterClient::new(nodes)?;
/// let conn = cluster.get_async_connection().await?;
/// let limiter = TokenBucket::builder()
///     .rate(100, Duration::from_secs(60))
///     .redis(conn, "api")
///     .build()?;
/// assert!(limiter.check("alice").await?.is_allowed());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub enum RedisConnection {
    /// One server: every check over one multiplexed connection.
    Single(ConnectionManager),
    /// Redis Cluster: each check to the node holding its client's slot.
    Cluster(ClusterConnection),
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Single(_) => "RedisConnection::Single",
            Self::Cluster(_) => "RedisConnection::Cluster",
        })
    }
}

impl From<ConnectionManager> for RedisConnection {
    fn from(conn: ConnectionManager) -> Self {
        Self::Single(conn)
    }
}

impl From<ClusterConnection> for RedisConnection {
    fn from(conn: ClusterConnection) -> Self {
        Self::Cluster(conn)
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
        }
    }
}
