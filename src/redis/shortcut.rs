//! The local deny shortcut: clients that Redis denied, remembered until
//! their quota next grows, so that their next requests are denied without
//! a round trip.
//!
//! A direct-mapped table of `AtomicU64` slots, each `fingerprint (32 bits)
//! | until (32 bits)`: `until` in milliseconds of the breaker's clock,
//! rounded down, and the fingerprint the high half of the key's hash, while
//! the low bits chose the slot. One load answers a check and one store
//! records a denial: no lock, no allocation, and a fixed size. A new
//! denial overwrites whatever its slot held, so a collision costs at most a
//! round trip that the shortcut would have saved. A false denial needs two
//! keys that agree on the slot and on 32 more bits of a keyed hash (about
//! one chance in 2^32 per lookup of a held slot); see docs/DESIGN.md.

use core::hash::BuildHasher;
use core::time::Duration;

use crate::sync::{AtomicU64, Ordering};

const MS: u64 = 1_000_000;

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
        (slot, hash >> 32)
    }

    /// How long `client` stays denied at `now` (ns of the breaker's clock),
    /// if it does.
    pub(crate) fn denied(&self, client: &[u8], now: u64) -> Option<Duration> {
        let (slot, fingerprint) = self.locate(client);
        // Relaxed: a slot publishes only itself.
        let word = slot.load(Ordering::Relaxed);
        let until = (word & u64::from(u32::MAX)) * MS;
        (word >> 32 == fingerprint && now < until).then(|| Duration::from_nanos(until - now))
    }

    /// Records that `client` is denied until `until` (ns), rounded down to
    /// the millisecond so that the shortcut never outlasts the denial.
    pub(crate) fn deny(&self, client: &[u8], until: u64) {
        let (slot, fingerprint) = self.locate(client);
        let until_ms = (until / MS).min(u64::from(u32::MAX));
        slot.store(fingerprint << 32 | until_ms, Ordering::Relaxed);
    }

    /// Forgets `client`'s denial, if its slot still holds it.
    pub(crate) fn forget(&self, client: &[u8]) {
        let (slot, fingerprint) = self.locate(client);
        let word = slot.load(Ordering::Relaxed);
        if word >> 32 == fingerprint {
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
        assert_eq!(cache.denied(b"alice", 0), None);
        cache.deny(b"alice", 5 * MS + 700_000);
        assert_eq!(cache.denied(b"alice", 0), Some(Duration::from_millis(5)));
        assert_eq!(
            cache.denied(b"alice", 5 * MS - 1),
            Some(Duration::from_nanos(1))
        );
        assert_eq!(cache.denied(b"alice", 5 * MS), None);
        assert_eq!(cache.denied(b"bob", 0), None);
        cache.forget(b"alice");
        assert_eq!(cache.denied(b"alice", 0), None);
    }

    #[test]
    fn a_full_table_stays_its_size_and_never_denies_a_stranger() {
        let cache = DenyCache::new(16);
        for id in 0..10_000u32 {
            cache.deny(&id.to_le_bytes(), 1_000 * MS);
        }
        let strangers = (10_000..20_000u32)
            .filter(|id| cache.denied(&id.to_le_bytes(), 0).is_some())
            .count();
        assert_eq!(strangers, 0);
        let held = (0..10_000u32)
            .filter(|id| cache.denied(&id.to_le_bytes(), 0).is_some())
            .count();
        assert!(held <= 16, "{held}");
    }
}
