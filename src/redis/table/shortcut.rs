//! The local deny shortcut: the state Redis last returned for clients
//! that had little left, kept for at most [`REACH`], so that a request it
//! is sure to deny is denied here without a round trip, with the figures
//! Redis would have given.
//!
//! # What an entry holds
//!
//! A direct-mapped table of slots, each the client's state as the last
//! check left it (the in-process word: one limit's, or a pair's two), the
//! instant Redis judged it at (ns on Redis's clock), the instants the check
//! was sent and its answer came back (ns on the local clock) and a 64-bit
//! key: a keyed hash of the client's bytes, its tier and the shortcut's
//! *generation*.
//!
//! Redis read its clock somewhere within the round trip, so at `now` on
//! the local clock Redis's clock reads between `judged + (now − received)`
//! and `judged + (now − sent)`, each widened by how far two hosts' clocks
//! may part (2 000 ppm of the time since, 2 ms over a whole reach). A
//! check of that client asks the in-process algorithm about the stored
//! state at the later of the two: if the request would be denied there,
//! it is denied here; if it would be admitted, the check goes to Redis. Nothing but time makes a state more
//! permissive (other processes only spend more), so a local denial is one
//! that Redis would have made a moment earlier. The denial's figures (what
//! is left, and the waits) are the in-process limiter's on that state at
//! the earlier instant, where it is denied too: a wait told here is never
//! shorter than the one Redis would tell, and longer by at most the round
//! trip (and the drift), so a client that honours it is admitted then
//! (unless others spent meanwhile). An entry is believed at most
//! [`REACH`] after it was made, so that a state that vanished from Redis
//! (a `FLUSHALL`, a key deleted by hand, another process's `reset`, or its
//! cancel of a booking, which gives units back) denies for at most that
//! long.
//!
//! # The generation
//!
//! `reset`, `remove` and `set_quota` start a new generation *after* their
//! change took effect. A check reads the generation before it is sent and
//! files its entry under it, so every entry made from a reading of Redis
//! before the change (a check in flight included) is filed under an older
//! generation, which no lookup asks for again. A stale entry is found only
//! if its 64-bit key collides with the current one's: the chance the
//! table's fingerprints already take, about 2<sup>−63</sup> per lookup.
//!
//! # The slot: a sequence lock
//!
//! A slot is seven `AtomicU64`: a sequence number, odd while a writer fills
//! the slot, and the five fields. A writer takes the slot by one exchange
//! from an even sequence to the next odd one (a writer that finds it odd,
//! or loses the exchange, gives up: a lost entry costs at most a round
//! trip), stores the fields and publishes with the next even number. A
//! reader loads the sequence, the fields and the sequence again, and
//! believes the fields only if both loads saw the same even number. No
//! lock, no allocation, a fixed size: 56 bytes a slot.

use core::hash::BuildHasher;

use crate::sync::{AtomicU64, Ordering};

/// The longest an entry is believed: a state that vanished from Redis
/// keeps its client denied here at most this long (ns).
pub(crate) const REACH: u64 = 1_000_000_000;

/// An entry: what a check left, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The instant the check was sent, ns on the local clock.
    pub(crate) sent: u64,
    /// An instant no earlier than Redis's answer came back, ns on the
    /// local clock.
    pub(crate) received: u64,
    /// The instant Redis judged at, ns on Redis's clock.
    pub(crate) judged: u64,
    /// The state: the in-process word (a pair's low half), or a log's
    /// units left.
    pub(crate) a: u64,
    /// A pair's second word, or the instant (ns on Redis's clock) a log's
    /// units next grow.
    pub(crate) b: u64,
}

impl Entry {
    /// The instant on Redis's clock to judge at, at `now` on the local
    /// clock: no earlier than Redis's clock reads then.
    pub(crate) fn judge_at(&self, now: u64) -> u64 {
        self.judged.saturating_add(now.saturating_sub(self.sent))
    }

    /// The instant on Redis's clock to tell waits from, at `now` on the
    /// local clock: no later than Redis's clock reads then (Redis read its
    /// clock before its answer came back), and at most one round trip
    /// before [`judge_at`](Self::judge_at).
    pub(crate) fn tell_at(&self, now: u64) -> u64 {
        self.judged
            .saturating_add(now.saturating_sub(self.received))
    }
}

#[derive(Default)]
struct Slot {
    seq: AtomicU64,
    key: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
    judged: AtomicU64,
    a: AtomicU64,
    b: AtomicU64,
}

/// The shortcut's table.
pub(crate) struct DenyCache {
    slots: Box<[Slot]>,
    mask: u64,
    hasher: foldhash::quality::RandomState,
    generation: AtomicU64,
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
            slots: (0..slots).map(|_| Slot::default()).collect(),
            mask: slots as u64 - 1,
            hasher: foldhash::quality::RandomState::default(),
            generation: AtomicU64::new(0),
        }
    }

    /// The generation now: read by a check before it is sent.
    pub(crate) fn generation(&self) -> u64 {
        // Acquire: pairs with `renew`'s Release, so that a check that
        // reads the new generation was sent after the change that renewed
        // it took effect (the change happened before the renewal).
        self.generation.load(Ordering::Acquire)
    }

    /// Starts a new generation: every entry made before is forgotten.
    /// Called once a change (`reset`, `remove`, `set_quota`) has taken
    /// effect.
    pub(crate) fn renew(&self) {
        // Release: pairs with `generation`'s Acquire.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The key of `client` of `tier` under `generation`: never 0, the key
    /// of an empty slot.
    pub(crate) fn key(&self, generation: u64, tier: u16, client: &[u8]) -> u64 {
        self.hasher.hash_one((generation, tier, client)) | 1
    }

    fn slot(&self, key: u64) -> &Slot {
        // The mask keeps the index below the table's length.
        &self.slots[(key >> 1 & self.mask) as usize]
    }

    /// The entry filed under `key`, if one is there and was made less than
    /// [`REACH`] before `now` (ns, local clock).
    pub(crate) fn lookup(&self, key: u64, now: u64) -> Option<Entry> {
        let slot = self.slot(key);
        // Acquire: pairs with the writer's Release store of the even
        // sequence, so that the fields below are at least that write's.
        let seq = slot.seq.load(Ordering::Acquire);
        if seq & 1 == 1 {
            return None;
        }
        // Relaxed: validated by the sequence below.
        let found = slot.key.load(Ordering::Relaxed);
        let entry = Entry {
            sent: slot.sent.load(Ordering::Relaxed),
            received: slot.received.load(Ordering::Relaxed),
            judged: slot.judged.load(Ordering::Relaxed),
            a: slot.a.load(Ordering::Relaxed),
            b: slot.b.load(Ordering::Relaxed),
        };
        // Acquire fence: orders the field loads above before the second
        // load of the sequence; pairs with the writer's Release fence
        // after it made the sequence odd, so that a field load that saw a
        // newer writer's store makes this load see that writer's odd (or
        // later) sequence.
        crate::sync::fence(Ordering::Acquire);
        if slot.seq.load(Ordering::Relaxed) != seq || found != key {
            return None;
        }
        (now < entry.sent.saturating_add(REACH)).then_some(entry)
    }

    /// Files `entry` under `key`, over whatever the slot held; gives up if
    /// another writer holds the slot.
    pub(crate) fn store(&self, key: u64, entry: Entry) {
        self.write(key, |slot| {
            // Relaxed: published by the Release store of the sequence.
            slot.key.store(key, Ordering::Relaxed);
            slot.sent.store(entry.sent, Ordering::Relaxed);
            slot.received.store(entry.received, Ordering::Relaxed);
            slot.judged.store(entry.judged, Ordering::Relaxed);
            slot.a.store(entry.a, Ordering::Relaxed);
            slot.b.store(entry.b, Ordering::Relaxed);
        });
    }

    /// Forgets the entry filed under `key`, if its slot still holds it.
    pub(crate) fn forget(&self, key: u64) {
        if self.lookup(key, 0).is_some() {
            // Relaxed: published by the Release store of the sequence.
            self.write(key, |slot| slot.key.store(0, Ordering::Relaxed));
        }
    }

    /// Runs `fill` on `key`'s slot as its one writer (see the module's
    /// docs), or not at all if another writer holds the slot.
    fn write(&self, key: u64, fill: impl FnOnce(&Slot)) {
        let slot = self.slot(key);
        // Relaxed: the exchange below decides.
        let seq = slot.seq.load(Ordering::Relaxed);
        let odd = seq.wrapping_add(1);
        if seq & 1 == 1
            || slot
                .seq
                .compare_exchange(seq, odd, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // Release fence: pairs with the reader's Acquire fence (see
        // `lookup`): a reader that sees any field stored by `fill` sees
        // the odd sequence on its second load.
        crate::sync::fence(Ordering::Release);
        fill(slot);
        // Release: pairs with the reader's first Acquire load.
        slot.seq.store(odd.wrapping_add(1), Ordering::Release);
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn entry(sent: u64, a: u64) -> Entry {
        Entry {
            sent,
            received: sent + 2 * MS,
            judged: 7 * MS,
            a,
            b: 9,
        }
    }

    #[test]
    fn an_entry_is_found_under_its_key_for_its_reach() {
        let cache = DenyCache::new(64);
        let key = cache.key(cache.generation(), 0, b"alice");
        assert_eq!(cache.lookup(key, 0), None);
        cache.store(key, entry(5 * MS, 3));
        assert_eq!(cache.lookup(key, 5 * MS), Some(entry(5 * MS, 3)));
        assert_eq!(
            cache
                .lookup(key, 5 * MS + REACH - 1)
                .map(|e| e.judge_at(6 * MS)),
            Some(8 * MS)
        );
        // Judged at 7 ms on Redis's clock, sent at 5 and received at 7 on
        // the local one: at 9 local, Redis reads between 9 and 11.
        let found = cache.lookup(key, 9 * MS).unwrap();
        assert_eq!(
            (found.tell_at(9 * MS), found.judge_at(9 * MS)),
            (9 * MS, 11 * MS)
        );
        assert_eq!(cache.lookup(key, 5 * MS + REACH), None, "past its reach");
        let bob = cache.key(cache.generation(), 0, b"bob");
        assert_eq!(cache.lookup(bob, 5 * MS), None);
        let tier = cache.key(cache.generation(), 1, b"alice");
        assert_eq!(cache.lookup(tier, 5 * MS), None, "another tier");
        cache.forget(key);
        assert_eq!(cache.lookup(key, 5 * MS), None);
    }

    #[test]
    fn a_new_generation_forgets_every_entry_made_before() {
        let cache = DenyCache::new(64);
        let old = cache.generation();
        let key = cache.key(old, 0, b"alice");
        cache.renew();
        // A check sent before the renewal files its answer afterwards.
        cache.store(key, entry(0, 1));
        let now = cache.key(cache.generation(), 0, b"alice");
        assert_ne!(now, key);
        assert_eq!(cache.lookup(now, 0), None);
    }

    #[test]
    fn a_full_table_stays_its_size_and_never_answers_a_stranger() {
        let cache = DenyCache::new(16);
        let g = cache.generation();
        for id in 0..10_000u32 {
            cache.store(cache.key(g, 0, &id.to_le_bytes()), entry(0, u64::from(id)));
        }
        for id in 10_000..20_000u32 {
            assert_eq!(cache.lookup(cache.key(g, 0, &id.to_le_bytes()), 0), None);
        }
        let held = (0..10_000u32)
            .filter(|id| {
                cache
                    .lookup(cache.key(g, 0, &id.to_le_bytes()), 0)
                    .is_some_and(|e| e.a == u64::from(*id))
            })
            .count();
        assert!(held <= 16, "{held}");
    }

    #[test]
    fn readers_racing_writers_see_whole_entries_only() {
        let cache = std::sync::Arc::new(DenyCache::new(1));
        let key = cache.key(0, 0, b"x");
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let cache = std::sync::Arc::clone(&cache);
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let v = w << 32 | i;
                        cache.store(
                            key,
                            Entry {
                                sent: 0,
                                received: v,
                                judged: v,
                                a: v,
                                b: v,
                            },
                        );
                    }
                })
            })
            .collect();
        for _ in 0..20_000 {
            if let Some(e) = cache.lookup(key, 0) {
                assert!(e.judged == e.a && e.a == e.b && e.b == e.received, "{e:?}");
            }
        }
        for w in writers {
            w.join().unwrap();
        }
    }
}
