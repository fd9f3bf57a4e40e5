//! An axum route and a tonic gRPC service on one port, behind one
//! tollgate layer: one budget per client IP, whichever way it calls.
//!
//! ```text
//! cargo run --features axum --example grpc
//! ```
//!
//! The server listens on 127.0.0.1 (an ephemeral port) with a limit of 3
//! calls per minute per client; the example then calls it as a client
//! would, over HTTP/1.1 (`GET /hello`) and gRPC (`tollgate.example.Echo/Say`,
//! with tonic's client), and prints what each call got. The fourth call is
//! refused: a gRPC client sees `RESOURCE_EXHAUSTED` with the retry delay
//! in the status details (decoded here with `tonic_types::StatusExt`), an
//! HTTP client a `429`.
//!
//! The gRPC service is written without codegen (no `protoc`): one unary
//! method whose messages are raw bytes, through a pass-through codec.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use tollgate::tower::{PeerIp, RateLimitLayer};
use tollgate::TokenBucket;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::{NamedService, UnaryService};
use tonic::transport::Channel;
use tonic::Status;

/// Messages are raw bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// The gRPC service `tollgate.example.Echo`: its one method, `Say`,
/// answers with the message it got.
#[derive(Debug, Clone)]
pub struct Echo;

impl NamedService for Echo {
    const NAME: &'static str = "tollgate.example.Echo";
}

/// The path of `Echo`'s one method.
pub const SAY: &str = "/tollgate.example.Echo/Say";

struct Say;

impl UnaryService<Bytes> for Say {
    type Response = Bytes;
    type Future = Ready<Result<tonic::Response<Bytes>, Status>>;
    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        ready(Ok(tonic::Response::new(request.into_inner())))
    }
}

impl<B> tower::Service<http::Request<B>> for Echo
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        Box::pin(async move { Ok(tonic::server::Grpc::new(Raw).unary(Say, request).await) })
    }
}

/// `GET /hello` and the `Echo` service on one router, behind one layer
/// (`limit` calls per minute per client IP, read from axum's
/// `ConnectInfo` with the `axum` feature).
pub fn app(limit: u64) -> Router {
    let limiter = TokenBucket::builder()
        .rate(limit, Duration::from_secs(60))
        .key_type::<IpAddr>()
        .build()
        .expect("a valid token bucket");
    Router::new()
        .route("/hello", get(|| async { "hello" }))
        .merge(tonic::service::Routes::new(Echo).into_axum_router())
        .layer(RateLimitLayer::new(limiter, PeerIp::new()))
}

/// One call of `Say` over `channel`.
pub async fn say(
    channel: &Channel,
    request: tonic::Request<Bytes>,
) -> Result<tonic::Response<Bytes>, Status> {
    let mut client = tonic::client::Grpc::new(channel.clone());
    client
        .ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    client
        .unary(request, PathAndQuery::from_static(SAY), Raw)
        .await
}

fn hello_request() -> tonic::Request<Bytes> {
    tonic::Request::new(Bytes::from_static(b"hello"))
}

/// One `GET /hello` over HTTP/1.1: its status line.
async fn hello(server: SocketAddr) -> Result<String, Box<dyn std::error::Error>> {
    use http_body_util::{BodyExt, Empty};
    let stream = tokio::net::TcpStream::connect(server).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = http::Request::get("/hello")
        .header("host", server.to_string())
        .body(Empty::<Bytes>::new())?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let retry = response
        .headers()
        .get("retry-after")
        .map(|v| format!(", Retry-After: {}", v.to_str().unwrap_or("?")))
        .unwrap_or_default();
    let _ = response.into_body().collect().await?;
    Ok(format!("{status}{retry}"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    use tonic_types::StatusExt;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        axum::serve(
            listener,
            app(3).into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("the server runs");
    });
    println!("serving GET /hello and {SAY} on {addr}, 3 calls a minute per client");
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    println!("GET /hello -> {}", hello(addr).await?);
    for _ in 0..2 {
        match say(&channel, hello_request()).await {
            Ok(response) => println!(
                "gRPC Say   -> OK, RateLimit: {:?}",
                response.metadata().get("ratelimit")
            ),
            Err(status) => println!("gRPC Say   -> {:?}", status.code()),
        }
    }
    match say(&channel, hello_request()).await {
        Ok(_) => println!("gRPC Say   -> OK (not refused?)"),
        Err(status) => println!(
            "gRPC Say   -> {:?}: {} (retry delay {:?})",
            status.code(),
            status.message(),
            status.get_details_retry_info().and_then(|r| r.retry_delay)
        ),
    }
    println!("GET /hello -> {}", hello(addr).await?);
    Ok(())
}
