//! The four algorithms' Lua: the prelude every script starts with, the
//! clocks, each algorithm's `decide` function, and the entry points of a
//! check and a peek. See `script` for the units and exactness, and `pair`
//! for two limits held together.

/// The helper every script starts with: an integer parser that tells
/// absent from junk. Two more are written as
/// calls in the bodies and expanded in place by [`expand`], since each
/// `local function` is a closure allocated on every call: `s(n)`, a whole
/// number's exact digits, and `bad(key, what)`, the error reply.
pub(super) const PRELUDE: &str = r"
local function int(v)
  if not v then return nil end
  local n = tonumber(v)
  if n == nil or n ~= n or n < 0 or n > 9007199254740991 or n ~= math.floor(n) then
    return false
  end
  return n
end
";

/// Exact floor division, for the window index; a script that needs it
/// (the windows) gets it after [`PRELUDE`].
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

/// The clock of the test wrapper: the instant is the script's last
/// argument, so that a test can drive a script through any sequence of
/// instants (long idle gaps, window edges) and compare it with the
/// in-process algorithm at the same instants.
#[cfg(test)]
pub(super) const TEST_CLOCK: &str = r"
local now = tonumber(ARGV[#ARGV])
";

// Every expiry is an instant in ms, `floor(t / 1000) + 1` for the µs
// instant `t` at which the state becomes idle: the double division may
// round up, never down past `t / 1000`, so the key never expires before
// its state is idle (at most 2 ms after).
//
// Each algorithm is a function `decide(key, a, b, cost, write)`: `a` and
// `b` the two settings of `Spec::args`, `write` false to decide without
// recording (a peek). It returns the reply, or an error reply for junk
// under the key.

/// GCRA on one string key holding the TAT. Settings: interval (µs),
/// capacity. Reply: allowed, TAT (stored, or as read), now. A TAT further
/// ahead than a full bucket's refill (written under a larger quota) is
/// read as that refill: the bucket is empty.
pub(super) const TOKEN_BUCKET: &str = r"
local function decide(key, interval, cap, cost, write)
  local tat = int(redis.call('GET', key))
  if tat == false then return bad(key, 'not a whole number of microseconds') end
  if tat == nil then tat = 0 end
  if tat > now + cap * interval then tat = now + cap * interval end
  if cost == 0 then return {1, tat, now} end
  local base = math.max(tat, now)
  if base - now <= (cap - cost) * interval then
    local new = base + cost * interval
    if write then redis.call('SET', key, s(new), 'PXAT', s(math.floor(new / 1000) + 1)) end
    return {1, new, now}
  end
  return {0, tat, now}
end
";

/// A hash of the window index `k` and its count `c`. Settings: window
/// (µs), limit. Reply: allowed, k, c (after rollover), now. A count above
/// the limit (written under a larger quota) is read as the limit.
pub(super) const FIXED_WINDOW: &str = r"
local function decide(key, w, limit, cost, write)
  local v = redis.call('HMGET', key, 'k', 'c')
  local k, c = int(v[1]), int(v[2])
  if k == false or c == false or (k == nil) ~= (c == nil) then return bad(key, 'fields k and c must be whole numbers') end
  local idx = fdiv(now, w)
  if k == nil or idx > k then k, c = idx, 0 end
  if c > limit then c = limit end
  if cost == 0 then return {1, k, c, now} end
  if c + cost <= limit then
    c = c + cost
    if write then
      redis.call('HSET', key, 'k', s(k), 'c', s(c))
      redis.call('PEXPIREAT', key, s(math.floor((k + 1) * w / 1000) + 1))
    end
    return {1, k, c, now}
  end
  return {0, k, c, now}
end
";

/// A hash of the window index `k`, its count `c` and the previous
/// window's `p`. Settings: window (µs), limit. Reply: allowed, k, c, p
/// (after rollover), now. Counts above the limit (written under a larger
/// quota) are read as the limit.
pub(super) const SLIDING_WINDOW: &str = r"
local function decide(key, w, limit, cost, write)
  local v = redis.call('HMGET', key, 'k', 'c', 'p')
  local k, c, p = int(v[1]), int(v[2]), int(v[3])
  if k == false or c == false or p == false or (k == nil) ~= (c == nil) or (k == nil) ~= (p == nil) then
    return bad(key, 'fields k, c and p must be whole numbers')
  end
  local idx = fdiv(now, w)
  local e = 0
  if k == nil then k, c, p = idx, 0, 0 end
  if idx >= k then
    if idx == k + 1 then p, c = c, 0 elseif idx > k + 1 then p, c = 0, 0 end
    k = idx
    e = now - idx * w
  end
  if c > limit then c = limit end
  if p > limit then p = limit end
  if cost == 0 then return {1, k, c, p, now} end
  local need = c + cost - 1
  if need < limit and need * w < limit * w - p * (w - e) then
    c = c + cost
    if write then
      redis.call('HSET', key, 'k', s(k), 'c', s(c), 'p', s(p))
      redis.call('PEXPIREAT', key, s(math.floor((k + 2) * w / 1000) + 1))
    end
    return {1, k, c, p, now}
  end
  return {0, k, c, p, now}
end
";

/// A sorted set of admissions scored by their instant, trimmed to the
/// window (also by a peek: an expired entry says nothing). Settings:
/// window (µs), limit. Reply: allowed, entries after the decision, the
/// instant of the entry whose expiry next makes room (the oldest, or with
/// more entries than the limit, written under a larger quota, the one
/// whose expiry brings them below it; or -1), the instant of the entry
/// whose expiry frees room for a denied cost (or -1), now. Entries are
/// added 500 at a time, so that a cost up to the largest limit stays
/// within Lua's stack.
pub(super) const SLIDING_LOG: &str = r"
local function decide(key, w, limit, cost, write)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', s(now - w))
  local used = redis.call('ZCARD', key)
  local held = used
  local function score(i)
    if i >= held then return now end
    local r = redis.call('ZRANGE', key, i, i, 'WITHSCORES')
    local n = int(r[2])
    if n == false or n == nil then return false end
    return n
  end
  if used > 0 and score(used - 1) == false then
    return bad(key, 'a score that is not a whole number of microseconds')
  end
  local allowed, kth = 0, -1
  if cost == 0 or used + cost <= limit then
    allowed = 1
    if cost > 0 and write then
      local at, i = s(now), 1
      while i <= cost do
        local args = {}
        for j = i, math.min(cost, i + 499) do
          args[#args + 1] = at
          args[#args + 1] = at .. ':' .. s(used + j)
        end
        redis.call('ZADD', key, unpack(args))
        i = i + 500
      end
      redis.call('PEXPIREAT', key, s(math.floor((now + w) / 1000) + 1))
    end
    used = used + cost
  else
    kth = score(cost - (limit - used) - 1)
    if kth == false then return bad(key, 'a score that is not a whole number of microseconds') end
  end
  local oldest = -1
  if used > 0 then
    oldest = score(math.max(0, used - limit))
    if oldest == false then return bad(key, 'a score that is not a whole number of microseconds') end
  end
  return {allowed, used, oldest, kth, now}
end
";

/// Expands the bodies' `s(…)` and `bad(key, …)` in place (see
/// [`PRELUDE`]).
pub(super) fn expand(body: &str) -> String {
    let mut out = String::with_capacity(body.len() * 2);
    let mut rest = body;
    while let Some(i) = rest.find("s(") {
        // `s(` as a whole word: not the end of a longer name.
        let whole = rest[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        out.push_str(&rest[..i]);
        out.push_str(if whole {
            "string.format('%.0f', "
        } else {
            "s("
        });
        rest = &rest[i + 2..];
    }
    out.push_str(rest);
    out.replace(
        "bad(key, ",
        "redis.error_reply('TOLLGATE the value under ' .. key .. ' is not a tollgate state: ' .. ",
    )
}

/// A single limit's script body: its `decide` function's body run as the
/// script itself (one closure fewer per call), its parameters taken from
/// `KEYS` and `ARGV`, recording if `write`.
pub(super) fn inline(body: &str, write: bool) -> String {
    let body = expand(body);
    let header_end = body.find(")\n").map_or(0, |i| i + 2);
    let header = &body[..header_end];
    let params = header
        .split_once("local function decide(")
        .map_or("", |(_, p)| p.trim_end_matches(")\n"));
    let names: Vec<&str> = params.split(", ").collect();
    // The function's last line is its `end`.
    let inner = body[header_end..]
        .trim_end()
        .strip_suffix("end")
        .unwrap_or(&body[header_end..]);
    format!(
        "\nlocal {} = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), {write}\n{inner}",
        names.join(", ")
    )
}
