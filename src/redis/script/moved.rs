//! A token bucket's key carried across a slot move to a node whose clock
//! differs from the writer's: every write sets the key to expire the
//! first ms past the state's idle instant (its TAT) and the linger the
//! value names (see `Spec::linger_ms`); `MIGRATE` carries
//! that expiry as a time to live, so the expiry the new node reads less
//! the one the state implies is how far its clock is from the writer's,
//! and the scripts ([`carried_lua`]) and the slow path's read
//! ([`carried`]) carry the TAT by as much before deciding. Only a bucket
//! alone: a window's index cannot move by a fraction of a window.

use super::spec::{Spec, WordSpec, EXACT_MAX};

/// For a token bucket alone, where keys `moves` (Redis Cluster, whose
/// slots move between nodes): its TAT carried onto this node's clock if
/// the key came from a node whose clock differs (see [`MOVED`]). On one
/// server no slot moves, and the scripts leave out the `PEXPIRETIME` (about
/// 5.5 k instructions inside `redis-server` a check).
pub(super) fn carried_lua(spec: &Spec, moves: bool) -> String {
    match spec {
        Spec::One(half) if moves && matches!(half.ns, WordSpec::Bucket(_)) => MOVED.to_owned(),
        _ => String::new(),
    }
}

/// A bucket's key moved to another node (a slot moved by `MIGRATE`,
/// which carries its time to live, not its instant) whose clock differs
/// from the writer's: every write sets the key to expire the first ms
/// past the state's idle instant (its TAT) and the linger its value
/// names (`vd`, ms; 0 in an earlier release's value), so the expiry this
/// node reads less those is how far its clock is from the writer's, and
/// the TAT is carried onto this node's clock by as much. Up to a ms
/// either way is rounding (the slow path rounds the ns) and moves
/// nothing. A key without an expiry moves nothing.
const MOVED: &str = r"
  local pe = redis.call('PEXPIRETIME', key)
  if pe > 0 then
    local idle = x1
    if x2 > 0 then idle = x1 + 1 end
    local off = pe - math.floor(idle / 1000) - 1 - vd
    if off > 1 or off < -1 then x1 = math.max(x1 + off * 1000, 0) end
  end";

/// A token bucket's stored TAT (`[µs, ns]`) carried onto the clock of the
/// node that read its key, whose expiry (ms) is `expiry` and which its
/// writer set to linger `linger` ms past the idle instant: as the scripts
/// carry it ([`MOVED`]).
pub(super) fn carried(values: &[u64], expiry: i64, linger: u64) -> Vec<u64> {
    let (t, r) = (values[0], values[1]);
    if expiry <= 0 {
        return values.to_vec();
    }
    let idle = t + u64::from(r > 0);
    let off = i128::from(expiry) - i128::from(idle / 1_000) - 1 - i128::from(linger);
    if (-1..=1).contains(&off) {
        return values.to_vec();
    }
    let t = (i128::from(t) + off * 1_000).clamp(0, i128::from(EXACT_MAX));
    vec![t as u64, r]
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn the_tat_moves_by_the_expiry_s_offset_beyond_a_ms() {
        // A TAT of 5 000 123 456 µs (and 1 ns): written to expire at
        // 5 000 124 ms.
        let tat = [5_000_123_456, 1];
        for expiry in [5_000_124, 5_000_123, 5_000_125, 0, -1, -2] {
            assert_eq!(carried(&tat, expiry, 0), tat, "{expiry}");
        }
        assert_eq!(carried(&tat, 5_002_124, 0), [5_002_123_456, 1]);
        assert_eq!(carried(&tat, 4_998_124, 0), [4_998_123_456, 1]);
        // The earliest an expiry carries it: within the ms it expires.
        assert_eq!(carried(&tat, 1, 0), [456, 1]);
        // The Lua reads the same figures.
        assert!(MOVED.contains("math.floor(idle / 1000) - 1 - vd"));
    }

    #[test]
    fn the_linger_the_value_names_is_no_offset() {
        let tat = [5_000_123_456, 1];
        // Written to expire a minute past its idle instant: read on the
        // writer's clock, nothing moves; on a clock 2 s ahead or behind,
        // the TAT moves by 2 s, as without a linger.
        for expiry in [5_060_124, 5_060_123, 5_060_125] {
            assert_eq!(carried(&tat, expiry, 60_000), tat, "{expiry}");
        }
        assert_eq!(carried(&tat, 5_062_124, 60_000), [5_002_123_456, 1]);
        assert_eq!(carried(&tat, 5_058_124, 60_000), [4_998_123_456, 1]);
        // A linger longer than the expiry's lead: the TAT never goes
        // below 0.
        assert_eq!(carried(&tat, 60_000, 60_000), [0, 1]);
    }
}
