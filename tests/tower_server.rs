//! The example server's router (`examples/server.rs`), served by axum on
//! 127.0.0.1 with an ephemeral port, spoken to over real TCP connections by
//! hyper's client. Bounded: a few dozen requests, loopback only, a
//! `ManualClock` so that no assertion depends on timing.

// Plain `cargo test --features tower` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

mod serve;
#[allow(dead_code)]
#[path = "../examples/server.rs"]
mod server;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpSocket;
use tollgate::ManualClock;

/// Starts the example's app for `settings` on 127.0.0.1:0; its address.
async fn start(args: &[&str], clock: ManualClock) -> SocketAddr {
    let settings = server::Settings::parse(args.iter().map(|s| s.to_string())).unwrap();
    let limiter = settings.limiter(clock).unwrap();
    serve::serve(server::app(limiter, &settings.trust_proxy)).await
}

/// One GET over a fresh connection from the loopback address `from`, with
/// `headers`: the response's head and body.
async fn get(
    server: SocketAddr,
    from: IpAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (Response<()>, String) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    let stream = tokio::time::timeout(Duration::from_secs(10), socket.connect(server))
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
    (
        Response::from_parts(head, ()),
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

fn header<'a>(response: &'a Response<()>, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[tokio::test]
async fn each_algorithm_admits_exactly_the_limit_per_ip_then_429s() {
    for algorithm in [
        "token-bucket",
        "sliding-window-counter",
        "sliding-window-log",
        "fixed-window",
    ] {
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(5));
        let args = ["--algorithm", algorithm, "--limit", "3", "--window", "60"];
        let server = start(&args, clock.clone()).await;
        let alice = ip("127.0.0.1");
        let bob = ip("127.0.0.2");
        for left in (0..3).rev() {
            let (ok, body) = get(server, alice, "/", &[]).await;
            assert_eq!(ok.status(), StatusCode::OK, "{algorithm}");
            assert_eq!(body, format!("hello; {left} requests left\n"));
            assert_eq!(
                header(&ok, "ratelimit-policy"),
                Some("\"default\";q=3;w=60"),
                "{algorithm}"
            );
            let limit = header(&ok, "ratelimit").unwrap();
            assert!(
                limit.starts_with(&format!("\"default\";r={left};t=")),
                "{algorithm}: {limit}"
            );
        }
        for _ in 0..3 {
            let (denied, body) = get(server, alice, "/", &[]).await;
            assert_eq!(
                denied.status(),
                StatusCode::TOO_MANY_REQUESTS,
                "{algorithm}"
            );
            assert_eq!(
                header(&denied, "content-type"),
                Some("application/problem+json")
            );
            assert!(body.contains("\"status\":429"), "{body}");
            let retry: u64 = header(&denied, "retry-after").unwrap().parse().unwrap();
            let limit = header(&denied, "ratelimit").unwrap();
            let t: u64 = limit
                .rsplit_once(";t=")
                .and_then(|(_, t)| t.parse().ok())
                .unwrap();
            assert!(
                limit.starts_with("\"default\";r=0;"),
                "{algorithm}: {limit}"
            );
            assert!(
                retry >= 1 && retry >= t,
                "{algorithm}: retry {retry}, t {t}"
            );
        }
        // Another address has its own budget.
        let (other, _) = get(server, bob, "/", &[]).await;
        assert_eq!(other.status(), StatusCode::OK, "{algorithm}");
        // /health is never limited, and carries no rate-limit headers.
        for _ in 0..5 {
            let (health, body) = get(server, alice, "/health", &[]).await;
            assert_eq!((health.status(), body.as_str()), (StatusCode::OK, "ok\n"));
            assert!(header(&health, "ratelimit").is_none());
        }
    }
}

#[tokio::test]
async fn token_bucket_retry_after_is_the_next_token_rounded_up() {
    let clock = ManualClock::new();
    let server = start(
        &[
            "--algorithm",
            "token-bucket",
            "--limit",
            "2",
            "--window",
            "10",
        ],
        clock.clone(),
    )
    .await;
    let me = ip("127.0.0.3");
    let (first, _) = get(server, me, "/", &[]).await;
    assert_eq!(header(&first, "ratelimit"), Some("\"default\";r=1;t=5"));
    let _ = get(server, me, "/", &[]).await;
    clock.advance(Duration::from_millis(4_100));
    let (denied, _) = get(server, me, "/", &[]).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    // 0.9 s until the next token: 1, not 0.
    assert_eq!(header(&denied, "retry-after"), Some("1"));
    assert_eq!(header(&denied, "ratelimit"), Some("\"default\";r=0;t=1"));
    clock.advance(Duration::from_millis(900));
    let (again, body) = get(server, me, "/", &[]).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(body, "hello; 0 requests left\n");
}

#[tokio::test]
async fn behind_a_trusted_proxy_clients_are_told_apart_and_spoofing_changes_nothing() {
    let clock = ManualClock::new();
    let server = start(
        &[
            "--algorithm",
            "fixed-window",
            "--limit",
            "1",
            "--window",
            "60",
            "--trust-proxy",
            "127.0.0.10/32",
        ],
        clock,
    )
    .await;
    let proxy = ip("127.0.0.10");
    let xff = |value: &'static str| [("x-forwarded-for", value)];
    // Two clients behind the proxy: one request each.
    for client in ["203.0.113.1", "203.0.113.2"] {
        let (ok, _) = get(server, proxy, "/", &xff(client)).await;
        assert_eq!(ok.status(), StatusCode::OK, "{client}");
    }
    // The first client again, with a forged leftmost entry.
    let (spoofed, _) = get(server, proxy, "/", &xff("198.51.100.99, 203.0.113.1")).await;
    assert_eq!(spoofed.status(), StatusCode::TOO_MANY_REQUESTS);
    // A peer that is not a trusted proxy cannot choose its key either.
    let stranger = ip("127.0.0.11");
    let (first, _) = get(server, stranger, "/", &xff("203.0.113.77")).await;
    assert_eq!(first.status(), StatusCode::OK);
    let (second, _) = get(server, stranger, "/", &xff("203.0.113.78")).await;
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// Behind a NAT64 translator (here reported by a trusted proxy), every
/// IPv4 client arrives with an IPv6 address in the translator's prefix:
/// each is keyed by its own IPv4 address, not all by one /64.
#[tokio::test]
async fn nat64_clients_behind_a_trusted_proxy_each_have_their_own_budget() {
    let clock = ManualClock::new();
    let server = start(
        &[
            "--algorithm",
            "fixed-window",
            "--limit",
            "1",
            "--window",
            "60",
            "--trust-proxy",
            "127.0.0.10/32",
        ],
        clock,
    )
    .await;
    let proxy = ip("127.0.0.10");
    let status = |client: &'static str| async move {
        get(server, proxy, "/", &[("x-forwarded-for", client)])
            .await
            .0
            .status()
    };
    // Two IPv4 clients translated under the well-known prefix, and one
    // under the local-use /48: one request each.
    for client in [
        "64:ff9b::203.0.113.9",
        "64:ff9b::198.51.100.7",
        "64:ff9b:1:c000:2:100::",
    ] {
        assert_eq!(status(client).await, StatusCode::OK, "{client}");
    }
    // The same clients again, however their address is written.
    for client in [
        "203.0.113.9",
        "64:ff9b::cb00:7109",
        "::ffff:198.51.100.7",
        "64:ff9b:1:cb00:71:900::",
        "64:ff9b:1:abcd:0:12:198.51.100.7",
        "192.0.2.1",
    ] {
        assert_eq!(
            status(client).await,
            StatusCode::TOO_MANY_REQUESTS,
            "{client}"
        );
    }
}

#[tokio::test]
async fn concurrent_clients_are_never_over_admitted_in_total() {
    let clock = ManualClock::new();
    let server = start(
        &[
            "--algorithm",
            "sliding-window-log",
            "--limit",
            "10",
            "--window",
            "60",
        ],
        clock,
    )
    .await;
    // 8 tasks × 6 requests from one address, 48 in all, over real sockets.
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..6 {
                    let (r, _) = get(server, ip("127.0.0.4"), "/", &[]).await;
                    admitted += u32::from(r.status() == StatusCode::OK);
                }
                admitted
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    assert_eq!(total, 10);
}

#[test]
fn the_command_line() {
    let parse = |args: &[&str]| server::Settings::parse(args.iter().map(|s| s.to_string()));
    let s = parse(&[
        "--addr",
        "127.0.0.1:0",
        "--algorithm",
        "sliding-window-counter",
        "--limit",
        "7",
        "--window",
        "0.5",
        "--trust-proxy",
        "10.0.0.0/8",
        "--trust-proxy",
        "::1",
    ])
    .unwrap();
    assert_eq!(s.limit, 7);
    assert_eq!(s.window, Duration::from_millis(500));
    assert_eq!(s.trust_proxy.len(), 2);
    assert!(parse(&["--limit"]).is_err());
    assert!(parse(&["--limit", "x"]).is_err());
    assert!(parse(&["--trust-proxy", "10.0.0.0/99"]).is_err());
    assert!(parse(&["--bogus", "1"]).is_err());
    let bad = parse(&["--algorithm", "leaky"]).unwrap();
    assert!(bad.limiter(ManualClock::new()).is_err());
}
