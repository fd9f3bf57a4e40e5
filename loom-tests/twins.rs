//! The deliberately broken cells and rules the models must catch, written
//! here rather than in the crate: each is a second implementation of one
//! piece of the crate (a cell's update, a cancel's rule, a pair's booking),
//! over the crate's own pure transitions (`__loom::Transitions`) or its own
//! compare-and-swap loop (`__loom::apply`), with exactly one thing wrong.
//! The crate's types carry no test-only code.
//!
//! - [`RacyCell`]: a word cell whose update is a load followed by a store,
//!   where the crate's `StateCell::apply` compares and swaps; two threads
//!   can both admit against the same word. Models 1, 2, 4, and the booking
//!   races of models 9 (both algorithms) run over it.
//! - [`give_back_blindly`]: a cancel that subtracts the booking's charge
//!   whether or not the booking is still the tail (models 10, 14).
//! - [`book_pair_apart`]: a pair's booking timed on one look and charged
//!   limit by limit (model 14).
//! - [`RacyLog`]: a log cell whose slot claims are a load followed by a
//!   store (models 3 and 15).
//! - [`unbook_log_blindly`]: a log cancel that restores its slots whatever
//!   they hold now (model 15).
//! - [`evict_without_tombstone`]: an evictor that removes an idle client's
//!   entry with no tombstone first (model 5).
//! - [`check_reading_quotas_first`]: a tiered check that reads the quota
//!   table before looking the client up (model 13).
//! - [`BrokenLease`]: a lease cell with one of [`LeaseBug`]'s bugs: a spend
//!   or a reset by a load and a store, a reset that empties the word, an
//!   install of "nothing" that ignores the epoch asked at, the range
//!   waiting behind the lease taken by a load and a store (model 20).

use loom::sync::atomic::{AtomicU64, Ordering};
use tollgate::__loom::{
    apply, first_word, join_words, lease, log_claims, log_is_free, log_limit, log_stamp,
    second_word, store_log_slot, ticket_states, tier_quota_now, tier_state, Algorithm, Life,
    LogCell, Mortal, PairCell, Purge, Relocation, Reserve, Spent, SpentSlots, Ticket, TierCell,
    Tiered, Transitions,
};
use tollgate::{Both, FixedWindow, SlidingWindowLog, TokenBucket};

/// A word cell whose update is a load followed by a store: the bug models
/// 1, 2, 4 and 9 must catch. It runs the crate's pure transitions.
#[derive(Debug)]
pub(crate) struct RacyCell {
    word: AtomicU64,
}

impl RacyCell {
    pub(crate) fn new(word: u64) -> Self {
        Self {
            word: AtomicU64::new(word),
        }
    }

    pub(crate) fn load(&self) -> u64 {
        // Acquire: pairs with the Release store in `update`.
        self.word.load(Ordering::Acquire)
    }

    /// The bug under test: `f` on the word loaded, then a plain store,
    /// which can overwrite an update made since the load.
    fn update(&self, f: impl FnOnce(u64) -> Option<u64>) -> bool {
        let Some(next) = f(self.load()) else {
            return false;
        };
        // Release: publishes the update, as the crate's exchange does.
        self.word.store(next, Ordering::Release);
        true
    }

    /// A check of `cost` at `now` by the algorithm's own transition.
    pub(crate) fn admit<T: Transitions<Word = u64>>(&self, t: &T, now: u64, cost: u64) -> bool {
        self.update(|word| <T as Transitions>::admit(t, word, now, cost))
    }

    /// A booking of `cost` at `now`, however long it waits, by the
    /// algorithm's own booking transition: its ready time.
    pub(crate) fn book<T: Transitions<Word = u64>>(&self, t: &T, now: u64, cost: u64) -> u64 {
        let mut ready = None;
        let booked = self.update(
            |word| match <T as Transitions>::reserve(t, word, now, cost) {
                Reserve::At { word, ready_at } => {
                    ready = Some(ready_at);
                    Some(word)
                }
                Reserve::Never => None,
            },
        );
        assert!(booked, "a booking with no limit on its wait");
        ready.expect("the booking recorded its time")
    }
}

/// A racy cell is always alive: the models that use it never evict.
impl Mortal for RacyCell {
    fn life(&self) -> Life {
        Life::Live
    }

    fn claim(&self) -> Result<(), Life> {
        Err(Life::Live)
    }

    fn unclaim(&self) {}

    fn refuse(&self) -> Result<(), Life> {
        Err(Life::Live)
    }

    fn relocate(&self) -> Relocation<Self> {
        Relocation::Same
    }

    fn forward(&self, _seal: tollgate::__loom::Seal) -> bool {
        unreachable!("a racy cell moves as a handle, never forwarded")
    }

    fn retire_sealed(&self, _seal: tollgate::__loom::Seal) -> bool {
        unreachable!("a racy cell moves as a handle, never retired so")
    }

    fn refresh(&self, _newer: Self) {
        unreachable!("a racy cell moves as a handle, never refreshed")
    }
}

/// The broken cancel of models 10 (word cells) and 14 (pairs): subtract the
/// booking's charge (`to − from`) from the cell's state, whether or not the
/// booking is still the tail. The exchange itself is the crate's atomic
/// loop; the rule it applies is what is wrong: whatever was charged after
/// the booking keeps its wait, and the slot of virtual time the booking
/// held is handed out twice.
pub(crate) fn give_back_blindly(cell: &tollgate::__loom::StateCell, ticket: &Ticket) {
    let (from, to) = ticket_states(ticket);
    // A one-word ticket's states are zero-extended words.
    let charge = (to - from) as u64;
    let _ = apply(cell, |word: u64| Some(word.wrapping_sub(charge)));
}

/// As [`give_back_blindly`], on a pair's whole state.
pub(crate) fn give_back_pair_blindly(cell: &PairCell, ticket: &Ticket) {
    let (from, to) = ticket_states(ticket);
    let charge = to - from;
    let _ = apply(cell, |pair: u128| Some(pair.wrapping_sub(charge)));
}

/// The broken booking of model 14: a booking of `cost` at `now` that
/// settles its ready time on one look at the pair, then charges each limit
/// by its own compare-and-swap loop, booking that limit for the ready time
/// it settled on (the other half left as each loop finds it). A check that
/// lands between the look and the charges is missed by the ready time: both
/// can take one limit's last unit. Answers the ready time it reports.
pub(crate) fn book_pair_apart(
    pair: &Both<TokenBucket, FixedWindow>,
    cell: &PairCell,
    now: u64,
    cost: u64,
) -> u64 {
    let seen = cell.load();
    let ready_at =
        now + <Both<TokenBucket, FixedWindow> as Transitions>::retry_after(pair, seen, now, cost);
    let booked = |reserve: Reserve| match reserve {
        Reserve::At { word, .. } => Some(word),
        Reserve::Never => None,
    };
    let _ = apply(cell, |p: u128| {
        booked(<TokenBucket as Transitions>::reserve(
            pair.first(),
            first_word(p),
            ready_at,
            cost,
        ))
        .map(|a| join_words(a, second_word(p)))
    });
    let _ = apply(cell, |p: u128| {
        booked(<FixedWindow as Transitions>::reserve(
            pair.second(),
            second_word(p),
            ready_at,
            cost,
        ))
        .map(|b| join_words(first_word(p), b))
    });
    ready_at
}

/// A log cell whose slot claims are a load followed by a store, where the
/// crate's log cell compares and swaps: two threads can both claim one free
/// slot, and both be admitted on it (the bug models 3 and 15 must catch).
/// It runs the log's own rules (`__loom::log_stamp`, `log_is_free`), and
/// claims as the crate's log does: a unit check takes the first free slot;
/// a check of `n` takes `n` free slots, or gives back what it took; a
/// booking of `n` claims the `n` slots that free up first, each from the
/// very expiry it was timed on, and is ready when the last of them frees.
/// No log of these is ever evicted, so it keeps no life word.
#[derive(Debug)]
pub(crate) struct RacyLog {
    slots: Vec<AtomicU64>,
}

impl RacyLog {
    pub(crate) fn new(log: &SlidingWindowLog) -> Self {
        Self {
            slots: (0..log_limit(log)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn expiry(&self, index: usize) -> u64 {
        // Acquire: pairs with the Release stores below.
        self.slots[index].load(Ordering::Acquire)
    }

    /// The bug under test: slot `index` from `seen` to `stamp` by a load
    /// and a store, overwriting any claim made since the load.
    fn claim_from(&self, index: usize, seen: u64, stamp: u64) -> bool {
        if self.expiry(index) != seen {
            return false;
        }
        // Release: publishes the claim.
        self.slots[index].store(stamp, Ordering::Release);
        true
    }

    /// Gives back claims made with `stamp`, as the crate's log does: as
    /// many slots as were claimed, of those that hold `stamp`, get back
    /// the old expiries, the latest first.
    fn restore(&self, claims: &[(usize, u64)], stamp: u64) {
        let mut olds: Vec<u64> = claims.iter().map(|&(_, old)| old).collect();
        olds.sort_unstable_by(|a, b| b.cmp(a));
        let mut given = 0;
        for slot in &self.slots {
            let Some(&old) = olds.get(given) else { break };
            // AcqRel/Acquire: an exchange from the stamp.
            if slot
                .compare_exchange(stamp, old, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                given += 1;
            }
        }
    }

    /// How many slots are free at `now`.
    pub(crate) fn free(&self, log: &SlidingWindowLog, now: u64) -> u64 {
        (0..self.slots.len())
            .filter(|&i| log_is_free(log, self.expiry(i), now))
            .count() as u64
    }

    /// A check of `cost` at `now`.
    pub(crate) fn admit(&self, log: &SlidingWindowLog, now: u64, cost: u64) -> bool {
        if self.free(log, now) < cost {
            return false;
        }
        let stamp = log_stamp(log, now);
        let mut claimed = Vec::new();
        for i in 0..self.slots.len() {
            let seen = self.expiry(i);
            if log_is_free(log, seen, now) && self.claim_from(i, seen, stamp) {
                claimed.push((i, seen));
                if claimed.len() as u64 == cost {
                    return true;
                }
            }
        }
        self.restore(&claimed, stamp);
        false
    }

    /// A booking of `cost` at `now`, however long it waits: its ready time.
    pub(crate) fn book(&self, log: &SlidingWindowLog, now: u64, cost: u64) -> u64 {
        let n = cost as usize;
        loop {
            let expiries: Vec<u64> = (0..self.slots.len()).map(|i| self.expiry(i)).collect();
            let mut order: Vec<usize> = (0..expiries.len()).collect();
            order.sort_unstable_by_key(|&i| (expiries[i], i));
            order.truncate(n);
            let ready_at = expiries[order[n - 1]].max(now);
            let stamp = log_stamp(log, ready_at);
            let mut claims = Vec::new();
            for &i in &order {
                if !self.claim_from(i, expiries[i], stamp) {
                    break;
                }
                claims.push((i, expiries[i]));
            }
            if claims.len() == n {
                return ready_at;
            }
            self.restore(&claims, stamp);
        }
    }
}

/// The broken cancel of model 15: put back every slot the booking claimed,
/// whatever it holds now (a booking made since may have claimed it from
/// this one, and loses its claim). The store itself is atomic; the rule is
/// what is wrong.
pub(crate) fn unbook_log_blindly(cell: &LogCell, ticket: &Ticket) {
    for (i, old) in log_claims(ticket) {
        store_log_slot(cell, i, old);
    }
}

/// The broken evictor of model 5: checks that the cell is idle, then
/// removes the entry, with no tombstone in between. A check that admits
/// between the two is lost with the entry.
pub(crate) fn evict_without_tombstone<A, I>(algorithm: &A, index: &I, key: &str, now: u64) -> bool
where
    A: Algorithm,
    I: Purge<String, A::Cell>,
{
    let idle = index
        .with(key, |cell| algorithm.idle_at(cell) <= now)
        .unwrap_or(false);
    idle && index.remove_if(key, |_| true)
}

/// The broken tiered check of model 13: the quota is read once, before the
/// client is looked up, from the table as it stands (as a plain limiter
/// reads its one quota), instead of the quota the cell names, read after
/// the word's `Acquire` load. A check that read the table before a change
/// and finds the cell the change carried decides the new state under the
/// old quota.
pub(crate) fn check_reading_quotas_first(
    tiered: &Tiered<TokenBucket>,
) -> impl Fn(&TierCell, u64) -> Option<bool> {
    let quota = tier_quota_now(tiered, 0);
    move |cell, now| {
        apply(tier_state(cell), |word: u64| {
            <TokenBucket as Transitions>::admit(&quota, word, now, 1)
        })
        .map(|written| written.is_some())
    }
}

/// The bugs a broken lease cell (model 20) has, one at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseBug {
    /// A spend by a load and a store, where the crate's `LeaseCell`
    /// exchanges: two spends can take the same slot.
    SpendByLoadStore,
    /// A reset that stores an empty word with the epoch moved on, where the
    /// crate's keeps the range: the lease's unspent units, and a grant
    /// installed meanwhile, are lost.
    ResetToEmpty,
    /// A reset by a load and a store of the right transition
    /// (`Lease::reset` of the word loaded): a grant installed, or a unit
    /// spent, between the two is undone.
    ResetByLoadStore,
    /// An install of "nothing until" that takes the epoch it finds for
    /// the epoch asked at: a reading from before a reset becomes a hold
    /// after it.
    NothingIgnoringEpoch,
    /// The range waiting behind the lease read by a load and cleared by a
    /// plain store, where the crate's takes it by one exchange: two
    /// callers that find the lease short can both move it into the
    /// lease's place, and a range queued between the load and the store
    /// is wiped.
    PromoteByLoadStore,
}

/// A lease cell with exactly one of [`LeaseBug`]'s bugs: everything else as
/// the crate's `LeaseCell` does it, over the crate's pure transitions of a
/// lease's word (`__loom::lease`) and its compare-and-swap loop
/// (`__loom::apply`) on two `StateCell<u128>`s: the lease's word and the
/// range waiting behind it.
#[derive(Debug)]
pub(crate) struct BrokenLease {
    word: tollgate::__loom::StateCell<u128>,
    queued: tollgate::__loom::StateCell<u128>,
    interval: u64,
    bug: LeaseBug,
}

impl BrokenLease {
    pub(crate) fn new(interval: u64, bug: LeaseBug) -> Self {
        Self {
            word: tollgate::__loom::StateCell::holding(lease::empty()),
            queued: tollgate::__loom::StateCell::holding(lease::empty()),
            interval,
            bug,
        }
    }

    fn slots(&self, word: u128, cost: u64) -> (u64, u64) {
        let (to, _, _) = lease::parts(word);
        (to - cost * self.interval, to)
    }

    /// A spend of `cost` at `now`: what it answered, the slots it took,
    /// and the ranges it displaced (moving the range waiting behind the
    /// lease into its place when the lease is short).
    pub(crate) fn spend(&self, now: u64, cost: u64) -> SpentSlots {
        let interval = self.interval;
        let mut gone = Vec::new();
        loop {
            let (admitted, seen) = if self.bug == LeaseBug::SpendByLoadStore {
                // The bug: the transition on the word loaded, then the word
                // after it put in whatever the cell holds by then.
                let seen = self.word.load();
                match lease::spend(interval, seen, now, cost) {
                    Some(next) => {
                        let _ = apply(&self.word, |_| Some(next));
                        (Some(next), seen)
                    }
                    None => (None, seen),
                }
            } else {
                match apply(&self.word, |w| lease::spend(interval, w, now, cost)) {
                    Some(Some(w)) => (Some(w), w),
                    _ => (None, self.word.load()),
                }
            };
            if let Some(w) = admitted {
                let left = lease::left(interval, w, now) + self.left_queued(now);
                return (Spent::Admitted { left }, Some(self.slots(w, cost)), gone);
            }
            if let Some(displaced) = self.promote(now, cost) {
                gone.extend(displaced);
                continue;
            }
            return (lease::short(interval, seen, now), None, gone);
        }
    }

    /// Moves the range waiting behind the lease into its place, if one
    /// waits, for a spend of `need`, as the crate's cell does (a lease
    /// holding `need` units by then keeps them, the range waiting behind
    /// them again, or lapsing if another waits): the range it displaced,
    /// or `None` if none waited.
    fn promote(&self, now: u64, need: u64) -> Option<Option<(u64, u64)>> {
        let (start, end) = if self.bug == LeaseBug::PromoteByLoadStore {
            // The bug: the waiting range read by a load, then the empty
            // word stored over whatever waits by then.
            let (empty, range) = lease::unqueue(self.queued.load())?;
            let _ = apply(&self.queued, |_| Some(empty));
            range
        } else {
            let taken = core::cell::Cell::new(None);
            apply(&self.queued, |q| {
                let (empty, range) = lease::unqueue(q)?;
                taken.set(Some(range));
                Some(empty)
            })
            .flatten()?;
            taken.get()?
        };
        let interval = self.interval;
        let displaced = core::cell::Cell::new(None);
        let moved = apply(&self.word, |w| {
            let (next, gone) = lease::promote(interval, w, now, need, start, end)?;
            displaced.set(gone);
            Some(next)
        });
        if moved.flatten().is_some() {
            return Some(displaced.get());
        }
        let back = apply(&self.queued, |q| {
            lease::unqueue(q)
                .is_none()
                .then(|| lease::waiting(start, end))
        });
        if back.flatten().is_some() {
            return Some(None);
        }
        Some(lease::take_out(interval, lease::waiting(start, end), now).1)
    }

    /// Installs the slots `[start, end)` granted: in the lease if they
    /// continue it or it has no unit left, else behind it. The ranges it
    /// displaced.
    pub(crate) fn grant(&self, now: u64, start: u64, end: u64) -> Vec<(u64, u64)> {
        let interval = self.interval;
        let mut gone = Vec::new();
        if self.left_here(now) == 0 {
            gone.extend(self.promote(now, 1).flatten());
        }
        let out = core::cell::Cell::new(None);
        let placed = apply(&self.word, |w| {
            let (next, here) = lease::place(interval, w, now, start, end)?;
            out.set(here);
            Some(next)
        });
        if placed == Some(None) {
            let _ = apply(&self.queued, |q| {
                let (next, here) = lease::queue(interval, q, now, start, end);
                out.set(here);
                Some(next)
            });
        }
        gone.extend(out.get());
        gone
    }

    /// "Nothing until `until`" for a request asked at `epoch`: the ranges
    /// displaced (by the waiting range moved into a lease spent out).
    pub(crate) fn nothing(&self, now: u64, epoch: u64, until: u64) -> Vec<(u64, u64)> {
        let interval = self.interval;
        let mut gone = Vec::new();
        if self.left_here(now) == 0 {
            gone.extend(self.promote(now, 1).flatten());
        }
        let ignoring = self.bug == LeaseBug::NothingIgnoringEpoch;
        let _ = apply(&self.word, |w| {
            // The bug: the epoch asked at taken to be the one found now.
            let asked = if ignoring { lease::parts(w).2 } else { epoch };
            lease::nothing(interval, w, now, asked, until)
        });
        gone
    }

    /// A reset.
    pub(crate) fn reset(&self) {
        match self.bug {
            LeaseBug::ResetToEmpty => {
                // The bug: an empty word, the epoch moved on, in place of
                // whatever range the cell holds.
                let _ = apply(&self.word, |w| {
                    Some(lease::reset(lease::take_out(1, w, 0).0))
                });
            }
            LeaseBug::ResetByLoadStore => {
                // The bug: the reset of the word loaded, stored over
                // whatever the cell holds by then.
                let next = lease::reset(self.word.load());
                let _ = apply(&self.word, |_| Some(next));
            }
            _ => {
                let _ = apply(&self.word, |w| Some(lease::reset(w)));
            }
        }
    }

    /// Empties the lease at `now`: the unpassed units it held, then those
    /// of the range waiting behind it.
    pub(crate) fn take_out(&self, now: u64) -> [Option<(u64, u64)>; 2] {
        let interval = self.interval;
        let take = |cell: &tollgate::__loom::StateCell<u128>| {
            let held = core::cell::Cell::new(None);
            let _ = apply(cell, |w| {
                let (next, units) = lease::take_out(interval, w, now);
                held.set(units);
                Some(next)
            });
            held.get()
        };
        [take(&self.word), take(&self.queued)]
    }

    /// The whole units left at `now`, the waiting range's included.
    pub(crate) fn left(&self, now: u64) -> u64 {
        self.left_here(now) + self.left_queued(now)
    }

    fn left_here(&self, now: u64) -> u64 {
        lease::left(self.interval, self.word.load(), now)
    }

    fn left_queued(&self, now: u64) -> u64 {
        lease::left(self.interval, self.queued.load(), now)
    }

    /// The lease's word.
    pub(crate) fn word(&self) -> u128 {
        self.word.load()
    }

    /// The epoch a request asked now carries.
    pub(crate) fn epoch(&self) -> u64 {
        lease::parts(self.word.load()).2
    }
}
