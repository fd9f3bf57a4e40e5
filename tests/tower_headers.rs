//! The layer's headers tell the whole truth: stacked layers each keep
//! their list member, a client held to two limits sees each as its own
//! policy item, a window is never advertised shorter than it is, and the
//! 429 body states the quota in force; and CORS preflights under axum's
//! `route_layer`, limited by default and exempt on request. Time is a
//! `ManualClock`.

// Plain `cargo test --features tower` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tollgate::tower::{is_preflight, Extraction, KeyFn, RateLimitLayer};
use tollgate::{FixedWindow, Limiter, ManualClock, TokenBucket};
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

/// Every request is the one client "c".
fn one_client() -> KeyFn<impl Fn(&http::request::Parts) -> Extraction<String> + Clone> {
    KeyFn::new(|_: &http::request::Parts| Extraction::Key(String::from("c")))
}

async fn send<S>(service: &S) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
{
    let request = Request::get("/").body(String::new()).unwrap();
    service.clone().oneshot(request).await.unwrap()
}

/// An RFC 9651 List of Items, each a String with integer parameters,
/// from every line of header `name` (lines join into one list).
fn items(response: &Response<Body>, name: &str) -> Vec<(String, Vec<(String, i64)>)> {
    let lines: Vec<&str> = response
        .headers()
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    let joined = lines.join(", ");
    let list: sfv::List = sfv::Parser::new(&joined)
        .parse()
        .unwrap_or_else(|e| panic!("{joined:?} is not a structured list: {e}"));
    list.iter()
        .map(|entry| {
            let sfv::ListEntry::Item(item) = entry else {
                panic!("{joined:?} holds an inner list")
            };
            let name = item.bare_item.as_string().expect("a String").as_str();
            let params = item
                .params
                .iter()
                .filter_map(|(k, v)| Some((k.as_str().to_owned(), i64::from(v.as_integer()?))))
                .collect();
            (name.to_owned(), params)
        })
        .collect()
}

fn param(params: &[(String, i64)], key: &str) -> i64 {
    params.iter().find(|(k, _)| k == key).unwrap().1
}

/// Each item of `name` as (policy, [the named parameters]).
fn figures(response: &Response<Body>, name: &str, keys: [&str; 2]) -> Vec<(String, [i64; 2])> {
    items(response, name)
        .into_iter()
        .map(|(n, p)| (n, [param(&p, keys[0]), param(&p, keys[1])]))
        .collect()
}

/// A fixed window of `limit` per `secs` on `clock`.
fn window(clock: &ManualClock, limit: u64, secs: u64) -> Limiter<FixedWindow, String, ManualClock> {
    FixedWindow::builder()
        .limit(limit)
        .window(Duration::from_secs(secs))
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// Every request is the one client "c", as a function.
fn client(_: &http::request::Parts) -> Extraction<String> {
    Extraction::Key(String::from("c"))
}

type Named = RateLimitLayer<
    Limiter<FixedWindow, String, ManualClock>,
    KeyFn<fn(&http::request::Parts) -> Extraction<String>>,
>;

/// A layer over one client, named `name`.
fn named(limiter: Limiter<FixedWindow, String, ManualClock>, name: &str) -> Named {
    let client: fn(&http::request::Parts) -> Extraction<String> = client;
    RateLimitLayer::new(limiter, KeyFn::new(client))
        .policy_name(name)
        .unwrap()
}

#[test]
fn stacked_layers_each_keep_their_list_member() {
    run(async {
        let clock = ManualClock::new();
        let window = |limit, secs| window(&clock, limit, secs);
        let inner = named(window(2, 60), "permin");
        let outer = named(window(100, 3600), "perhr");
        let service = outer.layer(inner.layer(service_fn(ok)));
        let policies = vec![
            ("permin".to_owned(), [2, 60]),
            ("perhr".to_owned(), [100, 3600]),
        ];
        let first = send(&service).await;
        assert_eq!(first.status(), StatusCode::OK);
        assert_eq!(figures(&first, "ratelimit-policy", ["q", "w"]), policies);
        assert_eq!(
            figures(&first, "ratelimit", ["r", "t"]),
            vec![
                ("permin".to_owned(), [1, 60]),
                ("perhr".to_owned(), [99, 3600])
            ]
        );
        let _ = send(&service).await;
        let third = send(&service).await;
        assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(third.headers()["retry-after"], "60");
        assert_eq!(figures(&third, "ratelimit-policy", ["q", "w"]), policies);
        // The refusing policy's member stays, with r=0.
        assert_eq!(
            figures(&third, "ratelimit", ["r", "t"]),
            vec![
                ("permin".to_owned(), [0, 60]),
                ("perhr".to_owned(), [97, 3600])
            ]
        );
    });
}

#[test]
fn a_client_held_to_two_limits_sees_each_as_its_own_item() {
    run(async {
        let clock = ManualClock::new();
        let pair = FixedWindow::builder()
            .limit(3)
            .window(Duration::from_secs(1))
            .and(
                FixedWindow::builder()
                    .limit(5)
                    .window(Duration::from_secs(60)),
            )
            .clock(clock.clone())
            .build()
            .unwrap();
        let service = RateLimitLayer::new(pair, one_client()).layer(service_fn(ok));
        // (status, first limit's r and t, second limit's r and t), by the
        // fixed windows' own arithmetic.
        let expected: [(u16, [i64; 2], [i64; 2]); 7] = [
            (200, [2, 1], [4, 60]),
            (200, [1, 1], [3, 60]),
            (200, [0, 1], [2, 60]),
            (429, [0, 1], [2, 60]),
            (200, [2, 1], [1, 59]),
            (200, [1, 1], [0, 59]),
            (429, [1, 1], [0, 59]),
        ];
        for (i, (status, first, second)) in expected.into_iter().enumerate() {
            if i == 4 {
                clock.advance(Duration::from_secs(1));
            }
            let response = send(&service).await;
            assert_eq!(response.status(), status, "request {i}");
            let policy = figures(&response, "ratelimit-policy", ["q", "w"]);
            assert_eq!(policy.len(), 2, "request {i}: {policy:?}");
            assert_eq!((policy[0].1, policy[1].1), ([3, 1], [5, 60]), "request {i}");
            assert_ne!(policy[0].0, policy[1].0, "two names");
            let limits = figures(&response, "ratelimit", ["r", "t"]);
            let names: Vec<&String> = limits.iter().map(|(n, _)| n).collect();
            assert_eq!(names, [&policy[0].0, &policy[1].0], "request {i}");
            assert_eq!((limits[0].1, limits[1].1), (first, second), "request {i}");
        }
    });
}

#[test]
fn windows_are_advertised_rounded_up_never_shorter() {
    run(async {
        for (millis, w) in [(1_400, 2), (300, 1), (1_000, 1), (60_000, 60), (59_001, 60)] {
            let limiter = FixedWindow::builder()
                .limit(5)
                .window(Duration::from_millis(millis))
                .clock(ManualClock::new())
                .build()
                .unwrap();
            let service = RateLimitLayer::new(limiter, one_client()).layer(service_fn(ok));
            let response = send(&service).await;
            assert_eq!(
                figures(&response, "ratelimit-policy", ["q", "w"]),
                vec![("default".to_owned(), [5, w])],
                "a window of {millis} ms"
            );
        }
    });
}

#[test]
fn the_problem_detail_states_the_quota_in_force() {
    run(async {
        let limiter = TokenBucket::builder()
            .rate(2, Duration::from_secs(60))
            .reconfigurable()
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let layer = RateLimitLayer::new(limiter, one_client());
        let service = layer.clone().layer(service_fn(ok));
        layer
            .limiter()
            .set_quota(0, TokenBucket::builder().rate(5, Duration::from_secs(30)))
            .unwrap();
        for _ in 0..5 {
            assert_eq!(send(&service).await.status(), StatusCode::OK);
        }
        let denied = send(&service).await;
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            figures(&denied, "ratelimit-policy", ["q", "w"]),
            vec![("default".to_owned(), [5, 30])]
        );
        assert!(
            denied.body().contains("5 requests per 30 s"),
            "{}",
            denied.body()
        );
    });
}

/// A browser's preflight to a GET-only route under axum's `route_layer`:
/// axum answers 405. By default the layer limits it like any request; with
/// `skip_if(is_preflight)` it passes unlimited, without headers, and the
/// GETs keep their whole budget. A plain OPTIONS is limited either way.
#[test]
fn preflights_are_limited_by_default_and_exempt_on_request() {
    run(async {
        use axum::routing::get;
        let app = |exempt: bool| {
            let limiter = FixedWindow::builder()
                .limit(2)
                .window(Duration::from_secs(60))
                .clock(ManualClock::new())
                .build()
                .unwrap();
            let mut layer = RateLimitLayer::new(limiter, one_client());
            if exempt {
                layer = layer.skip_if(is_preflight);
            }
            axum::Router::new()
                .route("/r", get(|| async { "got" }))
                .route_layer(layer)
        };
        let preflight = || {
            Request::options("/r")
                .header("origin", "https://app.example")
                .header("access-control-request-method", "GET")
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let get = || Request::get("/r").body(axum::body::Body::empty()).unwrap();

        let limited = app(false);
        let first = limited.clone().oneshot(preflight()).await.unwrap();
        assert_eq!(first.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert!(first.headers().contains_key("ratelimit"));
        let _ = limited.clone().oneshot(preflight()).await.unwrap();
        let spent = limited.clone().oneshot(get()).await.unwrap();
        assert_eq!(
            spent.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "two preflights spent the budget"
        );

        let exempt = app(true);
        for _ in 0..5 {
            let r = exempt.clone().oneshot(preflight()).await.unwrap();
            assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
            assert!(!r.headers().contains_key("ratelimit"));
        }
        let plain = Request::options("/r")
            .body(axum::body::Body::empty())
            .unwrap();
        let r = exempt.clone().oneshot(plain).await.unwrap();
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert!(
            r.headers().contains_key("ratelimit"),
            "a plain OPTIONS is limited"
        );
        let r = exempt.clone().oneshot(get()).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["ratelimit"], "\"default\";r=0;t=60");
    });
}

/// With jitter, a 429's `Retry-After` is spread over `[t, t + jitter]`:
/// never earlier than the quota grows, and not one value for everyone.
#[test]
fn retry_jitter_spreads_retries_never_before_t() {
    run(async {
        let limiter = FixedWindow::builder()
            .limit(1)
            .window(Duration::from_secs(60))
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let service = RateLimitLayer::new(limiter, one_client())
            .retry_jitter(Duration::from_secs(10))
            .layer(service_fn(ok));
        let _ = send(&service).await;
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let denied = send(&service).await;
            assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(
                figures(&denied, "ratelimit", ["r", "t"]),
                vec![("default".to_owned(), [0, 60])]
            );
            let retry: u64 = denied.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((60..=70).contains(&retry), "{retry}");
            seen.insert(retry);
        }
        assert!(seen.len() > 1, "{seen:?}");
    });
}

/// Quotas beyond RFC 9651's integers (15 digits): `q` and `r` are capped
/// at 999 999 999 999 999, stating no more than is enforced, and every
/// field still parses.
#[test]
fn huge_quotas_are_capped_to_structured_field_integers() {
    run(async {
        const SF_MAX: i64 = 999_999_999_999_999;
        for limit in [SF_MAX as u64, SF_MAX as u64 + 2, 1 << 60] {
            // A bucket of `limit` tokens, refilled one a nanosecond.
            let bucket = || {
                TokenBucket::builder()
                    .rate(1, Duration::from_nanos(1))
                    .capacity(limit)
                    .clock(ManualClock::new())
                    .build()
                    .unwrap()
            };
            let responses = [
                send(&RateLimitLayer::new(bucket(), one_client()).layer(service_fn(ok))).await,
                send(
                    &RateLimitLayer::new(bucket(), one_client())
                        .partition_key(|_: &String| b"p".to_vec())
                        .layer(service_fn(ok)),
                )
                .await,
            ];
            for response in responses {
                let want_q = (limit as i64).min(SF_MAX);
                let want_r = ((limit - 1) as i64).min(SF_MAX);
                let w = limit.div_ceil(1_000_000_000) as i64;
                assert_eq!(
                    figures(&response, "ratelimit-policy", ["q", "w"]),
                    vec![("default".to_owned(), [want_q, w])],
                    "limit {limit}"
                );
                assert_eq!(
                    figures(&response, "ratelimit", ["r", "t"])[0].1[0],
                    want_r,
                    "limit {limit}"
                );
            }
        }
    });
}

/// An outer layer that admitted a request with its last unit, which an
/// inner layer then refused: the client must wait for the outer item's
/// `t` too, so `Retry-After` is never earlier than the `t` of any item
/// with `r=0`. An item with units left does not hold the client back.
#[test]
fn retry_after_is_never_earlier_than_an_exhausted_outer_item() {
    run(async {
        let clock = ManualClock::new();
        let window = |limit, secs| window(&clock, limit, secs);
        let inner = named(window(1, 60), "permin");
        let outer = named(window(2, 3600), "perhr");
        let service = outer.layer(inner.layer(service_fn(ok)));
        assert_eq!(send(&service).await.status(), StatusCode::OK);
        // The outer layer admits (and charges) its last unit; the inner
        // refuses.
        let refused = send(&service).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            figures(&refused, "ratelimit", ["r", "t"]),
            vec![
                ("permin".to_owned(), [0, 60]),
                ("perhr".to_owned(), [0, 3600])
            ]
        );
        assert_eq!(refused.headers()["retry-after"], "3600");
        // Had the client come back after the inner item's 60 s, the outer
        // layer would have refused it.
        clock.advance(Duration::from_secs(60));
        let later = send(&service).await;
        assert_eq!(later.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(later.headers()["retry-after"], "3540");

        // With units left in the outer item, the inner item's wait stands.
        let inner = named(window(1, 60), "permin");
        let outer = named(window(100, 3600), "perhr");
        let service = outer.layer(inner.layer(service_fn(ok)));
        let _ = send(&service).await;
        let refused = send(&service).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()["retry-after"], "60");
    });
}

/// `X-RateLimit-Limit`, `-Remaining` and `-Reset`, as one line.
fn legacy(response: &Response<Body>) -> [String; 3] {
    ["limit", "remaining", "reset"].map(|h| {
        let name = format!("x-ratelimit-{h}");
        let lines: Vec<_> = response.headers().get_all(&name).iter().collect();
        assert_eq!(lines.len(), 1, "{name}: {lines:?}");
        lines[0].to_str().unwrap().to_owned()
    })
}

/// Stacked layers with legacy headers (an outer 2 per 60 s, an inner 1 per
/// 5 s): the `X-RateLimit-*` headers are those of the limit that binds,
/// the one with the fewest requests left and, of those, the longest
/// wait, so that they agree with `Retry-After` and `RateLimit`: a client
/// that read `X-RateLimit-Reset: 5` would come back to be refused.
#[test]
fn stacked_legacy_headers_name_the_binding_limit() {
    run(async {
        let clock = ManualClock::new();
        let window = |limit, secs| window(&clock, limit, secs);
        let inner = named(window(1, 5), "inner").legacy_headers(true);
        let outer = named(window(2, 60), "outer").legacy_headers(true);
        let service = outer.layer(inner.layer(service_fn(ok)));
        // The inner layer's last unit: it binds.
        let first = send(&service).await;
        assert_eq!(first.status(), StatusCode::OK);
        assert_eq!(legacy(&first), ["1", "0", "5"]);
        // The outer layer's last unit, refused by the inner: both have
        // none left, and the outer one's wait is the longer.
        let refused = send(&service).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()["retry-after"], "60");
        assert_eq!(legacy(&refused), ["2", "0", "60"]);
        assert_eq!(
            figures(&refused, "ratelimit", ["r", "t"]),
            vec![("inner".to_owned(), [0, 5]), ("outer".to_owned(), [0, 60])]
        );
        // The outer layer refuses by itself.
        clock.advance(Duration::from_secs(5));
        let refused = send(&service).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()["retry-after"], "55");
        assert_eq!(legacy(&refused), ["2", "0", "55"]);

        // The other way round: the inner layer's wait is the longer one.
        let clock = ManualClock::new();
        let inner = named(self::window(&clock, 1, 60), "inner").legacy_headers(true);
        let outer = named(self::window(&clock, 2, 5), "outer").legacy_headers(true);
        let service = outer.layer(inner.layer(service_fn(ok)));
        assert_eq!(legacy(&send(&service).await), ["1", "0", "60"]);
        let refused = send(&service).await;
        assert_eq!(refused.headers()["retry-after"], "60");
        assert_eq!(legacy(&refused), ["1", "0", "60"]);
    });
}

/// Stacked layers left at the default name: an outer layer whose item
/// names an inner layer has taken appends the first free suffix (`-2`,
/// `-3`, ...) to them, so every item in the list has its own name and
/// each `RateLimit` item matches its policy.
#[test]
fn stacked_layers_with_one_name_get_distinct_items() {
    run(async {
        let clock = ManualClock::new();
        let window = |limit, secs| window(&clock, limit, secs);
        let pair = || {
            FixedWindow::builder()
                .limit(3)
                .window(Duration::from_secs(1))
                .and(
                    FixedWindow::builder()
                        .limit(5)
                        .window(Duration::from_secs(60)),
                )
                .clock(clock.clone())
                .build()
                .unwrap()
        };
        let three = RateLimitLayer::new(window(10, 60), one_client())
            .layer(RateLimitLayer::new(window(20, 3600), one_client()).layer(
                RateLimitLayer::new(window(30, 86_400), one_client()).layer(service_fn(ok)),
            ));
        let response = send(&three).await;
        assert_eq!(
            figures(&response, "ratelimit-policy", ["q", "w"]),
            vec![
                ("default".to_owned(), [30, 86_400]),
                ("default-2".to_owned(), [20, 3600]),
                ("default-3".to_owned(), [10, 60]),
            ]
        );
        assert_eq!(
            figures(&response, "ratelimit", ["r", "t"]),
            vec![
                ("default".to_owned(), [29, 86_400]),
                ("default-2".to_owned(), [19, 3600]),
                ("default-3".to_owned(), [9, 60]),
            ]
        );
        // A pair inside a single limit of the same name: "default-1" and
        // "default-2" are taken, and "default" is free.
        let mixed = RateLimitLayer::new(window(10, 60), one_client())
            .layer(RateLimitLayer::new(pair(), one_client()).layer(service_fn(ok)));
        let response = send(&mixed).await;
        let names: Vec<String> = figures(&response, "ratelimit-policy", ["q", "w"])
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["default-1", "default-2", "default"]);
        // The other way round: no name is taken twice either.
        let mixed = RateLimitLayer::new(pair(), one_client())
            .layer(RateLimitLayer::new(window(10, 60), one_client()).layer(service_fn(ok)));
        let response = send(&mixed).await;
        let limits = figures(&response, "ratelimit", ["r", "t"]);
        let names: Vec<&str> = limits.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["default", "default-1", "default-2"]);
        // A pair outside a pair: the outer pair's items become
        // "default-1-2" and "default-2-2".
        let pairs = RateLimitLayer::new(pair(), one_client())
            .layer(RateLimitLayer::new(pair(), one_client()).layer(service_fn(ok)));
        let response = send(&pairs).await;
        let policies = figures(&response, "ratelimit-policy", ["q", "w"]);
        let names: Vec<&str> = policies.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["default-1", "default-2", "default-1-2", "default-2-2"]
        );
        let limits = figures(&response, "ratelimit", ["r", "t"]);
        let limit_names: Vec<&str> = limits.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(limit_names, names);
    });
}

/// A limiter that admits without counting: what a Redis limiter under
/// `FailPolicy::FailOpen` does while Redis is away (its decision reports
/// the whole quota left).
#[derive(Debug)]
struct Uncounted(tollgate::Limiter<FixedWindow, String, ManualClock>);

impl tollgate::AsyncCheck<String> for Uncounted {
    type Future = std::future::Ready<Result<tollgate::Decision, tollgate::CheckError>>;
    fn check(&self, key: &String, _: u64) -> Self::Future {
        std::future::ready(Ok(self.0.check_n(key, 0).unwrap()))
    }
    fn quota(&self) -> tollgate::Quota {
        self.0.quota()
    }
}

/// An admission that spent nothing carries no rate-limit headers: `r=q`
/// and `t=0` would claim a quota nobody counted.
#[test]
fn an_admission_that_spent_nothing_claims_nothing() {
    run(async {
        let limiter = FixedWindow::builder()
            .limit(5)
            .window(Duration::from_secs(60))
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let service = RateLimitLayer::new(Uncounted(limiter), one_client())
            .legacy_headers(true)
            .layer(service_fn(ok));
        for _ in 0..10 {
            let response = send(&service).await;
            assert_eq!(response.status(), StatusCode::OK);
            for name in ["ratelimit", "ratelimit-policy", "x-ratelimit-remaining"] {
                assert!(!response.headers().contains_key(name), "{name}");
            }
        }
    });
}

/// A browser's preflight has no body and no content type. An `OPTIONS`
/// request with either is a call (a gRPC call sent as `OPTIONS`, which
/// tonic serves as any other), so the exemption never covers it.
#[test]
fn a_call_sent_as_options_is_no_preflight() {
    let preflight = || {
        Request::options("/pkg.Svc/Call")
            .header("origin", "https://app.example")
            .header("access-control-request-method", "POST")
    };
    let is =
        |request: http::request::Builder| is_preflight(&request.body(()).unwrap().into_parts().0);
    assert!(is(preflight()));
    assert!(is(preflight().header("content-length", "0")));
    assert!(is(
        preflight().header("access-control-request-headers", "content-type")
    ));
    for content_type in [
        "application/grpc",
        "application/grpc+proto",
        "application/grpc-web-text",
        "application/json",
    ] {
        assert!(
            !is(preflight().header("content-type", content_type)),
            "{content_type}"
        );
    }
    assert!(!is(preflight().header("content-length", "10")));
    assert!(!is(preflight()
        .header("content-length", "0")
        .header("content-length", "5")));
    assert!(!is(preflight().header("transfer-encoding", "chunked")));
    // Not a preflight in the first place.
    assert!(!is(
        Request::options("/").header("origin", "https://app.example")
    ));
    assert!(!is(Request::post("/")
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")));
}

/// What `RateLimitHeaders` wrote for the decision a response was made on.
#[derive(Clone)]
struct Written(http::HeaderMap);

/// `RateLimitHeaders` writes what the layer writes: for each decision the
/// layer makes (admitted: the one in the request's extensions; refused:
/// the one `respond_with` is handed), the writer with the same settings
/// writes exactly the response's headers, whatever the algorithm, quota,
/// pair of limits, policy name, header settings and partition key.
mod writer {
    use super::*;
    use proptest::prelude::*;
    use tollgate::tower::{AdmittedHeaders, RateLimitHeaders, Refusal};
    use tollgate::{Both, SlidingWindowLog};

    #[derive(Clone, Copy, Debug)]
    enum Shape {
        Window,
        Bucket,
        Log,
        Pair,
    }

    #[derive(Clone, Debug)]
    struct Settings {
        shape: Shape,
        limit: u64,
        window_ms: u64,
        name: &'static str,
        legacy: bool,
        admitted: AdmittedHeaders,
        partitioned: bool,
    }

    fn settings() -> impl Strategy<Value = Settings> {
        (
            prop_oneof![
                Just(Shape::Window),
                Just(Shape::Bucket),
                Just(Shape::Log),
                Just(Shape::Pair)
            ],
            1..5u64,
            prop_oneof![Just(400u64), Just(1_000), Just(1_400), Just(60_000)],
            prop_oneof![Just("default"), Just("api"), Just("a \"b\"")],
            any::<bool>(),
            prop_oneof![
                Just(AdmittedHeaders::Always),
                Just(AdmittedHeaders::Never),
                (0..3u64).prop_map(AdmittedHeaders::NearLimit),
            ],
            any::<bool>(),
        )
            .prop_map(
                |(shape, limit, window_ms, name, legacy, admitted, partitioned)| Settings {
                    shape,
                    limit,
                    window_ms,
                    name,
                    legacy,
                    admitted,
                    partitioned,
                },
            )
    }

    /// Runs `advances` (ms before each request) through a layer of
    /// `settings` on `limiter`, checking each response against the writer.
    fn compare<L>(
        limiter: L,
        s: &Settings,
        clock: &ManualClock,
        advances: &[u64],
    ) -> Result<(), TestCaseError>
    where
        L: tollgate::AsyncCheck<String>,
    {
        let writer = RateLimitHeaders::new()
            .policy_name(s.name)
            .unwrap()
            .legacy_headers(s.legacy)
            .admitted_headers(s.admitted);
        let partitioned = s.partitioned;
        let write = move |decision: &tollgate::Decision| {
            let mut headers = http::HeaderMap::new();
            if partitioned {
                writer.write_partitioned(decision, b"c", &mut headers);
            } else {
                writer.write(decision, &mut headers);
            }
            headers
        };
        let refused_write = write.clone();
        let key: fn(&http::request::Parts) -> Extraction<String> = client;
        let mut layer = RateLimitLayer::new(limiter, KeyFn::new(key))
            .policy_name(s.name)
            .unwrap()
            .legacy_headers(s.legacy)
            .admitted_headers(s.admitted)
            .decision_extension(true)
            .respond_with(move |refusal, _| {
                let Refusal::Limited { decision, .. } = refusal else {
                    panic!("{refusal:?}")
                };
                let mut response = Response::new(String::new());
                *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                response
                    .extensions_mut()
                    .insert(Written(refused_write(decision)));
                response
            });
        if s.partitioned {
            layer = layer.partition_key(|key: &String| key.as_bytes().to_vec());
        }
        let service = layer.layer(service_fn(move |request: Request<Body>| {
            let decision = *request.extensions().get::<tollgate::Decision>().unwrap();
            let written = write(&decision);
            async move {
                let mut response = Response::new(String::new());
                response.extensions_mut().insert(Written(written));
                Ok::<_, Infallible>(response)
            }
        }));
        run(async {
            for (i, &advance) in advances.iter().enumerate() {
                clock.advance(Duration::from_millis(advance));
                let response = send(&service).await;
                let Written(written) = response.extensions().get::<Written>().unwrap().clone();
                prop_assert_eq!(
                    response.headers(),
                    &written,
                    "request {} ({})",
                    i,
                    response.status()
                );
            }
            Ok(())
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 128,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn the_writer_writes_what_the_layer_writes(
            s in settings(),
            advances in prop::collection::vec(prop_oneof![3 => Just(0u64), 1 => 0..2_000u64], 1..16),
        ) {
            let clock = ManualClock::new();
            let window = Duration::from_millis(s.window_ms);
            match s.shape {
                Shape::Window => {
                    let l = FixedWindow::builder().limit(s.limit).window(window).clock(clock.clone());
                    compare(l.build().unwrap(), &s, &clock, &advances)?;
                }
                Shape::Bucket => {
                    let l = TokenBucket::builder().rate(s.limit, window).clock(clock.clone());
                    compare(l.build().unwrap(), &s, &clock, &advances)?;
                }
                Shape::Log => {
                    let l = SlidingWindowLog::builder().limit(s.limit).window(window).clock(clock.clone());
                    compare(l.build().unwrap(), &s, &clock, &advances)?;
                }
                Shape::Pair => {
                    let l: tollgate::Limiter<Both<FixedWindow, FixedWindow>, String, ManualClock> =
                        FixedWindow::builder()
                            .limit(s.limit)
                            .window(window)
                            .and(FixedWindow::builder().limit(s.limit + 2).window(Duration::from_secs(60)))
                            .clock(clock.clone())
                            .build()
                            .unwrap();
                    compare(l, &s, &clock, &advances)?;
                }
            }
        }
    }
}
