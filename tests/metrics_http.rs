//! The metrics example's router on loopback: a known traffic shape, then a
//! scrape of its Prometheus endpoint, whose series, labels and values are
//! checked one by one. `cargo test --features axum,metrics --test
//! metrics_http`; a dozen requests, well under a second.

#![cfg(not(feature = "loom"))]

mod prom;
mod serve;

// The example itself, so that what is tested is what `cargo run
// --example metrics` serves (its `main` is not called here).
#[allow(dead_code)]
#[path = "../examples/metrics.rs"]
mod example;

use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// One GET of `path` over a fresh connection (a POST with `content_type`,
/// if given): its status, `grpc-status` header and body.
async fn get(
    server: SocketAddr,
    path: &str,
    content_type: Option<&str>,
) -> (StatusCode, Option<String>, String) {
    let stream = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(server))
        .await
        .expect("connect within 10 s")
        .unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::get(path).header("host", server.to_string());
    if let Some(content_type) = content_type {
        // A gRPC call is a POST.
        request = Request::post(path)
            .header("host", server.to_string())
            .header("content-type", content_type);
    }
    let response = tokio::time::timeout(
        Duration::from_secs(10),
        sender.send_request(request.body(Empty::<Bytes>::new()).unwrap()),
    )
    .await
    .expect("a response within 10 s")
    .unwrap();
    let status = response.status();
    let grpc = response
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, grpc, String::from_utf8(body.to_vec()).unwrap())
}

/// 10 requests at a limit of 7 (7 admitted, 3 refused with 429), then one
/// gRPC call (refused with `RESOURCE_EXHAUSTED`): the scrape says exactly
/// that, for the limiter and for the layer, with both sides of every
/// ratio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_after_a_known_traffic_shape_counts_it_exactly() {
    let app = example::app(prom::recorder().clone(), 7).unwrap();
    let server = serve::serve(app).await;

    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(get(server, "/", None).await.0.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 200, 200, 429, 429, 429]);
    let (status, grpc, _) = get(server, "/", Some("application/grpc")).await;
    assert_eq!((status, grpc.as_deref()), (StatusCode::OK, Some("8")));

    let (status, _, text) = get(server, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    let value = |name, labels: &[(&str, &str)]| prom::value(&text, name, labels);

    // The limiter: decisions and units, both sides.
    let api = ("limiter", "api");
    for (outcome, n) in [("admitted", 7.0), ("denied", 4.0)] {
        let labels = [api, ("outcome", outcome)];
        assert_eq!(
            value("tollgate_decisions_total", &labels),
            Some(n),
            "{outcome}\n{text}"
        );
        assert_eq!(value("tollgate_units_total", &labels), Some(n), "{outcome}");
    }
    // One client (127.0.0.1), no cap, nothing removed.
    assert_eq!(value("tollgate_clients", &[api]), Some(1.0));
    assert_eq!(
        value("tollgate_entries_awaiting_removal", &[api]),
        Some(0.0)
    );
    assert_eq!(value("tollgate_clients_max", &[api]), None, "uncapped");

    // The layer: every request by transport and outcome, zeros included.
    let requests = |transport, outcome| {
        value(
            "tollgate_layer_requests_total",
            &[api, ("transport", transport), ("outcome", outcome)],
        )
    };
    assert_eq!(requests("http", "admitted"), Some(7.0));
    assert_eq!(requests("http", "limited"), Some(3.0));
    assert_eq!(requests("grpc", "limited"), Some(1.0));
    for (transport, outcome) in [
        ("http", "unavailable"),
        ("http", "rejected"),
        ("http", "skipped"),
        ("grpc", "admitted"),
        ("grpc", "unavailable"),
    ] {
        assert_eq!(
            requests(transport, outcome),
            Some(0.0),
            "{transport} {outcome}"
        );
    }
    // Its own answers by the status they carried: three 429s, one gRPC 8.
    let responses = prom::series_of(&text, "tollgate_layer_responses_total", "api");
    assert_eq!(responses.len(), 2, "{responses:?}");
    let status = |transport, status| {
        value(
            "tollgate_layer_responses_total",
            &[api, ("transport", transport), ("status", status)],
        )
    };
    assert_eq!(status("http", "429"), Some(3.0));
    assert_eq!(status("grpc", "8"), Some(1.0));

    // The scrape itself is not limited, and a second one adds nothing.
    let (_, _, again) = get(server, "/metrics", None).await;
    assert_eq!(
        prom::value(
            &again,
            "tollgate_decisions_total",
            &[api, ("outcome", "admitted")]
        ),
        Some(7.0)
    );
    assert_eq!(
        prom::value(
            &again,
            "tollgate_layer_requests_total",
            &[api, ("transport", "http"), ("outcome", "limited")]
        ),
        Some(3.0)
    );
}

/// A scrape with no call into tollgate, as the exporter's own listener,
/// a handler that only renders or a push gateway makes: 10 requests at a
/// limit of 7, then, 1.5 s later, a scrape that only renders shows all of
/// them, the last second's included, for the limiter and for the layer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_that_only_renders_shows_every_decision_a_second_later() {
    use std::net::IpAddr;

    use axum::routing::get as route;
    use tollgate::tower::{PeerIp, RateLimitLayer};
    use tollgate::FixedWindow;

    let prometheus = prom::recorder().clone();
    let limiter = FixedWindow::builder()
        .limit(7)
        .window(Duration::from_secs(60))
        .name("renders-only")
        .key_type::<IpAddr>()
        .build()
        .unwrap();
    let app = axum::Router::new()
        .route("/", route(|| async { "hello" }))
        .route_layer(RateLimitLayer::new(limiter, PeerIp::new()))
        // Renders what the recorder holds, and nothing else: no
        // `publish_metrics`.
        .route(
            "/metrics",
            route(move || async move { prometheus.render() }),
        );
    let server = serve::serve(app).await;

    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(get(server, "/", None).await.0.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 200, 200, 429, 429, 429]);
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let (status, _, text) = get(server, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    let value = |name, labels: &[(&str, &str)]| prom::value(&text, name, labels);
    let limiter = ("limiter", "renders-only");
    for (outcome, n) in [("admitted", 7.0), ("denied", 3.0)] {
        let labels = [limiter, ("outcome", outcome)];
        assert_eq!(
            value("tollgate_decisions_total", &labels),
            Some(n),
            "{outcome}\n{text}"
        );
        assert_eq!(value("tollgate_units_total", &labels), Some(n), "{outcome}");
    }
    assert_eq!(value("tollgate_clients", &[limiter]), Some(1.0));
    for (outcome, n) in [("admitted", 7.0), ("limited", 3.0)] {
        assert_eq!(
            value(
                "tollgate_layer_requests_total",
                &[limiter, ("transport", "http"), ("outcome", outcome)],
            ),
            Some(n),
            "{outcome}\n{text}"
        );
    }
    assert_eq!(
        value(
            "tollgate_layer_responses_total",
            &[limiter, ("transport", "http"), ("status", "429")],
        ),
        Some(3.0),
        "{text}"
    );
}
