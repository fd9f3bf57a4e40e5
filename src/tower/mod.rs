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
//!   address, grouping IPv6 by /64 and treating IPv4-mapped IPv6 as IPv4.
//!   [`TrustedProxyIp`] reads `X-Forwarded-For` or `Forwarded` only from
//!   trusted proxies, and takes the rightmost address that is not a proxy,
//!   so a client that writes its own leftmost entry changes nothing.
//!   [`HeaderKey`] keys by an API key, answering a request without one with
//!   401 or 400, or letting it through, as configured: never a 500.
//!   [`KeyFn`] takes a closure, and [`RateLimitLayer::skip_if`] exempts
//!   requests such as health checks.
//! - **Standard answers.** A denied request gets `429 Too Many Requests`
//!   with `Retry-After` in whole seconds rounded **up** (a 0.9 s wait is
//!   sent as `1`, never `0`), never earlier than the `RateLimit` header's
//!   `t`, and an `application/problem+json` body. Admitted responses carry
//!   the headers always, never, or only near the limit
//!   ([`AdmittedHeaders`]); `pk` and the legacy `X-RateLimit-*` headers are
//!   optional. The [`Decision`] is put in the request's
//!   extensions for the handler.
//! - **Headers that tell the whole truth.** `q` and `w` are those of the
//!   quota that decided (a tier's, or one changed with `set_quota`), and
//!   `w` is rounded **up** to whole seconds, so `q` per `w` never states
//!   more than is enforced: a window of 1.4 s is `w=2`, and any window
//!   under a second is `w=1`. A client held to two limits
//!   ([`Both`](crate::Both)) sees two items, `"<name>-1"` and
//!   `"<name>-2"`, each with its own `q`, `w`, `r` and `t`. Layers stacked
//!   on one route append their items to one list, the inner layer's
//!   first, so a refusal keeps the refusing policy's item (with `r=0`)
//!   beside the others. [`retry_jitter`](RateLimitLayer::retry_jitter)
//!   spreads the retries of clients refused together.
//! - **CORS preflights** are limited like any request unless exempted
//!   with [`skip_if`](RateLimitLayer::skip_if)`(`[`is_preflight`]`)`.
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
//! # A limiter in another process
//!
//! The layer asks its limiter only through
//! [`AsyncCheck`], whose decision is a
//! future. Every in-process [`Limiter`](crate::Limiter) answers with a
//! future that is ready at once, and the layer then calls the inner service
//! straight away, boxing nothing. A limiter whose state lives elsewhere
//! (a shared store) implements `AsyncCheck` with a future that completes when
//! the store answers: the layer keeps the request, and the inner service it
//! had readied, until then, and answers a failed check
//! ([`CheckError`]) with `503 Service Unavailable`. Neither the layer's
//! types nor its constructors change.

mod cidr;
mod forwarded;
mod ip;
mod key;
mod response;

use core::fmt;
use core::future::Future;
use core::mem;
use core::pin::Pin;
use core::task::{ready, Context, Poll, Waker};
use core::time::Duration;
use std::sync::Arc;

use ::tower::{Layer, Service};
use http::request::Parts;
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;

pub use cidr::{Cidr, CidrError};
pub use ip::{ForwardedHeader, PeerIp, TrustedProxyIp};
pub use key::{Extraction, HeaderKey, KeyExtractor, KeyFn, LongKey, MissingKey, Rejection};
pub use response::AdmittedHeaders;
use response::{problem, Respond, Stamp};

use crate::check::{AsyncCheck, CheckError};
use crate::decision::Decision;
use crate::error::ConfigError;

type SkipFn = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;
type PartitionFn<K> = Arc<dyn Fn(&K) -> Vec<u8> + Send + Sync>;

/// What a layer and every service it makes share.
struct Shared<C, E: KeyExtractor> {
    limiter: Arc<C>,
    extractor: E,
    skip: Option<SkipFn>,
    partition_key: Option<PartitionFn<E::Key>>,
    respond: Arc<Respond>,
}

impl<C, E: KeyExtractor + Clone> Clone for Shared<C, E> {
    fn clone(&self) -> Self {
        Self {
            limiter: Arc::clone(&self.limiter),
            extractor: self.extractor.clone(),
            skip: self.skip.clone(),
            partition_key: self.partition_key.clone(),
            respond: Arc::clone(&self.respond),
        }
    }
}

impl<C, E: KeyExtractor + fmt::Debug> fmt::Debug for Shared<C, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("policy", &self.respond.name())
            .field("quota", &self.respond.quota)
            .field("extractor", &self.extractor)
            .field("admitted_headers", &self.respond.admitted)
            .field("legacy_headers", &self.respond.legacy)
            .field("retry_jitter_s", &self.respond.jitter)
            .field("skip_if", &self.skip.is_some())
            .field("partition_key", &self.partition_key.is_some())
            .finish_non_exhaustive()
    }
}

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
/// let login = RateLimitLayer::new(login_limiter, PeerIp::new().peer_from(|c: &ConnectInfo<SocketAddr>| c.0.ip()));
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
        let respond = Respond::new(limiter.quota());
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
        let name = response::sf_string(name)?;
        self.respond().set_name(name);
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
    /// standard headers go, for clients that know only those.
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
        self.respond().jitter = response::seconds_up(max);
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

    /// The limiter every service of this layer checks.
    #[must_use]
    pub fn limiter(&self) -> &C {
        &self.shared.limiter
    }
}

/// Whether a request is a CORS preflight: an `OPTIONS` request with an
/// `Origin` and an `Access-Control-Request-Method` header, which a browser
/// sends by itself before a cross-origin request that is not simple.
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
/// # Examples
///
/// ```
/// use tollgate::tower::is_preflight;
///
/// let (preflight, ()) = http::Request::options("/api")
///     .header("origin", "https://app.example")
///     .header("access-control-request-method", "PUT")
///     .body(())
///     .unwrap()
///     .into_parts();
/// assert!(is_preflight(&preflight));
/// let (plain, ()) = http::Request::options("/api").body(()).unwrap().into_parts();
/// assert!(!is_preflight(&plain));
/// ```
#[must_use]
pub fn is_preflight(request: &Parts) -> bool {
    request.method == http::Method::OPTIONS
        && request.headers.contains_key(http::header::ORIGIN)
        && request
            .headers
            .contains_key(http::header::ACCESS_CONTROL_REQUEST_METHOD)
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
        RateLimitService {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around an inner service. Clones
/// share the layer's limiter.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use http::{Request, Response};
/// use tollgate::tower::{KeyFn, Extraction, RateLimitLayer};
/// use tollgate::SlidingWindowCounter;
/// use tower::{service_fn, Layer};
///
/// let limiter = SlidingWindowCounter::builder().limit(5).window(Duration::from_secs(1)).build()?;
/// let everyone = KeyFn::new(|_: &http::request::Parts| Extraction::Key(String::from("all")));
/// let service = RateLimitLayer::new(limiter, everyone).layer(service_fn(|_: Request<String>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(String::new()))
/// }));
/// let _clone = service.clone(); // the same five requests per second
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub struct RateLimitService<S, C, E: KeyExtractor> {
    inner: S,
    shared: Arc<Shared<C, E>>,
}

impl<S: Clone, C, E: KeyExtractor> Clone for RateLimitService<S, C, E> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, C, E: KeyExtractor + fmt::Debug> fmt::Debug for RateLimitService<S, C, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("limit", &self.shared)
            .finish()
    }
}

impl<S, C, E, B, R> Service<Request<B>> for RateLimitService<S, C, E>
where
    S: Service<Request<B>, Response = Response<R>> + Clone,
    C: AsyncCheck<E::Key>,
    E: KeyExtractor,
    R: From<String>,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = ResponseFuture<S, B>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let shared = &*self.shared;
        if shared.skip.as_ref().is_some_and(|skip| skip(&parts)) {
            return ResponseFuture::calling(
                self.inner.call(Request::from_parts(parts, body)),
                None,
            );
        }
        let key = match shared.extractor.extract(&parts) {
            Extraction::Key(key) => key,
            Extraction::Skip => {
                return ResponseFuture::calling(
                    self.inner.call(Request::from_parts(parts, body)),
                    None,
                )
            }
            Extraction::Reject(rejection) => {
                return ResponseFuture::ready(problem(rejection.status(), rejection.detail()))
            }
        };
        let pk = shared
            .partition_key
            .as_ref()
            .map(|f| response::sf_bytes(&f(&key)));
        let mut check = shared.limiter.check(&key, 1);
        // An in-process limiter's decision is ready at once: act on it now.
        // The no-op waker is never woken; a pending check is polled again,
        // with the task's waker, by the response future.
        let mut noop = Context::from_waker(Waker::noop());
        match Pin::new(&mut check).poll(&mut noop) {
            Poll::Ready(result) => {
                decided(&mut self.inner, result, parts, body, &shared.respond, pk)
            }
            Poll::Pending => {
                // The readied inner service goes with the request; this
                // service keeps a clone, which it readies on its next call.
                let clone = self.inner.clone();
                let readied = mem::replace(&mut self.inner, clone);
                ResponseFuture {
                    state: State::Checking {
                        waiting: Some(Box::new(Waiting {
                            check: Box::new(check),
                            inner: readied,
                            parts,
                            body,
                            respond: Arc::clone(&shared.respond),
                            pk,
                        })),
                    },
                }
            }
        }
    }
}

type CheckFuture = Box<dyn Future<Output = Result<Decision, CheckError>> + Send + Unpin>;

/// A request whose check is still pending, with the inner service readied
/// for it.
struct Waiting<S, B> {
    check: CheckFuture,
    inner: S,
    parts: Parts,
    body: B,
    respond: Arc<Respond>,
    pk: Option<String>,
}

/// Acts on a decision: refuse, or stamp the request and call `inner`.
fn decided<S, B, R>(
    inner: &mut S,
    result: Result<Decision, CheckError>,
    mut parts: Parts,
    body: B,
    respond: &Respond,
    pk: Option<String>,
) -> ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<R>>,
    R: From<String>,
{
    let decision = match result {
        Ok(decision) => decision,
        Err(err) => {
            return ResponseFuture::ready(problem(
                StatusCode::SERVICE_UNAVAILABLE,
                &err.to_string(),
            ))
        }
    };
    if decision.is_denied() {
        return ResponseFuture::ready(respond.too_many(&decision, pk.as_deref()));
    }
    let stamp = respond
        .stamps_admitted(&decision)
        .then(|| respond.stamp(&decision, pk.as_deref()));
    parts.extensions.insert(decision);
    ResponseFuture::calling(inner.call(Request::from_parts(parts, body)), stamp)
}

pin_project! {
    /// The response future of a [`RateLimitService`]: the inner service's
    /// response with the rate-limit headers added, or the layer's own
    /// `429` or rejection.
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B>
    where
        S: Service<Request<B>>,
    {
        Checking { waiting: Option<Box<Waiting<S, B>>> },
        Calling { #[pin] future: S::Future, stamp: Option<Stamp> },
        Ready { response: Option<S::Response> },
    }
}

impl<S: Service<Request<B>>, B> ResponseFuture<S, B> {
    fn calling(future: S::Future, stamp: Option<Stamp>) -> Self {
        Self {
            state: State::Calling { future, stamp },
        }
    }

    fn ready(response: S::Response) -> Self {
        Self {
            state: State::Ready {
                response: Some(response),
            },
        }
    }
}

impl<S: Service<Request<B>>, B> fmt::Debug for ResponseFuture<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Checking { .. } => "checking",
            State::Calling { .. } => "calling",
            State::Ready { .. } => "ready",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S, B, R> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<R>>,
    R: From<String>,
{
    type Output = Result<Response<R>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Checking { waiting } => {
                    let pending = waiting.as_mut().expect("polled after completion");
                    let result = ready!(Pin::new(&mut pending.check).poll(cx));
                    let Waiting {
                        mut inner,
                        parts,
                        body,
                        respond,
                        pk,
                        ..
                    } = *waiting.take().expect("checked above");
                    let next = decided(&mut inner, result, parts, body, &respond, pk);
                    state.set(next.state);
                }
                StateProj::Calling { future, stamp } => {
                    let mut response = ready!(future.poll(cx))?;
                    if let Some(stamp) = stamp.take() {
                        stamp.apply(response.headers_mut());
                    }
                    return Poll::Ready(Ok(response));
                }
                StateProj::Ready { response } => {
                    return Poll::Ready(Ok(response.take().expect("polled after completion")))
                }
            }
        }
    }
}
