//! The two lock-based designs tollgate is measured against. They live here,
//! in the benchmark support code, and never in the library.
//!
//! * [`MutexMap`]: a faithful port of the seed's Python design
//!   (`rate-limiter-lld`): a map guarded for its *structure* only, one
//!   `Arc<Mutex<State>>` per client, and double-checked creation of a new
//!   client's state. Python reads the dict without a lock (the GIL makes that
//!   safe); Rust cannot read a `HashMap` that another thread may be resizing,
//!   so the unlocked fast path becomes a shared `RwLock` read, and the
//!   creation path takes the write lock and checks again, exactly as
//!   `_get_state` does. `_get_state` returns the state and the caller then
//!   locks it, so the port clones the `Arc` out of the map and drops the read
//!   lock before taking the client's `Mutex`.
//! * [`GlobalMutex`]: one `Mutex<HashMap<K, State>>` for everything: the
//!   design the seed rejects ("the LRU Cache approach").
//!
//! Both keep the seed's arithmetic (floating-point tokens for the token
//! bucket, window starts taken from the first request rather than aligned
//! to a clock origin) and, like the seed, read the clock *inside* the
//! client's lock. To compare designs rather than incidental choices, they
//! read the same clock as tollgate ([`MonotonicClock`], the TSC through
//! `quanta`) and hash with the same hasher (foldhash's quality variant); a
//! port using `Instant::now()` and SipHash would be slower still.
//!
//! Both implement [`tollgate::RateLimiter`], so the benchmarks drive every
//! implementation through the same trait, statically dispatched.
//!
//! Adding an algorithm: implement [`SeedState`] for its per-client state.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tollgate::{Clock, MonotonicClock};

type Hasher = foldhash::quality::RandomState;

/// One client's state under the seed's design, and the algorithm that
/// updates it. `allow` runs with the client's lock held.
pub trait SeedState: Send + 'static {
    /// The algorithm's settings, shared by every client.
    type Config: Send + Sync;
    /// The state of a client first seen at `now`.
    fn fresh(config: &Self::Config, now: u64) -> Self;
    /// The seed's `allow_request` body, under the lock.
    fn allow(&mut self, config: &Self::Config, now: u64) -> bool;
}

/// Token bucket settings: `rate` tokens per nanosecond, at most `capacity`.
#[derive(Debug, Clone, Copy)]
pub struct BucketConfig {
    rate: f64,
    capacity: f64,
}

impl BucketConfig {
    /// `tokens` every `per`, holding at most `capacity`.
    pub fn new(tokens: u64, per: Duration, capacity: u64) -> Self {
        Self {
            rate: tokens as f64 / per.as_nanos() as f64,
            capacity: capacity as f64,
        }
    }
}

/// The seed's `TokenBucketState`: float tokens and the last refill time.
#[derive(Debug)]
pub struct BucketState {
    tokens: f64,
    last_refill: u64,
}

impl SeedState for BucketState {
    type Config = BucketConfig;

    fn fresh(config: &BucketConfig, now: u64) -> Self {
        Self {
            tokens: config.capacity,
            last_refill: now,
        }
    }

    #[inline]
    fn allow(&mut self, config: &BucketConfig, now: u64) -> bool {
        // `if elapsed > 0` guards against a backward clock step.
        if now > self.last_refill {
            let elapsed = (now - self.last_refill) as f64;
            self.tokens = config.capacity.min(self.tokens + elapsed * config.rate);
            self.last_refill = now;
        }
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Window settings, shared by the sliding window counter and fixed window.
#[derive(Debug, Clone, Copy)]
pub struct WindowConfig {
    limit: u64,
    window: u64,
}

impl WindowConfig {
    /// At most `limit` requests per `window`.
    pub fn new(limit: u64, window: Duration) -> Self {
        Self {
            limit,
            window: u64::try_from(window.as_nanos()).unwrap_or(u64::MAX),
        }
    }
}

/// The seed's `WindowState` for the sliding window counter.
#[derive(Debug)]
pub struct SlidingState {
    prev_count: u64,
    curr_count: u64,
    curr_window_start: u64,
}

impl SeedState for SlidingState {
    type Config = WindowConfig;

    fn fresh(_: &WindowConfig, now: u64) -> Self {
        Self {
            prev_count: 0,
            curr_count: 0,
            curr_window_start: now,
        }
    }

    #[inline]
    fn allow(&mut self, config: &WindowConfig, now: u64) -> bool {
        let w = config.window;
        let mut elapsed = now.saturating_sub(self.curr_window_start);
        if elapsed >= w {
            let passed = elapsed / w;
            // More than one window idle: the previous one is stale.
            self.prev_count = if passed == 1 { self.curr_count } else { 0 };
            self.curr_count = 0;
            self.curr_window_start += passed * w;
            elapsed = now - self.curr_window_start;
        }
        let prev_weight = (1.0 - elapsed as f64 / w as f64).max(0.0);
        let estimated = self.curr_count as f64 + self.prev_count as f64 * prev_weight;
        if estimated < config.limit as f64 {
            self.curr_count += 1;
            true
        } else {
            false
        }
    }
}

/// A fixed window in the seed's style (the seed describes it but does not
/// write it out): one count, reset when a window has passed.
#[derive(Debug)]
pub struct FixedState {
    count: u64,
    window_start: u64,
}

impl SeedState for FixedState {
    type Config = WindowConfig;

    fn fresh(_: &WindowConfig, now: u64) -> Self {
        Self {
            count: 0,
            window_start: now,
        }
    }

    #[inline]
    fn allow(&mut self, config: &WindowConfig, now: u64) -> bool {
        let elapsed = now.saturating_sub(self.window_start);
        if elapsed >= config.window {
            self.window_start += elapsed / config.window * config.window;
            self.count = 0;
        }
        if self.count < config.limit {
            self.count += 1;
            true
        } else {
            false
        }
    }
}

/// The seed's design: a structure-only map lock and a `Mutex` per client.
pub struct MutexMap<S: SeedState, K> {
    config: S::Config,
    clock: MonotonicClock,
    /// Guards the map's structure only, never a client's state.
    states: RwLock<HashMap<K, Arc<Mutex<S>>, Hasher>>,
}

impl<S: SeedState, K: Hash + Eq + Clone> MutexMap<S, K> {
    /// An empty limiter.
    pub fn new(config: S::Config) -> Self {
        Self {
            config,
            clock: MonotonicClock::new(),
            states: RwLock::new(HashMap::with_hasher(Hasher::default())),
        }
    }

    /// The seed's `_get_state`: a shared read on the fast path; on a miss,
    /// the write lock and a second look before inserting.
    #[inline]
    fn state(&self, client_id: &K) -> Arc<Mutex<S>> {
        if let Some(state) = self.states.read().unwrap().get(client_id) {
            return Arc::clone(state);
        }
        self.create(client_id)
    }

    #[cold]
    fn create(&self, client_id: &K) -> Arc<Mutex<S>> {
        let mut states = self.states.write().unwrap();
        let state = states.entry(client_id.clone()).or_insert_with(|| {
            Arc::new(Mutex::new(S::fresh(&self.config, self.clock.now_nanos())))
        });
        Arc::clone(state)
    }
}

impl<S: SeedState, K: Hash + Eq + Clone + Send + Sync> tollgate::RateLimiter<K> for MutexMap<S, K> {
    #[inline]
    fn allow_request(&self, client_id: &K) -> bool {
        let state = self.state(client_id);
        // Per-client lock: other clients proceed uncontended.
        let mut state = state.lock().unwrap();
        let now = self.clock.now_nanos();
        state.allow(&self.config, now)
    }
}

/// One `Mutex` around one map holding every client's state.
pub struct GlobalMutex<S: SeedState, K> {
    config: S::Config,
    clock: MonotonicClock,
    states: Mutex<HashMap<K, S, Hasher>>,
}

impl<S: SeedState, K: Hash + Eq + Clone> GlobalMutex<S, K> {
    /// An empty limiter.
    pub fn new(config: S::Config) -> Self {
        Self {
            config,
            clock: MonotonicClock::new(),
            states: Mutex::new(HashMap::with_hasher(Hasher::default())),
        }
    }
}

impl<S: SeedState, K: Hash + Eq + Clone + Send + Sync> tollgate::RateLimiter<K>
    for GlobalMutex<S, K>
{
    #[inline]
    fn allow_request(&self, client_id: &K) -> bool {
        let mut states = self.states.lock().unwrap();
        let now = self.clock.now_nanos();
        // Look up by reference first so a known client costs no key clone.
        if let Some(state) = states.get_mut(client_id) {
            return state.allow(&self.config, now);
        }
        states
            .entry(client_id.clone())
            .or_insert_with(|| S::fresh(&self.config, now))
            .allow(&self.config, now)
    }
}
