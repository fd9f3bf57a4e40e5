//! Coalescing: while a call of a limiter is in flight, the further checks
//! of this process on that limiter wait, and the next call carries all of
//! them, of every client (on a Cluster, only those of one client: a call
//! holds one slot's keys).
//!
//! A table of the lanes with a call in flight (one lane for the limiter on
//! one server; one per client on a Cluster), sharded, each shard a mutex
//! over a map from the lane to its calls in flight and the checks waiting
//! for the next call, is the only shared state. A check that finds fewer
//! than [`DEPTH`] calls of its lane in flight and none waiting goes to
//! Redis as it would without coalescing (one check, its own script): a
//! lone check adds no wait. Any other waits. When a call ends, the checks
//! that waited are handed, in the order they came, to a task spawned on
//! the current tokio runtime, which decides them in one call of the batch
//! script ([`crate::redis::script::lua::batch_script`]) in the ended call's place,
//! answers each, and carries on with the checks that came during that
//! call, until none did and the place is given up (the entry going with
//! the lane's last call).
//!
//! Each check in a batch gets the decision its own check would have had
//! in the batch's place: the script decides each client on its own key,
//! its checks in order, at one reading of Redis's clock, each on the state
//! the ones before it left, with the figures computed by the same code as
//! a check of its own. A check of a state to convert, a fault, the breaker
//! and the deny shortcut are answered per check, as for a check of its
//! own: a client whose state is to convert (or is not a tollgate state,
//! whatever its type) is left undecided by the batch and its checks go
//! one by one, so that a value the limiter cannot read fails only its
//! client's checks, as a check of its own; a failed
//! batch call is each check's failure, answered by the fail policy; the
//! breaker and the deny shortcut are asked when the batch goes, for each
//! check.
//!
//! [`DEPTH`]: crate::redis::table::flight::DEPTH

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::decide::{Answer, Failure, Seen};
use crate::algorithm::Transitions;
use crate::check::{CheckError, CheckErrorKind};
use crate::decision::Decision;
use crate::redis::quota::algorithm::RedisAlgorithm;
use crate::redis::quota::tier::Judged;
use crate::redis::script::spec::{Ns, Spec};
use crate::redis::script::state::{decision, decode_fast, DecodeError, Fast};
use crate::redis::shared::limiter::Inner;
use crate::redis::table::flight::{Joined, Waiter, BATCH_MAX};
use crate::redis::table::request::Request;
use crate::redis::wire::call::Redirect;
use crate::redis::wire::guard::{batch_task_done, bump, bump_by};
use crate::sync::Ordering;

/// A copy of `err` for each check a failed batch carried.
fn copy(err: &CheckError) -> CheckError {
    let cause = std::error::Error::source(err).map_or_else(String::new, ToString::to_string);
    CheckError::with_kind(err.kind(), cause)
}

/// Ends a leading check's call when dropped (answered or abandoned): the
/// checks that joined meanwhile go in the next call.
struct Lead<A: RedisAlgorithm> {
    inner: Arc<Inner<A>>,
    request: Arc<Request>,
}

impl<A: RedisAlgorithm> Drop for Lead<A> {
    fn drop(&mut self) {
        if let Some(flight) = &self.inner.coalesce {
            finish(&self.inner, flight.lane(&self.request));
        }
    }
}

/// The call for `lane` is over: the checks that joined go in the next
/// call, on a task of its own; without a runtime to spawn it on, each
/// makes a call of its own if it is polled in a runtime, and is otherwise
/// answered as if that call failed to reach Redis (see [`wait`]).
fn finish<A: RedisAlgorithm>(inner: &Arc<Inner<A>>, lane: &[u8]) {
    let Some(flight) = &inner.coalesce else {
        return;
    };
    let waiters = flight.next(lane);
    if waiters.is_empty() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // The waiters' channels close: each goes alone, or answers by its
        // fail policy.
        drop(waiters);
        while !flight.next(lane).is_empty() {}
        return;
    };
    // Counted before the task can end, so that `batch_tasks_done` never
    // passes it.
    bump(&inner.calls.counters.batch_tasks);
    let mut place = Place {
        inner: Arc::clone(inner),
        lane: lane.to_vec(),
        held: true,
    };
    runtime.spawn(async move {
        let mut waiters = waiters;
        while !waiters.is_empty() {
            place.inner.batches(waiters).await;
            // The checks just answered run first: a task that checks
            // again joins the next batch, rather than that batch
            // going with only the checks that came during the call.
            tokio::task::yield_now().await;
            waiters = place.next();
        }
        place.given_up();
    });
}

/// The place in flight that a batch task holds for its lane: given up
/// by the task's last `next`, or, if the task is dropped before that (its
/// runtime shut down, before or while it ran), when it is dropped, the
/// checks still waiting going alone or answered as if their call failed to
/// reach Redis (see [`wait`]).
/// Otherwise a runtime that went would keep the place for good, and with
/// both places so kept the lane's checks could never reach Redis again.
struct Place<A: RedisAlgorithm> {
    inner: Arc<Inner<A>>,
    lane: Vec<u8>,
    held: bool,
}

impl<A: RedisAlgorithm> Place<A> {
    /// The last `next`, finding no one waiting, gave the place up.
    fn given_up(&mut self) {
        self.held = false;
    }

    /// The checks waiting for the next call, or none, the place given up.
    fn next(&self) -> Vec<Waiter> {
        self.inner
            .coalesce
            .as_ref()
            .map_or_else(Vec::new, |flight| flight.next(&self.lane))
    }
}

impl<A: RedisAlgorithm> Drop for Place<A> {
    fn drop(&mut self) {
        if self.held {
            // The waiters' channels close: each goes alone, or answers by
            // its fail policy.
            while !self.next().is_empty() {}
        }
        // The task is over (ended, or dropped with its runtime): every
        // answer it got is kept.
        batch_task_done(&self.inner.calls.counters);
    }
}

impl<A: RedisAlgorithm> Inner<A> {
    /// Answers `waiters`, in the order they joined, in batches of at most
    /// [`BATCH_MAX`] (see [`batch_len`]).
    pub(crate) async fn batches(&self, mut waiters: Vec<Waiter>) {
        while !waiters.is_empty() {
            let rest = waiters.split_off(batch_len(&waiters));
            self.batch(waiters).await;
            waiters = rest;
        }
    }

    /// One batch: each check asked of the deny shortcut and the breaker,
    /// the rest decided in one call. If the breaker is due to probe, the
    /// first check goes alone as the probe, and the others are asked again
    /// once it is over, finding the breaker as the probe left it.
    async fn batch(&self, mut waiters: Vec<Waiter>) {
        let going = loop {
            let now = self.calls.clock.local_ns();
            let mut going = Vec::with_capacity(waiters.len());
            for waiter in waiters {
                if waiter.reply.is_closed() {
                    continue; // its check was dropped: nothing to decide
                }
                if let Some(decision) = self.local_denial(&waiter.request, now) {
                    bump(&self.calls.counters.denied_locally);
                    let _ = waiter.reply.send(Ok(decision));
                    continue;
                }
                going.push(waiter);
            }
            // The breaker of the first check's node: on Redis Cluster a
            // batch holds one slot's keys.
            let Some(first) = going.first() else {
                return;
            };
            let probe_due = match self.gate(now, &first.request.key) {
                Ok(probe_due) => probe_due,
                Err(err) => {
                    for waiter in going {
                        let answer = self.fallback(&waiter.request, copy(&err));
                        let _ = waiter.reply.send(answer);
                    }
                    return;
                }
            };
            if !probe_due || going.is_empty() {
                break going;
            }
            // The probe goes alone, as a check of its own.
            waiters = going.split_off(1);
            for waiter in going {
                self.alone(waiter, true).await;
            }
        };
        if going.len() == 1 {
            // As a check of its own.
            for waiter in going {
                self.alone(waiter, false).await;
            }
            return;
        }
        if going.is_empty() {
            return;
        }
        let requests: Vec<&Request> = going.iter().map(|w| &*w.request).collect();
        let named = batch_name(&requests);
        match self
            .guarded(false, &named, self.batch_trip(&requests))
            .await
        {
            Ok((answers, sent)) => {
                if let Some(now) = answers.iter().flatten().find_map(|a| match a.seen {
                    Seen::Word { now, .. } => Some(now),
                    Seen::Log { .. } => None,
                }) {
                    self.judged(sent, now);
                }
                // Each check counted once: one answered at its timeout
                // meanwhile (its reply gone) was counted there.
                let mut delivered = 0;
                let mut undecided = Vec::new();
                for (waiter, answer) in going.into_iter().zip(answers) {
                    let Some(answer) = answer else {
                        undecided.push(waiter);
                        continue;
                    };
                    self.remember(&waiter.request, sent, &answer);
                    if waiter.reply.send(Ok(answer.decision)).is_ok() {
                        self.count_redis(&waiter.request, &answer.decision);
                        delivered += 1;
                    }
                }
                bump_by(
                    &self.calls.counters.coalesced,
                    u64::saturating_sub(delivered, 1),
                );
                // A state to convert, or one that is not a tollgate state:
                // each of its client's checks as a check of its own, in
                // order.
                for waiter in undecided {
                    self.alone(waiter, false).await;
                }
            }
            Err(err) => {
                for waiter in going {
                    if waiter.reply.is_closed() {
                        continue; // answered at its timeout meanwhile
                    }
                    let answer = self.fallback(&waiter.request, copy(&err));
                    let _ = waiter.reply.send(answer);
                }
            }
        }
    }

    /// A waiting check by a call of its own. A failure is answered by the
    /// fail policy only if the check was not answered meanwhile (at its
    /// timeout, counted there), and Redis's decision is counted only if it
    /// is delivered: a check is answered and counted once, and the
    /// in-process limiter of `FailPolicy::Local` decides it once.
    async fn alone(&self, waiter: Waiter, probe_due: bool) {
        match self.uncounted_call(&waiter.request, probe_due).await {
            Ok(decision) => {
                if waiter.reply.send(Ok(decision)).is_ok() {
                    self.count_redis(&waiter.request, &decision);
                }
            }
            Err(_) if waiter.reply.is_closed() => {}
            Err(err) => {
                let _ = waiter.reply.send(self.fallback(&waiter.request, err));
            }
        }
    }

    /// The batch script's round trip: each request's answer, or `None`
    /// for a request whose client's state is to convert or is not a
    /// tollgate state, of any type (left untouched by the script, to
    /// decide alone, where its own call answers the fault).
    /// `requests` hold each client under one quota (see [`batch_len`]).
    pub(crate) async fn batch_trip(
        &self,
        requests: &[&Request],
    ) -> Result<Vec<Option<Answer>>, Failure> {
        let script = self
            .scripts
            .batch
            .as_ref()
            .expect("a word algorithm has a batch script");
        let plan = Plan::of(requests);
        // Relaxed: a number unique to this call, nothing more.
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let keys: Vec<&[u8]> = plan
            .clients
            .iter()
            .map(|c| &*requests[c.requests[0]].key)
            .collect();
        let reply: ::redis::RedisResult<Vec<i64>> = self
            .calls
            .eval_keys(script, &keys, |cmd| {
                // The most common batch, one settings and each client one
                // request of cost 1, sends nothing per client (see
                // `batch_script`).
                let same = plan.quotas.len() == 1
                    && plan
                        .clients
                        .iter()
                        .all(|c| c.requests.len() == 1 && c.unit(requests));
                cmd.arg(if same { 0 } else { plan.quotas.len() });
                for &at in &plan.quotas {
                    let judged = &requests[at].judged;
                    for (half, _) in judged.quota.spec.halves() {
                        cmd.arg(half.a).arg(half.b);
                    }
                    cmd.arg(&*judged.head());
                }
                cmd.arg(serial);
                if same {
                    return;
                }
                for client in &plan.clients {
                    let quota = client.quota as i64 + 1;
                    if client.unit(requests) {
                        // The most common: requests of cost 1, in one
                        // argument (see `batch_script`).
                        cmd.arg(match client.requests.len() {
                            1 => -quota,
                            n => -(n as i64 * 1024 + quota),
                        });
                        continue;
                    }
                    // Both in one argument: one number for the script to
                    // parse (see `batch_script`).
                    cmd.arg(client.requests.len() as i64 * 1024 + quota);
                    for &at in &client.requests {
                        cmd.arg(requests[at].cost);
                    }
                }
            })
            .await;
        let reply = match reply {
            // A slot moving under a batch of several keys (they are split
            // between two nodes for now): each check as a check of its own,
            // on its client's key alone. The script ran on no node.
            Err(err) if keys.len() > 1 && Redirect::of(&err).is_some() => {
                return Ok(requests.iter().map(|_| None).collect());
            }
            reply => reply?,
        };
        let shape = || Failure::Decode(DecodeError::Shape(reply.len()));
        let (&now, mut rest) = reply.split_last().ok_or_else(shape)?;
        let mut answers: Vec<Option<Answer>> = requests.iter().map(|_| None).collect();
        let mut one = Vec::new();
        for client in &plan.clients {
            let (&status, after) = rest.split_first().ok_or_else(shape)?;
            rest = after;
            match status {
                1 => {}
                -1 | -2 => continue,
                _ => return Err(shape()),
            }
            let spec = requests[client.requests[0]].spec();
            let ns = spec.ns().expect("only a word algorithm's checks coalesce");
            // The state's numbers in a reply, and a request's answer: the
            // outcome and the state.
            let fields = spec
                .halves()
                .iter()
                .map(|(h, _)| h.fields().len())
                .sum::<usize>();
            let width = 1 + fields;
            if client.hot(requests) {
                rest = replay(
                    &spec,
                    &ns,
                    fields,
                    now,
                    &client.requests,
                    rest,
                    &mut answers,
                )?;
                continue;
            }
            for &at in &client.requests {
                if rest.len() < width {
                    return Err(shape());
                }
                let (chunk, after) = rest.split_at(width);
                rest = after;
                one.clear();
                one.extend_from_slice(chunk);
                one.push(now);
                let Fast::Decided { allowed, word, now } = decode_fast(&spec, &one)? else {
                    return Err(Failure::Decode(DecodeError::Range(
                        "a batch's outcome of -1",
                    )));
                };
                answers[at] = Some(Answer {
                    decision: decision(&ns, allowed, word, now, requests[at].cost),
                    seen: Seen::Word { word, now },
                });
            }
        }
        if !rest.is_empty() {
            return Err(shape());
        }
        Ok(answers)
    }
}

/// How a batch's requests go in the script's arguments: the distinct
/// quotas they are judged by, and each client's requests in order.
struct Plan {
    /// Each distinct quota (a tier and its quota), as the index of the
    /// first request judged by it.
    quotas: Vec<usize>,
    /// Each client, in the order of its first request.
    clients: Vec<PlanClient>,
}

/// A client of a [`Plan`].
struct PlanClient {
    /// The index of its quota in [`Plan::quotas`].
    quota: usize,
    /// Its requests' indices, in order.
    requests: Vec<usize>,
}

impl PlanClient {
    /// Whether each of its requests costs 1: sent as one argument.
    fn unit(&self, requests: &[&Request]) -> bool {
        self.requests.iter().all(|&at| requests[at].cost == 1)
    }

    /// Whether it made several requests, each of cost 1: answered in a
    /// few numbers, however many (see [`replay`]).
    fn hot(&self, requests: &[&Request]) -> bool {
        self.requests.len() > 1 && self.unit(requests)
    }
}

/// The answers to a client's several requests of cost 1 (a hot client's),
/// from the few numbers the batch script answers them with (see
/// `batch_script`): how many it admitted (`k`, the first `k`), the state
/// before the first, and the state after the last admission. The `k`
/// admissions are replayed at the batch's instant by the in-process
/// algorithm, which the script is proven equal to; a replay that does
/// not admit exactly the first `k`, or ends on another state than the
/// script wrote, is an error, never an answer. Returns the reply past
/// the client's numbers.
/// `fields` is how many numbers the state takes in the reply.
fn replay<'r>(
    spec: &Spec,
    ns: &Ns,
    fields: usize,
    now: i64,
    at: &[usize],
    reply: &'r [i64],
    answers: &mut [Option<Answer>],
) -> Result<&'r [i64], Failure> {
    let shape = || Failure::Decode(DecodeError::Shape(reply.len()));
    let (&k, rest) = reply.split_first().ok_or_else(shape)?;
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k <= at.len())
        .ok_or(Failure::Decode(DecodeError::Range(
            "a hot client's count of admissions out of range",
        )))?;
    // The state as the script wrote it, in its reply's form: the
    // outcome, the fields, the instant.
    let word = |fields: &[i64]| -> Result<(u128, u64), Failure> {
        let mut one = Vec::with_capacity(fields.len() + 2);
        one.push(1);
        one.extend_from_slice(fields);
        one.push(now);
        match decode_fast(spec, &one)? {
            Fast::Decided { word, now, .. } => Ok((word, now)),
            Fast::Convert => Err(shape()),
        }
    };
    if rest.len() < fields {
        return Err(shape());
    }
    let (before, mut rest) = rest.split_at(fields);
    let (mut state, now) = word(before)?;
    let written = if k > 0 {
        if rest.len() < fields {
            return Err(shape());
        }
        let (after, past) = rest.split_at(fields);
        rest = past;
        Some(word(after)?.0)
    } else {
        None
    };
    let differs = || {
        Failure::Decode(DecodeError::Range(
            "a hot client's admissions that the in-process algorithm does not replay",
        ))
    };
    for (i, &request) in at.iter().enumerate() {
        let admitted = ns.admit(state, now * 1_000, 1);
        let allowed = match admitted {
            Some(next) if i < k => {
                state = next;
                true
            }
            None if i >= k => false,
            _ => return Err(differs()),
        };
        answers[request] = Some(Answer {
            decision: decision(ns, allowed, state, now, 1),
            seen: Seen::Word { word: state, now },
        });
    }
    if written.is_some_and(|written| written != state) {
        return Err(differs());
    }
    Ok(rest)
}

impl Plan {
    fn of(requests: &[&Request]) -> Self {
        let mut plan = Self {
            quotas: Vec::new(),
            clients: Vec::new(),
        };
        let mut index: HashMap<&[u8], usize> = HashMap::with_capacity(requests.len());
        for (at, request) in requests.iter().enumerate() {
            if let Some(&c) = index.get(&*request.key) {
                plan.clients[c].requests.push(at);
                continue;
            }
            let judged = &request.judged;
            let quota = plan
                .quotas
                .iter()
                .position(|&q| same_quota(&requests[q].judged, judged))
                .unwrap_or_else(|| {
                    plan.quotas.push(at);
                    plan.quotas.len() - 1
                });
            index.insert(&request.key, plan.clients.len());
            plan.clients.push(PlanClient {
                quota,
                requests: vec![at],
            });
        }
        plan
    }
}

/// Whether two requests are judged by the same quota of the same tier.
fn same_quota(a: &Judged, b: &Judged) -> bool {
    a.tier == b.tier && Arc::ptr_eq(&a.quota, &b.quota)
}

/// How many of `waiters`, from the first, go in one batch: at most
/// [`BATCH_MAX`], each client's under one quota (a check judged by
/// another quota than its client's check before it in the batch starts
/// the next batch, so that each client's checks are decided in order).
fn batch_len(waiters: &[Waiter]) -> usize {
    let mut seen: HashMap<&[u8], &Judged> = HashMap::new();
    for (at, waiter) in waiters.iter().take(BATCH_MAX).enumerate() {
        let judged = &waiter.request.judged;
        match seen.get(&*waiter.request.key) {
            Some(first) if !same_quota(first, judged) => return at,
            Some(_) => {}
            None => {
                seen.insert(&waiter.request.key, judged);
            }
        }
    }
    waiters.len().min(BATCH_MAX)
}

/// The key a failed batch's error names: its client's, or its first
/// client's and how many others rode with it.
fn batch_name(requests: &[&Request]) -> Vec<u8> {
    let first = &requests[0].key;
    let others = requests.iter().filter(|r| r.key != *first).count();
    if others == 0 {
        return first.clone();
    }
    let mut name = first.clone();
    name.extend_from_slice(format!(", with {others} checks of other clients").as_bytes());
    name
}

/// Whether checks of `spec` coalesce: a word algorithm's (the sliding
/// window log's checks go one call each).
pub(crate) fn coalesces(spec: &Spec) -> bool {
    spec.ns().is_some()
}

/// A check that may coalesce: it joins its client's next call when first
/// polled (a check made but not yet awaited holds no one up), and leads
/// one if none is in flight.
pub(crate) async fn joined<A: RedisAlgorithm>(
    inner: Arc<Inner<A>>,
    request: Request,
) -> Result<Decision, CheckError> {
    let request = Arc::new(request);
    let Some(flight) = &inner.coalesce else {
        return inner.single(&request, false).await;
    };
    match flight.join(&request) {
        Joined::Lead => {
            // Made at once: however this future ends, answered or
            // dropped, the checks that joined go in the next call.
            let lead = Lead { inner, request };
            lead.inner.single(&lead.request, false).await
        }
        Joined::Wait(answer) => wait(inner, request, answer).await,
    }
}

/// A waiting check's answer: the batch's; or, if the call that was to
/// carry it was dropped with no runtime to run the batch on, its own call
/// (when it is itself polled in a runtime) within what is left of its
/// timeout, else the fail policy's; or, if no answer came within the
/// timeout (counted), the fail policy's.
async fn wait<A: RedisAlgorithm>(
    inner: Arc<Inner<A>>,
    request: Arc<Request>,
    answer: oneshot::Receiver<Result<Decision, CheckError>>,
) -> Result<Decision, CheckError> {
    let deadline = tokio::time::Instant::now() + inner.timeout;
    match tokio::time::timeout_at(deadline, answer).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_dropped)) if tokio::runtime::Handle::try_current().is_ok() => {
            match tokio::time::timeout_at(deadline, inner.single(&request, false)).await {
                Ok(answer) => answer,
                Err(_elapsed) => inner.timed_out(&request),
            }
        }
        Ok(Err(_dropped)) => inner.fallback(
            &request,
            CheckError::with_kind(
                CheckErrorKind::Unavailable,
                "the call that was to carry this check was dropped",
            ),
        ),
        Err(_elapsed) => inner.timed_out(&request),
    }
}

#[cfg(test)]
mod tests {
    use core::time::Duration;

    use super::*;
    use crate::TokenBucket;

    /// A bucket of 2, one unit a millisecond, and three requests of cost
    /// 1 at `NOW` (µs) on a fresh state (`[0, 0]`: a TAT of 0, no ns).
    const NOW: i64 = 5_000_000;

    fn bucket() -> (Spec, Ns) {
        let spec =
            Spec::bucket(&TokenBucket::new(1, Duration::from_millis(1), 2).unwrap()).unwrap();
        let ns = spec.ns().unwrap();
        (spec, ns)
    }

    fn replayed(reply: &[i64]) -> Result<(Vec<Option<Answer>>, usize), Failure> {
        let (spec, ns) = bucket();
        let mut answers: Vec<Option<Answer>> = (0..3).map(|_| None).collect();
        let rest = replay(&spec, &ns, 2, NOW, &[0, 1, 2], reply, &mut answers)?;
        Ok((answers, rest.len()))
    }

    #[test]
    fn a_hot_client_is_answered_as_its_requests_one_by_one() {
        // Two admitted, each a millisecond on; the third refused.
        let (answers, rest) = replayed(&[2, 0, 0, NOW + 2_000, 0, 42]).unwrap();
        assert_eq!(rest, 1, "the reply past the client's numbers");
        let (_, ns) = bucket();
        let now = NOW as u64;
        let mut state = ns.fresh_at(0);
        for (i, answer) in answers.into_iter().enumerate() {
            let answer = answer.expect("every request answered");
            let admitted = ns.admit(state, now * 1_000, 1);
            if let Some(next) = admitted {
                state = next;
            }
            assert_eq!(answer.decision.is_allowed(), i < 2, "request {i}");
            assert_eq!(
                answer.decision,
                decision(&ns, admitted.is_some(), state, now, 1),
                "request {i}"
            );
        }
        // None admitted: no state after.
        let (answers, rest) = replayed(&[0, NOW + 2_000, 0, 42]).unwrap();
        assert_eq!(rest, 1);
        assert!(answers
            .iter()
            .all(|a| !a.as_ref().unwrap().decision.is_allowed()));
    }

    #[test]
    fn a_hot_client_the_in_process_algorithm_does_not_replay_is_an_error() {
        for reply in [
            // The script says one admitted, where two are: with the state
            // one leaves, or the state two leave.
            &[1, 0, 0, NOW + 1_000, 0][..],
            &[1, 0, 0, NOW + 2_000, 0],
            // None admitted, where the bucket admits (no state after to
            // compare with).
            &[0, 0, 0],
            // Three admitted, where the bucket holds two: with the state
            // three would leave, or the state two leave.
            &[3, 0, 0, NOW + 3_000, 0],
            &[3, 0, 0, NOW + 2_000, 0],
            // Two admitted, but a state written that they do not leave.
            &[2, 0, 0, NOW + 3_000, 0],
            // More admitted than requests made, or fewer than none.
            &[4, 0, 0, NOW + 4_000, 0],
            &[-1, 0, 0],
            // Cut short.
            &[2, 0, 0, NOW + 2_000],
            &[2, 0],
        ] {
            assert!(replayed(reply).is_err(), "{reply:?}");
        }
    }
}
