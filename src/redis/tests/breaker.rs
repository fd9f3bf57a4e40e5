//! The breaker tells a slow reply from an unreachable Redis: a call that
//! times out while Redis answers another opens nothing, and one that
//! times out with no reply since it was sent opens the breaker.

use core::future::{pending, poll_fn, Future};
use core::pin::pin;
use core::task::Poll;
use core::time::Duration;
use std::sync::Arc;

use super::testing::{runtime, Server, PATIENCE};
use crate::check::CheckErrorKind;
use crate::redis::check::decide::Failure;
use crate::redis::FailPolicy;
use crate::TokenBucket;

#[test]
fn a_timeout_while_redis_answers_another_call_opens_nothing() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        // The limiter's own calls wait as long as a loaded machine needs;
        // the calls under test get their own short deadlines, and the
        // breaker, once open, stays open for the rest of the test.
        let limiter = TokenBucket::builder()
            .rate(10, Duration::from_secs(1))
            .redis(server.manager().await, "slow-reply")
            .fail_policy(FailPolicy::FailClosed)
            .timeout(PATIENCE)
            .backoff(Duration::from_secs(600), Duration::from_secs(600))
            .build()
            .unwrap();
        let inner = Arc::clone(&limiter.inner);
        let short = || tokio::time::Instant::now() + Duration::from_millis(50);
        // A call whose reply never comes, sent first (polled once, so
        // that its send instant is taken)...
        let deadline = short();
        let mut slow =
            pin!(inner.guarded_until(deadline, false, b"k", pending::<Result<(), Failure>>()));
        assert!(poll_fn(|cx| Poll::Ready(slow.as_mut().poll(cx).is_pending())).await);
        // ...while Redis answers another...
        assert!(limiter.check("a").await.unwrap().is_allowed());
        // ...and only then its deadline passes: however long that answer
        // took, it came while the slow call waited.
        tokio::time::sleep_until(deadline).await;
        let err = slow.await.unwrap_err();
        assert_eq!(err.kind(), CheckErrorKind::Timeout);
        let s = limiter.stats();
        assert_eq!((s.timeouts, s.breaker_opened), (1, 0), "{s:?}");
        // The next check still goes to Redis.
        assert!(limiter.check("a").await.unwrap().is_allowed());
        assert_eq!(limiter.stats().fail_closed, 0, "{:?}", limiter.stats());

        // A call that times out with no reply since it was sent: Redis is
        // unreachable as far as this limiter can tell.
        let work = pending::<Result<(), Failure>>();
        let err = inner
            .guarded_until(short(), false, b"k", work)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), CheckErrorKind::Timeout);
        let s = limiter.stats();
        assert_eq!((s.timeouts, s.breaker_opened), (2, 1), "{s:?}");
        let held_back = limiter.check("a").await.unwrap_err();
        assert_eq!(held_back.kind(), CheckErrorKind::Unavailable, "{held_back}");
    });
}
