//! Model 12: a client held to two limits at once (`Both`).
//!
//! Both limits' words live in one 128-bit cell (`PairCell`), and a check
//! installs the pair by one compare-and-swap: both charged, or neither.
//! Threads race single-unit checks on one client with a frozen clock, where
//! the first limit holds more than the second (or the reverse): in every
//! interleaving exactly the binding budget is admitted, and each limit's
//! word shows exactly the admissions, so a denial charged neither limit.
//!
//! Inside a model the 128-bit atomic is the shim's stand-in, a loom mutex
//! around the value (`src/sync.rs`): loom explores every interleaving of
//! the whole-pair loads and exchanges, but not the memory orderings of the
//! real `cmpxchg16b`, which the cell does not rely on (it publishes nothing
//! through the word).
//!
//! The broken twins keep the two limits in two words, each updated by its
//! own (correct) compare-and-swap loop:
//!
//! * check then charge: peek at both, and if both would admit, charge both.
//!   Two threads can both see room before either charges: over-admission.
//! * charge one by one: charge the first, then the second; a denial by the
//!   second leaves the first charged. A denial charges a limit.

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use tollgate::__loom::{both, pair_cell, pair_words, token_bucket, Algorithm, StateCell};
use tollgate::TokenBucket;

use crate::harness::{assert_reached, check, Explored};

/// The frozen instant of every check: fresh buckets are full.
const NOW: u64 = 100;

fn bucket(capacity: u64) -> TokenBucket {
    token_bucket(1, Duration::from_nanos(10), capacity).unwrap()
}

/// Units charged to `limit` by `word`: its capacity less what is left.
fn charged(limit: TokenBucket, word: u64) -> u64 {
    limit.capacity() - limit.quota(&StateCell::new(word), NOW).remaining()
}

/// How a thread makes one unit check against the two limits: the crate's
/// pair cell, or a broken twin over two separate word cells. Answers
/// whether the check was admitted.
#[derive(Clone, Copy)]
enum Way {
    /// One pair cell, one compare-and-swap.
    Pair,
    /// Two word cells: peek at both, then charge both.
    CheckThenCharge,
    /// Two word cells: charge the first, then the second.
    OneByOne,
}

/// `threads` threads each make one unit check on a fresh client held to
/// `caps.0` and `caps.1`; every interleaving must admit exactly the smaller
/// and charge each limit exactly the admissions.
fn race(name: &str, way: Way, threads: usize, caps: (u64, u64)) -> Explored {
    let (first, second) = (bucket(caps.0), bucket(caps.1));
    let budget = caps.0.min(caps.1);
    let label = name.to_owned();
    check(name, move |tally| {
        let pair = both(first, second);
        let cell = Arc::new(pair_cell(0, 0));
        let apart = Arc::new((StateCell::new(0), StateCell::new(0)));
        let one = {
            let (cell, apart) = (Arc::clone(&cell), Arc::clone(&apart));
            move || -> bool {
                match way {
                    Way::Pair => pair.admit(&cell, NOW, 1),
                    Way::CheckThenCharge => {
                        let room = first.peek(&apart.0, NOW, 1).is_allowed()
                            && second.peek(&apart.1, NOW, 1).is_allowed();
                        if room {
                            let _ = first.admit(&apart.0, NOW, 1);
                            let _ = second.admit(&apart.1, NOW, 1);
                        }
                        room
                    }
                    Way::OneByOne => {
                        first.admit(&apart.0, NOW, 1) && second.admit(&apart.1, NOW, 1)
                    }
                }
            }
        };
        let handles: Vec<_> = (1..threads)
            .map(|_| {
                let one = one.clone();
                thread::spawn(move || u64::from(one()))
            })
            .collect();
        let mut admitted = u64::from(one());
        for handle in handles {
            admitted += handle.join().unwrap();
        }
        let name = &label;
        assert!(
            admitted <= budget,
            "{name}: over-admitted: {admitted} with a binding budget of {budget}"
        );
        assert_eq!(admitted, budget, "{name}: under-admitted");
        let words = match way {
            Way::Pair => pair_words(&cell),
            _ => (apart.0.load(), apart.1.load()),
        };
        assert_eq!(
            (charged(first, words.0), charged(second, words.1)),
            (admitted, admitted),
            "{name}: a denial charged a limit (or an admission was lost)"
        );
        tally.record(admitted);
    })
}

#[test]
fn both_2_threads_first_2_second_1() {
    assert_reached(race("both/2x1/caps 2,1", Way::Pair, 2, (2, 1)), 1, 1);
}

#[test]
fn both_3_threads_first_2_second_1() {
    assert_reached(race("both/3x1/caps 2,1", Way::Pair, 3, (2, 1)), 1, 1);
}

#[test]
fn both_3_threads_first_1_second_2() {
    assert_reached(race("both/3x1/caps 1,2", Way::Pair, 3, (1, 2)), 1, 1);
}

#[test]
fn both_3_threads_first_3_second_2() {
    assert_reached(race("both/3x1/caps 3,2", Way::Pair, 3, (3, 2)), 2, 2);
}

#[test]
#[should_panic(expected = "over-admitted")]
fn check_then_charge_on_two_words_is_caught() {
    let _ = race(
        "both/broken/check-then-charge",
        Way::CheckThenCharge,
        2,
        (2, 1),
    );
}

#[test]
#[should_panic(expected = "a denial charged a limit")]
fn charging_one_by_one_on_two_words_is_caught() {
    let _ = race("both/broken/one-by-one", Way::OneByOne, 2, (2, 1));
}

/// Model 8 (a table rebuild moving the cell while two checks run) over a
/// pair client: the move copies both words and forwards the old cell by
/// one exchange of the whole pair, from the pair copied, so exactly one check is admitted (binding capacity
/// 1), known client and new client alike.
#[test]
fn relocation_vs_checks_pair_of_buckets() {
    use tollgate::__loom::Mortal;
    for known in [true, false] {
        let (_, min, max) = crate::relocation::race(
            if known {
                "relocation/known/both"
            } else {
                "relocation/new/both"
            },
            both(bucket(1), bucket(2)),
            known,
            Mortal::relocate,
            Mortal::forward,
        );
        assert_eq!((min, max), (1, 1));
    }
}
