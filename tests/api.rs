//! The public surface: one entry point for every algorithm, object safety,
//! key types, and compile-time Send/Sync guarantees.

// Plain `cargo test` runs this suite; `cargo test --features loom` is for
// the loom models (loom-tests/) and skips it.
#![cfg(not(feature = "loom"))]

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    Decision, FixedWindow, Limiter, ManualClock, MonotonicClock, RateLimiter, SlidingWindowCounter,
    SlidingWindowLog, TokenBucket,
};

const fn assert_send_sync<T: Send + Sync>() {}
const _: () = {
    assert_send_sync::<Limiter<TokenBucket>>();
    assert_send_sync::<Limiter<SlidingWindowCounter, u64, ManualClock>>();
    assert_send_sync::<Limiter<FixedWindow, IpAddr, MonotonicClock>>();
    assert_send_sync::<Decision>();
    assert_send_sync::<tollgate::ConfigError>();
    assert_send_sync::<tollgate::CostError>();
};

/// Middleware that knows only the trait.
fn middleware(limiter: &dyn RateLimiter, requests: &[&str]) -> Vec<bool> {
    requests
        .iter()
        .map(|id| limiter.allow_request(id))
        .collect()
}

#[test]
fn default_builders_need_no_type_annotations_and_key_by_string() {
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(1))
        .build()
        .unwrap();
    let boxed: Box<dyn RateLimiter> = Box::new(limiter);
    assert!(boxed.allow_request("alice"));
    assert!(!boxed.allow_request("alice"));
    let owned = String::from("bob");
    assert!(boxed.allow_request(owned.as_str()));
}

#[test]
fn swapping_the_algorithm_changes_only_the_constructor() {
    let w = Duration::from_secs(1);
    let limiters: Vec<Arc<dyn RateLimiter>> = vec![
        Arc::new(TokenBucket::builder().rate(2, w).build().unwrap()),
        Arc::new(
            SlidingWindowCounter::builder()
                .limit(2)
                .window(w)
                .build()
                .unwrap(),
        ),
        Arc::new(FixedWindow::builder().limit(2).window(w).build().unwrap()),
        Arc::new(
            tollgate::SlidingWindowLog::builder()
                .limit(2)
                .window(w)
                .build()
                .unwrap(),
        ),
    ];
    for limiter in &limiters {
        assert_eq!(
            middleware(limiter.as_ref(), &["a", "a", "b", "a"]),
            [true, true, true, false]
        );
    }
}

#[test]
fn other_key_types() {
    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    struct Tenant {
        org: u32,
        user: u32,
    }
    let w = Duration::from_secs(1);
    let by_id = FixedWindow::builder()
        .limit(1)
        .window(w)
        .key_type::<u64>()
        .build()
        .unwrap();
    assert!(by_id.allow_request(&1) && !by_id.allow_request(&1) && by_id.allow_request(&2));

    let by_ip = TokenBucket::builder()
        .rate(1, w)
        .key_type::<IpAddr>()
        .build()
        .unwrap();
    let dyn_ip: &dyn RateLimiter<IpAddr> = &by_ip;
    assert!(dyn_ip.allow_request(&IpAddr::from([10, 0, 0, 1])));
    assert!(!dyn_ip.allow_request(&IpAddr::from([10, 0, 0, 1])));

    let by_tenant = SlidingWindowCounter::builder()
        .limit(1)
        .window(w)
        .key_type::<Tenant>()
        .build()
        .unwrap();
    assert!(by_tenant.allow_request(&Tenant { org: 1, user: 2 }));
    assert!(!by_tenant.allow_request(&Tenant { org: 1, user: 2 }));
    assert!(by_tenant.allow_request(&Tenant { org: 2, user: 2 }));
}

#[test]
fn debug_output_names_the_configuration_not_the_clients() {
    let limiter = TokenBucket::builder()
        .rate(4, Duration::from_secs(1))
        .capacity(2)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let _ = limiter.allow_request("secret-client");
    let shown = format!("{limiter:?}");
    assert!(
        shown.contains("TokenBucket") && shown.contains("250ms") && shown.contains("capacity: 2"),
        "{shown}"
    );
    assert!(!shown.contains("secret-client"));
    let builder = format!("{:?}", SlidingWindowCounter::builder().limit(3));
    assert!(builder.contains("limit: Some(3)"), "{builder}");
}

#[test]
fn decisions_carry_header_figures() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(2))
        .capacity(3)
        .clock(clock.clone())
        .build()
        .unwrap();
    let first = limiter.check("a");
    assert_eq!(
        (
            first.is_allowed(),
            first.limit(),
            first.remaining(),
            first.retry_after()
        ),
        (true, 3, 2, Duration::ZERO)
    );
    assert!(limiter.check_n("a", 2).unwrap().is_allowed());
    let denied = limiter.check_n("a", 2).unwrap();
    assert!(denied.is_denied());
    assert_eq!(denied.remaining(), 0);
    assert_eq!(denied.retry_after(), Duration::from_secs(4));
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        limiter.peek_n("a", 2).unwrap().retry_after(),
        Duration::from_secs(3)
    );
}

/// `replenish_after` on every path that makes a decision: admitted,
/// denied, peeked, and the cost-0 quota read.
#[test]
fn decisions_say_when_the_quota_next_grows() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(2))
        .capacity(3)
        .clock(clock.clone())
        .build()
        .unwrap();
    let fresh = limiter.peek_n("a", 0).unwrap();
    assert_eq!(
        (fresh.remaining(), fresh.replenish_after()),
        (3, Duration::ZERO)
    );
    // A peek takes nothing: the bucket it reports is still full, with
    // nothing to wait for (a check would leave it one token short).
    let peeked = limiter.peek("a");
    assert_eq!(
        (peeked.remaining(), peeked.replenish_after()),
        (3, Duration::ZERO)
    );
    let first = limiter.check("a");
    assert!(first.is_allowed());
    assert_eq!(first.replenish_after(), Duration::from_secs(2));
    assert!(limiter.check_n("a", 2).unwrap().is_allowed());
    clock.advance(Duration::from_millis(500));
    let denied = limiter.check_n("a", 2).unwrap();
    assert!(denied.is_denied());
    // The first token is back 1.5 s from now, the second 2 s later.
    assert_eq!(denied.replenish_after(), Duration::from_millis(1_500));
    assert_eq!(denied.retry_after(), Duration::from_millis(3_500));
    assert_eq!(
        limiter.peek_n("a", 0).unwrap().replenish_after(),
        Duration::from_millis(1_500)
    );

    let log = SlidingWindowLog::builder()
        .limit(2)
        .window(Duration::from_secs(10))
        .clock(clock.clone())
        .build()
        .unwrap();
    // An empty log: a peek takes no slot, and reports it empty.
    let peeked = log.peek("b");
    assert_eq!(
        (peeked.remaining(), peeked.replenish_after()),
        (2, Duration::ZERO)
    );
    assert!(log.check("b").is_allowed());
    clock.advance(Duration::from_secs(4));
    let second = log.check("b");
    assert_eq!(
        (second.remaining(), second.replenish_after()),
        (0, Duration::from_secs(6))
    );
}

/// The seed's boundary spike: `limit` requests 1 ms before a window
/// boundary and `limit` more 1 ms after it. The fixed window admits twice
/// the limit within 2 ms; the others do not.
#[test]
fn boundary_spike_only_the_fixed_window_doubles() {
    let clock = ManualClock::new();
    let w = Duration::from_secs(1);
    let build = |which: &str| -> Arc<dyn RateLimiter> {
        let c = clock.clone();
        match which {
            "bucket" => Arc::new(TokenBucket::builder().rate(10, w).clock(c).build().unwrap()),
            "counter" => Arc::new(
                SlidingWindowCounter::builder()
                    .limit(10)
                    .window(w)
                    .clock(c)
                    .build()
                    .unwrap(),
            ),
            "log" => Arc::new(
                tollgate::SlidingWindowLog::builder()
                    .limit(10)
                    .window(w)
                    .clock(c)
                    .build()
                    .unwrap(),
            ),
            _ => Arc::new(
                FixedWindow::builder()
                    .limit(10)
                    .window(w)
                    .clock(c)
                    .build()
                    .unwrap(),
            ),
        }
    };
    let spike = |limiter: &Arc<dyn RateLimiter>| {
        let mut admitted = 0;
        for at in [Duration::from_millis(999), Duration::from_millis(1_001)] {
            clock.set(at);
            admitted += (0..10).filter(|_| limiter.allow_request("alice")).count();
        }
        admitted
    };
    assert_eq!(spike(&build("fixed")), 20);
    // 10 + the weighted estimate 0 + 10·0.999 < 10 lets exactly one more in.
    assert_eq!(spike(&build("counter")), 11);
    assert_eq!(spike(&build("log")), 10);
    // 2 ms refill 0.02 of a token: nothing more.
    assert_eq!(spike(&build("bucket")), 10);
}
