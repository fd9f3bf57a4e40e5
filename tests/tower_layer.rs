//! The HTTP layer, one request at a time through tower's `oneshot`: keys,
//! rejections, headers (parsed as RFC 9651 structured fields), and the
//! shared limiter behind every clone. Time is a `ManualClock`.

// Plain `cargo test --features tower` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::{Future, Ready};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderName, Request, Response, StatusCode};
use tollgate::tower::{
    AdmittedHeaders, Cidr, Extraction, ForwardedHeader, GlobalKey, HeaderKey, KeyFn, MissingKey,
    PeerIp, RateLimitLayer, TrustedProxyIp,
};
use tollgate::{
    AsyncCheck, CheckError, Decision, FixedWindow, Limiter, ManualClock, Quota, TokenBucket,
};
use tower::{service_fn, Layer, Service, ServiceExt};

type Body = String;

/// The inner service: echoes the decision the layer left in the request.
async fn echo(request: Request<Body>) -> Result<Response<Body>, Infallible> {
    let body = match request.extensions().get::<Decision>() {
        Some(d) => format!("r={} t={:?}", d.remaining(), d.replenish_after()),
        None => "unchecked".to_owned(),
    };
    Ok(Response::new(body))
}

fn run<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// A bucket of `n` refilled at `n` per `secs`, keyed by IP.
fn bucket(n: u64, secs: u64, clock: &ManualClock) -> Limiter<TokenBucket, IpAddr, ManualClock> {
    TokenBucket::builder()
        .rate(n, Duration::from_secs(secs))
        .key_type::<IpAddr>()
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// A request from `peer` (a `SocketAddr` extension) with `headers`.
fn from(peer: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut builder = Request::get("/");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let mut request = builder.body(String::new()).unwrap();
    let peer: SocketAddr = peer.parse().unwrap();
    request.extensions_mut().insert(peer);
    request
}

async fn send<S>(service: &S, request: Request<Body>) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
{
    service.clone().oneshot(request).await.unwrap()
}

fn header<'a>(response: &'a Response<Body>, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

/// A `RateLimit`/`RateLimit-Policy` value parsed as an RFC 9651 List of
/// one Item: its String name and its integer parameters (`pk` as bytes'
/// length is checked separately).
fn structured(value: &str) -> (String, BTreeMap<String, i64>) {
    let list: sfv::List = sfv::Parser::new(value)
        .parse()
        .unwrap_or_else(|e| panic!("{value:?} is not a structured list: {e}"));
    assert_eq!(list.len(), 1, "{value:?}");
    let sfv::ListEntry::Item(item) = &list[0] else {
        panic!("{value:?} is an inner list")
    };
    let name = item.bare_item.as_string().expect("a String name").as_str();
    let params = item
        .params
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), i64::from(v.as_integer()?))))
        .collect();
    (name.to_owned(), params)
}

fn limit_of(response: &Response<Body>) -> (i64, i64) {
    let (name, p) = structured(header(response, "ratelimit").expect("a RateLimit header"));
    assert_eq!(name, "default");
    (p["r"], p["t"])
}

fn peer_ip_service(
    limiter: Limiter<TokenBucket, IpAddr, ManualClock>,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone {
    RateLimitLayer::new(limiter, PeerIp::new())
        .decision_extension(true)
        .layer(service_fn(echo))
}

#[test]
fn admits_exactly_the_quota_then_429_with_rounded_up_headers() {
    run(async {
        let clock = ManualClock::new();
        let service = peer_ip_service(bucket(3, 60, &clock));
        for left in (0..3).rev() {
            let ok = send(&service, from("192.0.2.1:1000", &[])).await;
            assert_eq!(ok.status(), StatusCode::OK);
            let (r, t) = limit_of(&ok);
            assert_eq!((r, t), (left, 20), "a token refills every 20 s");
            let (name, policy) = structured(header(&ok, "ratelimit-policy").unwrap());
            assert_eq!(name, "default");
            assert_eq!((policy["q"], policy["w"]), (3, 60));
            // The handler saw the same decision.
            assert_eq!(ok.body(), &format!("r={left} t=20s"));
        }
        clock.advance(Duration::from_millis(100));
        let denied = send(&service, from("192.0.2.1:1001", &[])).await;
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
        // 19.9 s to the next token: both rounded up, never 19.
        assert_eq!(limit_of(&denied), (0, 20));
        assert_eq!(header(&denied, "retry-after"), Some("20"));
        assert_eq!(
            header(&denied, "content-type"),
            Some("application/problem+json")
        );
        assert!(
            denied.body().contains("\"status\":429"),
            "{}",
            denied.body()
        );
        // Another client is untouched.
        let other = send(&service, from("192.0.2.2:1000", &[])).await;
        assert_eq!(limit_of(&other), (2, 20));
    });
}

#[test]
fn retry_after_rounds_a_sub_second_wait_up_to_one() {
    run(async {
        let clock = ManualClock::new();
        let service = peer_ip_service(bucket(1, 1, &clock));
        assert_eq!(send(&service, from("192.0.2.1:1", &[])).await.status(), 200);
        clock.advance(Duration::from_millis(100));
        let denied = send(&service, from("192.0.2.1:1", &[])).await;
        assert_eq!(denied.status(), 429);
        // 0.9 s: a truncating limiter would send 0 and invite a retry storm.
        assert_eq!(header(&denied, "retry-after"), Some("1"));
        assert_eq!(limit_of(&denied), (0, 1));
        clock.advance(Duration::from_millis(899));
        let still = send(&service, from("192.0.2.1:1", &[])).await;
        assert_eq!(header(&still, "retry-after"), Some("1"), "1 ms left is 1 s");
    });
}

#[test]
fn retry_after_is_never_earlier_than_t_and_at_least_one() {
    run(async {
        let clock = ManualClock::new();
        // A fixed window: more quota only at the next window.
        let limiter = FixedWindow::builder()
            .limit(2)
            .window(Duration::from_secs(10))
            .key_type::<IpAddr>()
            .clock(clock.clone())
            .build()
            .unwrap();
        let service = RateLimitLayer::new(limiter, PeerIp::new()).layer(service_fn(echo));
        clock.advance(Duration::from_millis(7_500));
        let first = send(&service, from("192.0.2.9:1", &[])).await;
        // Admitted, and t says when the window resets: 2.5 s, sent as 3.
        assert_eq!(limit_of(&first), (1, 3));
        let _ = send(&service, from("192.0.2.9:1", &[])).await;
        for _ in 0..3 {
            let denied = send(&service, from("192.0.2.9:1", &[])).await;
            let retry: i64 = header(&denied, "retry-after").unwrap().parse().unwrap();
            let (_, t) = limit_of(&denied);
            assert!(retry >= t && retry >= 1, "retry {retry} t {t}");
            assert_eq!(retry, 3);
        }
    });
}

#[test]
fn clones_of_the_layer_and_the_service_share_one_limiter() {
    run(async {
        let clock = ManualClock::new();
        let layer = RateLimitLayer::new(bucket(4, 60, &clock), PeerIp::new());
        // Two services from clones of the layer, as two routes or two
        // connections would have, and clones of each.
        let a = layer.clone().layer(service_fn(echo));
        let b = layer.layer(service_fn(echo));
        let mut statuses = Vec::new();
        for i in 0..8 {
            let service = if i % 2 == 0 { a.clone() } else { b.clone() };
            statuses.push(
                send(&service, from("198.51.100.7:9", &[]))
                    .await
                    .status()
                    .as_u16(),
            );
        }
        assert_eq!(statuses, [200, 200, 200, 200, 429, 429, 429, 429]);
    });
}

#[test]
fn ipv6_addresses_in_one_64_share_a_key_and_mapped_ipv4_is_ipv4() {
    run(async {
        let clock = ManualClock::new();
        let service = peer_ip_service(bucket(2, 60, &clock));
        let ok = |r: &Response<Body>| r.status() == StatusCode::OK;
        assert!(ok(&send(&service, from("[2001:db8:1:2::1]:1", &[])).await));
        assert!(ok(&send(
            &service,
            from("[2001:db8:1:2:ffff:ffff:ffff:ffff]:2", &[])
        )
        .await));
        assert!(!ok(
            &send(&service, from("[2001:db8:1:2:abcd::9]:3", &[])).await
        ));
        // The next /64 is another client.
        assert!(ok(&send(&service, from("[2001:db8:1:3::1]:1", &[])).await));
        // IPv4 and its IPv4-mapped IPv6 form are one client.
        assert!(ok(&send(&service, from("203.0.113.5:1", &[])).await));
        assert!(ok(
            &send(&service, from("[::ffff:203.0.113.5]:1", &[])).await
        ));
        assert!(!ok(&send(&service, from("203.0.113.5:2", &[])).await));
    });
}

#[test]
fn a_configurable_ipv6_prefix() {
    run(async {
        let clock = ManualClock::new();
        let extractor = PeerIp::new().ipv6_prefix(128).unwrap();
        let service = RateLimitLayer::new(bucket(1, 60, &clock), extractor).layer(service_fn(echo));
        assert_eq!(
            send(&service, from("[2001:db8::1]:1", &[])).await.status(),
            200
        );
        assert_eq!(
            send(&service, from("[2001:db8::2]:1", &[])).await.status(),
            200
        );
        assert_eq!(
            send(&service, from("[2001:db8::1]:1", &[])).await.status(),
            429
        );
        assert_eq!(
            PeerIp::new().ipv6_prefix(129).unwrap_err().field(),
            "ipv6_prefix"
        );
    });
}

fn proxied(
    clock: &ManualClock,
    limit: u64,
    header: ForwardedHeader,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone {
    let trusted: Vec<Cidr> = vec!["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()];
    let extractor = TrustedProxyIp::new(trusted).header(header);
    RateLimitLayer::new(bucket(limit, 60, clock), extractor).layer(service_fn(echo))
}

#[test]
fn a_spoofed_leftmost_forwarded_for_never_changes_the_key() {
    run(async {
        let clock = ManualClock::new();
        let service = proxied(&clock, 2, ForwardedHeader::XForwardedFor);
        // One client behind the proxy, writing a new fake address each time.
        let mut statuses = Vec::new();
        for fake in ["1.1.1.1", "2.2.2.2", "3.3.3.3", "10.9.9.9", "garbage"] {
            let xff = format!("{fake}, 203.0.113.50");
            let r = send(&service, from("10.0.0.1:443", &[("x-forwarded-for", &xff)])).await;
            statuses.push(r.status().as_u16());
        }
        assert_eq!(statuses, [200, 200, 429, 429, 429]);
        // Several proxies: the rightmost untrusted hop is the client, still
        // the same one.
        let r = send(
            &service,
            from(
                "10.0.0.1:443",
                &[(
                    "x-forwarded-for",
                    "6.6.6.6, 203.0.113.50, 10.1.1.1, fd00::7",
                )],
            ),
        )
        .await;
        assert_eq!(r.status(), 429);
        // Header lines concatenate: the last line's entries are rightmost.
        let mut request = from("10.0.0.1:443", &[("x-forwarded-for", "7.7.7.7")]);
        request
            .headers_mut()
            .append("x-forwarded-for", "203.0.113.50".parse().unwrap());
        assert_eq!(send(&service, request).await.status(), 429);
    });
}

#[test]
fn an_untrusted_peer_is_keyed_by_itself_whatever_its_headers_say() {
    run(async {
        let clock = ManualClock::new();
        let service = proxied(&clock, 1, ForwardedHeader::XForwardedFor);
        let spoof = |xff: &'static str| from("192.0.2.66:1", &[("x-forwarded-for", xff)]);
        assert_eq!(send(&service, spoof("203.0.113.1")).await.status(), 200);
        assert_eq!(send(&service, spoof("203.0.113.2")).await.status(), 429);
        assert_eq!(send(&service, spoof("10.0.0.5")).await.status(), 429);
    });
}

#[test]
fn distinct_clients_behind_a_trusted_proxy_get_distinct_keys() {
    run(async {
        let clock = ManualClock::new();
        for header in [
            ForwardedHeader::XForwardedFor,
            ForwardedHeader::Forwarded,
            ForwardedHeader::XRealIp,
        ] {
            let service = proxied(&clock, 1, header);
            let name = match header {
                ForwardedHeader::XForwardedFor => "x-forwarded-for",
                ForwardedHeader::Forwarded => "forwarded",
                ForwardedHeader::XRealIp => "x-real-ip",
            };
            let value = |ip: &str| match header {
                ForwardedHeader::XForwardedFor | ForwardedHeader::XRealIp => ip.to_owned(),
                ForwardedHeader::Forwarded if ip.contains(':') => {
                    format!("for=\"[{ip}]:4711\";proto=https")
                }
                ForwardedHeader::Forwarded => format!("for={ip};proto=https"),
            };
            for client in [
                "203.0.113.1",
                "203.0.113.2",
                "2001:db8:aa::1",
                "2001:db8:bb::1",
            ] {
                let v = value(client);
                let first = send(&service, from("10.0.0.1:443", &[(name, &v)])).await;
                assert_eq!(first.status(), 200, "{header:?} {client}");
                let second = send(&service, from("[fd00::1]:443", &[(name, &v)])).await;
                assert_eq!(
                    second.status(),
                    429,
                    "{header:?} {client} through a second proxy"
                );
            }
            // The /64 rule applies to forwarded clients too.
            let v = value("2001:db8:aa::ffff");
            let same64 = send(&service, from("10.0.0.1:443", &[(name, &v)])).await;
            assert_eq!(same64.status(), 429, "{header:?}");
        }
    });
}

#[test]
fn malformed_forwarding_headers_have_a_bounded_outcome() {
    run(async {
        let clock = ManualClock::new();
        use ForwardedHeader::{Forwarded, XForwardedFor, XRealIp};
        // (header, value, the key it must fall under). The walk stops at the
        // first entry that is not an address and keys by the nearest
        // trusted hop (here the proxy, 10.0.0.1), and reads at most 20
        // entries.
        let cases: Vec<(ForwardedHeader, String, &str)> = vec![
            (XForwardedFor, "not an address".into(), "10.0.0.1"),
            (XForwardedFor, "".into(), "10.0.0.1"),
            (XForwardedFor, ",,,".into(), "10.0.0.1"),
            (XForwardedFor, "999.1.1.1".into(), "10.0.0.1"),
            (XForwardedFor, "[::1".into(), "10.0.0.1"),
            (
                XForwardedFor,
                "203.0.113.7, 10.0.0.2, junk".into(),
                "10.0.0.1",
            ),
            (
                XForwardedFor,
                "junk, 203.0.113.7, 10.0.0.2".into(),
                "203.0.113.7",
            ),
            // 20 000 hops: only the rightmost two are read.
            (
                XForwardedFor,
                "1.2.3.4, ".repeat(20_000) + "10.0.0.3",
                "1.2.3.4",
            ),
            // A trusted chain longer than the bound: the 20th hop.
            (
                XForwardedFor,
                "10.0.0.9, ".repeat(5_000) + "10.0.0.8",
                "10.0.0.9",
            ),
            (XRealIp, "203.0.113.7".into(), "203.0.113.7"),
            (XRealIp, "10.0.0.5".into(), "10.0.0.5"),
            (XRealIp, "203.0.113.7, 6.6.6.6".into(), "10.0.0.1"),
            (XRealIp, "garbage".into(), "10.0.0.1"),
            (Forwarded, "for=unknown".into(), "10.0.0.1"),
            (
                Forwarded,
                "for=_hidden, for=\"[2001:db8::1\"".into(),
                "10.0.0.1",
            ),
            (Forwarded, ";;;==;".into(), "10.0.0.1"),
            (Forwarded, "proto=https".into(), "10.0.0.1"),
            // An unbalanced quote spoils only what lies left of it: the
            // element right of it, which a proxy appended, is read.
            (Forwarded, "for=\"1.2.3.4, for=5.6.7.8".into(), "5.6.7.8"),
            // Right of the client's element, it stops the walk there.
            (Forwarded, "for=5.6.7.8, for=\"1.2.3.4".into(), "10.0.0.1"),
            // One huge element naming `for` 10 000 times: no one address.
            (Forwarded, "for=10.0.0.4;".repeat(10_000), "10.0.0.1"),
            // 20 000 elements: the rightmost 20 are read.
            (
                Forwarded,
                "for=1.2.3.4, ".repeat(20_000) + "for=10.0.0.3",
                "1.2.3.4",
            ),
        ];
        for (header, value, expected) in cases {
            let name = match header {
                XForwardedFor => "x-forwarded-for",
                Forwarded => "forwarded",
                XRealIp => "x-real-ip",
            };
            // Limit 1: after the request, its key has nothing left, which a
            // request keyed by `expected` itself (its own peer address, no
            // header) then shows.
            let service = proxied(&clock, 1, header);
            let r = send(&service, from("10.0.0.1:443", &[(name, &value)])).await;
            assert_eq!(r.status(), 200, "{header:?} {value:.60}");
            let peer = format!("{expected}:1");
            let same = send(&service, from(&peer, &[])).await;
            assert_eq!(
                same.status(),
                429,
                "{header:?} {value:.60} not keyed by {expected}"
            );
        }
        // A value that is not ASCII never reaches the walk.
        let service = proxied(&clock, 1, XForwardedFor);
        let mut request = from("10.0.0.1:443", &[]);
        request.headers_mut().insert(
            "x-forwarded-for",
            http::HeaderValue::from_bytes(b"203.0.113.1, \xff\xfe").unwrap(),
        );
        assert_eq!(send(&service, request).await.status(), 200);
        assert_eq!(
            send(&service, from("10.0.0.1:443", &[])).await.status(),
            429
        );
    });
}

#[test]
fn a_missing_api_key_gets_the_configured_answer_never_a_500() {
    run(async {
        let clock = ManualClock::new();
        let name = HeaderName::from_static("x-api-key");
        let limiter = || {
            TokenBucket::builder()
                .rate(1, Duration::from_secs(60))
                .clock(clock.clone())
                .build()
                .unwrap()
        };
        for (missing, status) in [
            (MissingKey::Unauthorized, StatusCode::UNAUTHORIZED),
            (MissingKey::BadRequest, StatusCode::BAD_REQUEST),
            (MissingKey::Skip, StatusCode::OK),
        ] {
            let extractor = HeaderKey::new(name.clone()).on_missing(missing);
            let service = RateLimitLayer::new(limiter(), extractor).layer(service_fn(echo));
            for empty in [None, Some("")] {
                let headers: Vec<(&str, &str)> =
                    empty.map(|v| ("x-api-key", v)).into_iter().collect();
                let r = send(&service, from("192.0.2.1:1", &headers)).await;
                assert_eq!(r.status(), status, "{missing:?}");
                if status == StatusCode::OK {
                    assert_eq!(r.body(), "unchecked");
                    assert!(header(&r, "ratelimit").is_none());
                } else {
                    assert_eq!(header(&r, "content-type"), Some("application/problem+json"));
                    assert!(r.body().contains("x-api-key"), "{}", r.body());
                }
            }
            // Keys are limited one by one.
            let key = |k: &'static str| from("192.0.2.1:1", &[("x-api-key", k)]);
            assert_eq!(send(&service, key("alpha")).await.status(), 200);
            assert_eq!(send(&service, key("alpha")).await.status(), 429);
            assert_eq!(send(&service, key("beta")).await.status(), 200);
            // A value that is not visible ASCII is a bad request in every
            // mode, so that no one skips the limit with an odd value.
            let mut odd = from("192.0.2.1:1", &[]);
            odd.headers_mut().insert(
                "x-api-key",
                http::HeaderValue::from_bytes(b"k\xe9y").unwrap(),
            );
            assert_eq!(send(&service, odd).await.status(), StatusCode::BAD_REQUEST);
        }
    });
}

/// A server not wired to record peer addresses: the client is told 500
/// and nothing of the server; the operator is told how to wire it, once
/// per layer, through `on_check_error`.
#[test]
fn a_request_without_a_peer_address_is_a_clear_error_to_the_operator_only() {
    run(async {
        let clock = ManualClock::new();
        let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
        let hear = |heard: &Arc<std::sync::Mutex<Vec<String>>>| {
            let heard = Arc::clone(heard);
            move |error: &CheckError, _: &http::request::Parts| {
                heard.lock().unwrap().push(error.to_string());
            }
        };
        let service = RateLimitLayer::new(bucket(1, 60, &clock), PeerIp::new())
            .on_check_error(hear(&heard))
            .layer(service_fn(echo));
        for _ in 0..3 {
            let r = send(&service, Request::new(String::new())).await;
            assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
            for internal in ["into_make_service", "peer_from", "SocketAddr", "axum"] {
                assert!(!r.body().contains(internal), "{internal} in {}", r.body());
            }
        }
        // The operator hears the fix, once: how to serve axum with
        // connect info, and the way to name another extension.
        {
            let heard = heard.lock().unwrap();
            assert_eq!(heard.len(), 1, "{heard:?}");
            for fix in [
                "into_make_service_with_connect_info::<SocketAddr>()",
                "peer_from",
            ] {
                assert!(heard[0].contains(fix), "{fix} not in {}", heard[0]);
            }
            if cfg!(not(feature = "axum")) {
                assert!(heard[0].contains("`axum` feature"), "{}", heard[0]);
            }
        }
        // A named extension that is missing is named, to the operator.
        #[derive(Clone)]
        struct Conn(Option<SocketAddr>);
        let named_heard = Arc::new(std::sync::Mutex::new(Vec::new()));
        let named = RateLimitLayer::new(
            bucket(1, 60, &clock),
            PeerIp::new().peer_from(|c: &Conn| c.0),
        )
        .on_check_error(hear(&named_heard))
        .layer(service_fn(echo));
        let r = send(&named, Request::new(String::new())).await;
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!r.body().contains("Conn"), "{}", r.body());
        let told = named_heard.lock().unwrap().join("\n");
        assert!(told.contains("tower_layer::"), "{told}");
        assert!(told.contains("Conn extension"), "{told}");
        let mut unknown = Request::new(String::new());
        unknown.extensions_mut().insert(Conn(None));
        assert_eq!(
            send(&named, unknown).await.status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        let mut known = Request::new(String::new());
        known
            .extensions_mut()
            .insert(Conn(Some("192.0.2.9:1".parse().unwrap())));
        assert_eq!(send(&named, known).await.status(), StatusCode::OK);
    });
}

#[test]
fn admitted_headers_always_never_or_near_the_limit() {
    run(async {
        let clock = ManualClock::new();
        for (mode, expected) in [
            (AdmittedHeaders::Always, [true, true, true, true]),
            (AdmittedHeaders::Never, [false, false, false, false]),
            (AdmittedHeaders::NearLimit(1), [false, false, true, true]),
        ] {
            let layer =
                RateLimitLayer::new(bucket(4, 60, &clock), PeerIp::new()).admitted_headers(mode);
            let service = layer.layer(service_fn(echo));
            let mut seen = [false; 4];
            for s in &mut seen {
                let r = send(&service, from("192.0.2.1:1", &[])).await;
                assert_eq!(r.status(), 200);
                *s = header(&r, "ratelimit").is_some();
                assert_eq!(*s, header(&r, "ratelimit-policy").is_some());
            }
            assert_eq!(seen, expected, "{mode:?}");
            // A 429 always carries them.
            let denied = send(&service, from("192.0.2.1:1", &[])).await;
            assert_eq!(denied.status(), 429);
            assert!(header(&denied, "ratelimit").is_some(), "{mode:?}");
        }
    });
}

#[test]
fn partition_key_legacy_headers_and_policy_name() {
    run(async {
        let clock = ManualClock::new();
        let layer = RateLimitLayer::new(bucket(2, 10, &clock), PeerIp::new())
            .policy_name("per-ip \"v1\"")
            .unwrap()
            .legacy_headers(true)
            .partition_key(|ip: &IpAddr| ip.to_string().into_bytes());
        let service = layer.layer(service_fn(echo));
        let r = send(&service, from("192.0.2.1:1", &[])).await;
        for name in ["ratelimit", "ratelimit-policy"] {
            let list: sfv::List = sfv::Parser::new(header(&r, name).unwrap()).parse().unwrap();
            let sfv::ListEntry::Item(item) = &list[0] else {
                panic!()
            };
            assert_eq!(
                item.bare_item.as_string().unwrap().as_str(),
                "per-ip \"v1\""
            );
            let pk = item
                .params
                .get("pk")
                .and_then(|v| v.as_byte_sequence())
                .unwrap();
            assert_eq!(pk, b"192.0.2.1", "{name}");
        }
        assert_eq!(header(&r, "x-ratelimit-limit"), Some("2"));
        assert_eq!(header(&r, "x-ratelimit-remaining"), Some("1"));
        assert_eq!(header(&r, "x-ratelimit-reset"), Some("5"));
        assert!(RateLimitLayer::new(bucket(2, 10, &clock), PeerIp::new())
            .policy_name("naïve")
            .is_err());
    });
}

#[test]
fn skip_predicates_and_closures() {
    run(async {
        let clock = ManualClock::new();
        let by_path = KeyFn::new(|request: &http::request::Parts| match request.uri.path() {
            "/public" => Extraction::Skip,
            path => Extraction::Key(path.parse::<IpAddr>().unwrap_or(IpAddr::from([0, 0, 0, 0]))),
        });
        let layer = RateLimitLayer::new(bucket(1, 60, &clock), by_path).skip_if(|request| {
            request.uri.path() == "/health" || request.method == http::Method::OPTIONS
        });
        let service = layer.layer(service_fn(echo));
        let get = |path: &str| Request::get(path).body(String::new()).unwrap();
        for _ in 0..3 {
            let health = send(&service, get("/health")).await;
            assert_eq!(
                (health.status().as_u16(), health.body().as_str()),
                (200, "unchecked")
            );
            assert!(header(&health, "ratelimit").is_none());
            assert_eq!(send(&service, get("/public")).await.status(), 200);
            let preflight = Request::options("/x").body(String::new()).unwrap();
            assert_eq!(send(&service, preflight).await.status(), 200);
        }
        assert_eq!(send(&service, get("/x")).await.status(), 200);
        assert_eq!(send(&service, get("/x")).await.status(), 429);
    });
}

/// A limiter in "another process": its decision arrives after two pending
/// polls (the layer's own first poll, then the task's), each waking the task.
#[derive(Debug)]
struct Remote {
    limiter: Limiter<TokenBucket, IpAddr, ManualClock>,
    fail: bool,
}

struct Later {
    decision: Option<Result<Decision, CheckError>>,
    pending: u8,
}

impl Future for Later {
    type Output = Result<Decision, CheckError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.pending > 0 {
            self.pending -= 1;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(self.decision.take().expect("polled once more"))
    }
}

impl AsyncCheck<IpAddr> for Remote {
    type Future = Pin<Box<dyn Future<Output = Result<Decision, CheckError>> + Send>>;
    fn check(&self, key: &IpAddr, cost: u64) -> Self::Future {
        let decision = if self.fail {
            Err(CheckError::new("the store is unreachable"))
        } else {
            Ok(self.limiter.check_n(key, cost).unwrap())
        };
        Box::pin(Later {
            decision: Some(decision),
            pending: 2,
        })
    }
    fn quota(&self) -> Quota {
        self.limiter.quota()
    }
}

#[test]
fn a_check_that_completes_later_and_one_that_fails() {
    run(async {
        let clock = ManualClock::new();
        let remote = Remote {
            limiter: bucket(2, 60, &clock),
            fail: false,
        };
        let service = RateLimitLayer::new(remote, PeerIp::new()).layer(service_fn(echo));
        let mut seen = Vec::new();
        for _ in 0..3 {
            let r = send(&service, from("192.0.2.1:1", &[])).await;
            seen.push((
                r.status().as_u16(),
                header(&r, "ratelimit").map(str::to_owned),
            ));
        }
        assert_eq!(
            seen,
            [
                (200, Some("\"default\";r=1;t=30".to_owned())),
                (200, Some("\"default\";r=0;t=30".to_owned())),
                (429, Some("\"default\";r=0;t=30".to_owned())),
            ]
        );
        let down = Remote {
            limiter: bucket(2, 60, &clock),
            fail: true,
        };
        let service = RateLimitLayer::new(down, PeerIp::new()).layer(service_fn(echo));
        let r = send(&service, from("192.0.2.1:1", &[])).await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        // The cause is the operator's (`on_check_error`), not the client's.
        assert!(
            !r.body().contains("the store is unreachable"),
            "{}",
            r.body()
        );
    });
}

#[test]
fn concurrent_requests_from_many_tasks_are_never_over_admitted() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    runtime.block_on(async {
        let clock = ManualClock::new();
        let limiter: Arc<dyn AsyncCheck<IpAddr, Future = Ready<Result<Decision, CheckError>>>> =
            Arc::new(bucket(50, 60, &clock));
        let service = RateLimitLayer::new(limiter, PeerIp::new()).layer(service_fn(echo));
        let mut tasks = Vec::new();
        for task in 0..32u8 {
            let service = service.clone();
            tasks.push(tokio::spawn(drive(service, task)));
        }
        let mut total = [0u32; 2];
        for task in tasks {
            let [a, b] = task.await.unwrap();
            total[0] += a;
            total[1] += b;
        }
        // 640 requests, 320 per client, a budget of 50 each and no time passing.
        assert_eq!(total, [50, 50]);
    });
}

/// One task's 20 requests, alternating between two clients: how many of
/// each were admitted.
async fn drive<S>(service: S, task: u8) -> [u32; 2]
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
{
    let mut admitted = [0u32; 2];
    for i in 0..20u8 {
        let client = (task + i) % 2;
        let request = from(
            &format!("192.0.2.{}:{}", client + 1, 1000 + u16::from(i)),
            &[],
        );
        if send(&service, request).await.status() == 200 {
            admitted[usize::from(client)] += 1;
        }
    }
    admitted
}

/// A tiered limiter's policy header names each client's own quota, and
/// follows a quota changed after the layer was made.
#[test]
fn the_policy_header_names_the_clients_own_quota() {
    run(async {
        let clock = ManualClock::new();
        let tiered = TokenBucket::builder()
            .rate(3, Duration::from_secs(60))
            .key_type::<IpAddr>()
            .tier(1, TokenBucket::builder().rate(10, Duration::from_secs(10)))
            .tier_by(|ip: &IpAddr| u16::from(ip.is_loopback()))
            .clock(clock.clone())
            .build()
            .unwrap();
        let layer = RateLimitLayer::new(tiered, PeerIp::new()).legacy_headers(true);
        let service = layer.clone().layer(service_fn(echo));
        let policy = |response: &Response<Body>| {
            let (_, p) = structured(header(response, "ratelimit-policy").unwrap());
            (
                p["q"],
                p["w"],
                header(response, "x-ratelimit-limit").unwrap().to_owned(),
            )
        };
        let default = send(&service, from("192.0.2.1:1000", &[])).await;
        assert_eq!(policy(&default), (3, 60, "3".to_owned()));
        let pro = send(&service, from("127.0.0.1:1000", &[])).await;
        assert_eq!(policy(&pro), (10, 10, "10".to_owned()));
        assert_eq!(limit_of(&pro).0, 9);
        layer
            .limiter()
            .set_quota(0, TokenBucket::builder().rate(6, Duration::from_secs(60)))
            .unwrap();
        let changed = send(&service, from("192.0.2.1:1001", &[])).await;
        assert_eq!(policy(&changed), (6, 60, "6".to_owned()));
    });
}

/// A denial that never passes (`retry_after() == Duration::MAX`: the last
/// window, its limit spent) is a 429 at once, with the longest `Retry-After`.
#[test]
fn a_denial_that_never_passes_is_a_429_with_the_longest_retry_after() {
    run(async {
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos((1 << 63) - 1));
        let limiter = FixedWindow::builder()
            .limit(1)
            .window(Duration::from_secs(60))
            .key_type::<IpAddr>()
            .clock(clock.clone())
            .build()
            .unwrap();
        let service = RateLimitLayer::new(limiter, PeerIp::new()).layer(service_fn(echo));
        let ok = send(&service, from("192.0.2.7:1", &[])).await;
        assert_eq!(ok.status(), StatusCode::OK);
        let denied = tokio::time::timeout(
            Duration::from_secs(60),
            send(&service, from("192.0.2.7:1", &[])),
        )
        .await
        .expect("answered at once");
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry: u64 = header(&denied, "retry-after").unwrap().parse().unwrap();
        assert_eq!(retry, 999_999_999_999_999, "the largest sf-integer");
        assert!(!denied.body().starts_with("r="), "the handler did not run");
    });
}

#[test]
fn a_global_key_is_one_budget_for_everyone() {
    run(async {
        let clock = ManualClock::new();
        let everyone = TokenBucket::builder()
            .rate(3, Duration::from_secs(60))
            .key_type::<()>()
            .clock(clock.clone())
            .build()
            .unwrap();
        let service = RateLimitLayer::new(everyone, GlobalKey).layer(service_fn(echo));
        let mut statuses = Vec::new();
        for peer in [
            "192.0.2.1:1",
            "192.0.2.2:1",
            "[2001:db8::1]:1",
            "192.0.2.3:1",
        ] {
            statuses.push(send(&service, from(peer, &[])).await.status().as_u16());
        }
        assert_eq!(statuses, [200, 200, 200, 429]);
        // A request with no peer address at all is limited too.
        let r = send(&service, Request::new(String::new())).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    });
}

#[test]
fn the_decision_extension_is_off_unless_turned_on() {
    run(async {
        let clock = ManualClock::new();
        for (on, body) in [
            (None, "unchecked"),
            (Some(true), "r=1 t=30s"),
            (Some(false), "unchecked"),
        ] {
            let mut layer = RateLimitLayer::new(bucket(2, 60, &clock), PeerIp::new());
            if let Some(on) = on {
                layer = layer.decision_extension(on);
            }
            let service = layer.layer(service_fn(echo));
            let r = send(&service, from("192.0.2.1:1", &[])).await;
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!(r.body(), body);
            // The headers say the same either way.
            assert_eq!(limit_of(&r), (1, 30));
        }
    });
}

/// The guides tell users to depend on this crate's own release line: the
/// `version` in each guide's `Cargo.toml` snippet is the major and minor
/// version of the crate they ship in.
#[test]
fn the_guides_depend_on_this_release() {
    let version = env!("CARGO_PKG_VERSION");
    let line: Vec<&str> = version.splitn(3, '.').take(2).collect();
    let release = line.join(".");
    for (guide, text) in [
        ("http", include_str!("../src/guide/http.rs")),
        ("redis", include_str!("../src/guide/redis.rs")),
    ] {
        let deps: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                l.trim_start_matches("//!")
                    .trim()
                    .strip_prefix("tollgate = {")
            })
            .collect();
        assert!(
            !deps.is_empty(),
            "the {guide} guide shows no dependency line"
        );
        for dep in deps {
            let quoted = dep
                .split("version = \"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_else(|| panic!("the {guide} guide's {dep:?} names no version"));
            assert_eq!(
                quoted, release,
                "the {guide} guide says version {quoted:?}; the crate is {version}"
            );
        }
    }
}

/// An inner service that is never ready: it fails `poll_ready`.
#[derive(Clone)]
struct Broken;

impl Service<Request<Body>> for Broken {
    type Response = Response<Body>;
    type Error = &'static str;
    type Future = Ready<Result<Response<Body>, &'static str>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), &'static str>> {
        Poll::Ready(Err("broken"))
    }

    fn call(&mut self, _: Request<Body>) -> Self::Future {
        panic!("called without being ready")
    }
}

/// The layer is ready whatever its inner service: a refusal is answered
/// without it, and an admitted request gets the inner service's
/// readiness error, never a call it was not ready for.
#[test]
fn an_inner_service_that_fails_readiness_fails_admitted_requests_only() {
    run(async {
        let clock = ManualClock::new();
        let mut service = RateLimitLayer::new(bucket(1, 60, &clock), PeerIp::new()).layer(Broken);
        let waker = std::task::Waker::noop();
        assert!(matches!(
            service.poll_ready(&mut Context::from_waker(waker)),
            Poll::Ready(Ok(()))
        ));
        let admitted = service.call(from("192.0.2.1:1", &[])).await;
        assert_eq!(admitted.unwrap_err(), "broken");
        let refused = service.call(from("192.0.2.1:1", &[])).await.unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    });
}
