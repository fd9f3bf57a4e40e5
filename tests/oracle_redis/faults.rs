//! The oracle's operations whose answers the Redis guide states one by
//! one, beyond the bound: a check and its fallback (`told.rs`), the wait
//! a deny shortcut's denial tells (never shorter than Redis's), the
//! breaker (it opens when no node answers, and never on a slow reply), and
//! a value of another type under one client's key in a batch (only that
//! client fails).

use std::time::{Duration, SystemTime};

use tollgate::redis::{FailPolicy, RedisStats};
use tollgate::{CheckError, Decision};

use super::redis_server::PATIENCE;
use super::told::{came, Came};
use super::{client, Case, Family, Op, CLIENTS};

/// Every check the fail policy answered.
fn failed(s: &RedisStats) -> u64 {
    s.fail_open + s.fail_closed + s.fail_local
}

/// Whether a check was answered without a call (a lease, the shortcut).
fn without_a_call(before: &RedisStats, after: &RedisStats) -> bool {
    after.leased > before.leased
        || after.lease_held > before.lease_held
        || after.denied_locally > before.denied_locally
}

/// Whether the replica's breaker is open now.
fn open(s: &RedisStats) -> bool {
    s.breaker_opened > s.breaker_closed
}

impl<F: Family> Case<F> {
    /// One check of `cost` units of client `c` on replica `r`: counted
    /// if admitted, and its fallback bounded by what Redis last told `r`.
    pub(super) async fn checked(&mut self, r: usize, c: usize, cost: u64) -> Result<(), String> {
        let (sent, before) = (SystemTime::now(), self.replicas[r].stats());
        // An error (`FailClosed`) admits nothing.
        let d = self.replicas[r].check_n(&client(c), cost).await;
        let answered = SystemTime::now();
        let allowed = d.as_ref().is_ok_and(Decision::is_allowed);
        if allowed {
            self.admit(c, cost);
        }
        let after = self.replicas[r].stats();
        let quiet = std::mem::take(&mut self.quiet[r][c]);
        if after.denied_locally > before.denied_locally {
            if let (true, Ok(d)) = (quiet, &d) {
                self.told_wait(r, c, cost, answered, d.retry_after())
                    .await?;
            }
            return Ok(());
        }
        match (came(&before, &after), d) {
            (Came::Redis, Ok(d)) => {
                self.quiet[r][c] = true;
                self.heard(r, c, d.remaining(), sent);
            }
            (Came::Local, Ok(_)) if allowed => {
                self.spent_locally(r, c, cost)?;
                self.low_spent(r, c, cost, sent);
            }
            (Came::Local, Ok(_)) => self.refused_locally(r, c, cost, sent)?,
            // The deny shortcut's denials touch no fallback; an error
            // (a cost no tier takes) spends nothing.
            _ => {}
        }
        Ok(())
    }

    /// Before operation `op`: which replicas' latest answers from Redis
    /// are the client's state still, but for time and their own checks.
    pub(super) fn unquiet(&mut self, op: &Op) {
        self.peeked = false;
        let (on, clients) = match *op {
            Op::Check { r, c, .. } | Op::Run { r, c, .. } => (r, vec![c]),
            Op::Alternate { r, c, with, .. } => (r, vec![c, with]),
            _ => {
                self.quiet.iter_mut().for_each(|q| *q = [false; CLIENTS]);
                return;
            }
        };
        for (r, quiet) in self.quiet.iter_mut().enumerate() {
            for &c in &clients {
                quiet[c] &= r == on;
            }
        }
    }

    /// The deny shortcut of replica `r` denied client `c` a request of
    /// `cost`, answered at `answered`, telling it to wait `told`, while
    /// only `r`'s own checks of `c` ran since Redis last answered `r`
    /// about `c` (the state the shortcut keeps): Redis, asked at once by
    /// `r`, may admit the request no earlier than the shortcut said, or a
    /// client that honoured the wait would be refused again. (A slot moved
    /// to a node whose clock differs carries the state to within 3 ms.)
    async fn told_wait(
        &mut self,
        r: usize,
        c: usize,
        cost: u64,
        answered: SystemTime,
        told: Duration,
    ) -> Result<(), String> {
        self.peeked = true;
        let asked = SystemTime::now();
        let Ok(redis) = self.replicas[r].peek_n(&client(c), cost).await else {
            return Ok(());
        };
        // Each wait is rounded up to a microsecond.
        let slack = Duration::from_micros(2)
            + if self.cluster.is_some() {
                Duration::from_millis(3)
            } else {
                Duration::ZERO
            };
        if redis.is_denied() && answered + told + slack < asked + redis.retry_after() {
            return Err(format!(
                "replica {r}: its deny shortcut told client {c} to wait {told:?}; Redis, asked \
                 {:?} later, {:?}: a client that honoured the shortcut is refused again\n{}",
                asked.duration_since(answered).unwrap_or_default(),
                redis.retry_after(),
                self.log.join("\n")
            ));
        }
        Ok(())
    }

    /// `n` tasks at once on replica `r`, the i-th checking client `i %
    /// CLIENTS`, or each client `one` (one batch on a coalescing
    /// replica): each answer, counted.
    pub(super) async fn together(
        &mut self,
        r: usize,
        n: usize,
        one: Option<usize>,
    ) -> Vec<(usize, Result<Decision, CheckError>)> {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let limiter = self.replicas[r].clone();
                tokio::spawn(async move {
                    let c = one.unwrap_or(i % CLIENTS);
                    (c, limiter.check(&client(c)).await)
                })
            })
            .collect();
        let mut answers = Vec::new();
        for handle in handles {
            let (c, d) = handle.await.unwrap();
            self.admit(c, u64::from(d.as_ref().is_ok_and(Decision::is_allowed)));
            answers.push((c, d));
        }
        answers
    }

    /// The server stopped: no node answers. Each replica's check is
    /// answered by its fail policy, and leaves its breaker open; then the
    /// server runs again, empty.
    pub(super) async fn down(&mut self) -> Result<(), String> {
        let Some(server) = self.server.clone() else {
            return Ok(());
        };
        self.started();
        server.lock().unwrap().stop();
        self.states_lost(true);
        let mut result = Ok(());
        for r in 0..self.replicas.len() {
            let before = self.replicas[r].stats();
            let d = self.replicas[r].check(&client(0)).await;
            let after = self.replicas[r].stats();
            let allowed = d.as_ref().is_ok_and(Decision::is_allowed);
            if allowed {
                self.admit(0, 1);
                if came(&before, &after) == Came::Local {
                    result = result.and(self.spent_locally(r, 0, 1));
                }
            }
            if without_a_call(&before, &after) {
                continue;
            }
            if failed(&after) != failed(&before) + 1 || !open(&after) {
                result = result.and(Err(format!(
                    "replica {r}: with no node answering, a check answered {d:?}: by the fail \
                     policy {} times, and the breaker {} (stats {before:?} then {after:?})\n{}",
                    failed(&after) - failed(&before),
                    if open(&after) { "open" } else { "closed" },
                    self.log.join("\n")
                )));
            }
        }
        server.lock().unwrap().run();
        result
    }

    /// A hash under client `c`'s key, then `n` tasks at once on replica
    /// `r`: every other client is answered by Redis, client `c` by the
    /// fail policy alone (never admitted by `FailOpen`), and nothing opens
    /// the breaker; then the key deleted, and the client starts afresh.
    pub(super) async fn foreign(&mut self, r: usize, c: usize, n: usize) -> Result<(), String> {
        let key = self.replicas[r].key(&client(c));
        // The client's state deleted (a reset, as far as the bound goes,
        // with the units leased out then spendable on top, as when Redis
        // loses a state), a hash in its place.
        let set: Result<((), ()), _> = redis::pipe()
            .atomic()
            .cmd("DEL")
            .arg(&key)
            .cmd("HSET")
            .arg(&key)
            .arg("field")
            .arg(7)
            .query_async(&mut self.conn)
            .await;
        self.leased_out();
        self.restart(c);
        let before = self.replicas[r].stats();
        let answers = self.together(r, n, None).await;
        let after = self.replicas[r].stats();
        let _: Result<(), _> = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut self.conn)
            .await;
        self.leased_out();
        self.restart(c);
        let policy = self.setups[r].policy;
        if policy == FailPolicy::Local && set.is_ok() {
            // Client c's checks decided in process: by what Redis last
            // told the replica.
            let local = answers
                .iter()
                .filter(|(k, d)| *k == c && d.as_ref().is_ok_and(Decision::is_allowed))
                .count() as u64;
            self.spent_locally(r, c, local)?;
        }
        // Only where Redis answered all else: no outage, no breaker open
        // before, no timeout (a slow machine's), the hash written.
        let calm = set.is_ok()
            && !open(&before)
            && after.timeouts == before.timeouts
            && after.probes == before.probes;
        if !calm {
            return Ok(());
        }
        let mine = answers.iter().filter(|(k, _)| *k == c).count() as u64;
        let others_failed = answers
            .iter()
            .any(|(k, d)| *k != c && d.is_err() && policy != FailPolicy::Local);
        // A foreign value is never admitted by `FailOpen`.
        let admitted_open = after.fail_open > before.fail_open;
        if others_failed
            || admitted_open
            || failed(&after) - failed(&before) > mine
            || after.breaker_opened > before.breaker_opened
        {
            return Err(format!(
                "a hash under client {c}'s key, {n} checks at once on replica {r} ({policy:?}): \
                 {} answered by the fail policy where client {c} had {mine}, breaker opened {} \
                 times; answers {answers:?}\n{}",
                failed(&after) - failed(&before),
                after.breaker_opened - before.breaker_opened,
                self.log.join("\n")
            ));
        }
        Ok(())
    }

    /// With a patient timeout, a slow reply is never a failure: no
    /// timeout, no breaker opened, but in an operation where a call failed
    /// (the server stopped).
    pub(super) fn check_breakers(&self, op: &Op, before: &[RedisStats]) -> Result<(), String> {
        if self.timeout < PATIENCE || matches!(op, Op::Down | Op::Restart { .. }) {
            return Ok(());
        }
        for (r, (limiter, before)) in self.replicas.iter().zip(before).enumerate() {
            let now = limiter.stats();
            let opened = now.breaker_opened > before.breaker_opened && now.errors == before.errors;
            if now.timeouts > before.timeouts || opened {
                return Err(format!(
                    "replica {r}, whose timeout is patient: a slow reply counted as a failure \
                     (stats {before:?} then {now:?})\n{}",
                    self.log.join("\n")
                ));
            }
        }
        Ok(())
    }
}
