//! The move rule's part of the oracle: the seam between forgetting and
//! quota changes, and the rule's bounds.
//!
//! A tiered limiter forgets a client only once its state has been idle
//! for the longest horizon of any tier; by then the move rule carries it
//! to a fresh state under every quota the limiter has, so forgetting it
//! changes no decision until a later change: a quota raised past every
//! quota the limiter had when it forgot the client, or one lowered and
//! raised again, carries a held client to less than a fresh one, and the
//! forgotten client comes back fresh (the tiers guide: at most the
//! quota's capacity more than the rule gives, once). So at each change, a
//! client the limiter may have forgotten may be held by the limiter either
//! as the model carries it or as a fresh client of its tier, and nothing
//! else: the oracle asks the limiter (a peek of nothing, which changes
//! nothing) and goes on with the model of the one it answers as. Both
//! sides are exact: never more than a fresh client's (what may be admitted
//! at most), never less than the carried state's (a client is never
//! refused longer than the model says).

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::model::{self, Limit};
use super::{now, real_answer, Memory, Run, CLIENTS};

impl Run<'_> {
    /// Before every operation: the tracked clients the limiter may
    /// forget from now on until they are admitted something, those idle a
    /// longest horizon of the tiers now before the latest reading (a pass
    /// may forget them at any reading from then, under the tiers then).
    pub(super) fn note_forgettable(&mut self) {
        let since = self.latest.saturating_sub(self.model.max_horizon());
        for c in 0..CLIENTS {
            if self.exact(c) && self.model.clients.contains_key(&c) && self.model.is_idle(c, since)
            {
                self.maybe_gone.insert(c);
            }
        }
    }

    /// Before a change: the clients the change carries (`moved`) that the
    /// limiter may have forgotten since they were last admitted anything.
    pub(super) fn forgettable(&mut self, moved: impl Fn(u64, &model::Client) -> bool) -> Vec<u64> {
        self.note_forgettable();
        (0..CLIENTS)
            .filter(|&c| {
                self.exact(c)
                    && self.maybe_gone.contains(&c)
                    && self
                        .model
                        .clients
                        .get(&c)
                        .is_some_and(|held| moved(c, held))
            })
            .collect()
    }

    /// After a change: each client of `forgettable` is held as the model
    /// carried it, or is a fresh client of its tier (and the model forgets
    /// it too), and nothing else. Where the two answer alike, the client
    /// may be either until it is admitted something (a full state and a
    /// fresh one then become the same state) or until the next change
    /// (where the rule carries a full state to less than a fresh one: a
    /// client moved down and back up, or to a quota past every quota the
    /// limiter had, keeps what the rule leaves, a forgotten one starts
    /// afresh). A fresh start gives at most the quota's capacity more than
    /// the rule, once; the span bound allows for it.
    pub(super) fn forked(&mut self, i: usize, forgettable: Vec<u64>) -> Result<(), TestCaseError> {
        let t = now(self.clock);
        for client in forgettable {
            let tier = self.tier(client);
            let real = real_answer(self.real.peek_n(client, 0));
            let carried = self.model.peek(client, tier, t, 0);
            let mut forgot = self.model.clone();
            forgot.forget(client);
            let fresh = forgot.peek(client, tier, t, 0);
            if real == carried {
                if fresh == carried {
                    self.maybe_gone.insert(client);
                } else {
                    self.maybe_gone.remove(&client);
                }
                continue;
            }
            // A peek of cost 0 reads an absent client as a fresh one, even
            // at a full cap under `DenyNew` (only a cost is refused there).
            prop_assert!(
                real == fresh,
                "{} step {}: client {} after a quota change or move at {}: the limiter holds \
                 {:?}, neither the state the move rule carries {:?} nor a fresh client's {:?}",
                self.name,
                i,
                client,
                t,
                real,
                carried,
                fresh
            );
            let (Ok(carried), Ok(fresh)) = (carried, fresh) else {
                unreachable!("a peek of nothing is no error");
            };
            let more = fresh.remaining.saturating_sub(carried.remaining);
            self.model.forget(client);
            self.maybe_gone.remove(&client);
            self.counts.fresh.entry(client).or_default().push((t, more));
        }
        Ok(())
    }

    /// The bound of a move: a bucket client moved while holding tokens
    /// waits at most one new interval for a unit.
    pub(super) fn after_move(
        &mut self,
        i: usize,
        moved: Option<(u64, model::Client)>,
    ) -> Result<(), TestCaseError> {
        let t = now(self.clock);
        let Some((client, old)) = moved.filter(|_| self.rule) else {
            return Ok(());
        };
        let (Some(new), true) = (self.model.clients.get(&client), self.exact(client)) else {
            return Ok(());
        };
        let ([Limit::Bucket { interval, capacity }], [model::Word::Tat(tat)]) =
            (&old.plan[..], &old.state[..])
        else {
            return Ok(());
        };
        let [Limit::Bucket { interval: to, .. }] = new.plan[..] else {
            return Ok(());
        };
        // A client the limiter may have forgotten (idle a horizon before
        // the latest reading, which a step back leaves ahead) is absent,
        // and refused as a new client at a full cap under `DenyNew`.
        let refused_new = matches!(self.setup.memory, Memory::DenyNew(cap)
            if self.maybe_gone.contains(&client)
                && self.real.len() as u64 >= cap
                && real_answer(self.real.peek_n(client, 1)) == Ok(self.refusal()));
        let empty = i128::from(*tat) - i128::from(*capacity) * i128::from(*interval);
        if *tat > t && i128::from(t) >= empty && !refused_new {
            let wait = self.real.peek_n(client, 1).unwrap().retry_after();
            prop_assert!(
                wait <= Duration::from_nanos(to),
                "{} step {}: client {} moved at {} holding tokens waits {:?}, more than the new \
                 interval of {} ns",
                self.name,
                i,
                client,
                t,
                wait,
                to
            );
        }
        Ok(())
    }

    /// The span bound, for a run of buckets whose clock never stepped
    /// back: over readings [a, b] a client is admitted at most the largest
    /// capacity involved and the fastest rate's refill over b − a, and
    /// what each fresh start of a client forgotten before a change gave it
    /// over the rule within [a, b] (once each: see [`Run::forked`]).
    pub(super) fn finish(&self, quotas: &[usize]) -> Result<(), TestCaseError> {
        if self.back > 0 {
            return Ok(());
        }
        let buckets: Vec<Limit> = quotas.iter().flat_map(|&q| (self.plan)(q, 0)).collect();
        let (Some(most), Some(fastest)) = (
            buckets.iter().map(Limit::capacity).max(),
            buckets
                .iter()
                .filter_map(|l| match l {
                    Limit::Bucket { interval, .. } => Some(*interval),
                    _ => None,
                })
                .min(),
        ) else {
            return Ok(());
        };
        for (client, admitted) in &self.counts.admitted {
            // Each reading's units, a cancel's given back at its booking's.
            let mut at = std::collections::BTreeMap::<u64, i64>::new();
            for &(t, units) in admitted {
                *at.entry(t).or_default() += units;
            }
            let admitted: Vec<(u64, i64)> = at.into_iter().collect();
            let fresh = self.counts.fresh.get(client).map_or(&[][..], Vec::as_slice);
            for a in 0..admitted.len() {
                let mut units = 0;
                for b in a..admitted.len() {
                    units += admitted[b].1;
                    let span = admitted[b].0 - admitted[a].0;
                    // And each fresh start within the span.
                    let raised: u64 = fresh
                        .iter()
                        .filter(|(at, _)| (admitted[a].0..=admitted[b].0).contains(at))
                        .map(|(_, more)| more)
                        .sum();
                    let bound = (most + span / fastest + raised) as i64;
                    prop_assert!(
                        units <= bound,
                        "{}: client {} was admitted {} units over [{}, {}], above the bound {}",
                        self.name,
                        client,
                        units,
                        admitted[a].0,
                        admitted[b].0,
                        bound
                    );
                }
            }
        }
        Ok(())
    }
}
