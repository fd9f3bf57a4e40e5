//! The scripts' Lua, generated from a [`Spec`]: the prelude every script
//! starts with, the clocks, the fast path of a check or peek for a word
//! algorithm (one limit or a pair, in one key), the generic read and
//! compare-and-set of the slow path, and the leases' scripts (the sliding
//! window log's are in `log`).
//!
//! # A word algorithm's key
//!
//! One string per client, whatever the number of limits, fields joined by
//! `|`:
//!
//! ```text
//! <settings>|<tier>:<generation>:<linger>|<writer>.<call>|<state>|<state>…
//! ```
//!
//! - `settings`: the settings the state was written under
//!   ([`Spec::stamp`]); `tier:generation`, the generation of the writer's
//!   quota for the client's tier; `linger`, how long (ms) the key outlives
//!   its state's idle instant (below; an earlier release wrote none);
//! - `writer.call`: the writing limiter's id and the number of the call
//!   that wrote it, so that no two writes leave the same value (a booking's
//!   cancel, which writes back only over the very value the booking left,
//!   is the tail rule, and a key reset and made again never matches);
//! - the state: a bucket's TAT in whole µs and the ns beyond (0 to 999); a
//!   window's index and count (and the previous window's count); a pair's
//!   first limit's, then its second's.
//!
//! # The fast path
//!
//! A check or peek reads the key. A state written under the reader's
//! settings (by any process: the settings equal and, if this limiter
//! wrote it, under its current quota) is decided in the script; any other
//! is answered `{-1}`, and the limiter converts it in Rust by the
//! in-process rules ([`super::state`]) and writes it back by
//! compare-and-set. Every write sets the key (`SET … PXAT`) to expire at
//! the first millisecond past the instant its state becomes idle, and its
//! linger after that; a token bucket's scripts (and the slow path's read)
//! read that expiry back, so that a key `MIGRATE` moved to a node whose
//! clock differs (the expiry travels as a time to live) is carried onto
//! that node's clock (`moved`).
//!
//! # How long a key lingers
//!
//! A bucket full at its idle instant is full under its own capacity only:
//! a quota of a larger one (raised, a tier moved up, another replica's)
//! carries it on from the tokens it held, crediting the refill since. A
//! key gone at that instant would let the larger quota start a full
//! bucket at once: over the bound of a span across both by up to the
//! smaller capacity. So a bucket's key lingers, past its idle instant, the
//! longest refill (capacity × interval) of every quota that wrote it since
//! it was made ([`Spec::linger_ms`]): each write names the longer of its
//! quota's and the one the value it read names. Every admission writes
//! the key, so the linger is at least a refill of every quota that
//! admitted; the admissions of a span exceed its refill by at most that
//! quota's capacity, less what the bucket held at its idle instant, and a
//! refill later the refill since covers any fresh bucket the bound of
//! that span allows. The in-process store forgets a client as late: idle
//! for its limiter's longest horizon. A window's state idle is the same
//! under any settings: its linger is 0. Keys live that much longer in
//! Redis, idle.
//!
//! # While a slot moves
//!
//! On Redis Cluster, a node moving a key's slot away runs a script only if
//! it holds all the script's keys, and fails it midway (no rollback) at a
//! command on a key it no longer holds. So no script touches a key after
//! a command that may have removed it, except where all it wrote before
//! was a trim of entries that count no more: a script that fails so has
//! changed nothing that matters, and the call layer runs it again on the
//! node that holds the key (see `wire::call`).

use super::moved::carried_lua;
use super::packed::{is_packed, pack, text_lua, unpack};
use super::spec::{Half, Spec, WordSpec, LINGER_MAX_MS};

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
///
/// A numeral string (an argument, a reply of Redis, a field matched as
/// digits) becomes a number by arithmetic (`s + 0`), which converts it
/// exactly as `tonumber` does, once: Lua 5.1's `tonumber` converts it
/// twice (a test, then the value), and the conversions were about a tenth
/// of a check's instructions in `redis-server`. Every string so converted
/// is a numeral the limiter sent or the script matched; `int` stays for
/// values that may be junk.
pub(crate) const CLOCK: &str = r"
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
";

/// The clock of a limiter on a test clock: the instant is the script's
/// last argument, so that a test can drive the scripts through any
/// sequence of instants and compare them with the in-process limiters on
/// a `ManualClock`.
#[cfg(test)]
pub(crate) const TEST_CLOCK: &str = r"
local now = tonumber(ARGV[#ARGV])
";

/// How many arguments the script's clock takes, after all others: one
/// (the instant) on a test clock, none on Redis's.
fn clock_args(clock: &str) -> usize {
    usize::from(clock.contains("ARGV"))
}

/// The Lua reading the linger (ms) a head names (`settings|tier:
/// generation:linger|writer.`; see `Spec::linger_ms`): how long past its
/// idle instant a key written with it lingers. For the reset alone, which
/// is sent no settings: a pattern match costs `redis-server` several
/// thousand instructions, so the checks work it out from the settings
/// ([`settings_linger`]).
fn head_linger(head: &str) -> String {
    format!("string.match({head}, '^[^|]*|%d+:%d+:(%d+)|') + 0")
}

/// The Lua working out into `DD` the linger (ms) of the settings `a<x>`,
/// `b<x>` of each limit (the expressions `settings(i)` gives for limit
/// `i`), exactly as `Spec::linger_ms` does: the longest refill of its
/// buckets, ⌈a · b / 1 000⌉ (a · b ≤ 2<sup>52</sup>: exact in a double,
/// the floor division corrected as `fdiv`'s), 0 with none. The head the
/// limiter sends names the same.
fn settings_linger(spec: &Spec, settings: impl Fn(usize) -> (String, String)) -> String {
    let mut lua = String::from("local DD = 0\n");
    for (i, (half, _)) in spec.halves().iter().enumerate() {
        if !matches!(half.ns, WordSpec::Bucket(_)) {
            continue;
        }
        let (a, b) = settings(i);
        lua.push_str(&format!(
            r"do
  local n = {a} * {b} + 999
  local q = math.floor(n / 1000)
  if q * 1000 > n then q = q - 1 elseif (q + 1) * 1000 <= n then q = q + 1 end
  if q > DD then DD = q end
end
"
        ));
    }
    lua
}

/// The error reply for a value the limiter did not write (`what` goes in
/// a single-quoted Lua string: no quotes in it).
pub(super) fn bad(what: &str) -> String {
    debug_assert!(!what.contains('\''));
    format!(
        "return redis.error_reply('TOLLGATE the value under ' .. KEYS[1] .. ' is not a tollgate state: {what}')"
    )
}

/// The Lua deciding one limit's state (read into `x1`, `x2`, … by the
/// entry point) for `cost` at `now`, and leaving: `ok<x>` (whether the
/// limit admits), the current state after any rollover, the state after
/// an admission (`n…<x>`), and `idle<x>`, the µs instant at which the
/// admitted state becomes idle. `<x>` is the pair's suffix; `a<x>`, `b<x>`
/// the limit's settings.
fn half_lua(half: &Half, x: &str) -> String {
    let body = match half.ns {
        WordSpec::Bucket(_) => {
            r"
local t#, r# = (x#1 or 0), (x#2 or 0)
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
"
        }
        WordSpec::Fixed(_) => {
            r"
local k#, c# = x#1, x#2
local idx = fdiv(now, a#)
if k# == nil then k#, c# = idx, 0
elseif idx == k# + 1 then k#, c# = idx, math.max(c# - b#, 0)
elseif idx > k# + 1 then k#, c# = idx, 0 end
local ok# = cost == 0 or c# + cost <= b#
local nk#, nc# = k#, c# + cost
local idle# = (nk# + 1) * a#
if nc# > b# then idle# = (nk# + 2) * a# end
"
        }
        WordSpec::Sliding(_) => {
            r"
local k#, c#, p# = x#1, x#2, x#3
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
"
        }
    };
    body.replace('#', x)
}

/// The state variables of one limit, current (`n` = "") or after an
/// admission (`n` = "n"), in the order the value and the reply list them.
fn state_vars(half: &Half, x: &str, n: &str) -> Vec<String> {
    let names: &[&str] = match half.ns {
        WordSpec::Bucket(_) => &["t", "r"],
        WordSpec::Fixed(_) => &["k", "c"],
        WordSpec::Sliding(_) => &["k", "c", "p"],
    };
    names.iter().map(|f| format!("{n}{f}{x}")).collect()
}

/// A word algorithm's check (`write`) or peek: see the module docs.
///
/// `ARGV`: each limit's two settings, then the head of the values the
/// reader writes (`settings|tier:generation:linger|writer.`), the call's number
/// and `cost`, left out for a cost of 1 (the most common: an argument
/// less costs Redis about 2 k instructions, the string sent, read, and
/// made a Lua string). The reply: `{-1}` for a state to
/// convert; else the outcome (1 or 0), each limit's state (after the
/// admission, or as read after any rollover; a peek's always as read) and
/// `now`.
pub(crate) fn word_script(
    spec: &Spec,
    clock: &str,
    moves: bool,
    write: bool,
    packed: bool,
) -> String {
    let halves = spec.halves();
    let base = 2 * halves.len();
    let mut lua = word_read(
        spec,
        clock,
        moves,
        &format!(
            "local HEAD, cost = ARGV[{h}], 1\nif #ARGV > {n} then cost = ARGV[{c}] + 0 end\n",
            h = base + 1,
            c = base + 3,
            // Without the cost, the arguments end at the call's number
            // (or, on a test clock, at the instant after it).
            n = base + 2 + clock_args(clock),
        ),
    );
    for (half, x) in &halves {
        lua.push_str(&half_lua(half, x));
    }
    let (cur, next) = word_vars(spec);
    lua.push_str(&format!("local allowed = {}\n", word_allowed(spec)));
    if write {
        lua.push_str(&format!(
            r"if allowed and cost > 0 then
  redis.call('SET', key, HEAD .. ARGV[{id}] .. {value}, 'PXAT', fmt('%d', math.floor({idle} / 1000) + 1 + DD))
end
",
            id = base + 2,
            value = state_value(&next, packed),
            idle = word_idle(spec),
        ));
        lua.push_str(&format!(
            "if allowed then return {{1, {}, now}} end\nreturn {{0, {}, now}}\n",
            next.join(", "),
            cur.join(", ")
        ));
    } else {
        // A peek takes nothing: the state as it stands either way.
        lua.push_str(&format!(
            "return {{allowed and 1 or 0, {}, now}}\n",
            cur.join(", ")
        ));
    }
    lua
}

/// A word algorithm's coalesced checks: the requests of many clients (of
/// one slot on a Cluster), decided at one reading of the clock, each
/// client on its own key and its requests in order, each exactly as
/// `word_script`'s check would decide it on the state the requests before
/// it left; each client's state is written once, after its last
/// admission. A client's key is read and written by its own requests
/// only: no client's decision reads another's state.
///
/// `KEYS`: the clients' keys, each once (all are read before any is
/// written). `ARGV`: the number of settings `S`, then `S`
/// settings (each limit's two, then the head of the values the reader
/// writes), the call's number, then for each key: `1024 c + s`, where `s`
/// is the number of its settings (1-based, under 1 024) and `c` the number
/// of its requests, then their `c` costs; or, for a key whose requests
/// each cost 1 (the most common), `-(1024 c + s)` alone, `-s` for one
/// request (an argument less costs Redis about 2 k instructions: the
/// string sent, read, and made a Lua string). `S` sent as `0` is the most
/// common batch of all: one settings, and every key one request of cost
/// 1, with nothing sent for the keys.
/// The reply: for each key, `-1` for a state to convert or `-2` for a
/// value that is not a tollgate state, a string or a value of another
/// type (its requests undecided, its key untouched; no other key's
/// answer fails with it), else `1` and, for each of its requests, what
/// `word_script`'s check replies without `now` (the outcome and the
/// state); then `now`. A key of several requests each of cost 1 (a hot
/// client's checks) is answered in a few numbers however many it made:
/// `1`, how many were admitted (`k`: the first `k`, since a refusal
/// changes nothing and the next request of cost 1 at the same instant
/// meets the same state), the state before the first request, and, if
/// `k > 0`, the state after the last admission. The caller replays the
/// `k` admissions with the in-process algorithm (which the scripts are
/// proven equal to), and checks that it ends on that state.
pub(crate) fn batch_script(spec: &Spec, clock: &str, moves: bool, packed: bool) -> String {
    let halves = spec.halves();
    let width = 2 * halves.len() + 1;
    let fields = word_fields(spec);
    let mut lua = String::from("\nlocal fmt = string.format\n");
    if uses_windows(spec) {
        lua.push_str(FDIV);
    }
    lua.push_str(clock);
    lua.push_str(&format!(
        r"-- Every client's value, read by one command per thousand clients
-- rather than one per client, before any write. `MGET` answers no value
-- alike for no key and for a value of another type: if more keys exist
-- than it answered values (`EXISTS` counts them), those without are read
-- again alone.
local V, have, alone = {{}}, 0, false
for i = 1, #KEYS, 1000 do
  local got = redis.call('MGET', unpack(KEYS, i, math.min(i + 999, #KEYS)))
  for j = 1, #got do
    V[i + j - 1] = got[j]
    if got[j] then have = have + 1 end
  end
end
if have < #KEYS then
  local held = 0
  for i = 1, #KEYS, 1000 do
    held = held + redis.call('EXISTS', unpack(KEYS, i, math.min(i + 999, #KEYS)))
  end
  alone = held > have
end
local function read(key, v, HEAD, DD)
  if not v and alone then
    -- A value of another type (WRONGTYPE) is its client's alone: caught,
    -- so that it fails no other client's checks, and left to the
    -- client's own checks, which answer it as a check of their own.
    v = redis.pcall('GET', key)
    if type(v) == 'table' then return -2 end
  end
  local vd, {vars} = DD
  if v then
{parse}
  end
  return 1, HEAD, DD, {vars}
end
",
        vars = fields.join(", "),
        parse = parse_state(spec, moves, "return -1", |_| "return -2".into()),
    ));
    // Each settings' figures and head, read once: `A<x>[s]`, `B<x>[s]`,
    // `H[s]`.
    let tables: String = halves
        .iter()
        .map(|(_, x)| format!("local A{x}, B{x} = {{}}, {{}}\n"))
        .collect();
    let fill: String = halves
        .iter()
        .enumerate()
        .map(|(i, (_, x))| {
            format!(
                "A{x}[s], B{x}[s] = ARGV[o + {}] + 0, ARGV[o + {}] + 0\n",
                2 * i + 1,
                2 * i + 2
            )
        })
        .collect();
    let settings: String = halves
        .iter()
        .map(|(_, x)| format!("local a{x}, b{x} = A{x}[si], B{x}[si]\n"))
        .collect();
    let mut decide = String::new();
    for (half, x) in &halves {
        decide.push_str(&half_lua(half, x));
    }
    let (cur, next) = word_vars(spec);
    // `out[<var> + from + i] = var_i` for each of `vars`, each index one
    // addition (Lua 5.1 folds no constant into a variable's sum).
    let at = |vars: &[String], var: &str, from: usize| {
        vars.iter()
            .enumerate()
            .map(|(i, v)| format!("out[{var} + {}] = {v}", from + i))
            .collect::<Vec<_>>()
            .join("; ")
    };
    lua.push_str(&format!(
        r"local S, same = ARGV[1] + 0, false
if S == 0 then S, same = 1, true end
{tables}local H, D = {{}}, {{}}
for s = 1, S do
local o = 1 + (s - 1) * {width}
{fill}H[s] = ARGV[o + {width}]
{linger}D[s] = DD
end
local p = 2 + S * {width}
local id = ARGV[p]
p = p + 1
local out, n = {{}}, 0
for j = 1, #KEYS do
local c, si, one = 1, 1, true
if not same then
  local sc = ARGV[p] + 0
  if sc < 0 then
    si = -sc
    if si > 1024 then
      c = math.floor(si / 1024)
      si = si - c * 1024
    end
  else
    c = math.floor(sc / 1024)
    si = sc - c * 1024
    one = false
  end
  p = p + 1
end
local hot = one and c > 1
{settings}local key = KEYS[j]
local st, HEAD, DD, {fields} = read(key, V[j], H[si], D[si])
n = n + 1
out[n] = st
if st == 1 then
local wrote, last = false, 0
if hot then
local base, admits = n, 0
n = n + {hot_step}
for i = 0, c - 1 do
local cost = 1
{decide}local allowed = {allowed}
if i == 0 then {cur_base} end
if not allowed then break end
admits = admits + 1
{fields} = {next}
last, wrote = {idle}, true
end
out[base + 1] = admits
if admits > 0 then {fields_out}; n = n + {nf} end
else
for i = 0, c - 1 do
local cost = 1
if not one then cost = ARGV[p + i] + 0 end
{decide}local allowed = {allowed}
if allowed then
  out[n + 1] = 1; {next_out}
else
  out[n + 1] = 0; {cur_out}
end
n = n + {step}
if allowed and cost > 0 then
  {fields} = {next}
  last, wrote = {idle}, true
end
end
end
if wrote then
  redis.call('SET', key, HEAD .. id .. {value}, 'PXAT', fmt('%d', math.floor(last / 1000) + 1 + DD))
end
end
if not one then p = p + c end
end
out[n + 1] = now
return out
",
        step = 1 + fields.len(),
        hot_step = 1 + fields.len(),
        nf = fields.len(),
        cur_base = at(&cur, "base", 2),
        fields_out = at(&fields, "n", 1),
        allowed = word_allowed(spec),
        next_out = at(&next, "n", 2),
        cur_out = at(&cur, "n", 2),
        fields = fields.join(", "),
        next = next.join(", "),
        idle = word_idle(spec),
        value = state_value(&fields, packed),
        linger = settings_linger(spec, |i| {
            let x = halves[i].1;
            (format!("A{x}[s]"), format!("B{x}[s]"))
        }),
    ));
    lua
}

/// Every state field's variable, `x<suffix><n>`, in the order the value
/// holds them.
fn word_fields(spec: &Spec) -> Vec<String> {
    spec.halves()
        .iter()
        .flat_map(|(h, x)| (1..=h.fields().len()).map(move |i| format!("x{x}{i}")))
        .collect()
}

/// The state variables of every limit: as read (after any rollover), and
/// after an admission.
fn word_vars(spec: &Spec) -> (Vec<String>, Vec<String>) {
    let mut cur = Vec::new();
    let mut next = Vec::new();
    for (half, x) in &spec.halves() {
        cur.extend(state_vars(half, x, ""));
        next.extend(state_vars(half, x, "n"));
    }
    (cur, next)
}

/// Whether every limit admits.
fn word_allowed(spec: &Spec) -> String {
    spec.halves()
        .iter()
        .map(|(_, x)| format!("ok{x}"))
        .collect::<Vec<_>>()
        .join(" and ")
}

/// The instant (µs) the admitted state becomes idle.
fn word_idle(spec: &Spec) -> String {
    match spec.halves().as_slice() {
        [(_, x)] => format!("idle{x}"),
        _ => "math.max(idle1, idle2)".into(),
    }
}

/// The state part of a value, from the variables `vars`: packed (see
/// `packed`), or as text, `|` then each field, as earlier releases write
/// it. A field of 0 (a bucket's ns past its µs, most often; a window's
/// previous count) is written as a literal: `string.format` costs about
/// 1.5 k instructions in `redis-server`, and writes `0` alike.
fn state_value(vars: &[String], packed: bool) -> String {
    if packed {
        return pack(vars);
    }
    let text = vars
        .iter()
        .map(|v| format!("({v} == 0 and '0' or fmt('%d', {v}))"))
        .collect::<Vec<_>>()
        .join(" .. '|' .. ");
    format!("'|' .. {text}")
}

/// Each limit's settings, `a<suffix>` and `b<suffix>`, from `ARGV`.
fn word_settings(spec: &Spec) -> String {
    spec.halves()
        .iter()
        .enumerate()
        .map(|(i, (_, x))| {
            format!(
                "local a{x}, b{x} = ARGV[{}] + 0, ARGV[{}] + 0\n",
                2 * i + 1,
                2 * i + 2
            )
        })
        .collect()
}

/// Whether any limit of `spec` is a window (its scripts need `fdiv`).
fn uses_windows(spec: &Spec) -> bool {
    spec.halves()
        .iter()
        .any(|(h, _)| !matches!(h.ns, WordSpec::Bucket(_)))
}

/// What a word algorithm's scripts start with: the clock, `args` (which
/// defines `HEAD`), each limit's settings (`a<x>`, `b<x>`: every such
/// script is sent them first) and the linger they give (`DD`), and the
/// key's state read into the field variables (`nil` for no key), or `{-1}`
/// answered for a state to convert.
fn word_read(spec: &Spec, clock: &str, moves: bool, args: &str) -> String {
    let mut lua = String::from("\nlocal fmt = string.format\n");
    if uses_windows(spec) {
        lua.push_str(FDIV);
    }
    lua.push_str(clock);
    lua.push_str("local key = KEYS[1]\n");
    lua.push_str(args);
    // Every script reading a word's key is sent each limit's settings
    // first.
    lua.push_str(&word_settings(spec));
    let halves = spec.halves();
    lua.push_str(&settings_linger(spec, |i| {
        let x = halves[i].1;
        (format!("a{x}"), format!("b{x}"))
    }));
    lua.push_str("local vd = DD\n");
    lua.push_str(&format!(
        "local v = redis.call('GET', key)\nlocal {vars}\nif v then\n{parse}\nend\n",
        vars = word_fields(spec).join(", "),
        parse = parse_state(spec, moves, "return {-1}", bad),
    ));
    lua
}

/// The Lua that reads the value `v` (present) into the declared field
/// variables: a value of another writer is read as it is if written under
/// the same settings as `HEAD`'s; else `convert` runs (a state to
/// convert). `bad(what)` runs for a value that is not a tollgate state.
/// Where keys `moves` (Redis Cluster), a token bucket's state is carried
/// onto this node's clock (`moved`).
fn parse_state(spec: &Spec, moves: bool, convert: &str, bad: impl Fn(&str) -> String) -> String {
    let fields = word_fields(spec);
    let pattern = format!("^%d+|{}$", vec!["(%d+)"; fields.len()].join("|"));
    format!(
        r"  local at
  if string.find(v, HEAD, 1, true) == 1 then
    at = #HEAD + 1
  else
    -- Another writer's state, read as it is if of the same settings; or
    -- this writer's under a longer linger, read as it is if of the same
    -- tier and generation. The longer linger is kept.
    local s, g, o = string.match(HEAD, '^([^|]*)|([^|]*):%d+|([^|]*)%.$')
    if string.find(v, s .. '|', 1, true) ~= 1 then {convert} end
    local f, w, i = string.match(v, '^[^|]*|([^|]*)|([^|.]*)%.()')
    if w == nil then {convert} end
    local fg, fd = string.match(f, '^(%d+:%d+):(%d+)$')
    if w == o and fg ~= g then {convert} end
    vd = math.min((fd or 0) + 0, {linger_max})
    if vd > DD then
      DD = vd
      HEAD = s .. '|' .. g .. ':' .. fmt('%d', vd) .. '|' .. o .. '.'
    end
    at = i
  end
  if {packed} then
    {unpack}
  else
    -- The text form (see `packed`).
    {vars} = string.match(v, '{pattern}', at)
    if {first} == nil then {bad_fields} end
    {vars} = {nums}
    if {over} then {bad_range} end
  end{bucket}",
        packed = is_packed(fields.len()),
        linger_max = LINGER_MAX_MS,
        unpack = unpack(&fields, &bad("a number out of range")),
        vars = fields.join(", "),
        first = fields[0],
        bad_fields = bad("its fields are not whole numbers"),
        nums = fields
            .iter()
            .map(|f| format!("{f} + 0"))
            .collect::<Vec<_>>()
            .join(", "),
        over = fields
            .iter()
            .map(|f| format!("{f} > 9007199254740991"))
            .collect::<Vec<_>>()
            .join(" or "),
        bad_range = bad("a number out of range"),
        bucket = spec
            .halves()
            .iter()
            .filter(|(h, _)| matches!(h.ns, WordSpec::Bucket(_)))
            .map(|(_, x)| format!(
                "\n  if x{x}2 > 999 then {} end",
                bad("a TAT with more than 999 ns past its microseconds")
            ))
            .collect::<String>()
            + &carried_lua(spec, moves),
    )
}

/// The slow path's read: `now`, the key's expiry (ms, as `PEXPIRETIME`
/// answers: negative for none), the end of the latest lease outstanding
/// (µs; 0 for none) and the key's value (`nil` if absent): `{now, expiry,
/// leased, value}`. Where no key `moves` (one server), the expiry is not
/// read and answered as none (`-1`): it carries nothing there. The leases'
/// set is `KEYS[2]`, given for a token bucket (see `LEASES_SUFFIX`); with
/// no `KEYS[2]` (the slot moving, the set split from the key), `leased` is
/// `-1`: not known.
///
/// The value is in the text form (see `packed`).
pub(crate) fn read_script(spec: &Spec, clock: &str, moves: bool) -> String {
    let expiry = if moves {
        "redis.call('PEXPIRETIME', KEYS[1])"
    } else {
        "-1"
    };
    format!(
        r"{text}{clock}
local leased = -1
if KEYS[2] then
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  leased = tonumber(last[2] or 0)
end
return {{now, {expiry}, leased, text(redis.call('GET', KEYS[1]))}}
",
        text = text_lua(word_fields(spec).len()),
    )
}

/// The slow path's compare-and-set. `ARGV`: the value expected (`''`: no
/// key), an instant (µs) the write must come before (or `-1`), the new
/// value (`''`: delete the key), its expiry (ms), and the key's expiry as
/// it was read (ms, as `PEXPIRETIME` answers; `''`: not compared). The
/// reply: `{1, now}` written, `{0, now}` the value changed since it was
/// read, `{2, now}` too late. The value expected is in the text form, as
/// `read_script` answered it, and the value held is compared in that form.
///
/// Where keys `moves` (Redis Cluster), the key's expiry is compared too:
/// `MIGRATE` moves a value as it is, but carries its expiry as a time to
/// live, so a key whose slot moved between the read and the write, to a
/// node whose clock differs, holds the same value under another expiry.
/// Written there, a state read (and carried) on the old node's clock would
/// be judged on the new one's: a TAT 2 s in a clock 2 s ahead's past is a
/// full bucket. The write is refused as for a changed value, and the slow
/// path reads the key again where it now lives.
pub(crate) fn cas_script(spec: &Spec, clock: &str, moves: bool) -> String {
    let moved = if moves {
        "if ARGV[5] ~= '' and redis.call('PEXPIRETIME', key) ~= tonumber(ARGV[5]) then return {0, now} end\n"
    } else {
        ""
    };
    format!(
        r"{text}{clock}
local key = KEYS[1]
local v = text(redis.call('GET', key))
if (v or '') ~= ARGV[1] then return {{0, now}} end
{moved}local before = tonumber(ARGV[2])
if before >= 0 and now >= before then return {{2, now}} end
if ARGV[3] == '' then
  redis.call('DEL', key)
else
  redis.call('SET', key, ARGV[3], 'PXAT', ARGV[4])
end
return {{1, now}}
",
        text = text_lua(word_fields(spec).len()),
    )
}

/// The sorted set beside a leasing limiter's key, holding the leases
/// still outstanding: its name is the client's key with this after it
/// (same hash tag, same slot).
pub(crate) const LEASES_SUFFIX: &str = ":lease";

/// A lease's grant: up to `want` units of a token bucket at once, as many
/// as the bucket admits now, given the consecutive slots they take
/// (`[start, end)`, µs; see `crate::algorithm::lease`).
///
/// `KEYS`: the client's key, its leases' set. `ARGV`: the bucket's
/// interval (µs) and capacity, the head of the values the reader writes,
/// the call's number, `want` (at least 1), the limiter's id, the range
/// its lease of this client was last registered with (`0 0` for none),
/// the lease's cursor (its units before it are spent or passed), and the
/// lease's horizon (µs, at most the bucket's refill: a grant takes at
/// least the slots up to a horizon ahead, room allowing, `want` or not).
/// The reply: `{-1}` for a state to convert; `{g, start, end, now, from}`
/// for `g` ≥ 1 units granted (the new TAT is `end`, the ns past its µs
/// kept), `[from, end)` the lease's range as registered now; `{0, until,
/// now, from, end}` when the bucket has none, `until` the instant its
/// first unit frees, `[from, end)` the lease's range as registered now
/// (`0 0`: none). The leases' set holds each process's current lease of the
/// client (member `<id>:<from>:<end>`, scored by its end), from its
/// cursor on: a grant that continues the lease registered extends it, any
/// other replaces it; the
/// set forgets the leases that have ended.
///
/// The grant admits exactly what `word_script`'s check would admit for a
/// cost of `g`, and writes the same state.
pub(crate) fn lease_script(spec: &Spec, clock: &str, moves: bool) -> String {
    let mut lua = word_read(
        spec,
        clock,
        moves,
        "local HEAD, want = ARGV[3], tonumber(ARGV[5])\n",
    );
    lua.push_str(&format!(
        r"local t, r = (x1 or 0), (x2 or 0)
if r > 999 then {bad} end
local s = t
if t < now then s, r = now, 0 end
local room = now + b * a - s
if r > 0 then room = room - 1 end
local g = math.min(want, math.floor(room / a))
local lk = KEYS[2]
local ps, pe = tonumber(ARGV[7]), tonumber(ARGV[8])
local keep = math.max(ps, tonumber(ARGV[9]))
local old = ARGV[6] .. ':' .. fmt('%d:%d', ps, pe)
-- While the slot moves, a command on a key this node no longer holds
-- fails the script midway: so the new member goes in before the old one
-- goes, the set empties only at its last command, and the key is written
-- last.
local function swap(new, score)
  if new ~= old then
    redis.call('ZADD', lk, score, new)
    if pe > 0 then redis.call('ZREM', lk, old) end
  end
end
if g <= 0 then
  local untl = s - (b - 1) * a
  if r > 0 then untl = untl + 1 end
  if pe > keep then
    swap(ARGV[6] .. ':' .. fmt('%d:%d', keep, pe), pe)
    return {{0, untl, now, keep, pe}}
  end
  if pe > 0 then redis.call('ZREM', lk, old) end
  return {{0, untl, now, 0, 0}}
end
-- A grant reaches at least a horizon ahead, room allowing: its slots
-- pass at the bucket's rate whether spent or not, and a lease should last
-- the horizon (in a bucket with room the units beyond `want` cost no one).
local reach = math.floor((now + tonumber(ARGV[10]) - s + a - 1) / a)
g = math.max(g, math.min(reach, math.floor(room / a)))
local e = s + g * a
local idle = e
if r > 0 then idle = e + 1 end
local from = s
if pe == s then from = keep end
-- Scored `e`, after `now`: the trim keeps it.
swap(ARGV[6] .. ':' .. fmt('%d:%d', from, e), e)
redis.call('ZREMRANGEBYSCORE', lk, '-inf', now)
local last = redis.call('ZRANGE', lk, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', lk, math.floor(tonumber(last[2]) / 1000) + 1)
redis.call('SET', key, HEAD .. ARGV[4] .. '|' .. fmt('%d', e) .. '|' .. fmt('%d', r), 'PXAT', fmt('%d', math.floor(idle / 1000) + 1 + DD))
return {{g, s, e, now, from}}
",
        bad = bad("a TAT with more than 999 ns past its microseconds"),
    ));
    lua
}

/// A lease's unpassed units given back: `[from, end)` of the lease that
/// began at `start`, if no unit was taken after it (the bucket's TAT is
/// still `end`), in which case the bucket is as if the lease had taken
/// only the units before `from`. Units taken after a lease cannot go back
/// exactly (the bucket has one TAT, no holes), and are left to lapse.
///
/// `KEYS`: the client's key, its leases' set. `ARGV`: the bucket's
/// interval and capacity, the head of the values the reader writes, the
/// call's number, the limiter's id, the lease's range as registered
/// (`start`, `end`; see `lease_script`), and `from`. The lease leaves the
/// leases' set whether or not its units could go back. The reply: `{-1}` for a state to
/// convert (nothing given back), else `{given, now}`, `given` the µs of
/// slots given back (0 if none).
pub(crate) fn lease_return_script(spec: &Spec, clock: &str, moves: bool) -> String {
    // The lease leaves the set first, so that it leaves it also when the
    // state is one to convert (the quota changed since the lease was
    // granted: its units lapse, and no conversion keeps the bucket behind
    // them any more); the key is read after, and written last.
    let mut lua = word_read(
        spec,
        clock,
        moves,
        "local HEAD = ARGV[3]\nlocal s, e, from = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])\nredis.call('ZREM', KEYS[2], ARGV[5] .. ':' .. fmt('%d:%d', s, e))\n",
    );
    lua.push_str(
        r"if x1 == nil or x1 ~= e then return {0, now} end
local back = math.max(from, now)
if back >= e then return {0, now} end
local r = x2 or 0
-- Kept (a full bucket too) until a linger past its idle instant, as
-- every write (see `word_script`).
local idle = back
if r > 0 then idle = back + 1 end
redis.call('SET', KEYS[1], HEAD .. ARGV[4] .. '|' .. fmt('%d', back) .. '|' .. fmt('%d', r), 'PXAT', fmt('%d', math.floor(idle / 1000) + 1 + DD))
return {e - back, now}
",
    );
    lua
}

/// A token bucket's reset (and removal), by every bucket limiter, leasing
/// or not (a replica of the same key may lease): the client's state
/// forgotten but for the slots of each process's current lease, which
/// stay its own.
/// A lease's slots lie anywhere up to a full refill ahead, and the bucket
/// has one theoretical arrival time, no holes: so the bucket restarts full
/// from the end of the latest lease still in the leases' set (its TAT is
/// that end), and with none, the key is deleted, as without leases. (A
/// TAT of `now` plus the leases' unpassed slots would grant slots the
/// leases hold, twice: over the bound.)
///
/// `KEYS`: the client's key, its leases' set. `ARGV`: the head of the
/// values the reader writes and the call's number. The reply:
/// `{existed, now}`, `existed` 1 if the key held a state.
pub(crate) fn lease_reset_script(clock: &str) -> String {
    format!(
        r"{PRELUDE}{clock}
local key, lk = KEYS[1], KEYS[2]
redis.call('ZREMRANGEBYSCORE', lk, '-inf', now)
local last = redis.call('ZRANGE', lk, -1, -1, 'WITHSCORES')
local upto = now
if last[2] then upto = math.max(now, tonumber(last[2])) end
local existed = redis.call('EXISTS', key)
if upto > now then
  -- The key lingers as every write (see `word_script`): the longer of
  -- the writer's linger and the one the value held names.
  local HEAD, DD = ARGV[1], {linger}
  local v = redis.pcall('GET', key)
  local fd = type(v) == 'string' and string.match(v, '^[^|]*|%d+:%d+:(%d+)|')
  if fd and math.min(fd + 0, {linger_max}) > DD then
    DD = math.min(fd + 0, {linger_max})
    HEAD = string.gsub(HEAD, ':%d+(|[^|]*)$', ':' .. fmt('%d', DD) .. '%1')
  end
  redis.call('SET', key, HEAD .. ARGV[2] .. '|' .. fmt('%d', upto) .. '|0', 'PXAT', fmt('%d', math.floor(upto / 1000) + 1 + DD))
else
  redis.call('DEL', key)
end
return {{existed, now}}
",
        linger = head_linger("ARGV[1]"),
        linger_max = LINGER_MAX_MS,
    )
}
