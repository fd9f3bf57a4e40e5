//! A reference model of an in-process limiter that shares no code with
//! the crate: plain values and integer arithmetic, written from the docs
//! (`docs/DESIGN.md`, the algorithms' pages and the guides).
//!
//! The model never forgets a client. It holds each client's tier, the
//! plan (one limit, or a pair) its state was written under, and the state;
//! a tier's plan; and the bookings open. Every answer is figured in full:
//! admitted or not, the limit, what remains, the waits, the window, each
//! limit's figures for a pair, and the errors.

#![allow(dead_code)]

pub mod limits;

use std::collections::BTreeMap;

use limits::{clamp, until};
pub use limits::{Limit, Word, NEVER};

/// One limit, or two held together (first, second).
pub type Plan = Vec<Limit>;

/// A decision's figures, as the model makes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    /// ns; [`NEVER`] for never.
    pub retry_after: u64,
    pub replenish_after: u64,
    pub window: u64,
    /// For a pair, each limit's (limit, remaining, replenish_after, window).
    pub pair: Option<[(u64, u64, u64, u64); 2]>,
}

/// A cost that no tier could ever admit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostErr {
    pub cost: u64,
    pub capacity: u64,
}

/// Why a booking charged nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BookErr {
    TooLong { wait: u64 },
    Cost(CostErr),
    Unsupported,
}

/// A booking the model granted.
#[derive(Clone, Debug)]
pub struct Booking {
    pub client: u64,
    pub wait: u64,
    pub ready_at: u64,
    pub cost: u64,
    /// The state before the booking and the state it left (word
    /// algorithms), or the slots it claimed (the log).
    from: Vec<Word>,
    to: Vec<Word>,
    claims: Vec<(usize, u64)>,
    /// The replacements of the client's own state, of any client's, and
    /// the quota changes, when it was booked.
    own: u64,
    any: u64,
    changes: u64,
}

/// What a cancel must answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// Exactly this.
    Is(bool),
    /// Either: another client's state was replaced since the booking, and
    /// a replacement ends the cancellability of the bookings of clients
    /// that share its stripe (one in 256 by a hash the model cannot see).
    /// If it gives back, it gives back exactly by the rule.
    Either,
}

#[derive(Clone, Debug)]
pub struct Client {
    pub tier: u16,
    pub plan: Plan,
    pub state: Vec<Word>,
}

/// The whole limiter, as the docs describe it.
#[derive(Clone, Debug)]
pub struct Model {
    /// Each tier's plan now.
    pub tiers: Vec<Plan>,
    pub clients: BTreeMap<u64, Client>,
    /// Each client's replacements so far (resets, removals, moves), kept
    /// across removals: a booking gives back only on the state it was
    /// booked on.
    generations: BTreeMap<u64, u64>,
    /// Every replacement of any client's state.
    replaced: u64,
    /// Quota changes, which replace every state.
    changes: u64,
}

impl Model {
    pub fn new(tiers: Vec<Plan>) -> Self {
        Self {
            tiers,
            clients: BTreeMap::new(),
            generations: BTreeMap::new(),
            replaced: 0,
            changes: 0,
        }
    }

    /// The largest capacity of any tier now: a cost above it is an error.
    pub fn max_capacity(&self) -> u64 {
        self.tiers.iter().map(|p| capacity(p)).max().unwrap()
    }

    /// The longest horizon of any tier now.
    pub fn max_horizon(&self) -> u64 {
        self.tiers
            .iter()
            .flat_map(|p| p.iter().map(Limit::horizon))
            .max()
            .unwrap()
            .min(limits::NOW_MAX)
    }

    /// A client's state and plan: its own, or a fresh one in `tier`.
    fn view(&self, client: u64, tier: u16) -> (Plan, Vec<Word>) {
        match self.clients.get(&client) {
            Some(c) => (c.plan.clone(), c.state.clone()),
            None => {
                let plan = self.tiers[usize::from(tier)].clone();
                let state = plan.iter().map(Limit::fresh).collect();
                (plan, state)
            }
        }
    }

    fn entry(&mut self, client: u64, tier: u16) -> &mut Client {
        let plan = self.tiers[usize::from(tier)].clone();
        self.clients.entry(client).or_insert_with(|| Client {
            tier,
            state: plan.iter().map(Limit::fresh).collect(),
            plan,
        })
    }

    /// Whether the client's state is idle at `t` (a client never seen, or
    /// removed, is): one the limiter may have forgotten.
    pub fn is_idle(&self, client: u64, t: u64) -> bool {
        self.clients
            .get(&client)
            .is_none_or(|c| c.plan.iter().zip(&c.state).all(|(l, w)| l.is_idle(w, t)))
    }

    /// `check_n(client, cost)` at `t`, for a client whose records put it
    /// in `tier` (used only if the model holds no state for it).
    pub fn check(&mut self, client: u64, tier: u16, t: u64, cost: u64) -> Result<Answer, CostErr> {
        if cost == 0 {
            return Ok(self.peek(client, tier, t, 0).unwrap());
        }
        self.cost_ok(cost)?;
        let c = self.entry(client, tier);
        if cost > capacity(&c.plan) {
            return Ok(above_tier(&c.plan, &c.state, t));
        }
        match admit(&c.plan, &c.state, t, cost) {
            Some(next) => {
                c.state = next;
                Ok(describe(&c.plan, &c.state, t, true, 0))
            }
            None => {
                let wait = retry_after(&c.plan, &c.state, t, cost);
                Ok(describe(&c.plan, &c.state, t, false, wait))
            }
        }
    }

    /// What `check` would answer, without keeping anything.
    pub fn check_unkept(
        &self,
        client: u64,
        tier: u16,
        t: u64,
        cost: u64,
    ) -> Result<Answer, CostErr> {
        self.clone().check(client, tier, t, cost)
    }

    /// `peek_n(client, cost)` at `t`.
    pub fn peek(&self, client: u64, tier: u16, t: u64, cost: u64) -> Result<Answer, CostErr> {
        if cost > 0 {
            self.cost_ok(cost)?;
        }
        let (plan, state) = self.view(client, tier);
        if cost > capacity(&plan) {
            return Ok(above_tier(&plan, &state, t));
        }
        let mut answer = describe(&plan, &state, t, true, 0);
        if cost > 0 && admit(&plan, &state, t, cost).is_none() {
            answer.allowed = false;
            answer.retry_after = retry_after(&plan, &state, t, cost);
        }
        Ok(answer)
    }

    fn cost_ok(&self, cost: u64) -> Result<(), CostErr> {
        let capacity = self.max_capacity();
        if cost > capacity {
            Err(CostErr { cost, capacity })
        } else {
            Ok(())
        }
    }

    /// `reserve_n(client, cost, max_wait)` at `t`.
    pub fn reserve(
        &mut self,
        client: u64,
        tier: u16,
        t: u64,
        cost: u64,
        max_wait: u64,
    ) -> Result<Booking, BookErr> {
        // Whether the limiter books at all: by tier 0's quota.
        if !self.tiers[0].iter().all(Limit::reserves) {
            return Err(BookErr::Unsupported);
        }
        let (own, any, changes) = self.stamps(client);
        if cost == 0 {
            return Ok(Booking {
                client,
                wait: 0,
                ready_at: t,
                cost: 0,
                from: Vec::new(),
                to: Vec::new(),
                claims: Vec::new(),
                own,
                any,
                changes,
            });
        }
        self.cost_ok(cost).map_err(BookErr::Cost)?;
        let c = self.entry(client, tier);
        if cost > capacity(&c.plan) {
            return Err(BookErr::TooLong { wait: NEVER });
        }
        let t = clamp(t);
        let (to, ready_at, claims) = if let [log @ Limit::Log { .. }] = c.plan[..] {
            let Some((word, ready, claims)) = log.book_log(&c.state[0], t, cost) else {
                return Err(BookErr::TooLong { wait: NEVER });
            };
            (vec![word], ready, claims)
        } else if let [one] = c.plan[..] {
            let Some((word, ready)) = one.reserve(&c.state[0], t, cost) else {
                return Err(BookErr::TooLong { wait: NEVER });
            };
            (vec![word], ready, Vec::new())
        } else {
            // A pair: ready when both conform, each charged as a check then.
            let mut ready = t;
            for (l, w) in c.plan.iter().zip(&c.state) {
                let Some((_, at)) = l.reserve(w, t, cost) else {
                    return Err(BookErr::TooLong { wait: NEVER });
                };
                ready = ready.max(at);
            }
            let words = c
                .plan
                .iter()
                .zip(&c.state)
                .map(|(l, w)| l.book_at(w, t, ready, cost))
                .collect();
            (words, ready, Vec::new())
        };
        let wait = until(t, ready_at);
        if wait > max_wait.min(NEVER - 1) {
            return Err(BookErr::TooLong { wait });
        }
        let from = std::mem::replace(&mut c.state, to.clone());
        Ok(Booking {
            client,
            wait,
            ready_at,
            cost,
            from,
            to,
            claims,
            own,
            any,
            changes,
        })
    }

    fn stamps(&self, client: u64) -> (u64, u64, u64) {
        (self.generation(client), self.replaced, self.changes)
    }

    fn generation(&self, client: u64) -> u64 {
        self.generations.get(&client).copied().unwrap_or(0)
    }

    /// Marks the client's state replaced.
    fn replace(&mut self, client: u64) {
        *self.generations.entry(client).or_insert(0) += 1;
        self.replaced += 1;
    }

    /// What cancelling `booking` at `t` must answer (see [`Cancel`]),
    /// without doing it.
    pub fn cancel_expected(&self, booking: &Booking, t: u64) -> Cancel {
        // A booking with no wait was consumed at once.
        if booking.wait == 0 || clamp(t) >= booking.ready_at {
            return Cancel::Is(false);
        }
        // Nothing is given back to a state replaced since the booking.
        if self.generation(booking.client) != booking.own || self.changes != booking.changes {
            return Cancel::Is(false);
        }
        let c = &self.clients[&booking.client];
        let gives = if booking.claims.is_empty() {
            // The tail rule: only if nothing was charged since.
            c.state == booking.to
        } else {
            let mut state = c.state[0].clone();
            c.plan[0].unbook_log(&mut state, booking.ready_at, &booking.claims) > 0
        };
        if !gives {
            Cancel::Is(false)
        } else if self.replaced != booking.any {
            Cancel::Either
        } else {
            Cancel::Is(true)
        }
    }

    /// Records a cancel that gave back (`true`) or not.
    pub fn cancel(&mut self, booking: &Booking, gave_back: bool) {
        if !gave_back {
            return;
        }
        let c = self
            .clients
            .get_mut(&booking.client)
            .expect("a held client");
        if booking.claims.is_empty() {
            c.state = booking.from.clone();
        } else {
            let plan = c.plan[0];
            plan.unbook_log(&mut c.state[0], booking.ready_at, &booking.claims);
        }
    }

    /// `reset`: as if the client had never made a request. (A log is
    /// forgotten instead, as by `remove`: the same thing here.)
    pub fn reset(&mut self, client: u64) {
        self.replace(client);
        if let Some(c) = self.clients.get_mut(&client) {
            c.state = c.plan.iter().map(Limit::fresh).collect();
            if matches!(c.plan[..], [Limit::Log { .. }]) {
                self.clients.remove(&client);
            }
        }
    }

    /// `remove`: the client is forgotten; its next request starts afresh
    /// in the tier its records give then.
    pub fn remove(&mut self, client: u64) {
        self.replace(client);
        self.clients.remove(&client);
    }

    /// A live client's state forgotten on purpose by the limiter (a
    /// sampled eviction at a full cap): the same as `remove`.
    pub fn forget(&mut self, client: u64) {
        self.remove(client);
    }

    /// `set_quota(tier, plan)` at `t`: every client of the tier is carried
    /// over by the move rule (one whose plan is unchanged keeps its state
    /// exactly), and no booking made before gives anything back.
    pub fn set_quota(&mut self, tier: u16, plan: Plan, t: u64) {
        self.changes += 1;
        self.replaced += 1;
        self.tiers[usize::from(tier)] = plan.clone();
        for c in self.clients.values_mut().filter(|c| c.tier == tier) {
            carry(c, &plan, t);
        }
    }

    /// `retier` at `t` of a client whose records now put it in `tier`: a
    /// client held in another tier is carried over by the move rule.
    pub fn retier(&mut self, client: u64, tier: u16, t: u64) {
        let Some(c) = self.clients.get(&client) else {
            return;
        };
        if c.tier == tier {
            return;
        }
        self.replace(client);
        let plan = self.tiers[usize::from(tier)].clone();
        let c = self.clients.get_mut(&client).unwrap();
        c.tier = tier;
        carry(c, &plan, t);
    }
}

/// Carries a client's state to `plan` at `t`: unchanged if the plan is
/// the same, else each limit by its rule (a limit of a pair whose own
/// settings did not change keeps its state).
fn carry(c: &mut Client, plan: &Plan, t: u64) {
    if c.plan != *plan {
        c.state = c
            .plan
            .iter()
            .zip(&c.state)
            .zip(plan)
            .map(|((from, w), to)| {
                if from == to {
                    w.clone()
                } else {
                    from.convert(w, t, to)
                }
            })
            .collect();
        c.plan = plan.clone();
    }
}

/// The smaller capacity of a plan's limits.
pub fn capacity(plan: &[Limit]) -> u64 {
    plan.iter().map(Limit::capacity).min().unwrap()
}

fn admit(plan: &[Limit], state: &[Word], t: u64, cost: u64) -> Option<Vec<Word>> {
    plan.iter()
        .zip(state)
        .map(|(l, w)| l.admit(w, t, cost))
        .collect()
}

/// The later of each limit's wait.
fn retry_after(plan: &[Limit], state: &[Word], t: u64, cost: u64) -> u64 {
    plan.iter()
        .zip(state)
        .map(|(l, w)| l.retry_after(w, t, cost))
        .max()
        .unwrap()
}

/// A decision's figures on `state` at `t`.
fn describe(plan: &[Limit], state: &[Word], t: u64, allowed: bool, wait: u64) -> Answer {
    let each: Vec<(u64, u64, u64, u64)> = plan
        .iter()
        .zip(state)
        .map(|(l, w)| {
            let (cap, left) = (l.capacity(), l.remaining(w, t));
            let replenish = if left >= cap {
                0
            } else {
                l.retry_after(w, t, left + 1)
            };
            (cap, left, replenish, l.window())
        })
        .collect();
    let remaining = each.iter().map(|e| e.1).min().unwrap();
    let cap = capacity(plan);
    let replenish_after = if remaining >= cap {
        0
    } else {
        retry_after(plan, state, t, remaining + 1)
    };
    // The limit that binds: the fewer remaining, the smaller on a tie.
    let binds = match each[..] {
        [one] => one,
        [a, b] => {
            if a.1 < b.1 || (a.1 == b.1 && a.0 <= b.0) {
                a
            } else {
                b
            }
        }
        _ => unreachable!(),
    };
    Answer {
        allowed,
        limit: binds.0,
        remaining,
        retry_after: wait,
        replenish_after,
        window: binds.3,
        pair: match each[..] {
            [a, b] => Some([a, b]),
            _ => None,
        },
    }
}

/// A cost above the client's own tier's capacity (within another's):
/// denied for good, with the figures of the state as it stands.
fn above_tier(plan: &[Limit], state: &[Word], t: u64) -> Answer {
    Answer {
        allowed: false,
        retry_after: NEVER,
        ..describe(plan, state, t, true, 0)
    }
}
