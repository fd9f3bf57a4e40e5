//! A real HTTP server on axum, rate-limited per client IP by tollgate's
//! tower layer.
//!
//! ```text
//! cargo run --release --features tower --example server -- \
//!     --addr 127.0.0.1:8080 --algorithm token-bucket --limit 5 --window 60 \
//!     [--trust-proxy 10.0.0.0/8]...
//! ```
//!
//! `GET /` is limited to `--limit` requests per `--window` seconds for each
//! client IP (IPv6 by /64); `GET /health` is never limited. With
//! `--trust-proxy`, requests from those blocks are keyed by the rightmost
//! untrusted `X-Forwarded-For` address. Every algorithm takes the same
//! `--limit N --window W`: N requests per W seconds (for the token bucket,
//! a capacity of N refilled at N per W), advertised as
//! `RateLimit-Policy: "default";q=N;w=W`.

use std::future::Ready;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Extension};
use axum::routing::get;
use axum::Router;
use tollgate::tower::{Cidr, RateLimitLayer, TrustedProxyIp};
use tollgate::{AsyncCheck, CheckError};
use tollgate::{
    Clock, Decision, FixedWindow, MonotonicClock, SlidingWindowCounter, SlidingWindowLog,
    TokenBucket,
};

/// The limiter behind the layer, whichever algorithm was chosen.
pub type SharedLimiter = Arc<dyn AsyncCheck<IpAddr, Future = Ready<Result<Decision, CheckError>>>>;

/// The server's settings, as the command line gives them.
#[derive(Debug, Clone)]
pub struct Settings {
    pub addr: SocketAddr,
    pub algorithm: String,
    pub limit: u64,
    pub window: Duration,
    pub trust_proxy: Vec<Cidr>,
}

impl Settings {
    const USAGE: &'static str = "usage: server --addr HOST:PORT \
        --algorithm token-bucket|sliding-window-counter|sliding-window-log|fixed-window \
        --limit N --window SECONDS [--trust-proxy CIDR]...";

    /// Parses the command line (without the program name).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut settings = Settings {
            addr: "127.0.0.1:8080".parse().expect("a valid default"),
            algorithm: "token-bucket".to_owned(),
            limit: 5,
            window: Duration::from_secs(60),
            trust_proxy: Vec::new(),
        };
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            if flag == "--help" || flag == "-h" {
                return Err(Self::USAGE.to_owned());
            }
            let value = args
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{}", Self::USAGE))?;
            let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}\n{}", Self::USAGE);
            match flag.as_str() {
                "--addr" => settings.addr = value.parse().map_err(|e| bad(&e))?,
                "--algorithm" => settings.algorithm = value,
                "--limit" => settings.limit = value.parse().map_err(|e| bad(&e))?,
                "--window" => {
                    let secs: f64 = value.parse().map_err(|e| bad(&e))?;
                    settings.window = Duration::try_from_secs_f64(secs).map_err(|e| bad(&e))?;
                }
                "--trust-proxy" => settings
                    .trust_proxy
                    .push(value.parse().map_err(|e| bad(&e))?),
                _ => return Err(format!("unknown flag {flag}\n{}", Self::USAGE)),
            }
        }
        Ok(settings)
    }

    /// The limiter these settings describe, reading `clock`.
    pub fn limiter<C: Clock + 'static>(&self, clock: C) -> Result<SharedLimiter, String> {
        let (n, w) = (self.limit, self.window);
        let limiter: SharedLimiter = match self.algorithm.as_str() {
            "token-bucket" => Arc::new(
                TokenBucket::builder()
                    .rate(n, w)
                    .capacity(n)
                    .key_type::<IpAddr>()
                    .clock(clock)
                    .build()
                    .map_err(|e| e.to_string())?,
            ),
            "sliding-window-counter" => Arc::new(
                SlidingWindowCounter::builder()
                    .limit(n)
                    .window(w)
                    .key_type::<IpAddr>()
                    .clock(clock)
                    .build()
                    .map_err(|e| e.to_string())?,
            ),
            "sliding-window-log" => Arc::new(
                SlidingWindowLog::builder()
                    .limit(n)
                    .window(w)
                    .key_type::<IpAddr>()
                    .clock(clock)
                    .build()
                    .map_err(|e| e.to_string())?,
            ),
            "fixed-window" => Arc::new(
                FixedWindow::builder()
                    .limit(n)
                    .window(w)
                    .key_type::<IpAddr>()
                    .clock(clock)
                    .build()
                    .map_err(|e| e.to_string())?,
            ),
            other => return Err(format!("unknown algorithm {other:?}\n{}", Self::USAGE)),
        };
        Ok(limiter)
    }
}

/// The application: `GET /` limited per client IP, `GET /health` not.
/// Serve it with `into_make_service_with_connect_info::<SocketAddr>()`.
pub fn app(limiter: SharedLimiter, trust_proxy: &[Cidr]) -> Router {
    // With no trusted blocks this is the peer address itself.
    let client_ip = TrustedProxyIp::new(trust_proxy.iter().copied())
        .peer_from(|c: &ConnectInfo<SocketAddr>| c.0.ip());
    // The handler reads the decision, so the layer leaves it in the
    // request's extensions.
    let layer = RateLimitLayer::new(limiter, client_ip).decision_extension(true);
    Router::new()
        .route("/", get(hello))
        // Only the routes above get the limit.
        .route_layer(layer)
        .route("/health", get(|| async { "ok\n" }))
}

/// The limited handler: it reads the decision the layer left for it.
async fn hello(Extension(decision): Extension<Decision>) -> String {
    format!("hello; {} requests left\n", decision.remaining())
}

#[tokio::main]
async fn main() {
    let settings = match Settings::parse(std::env::args().skip(1)) {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let limiter = match settings.limiter(MonotonicClock::new()) {
        Ok(limiter) => limiter,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let listener = tokio::net::TcpListener::bind(settings.addr)
        .await
        .unwrap_or_else(|e| panic!("cannot listen on {}: {e}", settings.addr));
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    let quota = limiter.quota();
    println!(
        "listening on http://{addr}: {} ({} requests per {:?} per client IP)",
        settings.algorithm,
        quota.limit(),
        settings.window
    );
    let app = app(limiter, &settings.trust_proxy);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
    .expect("the server runs until interrupted");
}
