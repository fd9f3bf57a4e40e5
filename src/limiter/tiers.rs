//! A tiered limiter's quotas while it runs: reading
//! ([`Limiter::tier_quota`], [`Limiter::tier_of`]) and changing
//! ([`Limiter::set_quota`]) them, and the algorithms a tier can run
//! ([`TierAlgorithm`]).

use core::borrow::Borrow;
use core::hash::Hash;
use core::ptr;

use super::Limiter;
use crate::algorithm::{
    Both, FixedWindow, FromParams, SlidingWindowCounter, TokenBucket, Transitions,
};
use crate::cell::{Algorithm, Life, Mortal, Packed, Tier, Tiered};
use crate::clock::Clock;
use crate::error::ConfigError;

impl<A, K, C> Limiter<Tiered<A>, K, C>
where
    A: TierAlgorithm,
    Tiered<A>: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// Changes `tier`'s quota, for every client of the tier (and, for tier
    /// 0, every client of a tier with no quota of its own), known or new,
    /// without a restart. A tier with no quota yet gets one.
    ///
    /// Checks on tracked clients never wait for a change and take no lock
    /// (a new client's first request waits for the change while it
    /// carries the client's shard, under that shard's lock). Each client's
    /// change is one step in its history: a check lands wholly before it,
    /// under the old quota, or wholly after, under the new one. The call
    /// itself visits every client once (shard by shard, under each shard's
    /// lock), carrying its state over to the new quota by the move
    /// rule: **a move never adds to what a client may take**, now or at
    /// any earlier reading, and what it may take grows at the new rate up
    /// to the new capacity; requests already booked stay charged. So over
    /// any span a client is admitted at most the largest capacity
    /// involved plus the span's refill at the fastest rate involved, and a
    /// client moved to a slower quota waits at most one of the new
    /// quota's intervals (or windows) for its next request, past what it
    /// had booked. By algorithm:
    ///
    /// - [`TokenBucket`](crate::TokenBucket): the client keeps the tokens
    ///   it holds, at most the new capacity, refilling at the new rate. A
    ///   full bucket is credited with what the new rate has refilled since
    ///   it was full toward a larger capacity, so one idle for a whole new
    ///   refill moves as a fresh client; one in debt (a booking ahead)
    ///   stays empty until the same instant.
    /// - [`FixedWindow`](crate::FixedWindow): the requests left in the
    ///   window that is running, at most the new limit, are what is left
    ///   in the new quota's window that is running; a window closed by a
    ///   booking stays closed, and the booked requests count in the new
    ///   window where they run. A client that counted nothing since before
    ///   the new window began is a fresh client there.
    /// - [`SlidingWindowCounter`](crate::SlidingWindowCounter): the whole
    ///   requests the client's estimate leaves, at most the new limit, are
    ///   what is left in the new window that is running (what it used
    ///   weighs on it as the new windows slide past). A client whose counts
    ///   weigh nothing since the new window began is fresh there.
    /// - Two limits held together ([`Both`](crate::Both)): each limit's
    ///   state by its own rule above, a limit whose settings did not change
    ///   as it was.
    ///
    /// To give an upgraded client a fresh start rather than what it had
    /// left, [`reset`](Limiter::reset) it after the change (or after
    /// [`retier`](Limiter::retier)).
    ///
    /// A client whose own quota did not change (one of another tier) keeps
    /// its state exactly as it was, bookings included. Changes are made one
    /// at a time. A reservation booked before its tier's quota changes
    /// keeps its ready time; its charge is carried with the rest of the
    /// state. Cancelling a reservation booked before a change, of any tier,
    /// gives nothing back (see [`Reservation::cancel`](crate::Reservation::cancel)).
    ///
    /// `quota` is the tier's algorithm with its settings: a value
    /// [`tier_quota`](Limiter::tier_quota) returned, or a builder of the
    /// algorithm (validated here).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field with `tier.` in front
    /// (`tier.capacity`) if `quota` is a builder whose settings do not
    /// validate; nothing changes.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(10, Duration::from_secs(1))
    ///     .reconfigurable()
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// assert_eq!((0..8).filter(|_| limiter.allow_request("ann")).count(), 8);
    /// // Ann holds 2 of her 10 tokens: under a bucket of 20 she holds the
    /// // same 2, refilling at 20 a second; Bob, new, has the whole 20.
    /// limiter.set_quota(0, TokenBucket::builder().rate(20, Duration::from_secs(1)))?;
    /// assert_eq!((0..20).filter(|_| limiter.allow_request("ann")).count(), 2);
    /// assert_eq!(limiter.check("bob").limit(), 20);
    /// // A fresh start for Ann: reset her.
    /// limiter.reset("ann");
    /// assert_eq!(limiter.peek("ann").remaining(), 20);
    ///
    /// let err = limiter
    ///     .set_quota(0, TokenBucket::builder().rate(1, Duration::from_secs(1)).capacity(0))
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "tier.capacity");
    ///
    /// // A quota read back from one tier can be given to another.
    /// limiter.set_quota(3, limiter.tier_quota(0))?;
    /// assert_eq!(limiter.tier_quota(3), limiter.tier_quota(0));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn set_quota<Q>(&self, tier: Tier, quota: Q) -> Result<(), ConfigError>
    where
        A: TryFrom<Q>,
        ConfigError: From<<A as TryFrom<Q>>::Error>,
    {
        let quota = A::try_from(quota).map_err(|err| ConfigError::from(err).in_tier())?;
        A::change_quota(self, tier, quota);
        Ok(())
    }

    /// The quota `tier`'s clients are held to now: its own, or tier 0's if
    /// it has none. The value [`set_quota`](Limiter::set_quota) takes; its
    /// figures for a `RateLimit-Policy` header are [`Quota::of`](crate::Quota::of) it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, Quota};
    ///
    /// let second = Duration::from_secs(1);
    /// let limiter = FixedWindow::builder()
    ///     .limit(10)
    ///     .window(second)
    ///     .tier(2, FixedWindow::builder().limit(50).window(second))
    ///     .build()?;
    /// assert_eq!(Quota::of(&limiter.tier_quota(2)), Quota::new(50, second));
    /// assert_eq!(Quota::of(&limiter.tier_quota(1)), Quota::new(10, second));
    /// let fifty: FixedWindow = FixedWindow::builder().limit(50).window(second).try_into()?;
    /// assert_eq!(limiter.tier_quota(2), fifty);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn tier_quota(&self, tier: Tier) -> A {
        A::quota_of(self, tier)
    }

    /// The tier of `client_id`: for a client the limiter holds, the tier
    /// it was given when its state was created; for any other, the tier
    /// the resolver ([`tier_by`](crate::Builder::tier_by)) gives it now, or
    /// 0 without one. Records nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder()
    ///     .rate(1, Duration::from_secs(1))
    ///     .tier(1, TokenBucket::builder().rate(100, Duration::from_secs(1)))
    ///     .tier_by(|key: &String| u16::from(key.starts_with("pro-")))
    ///     .build()?;
    /// assert_eq!(limiter.tier_of("pro-1"), 1);
    /// assert_eq!(limiter.tier_of("free-2"), 0);
    /// assert!(limiter.is_empty(), "asking records nothing");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn tier_of<Q>(&self, client_id: &Q) -> Tier
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        A::known_tier(self, client_id).unwrap_or_else(|| self.resolve_tier(&client_id.to_owned()))
    }

    /// Runs the tier resolver ([`tier_by`](crate::Builder::tier_by)) for
    /// `client_id` again, and moves the client to the tier it answers now:
    /// for a client whose plan changed in your own records (an API key
    /// upgraded from free to pro). Returns that tier.
    ///
    /// The resolver runs when a client's state is created (its first
    /// request, or its first since it was forgotten: removed, or evicted
    /// once idle), for a peek at or [`tier_of`](Limiter::tier_of) a client
    /// the limiter does not hold, and here; never on a check of a client it
    /// holds. A change in your records reaches such a client only through
    /// this call (or [`remove`](Limiter::remove), which forgets its state
    /// instead).
    ///
    /// A client the limiter holds in another tier keeps its history,
    /// converted to the new tier's quota by the move rule
    /// [`set_quota`](Limiter::set_quota) follows (a move never adds to
    /// what a client may take; what it may take grows at the new rate up
    /// to the new capacity), as one step in its
    /// history: a check lands wholly before the move, under the old tier,
    /// or wholly after, under the new one. Checks never wait for it. A
    /// client already in that tier, or not held at all (its next request
    /// runs the resolver anyway), is left as it is. Cancelling a
    /// reservation the client booked before the move gives nothing back.
    ///
    /// A move carries the client as a quota change carries every client:
    /// it rebuilds the store's tables, shard by shard under each shard's
    /// lock, so it costs a pass over every client held (as
    /// `set_quota` does). Moves and quota changes are made one at a time.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::collections::HashSet;
    /// use std::sync::{Arc, RwLock};
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, TokenBucket};
    ///
    /// // Your own records of who pays.
    /// let pro: Arc<RwLock<HashSet<String>>> = Arc::default();
    /// let plans = Arc::clone(&pro);
    /// let limiter = TokenBucket::builder()
    ///     .rate(2, Duration::from_secs(60))
    ///     .tier(1, TokenBucket::builder().rate(10, Duration::from_secs(60)))
    ///     .tier_by(move |key: &String| u16::from(plans.read().unwrap().contains(key)))
    ///     .clock(ManualClock::new())
    ///     .build()?;
    ///
    /// assert!(limiter.allow_request("ann"));
    /// pro.write().unwrap().insert("ann".to_owned());
    /// // The resolver ran at Ann's first request: the upgrade is not seen yet.
    /// assert_eq!(limiter.peek("ann").limit(), 2);
    ///
    /// assert_eq!(limiter.retier("ann"), 1);
    /// // Ann holds the one token left of her free bucket, refilling at the
    /// // pro rate, 10 a minute, toward the pro bucket of 10.
    /// assert_eq!(limiter.peek("ann").remaining(), 1);
    /// assert_eq!(limiter.check("ann").limit(), 10);
    /// // An upgrade with a fresh start: reset after the move.
    /// limiter.reset("ann");
    /// assert_eq!(limiter.peek("ann").remaining(), 10);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn retier<Q>(&self, client_id: &Q) -> Tier
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let tier = self.resolve_tier(&client_id.to_owned());
        A::move_client(self, client_id, tier);
        tier
    }
}

/// An algorithm that each tier of a [`Tiered`] limiter can run, whose
/// quota can be read ([`Limiter::tier_quota`]) and changed
/// ([`Limiter::set_quota`]) while the limiter runs: the
/// [`TokenBucket`](crate::TokenBucket), the
/// [`FixedWindow`](crate::FixedWindow), the
/// [`SlidingWindowCounter`](crate::SlidingWindowCounter), and two of them
/// held together ([`Both`](crate::Both)).
///
/// Implemented by these types only; its methods are internal.
///
/// # Examples
///
/// ```
/// use tollgate::{Both, FixedWindow, TierAlgorithm, TokenBucket};
///
/// fn tiers_can_run<A: TierAlgorithm>() {}
/// tiers_can_run::<TokenBucket>();
/// tiers_can_run::<Both<TokenBucket, FixedWindow>>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tier's algorithm",
    note = "tiers run a TokenBucket, a FixedWindow, a SlidingWindowCounter, or a pair of them (Both)"
)]
pub trait TierAlgorithm: Clone + PartialEq + Send + Sync + 'static {
    /// Gives `tier` the quota `quota`, carrying every client over.
    #[doc(hidden)]
    fn change_quota<K, C>(limiter: &Limiter<Tiered<Self>, K, C>, tier: Tier, quota: Self)
    where
        Tiered<Self>: Algorithm,
        K: Hash + Eq + Clone + Send + Sync + 'static,
        C: Clock;

    /// The quota `tier` is held to now.
    #[doc(hidden)]
    fn quota_of<K, C>(limiter: &Limiter<Tiered<Self>, K, C>, tier: Tier) -> Self
    where
        Tiered<Self>: Algorithm,
        K: Hash + Eq + Clone + Send + Sync + 'static,
        C: Clock;

    /// The tier of a client the limiter holds alive, if it does.
    #[doc(hidden)]
    fn known_tier<K, C, Q>(limiter: &Limiter<Tiered<Self>, K, C>, client_id: &Q) -> Option<Tier>
    where
        Tiered<Self>: Algorithm,
        K: Borrow<Q> + Hash + Eq + Clone + Send + Sync + 'static,
        Q: Hash + Eq + ?Sized,
        C: Clock;

    /// Moves a client the limiter holds alive to `tier`, converting its
    /// state.
    #[doc(hidden)]
    fn move_client<K, C, Q>(limiter: &Limiter<Tiered<Self>, K, C>, client_id: &Q, tier: Tier)
    where
        Tiered<Self>: Algorithm,
        K: Borrow<Q> + Hash + Eq + Clone + Send + Sync + 'static,
        Q: Hash + Eq + ?Sized,
        C: Clock;
}

// One impl per algorithm rather than a blanket impl over the crate's
// internal traits, whose bounds rustdoc would show on every type's page.
macro_rules! tier_algorithm {
    ($(#[$attr:meta])* [$($generics:tt)*] $algorithm:ty $(where $($bounds:tt)*)?) => {
        $(#[$attr])*
        impl<$($generics)*> TierAlgorithm for $algorithm $(where $($bounds)*)? {
            fn change_quota<K, C>(limiter: &Limiter<Tiered<Self>, K, C>, tier: Tier, quota: Self)
            where
                K: Hash + Eq + Clone + Send + Sync + 'static,
                C: Clock,
            {
                change_quota(limiter, tier, quota);
            }

            fn quota_of<K, C>(limiter: &Limiter<Tiered<Self>, K, C>, tier: Tier) -> Self
            where
                K: Hash + Eq + Clone + Send + Sync + 'static,
                C: Clock,
            {
                limiter.algorithm.quota_of(tier)
            }

            fn known_tier<K, C, Q>(
                limiter: &Limiter<Tiered<Self>, K, C>,
                client_id: &Q,
            ) -> Option<Tier>
            where
                K: Borrow<Q> + Hash + Eq + Clone + Send + Sync + 'static,
                Q: Hash + Eq + ?Sized,
                C: Clock,
            {
                limiter
                    .store
                    .get(client_id, |cell| (cell.life() == Life::Live).then(|| cell.tier()))
                    .flatten()
            }

            fn move_client<K, C, Q>(
                limiter: &Limiter<Tiered<Self>, K, C>,
                client_id: &Q,
                tier: Tier,
            ) where
                K: Borrow<Q> + Hash + Eq + Clone + Send + Sync + 'static,
                Q: Hash + Eq + ?Sized,
                C: Clock,
            {
                move_client(limiter, client_id, tier);
            }
        }
    };
}
tier_algorithm!([] TokenBucket);
tier_algorithm!([] FixedWindow);
tier_algorithm!([] SlidingWindowCounter);
tier_algorithm!(
    // Hidden from the docs: its bounds name the crate's internal traits
    // (the trait's own docs list the pairs).
    #[doc(hidden)]
    [A, B] Both<A, B>
    where
        Both<A, B>: Transitions + FromParams + Clone + PartialEq,
        <Both<A, B> as Transitions>::Word: Packed,
);

/// Takes the limiter's one-change-at-a-time lock.
fn one_at_a_time<A: Algorithm, K, C>(limiter: &Limiter<A, K, C>) -> std::sync::MutexGuard<'_, ()> {
    // A change that panicked midway (a key's `Hash`, say) left some
    // clients under the table before it, which then stays allocated
    // for them; this change carries them over like every other client.
    limiter.control.lock().unwrap_or_else(|poisoned| {
        limiter.control.clear_poison();
        poisoned.into_inner()
    })
}

/// Moves `client_id`'s client, if the limiter holds it alive in another
/// tier, to `tier` ([`Limiter::retier`]): a rebuild of the store that
/// carries that one cell to the new tier, its state converted, and moves
/// every other cell as it is.
fn move_client<A, K, C, Q>(limiter: &Limiter<Tiered<A>, K, C>, client_id: &Q, tier: Tier)
where
    A: Transitions + FromParams + Clone + PartialEq,
    A::Word: Packed,
    K: Borrow<Q> + Hash + Eq + Clone + Send + Sync + 'static,
    Q: Hash + Eq + ?Sized,
    C: Clock,
{
    // One at a time with quota changes: every live cell names the current
    // quota table while no change is under way, so the one carried here is
    // converted from the quota its state was written under.
    let _one_at_a_time = one_at_a_time(limiter);
    let algorithm = &limiter.algorithm;
    // Pinned throughout, so that the table holding the cell found stays
    // allocated: no other cell can come to live at its address while the
    // rebuild below looks for it by address.
    let _pinned = crossbeam_epoch::pin();
    loop {
        let found = limiter.store.get(client_id, |cell| {
            (cell.life() == Life::Live && cell.tier() != tier).then(|| ptr::from_ref(cell))
        });
        // Not held (its next request runs the resolver), or held in `tier`.
        let Some(Some(target)) = found else {
            return;
        };
        let mut carried = false;
        // The client's state is replaced: bookings made on the old one give
        // nothing back (see `crate::reservation`).
        limiter
            .renewals
            .renew(limiter.store.hash_of(client_id), || {
                limiter.store.rebuild_all(|cell| {
                    if ptr::eq(cell, target) {
                        carried = true;
                        algorithm.carry_to(cell, Some(tier), || limiter.clock.now_nanos())
                    } else {
                        cell.relocate()
                    }
                });
            });
        if carried {
            return;
        }
        // An insert rebuilt the client's shard between the lookup and the
        // rebuild's visit to it, moving the cell: look it up again.
    }
}

/// Gives `tier` the quota `quota`, carrying every client over
/// ([`Limiter::set_quota`]).
fn change_quota<A, K, C>(limiter: &Limiter<Tiered<A>, K, C>, tier: Tier, quota: A)
where
    A: Transitions + FromParams + Clone + PartialEq,
    A::Word: Packed,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    let _one_at_a_time = one_at_a_time(limiter);
    #[cfg(feature = "tracing")]
    let granted = FromParams::granted(&quota);
    let algorithm = &limiter.algorithm;
    // Windows start on the Unix epoch's multiples, as the limiter's own.
    let mut quota = quota;
    quota.align(crate::clock::unix_nanos(limiter.clock.unix_origin()));
    // Every client's state is carried into a new one: no booking made
    // before the change gives anything back after it.
    limiter.renewals.renew_all(|| {
        algorithm.change(tier, quota, || {
            limiter
                .store
                .rebuild_all(|cell| algorithm.carry(cell, || limiter.clock.now_nanos()));
        });
    });
    #[cfg(feature = "tracing")]
    limiter.quota_changed(tier, granted);
}
