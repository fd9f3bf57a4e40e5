//! Stacked layers, drawn at random: three `RateLimitLayer`s of random
//! quotas, each with its own header setting and each exempting CORS
//! preflights (`skip_if(is_preflight)`) or not, in front of one service, on
//! plain HTTP, gRPC and gRPC-Web requests, browsers' preflights, and gRPC
//! calls sent as `OPTIONS` with a preflight's headers, at random clock
//! readings. Beside them, three plain limiters of the same quotas on the
//! same clock are the model: a request passes the layers outer to inner,
//! and each it reaches spends a unit or refuses it; a layer that exempts
//! preflights lets a preflight past untouched, and a gRPC call dressed as
//! one is no preflight (gRPC being `POST` only, its refusal is HTTP's `429`).
//!
//! The properties, for every request:
//!
//! 1. the stack admits it exactly when the model does;
//! 2. a refusal tells the client to wait exactly until every layer the
//!    request reached has a unit again, in whole seconds rounded up: the
//!    `Retry-After` header, and for gRPC `RetryInfo` and
//!    `grpc-retry-pushback-ms` too, whatever each layer's header setting;
//! 3. a gRPC refusal's `QuotaFailure` names every exhausted limit the
//!    request reached, and no other.

// Plain `cargo test --features tower` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::tower::{is_preflight, AdmittedHeaders, Extraction, KeyFn, RateLimitLayer};
use tollgate::{Algorithm, Builder, FixedWindow, Limiter, ManualClock, TokenBucket};
use tonic_types::StatusExt;
use tower::{service_fn, Layer, ServiceExt};

type Body = String;

async fn ok(_: Request<Body>) -> Result<Response<Body>, Infallible> {
    Ok(Response::new(String::from("ok")))
}

/// Every request is the one client "c".
fn client(_: &http::request::Parts) -> Extraction<String> {
    Extraction::Key(String::from("c"))
}

/// How a request is sent.
#[derive(Clone, Copy, Debug)]
enum Transport {
    Http,
    Grpc,
    GrpcWeb,
    /// A browser's CORS preflight.
    Preflight,
    /// A gRPC call sent as `OPTIONS` with a preflight's headers.
    GrpcAsPreflight,
}

/// One layer: its quota (`limit` per `secs`) and header setting.
#[derive(Clone, Copy, Debug)]
struct Spec {
    limit: u64,
    secs: u64,
    headers: AdmittedHeaders,
    /// `skip_if(is_preflight)`.
    skips_preflights: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    let headers = prop_oneof![
        Just(AdmittedHeaders::Always),
        Just(AdmittedHeaders::Never),
        (0..3u64).prop_map(AdmittedHeaders::NearLimit),
    ];
    (
        1..4u64,
        prop_oneof![Just(1u64), Just(5), Just(60)],
        headers,
        any::<bool>(),
    )
        .prop_map(|(limit, secs, headers, skips_preflights)| Spec {
            limit,
            secs,
            headers,
            skips_preflights,
        })
}

fn transport() -> impl Strategy<Value = Transport> {
    prop_oneof![
        Just(Transport::Http),
        Just(Transport::Grpc),
        Just(Transport::GrpcWeb),
        Just(Transport::Preflight),
        Just(Transport::GrpcAsPreflight),
    ]
}

/// Each request: the clock's advance before it (ms), and its transport.
fn requests() -> impl Strategy<Value = Vec<(u64, Transport)>> {
    let advance = prop_oneof![
        3 => Just(0u64),
        2 => 0..2_000u64,
        1 => prop_oneof![Just(5_000u64), Just(60_000)],
    ];
    prop::collection::vec((advance, transport()), 1..40)
}

fn request(transport: Transport) -> Request<Body> {
    let preflight = || {
        Request::options("/echo.Echo/Say")
            .header("origin", "https://app.example")
            .header("access-control-request-method", "POST")
    };
    let content_type = match transport {
        Transport::Http => return Request::get("/").body(String::new()).unwrap(),
        Transport::Preflight => return preflight().body(String::new()).unwrap(),
        Transport::GrpcAsPreflight => {
            return preflight()
                .header("content-type", "application/grpc")
                .body(String::new())
                .unwrap()
        }
        Transport::Grpc => "application/grpc",
        Transport::GrpcWeb => "application/grpc-web+proto",
    };
    Request::post("/echo.Echo/Say")
        .header("content-type", content_type)
        .body(String::new())
        .unwrap()
}

/// Ceiling of `ns` in whole seconds.
fn seconds_up(ns: Duration) -> u64 {
    ns.as_secs() + u64::from(ns.subsec_nanos() > 0)
}

/// Runs `requests` through three stacked layers of `specs` (outermost
/// first), each limiter made by `make`, against the model.
fn stacked<A: Algorithm>(
    make: impl Fn(&Spec, &ManualClock) -> Limiter<A, String, ManualClock>,
    specs: [Spec; 3],
    requests: &[(u64, Transport)],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let layer = |spec: &Spec| {
        let key: fn(&http::request::Parts) -> Extraction<String> = client;
        let layer =
            RateLimitLayer::new(make(spec, &clock), KeyFn::new(key)).admitted_headers(spec.headers);
        if spec.skips_preflights {
            layer.skip_if(is_preflight)
        } else {
            layer
        }
    };
    let service =
        layer(&specs[0]).layer(layer(&specs[1]).layer(layer(&specs[2]).layer(service_fn(ok))));
    let model: Vec<_> = specs.iter().map(|s| make(s, &clock)).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for (i, &(advance, transport)) in requests.iter().enumerate() {
        clock.advance(Duration::from_millis(advance));
        // The model: outer to inner, until one refuses; a layer that
        // exempts preflights lets a browser's pass without a look.
        let mut reached = Vec::new();
        let mut admitted = true;
        for (limiter, spec) in model.iter().zip(&specs) {
            if spec.skips_preflights && matches!(transport, Transport::Preflight) {
                continue;
            }
            reached.push((limiter, spec));
            if !limiter.allow_request("c") {
                admitted = false;
                break;
            }
        }
        let response = rt.block_on(service.clone().oneshot(request(transport)));
        let response = response.unwrap();
        let case = format!("request {i} ({transport:?})");
        let grpc = tonic::Status::from_header_map(response.headers());
        // gRPC is POST only: a call sent as `OPTIONS` is refused in
        // HTTP's form.
        let refused = match transport {
            Transport::Http | Transport::Preflight | Transport::GrpcAsPreflight => {
                response.status() == StatusCode::TOO_MANY_REQUESTS
            }
            _ => grpc
                .as_ref()
                .is_some_and(|s| s.code() == tonic::Code::ResourceExhausted),
        };
        prop_assert_eq!(refused, !admitted, "{}: refused by the stack", case);
        if admitted {
            continue;
        }
        // Until every layer reached has a unit again.
        let wait = reached
            .iter()
            .map(|(l, _)| l.peek("c").retry_after())
            .max()
            .unwrap();
        let secs = seconds_up(wait);
        let retry_after: u64 = response.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        prop_assert_eq!(retry_after, secs, "{}: Retry-After", case);
        if let Some(status) = grpc {
            let delay = status.get_details_retry_info().and_then(|r| r.retry_delay);
            prop_assert_eq!(
                delay,
                Some(Duration::from_secs(secs)),
                "{}: RetryInfo",
                case
            );
            let pushback = &response.headers()["grpc-retry-pushback-ms"];
            prop_assert_eq!(pushback.to_str().unwrap(), (secs * 1000).to_string());
            let mut named: Vec<i64> = status
                .get_details_quota_failure()
                .map(|q| q.violations.iter().map(|v| v.quota_value).collect())
                .unwrap_or_default();
            let mut exhausted: Vec<i64> = reached
                .iter()
                .filter(|(l, _)| l.peek("c").is_denied())
                .map(|(_, s)| s.limit as i64)
                .collect();
            named.sort_unstable();
            exhausted.sort_unstable();
            prop_assert_eq!(named, exhausted, "{}: QuotaFailure", case);
        }
    }
    Ok(())
}

fn window(spec: &Spec, clock: &ManualClock) -> Builder<FixedWindow, String, ManualClock> {
    FixedWindow::builder()
        .limit(spec.limit)
        .window(Duration::from_secs(spec.secs))
        .key_type::<String>()
        .clock(clock.clone())
}

fn bucket(spec: &Spec, clock: &ManualClock) -> Builder<TokenBucket, String, ManualClock> {
    TokenBucket::builder()
        .rate(spec.limit, Duration::from_secs(spec.secs))
        .capacity(spec.limit)
        .key_type::<String>()
        .clock(clock.clone())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn stacked_fixed_windows_tell_every_transport_the_whole_wait(
        specs in [spec(), spec(), spec()],
        requests in requests(),
    ) {
        stacked(|s, c| window(s, c).build().unwrap(), specs, &requests)?;
    }

    #[test]
    fn stacked_token_buckets_tell_every_transport_the_whole_wait(
        specs in [spec(), spec(), spec()],
        requests in requests(),
    ) {
        stacked(|s, c| bucket(s, c).build().unwrap(), specs, &requests)?;
    }
}

/// The shrunk case with `is_preflight` blind to a `Content-Type` (a gRPC
/// call sent as `OPTIONS` with a preflight's headers then passes the
/// middle layer unlimited, as tonic would serve it): the next call is
/// refused with the wrong limits named.
#[test]
fn a_shrunk_case_a_grpc_call_dressed_as_a_preflight_is_limited_by_every_layer() {
    let spec = |limit, skips_preflights| Spec {
        limit,
        secs: 1,
        headers: AdmittedHeaders::Always,
        skips_preflights,
    };
    stacked(
        |s, c| window(s, c).build().unwrap(),
        [spec(3, false), spec(2, true), spec(1, false)],
        &[(0, Transport::GrpcAsPreflight), (0, Transport::Grpc)],
    )
    .unwrap();
}
