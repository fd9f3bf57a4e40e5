//! The layer in front of gRPC: a real tonic server and a real tonic client
//! on loopback. A refused call is `RESOURCE_EXHAUSTED` with the retry
//! delay the client decodes (`tonic_types::StatusExt`), a failed check
//! `UNAVAILABLE` that quotes nothing internal, an extractor's rejection a
//! fitting code; the rate-limit fields travel as metadata. And one limiter
//! shared by an axum route and a tonic service on one port draws from one
//! budget. A `ManualClock`, a few calls each, loopback only.

// `cargo test --features axum`; the loom models skip it.
#![cfg(not(feature = "loom"))]

mod serve;

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::routing::get;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serve::serve;
use tokio::net::{TcpListener, TcpStream};
use tollgate::tower::{is_preflight, AdmittedHeaders, HeaderKey, PeerIp, RateLimitLayer};
use tollgate::{AsyncCheck, CheckError, Decision, FixedWindow, ManualClock, Quota};
use tonic::transport::server::{TcpConnectInfo, TcpIncoming};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;
use tower::ServiceBuilder;

/// The example's service: `/tollgate.example.Echo/Say` echoes its
/// message, raw bytes through a pass-through codec, without codegen.
#[allow(dead_code)]
#[path = "../examples/grpc.rs"]
mod example;

use example::Echo;

/// One call of `Say` over `channel`, with `metadata`.
async fn say(
    channel: &Channel,
    metadata: &[(&'static str, &'static str)],
) -> Result<tonic::Response<Bytes>, Status> {
    let mut request = tonic::Request::new(Bytes::from_static(b"hello"));
    for (name, value) in metadata {
        request.metadata_mut().insert(*name, value.parse().unwrap());
    }
    example::say(channel, request).await
}

async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap()
}

fn window(limit: u64, clock: &ManualClock) -> tollgate::Limiter<FixedWindow, IpAddr, ManualClock> {
    FixedWindow::builder()
        .limit(limit)
        .window(Duration::from_secs(60))
        .key_type::<IpAddr>()
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// Serves `Echo` with tonic's own server, behind `layer` (whose inner
/// service answers in axum's body type, which the layer builds its own
/// responses in); the address.
async fn tonic_server<L>(layer: L) -> SocketAddr
where
    L: tower::Layer<
            tower::util::MapResponse<
                tonic::service::Routes,
                fn(http::Response<tonic::body::Body>) -> http::Response<axum::body::Body>,
            >,
        > + Clone
        + Send
        + 'static,
    L::Service: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<axum::body::Body>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    <L::Service as tower::Service<http::Request<tonic::body::Body>>>::Future: Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let to_axum: fn(http::Response<tonic::body::Body>) -> http::Response<axum::body::Body> =
        |r| r.map(axum::body::Body::new);
    let stack = ServiceBuilder::new().layer(layer).map_response(to_axum);
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(stack)
            .add_service(Echo)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    addr
}

#[tokio::test]
async fn a_refused_call_is_resource_exhausted_with_a_retry_delay() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(
        window(2, &clock),
        PeerIp::new().peer_from(TcpConnectInfo::remote_addr),
    )
    .policy_name("calls")
    .unwrap();
    let addr = tonic_server(layer).await;
    let channel = channel(addr).await;
    for remaining in ["1", "0"] {
        let ok = say(&channel, &[]).await.unwrap();
        assert_eq!(ok.get_ref(), &Bytes::from_static(b"hello"));
        // The rate-limit fields travel as the response's metadata.
        let metadata = ok.metadata();
        assert_eq!(
            metadata.get("ratelimit").unwrap(),
            &format!("\"calls\";r={remaining};t=60")
        );
        assert_eq!(
            metadata.get("ratelimit-policy").unwrap(),
            "\"calls\";q=2;w=60"
        );
    }
    let status = say(&channel, &[]).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains("The rate limit of 2 requests per 60 s is exhausted"),
        "{}",
        status.message()
    );
    let retry = status.get_details_retry_info().expect("RetryInfo");
    assert_eq!(retry.retry_delay, Some(Duration::from_secs(60)));
    let quota = status.get_details_quota_failure().expect("QuotaFailure");
    assert_eq!(quota.violations.len(), 1);
    assert_eq!(quota.violations[0].quota_id, "calls");
    assert_eq!(quota.violations[0].quota_value, 2);
    assert_eq!(quota.violations[0].description, "2 requests per 60 s");
    // The rate-limit fields and the wait, as the status's metadata.
    let metadata = status.metadata();
    assert_eq!(metadata.get("ratelimit").unwrap(), "\"calls\";r=0;t=60");
    assert_eq!(metadata.get("retry-after").unwrap(), "60");
    assert_eq!(metadata.get("grpc-retry-pushback-ms").unwrap(), "60000");

    // The window turns: admitted again.
    clock.advance(Duration::from_secs(60));
    assert!(say(&channel, &[]).await.is_ok());
}

/// A limiter whose store is down, saying so with internals.
#[derive(Debug)]
struct Down;

impl AsyncCheck<IpAddr> for Down {
    type Future = Ready<Result<Decision, CheckError>>;
    fn check(&self, _: &IpAddr, _: u64) -> Self::Future {
        ready(Err(CheckError::new(
            "NOSCRIPT sha 3f1c0a9e key rl:{api-key-s3cr3t}",
        )))
    }
    fn quota(&self) -> Quota {
        Quota::new(10, Duration::from_secs(60))
    }
}

#[tokio::test]
async fn a_failed_check_is_unavailable_and_a_rejection_has_its_code() {
    let addr = tonic_server(RateLimitLayer::new(
        Down,
        PeerIp::new().peer_from(TcpConnectInfo::remote_addr),
    ))
    .await;
    let status = say(&channel(addr).await, &[]).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    for internal in ["NOSCRIPT", "3f1c0a9e", "s3cr3t"] {
        assert!(!status.message().contains(internal), "{}", status.message());
    }
    assert!(status.get_details_retry_info().is_none());

    let clock = ManualClock::new();
    let keyed = FixedWindow::builder()
        .limit(1)
        .window(Duration::from_secs(60))
        .clock(clock.clone())
        .build()
        .unwrap();
    let api_key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
    let addr = tonic_server(RateLimitLayer::new(keyed, api_key)).await;
    let channel = channel(addr).await;
    let status = say(&channel, &[]).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert!(
        status.message().contains("x-api-key"),
        "{}",
        status.message()
    );
    assert!(say(&channel, &[("x-api-key", "k")]).await.is_ok());
    let status = say(&channel, &[("x-api-key", "k")]).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
}

// ---------------------------------------------------------------------------
// axum and tonic on one port, one limiter.

async fn http_get(server: SocketAddr) -> StatusCode {
    let stream = TcpStream::connect(server).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = http::Request::get("/hello")
        .header("host", server.to_string())
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
        .await
        .expect("a response within 10 s")
        .unwrap();
    let status = response.status();
    let _ = response.into_body().collect().await;
    status
}

#[tokio::test]
async fn an_axum_route_and_a_tonic_service_on_one_port_share_one_budget() {
    let clock = ManualClock::new();
    let grpc = tonic::service::Routes::new(Echo).into_axum_router();
    let app = axum::Router::new()
        .route("/hello", get(|| async { "hello" }))
        .merge(grpc)
        .layer(RateLimitLayer::new(window(4, &clock), PeerIp::new()));
    let addr = serve(app).await;
    let channel = channel(addr).await;
    // Four in all, whichever way they come.
    assert_eq!(http_get(addr).await, StatusCode::OK);
    let ok = say(&channel, &[]).await.unwrap();
    assert_eq!(
        ok.metadata().get("ratelimit").unwrap(),
        "\"default\";r=2;t=60"
    );
    assert_eq!(http_get(addr).await, StatusCode::OK);
    assert!(say(&channel, &[]).await.is_ok());
    // Then neither way.
    let status = say(&channel, &[]).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        status.get_details_retry_info().unwrap().retry_delay,
        Some(Duration::from_secs(60))
    );
    assert_eq!(http_get(addr).await, StatusCode::TOO_MANY_REQUESTS);
}

/// The example's own app (three calls a minute per client, a real clock),
/// as its `main` runs it.
#[tokio::test]
async fn the_example_app_refuses_the_fourth_call() {
    let addr = serve(example::app(3)).await;
    let channel = channel(addr).await;
    assert_eq!(http_get(addr).await, StatusCode::OK);
    assert!(say(&channel, &[]).await.is_ok());
    assert!(say(&channel, &[]).await.is_ok());
    let status = say(&channel, &[]).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    let delay = status
        .get_details_retry_info()
        .unwrap()
        .retry_delay
        .unwrap();
    assert!((1..=20).contains(&delay.as_secs()), "{delay:?}");
    assert_eq!(http_get(addr).await, StatusCode::TOO_MANY_REQUESTS);
}

// ---------------------------------------------------------------------------
// Raw HTTP/2 requests, for what a tonic client never sends.

/// A body of one chunk whose size it does not announce, as a streaming
/// client's: over HTTP/2 no `content-length` goes with it.
struct Unsized(Option<Bytes>);

impl http_body::Body for Unsized {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        std::task::Poll::Ready(self.0.take().map(|data| Ok(http_body::Frame::data(data))))
    }
}

/// `message` framed as a gRPC message: uncompressed, its length, itself.
fn grpc_frame(message: &[u8]) -> Bytes {
    let mut frame = vec![0];
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(message);
    Bytes::from(frame)
}

/// A `Say` call to `server` as a raw HTTP/2 request with `method` and the
/// extra `headers`: its `grpc-status` (from the headers of a trailers-only
/// response, or the trailers) and body.
async fn raw_call(
    server: SocketAddr,
    method: http::Method,
    headers: &[(&str, &str)],
) -> (String, Bytes) {
    let (_, status, body) = raw_call_head(server, method, headers).await;
    (status.expect("a grpc-status"), body)
}

/// [`raw_call`], with the response's head too.
async fn raw_call_head(
    server: SocketAddr,
    method: http::Method,
    headers: &[(&str, &str)],
) -> (http::response::Parts, Option<String>, Bytes) {
    let stream = TcpStream::connect(server).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("http://{server}/tollgate.example.Echo/Say"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Unsized(Some(grpc_frame(b"hello")))).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
        .await
        .expect("a response within 10 s")
        .unwrap();
    let (head, body) = response.into_parts();
    let body = body.collect().await.unwrap();
    let status = head
        .headers
        .get("grpc-status")
        .or_else(|| body.trailers().and_then(|t| t.get("grpc-status")))
        .map(|status| status.to_str().unwrap().to_owned());
    (head, status, body.to_bytes())
}

/// One HTTP/1.1 request over a fresh connection to `server`: `method` on
/// `path` with `headers`; the response's head and body.
async fn http1(
    server: SocketAddr,
    method: http::Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (http::response::Parts, String) {
    let stream = TcpStream::connect(server).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", server.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Empty::<Bytes>::new()).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
        .await
        .expect("a response within 10 s")
        .unwrap();
    let (head, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (head, String::from_utf8(body.to_vec()).unwrap())
}

/// A refusal must never be a response a shared cache may store and serve
/// to other clients. gRPC is POST only, so a `GET` with a gRPC content type
/// is refused as plain HTTP (`429` over its quota, `401` without its API
/// key), which no cache stores by default; and a gRPC call's refusal, a
/// `200` by gRPC's rules, says `Cache-Control: no-store`.
#[tokio::test]
async fn no_refusal_is_a_cacheable_200() {
    const GRPC: (&str, &str) = ("content-type", "application/grpc");
    let clock = ManualClock::new();
    let grpc = tonic::service::Routes::new(Echo).into_axum_router();
    let app = axum::Router::new()
        .route("/", get(|| async { "hello" }))
        .merge(grpc)
        .layer(RateLimitLayer::new(window(1, &clock), PeerIp::new()));
    let addr = serve(app).await;
    let (ok, _) = http1(addr, http::Method::GET, "/", &[GRPC]).await;
    assert_eq!(ok.status, StatusCode::OK);
    // Over its quota: a GET is answered in HTTP's form whatever its
    // content type.
    let (refused, body) = http1(addr, http::Method::GET, "/", &[GRPC]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{body:?}");
    assert!(refused.headers.get("grpc-status").is_none());
    assert_eq!(refused.headers["content-type"], "application/problem+json");
    assert!(body.contains("\"status\":429"), "{body}");
    assert_eq!(refused.headers["retry-after"], "60");
    // A gRPC call is answered in gRPC's form, and no cache may keep it.
    let (head, status, body) = raw_call_head(addr, http::Method::POST, &[]).await;
    assert_eq!(
        (head.status, status.as_deref()),
        (StatusCode::OK, Some("8"))
    );
    assert!(body.is_empty());
    assert_eq!(head.headers["cache-control"], "no-store");

    // Without the API key a route asks for.
    let keyed = FixedWindow::builder()
        .limit(1)
        .window(Duration::from_secs(60))
        .clock(clock.clone())
        .build()
        .unwrap();
    let api_key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
    let grpc = tonic::service::Routes::new(Echo).into_axum_router();
    let app = axum::Router::new()
        .route("/", get(|| async { "hello" }))
        .merge(grpc)
        .layer(RateLimitLayer::new(keyed, api_key));
    let addr = serve(app).await;
    let (refused, body) = http1(addr, http::Method::GET, "/", &[GRPC]).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{body:?}");
    assert!(refused.headers.get("grpc-status").is_none());
    assert!(body.contains("x-api-key"), "{body}");
    let (head, status, body) = raw_call_head(addr, http::Method::POST, &[]).await;
    assert_eq!(
        (head.status, status.as_deref()),
        (StatusCode::OK, Some("16"))
    );
    assert!(body.is_empty());
    assert_eq!(head.headers["cache-control"], "no-store");
}

/// A gRPC call sent as `OPTIONS` with the headers of a CORS preflight is
/// still a call, and tonic serves it as one: `skip_if(is_preflight)` must
/// not let it past a spent quota. gRPC is `POST` only, so its refusal is
/// HTTP's `429`.
#[tokio::test]
async fn a_grpc_call_dressed_as_a_preflight_is_limited() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(
        window(1, &clock),
        PeerIp::new().peer_from(TcpConnectInfo::remote_addr),
    )
    .skip_if(is_preflight);
    let addr = tonic_server(layer).await;
    // The one call of the quota, through a raw client: tonic serves it.
    let (status, body) = raw_call(addr, http::Method::POST, &[]).await;
    assert_eq!(status, "0");
    assert_eq!(&body[5..], b"hello");
    let dressed = [
        ("origin", "https://app.example"),
        ("access-control-request-method", "POST"),
    ];
    for _ in 0..3 {
        let (head, status, body) = raw_call_head(addr, http::Method::OPTIONS, &dressed).await;
        assert_eq!(
            (head.status, status),
            (StatusCode::TOO_MANY_REQUESTS, None),
            "served unlimited: {body:?}"
        );
    }
    assert_eq!(
        say(&channel(addr).await, &[]).await.unwrap_err().code(),
        Code::ResourceExhausted
    );
}

/// Binary metadata is base64, padded or not, and tonic reads both as the
/// same bytes: `HeaderKey` on a `-bin` header gives the client one budget
/// whichever it sends.
#[tokio::test]
async fn a_binary_key_is_one_client_padded_or_not() {
    let clock = ManualClock::new();
    let keyed = FixedWindow::builder()
        .limit(1)
        .window(Duration::from_secs(60))
        .clock(clock.clone())
        .build()
        .unwrap();
    let token = HeaderKey::new(http::HeaderName::from_static("x-token-bin"));
    let addr = tonic_server(RateLimitLayer::new(keyed, token)).await;
    let (status, _) = raw_call(addr, http::Method::POST, &[("x-token-bin", "AAE=")]).await;
    assert_eq!(status, "0");
    let (status, _) = raw_call(addr, http::Method::POST, &[("x-token-bin", "AAE")]).await;
    assert_eq!(status, "8", "the unpadded key had a budget of its own");
    // Another key has its own.
    let (status, _) = raw_call(addr, http::Method::POST, &[("x-token-bin", "AAI")]).await;
    assert_eq!(status, "0");
    // What is not base64 names no client.
    let (status, _) = raw_call(addr, http::Method::POST, &[("x-token-bin", "AAF")]).await;
    assert_eq!(status, "3");
}

/// gRPC's `authorization` metadata is the `Authorization` header: its
/// scheme's case and the spaces after it are no new client.
#[tokio::test]
async fn authorization_metadata_is_one_client_however_spelled() {
    let clock = ManualClock::new();
    let keyed = FixedWindow::builder()
        .limit(1)
        .window(Duration::from_secs(60))
        .clock(clock.clone())
        .build()
        .unwrap();
    let key = HeaderKey::new(http::header::AUTHORIZATION);
    let addr = tonic_server(RateLimitLayer::new(keyed, key)).await;
    let call = |value| async move {
        raw_call(addr, http::Method::POST, &[("authorization", value)])
            .await
            .0
    };
    assert_eq!(call("Bearer t0k").await, "0");
    for spelling in ["bearer t0k", "BEARER  t0k", "Bearer   t0k"] {
        assert_eq!(call(spelling).await, "8", "{spelling}");
    }
    assert_eq!(call("Bearer T0K").await, "0");
}

/// A tonic server whose `PeerIp` reads an extension tonic never inserts:
/// every call is `INTERNAL`, whose message says nothing of the server's
/// wiring.
#[tokio::test]
async fn a_server_without_peer_addresses_tells_grpc_clients_nothing() {
    let clock = ManualClock::new();
    let heard = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let hook = std::sync::Arc::clone(&heard);
    let layer =
        RateLimitLayer::new(window(5, &clock), PeerIp::new()).on_check_error(move |_, _| {
            hook.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
    let addr = tonic_server(layer).await;
    let channel = channel(addr).await;
    for _ in 0..2 {
        let status = say(&channel, &[]).await.unwrap_err();
        assert_eq!(status.code(), Code::Internal, "{status:?}");
        for internal in [
            "ConnectInfo",
            "into_make_service",
            "peer_from",
            "TcpConnectInfo",
            "SocketAddr",
            "extension",
        ] {
            assert!(!status.message().contains(internal), "{}", status.message());
        }
    }
    assert_eq!(heard.load(std::sync::atomic::Ordering::Relaxed), 1);
}

/// Stacked layers in front of tonic: an outer 2 per 60 s, an inner 1 per
/// 5 s. The second call spends the outer layer's last unit and the inner
/// one refuses it: a gRPC client is told to wait the outer 60 s in every
/// field (`RetryInfo`, `grpc-retry-pushback-ms`, `Retry-After`), its
/// message quotes no shorter wait, and `QuotaFailure` names both exhausted
/// limits; whether or not the outer
/// layer sends headers on admitted calls.
#[tokio::test]
async fn stacked_layers_tell_a_grpc_client_the_whole_wait() {
    for outer_headers in [AdmittedHeaders::Always, AdmittedHeaders::Never] {
        for named in [true, false] {
            let case = format!("outer {outer_headers:?}, named {named}");
            let clock = ManualClock::new();
            let peer = || PeerIp::new().peer_from(TcpConnectInfo::remote_addr);
            let per = |limit, secs| {
                FixedWindow::builder()
                    .limit(limit)
                    .window(Duration::from_secs(secs))
                    .key_type::<IpAddr>()
                    .clock(clock.clone())
                    .build()
                    .unwrap()
            };
            let mut inner = RateLimitLayer::new(per(1, 5), peer());
            let mut outer = RateLimitLayer::new(per(2, 60), peer()).admitted_headers(outer_headers);
            if named {
                inner = inner.policy_name("inner").unwrap();
                outer = outer.policy_name("outer").unwrap();
            }
            // Without names, the outer item is renamed as in the headers.
            let (inner_id, outer_id) = if named {
                ("inner", "outer")
            } else {
                ("default", "default-2")
            };
            let addr = tonic_server(ServiceBuilder::new().layer(outer).layer(inner)).await;
            let channel = channel(addr).await;
            assert!(say(&channel, &[]).await.is_ok(), "{case}");
            let status = say(&channel, &[]).await.unwrap_err();
            assert_eq!(status.code(), Code::ResourceExhausted, "{case}");
            let retry = status.get_details_retry_info().expect("RetryInfo");
            assert_eq!(retry.retry_delay, Some(Duration::from_secs(60)), "{case}");
            // The message names no wait of its own: the inner layer's 5 s
            // would contradict the fields above.
            assert!(
                !status.message().contains("5 s.") && status.message().contains("headers"),
                "{case}: {}",
                status.message()
            );
            let metadata = status.metadata();
            assert_eq!(metadata.get("retry-after").unwrap(), "60", "{case}");
            assert_eq!(
                metadata.get("grpc-retry-pushback-ms").unwrap(),
                "60000",
                "{case}"
            );
            let quota = status.get_details_quota_failure().expect("QuotaFailure");
            let violations: Vec<(&str, i64, &str)> = quota
                .violations
                .iter()
                .map(|v| (v.quota_id.as_str(), v.quota_value, v.description.as_str()))
                .collect();
            assert_eq!(
                violations,
                [
                    (inner_id, 1, "1 requests per 5 s"),
                    (outer_id, 2, "2 requests per 60 s")
                ],
                "{case}"
            );
            if outer_headers == AdmittedHeaders::Always {
                // The ids are the items' names in the headers.
                let policy = metadata.get("ratelimit-policy").unwrap().to_str().unwrap();
                assert!(
                    policy.contains(&format!("\"{outer_id}\";q=2;w=60")),
                    "{policy}"
                );
            }
            // A client that came back after the inner 5 s would be refused.
            clock.advance(Duration::from_secs(5));
            let again = say(&channel, &[]).await.unwrap_err();
            assert_eq!(again.code(), Code::ResourceExhausted, "{case}");
            clock.advance(Duration::from_secs(55));
            assert!(say(&channel, &[]).await.is_ok(), "{case}");
        }
    }
}
