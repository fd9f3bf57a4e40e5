//! Layer 1: where time comes from.
//!
//! The limiter reads a [`Clock`] once per check and hands the reading, a plain
//! `u64` of nanoseconds, to the algorithm layer. Nothing below this layer ever
//! reads time itself, which is what lets the loom models and the reference-model
//! tests drive time by hand with a [`ManualClock`].

use core::fmt;
use core::time::Duration;

use crate::error::ConfigError;
use crate::sync::{Arc, AtomicU64, Ordering};

/// A source of monotonic time in nanoseconds.
///
/// Readings are nanoseconds since an origin of the clock's choosing; only
/// differences between readings matter, except for where windows start:
/// the fixed window's and the sliding window counter's windows start on
/// whole multiples of their length in Unix time, as their Redis limiters'
/// do. A limiter learns where its clock's origin lies in Unix time from
/// [`unix_origin`](Clock::unix_origin), once, when it is built.
///
/// # Contract
///
/// A clock should never go backwards. If a user clock does, the limiter still
/// never panics and never admits more than the exact model would: see
/// "Time" in the crate documentation for what each algorithm does with a
/// backward step.
///
/// Readings at or above 2<sup>63</sup> ns (292 years after the origin) are
/// treated as 2<sup>63</sup> − 1, where all windowed algorithms see one last,
/// endless window.
///
/// # Examples
///
/// ```
/// use tollgate::Clock;
///
/// /// A clock that reads a shared counter of milliseconds.
/// struct Millis(std::sync::Arc<std::sync::atomic::AtomicU64>);
///
/// impl Clock for Millis {
///     fn now_nanos(&self) -> u64 {
///         self.0.load(std::sync::atomic::Ordering::Relaxed) * 1_000_000
///     }
/// }
/// let clock = Millis(Default::default());
/// assert_eq!(clock.now_nanos(), 0);
/// ```
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's origin.
    fn now_nanos(&self) -> u64;

    /// The Unix time at which this clock read 0, read once by a limiter
    /// when it is built: a window of `W` starts wherever the Unix time is a
    /// whole multiple of `W`. [`MonotonicClock`], [`InstantClock`] and
    /// [`CoarseClock`] read the system's wall clock when they are made, so
    /// their windows start on the Unix epoch's multiples (the clock's own
    /// rate then rules: a wall clock stepped or slewed later does not move
    /// them). The default, zero, takes the readings themselves as Unix
    /// time: a [`ManualClock`]'s windows start on multiples of their
    /// length from its 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock, MonotonicClock};
    ///
    /// assert_eq!(ManualClock::new().unix_origin(), Duration::ZERO);
    /// // 2020-09-13, long past.
    /// assert!(MonotonicClock::new().unix_origin() > Duration::from_secs(1_600_000_000));
    /// ```
    fn unix_origin(&self) -> Duration {
        Duration::ZERO
    }
}

// std's `Arc` in both builds: under `--features loom`, `crate::sync::Arc` is
// a crate-private shim, and this impl is public API.
impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }

    fn unix_origin(&self) -> Duration {
        (**self).unix_origin()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }

    fn unix_origin(&self) -> Duration {
        (**self).unix_origin()
    }
}

/// A Unix time in ns, as the algorithms count it (saturating in 2554).
pub(crate) fn unix_nanos(unix: Duration) -> u64 {
    u64::try_from(unix.as_nanos()).unwrap_or(u64::MAX)
}

/// The system's wall clock now, as time since the Unix epoch (zero for a
/// wall clock set before it).
fn unix_now() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

/// The default clock: the CPU's time-stamp counter through [`quanta`], scaled
/// to nanoseconds since the clock was created.
///
/// A read costs about 11 ns here against about 28 ns for
/// [`std::time::Instant`] (see `docs/DESIGN.md`, "Clock", for the figures and
/// the command). Where the processor has no invariant TSC, `quanta` falls back
/// to the OS monotonic clock by itself.
///
/// # Readings across threads
///
/// Each thread reads the counter of the core it runs on, and the read is not
/// ordered with the thread's memory accesses, so one thread's reading can lie
/// a little behind a reading that another thread took before it: by under
/// 100 ns on the 2-core machine we measured (`examples/clock_skew.rs`), where
/// [`InstantClock`] never did. A thread that reads its clock and is then
/// descheduled before it updates the client lags in the same way, by as long
/// as it was away, with any clock. A thread whose readings lag true time by
/// at most `L` can never make the limiter admit more than the algorithm
/// allows over an interval `L` longer (a token bucket: at most
/// `capacity + ⌊(b − a + L) · rate⌋` tokens in any interval `[a, b]` of true
/// time; a window: as if the interval began `L` earlier), and delays a
/// client by at most `L`: a denial's `retry_after` exceeds the exact wait by
/// at most the lag, and is never shorter. A check whose reading is no
/// earlier than those of the admissions before it decides exactly as with a
/// perfect clock.
///
/// # Examples
///
/// ```
/// use tollgate::{Clock, MonotonicClock};
///
/// let clock = MonotonicClock::new();
/// let a = clock.now_nanos();
/// let b = clock.now_nanos();
/// assert!(b >= a);
/// ```
#[derive(Clone)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    origin: u64,
    unix: Duration,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    #[must_use]
    pub fn new() -> Self {
        #[cfg(all(test, not(feature = "loom")))]
        tests::MONOTONIC_CLOCKS_MADE.with(|made| made.set(made.get() + 1));
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Self {
            clock,
            origin,
            unix: unix_now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MonotonicClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MonotonicClock").finish_non_exhaustive()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // `delta_as_nanos` returns 0 rather than wrapping if the counter ever
        // reads below the origin (a TSC skewed between sockets).
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }

    fn unix_origin(&self) -> Duration {
        self.unix
    }
}

/// A clock read from memory: a background thread stores a
/// [`MonotonicClock`] reading every `resolution`, and a reading is one load
/// of a word that changes once per `resolution`, so checks on many cores
/// share it without contention.
///
/// It trades accuracy for speed: a reading lags the true time by up to
/// `resolution` (plus however late the thread is scheduled). A lagging
/// reading makes a check judged as if made that much earlier, with the
/// consequences [`MonotonicClock`] describes for a lagging core: a request
/// may be denied up to the lag longer than an exact clock would deny it,
/// and an admission may be charged up to the lag early. Readings never go
/// backwards. Pick a resolution well below the limiter's refill interval or
/// window (say 1 ms against limits per second).
///
/// The thread is spawned by [`CoarseClock::new`], shared by every clone, and
/// ends within one `resolution` of the last clone being dropped.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, CoarseClock, TokenBucket};
///
/// let clock = CoarseClock::new(Duration::from_millis(1))?;
/// let limiter = TokenBucket::builder()
///     .rate(100, Duration::from_secs(1))
///     .clock(clock.clone())
///     .build()?;
/// assert!(limiter.allow_request("alice"));
/// let a = clock.now_nanos();
/// std::thread::sleep(Duration::from_millis(5));
/// assert!(clock.now_nanos() >= a, "readings never go backwards");
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct CoarseClock {
    shared: Arc<Coarse>,
}

/// What a [`CoarseClock`]'s clones and its thread share.
struct Coarse {
    nanos: AtomicU64,
    resolution: Duration,
    unix: Duration,
}

impl CoarseClock {
    /// The finest resolution accepted: 1 µs.
    pub const MIN_RESOLUTION: Duration = Duration::from_micros(1);
    /// The coarsest resolution accepted: 1 s.
    pub const MAX_RESOLUTION: Duration = Duration::from_secs(1);

    /// Starts the thread that updates the reading every `resolution`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::OutOfRange`] (field `resolution`) if `resolution` is
    /// outside [`MIN_RESOLUTION`](Self::MIN_RESOLUTION) to
    /// [`MAX_RESOLUTION`](Self::MAX_RESOLUTION), and
    /// [`ConfigError::OutOfRange`] too if the thread cannot be spawned.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::CoarseClock;
    ///
    /// assert!(CoarseClock::new(Duration::from_millis(1)).is_ok());
    /// assert_eq!(CoarseClock::new(Duration::ZERO).unwrap_err().field(), "resolution");
    /// ```
    pub fn new(resolution: Duration) -> Result<Self, ConfigError> {
        ConfigError::check_range(
            "resolution",
            resolution.as_nanos(),
            (
                Self::MIN_RESOLUTION.as_nanos(),
                Self::MAX_RESOLUTION.as_nanos(),
            ),
            "ns",
            "a coarse clock updates at least every second and at most every microsecond",
        )?;
        let source = MonotonicClock::new();
        let shared = Arc::new(Coarse {
            nanos: AtomicU64::new(source.now_nanos()),
            resolution,
            unix: source.unix_origin(),
        });
        let ours = shared.clone();
        std::thread::Builder::new()
            .name("tollgate-coarse-clock".into())
            .spawn(move || {
                // Ends once every clone but this one is gone.
                while Arc::strong_count(&ours) > 1 {
                    std::thread::sleep(ours.resolution);
                    // Never backwards, even if this thread moved to a core
                    // whose counter lags. Relaxed: the reading is a lone
                    // value that publishes no other memory, as for
                    // `ManualClock`.
                    let _ = ours.nanos.fetch_max(source.now_nanos(), Ordering::Relaxed);
                }
            })
            .map_err(|_| ConfigError::OutOfRange {
                field: "resolution",
                value: resolution.as_nanos(),
                min: Self::MIN_RESOLUTION.as_nanos(),
                max: Self::MAX_RESOLUTION.as_nanos(),
                unit: "ns",
                reason: "the clock's update thread could not be spawned",
            })?;
        Ok(Self { shared })
    }

    /// How often the reading is updated.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::CoarseClock;
    ///
    /// let clock = CoarseClock::new(Duration::from_millis(2))?;
    /// assert_eq!(clock.resolution(), Duration::from_millis(2));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn resolution(&self) -> Duration {
        self.shared.resolution
    }
}

impl fmt::Debug for CoarseClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoarseClock")
            .field("resolution", &self.shared.resolution)
            .finish_non_exhaustive()
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // Relaxed: see the store in `new`.
        self.shared.nanos.load(Ordering::Relaxed)
    }

    fn unix_origin(&self) -> Duration {
        self.shared.unix
    }
}

/// [`std::time::Instant`] as a [`Clock`]: the OS monotonic clock, slower to
/// read than [`MonotonicClock`] but independent of the CPU's counter.
///
/// # Examples
///
/// ```
/// use tollgate::{Clock, InstantClock};
///
/// let clock = InstantClock::new();
/// assert!(clock.now_nanos() < 1_000_000_000);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct InstantClock {
    origin: std::time::Instant,
    unix: Duration,
}

impl InstantClock {
    /// A clock whose origin is now.
    #[must_use]
    pub fn new() -> Self {
        Self {
            origin: std::time::Instant::now(),
            unix: unix_now(),
        }
    }
}

impl Default for InstantClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for InstantClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn unix_origin(&self) -> Duration {
        self.unix
    }
}

/// tokio's clock, [`tokio::time::Instant`], as a [`Clock`] (`tokio`
/// feature): the time tokio's timer sleeps on, so that a limiter on it
/// follows tokio's paused time in tests. Under
/// `#[tokio::test(start_paused = true)]`, or after `tokio::time::pause()`
/// (both need tokio's `test-util` feature), the limiter refills exactly as
/// `tokio::time::advance` (or the runtime's auto-advance) moves the time,
/// and [`until_ready`](crate::Limiter::until_ready) returns after exactly
/// the wait the limiter computed, in no real time.
///
/// Readings are the time since the clock was made, as tokio reports it to
/// the calling thread: a runtime's own time in its tasks (paused, if the
/// runtime's is), and the OS monotonic clock outside any runtime, where a
/// paused runtime's time is not seen. Make the clock, and check the
/// limiter, inside the runtime whose time it should follow. Windows start
/// on multiples of their length from the clock's origin, as a
/// [`ManualClock`]'s do ([`unix_origin`](Clock::unix_origin) is zero), so a
/// test sees the same windows on every run.
///
/// It is a clock for tests: outside paused time it reads what
/// [`InstantClock`] reads, with windows that do not start on Unix time's
/// multiples; and once a runtime's time has been paused, tokio reads
/// time under a lock of its own, so a check on this clock may wait for it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{TokenBucket, TokioClock};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // In a test: #[tokio::test(start_paused = true)]
/// let limiter = TokenBucket::builder()
///     .rate(1, Duration::from_secs(10))
///     .clock(TokioClock::new())
///     .build()?;
/// assert!(limiter.allow_request("alice"));
/// assert!(!limiter.allow_request("alice"));
/// tokio::time::advance(Duration::from_secs(10)).await;
/// assert!(limiter.allow_request("alice")); // refilled, in no real time
///
/// let start = tokio::time::Instant::now();
/// limiter.until_ready("alice").await?;
/// assert_eq!(start.elapsed(), Duration::from_secs(10));
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "tokio")]
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
impl TokioClock {
    /// A clock whose origin is tokio's time now, as the calling thread
    /// sees it.
    #[must_use]
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

#[cfg(feature = "tokio")]
impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "tokio")]
impl Clock for TokioClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        duration_to_nanos(tokio::time::Instant::now().saturating_duration_since(self.origin))
    }
}

/// A clock moved by hand, for tests and simulations.
///
/// It starts at 0. Clones share one reading, so a test keeps a clone and moves
/// the time that a limiter sees. Under `--features loom` its reading is a loom
/// atomic, so models can advance time between checks.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let handle = clock.clone();
/// handle.advance(Duration::from_millis(5));
/// assert_eq!(clock.now_nanos(), 5_000_000);
/// ```
#[derive(Clone)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading 0.
    #[must_use]
    pub fn new() -> Self {
        Self {
            nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves the clock forward by `by`, saturating at `u64::MAX` nanoseconds.
    pub fn advance(&self, by: Duration) {
        let by = duration_to_nanos(by);
        // Relaxed: the reading is a lone value that publishes no other memory;
        // a reader needs only some value in its modification order.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(by))
            });
    }

    /// Sets the reading to `to` since the origin. Unlike a real monotonic
    /// clock this may move time backwards, which is how tests exercise a
    /// misbehaving user clock.
    pub fn set(&self, to: Duration) {
        // Relaxed: as in `advance`.
        self.nanos.store(duration_to_nanos(to), Ordering::Relaxed);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("nanos", &self.now_nanos())
            .finish()
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // Relaxed: pairs with nothing; see `advance`.
        self.nanos.load(Ordering::Relaxed)
    }
}

/// Whole nanoseconds in `d`, saturating at `u64::MAX` (584 years).
pub(crate) fn duration_to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(all(test, not(feature = "loom")))]
pub(crate) mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use super::{Clock, CoarseClock, MonotonicClock};

    #[test]
    fn a_coarse_clock_follows_the_monotonic_clock_within_its_resolution() {
        let resolution = Duration::from_millis(1);
        let coarse = CoarseClock::new(resolution).unwrap();
        let exact = MonotonicClock::new();
        let (c0, e0) = (coarse.now_nanos(), exact.now_nanos());
        let mut last = c0;
        for _ in 0..50 {
            std::thread::sleep(Duration::from_micros(200));
            let c = coarse.now_nanos();
            assert!(c >= last, "a coarse reading went backwards");
            last = c;
        }
        std::thread::sleep(Duration::from_millis(20));
        let de = exact.now_nanos() - e0;
        // The updating thread catches up with the interval the exact clock
        // measured, give or take one resolution, however late this shared
        // machine schedules it (polled, not timed: nothing here asserts how
        // soon).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while coarse.now_nanos() - c0 + 2 * 1_000_000 < de {
            assert!(
                std::time::Instant::now() < deadline,
                "the coarse reading stopped following the clock"
            );
            std::thread::sleep(resolution);
        }
    }

    #[test]
    fn a_coarse_clock_rejects_resolutions_out_of_range() {
        for bad in [
            Duration::ZERO,
            Duration::from_nanos(999),
            Duration::from_secs(2),
        ] {
            assert_eq!(CoarseClock::new(bad).unwrap_err().field(), "resolution");
        }
        assert!(CoarseClock::new(CoarseClock::MIN_RESOLUTION).is_ok());
        assert!(CoarseClock::new(CoarseClock::MAX_RESOLUTION).is_ok());
    }

    std::thread_local! {
        /// How many `MonotonicClock`s this thread has made: creating one
        /// calibrates the CPU's counter, which a limiter given its own clock
        /// must not pay for.
        pub(crate) static MONOTONIC_CLOCKS_MADE: Cell<u64> = const { Cell::new(0) };
    }
}
