//! The server `scripts/http_load.sh` loads with wrk: one trivial axum
//! handler, bare or behind a per-client-IP rate limiter, so that the
//! limiter's share of a real HTTP request's cost can be measured.
//!
//! ```text
//! cargo run --release --features axum --example http_load_server -- \
//!     [--addr 127.0.0.1:0] \
//!     --mode bare|bare-headers|tollgate|tollgate-no-headers|tollgate-extension|governor|governor-headers \
//!     --scenario allowed|deny [--workers N]
//! ```
//!
//! - `--mode bare`: `GET /` answers `ok`, with no limiter.
//! - `--mode bare-headers`: the same handler returning, beside `ok`, the
//!   `RateLimit-Policy` and `RateLimit` values tollgate sends here, made
//!   once: what carrying the two fields costs axum and hyper, with
//!   nothing decided or rendered per request.
//! - `--mode tollgate`: the same handler behind tollgate's
//!   [`RateLimitLayer`] with a token bucket keyed by [`PeerIp`] (which
//!   reads axum's `ConnectInfo` with the `axum` feature), as it ships
//!   (rate-limit headers on every response).
//! - `--mode tollgate-no-headers`: the same, with
//!   `AdmittedHeaders::Never`: headers only on refusals, like
//!   tower_governor's default.
//! - `--mode tollgate-extension`: as `tollgate`, with the `Decision` in
//!   the request's extensions too (`decision_extension(true)`), for
//!   handlers that read it.
//! - `--mode governor`: the same handler behind tower_governor's
//!   `GovernorLayer` with the equivalent quota keyed by its
//!   `PeerIpKeyExtractor`, as it ships (no headers on admitted responses).
//! - `--mode governor-headers`: the same with tower_governor's
//!   `use_headers()`: `x-ratelimit-limit` and `x-ratelimit-remaining` on
//!   every admitted response, the like-for-like peer of `--mode tollgate`.
//!
//! Scenarios: `allowed` is 10⁹ requests per second with a burst of 10⁹,
//! so every request is admitted; `deny` is 1 request per hour with a burst
//! of 1, so after the first request the client is refused with `429`.
//!
//! When it is listening it prints `listening on http://ADDR/ ...` on
//! stdout; it runs until killed. `--workers` sets the tokio worker threads
//! (default: the CPUs this process may run on, so one under
//! `taskset -c 0`).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use http::{HeaderName, HeaderValue};
use tollgate::tower::{AdmittedHeaders, PeerIp, RateLimitLayer};
use tollgate::TokenBucket;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

const USAGE: &str = "usage: http_load_server [--addr HOST:PORT] \
    --mode bare|bare-headers|tollgate|tollgate-no-headers|tollgate-extension|governor|governor-headers \
    --scenario allowed|deny [--workers N]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Bare,
    BareHeaders,
    Tollgate,
    TollgateNoHeaders,
    TollgateExtension,
    Governor,
    GovernorHeaders,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Allowed,
    Deny,
}

impl Scenario {
    /// `(burst, period)`: `burst` requests at once, then one more every
    /// `period`. Both libraries take exactly this.
    fn quota(self) -> (u32, Duration) {
        match self {
            Scenario::Allowed => (1_000_000_000, Duration::from_nanos(1)),
            Scenario::Deny => (1, Duration::from_secs(3600)),
        }
    }
}

#[derive(Debug)]
struct Settings {
    addr: SocketAddr,
    mode: Mode,
    scenario: Scenario,
    workers: Option<usize>,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Settings, String> {
    let mut settings = Settings {
        addr: "127.0.0.1:0".parse().expect("a valid default"),
        mode: Mode::Bare,
        scenario: Scenario::Allowed,
        workers: None,
    };
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.to_owned());
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let bad = || format!("{flag} {value}: not understood\n{USAGE}");
        match flag.as_str() {
            "--addr" => settings.addr = value.parse().map_err(|_| bad())?,
            "--mode" => {
                settings.mode = match value.as_str() {
                    "bare" => Mode::Bare,
                    "bare-headers" => Mode::BareHeaders,
                    "tollgate" => Mode::Tollgate,
                    "tollgate-no-headers" => Mode::TollgateNoHeaders,
                    "tollgate-extension" => Mode::TollgateExtension,
                    "governor" => Mode::Governor,
                    "governor-headers" => Mode::GovernorHeaders,
                    _ => return Err(bad()),
                }
            }
            "--scenario" => {
                settings.scenario = match value.as_str() {
                    "allowed" => Scenario::Allowed,
                    "deny" => Scenario::Deny,
                    _ => return Err(bad()),
                }
            }
            "--workers" => match value.parse() {
                Ok(n) if n > 0 => settings.workers = Some(n),
                _ => return Err(bad()),
            },
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    Ok(settings)
}

/// The one handler, in every mode.
async fn ok() -> &'static str {
    "ok"
}

/// The handler of `bare-headers`: `ok`, with the two fields tollgate
/// sends in the `allowed` scenario, made once.
async fn ok_with_headers() -> ([(HeaderName, HeaderValue); 2], &'static str) {
    const POLICY: HeaderValue = HeaderValue::from_static("\"default\";q=1000000000;w=1");
    const LIMIT: HeaderValue = HeaderValue::from_static("\"default\";r=999999999;t=1");
    (
        [
            (HeaderName::from_static("ratelimit-policy"), POLICY),
            (HeaderName::from_static("ratelimit"), LIMIT),
        ],
        "ok",
    )
}

fn app(mode: Mode, scenario: Scenario) -> Router {
    let router = Router::new().route("/", get(ok));
    let (burst, period) = scenario.quota();
    match mode {
        Mode::Bare => router,
        Mode::BareHeaders => Router::new().route("/", get(ok_with_headers)),
        Mode::Tollgate | Mode::TollgateNoHeaders | Mode::TollgateExtension => {
            let limiter = TokenBucket::builder()
                .rate(1, period)
                .capacity(u64::from(burst))
                .key_type::<IpAddr>()
                .build()
                .expect("a valid token bucket");
            let layer = RateLimitLayer::new(limiter, PeerIp::new());
            match mode {
                Mode::TollgateNoHeaders => {
                    router.layer(layer.admitted_headers(AdmittedHeaders::Never))
                }
                Mode::TollgateExtension => router.layer(layer.decision_extension(true)),
                _ => router.layer(layer),
            }
        }
        Mode::Governor => {
            let config = GovernorConfigBuilder::default()
                .period(period)
                .burst_size(burst)
                .finish()
                .expect("a valid governor quota");
            router.layer(GovernorLayer::new(config))
        }
        Mode::GovernorHeaders => {
            let config = GovernorConfigBuilder::default()
                .period(period)
                .burst_size(burst)
                .use_headers()
                .finish()
                .expect("a valid governor quota");
            router.layer(GovernorLayer::new(config))
        }
    }
}

fn main() {
    let settings = parse(std::env::args().skip(1)).unwrap_or_else(|message| {
        eprintln!("{message}");
        std::process::exit(2);
    });
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = settings.workers {
        runtime.worker_threads(workers);
    }
    let runtime = runtime.enable_all().build().expect("a tokio runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(settings.addr)
            .await
            .unwrap_or_else(|e| panic!("cannot listen on {}: {e}", settings.addr));
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        println!(
            "listening on http://{addr}/ mode={:?} scenario={:?}",
            settings.mode, settings.scenario
        );
        let app = app(settings.mode, settings.scenario);
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("the server runs until killed");
    });
}
