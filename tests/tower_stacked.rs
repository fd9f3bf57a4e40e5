//! Stacked layers, drawn at random: three `RateLimitLayer`s of random
//! quotas, each with its own policy name, header setting and legacy
//! `X-RateLimit-*` headers on or off, each exempting CORS preflights
//! (`skip_if(is_preflight)`) or not, and each keyed by one client for all
//! or by `Authorization` (`HeaderKey`; requests carry one of two users'
//! credentials, spelt any of the ways RFC 9110 allows, or none), in front
//! of one service, on plain
//! HTTP, gRPC and gRPC-Web requests, browsers' preflights, gRPC calls sent
//! as `OPTIONS` with a preflight's headers, and `OPTIONS` requests that
//! are no preflight (one with a body, one chunked, one without `Origin`),
//! and `GET`s that say gRPC's content type, at random clock readings. Beside them, three plain limiters of the same
//! quotas on the same clock are the model: a request passes the layers
//! outer to inner, and each it reaches spends a unit or refuses it; a layer
//! that exempts preflights lets a preflight past untouched, and anything
//! else sent as `OPTIONS` is no preflight (gRPC being `POST` only, its
//! refusal is HTTP's `429`).
//!
//! The properties, for every request:
//!
//! 1. the stack admits it exactly when the model does;
//! 2. a refusal tells the client to wait exactly until every layer the
//!    request reached has a unit again, in whole seconds rounded up: the
//!    `Retry-After` header, and for gRPC `RetryInfo` and
//!    `grpc-retry-pushback-ms` too, whatever each layer's header setting;
//! 3. a gRPC refusal's `QuotaFailure` names every exhausted limit the
//!    request reached, and no other;
//! 4. `RateLimit-Policy` and `RateLimit` list one item for each layer that
//!    writes its headers (the refusing layer always, an admitting one as
//!    its setting says), innermost first, each named by its policy (an
//!    outer item whose name an inner one took gets the first free `-n`),
//!    with the layer's `q` and `w` (rounded up to whole seconds), and the
//!    requests it has left (`r`) and the seconds until its quota grows
//!    (`t`, rounded up);
//! 5. the legacy `X-RateLimit-Limit`, `-Remaining` and `-Reset` are there
//!    exactly when a layer that writes its headers sends them, and name the
//!    limit that binds among those: the fewest requests left and, of
//!    those, the latest reset; on a refusal where every layer left with no
//!    request sent them, the reset is `Retry-After`;
//! 6. a refusal is a `429` unless the request is a gRPC call (`POST`), and
//!    a refusal in gRPC's form (a `200`) says `Cache-Control: no-store`;
//! 7. a layer keyed by credential holds each user to one quota however the
//!    scheme is spelt, and turns a request without one away with a `401`
//!    that carries `WWW-Authenticate` (gRPC: `UNAUTHENTICATED`, not to be
//!    stored), the headers of the layers outside it as for an admission.

// Plain `cargo test --features tower` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

use std::cmp::Reverse;
use std::convert::Infallible;
use std::time::Duration;

use http::{HeaderMap, Request, Response, StatusCode};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tollgate::tower::{
    is_preflight, AdmittedHeaders, Extraction, HeaderKey, KeyExtractor, KeyFn, RateLimitLayer,
};
use tollgate::{Algorithm, Builder, Decision, FixedWindow, Limiter, ManualClock, TokenBucket};
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
    /// `OPTIONS` with a preflight's headers and a body (`Content-Length`).
    OptionsWithBody,
    /// `OPTIONS` with a preflight's headers and `Transfer-Encoding: chunked`.
    OptionsChunked,
    /// `OPTIONS` with `Access-Control-Request-Method` but no `Origin`.
    OptionsWithoutOrigin,
    /// A `GET` that says `Content-Type: application/grpc` (gRPC is `POST`
    /// only: this is plain HTTP).
    GetAsGrpc,
}

/// One layer: its quota (`limit` per `window`) and header settings.
#[derive(Clone, Copy, Debug)]
struct Spec {
    limit: u64,
    window: Duration,
    /// `policy_name`, if set (`"default"` if not).
    name: Option<&'static str>,
    headers: AdmittedHeaders,
    /// `legacy_headers(true)`.
    legacy: bool,
    /// `skip_if(is_preflight)`.
    skips_preflights: bool,
    /// Keyed by `HeaderKey::new(AUTHORIZATION)`: one client per credential
    /// however it is spelt, a `401` (for gRPC `UNAUTHENTICATED`) without
    /// one. Else every request is the one client `"c"`.
    by_credential: bool,
}

impl Spec {
    /// The name the policy goes by in the headers, before any renaming.
    fn name(&self) -> &'static str {
        self.name.unwrap_or("default")
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    let headers = prop_oneof![
        Just(AdmittedHeaders::Always),
        Just(AdmittedHeaders::Never),
        (0..3u64).prop_map(AdmittedHeaders::NearLimit),
    ];
    // Names that clash with each other and with the renamed ones.
    let name = prop_oneof![
        2 => Just(None),
        1 => Just(Some("a")),
        1 => Just(Some("a-2")),
        1 => Just(Some("default-2")),
    ];
    let window = prop_oneof![
        Just(Duration::from_secs(1)),
        Just(Duration::from_millis(1_500)),
        Just(Duration::from_secs(5)),
        Just(Duration::from_secs(60)),
    ];
    let by_credential = prop_oneof![2 => Just(false), 1 => Just(true)];
    (
        1..4u64,
        window,
        name,
        headers,
        any::<bool>(),
        any::<bool>(),
        by_credential,
    )
        .prop_map(
            |(limit, window, name, headers, legacy, skips_preflights, by_credential)| Spec {
                limit,
                window,
                name,
                headers,
                legacy,
                skips_preflights,
                by_credential,
            },
        )
}

fn transport() -> impl Strategy<Value = Transport> {
    prop_oneof![
        Just(Transport::Http),
        Just(Transport::Grpc),
        Just(Transport::GrpcWeb),
        Just(Transport::Preflight),
        Just(Transport::GrpcAsPreflight),
        Just(Transport::OptionsWithBody),
        Just(Transport::OptionsChunked),
        Just(Transport::OptionsWithoutOrigin),
        Just(Transport::GetAsGrpc),
    ]
}

/// A request's `Authorization`: one of two users' credentials, spelt one
/// of the ways RFC 9110 lets a scheme be written (any case, one or more
/// blanks after it).
#[derive(Clone, Copy, Debug)]
struct Credential {
    user: u8,
    spelling: u8,
}

const SPELLINGS: [&str; 5] = ["Basic ", "basic ", "BASIC ", "Basic   ", "bAsIc \t "];

impl Credential {
    fn header(self) -> String {
        format!(
            "{}user-{}",
            SPELLINGS[usize::from(self.spelling)],
            self.user
        )
    }

    /// The client a credential-keyed layer holds it as.
    fn client(self) -> String {
        format!("basic user-{}", self.user)
    }
}

/// One request: the clock's advance before it (ms), its transport, and
/// its credential (if any).
type Sent = (u64, Transport, Option<Credential>);

fn requests() -> impl Strategy<Value = Vec<Sent>> {
    let advance = prop_oneof![
        3 => Just(0u64),
        2 => 0..2_000u64,
        1 => prop_oneof![Just(5_000u64), Just(60_000)],
    ];
    let credential = prop_oneof![
        1 => Just(None),
        4 => (0..2u8, 0..5u8).prop_map(|(user, spelling)| Some(Credential { user, spelling })),
    ];
    prop::collection::vec((advance, transport(), credential), 1..40)
}

fn request(transport: Transport, credential: Option<Credential>) -> Request<Body> {
    let mut request = bare(transport);
    if let Some(credential) = credential {
        request.headers_mut().insert(
            http::header::AUTHORIZATION,
            credential.header().try_into().unwrap(),
        );
    }
    request
}

fn bare(transport: Transport) -> Request<Body> {
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
        Transport::OptionsWithBody => {
            return preflight()
                .header("content-length", "5")
                .body(String::from("hello"))
                .unwrap()
        }
        Transport::OptionsChunked => {
            return preflight()
                .header("transfer-encoding", "chunked")
                .body(String::from("hello"))
                .unwrap()
        }
        Transport::OptionsWithoutOrigin => {
            return Request::options("/echo.Echo/Say")
                .header("access-control-request-method", "POST")
                .body(String::new())
                .unwrap()
        }
        Transport::GetAsGrpc => {
            return Request::get("/")
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

/// Header `name`'s field lines as one list (`None` if absent).
fn list(headers: &HeaderMap, name: &str) -> Option<String> {
    let lines: Vec<&str> = headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    (!lines.is_empty()).then(|| lines.join(", "))
}

/// Header `name` as a number (`None` if absent).
fn number(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers
        .get(name)
        .map(|v| v.to_str().unwrap().parse().unwrap())
}

/// A layer the request reached, as the model saw it: its settings, its
/// check's decision, and a peek just after (what another request would
/// meet).
struct Reached<'a> {
    spec: &'a Spec,
    decision: Decision,
    after: Decision,
}

impl Reached<'_> {
    /// Whether the layer writes its headers on the response: the refusing
    /// layer always; an admitting one as its setting says.
    fn writes(&self) -> bool {
        let d = &self.decision;
        d.is_denied()
            || match self.spec.headers {
                AdmittedHeaders::Always => true,
                AdmittedHeaders::Never => false,
                AdmittedHeaders::NearLimit(at_most) => d.remaining() <= at_most,
            }
    }

    /// `t` and `X-RateLimit-Reset`: seconds until the quota grows.
    fn reset(&self) -> u64 {
        seconds_up(self.decision.replenish_after())
    }
}

/// The `RateLimit-Policy` and `RateLimit` the layers in `reached` (outer
/// to inner) write, from the model: an item for each that writes its
/// headers, innermost first, each under its policy's name or, where an
/// inner item has taken that, the name with the first free `-n` (`n` from
/// 2) appended. `None` for a header no layer writes.
fn expected_lists(reached: &[Reached<'_>]) -> (Option<String>, Option<String>) {
    let mut taken: Vec<String> = Vec::new();
    let mut policy = Vec::new();
    let mut limit = Vec::new();
    for layer in reached.iter().rev().filter(|l| l.writes()) {
        let base = layer.spec.name();
        let name = std::iter::once(base.to_owned())
            .chain((2..).map(|n| format!("{base}-{n}")))
            .find(|name| !taken.contains(name))
            .unwrap();
        // The quota the model's limiter holds: a bucket's window is its
        // capacity times the time per token rounded up to whole
        // nanoseconds, so 3 per second is a window just over a second,
        // stated `w=2`.
        let d = &layer.decision;
        let w = seconds_up(d.window()).max(1);
        policy.push(format!("\"{name}\";q={};w={w}", d.limit()));
        limit.push(format!(
            "\"{name}\";r={};t={}",
            layer.decision.remaining(),
            layer.reset()
        ));
        taken.push(name);
    }
    let joined = |items: Vec<String>| (!items.is_empty()).then(|| items.join(", "));
    (joined(policy), joined(limit))
}

/// Checks the rate-limit headers of `response` against the model's
/// `reached` layers (outer to inner); `retry_after` is the refusal's
/// `Retry-After`, if refused.
fn check_headers(
    case: &str,
    headers: &HeaderMap,
    reached: &[Reached<'_>],
    retry_after: Option<u64>,
) -> Result<(), TestCaseError> {
    let (policy, limit) = expected_lists(reached);
    prop_assert_eq!(
        list(headers, "ratelimit-policy"),
        policy,
        "{}: RateLimit-Policy",
        case
    );
    prop_assert_eq!(list(headers, "ratelimit"), limit, "{}: RateLimit", case);

    // The legacy headers: the limit that binds among the layers that send
    // them, the fewest requests left, and of those the latest reset. Of
    // limits tied on both, any may be named.
    let legacy: Vec<&Reached<'_>> = reached
        .iter()
        .filter(|l| l.writes() && l.spec.legacy)
        .collect();
    let key = |l: &Reached<'_>| (l.decision.remaining(), Reverse(l.reset()));
    let Some(binds) = legacy.iter().map(|l| key(l)).min() else {
        for name in [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
        ] {
            prop_assert!(!headers.contains_key(name), "{}: {} sent", case, name);
        }
        return Ok(());
    };
    let (remaining, Reverse(reset)) = binds;
    prop_assert_eq!(
        number(headers, "x-ratelimit-remaining"),
        Some(remaining),
        "{}: X-RateLimit-Remaining",
        case
    );
    prop_assert_eq!(
        number(headers, "x-ratelimit-reset"),
        Some(reset),
        "{}: X-RateLimit-Reset",
        case
    );
    let limits: Vec<u64> = legacy
        .iter()
        .filter(|l| key(l) == binds)
        .map(|l| l.spec.limit)
        .collect();
    let sent = number(headers, "x-ratelimit-limit");
    prop_assert!(
        sent.is_some_and(|q| limits.contains(&q)),
        "{}: X-RateLimit-Limit {:?}, not one of {:?}",
        case,
        sent,
        limits
    );
    // A refusal whose exhausted layers all sent them: the reset agrees
    // with `Retry-After`.
    if let Some(retry_after) = retry_after {
        let exhausted_sent = reached
            .iter()
            .filter(|l| l.decision.remaining() == 0)
            .all(|l| l.writes() && l.spec.legacy);
        if exhausted_sent {
            prop_assert_eq!(
                reset,
                retry_after,
                "{}: X-RateLimit-Reset against Retry-After",
                case
            );
        }
    }
    Ok(())
}

/// Runs `requests` through three stacked layers of `specs` (outermost
/// first), each limiter made by `make`, against the model.
fn stacked<A: Algorithm>(
    make: impl Fn(&Spec, &ManualClock) -> Limiter<A, String, ManualClock>,
    specs: [Spec; 3],
    requests: &[Sent],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let layer = |spec: &Spec| {
        let by_credential = spec.by_credential;
        let credential = HeaderKey::new(http::header::AUTHORIZATION);
        let key = move |parts: &http::request::Parts| {
            if by_credential {
                credential.extract(parts)
            } else {
                client(parts)
            }
        };
        let mut layer = RateLimitLayer::new(make(spec, &clock), KeyFn::new(key))
            .admitted_headers(spec.headers)
            .legacy_headers(spec.legacy);
        if let Some(name) = spec.name {
            layer = layer.policy_name(name).unwrap();
        }
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
    for (i, &(advance, transport, credential)) in requests.iter().enumerate() {
        clock.advance(Duration::from_millis(advance));
        // The model: outer to inner, until one refuses; a layer that
        // exempts preflights lets a browser's pass without a look, and one
        // keyed by credential turns away a request without one.
        let mut reached = Vec::new();
        let mut admitted = true;
        let mut unauthenticated = false;
        for (limiter, spec) in model.iter().zip(&specs) {
            if spec.skips_preflights && matches!(transport, Transport::Preflight) {
                continue;
            }
            let client = match (spec.by_credential, credential) {
                (false, _) => String::from("c"),
                (true, Some(credential)) => credential.client(),
                (true, None) => {
                    unauthenticated = true;
                    break;
                }
            };
            let decision = limiter.check(&client);
            let after = limiter.peek(&client);
            reached.push(Reached {
                spec,
                decision,
                after,
            });
            if decision.is_denied() {
                admitted = false;
                break;
            }
        }
        let response = rt.block_on(service.clone().oneshot(request(transport, credential)));
        let response = response.unwrap();
        let case = format!("request {i} ({transport:?}, {credential:?})");
        let grpc = tonic::Status::from_header_map(response.headers());
        if unauthenticated {
            // Turned away before any quota of the layer that wants a
            // credential: `401` with a challenge (gRPC: `UNAUTHENTICATED`,
            // not to be stored); the layers outside it admitted it.
            match transport {
                Transport::Grpc | Transport::GrpcWeb => {
                    let code = grpc.as_ref().map(tonic::Status::code);
                    prop_assert_eq!(code, Some(tonic::Code::Unauthenticated), "{}", case);
                    prop_assert_eq!(&response.headers()["cache-control"], "no-store");
                }
                _ => {
                    prop_assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{}", case);
                    prop_assert!(
                        response.headers().contains_key("www-authenticate"),
                        "{}: a 401 without WWW-Authenticate",
                        case
                    );
                }
            }
            check_headers(&case, response.headers(), &reached, None)?;
            continue;
        }
        // gRPC is POST only: a call sent as `OPTIONS`, or a `GET` that
        // says gRPC's content type, is refused in HTTP's form (a `429`,
        // never a `200` a shared cache may keep).
        let refused = match transport {
            Transport::Grpc | Transport::GrpcWeb => grpc
                .as_ref()
                .is_some_and(|s| s.code() == tonic::Code::ResourceExhausted),
            _ => response.status() == StatusCode::TOO_MANY_REQUESTS,
        };
        prop_assert_eq!(refused, !admitted, "{}: refused by the stack", case);
        if admitted {
            check_headers(&case, response.headers(), &reached, None)?;
            continue;
        }
        // Until every layer reached has a unit again.
        let wait = reached.iter().map(|l| l.after.retry_after()).max().unwrap();
        let secs = seconds_up(wait);
        let retry_after = number(response.headers(), "retry-after");
        prop_assert_eq!(retry_after, Some(secs), "{}: Retry-After", case);
        check_headers(&case, response.headers(), &reached, Some(secs))?;
        // No cache keeps a refusal: a `429` is not stored, and a gRPC
        // refusal (a `200`) says so.
        prop_assert_eq!(
            response
                .headers()
                .get("cache-control")
                .map(|v| v.to_str().unwrap()),
            grpc.is_some().then_some("no-store"),
            "{}: Cache-Control",
            case
        );
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
                .filter(|l| l.after.is_denied())
                .map(|l| l.spec.limit as i64)
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
        .window(spec.window)
        .key_type::<String>()
        .clock(clock.clone())
}

fn bucket(spec: &Spec, clock: &ManualClock) -> Builder<TokenBucket, String, ManualClock> {
    TokenBucket::builder()
        .rate(spec.limit, spec.window)
        .capacity(spec.limit)
        .key_type::<String>()
        .clock(clock.clone())
}

proptest! {
    #![proptest_config(ProptestConfig {
        // 64 by default; `PROPTEST_CASES` sets more (CI runs 1 000).
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|cases| cases.parse().ok())
            .unwrap_or(64),
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
        window: Duration::from_secs(1),
        name: None,
        headers: AdmittedHeaders::Always,
        legacy: false,
        skips_preflights,
        by_credential: false,
    };
    stacked(
        |s, c| window(s, c).build().unwrap(),
        [spec(3, false), spec(2, true), spec(1, false)],
        &[
            (0, Transport::GrpcAsPreflight, None),
            (0, Transport::Grpc, None),
        ],
    )
    .unwrap();
}
