//! The `metrics` feature's series and the `tracing` feature's events for
//! Redis limiters, exact against a known traffic shape with a fault
//! injected: Redis up, a key the limiter cannot read, Redis killed, Redis
//! back. Scraped from a real recorder (`metrics-exporter-prometheus`),
//! events recorded by a subscriber of this file's own.
//! `cargo test --features redis,metrics,tracing,tower --test redis_metrics`.
//!
//! Without a `redis-server` binary the test prints why and passes, unless
//! `CI=true`, where a missing server fails it.

#![cfg(not(feature = "loom"))]

mod prom;
mod redis_server;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_server::{prefix, runtime, Patient, Server, HOUR};
use tollgate::redis::{FailPolicy, RedisLimiter};
use tollgate::FixedWindow;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Records each event's `limiter` field and message.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<(String, String)>>>);

struct Fields(String, String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "limiter" => self.0 = format!("{value:?}"),
            "message" => self.1 = format!("{value:?}"),
            _ => {}
        }
    }
}

impl Subscriber for Events {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "tollgate"
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(String::new(), String::new());
        event.record(&mut fields);
        self.0.lock().unwrap().push((fields.0, fields.1));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// The value of `name` for `limiter` with `labels` besides, as the
/// recorder renders it now.
fn scraped(name: &str, limiter: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut all = vec![("limiter", limiter)];
    all.extend_from_slice(labels);
    prom::value(&prom::recorder().render(), name, &all)
}

/// `tollgate_redis_checks_total` for `limiter`, answered by `by`, with
/// `outcome`.
fn checks(limiter: &str, by: &str, outcome: &str) -> Option<f64> {
    scraped(
        "tollgate_redis_checks_total",
        limiter,
        &[("answered_by", by), ("outcome", outcome)],
    )
}

const LIMIT: u64 = 7;

fn limiter(conn: &redis::aio::ConnectionManager, policy: FailPolicy) -> RedisLimiter<FixedWindow> {
    let name = format!("outage-{policy:?}");
    FixedWindow::builder()
        .limit(LIMIT)
        .window(HOUR)
        .name(name.clone())
        .redis(conn.clone(), prefix(&name))
        .patient()
        .backoff(Duration::from_millis(50), Duration::from_millis(200))
        .fail_policy(policy)
        .no_deny_shortcut()
        .build()
        .unwrap()
}

/// What the test did with one limiter, counted as it went.
#[derive(Debug, Default)]
struct Told {
    admitted: u64,
    denied: u64,
    refused: u64,
}

impl Told {
    fn note(&mut self, answer: &Result<tollgate::Decision, tollgate::CheckError>) {
        match answer {
            Ok(d) if d.is_allowed() => self.admitted += 1,
            Ok(_) => self.denied += 1,
            Err(_) => self.refused += 1,
        }
    }
}

#[test]
fn an_outage_is_counted_exactly_on_every_path() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let _ = prom::recorder();
    let events = Events::default();
    tracing::subscriber::set_global_default(events.clone()).unwrap();
    server.away_from_hour_boundary(Duration::from_secs(120));
    let rt = runtime();
    let conn = rt.block_on(server.manager());
    let policies = [
        FailPolicy::FailOpen,
        FailPolicy::FailClosed,
        FailPolicy::Local,
    ];
    let limiters = policies.map(|policy| limiter(&conn, policy));
    let [open, closed, local] = &limiters;

    // Redis up: 10 requests at a limit of 7, on each limiter.
    rt.block_on(async {
        for l in &limiters {
            let admitted = {
                let mut n = 0;
                for _ in 0..10 {
                    n += u64::from(l.check("alice").await.unwrap().is_allowed());
                }
                n
            };
            assert_eq!(admitted, LIMIT);
        }
    });
    // A key holding a value the limiter cannot read (a list): refused by
    // `FailOpen` and `FailClosed`, decided in process by `Local`.
    let mut sync = server.sync();
    for l in &limiters {
        let _: () = redis::cmd("RPUSH")
            .arg(l.key("mallory"))
            .arg("x")
            .query(&mut sync)
            .unwrap();
    }
    let (mut key_open, mut key_closed, mut key_local) =
        (Told::default(), Told::default(), Told::default());
    rt.block_on(async {
        key_open.note(&open.check("mallory").await);
        key_closed.note(&closed.check("mallory").await);
        key_local.note(&local.check("mallory").await);
    });
    assert_eq!((key_open.refused, key_closed.refused), (1, 1));
    assert_eq!(key_local.admitted, 1, "decided in process");

    // Redis killed: 9 more requests of alice's on each.
    server.stop();
    let mut down = [Told::default(), Told::default(), Told::default()];
    rt.block_on(async {
        for _ in 0..9 {
            for (l, told) in limiters.iter().zip(&mut down) {
                told.note(&l.check("alice").await);
            }
        }
    });
    // `FailOpen` admits them all; `FailClosed` refuses them all; the
    // local limiter holds alice to what Redis last said was left, none:
    // it denies all 9.
    assert_eq!((down[0].admitted, down[1].refused), (9, 9));
    assert_eq!((down[2].admitted, down[2].denied), (0, 9));

    // Redis back, empty: each limiter's checks go to the fail policy
    // until a probe finds it, then to Redis, which admits bob, a new
    // client there (the script loaded again).
    server.run();
    let mut back = [Told::default(), Told::default(), Told::default()];
    let by_policy = |l: &RedisLimiter<FixedWindow>| {
        let s = l.stats();
        s.fail_open + s.fail_closed + s.fail_local
    };
    rt.block_on(async {
        for ((l, told), fallen) in limiters.iter().zip(&mut back).zip(&mut down) {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                // Answered by the fail policy if the limiter's own count of
                // such answers moved.
                let before = by_policy(l);
                let answer = l.check("bob").await;
                if by_policy(l) == before {
                    told.note(&answer);
                    break;
                }
                fallen.note(&answer);
                assert!(Instant::now() < deadline, "no recovery within 10 s");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    for l in &limiters {
        l.publish_metrics();
    }

    for ((l, policy), (key, (fallen, after))) in limiters.iter().zip(policies).zip(
        [&key_open, &key_closed, &key_local]
            .into_iter()
            .zip(down.iter().zip(&back)),
    ) {
        let name = l.name();
        let stats = l.stats();
        // Redis decided: alice's 7 and 3, and bob's one after recovery.
        assert_eq!(checks(name, "redis", "admitted"), Some(8.0), "{name}");
        assert_eq!(checks(name, "redis", "denied"), Some(3.0), "{name}");
        assert_eq!(after.admitted, 1);
        let (open_a, closed_r, key_r, local_a, local_d) = match policy {
            FailPolicy::FailOpen => (fallen.admitted, 0, key.refused, 0, 0),
            FailPolicy::FailClosed => (0, fallen.refused, key.refused, 0, 0),
            _ => (0, 0, 0, fallen.admitted + key.admitted, fallen.denied),
        };
        let f = |n: u64| Some(n as f64);
        assert_eq!(checks(name, "fail_open", "admitted"), f(open_a), "{name}");
        assert_eq!(checks(name, "fail_open", "denied"), f(0), "{name}");
        assert_eq!(
            checks(name, "fail_closed", "refused"),
            f(closed_r),
            "{name}"
        );
        assert_eq!(checks(name, "key_refused", "refused"), f(key_r), "{name}");
        assert_eq!(checks(name, "local", "admitted"), f(local_a), "{name}");
        assert_eq!(checks(name, "local", "denied"), f(local_d), "{name}");
        assert_eq!(checks(name, "shortcut", "denied"), f(0), "{name}");
        // Every decision, whatever answered it, in the shared series.
        let decisions =
            |outcome| scraped("tollgate_decisions_total", name, &[("outcome", outcome)]);
        assert_eq!(decisions("admitted"), f(8 + open_a + local_a), "{name}");
        assert_eq!(decisions("denied"), f(3 + local_d), "{name}");
        // The breaker opened once, when Redis was killed, and closed once,
        // when a probe found it back.
        let transitions = |to| {
            scraped(
                "tollgate_redis_breaker_transitions_total",
                name,
                &[("to", to)],
            )
        };
        assert_eq!(transitions("open"), f(1), "{name}");
        assert_eq!(transitions("closed"), f(1), "{name}");
        assert_eq!((stats.breaker_opened, stats.breaker_closed), (1, 1));
        assert_eq!(scraped("tollgate_redis_breaker_open", name, &[]), f(0));
        // The three run one script (one quota): the first check of all,
        // `FailOpen`'s, loaded it, and `FailOpen`'s first check answered
        // after the restart emptied Redis loaded it again.
        let reloads = if policy == FailPolicy::FailOpen { 2 } else { 0 };
        assert_eq!(
            scraped("tollgate_redis_script_reloads_total", name, &[]),
            f(reloads),
            "{name}"
        );
        assert_eq!(stats.script_reloads, reloads);
        // Round trips: as the limiter counted them.
        assert_eq!(
            scraped("tollgate_redis_round_trips_total", name, &[]),
            f(stats.round_trips),
            "{name}"
        );
    }

    // A quota change applied, on one of them: an event of its own.
    open.set_quota(0, FixedWindow::builder().limit(LIMIT + 1).window(HOUR))
        .unwrap();

    // Events: the breaker's opening and closing once per limiter, and the
    // local fallback's start and end for the `Local` one.
    let seen = events.0.lock().unwrap().clone();
    for l in &limiters {
        let of = |message: &str| {
            seen.iter()
                .filter(|(limiter, m)| limiter == l.name() && m == message)
                .count()
        };
        assert_eq!(of("redis breaker opened"), 1, "{}", l.name());
        assert_eq!(of("redis breaker closed"), 1, "{}", l.name());
        let local = usize::from(l.name() == local.name());
        assert_eq!(of("local fallback started"), local, "{}", l.name());
        assert_eq!(of("local fallback ended"), local, "{}", l.name());
        let changed = usize::from(l.name() == open.name());
        assert_eq!(of("quota changed"), changed, "{}", l.name());
    }
}

/// The deny shortcut: once Redis answered that alice has nothing left,
/// her next checks (within the shortcut's reach of a second) are denied
/// here, each a shortcut hit and no round trip.
#[test]
fn shortcut_denials_are_counted_as_such() {
    let Some(server) = Server::start() else {
        return;
    };
    let _ = prom::recorder();
    server.away_from_hour_boundary(Duration::from_secs(60));
    let rt = runtime();
    let conn = rt.block_on(server.manager());
    let limiter = FixedWindow::builder()
        .limit(LIMIT)
        .window(HOUR)
        .name("shortcut")
        .redis(conn, prefix("shortcut"))
        .patient()
        .build()
        .unwrap();
    let admitted = rt.block_on(async {
        let mut n = 0;
        for _ in 0..10 {
            n += u64::from(limiter.check("alice").await.unwrap().is_allowed());
        }
        n
    });
    assert_eq!(admitted, LIMIT);
    limiter.publish_metrics();
    let f = |n: u64| Some(n as f64);
    assert_eq!(checks("shortcut", "redis", "admitted"), f(LIMIT));
    assert_eq!(checks("shortcut", "redis", "denied"), f(0));
    assert_eq!(checks("shortcut", "shortcut", "denied"), f(10 - LIMIT));
    assert_eq!(
        scraped("tollgate_redis_shortcut_hits_total", "shortcut", &[]),
        f(10 - LIMIT)
    );
    // One command per check that went to Redis, and one more that loaded
    // the script.
    assert_eq!(
        scraped("tollgate_redis_round_trips_total", "shortcut", &[]),
        f(LIMIT + 1)
    );
    assert_eq!(
        scraped(
            "tollgate_decisions_total",
            "shortcut",
            &[("outcome", "denied")]
        ),
        f(10 - LIMIT)
    );
}

/// Coalesced checks: 64 tasks check one client at once on a limiter that
/// coalesces them, so most ride another check's call; each is still one
/// decision by Redis, and the checks that rode are counted as such.
#[test]
fn coalesced_checks_are_decisions_by_redis() {
    let Some(server) = Server::start() else {
        return;
    };
    let _ = prom::recorder();
    server.away_from_hour_boundary(Duration::from_secs(60));
    let rt = runtime();
    let conn = rt.block_on(server.manager());
    let limiter = Arc::new(
        FixedWindow::builder()
            .limit(20)
            .window(HOUR)
            .name("coalesced")
            .redis(conn, prefix("coalesced"))
            .patient()
            .no_deny_shortcut()
            .coalesce(true)
            .build()
            .unwrap(),
    );
    let admitted = rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                tokio::spawn(async move { limiter.check("alice").await.unwrap().is_allowed() })
            })
            .collect();
        let mut n = 0;
        for task in tasks {
            n += u64::from(task.await.unwrap());
        }
        n
    });
    assert_eq!(admitted, 20);
    limiter.publish_metrics();
    let f = |n: u64| Some(n as f64);
    assert_eq!(checks("coalesced", "redis", "admitted"), f(20));
    assert_eq!(checks("coalesced", "redis", "denied"), f(44));
    assert_eq!(
        scraped(
            "tollgate_decisions_total",
            "coalesced",
            &[("outcome", "admitted")]
        ),
        f(20)
    );
    let stats = limiter.stats();
    assert!(
        stats.coalesced > 0,
        "no check rode another's call: {stats:?}"
    );
    assert_eq!(
        scraped("tollgate_redis_coalesced_total", "coalesced", &[]),
        f(stats.coalesced)
    );
}

/// Leased checks: a token bucket of 20 (a token an hour) leasing its
/// units, one task checking 64 times: the checks a lease answered are
/// counted as answered by the lease, admitted or denied, and the rest by
/// Redis; together they are every check, and the admissions are exactly
/// the bucket.
#[test]
fn leased_checks_are_counted_as_the_lease_s() {
    let Some(server) = Server::start() else {
        return;
    };
    let _ = prom::recorder();
    let rt = runtime();
    let conn = rt.block_on(server.manager());
    let limiter = tollgate::TokenBucket::builder()
        .rate(1, HOUR)
        .capacity(20)
        .name("leased")
        .redis(conn, prefix("leased"))
        .patient()
        .no_deny_shortcut()
        .lease(tollgate::redis::Lease::new(Duration::from_secs(60)).max_units(8))
        .build()
        .unwrap();
    let admitted = rt.block_on(async {
        let mut n = 0;
        for _ in 0..64 {
            n += u64::from(limiter.check("alice").await.unwrap().is_allowed());
        }
        n
    });
    assert_eq!(admitted, 20);
    limiter.publish_metrics();
    let f = |n: u64| Some(n as f64);
    let stats = limiter.stats();
    assert!(stats.leased > 0 && stats.lease_held > 0, "{stats:?}");
    assert_eq!(checks("leased", "lease", "admitted"), f(stats.leased));
    assert_eq!(checks("leased", "lease", "denied"), f(stats.lease_held));
    let by_redis = checks("leased", "redis", "admitted").unwrap_or(0.0)
        + checks("leased", "redis", "denied").unwrap_or(0.0);
    assert_eq!(
        by_redis + (stats.leased + stats.lease_held) as f64,
        64.0,
        "every check, once: {stats:?}"
    );
    assert_eq!(
        checks("leased", "lease", "admitted").unwrap()
            + checks("leased", "redis", "admitted").unwrap_or(0.0),
        20.0
    );
}

/// The HTTP layer in front of a Redis limiter whose server is killed: the
/// layer's requests and its own responses, and the limiter's checks, as
/// the traffic was (publishing the layer publishes its limiter).
#[test]
fn the_layer_in_front_of_redis_counts_an_outage() {
    use std::convert::Infallible;
    use tollgate::tower::{Extraction, KeyFn, RateLimitLayer};
    use tower::{service_fn, Layer, ServiceExt};

    let Some(mut server) = Server::start() else {
        return;
    };
    let _ = prom::recorder();
    server.away_from_hour_boundary(Duration::from_secs(60));
    let rt = runtime();
    let conn = rt.block_on(server.manager());
    let limiter = FixedWindow::builder()
        .limit(3)
        .window(HOUR)
        .name("layer-redis")
        .redis(conn, prefix("layer-redis"))
        .patient()
        .fail_policy(FailPolicy::FailClosed)
        .no_deny_shortcut()
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(
        limiter,
        KeyFn::new(|_: &http::request::Parts| Extraction::Key("c".to_owned())),
    );
    let service = layer
        .clone()
        .layer(service_fn(|_: http::Request<String>| async {
            Ok::<_, Infallible>(http::Response::new(String::new()))
        }));
    let send = |n: usize| {
        let service = service.clone();
        rt.block_on(async move {
            let mut statuses = Vec::new();
            for _ in 0..n {
                let request = http::Request::get("/").body(String::new()).unwrap();
                let response = service.clone().oneshot(request).await.unwrap();
                statuses.push(response.status().as_u16());
            }
            statuses
        })
    };
    assert_eq!(send(5), [200, 200, 200, 429, 429]);
    server.stop();
    assert_eq!(send(4), [503, 503, 503, 503]);
    layer.publish_metrics();

    let name = "layer-redis";
    let f = |n: u64| Some(n as f64);
    let requests = |outcome| {
        scraped(
            "tollgate_layer_requests_total",
            name,
            &[("transport", "http"), ("outcome", outcome)],
        )
    };
    assert_eq!(requests("admitted"), f(3));
    assert_eq!(requests("limited"), f(2));
    assert_eq!(requests("unavailable"), f(4));
    let status = |status| {
        scraped(
            "tollgate_layer_responses_total",
            name,
            &[("transport", "http"), ("status", status)],
        )
    };
    assert_eq!(status("429"), f(2));
    assert_eq!(status("503"), f(4));
    assert_eq!(checks(name, "redis", "admitted"), f(3));
    assert_eq!(checks(name, "redis", "denied"), f(2));
    assert_eq!(checks(name, "fail_closed", "refused"), f(4));
    assert_eq!(scraped("tollgate_redis_breaker_open", name, &[]), f(1));
}

/// A booking made through Redis is an admission of its cost, one refused
/// (the wait too long) a denial, as for an in-process limiter; so is one
/// beyond its client's own tier (within the largest tier's capacity),
/// refused without a round trip.
#[test]
fn bookings_are_decisions() {
    let Some(server) = Server::start() else {
        return;
    };
    let _ = prom::recorder();
    let rt = runtime();
    let conn = rt.block_on(server.manager());
    let limiter = tollgate::TokenBucket::builder()
        .rate(3, HOUR)
        .name("bookings")
        .redis(conn, prefix("bookings"))
        .patient()
        .tier_by(|client: &[u8]| u16::from(client.starts_with(b"pro-")))
        .no_deny_shortcut()
        .build()
        .unwrap();
    limiter
        .set_quota(1, tollgate::TokenBucket::builder().rate(1, HOUR))
        .unwrap();
    rt.block_on(async {
        let first = limiter.reserve_n("a", 2, Duration::ZERO).await.unwrap();
        first.commit();
        assert!(limiter
            .reserve_n("a", 2, Duration::from_secs(1))
            .await
            .is_err());
        let later = limiter.reserve_n("a", 2, HOUR).await.unwrap();
        later.commit();
        let trips = limiter.stats().round_trips;
        let err = limiter.reserve_n("pro-a", 2, HOUR).await.unwrap_err();
        assert!(matches!(
            err,
            tollgate::redis::RedisReserveError::Reserve(tollgate::ReserveError::TooLong { .. })
        ));
        assert_eq!(limiter.stats().round_trips, trips);
    });
    limiter.publish_metrics();
    let f = |n: u64| Some(n as f64);
    assert_eq!(checks("bookings", "redis", "admitted"), f(2));
    assert_eq!(checks("bookings", "redis", "denied"), f(2));
    let units = |outcome| scraped("tollgate_units_total", "bookings", &[("outcome", outcome)]);
    assert_eq!((units("admitted"), units("denied")), (f(4), f(4)));
}
