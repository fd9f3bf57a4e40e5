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
mod params;
mod sliding_log;
mod sliding_window;
mod token_bucket;
mod window;

pub(crate) use both::join;
pub use both::Both;
#[cfg(feature = "loom")]
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

/// The word of a new client's cell before it has room. The smallest of the
/// four words that say a cell is not alive: every word at or above it is
/// one of them, and no algorithm ever produces one (each algorithm's tests
/// prove that its largest reachable word is at most [`WORD_MAX`]).
pub(crate) const UNBORN: u64 = u64::MAX - 3;

/// The largest word an algorithm may produce.
pub(crate) const WORD_MAX: u64 = UNBORN - 1;

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
    /// Each algorithm's rule keeps what the client has used, up to what the
    /// new quota allows at most (see the algorithm's own docs), and the
    /// result is never more permissive under `to` than a state that used
    /// that much. A state idle at `now` becomes one idle under `to`.
    fn convert(&self, word: u64, now: u64, to: &Self) -> u64;

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
}

/// The transitions the one compare-and-swap loop runs, over whatever state
/// the cell packs: a [`WordAlgorithm`]'s one word (every word algorithm is
/// one, with the same methods), or [`Both`]'s pair of words. The cell layer
/// writes its check, peek, eviction and reset once over this trait.
///
/// `pub` in this private module, as [`WordAlgorithm`] is, so that public
/// bounds may name it.
#[allow(unreachable_pub)]
pub trait Transitions: Send + Sync + 'static {
    /// The packed state: `u64` or `u128`.
    type Word: Copy;

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
}

/// What [`WordAlgorithm::reserve`] makes of a booking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(unreachable_pub)]
pub enum Reserve {
    /// Charged now by writing `word`; the request conforms from `ready_at`.
    At {
        /// The word with the booking charged.
        word: u64,
        /// The first instant at which the booked request conforms.
        ready_at: u64,
    },
    /// The request would conform only after the last instant any reading
    /// reaches: nothing can be booked.
    Never,
}

/// A booking a word algorithm made: what a cancellation needs to undo it.
///
/// Public (but unreachable outside `--features loom`) as the hidden
/// currency of [`Algorithm`](crate::Algorithm)'s reservation methods.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// The word before the booking: the state as if it never happened.
    pub(crate) from: u64,
    /// The word the booking left.
    pub(crate) to: u64,
    /// The first instant at which the booked request conforms.
    pub(crate) ready_at: u64,
    /// The units booked.
    pub(crate) cost: u64,
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

    /// The word the booking left.
    pub fn word(&self) -> u64 {
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
#[inline]
pub(crate) fn unreserve(word: u64, now: u64, ticket: &Ticket) -> Option<u64> {
    (word == ticket.to && clamp_now(now) < ticket.ready_at).then_some(ticket.from)
}

/// A `retry_after` that will never come: the request would pass only at an
/// instant after [`NOW_MAX`], which no (clamped) reading reaches.
pub(crate) const NEVER: u64 = u64::MAX;

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
