//! The HTTP layer in front of a Redis limiter whose server goes away:
//! under `FailPolicy::FailOpen` the limiter admits without counting, and
//! the layer then claims nothing about the client's quota; under
//! `FailClosed` the `503` quotes nothing of Redis.
//!
//! Without a `redis-server` binary these tests print why and pass, unless
//! `CI=true`, where a missing server fails them.

mod redis_server;

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use redis_server::{prefix, runtime, Patient, Server, HOUR};
use tollgate::redis::FailPolicy;
use tollgate::tower::{Extraction, KeyFn, RateLimitLayer};
use tollgate::FixedWindow;
use tower::{service_fn, Layer, ServiceExt};

async fn ok(_: Request<String>) -> Result<Response<String>, Infallible> {
    Ok(Response::new(String::from("ok")))
}

fn limiter(
    conn: &redis::aio::ConnectionManager,
    policy: FailPolicy,
) -> tollgate::redis::RedisLimiter<FixedWindow> {
    FixedWindow::builder()
        .limit(5)
        .window(HOUR)
        .redis(conn.clone(), prefix(&format!("tower-outage-{policy:?}")))
        .patient()
        .backoff(Duration::from_millis(50), Duration::from_millis(400))
        .fail_policy(policy)
        .no_deny_shortcut()
        .build()
        .unwrap()
}

fn client() -> KeyFn<impl Fn(&http::request::Parts) -> Extraction<String> + Clone> {
    KeyFn::new(|_: &http::request::Parts| Extraction::Key("c".to_owned()))
}

fn get() -> Request<String> {
    Request::get("/").body(String::new()).unwrap()
}

#[test]
fn during_an_outage_the_headers_claim_nothing() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let rt = runtime();
    let conn = rt.block_on(server.manager());
    let open = RateLimitLayer::new(limiter(&conn, FailPolicy::FailOpen), client())
        .legacy_headers(true)
        .layer(service_fn(ok));
    let closed =
        RateLimitLayer::new(limiter(&conn, FailPolicy::FailClosed), client()).layer(service_fn(ok));
    rt.block_on(async {
        // Redis up: counted, and said so.
        let counted = open.clone().oneshot(get()).await.unwrap();
        let counted = counted.headers()["ratelimit"].to_str().unwrap().to_owned();
        assert!(counted.starts_with("\"default\";r=4;t="), "{counted}");
    });
    server.stop();
    rt.block_on(async {
        for _ in 0..3 {
            // Admitted without counting: no figure would be true.
            let admitted = open.clone().oneshot(get()).await.unwrap();
            assert_eq!(admitted.status(), StatusCode::OK);
            for name in [
                "ratelimit",
                "ratelimit-policy",
                "x-ratelimit-limit",
                "x-ratelimit-remaining",
                "x-ratelimit-reset",
            ] {
                assert!(
                    !admitted.headers().contains_key(name),
                    "{name}: {:?}",
                    admitted.headers().get(name)
                );
            }
            let refused = closed.clone().oneshot(get()).await.unwrap();
            assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
            let body = refused.body().to_ascii_lowercase();
            for internal in [
                "redis",
                "tower-outage",
                "connection",
                "refused",
                "timed out",
            ] {
                assert!(!body.contains(internal), "{internal} in {body}");
            }
        }
    });
}
