//! The `tracing` feature's events: once per run of a cap reached, not per
//! request, and once per quota change. Recorded by a subscriber of this
//! file's own. `cargo test --features tracing --test tracing_events`.

#![cfg(not(feature = "loom"))]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::{FixedWindow, ManualClock, Overflow, TokenBucket};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// One event as recorded: level, target and fields (the message under
/// `message`), each rendered with `Debug`.
#[derive(Debug, Clone)]
struct Seen {
    level: Level,
    target: String,
    fields: BTreeMap<String, String>,
}

/// Records every event it is given.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl Recorder {
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().push(Seen {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            fields,
        });
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// A cap reached by a flood of new clients is one event, not one per
/// client; reached again after a quiet minute, one more.
#[test]
fn a_cap_reached_is_one_event_per_run() {
    let recorder = Recorder::default();
    let clock = ManualClock::new();
    let limiter = TokenBucket::builder()
        .rate(1, Duration::from_secs(3600))
        .max_clients(2)
        .overflow(Overflow::DenyNew)
        .name("capped")
        .key_type::<u64>()
        .clock(clock.clone())
        .build()
        .unwrap();
    tracing::subscriber::with_default(recorder.clone(), || {
        assert!(limiter.allow_request(&0));
        assert!(limiter.allow_request(&1));
        assert!(recorder.take().is_empty(), "no event below the cap");
        // A hundred new clients, each refused at the cap, over 59 s.
        for id in 2..102 {
            assert!(!limiter.allow_request(&id));
            clock.advance(Duration::from_millis(590));
        }
        let seen = recorder.take();
        assert_eq!(seen.len(), 1, "{seen:?}");
        let event = &seen[0];
        assert_eq!(
            (event.level, event.target.as_str()),
            (Level::WARN, "tollgate")
        );
        assert_eq!(event.fields["message"], "client cap reached");
        assert_eq!(event.fields["limiter"], "capped");
        assert_eq!(event.fields["max_clients"], "2");
        assert_eq!(event.fields["overflow"], "DenyNew");
        // A quiet minute, then the cap again: a new run, a new event.
        clock.advance(Duration::from_secs(60));
        assert!(!limiter.allow_request(&500));
        assert!(!limiter.allow_request(&501));
        assert_eq!(recorder.take().len(), 1);
    });
}

/// A quota change is one event, with the tier and the new quota.
#[test]
fn a_quota_change_is_an_event() {
    let recorder = Recorder::default();
    let limiter = FixedWindow::builder()
        .limit(10)
        .window(Duration::from_secs(1))
        .reconfigurable()
        .name("plans")
        .clock(ManualClock::new())
        .build()
        .unwrap();
    tracing::subscriber::with_default(recorder.clone(), || {
        for id in 0..100 {
            let _ = limiter.allow_request(&id.to_string());
        }
        assert!(recorder.take().is_empty(), "checks make no event");
        limiter
            .set_quota(
                2,
                FixedWindow::builder()
                    .limit(50)
                    .window(Duration::from_secs(60)),
            )
            .unwrap();
        let seen = recorder.take();
        assert_eq!(seen.len(), 1, "{seen:?}");
        let event = &seen[0];
        assert_eq!(
            (event.level, event.target.as_str()),
            (Level::INFO, "tollgate")
        );
        assert_eq!(event.fields["message"], "quota changed");
        assert_eq!(event.fields["limiter"], "plans");
        assert_eq!(event.fields["tier"], "2");
        assert_eq!(event.fields["limit"], "50");
        assert_eq!(event.fields["window_ns"], "60000000000");
        // A refused change is none.
        assert!(limiter
            .set_quota(
                0,
                FixedWindow::builder()
                    .limit(0)
                    .window(Duration::from_secs(1))
            )
            .is_err());
        assert!(recorder.take().is_empty());
    });
}
