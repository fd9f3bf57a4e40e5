//! The control surface of a Redis limiter: peeking at a client's budget,
//! and resetting or removing a client's state, for every process that
//! shares the Redis.

use core::future::Future;
use std::sync::Arc;

use crate::check::{CheckError, CheckErrorKind};
use crate::redis::check::decide::{classify, RedisCheck};
use crate::redis::quota::algorithm::RedisAlgorithm;
use crate::redis::script::key::{client_bytes, RedisKey};
use crate::redis::shared::limiter::{Inner, RedisLimiter};
use crate::redis::table::{lease::leases_key, request::Mode};
use crate::redis::wire::{call::Script, guard::bump};
use crate::sync::Ordering;

impl<A: RedisAlgorithm> RedisLimiter<A> {
    /// Whether [`check`](Self::check) would admit now (and if not, when it
    /// would), recording nothing, with the client's quota as it stands:
    /// [`remaining`](crate::Decision::remaining) is what is left now, not what a
    /// check would leave (one round trip; the deny shortcut is not
    /// consulted). A client Redis holds nothing for peeks as fresh, and
    /// stays absent.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check)'s: under
    /// [`FailPolicy::FailClosed`](crate::redis::FailPolicy::FailClosed) only, when
    /// Redis fails.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::FixedWindow;
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindow::builder()
    ///     .limit(1)
    ///     .window(Duration::from_secs(60))
    ///     .redis(conn, "peek")
    ///     .build()?;
    /// assert!(limiter.peek("alice").await?.is_allowed());
    /// assert!(limiter.peek("alice").await?.is_allowed());
    /// assert!(limiter.check("alice").await?.is_allowed());
    /// assert!(limiter.peek("alice").await?.is_denied());
    /// # Ok(())
    /// # }
    /// ```
    pub fn peek<K: RedisKey + ?Sized>(&self, key: &K) -> RedisCheck {
        self.decide(key, 1, Mode::Peek)
    }

    /// Whether [`check_n`](Self::check_n) would admit now, recording
    /// nothing, with the quota as it stands (as [`peek`](Self::peek)).
    ///
    /// # Errors
    ///
    /// As [`check_n`](Self::check_n)'s.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = TokenBucket::builder().rate(5, Duration::from_secs(1)).redis(conn, "p").build()?;
    /// let peeked = limiter.peek_n("alice", 5).await?;
    /// assert!(peeked.is_allowed());
    /// assert_eq!(peeked.remaining(), 5, "a peek takes nothing");
    /// assert_eq!(limiter.check_n("alice", 2).await?.remaining(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn peek_n<K: RedisKey + ?Sized>(&self, key: &K, cost: u64) -> RedisCheck {
        self.decide(key, cost, Mode::Peek)
    }

    /// Puts `key` back to a fresh state for every process sharing the
    /// Redis, as if it had never made a request: its key is deleted. The
    /// answer is whether Redis held a state for it (a state is held while
    /// it carries information: see the module's docs on expiry). Once the
    /// reset has returned, this process's deny shortcut holds nothing made
    /// before it (a check in flight during the reset included); other
    /// processes' shortcuts may deny the client for at most one second
    /// more. The in-process limiter of
    /// [`FailPolicy::Local`](crate::redis::FailPolicy::Local) forgets it too.
    ///
    /// A check racing with the reset is decided wholly before it (and
    /// forgotten with the rest) or wholly after, on the fresh state: Redis
    /// runs each script and each `DEL` alone.
    ///
    /// A token bucket's reset keeps the units other processes hold on
    /// lease ([`RedisBuilder::lease`](crate::redis::RedisBuilder::lease)), whether
    /// or not this limiter leases: the bucket restarts full from the end
    /// of the latest lease outstanding (at once if none is), so that no
    /// unit a lease holds is granted twice.
    ///
    /// # Errors
    ///
    /// A [`CheckError`] ([`Timeout`](CheckErrorKind::Timeout),
    /// [`Unavailable`](CheckErrorKind::Unavailable) or
    /// [`Other`](CheckErrorKind::Other)) when Redis did not delete the key,
    /// whatever the fail policy: a reset that did not happen is never
    /// reported as done.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = TokenBucket::builder().rate(1, Duration::from_secs(60)).redis(conn, "r").build()?;
    /// assert!(limiter.check("alice").await?.is_allowed());
    /// assert!(limiter.check("alice").await?.is_denied());
    /// assert!(limiter.reset("alice").await?);
    /// assert!(limiter.check("alice").await?.is_allowed());
    /// assert!(!limiter.reset("bob").await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn reset<K: RedisKey + ?Sized>(
        &self,
        key: &K,
    ) -> impl Future<Output = Result<bool, CheckError>> + Send + 'static {
        let inner = Arc::clone(&self.inner);
        let client = client_bytes(key);
        let key = inner.layout.key(&client);
        async move {
            let reply = match &inner.scripts.reset {
                None => tokio::time::timeout(inner.timeout, inner.calls.delete(&key)).await,
                Some(script) => {
                    tokio::time::timeout(inner.timeout, inner.bucket_reset(script, &key, &client))
                        .await
                }
            };
            if let Some(local) = &inner.fallback {
                local.remove(&client);
            }
            // After Redis's reset, as the shortcut's renewal: a hold learnt
            // from a reading before it is not installed.
            if let Some(leases) = &inner.leases {
                leases.reset(&client);
            }
            // After the delete (or its failure, which may still have
            // deleted): every entry made from a reading before it is
            // forgotten, a check in flight included.
            if let Some(cache) = &inner.shortcut {
                cache.renew();
            }
            match reply {
                Ok(Ok(deleted)) => Ok(deleted),
                Ok(Err(err)) => {
                    bump(&inner.calls.counters.errors);
                    Err(CheckError::with_kind(classify(&err), err))
                }
                Err(_elapsed) => {
                    bump(&inner.calls.counters.timeouts);
                    Err(CheckError::with_kind(
                        CheckErrorKind::Timeout,
                        format!("Redis did not answer within {:?}", inner.timeout),
                    ))
                }
            }
        }
    }

    /// Forgets `key`'s state for every process sharing the Redis. In Redis
    /// a state is one key, so removing it is [`reset`](Self::reset): both
    /// delete the key and free its memory, and the client's next request
    /// starts afresh.
    ///
    /// # Errors
    ///
    /// As [`reset`](Self::reset)'s.
    ///
    /// # Examples
    ///
    /// `no_run`: it needs a Redis server on localhost.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::FixedWindow;
    ///
    /// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindow::builder()
    ///     .limit(1)
    ///     .window(Duration::from_secs(60))
    ///     .redis(conn, "gone")
    ///     .build()?;
    /// assert!(limiter.check("alice").await?.is_allowed());
    /// assert!(limiter.remove("alice").await?);
    /// assert!(!limiter.remove("alice").await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn remove<K: RedisKey + ?Sized>(
        &self,
        key: &K,
    ) -> impl Future<Output = Result<bool, CheckError>> + Send + 'static {
        self.reset(key)
    }
}

impl<A: RedisAlgorithm> Inner<A> {
    /// A lone token bucket's reset of `client` in Redis, by `script` (see
    /// `lua::lease_reset_script`): whether its key held a state. Every
    /// bucket limiter resets this way, leasing or not, so that the slots
    /// another replica leased stay its own whoever resets.
    async fn bucket_reset(
        &self,
        script: &Script,
        key: &[u8],
        client: &[u8],
    ) -> ::redis::RedisResult<bool> {
        let judged = self.tiers.judge(client);
        let head = judged.head();
        // Relaxed: a number unique to this call, nothing more.
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let set = leases_key(key);
        let (existed, _now): (u64, u64) = self
            .calls
            .eval_keys(script, &[key, &set], |cmd| {
                cmd.arg(&*head).arg(serial);
            })
            .await?;
        Ok(existed > 0)
    }
}
