//! The sliding window log's scripts: a sorted set of admissions per
//! client, scored by their instant; its check and peek, its booking and a
//! booking's cancellation.

use super::lua::{bad, PRELUDE};

/// A sorted set of admissions scored by their instant, trimmed to the
/// window (also by a peek: an expired entry says nothing). `ARGV`: window
/// (µs), limit, cost, and the call's token. Reply: allowed, entries after
/// the decision (a peek's: as they stand), the instant of the entry whose expiry next makes room
/// (the oldest, or with more entries than the limit, written under a
/// larger quota, the one whose expiry brings them below it; or -1), the
/// instant of the entry whose expiry frees room for a denied cost (or
/// -1), now. Entries are added 500 at a time, so that a cost up to the
/// largest limit stays within Lua's stack. Members are
/// `<instant>:<token>:<n>`: the token is unique to the call (the limiter's
/// id and the call's number), so no entry ever replaces another.
pub(crate) fn log_script(clock: &str, write: bool) -> String {
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
    redis.call('PEXPIREAT', key, fmt('%d', math.floor((now + w) / 1000) + 1))
    used = used + cost
  end
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
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', now - w))
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
  local s, i = fmt('%d', at), 1
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
pub(crate) fn log_book_script(clock: &str) -> String {
    let bad = bad("a score that is not a whole number of microseconds");
    format!(
        r"{PRELUDE}{clock}
local key, w, limit, cost = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local most = tonumber(ARGV[5])
{LOG_HEAD}
if used + cost <= limit then
  add(now, cost)
  redis.call('PEXPIREAT', key, fmt('%d', math.floor((now + w) / 1000) + 1))
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
-- Added first, after every entry taken out (`ready` is past them): the
-- set never empties midway, which fails the script while its slot moves.
add(ready, cost)
redis.call('ZREMRANGEBYRANK', key, 0, taken - 1)
redis.call('PEXPIREAT', key, fmt('%d', math.floor((ready + w) / 1000) + 1))
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
pub(crate) fn log_cancel_script(clock: &str) -> String {
    format!(
        r"{PRELUDE}{clock}
local key = KEYS[1]
local ready, token, cost = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
if now >= ready then return {{-1}} end
local at = fmt('%d', ready)
local given, taken = 0, tonumber(ARGV[4])
for j = 1, cost do
  local member = at .. ':' .. token .. ':' .. j
  if redis.call('ZSCORE', key, member) then
    given = given + 1
    -- The entries it replaced: the j-th, and with more taken out than
    -- added (a state of a larger quota), the first of them with the first.
    local from, to = j, j
    if j == 1 then from = 1; to = taken - cost + 1 end
    if j > 1 then from = j + taken - cost; to = from end
    for i = math.max(from, 1), math.min(to, taken) do
      redis.call('ZADD', key, ARGV[4 + 2 * i], ARGV[3 + 2 * i])
    end
    -- Removed after its entries are back: a script stopped midway (the
    -- set emptied while its slot moves) has undone whole entries only,
    -- and a second run undoes the rest.
    redis.call('ZREM', key, member)
  end
end
return {{given}}
"
    )
}
