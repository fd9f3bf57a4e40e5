//! Each limit's arithmetic, from the docs alone: `docs/DESIGN.md` ("Bit
//! layouts", "Costs and decisions", "Several limits at once",
//! "Reservations and their cancellation") and the algorithms' own pages.
//!
//! A state here is a plain value (a number, a window and its counts, a
//! vector of expiries), never a packed word, and every function is
//! written out afresh: nothing is shared with the crate.

/// The last instant any reading is judged at: 2^63 − 1 ns.
pub const NOW_MAX: u64 = (1 << 63) - 1;
/// A wait that never ends (`Duration::MAX` in a decision).
pub const NEVER: u64 = u64::MAX;

pub fn clamp(t: u64) -> u64 {
    t.min(NOW_MAX)
}

/// Nanoseconds from the reading `now` to the instant `at`: never, if `at`
/// lies past the last instant.
pub fn until(now: u64, at: u64) -> u64 {
    if at > NOW_MAX {
        NEVER
    } else {
        at.saturating_sub(clamp(now))
    }
}

/// The slots a log booking claimed, each with the expiry it held.
pub type Claims = Vec<(usize, u64)>;

/// One limit with its settings, as the docs define them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// GCRA: `interval = ⌈per / tokens⌉` ns a token, `capacity` tokens.
    Bucket { interval: u64, capacity: u64 },
    /// At most `limit` in each window of `width` ns, windows starting on
    /// the Unix epoch's multiples: the clock reads 0 `phase − width` ns
    /// past one. Windows count from 1, the one the clock's start cuts
    /// short: window 0 lies wholly before the clock's start.
    Fixed { limit: u64, width: u64, phase: u64 },
    /// The weighted estimate over two such windows.
    Sliding { limit: u64, width: u64, phase: u64 },
    /// `limit` slots, each the expiry of one admission `window` ns long.
    Log { limit: u64, window: u64 },
}

/// One limit's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Word {
    /// The theoretical arrival time.
    Tat(u64),
    /// The window recorded and its count (above the limit: the window is
    /// closed, with the excess booked in the next one).
    Fixed { index: u64, count: u64 },
    /// The window recorded, its count and the previous window's.
    Sliding { index: u64, curr: u64, prev: u64 },
    /// Every slot's expiry (0: never used) and where the next search
    /// starts (just past the last slot a check claimed).
    Log { slots: Vec<u64>, next: usize },
}

impl Limit {
    pub fn bucket(tokens: u64, per: u64, capacity: u64) -> Self {
        Self::Bucket {
            interval: per.div_ceil(tokens),
            capacity,
        }
    }

    /// `origin`: the Unix time (ns) at which the clock reads 0.
    pub fn fixed(limit: u64, width: u64, origin: u64) -> Self {
        Self::Fixed {
            limit,
            width,
            phase: origin % width + width,
        }
    }

    pub fn sliding(limit: u64, width: u64, origin: u64) -> Self {
        Self::Sliding {
            limit,
            width,
            phase: origin % width + width,
        }
    }

    pub fn log(limit: u64, window: u64) -> Self {
        Self::Log { limit, window }
    }

    /// The largest cost it ever admits.
    pub fn capacity(&self) -> u64 {
        match *self {
            Self::Bucket { capacity, .. } => capacity,
            Self::Fixed { limit, .. } | Self::Sliding { limit, .. } | Self::Log { limit, .. } => {
                limit
            }
        }
    }

    /// The window a decision reports: a window's length, a bucket's
    /// refill from empty.
    pub fn window(&self) -> u64 {
        match *self {
            Self::Bucket { interval, capacity } => interval * capacity,
            Self::Fixed { width, .. } | Self::Sliding { width, .. } => width,
            Self::Log { window, .. } => window,
        }
    }

    /// The longest a state stays non-idle after its last admission.
    pub fn horizon(&self) -> u64 {
        match *self {
            Self::Sliding { width, .. } => width.saturating_mul(2),
            _ => self.window(),
        }
    }

    /// Whether it books requests ahead: the bucket, the log, and a fixed
    /// window whose count has room for twice its limit.
    pub fn reserves(&self) -> bool {
        match *self {
            Self::Bucket { .. } | Self::Log { .. } => true,
            Self::Sliding { .. } => false,
            Self::Fixed { limit, width, .. } => {
                // The index takes bits(NOW_MAX / width + 1) bits; the count
                // the rest, and must hold 2·limit.
                let index_bits = 64 - (NOW_MAX / width + 1).leading_zeros();
                let count_bits = 64 - index_bits;
                limit < 1u64 << (count_bits - 1)
            }
        }
    }

    /// A client never seen: an empty history.
    pub fn fresh(&self) -> Word {
        match *self {
            Self::Bucket { .. } => Word::Tat(0),
            Self::Fixed { .. } => Word::Fixed { index: 0, count: 0 },
            Self::Sliding { .. } => Word::Sliding {
                index: 0,
                curr: 0,
                prev: 0,
            },
            Self::Log { limit, .. } => Word::Log {
                slots: vec![0; limit as usize],
                next: 0,
            },
        }
    }

    /// The most restrictive state idle from `t` on: a bucket full from
    /// `t`, the window before `t`'s full, a full previous window for the
    /// counter (a fresh one in the clock's first window: the window before
    /// it lies before the clock's start), every slot expiring at `t`.
    pub fn fresh_from(&self, t: u64) -> Word {
        let t = clamp(t);
        match *self {
            Self::Bucket { .. } => Word::Tat(t),
            Self::Fixed {
                limit,
                width,
                phase,
            } => match index_of(width, phase, t) {
                // The clock's first window: window 0 lies before it.
                0 | 1 => self.fresh(),
                k => Word::Fixed {
                    index: k - 1,
                    count: limit,
                },
            },
            Self::Sliding {
                limit,
                width,
                phase,
            } => match index_of(width, phase, t) {
                // The clock's first window: window 0 lies before it.
                0 | 1 => self.fresh(),
                k => Word::Sliding {
                    index: k - 1,
                    curr: 0,
                    prev: limit,
                },
            },
            Self::Log { limit, .. } => Word::Log {
                slots: vec![t; limit as usize],
                next: 0,
            },
        }
    }

    /// The state after admitting `cost` (1 to the capacity) at `t`, or
    /// `None` for a denial (which changes nothing).
    pub fn admit(&self, word: &Word, t: u64, cost: u64) -> Option<Word> {
        let t = clamp(t);
        match (*self, word) {
            (Self::Bucket { interval, capacity }, &Word::Tat(tat)) => {
                let base = tat.max(t);
                (base - t <= (capacity - cost) * interval)
                    .then(|| Word::Tat(base + cost * interval))
            }
            (Self::Fixed { limit, .. }, _) => {
                let (index, count) = self.fixed_at(word, t);
                (count + cost <= limit).then_some(Word::Fixed {
                    index,
                    count: count + cost,
                })
            }
            (Self::Sliding { .. }, _) => {
                let s = self.sliding_at(word, t);
                self.sliding_passes(s.curr, s.prev, s.offset, cost)
                    .then_some(Word::Sliding {
                        index: s.index,
                        curr: s.curr + cost,
                        prev: s.prev,
                    })
            }
            (Self::Log { window, .. }, Word::Log { slots, next }) => {
                let n = slots.len();
                let order: Vec<usize> = (*next % n..n).chain(0..*next % n).collect();
                let free: Vec<usize> = order.into_iter().filter(|&i| slots[i] <= t).collect();
                if (free.len() as u64) < cost {
                    return None;
                }
                let mut slots = slots.clone();
                let mut next = *next;
                for &i in &free[..cost as usize] {
                    slots[i] = t + window;
                    next = i + 1;
                }
                Some(Word::Log { slots, next })
            }
            _ => panic!("{self:?} holds no {word:?}"),
        }
    }

    /// Unit requests that would pass one after another at `t`.
    pub fn remaining(&self, word: &Word, t: u64) -> u64 {
        let t = clamp(t);
        match (*self, word) {
            (Self::Bucket { interval, capacity }, &Word::Tat(tat)) => {
                // A token counts only once wholly refilled.
                capacity.saturating_sub(tat.saturating_sub(t).div_ceil(interval))
            }
            (Self::Fixed { limit, .. }, _) => limit.saturating_sub(self.fixed_at(word, t).1),
            (Self::Sliding { limit, .. }, _) => {
                let s = self.sliding_at(word, t);
                (0..=limit)
                    .take_while(|&k| self.sliding_passes(s.curr + k, s.prev, s.offset, 1))
                    .count() as u64
            }
            (Self::Log { .. }, Word::Log { slots, .. }) => {
                slots.iter().filter(|&&e| e <= t).count() as u64
            }
            _ => panic!("{self:?} holds no {word:?}"),
        }
    }

    /// Nanoseconds from `t` until `cost` would pass if nothing else came.
    pub fn retry_after(&self, word: &Word, t: u64, cost: u64) -> u64 {
        let t = clamp(t);
        match (*self, word) {
            (Self::Bucket { interval, capacity }, &Word::Tat(tat)) => {
                let wait = tat
                    .saturating_sub(t)
                    .saturating_sub((capacity - cost) * interval);
                until(t, t + wait)
            }
            (
                Self::Fixed {
                    limit,
                    width,
                    phase,
                },
                _,
            ) => {
                let (index, count) = self.fixed_at(word, t);
                if count + cost <= limit {
                    return 0;
                }
                // What is booked in the next window, if this one is closed.
                let booked = count.saturating_sub(limit);
                let next = if booked + cost <= limit { 1 } else { 2 };
                // The count resets at an instant: the wait counts from the
                // reading, also from one before the recorded window.
                until(t, start(width, phase, index + next))
            }
            (Self::Sliding { width, phase, .. }, _) => {
                let s = self.sliding_at(word, t);
                let from = instant(width, phase, s.index, s.offset);
                // The first offset at or after `from` in a window of these
                // counts at which `cost` passes: the test is monotone in the
                // offset, so a binary search finds it.
                let first = |curr: u64, prev: u64, from: u64| -> Option<u64> {
                    if !self.sliding_passes(curr, prev, width - 1, cost) {
                        return None;
                    }
                    let (mut lo, mut hi) = (from, width - 1);
                    if self.sliding_passes(curr, prev, lo, cost) {
                        return Some(lo);
                    }
                    while hi - lo > 1 {
                        let mid = lo + (hi - lo) / 2;
                        if self.sliding_passes(curr, prev, mid, cost) {
                            hi = mid;
                        } else {
                            lo = mid;
                        }
                    }
                    Some(hi)
                };
                let at = if let Some(e) = first(s.curr, s.prev, s.offset) {
                    instant(width, phase, s.index, e)
                } else if let Some(e) = first(0, s.curr, 0) {
                    instant(width, phase, s.index + 1, e)
                } else {
                    start(width, phase, s.index + 2)
                };
                until(from, at)
            }
            (Self::Log { .. }, Word::Log { slots, .. }) => {
                let mut sorted = slots.clone();
                sorted.sort_unstable();
                until(t, sorted[cost as usize - 1])
            }
            _ => panic!("{self:?} holds no {word:?}"),
        }
    }

    /// The first instant from which the state decides as a fresh one.
    pub fn idle_at(&self, word: &Word) -> u64 {
        match (*self, word) {
            (Self::Bucket { .. }, &Word::Tat(tat)) => tat,
            (
                Self::Fixed {
                    limit,
                    width,
                    phase,
                },
                &Word::Fixed { index, count },
            ) => {
                let after = match count {
                    0 => 0,
                    c if c > limit => 2,
                    _ => 1,
                };
                start(width, phase, index + after)
            }
            (Self::Sliding { width, phase, .. }, &Word::Sliding { index, curr, prev }) => {
                let after = if curr > 0 {
                    2
                } else if prev > 0 {
                    1
                } else {
                    0
                };
                start(width, phase, index + after)
            }
            (Self::Log { .. }, Word::Log { slots, .. }) => slots.iter().copied().max().unwrap_or(0),
            _ => panic!("{self:?} holds no {word:?}"),
        }
    }

    pub fn is_idle(&self, word: &Word, t: u64) -> bool {
        clamp(t) >= self.idle_at(word)
    }

    /// A booking of `cost` at `t` on a limit alone: the state that charges
    /// it and the instant it conforms, or `None` if that lies past the
    /// last instant. Not for the log (see [`Limit::book_log`]).
    pub fn reserve(&self, word: &Word, t: u64, cost: u64) -> Option<(Word, u64)> {
        let t = clamp(t);
        match (*self, word) {
            (Self::Bucket { interval, capacity }, &Word::Tat(tat)) => {
                let ready = tat.saturating_sub((capacity - cost) * interval).max(t);
                (ready <= NOW_MAX).then(|| (Word::Tat(tat.max(t) + cost * interval), ready))
            }
            (
                Self::Fixed {
                    limit,
                    width,
                    phase,
                },
                _,
            ) => {
                let (index, count) = self.fixed_at(word, t);
                if count + cost <= limit {
                    return Some((
                        Word::Fixed {
                            index,
                            count: count + cost,
                        },
                        t,
                    ));
                }
                // Close this window and book the first later one it fits.
                let closed = count.max(limit);
                let (word, ready) = if closed - limit + cost <= limit {
                    (
                        Word::Fixed {
                            index,
                            count: closed + cost,
                        },
                        index + 1,
                    )
                } else {
                    (
                        Word::Fixed {
                            index: index + 1,
                            count: limit + cost,
                        },
                        index + 2,
                    )
                };
                let ready = start(width, phase, ready);
                (ready <= NOW_MAX).then_some((word, ready))
            }
            _ => panic!("{self:?} books no {word:?} this way"),
        }
    }

    /// For a pair: the state that books `cost`, read at `now`, for the
    /// instant `at` the pair chose (where this limit conforms).
    pub fn book_at(&self, word: &Word, now: u64, at: u64, cost: u64) -> Word {
        match *self {
            Self::Bucket { .. } => self.admit(word, at, cost).expect("conforms at `at`"),
            Self::Fixed { limit, .. } => {
                let (index, _) = self.fixed_at(word, now);
                let (target, count) = self.fixed_at(word, at);
                if target == index {
                    Word::Fixed {
                        index,
                        count: count + cost,
                    }
                } else {
                    // The windows before `at`'s closed, `at`'s count booked.
                    Word::Fixed {
                        index: target - 1,
                        count: limit + count + cost,
                    }
                }
            }
            _ => panic!("{self:?} cannot join a booking pair"),
        }
    }

    /// The log's booking: ready at the `cost`-th earliest expiry (or at
    /// `t`), claiming the slots of the smallest expiries (ties by index)
    /// with the expiry of an admission then. The new state, the instant,
    /// and each slot claimed with the expiry it held.
    pub fn book_log(&self, word: &Word, t: u64, cost: u64) -> Option<(Word, u64, Claims)> {
        let (Self::Log { window, .. }, Word::Log { slots, next }) = (*self, word) else {
            panic!("{self:?} is no log");
        };
        let mut order: Vec<usize> = (0..slots.len()).collect();
        order.sort_by_key(|&i| (slots[i], i));
        order.truncate(cost as usize);
        let ready = slots[order[cost as usize - 1]].max(t);
        if ready > NOW_MAX {
            return None;
        }
        let claims: Vec<(usize, u64)> = order.iter().map(|&i| (i, slots[i])).collect();
        let mut slots = slots.clone();
        for &(i, _) in &claims {
            slots[i] = ready + window;
        }
        Some((Word::Log { slots, next: *next }, ready, claims))
    }

    /// Gives back a log booking: as many slots as it claimed, of those
    /// that hold its expiry (whoever wrote it), in index order, get back
    /// the expiries its claims replaced, the latest first. How many were
    /// given back.
    pub fn unbook_log(&self, word: &mut Word, ready: u64, claims: &[(usize, u64)]) -> usize {
        let (Self::Log { window, .. }, Word::Log { slots, .. }) = (*self, word) else {
            panic!("{self:?} is no log");
        };
        let mut olds: Vec<u64> = claims.iter().map(|&(_, old)| old).collect();
        olds.sort_unstable_by(|a, b| b.cmp(a));
        let holding: Vec<usize> = (0..slots.len())
            .filter(|&i| slots[i] == ready + window)
            .collect();
        for (&i, &old) in holding.iter().zip(&olds) {
            slots[i] = old;
        }
        holding.len().min(olds.len())
    }

    /// The move rule: the state read at `t` under `self`, carried over to
    /// `to` (a quota change or a move between tiers).
    pub fn convert(&self, word: &Word, t: u64, to: &Limit) -> Word {
        let t = clamp(t);
        // The same settings (a pair's other limit changed), or a client
        // that never made a request (or was reset): as it is.
        if self == to || *word == self.fresh() {
            return word.clone();
        }
        match (*self, word, *to) {
            (
                Self::Bucket { interval, capacity },
                &Word::Tat(tat),
                Self::Bucket {
                    interval: to_interval,
                    capacity: to_capacity,
                },
            ) => {
                let full = u128::from(to_capacity) * u128::from(to_interval);
                if tat <= t {
                    // Full since `tat`: the old capacity, and the new
                    // rate's refill since toward a larger one; before `t`,
                    // no fuller than a bucket empty when the old one was,
                    // refilling at the new rate.
                    let more =
                        u128::from(to_capacity.saturating_sub(capacity)) * u128::from(to_interval);
                    let timed = (u128::from(tat) + full)
                        .saturating_sub(u128::from(capacity) * u128::from(interval))
                        .min(u128::from(t));
                    let tat = (u128::from(tat) + more)
                        .max(timed)
                        .min(u128::from(t) + full);
                    return Word::Tat((tat as u64).max(1));
                }
                // The instant the bucket was (or will be) empty.
                let empty = i128::from(tat) - i128::from(capacity) * i128::from(interval);
                if i128::from(t) < empty {
                    // Empty until then, refilling at the new rate after.
                    return Word::Tat((empty as u128 + full) as u64);
                }
                // The tokens the client holds, as the new bucket's ns,
                // capped at the new capacity: never more.
                let held =
                    (t as i128 - empty) as u128 * u128::from(to_interval) / u128::from(interval);
                Word::Tat(((u128::from(t) + full - held.min(full)) as u64).max(1))
            }
            (
                Self::Fixed {
                    limit,
                    width,
                    phase,
                },
                _,
                Self::Fixed {
                    limit: to_limit,
                    width: to_width,
                    phase: to_phase,
                },
            ) => {
                let (i, c) = self.fixed_at(word, t);
                let t_eff = t.max(start(width, phase, i));
                let j = index_of(to_width, to_phase, t_eff);
                // Until when the state may hold requests: its idle instant,
                // or, for an empty count (left so by a move), its window's
                // end. Nothing since the new window began: fresh.
                let &Word::Fixed {
                    index: recorded,
                    count: raw,
                } = word
                else {
                    panic!("{self:?} holds no {word:?}");
                };
                let busy_until = if raw == 0 {
                    start(width, phase, recorded + 1)
                } else {
                    self.idle_at(word)
                };
                if busy_until <= start(to_width, to_phase, j) {
                    // Fresh, idle from the first new boundary not before
                    // the old state's idle instant.
                    return to.fresh_from(ceil(to_width, to_phase, busy_until));
                }
                if c <= limit {
                    let left = to_limit.min(limit - c);
                    return Word::Fixed {
                        index: j,
                        count: to_limit - left,
                    };
                }
                // Closed, with `c − limit` booked in window i + 1.
                let booked = c - limit;
                let m = index_of(to_width, to_phase, start(width, phase, i + 1));
                if m == j {
                    Word::Fixed {
                        index: j,
                        count: to_limit,
                    }
                } else if booked <= to_limit {
                    Word::Fixed {
                        index: m - 1,
                        count: to_limit + booked,
                    }
                } else {
                    // More than the new limit holds: their window closed
                    // too, the rest counted in the next.
                    Word::Fixed {
                        index: m,
                        count: to_limit + (booked - to_limit).min(to_limit),
                    }
                }
            }
            (
                Self::Sliding { limit, width, .. },
                _,
                Self::Sliding {
                    limit: to_limit,
                    width: to_width,
                    phase: to_phase,
                },
            ) => {
                let s = self.sliding_at(word, t);
                let t_eff = instant(width, self.phase(), s.index, s.offset);
                let j = index_of(to_width, to_phase, t_eff);
                // Until when the state may weigh: its idle instant, or, for
                // empty counts (left so by a move), the end of the window
                // after its own. Nothing since the new window began
                // began: fresh.
                let &Word::Sliding {
                    index: recorded,
                    curr: raw_curr,
                    prev: raw_prev,
                } = word
                else {
                    panic!("{self:?} holds no {word:?}");
                };
                let busy_until = if raw_curr == 0 && raw_prev == 0 {
                    start(width, self.phase(), recorded + 2)
                } else {
                    self.idle_at(word)
                };
                if busy_until <= start(to_width, to_phase, j) {
                    // Fresh, idle from the first new boundary not before
                    // the old state's idle instant.
                    return to.fresh_from(ceil(to_width, to_phase, busy_until));
                }
                let w = i128::from(width);
                let room = i128::from(limit) * w
                    - i128::from(s.curr) * w
                    - i128::from(s.prev) * (w - i128::from(s.offset));
                let left = to_limit.min(room.div_euclid(w).clamp(0, i128::from(limit)) as u64);
                Word::Sliding {
                    index: j,
                    curr: to_limit - left,
                    prev: 0,
                }
            }
            _ => panic!("no move from {self:?} to {to:?}"),
        }
    }

    fn phase(&self) -> u64 {
        match *self {
            Self::Fixed { phase, .. } | Self::Sliding { phase, .. } => phase,
            _ => 0,
        }
    }

    /// A fixed window's index and count as they stand at `t`: a reading
    /// before the recorded window is that window's; the window after a
    /// closed one holds what was booked in it; any later one is empty.
    fn fixed_at(&self, word: &Word, t: u64) -> (u64, u64) {
        let (
            Self::Fixed {
                limit,
                width,
                phase,
            },
            &Word::Fixed { index, count },
        ) = (*self, word)
        else {
            panic!("{self:?} holds no {word:?}");
        };
        let now = index_of(width, phase, t);
        if now <= index {
            return (index, count);
        }
        match now - index {
            1 => (now, count.saturating_sub(limit)),
            _ => (now, 0),
        }
    }

    /// A counter's window, counts and offset into the window at `t`: a
    /// reading before the recorded window is that window's start.
    fn sliding_at(&self, word: &Word, t: u64) -> Sliding {
        let (Self::Sliding { width, phase, .. }, &Word::Sliding { index, curr, prev }) =
            (*self, word)
        else {
            panic!("{self:?} holds no {word:?}");
        };
        let shifted = clamp(clamp(t).saturating_add(phase));
        let now = shifted / width;
        if now < index {
            return Sliding {
                index,
                curr,
                prev,
                offset: 0,
            };
        }
        let offset = shifted - now * width;
        let (curr, prev) = match now - index {
            0 => (curr, prev),
            1 => (0, curr),
            _ => (0, 0),
        };
        Sliding {
            index: now,
            curr,
            prev,
            offset,
        }
    }

    /// `(curr + n − 1)·W + prev·(W − e) < limit·W`.
    fn sliding_passes(&self, curr: u64, prev: u64, offset: u64, cost: u64) -> bool {
        let Self::Sliding { limit, width, .. } = *self else {
            unreachable!()
        };
        let w = u128::from(width);
        u128::from(curr + cost - 1) * w + u128::from(prev) * (w - u128::from(offset))
            < u128::from(limit) * w
    }
}

struct Sliding {
    index: u64,
    curr: u64,
    prev: u64,
    offset: u64,
}

/// The window a reading falls in.
pub fn index_of(width: u64, phase: u64, t: u64) -> u64 {
    clamp(clamp(t).saturating_add(phase)) / width
}

/// The first window start (in readings) not before `t`.
pub fn ceil(width: u64, phase: u64, t: u64) -> u64 {
    let k = index_of(width, phase, t);
    if start(width, phase, k) == t {
        t
    } else {
        start(width, phase, k + 1)
    }
}

/// The reading at which window `k` starts (0 for the window the clock's
/// origin cuts short).
pub fn start(width: u64, phase: u64, k: u64) -> u64 {
    instant(width, phase, k, 0)
}

fn instant(width: u64, phase: u64, k: u64, offset: u64) -> u64 {
    k.saturating_mul(width)
        .saturating_add(offset)
        .saturating_sub(phase)
}
