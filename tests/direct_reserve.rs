//! The direct limiter's bookings (`DirectLimiter::reserve_n`) against the
//! keyed limiter's on a single client, on one `ManualClock`: every
//! booking's answer (its ready time, wait and cost, or its error), every
//! check, peek and cancel, and after every step the quota both report,
//! equal decision by decision, for every algorithm that books ahead and
//! every pair of them. The keyed limiter's bookings are held to exact
//! models in `tests/reserve.rs`; this holds the direct limiter to them.

#![cfg(not(feature = "loom"))]

mod common;

use std::time::Duration;

use common::strategies::{bucket, window};
use common::{BucketConfig, Fixed, Log, Pair, Subject, WindowConfig};
use proptest::prelude::*;
use tollgate::{
    DirectLimiter, FixedWindow, Limiter, ManualClock, Reservable, Reservation, ReserveError,
    TokenBucket,
};

#[derive(Clone, Debug)]
enum Op {
    /// Let this many ns pass.
    Advance(u64),
    /// Step the clock back by this many ns (at most to 0).
    Back(u64),
    /// Book `cost` units, waiting at most `max_wait` ns (`None`: forever).
    Reserve {
        cost: u64,
        max_wait: Option<u64>,
    },
    /// `check_n` (a cost of 0 or above the capacity included).
    Check {
        cost: u64,
    },
    /// `allow_request` against `allow`.
    Allow,
    /// `peek_n`.
    Peek {
        cost: u64,
    },
    /// Of the reservations held, the one at `pick` modulo their number.
    Cancel {
        pick: usize,
    },
    Drop {
        pick: usize,
    },
    Commit {
        pick: usize,
    },
}

/// Steps on a limiter of capacity `capacity` whose token interval or
/// window is `unit` ns: costs from 0 to one above the capacity, gaps from
/// none to many units, and now and then a step back.
fn ops(capacity: u64, unit: u64) -> impl Strategy<Value = Vec<Op>> {
    let cost = 0..=capacity + 1;
    let op = prop_oneof![
        4 => prop_oneof![Just(0u64), 0..2 * unit, 0..8 * unit].prop_map(Op::Advance),
        1 => (0..2 * unit).prop_map(Op::Back),
        6 => (
            cost.clone(),
            prop_oneof![
                Just(None),
                Just(Some(0)),
                (0..4 * capacity * unit).prop_map(Some)
            ]
        )
            .prop_map(|(cost, max_wait)| Op::Reserve { cost, max_wait }),
        3 => cost.clone().prop_map(|cost| Op::Check { cost }),
        1 => Just(Op::Allow),
        1 => cost.prop_map(|cost| Op::Peek { cost }),
        3 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Drop { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Commit { pick }),
    ];
    prop::collection::vec(op, 1..80)
}

type Booked<'a, A> = (
    Reservation<'a, A, u64, ManualClock>,
    Reservation<'a, A, (), ManualClock>,
);

/// Runs `ops` on client 0 of `subject`'s keyed limiter and on its direct
/// limiter, both reading one clock, and fails at the first answer in
/// which they differ. Returns how many bookings were made and how many
/// cancels gave something back, so that callers can tell the scenarios
/// exercised both.
fn agree<S>(subject: &S, ops: Vec<Op>) -> Result<(usize, usize), TestCaseError>
where
    S: Subject,
    S::Algo: Reservable,
{
    let clock = ManualClock::new();
    let keyed: Limiter<S::Algo, u64, ManualClock> = subject.limiter(clock.clone());
    let direct: DirectLimiter<S::Algo, ManualClock> = subject.direct(clock.clone());
    // The keyed client is created at the clock's origin, as the direct
    // limiter's state is: a keyed state is judged no earlier than the
    // reading that created it (its eviction guard), so the two would
    // report different waits after a step back to before that reading.
    prop_assert_eq!(direct.allow(), keyed.allow_request(&0));
    let mut held: Vec<Booked<'_, S::Algo>> = Vec::new();
    let (mut booked, mut given_back) = (0, 0);
    let mut now = 0u64;
    for (step, op) in ops.into_iter().enumerate() {
        let ctx = format!("step {step} {op:?} at {now} ns, {subject:?}");
        match op {
            Op::Advance(by) => now += by,
            Op::Back(by) => now = now.saturating_sub(by),
            Op::Reserve { cost, max_wait } => {
                let max = max_wait.map_or(Duration::MAX, Duration::from_nanos);
                let want = keyed.reserve_n(&0, cost, max);
                let got = direct.reserve_n(cost, max);
                match (want, got) {
                    (Ok(want), Ok(got)) => {
                        prop_assert_eq!(got.ready_at(), want.ready_at(), "{}", ctx);
                        prop_assert_eq!(got.wait(), want.wait(), "{}", ctx);
                        prop_assert_eq!(got.cost(), want.cost(), "{}", ctx);
                        booked += 1;
                        held.push((want, got));
                    }
                    (Err(want), Err(got)) => prop_assert_eq!(got, want, "{}", ctx),
                    (want, got) => {
                        prop_assert!(false, "keyed {:?}, direct {:?}: {}", want, got, ctx)
                    }
                }
            }
            Op::Check { cost } => {
                prop_assert_eq!(direct.check_n(cost), keyed.check_n(&0, cost), "{}", ctx);
            }
            Op::Allow => {
                prop_assert_eq!(direct.allow(), keyed.allow_request(&0), "{}", ctx);
            }
            Op::Peek { cost } => {
                prop_assert_eq!(direct.peek_n(cost), keyed.peek_n(&0, cost), "{}", ctx);
            }
            Op::Cancel { pick } | Op::Drop { pick } | Op::Commit { pick } if !held.is_empty() => {
                let (want, got) = held.remove(pick % held.len());
                match op {
                    Op::Cancel { .. } => {
                        let want = want.cancel();
                        prop_assert_eq!(got.cancel(), want, "{}", ctx);
                        given_back += usize::from(want);
                    }
                    // What a drop gave back shows in the peek below.
                    Op::Drop { .. } => drop((want, got)),
                    _ => {
                        want.commit();
                        got.commit();
                    }
                }
            }
            Op::Cancel { .. } | Op::Drop { .. } | Op::Commit { .. } => {}
        }
        clock.set(Duration::from_nanos(now));
        // The state each left, as both report it, and each booking's view
        // of the clock.
        prop_assert_eq!(direct.peek(), keyed.peek(&0), "after {}", ctx);
        for (want, got) in &held {
            prop_assert_eq!(got.is_ready(), want.is_ready(), "after {}", ctx);
            prop_assert_eq!(got.remaining_wait(), want.remaining_wait(), "after {}", ctx);
        }
    }
    Ok((booked, given_back))
}

fn fixed() -> impl Strategy<Value = Fixed> {
    window().prop_map(Fixed)
}

fn log() -> impl Strategy<Value = Log> {
    window().prop_map(Log)
}

/// A subject and steps sized to it: `unit` is its token interval or window.
fn with_ops<S: Subject + Clone + 'static>(
    subject: impl Strategy<Value = S>,
    capacity: impl Fn(&S) -> u64 + 'static,
    unit: impl Fn(&S) -> u64 + 'static,
) -> impl Strategy<Value = (S, Vec<Op>)> {
    subject.prop_flat_map(move |s| {
        let ops = ops(capacity(&s), unit(&s).max(1));
        (Just(s), ops)
    })
}

fn bucket_unit(b: &BucketConfig) -> u64 {
    b.per / b.tokens
}

fn window_unit(w: &WindowConfig) -> u64 {
    // The strategies' windows reach an hour: a step of a few windows at
    // most, so that a scenario crosses some and waits on others.
    w.window
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn token_bucket_bookings_equal_the_keyed_limiters(
        (subject, ops) in with_ops(bucket(), |b| b.capacity, bucket_unit)
    ) {
        agree(&subject, ops)?;
    }

    #[test]
    fn fixed_window_bookings_equal_the_keyed_limiters(
        (subject, ops) in with_ops(fixed(), |f| f.0.limit, |f| window_unit(&f.0))
    ) {
        agree(&subject, ops)?;
    }

    #[test]
    fn sliding_log_bookings_equal_the_keyed_limiters(
        (subject, ops) in with_ops(log(), |l| l.0.limit, |l| window_unit(&l.0))
    ) {
        agree(&subject, ops)?;
    }

    #[test]
    fn bucket_and_window_bookings_equal_the_keyed_limiters(
        (subject, ops) in with_ops(
            (bucket(), fixed()).prop_map(|(b, f)| Pair(b, f)),
            |p| p.0.capacity.min(p.1 .0.limit),
            |p| bucket_unit(&p.0),
        )
    ) {
        agree(&subject, ops)?;
    }

    #[test]
    fn window_and_bucket_bookings_equal_the_keyed_limiters(
        (subject, ops) in with_ops(
            (fixed(), bucket()).prop_map(|(f, b)| Pair(f, b)),
            |p| p.0 .0.limit.min(p.1.capacity),
            |p| window_unit(&p.0 .0),
        )
    ) {
        agree(&subject, ops)?;
    }

    #[test]
    fn pairs_of_buckets_book_as_the_keyed_limiter(
        (subject, ops) in with_ops(
            (bucket(), bucket()).prop_map(|(a, b)| Pair(a, b)),
            |p| p.0.capacity.min(p.1.capacity),
            |p| bucket_unit(&p.0).max(bucket_unit(&p.1)),
        )
    ) {
        agree(&subject, ops)?;
    }

    #[test]
    fn pairs_of_windows_book_as_the_keyed_limiter(
        (subject, ops) in with_ops(
            (fixed(), fixed()).prop_map(|(a, b)| Pair(a, b)),
            |p| p.0 .0.limit.min(p.1 .0.limit),
            |p| window_unit(&p.0 .0).min(window_unit(&p.1 .0)),
        )
    ) {
        agree(&subject, ops)?;
    }
}

/// One fixed scenario per algorithm that books, cancels and waits, so that
/// a run that drew few such steps still compares them: the counts show
/// that bookings were made and some were given back.
#[test]
fn a_known_scenario_books_and_gives_back_on_every_algorithm() {
    let sec = 1_000_000_000;
    let script = || {
        vec![
            Op::Reserve {
                cost: 2,
                max_wait: Some(0),
            },
            Op::Reserve {
                cost: 1,
                max_wait: None,
            },
            Op::Reserve {
                cost: 2,
                max_wait: None,
            },
            Op::Check { cost: 1 },
            Op::Cancel { pick: 2 },
            Op::Cancel { pick: 0 },
            Op::Cancel { pick: 0 },
            Op::Advance(sec / 2),
            Op::Reserve {
                cost: 1,
                max_wait: Some(sec / 10),
            },
            Op::Reserve {
                cost: 1,
                max_wait: None,
            },
            Op::Back(sec / 4),
            Op::Drop { pick: 1 },
            Op::Advance(3 * sec),
            Op::Cancel { pick: 0 },
            Op::Reserve {
                cost: 3,
                max_wait: None,
            },
            Op::Reserve {
                cost: 0,
                max_wait: None,
            },
            Op::Commit { pick: 0 },
        ]
    };
    let bucket = BucketConfig {
        tokens: 2,
        per: sec,
        capacity: 2,
    };
    let window = WindowConfig {
        limit: 2,
        window: sec,
    };
    let counts = [
        agree(&bucket, script()).unwrap(),
        agree(&Fixed(window), script()).unwrap(),
        agree(&Log(window), script()).unwrap(),
        agree(&Pair(bucket, Fixed(window)), script()).unwrap(),
    ];
    for (booked, given_back) in counts {
        assert!(booked >= 4, "{counts:?}");
        assert!(given_back >= 1, "{counts:?}");
    }
}

/// A fixed window whose limit lies in the top half of its range cannot
/// book ahead: both limiters say so, and neither charges anything.
#[test]
fn a_fixed_window_too_large_to_book_is_unsupported_on_both() {
    let clock = ManualClock::new();
    let settings = || {
        FixedWindow::builder()
            .limit(3)
            .window(Duration::from_nanos(3))
            .clock(clock.clone())
    };
    let keyed = settings().build().unwrap();
    let direct = settings().build_direct().unwrap();
    assert_eq!(
        keyed.reserve("a", Duration::MAX).unwrap_err(),
        ReserveError::Unsupported
    );
    assert_eq!(
        direct.reserve(Duration::MAX).unwrap_err(),
        ReserveError::Unsupported
    );
    assert_eq!(direct.peek().remaining(), 3, "nothing charged");
}

/// Bookings on the one budget are served in the order they were made,
/// whoever makes them, and each cancel follows the tail rule: only the
/// newest booking goes back, so cancelling newest first gives every one
/// back.
#[test]
fn bookings_queue_on_the_one_budget_and_cancel_newest_first() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .capacity(1)
        .clock(clock.clone())
        .build_direct()
        .unwrap();
    assert!(limiter.allow());
    let waits: Vec<_> = (0..3)
        .map(|_| limiter.reserve(Duration::MAX).unwrap())
        .collect();
    assert_eq!(
        waits.iter().map(Reservation::wait).collect::<Vec<_>>(),
        [1, 2, 3].map(Duration::from_secs)
    );
    let mut waits = waits.into_iter();
    let (first, second, third) = (
        waits.next().unwrap(),
        waits.next().unwrap(),
        waits.next().unwrap(),
    );
    assert!(!first.cancel(), "later bookings were timed on top of it");
    assert!(third.cancel());
    assert!(second.cancel());
    // The first's second is lost; the others' came back.
    assert_eq!(limiter.peek().retry_after(), Duration::from_secs(2));
    // Once its time has come, a booking is consumed: dropping it changes
    // nothing.
    let due = limiter.reserve(Duration::MAX).unwrap();
    clock.advance(due.wait());
    drop(due);
    assert_eq!(limiter.peek().retry_after(), Duration::from_secs(1));
}

/// Bookings from many threads at one frozen instant: each one's ready time
/// is distinct, none is lost, and together they are exactly what the
/// bucket allows.
#[test]
fn eight_threads_booking_at_a_frozen_instant_are_served_one_after_another() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_millis(1))
        .capacity(1)
        .clock(clock)
        .build_direct()
        .unwrap();
    let mut ready: Vec<Duration> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    (0..100)
                        .map(|_| {
                            let booked = limiter.reserve(Duration::MAX).unwrap();
                            let at = booked.ready_at();
                            booked.commit();
                            at
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    ready.sort();
    let expected: Vec<_> = (0..800u64).map(Duration::from_millis).collect();
    assert_eq!(ready, expected);
}
