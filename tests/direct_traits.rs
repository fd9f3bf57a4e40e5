//! The direct limiter behind the crate's traits: `RateLimiter` and
//! `AsyncCheck` for any key type, the key ignored (one budget for every
//! key), so that it stands wherever a keyed limiter does; and, with the
//! `tower` feature, as the HTTP layer's limiter for a global limit.

#![cfg(not(feature = "loom"))]

use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    AsyncCheck, Both, CheckErrorKind, DirectLimiter, FixedWindow, Limiter, ManualClock, Quota,
    RateLimiter, Reservation, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};

/// Compiles only if `L` implements `RateLimiter<K>` (and is therefore
/// `Send + Sync`).
fn rate_limiter<K: ?Sized, L: RateLimiter<K>>() {}

/// Compiles only if `L` implements `AsyncCheck<K>`.
fn async_check<K: ?Sized, L: AsyncCheck<K>>() {}

/// "Every limiter implements `RateLimiter`", the README says: every
/// in-process limiter, keyed or direct, of every algorithm and clock, for
/// the default key type and any other.
#[test]
fn every_limiter_implements_the_traits() {
    rate_limiter::<str, Limiter<TokenBucket>>();
    rate_limiter::<str, DirectLimiter<TokenBucket>>();
    rate_limiter::<str, DirectLimiter<SlidingWindowCounter, ManualClock>>();
    rate_limiter::<u64, DirectLimiter<SlidingWindowLog, ManualClock>>();
    rate_limiter::<(), DirectLimiter<FixedWindow>>();
    rate_limiter::<[u8], DirectLimiter<Both<TokenBucket, FixedWindow>>>();
    async_check::<String, DirectLimiter<TokenBucket>>();
    async_check::<(), DirectLimiter<Both<SlidingWindowCounter, TokenBucket>, ManualClock>>();
    async_check::<str, Arc<DirectLimiter<FixedWindow>>>();
    // What a direct limiter hands out is `Send + Sync` too.
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Reservation<'static, TokenBucket, ()>>();
    send_sync::<Reservation<'static, Both<TokenBucket, FixedWindow>, (), ManualClock>>();
    send_sync::<Reservation<'static, SlidingWindowLog, (), ManualClock>>();
}

fn second(limit: u64, clock: &ManualClock) -> DirectLimiter<FixedWindow, ManualClock> {
    FixedWindow::builder()
        .limit(limit)
        .window(Duration::from_secs(1))
        .clock(clock.clone())
        .build_direct()
        .unwrap()
}

/// Behind `dyn RateLimiter`, beside keyed limiters: one piece of
/// middleware runs unchanged; the keyed limiter counts per client, the
/// direct one counts every client against one budget.
#[test]
fn a_direct_limiter_behind_dyn_rate_limiter_is_one_budget_for_every_key() {
    let clock = ManualClock::new();
    let per_client = FixedWindow::builder()
        .limit(2)
        .window(Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let limiters: Vec<Arc<dyn RateLimiter>> =
        vec![Arc::new(per_client), Arc::new(second(2, &clock))];
    let middleware = |limiter: &dyn RateLimiter, client: &str| limiter.allow_request(client);
    let admitted = |limiter: &Arc<dyn RateLimiter>| {
        ["alice", "bob", "alice", "bob", "carol"].map(|client| middleware(limiter.as_ref(), client))
    };
    assert_eq!(admitted(&limiters[0]), [true, true, true, true, true]);
    assert_eq!(admitted(&limiters[1]), [true, true, false, false, false]);
    clock.advance(Duration::from_secs(1));
    assert!(limiters[1].allow_request("dave"), "the next window");
    // Through the trait, a request is recorded as by `allow`.
    let direct = second(1, &clock);
    assert!(RateLimiter::<u64>::allow_request(&direct, &7));
    assert!(!direct.allow(), "the trait's admission was recorded");
}

/// Through `AsyncCheck`, for any key: the same decisions as `check_n`,
/// every key on one budget, a cost of 0 admitted without recording, a cost
/// above the capacity the `Cost` error (charging nothing), and the quota
/// and name the limiter reports.
#[test]
fn async_check_answers_as_the_direct_limiter_for_every_key() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(3, Duration::from_secs(60))
        .name("upstream")
        .clock(clock.clone())
        .build_direct()
        .unwrap();
    let twin = TokenBucket::builder()
        .rate(3, Duration::from_secs(60))
        .clock(clock.clone())
        .build_direct()
        .unwrap();
    let ask = |key: &str, cost| AsyncCheck::<str>::check(&limiter, key, cost).into_inner();
    assert_eq!(ask("alice", 2).unwrap(), twin.check_n(2).unwrap());
    assert_eq!(ask("bob", 0).unwrap(), twin.check_n(0).unwrap());
    assert_eq!(ask("bob", 0).unwrap().remaining(), 1, "0 records nothing");
    let err = ask("carol", 4).unwrap_err();
    assert_eq!(err.kind(), CheckErrorKind::Cost);
    assert_eq!(ask("dave", 1).unwrap(), twin.check());
    assert!(
        ask("erin", 1).unwrap().is_denied(),
        "all keys spent one budget"
    );
    assert_eq!(ask("erin", 1).unwrap(), twin.check());
    // Any key type, the same budget.
    let by_number = AsyncCheck::<u64>::check(&limiter, &9, 1)
        .into_inner()
        .unwrap();
    assert!(by_number.is_denied());
    assert_eq!(
        AsyncCheck::<str>::quota(&limiter),
        Quota::new(3, Duration::from_secs(60))
    );
    assert_eq!(limiter.quota(), Quota::new(3, Duration::from_secs(60)));
    assert_eq!(AsyncCheck::<str>::name(&limiter), "upstream");
    // An `Arc` of one answers the same.
    let shared = Arc::new(second(1, &clock));
    let asked = AsyncCheck::<()>::check(&shared, &(), 1)
        .into_inner()
        .unwrap();
    assert!(asked.is_allowed());
    assert!(shared.peek().is_denied());
}

/// With the `tower` feature: a direct limiter as `RateLimitLayer`'s
/// limiter with `GlobalKey`, one budget for every request through the
/// layer, whatever its client; the headers carry its quota.
#[cfg(feature = "tower")]
mod layer {
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::time::Duration;

    use http::{Request, Response, StatusCode};
    use tollgate::tower::{GlobalKey, PeerIp, RateLimitLayer};
    use tollgate::{ManualClock, TokenBucket};
    use tower::{service_fn, Layer, ServiceExt};

    fn request_from(peer: &str) -> Request<String> {
        let mut request = Request::new(String::new());
        request
            .extensions_mut()
            .insert(peer.parse::<SocketAddr>().unwrap());
        request
    }

    #[test]
    fn a_direct_limiter_is_a_global_limit_behind_the_layer() {
        let clock = ManualClock::new();
        let everyone = TokenBucket::builder()
            .rate(2, Duration::from_secs(60))
            .clock(clock.clone())
            .build_direct()
            .unwrap();
        let layer = RateLimitLayer::new(everyone, GlobalKey);
        let service = layer.layer(service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::from("hello")))
        }));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let responses = runtime.block_on(async {
            let mut responses = Vec::new();
            for peer in ["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"] {
                responses.push(service.clone().oneshot(request_from(peer)).await.unwrap());
            }
            responses
        });
        let statuses: Vec<_> = responses.iter().map(Response::status).collect();
        assert_eq!(
            statuses,
            [
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::TOO_MANY_REQUESTS
            ],
            "three clients, one budget of 2"
        );
        let policy = responses[0].headers()["ratelimit-policy"].to_str().unwrap();
        assert_eq!(policy, "\"default\";q=2;w=60");
        assert_eq!(layer.limiter().quota().limit(), 2);
        assert!(layer.limiter().peek().is_denied(), "the layer spent it");
        // Any extractor's key is ignored as well: peers keyed by address
        // still share the one budget.
        let by_peer = RateLimitLayer::new(
            TokenBucket::builder()
                .rate(1, Duration::from_secs(60))
                .clock(clock)
                .build_direct()
                .unwrap(),
            PeerIp::new(),
        );
        let service = by_peer.layer(service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
        let statuses = runtime.block_on(async {
            let mut statuses = Vec::new();
            for peer in ["10.0.0.1:1", "10.0.0.2:1"] {
                let response = service.clone().oneshot(request_from(peer)).await.unwrap();
                statuses.push(response.status());
            }
            statuses
        });
        assert_eq!(statuses, [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS]);
    }
}
