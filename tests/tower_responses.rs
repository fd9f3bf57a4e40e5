//! The responses the layer sends itself: a `503` that tells the client
//! nothing internal while operators hear the cause, and responses the
//! server builds with `respond_with`. Time is a `ManualClock`.

// Plain `cargo test --features tower` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderName, Request, Response, StatusCode};
use tollgate::tower::{HeaderKey, PeerIp, RateLimitLayer, Refusal};
use tollgate::{
    AsyncCheck, CheckError, CheckErrorKind, Decision, FixedWindow, ManualClock, Quota, TokenBucket,
};
use tower::{service_fn, Layer, Service, ServiceExt};

type Body = String;

async fn ok(_: Request<Body>) -> Result<Response<Body>, Infallible> {
    Ok(Response::new(String::from("ok")))
}

fn run<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn from(peer: &str) -> Request<Body> {
    let mut request = Request::get("/orders").body(String::new()).unwrap();
    let peer: SocketAddr = peer.parse().unwrap();
    request.extensions_mut().insert(peer);
    request
}

async fn send<S>(service: &S, request: Request<Body>) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
{
    service.clone().oneshot(request).await.unwrap()
}

/// What a shared store's failure can say: its reply, the script's SHA,
/// the limiter's key names and the client's own key.
const INTERNALS: &str = "NOSCRIPT No matching script (sha 3f1c0a9e) for key \
     rl:{tenant}:api-key-s3cr3t at redis://10.1.2.3:6379";

/// A limiter that always fails, with [`INTERNALS`] as the cause.
#[derive(Debug)]
struct Down;

impl AsyncCheck<IpAddr> for Down {
    type Future = Ready<Result<Decision, CheckError>>;
    fn check(&self, _: &IpAddr, _: u64) -> Self::Future {
        ready(Err(CheckError::new(INTERNALS)))
    }
    fn quota(&self) -> Quota {
        Quota::new(10, Duration::from_secs(60))
    }
}

#[test]
fn a_503_says_nothing_internal() {
    run(async {
        let service = RateLimitLayer::new(Down, PeerIp::new()).layer(service_fn(ok));
        let r = send(&service, from("192.0.2.1:1")).await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        for secret in ["NOSCRIPT", "3f1c0a9e", "rl:", "s3cr3t", "redis", "10.1.2.3"] {
            assert!(!r.body().contains(secret), "{secret} in {}", r.body());
        }
        assert!(r.body().contains("try again later"), "{}", r.body());
        assert!(!r.headers().contains_key("ratelimit"));
    });
}

#[test]
fn operators_hear_the_cause_through_on_check_error() {
    run(async {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&heard);
        let service = RateLimitLayer::new(Down, PeerIp::new())
            .on_check_error(move |error, request| {
                log.lock().unwrap().push(format!(
                    "{} {:?} {error}",
                    request.uri.path(),
                    error.kind()
                ));
            })
            .layer(service_fn(ok));
        for _ in 0..2 {
            let r = send(&service, from("192.0.2.1:1")).await;
            assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert!(!r.body().contains("s3cr3t"));
        }
        let heard = heard.lock().unwrap();
        assert_eq!(heard.len(), 2);
        assert_eq!(
            heard[0],
            format!(
                "/orders {:?} rate limit check failed: {INTERNALS}",
                CheckErrorKind::Other
            )
        );
    });
}

/// One hook builds every refusal: the limiter's, a failed check's and an
/// extractor's. The layer still sets the rate-limit headers and
/// `Retry-After` on a refusal by the limiter, whatever the hook wrote.
#[test]
fn respond_with_builds_every_refusal() {
    run(async {
        let clock = ManualClock::new();
        let limiter = FixedWindow::builder()
            .limit(2)
            .window(Duration::from_secs(60))
            .clock(clock.clone())
            .build()
            .unwrap();
        let hook = |refusal: &Refusal<'_>, request: &http::request::Parts| {
            let body = match refusal {
                Refusal::Limited {
                    decision,
                    retry_after,
                    policy,
                } => format!(
                    "limited {policy} {} {} {}",
                    decision.limit(),
                    decision.remaining(),
                    retry_after.as_secs()
                ),
                Refusal::Unavailable { error } => format!("unavailable {:?}", error.kind()),
                Refusal::Rejected { rejection } => format!("rejected {}", rejection.status()),
                _ => unreachable!(),
            };
            let mut response = Response::new(body);
            *response.status_mut() = match refusal {
                Refusal::Limited { .. } => StatusCode::SERVICE_UNAVAILABLE,
                other => other.status(),
            };
            // The layer overrides what it owns.
            response
                .headers_mut()
                .insert("retry-after", "0".parse().unwrap());
            assert_eq!(request.uri.path(), "/orders");
            response
        };
        let key = HeaderKey::new(HeaderName::from_static("x-api-key"));
        let service = RateLimitLayer::new(limiter, key)
            .respond_with(hook)
            .layer(service_fn(ok));
        let keyed = || {
            Request::get("/orders")
                .header("x-api-key", "k")
                .body(String::new())
                .unwrap()
        };
        assert_eq!(send(&service, keyed()).await.status(), 200);
        assert_eq!(send(&service, keyed()).await.status(), 200);
        let limited = send(&service, keyed()).await;
        assert_eq!(limited.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(limited.body(), "limited default 2 0 60");
        assert_eq!(limited.headers()["retry-after"], "60");
        assert_eq!(limited.headers()["ratelimit"], "\"default\";r=0;t=60");
        assert_eq!(
            limited.headers()["ratelimit-policy"],
            "\"default\";q=2;w=60"
        );

        let anonymous = Request::get("/orders").body(String::new()).unwrap();
        let rejected = send(&service, anonymous).await;
        assert_eq!(rejected.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(rejected.body(), "rejected 401 Unauthorized");
        assert!(!rejected.headers().contains_key("ratelimit"));

        let down = RateLimitLayer::new(Down, PeerIp::new())
            .respond_with(hook)
            .layer(service_fn(ok));
        let unavailable = send(&down, from("192.0.2.1:1")).await;
        assert_eq!(unavailable.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(unavailable.body(), "unavailable Other");
    });
}

/// Without a hook, and through `Refusal::default_response` in one, the
/// default 429 is problem+json naming the quota and the wait.
#[test]
fn the_default_response_is_problem_json() {
    run(async {
        let limiter = TokenBucket::builder()
            .rate(1, Duration::from_secs(30))
            .key_type::<IpAddr>()
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let layer = RateLimitLayer::new(limiter, PeerIp::new());
        let plain = layer.clone().layer(service_fn(ok));
        let hooked = layer
            .respond_with(|refusal, request| refusal.default_response(request))
            .layer(service_fn(ok));
        assert_eq!(send(&plain, from("192.0.2.1:1")).await.status(), 200);
        for service in [&plain, &hooked] {
            let r = send(service, from("192.0.2.1:1")).await;
            assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(r.headers()["content-type"], "application/problem+json");
            assert_eq!(r.headers()["retry-after"], "30");
            assert!(
                r.body()
                    .contains("The rate limit of 1 requests per 30 s is exhausted; retry after the delay this response's headers give."),
                "{}",
                r.body()
            );
        }
    });
}

/// A gRPC call refused by a client held to two limits: HTTP 200, status 8,
/// and a `QuotaFailure` naming only the limit that ran out; the content
/// type (gRPC-Web here) is the request's own.
#[test]
fn a_grpc_refusal_names_the_limit_that_ran_out() {
    run(async {
        let pair = FixedWindow::builder()
            .limit(1)
            .window(Duration::from_secs(1))
            .and(
                FixedWindow::builder()
                    .limit(5)
                    .window(Duration::from_secs(60)),
            )
            .key_type::<IpAddr>()
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let service = RateLimitLayer::new(pair, PeerIp::new())
            .policy_name("api")
            .unwrap()
            .layer(service_fn(ok));
        let call = || {
            let mut request = from("192.0.2.1:1");
            *request.method_mut() = http::Method::POST;
            request.headers_mut().insert(
                "content-type",
                "application/grpc-web+proto".parse().unwrap(),
            );
            request
        };
        assert_eq!(send(&service, call()).await.status(), StatusCode::OK);
        let refused = send(&service, call()).await;
        assert_eq!(refused.status(), StatusCode::OK);
        assert!(refused.body().is_empty());
        let headers = refused.headers();
        assert_eq!(headers["content-type"], "application/grpc-web+proto");
        assert_eq!(headers["grpc-status"], "8");
        assert_eq!(headers["retry-after"], "1");
        let status = tonic::Status::from_header_map(headers).unwrap();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        use tonic_types::StatusExt;
        let failure = status.get_details_quota_failure().unwrap();
        let ids: Vec<&str> = failure
            .violations
            .iter()
            .map(|v| v.quota_id.as_str())
            .collect();
        assert_eq!(ids, ["api-1"]);
        assert_eq!(failure.violations[0].description, "1 requests per 1 s");
        assert_eq!(
            status.get_details_retry_info().unwrap().retry_delay,
            Some(Duration::from_secs(1))
        );
        // The same refusal to a plain HTTP client is a 429.
        let plain = send(&service, from("192.0.2.1:1")).await;
        assert_eq!(plain.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(plain.headers()["content-type"], "application/problem+json");
    });
}
