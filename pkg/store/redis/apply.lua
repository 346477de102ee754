-- tollgate: decide one slot group of hits atomically.
--
-- This is package algorithm's Apply in Lua, followed by the batch rules of
-- store.Store. Keep both in step: every formula below names the Go function
-- it mirrors, and the vectors of package algorithmtest run against it.
--
-- KEYS[i] is the counter of hit i (a key may repeat).
-- ARGV[1] is now in µs since the epoch, or "" for the server's TIME.
-- ARGV[2] is extra TTL in ms added to every key written.
-- ARGV[3] holds 6 integers per hit, space-separated:
--   kind requests burst period cost soft
-- with kind 1 token bucket, 2 fixed window, 3 sliding-window counter,
-- 4 sliding-window log (algorithm.Kind), period in µs, soft 1 or 0.
--
-- Hits are decided in order, each seeing its counter as the earlier hits of
-- the call left it. If a hit that is not soft is rejected, nothing is
-- written and each admitted hit reports its unchanged counter (Allowed,
-- with the Remaining and ResetAfter of a check); otherwise every counter an
-- admitted hit changed is written once, with a TTL that ends when the
-- counter is empty again (algorithm.Limit.Expiry).
--
-- Returns 5 integers per hit: allowed (1 or 0), remaining, resetAfter µs,
-- retryAfter µs, limit; then now.
--
-- Numbers are doubles. Every value is an integer below 2^53 for limits that
-- pass algorithm.Limit.Validate, and the only rounding steps are
-- math.ceil(a * b / c) and math.floor(a * b / c), evaluated exactly as the
-- Go code evaluates them (mulDivCeil, mulDivFloor).

local floor, ceil, min, max, fmod = math.floor, math.ceil, math.min, math.max, math.fmod

-- MAX_LOG_REQUESTS is algorithm.MaxLogRequests: a sliding-window log with a
-- larger limit would add that many sorted-set members in one call, so it
-- is refused like an invalid limit.
local MAX_LOG_REQUESTS = 10000

local now = tonumber(ARGV[1])
local serverTime = not now
if serverTime then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local slack = tonumber(ARGV[2]) or 0

-- int formats an integer-valued double without an exponent.
local function int(x)
  return string.format('%d', x)
end

-- windowStart mirrors algorithm.windowStart.
local function windowStart(p)
  local m = fmod(now, p)
  if m < 0 then m = m + p end
  return now - m
end

------------------------------------------------------------------------
-- Token bucket (algorithm.applyTokenBucket). State: { T }.

local function need(j, p, r)
  return ceil(j * p / r)
end

local function tokens(k, cap, r, p)
  if k <= 0 then return 0 end
  return min(cap, floor(k * r / p))
end

local function bucketRemaining(k, cap, r, p)
  return max(0, min(tokens(k, cap, r, p), k))
end

-- Each apply function returns the new state (nil when unchanged), allowed
-- (1 or 0), remaining, resetAfter, retryAfter and limit.
local function tokenBucket(r, burst, p, cost, s)
  local cap = r + max(burst, 0)
  if r == 0 then
    if cost < 0 then return nil, 1, 0, 0, 0, cap end
    return nil, 0, 0, 0, p, cap
  end
  local tau = need(cap, p, r)
  local k = tau - max(0, s.T - now)
  local a = tokens(k, cap, r, p)
  local k2
  if cost < 0 then
    local m = cap
    if cost > -m then m = -cost end
    k2 = min(tau, k + need(a + m, p, r) - need(a, p, r))
  elseif cost == 0 then
    if a >= 1 then
      return nil, 1, bucketRemaining(k, cap, r, p), tau - k, 0, cap
    end
    return nil, 0, bucketRemaining(k, cap, r, p), tau - k, need(1, p, r) - k, cap
  elseif cost > cap then
    return nil, 0, bucketRemaining(k, cap, r, p), tau - k, p, cap
  elseif cost > a then
    return nil, 0, bucketRemaining(k, cap, r, p), tau - k, need(cost, p, r) - k, cap
  else
    k2 = min(k - need(a, p, r) + need(a - cost, p, r), need(a - cost + 1, p, r) - 1)
  end
  return { T = now + tau - k2 }, 1, bucketRemaining(k2, cap, r, p), tau - k2, 0, cap
end

------------------------------------------------------------------------
-- Fixed window (algorithm.applyFixedWindow). State: { T, Cur }.

local function fixedWindow(r, p, cost, s)
  local w = windowStart(p)
  local e = w + p - now
  local cur = 0
  if s.T == w then cur = s.Cur end
  local reset = 0
  if cur > 0 then reset = e end
  local remaining = max(0, r - cur)
  if cost < 0 then
    cur = max(0, cur + cost)
  elseif r == 0 or cost > r then
    return nil, 0, remaining, reset, p, r
  elseif cost == 0 then
    if cur + 1 <= r then return nil, 1, remaining, reset, 0, r end
    return nil, 0, remaining, reset, e, r
  elseif cur + cost > r then
    return nil, 0, remaining, reset, e, r
  else
    cur = cur + cost
  end
  reset = 0
  if cur > 0 then reset = e end
  return { T = w, Cur = cur }, 1, max(0, r - cur), reset, 0, r
end

------------------------------------------------------------------------
-- Sliding-window counter (algorithm.applySlidingWindowCounter).
-- State: { T, Cur, Prev }.

local function slidingCounter(r, p, cost, s)
  local w = windowStart(p)
  local elapsed = now - w
  local prev, cur = 0, 0
  if s.T == w then
    prev, cur = s.Prev, s.Cur
  elseif s.T == w - p then
    prev = s.Cur
  end
  local function estimate(pv, cu)
    return ceil(pv * (p - elapsed) / p) + cu
  end
  local function resetAfter(pv, cu)
    if cu > 0 then return 2 * p - elapsed end
    if pv > 0 then return p - elapsed end
    return 0
  end
  local e = estimate(prev, cur)
  local remaining, reset = max(0, r - e), resetAfter(prev, cur)
  local n = max(cost, 1)
  if cost < 0 then
    if cost <= -(cur + prev) then
      cur, prev = 0, 0
    else
      local taken = min(cur, -cost)
      cur = cur - taken
      prev = prev - (-cost - taken)
    end
  elseif r == 0 or cost > r then
    return nil, 0, remaining, reset, p, r
  elseif e + n > r then
    local m = r - cur - n
    if m >= 0 then
      return nil, 0, remaining, reset, p - floor(m * p / prev) - elapsed, r
    end
    local into = p - floor((r - n) * p / cur)
    return nil, 0, remaining, reset, p - elapsed + into, r
  elseif cost == 0 then
    return nil, 1, remaining, reset, 0, r
  else
    cur = cur + cost
  end
  return { T = w, Cur = cur, Prev = prev }, 1, max(0, r - estimate(prev, cur)), resetAfter(prev, cur), 0, r
end

------------------------------------------------------------------------
-- Sliding-window log (algorithm.applySlidingWindowLog).
--
-- The stored log is a sorted set, one member per admitted unit, scored by
-- its time. Within a call the log is the stored live entries (score >
-- now - period) less the newest `cut` of them, plus `add` entries at now,
-- so a call reads O(log n) per hit however long the log is. In time order
-- it is: the stored entries at or before now (b of them), the added ones,
-- the stored ones after now (there are some only if a clock stepped back),
-- exactly where algorithm.insertTimes puts new entries.

local function logLoad(key, p)
  local lo = '(' .. int(now - p)
  local live = tonumber(redis.call('ZCOUNT', key, lo, '+inf'))
  local l = { key = key, live = live, dead = 0, upToNow = 0, cut = 0, add = 0, p = p }
  if live > 0 then
    l.dead = tonumber(redis.call('ZCARD', key)) - live
    l.upToNow = tonumber(redis.call('ZCOUNT', key, lo, int(now)))
  end
  return l
end

local function logCount(l)
  return l.live - l.cut + l.add
end

-- logStored returns the time of the i-th (0-based) live stored entry.
local function logStored(l, i)
  local rank = l.dead + i
  return tonumber(redis.call('ZRANGE', l.key, rank, rank, 'WITHSCORES')[2])
end

-- logEntry returns the time of the i-th (0-based) entry of the log.
local function logEntry(l, i)
  local b = min(l.live - l.cut, l.upToNow)
  if i < b then return logStored(l, i) end
  if i < b + l.add then return now end
  return logStored(l, i - l.add)
end

local function logResetAfter(l)
  local n = logCount(l)
  if n == 0 then return 0 end
  return logEntry(l, n - 1) + l.p - now
end

-- logRemove drops the m newest entries: stored ones after now, then added
-- ones, then stored ones at or before now.
local function logRemove(l, m)
  local after = max(0, (l.live - l.cut) - l.upToNow)
  local r1 = min(m, after)
  local r2 = min(m - r1, l.add)
  l.add = l.add - r2
  l.cut = l.cut + r1 + (m - r1 - r2)
end

local function slidingLog(r, p, cost, l)
  local count = logCount(l)
  local remaining, reset = max(0, r - count), logResetAfter(l)
  local n = max(cost, 1)
  if cost < 0 then
    local m = count
    if cost > -m then m = -cost end
    logRemove(l, m)
  elseif r == 0 or cost > r then
    return nil, 0, remaining, reset, p, r
  elseif count + n > r then
    return nil, 0, remaining, reset, logEntry(l, count + n - r - 1) + p - now, r
  elseif cost == 0 then
    return nil, 1, remaining, reset, 0, r
  else
    l.add = l.add + cost
  end
  return l, 1, max(0, r - logCount(l)), logResetAfter(l), 0, r
end

-- logCopy returns an independent copy of a log view.
local function logCopy(l)
  return { key = l.key, live = l.live, dead = l.dead, upToNow = l.upToNow, cut = l.cut, add = l.add, p = l.p }
end

------------------------------------------------------------------------
-- State I/O.

-- load reads a counter. Fixed window: "T:Cur". Sliding-window counter:
-- "T:Cur:Prev". Token bucket on the server's clock: the key expires at the
-- TAT rounded up to a ms, E, and holds E·1000 − TAT, below 1000, so Redis
-- stores it as a shared integer and the key costs no value object. Token
-- bucket on a client's clock, whose instants Redis expiry cannot express:
-- the TAT itself (from 1000 up).
local function load(key, kind, p)
  if kind == 4 then return logLoad(key, p) end
  local v = redis.call('GET', key)
  if not v then return { T = 0, Cur = 0, Prev = 0 } end
  if kind == 1 then
    local t = tonumber(v) or 0
    if t < 1000 then
      t = redis.call('PEXPIRETIME', key) * 1000 - t
    end
    return { T = t, Cur = 0, Prev = 0 }
  end
  local t, c, pv = string.match(v, '^(%-?%d+):(%-?%d+):?(%-?%d*)$')
  return { T = tonumber(t) or 0, Cur = tonumber(c) or 0, Prev = tonumber(pv) or 0 }
end

-- ttl returns the ms until the µs timestamp expiry, rounded up, plus slack.
local function ttl(expiry)
  return int(ceil((expiry - now) / 1000) + slack)
end

local function logWrite(key, l)
  local p = l.p
  local expiry = 0
  local n = logCount(l)
  if n > 0 then expiry = logEntry(l, n - 1) + p end
  if expiry <= now then
    redis.call('DEL', key)
    return
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - p))
  if l.cut > 0 then redis.call('ZREMRANGEBYRANK', key, -l.cut, -1) end
  if l.add > 0 then
    -- Members at one score are named t-<i> for i = 0, 1, ..., with i in an
    -- order-preserving form (a length digit, then the digits), so the
    -- newest entries of a score are its highest-ranked members and the
    -- existing names are exactly 0 to count-1.
    local at = int(now)
    local i = tonumber(redis.call('ZCOUNT', key, at, at))
    local left = l.add
    while left > 0 do
      local args = { 'ZADD', key, 'NX' }
      local chunk = min(left, 500)
      for _ = 1, chunk do
        local d = int(i)
        args[#args + 1] = at
        args[#args + 1] = at .. '-' .. string.char(47 + #d) .. d
        i = i + 1
      end
      left = left - tonumber(redis.call(unpack(args)))
    end
  end
  redis.call('PEXPIRE', key, ttl(expiry))
end

local function write(key, kind, p, s)
  if kind == 4 then return logWrite(key, s) end
  local expiry, value = 0, nil
  if kind == 1 then
    if serverTime and s.T > now then
      local e = ceil(s.T / 1000)
      redis.call('SET', key, int(e * 1000 - s.T), 'PXAT', int(e))
      return
    end
    expiry, value = s.T, int(s.T)
  elseif kind == 2 then
    if s.Cur > 0 then expiry = s.T + p end
    value = int(s.T) .. ':' .. int(s.Cur)
  else
    if s.Cur > 0 then
      expiry = s.T + 2 * p
    elseif s.Prev > 0 then
      expiry = s.T + p
    end
    value = int(s.T) .. ':' .. int(s.Cur) .. ':' .. int(s.Prev)
  end
  if expiry <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, value, 'PX', ttl(expiry))
  end
end

------------------------------------------------------------------------
-- The batch.

local function decide(kind, r, burst, p, cost, s)
  if kind == 1 then return tokenBucket(r, burst, p, cost, s) end
  if kind == 2 then return fixedWindow(r, p, cost, s) end
  if kind == 3 then return slidingCounter(r, p, cost, s) end
  return slidingLog(r, p, cost, s)
end

local hits = {}
for x in string.gmatch(ARGV[3], '%S+') do
  hits[#hits + 1] = tonumber(x)
end

local n = #KEYS
local out = {}
local original, current, dirty = {}, {}, {}
local rejected = false
for i = 1, n do
  local key, j = KEYS[i], (i - 1) * 6
  local kind, r, burst, p, cost, soft = hits[j + 1], hits[j + 2], hits[j + 3], hits[j + 4], hits[j + 5], hits[j + 6]
  local o = (i - 1) * 5
  if p <= 0 or r < 0 or kind < 1 or kind > 4 or (kind == 4 and r > MAX_LOG_REQUESTS) then
    -- algorithm.Apply: an invalid limit rejects with a zero verdict.
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 0, 0, 0, 0, 0
  else
    if not current[key] then
      local s = load(key, kind, p)
      original[key] = s
      if kind == 4 then s = logCopy(s) end
      current[key] = s
    end
    local s, allowed, remaining, reset, retry, limit = decide(kind, r, burst, p, cost, current[key])
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = allowed, remaining, reset, retry, limit
    if allowed == 1 then
      if cost ~= 0 and s then
        current[key] = s
        dirty[key] = i
      end
    elseif soft == 0 then
      rejected = true
    end
  end
end

if rejected then
  -- Nothing is charged: each admitted hit reports its counter as stored.
  for i = 1, n do
    local o = (i - 1) * 5
    if out[o + 1] == 1 then
      local key, j = KEYS[i], (i - 1) * 6
      local kind, r, burst, p = hits[j + 1], hits[j + 2], hits[j + 3], hits[j + 4]
      local s = original[key]
      if kind == 4 then s = logCopy(s) end
      local _, _, remaining, reset, _, limit = decide(kind, r, burst, p, 0, s)
      out[o + 2], out[o + 3], out[o + 4], out[o + 5] = remaining, reset, 0, limit
    end
  end
else
  -- In hit order, so the commands replicated are deterministic.
  for i = 1, n do
    local key = KEYS[i]
    if dirty[key] == i then
      local j = (i - 1) * 6
      write(key, hits[j + 1], hits[j + 4], current[key])
    end
  end
end

out[#out + 1] = now
return out
