//! A check's way through a Redis limiter: the deny shortcut, the breaker,
//! one round trip (and for a state written under other settings, the slow
//! path that converts it), the figures, and the fail policy's answer when
//! Redis fails.

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;

use ::redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::algorithm::{join, Transitions};
use crate::cell::{describe, Applied};
use crate::check::{CheckError, CheckErrorKind};
use crate::decision::Decision;
use crate::redis::quota::{algorithm::RedisAlgorithm, tier::Judged};
use crate::redis::script::spec::{Ns, Spec};
use crate::redis::script::state::{
    decision, decode_fast, expiry_ms, fresh_decision, log_decision, peek_decision, round_figures,
    round_up_to_us, value_of, DecodeError, Fast, Stored,
};
#[cfg(doc)]
use crate::redis::shared::limiter::RedisLimiter;
use crate::redis::shared::limiter::{failure, FailPolicy, Inner};
#[cfg(feature = "metrics")]
use crate::redis::table::answers::{Outcome, Path};
use crate::redis::table::lease::leases_key;
use crate::redis::table::request::{Mode, Request};
use crate::redis::table::shortcut::Entry;
use crate::redis::wire::call::Redirect;
use crate::redis::wire::guard::{bump, Breaker, Gate};
use crate::sync::Ordering;

/// How many times a check tries again when the client's state changes
/// between the slow path's read and its write.
pub(super) const ATTEMPTS: usize = 8;

/// Why a round trip gave no decision.
#[derive(Debug)]
pub(crate) enum Failure {
    Redis(RedisError),
    Decode(DecodeError),
    /// The client's state changed between every read and write.
    Contended,
}

impl From<RedisError> for Failure {
    fn from(err: RedisError) -> Self {
        Self::Redis(err)
    }
}

impl From<DecodeError> for Failure {
    fn from(err: DecodeError) -> Self {
        Self::Decode(err)
    }
}

/// What a compare-and-set did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cas {
    Written,
    /// The fields no longer held what was expected.
    Changed,
    /// The instant it had to come before had passed.
    TooLate,
}

/// What a check learned of the client's state, for the deny shortcut.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seen {
    /// A word algorithm's state, judged at `now` (µs).
    Word { word: u128, now: u64 },
    /// A log's units left, until `free_at` (ns), judged at `now` (µs).
    Log { left: u64, free_at: u64, now: u64 },
}

/// A decision and what it saw.
pub(crate) struct Answer {
    pub(crate) decision: Decision,
    pub(crate) seen: Seen,
}

impl<A: RedisAlgorithm> Inner<A> {
    /// One request's call to Redis, under the breaker (`probe_due`: the
    /// gate found it due to probe) and the timeout, answered by Redis or
    /// the fail policy.
    pub(crate) async fn single(
        &self,
        request: &Request,
        probe_due: bool,
    ) -> Result<Decision, CheckError> {
        let deadline = self.deadline();
        self.single_until(request, probe_due, deadline).await
    }

    /// [`single`](Self::single), answered by `deadline`: for a check that
    /// spent part of its timeout before its call.
    pub(crate) async fn single_until(
        &self,
        request: &Request,
        probe_due: bool,
        deadline: tokio::time::Instant,
    ) -> Result<Decision, CheckError> {
        match self
            .uncounted_call_until(request, probe_due, deadline)
            .await
        {
            Ok(decision) => {
                if request.mode == Mode::Check {
                    self.count_redis(request, &decision);
                }
                Ok(decision)
            }
            Err(err) => self.fallback(request, err),
        }
    }

    /// Redis's decision on one request, or the failure not yet answered by
    /// the fail policy, uncounted: for a caller that counts the decision
    /// once it is delivered.
    pub(super) async fn uncounted_call(
        &self,
        request: &Request,
        probe_due: bool,
    ) -> Result<Decision, CheckError> {
        let deadline = self.deadline();
        self.uncounted_call_until(request, probe_due, deadline)
            .await
    }

    /// [`uncounted_call`](Self::uncounted_call), answered by `deadline`.
    async fn uncounted_call_until(
        &self,
        request: &Request,
        probe_due: bool,
        deadline: tokio::time::Instant,
    ) -> Result<Decision, CheckError> {
        let (answer, sent) = self
            .guarded_until(deadline, probe_due, &request.key, self.round_trip(request))
            .await?;
        let now = match answer.seen {
            Seen::Word { now, .. } | Seen::Log { now, .. } => now,
        };
        self.judged(sent, now);
        if request.mode == Mode::Check {
            self.remember(request, sent, &answer);
        }
        Ok(answer.decision)
    }
}

impl<A> Inner<A> {
    /// Whether a request on `key` may go to Redis now (`Ok`, and whether
    /// it is due to probe), or the breaker of the node holding `key` holds
    /// it back.
    pub(crate) fn gate(&self, now: u64, key: &[u8]) -> Result<bool, CheckError> {
        match self.breakers.of(key, now).gate(now) {
            Gate::Pass => Ok(false),
            Gate::Probe => Ok(true),
            Gate::Down(wait) => Err(CheckError::with_kind(
                CheckErrorKind::Unavailable,
                format!("Redis failed recently; the next probe goes in {wait:?}"),
            )),
        }
    }

    /// The instant a call made now must be answered by: the timeout from
    /// now.
    pub(crate) fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.timeout
    }

    /// Runs a request's round trips (`work`, on the client's `key`) under
    /// the breaker and the timeout: the result and the instant (local ns)
    /// they began, or the error, counted, with the breaker told whether
    /// Redis answered.
    pub(super) async fn guarded<T>(
        &self,
        probe_due: bool,
        key: &[u8],
        work: impl Future<Output = Result<T, Failure>>,
    ) -> Result<(T, u64), CheckError> {
        let deadline = self.deadline();
        self.guarded_until(deadline, probe_due, key, work).await
    }

    /// [`guarded`](Self::guarded), the round trips cut off at `deadline`
    /// rather than a timeout from now: for a check that spent part of its
    /// timeout before its call (waiting for another's), so that no check
    /// answers later than its timeout.
    pub(crate) async fn guarded_until<T>(
        &self,
        deadline: tokio::time::Instant,
        probe_due: bool,
        key: &[u8],
        work: impl Future<Output = Result<T, Failure>>,
    ) -> Result<(T, u64), CheckError> {
        // The probe flag is taken here, at the first poll, and the guard
        // that gives it back exists from that instant: a future dropped
        // before its first poll never took it.
        // The breaker of the node holding the key: on Redis Cluster, each
        // node is judged on its own replies.
        let breaker = self.breakers.of(key, self.calls.clock.local_ns());
        let probe = probe_due && breaker.take_probe();
        if probe_due && !probe {
            return Err(CheckError::with_kind(
                CheckErrorKind::Unavailable,
                "Redis failed recently; another check is probing it",
            ));
        }
        let counters = &self.calls.counters;
        if probe {
            bump(&counters.probes);
        }
        let mut abandon = ProbeGuard(probe.then_some(breaker));
        let sent = self.calls.clock.local_ns();
        let reply = tokio::time::timeout_at(deadline, work).await;
        abandon.0 = None;
        Err(match reply {
            Ok(Ok(value)) => {
                self.redis_up(breaker, probe);
                return Ok((value, sent));
            }
            Ok(Err(Failure::Decode(err))) => {
                self.redis_up(breaker, probe);
                bump(&counters.errors);
                failure(CheckErrorKind::Corrupt, key, err)
            }
            Ok(Err(Failure::Contended)) => {
                self.redis_up(breaker, probe);
                bump(&counters.errors);
                failure(
                    CheckErrorKind::Other,
                    key,
                    "the client's state changed under every attempt to convert it",
                )
            }
            Ok(Err(Failure::Redis(err))) => {
                bump(&counters.errors);
                let kind = classify(&err);
                if kind == CheckErrorKind::Unavailable {
                    self.redis_down(breaker, probe);
                    CheckError::with_kind(kind, err)
                } else {
                    // About this request or this client's key only:
                    // Redis answered, so it is up.
                    self.redis_up(breaker, probe);
                    failure(kind, key, err)
                }
            }
            Err(_elapsed) => {
                bump(&counters.timeouts);
                if breaker.answered_since(sent) {
                    // Slow, not unreachable: the node answered another
                    // call while this one waited, so the breaker stays as
                    // it is, and only this check is answered by the fail
                    // policy. The map may be stale (a slot moved): read it
                    // again soon, as `redis_down` has it read otherwise.
                    self.breakers.moved(self.calls.clock.local_ns());
                    if probe {
                        breaker.abandoned();
                    }
                } else {
                    self.redis_down(breaker, probe);
                }
                CheckError::with_kind(
                    CheckErrorKind::Timeout,
                    format!("Redis did not answer within {:?}", self.timeout),
                )
            }
        })
    }
}

impl<A> Inner<A> {
    /// Holds the `Local` fallback's state of `request`'s client to its
    /// share of the `left` units Redis says the client has left, so that
    /// an outage starts the client there.
    pub(crate) fn hold_local(&self, request: &Request, left: u64) {
        if let Some(local) = &self.fallback {
            local.hold_to(
                &request.client,
                request.judged.tier,
                left / u64::from(self.local_share),
            );
        }
    }

    /// Redis (the node `breaker` judges) answered: tells the breaker, and
    /// counts (and reports, with the `tracing` feature) its closing if it
    /// was open.
    fn redis_up(&self, breaker: &Breaker, probe: bool) {
        let now = self.calls.clock.local_ns();
        if breaker.succeeded(probe, now) {
            self.breakers.moved(now);
            bump(&self.calls.counters.breaker_closed);
            #[cfg(feature = "tracing")]
            self.breaker_closed();
        }
    }

    /// Redis (the node `breaker` judges) failed to answer: tells the
    /// breaker, and counts (and reports, with the `tracing` feature) its
    /// opening if it was closed.
    fn redis_down(&self, breaker: &Breaker, probe: bool) {
        let now = self.calls.clock.local_ns();
        // A node that fails to answer may be one a slot moved from, whose
        // breaker the map still gives that slot's clients (their replies,
        // redirected to the new node, would hold it closed): the map is
        // read again soon after any failure, not only after the breaker
        // turns.
        self.breakers.moved(now);
        if breaker.failed(probe, now) {
            bump(&self.calls.counters.breaker_opened);
            #[cfg(feature = "tracing")]
            self.breaker_opened();
        }
    }
}

impl<A: RedisAlgorithm> Inner<A> {
    /// The deny shortcut's answer: a denial made here, if the state Redis
    /// last returned for the client denies the request (see `shortcut`).
    pub(crate) fn local_denial(&self, request: &Request, now: u64) -> Option<Decision> {
        let cache = self.shortcut.as_ref()?;
        let entry = cache.lookup(request.cache_key?, now)?;
        // Decided at the latest instant Redis's clock may read now, and
        // told from the earliest (see `shortcut`), each widened by how far
        // the two clocks may have parted since.
        let clock = &self.calls.clock;
        let at = entry
            .judge_at(now)
            .saturating_add(clock.drift(now.saturating_sub(entry.sent)));
        let tell = entry
            .tell_at(now)
            .saturating_sub(clock.drift(now.saturating_sub(entry.received)));
        let spec = request.spec();
        let cost = request.cost;
        match (spec, spec.ns()) {
            (_, Some(ns)) => {
                let word = match spec {
                    Spec::Two(..) => join(entry.a, entry.b),
                    _ => u128::from(entry.a),
                };
                if cost == 0 || ns.admit(word, at, cost).is_some() {
                    return None;
                }
                let mut d = describe(&ns, Applied::Denied(word), tell, cost)?;
                round_figures(&mut d);
                Some(d)
            }
            (Spec::Log { window_us, limit }, None) => {
                // Exact for a cost one above what is left: it waits for the
                // quota's next growth, the instant the entry keeps.
                let (left, free_at) = (entry.a, entry.b);
                if cost != left + 1 || at >= free_at {
                    return None;
                }
                let wait = round_up_to_us(Duration::from_nanos(free_at - tell));
                Some(Decision::new(
                    false,
                    limit,
                    left,
                    wait,
                    wait,
                    Duration::from_micros(window_us),
                ))
            }
            _ => None,
        }
    }

    /// Counts a check's decision by Redis, on its own call or in a batch
    /// (the `metrics` feature).
    pub(super) fn count_redis(&self, request: &Request, decision: &Decision) {
        #[cfg(feature = "metrics")]
        self.answered(
            Path::Redis,
            if decision.allowed {
                Outcome::Admitted
            } else {
                Outcome::Denied
            },
            request.cost,
        );
        #[cfg(not(feature = "metrics"))]
        let _ = (request, decision);
    }

    /// Keeps what Redis's answer tells this process of the client: the
    /// `Local` fallback holds it to its share of the units left (so that a
    /// later outage starts it from there, not from a full quota); and the
    /// deny shortcut keeps a state that leaves little (at most 255 units,
    /// fewer than the capacity), judged at Redis's reading, and forgets
    /// the client for any other.
    pub(super) fn remember(&self, request: &Request, sent: u64, answer: &Answer) {
        self.hold_local(request, answer.decision.remaining);
        let (Some(cache), Some(key)) = (&self.shortcut, request.cache_key) else {
            return;
        };
        let d = &answer.decision;
        if d.remaining > 0xFF || d.remaining >= request.spec().capacity() {
            cache.forget(key);
            return;
        }
        // Read here, after the answer came back.
        let received = self.calls.clock.local_ns();
        let entry = match answer.seen {
            Seen::Word { word, now } => Entry {
                sent,
                received,
                judged: now * 1_000,
                a: word as u64,
                b: (word >> 64) as u64,
            },
            Seen::Log { left, free_at, now } => Entry {
                sent,
                received,
                judged: now * 1_000,
                a: left,
                b: free_at,
            },
        };
        cache.store(key, entry);
    }

    /// One request's round trip(s).
    async fn round_trip(&self, request: &Request) -> Result<Answer, Failure> {
        let mut answer = match request.spec() {
            Spec::Log { window_us, limit } => self.log_trip(request, window_us, limit).await?,
            spec => self.word_trip(request, spec).await?,
        };
        if request.beyond {
            answer.decision.allowed = false;
            answer.decision.retry_after = crate::algorithm::NEVER;
        }
        Ok(answer)
    }

    /// The sliding window log's check or peek.
    async fn log_trip(
        &self,
        request: &Request,
        window_us: u64,
        limit: u64,
    ) -> Result<Answer, Failure> {
        let cost = request.judged_cost();
        let token = self.token();
        let reply: Vec<i64> = self
            .calls
            .eval(self.scripts.decide(request.mode), &request.key, |cmd| {
                cmd.arg(window_us).arg(limit).arg(cost).arg(&token);
            })
            .await?;
        let decision = log_decision(&reply, window_us, limit)?;
        let now = u64::try_from(reply[4]).unwrap_or(0);
        let replenish = decision.replenish_after;
        Ok(Answer {
            seen: Seen::Log {
                left: decision.remaining,
                free_at: (now * 1_000).saturating_add(replenish),
                now,
            },
            decision,
        })
    }

    /// A word algorithm's check or peek: the fast path, and the slow path
    /// for a state to convert.
    async fn word_trip(&self, request: &Request, spec: Spec) -> Result<Answer, Failure> {
        let ns = spec.ns().expect("a word algorithm");
        let script = self.scripts.decide(request.mode);
        let cost = request.judged_cost();
        let head = request.judged.head();
        for _ in 0..ATTEMPTS {
            // Relaxed: a number unique to this call, nothing more.
            let serial = self.serial.fetch_add(1, Ordering::Relaxed);
            let reply: Vec<i64> = self
                .calls
                .eval(script, &request.key, |cmd| {
                    for (half, _) in spec.halves() {
                        cmd.arg(half.a).arg(half.b);
                    }
                    cmd.arg(&*head).arg(serial);
                    // A cost of 1 goes unsaid (see `word_script`).
                    if cost != 1 {
                        cmd.arg(cost);
                    }
                })
                .await?;
            match decode_fast(&spec, &reply)? {
                Fast::Decided { allowed, word, now } => {
                    let decision = match request.mode {
                        Mode::Check => decision(&ns, allowed, word, now, cost),
                        // The peek script answers with the state as it
                        // stands.
                        Mode::Peek => peek_decision(&ns, word, now, cost),
                    };
                    return Ok(Answer {
                        decision,
                        seen: Seen::Word { word, now },
                    });
                }
                Fast::Convert => {
                    // Boxed: the slow path's state stays out of every check's future.
                    if let Some(answer) = Box::pin(self.convert(request, spec, ns, serial)).await? {
                        return Ok(answer);
                    }
                }
            }
        }
        Err(Failure::Contended)
    }

    /// The slow path: reads the client's state, carries it over to the
    /// request's quota (see `tier`), decides on it, and (for a check)
    /// writes it back if it has not changed since: `None` if it has.
    async fn convert(
        &self,
        request: &Request,
        spec: Spec,
        ns: Ns,
        serial: u64,
    ) -> Result<Option<Answer>, Failure> {
        let stored = self.read(&request.key).await?;
        let settled = self.tiers.settle(&request.judged, &stored, &self.owner)?;
        let word = settled.map_or_else(|| ns.fresh_at(0), |s| s.word);
        let now = stored.now;
        let cost = request.judged_cost();
        let admitted = if cost == 0 {
            None
        } else {
            ns.admit(word, now * 1_000, cost)
        };
        let allowed = cost == 0 || admitted.is_some();
        let after = admitted.unwrap_or(word);
        if request.mode == Mode::Peek {
            return Ok(Some(Answer {
                decision: peek_decision(&ns, word, now, cost),
                seen: Seen::Word { word, now },
            }));
        }
        let answer = Answer {
            decision: decision(&ns, allowed, after, now, cost),
            seen: Seen::Word { word: after, now },
        };
        let own = settled.is_some_and(|s| s.own);
        if admitted.is_none() && !own {
            return Ok(Some(answer));
        }
        let (new, linger) = self.stamped(&request.judged, &stored, &spec, after, serial);
        let written = self
            .cas(
                &request.key,
                (&stored.value, Some(stored.expiry)),
                &new,
                None,
                expiry_ms(&ns, after, linger),
            )
            .await?;
        Ok((written == Cas::Written).then_some(answer))
    }

    /// The slow path's read of a word algorithm's key, and for a token
    /// bucket the end of the latest lease of the client outstanding, which
    /// any limiter's conversion must keep (see `Tiers::settle`).
    pub(super) async fn read(&self, key: &[u8]) -> Result<Stored, Failure> {
        type Reply = (u64, i64, i64, Option<String>);
        // Any bucket's, as its reset (see `Scripts::reset`).
        let reply: Reply = if self.scripts.reset.is_some() {
            let set = leases_key(key);
            match self
                .calls
                .eval_keys(&self.scripts.read, &[key, &set], |_| {})
                .await
            {
                // The slot moving, the key and its leases' set split
                // between two nodes: the key alone, its leases not known.
                Err(err) if Redirect::of(&err).is_some() => {
                    self.calls.eval(&self.scripts.read, key, |_| {}).await?
                }
                reply => reply?,
            }
        } else {
            self.calls.eval(&self.scripts.read, key, |_| {}).await?
        };
        let (now, expiry, leased, value) = reply;
        Ok(Stored {
            now,
            expiry,
            leased: u64::try_from(leased).ok(),
            value,
        })
    }

    /// The value of `word` under `judged`'s quota, written over `stored`
    /// by this limiter's call `serial`, and how long (ms) its key lingers
    /// past its idle instant (see `Judged::head_over`).
    pub(super) fn stamped(
        &self,
        judged: &Judged,
        stored: &Stored,
        spec: &Spec,
        word: u128,
        serial: u64,
    ) -> (String, u64) {
        let (head, linger) = judged.head_over(stored);
        (value_of(&head, serial, spec, word), linger)
    }

    /// Writes `new` under `key` (`""` deletes the key) iff it still holds
    /// `expected` (`None`: no key) and, given the expiry it was read with
    /// (ms, as `PEXPIRETIME` answered), still that expiry (a key of a slot
    /// moved meanwhile to a node whose clock differs holds the same value
    /// under another: see `lua::cas_script`); and, given `before` (µs),
    /// only before that instant; the key then expires at `expiry` (ms).
    pub(super) async fn cas(
        &self,
        key: &[u8],
        (expected, read_expiry): (&Option<String>, Option<i64>),
        new: &str,
        before: Option<u64>,
        expiry: u64,
    ) -> Result<Cas, Failure> {
        // A state idle at every instant is no state: the key goes.
        let new = if expiry == 0 { "" } else { new };
        let (code, _now): (u64, u64) = self
            .calls
            .eval(&self.scripts.cas, key, |cmd| {
                cmd.arg(expected.as_deref().unwrap_or(""))
                    .arg(before.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX)))
                    .arg(new)
                    .arg(expiry)
                    .arg(read_expiry.map_or_else(String::new, |e| e.to_string()));
            })
            .await?;
        Ok(match code {
            1 => Cas::Written,
            2 => Cas::TooLate,
            _ => Cas::Changed,
        })
    }

    /// The fail policy's answer to a request that Redis could not decide.
    pub(crate) fn fallback(
        &self,
        request: &Request,
        err: CheckError,
    ) -> Result<Decision, CheckError> {
        #[cfg(feature = "metrics")]
        let down = matches!(
            err.kind(),
            CheckErrorKind::Timeout | CheckErrorKind::Unavailable
        );
        let answer = self.policy_answer(request, err);
        #[cfg(feature = "metrics")]
        if request.mode == Mode::Check {
            let path = match self.policy {
                FailPolicy::Local => Path::Local,
                FailPolicy::FailOpen if down => Path::FailOpen,
                _ if down => Path::FailClosed,
                _ => Path::KeyRefused,
            };
            let outcome = match &answer {
                Ok(d) if d.allowed => Outcome::Admitted,
                Ok(_) => Outcome::Denied,
                Err(_) => Outcome::Refused,
            };
            self.answered(path, outcome, request.cost);
        }
        answer
    }

    /// A check that reached its timeout waiting for another task's call:
    /// counted as a timeout and answered by the fail policy.
    pub(crate) fn timed_out(&self, request: &Request) -> Result<Decision, CheckError> {
        bump(&self.calls.counters.timeouts);
        self.fallback(
            request,
            CheckError::with_kind(
                CheckErrorKind::Timeout,
                format!("Redis did not answer within {:?}", self.timeout),
            ),
        )
    }

    /// [`fallback`](Self::fallback), uncounted.
    fn policy_answer(&self, request: &Request, err: CheckError) -> Result<Decision, CheckError> {
        let counters = &self.calls.counters;
        match self.policy {
            FailPolicy::FailOpen
                if matches!(
                    err.kind(),
                    CheckErrorKind::Timeout | CheckErrorKind::Unavailable
                ) =>
            {
                bump(&counters.fail_open);
                let mut d = fresh_decision(&request.spec());
                if request.beyond {
                    d.allowed = false;
                    d.retry_after = crate::algorithm::NEVER;
                }
                Ok(d)
            }
            FailPolicy::FailOpen | FailPolicy::FailClosed => {
                bump(&counters.fail_closed);
                Err(err)
            }
            FailPolicy::Local => {
                bump(&counters.fail_local);
                let local = self.fallback.as_ref().ok_or(err)?;
                local
                    .decide(
                        &request.client,
                        request.judged.tier,
                        request.cost,
                        request.mode == Mode::Peek,
                    )
                    .map_err(|err| CheckError::with_kind(CheckErrorKind::Cost, err))
            }
        }
    }
}

/// The kind of a failed round trip. Only a failure to reach Redis
/// ([`CheckErrorKind::Unavailable`]: the connection, a server loading,
/// failing over or out of its cluster) makes the limiter back off. An
/// error about one client's key (a value of the wrong type, or one the
/// scripts refuse) is [`CheckErrorKind::Corrupt`]; any other error reply
/// (about this request, such as a script error, or keys in different
/// slots, or a slot's move that redirected the call more times than it
/// follows: `MOVED`, `ASK`, `TRYAGAIN`) is [`CheckErrorKind::Other`], and
/// a reply not understood [`CheckErrorKind::Protocol`]: Redis answered, so
/// it is up.
pub(crate) fn classify(err: &RedisError) -> CheckErrorKind {
    if let Some("TOLLGATE" | "WRONGTYPE") = err.code() {
        return CheckErrorKind::Corrupt;
    }
    if err.is_io_error()
        || err.is_connection_refusal()
        || err.is_connection_dropped()
        || err.is_timeout()
    {
        return CheckErrorKind::Unavailable;
    }
    match err.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => CheckErrorKind::Protocol,
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly,
        )
        | ErrorKind::Io
        | ErrorKind::AuthenticationFailed
        | ErrorKind::ClusterConnectionNotFound
        | ErrorKind::Client
        | ErrorKind::InvalidClientConfig => CheckErrorKind::Unavailable,
        _ => CheckErrorKind::Other,
    }
}

/// Lets another probe go if this one's future is dropped unfinished.
struct ProbeGuard<'a>(Option<&'a Breaker>);

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if let Some(breaker) = self.0 {
            breaker.abandoned();
        }
    }
}

type Waiting = Pin<Box<dyn Future<Output = Result<Decision, CheckError>> + Send>>;

pub(crate) enum State {
    /// Decided without Redis (the shortcut, a cost error, the fail policy
    /// while Redis is down); taken by the first poll.
    Ready(Option<Result<Decision, CheckError>>),
    /// A round trip.
    Waiting(Waiting),
}

/// The future of a [`RedisLimiter`] check: ready at once when decided
/// without Redis, otherwise when Redis answers or the timeout passes.
///
/// # Examples
///
/// See [`RedisLimiter`].
#[must_use = "a check does nothing unless awaited"]
pub struct RedisCheck(pub(crate) State);

impl RedisCheck {
    pub(crate) fn ready(result: Result<Decision, CheckError>) -> Self {
        Self(State::Ready(Some(result)))
    }
}

impl fmt::Debug for RedisCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.0 {
            State::Ready(_) => "ready",
            State::Waiting(_) => "waiting for Redis",
        };
        f.debug_tuple("RedisCheck").field(&state).finish()
    }
}

impl Future for RedisCheck {
    type Output = Result<Decision, CheckError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            State::Ready(result) => Poll::Ready(result.take().unwrap_or_else(|| {
                Err(CheckError::new(
                    "a rate-limit check was polled after it completed",
                ))
            })),
            State::Waiting(future) => future.as_mut().poll(cx),
        }
    }
}
