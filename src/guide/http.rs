//! HTTP servers: the tower layer.
//!
//! With the `tower` feature, `tollgate::tower::RateLimitLayer` puts any
//! limiter in front of a tower service: axum (`Router::layer`, or
//! `route_layer` for per-route limits), tonic, or hyper with tower. The
//! `tollgate::tower` module's documentation has the full API and runnable
//! examples; this page says what the layer does.
//!
//! ```toml
//! tollgate = { version = "0.3", features = ["tower"] }
//! ```
//!
//! - **One limiter for every clone.** The layer holds the limiter in an
//!   `Arc`; every service it makes, and every clone axum makes of those,
//!   checks one budget per client.
//! - **Keys a client cannot forge.** `PeerIp` keys by the connection's
//!   address, IPv6 by its /64 and IPv4-mapped IPv6 as IPv4.
//!   `TrustedProxyIp` believes `X-Forwarded-For` (or `Forwarded`) only from
//!   peers in trusted CIDRs, and takes the rightmost address that is not a
//!   trusted proxy, so a forged leftmost entry changes nothing. `HeaderKey`
//!   keys by an API key header, and `KeyFn` takes a closure.
//! - **Standard headers** (the IETF `RateLimit` header fields draft, as RFC
//!   9651 structured fields): `RateLimit-Policy` and `RateLimit` on
//!   admitted responses (always, never, or near the limit), and on a
//!   refusal a `429` with `Retry-After` in whole seconds rounded up and an
//!   `application/problem+json` body. A handler that wants the
//!   [`Decision`](crate::Decision) itself finds it in the request's
//!   extensions once the layer's `decision_extension(true)` is set.
//! - **Any limiter.** The layer asks its limiter through
//!   [`AsyncCheck`](crate::AsyncCheck): in-process limiters answer at once
//!   (no allocation, no extra task), and the Redis limiters plug in
//!   unchanged.
//!
//! # The example server
//!
//! `examples/server.rs` is a real axum server: `GET /` is limited per
//! client IP, `GET /health` never is.
//!
//! ```text
//! $ cargo run --release --features tower --example server -- --addr 127.0.0.1:8080 --algorithm token-bucket --limit 3 --window 60
//! listening on http://127.0.0.1:8080: token-bucket (3 requests per 60s per client IP)
//! $ curl -i http://127.0.0.1:8080/
//! HTTP/1.1 200 OK
//! ratelimit-policy: "default";q=3;w=60
//! ratelimit: "default";r=2;t=20
//!
//! hello; 2 requests left
//! ```
//!
//! The fourth request within 20 seconds is refused:
//!
//! ```text
//! HTTP/1.1 429 Too Many Requests
//! content-type: application/problem+json
//! ratelimit-policy: "default";q=3;w=60
//! ratelimit: "default";r=0;t=20
//! retry-after: 20
//! ```
