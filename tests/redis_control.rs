//! The control surface of the Redis limiters (`peek`, `reset`, `remove`)
//! across two processes on one real `redis-server` (see `redis_server`):
//! this test's process and a child process running this same binary,
//! each with its own limiter and connection.

mod redis_server;

use std::process::Command;
use std::time::Duration;

use redis_server::{
    admitted, at_once, builders, manager_config, prefix, runtime, Patient, Server, HOUR,
};
use tollgate::redis::{RedisAlgorithm, RedisConnection, RedisLimiter};
use tollgate::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, TokenBucket};

const CHILD_ENV: &str = "TOLLGATE_REDIS_CONTROL_CHILD";

/// The four algorithms at `n` per hour, on `url` under `p`, in a fixed
/// order: bucket, counter, fixed window, log, and a pair (a bucket of `n`
/// and a fixed window of `2n`); clients named `pro-…` are in tier 1, at
/// `pro` per hour.
async fn limiters(url: &str, p: &str, n: u64, pro: u64) -> Vec<Box<dyn Control>> {
    let client = redis::Client::open(url).unwrap();
    let conn: RedisConnection =
        redis::aio::ConnectionManager::new_with_config(client, manager_config())
            .await
            .unwrap()
            .into();
    let tier = |client: &[u8]| u16::from(client.starts_with(b"pro-"));
    let (tb, swc, fw, swl) = builders(&conn, p, n, HOUR);
    let tb = tb.tier_by(tier).build().unwrap();
    tb.set_quota(1, TokenBucket::builder().rate(pro, HOUR))
        .unwrap();
    let swc = swc.tier_by(tier).build().unwrap();
    swc.set_quota(1, SlidingWindowCounter::builder().limit(pro).window(HOUR))
        .unwrap();
    let fw = fw.tier_by(tier).build().unwrap();
    fw.set_quota(1, FixedWindow::builder().limit(pro).window(HOUR))
        .unwrap();
    let swl = swl.tier_by(tier).build().unwrap();
    swl.set_quota(1, SlidingWindowLog::builder().limit(pro).window(HOUR))
        .unwrap();
    // Two limits held together: the bucket binds, the fixed window (twice
    // as wide) must not be charged when the bucket denies.
    let pair = |n: u64| {
        TokenBucket::builder()
            .rate(n, HOUR)
            .and(FixedWindow::builder().limit(2 * n).window(HOUR))
    };
    let both = pair(n)
        .redis(conn, p)
        .patient()
        .tier_by(tier)
        .build()
        .unwrap();
    both.set_quota(1, pair(pro)).unwrap();
    vec![
        Box::new(tb),
        Box::new(swc),
        Box::new(fw),
        Box::new(swl),
        Box::new(both),
    ]
}

/// One limiter of any algorithm, as this test drives it.
trait Control {
    fn run<'a>(
        &'a self,
        action: &'a str,
        key: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = String> + 'a>>;
}

impl<A: RedisAlgorithm> Control for RedisLimiter<A> {
    fn run<'a>(
        &'a self,
        action: &'a str,
        key: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = String> + 'a>> {
        Box::pin(async move {
            let show = |d: tollgate::Decision| format!("{} {}", d.is_allowed(), d.remaining());
            match action.split_once('=').unwrap_or((action, "1")) {
                ("check", n) => show(self.check_n(key, n.parse().unwrap()).await.unwrap()),
                ("peek", n) => show(self.peek_n(key, n.parse().unwrap()).await.unwrap()),
                ("reset", _) => self.reset(key).await.unwrap().to_string(),
                ("remove", _) => self.remove(key).await.unwrap().to_string(),
                _ => panic!("unknown action {action}"),
            }
        })
    }
}

/// Run by `control_across_two_processes` in a child process (a no-op
/// otherwise): one action on each algorithm's limiter, the answers on one
/// line.
#[test]
fn control_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let (url, p, action, key) = (parts[0], parts[1], parts[2], parts[3]);
    let pro = parts[4].parse().unwrap();
    let answers = runtime().block_on(async {
        let mut answers = Vec::new();
        for l in limiters(url, p, 3, pro).await {
            answers.push(l.run(action, key).await);
        }
        answers
    });
    println!("ANSWERS {}", answers.join(","));
}

/// The answers of the child process to `action` on `key`, one per
/// algorithm.
fn child(server: &Server, p: &str, action: &str, key: &str) -> Vec<String> {
    child_with(server, p, action, key, 6)
}

/// As [`child`], with tier 1 at `pro` per hour in the child.
fn child_with(server: &Server, p: &str, action: &str, key: &str, pro: u64) -> Vec<String> {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "control_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_ENV,
            format!("{}|{p}|{action}|{key}|{pro}", server.url()),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    // The harness prints the test's name on the same line.
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("ANSWERS ").map(|(_, answers)| answers))
        .unwrap_or_else(|| panic!("no answers from the child: {stdout}"));
    line.split(',').map(str::to_owned).collect()
}

fn all(answer: &str) -> Vec<String> {
    vec![answer.to_owned(); 5]
}

/// Each algorithm at 3 per hour: what one process spends, peeks, resets
/// or removes, the other sees at once.
#[test]
fn control_across_two_processes() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let p = prefix("control");
    let rt = runtime();
    let mine = rt.block_on(limiters(&server.url(), &p, 3, 6));
    let here = |action: &str, key: &str| -> Vec<String> {
        rt.block_on(async {
            let mut answers = Vec::new();
            for l in &mine {
                answers.push(l.run(action, key).await);
            }
            answers
        })
    };
    // The child spends 2 of 3; here a peek sees 1 left, twice, and a
    // check takes it.
    assert_eq!(child(&server, &p, "check=2", "c"), all("true 1"));
    assert_eq!(here("peek", "c"), all("true 1"));
    assert_eq!(here("peek", "c"), all("true 1"), "a peek records nothing");
    assert_eq!(here("peek=2", "c"), all("false 1"));
    assert_eq!(here("check", "c"), all("true 0"));
    // The child peeks: denied, nothing left.
    assert_eq!(child(&server, &p, "peek", "c"), all("false 0"));
    // A peek of an unknown client is fresh, and leaves it unknown.
    assert_eq!(child(&server, &p, "peek", "new"), all("true 3"));
    assert_eq!(here("reset", "new"), all("false"));
    // The child resets: here the client starts afresh once this
    // process's deny shortcut lets go, within a second.
    assert_eq!(child(&server, &p, "reset", "c"), all("true"));
    std::thread::sleep(Duration::from_millis(1_100));
    assert_eq!(here("check", "c"), all("true 2"));
    // Here it is removed: the child finds it fresh, and spends it all.
    assert_eq!(here("remove", "c"), all("true"));
    assert_eq!(here("remove", "c"), all("false"));
    assert_eq!(child(&server, &p, "check=3", "c"), all("true 0"));
    assert_eq!(here("check", "c"), all("false 0"));
}

/// Tiers: each process resolves each client's tier and sends its quota
/// with the request; a client's one key holds what it spent whatever its
/// tier, and a process that holds a tier lower reads it as spent.
#[test]
fn tiers_across_two_processes() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let p = prefix("tiers");
    let rt = runtime();
    let mine = rt.block_on(limiters(&server.url(), &p, 3, 6));
    let here = |action: &str, key: &str| -> Vec<String> {
        rt.block_on(async {
            let mut answers = Vec::new();
            for l in &mine {
                answers.push(l.run(action, key).await);
            }
            answers
        })
    };
    assert_eq!(here("check=4", "pro-a"), all("true 2"), "tier 1: 6");
    assert_eq!(here("check", "b"), all("true 2"), "tier 0: 3");
    assert_eq!(child(&server, &p, "check", "pro-a"), all("true 1"));
    assert_eq!(child(&server, &p, "check=2", "b"), all("true 0"));
    assert_eq!(here("peek", "pro-a"), all("true 1"), "5 of 6 spent");
    assert_eq!(here("peek", "b"), all("false 0"));
}

/// A process holding a client's tier to other settings (a rolling deploy)
/// converts the state another process wrote as an in-process `set_quota`
/// would, by the move rule: 5 of 6 spent an hour, 1 left, is 1 left of 3
/// (the pair's window of 12, 7 left, holds 6 of its 6). A peek reports the
/// quota as it stands (1 left), the check then takes it (0 left). The log
/// keeps its 5 admissions (no quota change converts it), over a limit of
/// 3. The same moves on in-process limiters give the same answers.
#[test]
fn a_process_with_other_settings_converts_as_in_process() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let p = prefix("tiers-other");
    let rt = runtime();
    let mine = rt.block_on(limiters(&server.url(), &p, 3, 6));
    rt.block_on(async {
        for l in &mine {
            let _ = l.run("check=5", "pro-a").await;
        }
    });
    // [bucket, counter, fixed window, log, pair]
    let peek = ["true 1", "true 1", "true 1", "false 0", "true 1"].map(str::to_owned);
    let check = ["true 0", "true 0", "true 0", "false 0", "true 0"].map(str::to_owned);
    assert_eq!(child_with(&server, &p, "peek", "pro-a", 3), peek);
    assert_eq!(child_with(&server, &p, "check", "pro-a", 3), check);
    let (peek_here, check_here) = in_process();
    assert_eq!(peek_here[..], peek[..3]);
    assert_eq!(check_here[..], check[..3]);
}

/// The in-process limiters' answers to the same moves: tier 1 at 6 an
/// hour, 5 spent, then held to 3; a peek, then a check (bucket, counter,
/// fixed window).
fn in_process() -> (Vec<String>, Vec<String>) {
    let show = |d: tollgate::Decision| format!("{} {}", d.is_allowed(), d.remaining());
    let tier = |c: &String| u16::from(c.starts_with("pro-"));
    let pro = "pro-a".to_owned();
    let (mut peeks, mut checks) = (Vec::new(), Vec::new());
    let tb = TokenBucket::builder()
        .rate(3, HOUR)
        .tier_by(tier)
        .build()
        .unwrap();
    tb.set_quota(1, TokenBucket::builder().rate(6, HOUR))
        .unwrap();
    let _ = tb.check_n(&pro, 5).unwrap();
    tb.set_quota(1, TokenBucket::builder().rate(3, HOUR))
        .unwrap();
    peeks.push(show(tb.peek(&pro)));
    checks.push(show(tb.check(&pro)));
    let swc = SlidingWindowCounter::builder()
        .limit(3)
        .window(HOUR)
        .tier_by(tier)
        .build()
        .unwrap();
    swc.set_quota(1, SlidingWindowCounter::builder().limit(6).window(HOUR))
        .unwrap();
    let _ = swc.check_n(&pro, 5).unwrap();
    swc.set_quota(1, SlidingWindowCounter::builder().limit(3).window(HOUR))
        .unwrap();
    peeks.push(show(swc.peek(&pro)));
    checks.push(show(swc.check(&pro)));
    let fw = FixedWindow::builder()
        .limit(3)
        .window(HOUR)
        .tier_by(tier)
        .build()
        .unwrap();
    fw.set_quota(1, FixedWindow::builder().limit(6).window(HOUR))
        .unwrap();
    let _ = fw.check_n(&pro, 5).unwrap();
    fw.set_quota(1, FixedWindow::builder().limit(3).window(HOUR))
        .unwrap();
    peeks.push(show(fw.peek(&pro)));
    checks.push(show(fw.check(&pro)));
    (peeks, checks)
}

/// A reset clears this process's deny shortcut at once.
#[test]
fn a_reset_clears_the_deny_shortcut_here() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let limiter = tollgate::FixedWindow::builder()
            .limit(1)
            .window(HOUR)
            .redis(server.manager().await, prefix("resetshortcut"))
            .patient()
            .build()
            .unwrap();
        assert!(limiter.check("c").await.unwrap().is_allowed());
        assert!(limiter.check("c").await.unwrap().is_denied());
        assert_eq!(limiter.stats().denied_locally, 1);
        assert!(limiter.reset("c").await.unwrap());
        assert!(limiter.check("c").await.unwrap().is_allowed());
    });
}

/// A tier's quota is validated as the builder's; its window may differ
/// from tier 0's, as in-process; tier 0's quota can change too.
#[test]
fn set_quota_validates_as_in_process() {
    let Some(server) = Server::start() else {
        return;
    };
    runtime().block_on(async {
        let conn = server.manager().await;
        let minute = Duration::from_secs(60);
        let fw = FixedWindow::builder()
            .limit(3)
            .window(HOUR)
            .redis(conn.clone(), prefix("setquota"))
            .patient()
            .build()
            .unwrap();
        fw.set_quota(1, FixedWindow::builder().limit(3).window(minute))
            .unwrap();
        assert_eq!(fw.quota_of(1), tollgate::Quota::new(3, minute));
        let err = fw
            .set_quota(
                1,
                FixedWindow::builder()
                    .limit(3)
                    .window(Duration::from_nanos(1_500)),
            )
            .unwrap_err();
        assert_eq!(err.field(), "tier.window");
        let err = fw
            .set_quota(1, FixedWindow::builder().limit(1 << 60).window(HOUR))
            .unwrap_err();
        assert_eq!(err.field(), "tier.limit");
        fw.set_quota(0, FixedWindow::builder().limit(1).window(HOUR))
            .unwrap();
        assert_eq!(fw.quota(), tollgate::Quota::new(1, HOUR));
        assert_eq!(fw.quota_of(7), tollgate::Quota::new(1, HOUR));
        assert!(fw.check("c").await.unwrap().is_allowed());
        assert!(fw.check("c").await.unwrap().is_denied());
        let tb = TokenBucket::builder()
            .rate(3, HOUR)
            .redis(conn, prefix("setquota"))
            .patient()
            .build()
            .unwrap();
        tb.set_quota(1, TokenBucket::builder().rate(3, minute))
            .unwrap();
        assert_eq!(tb.quota_of(1), tollgate::Quota::new(3, minute));
    });
}

/// A pair's denial by one limit charges neither: the other limit's key is
/// as it was.
#[test]
fn a_pair_denied_by_one_limit_charges_neither() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let p = prefix("pairdeny");
    runtime().block_on(async {
        let limiter = FixedWindow::builder()
            .limit(1)
            .window(HOUR)
            .and(TokenBucket::builder().rate(5, HOUR))
            .redis(server.manager().await, &p)
            .patient()
            .no_deny_shortcut()
            .build()
            .unwrap();
        let d = limiter.check("c").await.unwrap();
        assert_eq!((d.is_allowed(), d.remaining()), (true, 0));
        let key = limiter.key("c");
        // The value: settings|generation|writer.call, then k, c, t, r:
        // packed (`#` and four little-endian doubles) or as text (`|k|c|t|r`).
        let tat = |c: &mut redis::Connection| -> u64 {
            let value: Vec<u8> = redis::cmd("GET").arg(&key).query(c).unwrap();
            match value.iter().position(|&b| b == b'#') {
                Some(mark) => {
                    let t = &value[mark + 1 + 16..mark + 1 + 24];
                    f64::from_le_bytes(t.try_into().unwrap()) as u64
                }
                None => String::from_utf8(value)
                    .unwrap()
                    .split('|')
                    .nth(5)
                    .unwrap()
                    .parse()
                    .unwrap(),
            }
        };
        let mut c = server.sync();
        let before = tat(&mut c);
        for _ in 0..3 {
            let d = limiter.check("c").await.unwrap();
            assert!(d.is_denied(), "{d:?}");
            assert!(d.retry_after() > Duration::from_secs(60), "{d:?}");
        }
        assert_eq!(tat(&mut c), before, "the bucket was not charged");
        assert!(limiter.reset("c").await.unwrap());
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{p}:*"))
            .query(&mut c)
            .unwrap();
        assert!(keys.is_empty(), "{keys:?}");
    });
}

/// Tiers with coalescing: two clients of each of two tiers (5 and 12 an
/// hour) checked by 12 tasks each at once, twice each, on a fixed window
/// that coalesces: each client is admitted exactly its tier's quota, each
/// decision reports its tier's limit, and checks rode another's call.
/// Then each tier's quota is raised (tier 1 to 20, tier 0 to 7) and the
/// same load runs again: each client, having spent its whole quota, has
/// spent the whole new one (the share is kept, as in-process) and is
/// admitted nothing, a new client of tier 1 its 20, and every decision
/// reports the new limit.
#[test]
fn tiers_with_coalescing_hold_each_client_to_its_tier() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    runtime().block_on(async {
        let limiter = FixedWindow::builder()
            .limit(5)
            .window(HOUR)
            .redis(server.manager().await, prefix("coaltiers"))
            .tier_by(|client| u16::from(client.starts_with(b"pro-")))
            .fail_policy(tollgate::redis::FailPolicy::FailClosed)
            .patient()
            .no_deny_shortcut()
            .coalesce(true)
            .build()
            .unwrap();
        limiter
            .set_quota(1, FixedWindow::builder().limit(12).window(HOUR))
            .unwrap();
        let clients = ["free-a", "pro-a", "free-b", "pro-b"];
        let upto = |n: u64| (0..n).collect::<Vec<_>>();
        for (client, decisions) in clients.iter().zip(at_once(&limiter, &clients, 12, 2).await) {
            let limit = if client.starts_with("pro-") { 12 } else { 5 };
            assert_eq!(admitted(&decisions), upto(limit), "{client}");
            assert!(decisions.iter().all(|d| d.limit() == limit), "{client}");
        }
        let coalesced = limiter.stats().coalesced;
        assert!(coalesced > 0, "{:?}", limiter.stats());

        limiter
            .set_quota(1, FixedWindow::builder().limit(20).window(HOUR))
            .unwrap();
        limiter
            .set_quota(0, FixedWindow::builder().limit(7).window(HOUR))
            .unwrap();
        let clients = ["free-a", "pro-a", "free-b", "pro-b", "pro-c"];
        for (client, decisions) in clients.iter().zip(at_once(&limiter, &clients, 12, 2).await) {
            let (limit, spent) = match *client {
                "pro-c" => (20, 0),
                c if c.starts_with("pro-") => (20, 20),
                _ => (7, 7),
            };
            assert_eq!(admitted(&decisions), upto(limit - spent), "{client}");
            assert!(decisions.iter().all(|d| d.limit() == limit), "{client}");
        }
        let s = limiter.stats();
        assert!(s.coalesced > coalesced, "{s:?}");
        assert_eq!((s.errors, s.timeouts, s.fail_closed), (0, 0, 0), "{s:?}");
    });
}

/// A Redis limiter remembers its last 64 quota changes, and carries a
/// state through each of them at its instant, as the in-process limiter
/// does; a state older than that is converted once, when next read (the
/// Redis guide says so). A client of a fixed window of 10 an hour spends 3;
/// the limit is cut to 1, moved between 2 and 3, and raised back to 10.
/// After 64 changes in all, the cut still holds: 1 left, as in process.
/// After 65, the state written before them is converted once, from 10 to
/// 10: the 7 it had left.
#[test]
fn a_state_is_carried_through_the_last_64_quota_changes_and_converted_once_after() {
    let Some(server) = Server::start() else {
        return;
    };
    server.away_from_hour_boundary(Duration::from_secs(60));
    let rt = runtime();
    let window = |limit| FixedWindow::builder().limit(limit).window(HOUR);
    for (changes, left) in [(64, 1), (65, 7)] {
        let limiter = rt.block_on(async {
            window(10)
                .redis(server.manager().await, prefix(&format!("history{changes}")))
                .patient()
                .no_deny_shortcut()
                .build()
                .unwrap()
        });
        rt.block_on(async {
            assert!(limiter.check_n("c", 3).await.unwrap().is_allowed());
        });
        limiter.set_quota(0, window(1)).unwrap();
        for change in 1..changes - 1 {
            limiter.set_quota(0, window(2 + change % 2)).unwrap();
        }
        limiter.set_quota(0, window(10)).unwrap();
        let d = rt.block_on(limiter.peek("c")).unwrap();
        assert_eq!((d.limit(), d.remaining()), (10, left), "{changes} changes");
    }
}
