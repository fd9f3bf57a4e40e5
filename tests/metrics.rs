//! The `metrics` feature's series for the in-process limiters, exact
//! against known traffic: scraped from a real recorder
//! (`metrics-exporter-prometheus`), each test naming its limiters apart.
//! `cargo test --features metrics --test metrics`.

#![cfg(not(feature = "loom"))]

mod prom;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{FixedWindow, ManualClock, Overflow, SlidingWindowLog, TokenBucket};

/// The value of `name` for `limiter` with `labels` besides, as the
/// recorder renders it now.
fn scraped(name: &str, limiter: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut all = vec![("limiter", limiter)];
    all.extend_from_slice(labels);
    prom::value(&prom::recorder().render(), name, &all)
}

/// Decisions and units, admitted and denied, as scraped for `limiter`.
fn outcomes(limiter: &str) -> [Option<f64>; 4] {
    let get = |name, outcome| scraped(name, limiter, &[("outcome", outcome)]);
    [
        get("tollgate_decisions_total", "admitted"),
        get("tollgate_decisions_total", "denied"),
        get("tollgate_units_total", "admitted"),
        get("tollgate_units_total", "denied"),
    ]
}

#[test]
fn ten_requests_at_a_limit_of_seven_are_seven_admitted_and_three_denied() {
    // Installed before any check: what is published with no recorder is lost.
    let _ = prom::recorder();
    let limiter = FixedWindow::builder()
        .limit(7)
        .window(Duration::from_secs(60))
        .name("ten-at-seven")
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let admitted = (0..10).filter(|_| limiter.allow_request("alice")).count();
    assert_eq!(admitted, 7);
    limiter.publish_metrics();
    assert_eq!(
        outcomes("ten-at-seven"),
        [Some(7.0), Some(3.0), Some(7.0), Some(3.0)]
    );
    assert_eq!(scraped("tollgate_clients", "ten-at-seven", &[]), Some(1.0));
    // Publishing again adds nothing.
    limiter.publish_metrics();
    assert_eq!(outcomes("ten-at-seven")[0], Some(7.0));
}

/// A check of cost `n` is one decision and `n` units; a cost the limiter
/// can never admit, and a cost of 0, are no decision.
#[test]
fn a_check_of_cost_n_counts_n_units() {
    // Installed before any check: what is published with no recorder is lost.
    let _ = prom::recorder();
    let limiter = TokenBucket::builder()
        .rate(10, Duration::from_secs(1))
        .name("cost-n")
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let decided: Vec<bool> = (0..3)
        .map(|_| limiter.check_n("a", 4).unwrap().is_allowed())
        .collect();
    assert_eq!(decided, [true, true, false]);
    assert!(limiter.check_n("a", 11).is_err());
    assert!(limiter.check_n("a", 0).unwrap().is_allowed());
    assert!(limiter.check("b").is_allowed());
    let _ = limiter.peek("b");
    limiter.publish_metrics();
    assert_eq!(
        outcomes("cost-n"),
        [Some(3.0), Some(1.0), Some(9.0), Some(4.0)]
    );
}

/// Four threads checking one client: the counts equal what the threads
/// were told, exactly (a bucket of 1 000 on a stopped clock admits
/// exactly 1 000 of 4 000).
#[test]
fn checks_on_many_threads_are_counted_exactly() {
    // Installed before any check: what is published with no recorder is lost.
    let _ = prom::recorder();
    let limiter = TokenBucket::builder()
        .rate(1_000, Duration::from_secs(1))
        .name("threads")
        .key_type::<u64>()
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let told = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let (limiter, told) = (&limiter, &told);
            scope.spawn(move || {
                for i in 0..1_000u64 {
                    // Half on one hot client, half on clients of their own.
                    let key = if i % 2 == 0 { 0 } else { 1 + t * 1_000 + i };
                    if limiter.allow_request(&key) {
                        told.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let admitted = told.load(Ordering::Relaxed);
    // 1 000 on the hot client, and every one of the 2 000 others.
    assert_eq!(admitted, 3_000);
    limiter.publish_metrics();
    assert_eq!(
        outcomes("threads"),
        [Some(3_000.0), Some(1_000.0), Some(3_000.0), Some(1_000.0)]
    );
    assert_eq!(scraped("tollgate_clients", "threads", &[]), Some(2_001.0));
}

#[test]
fn a_direct_limiter_counts_its_decisions() {
    // Installed before any check: what is published with no recorder is lost.
    let _ = prom::recorder();
    let limiter = FixedWindow::builder()
        .limit(7)
        .window(Duration::from_secs(60))
        .name("direct")
        .clock(ManualClock::new())
        .build_direct()
        .unwrap();
    let admitted = (0..10).filter(|_| limiter.allow()).count();
    assert_eq!(admitted, 7);
    assert!(limiter.check_n(5).unwrap().is_denied());
    limiter.publish_metrics();
    assert_eq!(
        outcomes("direct"),
        [Some(7.0), Some(4.0), Some(7.0), Some(8.0)]
    );
    assert_eq!(
        scraped("tollgate_clients", "direct", &[]),
        None,
        "no clients"
    );
}

/// Two limits held together, and tiers, share the check path: counted the
/// same.
#[test]
fn pairs_and_tiers_count_on_the_same_path() {
    // Installed before any check: what is published with no recorder is lost.
    let _ = prom::recorder();
    let pair = TokenBucket::builder()
        .rate(10, Duration::from_secs(1))
        .and(
            FixedWindow::builder()
                .limit(4)
                .window(Duration::from_secs(60)),
        )
        .name("pair")
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert_eq!((0..6).filter(|_| pair.allow_request("a")).count(), 4);
    pair.publish_metrics();
    assert_eq!(
        outcomes("pair"),
        [Some(4.0), Some(2.0), Some(4.0), Some(2.0)]
    );

    let tiered = FixedWindow::builder()
        .limit(2)
        .window(Duration::from_secs(60))
        .tier(
            1,
            FixedWindow::builder()
                .limit(5)
                .window(Duration::from_secs(60)),
        )
        .tier_by(|key: &String| u16::from(key.starts_with("pro-")))
        .name("tiers")
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let free = (0..6).filter(|_| tiered.allow_request("free-1")).count();
    let pro = (0..6).filter(|_| tiered.allow_request("pro-1")).count();
    assert_eq!((free, pro), (2, 5));
    tiered.publish_metrics();
    assert_eq!(
        outcomes("tiers"),
        [Some(7.0), Some(5.0), Some(7.0), Some(5.0)]
    );
}

/// A booking made is an admission of its cost; one refused (the wait too
/// long) a denial.
#[test]
fn reservations_are_decisions() {
    // Installed before any check: what is published with no recorder is lost.
    let _ = prom::recorder();
    let limiter = SlidingWindowLog::builder()
        .limit(3)
        .window(Duration::from_secs(10))
        .name("bookings")
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let now = limiter.reserve_n("a", 2, Duration::ZERO).unwrap();
    now.commit();
    assert!(limiter.reserve_n("a", 2, Duration::from_secs(1)).is_err());
    let later = limiter.reserve_n("a", 2, Duration::from_secs(60)).unwrap();
    later.commit();
    limiter.publish_metrics();
    assert_eq!(
        outcomes("bookings"),
        [Some(2.0), Some(1.0), Some(4.0), Some(2.0)]
    );
}

/// With no call, the counts reach the recorder by themselves: the first
/// check's at once, the rest within a second or so of real time, on a
/// clock that never moves.
#[test]
fn checks_publish_by_themselves_within_a_second() {
    // Installed before any check: what is published with no recorder is lost.
    let _ = prom::recorder();
    let limiter = TokenBucket::builder()
        .rate(100, Duration::from_secs(1))
        .name("by-themselves")
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(limiter.allow_request("a"));
    assert_eq!(
        outcomes("by-themselves")[0],
        Some(1.0),
        "the first check publishes"
    );
    for _ in 0..6 {
        assert!(limiter.allow_request("a"));
    }
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(
        outcomes("by-themselves"),
        [Some(7.0), Some(0.0), Some(7.0), Some(0.0)],
        "a second and a half later, with no call"
    );
}

/// After the limiter's clock steps back an hour, the checks it counts
/// still reach the recorder within a second and a half of real time, with
/// no call; and checks publish the gauges again.
#[test]
fn counts_are_published_after_the_clock_steps_back() {
    // Installed before any check: what is published with no recorder is lost.
    let _ = prom::recorder();
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(2 * 3_600));
    let limiter = FixedWindow::builder()
        .limit(100)
        .window(Duration::from_secs(60))
        .name("stepped-back")
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.allow_request("a"));
    assert_eq!(outcomes("stepped-back")[0], Some(1.0), "the first check");
    clock.set(Duration::from_secs(3_600));
    // One check a second of the limiter's clock, as a server's would be.
    for _ in 0..5 {
        assert!(limiter.allow_request("b"));
        clock.advance(Duration::from_secs(1));
    }
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(
        outcomes("stepped-back")[..2],
        [Some(6.0), Some(0.0)],
        "the checks after the step back, with no call"
    );
    // The gauges are the checks' to publish: the first after a round of
    // the publishing thread does, whatever its clock reads.
    assert!(limiter.allow_request("c"));
    assert_eq!(scraped("tollgate_clients", "stepped-back", &[]), Some(3.0));
}

/// The cap and the clients held; a removed client's entry awaits a
/// rebuild; a new client refused at the cap is a denial.
#[test]
fn gauges_hold_the_clients_the_cap_and_the_removed() {
    // Installed before any check: what is published with no recorder is lost.
    let _ = prom::recorder();
    let limiter = FixedWindow::builder()
        .limit(5)
        .window(Duration::from_secs(60))
        .max_clients(3)
        .overflow(Overflow::DenyNew)
        .name("gauges")
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let admitted: Vec<bool> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|id| limiter.allow_request(*id))
        .collect();
    assert_eq!(admitted, [true, true, true, false, false]);
    assert!(limiter.remove("a"));
    limiter.publish_metrics();
    let gauge = |name| scraped(name, "gauges", &[]);
    assert_eq!(gauge("tollgate_clients"), Some(2.0));
    assert_eq!(gauge("tollgate_clients_max"), Some(3.0));
    assert_eq!(gauge("tollgate_entries_awaiting_removal"), Some(1.0));
    assert!(limiter.remove("b"));
    limiter.publish_metrics();
    assert_eq!(gauge("tollgate_clients"), Some(1.0));
    assert_eq!(gauge("tollgate_entries_awaiting_removal"), Some(2.0));
    assert_eq!(outcomes("gauges")[..2], [Some(3.0), Some(2.0)]);
}

/// Limiters that share a name add up in its series.
#[test]
fn limiters_of_one_name_add_up() {
    // Installed before any check: what is published with no recorder is lost.
    let _ = prom::recorder();
    let make = || {
        FixedWindow::builder()
            .limit(2)
            .window(Duration::from_secs(60))
            .name("shared-name")
            .clock(ManualClock::new())
            .build()
            .unwrap()
    };
    let (one, two) = (make(), make());
    for limiter in [&one, &two] {
        for _ in 0..3 {
            let _ = limiter.allow_request("a");
        }
        limiter.publish_metrics();
    }
    assert_eq!(outcomes("shared-name")[..2], [Some(4.0), Some(2.0)]);
}

/// A recorder that holds up the thread publishing through it until told to
/// go on: a recorder taking a lock of its own, or a slow one.
struct Stalling {
    entered: std::sync::mpsc::SyncSender<()>,
    go: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Stalling {
    fn stall(&self) {
        let _ = self.entered.try_send(());
        let _ = self
            .go
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(30));
    }
}

impl metrics::Recorder for Stalling {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        self.stall();
        metrics::Counter::noop()
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        self.stall();
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// A check whose turn it is to publish never waits for another thread
/// that is publishing: while `publish_metrics` is held up inside the
/// recorder, checks due to publish (after a round of the publishing
/// thread, which leaves the counts to that thread too) leave it to that
/// thread and go on.
#[test]
fn a_check_due_to_publish_never_waits_for_a_stalled_publisher() {
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1_000, Duration::from_secs(1))
        .name("stalled-publisher")
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.allow_request("alice"));
    let (entered_tx, entered) = std::sync::mpsc::sync_channel(1);
    let (go, go_rx) = std::sync::mpsc::channel();
    let stalling = Stalling {
        entered: entered_tx,
        go: std::sync::Mutex::new(go_rx),
    };
    std::thread::scope(|scope| {
        let publisher = scope.spawn(|| {
            metrics::with_local_recorder(&stalling, || limiter.publish_metrics());
        });
        entered
            .recv_timeout(Duration::from_secs(30))
            .expect("the publisher reached the recorder");
        // Publishing is due for the checks after a round of the publishing
        // thread (a second of real time), and the publisher holds it.
        std::thread::sleep(Duration::from_millis(1_200));
        clock.advance(Duration::from_secs(2));
        let (done_tx, done) = std::sync::mpsc::channel();
        let limiter = &limiter;
        let checker = scope.spawn(move || {
            let admitted = (0..100).filter(|_| limiter.allow_request("bob")).count();
            done_tx.send(admitted).unwrap();
        });
        let admitted = done.recv_timeout(Duration::from_secs(10));
        // Let the publisher go whatever happened, so the test ends.
        for _ in 0..16 {
            let _ = go.send(());
        }
        assert_eq!(admitted, Ok(100), "checks waited for the stalled publisher");
        checker.join().unwrap();
        publisher.join().unwrap();
    });
}
