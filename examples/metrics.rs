//! An axum server rate-limited per client IP, with its limiter's and
//! layer's series on a Prometheus endpoint.
//!
//! ```text
//! cargo run --features axum,metrics --example metrics -- [ADDR] [LIMIT]
//! ```
//!
//! Serves on `ADDR` (default `127.0.0.1:3000`): `GET /` is limited to
//! `LIMIT` (default 7) requests per minute per client IP, `GET /metrics`
//! is never limited and answers Prometheus's text format, with the
//! counters of the limiter (named `api`) and of the layer:
//!
//! ```text
//! for i in $(seq 10); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:3000/; done
//! curl -s http://127.0.0.1:3000/metrics | grep tollgate_
//! tollgate_decisions_total{limiter="api",outcome="admitted"} 7
//! tollgate_decisions_total{limiter="api",outcome="denied"} 3
//! ...
//! ```
//!
//! `tests/metrics_http.rs` serves this very router on loopback, sends a
//! known traffic shape and checks every figure.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tollgate::tower::{PeerIp, RateLimitLayer};
use tollgate::{ConfigError, FixedWindow};

/// The server: `GET /` behind a limit of `limit` requests per minute per
/// client IP, and `GET /metrics`, which publishes the limiter's and the
/// layer's counts and renders what `prometheus` holds.
pub fn app(prometheus: PrometheusHandle, limit: u64) -> Result<Router, ConfigError> {
    let limiter = FixedWindow::builder()
        .limit(limit)
        .window(Duration::from_secs(60))
        .name("api")
        .key_type::<IpAddr>()
        .build()?;
    // `PeerIp` reads axum's `ConnectInfo` by itself (the `axum` feature).
    let layer = RateLimitLayer::new(limiter, PeerIp::new());
    let scrape = layer.clone();
    Ok(Router::new()
        .route("/", get(|| async { "hello" }))
        .route_layer(layer)
        .route(
            "/metrics",
            get(move || async move {
                // Counts reach the recorder by themselves about once a
                // second; publishing before rendering makes the figures
                // exact to the last request.
                scrape.publish_metrics();
                prometheus.render()
            }),
        ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:3000".into())
        .parse()?;
    let limit: u64 = args.next().map_or(Ok(7), |limit| limit.parse())?;
    // The recorder every `metrics` call in the process reaches, tollgate's
    // included; no listener of its own: `/metrics` renders it.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("serving on http://{}/ and /metrics", listener.local_addr()?);
    axum::serve(
        listener,
        app(prometheus, limit)?.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
