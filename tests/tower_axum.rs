//! `PeerIp` under a real axum server with no ceremony: with the `axum`
//! feature it reads axum's `ConnectInfo<SocketAddr>` by itself. Loopback
//! only, a few requests, a `ManualClock`.

// `cargo test --features axum`; the loom models skip it.
#![cfg(not(feature = "loom"))]

mod serve;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serve::serve;
use tokio::net::TcpSocket;
use tollgate::tower::{PeerIp, RateLimitLayer, TrustedProxyIp};
use tollgate::{ManualClock, TokenBucket};

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
