//! Model 13: a quota change racing a check.
//!
//! A tiered limiter's quota changes in steps (`Limiter::set_quota`): the
//! new quota table is published, then every client's cell is carried over
//! as a table rebuild moves it (its word copied and converted to the new
//! quota, into a new cell that names the new quota, and the old cell then
//! forwarded by one exchange from the word converted), then the old
//! table is retired. A check reads the quota its cell names *inside* its
//! transition, after the word's `Acquire` load, so it decides an old word
//! under the old quota and a carried word under the new one.
//!
//! The model: one check (from a known client with a fresh state, or from a
//! new client being born meanwhile) races a change from a bucket refilled
//! every 10 ns to one refilled every 20 ns (capacity 2 both), on a frozen
//! clock. Whichever comes first, the client's one admission is 20 ns of
//! debt under the new quota: checked first, its 10 ns of debt doubles when
//! carried; changed first, the check charges 20 ns. So the check is
//! admitted and the kept cell makes a request of 2 wait exactly 20 ns.
//!
//! The broken twin reads the quota once, from the table, before looking
//! the client up, as a plain limiter reads its one quota: a check that read the table
//! before the change and finds the carried cell decides it under the old
//! quota, leaving 10 ns of debt. Loom finds that interleaving.

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;

use crate::eviction::check as run_model;
use crate::stand_in::StandIn;
use crate::twins::check_reading_quotas_first;
use tollgate::__loom::{
    carry, change_quota, check_or_insert, tiered, token_bucket, Algorithm, Mortal, Newcomer,
    TierCell, Tiered,
};
use tollgate::TokenBucket;

const KEY: &str = "alice";

/// The frozen instant every reading is.
const NOW: u64 = 100;

fn every(ns: u64) -> TokenBucket {
    token_bucket(1, Duration::from_nanos(ns), 2).unwrap()
}

/// The limiter's side of bringing a client in, with room for everyone.
pub(crate) struct Coming<'a>(pub(crate) &'a Tiered<TokenBucket>);

impl Newcomer<String, TierCell, bool> for Coming<'_> {
    fn now(&self) -> u64 {
        NOW
    }
    // A word algorithm's new client is fresh at every reading, as the
    // limiter makes it (`Algorithm::BORN_AT_READING`).
    fn unborn(&self, _: &String, _: u64) -> TierCell {
        self.0.unborn_in(0, 0)
    }
    fn fresh(&self, _: &String, _: u64) -> TierCell {
        self.0.fresh_in(0, 0)
    }
    fn reserve(&self) -> bool {
        true
    }
    fn make_room(&self, _: u64) -> bool {
        true
    }
    fn release(&self) {}
    fn activate(&self, cell: &TierCell, _: u64) {
        self.0.activate(cell, 0);
    }
    fn refused(&self, _: u64) -> Option<bool> {
        None
    }
}

/// One unit check racing a quota change; `twin` checks by the broken twin.
fn race(name: &str, known: bool, twin: bool) -> (usize, u64, u64) {
    let label = name.to_owned();
    run_model(name, move || {
        let tiered = Arc::new(tiered(every(10)));
        let index = Arc::new(if known {
            StandIn::holding(KEY, tiered.fresh_cell(0))
        } else {
            StandIn::new(false)
        });
        let changer = {
            let (tiered, index) = (Arc::clone(&tiered), Arc::clone(&index));
            thread::spawn(move || {
                change_quota(&tiered, every(20), || {
                    index.relocate(KEY, |cell| carry(&tiered, cell, NOW));
                });
            })
        };
        let coming = Coming(&tiered);
        let admitted = if twin {
            let op = check_reading_quotas_first(&tiered);
            check_or_insert(&*index, KEY, NOW, |cell, now| op(cell, now), &coming)
        } else {
            check_or_insert(
                &*index,
                KEY,
                NOW,
                |cell: &TierCell, now| tiered.try_admit(cell, now, 1),
                &coming,
            )
        };
        changer.join().unwrap();
        let name = &label;
        assert!(admitted, "{name}: a full bucket denied its first request");
        let map = index.snapshot();
        let kept = &map[KEY];
        assert!(!kept.is_dead(), "{name}: the map kept a dead cell");
        let wait = tiered.peek(kept, NOW, 2).retry_after();
        assert_eq!(
            wait,
            Duration::from_nanos(20),
            "{name}: decided under the wrong quota: the admission left {wait:?} of debt for 2 tokens, not 20 ns"
        );
        u64::from(admitted)
    })
}

#[test]
fn quota_change_vs_check_known_client() {
    let (_, min, max) = race("quota/known", true, false);
    assert_eq!((min, max), (1, 1));
}

#[test]
fn quota_change_vs_check_new_client() {
    let (_, min, max) = race("quota/new", false, false);
    assert_eq!((min, max), (1, 1));
}

#[test]
#[should_panic(expected = "decided under the wrong quota")]
fn quota_read_before_the_lookup_is_caught() {
    let _ = race("quota/broken/read_first", true, true);
}
