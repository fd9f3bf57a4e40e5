//! Layer 2: the algorithms, as pure transitions of a client's packed state
//! word.
//!
//! Nothing here touches an atomic, a thread or a clock. Each algorithm is a
//! validated configuration plus functions from `(word, now, cost)` to a new
//! word, which is what lets the tests compare every decision against an exact
//! reference model, and what the one CAS loop in [`crate::cell`] retries.
//!
//! All times are `u64` nanoseconds since the clock's origin, clamped to
//! [`NOW_MAX`] so that no transition can overflow.

mod both;
mod fixed_window;
#[cfg(any(feature = "redis", feature = "loom"))]
pub(crate) mod lease;
mod params;
mod sliding_log;
mod sliding_window;
mod token_bucket;
mod window;

#[cfg(all(test, not(feature = "loom")))]
mod moves;

pub(crate) use both::join;
pub use both::Both;
#[cfg(any(feature = "redis", feature = "loom"))]
pub(crate) use both::{first, second};
pub use fixed_window::FixedWindow;
pub(crate) use params::{FromParams, Params};

pub use sliding_log::SlidingWindowLog;
pub use sliding_window::SlidingWindowCounter;
pub use token_bucket::TokenBucket;

/// The latest instant any algorithm distinguishes: 2<sup>63</sup> − 1 ns,
/// 292 years after the clock's origin. Later readings are treated as this one.
pub(crate) const NOW_MAX: u64 = (1 << 63) - 1;

/// The tombstone: the word of a cell that eviction has retired. The cell
/// layer refuses to admit on it, so a check that meets it retries on the
/// map's current entry instead.
pub(crate) const TOMBSTONE: u64 = u64::MAX;

/// The word of a new client's cell that found no room: it never comes
/// alive (see "Birth" in `crate::cell`).
pub(crate) const REFUSED: u64 = u64::MAX - 1;

/// The word of a new client's cell while one thread takes room for it.
pub(crate) const CLAIMED: u64 = u64::MAX - 2;

/// The word of a new client's cell before it has room.
pub(crate) const UNBORN: u64 = u64::MAX - 3;

/// The word of a cell whose state a table rebuild has moved to a copy in
/// the new table: the copy stands for the client, and a lookup that meets
/// this word follows the table's link to it. Distinct from the tombstone,
/// which says the client's state is gone.
pub(crate) const FORWARDED: u64 = u64::MAX - 4;

/// The smallest of the five words that say a cell is not alive
/// ([`FORWARDED`], [`UNBORN`], [`CLAIMED`], [`REFUSED`], [`TOMBSTONE`]):
/// every word at or above it is one of them, and no algorithm ever
/// produces one (each algorithm's tests prove that its largest reachable
/// word is at most [`WORD_MAX`]).
pub(crate) const NOT_ALIVE: u64 = FORWARDED;

/// The largest word an algorithm may produce.
pub(crate) const WORD_MAX: u64 = NOT_ALIVE - 1;

/// The word of a client never seen before, for every word algorithm: an
/// empty history. Each algorithm's tests prove that 0 decodes to its fresh
/// state.
pub(crate) const FRESH: u64 = 0;

/// An algorithm whose whole per-client state is one `u64`.
///
/// Every method is a pure function of its arguments. `cost` is always in
/// `1..=self.capacity()`; the limiter layer rejects the rest before calling.
///
/// `pub` in this private module (unnameable outside the crate) so that the
/// bounds of public items such as [`Tiered`](crate::Tiered) may name it.
#[allow(unreachable_pub)]
pub trait WordAlgorithm: Send + Sync + 'static {
    /// The largest cost that can ever be admitted at once: the bucket's
    /// capacity or the window's limit.
    fn capacity(&self) -> u64;

    /// A fresh client's word whose history starts at `floor`: idle at
    /// `floor` and later, where it decides exactly as [`FRESH`] does, and at
    /// a reading before `floor` never more permissive than any word idle at
    /// `floor`. A state that replaces an evicted one starts here, at the
    /// eviction's reading or later, so that a check whose reading predates
    /// the eviction cannot spend on the new state what the old one had
    /// already spent.
    fn fresh_at(&self, floor: u64) -> u64;

    /// The word after admitting `cost` at `now`, or `None` to deny. A denial
    /// leaves the state as it was, so it needs no write.
    fn admit(&self, word: u64, now: u64, cost: u64) -> Option<u64>;

    /// How many unit-cost requests `word` would admit at `now`, one after
    /// another.
    fn remaining(&self, word: u64, now: u64) -> u64;

    /// Nanoseconds from `now` until `admit(word, now + d, cost)` would
    /// succeed, if no other request came in between: 0 if it succeeds now.
    fn retry_after(&self, word: u64, now: u64, cost: u64) -> u64;

    /// Whether `word` decides every future request exactly as a fresh
    /// client's word would, so that forgetting it changes nothing.
    fn is_idle(&self, word: u64, now: u64) -> bool;

    /// The first instant at which `word` is idle (0 if it is idle at
    /// every instant): `is_idle(word, now)` iff `now >= idle_at(word)`.
    /// Sampled eviction forgets the sampled client whose state expires
    /// first, the one whose state carries the least information.
    fn idle_at(&self, word: u64) -> u64;

    /// The longest a word stays non-idle after its last admission: how long
    /// a client denied for lack of room in a full limiter should wait.
    fn horizon(&self) -> u64;

    /// The window over which the quota grants its capacity, ns: a window's
    /// length, or the time to refill a bucket from empty.
    fn window(&self) -> u64;

    /// The word that carries `word`'s state, read at `now`, over to the
    /// quota `to`: what a client keeps when its quota changes under it.
    /// The one rule for every algorithm: a move never adds to what the
    /// client may take at `now` (what it has left is kept, at most the
    /// whole new quota), and what it may take later grows at `to`'s rate,
    /// up to `to`'s capacity; bookings already charged stay charged. A
    /// state whose use has lapsed for `to` (a bucket full for a whole new
    /// refill, a window with nothing counted in the new quota's window)
    /// becomes `to`'s fresh state ([`WordAlgorithm::fresh_at`] at `now`),
    /// as a client forgotten then would come back. So over any span a client admits at most the
    /// largest capacity involved plus the span times the fastest rate
    /// involved, and one moved to a slower quota with something left
    /// waits at most one of the new quota's intervals (or windows) for
    /// its next request.
    fn convert(&self, word: u64, now: u64, to: &Self) -> u64;

    /// Sets the windows for a clock that reads 0 at the Unix time
    /// `origin` (ns), so that they start on whole multiples of their
    /// length in Unix time. Nothing for an algorithm without windows.
    fn align(&mut self, origin: u64) {
        let _ = origin;
    }

    /// Whether [`WordAlgorithm::reserve`] is implemented for this
    /// configuration: whether a client may book a request that conforms
    /// only later.
    fn reserves(&self) -> bool {
        false
    }

    /// Books `cost` at `now` however long the request must wait: the word
    /// that charges it now, and the first instant `ready_at ≥ now` at which
    /// it conforms (`now + retry_after(word, now, cost)`). [`Reserve::Never`]
    /// if that instant lies past [`NOW_MAX`]; nothing is then charged.
    /// Called only if [`WordAlgorithm::reserves`].
    fn reserve(&self, word: u64, now: u64, cost: u64) -> Reserve {
        let _ = (word, now, cost);
        Reserve::Never
    }

    /// Books `cost` at the reading `now` to be executed at the instant
    /// `at ≥ now`, which a pair of limits has chosen as the first at which
    /// both conform: the word that charges it now. Called only if
    /// [`WordAlgorithm::reserves`], and only with an `at ≤ NOW_MAX` at which
    /// `admit(word, at, cost)` passes.
    ///
    /// The word must decide every reading from `at` on exactly as the word
    /// after `admit(word, at, cost)` does, and must deny every request at a
    /// reading before `at` **if** `at` is this limit's own first instant
    /// (`now + retry_after(word, now, cost)`): the limit that binds keeps
    /// the pair closed until the booking's time, as its own bookings do.
    ///
    /// The default is the admission at `at` itself, which is exact for the
    /// token bucket: at its own first instant `admit` leaves a full
    /// bucket's worth of virtual time ahead of `at`, which denies every
    /// earlier reading.
    fn book_at(&self, word: u64, now: u64, at: u64, cost: u64) -> u64 {
        let _ = now;
        self.admit(word, at, cost)
            .expect("a booking is made at an instant where it conforms")
    }
}

/// The transitions the one compare-and-swap loop runs, over whatever state
/// the cell packs: a [`WordAlgorithm`]'s one word (every word algorithm is
/// one, with the same methods), or [`Both`]'s pair of words. The cell layer
/// writes its check, peek, eviction and reset once over this trait.
///
/// `pub` in this private module, as [`WordAlgorithm`] is, so that public
/// bounds may name it.
// The `loom` feature re-exports it (hidden) for the loom models, which
// makes rustdoc read its links to the private `WordAlgorithm` as public
// docs linking to a private item; they are never published.
#[allow(unreachable_pub)]
#[cfg_attr(feature = "loom", allow(rustdoc::private_intra_doc_links))]
pub trait Transitions: Send + Sync + 'static {
    /// The packed state: `u64` or `u128`.
    type Word: Wide;

    /// As [`WordAlgorithm::capacity`].
    fn capacity(&self) -> u64;

    /// The limit a decision on `word` at `now` reports: the capacity, or
    /// for [`Both`] the capacity of the limit that binds.
    fn limit(&self, word: Self::Word, now: u64) -> u64 {
        let _ = (word, now);
        self.capacity()
    }

    /// As [`WordAlgorithm::fresh_at`].
    fn fresh_at(&self, floor: u64) -> Self::Word;

    /// As [`WordAlgorithm::admit`].
    fn admit(&self, word: Self::Word, now: u64, cost: u64) -> Option<Self::Word>;

    /// As [`WordAlgorithm::remaining`].
    fn remaining(&self, word: Self::Word, now: u64) -> u64;

    /// As [`WordAlgorithm::retry_after`].
    fn retry_after(&self, word: Self::Word, now: u64, cost: u64) -> u64;

    /// As [`WordAlgorithm::is_idle`].
    fn is_idle(&self, word: Self::Word, now: u64) -> bool;

    /// As [`WordAlgorithm::idle_at`].
    fn idle_at(&self, word: Self::Word) -> u64;

    /// As [`WordAlgorithm::horizon`].
    fn horizon(&self) -> u64;

    /// The window a decision on `word` at `now` reports: the quota's, or
    /// for [`Both`] the window of the limit that binds.
    fn window(&self, word: Self::Word, now: u64) -> u64;

    /// As [`WordAlgorithm::convert`] (for [`Both`], each limit's word by
    /// its own rule).
    fn convert(&self, word: Self::Word, now: u64, to: &Self) -> Self::Word;

    /// As [`WordAlgorithm::reserves`].
    fn reserves(&self) -> bool;

    /// As [`WordAlgorithm::align`] (for [`Both`], each limit's).
    fn align(&mut self, origin: u64) {
        let _ = origin;
    }

    /// As [`WordAlgorithm::reserve`], over the packed state.
    fn reserve(&self, word: Self::Word, now: u64, cost: u64) -> Reserve<Self::Word>;

    /// For [`Both`], each limit's own figures on `word` at `now`; `None`
    /// for one limit.
    fn each(&self, word: Self::Word, now: u64) -> Option<[Figures; 2]> {
        let _ = (word, now);
        None
    }
}

impl<A: WordAlgorithm> Transitions for A {
    type Word = u64;

    #[inline]
    fn capacity(&self) -> u64 {
        WordAlgorithm::capacity(self)
    }

    fn fresh_at(&self, floor: u64) -> u64 {
        WordAlgorithm::fresh_at(self, floor)
    }

    #[inline]
    fn admit(&self, word: u64, now: u64, cost: u64) -> Option<u64> {
        WordAlgorithm::admit(self, word, now, cost)
    }

    fn remaining(&self, word: u64, now: u64) -> u64 {
        WordAlgorithm::remaining(self, word, now)
    }

    fn retry_after(&self, word: u64, now: u64, cost: u64) -> u64 {
        WordAlgorithm::retry_after(self, word, now, cost)
    }

    fn is_idle(&self, word: u64, now: u64) -> bool {
        WordAlgorithm::is_idle(self, word, now)
    }

    fn idle_at(&self, word: u64) -> u64 {
        WordAlgorithm::idle_at(self, word)
    }

    fn horizon(&self) -> u64 {
        WordAlgorithm::horizon(self)
    }

    fn window(&self, _: u64, _: u64) -> u64 {
        WordAlgorithm::window(self)
    }

    fn convert(&self, word: u64, now: u64, to: &Self) -> u64 {
        WordAlgorithm::convert(self, word, now, to)
    }

    fn reserves(&self) -> bool {
        WordAlgorithm::reserves(self)
    }

    fn align(&mut self, origin: u64) {
        WordAlgorithm::align(self, origin);
    }

    fn reserve(&self, word: u64, now: u64, cost: u64) -> Reserve {
        WordAlgorithm::reserve(self, word, now, cost)
    }
}

/// A packed state as a [`Ticket`] holds it: every width fits a `u128`.
#[allow(unreachable_pub)] // pub for `Transitions`'s bound; unnameable outside
pub trait Wide: Copy + Eq {
    /// The state, widened.
    fn widen(self) -> u128;
    /// The state back from its widening (the inverse of `widen`).
    fn narrow(wide: u128) -> Self;
}

impl Wide for u64 {
    #[inline]
    fn widen(self) -> u128 {
        u128::from(self)
    }

    #[inline]
    fn narrow(wide: u128) -> Self {
        // Only ever the widening of a u64: nothing is cut off.
        wide as u64
    }
}

impl Wide for u128 {
    #[inline]
    fn widen(self) -> u128 {
        self
    }

    #[inline]
    fn narrow(wide: u128) -> Self {
        wide
    }
}

/// What [`WordAlgorithm::reserve`] (or a pair's [`Transitions::reserve`])
/// makes of a booking.
// Re-exported (hidden) under `loom`, as `Transitions` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(unreachable_pub)]
#[cfg_attr(feature = "loom", allow(rustdoc::private_intra_doc_links))]
pub enum Reserve<W = u64> {
    /// Charged now by writing `word`; the request conforms from `ready_at`.
    At {
        /// The word with the booking charged.
        word: W,
        /// The first instant at which the booked request conforms.
        ready_at: u64,
    },
    /// The request would conform only after the last instant any reading
    /// reaches: nothing can be booked.
    Never,
}

/// A booking an algorithm made: what a cancellation needs to undo it.
///
/// The states are held widened to 128 bits, so that one ticket type serves
/// a one-word state and a pair's two words alike (a one-word state is its
/// word, zero-extended). Only the cancellation compares them, once, beside
/// a compare-and-swap; the check path never sees a ticket.
///
/// A booking on the sliding window log charges slots, not a word: it keeps
/// the slots it claimed and what each held before in `claims` (the word
/// fields are then 0). Every other algorithm leaves `claims` empty, so its
/// ticket allocates nothing.
///
/// Public (but unreachable outside `--features loom`) as the hidden
/// currency of [`Algorithm`](crate::Algorithm)'s reservation methods.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The state before the booking: as if it never happened.
    pub(crate) from: u128,
    /// The state the booking left.
    pub(crate) to: u128,
    /// The first instant at which the booked request conforms.
    pub(crate) ready_at: u64,
    /// The units booked.
    pub(crate) cost: u64,
    /// The log's booking only: each slot it claimed, with the expiry that
    /// slot held before (see `crate::cell`'s log module).
    pub(crate) claims: Option<Box<[(usize, u64)]>>,
}

impl Ticket {
    /// The first instant (ns on the limiter's clock) at which the booked
    /// request conforms.
    pub fn ready_at(&self) -> u64 {
        self.ready_at
    }

    /// The units booked.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The state the booking left, widened (a pair's first word in the low
    /// half).
    pub fn word(&self) -> u128 {
        self.to
    }
}

/// The cancellation rule, the same for every word algorithm: the word
/// before `ticket`'s booking, to be written in place of `word`, iff the
/// booking is still the **tail** of the state (`word` is exactly the word
/// it left: nothing was charged since, or whatever was has been cancelled
/// in turn) and its time has not come (`now < ready_at`). Otherwise `None`:
/// give back nothing.
///
/// Writing the old word is then exact: it is the state as if the booking
/// had never been made, since a denial writes nothing and every admission
/// since would have changed the word. A booking that others have charged
/// after is left alone, because their waits were computed on top of it:
/// giving its share back would let a new booking take the very slot of
/// virtual time a standing one holds (`tests/reserve.rs`,
/// `a_refund_under_later_bookings_over_admits`).
///
/// The same rule for a pair of limits, on the pair's whole state: a
/// booking charged both words in one exchange, and is given back from both
/// in one, iff neither has changed since.
#[inline]
pub(crate) fn unreserve<W: Wide>(word: W, now: u64, ticket: &Ticket) -> Option<W> {
    (word.widen() == ticket.to && clamp_now(now) < ticket.ready_at).then(|| W::narrow(ticket.from))
}

/// A `retry_after` that will never come: the request would pass only at an
/// instant after [`NOW_MAX`], which no (clamped) reading reaches.
pub(crate) const NEVER: u64 = u64::MAX;

/// One limit's figures for a decision on a pair (see `Transitions::each`):
/// the cell layer turns them into the public `LimitFigures`. Waits in ns,
/// [`NEVER`] for never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(unreachable_pub)]
pub struct Figures {
    pub(crate) limit: u64,
    pub(crate) remaining: u64,
    pub(crate) replenish_after: u64,
    pub(crate) window: u64,
}

/// Nanoseconds from `now` until the instant `at`, or [`NEVER`] if `at` lies
/// beyond the last instant any algorithm distinguishes.
#[inline]
pub(crate) fn until(now: u64, at: u64) -> u64 {
    if at > NOW_MAX {
        NEVER
    } else {
        at.saturating_sub(clamp_now(now))
    }
}

/// `now` as the algorithms see it.
#[inline]
pub(crate) fn clamp_now(now: u64) -> u64 {
    now.min(NOW_MAX)
}
