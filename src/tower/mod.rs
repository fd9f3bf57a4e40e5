//! Rate limiting for tower and hyper servers (axum, tonic, hyper with
//! tower): a [`Layer`] that keys each request, checks it against a shared
//! limiter, and answers with draft-ietf-httpapi-ratelimit-headers-11's
//! headers. Needs the `tower` cargo feature.
//!
//! ```text
//! RateLimit-Policy: "default";q=10;w=60
//! RateLimit: "default";r=9;t=6
//! ```
//!
//! - **One limiter, shared by every clone.** The layer holds the limiter
//!   behind an `Arc`; a service and all its clones (axum clones one per
//!   connection and per route) check one budget per client. Give different
//!   routes different limiters with axum's `route_layer`.
//! - **Keys that cannot be spoofed.** [`PeerIp`] keys by the connection's
//!   address, grouping IPv6 by /64 and treating IPv4-mapped IPv6 (and
//!   NAT64's `64:ff9b::a.b.c.d`) as IPv4;
//!   with the `axum` cargo feature it reads axum's `ConnectInfo` by itself.
//!   [`TrustedProxyIp`] reads `X-Forwarded-For`, `Forwarded` or
//!   `X-Real-IP` only from trusted proxies, from their end, and takes the
//!   rightmost address that is not a proxy, so whatever a client writes in
//!   its own entries changes nothing.
//!   [`HeaderKey`] keys by an API key, answering a request without one with
//!   401 or 400, or letting it through, as configured: never a 500.
//!   [`GlobalKey`] puts every request under one key: one budget for all.
//!   [`KeyFn`] takes a closure, and [`RateLimitLayer::skip_if`] exempts
//!   requests such as health checks.
//! - **Standard answers.** A denied request gets `429 Too Many Requests`
//!   with `Retry-After` in whole seconds rounded **up** (a 0.9 s wait is
//!   sent as `1`, never `0`), never earlier than the `RateLimit` header's
//!   `t` (of any item with `r=0`), and an `application/problem+json`
//!   body. A check that fails gets
//!   `503 Service Unavailable`, whose body says nothing of the cause;
//!   operators hear it through
//!   [`on_check_error`](RateLimitLayer::on_check_error).
//!   [`respond_with`](RateLimitLayer::respond_with) builds all these
//!   responses instead, with the [`Decision`](crate::Decision), the
//!   [`CheckError`] or the [`Rejection`] in hand. Admitted responses carry
//!   the headers always, never, or only near the limit
//!   ([`AdmittedHeaders`]), except an admission that spent nothing (a
//!   Redis limiter under `FailPolicy::FailOpen` while Redis is away
//!   admits without counting), which carries none: any figure would be
//!   a guess; `pk` and the legacy `X-RateLimit-*` headers are
//!   optional. A handler that wants the [`Decision`](crate::Decision)
//!   itself (axum's `Extension<Decision>`) turns on
//!   [`decision_extension`](RateLimitLayer::decision_extension); the
//!   response's headers carry its figures either way.
//! - **Headers that tell the whole truth.** `q` and `w` are those of the
//!   quota that decided (a tier's, or one changed with `set_quota`), and
//!   `w` is rounded **up** to whole seconds, so `q` per `w` never states
//!   more than is enforced: a window of 1.4 s is `w=2`, and any window
//!   under a second is `w=1`. A client held to two limits
//!   ([`Both`](crate::Both)) sees two items, `"<name>-1"` and
//!   `"<name>-2"`, each with its own `q`, `w`, `r` and `t`.
//!   [`retry_jitter`](RateLimitLayer::retry_jitter) spreads the retries of
//!   clients refused together.
//! - **Stacked layers** (say, a per-minute layer inside a per-hour one)
//!   append their items to one list, the inner layer's first, so a
//!   refusal keeps the refusing policy's item (with `r=0`) beside the
//!   others. Items never share a name: where an inner layer has taken an
//!   outer layer's item name (both left at `"default"`, say), the outer
//!   layer appends the first free suffix to its own (`"default-2"`). Each
//!   layer charges in order, outermost first: a request the outer layer
//!   admits has spent a unit of its quota even if an inner layer then
//!   refuses it (the headers say so, with the outer item's `r` one
//!   lower), so put the tighter limit outermost where that matters.
//!   `Retry-After` is never earlier than the `t` of any item with `r=0`:
//!   an outer layer that admitted a request with its last unit puts an
//!   inner layer's earlier `Retry-After` back to its own `t`, since the
//!   client would be refused again before then. It does so whatever
//!   either layer's [`AdmittedHeaders`], and to a gRPC refusal's
//!   `RetryInfo` and `grpc-retry-pushback-ms` too, whose `QuotaFailure`
//!   then names the outer layer's exhausted item after the inner one's.
//!   The legacy `X-RateLimit-*` headers, which name one limit, name the
//!   one that binds: the fewest requests left, and of those the latest
//!   reset.
//! - **CORS preflights** are limited like any request unless exempted
//!   with [`skip_if`](RateLimitLayer::skip_if)`(`[`is_preflight`]`)`.
//! - **Servers outside tower** (plain hyper, actix-web, a handler that
//!   checks a limiter itself) write the same headers for a
//!   [`Decision`](crate::Decision) with [`RateLimitHeaders`].
//!
//! # Examples
//!
//! ```
//! use std::net::{IpAddr, SocketAddr};
//! use std::time::Duration;
//! use http::{Request, Response, StatusCode};
//! use tollgate::tower::{PeerIp, RateLimitLayer};
//! use tollgate::TokenBucket;
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = TokenBucket::builder()
//!     .rate(2, Duration::from_secs(60))
//!     .key_type::<IpAddr>()
//!     .build()?;
//! let layer = RateLimitLayer::new(limiter, PeerIp::new());
//! let service = layer.layer(service_fn(|_: Request<String>| async {
//!     Ok::<_, std::convert::Infallible>(Response::new(String::from("hello")))
//! }));
//!
//! let peer: SocketAddr = "192.0.2.1:5000".parse()?;
//! let request = || {
//!     let mut r = Request::new(String::new());
//!     r.extensions_mut().insert(peer);
//!     r
//! };
//! # tokio_test(async {
//! let ok = service.clone().oneshot(request()).await.unwrap();
//! assert_eq!(ok.headers()["ratelimit"], "\"default\";r=1;t=30");
//! let _ = service.clone().oneshot(request()).await.unwrap();
//! let denied = service.clone().oneshot(request()).await.unwrap();
//! assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(denied.headers()["retry-after"], "30");
//! # });
//! # Ok(())
//! # }
//! # fn tokio_test(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```
//!
//! # gRPC
//!
//! A gRPC client expects a gRPC status, not an HTTP `429` with a JSON
//! body (tonic reads one as a protocol error). For a `POST` whose
//! `content-type` is `application/grpc` (or `application/grpc+proto`,
//! `application/grpc-web`, ...), the layer's own answers are what a gRPC
//! server sends: HTTP `200`, the request's content type, and the status in
//! the headers with an empty body (a "trailers-only" response), with
//! `Cache-Control: no-store` so that no cache keeps a refusal as if it
//! were content. gRPC calls are `POST` only: a request with another method
//! is answered in HTTP's form whatever its content type (a `GET` over its
//! quota is a `429`, not a cacheable `200`).
//!
//! - a refusal by the limiter is `grpc-status: 8` (`RESOURCE_EXHAUSTED`),
//!   the problem detail as `grpc-message`, and `grpc-status-details-bin`, a
//!   `google.rpc.Status` with a `google.rpc.RetryInfo` (the retry delay,
//!   `Retry-After`'s whole seconds) and a `google.rpc.QuotaFailure` (one
//!   violation per limit with nothing left: `quota_id` the policy's item
//!   name, `quota_value` its `q`, `description` "`q` requests per `w` s"),
//!   plus `grpc-retry-pushback-ms` for clients with a retry policy;
//! - a failed check is `14` (`UNAVAILABLE`), saying nothing of the cause;
//! - an extractor's rejection maps its status: `401` to `UNAUTHENTICATED`,
//!   `400` and `431` to `INVALID_ARGUMENT`, `403` to `PERMISSION_DENIED`,
//!   `500` to `INTERNAL`.
//!
//! The rate-limit fields travel as metadata: `RateLimit-Policy` and
//! `RateLimit` (and the legacy headers, if on) are response headers, so
//! on an admitted call they are its initial metadata
//! (`tonic::Response::metadata`), and on a refusal they sit beside the
//! status in the trailers-only response (`tonic::Status::metadata`), with
//! `Retry-After`. [`respond_with`](RateLimitLayer::respond_with) replaces
//! these like the HTTP answers ([`Refusal::default_response`] gives the
//! default).
//!
//! Servers that run axum and tonic side by side put both on one router
//! (tonic's `Routes::into_axum_router`) behind one layer, so a client's
//! budget is one whichever way it calls; `examples/grpc.rs` does that and
//! calls itself both ways:
//!
//! ```text
//! cargo run --features axum --example grpc
//! ```
//!
//! tonic's own server takes the layer too. The layer builds its answers in
//! the inner service's body type (`From<String>`), which tonic's body is
//! not, so convert it to axum's (or any such type) inside the layer, and
//! name the extension tonic keeps the peer address in:
//!
//! ```ignore
//! use tonic::transport::server::TcpConnectInfo;
//! let layer = tower::ServiceBuilder::new()
//!     .layer(RateLimitLayer::new(limiter, PeerIp::new().peer_from(TcpConnectInfo::remote_addr)))
//!     .map_response(|r: http::Response<tonic::body::Body>| r.map(axum::body::Body::new));
//! tonic::transport::Server::builder().layer(layer).add_service(my_service).serve(addr).await?;
//! ```
//!
//! # A limiter in another process
//!
//! The layer asks its limiter only through
//! [`AsyncCheck`], whose decision is a
//! future. Every in-process [`Limiter`](crate::Limiter) answers with a
//! future that is ready at once, and the layer then calls the inner service
//! straight away, boxing nothing. A limiter whose state lives elsewhere
//! (a shared store) implements `AsyncCheck` with a future that completes when
//! the store answers: the layer keeps the request, and a clone of the inner
//! service, until then, and answers a failed check
//! ([`CheckError`]) with `503 Service Unavailable`. Neither the layer's
//! types nor its constructors change.
//!
//! # Decided before the inner service is ready
//!
//! The layer's service is always ready (`poll_ready`): it decides on each
//! request first, and only an admitted request waits for the inner
//! service to be ready for it, in its response future, as `oneshot` does.
//! So with a concurrency limit (or any service that holds requests back)
//! inside the layer, a client over its quota is refused at once rather
//! than after a slot frees for a request that will never use it.

mod cidr;
mod forwarded;
mod grpc;
mod ip;
mod key;
#[cfg(feature = "metrics")]
mod metrics;
mod refusal;
mod response;
mod service;
mod sf;

use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use ::tower::Layer;
use http::request::Parts;
use http::Response;

pub use cidr::{Cidr, CidrError};
pub use ip::{ForwardedHeader, PeerAddr, PeerIp, TrustedProxyIp};
pub use key::{
    Extraction, GlobalKey, HeaderKey, KeyExtractor, KeyFn, LongKey, MissingKey, Rejection,
};
pub use refusal::Refusal;
use response::Respond;
pub use response::{AdmittedHeaders, RateLimitHeaders};
use service::Shared;
pub use service::{RateLimitService, ResponseFuture};

use crate::check::{AsyncCheck, CheckError};
use crate::error::ConfigError;

/// A tower [`Layer`] that rate-limits every request by the key its
/// [`KeyExtractor`] finds, against one shared limiter.
///
/// Clones of the layer, and every service it makes and their clones, share
/// one limiter: one budget per client however many connections and routes
/// the server spreads them over. It works with axum's `Router::layer` and
/// `Router::route_layer` and with any tower `Service` whose responses are
/// `http::Response<B>` with a body `B: From<String>` (axum's `Body`,
/// `http_body_util::Full<Bytes>`, `String`): the layer's own responses
/// (`429`, and the extractor's rejections) are built in that body type.
///
/// # Examples
///
/// Per-route limits in axum:
///
/// ```ignore
/// let api = RateLimitLayer::new(api_limiter, HeaderKey::new(HeaderName::from_static("x-api-key")));
/// // With the `axum` feature, PeerIp reads axum's ConnectInfo by itself.
/// let login = RateLimitLayer::new(login_limiter, PeerIp::new());
/// let app = Router::new()
///     .route("/api/{*rest}", get(api_handler).route_layer(api))
///     .route("/login", post(login_handler).route_layer(login))
///     .route("/health", get(|| async { "ok" }));
/// ```
///
/// Configured, and checked by hand:
///
/// ```
/// use std::time::Duration;
/// use tollgate::tower::{AdmittedHeaders, HeaderKey, MissingKey, RateLimitLayer};
/// use tollgate::FixedWindow;
///
/// let limiter = FixedWindow::builder().limit(100).window(Duration::from_secs(60)).build()?;
/// let layer = RateLimitLayer::new(
///     limiter,
///     HeaderKey::new(http::HeaderName::from_static("x-api-key")).on_missing(MissingKey::BadRequest),
/// )
/// .policy_name("api")?
/// .admitted_headers(AdmittedHeaders::NearLimit(10))
/// .legacy_headers(true)
/// .partition_key(|key: &String| key.as_bytes().to_vec())
/// .skip_if(tollgate::tower::is_preflight);
/// assert_eq!(layer.limiter().quota().limit(), 100);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub struct RateLimitLayer<C, E: KeyExtractor> {
    shared: Arc<Shared<C, E>>,
}

impl<C, E> RateLimitLayer<C, E>
where
    C: AsyncCheck<E::Key>,
    E: KeyExtractor + Clone,
{
    /// Limits requests by `extractor`'s key against `limiter`, with the
    /// policy name `"default"`, headers on every response and no legacy
    /// headers. Pass an `Arc` of the limiter to keep a handle on it (for
    /// [`stats`](crate::Limiter::stats), say), or use
    /// [`limiter`](RateLimitLayer::limiter).
    pub fn new(limiter: C, extractor: E) -> Self {
        #[allow(unused_mut)]
        let mut respond = Respond::new(limiter.quota());
        #[cfg(feature = "metrics")]
        {
            respond.requests = Arc::new(metrics::Requests::new(limiter.name()));
        }
        Self {
            shared: Arc::new(Shared {
                limiter: Arc::new(limiter),
                extractor,
                skip: None,
                partition_key: None,
                respond: Arc::new(respond),
            }),
        }
    }

    fn shared(&mut self) -> &mut Shared<C, E> {
        Arc::make_mut(&mut self.shared)
    }

    fn respond(&mut self) -> &mut Respond {
        Arc::make_mut(&mut self.shared().respond)
    }

    /// Names the policy in the headers (`"default"` unless set).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `policy_name` if `name` holds a character
    /// that is not printable ASCII, which a structured field cannot carry.
    pub fn policy_name(mut self, name: &str) -> Result<Self, ConfigError> {
        self.respond().set_name(name)?;
        Ok(self)
    }

    /// When admitted responses carry the rate-limit headers.
    #[must_use]
    pub fn admitted_headers(mut self, when: AdmittedHeaders) -> Self {
        self.respond().admitted = when;
        self
    }

    /// Also writes `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` (seconds until more quota, as `t`) wherever the
    /// standard headers go, for clients that know only those. These name
    /// one limit: where stacked layers both write them, the response
    /// keeps the limit that binds, the one with the fewest requests left
    /// and, of those, the latest reset, so that they agree with
    /// `Retry-After`.
    #[must_use]
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.respond().legacy = on;
        self
    }

    /// Adds up to `max` (in whole seconds, rounded up) at random to the
    /// `Retry-After` of each `429`, so that clients refused together, such
    /// as everyone at the end of a fixed window, come back spread out
    /// rather than all at once (the draft's advice for fixed windows).
    /// `RateLimit`'s `t` still states when the quota grows; `Retry-After`
    /// is never earlier than it, with or without jitter. None by default.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::tower::{PeerIp, RateLimitLayer};
    /// use tollgate::FixedWindow;
    ///
    /// let limiter = FixedWindow::builder()
    ///     .limit(100)
    ///     .window(Duration::from_secs(60))
    ///     .key_type::<std::net::IpAddr>()
    ///     .build()?;
    /// let layer = RateLimitLayer::new(limiter, PeerIp::new()).retry_jitter(Duration::from_secs(5));
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn retry_jitter(mut self, max: Duration) -> Self {
        self.respond().jitter = sf::seconds_up(max);
        self
    }

    /// Whether an admitted request carries its [`Decision`](crate::Decision)
    /// in its extensions, for the handler to read (axum's
    /// `Extension<Decision>`, or `request.extensions().get::<Decision>()`):
    /// off unless turned on.
    ///
    /// On, every admitted request costs an allocation and a map insertion
    /// more (about 300 instructions, 2 % of a trivial axum request), and
    /// the handler sees exactly what decided: remaining, when the next
    /// unit comes back, the limit and its window. Off, the handler sees
    /// no `Decision` (axum's `Extension<Decision>` extractor then refuses
    /// the request with its own `500`; take `Option<Extension<Decision>>`
    /// where the layer may be configured either way), and the client still
    /// gets the same figures in the response's rate-limit headers (unless
    /// [`admitted_headers`](Self::admitted_headers) turned them off).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::tower::{PeerIp, RateLimitLayer};
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .key_type::<std::net::IpAddr>()
    ///     .build()?;
    /// let layer = RateLimitLayer::new(limiter, PeerIp::new()).decision_extension(true);
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn decision_extension(mut self, on: bool) -> Self {
        self.respond().extension = on;
        self
    }

    /// Adds the `pk` parameter to both headers: the bytes `f` makes of the
    /// key, as a structured-field byte sequence. The client sees them, so
    /// return something it may see (a hash, an account id) rather than a
    /// secret.
    #[must_use]
    pub fn partition_key(mut self, f: impl Fn(&E::Key) -> Vec<u8> + Send + Sync + 'static) -> Self {
        self.shared().partition_key = Some(Arc::new(f));
        self
    }

    /// Lets requests for which `f` is true through unlimited, unchecked
    /// and without rate-limit headers: health checks, or CORS preflights
    /// with [`is_preflight`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::tower::{is_preflight, HeaderKey, RateLimitLayer};
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder().rate(10, Duration::from_secs(1)).build()?;
    /// let key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
    /// // Preflights and health checks pass unlimited.
    /// let layer = RateLimitLayer::new(limiter, key)
    ///     .skip_if(|r| is_preflight(r) || r.uri.path() == "/health");
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn skip_if(mut self, f: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        self.shared().skip = Some(Arc::new(f));
        self
    }

    /// Builds the responses the layer sends itself, instead of its
    /// default `application/problem+json` ones: the `429` when the limiter
    /// refuses, the `503` when it cannot decide, and the extractor's
    /// rejections (`400`, `401`, `431`, `500`). `f` gets the [`Refusal`]
    /// (with the [`Decision`](crate::Decision), the
    /// [`CheckError`] or the [`Rejection`] in hand) and the request's head,
    /// and may fall back on [`Refusal::default_response`]. Its response's
    /// body is converted into the service's body type (`From<String>`).
    ///
    /// Whatever `f` returns for a refusal by the limiter, the layer then
    /// sets `RateLimit-Policy`, `RateLimit` (and the legacy headers, if on)
    /// and `Retry-After` on it, so that they stay true.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::{Response, StatusCode};
    /// use tollgate::tower::{HeaderKey, RateLimitLayer, Refusal};
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder().rate(10, Duration::from_secs(1)).build()?;
    /// let key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
    /// let layer = RateLimitLayer::new(limiter, key).respond_with(|refusal, request| {
    ///     match refusal {
    ///         Refusal::Limited { retry_after, .. } => {
    ///             let mut response = Response::new(format!("slow down: {} s", retry_after.as_secs()));
    ///             *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    ///             response
    ///         }
    ///         other => other.default_response(request),
    ///     }
    /// });
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn respond_with(
        mut self,
        f: impl Fn(&Refusal<'_>, &Parts) -> Response<String> + Send + Sync + 'static,
    ) -> Self {
        self.respond().hooks.respond_with = Some(Arc::new(f));
        self
    }

    /// Calls `f` with every [`CheckError`] (a store out of reach, a reply
    /// it could not read) and the head of the request it failed, before
    /// the layer answers `503`: the operator's view of the cause, which
    /// the response itself never shows the client (it may quote a
    /// store's reply, the limiter's key names, the client's own key).
    ///
    /// `f` also hears, once, of a server wired so that the key extractor
    /// cannot work (a [`PeerIp`] or [`TrustedProxyIp`] that finds no peer
    /// address in the request), with the first request it fails: the
    /// error says how to wire it, while every such request is answered
    /// `500` with nothing of the server in it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::tower::{PeerIp, RateLimitLayer};
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .key_type::<std::net::IpAddr>()
    ///     .build()?;
    /// let layer = RateLimitLayer::new(limiter, PeerIp::new()).on_check_error(|error, request| {
    ///     eprintln!("rate limit check for {} failed: {error}", request.uri.path());
    /// });
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn on_check_error(
        mut self,
        f: impl Fn(&CheckError, &Parts) + Send + Sync + 'static,
    ) -> Self {
        self.respond().hooks.on_check_error = Some(Arc::new(f));
        self
    }

    /// The limiter every service of this layer checks.
    #[must_use]
    pub fn limiter(&self) -> &C {
        &self.shared.limiter
    }

    /// Publishes the layer's counts (requests by transport and outcome,
    /// its own responses by status) and its limiter's
    /// ([`AsyncCheck::publish_metrics`]) through the `metrics` crate's
    /// facade, to whichever recorder is installed. Needs the `metrics`
    /// feature.
    ///
    /// The layer's counts are published by themselves about once a second
    /// (by the `tollgate-metrics` thread), as its limiter's are, whether
    /// requests go on or have stopped; call this before rendering a scrape
    /// only for figures exact to the last request. Clones of the layer, and every
    /// service it made, share the counts. See the [observability
    /// guide](crate::guide::observability) for the series.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::tower::{GlobalKey, RateLimitLayer};
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .name("api")
    ///     .key_type::<()>()
    ///     .build()?;
    /// let layer = RateLimitLayer::new(limiter, GlobalKey);
    /// assert_eq!(layer.limiter().name(), "api");
    /// // In the handler of a scrape, before rendering:
    /// layer.publish_metrics();
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[cfg(feature = "metrics")]
    pub fn publish_metrics(&self) {
        self.shared.respond.requests.publish(true);
        self.shared.limiter.publish_metrics();
    }
}

/// Whether a request is a CORS preflight: an `OPTIONS` request with an
/// `Origin` and an `Access-Control-Request-Method` header, which a browser
/// sends by itself before a cross-origin request that is not simple, and
/// with nothing a preflight never has: no `Content-Type` (a gRPC call's
/// `application/grpc`, say), no `Transfer-Encoding`, and no
/// `Content-Length` but `0`. A browser's preflight has no body; a request
/// with one is a call, whatever its method, and a server such as tonic
/// serves it as one.
///
/// The layer limits preflights like any other request unless told not to:
/// a preflight is a request any client can send, not only a browser, and
/// an exemption is a path through the layer that costs nothing. Where a
/// CORS layer answers preflights, put it **outside** the rate-limit layer
/// and they never reach the limiter. Where the rate-limit layer sits in
/// front of a router that answers them (axum's `route_layer`, whose
/// method router answers `405` to an `OPTIONS` it has no handler for),
/// pass this function to [`RateLimitLayer::skip_if`] so that a browser's
/// preflight neither spends its budget nor is refused with `429`.
///
/// Exempt preflights only in front of services that never serve an
/// `OPTIONS` request as a call: not axum's `any` handlers or
/// `route_service`, nor a tonic service (whose routes serve any method),
/// which would serve an exempt request unlimited. Over HTTP/2 and HTTP/3 a
/// body needs no `Content-Length`, so the head alone cannot rule one out;
/// there, such services must not sit behind the exemption at all.
///
/// # Examples
///
/// ```
/// use tollgate::tower::is_preflight;
///
/// let preflight = || {
///     http::Request::options("/api")
///         .header("origin", "https://app.example")
///         .header("access-control-request-method", "PUT")
/// };
/// let (parts, ()) = preflight().body(()).unwrap().into_parts();
/// assert!(is_preflight(&parts));
/// let (plain, ()) = http::Request::options("/api").body(()).unwrap().into_parts();
/// assert!(!is_preflight(&plain));
/// // A gRPC call sent as OPTIONS is a call, not a preflight.
/// let (call, ()) = preflight()
///     .header("content-type", "application/grpc")
///     .body(())
///     .unwrap()
///     .into_parts();
/// assert!(!is_preflight(&call));
/// ```
#[must_use]
pub fn is_preflight(request: &Parts) -> bool {
    let headers = &request.headers;
    request.method == http::Method::OPTIONS
        && headers.contains_key(http::header::ORIGIN)
        && headers.contains_key(http::header::ACCESS_CONTROL_REQUEST_METHOD)
        && !headers.contains_key(http::header::CONTENT_TYPE)
        && !headers.contains_key(http::header::TRANSFER_ENCODING)
        && headers
            .get_all(http::header::CONTENT_LENGTH)
            .iter()
            .all(|length| length.as_bytes().trim_ascii() == b"0")
}

impl<C, E: KeyExtractor> Clone for RateLimitLayer<C, E> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<C, E: KeyExtractor + fmt::Debug> fmt::Debug for RateLimitLayer<C, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RateLimitLayer").field(&self.shared).finish()
    }
}

impl<S, C, E: KeyExtractor> Layer<S> for RateLimitLayer<C, E> {
    type Service = RateLimitService<S, C, E>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService::new(inner, Arc::clone(&self.shared))
    }
}
