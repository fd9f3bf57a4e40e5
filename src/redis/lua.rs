//! The scripts' Lua, generated from a [`Spec`]: the prelude every script
//! starts with, the clocks, the fast path of a check or peek for a word
//! algorithm (one limit or a pair, in one hash), the generic read and
//! compare-and-set of the slow path, and the sliding window log's scripts.
//!
//! # A word algorithm's key
//!
//! One hash per client, whatever the number of limits:
//!
//! | field | holds |
//! |---|---|
//! | `s` | the settings the state was written under ([`Spec::stamp`]) |
//! | `o` | the writing limiter's id |
//! | `g` | `<tier>:<generation>` of the writer's quota for that client |
//! | `n` | the key's incarnation: the id of the call that created it |
//! | `t`, `r` | a bucket's TAT: whole µs, and the ns beyond (absent for 0) |
//! | `k`, `c` (, `p`) | a window's index and count (and the previous count) |
//!
//! A pair's fields carry its limit's number: `t1`, `k2`, `c2`, ….
//!
//! # The fast path
//!
//! A check or peek reads the stamp and the state. A state written under
//! the reader's settings (by any process: `s` equal and, if this limiter
//! wrote it, under its current quota) is decided in the script; any other
//! is answered `{-1}`, and the limiter converts it in Rust by the
//! in-process rules ([`super::state`]) and writes it back by
//! compare-and-set. Every write sets the key to expire at the instant its
//! state becomes idle, rounded up to the millisecond.

use super::spec::{Half, Spec, WordSpec};

/// The helper every script starts with: an integer parser that tells
/// absent (`nil`) from junk (`false`).
pub(super) const PRELUDE: &str = r"
local function int(v)
  if not v then return nil end
  local n = tonumber(v)
  if n == nil or n ~= n or n < 0 or n > 9007199254740991 or n ~= math.floor(n) then
    return false
  end
  return n
end
local fmt = string.format
";

/// Exact floor division, for the window index.
pub(super) const FDIV: &str = r"
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
";

/// The reading of Redis's clock that every script judges at, in µs.
pub(super) const CLOCK: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
";

/// The clock of a limiter on a test clock: the instant is the script's
/// last argument, so that a test can drive the scripts through any
/// sequence of instants and compare them with the in-process limiters on
/// a `ManualClock`.
#[cfg(test)]
pub(super) const TEST_CLOCK: &str = r"
local now = tonumber(ARGV[#ARGV])
";

/// The error reply for a value the limiter did not write.
fn bad(what: &str) -> String {
    format!(
        "return redis.error_reply('TOLLGATE the value under ' .. KEYS[1] .. ' is not a tollgate state: {what}')"
    )
}

/// The Lua reading one limit's state from `v` (fields from index
/// `first`), deciding `cost` at `now`, and leaving: `ok<x>` (whether the
/// limit admits), the current state after any rollover, the state after
/// an admission (`n…<x>`), and `idle<x>`, the µs instant at which the
/// admitted state becomes idle. `<x>` is the pair's suffix; `a<x>`,
/// `b<x>` the limit's settings.
fn half_lua(half: &Half, x: &str, first: usize) -> String {
    let body = match half.ns {
        WordSpec::Bucket(_) => format!(
            r"
local t#, r# = int(v[{i0}]), int(v[{i1}])
if t# == false or r# == false or (r# or 0) > 999 then {bad} end
t#, r# = t# or 0, r# or 0
local ok#, nt#, nr# = cost == 0, t#, r#
if cost > 0 then
  local d, tol = t# - now, (b# - cost) * a#
  if d < tol or (d == tol and r# == 0) then
    ok# = true
    if t# >= now then nt# = t# + cost * a# else nt#, nr# = now + cost * a#, 0 end
  end
end
local idle# = nt#
if nr# > 0 then idle# = nt# + 1 end
",
            i0 = first,
            i1 = first + 1,
            bad = bad("a TAT that is not a whole number of microseconds"),
        ),
        WordSpec::Fixed(_) => format!(
            r"
local k#, c# = int(v[{i0}]), int(v[{i1}])
if k# == false or c# == false or (k# == nil) ~= (c# == nil) then {bad} end
local idx = fdiv(now, a#)
if k# == nil then k#, c# = idx, 0
elseif idx == k# + 1 then k#, c# = idx, math.max(c# - b#, 0)
elseif idx > k# + 1 then k#, c# = idx, 0 end
local ok# = cost == 0 or c# + cost <= b#
local nk#, nc# = k#, c# + cost
local idle# = (nk# + 1) * a#
if nc# > b# then idle# = (nk# + 2) * a# end
",
            i0 = first,
            i1 = first + 1,
            bad = bad("fields k and c must be whole numbers"),
        ),
        WordSpec::Sliding(_) => format!(
            r"
local k#, c#, p# = int(v[{i0}]), int(v[{i1}]), int(v[{i2}])
if k# == false or c# == false or p# == false or (k# == nil) ~= (c# == nil) or (k# == nil) ~= (p# == nil) then {bad} end
local idx, e# = fdiv(now, a#), 0
if k# == nil then k#, c#, p# = idx, 0, 0 end
if idx >= k# then
  if idx == k# + 1 then p#, c# = c#, 0 elseif idx > k# + 1 then p#, c# = 0, 0 end
  k#, e# = idx, now - idx * a#
end
local ok# = cost == 0
if cost > 0 then
  local need = c# + cost - 1
  ok# = need < b# and need * a# < b# * a# - p# * (a# - e#)
end
local nk#, nc#, np# = k#, c# + cost, p#
local idle# = (nk# + 2) * a#
",
            i0 = first,
            i1 = first + 1,
            i2 = first + 2,
            bad = bad("fields k, c and p must be whole numbers"),
        ),
    };
    body.replace('#', x)
}

/// The state variables of one limit, current (`n` = "") or after an
/// admission (`n` = "n"), as the reply lists them.
fn reply_vars(half: &Half, x: &str, n: &str) -> Vec<String> {
    let names: &[&str] = match half.ns {
        WordSpec::Bucket(_) => &["t", "r"],
        WordSpec::Fixed(_) => &["k", "c"],
        WordSpec::Sliding(_) => &["k", "c", "p"],
    };
    names.iter().map(|f| format!("{n}{f}{x}")).collect()
}

/// A word algorithm's check (`write`) or peek: see the module docs.
///
/// `ARGV`: each limit's two settings, then `cost`, the reader's stamp
/// `S`, its id `O`, its generation `G`, and the call's id `N` (the key's
/// incarnation, if the call creates it). The reply: `{-1}` for a state to
/// convert; else the outcome (1 or 0), each limit's state (after the
/// admission, or as read after any rollover) and `now`.
pub(super) fn word_script(spec: &Spec, clock: &str, write: bool) -> String {
    let halves = spec.halves();
    let base = 2 * halves.len();
    let mut fields = vec!["'s'".to_owned(), "'o'".into(), "'g'".into()];
    let mut lua = String::from(PRELUDE);
    if halves
        .iter()
        .any(|(h, _)| !matches!(h.ns, WordSpec::Bucket(_)))
    {
        lua.push_str(FDIV);
    }
    lua.push_str(clock);
    lua.push_str(&format!(
        "local key = KEYS[1]\nlocal cost = tonumber(ARGV[{c}])\nlocal S, O, G = ARGV[{s}], ARGV[{o}], ARGV[{g}]\n",
        c = base + 1,
        s = base + 2,
        o = base + 3,
        g = base + 4,
    ));
    let mut reads = String::new();
    let mut state_fields = Vec::new();
    for (i, (half, x)) in halves.iter().enumerate() {
        reads.push_str(&format!(
            "local a{x}, b{x} = tonumber(ARGV[{}]), tonumber(ARGV[{}])\n",
            2 * i + 1,
            2 * i + 2
        ));
        let first = fields.len() + 1;
        reads.push_str(&half_lua(half, x, first));
        for f in half.fields() {
            fields.push(format!("'{f}{x}'"));
            state_fields.push(fields.len());
        }
    }
    lua.push_str(&format!(
        "local v = redis.call('HMGET', key, {})\n",
        fields.join(", ")
    ));
    let any_state = state_fields
        .iter()
        .map(|i| format!("v[{i}]"))
        .collect::<Vec<_>>()
        .join(" or ");
    lua.push_str(&format!(
        "local own = v[1]\nif own then\n  if own ~= S or (v[2] == O and v[3] ~= G) then return {{-1}} end\nelseif {any_state} then\n  {}\nend\n",
        bad("state fields without a stamp")
    ));
    lua.push_str(&reads);
    let oks = halves
        .iter()
        .map(|(_, x)| format!("ok{x}"))
        .collect::<Vec<_>>()
        .join(" and ");
    lua.push_str(&format!("local allowed = {oks}\n"));
    if write {
        let mut set = Vec::new();
        let mut after = String::new();
        for (half, x) in &halves {
            match half.ns {
                WordSpec::Bucket(_) => {
                    set.push(format!("w[#w + 1] = 't{x}'; w[#w + 1] = fmt('%.0f', nt{x})"));
                    set.push(format!(
                        "if nr{x} > 0 then w[#w + 1] = 'r{x}'; w[#w + 1] = fmt('%.0f', nr{x}) end"
                    ));
                    after.push_str(&format!(
                        "  if nr{x} == 0 and r{x} > 0 then redis.call('HDEL', key, 'r{x}') end\n"
                    ));
                }
                WordSpec::Fixed(_) => set.push(format!(
                    "w[#w + 1] = 'k{x}'; w[#w + 1] = fmt('%.0f', nk{x}); w[#w + 1] = 'c{x}'; w[#w + 1] = fmt('%.0f', nc{x})"
                )),
                WordSpec::Sliding(_) => set.push(format!(
                    "w[#w + 1] = 'k{x}'; w[#w + 1] = fmt('%.0f', nk{x}); w[#w + 1] = 'c{x}'; w[#w + 1] = fmt('%.0f', nc{x}); w[#w + 1] = 'p{x}'; w[#w + 1] = fmt('%.0f', np{x})"
                )),
            }
        }
        let idle = match halves.as_slice() {
            [(_, x)] => format!("idle{x}"),
            _ => "math.max(idle1, idle2)".into(),
        };
        lua.push_str(&format!(
            r"if allowed and cost > 0 then
  local w = {{}}
  {}
  if not own or v[2] ~= O then
    w[#w + 1] = 's'; w[#w + 1] = S; w[#w + 1] = 'o'; w[#w + 1] = O; w[#w + 1] = 'g'; w[#w + 1] = G
  end
  if not own then w[#w + 1] = 'n'; w[#w + 1] = O .. ':' .. ARGV[{n}] end
  redis.call('HSET', key, unpack(w))
{after}  redis.call('PEXPIREAT', key, fmt('%.0f', math.floor({idle} / 1000) + 1))
end
",
            set.join("\n  "),
            n = base + 5,
        ));
    }
    let mut next = vec!["1".to_owned()];
    let mut cur = vec!["0".to_owned()];
    for (half, x) in &halves {
        next.extend(reply_vars(half, x, "n"));
        cur.extend(reply_vars(half, x, ""));
    }
    next.push("now".into());
    cur.push("now".into());
    lua.push_str(&format!(
        "if allowed then return {{{}}} end\nreturn {{{}}}\n",
        next.join(", "),
        cur.join(", ")
    ));
    lua
}

/// The slow path's read: `ARGV[1]` names `n` fields, `ARGV[2..=n+1]`
/// the fields; the reply is `{now, {values…}}`, a value `nil` where the
/// field is absent.
pub(super) fn read_script(clock: &str) -> String {
    format!(
        r"{clock}
local n = tonumber(ARGV[1])
return {{now, redis.call('HMGET', KEYS[1], unpack(ARGV, 2, n + 1))}}
"
    )
}

/// The slow path's compare-and-set. `ARGV`: `n`; the `n` fields; a mask
/// of `n` letters, `p` for a field expected present and `a` absent; the
/// expected values of the present ones; an instant (µs) the write must
/// come before, or `-1`; the `n` new values (`''` deletes the field);
/// the expiry (ms). The reply: `{1, now}` written, `{0, now}` the state
/// changed since it was read, `{2, now}` too late.
pub(super) fn cas_script(clock: &str) -> String {
    format!(
        r"{clock}
local key = KEYS[1]
local n = tonumber(ARGV[1])
local v = redis.call('HMGET', key, unpack(ARGV, 2, n + 1))
local mask, j = ARGV[n + 2], n + 3
for i = 1, n do
  if string.sub(mask, i, i) == 'p' then
    if v[i] ~= ARGV[j] then return {{0, now}} end
    j = j + 1
  elseif v[i] then
    return {{0, now}}
  end
end
local before = tonumber(ARGV[j])
j = j + 1
if before >= 0 and now >= before then return {{2, now}} end
local set, del = {{}}, {{}}
for i = 1, n do
  local x = ARGV[j + i - 1]
  if x == '' then del[#del + 1] = ARGV[1 + i] else set[#set + 1] = ARGV[1 + i]; set[#set + 1] = x end
end
if #set > 0 then redis.call('HSET', key, unpack(set)) end
if #del > 0 then redis.call('HDEL', key, unpack(del)) end
redis.call('PEXPIREAT', key, ARGV[j + n])
return {{1, now}}
"
    )
}

/// A sorted set of admissions scored by their instant, trimmed to the
/// window (also by a peek: an expired entry says nothing). `ARGV`: window
/// (µs), limit, cost, and the call's token. Reply: allowed, entries after
/// the decision, the instant of the entry whose expiry next makes room
/// (the oldest, or with more entries than the limit, written under a
/// larger quota, the one whose expiry brings them below it; or -1), the
/// instant of the entry whose expiry frees room for a denied cost (or
/// -1), now. Entries are added 500 at a time, so that a cost up to the
/// largest limit stays within Lua's stack. Members are
/// `<instant>:<token>:<n>`: the token is unique to the call (the limiter's
/// id and the call's number), so no entry ever replaces another.
pub(super) fn log_script(clock: &str, write: bool) -> String {
    let bad = bad("a score that is not a whole number of microseconds");
    format!(
        r"{PRELUDE}{clock}
local key, w, limit, cost = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
{LOG_HEAD}
local allowed, kth = 0, -1
if cost == 0 or used + cost <= limit then
  allowed = 1
  if cost > 0 and {write} then
    add(now, cost)
    redis.call('PEXPIREAT', key, fmt('%.0f', math.floor((now + w) / 1000) + 1))
  end
  used = used + cost
else
  kth = score(cost - (limit - used) - 1)
  if kth == false then {bad} end
end
local oldest = -1
if used > 0 then
  oldest = score(math.max(0, used - limit))
  if oldest == false then {bad} end
end
return {{allowed, used, oldest, kth, now}}
"
    )
}

/// What every log script starts with: the trim, the count, `score(i)`
/// (the `i`-th entry's instant, `now` past the end, `false` for junk) and
/// `add(at, n)` (`n` entries at `at`, named with the call's token).
const LOG_HEAD: &str = r"
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%.0f', now - w))
local used = redis.call('ZCARD', key)
local held = used
local function score(i)
  if i >= held then return now end
  local r = redis.call('ZRANGE', key, i, i, 'WITHSCORES')
  local n = int(r[2])
  if n == false or n == nil then return false end
  return n
end
local function add(at, n)
  local s, i = fmt('%.0f', at), 1
  while i <= n do
    local args = {}
    for j = i, math.min(n, i + 499) do
      args[#args + 1] = s
      args[#args + 1] = s .. ':' .. ARGV[4] .. ':' .. j
    end
    redis.call('ZADD', key, unpack(args))
    i = i + 500
  end
end
if used > 0 and score(used - 1) == false then
  return redis.error_reply('TOLLGATE the value under ' .. KEYS[1] .. ' is not a tollgate state: a score that is not a whole number of microseconds')
end
";

/// A log's booking (see `book`). `ARGV`: window (µs), limit, cost, the
/// call's token, the longest wait (µs, or -1 for any). A cost that fits
/// is admitted now; one that does not claims the entries whose expiries
/// free room for it (the earliest) and adds its own at the instant the
/// last of them expires. Reply: `{1, ready, now, member, score, …}` (the
/// entries it took out) if booked; `{0, ready, now}` if it would wait
/// longer than allowed (or `ready` -1: never).
pub(super) fn log_book_script(clock: &str) -> String {
    let bad = bad("a score that is not a whole number of microseconds");
    format!(
        r"{PRELUDE}{clock}
local key, w, limit, cost = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local most = tonumber(ARGV[5])
{LOG_HEAD}
if used + cost <= limit then
  add(now, cost)
  redis.call('PEXPIREAT', key, fmt('%.0f', math.floor((now + w) / 1000) + 1))
  return {{1, now, now}}
end
local taken = cost - (limit - used)
local last = score(taken - 1)
if last == false then {bad} end
local ready = last + w
if most >= 0 and ready - now > most then return {{0, ready, now}} end
local out = {{1, ready, now}}
local old = redis.call('ZRANGE', key, 0, taken - 1, 'WITHSCORES')
for i = 1, #old do out[#out + 1] = old[i] end
redis.call('ZREMRANGEBYRANK', key, 0, taken - 1)
add(ready, cost)
redis.call('PEXPIREAT', key, fmt('%.0f', math.floor((ready + w) / 1000) + 1))
return out
"
    )
}

/// A log booking's cancellation. `ARGV`: the booking's ready instant
/// (µs), its token, its cost, the number of entries it took out, then
/// those entries, member and score. Before the ready instant, each entry the booking added that is
/// still there (no later booking has claimed it) is taken out, and the
/// entry it replaced put back. Reply: `{given back}` (entries), `{-1}`
/// too late.
pub(super) fn log_cancel_script(clock: &str) -> String {
    format!(
        r"{PRELUDE}{clock}
local key = KEYS[1]
local ready, token, cost = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
if now >= ready then return {{-1}} end
local at = fmt('%.0f', ready)
local given, taken = 0, tonumber(ARGV[4])
for j = 1, cost do
  local member = at .. ':' .. token .. ':' .. j
  if redis.call('ZSCORE', key, member) then
    redis.call('ZREM', key, member)
    given = given + 1
    -- The entries it replaced: the j-th, and with more taken out than
    -- added (a state of a larger quota), the first of them with the first.
    local from, to = j, j
    if j == 1 then from = 1; to = taken - cost + 1 end
    if j > 1 then from = j + taken - cost; to = from end
    for i = math.max(from, 1), math.min(to, taken) do
      redis.call('ZADD', key, ARGV[4 + 2 * i], ARGV[3 + 2 * i])
    end
  end
end
return {{given}}
"
    )
}
