//! The call layer: how a Redis limiter runs one script on one key.
//!
//! Every round trip a limiter makes goes through [`Calls::eval`]: the
//! script is sent by its hash (`EVALSHA`), and if Redis has lost it
//! (`NOSCRIPT`: a restart, a failover, `SCRIPT FLUSH`) sent whole by
//! `EVAL`, which loads it again. Each command sent counts one round trip
//! in [`RedisStats`](crate::redis::RedisStats). A call names exactly one key, so
//! that on Redis Cluster it goes to the node holding that key's slot.
//!
//! Scripts read Redis's clock (`TIME`) themselves. A limiter built on a
//! test clock (the crate's own tests only) instead passes the instant, in
//! µs, as each script's last argument; its local clock (the breaker's and
//! the deny shortcut's) is then the same clock, so that a test runs the
//! whole limiter on one manual clock.

use ::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use ::redis::{
    Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, Script as Hashed, ServerErrorKind,
    Value,
};

use super::connection::RedisConnection;
use super::guard::{bump, Counters};

/// A script: its source, and its hash for `EVALSHA`.
pub(crate) struct Script {
    hash: String,
    source: String,
}

impl Script {
    pub(crate) fn new(source: String) -> Self {
        Self {
            hash: Hashed::new(&source).get_hash().to_owned(),
            source,
        }
    }
}

impl core::fmt::Debug for Script {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("Script").field(&self.hash).finish()
    }
}

/// How far apart this host's clock and Redis's may run, as the divisor of
/// the time elapsed: 1/500, 2 000 ppm, twice what two hosts' clocks part by
/// when NTP slews them in opposite directions at its limit of 500 ppm.
pub(crate) const DRIFT: u64 = 500;

/// A reply's reading of Redis's clock, as one word: the low half, Redis's
/// clock less the local clock (ns, wrapping); the high half, the local
/// instant (ns) its call was sent. One word, so that an estimate never
/// pairs one reply's offset with another's instant.
pub(crate) fn sync_word(offset: u64, sent: u64) -> u128 {
    u128::from(sent) << 64 | u128::from(offset)
}

/// The word of a reply that read Redis's clock at `judged` (µs) for a
/// call sent at `sent` (ns on the local clock).
pub(crate) fn reading(sent: u64, judged: u64) -> u128 {
    sync_word(judged.saturating_mul(1_000).wrapping_sub(sent), sent)
}

/// The clock a limiter's scripts and its local bookkeeping read.
#[derive(Debug, Clone)]
pub(crate) enum Clock {
    /// Scripts read `TIME`; locally, a monotonic clock from when the
    /// limiter was built.
    Redis(std::time::Instant),
    /// One manual clock for both: its reading (µs) is each script's last
    /// argument. Locally it runs slow by the given parts per million, as a
    /// host's clock may against Redis's.
    #[cfg(all(test, not(feature = "loom")))]
    Test(crate::clock::ManualClock, u64),
}

impl Clock {
    pub(crate) fn new() -> Self {
        Self::Redis(std::time::Instant::now())
    }

    /// Nanoseconds on the local clock: since the limiter was built, or the
    /// test clock's reading.
    pub(crate) fn local_ns(&self) -> u64 {
        match self {
            Self::Redis(origin) => {
                u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX / 4)
            }
            #[cfg(all(test, not(feature = "loom")))]
            Self::Test(clock, slow_ppm) => {
                let ns = crate::clock::Clock::now_nanos(clock);
                let behind = u128::from(ns) * u128::from(*slow_ppm) / 1_000_000;
                ns - u64::try_from(behind).unwrap_or(ns)
            }
        }
    }

    /// How far Redis's clock may have run ahead of the local one over
    /// `elapsed` local ns: [`DRIFT`] of it for two hosts' clocks; nothing
    /// for the test clock, which both sides read, unless it is set to run
    /// slow locally.
    pub(crate) fn drift(&self, elapsed: u64) -> u64 {
        match self {
            Self::Redis(_) => elapsed / DRIFT,
            #[cfg(all(test, not(feature = "loom")))]
            Self::Test(_, 0) => 0,
            #[cfg(all(test, not(feature = "loom")))]
            Self::Test(..) => elapsed / DRIFT,
        }
    }

    /// The clock of the server whose reply gave `word` (see [`sync_word`])
    /// now, in ns, as estimated: no earlier than that server's own. The
    /// reply read its clock at `judged`, after its call was sent at `sent`
    /// on the local clock, so its clock at local instant `t` is at most
    /// `judged + (t − sent)` while both clocks run at one rate; and since
    /// they may part by up to [`DRIFT`], the estimate adds that share of
    /// the time since `sent`. An estimate holds only for the server that
    /// replied: another's clock (another node of a cluster) may be ahead.
    pub(crate) fn estimate(&self, word: u128) -> u64 {
        let (offset, sent) = (word as u64, (word >> 64) as u64);
        let local = self.local_ns();
        local
            .wrapping_add(offset)
            .wrapping_add(self.drift(local.saturating_sub(sent)))
    }

    /// The instant (µs) a script is told to judge at, if it is told one.
    fn script_now(&self) -> Option<u64> {
        match self {
            Self::Redis(_) => None,
            #[cfg(all(test, not(feature = "loom")))]
            Self::Test(clock, _) => Some(crate::clock::Clock::now_nanos(clock) / 1_000),
        }
    }

    /// Whether the scripts read `TIME` (else the test clock's argument).
    pub(crate) fn reads_redis(&self) -> bool {
        matches!(self, Self::Redis(_))
    }
}

/// What a limiter needs to make calls: the connection, the clock, and the
/// counters each command sent is counted in.
pub(crate) struct Calls {
    pub(crate) conn: RedisConnection,
    pub(crate) clock: Clock,
    pub(crate) counters: Counters,
}

impl Calls {
    /// Runs `script` on `key` with the arguments `args` appends (and the
    /// test clock's instant after them): `EVALSHA`, then `EVAL` if Redis
    /// lost the script.
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        script: &Script,
        key: &[u8],
        args: impl Fn(&mut Cmd),
    ) -> RedisResult<T> {
        self.eval_keys(script, &[key], args).await
    }

    /// [`eval`](Self::eval) on several keys (of one slot).
    ///
    /// On Redis Cluster, a slot being moved (a reshard) answers with a
    /// redirection rather than a reply: `MOVED` (the slot has a new
    /// owner), `ASK` (this key has moved already: ask the target node, once,
    /// after `ASKING`), `TRYAGAIN` (the keys are split between the two
    /// nodes for now). None of them ran the script, so the call follows
    /// it (see [`Redirect`]), up to [`REDIRECTS`] times, whether or not
    /// the connection follows redirections itself; only then is the
    /// redirection the call's error. `TRYAGAIN` (only a call on several
    /// keys meets it) is asked again [`TRY_AGAIN`] times: a key that does
    /// not exist yet stays split from the others until the whole slot has
    /// moved, and a caller that can decides such a call key by key instead.
    pub(crate) async fn eval_keys<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&[u8]],
        args: impl Fn(&mut Cmd),
    ) -> RedisResult<T> {
        let mut to = To::Slot;
        let (mut redirects, mut tries) = (0, 0);
        loop {
            let err = match self.eval_to(script, keys, &args, &to).await {
                Err(err) if redirects < REDIRECTS => err,
                reply => return reply,
            };
            let redirect = match Redirect::of(&err) {
                Some(Redirect::TryAgain) if tries >= TRY_AGAIN => return Err(err),
                Some(redirect) => redirect,
                None => return Err(err),
            };
            redirects += 1;
            match redirect {
                Redirect::Moved(node) => to = To::Node(node),
                Redirect::Ask(node) => to = To::Asking(node),
                Redirect::TryAgain => {
                    // The other keys may be a MIGRATE away: wait 1, 2, 4
                    // ms, asking the same node again.
                    tries += 1;
                    let wait = 1 << (tries - 1);
                    tokio::time::sleep(core::time::Duration::from_millis(wait)).await;
                }
                Redirect::Moving => {
                    to = To::Slot;
                    tokio::time::sleep(core::time::Duration::from_millis(1)).await;
                }
            }
        }
    }

    /// One try of [`eval_keys`](Self::eval_keys), sent `to` a node:
    /// `EVALSHA`, then `EVAL` if that node lacks the script.
    async fn eval_to<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&[u8]],
        args: &impl Fn(&mut Cmd),
        to: &To,
    ) -> RedisResult<T> {
        let bytes: usize = keys.iter().map(|k| k.len()).sum();
        let command = |name: &str, body: &str| {
            // Room for a check's arguments at once: no regrowth per call.
            let mut cmd = Cmd::with_capacity(12, 160 + bytes + body.len());
            cmd.arg(name).arg(body).arg(keys.len());
            for key in keys {
                cmd.arg(*key);
            }
            args(&mut cmd);
            if let Some(now) = self.clock.script_now() {
                cmd.arg(now);
            }
            cmd
        };
        bump(&self.counters.round_trips);
        match self.send(command("EVALSHA", &script.hash), to).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                bump(&self.counters.round_trips);
                bump(&self.counters.script_reloads);
                self.send(command("EVAL", &script.source), to).await
            }
            reply => reply,
        }
    }

    /// Sends `cmd` `to` a node: by its key's slot, or (on Redis Cluster)
    /// to the node a redirection named.
    async fn send<T: FromRedisValue>(&self, cmd: Cmd, to: &To) -> RedisResult<T> {
        let mut conn = self.conn.clone();
        let (RedisConnection::Cluster(cluster), To::Node(node) | To::Asking(node)) =
            (&mut conn, to)
        else {
            return cmd.query_async(&mut conn).await;
        };
        let route = SingleNodeRoutingInfo::ByAddress {
            host: node.0.clone(),
            port: node.1,
        };
        let value = if let To::Asking(_) = to {
            let mut pipe = ::redis::pipe();
            pipe.cmd("ASKING").ignore().add_command(cmd);
            let mut replies = cluster.route_pipeline(pipe, 1, 1, route).await?;
            replies.pop().unwrap_or(Value::Nil)
        } else {
            cluster
                .route_command(cmd, RoutingInfo::SingleNode(route))
                .await?
        };
        Ok(::redis::from_redis_value(value.extract_error()?)?)
    }

    /// Deletes `key` (a reset or a removal): whether it held a state.
    pub(crate) async fn delete(&self, key: &[u8]) -> RedisResult<bool> {
        let mut conn = self.conn.clone();
        bump(&self.counters.round_trips);
        let deleted: u64 = Cmd::new()
            .arg("DEL")
            .arg(key)
            .query_async(&mut conn)
            .await?;
        Ok(deleted > 0)
    }
}

/// How many redirections one call follows before the last is its error: a
/// slot's move takes a few round trips to settle, and the call's timeout
/// bounds them all anyway.
pub(crate) const REDIRECTS: u32 = 16;

/// How many times a call on several keys asks again after `TRYAGAIN`.
pub(crate) const TRY_AGAIN: u32 = 3;

/// A node of Redis Cluster: its host and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node(String, u16);

/// Where a call goes.
enum To {
    /// To the node the connection routes the key's slot to.
    Slot,
    /// To the node a `MOVED` named.
    Node(Node),
    /// To the node an `ASK` named, after `ASKING`.
    Asking(Node),
}

/// A reply that says the slot is moving, not what the script did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// `MOVED`: the slot has a new owner.
    Moved(Node),
    /// `ASK`: the key has moved to this node while its slot moves.
    Ask(Node),
    /// `TRYAGAIN`: a call's keys are split between two nodes for now.
    TryAgain,
    /// A script found a key gone from the node it ran on while the slot
    /// moves ("a non local key"). The scripts never touch a key after a
    /// command that could remove it, except to trim entries that no
    /// longer count (see `script::lua`): such a failure came before any
    /// write that matters, and a second run decides as the first would
    /// have.
    Moving,
}

impl Redirect {
    /// The redirection `err` is, if it is one.
    pub(crate) fn of(err: &RedisError) -> Option<Self> {
        let node = || {
            let (address, _slot) = err.redirect_node()?;
            let (host, port) = address.rsplit_once(':')?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            Some(Node(host.to_owned(), port.parse().ok()?))
        };
        match err.kind() {
            ErrorKind::Server(ServerErrorKind::Moved) => node().map(Self::Moved),
            ErrorKind::Server(ServerErrorKind::Ask) => node().map(Self::Ask),
            ErrorKind::Server(ServerErrorKind::TryAgain) => Some(Self::TryAgain),
            ErrorKind::Server(ServerErrorKind::ResponseError)
                if err
                    .detail()
                    .is_some_and(|d| d.contains("attempted to access a non local key")) =>
            {
                Some(Self::Moving)
            }
            _ => None,
        }
    }
}
