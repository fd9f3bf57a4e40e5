//! The local deny shortcut: clients that Redis left with fewer units than
//! a request costs, remembered until their quota next grows (at most
//! [`REACH`]), so that such requests are denied without a round trip.
//!
//! A direct-mapped table of `AtomicU64` slots, each `fingerprint (24 bits)
//! | left (8 bits) | until (32 bits)`: `until` in milliseconds of the
//! breaker's clock, rounded down; `left` the units Redis said remain (a
//! request costing more is sure to be denied until then, since nothing
//! but time gives units back); and the fingerprint 24 bits of the key's
//! hash above the bits that chose the slot. One load answers a check and
//! one store records a denial: no lock, no allocation, and a fixed size. A
//! new entry overwrites whatever its slot held, so a collision costs at
//! most a round trip that the shortcut would have saved. A false denial
//! needs two keys that agree on the slot and on 24 more bits of a keyed
//! hash (about one chance in 2^24 per lookup of a held slot), and lasts at
//! most [`REACH`]; see docs/DESIGN.md.

use core::hash::BuildHasher;
use core::time::Duration;

use crate::sync::{AtomicU64, Ordering};

const MS: u64 = 1_000_000;

/// The longest an entry lasts: a state that vanished from Redis (a
/// `FLUSHALL`, a key deleted by hand) keeps its client denied here at
/// most this long.
pub(crate) const REACH: u64 = 1_000 * MS;

/// The most units an entry can say are left; a denial that leaves more is
/// not remembered.
pub(crate) const LEFT_MAX: u64 = 0xFF;

/// The shortcut's table.
pub(crate) struct DenyCache {
    slots: Box<[AtomicU64]>,
    mask: u64,
    hasher: foldhash::quality::RandomState,
}

impl core::fmt::Debug for DenyCache {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DenyCache")
            .field("slots", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl DenyCache {
    /// A table of `slots` entries, a power of two.
    pub(crate) fn new(slots: usize) -> Self {
        debug_assert!(slots.is_power_of_two());
        Self {
            slots: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            mask: slots as u64 - 1,
            hasher: foldhash::quality::RandomState::default(),
        }
    }

    fn locate(&self, client: &[u8]) -> (&AtomicU64, u64) {
        let hash = self.hasher.hash_one(client);
        // The mask keeps the index below the table's length.
        let slot = &self.slots[(hash & self.mask) as usize];
        (slot, hash >> 40)
    }

    /// How long a request of `cost` from `client` stays denied at `now`
    /// (ns of the breaker's clock), and the units left, if it does.
    pub(crate) fn denied(&self, client: &[u8], now: u64, cost: u64) -> Option<(Duration, u64)> {
        let (slot, fingerprint) = self.locate(client);
        // Relaxed: a slot publishes only itself.
        let word = slot.load(Ordering::Relaxed);
        let until = (word & u64::from(u32::MAX)) * MS;
        let left = (word >> 32) & LEFT_MAX;
        (word >> 40 == fingerprint && now < until && cost > left)
            .then(|| (Duration::from_nanos(until - now), left))
    }

    /// Records that `client` has `left` units (at most [`LEFT_MAX`]) until
    /// `until` (ns), rounded down to the millisecond so that the shortcut
    /// never outlasts the denial.
    pub(crate) fn deny(&self, client: &[u8], until: u64, left: u64) {
        debug_assert!(left <= LEFT_MAX);
        let (slot, fingerprint) = self.locate(client);
        let until_ms = (until / MS).min(u64::from(u32::MAX));
        slot.store(
            fingerprint << 40 | (left & LEFT_MAX) << 32 | until_ms,
            Ordering::Relaxed,
        );
    }

    /// Forgets `client`'s entry, if its slot still holds it.
    pub(crate) fn forget(&self, client: &[u8]) {
        let (slot, fingerprint) = self.locate(client);
        // Relaxed: a slot publishes only itself.
        let word = slot.load(Ordering::Relaxed);
        if word >> 40 == fingerprint {
            let _ = slot.compare_exchange(word, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn denies_until_the_instant_rounded_down_then_lets_through() {
        let cache = DenyCache::new(64);
        assert_eq!(cache.denied(b"alice", 0, 1), None);
        cache.deny(b"alice", 5 * MS + 700_000, 0);
        assert_eq!(
            cache.denied(b"alice", 0, 1),
            Some((Duration::from_millis(5), 0))
        );
        assert_eq!(
            cache.denied(b"alice", 5 * MS - 1, 1),
            Some((Duration::from_nanos(1), 0))
        );
        assert_eq!(cache.denied(b"alice", 5 * MS, 1), None);
        assert_eq!(cache.denied(b"bob", 0, 1), None);
        cache.forget(b"alice");
        assert_eq!(cache.denied(b"alice", 0, 1), None);
    }

    #[test]
    fn denies_only_costs_above_what_is_left() {
        let cache = DenyCache::new(64);
        cache.deny(b"alice", 5 * MS, 2);
        assert_eq!(cache.denied(b"alice", 0, 2), None);
        assert_eq!(
            cache.denied(b"alice", 0, 3),
            Some((Duration::from_millis(5), 2))
        );
        cache.deny(b"alice", 5 * MS, LEFT_MAX);
        assert_eq!(cache.denied(b"alice", 0, LEFT_MAX), None);
        assert!(cache.denied(b"alice", 0, LEFT_MAX + 1).is_some());
    }

    #[test]
    fn a_full_table_stays_its_size_and_never_denies_a_stranger() {
        let cache = DenyCache::new(16);
        for id in 0..10_000u32 {
            cache.deny(&id.to_le_bytes(), 1_000 * MS, 0);
        }
        let strangers = (10_000..20_000u32)
            .filter(|id| cache.denied(&id.to_le_bytes(), 0, 1).is_some())
            .count();
        assert_eq!(strangers, 0);
        let held = (0..10_000u32)
            .filter(|id| cache.denied(&id.to_le_bytes(), 0, 1).is_some())
            .count();
        assert!(held <= 16, "{held}");
    }
}
