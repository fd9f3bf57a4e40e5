//! The HTTP layer alone, in process: `N` requests through tollgate's
//! layer (or tower_governor's, or none) around a trivial handler, on one
//! thread, with no network and no framework. `scripts/layer_instructions.sh`
//! counts the instructions inside [`measured`] with callgrind, which is
//! exact (the same binary gives the same count), unlike a whole server's
//! count, which moves with how requests batch.
//!
//! ```text
//! cargo run --release --features axum --example layer_instructions -- MODE N
//! ```
//!
//! Modes, as in `examples/http_load_server.rs`: `bare` (the handler
//! alone), `tollgate` (headers on every response), `tollgate-no-headers`,
//! `tollgate-extension` (headers, and the `Decision` in the request's
//! extensions), `governor` and
//! `governor-headers` (tower_governor with `use_headers()`). Each
//! request carries axum's `ConnectInfo<SocketAddr>`, as under
//! `into_make_service_with_connect_info`; `PeerIp` reads it by itself with
//! the `axum` feature, and through `peer_from` without it. The quota is
//! 10⁹ requests per second with a burst of 10⁹: every request is
//! admitted. It prints the number of response headers seen, so that
//! nothing is optimised away.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{HeaderValue, Request, Response};
use tollgate::tower::{AdmittedHeaders, PeerIp, RateLimitLayer};
use tollgate::TokenBucket;
use tower::{Layer, Service, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

/// The handler: `ok` with a content type, as a framework's response has.
async fn ok(_: Request<Body>) -> Result<Response<Body>, Infallible> {
    let mut response = Response::new(Body::from("ok"));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    Ok(response)
}

/// `n` requests through `service`; the response headers seen.
async fn run<S>(service: &mut S, n: u64) -> usize
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let peer: SocketAddr = "127.0.0.1:5555".parse().expect("an address");
    let mut headers = 0;
    for _ in 0..n {
        let mut request = Request::get("/").body(Body::empty()).expect("a request");
        request.extensions_mut().insert(ConnectInfo(peer));
        let response = service
            .ready()
            .await
            .expect("ready")
            .call(request)
            .await
            .expect("a response");
        headers += response.headers().len();
    }
    headers
}

/// The part callgrind counts: `n` requests, after a warm-up outside it.
#[inline(never)]
fn measured<S>(runtime: &tokio::runtime::Runtime, service: &mut S, n: u64) -> usize
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    runtime.block_on(run(service, n))
}

fn time<S>(mut service: S, n: u64) -> usize
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    // The clock's calibration, the client's first check, the runtime.
    runtime.block_on(run(&mut service, 10));
    measured(&runtime, &mut service, n)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(n)) = (args.next(), args.next().and_then(|n| n.parse().ok())) else {
        eprintln!("usage: layer_instructions bare|tollgate|tollgate-no-headers|tollgate-extension|governor|governor-headers N");
        std::process::exit(2);
    };
    let handler = tower::service_fn(ok);
    let limiter = || {
        TokenBucket::builder()
            .rate(1, Duration::from_nanos(1))
            .capacity(1_000_000_000)
            .key_type::<IpAddr>()
            .build()
            .expect("a valid token bucket")
    };
    #[cfg(feature = "axum")]
    let peer = PeerIp::new();
    #[cfg(not(feature = "axum"))]
    let peer = PeerIp::new().peer_from(|c: &ConnectInfo<SocketAddr>| c.0.ip());
    let layer = RateLimitLayer::new(limiter(), peer);
    let headers = match mode.as_str() {
        "bare" => time(handler, n),
        "tollgate" => time(layer.layer(handler), n),
        "tollgate-no-headers" => time(
            layer
                .admitted_headers(AdmittedHeaders::Never)
                .layer(handler),
            n,
        ),
        "tollgate-extension" => time(layer.decision_extension(true).layer(handler), n),
        "governor" => {
            let config = GovernorConfigBuilder::default()
                .period(Duration::from_nanos(1))
                .burst_size(1_000_000_000)
                .finish()
                .expect("a valid governor quota");
            time(GovernorLayer::new(config).layer(handler), n)
        }
        "governor-headers" => {
            let config = GovernorConfigBuilder::default()
                .period(Duration::from_nanos(1))
                .burst_size(1_000_000_000)
                .use_headers()
                .finish()
                .expect("a valid governor quota");
            time(GovernorLayer::new(config).layer(handler), n)
        }
        other => {
            eprintln!("unknown mode {other}");
            std::process::exit(2);
        }
    };
    println!("{headers}");
}
