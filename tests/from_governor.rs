//! The "Coming from governor" table (README.md and the crate docs), row by
//! row: each governor call beside the tollgate call the table maps it to,
//! on clocks moved together, deciding alike (the same admissions, the same
//! waits to the nanosecond) where both sides are deterministic, and at
//! least compiling and answering where they are not.

#![cfg(not(feature = "loom"))]

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock as _, FakeRelativeClock};
use governor::{Quota, RateLimiter};
use tollgate::{ManualClock, TokenBucket};

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

/// The steps both clocks take between checks: a deterministic mix of
/// nothing, a nanosecond, and fractions and multiples of the periods used
/// below.
fn steps(seed: u64, n: usize) -> Vec<Duration> {
    const STEPS: [u64; 9] = [
        0,
        0,
        1,
        1_000_000,
        99_999_999,
        100_000_000,
        250_000_000,
        1_000_000_000,
        3_000_000_000,
    ];
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            Duration::from_nanos(STEPS[(x >> 33) as usize % STEPS.len()])
        })
        .collect()
}

/// A governor decision as (admitted, wait): the wait is `NotUntil`'s
/// `wait_time_from(clock.now())`, zero on an admission.
macro_rules! governor_says {
    ($result:expr, $clock:expr) => {
        match $result {
            Ok(()) => (true, Duration::ZERO),
            Err(not_until) => (false, not_until.wait_time_from($clock.now())),
        }
    };
}

/// A tollgate decision as (admitted, wait).
fn tollgate_says(d: tollgate::Decision) -> (bool, Duration) {
    (d.is_allowed(), d.retry_after())
}

/// Keyed limiters for `quota` and the tollgate builder the table maps it
/// to, checked on three keys through `steps`: the same decisions and waits.
fn keyed_alike(quota: Quota, builder: tollgate::Builder<TokenBucket>, seed: u64) {
    let g_clock = FakeRelativeClock::default();
    let governor = RateLimiter::dashmap_with_clock(quota, g_clock.clone());
    let t_clock = ManualClock::new();
    let tollgate = builder.clock(t_clock.clone()).build().unwrap();
    for (i, step) in steps(seed, 400).into_iter().enumerate() {
        g_clock.advance(step);
        t_clock.advance(step);
        let key = ["a", "b", "c"][i % 3];
        assert_eq!(
            governor_says!(governor.check_key(&key), g_clock),
            tollgate_says(tollgate.check(key)),
            "check {i} of {key}, {quota:?}"
        );
    }
}

/// Row: `Quota::per_second(n)` → `.rate(n, Duration::from_secs(1))` (the
/// capacity defaults to `n`, governor's burst); `RateLimiter::keyed`
/// (here `dashmap_with_clock`) → `TokenBucket::builder()…build()?`;
/// `check_key(&k)` → `check(&k)`, its `retry_after()` governor's
/// `wait_time_from(clock.now())`; `FakeRelativeClock` → `ManualClock`.
#[test]
fn per_second_is_a_rate_per_second() {
    for n in [1, 4, 10, 1_000] {
        keyed_alike(
            Quota::per_second(nz(n)),
            TokenBucket::builder().rate(u64::from(n), Duration::from_secs(1)),
            u64::from(n),
        );
    }
}

/// Row: `Quota::per_minute(n)`, `per_hour(n)` → `.rate(n, 60 s)`,
/// `.rate(n, 3600 s)`.
#[test]
fn per_minute_and_per_hour_are_rates_too() {
    keyed_alike(
        Quota::per_minute(nz(600)),
        TokenBucket::builder().rate(600, Duration::from_secs(60)),
        7,
    );
    keyed_alike(
        Quota::per_hour(nz(36_000)),
        TokenBucket::builder().rate(36_000, Duration::from_secs(3_600)),
        8,
    );
}

/// Row: `Quota::with_period(p).allow_burst(b)` → `.rate(1, p).capacity(b)`;
/// `Quota::per_second(n).allow_burst(b)` → `.rate(n, 1 s).capacity(b)`.
#[test]
fn with_period_and_allow_burst_are_rate_and_capacity() {
    for (period_ms, burst) in [(100, 1), (250, 5), (1_000, 3), (50, 40)] {
        let period = Duration::from_millis(period_ms);
        keyed_alike(
            Quota::with_period(period).unwrap().allow_burst(nz(burst)),
            TokenBucket::builder()
                .rate(1, period)
                .capacity(u64::from(burst)),
            period_ms,
        );
    }
    keyed_alike(
        Quota::per_second(nz(10)).allow_burst(nz(25)),
        TokenBucket::builder()
            .rate(10, Duration::from_secs(1))
            .capacity(25),
        11,
    );
}

/// A period that is not a whole number of nanoseconds: governor rounds it
/// down, tollgate up (it errs toward denying), so the two part by a
/// nanosecond per token.
#[test]
fn an_uneven_period_rounds_down_in_governor_and_up_in_tollgate() {
    let g_clock = FakeRelativeClock::default();
    let governor = RateLimiter::direct_with_clock(Quota::per_second(nz(3)), g_clock.clone());
    let t_clock = ManualClock::new();
    let tollgate = TokenBucket::builder()
        .rate(3, Duration::from_secs(1))
        .clock(t_clock.clone())
        .build_direct()
        .unwrap();
    for _ in 0..3 {
        assert!(governor.check().is_ok());
        assert!(tollgate.allow());
    }
    let g_wait = governor_says!(governor.check(), g_clock).1;
    let t_wait = tollgate.check().retry_after();
    assert_eq!(g_wait, Duration::from_nanos(333_333_333));
    assert_eq!(t_wait, Duration::from_nanos(333_333_334));
}

/// Row: `check_key_n(&k, n)` → `check_n(&k, n)`: `Ok(Ok(()))` is an
/// allowed `Decision`, `Ok(Err(_))` a denied one, and
/// `Err(InsufficientCapacity)` a `CostError` (a cost above the capacity).
#[test]
fn check_key_n_is_check_n() {
    let g_clock = FakeRelativeClock::default();
    let governor = RateLimiter::dashmap_with_clock(Quota::per_second(nz(10)), g_clock.clone());
    let t_clock = ManualClock::new();
    let tollgate = TokenBucket::builder()
        .rate(10, Duration::from_secs(1))
        .clock(t_clock.clone())
        .build()
        .unwrap();
    for (i, step) in steps(3, 300).into_iter().enumerate() {
        g_clock.advance(step);
        t_clock.advance(step);
        let cost = [1, 3, 7, 10][i % 4];
        let g = governor.check_key_n(&"k", nz(cost)).unwrap().is_ok();
        let t = tollgate.check_n("k", u64::from(cost)).unwrap().is_allowed();
        assert_eq!(g, t, "check {i}, cost {cost}");
    }
    assert!(governor.check_key_n(&"k", nz(11)).is_err());
    assert!(tollgate.check_n("k", 11).is_err());
}

/// Row: `RateLimiter::direct(q)` → `.build_direct()?`; `check()` →
/// `check()` (or `allow()` for a bool); `check_n(n)` → `check_n(n)`.
#[test]
fn direct_is_build_direct() {
    let g_clock = FakeRelativeClock::default();
    let governor = RateLimiter::direct_with_clock(
        Quota::with_period(Duration::from_millis(250))
            .unwrap()
            .allow_burst(nz(4)),
        g_clock.clone(),
    );
    let t_clock = ManualClock::new();
    let tollgate = TokenBucket::builder()
        .rate(1, Duration::from_millis(250))
        .capacity(4)
        .clock(t_clock.clone())
        .build_direct()
        .unwrap();
    for (i, step) in steps(5, 400).into_iter().enumerate() {
        g_clock.advance(step);
        t_clock.advance(step);
        if i % 5 == 4 {
            let g = governor.check_n(nz(2)).unwrap().is_ok();
            assert_eq!(g, tollgate.check_n(2).unwrap().is_allowed(), "check {i}");
        } else {
            assert_eq!(
                governor_says!(governor.check(), g_clock),
                tollgate_says(tollgate.check()),
                "check {i}"
            );
        }
    }
    // The plain constructors, on the default clocks.
    let governor = RateLimiter::direct(Quota::per_second(nz(5)));
    let tollgate = TokenBucket::builder()
        .rate(5, Duration::from_secs(1))
        .build_direct()
        .unwrap();
    assert!(governor.check().is_ok());
    assert!(tollgate.allow());
}

/// Row: `RateLimiter::keyed(q)` → `TokenBucket::builder()…build()?` on the
/// default clocks, keyed by any `Hash + Eq` type (`.key_type::<K>()`).
#[test]
fn keyed_is_build() {
    let governor = RateLimiter::keyed(Quota::per_second(nz(2)));
    let tollgate = TokenBucket::builder()
        .rate(2, Duration::from_secs(1))
        .key_type::<u64>()
        .build()
        .unwrap();
    for _ in 0..2 {
        assert!(governor.check_key(&7_u64).is_ok());
        assert!(tollgate.allow_request(&7));
    }
    // A third, at once: both deny (2 per second, quickly enough).
    assert!(governor.check_key(&7_u64).is_err());
    assert!(tollgate.check(&7).is_denied());
}

/// Row: `retain_recent()` → `sweep()`; `len()` → `len()`. tollgate
/// forgets a key once its state is a fresh one's (here: once its bucket is
/// full again); governor's `retain_recent` keeps it one emission interval
/// longer. Neither forgets a key whose state still counts.
#[test]
fn retain_recent_is_sweep() {
    let g_clock = FakeRelativeClock::default();
    let governor = RateLimiter::dashmap_with_clock(Quota::per_second(nz(2)), g_clock.clone());
    let t_clock = ManualClock::new();
    let tollgate = TokenBucket::builder()
        .rate(2, Duration::from_secs(1))
        .key_type::<u32>()
        .clock(t_clock.clone())
        .build()
        .unwrap();
    for key in 0..10_u32 {
        // Key k spends k % 3 tokens: 0 none, 1 half the bucket, 2 all.
        for _ in 0..key % 3 {
            assert!(governor.check_key(&key).is_ok());
            assert!(tollgate.allow_request(&key));
        }
    }
    let half = Duration::from_millis(500);
    let mut lens = Vec::new();
    for step in [Duration::ZERO, half, half, half] {
        g_clock.advance(step);
        t_clock.advance(step);
        governor.retain_recent();
        tollgate.sweep();
        lens.push((governor.len(), tollgate.len()));
    }
    // 0 s: nothing refilled; 0.5 s: the half-spent buckets are full;
    // 1 s: all are.
    assert_eq!(lens, [(6, 6), (6, 3), (3, 0), (0, 0)]);
}

/// Row: `until_ready()` / `until_key_ready(&k)` → `until_ready()` /
/// `until_ready(&k)` (`tokio` feature); `until_key_ready_with_jitter(&k,
/// Jitter::up_to(d))` → `until_ready_jittered(&k, 1, d)`. governor waits on
/// real time; tollgate's side runs on tokio's paused time, to the
/// nanosecond.
#[cfg(feature = "tokio")]
mod until_ready {
    use std::time::Duration;

    use governor::{Jitter, Quota, RateLimiter};
    use tollgate::{TokenBucket, TokioClock};

    use super::nz;

    #[tokio::test]
    async fn governor_waits_on_real_time() {
        let direct = RateLimiter::direct(Quota::per_second(nz(1_000)));
        let keyed = RateLimiter::keyed(Quota::per_second(nz(1_000)));
        for _ in 0..1_002 {
            direct.until_ready().await;
            keyed.until_key_ready(&"k").await;
        }
        keyed
            .until_key_ready_with_jitter(&"k", Jitter::up_to(Duration::from_millis(1)))
            .await;
    }

    #[tokio::test(start_paused = true)]
    async fn tollgate_waits_on_tokio_time() {
        let sec = Duration::from_secs(1);
        let direct = TokenBucket::builder()
            .rate(1, sec)
            .clock(TokioClock::new())
            .build_direct()
            .unwrap();
        let keyed = TokenBucket::builder()
            .rate(1, sec)
            .clock(TokioClock::new())
            .build()
            .unwrap();
        let start = tokio::time::Instant::now();
        for _ in 0..3 {
            direct.until_ready().await.unwrap();
            keyed.until_ready("k").await.unwrap();
        }
        assert_eq!(start.elapsed(), 2 * sec);
        keyed
            .until_ready_jittered("k", 1, Duration::from_millis(1))
            .await
            .unwrap();
        let waited = start.elapsed() - 2 * sec;
        assert!(waited >= sec && waited <= sec + Duration::from_millis(2));
    }
}

/// Row: tower_governor's `GovernorLayer::new(config)` →
/// `RateLimitLayer::new(limiter, key)`, its
/// `GovernorConfigBuilder::default().per_second(s).burst_size(b)` (one
/// request every `s` seconds) → `.rate(1, Duration::from_secs(s))
/// .capacity(b)`; `PeerIpKeyExtractor` → `PeerIp`; `SmartIpKeyExtractor`
/// → `TrustedProxyIp`; `GlobalKeyExtractor` → `GlobalKey`. Both behind an
/// axum router, answering alike where the table says they do.
#[cfg(feature = "tower")]
mod layer {
    use std::net::SocketAddr;
    use std::time::Duration;

    use axum::body::Body;
    use axum::extract::ConnectInfo;
    use axum::routing::get;
    use axum::Router;
    use http::{Request, StatusCode};
    use tollgate::tower::{Cidr, GlobalKey, PeerIp, RateLimitLayer, TrustedProxyIp};
    use tollgate::TokenBucket;
    use tower::ServiceExt;
    use tower_governor::governor::GovernorConfigBuilder;
    use tower_governor::key_extractor::{GlobalKeyExtractor, SmartIpKeyExtractor};
    use tower_governor::GovernorLayer;

    fn request(peer: &str) -> Request<Body> {
        let mut request = Request::get("/").body(Body::empty()).unwrap();
        let peer: SocketAddr = peer.parse().unwrap();
        request.extensions_mut().insert(ConnectInfo(peer));
        request
    }

    async fn statuses(router: Router, peers: &[&str]) -> Vec<StatusCode> {
        let mut out = Vec::new();
        for peer in peers {
            let response = router.clone().oneshot(request(peer)).await.unwrap();
            if response.status() == StatusCode::TOO_MANY_REQUESTS {
                assert!(response.headers().contains_key("retry-after"));
            }
            out.push(response.status());
        }
        out
    }

    const PEERS: [&str; 5] = [
        "192.0.2.1:1000",
        "192.0.2.1:1001",
        "192.0.2.1:1002",
        "192.0.2.2:1000",
        "192.0.2.1:1003",
    ];

    fn router() -> Router {
        Router::new().route("/", get(|| async { "hello" }))
    }

    #[tokio::test]
    async fn governor_layer_is_rate_limit_layer() {
        let config = GovernorConfigBuilder::default()
            .per_second(60)
            .burst_size(2)
            .finish()
            .unwrap();
        let governor = statuses(router().layer(GovernorLayer::new(config)), &PEERS).await;

        let limiter = TokenBucket::builder()
            .rate(1, Duration::from_secs(60))
            .capacity(2)
            .key_type()
            .build()
            .unwrap();
        // With the `axum` feature `PeerIp::new()` reads `ConnectInfo` by
        // itself; `peer_from` names it for the `tower` feature alone.
        let peer = PeerIp::new().peer_from(|c: &ConnectInfo<SocketAddr>| c.0);
        let tollgate = statuses(router().layer(RateLimitLayer::new(limiter, peer)), &PEERS).await;

        let (ok, no) = (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(governor, [ok, ok, no, ok, no]);
        assert_eq!(tollgate, governor);
    }

    /// `PeerIp` groups IPv6 addresses by their first 64 bits (one host's
    /// addresses, one budget); `.ipv6_prefix(128)` keys each address as
    /// `PeerIpKeyExtractor` does.
    #[tokio::test]
    async fn peer_ip_groups_ipv6_by_64_bits_unless_told() {
        const V6: [&str; 3] = [
            "[2001:db8::1]:1000",
            "[2001:db8::2]:1000",
            "[2001:db8::1]:1001",
        ];
        let config = GovernorConfigBuilder::default()
            .per_second(60)
            .burst_size(1)
            .finish()
            .unwrap();
        let governor = statuses(router().layer(GovernorLayer::new(config)), &V6).await;
        let limiter = || {
            TokenBucket::builder()
                .rate(1, Duration::from_secs(60))
                .key_type()
                .build()
                .unwrap()
        };
        let peer = || PeerIp::new().peer_from(|c: &ConnectInfo<SocketAddr>| c.0);
        let by_64 = statuses(router().layer(RateLimitLayer::new(limiter(), peer())), &V6).await;
        let by_128 = statuses(
            router().layer(RateLimitLayer::new(
                limiter(),
                peer().ipv6_prefix(128).unwrap(),
            )),
            &V6,
        )
        .await;
        let (ok, no) = (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(governor, [ok, ok, no]);
        assert_eq!(by_128, governor);
        assert_eq!(by_64, [ok, no, no]);
    }

    /// `SmartIpKeyExtractor` → `TrustedProxyIp::new(proxies)`: alike behind
    /// a trusted proxy, but tollgate reads `X-Forwarded-For` only from the
    /// proxies it is given, where governor believes any peer.
    #[tokio::test]
    async fn smart_ip_key_extractor_is_trusted_proxy_ip() {
        // (peer, X-Forwarded-For): two clients behind the proxy 10.0.0.1,
        // then a direct peer claiming to be a third client each time.
        const SENT: [(&str, &str); 6] = [
            ("10.0.0.1:1000", "192.0.2.1"),
            ("10.0.0.1:1001", "192.0.2.2"),
            ("10.0.0.1:1002", "192.0.2.1"),
            ("198.51.100.7:1000", "192.0.2.3"),
            ("198.51.100.7:1001", "192.0.2.4"),
            ("198.51.100.7:1002", "192.0.2.5"),
        ];
        async fn send(router: Router) -> Vec<StatusCode> {
            let mut out = Vec::new();
            for (peer, forwarded) in SENT {
                let mut request = request(peer);
                request
                    .headers_mut()
                    .insert("x-forwarded-for", forwarded.parse().unwrap());
                out.push(router.clone().oneshot(request).await.unwrap().status());
            }
            out
        }
        let config = GovernorConfigBuilder::default()
            .per_second(60)
            .burst_size(1)
            .key_extractor(SmartIpKeyExtractor)
            .finish()
            .unwrap();
        let governor = send(router().layer(GovernorLayer::new(config))).await;
        let limiter = TokenBucket::builder()
            .rate(1, Duration::from_secs(60))
            .key_type()
            .build()
            .unwrap();
        let proxy = Cidr::new("10.0.0.1".parse().unwrap(), 32).unwrap();
        let key = TrustedProxyIp::new([proxy]).peer_from(|c: &ConnectInfo<SocketAddr>| c.0);
        let tollgate = send(router().layer(RateLimitLayer::new(limiter, key))).await;
        let (ok, no) = (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(governor, [ok, ok, no, ok, ok, ok], "any peer is believed");
        assert_eq!(tollgate, [ok, ok, no, ok, no, no], "the peer is keyed");
    }

    #[tokio::test]
    async fn global_key_extractor_is_global_key() {
        let config = GovernorConfigBuilder::default()
            .per_second(60)
            .burst_size(3)
            .key_extractor(GlobalKeyExtractor)
            .finish()
            .unwrap();
        let governor = statuses(router().layer(GovernorLayer::new(config)), &PEERS).await;

        let limiter = TokenBucket::builder()
            .rate(1, Duration::from_secs(60))
            .capacity(3)
            .build_direct()
            .unwrap();
        let tollgate = statuses(
            router().layer(RateLimitLayer::new(limiter, GlobalKey)),
            &PEERS,
        )
        .await;

        let (ok, no) = (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(governor, [ok, ok, ok, no, no]);
        assert_eq!(tollgate, governor);
    }
}
