//! The fixed window counter.
//!
//! # The word
//!
//! ```text
//!  63                      64−I  63−I                     0
//! +---------------------------+---------------------------+
//! |  window index k (I bits)  |  count (64 − I bits)      |
//! +---------------------------+---------------------------+
//! ```
//!
//! `I = bits(NOW_MAX / W + 3)`, the full index with no wraparound (counted
//! from 1, the window the clock starts in), so the
//! limit may be at most 2<sup>64−I</sup> − 1: 2<sup>30</sup> − 1 for a
//! one-second window. A request of cost `n` is admitted iff
//! `count + n ≤ limit` in the current window; entering a later window resets
//! the count. A fresh client is the word 0.
//!
//! # Bookings
//!
//! A request booked ahead ([`WordAlgorithm::reserve`]) that does not fit
//! in window `k` goes to the first later window where it fits, and closes
//! the windows before it, so that requests are served in the order they
//! booked. A count above the limit says so: `(k, limit + b)` is window `k`
//! closed, with `b` units booked in window `k + 1`; a booking that fits in
//! neither writes `(k + 1, limit + cost)`. A reading in window `k + 1` sees
//! the `b` units as that window's count; a reading before `k` is treated as
//! `k`'s start, as for any reading before the recorded window, and `k` is
//! closed. Configurations whose limit does not leave room for `2·limit` in
//! the count (the top half of the range) do not book ahead.

use core::fmt;
use core::time::Duration;

use super::window::{check_limit, check_window, Windows};
use super::{clamp_now, Reserve, WordAlgorithm, FRESH, NOW_MAX};
use crate::error::ConfigError;

/// The fixed window counter: at most `limit` requests in each clock-aligned
/// window.
///
/// The cheapest algorithm in the crate, at the price of the boundary spike:
/// a client may send `limit` requests at the end of one window and `limit`
/// more at the start of the next. Memory per client is one `u64`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{FixedWindow, ManualClock};
///
/// let clock = ManualClock::new();
/// let limiter = FixedWindow::builder()
///     .limit(1)
///     .window(Duration::from_secs(1))
///     .clock(clock.clone())
///     .build()?;
/// assert!(limiter.allow_request("alice"));
/// assert!(!limiter.allow_request("alice"));
/// clock.advance(Duration::from_secs(1));
/// assert!(limiter.allow_request("alice"));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    windows: Windows,
    limit: u64,
    count_bits: u32,
}

impl FixedWindow {
    pub(crate) fn new(limit: u64, window: Duration) -> Result<Self, ConfigError> {
        // The largest word is 2^64 − 2^count_bits (the index never fills
        // its bits), and the top five words say a cell is not alive, so the
        // count needs two bits: windows of 1 and 2 ns have fewer. Checked
        // first, with the window's own upper bound, so that any window the
        // error allows builds.
        check_window(window, "a fixed window lasts at least 3 ns, so that its state word keeps room for the count, and at most 2^63 - 1 ns (292 years)")?;
        let windows = Windows::new(window)?;
        let count_bits = windows.spare_bits();
        check_limit(limit, count_bits)?;
        Ok(Self {
            windows,
            limit,
            count_bits,
        })
    }

    /// The window index and the count as they stand at `now`.
    #[inline]
    fn at(&self, word: u64, now: u64) -> (u64, u64) {
        let recorded = word >> self.count_bits;
        let pos = self.windows.locate(recorded, now);
        let recorded_count = word & ((1u64 << self.count_bits) - 1);
        let count = match pos.passed {
            0 => recorded_count,
            // What a closed window booked for the next one (nothing unless
            // the count is above the limit).
            1 => recorded_count.saturating_sub(self.limit),
            _ => 0,
        };
        (pos.index, count)
    }

    /// The word for `count` in window `index`.
    #[inline]
    fn pack(&self, index: u64, count: u64) -> u64 {
        (index << self.count_bits) | count
    }
}

impl FixedWindow {
    /// The window's length, ns.
    pub(crate) fn window_ns(&self) -> u64 {
        self.windows.width()
    }

    /// The word holding `count` in window `index`, if both fit (a state
    /// read from outside the process, such as from Redis): a count above
    /// the limit is a closed window with bookings in the next, up to
    /// twice the limit where the limit books ahead.
    #[cfg(feature = "redis")]
    pub(crate) fn word(&self, index: u64, count: u64) -> Option<u64> {
        let most = if self.reserves() {
            2 * self.limit
        } else {
            self.limit
        };
        (count <= most && index <= self.windows.last()).then(|| self.pack(index, count))
    }

    /// The window index and the count a word holds, as recorded.
    #[cfg(feature = "redis")]
    pub(crate) fn parts(&self, word: u64) -> (u64, u64) {
        (
            word >> self.count_bits,
            word & ((1u64 << self.count_bits) - 1),
        )
    }
}

impl fmt::Debug for FixedWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::window::debug_windowed(f, "FixedWindow", self.limit, &self.windows)
    }
}

impl WordAlgorithm for FixedWindow {
    #[inline]
    fn capacity(&self) -> u64 {
        self.limit
    }

    fn fresh_at(&self, floor: u64) -> u64 {
        // The window before `floor`'s, full: idle from `floor`'s window on
        // (so at `floor`), and every earlier reading, treated as the start
        // of the window recorded, finds it full. A floor in the clock's
        // first window (or unaligned, in window 0): the fresh word, idle at
        // every reading as that would be.
        match self.windows.locate(0, floor).index {
            index if index <= self.windows.first() => FRESH,
            index => self.pack(index - 1, self.limit),
        }
    }

    #[inline]
    fn admit(&self, word: u64, now: u64, cost: u64) -> Option<u64> {
        let (index, count) = self.at(word, now);
        // count ≤ limit and cost ≤ limit, both below 2^63.
        // A closed window's count is above the limit, so it admits nothing.
        (count + cost <= self.limit).then(|| self.pack(index, count + cost))
    }

    fn remaining(&self, word: u64, now: u64) -> u64 {
        self.limit.saturating_sub(self.at(word, now).1)
    }

    fn retry_after(&self, word: u64, now: u64, cost: u64) -> u64 {
        let (index, count) = self.at(word, now);
        if count + cost <= self.limit {
            0
        } else {
            // The count resets only in the next window (to what was booked
            // there, if this one is closed: then it may not fit until the
            // one after); past the last one (a reading beyond `NOW_MAX`) it
            // never does.
            let booked = count.saturating_sub(self.limit);
            let next = if booked + cost <= self.limit { 1 } else { 2 };
            // The wait counts from the reading, also for a reading before
            // the recorded window (judged, for the count, at that window's
            // start): the count resets at an instant, and a client that
            // waits until then on this clock finds it reset. A word ahead
            // of the reading is one closed by a booking, one a move left in
            // the window its carried bookings run in, or one a clock that
            // stepped back left ahead (whose wait is then longer by the
            // step, at most).
            super::until(clamp_now(now), self.windows.start(index + next))
        }
    }

    fn is_idle(&self, word: u64, now: u64) -> bool {
        clamp_now(now) >= self.idle_at(word)
    }

    fn window(&self) -> u64 {
        self.windows.width()
    }

    fn align(&mut self, origin: u64) {
        self.windows = self.windows.aligned(origin);
    }

    /// A move never adds to what the client may take now: the requests
    /// left in the window `now` falls in are kept (at most the new limit)
    /// for the new quota's window that `now` falls in, and a closed
    /// window's booking carries over: the new windows up to the one where
    /// the booked requests run are closed, and they count there (what the
    /// new limit cannot hold closes that window too, and counts in the
    /// next). A reading before the recorded window is judged at
    /// that window's start, as every check judges it. A state with
    /// nothing counted since the new window began is a fresh
    /// client there, as a client forgotten then would come back.
    fn convert(&self, word: u64, now: u64, to: &Self) -> u64 {
        if self == to || word == FRESH {
            // The same quota (a pair's other limit changed): as it is. A
            // client that never made a request (or was reset) stays one.
            return word;
        }
        let (index, count) = self.at(word, now);
        // The instant the state is judged at: never before its window.
        let at = clamp_now(now).max(self.windows.start(index));
        let here = to.windows.locate(0, at).index;
        // Until when the state may hold requests: its idle instant, or for
        // an empty count (a state a move left with nothing used), the end
        // of its window, since a move may have counted requests of that
        // window in what it left.
        let recorded = word >> self.count_bits;
        let busy_until = if word & ((1u64 << self.count_bits) - 1) == 0 {
            self.windows.start(recorded + 1)
        } else {
            self.idle_at(word)
        };
        if busy_until <= to.windows.start(here) {
            // Nothing counted since the new window began: a fresh client
            // there, idle from the first new boundary not before
            // `busy_until` (at the latest, this window's start). Judged
            // full before it, so that a reading behind finds no more than
            // the old state left; idle from no later boundary, so that a
            // later move to wider windows that began after `busy_until`
            // finds it fresh, as it would the old state.
            return to.fresh_at(to.windows.ceil(busy_until));
        }
        if count <= self.limit {
            // Left here: limit − count, at most the new limit. On a
            // limiter's clock `here` is at least 1 (windows count from 1),
            // so an empty count is never the fresh word. Unaligned (the
            // twin of Redis's windows, counted from the Unix epoch),
            // window 0 is still running for a window longer than the time
            // since 1970: there an empty count would be the fresh word,
            // which a later raise would make a whole new budget, so the
            // client is held full until that window ends instead.
            let left = (self.limit - count).min(to.limit);
            let used = if here == 0 && left == to.limit {
                to.limit
            } else {
                to.limit - left
            };
            return to.pack(here, used);
        }
        // Closed, with `count − limit` booked in the next window: the new
        // window where those run, and every one before it, closed.
        let booked = count - self.limit;
        let runs = to.windows.locate(0, self.windows.start(index + 1)).index;
        if runs == here {
            // They run in a window the new quota holds full already.
            return to.pack(here, to.limit);
        }
        // runs > here ≥ 0. Booked requests the new limit holds: the window
        // before theirs closed (a reading before it is judged at its
        // start), with them above the limit. More than it holds: their
        // window closed too, and the rest counted in the next, as if
        // booked there (so a move and a move back never lose a booked
        // request). At most 2·limit, which `reserves` leaves room for; a
        // quota too large to book ahead holds the last window full.
        let (window, ahead) = if booked <= to.limit {
            (runs - 1, booked)
        } else {
            (runs, (booked - to.limit).min(to.limit))
        };
        let ahead = if to.reserves() { ahead } else { 0 };
        to.pack(window, to.limit + ahead)
    }

    fn idle_at(&self, word: u64) -> u64 {
        let (index, count) = (
            word >> self.count_bits,
            word & ((1u64 << self.count_bits) - 1),
        );
        if count == 0 {
            // An empty count decides as a fresh word from its window's
            // start on; before it (a user clock that stepped back past a
            // window recorded later), its window would still count.
            self.windows.start(index)
        } else if count > self.limit {
            // Closed, with a booking in the next window.
            self.windows.start(index + 2)
        } else {
            self.windows.start(index + 1)
        }
    }

    fn horizon(&self) -> u64 {
        self.windows.width()
    }

    fn reserves(&self) -> bool {
        // A closed window counts up to 2·limit.
        self.limit < 1 << (self.count_bits - 1)
    }

    fn reserve(&self, word: u64, now: u64, cost: u64) -> Reserve {
        let (index, count) = self.at(word, now);
        if count + cost <= self.limit {
            return Reserve::At {
                word: self.pack(index, count + cost),
                ready_at: clamp_now(now),
            };
        }
        // Close this window (if a booking has not already) and book the
        // next one if the cost fits beside what is booked there, else the
        // one after, which closes the next.
        let closed = count.max(self.limit);
        let (word, ready) = if closed - self.limit + cost <= self.limit {
            (self.pack(index, closed + cost), index + 1)
        } else {
            (self.pack(index + 1, self.limit + cost), index + 2)
        };
        let ready_at = self.windows.start(ready);
        if ready_at > NOW_MAX {
            return Reserve::Never;
        }
        // ready starts at a reading, so it is at most the largest index
        // any reading has, and the word's index fits its bits; its count
        // is at most 2·limit.
        Reserve::At { word, ready_at }
    }

    /// A booking for the instant `at` that a pair chose: in `at`'s window
    /// `j`, closing the windows before it as this window's own bookings
    /// do. If `j` is the window the word stands in at `now`, the count
    /// there grows by `cost`, which is `admit` at `at`. Otherwise the word
    /// becomes window `j − 1` closed, with `j`'s count (what was booked
    /// there, if `j` is the next window of a closed word, and the cost)
    /// above the limit: every reading before `j` is then denied (a reading
    /// before `j − 1` is judged at `j − 1`'s start, closed), and a reading
    /// in `j` or later decides as the word `admit(word, at, cost)` would.
    fn book_at(&self, word: u64, now: u64, at: u64, cost: u64) -> u64 {
        let (index, _) = self.at(word, now);
        let (target, count) = self.at(word, at);
        // count + cost ≤ limit: the caller books where it conforms.
        debug_assert!(count + cost <= self.limit);
        if target == index {
            self.pack(index, count + cost)
        } else {
            // target > index ≥ 0, and target is a reading's window: the
            // index fits its bits; the count is at most 2·limit, which `reserves`
            // leaves room for.
            self.pack(target - 1, self.limit + count + cost)
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use crate::algorithm::{FRESH, NOW_MAX};

    fn fw(limit: u64, window_ns: u64) -> FixedWindow {
        FixedWindow::new(limit, Duration::from_nanos(window_ns)).unwrap()
    }

    /// The most restrictive state idle from a reading on: the window
    /// before full, so that a reading behind it (a clock that came back)
    /// finds no room there; in the clock's first window, the fresh word.
    #[test]
    fn fresh_at_a_reading_is_full_before_it_and_the_fresh_word_at_the_start() {
        let unaligned = fw(5, 100);
        let word = unaligned.fresh_at(150);
        assert_ne!(word, FRESH);
        assert_eq!(
            (
                unaligned.remaining(word, 50),
                unaligned.remaining(word, 150)
            ),
            (0, 5)
        );
        assert_eq!(unaligned.fresh_at(50), FRESH);
        let mut aligned = fw(5, 100);
        aligned.align(30);
        // Window 1 runs to the reading 70.
        assert_eq!(aligned.fresh_at(0), FRESH);
        assert_eq!(aligned.fresh_at(69), FRESH);
        let word = aligned.fresh_at(70);
        assert_eq!(
            (aligned.remaining(word, 69), aligned.remaining(word, 70)),
            (0, 5)
        );
    }

    /// A move that leaves a client the whole new limit in window 0, which
    /// only unaligned windows (Redis's, counted from the Unix epoch) have:
    /// held full until it ends, since an empty count there is the fresh
    /// word. On a limiter's clock the same move keeps what was left.
    #[test]
    fn a_move_in_window_0_holds_the_client_full_only_where_window_0_is_read() {
        let (five, one) = (fw(5, 100), fw(1, 100));
        let used = five.admit(FRESH, 10, 3).unwrap();
        let moved = five.convert(used, 10, &one);
        assert_ne!(moved, FRESH);
        assert_eq!(
            (one.remaining(moved, 10), one.retry_after(moved, 10, 1)),
            (0, 90)
        );
        assert_eq!(one.remaining(moved, 100), 1);
        let aligned = |mut f: FixedWindow| {
            f.align(0);
            f
        };
        let (five, one) = (aligned(five), aligned(one));
        let used = five.admit(FRESH, 10, 3).unwrap();
        let moved = five.convert(used, 10, &one);
        assert_eq!(one.remaining(moved, 10), 1);
        // And back: nothing more than the move left.
        assert_eq!(five.remaining(one.convert(moved, 10, &five), 10), 1);
    }

    #[test]
    fn counts_per_aligned_window() {
        let f = fw(2, 100);
        let w = f.admit(FRESH, 5, 1).unwrap();
        let w = f.admit(w, 99, 1).unwrap();
        assert_eq!(f.admit(w, 99, 1), None);
        assert_eq!(f.retry_after(w, 99, 1), 1);
        assert_eq!(f.remaining(w, 99), 0);
        // The boundary spike: two more right after the boundary.
        let w = f.admit(w, 100, 2).unwrap();
        assert_eq!(f.admit(w, 199, 1), None);
        assert!(f.is_idle(w, 200));
        assert!(f.is_idle(FRESH, u64::MAX));
    }

    #[test]
    fn windows_start_on_the_unix_epochs_multiples() {
        // The clock read 0 at the Unix time 2 500 ns: windows of 1 000 ns
        // start at the readings 500, 1 500, …; window 0 is cut short.
        let mut f = fw(1, 1_000);
        f.align(2_500);
        let w = f.admit(FRESH, 0, 1).unwrap();
        assert_eq!(f.admit(w, 499, 1), None);
        assert_eq!(f.retry_after(w, 0, 1), 500);
        assert_eq!(f.idle_at(w), 500);
        assert!(f.admit(w, 500, 1).is_some());
        let w = f.admit(FRESH, 1_499, 1).unwrap();
        assert_eq!(f.retry_after(w, 1_499, 1), 1);
        // The same quota, whatever the origin.
        assert_eq!(f, fw(1, 1_000));
    }

    #[test]
    fn backward_clock_stays_in_the_recorded_window() {
        let f = fw(1, 100);
        let w = f.admit(FRESH, 550, 1).unwrap();
        assert_eq!(f.admit(w, 120, 1), None);
        // The count resets at 600, which a reading of 120 is 480 from.
        assert_eq!(f.retry_after(w, 120, 1), 480);
        assert_eq!(f.admit(w, 599, 1), None);
        assert!(f.admit(w, 600, 1).is_some());
    }

    #[test]
    fn limit_bits_follow_the_window() {
        assert!(FixedWindow::new((1 << 30) - 1, Duration::from_secs(1)).is_ok());
        assert_eq!(
            FixedWindow::new(1 << 30, Duration::from_secs(1))
                .unwrap_err()
                .field(),
            "limit"
        );
        let f = fw((1 << 30) - 1, 1_000_000_000);
        let w = f.admit(FRESH, NOW_MAX, (1 << 30) - 1).unwrap();
        assert!(w <= crate::algorithm::WORD_MAX);
        // The shortest window keeps two count bits, so its largest word is
        // live too.
        let short = FixedWindow::new(3, Duration::from_nanos(3)).unwrap();
        let top = short.admit(FRESH, NOW_MAX, 3).unwrap();
        assert!(top <= crate::algorithm::WORD_MAX, "{top:#x}");
        assert_eq!(
            FixedWindow::new(1, Duration::from_nanos(2))
                .unwrap_err()
                .field(),
            "window"
        );
        assert_eq!(f.at(w, u64::MAX), (NOW_MAX / 1_000_000_000, (1 << 30) - 1));
    }

    #[test]
    fn bookings_close_the_window_and_go_to_the_first_that_fits() {
        let f = fw(2, 100);
        let w = f.admit(FRESH, 50, 1).unwrap();
        // Cost 2 does not fit beside 1: booked into window 1, window 0 closed.
        let Reserve::At { word, ready_at } = f.reserve(w, 50, 2) else {
            panic!()
        };
        assert_eq!((word, ready_at), (f.pack(0, 4), 100));
        assert_eq!(f.admit(word, 60, 1), None, "closed");
        assert_eq!(f.remaining(word, 60), 0);
        assert_eq!(
            f.retry_after(word, 60, 1),
            140,
            "window 1 is taken: window 2"
        );
        assert_eq!((f.idle_at(word), f.is_idle(word, 199)), (200, false));
        // Window 1 is full of the booking: the next goes to window 2.
        let Reserve::At { word, ready_at } = f.reserve(word, 60, 1) else {
            panic!()
        };
        assert_eq!((word, ready_at), (f.pack(1, 3), 200));
        assert_eq!(f.retry_after(word, 60, 1), 140);
        assert_eq!(f.retry_after(word, 60, 2), 240);
        assert_eq!(f.at(word, 250), (2, 1), "the booking is window 2's count");
        assert!(f.admit(word, 250, 1).is_some());
        assert!(f.is_idle(word, 300));
    }

    #[test]
    fn bookings_at_the_end_of_time_are_never_and_fit_the_word() {
        assert!(fw(1, 3).reserves() && !fw(2, 3).reserves());
        assert!(fw((1 << 29) - 1, 1_000_000_000).reserves());
        assert!(!fw(1 << 29, 1_000_000_000).reserves());
        for f in [fw(1, 3), fw((1 << 29) - 1, 1_000_000_000)] {
            let limit = f.capacity();
            let last = NOW_MAX / f.window_ns();
            // A full last-but-one window books into the last, then never.
            let now = f.windows.start(last - 1);
            let w = f.admit(FRESH, now, limit).unwrap();
            let Reserve::At { word, ready_at } = f.reserve(w, now, limit) else {
                panic!()
            };
            assert_eq!(ready_at, f.windows.start(last));
            assert!(word <= crate::algorithm::WORD_MAX, "{word:#x}");
            assert_eq!(f.reserve(word, now, 1), Reserve::Never);
            assert_eq!(f.reserve(word, u64::MAX, limit), Reserve::Never);
            assert_eq!(f.retry_after(word, now, 1), crate::algorithm::NEVER);
        }
    }

    #[test]
    fn idle_at_the_next_window() {
        let f = fw(3, 100);
        assert_eq!(f.idle_at(FRESH), 0);
        let w = f.admit(FRESH, 250, 2).unwrap();
        assert_eq!(f.idle_at(w), 300);
        assert!(!f.is_idle(w, 299));
        assert!(f.is_idle(w, 300));
        assert_eq!(f.horizon(), 100);
        // The tombstone is refused at any time.
        for now in [0, 250, NOW_MAX] {
            assert_eq!(f.admit(crate::algorithm::TOMBSTONE, now, 1), None);
        }
    }
}
