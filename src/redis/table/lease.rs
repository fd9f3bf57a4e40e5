//! The lease table: each client's lease in this process (its
//! [`LeaseCell`] and the figures that size its next grant), and the
//! settings, [`Lease`]. The calls that grant and give back are
//! the `lease` floor's.

use core::fmt;
use core::hash::BuildHasher;
use core::time::Duration;
use std::sync::Arc;

use papaya::HashMap;
use tokio::sync::Notify;

use crate::cell::LeaseCell;
use crate::error::ConfigError;
use crate::redis::script::lua::LEASES_SUFFIX;
use crate::redis::script::spec::{Half, Spec, WordSpec};
use crate::redis::wire::call::{reading, Clock, Script};
use crate::sync::{AtomicBool, AtomicU128, AtomicU64, Ordering};

/// How a Redis limiter leases a token bucket's units
/// ([`RedisBuilder::lease`](crate::redis::RedisBuilder::lease)): each process
/// takes a block of a client's units in one call and spends it locally,
/// so that a hot client costs a call per block rather than per check.
///
/// The block is sized from the process's recent rate for the client: the
/// units it would spend in `horizon`, within `[1, max_units]`; while the
/// bucket has room, a block reaches at least `horizon` ahead in the
/// bucket's schedule. A larger horizon saves calls and holds more units
/// away from the other processes; see the guide's Redis chapter
/// ([`crate::guide::redis`]) for the bound on what that costs in
/// accuracy.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::redis::Lease;
///
/// let lease = Lease::new(Duration::from_millis(50)).max_units(64);
/// assert_eq!(lease.horizon(), Duration::from_millis(50));
/// assert_eq!(lease.units(), Some(64));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    horizon: Duration,
    max_units: Option<u64>,
    max_clients: usize,
}

impl Lease {
    /// Leases sized for `horizon` of the process's recent rate, at most a
    /// tenth of the bucket's capacity (at least 1) each, for at most 65 536
    /// clients at once per limiter (further clients are checked one call
    /// each).
    #[must_use]
    pub fn new(horizon: Duration) -> Self {
        Self {
            horizon,
            max_units: None,
            max_clients: 1 << 16,
        }
    }

    /// The most units one lease holds: at least 1, at most the bucket's
    /// capacity ([`build`](crate::redis::RedisBuilder::build) checks).
    #[must_use]
    pub fn max_units(mut self, units: u64) -> Self {
        self.max_units = Some(units);
        self
    }

    /// The most clients holding a lease in this process at once: a
    /// client beyond them is checked one call per check, as without
    /// leases.
    #[must_use]
    pub fn max_clients(mut self, clients: usize) -> Self {
        self.max_clients = clients;
        self
    }

    /// The horizon a lease is sized for.
    #[must_use]
    pub fn horizon(&self) -> Duration {
        self.horizon
    }

    /// The most units one lease holds, if set (else a tenth of the
    /// capacity).
    #[must_use]
    pub fn units(&self) -> Option<u64> {
        self.max_units
    }

    /// The settings checked against the limiter's spec.
    pub(crate) fn validate(self, spec: &Spec) -> Result<Valid, ConfigError> {
        let Spec::One(half) = spec else {
            return Err(ConfigError::Conflict {
                field: "lease",
                reason: "a lease holds a token bucket's units: the windows, the log and two limits at once have no units to hand out ahead of the requests",
            });
        };
        let WordSpec::Bucket(_) = half.ns else {
            return Err(ConfigError::Conflict {
                field: "lease",
                reason: "a lease holds a token bucket's units: a window's count cannot be handed out ahead of the requests without admitting them in the wrong window",
            });
        };
        let (interval, capacity) = (half.a, half.b);
        let horizon_us = u64::try_from(self.horizon.as_micros()).unwrap_or(u64::MAX);
        ConfigError::check_range(
            "lease",
            u128::from(horizon_us),
            (1, u128::from(capacity.saturating_mul(interval))),
            "µs",
            "a lease's horizon is at least 1 µs and at most the bucket's refill time",
        )?;
        let max_units = self.max_units.unwrap_or((capacity / 10).max(1));
        ConfigError::check_range(
            "lease",
            u128::from(max_units),
            (1, u128::from(capacity)),
            "units",
            "a lease holds at least 1 unit and at most the bucket's capacity",
        )?;
        ConfigError::check_range(
            "lease",
            self.max_clients as u128,
            (1, 1 << 24),
            "clients",
            "each client holding a lease takes about 300 bytes",
        )?;
        Ok(Valid {
            horizon_us,
            max_units,
            max_clients: self.max_clients,
        })
    }
}

/// A lease's settings, validated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Valid {
    pub(crate) horizon_us: u64,
    pub(crate) max_units: u64,
    pub(crate) max_clients: usize,
}

/// A leasing limiter's scripts.
pub(crate) struct LeaseScripts {
    pub(crate) grant: Script,
    pub(crate) give_back: Script,
}

/// The mark of a reading in [`Entry`]'s `clock`, its top bit: that of the
/// local instant its call was sent, ns since the limiter was built (or the
/// test clock's reading), which stays below 2<sup>63</sup>. So a reading
/// whose two halves are both 0 (a test clock at 0) is still one.
const READ: u128 = 1 << 127;

/// One client's lease in this process. The cell and the count of units
/// spent share a cache line, which a spend already holds.
#[repr(C, align(64))]
pub(crate) struct Entry {
    pub(crate) cell: LeaseCell,
    /// Units spent here, ever.
    pub(crate) used: AtomicU64,
    /// `used` when the last call asked.
    pub(crate) used_then: AtomicU64,
    /// A call for more is on its way (one at a time).
    pub(crate) asking: AtomicBool,
    /// Wakes the checks waiting for that call.
    pub(crate) answered: Notify,
    /// When the last call asked (µs).
    pub(crate) asked_at: AtomicU64,
    /// The last grant's size.
    pub(crate) last: AtomicU64,
    /// Units left at which to ask ahead (see `ahead_at`).
    pub(crate) ahead: AtomicU64,
    /// The sizing figures of the call on its way: units spent since the
    /// call before, over how many µs.
    pub(crate) pace: (AtomicU64, AtomicU64),
    /// The last call got less than it asked for: the bucket is spent, so
    /// a check that finds the lease empty while a call is on its way is
    /// denied at once rather than waiting for it.
    pub(crate) dry: AtomicBool,
    /// When, as Redis last said (µs on the clock of the node holding the
    /// client's key), the bucket's next unit beyond this lease frees (0:
    /// not said): a denial by the lease's hold, which lasts at most a
    /// second, says the wait to then, however long.
    pub(crate) frees: AtomicU64,
    /// The quiet timer is armed (see `quiet_later`).
    pub(crate) quiet: AtomicBool,
    /// The range (µs) this lease is registered with in Redis's set of
    /// leases (`0, 0`: none). Written by the one call asking at a time.
    pub(crate) registered: (AtomicU64, AtomicU64),
    /// The quota the lease's units were granted under: the bucket's
    /// capacity (its interval is the cell's) and the generation of the
    /// limiter's quota for the client's tier.
    pub(crate) quota: (u64, u64),
    /// What the latest reply to a call for this lease read of Redis's
    /// clock (see `call::sync_word`), marked by [`READ`] (0: no reply
    /// yet): the clock of the
    /// node holding the client's key, on which its slots lie. The lease is
    /// spent on this reading alone, never on the limiter's, which may be
    /// another node's (Redis Cluster), whose clock may be behind.
    clock: AtomicU128,
}

impl Entry {
    fn new(half: &Half, generation: u64) -> Self {
        Self {
            quota: (half.b, generation),
            cell: LeaseCell::new(half.a),
            used: AtomicU64::new(0),
            used_then: AtomicU64::new(0),
            asking: AtomicBool::new(false),
            answered: Notify::new(),
            asked_at: AtomicU64::new(0),
            last: AtomicU64::new(0),
            ahead: AtomicU64::new(0),
            pace: (AtomicU64::new(0), AtomicU64::new(1)),
            dry: AtomicBool::new(false),
            frees: AtomicU64::new(0),
            quiet: AtomicBool::new(false),
            registered: (AtomicU64::new(0), AtomicU64::new(0)),
            clock: AtomicU128::new(0),
        }
    }

    /// Notes the reply to a call for this lease, judged at `judged` (µs on
    /// the clock of the node that holds the client's key) for a call sent
    /// at `sent` (ns on the local clock): before the call installs what it
    /// got, so that whoever spends the units it granted reads that node's
    /// clock through this reply or a later one.
    pub(crate) fn judged(&self, sent: u64, judged: u64) {
        // Relaxed: any reading of the node's clock bounds that clock from
        // then on, however old (see `Clock::estimate`), so a spend needs
        // no particular one, only one of this node's; the word keeps a
        // reply's two halves together. A spend that loads 0 (a first grant
        // installed since) spends nothing (see `now`).
        self.clock
            .store(reading(sent, judged) | READ, Ordering::Relaxed);
    }

    /// The clock of the node holding the client's key now, µs, as its
    /// latest reply to a call for this lease lets this process estimate
    /// it: never earlier than that node's own reading, rounded up. `None`
    /// before the first reply: nothing of the lease can be spent yet.
    pub(crate) fn now(&self, clock: &Clock) -> Option<u64> {
        // Relaxed: see `judged`.
        let word = self.clock.load(Ordering::Relaxed);
        (word & READ != 0).then(|| clock.estimate(word & !READ) / 1_000 + 1)
    }

    /// Whether the lease's units were granted under the quota `half` of
    /// generation `generation`: the whole quota, not just its interval,
    /// since a tier move or a quota change may keep the interval and
    /// change the capacity, and a unit granted under one quota is never
    /// spent under another.
    pub(crate) fn fits(&self, half: &Half, generation: u64) -> bool {
        self.cell.interval() == half.a && self.quota == (half.b, generation)
    }
}

/// A limiter's leases: each client's, by its bytes.
pub(crate) struct Leases {
    pub(crate) map: HashMap<Vec<u8>, Arc<Entry>, foldhash::fast::RandomState>,
    /// When the map was last swept for room (µs).
    swept: AtomicU64,
    /// The table of recent clients (see `met_recently`).
    recent: Box<[AtomicU64]>,
    hasher: foldhash::fast::RandomState,
    pub(crate) settings: Valid,
    pub(crate) scripts: LeaseScripts,
}

impl fmt::Debug for Leases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leases")
            .field("clients", &self.map.len())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The checks in a row, each within a horizon of the one before, that
/// make a client hot enough for a lease.
const HOT: u64 = 4;

/// The slots of the table of recent clients.
const RECENT: usize = 4_096;

impl Leases {
    pub(crate) fn new(settings: Valid, scripts: LeaseScripts) -> Self {
        Self {
            map: HashMap::with_hasher(foldhash::fast::RandomState::default()),
            swept: AtomicU64::new(0),
            recent: (0..RECENT).map(|_| AtomicU64::new(0)).collect(),
            hasher: foldhash::fast::RandomState::default(),
            settings,
            scripts,
        }
    }

    /// The client's entry, made if there is room (`None`: none). A
    /// client gets one only once hot (see `met_recently`, asked before),
    /// so that a client checked now and then costs what it costs without
    /// leases.
    pub(crate) fn entry(
        &self,
        client: &[u8],
        (half, generation): (&Half, u64),
        (now, clock): (u64, &Clock),
    ) -> Option<Arc<Entry>> {
        if let Some(entry) = self.map.pin().get(client).map(Arc::clone) {
            if entry.fits(half, generation) {
                return Some(entry);
            }
            // Made under another quota (a tier move, a quota change): its
            // units go (they lapse), and the client starts a lease under
            // this one.
            let _ = entry.cell.take_out(0);
            let _ = self
                .map
                .pin()
                .remove_if(client, |_, e| Arc::ptr_eq(e, &entry));
        }
        if self.map.len() >= self.settings.max_clients && !self.sweep(now, clock) {
            return None;
        }
        let entry = Arc::new(Entry::new(half, generation));
        entry.asked_at.store(now, Ordering::Relaxed);
        match self
            .map
            .pin()
            .try_insert(client.to_vec(), Arc::clone(&entry))
        {
            Ok(_) => Some(entry),
            Err(taken) => Some(Arc::clone(taken.current)),
        }
    }

    /// Whether `client` is hot: this check (at `now`, µs, Redis's clock as
    /// estimated: a hint needs no other) is at least its [`HOT`]-th in a
    /// row with no more than a horizon between two, by a table of the
    /// latest client per slot: each slot a tag of the client's hash, the
    /// count and the instant (ms). A collision or a lost update only makes
    /// a client wait a few more checks for its lease.
    pub(crate) fn met_recently(&self, client: &[u8], now: u64) -> bool {
        let hash = self.hasher.hash_one(client);
        let slot = &self.recent[(hash as usize) & (self.recent.len() - 1)];
        let tag = hash >> 40;
        let stamp = (now / 1_000) & 0xFFFF_FFFF;
        // Relaxed: a hint. A load and a store, not a read-modify-write:
        // two checks racing on a slot lose one count at worst.
        let was = slot.load(Ordering::Relaxed);
        let horizon_ms = self.settings.horizon_us / 1_000 + 1;
        let recent =
            was >> 40 == tag && stamp.wrapping_sub(was & 0xFFFF_FFFF) & 0xFFFF_FFFF <= horizon_ms;
        let count = if recent {
            ((was >> 32) & 0xFF).saturating_add(1).min(0xFF)
        } else {
            1
        };
        let new = tag << 40 | count << 32 | stamp;
        if was != new {
            slot.store(new, Ordering::Relaxed);
        }
        count >= HOT
    }

    /// Forgets the entries that hold nothing (no units, no hold, no call
    /// on its way, not met in a horizon), at most once a horizon (and 100
    /// ms): whether there is room now. `now` on this process's clock (µs);
    /// each entry's units and hold judged on its own node's clock, as
    /// estimated (see [`Entry::now`]; before its first reply, every unit
    /// and hold counts as unpassed).
    fn sweep(&self, now: u64, clock: &Clock) -> bool {
        // Relaxed: a rate limit on sweeps, nothing published.
        let last = self.swept.load(Ordering::Relaxed);
        if now < last.saturating_add(self.settings.horizon_us.max(100_000))
            || self
                .swept
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        let horizon = self.settings.horizon_us;
        self.map.pin().retain(|_, e| {
            let redis_now = || e.now(clock).unwrap_or(0);
            // Acquire: as in `leased`.
            e.asking.load(Ordering::Acquire)
                || e.cell.left(redis_now()) > 0
                || e.cell.held(redis_now()).is_some()
                || now <= e.asked_at.load(Ordering::Relaxed).saturating_add(horizon)
        });
        self.map.len() < self.settings.max_clients
    }

    /// The units to ask for at `now`, for a check of `cost` (or ahead of
    /// need): what the recent rate spends in a horizon (twice the last
    /// grant if the lease ran out), within `[cost, max_units − left]`, so
    /// that a lease never holds more than `max_units` unspent (but for a
    /// check that costs more).
    pub(crate) fn want(
        &self,
        entry: &Entry,
        local: u64,
        now: u64,
        cost: u64,
        ran_out: bool,
    ) -> u64 {
        let Valid {
            horizon_us,
            max_units,
            ..
        } = self.settings;
        // Relaxed: figures for sizing, read by the one caller asking. The
        // recent rate: the units spent since the call before this one.
        let asked_at = entry.asked_at.swap(local, Ordering::Relaxed);
        let used = entry.used.load(Ordering::Relaxed);
        let spent = used.saturating_sub(entry.used_then.swap(used, Ordering::Relaxed));
        let last = entry.last.load(Ordering::Relaxed);
        let elapsed = local.saturating_sub(asked_at).max(1);
        entry.pace.0.store(spent, Ordering::Relaxed);
        entry.pace.1.store(elapsed, Ordering::Relaxed);
        let rate_want = u128::from(spent) * u128::from(horizon_us) / u128::from(elapsed);
        let mut want = u64::try_from(rate_want).unwrap_or(u64::MAX);
        // A lease spent whole, not passed: twice as much.
        if ran_out && spent >= last {
            want = want.max(last.saturating_mul(2));
        }
        let room = max_units.saturating_sub(entry.cell.left(now)).max(1);
        want.clamp(1, room).max(cost)
    }

    /// Gives up this process's leases: on a quota change, which judges
    /// new calls under the new quota (the units lapse).
    pub(crate) fn clear(&self) {
        let map = self.map.pin();
        for (_, entry) in map.iter() {
            let _ = entry.cell.take_out(0);
        }
        map.clear();
    }

    /// A reset or removal of `client` by this process: its hold goes.
    pub(crate) fn reset(&self, client: &[u8]) {
        if let Some(entry) = self.map.pin().get(client) {
            entry.cell.reset();
        }
    }
}

/// The sorted set of `key`'s outstanding leases.
pub(crate) fn leases_key(key: &[u8]) -> Vec<u8> {
    let mut set = Vec::with_capacity(key.len() + LEASES_SUFFIX.len());
    set.extend_from_slice(key);
    set.extend_from_slice(LEASES_SUFFIX.as_bytes());
    set
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    /// What `Lease::max_clients`'s bound says of an entry: its own bytes
    /// (a cache line and more), beside the key and the map's node.
    #[test]
    fn an_entry_is_a_few_cache_lines() {
        let size = core::mem::size_of::<Entry>();
        assert!(size <= 256, "{size} bytes");
        assert_eq!(core::mem::align_of::<Entry>(), 64);
    }
}
