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

use std::time::Duration;

use tollgate::{
    Algorithm, Builder, FixedWindow, Limiter, ManualClock, Overflow, SlidingWindowLog, TokenBucket,
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
fn old_ticket_leaves_the_new_state_alone<A: Algorithm>(
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
    fn run<A: Algorithm>(name: &str, limiter: &Limiter<A, String, ManualClock>) {
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
