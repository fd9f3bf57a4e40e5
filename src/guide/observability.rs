//! Observability: the series a limiter and the HTTP layer publish (the
//! `metrics` feature), and the events an operator sees once (the `tracing`
//! feature).
//!
//! When a server sheds load, the first questions are why and for whom.
//! With the `metrics` feature, every limiter counts its decisions by
//! outcome, both sides, so that a refusal rate can be computed, and
//! publishes them through the [`metrics`](https://docs.rs/metrics) crate's
//! facade: tollgate installs no exporter, whichever recorder the
//! application installs (Prometheus, StatsD, OpenTelemetry...) receives
//! them.
//!
//! # Names
//!
//! Every series carries a `limiter` label: the name given to the
//! limiter's builder with [`name`](crate::Builder::name), or `"default"`
//! (the same in every release) for one given none. Limiters that share a
//! name add up in its series.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::TokenBucket;
//!
//! let login = TokenBucket::builder()
//!     .rate(5, Duration::from_secs(60))
//!     .name("login")
//!     .build()?;
//! assert!(login.allow_request("alice"));
//! // Counted on this thread; published within a second by tollgate's
//! // publishing thread with no call, or now:
//! # #[cfg(feature = "metrics")]
//! login.publish_metrics();
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # The series
//!
//! | series | kind | labels | what it counts |
//! |---|---|---|---|
//! | `tollgate_decisions_total` | counter | `limiter`, `outcome` (`admitted`, `denied`) | checks ([`check`](crate::Limiter::check), [`allow_request`](crate::Limiter::allow_request), [`check_n`](crate::Limiter::check_n), the layer's), and bookings ([`reserve`](crate::Limiter::reserve): made is admitted, refused is denied), of a keyed or a [direct](crate::DirectLimiter) limiter; a new client refused at a full cap is a denial, one admitted untracked an admission |
//! | `tollgate_units_total` | counter | `limiter`, `outcome` | the units those decisions asked for: a check of cost `n` counts `n` |
//! | `tollgate_clients` | gauge | `limiter` | clients held now ([`len`](crate::Limiter::len)); keyed limiters only |
//! | `tollgate_clients_max` | gauge | `limiter` | the cap ([`max_clients`](crate::Builder::max_clients)); capped limiters only |
//! | `tollgate_entries_awaiting_removal` | gauge | `limiter` | clients removed or forgotten whose keys and state their table still holds, until the next rebuild of their shard |
//! | `tollgate_layer_requests_total` | counter | `limiter`, `transport` (`grpc` for a `POST` with a gRPC content type, `http` for any other), `outcome` (`admitted`, `limited`, `unavailable`, `rejected`, `skipped`) | every request through the HTTP layer: handed on, refused by the limiter, refused because the check failed, rejected by the key extractor, let through unchecked (`skip_if`, or an extractor's `Skip`) |
//! | `tollgate_layer_responses_total` | counter | `limiter`, `transport`, `status` | each response the layer sent itself, by the status it carried: the HTTP status (`429`, `503`, `401`...), or for a gRPC call its `grpc-status` (`8`, `14`...) |
//!
//! A Redis limiter (`tollgate::redis::RedisLimiter`) counts its checks and
//! bookings in `tollgate_decisions_total` and `tollgate_units_total` too,
//! whatever answered them (Redis, the deny shortcut, the fail policy), and
//! adds:
//!
//! | series | kind | labels | what it counts |
//! |---|---|---|---|
//! | `tollgate_redis_checks_total` | counter | `limiter`, `answered_by`, `outcome` (`admitted`, `denied`, `refused`) | every check, by what answered it: `redis` (a round trip decided it; also a booking beyond its client's tier's capacity, refused by that capacity without one, as in-process), `shortcut` (the deny shortcut denied it), `fail_open` (Redis unreachable or slow, `FailOpen` answered), `fail_closed` (Redis unreachable or slow, refused with an error), `key_refused` (refused with an error about the client's key or the request, Redis up), `local` (the in-process limiter of `Local`); `refused` is an error, no decision. Each pair that can happen is registered at 0 at the first publication, both sides of every ratio |
//! | `tollgate_redis_round_trips_total` | counter | `limiter` | commands sent to Redis (`RedisStats::round_trips`) |
//! | `tollgate_redis_shortcut_hits_total` | counter | `limiter` | checks the deny shortcut denied without a round trip |
//! | `tollgate_redis_coalesced_total` | counter | `limiter` | checks Redis decided in a call that carried another check (`RedisBuilder::coalesce`): the round trips coalescing saved |
//! | `tollgate_redis_script_reloads_total` | counter | `limiter` | scripts sent whole because Redis had lost them (a restart, a failover, `SCRIPT FLUSH`) |
//! | `tollgate_redis_failures_total` | counter | `limiter`, `kind` (`timeout`, `error`) | round trips that ran past the timeout, or failed otherwise |
//! | `tollgate_redis_breaker_transitions_total` | counter | `limiter`, `to` (`open`, `closed`) | the breaker opening (Redis failed while up: checks go to the fail policy) and closing (a probe found Redis back) |
//! | `tollgate_redis_breaker_open` | gauge | `limiter` | 1 while the breaker is open (on Redis Cluster, any node's), else 0 |
//!
//! A Redis limiter's peeks are no decision, but their round trips count.
//!
//! Peeks, and checks of cost 0 or above the capacity (an error), are no
//! decision. The layer's `limiter` label is its limiter's
//! [`AsyncCheck::name`](crate::AsyncCheck::name). Every counter of a
//! limiter is registered with both outcomes at its first publication, so
//! a ratio has its denominator from the start.
//!
//! # Two queries
//!
//! The share of requests each limiter refuses, over five minutes:
//!
//! ```text
//! sum by (limiter) (rate(tollgate_decisions_total{outcome="denied"}[5m]))
//!   / sum by (limiter) (rate(tollgate_decisions_total[5m]))
//! ```
//!
//! How full each capped limiter is (1 is a full cap: new clients then meet
//! the [overflow policy](crate::Overflow)):
//!
//! ```text
//! tollgate_clients / on (limiter) tollgate_clients_max
//! ```
//!
//! And for a Redis limiter, the share of checks answered without Redis
//! (the fail policy, by either side of it):
//!
//! ```text
//! sum by (limiter) (rate(tollgate_redis_checks_total{answered_by=~"fail_open|fail_closed|local"}[5m]))
//!   / sum by (limiter) (rate(tollgate_redis_checks_total[5m]))
//! ```
//!
//! # When the counts reach the recorder
//!
//! A check must not pay for a shared write to be counted: one counter
//! written by every thread would move its cache line between cores on
//! every check. So each limiter keeps its counts per thread (a stripe of
//! counters on a cache line of its own for each of up to 64 threads at
//! once; threads beyond share one more), which a check bumps with plain
//! loads and stores, and *publishes* them: it adds what was counted since
//! the last publication to the recorder's counters, and sets the gauges.
//!
//! A scrape made a second or more after a decision shows it, with no call
//! in your code, however the exporter is served: its own HTTP listener, a
//! handler that only renders, or a push gateway.
//!
//! - **By a thread of tollgate's.** The first limiter that counts starts
//!   one thread, named `tollgate-metrics` (`tollgate-metric` in `ps` and
//!   `top`, which show 15 characters), which publishes the counts of every
//!   limiter and layer alive about once a second of real time, whether
//!   checks go on or have stopped, and whatever the limiters' clocks read
//!   (a clock stepped back, a [`ManualClock`](crate::ManualClock) that
//!   never moves). It holds no limiter alive: once the last limiter and
//!   layer with metrics are dropped, it ends within a second, and the next
//!   one to count starts another. A keyed or Redis limiter joins it at
//!   its first check, the layer at its first request, a [direct
//!   limiter](crate::DirectLimiter) as it is built. It sleeps between rounds, takes no lock a check takes, and
//!   never waits for another publisher (it leaves a limiter being
//!   published to that publisher for the round); the recorder's code runs
//!   on it. It publishes to the global recorder (the one
//!   `metrics::set_global_recorder`, or an exporter's `install`, sets), not
//!   to a thread-local one (`metrics::with_local_recorder`).
//! - **By a check, for the gauges.** The thread publishes what checks
//!   counted; the gauges (`tollgate_clients` and the others) are read
//!   from the limiter, and published by the limiter's first check, then
//!   by the first check after each of the thread's rounds: so they are a
//!   second late at most while checks go on, and as of the last such
//!   check once checks stop. A Redis limiter (`tollgate::redis::RedisLimiter`)
//!   publishes its round trips, failures and breaker the same way. That
//!   check runs the recorder's code, the one exception to a check running
//!   no code but the key's and the clock's; it never waits for another
//!   publisher (the counts are summed under a lock of the limiter's that a
//!   check only tries, and the recorder is called with no lock of
//!   tollgate's held), but a recorder that takes a lock of its own, as
//!   most do for a series not seen before, can still make that one check
//!   wait. Every other check compares the clock reading it has with one
//!   word.
//! - **On demand**: `Limiter::publish_metrics`,
//!   `DirectLimiter::publish_metrics`,
//!   `RedisLimiter::publish_metrics`,
//!   and the layer's `RateLimitLayer::publish_metrics` (which publishes
//!   its limiter's too). Not needed for a scrape; call it for figures
//!   exact to the last check (in a test, or a scrape that must not lag by
//!   a second), or for the gauges exact now.
//!
//! Where no thread can be started (a target without threads), checks
//! publish by themselves instead, at most once a second of the limiter's
//! clock, and a direct limiter only on demand.
//!
//! Install the recorder before the limiter's first check: what is
//! published before any recorder is installed goes nowhere (as for any
//! `metrics` call).
//!
//! `examples/metrics.rs` serves an axum router behind the layer, with a
//! Prometheus endpoint through `metrics-exporter-prometheus`:
//!
//! ```text
//! cargo run --features axum,metrics --example metrics
//! ```
//!
//! # What it costs
//!
//! Without the feature, nothing: a check runs the same instructions,
//! counted by callgrind before and after. With it, a keyed check on a hot
//! key runs 14 instructions more (206 → 220, 7%; 255 → 269 with `String`
//! keys); a [`DirectLimiter`](crate::DirectLimiter) check, 23 more (55 →
//! 78), its whole check being a clock read and one exchange: its counting
//! is a call of its own, so that the check still inlines into its caller,
//! and compares no publication instant. The publishing thread costs a
//! check nothing; it wakes once a second and sums each limiter's stripes
//! then. A keyed or direct limiter holds about 8 KiB of stripes, a Redis
//! limiter about 16 KiB, and the layer about 27 KiB (its stripes, and a
//! counter per status). `docs/PERFORMANCE.md`, "Observability", has the
//! measurement and its commands.
//!
//! # Events
//!
//! With the `tracing` feature, a limiter emits a [`tracing`](https://docs.rs/tracing)
//! event for what an operator must see once, not per request; every one
//! has the target `"tollgate"` and a `limiter` field, its name:
//!
//! | level | message | fields | when |
//! |---|---|---|---|
//! | `WARN` | `client cap reached` | `max_clients`, `overflow` | a new client found the cap reached: the first time, and then the first time after a minute (of the limiter's clock) without one |
//! | `INFO` | `quota changed` | `tier`, `limit`, `window_ns` | [`set_quota`](crate::Limiter::set_quota) applied a quota to a tier |
//!
//! A Redis limiter (`tollgate::redis::RedisLimiter`) adds:
//!
//! | level | message | fields | when |
//! |---|---|---|---|
//! | `WARN` | `redis breaker opened` | `policy` | Redis failed (unreachable, or past the timeout) while the breaker was closed: checks go to the fail policy until a probe finds it back |
//! | `WARN` | `local fallback started` | | with it, under `FailPolicy::Local`: the in-process limiter decides from now on |
//! | `INFO` | `redis breaker closed` | `policy` | Redis answered again after the breaker opened |
//! | `INFO` | `local fallback ended` | | with it, under `Local`: Redis decides again |
//! | `INFO` | `quota changed` | `tier`, `limit`, `window_ns` | `RedisLimiter::set_quota` applied a quota to a tier, in this process |
