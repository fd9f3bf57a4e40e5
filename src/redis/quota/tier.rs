//! Tiers and quota changes on Redis.
//!
//! A resolver run on each request's client names its tier, and the tier's
//! quota goes to the script with the request. Every tier of a limiter
//! shares each client's one key.
//!
//! # Quota changes
//!
//! An in-process limiter's `set_quota` carries every client's state over
//! to the new quota at the instant of the change. A Redis limiter cannot
//! visit every key, so it converts each state when it next meets it, with
//! the same rule at the same instants: every state is stamped with the
//! settings it was written under, the writer's id and the generation of
//! the writer's quota for the client's tier; the limiter keeps the last
//! [`HISTORY`] changes with the instant each was made (on Redis's clock,
//! as this process reads it); and a state stamped with an older
//! generation of this limiter is carried through each later change of its
//! tier, at that change's instant, exactly as the in-process limiter
//! carried it (a limit lowered then raised again clamps the state once
//! and keeps it). A state written by another process under other settings
//! (a rolling deploy) is converted once, when it is read. Either way the
//! converted state is written back before the request is decided on it.

use core::time::Duration;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, PoisonError, RwLock};

use super::algorithm::RedisAlgorithm;
use super::fallback::Resolver;
use crate::algorithm::{FromParams, Params, Transitions};
use crate::check::Quota;
use crate::error::ConfigError;
use crate::redis::script::spec::{Ns, Spec};
use crate::redis::script::state::{DecodeError, Stored};
use crate::Tier;

/// How many quota changes a limiter remembers to carry states through.
pub(crate) const HISTORY: usize = 64;

/// One tier's quota: the script's settings, the quota, the settings as
/// given, and the generation at which it was set.
#[derive(Debug)]
pub(crate) struct TierQuota {
    pub(crate) spec: Spec,
    /// The spec's stamp, as every state written under it carries.
    pub(crate) stamp: String,
    pub(crate) quota: Quota,
    pub(crate) params: Params,
    pub(crate) generation: u64,
    /// How long (ms) its keys linger past their idle instant
    /// (`Spec::linger_ms`).
    linger: u64,
    /// The tier it was set for, and the head of the values written under
    /// it for a client of that tier (`settings|tier:generation:linger|writer.`).
    tier: Tier,
    head: String,
}

/// A change: its generation, its instant (µs on Redis's clock, as this
/// process read it), and every tier's settings after it.
#[derive(Debug)]
struct Change {
    generation: u64,
    at: u64,
    specs: Vec<Option<Spec>>,
}

impl Change {
    /// The settings `tier` was held to after this change.
    fn of(&self, tier: Tier) -> Spec {
        self.specs
            .get(usize::from(tier))
            .copied()
            .flatten()
            .or(self.specs[0])
            .expect("tier 0 is always set")
    }
}

struct Table {
    quotas: Vec<Option<Arc<TierQuota>>>,
    generation: u64,
    history: VecDeque<Change>,
    max_capacity: u64,
}

/// The tiers' quotas, indexed by tier; tier 0 always set. Read on every
/// request, written by
/// [`RedisLimiter::set_quota`](crate::redis::RedisLimiter::set_quota).
pub(crate) struct Tiers {
    // A lock, on the Redis path only: each request pays a round trip to
    // Redis, against which an uncontended read costs nothing measurable.
    // A reader holds it to clone an `Arc` or to walk the last changes of
    // one state, never across an `.await` or a call to Redis, so a writer
    // (a quota change, rare) waits only for those, and a reader only for
    // a writer's update of the table (one slot, the largest capacity, a
    // change added to a history of at most `HISTORY`). No in-process
    // limiter's check takes it.
    table: RwLock<Table>,
    pub(crate) resolver: Option<Arc<Resolver>>,
    /// The limiter's id, in every value it writes.
    owner: String,
}

/// What a request is judged by: its tier, the tier's quota, and the
/// largest cost any tier admits.
#[derive(Clone)]
pub(crate) struct Judged {
    pub(crate) tier: Tier,
    pub(crate) quota: Arc<TierQuota>,
    pub(crate) max_capacity: u64,
}

impl Judged {
    /// The head of the values written for this request's client:
    /// `settings|tier:generation:linger|writer.` (made once per quota for
    /// the tier it was set for). The scripts write a key's longer linger
    /// where they find one (see `lua::word_script`).
    pub(crate) fn head(&self) -> Cow<'_, str> {
        self.head_lingering(0).0
    }

    /// The head of a value written over `stored`'s, and how long (ms) its
    /// key lingers past its idle instant: the longer of the quota's
    /// linger and the value's, so that a key remembers the longest refill
    /// of every quota that wrote it until it expires (see
    /// `Spec::linger_ms`).
    pub(crate) fn head_over(&self, stored: &Stored) -> (Cow<'_, str>, u64) {
        self.head_lingering(stored.linger())
    }

    fn head_lingering(&self, at_least: u64) -> (Cow<'_, str>, u64) {
        let quota = &self.quota;
        let linger = quota.linger.max(at_least);
        if self.tier == quota.tier && linger == quota.linger {
            (Cow::Borrowed(&quota.head), linger)
        } else {
            let writer = quota.head.rsplit('|').next().unwrap_or(".");
            let writer = writer.strip_suffix('.').unwrap_or(writer);
            let head = head(&quota.stamp, writer, self.tier, quota.generation, linger);
            (Cow::Owned(head), linger)
        }
    }
}

/// The head of the values a limiter writes:
/// `settings|tier:generation:linger|writer.` (the call's number follows).
fn head(stamp: &str, writer: &str, tier: Tier, generation: u64, linger: u64) -> String {
    format!("{stamp}|{tier}:{generation}:{linger}|{writer}.")
}

impl Tiers {
    pub(crate) fn new<A: RedisAlgorithm>(
        params: Params,
        resolver: Option<Arc<Resolver>>,
        owner: String,
    ) -> Result<Self, ConfigError> {
        let mut first = quota_for::<A>(params, 0)?;
        first.head = head(&first.stamp, &owner, 0, 0, first.linger);
        let max_capacity = first.spec.capacity();
        Ok(Self {
            table: RwLock::new(Table {
                quotas: vec![Some(Arc::new(first))],
                generation: 0,
                history: VecDeque::new(),
                max_capacity,
            }),
            resolver,
            owner,
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        // A writer that panicked left the table whole (it swaps one slot).
        self.table.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// What `client`'s requests are judged by now.
    pub(crate) fn judge(&self, client: &[u8]) -> Judged {
        let tier = self.resolver.as_ref().map_or(0, |resolve| resolve(client));
        let table = self.read();
        Judged {
            tier,
            quota: Arc::clone(effective(&table.quotas, tier)),
            max_capacity: table.max_capacity,
        }
    }

    /// The number of quota changes made: a booking made before the last
    /// one gives nothing back.
    pub(crate) fn generation(&self) -> u64 {
        self.read().generation
    }

    /// Tier `tier`'s quota, or tier 0's.
    pub(crate) fn get(&self, tier: Tier) -> Arc<TierQuota> {
        Arc::clone(effective(&self.read().quotas, tier))
    }

    /// Gives `tier` the quota `quota`, made at `at` (µs on Redis's clock).
    pub(crate) fn set(&self, tier: Tier, quota: TierQuota, at: u64) {
        let mut table = self.table.write().unwrap_or_else(PoisonError::into_inner);
        let slot = usize::from(tier);
        if table.quotas.len() <= slot {
            table.quotas.resize_with(slot + 1, || None);
        }
        let generation = table.generation + 1;
        table.generation = generation;
        table.quotas[slot] = Some(Arc::new(TierQuota {
            generation,
            tier,
            head: head(&quota.stamp, &self.owner, tier, generation, quota.linger),
            ..quota
        }));
        table.max_capacity = table
            .quotas
            .iter()
            .flatten()
            .map(|q| q.spec.capacity())
            .max()
            .unwrap_or(0);
        // The instants of the changes never go back, whatever the clock.
        let at = table.history.back().map_or(at, |last| at.max(last.at));
        let specs = table
            .quotas
            .iter()
            .map(|q| q.as_ref().map(|q| q.spec))
            .collect();
        table.history.push_back(Change {
            generation,
            at,
            specs,
        });
        if table.history.len() > HISTORY {
            table.history.pop_front();
        }
    }

    /// `stored`'s state carried over to the quota the request is judged
    /// by, as the in-process limiter would have carried it; `None` for a
    /// key with no state. See the module docs. A token bucket's state is
    /// then kept behind the latest lease outstanding (see `behind_leases`).
    pub(crate) fn settle(
        &self,
        judged: &Judged,
        stored: &Stored,
        owner: &str,
    ) -> Result<Option<Settled>, DecodeError> {
        let reader = judged.quota.spec;
        let Some(stamp) = stored.stamp() else {
            let word = stored.word(&reader)?;
            return Ok(behind_leases(
                &reader,
                stored,
                word,
                word.map(|word| Settled { word, own: true }),
            ));
        };
        let mut spec = reader.parse_stamp(stamp).ok_or(DecodeError::Range(
            "a stamp naming no settings of this algorithm",
        ))?;
        let Some(mut word) = stored.word(&spec)? else {
            return Ok(None);
        };
        let read = word;
        let ns = |spec: &Spec| -> Ns { spec.ns().expect("a word algorithm") };
        let now = stored.now;
        let (writer, generation) = stored.writer();
        let own = writer == Some(owner);
        let parsed = generation
            .and_then(|g| g.split_once(':'))
            .and_then(|(t, g)| Some((t.parse::<Tier>().ok()?, g.parse::<u64>().ok()?)));
        if let (true, Some((tier, since))) = (own, parsed) {
            let table = self.read();
            // Every change after the state's generation is remembered.
            let whole = table
                .history
                .front()
                .is_none_or(|c| c.generation <= since + 1);
            if whole {
                for change in table.history.iter().filter(|c| c.generation > since) {
                    let to = change.of(tier);
                    if to != spec {
                        // Never after the reading.
                        let at = change.at.min(now) * 1_000;
                        word = ns(&spec).convert(word, at, &ns(&to));
                        spec = to;
                    }
                }
            }
        }
        if spec != reader {
            word = ns(&spec).convert(word, now * 1_000, &ns(&reader));
        }
        Ok(behind_leases(
            &reader,
            stored,
            Some(read),
            Some(Settled { word, own }),
        ))
    }
}

/// A token bucket's state `settled` (of `stored`, whose word as written
/// was `read`), kept behind the slots leased out: its TAT no earlier than
/// the end of the latest lease of the client outstanding. A lease's units
/// are spent by their holder under the quota they were granted under, so a
/// conversion by another quota (a rolling deploy, a tier move, a quota
/// change) that pulled the TAT back before them would grant their slots a
/// second time: a unit or more beyond the bound, and, the key expiring
/// when that bucket fills, the whole bucket again. Kept behind them, the
/// bucket waits at most until the lease's end, at most one refill of the
/// quota it was granted under. With the leases not known (the slot moving,
/// the key and its leases' set split between two nodes), the TAT as
/// written is kept instead, which holds every lease's end. A state with no
/// lease outstanding, and every other algorithm's, is as settled.
fn behind_leases(
    reader: &Spec,
    stored: &Stored,
    read: Option<u128>,
    settled: Option<Settled>,
) -> Option<Settled> {
    let Spec::One(half) = reader else {
        return settled;
    };
    if !matches!(half.ns, crate::redis::script::spec::WordSpec::Bucket(_)) {
        return settled;
    }
    // A lone bucket's word is its TAT, in ns.
    let floor = match stored.leased {
        Some(end) if end > stored.now => u128::from(end) * 1_000,
        Some(_) => return settled,
        None => read.unwrap_or(0),
    };
    match settled {
        Some(Settled { word, own }) if word >= floor => Some(Settled { word, own }),
        // Kept behind them: written back only with an admission, as
        // another writer's state.
        Some(Settled { own, .. }) => Some(Settled { word: floor, own }),
        None if floor > 0 => Some(Settled {
            word: floor,
            own: false,
        }),
        None => None,
    }
}

/// A stored state carried over to a request's quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settled {
    /// The state under the request's quota.
    pub(crate) word: u128,
    /// Whether this limiter wrote it (or no one did): its conversion is
    /// one of this limiter's quota changes, written back whatever the
    /// request's fate. Another writer's state, under other settings, is
    /// written back converted only with an admission, which leaves no
    /// count above the reader's limit to clamp: a reader with a lower
    /// limit never lowers what a client spent.
    pub(crate) own: bool,
}

/// The quota `tier` is held to: its own, or tier 0's.
fn effective(quotas: &[Option<Arc<TierQuota>>], tier: Tier) -> &Arc<TierQuota> {
    let own = quotas.get(usize::from(tier)).and_then(Option::as_ref);
    // Tier 0 is set by `new` and never cleared.
    own.or(quotas[0].as_ref()).expect("tier 0 is always set")
}

/// A tier's quota from its settings.
pub(crate) fn quota_for<A: RedisAlgorithm>(
    params: Params,
    generation: u64,
) -> Result<TierQuota, ConfigError> {
    let algorithm = A::from_params(&params)?;
    let spec = algorithm.spec()?;
    let (limit, window) = FromParams::granted(&algorithm);
    Ok(TierQuota {
        spec,
        stamp: spec.stamp(),
        linger: spec.linger_ms(),
        tier: 0,
        head: String::new(),
        quota: Quota::new(limit, Duration::from_nanos(window)),
        params,
        generation,
    })
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use core::time::Duration;

    use super::*;
    use crate::{FixedWindow, TokenBucket};

    /// A read at `now` (µs) whose leases' record says `leased`.
    fn read_at(now: u64, leased: Option<u64>) -> Stored {
        Stored {
            now,
            expiry: -1,
            leased,
            value: None,
        }
    }

    /// `µs` as a lone bucket's word (its TAT in ns).
    fn tat(us: u64) -> u128 {
        u128::from(us) * 1_000
    }

    #[test]
    fn a_bucket_is_kept_behind_the_latest_lease_and_nothing_else_is() {
        let tb = Spec::bucket(&TokenBucket::new(1, Duration::from_millis(1), 9).unwrap()).unwrap();
        let fw = Spec::fixed(&FixedWindow::new(5, Duration::from_secs(60)).unwrap()).unwrap();
        let now = 1_000_000;
        let own = |word| Some(Settled { word, own: true });
        let lease = read_at(now, Some(now + 5_000));
        // A TAT before the lease's end: moved to it, its owner kept.
        assert_eq!(
            behind_leases(&tb, &lease, Some(0), own(tat(now))),
            own(tat(now + 5_000))
        );
        // One already behind it, or a lease that has ended: as settled.
        assert_eq!(
            behind_leases(&tb, &lease, Some(0), own(tat(now + 9_000))),
            own(tat(now + 9_000))
        );
        assert_eq!(
            behind_leases(&tb, &read_at(now, Some(now)), Some(0), own(5)),
            own(5)
        );
        // No key while a lease is out: a state behind it, written back
        // only with an admission; no key and no lease: none.
        assert_eq!(
            behind_leases(&tb, &lease, None, None),
            Some(Settled {
                word: tat(now + 5_000),
                own: false
            })
        );
        assert_eq!(behind_leases(&tb, &read_at(now, Some(0)), None, None), None);
        // The leases not known (the slot moving): the TAT as written.
        let written = tat(now + 7_000);
        assert_eq!(
            behind_leases(&tb, &read_at(now, None), Some(written), own(5)),
            own(written)
        );
        // Any other algorithm: as settled, leases or not.
        assert_eq!(behind_leases(&fw, &lease, Some(0), own(5)), own(5));
        assert_eq!(
            behind_leases(&fw, &read_at(now, None), Some(tat(now + 7_000)), own(5)),
            own(5)
        );
    }
}
