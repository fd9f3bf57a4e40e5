//! Bookings on Redis against a real `redis-server` (see `redis_server`):
//! waiting for capacity, a booking dropped before its time, bookings
//! served in the order they were made across limiters, and what each
//! fail policy does with a booking while Redis is down.

mod redis_server;

use std::time::{Duration, Instant};

use redis_server::{prefix, runtime, Patient, Server, HOUR};
use tollgate::redis::{FailPolicy, RedisReserveError};
use tollgate::{CheckErrorKind, FixedWindow, ReserveError, SlidingWindowLog, TokenBucket};

/// `until_ready` waits for the booking's instant and not longer than a
/// loaded machine makes it: at 10 per second with a bucket of 1, the
/// first call is at once, each next one a tenth of a second later.
#[test]
fn until_ready_waits_for_the_booking() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let limiter = TokenBucket::builder()
            .rate(10, Duration::from_secs(1))
            .capacity(1)
            .redis(server.manager().await, prefix("ready"))
            .patient()
            .fail_policy(FailPolicy::FailClosed)
            .build()
            .unwrap();
        let started = Instant::now();
        for _ in 0..4 {
            limiter.until_ready("c").await.unwrap();
        }
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
        // The last booking is spent: a check now is denied.
        assert!(limiter.check("c").await.unwrap().is_denied());
        let err = limiter.until_ready_n("c", 2).await.unwrap_err();
        assert!(
            matches!(err, RedisReserveError::Reserve(ReserveError::Cost(_))),
            "{err}"
        );
    });
}

/// A booking dropped before its time is cancelled in the background, and
/// one cancelled gives its charge back: the next booking waits as long as
/// the dropped one would have, not twice as long.
#[test]
fn a_booking_dropped_before_its_time_gives_its_charge_back() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let limiter = TokenBucket::builder()
            .rate(1, HOUR)
            .redis(server.manager().await, prefix("drop"))
            .patient()
            .fail_policy(FailPolicy::FailClosed)
            .build()
            .unwrap();
        let first = limiter.reserve("c", Duration::MAX).await.unwrap();
        assert_eq!(first.wait(), Duration::ZERO);
        first.commit();
        let second = limiter.reserve("c", Duration::MAX).await.unwrap();
        let wait = second.wait();
        assert!(wait > Duration::from_secs(3_590), "{wait:?}");
        drop(second);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let third = limiter.reserve("c", Duration::MAX).await.unwrap();
        assert!(third.wait() <= wait, "{:?} after {wait:?}", third.wait());
        assert!(third.cancel().await.unwrap(), "nothing was charged since");
        let bounded = limiter.reserve("c", Duration::from_secs(60)).await;
        assert!(
            matches!(
                bounded,
                Err(RedisReserveError::Reserve(ReserveError::TooLong { .. }))
            ),
            "{bounded:?}"
        );
    });
}

/// Two limiters (two processes, say) booking on one log are served in the
/// order they booked; a cancel gives back only what no later booking has
/// claimed.
#[test]
fn log_bookings_are_served_in_the_order_they_were_made() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let conn = server.manager().await;
        let log = || {
            SlidingWindowLog::builder()
                .limit(2)
                .window(HOUR)
                .redis(conn.clone(), prefix("logbook"))
                .patient()
                .fail_policy(FailPolicy::FailClosed)
                .no_deny_shortcut()
                .build()
                .unwrap()
        };
        let (a, b) = (log(), log());
        assert!(a.check_n("c", 2).await.unwrap().is_allowed());
        let first = a.reserve("c", Duration::MAX).await.unwrap();
        let second = b.reserve("c", Duration::MAX).await.unwrap();
        assert!(first.wait() > Duration::from_secs(3_590));
        // Both admissions' room frees at once: both are ready then, the
        // second no earlier than the first.
        assert!(
            second.ready_at() >= first.ready_at(),
            "{second:?} before {first:?}"
        );
        // The second booking claimed the other admission's room: the
        // first gives back its own entry, and the admission it replaced.
        assert!(first.cancel().await.unwrap());
        second.commit();
        let d = a.check("c").await.unwrap();
        assert!(d.is_denied(), "{d:?}");
    });
}

/// With Redis down, a booking is answered by the fail policy: ready at
/// once and charged nowhere (`FailOpen`), an error (`FailClosed`), or
/// booked, for good, by the in-process fallback (`Local`).
#[test]
fn each_fail_policy_answers_a_booking_while_redis_is_down() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let build = |policy| {
        let server = &server;
        rt.block_on(async move {
            FixedWindow::builder()
                .limit(1)
                .window(HOUR)
                .redis(server.manager().await, prefix(&format!("down{policy:?}")))
                .timeout(Duration::from_millis(200))
                .fail_policy(policy)
                .build()
                .unwrap()
        })
    };
    let (open, closed, local) = (
        build(FailPolicy::FailOpen),
        build(FailPolicy::FailClosed),
        build(FailPolicy::Local),
    );
    server.stop();
    rt.block_on(async {
        for _ in 0..3 {
            let booked = open.reserve("c", Duration::ZERO).await.unwrap();
            assert_eq!(booked.wait(), Duration::ZERO);
            assert!(!booked.cancel().await.unwrap(), "nothing to give back");
        }
        let err = closed.reserve("c", Duration::ZERO).await.unwrap_err();
        let RedisReserveError::Check(err) = err else {
            panic!("{err:?}")
        };
        assert!(
            matches!(
                err.kind(),
                CheckErrorKind::Timeout | CheckErrorKind::Unavailable
            ),
            "{err}"
        );
        let booked = local.reserve("c", Duration::ZERO).await.unwrap();
        assert_eq!(booked.wait(), Duration::ZERO);
        booked.commit();
        let err = local.reserve("c", Duration::ZERO).await.unwrap_err();
        assert!(
            matches!(
                err,
                RedisReserveError::Reserve(ReserveError::TooLong { .. })
            ),
            "the fallback's window is spent: {err}"
        );
        assert_eq!(local.stats().fail_local, 2);
    });
}

/// A booking made before a quota change gives nothing back: the change
/// carried the client's state, booking included, by the move rule, and a
/// cancel then would give back to a state it never wrote. Cancelled after
/// `set_quota`, a booking still ahead answers `false` and the client keeps
/// what the change left it; one made after the change gives its charge
/// back.
#[test]
fn a_booking_made_before_a_quota_change_gives_nothing_back() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let bucket = |tokens| TokenBucket::builder().rate(tokens, HOUR);
        let limiter = bucket(4)
            .redis(server.manager().await, prefix("bookchange"))
            .patient()
            .fail_policy(FailPolicy::FailClosed)
            .no_deny_shortcut()
            .build()
            .unwrap();
        assert!(limiter.check_n("c", 4).await.unwrap().is_allowed());
        let ahead = limiter.reserve("c", Duration::MAX).await.unwrap();
        assert!(
            ahead.wait() > Duration::from_secs(800),
            "{:?}",
            ahead.wait()
        );
        limiter.set_quota(0, bucket(5)).unwrap();
        // The wait, read again on Redis's clock, which runs on meanwhile:
        // the same instant, but for at most a second.
        let wait = limiter.peek("c").await.unwrap().retry_after();
        let same = |then: Duration| then <= wait && wait - then < Duration::from_secs(1);
        assert!(!ahead.cancel().await.unwrap(), "given back after a change");
        let then = limiter.peek("c").await.unwrap().retry_after();
        assert!(same(then), "{then:?} after {wait:?}");
        let after = limiter.reserve("c", Duration::MAX).await.unwrap();
        // Ready when a check would next pass; given back, that stays so.
        assert!(same(after.wait()), "{:?} after {wait:?}", after.wait());
        assert!(after.cancel().await.unwrap(), "booked after the change");
        let then = limiter.peek("c").await.unwrap().retry_after();
        assert!(same(then), "{then:?} after {wait:?}");
    });
}
