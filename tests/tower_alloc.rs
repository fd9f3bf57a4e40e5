//! What the layer allocates, counted by a global allocator that records
//! every allocation: allocations per admitted request (this binary only,
//! so no other suite pays for the counting), and the bytes a flood of
//! distinct API keys leaves behind.

// Plain `cargo test --features tower` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use tollgate::tower::{HeaderKey, PeerIp, RateLimitLayer};
use tollgate::{ManualClock, TokenBucket};
use tower::{service_fn, Layer, Service, ServiceExt};

/// Counts allocations made on each thread, and live bytes process-wide.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

fn size(layout: Layout) -> i64 {
    i64::try_from(layout.size()).unwrap_or(i64::MAX)
}

// SAFETY: every method forwards to `System` with the caller's own
// arguments, so `System`'s guarantees are the caller's; the counting
// touches only a const-initialised thread-local `Cell` (no allocation, no
// destructor) and an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // Relaxed: a statistic read after the work it counts has joined.
        LIVE_BYTES.fetch_add(size(layout), Ordering::Relaxed);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Relaxed: as in `alloc`.
        LIVE_BYTES.fetch_sub(size(layout), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        let grown = i64::try_from(new_size).unwrap_or(i64::MAX) - size(layout);
        // Relaxed: as in `alloc`.
        LIVE_BYTES.fetch_add(grown, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with `layout`, as the caller promises.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The live-bytes figure is process-wide: one test at a time reads it.
static SERIAL: Mutex<()> = Mutex::new(());

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

fn live_bytes() -> i64 {
    // Relaxed: see `alloc`.
    LIVE_BYTES.load(Ordering::Relaxed)
}

fn run<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// A handler's response as a framework makes it: with a content type.
async fn ok(_: Request<String>) -> Result<Response<String>, Infallible> {
    let mut response = Response::new(String::new());
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    Ok(response)
}

/// Allocations per request through `service`, on this thread, over 1 000
/// requests after a warm-up; the requests are built, and the responses
/// dropped, outside the count.
async fn per_request<S>(mut service: S) -> f64
where
    S: Service<Request<String>, Response = Response<String>, Error = Infallible>,
{
    let peer: SocketAddr = "192.0.2.1:5000".parse().unwrap();
    let request = || {
        let mut r = Request::new(String::new());
        r.extensions_mut().insert(peer);
        r
    };
    for _ in 0..10 {
        let r = request();
        let _ = service.ready().await.unwrap().call(r).await.unwrap();
    }
    let mut counted = 0;
    for _ in 0..1_000 {
        let r = request();
        let before = allocations();
        let response = service.ready().await.unwrap().call(r).await.unwrap();
        counted += allocations() - before;
        assert_eq!(response.status(), StatusCode::OK);
    }
    counted as f64 / 1_000.0
}

#[test]
fn allocations_per_admitted_request() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    run(async {
        let limiter = || {
            TokenBucket::builder()
                .rate(1_000_000, Duration::from_secs(1))
                .key_type::<IpAddr>()
                .clock(ManualClock::new())
                .build()
                .unwrap()
        };
        let bare = per_request(service_fn(ok)).await;
        let layered =
            per_request(RateLimitLayer::new(limiter(), PeerIp::new()).layer(service_fn(ok))).await;
        let headerless = per_request(
            RateLimitLayer::new(limiter(), PeerIp::new())
                .admitted_headers(tollgate::tower::AdmittedHeaders::Never)
                .layer(service_fn(ok)),
        )
        .await;
        let extended = per_request(
            RateLimitLayer::new(limiter(), PeerIp::new())
                .decision_extension(true)
                .layer(service_fn(ok)),
        )
        .await;
        println!("allocations per request: bare {bare}, layer {layered}, layer without admitted headers {headerless}, and with the decision extension {extended}");
        // The figures docs/PERFORMANCE.md states: the handler's own two
        // (its response's header map), and the layer's: the `RateLimit`
        // value (`RateLimit-Policy` is rendered once, when the layer is
        // made), and with the extension on, the `Decision` put in the
        // request's extensions.
        assert_eq!(bare, 2.0);
        assert_eq!(layered - bare, 1.0, "with headers");
        assert_eq!(headerless - bare, 0.0, "without admitted headers");
        assert_eq!(
            extended - bare,
            2.0,
            "with headers and the decision extension"
        );
    });
}

/// 2 000 requests with distinct 60 KiB API keys, and 2 000 with distinct
/// keys at the length bound, against a limiter of at most 100 clients:
/// what stays allocated afterwards is bounded by the clients times the
/// bound, not by the bytes sent.
#[test]
fn a_flood_of_distinct_api_keys_stays_bounded() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    run(async {
        let name = HeaderName::from_static("x-api-key");
        let limiter = TokenBucket::builder()
            .rate(10, Duration::from_secs(60))
            .max_clients(100)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let service =
            RateLimitLayer::new(limiter, HeaderKey::new(name.clone())).layer(service_fn(ok));
        let send = |key: String| {
            let mut r = Request::new(String::new());
            r.headers_mut()
                .insert(name.clone(), HeaderValue::try_from(key).unwrap());
            service.clone().oneshot(r)
        };
        // Warm-up: the store's first table, the runtime's buffers.
        let _ = send("warm".to_owned()).await.unwrap();
        let before = live_bytes();
        for i in 0..2_000 {
            let key = format!("{i:08}{}", "k".repeat(60 * 1024));
            let _ = send(key).await.unwrap();
        }
        let huge = live_bytes() - before;
        for i in 0..2_000 {
            let key = format!("{i:08}{}", "k".repeat(256 - 8));
            assert_eq!(send(key).await.unwrap().status(), StatusCode::OK);
        }
        let at_bound = live_bytes() - before;
        println!(
            "retained after 2 000 60 KiB keys: {huge} B; after 2 000 more 256 B keys: {at_bound} B"
        );
        // 100 clients × (256 B of key + 2 KiB of entry, table and slack),
        // plus 64 KiB for deferred reclamation; measured: 0 B and about
        // 167 KB.
        let bound = 100 * (256 + 2048) + 64 * 1024;
        assert!(
            huge < bound,
            "{huge} B retained after 60 KiB keys (bound {bound})"
        );
        assert!(at_bound < bound, "{at_bound} B retained (bound {bound})");
    });
}
