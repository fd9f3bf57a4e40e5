//! The move rule, on each algorithm's word: a quota change never adds to
//! what a client may take at its reading, what it may take later grows at
//! the new rate up to the new capacity, and bookings stay charged; at a
//! reading ahead of or behind the state's, the same.

use core::time::Duration;

use super::{FixedWindow, Reserve, SlidingWindowCounter, TokenBucket, WordAlgorithm, FRESH};

const SEC: u64 = 1_000_000_000;
const MINUTE: u64 = 60 * SEC;
const HOUR: u64 = 3_600 * SEC;
const DAY: u64 = 86_400 * SEC;

fn bucket(tokens: u64, per: u64, capacity: u64) -> TokenBucket {
    TokenBucket::new(tokens, Duration::from_nanos(per), capacity).unwrap()
}

fn fixed(limit: u64, window: u64) -> FixedWindow {
    FixedWindow::new(limit, Duration::from_nanos(window)).unwrap()
}

fn counter(limit: u64, window: u64) -> SlidingWindowCounter {
    SlidingWindowCounter::new(limit, Duration::from_nanos(window)).unwrap()
}

/// Spends the whole of `algorithm`'s capacity at `now`, one by one.
fn drained<A: WordAlgorithm>(algorithm: &A, mut word: u64, now: u64) -> u64 {
    while let Some(next) = algorithm.admit(word, now, 1) {
        word = next;
    }
    word
}

/// Admits one at a time at `now` until denied; how many passed.
fn spend_all<A: WordAlgorithm>(algorithm: &A, mut word: u64, now: u64) -> (u64, u64) {
    let mut admitted = 0;
    while let Some(next) = algorithm.admit(word, now, 1) {
        word = next;
        admitted += 1;
    }
    (admitted, word)
}

#[test]
fn a_downgraded_bucket_waits_at_most_one_new_interval() {
    // 10⁶ a second down to one an hour, 1 000 a minute down to 10 an
    // hour, and the tiers guide's partner plan down to one a second.
    for (from, to) in [
        (bucket(1_000_000, SEC, 1_000_000), bucket(1, HOUR, 1)),
        (bucket(1_000, MINUTE, 1_000), bucket(10, HOUR, 10)),
        (bucket(200, SEC, 200), bucket(1, SEC, 1)),
    ] {
        let now = 1_000 * SEC;
        let word = from.convert(drained(&from, FRESH, now), now, &to);
        assert_eq!(to.remaining(word, now), 0, "a move never adds");
        let wait = to.retry_after(word, now, 1);
        assert!(
            wait <= to.horizon() / to.capacity(),
            "{to:?}: waits {wait} ns"
        );
        assert!(to.admit(word, now + wait, 1).is_some());
    }
}

#[test]
fn a_bucket_moved_to_a_faster_rate_keeps_the_tokens_it_holds_capped() {
    let (from, to) = (bucket(1, SEC, 10), bucket(10, SEC, 100));
    let now = 50 * SEC;
    // 4 spent of 10: 6 held, kept under the larger bucket...
    let mut word = FRESH;
    for _ in 0..4 {
        word = from.admit(word, now, 1).unwrap();
    }
    let moved = from.convert(word, now, &to);
    assert_eq!(to.remaining(moved, now), 6);
    // ...refilling at the new rate...
    assert_eq!(to.remaining(moved, now + SEC), 16);
    // ...and capped under a smaller one.
    let small = bucket(10, SEC, 2);
    assert_eq!(small.remaining(from.convert(word, now, &small), now), 2);
}

#[test]
fn a_bucket_moved_to_a_slower_rate_keeps_the_tokens_it_holds() {
    let (from, to) = (bucket(10, SEC, 10), bucket(1, SEC, 100));
    let now = 50 * SEC;
    // 4 spent of 10 at 50 s: 6 held, refilling at the new rate.
    let mut word = FRESH;
    for _ in 0..4 {
        word = from.admit(word, now, 1).unwrap();
    }
    let moved = from.convert(word, now, &to);
    assert_eq!(to.remaining(moved, now), 6);
    assert_eq!(to.remaining(moved, now + 10 * SEC), 16);
    // A full one moved to one an hour, capacity 1: full, fresh from now.
    let hourly = bucket(1, 3_600 * SEC, 1);
    let full = from.convert(FRESH + 1, now, &hourly);
    assert_eq!(hourly.remaining(full, now), 1);
}

#[test]
fn a_bucket_converted_at_a_reading_behind_waits_at_most_the_step_more() {
    // 1 000 a second, spent at 1 000 s; moved to one an hour at a reading
    // 1 s behind: the step costs at most its own length.
    let (from, to) = (bucket(1_000, SEC, 1_000), bucket(1, HOUR, 1));
    let spent = drained(&from, FRESH, 1_000 * SEC);
    let moved = from.convert(spent, 999 * SEC, &to);
    assert_eq!(to.retry_after(moved, 999 * SEC, 1), HOUR + SEC);
    assert_eq!(to.retry_after(moved, 1_000 * SEC, 1), HOUR);
}

#[test]
fn a_bucket_converted_at_a_reading_ahead_admits_nothing_more_back_at_the_true_one() {
    // Spent at 1 000 s, moved to 1 a second (the same capacity) at a
    // reading a day ahead: back at 1 000 s nothing more passes.
    let (from, to) = (bucket(1_000, SEC, 1_000), bucket(1, SEC, 1_000));
    let spent = drained(&from, FRESH, 1_000 * SEC);
    let moved = from.convert(spent, 1_000 * SEC + DAY, &to);
    assert_eq!(spend_all(&to, moved, 1_000 * SEC).0, 0);
    // The same move at the true reading: nothing either.
    let moved = from.convert(spent, 1_000 * SEC, &to);
    assert_eq!(spend_all(&to, moved, 1_000 * SEC).0, 0);
}

#[test]
fn moves_down_and_up_at_one_instant_never_add() {
    // Spend all but what the small bucket holds, move down (a full small
    // bucket), move up: the large bucket holds that much again, no more.
    let (admitted, _) = down_and_up(&bucket(1, SEC, 32), &bucket(1, SEC, 2), 10 * SEC);
    assert_eq!(admitted, 32);
}

/// Five times at `now`: spends all but the small quota's capacity of the
/// large one, moves down to the small one and back up. Then spends what
/// is left. How many were admitted, and the word left.
fn down_and_up<A: WordAlgorithm>(large: &A, small: &A, now: u64) -> (u64, u64) {
    let mut word = FRESH;
    let mut admitted = 0;
    for _ in 0..5 {
        for _ in 0..large.remaining(word, now).saturating_sub(small.capacity()) {
            word = large.admit(word, now, 1).unwrap();
            admitted += 1;
        }
        word = small.convert(large.convert(word, now, small), now, large);
    }
    let (rest, word) = spend_all(large, word, now);
    (admitted + rest, word)
}

#[test]
fn a_bucket_idle_a_whole_new_refill_moves_as_a_fresh_one() {
    let (from, to) = (bucket(1, SEC, 2), bucket(1, SEC, 10));
    let word = drained(&from, FRESH, 0);
    // Full at 2 s: then the new rate's refill toward the new capacity.
    assert_eq!(to.remaining(from.convert(word, 2 * SEC, &to), 2 * SEC), 2);
    assert_eq!(to.remaining(from.convert(word, 6 * SEC, &to), 6 * SEC), 6);
    assert_eq!(
        to.remaining(from.convert(word, 20 * SEC, &to), 20 * SEC),
        10
    );
}

#[test]
fn a_client_that_never_made_a_request_moves_as_one_from_the_clock_s_first_instant() {
    // A clock that starts at 0 (a `ManualClock`): a raise in the first
    // second leaves a client never seen a fresh one, with the whole new
    // capacity, and so does a cut.
    for (from, to) in [
        (bucket(10, SEC, 10), bucket(20, SEC, 20)),
        (bucket(20, SEC, 20), bucket(1, SEC, 5)),
    ] {
        for now in [0, 1, SEC / 2] {
            let moved = from.convert(FRESH, now, &to);
            assert_eq!(moved, FRESH, "{from:?} → {to:?} at {now}");
            assert_eq!(to.remaining(moved, now), to.capacity());
        }
    }
    for (from, to) in [
        (fixed(10, MINUTE), fixed(20, MINUTE)),
        (fixed(20, MINUTE), fixed(5, MINUTE)),
    ] {
        assert_eq!(from.convert(FRESH, 1, &to), FRESH);
    }
    for (from, to) in [
        (counter(10, MINUTE), counter(20, MINUTE)),
        (counter(20, MINUTE), counter(5, MINUTE)),
    ] {
        assert_eq!(from.convert(FRESH, 1, &to), FRESH);
    }
}

#[test]
fn a_fixed_window_keeps_its_bookings_across_a_raise() {
    // 10 a minute spent, 10 booked for the next window, limit raised to
    // 11: the next window takes the 10 booked and 1 more.
    let (from, to) = (fixed(10, MINUTE), fixed(11, MINUTE));
    let now = 10 * MINUTE + SEC;
    let word = drained(&from, FRESH, now);
    let Reserve::At { word, ready_at } = from.reserve(word, now, 10) else {
        panic!("books the next window");
    };
    assert_eq!(ready_at, 11 * MINUTE);
    let moved = from.convert(word, now, &to);
    assert_eq!(spend_all(&to, moved, now).0, 0);
    assert_eq!(spend_all(&to, moved, 11 * MINUTE).0, 1);
}

#[test]
fn a_fixed_window_keeps_bookings_two_windows_ahead() {
    // Two bookings of 6 beyond a spent window: the first runs in the next
    // window, which it closes, the second in the one after.
    let (from, to) = (fixed(10, MINUTE), fixed(11, MINUTE));
    let now = 10 * MINUTE;
    let mut word = drained(&from, FRESH, now);
    for ready in [11 * MINUTE, 12 * MINUTE] {
        let Reserve::At {
            word: booked,
            ready_at,
        } = from.reserve(word, now, 6)
        else {
            panic!("books ahead");
        };
        assert_eq!(ready_at, ready);
        word = booked;
    }
    let moved = from.convert(word, now, &to);
    assert_eq!(spend_all(&to, moved, now).0, 0);
    assert_eq!(spend_all(&to, moved, 11 * MINUTE).0, 0);
    assert_eq!(spend_all(&to, moved, 12 * MINUTE).0, 5);
}

#[test]
fn a_booking_beyond_the_new_limit_spills_into_the_next_window_and_no_further() {
    // 10 a minute spent, 8 booked for the next window, limit cut to 5:
    // the next window holds 5 of the 8 and closes, the 3 left count in
    // the window after, which admits 2 more; the third window is fresh.
    // Both directions: 8 booked requests are never fewer, nor more.
    let (from, to) = (fixed(10, MINUTE), fixed(5, MINUTE));
    let now = 10 * MINUTE + SEC;
    let word = drained(&from, FRESH, now);
    let Reserve::At { word, ready_at } = from.reserve(word, now, 8) else {
        panic!("books the next window");
    };
    assert_eq!(ready_at, 11 * MINUTE);
    let moved = from.convert(word, now, &to);
    assert_eq!(spend_all(&to, moved, now).0, 0);
    assert_eq!(spend_all(&to, moved, 11 * MINUTE).0, 0);
    assert_eq!(spend_all(&to, moved, 12 * MINUTE).0, 2);
    assert_eq!(spend_all(&to, moved, 13 * MINUTE).0, 5);
}

#[test]
fn a_fixed_window_converted_at_a_reading_behind_keeps_its_count_in_its_window() {
    // 10 spent in the window of 10 min; raised to 11 at a reading 1 s
    // back, in the window before: the count stays in the window it was
    // made in, which admits nothing more, and the next admits 11.
    let (from, to) = (fixed(10, MINUTE), fixed(11, MINUTE));
    let word = drained(&from, FRESH, 10 * MINUTE);
    let moved = from.convert(word, 10 * MINUTE - SEC, &to);
    assert_eq!(spend_all(&to, moved, 10 * MINUTE).0, 0);
    assert_eq!(spend_all(&to, moved, 11 * MINUTE).0, 11);
}

#[test]
fn a_fixed_window_moved_down_and_up_at_one_instant_never_adds() {
    let large = fixed(32, MINUTE);
    let (admitted, word) = down_and_up(&large, &fixed(2, MINUTE), 5 * MINUTE);
    assert_eq!(admitted, 32);
    // In the next window, a fresh count.
    assert_eq!(spend_all(&large, word, 6 * MINUTE).0, 32);
}

#[test]
fn a_counter_converted_at_a_reading_behind_keeps_its_count() {
    let (from, to) = (counter(10, MINUTE), counter(11, MINUTE));
    let word = drained(&from, FRESH, 10 * MINUTE);
    let moved = from.convert(word, 10 * MINUTE - SEC, &to);
    assert_eq!(spend_all(&to, moved, 10 * MINUTE).0, 0);
}

#[test]
fn a_counter_moved_twice_at_one_reading_keeps_what_it_had_left() {
    // 3 of 10 used; cut to 5 (5 left, none counted in the new state), then
    // raised to 8 at the same reading: the empty counts still stand for a
    // window with requests in it, so 5 are left, not a fresh client's.
    let now = 10 * MINUTE + 30 * SEC;
    let (ten, five, eight) = (counter(10, MINUTE), counter(5, MINUTE), counter(8, MINUTE));
    let mut word = FRESH;
    for _ in 0..3 {
        word = ten.admit(word, now, 1).unwrap();
    }
    let cut = ten.convert(word, now, &five);
    assert_eq!(five.remaining(cut, now), 5);
    let raised = five.convert(cut, now, &eight);
    assert_eq!(spend_all(&eight, raised, now).0, 5);
}

#[test]
fn a_counter_fresh_at_a_move_is_fresh_again_at_the_next() {
    // An idle client moved to 10 is a fresh client there (its state is
    // idle from the new window on); raised to 20 at the same reading it is
    // a fresh client at 20 too, with all 20, not the 10 it had.
    let now = 10 * MINUTE + 54 * SEC;
    let (five, ten, twenty) = (counter(5, MINUTE), counter(10, MINUTE), counter(20, MINUTE));
    let idle = five.admit(FRESH, MINUTE, 1).unwrap();
    let moved = five.convert(idle, now, &ten);
    assert_eq!(spend_all(&ten, moved, now).0, 10);
    let raised = ten.convert(moved, now, &twenty);
    assert_eq!(spend_all(&twenty, raised, now).0, 20);
}

#[test]
fn a_client_fresh_at_a_move_is_held_full_before_at_a_reading_behind_it() {
    // 10 of 10 in the window of 10 min; moved to 20 at 12 min 30 s, idle
    // since 12 min: fresh there. A reading behind the move, at 11 min 30 s
    // (a clock that came back), finds the most a client of 20 idle from
    // 12 min on may have counted: a full window of 20 before, weighing
    // half, 10 left (not a fresh client's 20). The old state left 5
    // there: the move rule's one exception to "never adds" (the tiers
    // guide).
    let (ten, twenty) = (counter(10, MINUTE), counter(20, MINUTE));
    let word = drained(&ten, FRESH, 10 * MINUTE);
    let now = 12 * MINUTE + 30 * SEC;
    let moved = ten.convert(word, now, &twenty);
    assert_eq!(twenty.remaining(moved, now), 20);
    let behind = 11 * MINUTE + 30 * SEC;
    assert_eq!(spend_all(&twenty, moved, behind).0, 10);
    assert_eq!(spend_all(&ten, word, behind).0, 5);
    // The fixed window's, behind the move: the window before full.
    let (ten, twenty) = (fixed(10, MINUTE), fixed(20, MINUTE));
    let word = drained(&ten, FRESH, 10 * MINUTE);
    let now = 11 * MINUTE + 30 * SEC;
    let moved = ten.convert(word, now, &twenty);
    assert_eq!(twenty.remaining(moved, now), 20);
    assert_eq!(twenty.remaining(moved, 10 * MINUTE + 30 * SEC), 0);
}

#[test]
fn a_counter_keeps_what_it_has_left_and_no_more() {
    let (from, to) = (counter(10, MINUTE), counter(40, MINUTE));
    // 10 in the window of 10 min; at 11 min 30 s the estimate is 5.
    let word = drained(&from, FRESH, 10 * MINUTE);
    let now = 11 * MINUTE + 30 * SEC;
    assert_eq!(from.remaining(word, now), 5);
    let moved = from.convert(word, now, &to);
    assert_eq!(to.remaining(moved, now), 5);
    // A window later, all of the new limit.
    assert_eq!(to.remaining(moved, 13 * MINUTE), 40);
}

/// Every sequence of checks, bookings and moves between limits of 10 and
/// 20 (one-second windows) admits at most 20 in any window, bookings
/// counted in the window they run in.
#[test]
fn fixed_window_moves_and_bookings_never_pass_the_largest_limit_in_a_window() {
    use proptest::prelude::*;
    use std::collections::HashMap;
    let quotas = [fixed(10, SEC), fixed(20, SEC)];
    let op = (0u8..4, 1u64..12, 0u8..3);
    proptest!(ProptestConfig::with_cases(4_000), |(ops in proptest::collection::vec(op, 1..60))| {
        let mut q = 0usize;
        let mut word = FRESH;
        let mut now = 5 * SEC;
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for (kind, cost, step) in ops {
            now += u64::from(step) * SEC / 2;
            let algo = &quotas[q];
            let cost = cost.min(algo.capacity());
            match kind {
                0 => {
                    if let Some(next) = algo.admit(word, now, cost) {
                        word = next;
                        *counts.entry(now / SEC).or_default() += cost;
                    }
                }
                1 => {
                    if let Reserve::At { word: next, ready_at } = algo.reserve(word, now, cost) {
                        word = next;
                        *counts.entry(ready_at / SEC).or_default() += cost;
                    }
                }
                _ => {
                    let to = 1 - q;
                    word = algo.convert(word, now, &quotas[to]);
                    q = to;
                }
            }
            for (window, n) in &counts {
                prop_assert!(*n <= 20, "window {}: {} admitted", window, n);
            }
        }
    });
}

/// Every sequence of checks, bookings and moves among three buckets of
/// different rates and capacities admits, over any span, at most the
/// largest capacity plus the span's refill at the fastest rate (bookings
/// counted at the instant they run).
#[test]
fn bucket_moves_and_bookings_never_pass_the_span_bound() {
    use proptest::prelude::*;
    let quotas = [
        bucket(1, SEC, 10),
        bucket(5, SEC, 2),
        bucket(1, 10 * SEC, 20),
    ];
    let (most, fastest) = (20, SEC / 5);
    let op = (0u8..5, 1u64..12, 0u64..4 * SEC, 0usize..3);
    proptest!(ProptestConfig::with_cases(4_000), |(ops in proptest::collection::vec(op, 1..60))| {
        let mut q = 0usize;
        let mut word = FRESH;
        let mut now = 100 * SEC;
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for (kind, cost, step, to) in ops {
            now += step;
            let algo = &quotas[q];
            let cost = cost.min(algo.capacity());
            match kind {
                0 | 1 => {
                    if let Some(next) = algo.admit(word, now, cost) {
                        word = next;
                        admitted.push((now, cost));
                    }
                }
                2 => {
                    if let Reserve::At { word: next, ready_at } = algo.reserve(word, now, cost) {
                        word = next;
                        admitted.push((ready_at, cost));
                    }
                }
                _ => {
                    word = algo.convert(word, now, &quotas[to]);
                    q = to;
                }
            }
        }
        admitted.sort_unstable();
        for (i, &(from, _)) in admitted.iter().enumerate() {
            let mut sum = 0;
            for &(at, cost) in &admitted[i..] {
                sum += cost;
                let bound = most + (at - from) / fastest;
                prop_assert!(sum <= bound, "{} admitted in [{}, {}], bound {}", sum, from, at, bound);
            }
        }
    });
}

/// Every sequence of checks and moves between counters of 10 and 20 (one
/// second windows) admits at most 20 at one reading.
#[test]
fn counter_moves_never_pass_the_largest_limit_at_one_reading() {
    use proptest::prelude::*;
    let quotas = [counter(10, SEC), counter(20, SEC)];
    let op = (0u8..3, 1u64..12, 0u64..3 * SEC / 2);
    proptest!(ProptestConfig::with_cases(4_000), |(ops in proptest::collection::vec(op, 1..60))| {
        let mut q = 0usize;
        let mut word = FRESH;
        let mut now = 5 * SEC;
        let mut here = 0;
        for (kind, cost, step) in ops {
            if step > SEC {
                now += step;
                here = 0;
            }
            let algo = &quotas[q];
            let cost = cost.min(algo.capacity());
            if kind < 2 {
                if let Some(next) = algo.admit(word, now, cost) {
                    word = next;
                    here += cost;
                }
            } else {
                word = algo.convert(word, now, &quotas[1 - q]);
                q = 1 - q;
            }
            prop_assert!(here <= 20, "{} admitted at {}", here, now);
        }
    });
}
