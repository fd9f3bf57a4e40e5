//! `PeerIp` under a real axum server with no ceremony: with the `axum`
//! feature it reads axum's `ConnectInfo<SocketAddr>` by itself. Loopback
//! only, a few requests, a `ManualClock`.

// `cargo test --features axum`; the loom models skip it.
#![cfg(not(feature = "loom"))]

mod serve;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serve::serve;
use tokio::net::TcpListener;
use tokio::net::{TcpSocket, TcpStream};
use tollgate::tower::{
    AdmittedHeaders, HeaderKey, MissingKey, PeerIp, RateLimitLayer, TrustedProxyIp,
};
use tollgate::{FixedWindow, ManualClock, TokenBucket};

/// One GET over a fresh connection from the loopback address `from`: its
/// status and body.
async fn get_from(server: SocketAddr, from: &str) -> (StatusCode, String) {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    let stream = tokio::time::timeout(Duration::from_secs(10), socket.connect(server))
        .await
        .expect("connect within 10 s")
        .unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = Request::get("/")
        .header("host", server.to_string())
        .header("x-forwarded-for", "6.6.6.6")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
        .await
        .expect("a response within 10 s")
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

fn limiter() -> tollgate::Limiter<TokenBucket, IpAddr, ManualClock> {
    TokenBucket::builder()
        .rate(2, Duration::from_secs(60))
        .key_type::<IpAddr>()
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

#[tokio::test]
async fn peer_ip_reads_axums_connect_info_by_itself() {
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::new(limiter(), PeerIp::new()));
    let server = serve(app).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(get_from(server, "127.0.0.1").await.0.as_u16());
    }
    assert_eq!(statuses, [200, 200, 429]);
    // Another client has its own budget.
    assert_eq!(get_from(server, "127.0.0.2").await.0, StatusCode::OK);

    // The same for a trusted-proxy key: the loopback peer is not trusted,
    // so it is the key, whatever X-Forwarded-For says.
    let proxy = TrustedProxyIp::new(["10.0.0.0/8".parse().unwrap()]);
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::new(limiter(), proxy));
    let server = serve(app).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let (status, body) = get_from(server, "127.0.0.3").await;
        assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        statuses.push(status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 429]);
}

/// One GET of `path` over a fresh connection from 127.0.0.1 with
/// `headers`: the response's head and body.
async fn get_with(
    server: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (http::response::Parts, String) {
    let stream = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(server))
        .await
        .expect("connect within 10 s")
        .unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::get(path).header("host", server.to_string());
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

/// A string-keyed fixed window of `limit` per minute.
fn keyed(limit: u64) -> tollgate::Limiter<FixedWindow, String, ManualClock> {
    FixedWindow::builder()
        .limit(limit)
        .window(Duration::from_secs(60))
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

/// RFC 9110 (15.5.2): a `401` carries `WWW-Authenticate` with a challenge
/// for the credentials the route asks for: `Bearer` for `Authorization`,
/// an `ApiKey` challenge naming any other header, or the one configured;
/// also on a `401` that `respond_with` builds. A request with its
/// credentials passes, and a `400` has no challenge.
#[tokio::test]
async fn a_401_carries_a_challenge() {
    let route = |key: HeaderKey| {
        let app = Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(RateLimitLayer::new(keyed(5), key));
        serve(app)
    };
    let cases = [
        (HeaderKey::new(AUTHORIZATION), "Bearer"),
        (
            HeaderKey::new(HeaderName::from_static("x-api-key")),
            "ApiKey header=\"x-api-key\"",
        ),
        (
            HeaderKey::new(AUTHORIZATION)
                .challenge(HeaderValue::from_static("Basic realm=\"api\"")),
            "Basic realm=\"api\"",
        ),
    ];
    for (key, challenge) in cases {
        let server = route(key).await;
        let (refused, body) = get_with(server, "/", &[]).await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{body}");
        let challenges: Vec<_> = refused.headers.get_all(WWW_AUTHENTICATE).iter().collect();
        assert_eq!(challenges, [challenge], "{body}");
    }
    let server = route(HeaderKey::new(AUTHORIZATION)).await;
    let (ok, _) = get_with(server, "/", &[("authorization", "Bearer t")]).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert!(ok.headers.get(WWW_AUTHENTICATE).is_none());

    // A 401 of the server's own making gets the challenge too.
    let layer =
        RateLimitLayer::new(keyed(5), HeaderKey::new(AUTHORIZATION)).respond_with(|refusal, _| {
            let mut response = http::Response::new(String::from("who are you?"));
            *response.status_mut() = refusal.status();
            response
        });
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer);
    let (refused, body) = get_with(serve(app).await, "/", &[]).await;
    assert_eq!(
        (refused.status, body.as_str()),
        (StatusCode::UNAUTHORIZED, "who are you?")
    );
    assert_eq!(refused.headers[WWW_AUTHENTICATE], "Bearer");

    // A missing key answered 400 challenges nothing.
    let key = HeaderKey::new(AUTHORIZATION).on_missing(MissingKey::BadRequest);
    let (refused, _) = get_with(route(key).await, "/", &[]).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(refused.headers.get(WWW_AUTHENTICATE).is_none());
}

/// The layer outermost, a concurrency limit of 1 inside it, and a handler
/// held until released: while one request holds the only slot, a client
/// over its quota is refused at once (the layer decides before it waits
/// for the inner service), and an admitted request waits for the slot.
#[tokio::test]
async fn a_refusal_does_not_wait_for_the_inner_service() {
    use tokio::sync::{mpsc, Semaphore};
    use tollgate::tower::{Extraction, KeyFn};

    let gate = Arc::new(Semaphore::new(0));
    let (entered, mut entering) = mpsc::unbounded_channel();
    let handler = {
        let gate = Arc::clone(&gate);
        move || async move {
            entered.send(()).unwrap();
            gate.acquire().await.unwrap().forget();
            "hello"
        }
    };
    let client = KeyFn::new(|request: &http::request::Parts| {
        let client = request.headers.get("x-client").unwrap().to_str().unwrap();
        Extraction::Key(client.to_owned())
    });
    let stack = tower::ServiceBuilder::new()
        .layer(RateLimitLayer::new(keyed(1), client))
        .concurrency_limit(1);
    let app = Router::new().route("/", get(handler)).layer(stack);
    let server = serve(app).await;

    // Alice's one request holds the only slot.
    let first = tokio::spawn(get_with(server, "/", &[("x-client", "alice")]));
    tokio::time::timeout(Duration::from_secs(10), entering.recv())
        .await
        .expect("the handler entered within 10 s");
    // Her next is refused while the slot is held, not after.
    let refused = tokio::time::timeout(
        Duration::from_secs(2),
        get_with(server, "/", &[("x-client", "alice")]),
    )
    .await
    .expect("a refusal that does not wait for the slot");
    assert_eq!(refused.0.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.0.headers["retry-after"], "60");
    // Bob is admitted, and waits for the slot.
    let second = tokio::spawn(get_with(server, "/", &[("x-client", "bob")]));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!second.is_finished());
    assert!(entering.try_recv().is_err(), "two requests in the handler");
    gate.add_permits(2);
    for request in [first, second] {
        let (head, body) = tokio::time::timeout(Duration::from_secs(10), request)
            .await
            .expect("served within 10 s")
            .unwrap();
        assert_eq!((head.status, body.as_str()), (StatusCode::OK, "hello"));
    }
}

/// Serves `app` on 127.0.0.1:0 *without* connect info: a server not wired
/// to record peer addresses.
async fn serve_without_connect_info(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// A server not wired to record peer addresses: every client is told
/// 500 with nothing of the server's wiring in it, and the operator hears
/// how to wire it, once, through `on_check_error`.
#[tokio::test]
async fn a_server_without_peer_addresses_tells_clients_nothing_and_the_operator_once() {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let hook = Arc::clone(&heard);
    let layer =
        RateLimitLayer::new(limiter(), PeerIp::new()).on_check_error(move |error, request| {
            hook.lock()
                .unwrap()
                .push(format!("{} {error}", request.uri.path()));
        });
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer);
    let server = serve_without_connect_info(app).await;
    for _ in 0..3 {
        let (status, body) = get_from(server, "127.0.0.1").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        for internal in [
            "into_make_service",
            "ConnectInfo",
            "peer_from",
            "SocketAddr",
            "extension",
            "axum",
        ] {
            assert!(!body.contains(internal), "{internal}: {body}");
        }
    }
    let heard = heard.lock().unwrap();
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert!(
        heard[0].starts_with("/ ") && heard[0].contains("into_make_service_with_connect_info"),
        "{}",
        heard[0]
    );
}

/// One GET of `/` over a fresh connection from 127.0.0.1: its status,
/// `Retry-After` and body.
async fn status_and_retry(server: SocketAddr) -> (StatusCode, Option<u64>, String) {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new("127.0.0.1".parse().unwrap(), 0))
        .unwrap();
    let stream = tokio::time::timeout(Duration::from_secs(10), socket.connect(server))
        .await
        .expect("connect within 10 s")
        .unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = Request::get("/")
        .header("host", server.to_string())
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
        .await
        .expect("a response within 10 s")
        .unwrap();
    let retry = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, retry, String::from_utf8(body.to_vec()).unwrap())
}

/// Stacked layers: an outer 2 per 60 s, an inner 1 per 5 s. The second
/// request spends the outer layer's last unit and the inner one refuses
/// it: the client must wait for the outer window too, so `Retry-After`
/// says 60, whichever headers each layer sends on admitted responses, and
/// the problem body quotes no shorter wait;
/// a client that waits less is refused again, and one that waits as told
/// is admitted.
#[tokio::test]
async fn stacked_layers_hold_retry_after_whatever_their_header_settings() {
    let settings = [
        AdmittedHeaders::Always,
        AdmittedHeaders::Never,
        AdmittedHeaders::NearLimit(0),
        AdmittedHeaders::NearLimit(5),
    ];
    for outer_headers in settings {
        for inner_headers in [AdmittedHeaders::Always, AdmittedHeaders::Never] {
            let case = format!("outer {outer_headers:?}, inner {inner_headers:?}");
            let clock = ManualClock::new();
            let window = |limit, secs| {
                FixedWindow::builder()
                    .limit(limit)
                    .window(Duration::from_secs(secs))
                    .key_type::<IpAddr>()
                    .clock(clock.clone())
                    .build()
                    .unwrap()
            };
            let inner = RateLimitLayer::new(window(1, 5), PeerIp::new())
                .policy_name("inner")
                .unwrap()
                .admitted_headers(inner_headers);
            let outer = RateLimitLayer::new(window(2, 60), PeerIp::new())
                .policy_name("outer")
                .unwrap()
                .admitted_headers(outer_headers);
            let app = Router::new()
                .route("/", get(|| async { "hello" }))
                .layer(inner)
                .layer(outer);
            let server = serve(app).await;
            assert_eq!(status_and_retry(server).await.0, StatusCode::OK, "{case}");
            let (status, retry, body) = status_and_retry(server).await;
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{case}");
            assert_eq!(retry, Some(60), "{case}");
            // The inner layer's problem body quotes no wait of its own,
            // which would be its 5 s.
            assert!(!body.contains("5 s."), "{case}: {body}");
            // After the inner layer's 5 s, the outer layer refuses.
            clock.advance(Duration::from_secs(5));
            let (status, retry, _) = status_and_retry(server).await;
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{case}");
            assert_eq!(retry, Some(55), "{case}");
            // After the wait first given, admitted.
            clock.advance(Duration::from_secs(55));
            assert_eq!(status_and_retry(server).await.0, StatusCode::OK, "{case}");
        }
    }
}

/// With the `tracing` feature, the operator also hears of a server not
/// wired to record peer addresses as one `ERROR` event, however many
/// requests it fails.
#[cfg(feature = "tracing")]
#[tokio::test]
async fn a_server_without_peer_addresses_is_one_error_event() {
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    /// Records each event's level, target and fields.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<(Level, String, String)>>>);

    struct Fields<'a>(&'a mut String);

    impl tracing::field::Visit for Fields<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            self.0.push_str(&format!("{}={value:?} ", field.name()));
        }
    }

    impl Subscriber for Recorder {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut fields = String::new();
            event.record(&mut Fields(&mut fields));
            let meta = event.metadata();
            self.0
                .lock()
                .unwrap()
                .push((*meta.level(), meta.target().to_owned(), fields));
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    let recorder = Recorder::default();
    // Global, so that every thread's callsites are live for it (a scoped
    // subscriber races with the other tests' first events); this test's
    // events are told apart by their policy.
    tracing::subscriber::set_global_default(recorder.clone()).unwrap();
    let layer = RateLimitLayer::new(limiter(), PeerIp::new())
        .policy_name("traced")
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer);
    let server = serve_without_connect_info(app).await;
    for _ in 0..3 {
        let (status, _) = get_from(server, "127.0.0.1").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    }
    let events: Vec<_> = recorder
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, target, fields)| target == "tollgate" && fields.contains("policy=traced"))
        .cloned()
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    let (level, _, fields) = &events[0];
    assert_eq!(*level, Level::ERROR);
    assert!(
        fields.contains("into_make_service_with_connect_info"),
        "{fields}"
    );
}
