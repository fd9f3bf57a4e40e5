//! The builder's memory settings: the most clients a limiter holds, what
//! a new client meets when it is full, and the sweeps that make room.

use super::Builder;
#[cfg(doc)]
use crate::limiter::Limiter;
use crate::memory::{AutoSweep, Overflow};

impl<A, K, C> Builder<A, K, C> {
    /// A hard cap: the limiter holds at most `clients` clients at once.
    /// Unset by default (the map is then bounded by sweeping alone).
    ///
    /// A new client that finds the map full first makes idle clients go
    /// (which changes no decision); if there are none, the
    /// [`overflow`](Builder::overflow) policy decides, and
    /// [`Limiter::stats`] counts it. [`build`](Builder::build) rejects 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .max_clients(1_000_000)
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn max_clients(mut self, clients: u64) -> Self {
        self.memory.max_clients = Some(clients);
        self
    }

    /// What to do with a new client when the [`max_clients`](Builder::max_clients)
    /// cap is reached and no held client is idle. Defaults to
    /// [`Overflow::EvictSampled`] with a sample of 5, the only policy that
    /// may change a tracked client's decisions; see [`Overflow`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Overflow, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(60))
    ///     .max_clients(1)
    ///     .overflow(Overflow::AdmitUntracked)
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// assert!(limiter.allow_request("bob"), "admitted, untracked");
    /// assert!(limiter.allow_request("bob"), "and still untracked");
    /// assert!(!limiter.allow_request("alice"), "alice is tracked");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn overflow(mut self, policy: Overflow) -> Self {
        self.memory.overflow = policy;
        self
    }

    /// Adds paced sweeping: after every `every` new clients, the thread
    /// inserting the last visits `slice` entries of the map (from where the
    /// previous slice stopped) and forgets those idle for a whole horizon.
    /// No background thread is involved, and known clients never sweep.
    ///
    /// Without it (the default), idle clients are still forgotten as new
    /// ones arrive: whenever a new client fills a shard's table, the
    /// rebuild that makes room leaves behind the clients idle for a whole
    /// horizon instead of moving them, and at most once a horizon a new
    /// client passes over the whole map. So after any call the map holds
    /// no more clients than made a request within the three horizons
    /// before the latest new client arrived, or since, plus 512 (see the
    /// [memory guide](crate::guide::memory), "The bound", for exactly what
    /// is bounded, and when to call [`Limiter::sweep`]). During a flood of
    /// new clients, paced slices keep the map within about
    /// `slice / (slice − every)` times the clients that are not idle, plus
    /// those that became idle since the cursor last passed, at the cost of
    /// `slice / every` entries visited per new client. [`build`](Builder::build) requires `every ≥ 1` and
    /// `slice ≥ 2 · every`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::FixedWindow;
    ///
    /// let limiter = FixedWindow::builder()
    ///     .limit(10)
    ///     .window(Duration::from_secs(1))
    ///     .auto_sweep(16, 128)
    ///     .build()?;
    /// assert!(limiter.allow_request("alice"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn auto_sweep(mut self, every: u64, slice: u64) -> Self {
        self.memory.auto_sweep = Some(AutoSweep { every, slice });
        self.memory.sweep_on_rebuild = true;
        self
    }

    /// Turns incremental sweeping off: the rebuilds', the new clients'
    /// passes over the map, and any paced slices
    /// ([`auto_sweep`](Builder::auto_sweep)): only [`Limiter::sweep`] and
    /// a full cap forget clients. Without a
    /// [`max_clients`](Builder::max_clients) cap, the map then grows until
    /// `sweep` is called.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(1))
    ///     .no_auto_sweep()
    ///     .clock(clock.clone())
    ///     .build()?;
    /// for id in 0..100 {
    ///     let _ = limiter.allow_request(&id.to_string());
    /// }
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(limiter.len(), 100);
    /// assert_eq!(limiter.sweep(), 100);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn no_auto_sweep(mut self) -> Self {
        self.memory.auto_sweep = None;
        self.memory.sweep_on_rebuild = false;
        self
    }
}
