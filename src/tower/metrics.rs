//! The layer's series, with the `metrics` feature: every request by
//! transport and outcome, and each response the layer sent itself by its
//! status; counted per thread (as a limiter's checks are) and published
//! through the `metrics` facade by the first request, then by the
//! publishing thread about once a second of real time (see
//! `crate::telemetry`), or on
//! [`RateLimitLayer::publish_metrics`](super::RateLimitLayer::publish_metrics).

use core::fmt;
use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use http::request::Parts;
use http::{HeaderName, Response};

use super::grpc;
use crate::clock::{Clock, MonotonicClock};
use crate::sync::{Ordering, PlainAtomicU64};
use crate::telemetry::{self, Counts};

/// Requests through the layer, by `limiter`, `transport` and `outcome`.
pub(super) const REQUESTS: &str = "tollgate_layer_requests_total";
/// Responses the layer sent itself, by `limiter`, `transport` and
/// `status`.
pub(super) const RESPONSES: &str = "tollgate_layer_responses_total";

/// What the layer did with a request.
#[derive(Debug, Clone, Copy)]
pub(super) enum Outcome {
    /// Admitted, and handed to the inner service.
    Admitted = 0,
    /// Refused by the limiter (`429`, `RESOURCE_EXHAUSTED`).
    Limited = 1,
    /// The limiter could not decide (`503`, `UNAVAILABLE`).
    Unavailable = 2,
    /// The key extractor rejected it.
    Rejected = 3,
    /// Let through unchecked (`skip_if`, or the extractor's `Skip`).
    Skipped = 4,
}

const OUTCOMES: [&str; 5] = ["admitted", "limited", "unavailable", "rejected", "skipped"];
const TRANSPORTS: [&str; 2] = ["http", "grpc"];
/// Statuses counted: gRPC codes (0 to 16) and HTTP statuses (100 to 599)
/// share one range, since they never overlap.
const STATUSES: usize = 600;

/// A layer's counts; shared by its services and their futures, and with
/// the publishing thread.
pub(super) struct Requests {
    /// The `limiter` label: the limiter's [`AsyncCheck::name`](crate::AsyncCheck::name).
    limiter: Cow<'static, str>,
    /// Per transport, per outcome: `transport * 5 + outcome`; beside them,
    /// the layer's own responses by status.
    counts: Arc<Counts<10, Statuses>>,
    /// Times the publications of the checks, until the counts join the
    /// publishing thread (the first request's) and where no thread could
    /// be started.
    clock: MonotonicClock,
}

/// The layer's own responses, per transport, per status:
/// `transport * STATUSES + status`. Counted with `fetch_add` on a shared
/// line: a response the layer builds itself costs far more.
struct Statuses {
    counters: Box<[PlainAtomicU64]>,
    /// What `counters` had when last published; locked by a publisher
    /// while it reads `counters`, never while it calls the recorder.
    sent: Mutex<Box<[u64]>>,
}

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

impl Requests {
    pub(super) fn new(limiter: &str) -> Self {
        let statuses = Statuses {
            counters: (0..2 * STATUSES).map(|_| PlainAtomicU64::new(0)).collect(),
            sent: Mutex::new(vec![0; 2 * STATUSES].into_boxed_slice()),
        };
        Self {
            limiter: Cow::Owned(limiter.to_owned()),
            counts: Counts::new(false, statuses, publish),
            clock: MonotonicClock::new(),
        }
    }

    /// Counts `request`'s outcome, and publishes if a publication is due.
    #[inline]
    pub(super) fn count(&self, request: &Parts, outcome: Outcome) {
        let transport = usize::from(grpc::is_grpc(request));
        self.counts
            .tally
            .count(transport * 5 + outcome as usize, 0, 0);
        let now = self.clock.now_nanos();
        if self.counts.sent.due(now) {
            self.publish_due(now);
        }
    }

    /// Counts a response the layer sent itself, by the status it carries:
    /// for a gRPC request, its `grpc-status` (the HTTP status if it has
    /// none); otherwise its HTTP status.
    pub(super) fn responded<R>(&self, request: &Parts, response: &Response<R>) {
        let grpc = grpc::is_grpc(request);
        let code = grpc
            .then(|| {
                response
                    .headers()
                    .get(GRPC_STATUS)?
                    .to_str()
                    .ok()?
                    .parse::<u16>()
                    .ok()
            })
            .flatten()
            .unwrap_or_else(|| response.status().as_u16());
        if let Some(counter) = self
            .counts
            .extra
            .counters
            .get(usize::from(grpc) * STATUSES + usize::from(code))
            .filter(|_| usize::from(code) < STATUSES)
        {
            // Relaxed: a lone tally, publishing nothing.
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The first request publishes, and joins the counts to the publishing
    /// thread, which publishes them from then on: no later request is due
    /// (unless no thread could be started).
    #[cold]
    #[inline(never)]
    fn publish_due(&self, now: u64) {
        if Counts::claim(&self.counts, now, &self.limiter) {
            publish(&self.counts, &self.limiter, false);
        }
    }

    /// Adds what was counted since the last publication to the layer's
    /// counters; waits for another publisher if `wait`, else leaves it to
    /// that one.
    pub(super) fn publish(&self, wait: bool) {
        publish(&self.counts, &self.limiter, wait);
    }
}

/// Adds what `counts` counted since the last publication to the counters
/// of the layer whose limiter is `limiter`; waits for another publisher if
/// `wait`, else leaves it to that one (and answers false).
// A `&Cow`, not a `&str`: the type of `Counts`'s publishing function.
#[allow(clippy::ptr_arg)]
fn publish(counts: &Counts<10, Statuses>, limiter: &Cow<'static, str>, wait: bool) -> bool {
    let Some(deltas) = counts.deltas(wait) else {
        return false;
    };
    for (transport, name) in TRANSPORTS.iter().enumerate() {
        for (outcome, label) in OUTCOMES.iter().enumerate() {
            telemetry::counter(
                REQUESTS,
                limiter,
                &[("transport", name), ("outcome", label)],
            )
            .increment(deltas[transport * 5 + outcome]);
        }
    }
    // The responses sent since the last publication, by status: the lock
    // is held for the reading only, never while the recorder runs, so a
    // publisher held up in the recorder holds up no other.
    let statuses = &counts.extra;
    let changed: Vec<(usize, u64)> = {
        let mut last = statuses
            .sent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        statuses
            .counters
            .iter()
            .zip(last.iter_mut())
            .enumerate()
            .filter_map(|(at, (counter, last))| {
                // Relaxed: as in `responded`.
                let now = counter.load(Ordering::Relaxed);
                let delta = now.wrapping_sub(*last);
                *last = now;
                (delta != 0).then_some((at, delta))
            })
            .collect()
    };
    for (at, delta) in changed {
        let (transport, status) = (at / STATUSES, at % STATUSES);
        metrics::counter!(
            RESPONSES,
            "limiter" => limiter.clone(),
            "transport" => TRANSPORTS[transport],
            "status" => status.to_string(),
        )
        .increment(delta);
    }
    true
}

impl fmt::Debug for Requests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Requests")
            .field("limiter", &self.limiter)
            .finish_non_exhaustive()
    }
}
