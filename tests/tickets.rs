//! A cancelled reservation gives back only its own charge: a ticket acts
//! only on the state it was booked on. `reset`, `remove` and a client's
//! return, a quota change, and sampled eviction at a full cap each give
//! the client a new state, which an old ticket must leave alone even when
//! that state has come round to exactly the one the booking left.
//!
//! Every limiter here allows one unit per 100 ns on a frozen clock, so two
//! bookings are never ready at the same instant: a cancel that gives back
//! what it no longer owns shows as a later booking ready together with an
//! earlier one.

#![cfg(not(feature = "loom"))]

mod common;

use std::time::Duration;

use tollgate::{
    Algorithm, Builder, FixedWindow, Limiter, ManualClock, Overflow, Reservable, SlidingWindowLog,
    TokenBucket,
};

const T0: u64 = 1_000;
const INTERVAL: Duration = Duration::from_nanos(100);

fn clock() -> ManualClock {
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(T0));
    clock
}

fn bucket() -> Builder<TokenBucket> {
    TokenBucket::builder().rate(1, INTERVAL).capacity(1)
}

fn fixed() -> Builder<FixedWindow> {
    FixedWindow::builder().limit(1).window(INTERVAL)
}

fn log() -> Builder<SlidingWindowLog> {
    SlidingWindowLog::builder().limit(1).window(INTERVAL)
}

/// Spends whatever `client` may spend now.
fn spend<A: Algorithm>(limiter: &Limiter<A, String, ManualClock>, client: &str) {
    let mut spent = 0;
    while limiter.allow_request(client) {
        spent += 1;
        assert!(spent <= 1, "a quota of one");
    }
}

/// The steps: spend, book `B1`; replace the state (`replace`);
/// spend the new state's unit and book `B2`, which leaves exactly the
/// state `B1` left; cancel `B1`: nothing is given back, and `B3` is ready
/// after `B2`.
fn old_ticket_leaves_the_new_state_alone<A: Reservable>(
    name: &str,
    limiter: &Limiter<A, String, ManualClock>,
    replace: impl FnOnce(),
) {
    spend(limiter, "a");
    let b1 = limiter.reserve("a", Duration::MAX).unwrap();
    assert!(b1.wait() > Duration::ZERO, "{name}: B1 waits");
    replace();
    spend(limiter, "a");
    let b2 = limiter.reserve("a", Duration::MAX).unwrap();
    assert!(b2.wait() > Duration::ZERO, "{name}: B2 waits");
    let b2_ready = b2.ready_at();
    b2.commit();
    assert!(!b1.cancel(), "{name}: B1 gave back a charge on a new state");
    let b3 = limiter.reserve("a", Duration::MAX).unwrap();
    assert!(
        b3.ready_at() > b2_ready,
        "{name}: B3 ready at {:?} with B2 ({b2_ready:?}): one unit ran twice",
        b3.ready_at()
    );
    b3.commit();
}

/// Runs the steps on each algorithm that books ahead (the pair beside
/// it), for one way of replacing the state.
macro_rules! on_every_booking_limiter {
    ($what:literal, |$limiter:ident| $replace:expr, $build:ident) => {{
        let $limiter = $build(bucket());
        old_ticket_leaves_the_new_state_alone(concat!("token bucket, ", $what), &$limiter, || {
            $replace
        });
        let $limiter = $build(fixed());
        old_ticket_leaves_the_new_state_alone(concat!("fixed window, ", $what), &$limiter, || {
            $replace
        });
        let $limiter = $build(log());
        old_ticket_leaves_the_new_state_alone(concat!("log, ", $what), &$limiter, || $replace);
    }};
}

fn plain<A: Algorithm>(builder: Builder<A>) -> Limiter<A, String, ManualClock> {
    builder.clock(clock()).build().unwrap()
}

#[test]
fn reset_in_place_invalidates_old_tickets() {
    on_every_booking_limiter!("reset", |l| assert!(l.reset("a")), plain);
    let pair = bucket().and(fixed()).clock(clock()).build().unwrap();
    old_ticket_leaves_the_new_state_alone("pair, reset", &pair, || assert!(pair.reset("a")));
}

#[test]
fn remove_and_return_invalidates_old_tickets() {
    on_every_booking_limiter!("remove", |l| assert!(l.remove("a")), plain);
    let pair = bucket().and(fixed()).clock(clock()).build().unwrap();
    old_ticket_leaves_the_new_state_alone("pair, remove", &pair, || assert!(pair.remove("a")));
}

#[test]
fn sampled_eviction_at_a_full_cap_invalidates_old_tickets() {
    fn capped<A: Algorithm>(builder: Builder<A>) -> Limiter<A, String, ManualClock> {
        builder
            .max_clients(1)
            .overflow(Overflow::EvictSampled { sample: 1 })
            .clock(clock())
            .build()
            .unwrap()
    }
    // A new client at the full cap forgets `a`, booking and all.
    on_every_booking_limiter!(
        "sampled eviction",
        |l| {
            let _ = l.allow_request("z");
            assert_eq!(l.stats().evicted_live, 1);
        },
        capped
    );
    let pair = capped(bucket().and(fixed()));
    old_ticket_leaves_the_new_state_alone("pair, sampled eviction", &pair, || {
        let _ = pair.allow_request("z");
        assert_eq!(pair.stats().evicted_live, 1);
    });
}

#[test]
fn a_quota_change_invalidates_old_tickets() {
    let faster = Duration::from_nanos(50);
    let l = bucket().reconfigurable().clock(clock()).build().unwrap();
    old_ticket_leaves_the_new_state_alone("token bucket, set_quota", &l, || {
        l.set_quota(0, TokenBucket::builder().rate(1, faster).capacity(1))
            .unwrap();
    });
    let l = fixed().reconfigurable().clock(clock()).build().unwrap();
    old_ticket_leaves_the_new_state_alone("fixed window, set_quota", &l, || {
        l.set_quota(0, FixedWindow::builder().limit(1).window(faster))
            .unwrap();
    });
    let l = bucket()
        .and(fixed())
        .reconfigurable()
        .clock(clock())
        .build()
        .unwrap();
    old_ticket_leaves_the_new_state_alone("pair, set_quota", &l, || {
        l.set_quota(
            0,
            TokenBucket::builder()
                .rate(1, faster)
                .capacity(1)
                .and(FixedWindow::builder().limit(1).window(faster)),
        )
        .unwrap();
    });
}

/// A change from 1 per 100 ns to 1 per 50 ns keeps one new interval of
/// `B1`'s debt; three bookings later the new state is exactly the one `B1`
/// left. Cancelling `B1` then must not hand the third one's unit out again.
#[test]
fn a_quota_change_then_a_cancel_gives_back_nothing_of_the_new_quota() {
    let l = bucket().reconfigurable().clock(clock()).build().unwrap();
    assert!(l.allow_request("a"));
    let b1 = l.reserve("a", Duration::MAX).unwrap();
    l.set_quota(
        0,
        TokenBucket::builder()
            .rate(1, Duration::from_nanos(50))
            .capacity(1),
    )
    .unwrap();
    let mut after: Vec<_> = (0..3)
        .map(|_| l.reserve("a", Duration::MAX).unwrap())
        .collect();
    assert!(!b1.cancel(), "booked under the old quota");
    after.push(l.reserve("a", Duration::MAX).unwrap());
    let ready: Vec<u64> = after
        .iter()
        .map(|r| r.ready_at().as_nanos() as u64)
        .collect();
    assert!(
        ready.windows(2).all(|w| w[1] == w[0] + 50),
        "ready at {ready:?}: a unit of the new quota was handed out twice"
    );
    for r in after {
        r.commit();
    }
}

/// A cancel consumes its reservation: the second cancel (the drop that
/// follows) gives nothing back, even when a later booking has left the
/// very state the first one did.
#[test]
fn a_ticket_gives_back_once() {
    fn run<A: Reservable>(name: &str, limiter: &Limiter<A, String, ManualClock>) {
        spend(limiter, "a");
        let b1 = limiter.reserve("a", Duration::MAX).unwrap();
        let ready = b1.ready_at();
        assert!(b1.cancel(), "{name}: the tail goes back");
        let b2 = limiter.reserve("a", Duration::MAX).unwrap();
        assert_eq!(b2.ready_at(), ready, "{name}: the same slot again");
        b2.commit();
        let b3 = limiter.reserve("a", Duration::MAX).unwrap();
        assert!(b3.ready_at() > ready, "{name}: B2 stands");
        drop(b3);
        let b4 = limiter.reserve("a", Duration::MAX).unwrap();
        assert!(b4.ready_at() > ready, "{name}: B2 still stands");
        b4.commit();
    }
    run("token bucket", &plain(bucket()));
    run("fixed window", &plain(fixed()));
    run("log", &plain(log()));
    run("pair", &plain(bucket().and(fixed())));
}

mod interleaved {
    //! Bookings, cancels, checks, resets, removes and quota changes on
    //! three clients of a reconfigurable token bucket, against the exact
    //! bucket (`tests/common`) under the sequential rule of bookings: each
    //! client's standing admissions, in the order they were charged, each
    //! at the instant it executes. A replacement gives the client a new
    //! history; a cancel may give back only a booking that is the tail of
    //! its client's current history.

    use std::time::Duration;

    use crate::common::{BucketConfig, BucketModel, Model, Subject};
    use proptest::prelude::*;
    use tollgate::{Limiter, ManualClock, Reservation, Tiered, TokenBucket};

    type Bucket = Limiter<Tiered<TokenBucket>, u64, ManualClock>;

    /// The quotas the limiter switches between: 1 token per `per` ns.
    const QUOTAS: [BucketConfig; 3] = [
        BucketConfig {
            tokens: 1,
            per: 100,
            capacity: 2,
        },
        BucketConfig {
            tokens: 1,
            per: 50,
            capacity: 3,
        },
        BucketConfig {
            tokens: 1,
            per: 70,
            capacity: 2,
        },
    ];

    #[derive(Clone, Debug)]
    enum Op {
        Book { client: u64, cost: u64 },
        Check { client: u64, cost: u64 },
        Cancel { pick: usize },
        Commit { pick: usize },
        Reset { client: u64 },
        Remove { client: u64 },
        Quota { to: usize },
        Advance { ns: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        let client = 0..3u64;
        prop_oneof![
            6 => (client.clone(), 1..=2u64).prop_map(|(client, cost)| Op::Book { client, cost }),
            3 => (client.clone(), 1..=2u64).prop_map(|(client, cost)| Op::Check { client, cost }),
            5 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
            1 => any::<usize>().prop_map(|pick| Op::Commit { pick }),
            2 => client.clone().prop_map(|client| Op::Reset { client }),
            2 => client.prop_map(|client| Op::Remove { client }),
            1 => (0..QUOTAS.len()).prop_map(|to| Op::Quota { to }),
            3 => (0..400u64).prop_map(|ns| Op::Advance { ns }),
        ]
    }

    /// One client's history since its state was last replaced.
    #[derive(Debug)]
    struct History {
        /// The exact bucket the history starts from.
        base: BucketModel,
        /// (executes at, cost, booking id or `None` for a check).
        standing: Vec<(u64, u64, Option<usize>)>,
        /// Counts the replacements of this client's state.
        generation: u64,
        /// False once a quota change carried a state with bookings still
        /// waiting (the exact rule of that carry is not modelled here):
        /// until the next reset or remove, only the cancels are checked.
        modelled: bool,
    }

    impl History {
        fn new(base: BucketModel) -> Self {
            Self {
                base,
                standing: Vec::new(),
                generation: 0,
                modelled: true,
            }
        }

        fn model(&self) -> BucketModel {
            let mut model = self.base.clone();
            for &(at, cost, _) in &self.standing {
                assert!(model.admit(at, cost), "the model's own history conforms");
            }
            model
        }

        fn last(&self) -> u64 {
            self.standing.last().map_or(0, |s| s.0)
        }

        fn renew(&mut self, base: BucketModel) {
            self.base = base;
            self.standing.clear();
            self.generation += 1;
            self.modelled = true;
        }
    }

    struct Booked<'a> {
        client: usize,
        id: usize,
        generation: u64,
        /// Replacements of any client before the booking.
        replacements: u64,
        reservation: Reservation<'a, Tiered<TokenBucket>, u64, ManualClock>,
    }

    fn run(ops: &[Op]) {
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(1_000));
        let limiter: Bucket = QUOTAS[0]
            .builder(clock.clone())
            .reconfigurable()
            .build()
            .unwrap();
        let mut quota = QUOTAS[0];
        let mut clients: Vec<History> = (0..3).map(|_| History::new(quota.model())).collect();
        let mut booked: Vec<Booked<'_>> = Vec::new();
        let mut replacements = 0;
        for (id, op) in ops.iter().enumerate() {
            let now = tollgate::Clock::now_nanos(&clock);
            match *op {
                Op::Book { client, cost } => {
                    let r = limiter.reserve_n(&client, cost, Duration::MAX).unwrap();
                    let h = &mut clients[client as usize];
                    if h.modelled {
                        let from = now.max(h.last());
                        let ready = from + h.model().retry_after(from, cost);
                        assert_eq!(r.ready_at(), Duration::from_nanos(ready), "{op:?} at {now}");
                        h.standing.push((ready, cost, Some(id)));
                    }
                    booked.push(Booked {
                        client: client as usize,
                        id,
                        generation: h.generation,
                        replacements,
                        reservation: r,
                    });
                }
                Op::Check { client, cost } => {
                    let allowed = limiter.check_n(&client, cost).unwrap().is_allowed();
                    let h = &mut clients[client as usize];
                    if h.modelled {
                        let ok = now >= h.last() && h.model().admit(now, cost);
                        assert_eq!(allowed, ok, "{op:?} at {now}");
                        if ok {
                            h.standing.push((now, cost, None));
                        }
                    }
                }
                Op::Cancel { pick } if !booked.is_empty() => {
                    let b = booked.remove(pick % booked.len());
                    let gave = b.reservation.cancel();
                    let h = &mut clients[b.client];
                    let tail = matches!(
                        h.standing.last(),
                        Some(&(ready, _, Some(tail))) if tail == b.id && now < ready
                    );
                    let current = h.generation == b.generation;
                    if gave {
                        assert!(
                            current,
                            "booking {} gave back on a state it was not booked on",
                            b.id
                        );
                        if h.modelled {
                            assert!(tail, "booking {} gave back, not the tail", b.id);
                            h.standing.pop();
                        }
                    } else {
                        // Another client's replacement may share its stripe.
                        assert!(
                            !(h.modelled && current && tail) || replacements > b.replacements,
                            "booking {} was the tail of its state and gave nothing back",
                            b.id
                        );
                    }
                }
                Op::Commit { pick } if !booked.is_empty() => {
                    booked.remove(pick % booked.len()).reservation.commit();
                }
                Op::Cancel { .. } | Op::Commit { .. } => {}
                Op::Reset { client } => {
                    let _ = limiter.reset(&client);
                    clients[client as usize].renew(quota.model());
                    replacements += 1;
                }
                Op::Remove { client } => {
                    let _ = limiter.remove(&client);
                    clients[client as usize].renew(quota.model());
                    replacements += 1;
                }
                Op::Quota { to } => {
                    limiter.set_quota(0, QUOTAS[to].settings()).unwrap();
                    let new = QUOTAS[to].model();
                    for h in &mut clients {
                        let modelled = h.modelled && h.last() <= now;
                        let carried = h.model().convert(now, &new);
                        h.renew(carried);
                        h.modelled = modelled;
                    }
                    quota = QUOTAS[to];
                    replacements += 1;
                }
                Op::Advance { ns } => clock.advance(Duration::from_nanos(ns)),
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn cancels_give_back_only_on_the_state_they_booked_on(ops in prop::collection::vec(op(), 1..80)) {
            run(&ops);
        }
    }
}
