//! Beyond one machine: limiters whose state lives in Redis.
//!
//! With the `redis` feature, every algorithm also runs in Redis, so that
//! all the replicas of a service share one budget per client. The builder
//! is the same; `.redis(connection, prefix)` moves the state. The
//! `tollgate::redis` module's documentation has the full API and a
//! runnable example.
//!
//! ```toml
//! tollgate = { version = "0.3", features = ["redis"] }
//! ```
//!
//! - **Setup.** Redis 7 or later (the scripts read `TIME`, which needs
//!   effect replication, Redis 7's default), one server or a cluster.
//! - **One semantics.** A Redis limiter decides as the in-process limiter
//!   of the same settings: the same decisions and the same figures
//!   (remaining, retry-after, replenish-after, limit, window, a pair's
//!   figures for each limit), on Redis's clock, in whole microseconds. The
//!   Lua scripts decide the common case; everything else (a quota change,
//!   a booking, a state written under other settings) runs the in-process
//!   algorithms' own code on the state read from Redis and writes the
//!   result back by compare-and-set. A differential test runs the same
//!   operation sequences (checks, peeks, resets, removals, quota changes
//!   of every kind, tiers, pairs, bookings and their cancellation) through
//!   both and compares every answer; the differences that stay are in the
//!   table below.
//! - **Keys.** One key per client, `<prefix>:{<client>}:<tag>`, the prefix
//!   and the client's bytes escaped so that no client id can move its key
//!   to another slot of a cluster, empty the hash tag, or reach another
//!   client's or prefix's key. Every key expires when its state becomes
//!   idle, a token bucket's a refill after (below).
//! - **Control.** `peek`, `reset`, `remove`, tiers (`tier_by`,
//!   `set_quota`), two limits at once (`and`, `and_rate`), and bookings
//!   (`reserve`, `reserve_n`, `until_ready`, `RedisReservation::cancel`),
//!   as in-process, for every process sharing the Redis.
//! - **Deny shortcut.** A client that Redis left with little is kept in the
//!   process for at most a second, and a request its state denies is
//!   denied there, with the figures Redis would have given, told from the
//!   earliest instant Redis's clock may read: a wait never shorter than
//!   Redis's, longer by at most the round trip that brought the state. A
//!   flood of denied requests costs Redis almost nothing. This process's `reset`,
//!   `remove` and `set_quota` forget every entry made before them.
//! - **Coalescing** (on by default). While a call of a limiter is in
//!   flight, this process's further checks on that limiter wait, and the
//!   next call carries all of them, of every client: one script decides
//!   each client on its own key, its checks in the order they were made,
//!   at one reading of Redis's clock, each as a call of its own would have
//!   been decided there (the same outcome and figures), and writes each
//!   client's state once. Busy traffic then costs a round trip per batch
//!   rather than per check, and Redis's fixed cost of a call is paid once
//!   a batch. What it costs: a check that finds two calls in flight waits
//!   for one to return before its batch goes (a lone check goes at once),
//!   a batch carries at most 256 checks (more wait for the next), and
//!   batches go from a task spawned on the tokio runtime. On a Redis
//!   Cluster a call holds one slot's keys, so there only one client's
//!   checks share a call. The sliding window log's checks, peeks,
//!   bookings and a cost beyond the client's tier go one call each; a
//!   client whose state was written under other settings is left
//!   untouched by the batch and converted by a call of its own. A
//!   client's several requests of cost 1 in one batch (a hot client's)
//!   are answered by Redis in a few numbers, how many it admitted and the
//!   state before and after, and each decision is replayed in process by
//!   the same algorithm; a replay that does not end on the state Redis
//!   wrote is answered by the fail policy, never taken as a decision.
//!   `coalesce(false)` makes every
//!   check its own call. Shown by the batch proptests in
//!   `src/redis/tests/batch_equal.rs` (a batch of three clients' interleaved
//!   checks, a third of the batches all of cost 1, decides as the same checks one by one, for the token bucket,
//!   both windows and a pair, with states of other settings left alone),
//!   by `checks_made_at_once_coalesce_and_decide_as_one_after_the_other`,
//!   `clients_of_two_tiers_in_one_batch_each_get_their_tier`,
//!   `a_quota_changed_while_checks_wait_splits_their_batch`,
//!   `sixty_four_tasks_on_two_limiters_admit_exactly_the_quota`, and
//!   across four processes by
//!   `exactly_the_quota_across_processes_coalesced` (`tests/redis.rs`:
//!   five clients, each exactly its quota).
//! - **Leases** (a token bucket, opt-in): each process takes a block of a
//!   hot client's units in one call and spends it in process, through a
//!   lock-free cell (the tiers' quotas are read under an uncontended read
//!   lock, as for every Redis check); see "Leases" below.
//! - **One interface.** [`AsyncCheck`](crate::AsyncCheck) is the interface
//!   that in-process and Redis limiters share, and the tower layer takes
//!   either.
//!
//! # Leases
//!
//! `lease(..)` on a token bucket's
//! Redis builder lets each process take a block of a client's units in
//! one call and spend it locally, through a lock-free cell, asking for the
//! next block before this one runs out. A check the lease can answer is
//! decided in the process, without a round trip and before any future is
//! made. A client gets a lease once it is hot, checked four times in a row
//! with no more than the lease's horizon between two (clients checked now
//! and then go one call each, as without leases). A lease is sized from
//! the process's recent rate for the client: the units it would spend in
//! the horizon, at most `max_units` unspent; and while the bucket has
//! room, a grant reaches at least a horizon ahead (its slots pass at the
//! bucket's rate whether spent or not, so a lease lasts the horizon).
//!
//! **Never more than the bucket.** A grant admits its units in Redis
//! exactly as a check of that cost would, and gives them consecutive
//! slots in the bucket's schedule (GCRA: one unit per interval `T`). The
//! process spends a unit only after Redis granted it and no later than its
//! slot starts, on its estimate of Redis's clock, which is never earlier
//! than Redis's: refreshed by every reply to the lease's calls, and
//! allowing for the two hosts' clocks parting by up to 2 000 ppm since it
//! (twice what NTP's slewing at its limit of 500 ppm on each host can do;
//! `a_slow_local_clock_never_spends_a_slot_that_has_started`). On Redis
//! Cluster that is the clock of the node holding the client's key, whose
//! slots they are, whatever the other nodes' clocks read: a node whose
//! clock runs ahead of the others' still holds each lease it granted to
//! the bound (`a_lease_is_spent_on_the_clock_of_the_node_that_granted_it`).
//! So the fleet's
//! admissions, leased or not, keep the bucket's exact bound in every span
//! `[a, b]`: at most `capacity + ⌊(b − a)/T⌋`
//! (`the_fleet_never_admits_beyond_the_exact_bound`: three processes,
//! random checks, waits and resets, every span checked;
//! `never_beyond_the_quota_across_processes_with_leases_one_killed`:
//! four real processes, one killed while it holds a lease), on nodes
//! whose clocks agree (a slot moved to a node whose clock differs: see
//! "When Redis fails" below).
//!
//! **What leases cost in accuracy.** With `P` processes leasing a client,
//! `U` = `max_units`, a horizon `H` and the bucket's interval `T`, let
//! `L = max(U, ⌈H/T⌉)`:
//!
//! - a process holds at most `L` units unspent, so a process may be
//!   denied while the others hold at most `(P − 1) · L` units between
//!   them;
//! - a process that dies loses the units of its lease, at most `L`, and
//!   nothing more: they lapse as their slots pass, within one refill of
//!   the bucket (the four-process test: the fleet falls short of the quota
//!   by exactly the dead process's units);
//! - a unit whose slot passes unspent is gone, as a token that overflows
//!   a full bucket is: when a process spends slower than the bucket's
//!   rate. A grant that does not continue the lease (another process took
//!   units between) waits behind the units left and takes the lease's
//!   place once they are spent or passed, so none lapses for it (but the
//!   units of a lease holding fewer than a check's cost, when that check
//!   moves to the waiting grant, counted in `RedisStats::lease_lapsed`);
//!   the next grant is asked for when the units left are what two round
//!   trips spend at the recent rate (at most a quarter of the grant), and
//!   a grant's size counts the units of both;
//! - when the bucket had no unit to give, checks are denied in the
//!   process until its first unit frees (at most a second); when the
//!   lease is empty, the bucket spent, and a call for more is on its way,
//!   checks are denied at once for at most 1 ms rather than waiting;
//! - unspent units go back to Redis when the client goes quiet for a
//!   horizon, if no process took units after them (the bucket has one
//!   arrival time, no holes); otherwise they lapse.
//!
//! `examples/redis_lease.rs` measures all of this against one call per
//! check (figures in `docs/PERFORMANCE.md`): with four processes outrunning
//! a bucket, the fleet stays within the exact bound and falls short of it
//! by far less than `P · L` plus what lapsed.
//!
//! **When to turn leases on.** For hot clients checked far more often per
//! process than one call per check allows, against a bucket the fleet
//! spends: the lease's units then have slots up to a refill ahead, and a
//! call carries a whole block. Against a bucket far from spent, a unit's
//! slot starts when it is granted and passes at the bucket's rate, so a
//! process that spends slower than that rate lets units lapse and asks
//! more often (fewer round trips than one per check still). Choose the
//! horizon as the time a block should last (tens of milliseconds, well
//! under the bucket's refill: a horizon's refill, `H/T` units, is what a
//! lease may hold), and `max_units` as the share of the bucket one process
//! may hold away from the others.
//!
//! **Control with leases.** A `reset` or `remove` keeps the slots leased
//! to processes theirs, and the bucket restarts full from the end of the
//! latest lease outstanding, at most a refill ahead (at once if none is):
//! granting a slot a lease holds a second time would exceed the bound.
//! This holds whoever resets: every token bucket limiter's `reset` and
//! `remove` read the leases outstanding, whether or not its own builder
//! leases, so an admin process or a replica of a rolling deploy built
//! without `.lease()` keeps the fleet within the bound
//! (`a_reset_by_a_replica_without_leases_keeps_the_slots_leased`, in
//! `tests/redis_leases.rs`: a plain replica resets, removes, and checks
//! one call each and coalesced, while another spends its lease). Checks,
//! coalesced checks and bookings start from the bucket's state in Redis,
//! which every grant moved to the end of its lease, so none of them
//! grants a leased slot again.
//! For a client whose bucket the fleet keeps spent, leases are taken from
//! the far end of the schedule, so a reset frees little until they end:
//! a client you expect to reset at once is better without leases
//! (`a_reset_forgives_all_but_the_units_other_processes_hold`,
//! `a_reset_ends_this_process_s_hold`). `set_quota` gives up this
//! process's leases (their units lapse) and judges the next calls under
//! the new quota, converted as without leases
//! (`set_quota_gives_up_the_lease_and_judges_by_the_new_quota`); so does
//! a client the resolver of `tier_by` moves to another tier, whatever the
//! two tiers' quotas share (a lease is kept only under the very quota it
//! was granted under: interval, capacity, and the quota's generation), so
//! from the move on the client gets at most its new tier's bound
//! (`a_tier_move_of_the_same_interval_gives_up_the_old_tier_s_lease`).
//!
//! **Quotas that differ while leases are out.** Processes that hold a
//! client to different quotas at once (a rolling deploy, `set_quota` on
//! one replica, a tier move each process sees at its next check) convert
//! its state each to its own. Another process may still hold leased
//! units of the client under its quota, so every conversion, by any
//! bucket limiter, leasing or not, keeps the bucket's TAT (and its key's
//! expiry) no earlier than the end of the latest lease outstanding: the
//! leased slots are never granted a second time, and the key never
//! expires, to come back a full bucket, while they may still be spent.
//! A conversion that lowered the TAT before them would let the fleet
//! admit those units on top of the bound
//! (`a_conversion_by_another_quota_keeps_the_bucket_behind_the_leases`;
//! the oracle's `a_shrunk_case_a_lease_outlives_another_replica_s_conversion`:
//! 29 admitted against 28 before). What it costs: a client converted
//! while a lease of it is outstanding waits, at most, until that lease's
//! slots pass, which lie within one refill of the quota they were granted
//! under, or until the lease leaves the leases' record: a horizon after
//! its holder last used it, its units given back if no unit was taken
//! after them; a lease its holder gave up (its own quota changed) leaves
//! it so too (`a_lease_given_up_by_set_quota_leaves_the_leases_set_when_quiet`). Until then the converted bucket
//! holds what the time left to the lease's end leaves under its quota,
//! where without leases it would keep the units it held, up to its
//! capacity: a bucket of 100 a minute with 50 units left (its TAT, and a
//! lease's end, 30 s ahead), converted to 10 a minute, holds 5 rather
//! than 10, and converted to 10 a second it is empty for 29 s rather than
//! full. Without leases outstanding nothing changes. While the client's slot moves between two nodes (the key and
//! its leases' record split for a moment), the leases cannot be read, and
//! a conversion keeps the TAT as written, which holds them all. `peek`
//! reads Redis's state, not this process's lease. When Redis fails, the
//! units already leased are still spent, and the fail policy answers the
//! checks they cannot (`the_units_held_outlive_redis_and_the_fail_policy_answers_the_rest`).
//! A leased check that must wait for its client's call for more units has
//! one timeout in all: it waits for that call until its timeout, and a
//! call of its own is cut off at the same instant, so it is answered (by
//! Redis, or by the fail policy) within the timeout like any other check
//! (`a_check_waiting_for_another_s_call_answers_within_one_timeout`,
//! `leased_checks_answer_within_their_timeout_under_a_paused_server`).
//!
//! **When Redis loses its state mid-lease.** The units of a lease live in
//! the process that holds them, not in Redis. If Redis loses the client's
//! state while leases are out (`FLUSHALL`, a restart without persistence,
//! a failover to a replica that had not received the latest grant), the
//! bucket restarts full while those units are still spent: from the loss
//! on, the fleet admits at most the bucket's exact bound over the span,
//! `capacity + ⌊(b − a)/T⌋`, plus the units leased out when the state was
//! lost, at most `L` per process holding a lease of the client
//! (`a_flush_mid_lease_admits_at_most_the_bound_and_the_units_leased_out`:
//! after a `FLUSHALL`, one process gets a full bucket and the other still
//! spends its lease). Without leases the same loss restarts the bucket
//! full too, with nothing beyond the bound from the loss on: the
//! allowance is what leases add.
//! Any algorithm but a token bucket alone is refused at `build` with
//! `ConfigError::Conflict` (a window's count or a log's entries cannot be
//! handed out ahead of the requests without admitting them in the wrong
//! window), as are sizes out of range
//! (`leases_of_anything_but_a_bucket_or_out_of_range_are_refused`).
//!
//! # When Redis fails
//!
//! Each sentence here is a test's assertion (named in brackets, in the
//! repository's `tests/` and `src/redis/`).
//!
//! - A check that Redis does not answer within the timeout, or that cannot
//!   reach Redis, is answered by the fail policy: `FailOpen` admits it
//!   with the full quota (a pair: both limits full), `FailClosed` returns
//!   the error (the tower layer answers `503`), `Local` decides it with an
//!   in-process limiter of the same quotas
//!   (`redis_down_each_policy_answers_in_time_then_recovers_by_itself`,
//!   `a_paused_server_trips_the_timeout`,
//!   `the_tower_layer_takes_a_redis_limiter`,
//!   `a_pair_reports_both_limits_when_denied_locally_or_failing_open`).
//! - How far a fleet can go over during an outage, per policy: under
//!   `FailClosed`, nowhere (nothing is admitted); under `FailOpen`, without
//!   bound (every check is admitted); under `Local`, each replica decides
//!   alone in process, holding each client to what Redis last told that
//!   replica was left (every answer from Redis, a lease's grant included,
//!   spends the client's in-process state down to it), so a client starts
//!   an outage where the fleet left it, not from a full quota. Redis never hears of what was
//!   admitted in process, and grants what it still holds once it is back:
//!   over the exact bound, an outage admits a client at most the sum over
//!   the replicas of what each last heard was left, plus each replica's
//!   refill during the outage. With `RedisBuilder::local_share(n)` on a
//!   fleet of `n`, each replica holds the client to an `n`-th of what it
//!   last heard and refills at an `n`-th of the rate: the fleet admits at
//!   most the mean, over the replicas, of what each last heard was left,
//!   plus one refill of the outage's duration (each share rounded down,
//!   a replica's refill up to its next whole unit). What a replica last
//!   heard is what Redis told it at its own last answer for the client:
//!   a replica that heard early, before the others spent the client's
//!   quota, still holds its share of what it heard then, so the fleet may
//!   admit more than was left when the outage began, at most one
//!   `n`-th of what the early replicas heard each (four replicas, one that
//!   heard 999 of 1 000 left and three that spent the rest: 249 admitted
//!   by the first, none by the others, where Redis had none left;
//!   `an_outage_admits_each_replica_s_share_of_what_it_last_heard`). A
//!   fleet whose replicas all heard last when the outage began admits at
//!   most what was left then, plus the refill
//!   (`an_outage_starts_each_client_from_what_redis_last_said`,
//!   `a_pause_costs_a_fleet_of_processes_no_more_than_was_left`,
//!   `a_local_share_keeps_a_fleet_at_one_quota_during_an_outage`,
//!   `redis_down_each_policy_answers_in_time_then_recovers_by_itself`). A
//!   client a replica never heard of starts from its full share.
//! - A slow reply is told from an unreachable Redis: a call that times
//!   out after Redis answered another call of the limiter's (sent
//!   earlier, answered while it waited) has its own check answered by the
//!   fail policy, and opens nothing; one that times out with no reply
//!   since it was sent, or that cannot reach Redis, opens the breaker
//!   (`a_timeout_while_redis_answers_another_call_opens_nothing`).
//! - After such a failure, checks skip Redis for a backoff that doubles
//!   with each failed probe, one probe at a time, so an outage never
//!   becomes a retry storm; when Redis is back the limiter recovers by
//!   itself (`one_probe_at_a_time_with_capped_exponential_backoff`,
//!   `redis_down_each_policy_answers_in_time_then_recovers_by_itself`,
//!   `a_probe_dropped_before_its_first_poll_lets_the_next_one_go`).
//! - On Redis Cluster each node is judged on its own, with a breaker of
//!   its own: a primary frozen or killed opens the breaker for the clients
//!   whose slots it holds, and the other nodes' replies neither keep it
//!   closed nor open theirs; their clients are answered by Redis while the
//!   cluster serves them (`cluster-require-full-coverage no`; by default
//!   the cluster refuses every key once it marks a node failed)
//!   (`a_slow_or_dead_node_opens_its_own_breaker_only`: a primary of three
//!   stopped by `SIGSTOP`, then killed). The limiter learns which node
//!   holds which slot from `CLUSTER SLOTS`, read when it is built, every
//!   ten seconds, and a second after a breaker opens or closes or a call
//!   fails or times out; until the first reading, and for a slot it does
//!   not place, the slots share one breaker, as a single server's checks
//!   do. So after a slot moves, its clients are judged by their new node
//!   within about a second of the old node's first failure, and their
//!   replies do not hold the old node's breaker closed
//!   (`a_moved_slot_s_clients_follow_it_and_leave_the_lost_node_s_breaker_to_open`). The table of slots and the
//!   breakers of up to 255 nodes take at most 28 KiB per limiter
//!   (`a_cluster_s_breakers_and_slot_table_take_about_28_kib`).
//! - A replica can start while Redis is down: with a connection made on
//!   first use (`ConnectionManager::new_lazy_with_config`, as the
//!   `tollgate::redis` example does), the limiter builds, its checks are
//!   answered by the fail policy, and once Redis is up it answers them,
//!   with no restart
//!   (`a_limiter_started_while_redis_is_down_reaches_it_once_it_is_up`).
//!   `ConnectionManager::new` instead fails while Redis is down, so a
//!   replica that waits for it stays down with it.
//! - A check waiting for its client's call is answered by the fail policy
//!   if its batch's call fails, or once the timeout has passed since it
//!   was first polled: a server lost while checks wait fails the call in
//!   flight and then the batch, and each check is answered, none hanging
//!   (`a_server_killed_while_checks_wait_answers_each_by_the_fail_policy`,
//!   `a_server_killed_mid_batch_answers_each_check_by_the_fail_policy`).
//! - A check that timed out may still be recorded when Redis gets to it,
//!   which errs toward denying (`a_paused_server_trips_the_timeout`).
//! - A value under a client's key that the limiter cannot read (another
//!   program's, or of another type) fails that client's checks only, and
//!   is never admitted by `FailOpen`: `FailOpen` and `FailClosed` answer
//!   with the error (`Corrupt`), `Local` decides in process; other clients
//!   are answered by Redis, with no backoff, their checks coalesced with
//!   that client's or not
//!   (`junk_under_a_key_is_a_clear_error_for_that_client_only`,
//!   `a_foreign_value_is_never_admitted_under_fail_open`,
//!   `a_foreign_value_fails_only_its_client_in_a_batch_closed`).
//! - No client id or prefix can split a key from its slot: a pair on a
//!   cluster limits every id (`a_pair_on_a_cluster_limits_every_client_id`,
//!   `nested_prefixes_never_share_a_key`).
//! - A script Redis lost (a restart, `SCRIPT FLUSH`) is sent again, and
//!   counted (`round_trips_count_every_command_sent`).
//! - A state deleted behind the limiter's back (a `FLUSHALL`) is believed
//!   by the deny shortcut for at most a second
//!   (`the_shortcut_outlives_a_vanished_state_by_at_most_a_second`); a
//!   `reset` by this process, even racing a check in flight, leaves
//!   nothing behind (`a_reset_forgets_a_denial_written_by_a_check_in_flight`).
//! - A failover of a cluster's primary to its replica under load loses no
//!   admission and admits nothing twice
//!   (`a_failover_under_load_admits_nothing_over_the_quota`).
//! - A booking's `RedisReservation::remaining_wait` is read on the clock
//!   of the node that booked it, never past the instant, whatever another
//!   node's clock reads
//!   (`a_booking_waits_on_the_clock_of_the_node_that_booked_it`).
//! - A client's state is judged on the clock of the node that holds its
//!   key. A token bucket alone (no second limit) keeps its own clock
//!   across a slot moved by `MIGRATE` (a reshard) to a node whose clock
//!   differs: the key's expiry, which `MIGRATE` carries as a time to live,
//!   tells the new node how far its clock is from the writer's, to within
//!   3 ms, and the bucket's state is carried onto the new node's clock. So
//!   a move costs at most `⌈3 ms / T⌉` units beyond the exact bound
//!   (`a_slot_moved_to_a_clock_ahead_keeps_the_bucket_s_bound`: a node
//!   2 s ahead, a bucket of 100 at 10 ms a unit, with and without leases;
//!   judged on the new clock as it stood, the client got the whole bucket
//!   again, 202 admitted where the bound was 103), and a client moved to
//!   a node behind keeps what it had left
//!   (`a_slot_moved_to_a_clock_behind_admits_what_is_left`: 99 of 100
//!   left, admitted; it was refused for a second). A conversion's
//!   compare-and-set (a quota of other settings meeting the state, a
//!   booking) reads the key, then writes it in a second call: where the
//!   slot moved between the two, the write is refused, the key's expiry
//!   no longer the one read, and the state is read again where it lives.
//!   The oracle's cluster drives move slots live among every other
//!   operation, each move allowed those units and the units leased out
//!   at it. Not carried: the
//!   windows, the log and a pair, judged on the new node's clock as
//!   written (a node `d` ahead may end their windows up to `d` early, one
//!   `d` behind late); the instants a process keeps of the old node's
//!   clock (a booking's instant, a lease's slots and their record in
//!   Redis); and a failover to a replica, which holds the key's expiry as
//!   an instant. Keep the nodes' clocks in step (NTP). On one server no
//!   slot moves, and the scripts do not read the key's expiry (a command
//!   less a check): a key copied by hand to another server (`MIGRATE`,
//!   `DUMP` and `RESTORE` with its time to live) is judged on that
//!   server's clock as written.
//! - A quota set while Redis is down changes the `Local` fallback's quota,
//!   keeping each client's state there
//!   (`set_quota_during_an_outage_keeps_the_fallback_state`; a sliding
//!   window log, whose state has no conversion, starts a new in-process
//!   log that holds each client to what the one before still has left for
//!   it, at most the new limit, until that one's window has passed:
//!   `set_quota_during_an_outage_keeps_the_log_fallback_s_holds`); a booking
//!   made while Redis is down is ready at once and charges nothing under
//!   `FailOpen`, fails under `FailClosed`, and is booked by the fallback
//!   under `Local` (`each_fail_policy_answers_a_booking_while_redis_is_down`).
//! - **Upgrading.** The scripts read a word algorithm's state in both
//!   forms: the decimal text that earlier releases write, and a packed
//!   form (its numbers as 8-byte doubles) that they write with
//!   `RedisBuilder::packed_state(true)`, about 3 k fewer instructions
//!   inside Redis per check. Each write
//!   leaves the state in its writer's form
//!   (`a_batch_of_bucket_checks_decides_as_checks_one_by_one` and its
//!   siblings run a packed writer beside a text one, put states back in
//!   the text form between steps, and compare every decision and state).
//!   A process of an earlier release cannot read a packed state: it
//!   answers such a client as it answers any value it cannot read, with
//!   an error (`Corrupt`; `Protocol` where its settings differ from the
//!   writer's), by its fail policy. So a rolling upgrade keeps the
//!   default (text), which every release reads; turn `packed_state` on
//!   once every process sharing the prefix runs this release or a later
//!   one.
//! - Replicas whose settings differ (a rolling deploy that changes a limit,
//!   a rate or a window) keep limiting: each converts the other's state to
//!   its own, and never lowers what a client spent
//!   (`a_window_changed_under_one_prefix_stays_limited`,
//!   `a_lower_limit_denies_a_count_above_it_and_a_higher_one_admits_the_rest`,
//!   and the replicas proptest `lua_equal`). A process converts a state
//!   another process wrote at the instant it reads it: it cannot know
//!   until when the writer judged by the old settings. So even when every
//!   replica changes a quota at one instant, a client last written by
//!   another replica under the old quota is judged by the old quota until
//!   its next check after the change, and converted then; one process
//!   converts its own states at its change. Either way the conversion
//!   never adds to what the client may take.
//!
//! # What differs from the in-process limiters
//!
//! One process, one limiter, the same operations: the differential test
//! (`src/redis/tests/differ.rs`) finds no other difference than these.
//! The same test runs fleets of up to three replicas built every way
//! (coalescing or not, packed states or text) on one clock, instants
//! repeating, each operation on any of them, checks of several clients at
//! once among them: every answer is the one limiter's. It draws quota
//! changes for one replica alone (see above), and the deny shortcut there
//! too: a replica's shortcut keeps what Redis last told that process, so
//! its denials may tell figures that another process's spending since has
//! made stale, and another process's reset or cancel may go unseen for up
//! to a second (`the_shortcut_outlives_a_vanished_state_by_at_most_a_second`).
//!
//! | What | In-process | On Redis | Why | Shown by |
//! |---|---|---|---|---|
//! | Waits (`retry_after`, `replenish_after`, a booking's wait) | to the nanosecond | rounded up to the microsecond | a script reads time in µs; the next instant it can admit | every comparison in `differ` rounds the in-process wait up |
//! | The answer of `reset` and `remove` | whether the limiter held the client (a reset one is still held) | whether Redis held a key (deleted now; a key also expires when idle) | Redis deletes the key | `reset_answers_whether_a_key_was_deleted` |
//! | Cancelling a booking after another client's `reset` or `remove` | gives nothing back if that client shares its stripe (1 in 256) | gives back by the tail rule alone | the in-process limiter tracks replacements per stripe to keep a state one word | `a_reset_of_another_client_never_ends_a_bookings_cancel_on_redis` |
//! | A larger quota meets a token bucket's client long after its bucket was full again: a raise, a move to a larger tier, another replica's larger quota | held until idle for its limiter's longest-tier horizon, converted to the old capacity plus the refill since it filled; forgotten after, to come back fresh | the key lingers, past the instant its bucket is full again, the longest refill (capacity × interval) of every quota that wrote it, and converts the same way until then; expired after, to come back fresh | Redis forgets by each key's expiry, which only its writers set: a fresh bucket after a refill of every quota that admitted keeps the bound of every span (the key of a bucket lingers that much longer, idle) | `a_shrunk_case_a_raise_finds_the_key_expired_at_the_lower_capacity` and `a_shrunk_case_a_raised_free_tier_finds_the_key_expired` in `tests/oracle_redis` (50 admitted against a bound of 44, and 34 against 32, when keys expired at the idle instant) |
//! | Cancelling a sliding log's booking some of whose entries a later booking claimed | takes its expiry out of as many slots as it claimed, of those that hold it, whoever wrote it (another booking or check of the same instant), and puts back the expiries it replaced, the latest first | takes out its own entries that are still there, and puts back as many of the entries it replaced, the latest-expiring first | in-process a slot holds an expiry and nothing else; Redis's entries carry the booking's token | `log_bookings_are_served_in_the_order_they_were_made`; in-process, `a_log_cancel_gives_back_the_same_whichever_slots_held_what` |
//!
//! Beyond one process there is no in-process counterpart, and these hold:
//! a quota change is carried over at its instant as this process reads
//! Redis's clock (within a round trip); a check in flight when its quota
//! changes is converted at the change's instant, or later; a client that
//! the resolver moves to another tier is converted at its first request
//! there; more than 64 quota changes between two requests of a client
//! convert it once, at the request; and the deny shortcut's figures are
//! those of the state this process last saw.
