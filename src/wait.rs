//! Layer 5, with the `tokio` feature: waiting for capacity in async code,
//! on tokio's timer, for the keyed and the direct limiter alike. The core
//! stays runtime-agnostic: this is a [`Reservation`](crate::Reservation)
//! and a sleep.

use core::borrow::Borrow;
use core::hash::Hash;
use core::time::Duration;

use crate::cell::Algorithm;
use crate::clock::Clock;
use crate::error::ReserveError;
use crate::limiter::{DirectLimiter, Limiter};
use crate::reservation::{Reservable, Reservation};

impl<A, K, C> Limiter<A, K, C>
where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    /// Waits until one request of `client_id` may proceed, and takes it:
    /// [`until_ready_n`](Limiter::until_ready_n) with a cost of 1.
    ///
    /// Offered by the [`Reservable`](crate::Reservable) algorithms only:
    ///
    /// ```compile_fail,E0277
    /// use std::time::Duration;
    /// use tollgate::SlidingWindowCounter;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = SlidingWindowCounter::builder().limit(5).window(Duration::from_secs(1)).build()?;
    /// limiter.until_ready("alice").await?; // not `Reservable`
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`until_ready_n`](Limiter::until_ready_n)'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = TokenBucket::builder().rate(1_000, Duration::from_secs(1)).build()?;
    /// for _ in 0..1_010 {
    ///     limiter.until_ready("alice").await?; // the last 10 wait about 1 ms each
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn until_ready<Q>(&self, client_id: &Q) -> Result<(), ReserveError>
    where
        A: Reservable,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.until_ready_jittered(client_id, 1, Duration::ZERO)
            .await
    }

    /// Waits until a request of `cost` units of `client_id` may proceed,
    /// and takes it: books it ([`reserve_n`](Limiter::reserve_n), with no
    /// limit on the wait), so that waiting clients are served in order, and
    /// sleeps on tokio's timer until the limiter's clock reaches its ready
    /// time.
    ///
    /// Cancellation safe: if the future is dropped while it sleeps, the
    /// booking is cancelled (given back if nothing was charged to the client
    /// since; see [`Reservation::cancel`](crate::Reservation::cancel)).
    ///
    /// The limiter's clock must advance with tokio's: a frozen
    /// [`ManualClock`](crate::ManualClock) never becomes ready. Under
    /// tokio's paused time, give the limiter a
    /// [`TokioClock`](crate::TokioClock), which follows it.
    ///
    /// # Errors
    ///
    /// Nothing is charged on an error. [`ReserveError::Cost`] if `cost`
    /// exceeds the capacity; [`ReserveError::TooLong`] with a wait of
    /// `Duration::MAX` if the request would conform only after the end of
    /// the clock's range; [`ReserveError::Full`] for a new client that a
    /// full limiter denies; [`ReserveError::Unsupported`] for a fixed
    /// window whose limit lies in the top half of its range (see
    /// [`reserve_n`](Limiter::reserve_n)). Only a
    /// [`Reservable`](crate::Reservable) algorithm offers this method.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = TokenBucket::builder().rate(100, Duration::from_millis(10)).build()?;
    /// limiter.until_ready_n("alice", 100).await?;
    /// limiter.until_ready_n("alice", 5).await?; // about half a millisecond
    /// assert!(limiter.until_ready_n("alice", 101).await.is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn until_ready_n<Q>(&self, client_id: &Q, cost: u64) -> Result<(), ReserveError>
    where
        A: Reservable,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.until_ready_jittered(client_id, cost, Duration::ZERO)
            .await
    }

    /// As [`until_ready_n`](Limiter::until_ready_n), but a request that has
    /// to wait sleeps up to `max_jitter` longer, so that clients woken by
    /// one refill do not all retry at the same instant. The jitter is drawn
    /// from the limiter's randomly seeded hasher (different for each client
    /// and booking); a request that needs no wait gets none.
    ///
    /// # Errors
    ///
    /// As [`until_ready_n`](Limiter::until_ready_n)'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = TokenBucket::builder().rate(1, Duration::from_millis(1)).build()?;
    /// limiter.until_ready_jittered("alice", 1, Duration::from_millis(2)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn until_ready_jittered<Q>(
        &self,
        client_id: &Q,
        cost: u64,
        max_jitter: Duration,
    ) -> Result<(), ReserveError>
    where
        A: Reservable,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let reservation = self.reserve_n(client_id, cost, Duration::MAX)?;
        sleep_then_commit(reservation, |ready_at| {
            jitter(self.key_hash(client_id), ready_at, max_jitter)
        })
        .await;
        Ok(())
    }
}

impl<A: Algorithm, C: Clock> DirectLimiter<A, C> {
    /// Waits until one request may proceed, and takes it:
    /// [`until_ready_n`](DirectLimiter::until_ready_n) with a cost of 1.
    ///
    /// Offered by the [`Reservable`](crate::Reservable) algorithms only:
    ///
    /// ```compile_fail,E0277
    /// use std::time::Duration;
    /// use tollgate::SlidingWindowCounter;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = SlidingWindowCounter::builder()
    ///     .limit(5)
    ///     .window(Duration::from_secs(1))
    ///     .build_direct()?;
    /// limiter.until_ready().await?; // not `Reservable`
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`until_ready_n`](DirectLimiter::until_ready_n)'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let upstream = TokenBucket::builder()
    ///     .rate(1_000, Duration::from_secs(1))
    ///     .build_direct()?;
    /// for _ in 0..1_010 {
    ///     upstream.until_ready().await?; // the last 10 wait about 1 ms each
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn until_ready(&self) -> Result<(), ReserveError>
    where
        A: Reservable,
    {
        self.until_ready_n(1).await
    }

    /// Waits until a request of `cost` units may proceed, and takes it:
    /// books it ([`reserve_n`](DirectLimiter::reserve_n), with no limit on
    /// the wait), so that waiting callers are served in the order they
    /// booked, and sleeps on tokio's timer until the limiter's clock
    /// reaches its ready time. The keyed limiter's
    /// [`Limiter::until_ready_n`], on the one budget.
    ///
    /// Cancellation safe: if the future is dropped while it sleeps, the
    /// booking is cancelled (given back if nothing was charged to the
    /// limiter since; see [`Reservation::cancel`](crate::Reservation::cancel)).
    ///
    /// The limiter's clock must advance with tokio's: a frozen
    /// [`ManualClock`](crate::ManualClock) never becomes ready. Under
    /// tokio's paused time, give the limiter a
    /// [`TokioClock`](crate::TokioClock), which follows it.
    ///
    /// # Errors
    ///
    /// Nothing is charged on an error. [`ReserveError::Cost`] if `cost`
    /// exceeds the capacity; [`ReserveError::TooLong`] with a wait of
    /// `Duration::MAX` if the request would conform only after the end of
    /// the clock's range; [`ReserveError::Unsupported`] for a fixed window
    /// whose limit lies in the top half of its range (see
    /// [`reserve_n`](DirectLimiter::reserve_n)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::TokenBucket;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let upstream = TokenBucket::builder()
    ///     .rate(100, Duration::from_millis(10))
    ///     .build_direct()?;
    /// upstream.until_ready_n(100).await?;
    /// upstream.until_ready_n(5).await?; // about half a millisecond
    /// assert!(upstream.until_ready_n(101).await.is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn until_ready_n(&self, cost: u64) -> Result<(), ReserveError>
    where
        A: Reservable,
    {
        let reservation = self.reserve_n(cost, Duration::MAX)?;
        // Bookings on one budget are ready one after another, never
        // together: no jitter is needed to spread them.
        sleep_then_commit(reservation, |_| Duration::ZERO).await;
        Ok(())
    }
}

/// Sleeps on tokio's timer until `reservation` may proceed (and, if it has
/// to wait at all, the `jitter` drawn for its ready time longer), then
/// commits it. Dropped while it sleeps, it drops the reservation, which
/// cancels it.
async fn sleep_then_commit<A, K, C>(
    reservation: Reservation<'_, A, K, C>,
    jitter: impl FnOnce(Duration) -> Duration,
) where
    A: Algorithm,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
{
    if reservation.wait() > Duration::ZERO {
        let jitter = jitter(reservation.ready_at());
        tokio::time::sleep(reservation.wait().saturating_add(jitter)).await;
        // tokio's timer and the limiter's clock may disagree (a coarse
        // clock lags): proceed only once the limiter's clock says so.
        loop {
            let left = reservation.remaining_wait();
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(left).await;
        }
    }
    reservation.commit();
}

/// A jitter in `0..=max` for a booking ready at `ready_at` of the client
/// whose seeded hash is `hash`: the two mixed by splitmix64's finaliser.
/// Unpredictable to clients, and different for two clients (or two
/// bookings of one) ready together.
fn jitter(hash: u64, ready_at: Duration, max: Duration) -> Duration {
    let max = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    if max == 0 {
        return Duration::ZERO;
    }
    let mut z = hash ^ (ready_at.as_nanos() as u64);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    Duration::from_nanos(z % max.saturating_add(1).max(1))
}
