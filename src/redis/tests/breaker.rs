//! The breaker tells a slow reply from an unreachable Redis: a call that
//! times out while Redis answers another opens nothing, and one that
//! times out with no reply since it was sent opens the breaker.

use core::future::pending;
use core::time::Duration;
use std::sync::Arc;

use super::testing::{runtime, Server};
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
        let limiter = TokenBucket::builder()
            .rate(10, Duration::from_secs(1))
            .redis(server.manager().await, "slow-reply")
            .fail_policy(FailPolicy::FailClosed)
            .timeout(Duration::from_millis(200))
            .build()
            .unwrap();
        let inner = Arc::clone(&limiter.inner);
        // A call whose reply never comes, sent first...
        let slow = tokio::spawn({
            let inner = Arc::clone(&inner);
            async move {
                let work = pending::<Result<(), Failure>>();
                inner
                    .guarded_until(inner.deadline(), false, b"k", work)
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        // ...while Redis answers another.
        assert!(limiter.check("a").await.unwrap().is_allowed());
        let err = slow.await.unwrap().unwrap_err();
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
            .guarded_until(inner.deadline(), false, b"k", work)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), CheckErrorKind::Timeout);
        let s = limiter.stats();
        assert_eq!((s.timeouts, s.breaker_opened), (2, 1), "{s:?}");
        let held_back = limiter.check("a").await.unwrap_err();
        assert_eq!(held_back.kind(), CheckErrorKind::Unavailable, "{held_back}");
    });
}
