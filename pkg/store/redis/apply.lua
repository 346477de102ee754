-- tollgate: decide groups of hits, each group atomically.
--
-- This is package algorithm's Apply in Lua, followed by the batch rules of
-- store.Store. Keep both in step: every formula below names the Go function
-- it mirrors, and the vectors of package algorithmtest run against it.
--
-- A call carries one or more groups, each the hits of one Apply that share
-- a slot, in the order the Applies arrived. Groups are independent: each
-- is decided all-or-nothing by itself, a rejection or failure in one never
-- touches another, and each sees the counters as the groups before it left
-- them.
--
-- This file defines apply(keys, argv), which the Go side calls in one of two
-- ways (script.go): as the body of a script for EVALSHA, with
-- "return apply(KEYS, ARGV)" appended, on every server (Redis 6.2 and up);
-- or, where the server has Redis Functions (7.0 and up), as a function
-- library whose one function is apply, loaded once with FUNCTION LOAD and
-- called with FCALL. A script's body runs on every call, so every function
-- defined at its top level is a new closure each time: the top level
-- defines only what a token-bucket hit needs, and the other algorithms are
-- built by buildOthers when a call first needs them. A library runs its
-- top level once.
--
-- Only commands of Redis 6.2 (and Valkey 7.2) may be used; TestScriptCommands
-- holds the list.
--
-- keys[i] is the counter of hit i, group after group (a key may repeat).
-- argv[1] is now in µs since the epoch, or "" for the server's TIME.
-- argv[2] is extra TTL in ms added to every key written.
-- argv[3] packs the groups as little-endian 64-bit integers. Each group is
-- its number of hits n, negated when the group holds an always-charged hit,
-- then n times
--   kind requests burst period cost flags
-- with kind 1 token bucket, 2 fixed window, 3 sliding-window counter,
-- 4 sliding-window log (algorithm.Kind), period in µs, and flags the sum
-- of 1 for a soft hit (store.Hit.Soft) and 2 for an always-charged one
-- (algorithm.ChargeAlways).
--
-- A hit with a penalty (algorithm.Penalty) is preceded, in the same group,
-- by a penalty record that takes the place of a hit: its key is the
-- counter's penalty state (the counter's key and "|p"), and its integers
--   5 tolerance cooldown factor max forgive_after
-- with the durations in µs. The hit after it is then decided by
-- penalize (algorithm.ApplyPenalty), and a hit blocked by a cooldown gets
-- 2 as its first result. The penalty state is written whatever the
-- group's outcome, unless the group fails; its TTL ends at
-- algorithm.Penalty.Expiry. A penalty record's five results are all 0. The
-- Go side sends penalty records only for the hits a penalty covers (a
-- cost of 0 or more, not charged always, on a valid limit).
--
-- A group whose count is 0 is instead a lease operation on one key
-- (package algorithm's Reserve and Return): 7 integers
--   kind requests burst period amount op window
-- with op 1 to reserve a lease of at most amount hits (window unused) and
-- op 2 to give back amount unspent hits (already at most the lease's Hits)
-- of a lease granted in window (algorithm.Lease.Window). A lease is an
-- admitted hit of its size on the same counter and state, so it travels
-- like a hit: in the same calls, batches and slot groups as Apply's groups,
-- seeing the counters as the groups before it left them. Its five results
-- are those of a hit, except that the first is 2 × the hits granted +
-- allowed (a reservation), or all 0 (a return). The lease's Window and
-- Until follow from now and the limit, so the Go side works them out.
--
-- Within a group, the always-charged hits are decided first, in order, and
-- each takes effect whatever its verdict. Then the other hits are decided
-- in order, each seeing its counter as the earlier-decided hits left it. If
-- a hit that is not soft was rejected, always-charged ones included, none
-- of the other hits changes anything and each of them that was admitted
-- reports its counter as it stands (Allowed, with the Remaining and
-- ResetAfter of a check). Otherwise every counter an admitted hit changed
-- takes its new state. Once all groups are decided, each changed counter is
-- written once, with a TTL that ends when the counter is empty again
-- (algorithm.Limit.Expiry).
--
-- Returns a list: now; a string of 5 little-endian 64-bit integers per hit,
-- in hit order: allowed (1 or 0), remaining, resetAfter µs, retryAfter µs,
-- limit; then, for each group that failed because a key holds a value of
-- another type, its number (from 1) and the error message. A failed group
-- changes nothing, and its hits' integers are meaningless.
--
-- Numbers are doubles. Every value is an integer below 2^53 for limits that
-- pass algorithm.Limit.Validate, and the only rounding steps are
-- math.ceil(a * b / c) and math.floor(a * b / c), evaluated exactly as the
-- Go code evaluates them (mulDivCeil, mulDivFloor). Text is made with
-- string.format('%d'): tostring (and ..) would print "%.14g", and
-- redis.call formats a number argument with "%.17g", exactly but much
-- slower.
--
-- Cost, the point of this layout: one script call for many Applies, one
-- TIME for all of them (on the server's clock), per counter one GET and at
-- most one SET however many hits and groups change it, and no table made
-- per token-bucket hit.

-- The library functions the code uses most, as locals. A function
-- library's top level sees no globals but redis, so apply sets them on
-- first use.
local floor, ceil, min, max, fmod, format, sunpack, spack

-- MAX_LOG_REQUESTS is algorithm.MaxLogRequests: a sliding-window log with a
-- larger limit would add that many sorted-set members in one call, so it
-- is refused like an invalid limit.
local MAX_LOG_REQUESTS = 10000

-- MAX_COUNT is algorithm.MaxCount, where a window's count saturates,
-- MAX_DEBT algorithm.MaxDebt, the deepest a token bucket's debt goes in µs,
-- and DEBT_PERIODS algorithm.DebtPeriods, how many periods it may last.
local MAX_COUNT, MAX_DEBT, DEBT_PERIODS = 4503599627370496, 1125899906842624, 10

-- HIT is the struct format of one hit of argv[3], HIT_SIZE its length;
-- RESULT1 the format of one hit's results.
local HIT, HIT_SIZE, RESULT1 = '<i8i8i8i8i8i8', 48, '<i8i8i8i8i8'

-- LEASE is the struct format of a lease operation of argv[3].
local LEASE = '<i8i8i8i8i8i8i8'

-- now is the instant of the call being decided, in µs, and slack its TTL
-- slack in ms; apply sets both.
local now, slack = 0, 0

------------------------------------------------------------------------
-- Token bucket (algorithm.applyTokenBucket). State: the TAT, a number.
--
-- The hottest code: comparisons stand in for math.min and math.max, which
-- cost a call each, and need(j) = ⌈j·p/r⌉ is written out.

-- bucketRemaining is max(0, min(tokens(k), k)), tokens(k) being the whole
-- tokens that credit k holds: 0 when k <= 0, else min(cap, ⌊k·r/p⌋).
local function bucketRemaining(k, cap, r, p)
  if k <= 0 then return 0 end
  local t = floor(k * r / p)
  if t > cap then t = cap end
  if k < t then return k end
  return t
end

-- Each algorithm returns the new state (nil when unchanged), allowed
-- (1 or 0), remaining, resetAfter, retryAfter and limit.
--
-- always is true for an always-charged hit (algorithm.ChargeAlways), which
-- may take the bucket into debt, a credit k below 0.
local function tokenBucket(r, burst, p, cost, tat, always)
  local cap = r
  if burst > 0 then cap = r + burst end
  if r == 0 then
    if cost < 0 then return nil, 1, 0, 0, 0, cap end
    return nil, 0, 0, 0, p, cap
  end
  local tau = ceil(cap * p / r) -- need(cap)
  local k = tau -- the credit now, τ − max(0, TAT − now)
  if tat > now then k = tau - (tat - now) end
  local a = 0 -- the whole tokens, tokens(k)
  if k > 0 then
    a = floor(k * r / p)
    if a > cap then a = cap end
  end
  local k2
  if cost < 0 and k < 0 then
    -- In debt: k + needUpTo(-cost, τ − k), compared before it is capped.
    local most = tau - k
    local f = ceil(-cost * p / r)
    if f < most then k2 = k + f else k2 = k + most end
  elseif cost < 0 then
    local m = cap
    if cost > -m then m = -cost end
    k2 = k + ceil((a + m) * p / r) - ceil(a * p / r)
    if k2 > tau then k2 = tau end
  elseif cost == 0 then
    if always then
      if k >= 0 then return nil, 1, bucketRemaining(k, cap, r, p), tau - k, 0, cap end
      return nil, 0, 0, tau - k, -k, cap
    end
    if a >= 1 then
      return nil, 1, bucketRemaining(k, cap, r, p), tau - k, 0, cap
    end
    return nil, 0, bucketRemaining(k, cap, r, p), tau - k, ceil(p / r) - k, cap
  elseif always and cost > a then
    -- min(k − needUpTo(cost, max(0, k + min(DebtPeriods·p, MaxDebt))), −1)
    local debt = DEBT_PERIODS * p
    if debt > MAX_DEBT then debt = MAX_DEBT end
    local most = k + debt
    if most < 0 then most = 0 end
    local f = ceil(cost * p / r)
    if f < most then k2 = k - f else k2 = k - most end
    if k2 > -1 then k2 = -1 end
    return now + tau - k2, 0, 0, tau - k2, -k2, cap
  elseif cost > cap then
    return nil, 0, bucketRemaining(k, cap, r, p), tau - k, p, cap
  elseif cost > a then
    return nil, 0, bucketRemaining(k, cap, r, p), tau - k, ceil(cost * p / r) - k, cap
  else
    -- min(k − need(a) + need(a − cost), need(a − cost + 1) − 1)
    k2 = k - ceil(a * p / r) + ceil((a - cost) * p / r)
    local most = ceil((a - cost + 1) * p / r) - 1
    if k2 > most then k2 = most end
  end
  return now + tau - k2, 1, bucketRemaining(k2, cap, r, p), tau - k2, 0, cap
end

------------------------------------------------------------------------
-- State I/O of a token bucket and of the string counters.
--
-- Token bucket: the TAT in µs, an integer. Fixed window: "T:Cur".
-- Sliding-window counter: "T:Cur:Prev". A key's TTL only governs cleanup:
-- it ends at or after the instant the counter is empty again, so a key
-- that has expired held an empty counter, and a live key is read from its
-- value alone. (Redis checks expiry inside a script against the ms clock
-- as the call started, which may lag TIME by a ms tick: the Go side passes
-- one ms of slack on the server's clock, and a second on a client's.)
--
-- A value below 1000 is a token bucket of the layout before Redis 6.2 was
-- supported, which kept the TAT in the key's absolute expiry (PEXPIRETIME,
-- Redis 7.0) and the µs remainder in the value: its TAT is read, to a ms,
-- from PTTL. Such keys are gone once their buckets are full again.

-- parse returns the state of a string counter from its value v (false when
-- the key is missing).
local function parse(key, kind, v)
  if kind == 1 then
    if not v then return 0 end
    local t = tonumber(v) or 0
    if t < 1000 then
      local ms = redis.call('PTTL', key)
      if ms < 0 then return 0 end
      t = now + ms * 1000 - t
    end
    return t
  end
  if not v then return { T = 0, Cur = 0, Prev = 0 } end
  local t, c, pv = string.match(v, '^(%-?%d+):(%-?%d+):?(%-?%d*)$')
  return { T = tonumber(t) or 0, Cur = tonumber(c) or 0, Prev = tonumber(pv) or 0 }
end

-- others is the code for the algorithms other than the token bucket, and
-- for sliding-window logs' state, built by others() on first need.
local others

-- buildOthers returns others.
local function buildOthers()
  -- windowStart mirrors algorithm.windowStart.
  local function windowStart(p)
    local m = fmod(now, p)
    if m < 0 then m = m + p end
    return now - m
  end

  local function int(x)
    return format('%d', x)
  end

  ------------------------------------------------------------------------
  -- Fixed window (algorithm.applyFixedWindow). State: { T, Cur }.

  -- addCount mirrors algorithm.addCount: count + cost, at most MAX_COUNT.
  local function addCount(count, cost)
    if cost > MAX_COUNT - count then return MAX_COUNT end
    return count + cost
  end

  local function fixedWindow(r, p, cost, s, always)
    local w = windowStart(p)
    local e = w + p - now
    local cur = 0
    if s.T == w then cur = s.Cur end
    local reset = 0
    if cur > 0 then reset = e end
    local remaining = max(0, r - cur)
    if cost < 0 then
      cur = max(0, cur + cost)
    elseif r == 0 or (cost > r and not always) then
      return nil, 0, remaining, reset, p, r
    elseif cost == 0 then
      if cur + 1 <= r or (always and cur <= r) then return nil, 1, remaining, reset, 0, r end
      return nil, 0, remaining, reset, e, r
    elseif cost > r - cur then
      if always then return { T = w, Cur = addCount(cur, cost) }, 0, 0, e, e, r end
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

  local function slidingEstimate(prev, cur, p, elapsed)
    return ceil(prev * (p - elapsed) / p) + cur
  end

  local function slidingResetAfter(prev, cur, p, elapsed)
    if cur > 0 then return 2 * p - elapsed end
    if prev > 0 then return p - elapsed end
    return 0
  end

  -- slidingRetryAfter is when the estimate leaves room for n more.
  local function slidingRetryAfter(prev, cur, n, r, p, elapsed)
    local m = r - cur - n
    if m >= 0 then
      return p - floor(m * p / prev) - elapsed
    end
    local into = p - floor((r - n) * p / cur)
    return p - elapsed + into
  end

  local function slidingCounter(r, p, cost, s, always)
    local w = windowStart(p)
    local elapsed = now - w
    local prev, cur = 0, 0
    if s.T == w then
      prev, cur = s.Prev, s.Cur
    elseif s.T == w - p then
      prev = s.Cur
    end
    local e = slidingEstimate(prev, cur, p, elapsed)
    local remaining, reset = max(0, r - e), slidingResetAfter(prev, cur, p, elapsed)
    local n = max(cost, 1)
    if always then n = max(cost, 0) end
    if cost < 0 then
      if cost <= -(cur + prev) then
        cur, prev = 0, 0
      else
        local taken = min(cur, -cost)
        cur = cur - taken
        prev = prev - (-cost - taken)
      end
    elseif r == 0 or (cost > r and not always) then
      return nil, 0, remaining, reset, p, r
    elseif n > r - e then
      if always and cost > 0 then
        cur = addCount(cur, cost)
        return { T = w, Cur = cur, Prev = prev }, 0, 0, slidingResetAfter(prev, cur, p, elapsed),
          slidingRetryAfter(prev, cur, 0, r, p, elapsed), r
      end
      return nil, 0, remaining, reset, slidingRetryAfter(prev, cur, n, r, p, elapsed), r
    elseif cost == 0 then
      return nil, 1, remaining, reset, 0, r
    else
      cur = cur + cost
    end
    return { T = w, Cur = cur, Prev = prev }, 1, max(0, r - slidingEstimate(prev, cur, p, elapsed)),
      slidingResetAfter(prev, cur, p, elapsed), 0, r
  end

  ------------------------------------------------------------------------
  -- Sliding-window log (algorithm.applySlidingWindowLog).
  --
  -- The stored log is a sorted set, one member per admitted unit, scored by
  -- its time. Within a call the log is the stored live entries (score >
  -- now - period) less the oldest `skip` and the newest `cut` of them, plus
  -- `add` entries at now, so a call reads O(log n) per hit however long the
  -- log is. In time order it is: the stored entries at or before now (b of
  -- them), the added ones, the stored ones after now (there are some only
  -- if a clock stepped back), exactly where algorithm.insertTimes puts new
  -- entries.

  -- logLoad returns the view of the stored log, or nil and an error message
  -- when the key holds another type.
  local function logLoad(key, p)
    local lo = '(' .. int(now - p)
    local live = redis.pcall('ZCOUNT', key, lo, '+inf')
    if type(live) == 'table' then return nil, live.err end
    local l = { key = key, live = live, dead = 0, upToNow = 0, skip = 0, cut = 0, add = 0, p = p }
    if live > 0 then
      l.dead = redis.call('ZCARD', key) - live
      l.upToNow = redis.call('ZCOUNT', key, lo, int(now))
    end
    return l
  end

  local function logCount(l)
    return l.live - l.skip - l.cut + l.add
  end

  -- logBefore returns b, the stored entries of the log at or before now.
  local function logBefore(l)
    return max(0, min(l.live - l.cut, l.upToNow) - l.skip)
  end

  -- logStored returns the time of the i-th (0-based) stored entry of the
  -- log.
  local function logStored(l, i)
    local rank = l.dead + l.skip + i
    return tonumber(redis.call('ZRANGE', l.key, rank, rank, 'WITHSCORES')[2])
  end

  -- logEntry returns the time of the i-th (0-based) entry of the log.
  local function logEntry(l, i)
    local b = logBefore(l)
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
    local after = max(0, (l.live - l.cut) - max(l.upToNow, l.skip))
    local r1 = min(m, after)
    local r2 = min(m - r1, l.add)
    l.add = l.add - r2
    l.cut = l.cut + r1 + (m - r1 - r2)
  end

  -- logKeep drops the oldest entries until at most keep are left: stored
  -- ones at or before now, then added ones, then stored ones after now.
  local function logKeep(l, keep)
    local d = logCount(l) - keep
    if d <= 0 then return end
    local d1 = min(d, logBefore(l))
    l.skip = l.skip + d1
    d = d - d1
    local d2 = min(d, l.add)
    l.add = l.add - d2
    l.skip = l.skip + d - d2
  end

  -- slidingLog changes l in place when it admits a hit of cost other than 0,
  -- or charges one always.
  local function slidingLog(r, p, cost, l, always)
    local count = logCount(l)
    local remaining, reset = max(0, r - count), logResetAfter(l)
    local n = max(cost, 1)
    if always then n = max(cost, 0) end
    if cost < 0 then
      local m = count
      if cost > -m then m = -cost end
      logRemove(l, m)
    elseif r == 0 or (cost > r and not always) then
      return nil, 0, remaining, reset, p, r
    elseif n > r - count and always and cost > 0 then
      -- Append min(cost, r + 1) entries, then keep the newest r + 1.
      l.add = l.add + min(cost, r + 1)
      logKeep(l, r + 1)
      return l, 0, 0, logResetAfter(l), logEntry(l, 0) + p - now, r
    elseif n > r - count then
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
    return { key = l.key, live = l.live, dead = l.dead, upToNow = l.upToNow, skip = l.skip, cut = l.cut, add = l.add,
      p = l.p }
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
    if l.skip > 0 then redis.call('ZREMRANGEBYRANK', key, 0, l.skip - 1) end
    if l.add > 0 then
      -- Members at one score are named t-<i> for i = 0, 1, ..., with i in an
      -- order-preserving form (a length digit, then the digits), so the
      -- newest entries of a score are its highest-ranked members and the
      -- existing names are exactly 0 to count-1.
      local at = int(now)
      local i = redis.call('ZCOUNT', key, at, at)
      local left = l.add
      while left > 0 do
        local args = {}
        local chunk = min(left, 500)
        for _ = 1, chunk do
          local d = int(i)
          args[#args + 1] = at
          args[#args + 1] = at .. '-' .. string.char(47 + #d) .. d
          i = i + 1
        end
        left = left - redis.call('ZADD', key, 'NX', unpack(args))
      end
    end
    redis.call('PEXPIRE', key, int(ceil((expiry - now) / 1000) + slack))
  end

  return {
    -- decide applies a hit of kind 2, 3 or 4.
    decide = function(kind, r, p, cost, s, always)
      if kind == 2 then return fixedWindow(r, p, cost, s, always) end
      if kind == 3 then return slidingCounter(r, p, cost, s, always) end
      return slidingLog(r, p, cost, s, always)
    end,
    logLoad = logLoad,
    logWrite = logWrite,
    logCopy = logCopy,
    windowStart = windowStart,
  }
end

-- load reads a counter, returning its state, or nil and the error when
-- the key holds a value of another type.
local function load(key, kind, p)
  if kind == 4 then return others.logLoad(key, p) end
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then return nil, v.err end
  return parse(key, kind, v)
end

-- decide applies a hit to its counter's state s; always is true for an
-- always-charged hit.
local function decide(kind, r, burst, p, cost, s, always)
  if kind == 1 then return tokenBucket(r, burst, p, cost, s, always) end
  return others.decide(kind, r, p, cost, s, always)
end

-- write stores a changed counter. Numbers go to redis.call as text from
-- format('%d') (see the header).
local function write(key, kind, p, s)
  if kind == 4 then return others.logWrite(key, s) end
  local expiry, value = s, nil
  if kind == 1 then
    value = format('%d', s)
  elseif kind == 2 then
    expiry = 0
    if s.Cur > 0 then expiry = s.T + p end
    value = format('%d:%d', s.T, s.Cur)
  else
    expiry = 0
    if s.Cur > 0 then
      expiry = s.T + 2 * p
    elseif s.Prev > 0 then
      expiry = s.T + p
    end
    value = format('%d:%d:%d', s.T, s.Cur, s.Prev)
  end
  if expiry <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, value, 'PX', format('%d', ceil((expiry - now) / 1000) + slack))
  end
end

------------------------------------------------------------------------
-- Leases (algorithm.Reserve and algorithm.Return).

-- leaseOp applies lease operation op (see the header) to a counter of a
-- valid limit whose state is s, and returns the new state (nil when
-- unchanged) and the five results.
local function leaseOp(kind, r, burst, p, amount, op, window, s)
  local leasable = kind ~= 4
  if op == 1 then
    -- algorithm.Reserve: a lease of n = min(want, what a check reports
    -- remaining), charged as an admitted hit of cost n.
    local _, ca, cr, creset, cretry, climit = decide(kind, r, burst, p, 0, s, false)
    local n = amount
    if cr < n then n = cr end
    if not leasable or n < 1 then
      local probe = s
      if kind == 4 then probe = others.logCopy(s) end
      local _, a, rem, reset, retry, limit = decide(kind, r, burst, p, 1, probe, false)
      -- An admission here did not happen: report the check.
      if a == 1 then return nil, ca, cr, creset, cretry, climit end
      return nil, a, rem, reset, retry, limit
    end
    local s2, a, rem, reset, retry, limit = decide(kind, r, burst, p, n, s, false)
    return s2, 2 * n + a, rem, reset, retry, limit
  end
  -- algorithm.Return: a refund while the lease's window lasts (a bucket's
  -- always); a window that has ended counts no more, except that a
  -- sliding-window counter's previous window still weighs.
  if amount <= 0 or not leasable then return nil, 0, 0, 0, 0, 0 end
  if kind == 1 then return (decide(kind, r, burst, p, -amount, s, false)), 0, 0, 0, 0, 0 end
  local w = others.windowStart(p)
  if w == window then
    return (decide(kind, r, burst, p, -amount, s, false)), 0, 0, 0, 0, 0
  end
  if kind == 3 and w == window + p then
    local prev, cur = 0, 0
    if s.T == window then
      prev = s.Cur
    elseif s.T == w then
      prev, cur = s.Prev, s.Cur
    end
    prev = prev - amount
    if prev < 0 then prev = 0 end
    return { T = w, Cur = cur, Prev = prev }, 0, 0, 0, 0, 0
  end
  return nil, 0, 0, 0, 0, 0
end

------------------------------------------------------------------------
-- Penalties (algorithm.ApplyPenalty). State: { Until, Strikes, Last,
-- Blocked } as a table of four numbers, stored as "U:S:L:B"; penalize
-- adds the expiry as a fifth for write.

-- penaltyLoad reads a penalty state, or returns nil and the error when the
-- key holds a value of another type.
local function penaltyLoad(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then return nil, v.err end
  if not v then return { 0, 0, 0, 0 } end
  local u, st, last, b = string.match(v, '^(%-?%d+):(%-?%d+):(%-?%d+):(%-?%d+)$')
  return { tonumber(u) or 0, tonumber(st) or 0, tonumber(last) or 0, tonumber(b) or 0 }
end

-- penalize decides a covered hit on a counter in state s under the
-- penalty whose integers start at byte at of argv[3] and whose state is
-- ps. It returns what decide returns, the first result 2 for a hit
-- rejected by a cooldown, then the new penalty state, or nil when it is
-- unchanged.
local function penalize(packed, at, ps, kind, r, burst, p, cost, s)
  local _, tol, cooldown, factor, most, forgive = sunpack(HIT, packed, at)
  local u, st, last, blocked = ps[1], ps[2], ps[3], ps[4]
  local expiry = u
  if last > 0 then expiry = u + forgive end
  if now >= expiry then u, st, last, blocked = 0, 0, 0, 0 end
  local s2, allowed, remaining, reset, retry, limit
  if blocked > now then
    -- A check changes no state, not even a log view.
    _, allowed, remaining, reset, retry, limit = decide(kind, r, burst, p, 0, s, false)
    retry = blocked - now
    if retry > reset then reset = retry end
    allowed, remaining = 2, 0
  else
    s2, allowed, remaining, reset, retry, limit = decide(kind, r, burst, p, cost, s, false)
    if allowed == 1 then return s2, allowed, remaining, reset, retry, limit, nil end
  end
  -- limit is the capacity.
  local strike = r > 0 and cost <= limit
  if strike then
    if now < u then st = st + 1 else st = 0 end
    if st > tol then
      local d = cooldown
      if last > 0 then
        d = last * factor
        if d > most then d = most end
      end
      last, st = d, 0
      if now + d > blocked then blocked = now + d end
    end
  end
  if blocked > now then
    retry = blocked - now
    if retry > reset then reset = retry end
    allowed, remaining = 2, 0
  end
  if strike then u = now + retry end
  if u == ps[1] and st == ps[2] and last == ps[3] and blocked == ps[4] then
    return s2, allowed, remaining, reset, retry, limit, nil
  end
  expiry = u
  if last > 0 then expiry = u + forgive end
  return s2, allowed, remaining, reset, retry, limit, { u, st, last, blocked, expiry }
end

-- penaltyWrite stores a changed penalty state.
local function penaltyWrite(key, ps)
  if ps[5] <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, format('%d:%d:%d:%d', ps[1], ps[2], ps[3], ps[4]), 'PX',
      format('%d', ceil((ps[5] - now) / 1000) + slack))
  end
end

------------------------------------------------------------------------
-- The groups.

-- applyOne is apply for the commonest call at ordinary load: one group of
-- one hit. It takes the same steps, without the tables that tie hits,
-- groups and writes together.
local function applyOne(key, packed)
  local kind, r, burst, p, cost, soft = sunpack(HIT, packed, 9)
  local out = { now, '' }
  local s, allowed, remaining, reset, retry, limit = nil, 0, 0, 0, 0, 0
  if p <= 0 or r < 0 or kind < 1 or kind > 4 or (kind == 4 and r > MAX_LOG_REQUESTS) then
    -- algorithm.Apply: an invalid limit rejects with a zero verdict.
    out[2] = spack(RESULT1, 0, 0, 0, 0, 0)
    return out
  end
  if kind ~= 1 and not others then others = buildOthers() end
  local e
  s, e = load(key, kind, p)
  if s == nil then
    out[3], out[4] = 1, e
    out[2] = spack(RESULT1, 0, 0, 0, 0, 0)
    return out
  end
  local always = soft >= 2
  s, allowed, remaining, reset, retry, limit = decide(kind, r, burst, p, cost, s, always)
  if cost ~= 0 and s and (allowed == 1 or always) then
    write(key, kind, p, s)
  end
  out[2] = spack(RESULT1, allowed, remaining, reset, retry, limit)
  return out
end

-- apply decides the groups of argv[3] in order, as the header describes,
-- and returns the reply.
--
-- Group g starts at hit first + 1 and at byte pos of argv[3]; res receives
-- 5 results per hit, out (the reply) the number and error message of each
-- failed group.
--
-- state[key] is a counter as the groups so far left it, read on first use.
-- A changed counter joins written once, when its group commits, and
-- dirty[key] is where in argv[3] a hit on it starts, for its kind and
-- period (both part of the key). A group of one hit commits whatever it
-- changed: its hit changes its counter only if it is admitted or charged
-- always. A larger group decides its always-charged hits (phase 1), then
-- the others (phase 2). In phase 2 it saves in undo (key, state, hit
-- position, in turn) each counter its hits use, when seen[key] first marks
-- it with g, and sets changed[key] = g when a hit changes it; a rejection
-- or failure restores the counters. Phase 1 does the same with undoA,
-- seenA and changedA, which only a failure restores. (These tables are
-- made for the first group that needs them.)
local function apply(keys, argv)
  if not floor then
    floor, ceil, min, max, fmod = math.floor, math.ceil, math.min, math.max, math.fmod
    format, sunpack, spack = string.format, struct.unpack, struct.pack
  end
  now = tonumber(argv[1])
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  slack = tonumber(argv[2]) or 0
  local packed = argv[3]
  if #packed == 8 + HIT_SIZE then
    return applyOne(keys[1], packed)
  end
  local out, res = { now, '' }, {}
  local state, dirty, written = {}, {}, {}
  local seen, changed, undo
  local seenA, changedA, undoA
  local o, g, first, pos = 0, 0, 0, 1
  while pos <= #packed do
    local n
    n, pos = sunpack('<i8', packed, pos)
    g = g + 1
    if n == 0 then
      -- A lease operation: one key, committed by itself.
      local at = pos
      local kind, r, burst, p, amount, op, window
      kind, r, burst, p, amount, op, window, pos = sunpack(LEASE, packed, pos)
      local key = keys[first + 1]
      local a, remaining, reset, retry, limit = 0, 0, 0, 0, 0
      if not others then others = buildOthers() end
      if not (p <= 0 or r < 0 or kind < 1 or kind > 4 or (kind == 4 and r > MAX_LOG_REQUESTS)) then
        local s, e = state[key], nil
        if s == nil then
          s, e = load(key, kind, p)
          state[key] = s
        end
        if s == nil then
          out[#out + 1], out[#out + 2] = g, e
        else
          s, a, remaining, reset, retry, limit = leaseOp(kind, r, burst, p, amount, op, window, s)
          if s then
            state[key] = s
            if not dirty[key] then
              dirty[key] = at
              written[#written + 1] = key
            end
          end
        end
      end
      res[o + 1], res[o + 2], res[o + 3], res[o + 4], res[o + 5] = a, remaining, reset, retry, limit
      o = o + 5
      first = first + 1
    else
      -- A negative count marks a group with always-charged hits.
      local phase = 2
      if n < 0 then n, phase = -n, 1 end
      local single, start, last, o0, u, ua = n == 1, pos, first + n, o, 0, 0
      local rejected, err = false, nil
      -- pen and penAt are the key and position of the penalty record of
      -- the next hit; pundo holds (key, state before) of each penalty
      -- state the group changed.
      local pen, penAt, pundo = nil, 0, nil
      if not single and not seen then seen, changed, undo = {}, {}, {} end
      if phase == 1 and not single and not seenA then seenA, changedA, undoA = {}, {}, {} end
      while phase <= 2 do
        pos, o = start, o0
        for i = first + 1, last do
          local kind, r, burst, p, cost, flags
          local at = pos
          kind, r, burst, p, cost, flags, pos = sunpack(HIT, packed, pos)
          local always = flags >= 2 and kind ~= 5
          if always == (phase == 1) then
            local key = keys[i]
            local allowed, remaining, reset, retry, limit = 0, 0, 0, 0, 0
            if kind == 5 then
              -- A penalty record, for the next hit: read its state.
              local ps, e = state[key], nil
              if ps == nil then
                ps, e = penaltyLoad(key)
                state[key] = ps
              end
              if ps == nil then
                err = e
              else
                pen, penAt = key, at
              end
            elseif p <= 0 or r < 0 or kind < 1 or kind > 4 or (kind == 4 and r > MAX_LOG_REQUESTS) then
              -- algorithm.Apply: an invalid limit rejects with a zero verdict.
              if flags == 0 or flags == 2 then rejected = true end
            else
              if kind ~= 1 and not others then others = buildOthers() end
              local s, e = state[key], nil
              if s == nil then
                s, e = load(key, kind, p)
                state[key] = s
              end
              if s == nil then
                err = e
              else
                if single then
                  -- Nothing to undo.
                elseif always then
                  if seenA[key] ~= g then
                    seenA[key] = g
                    undoA[ua + 1], undoA[ua + 2], undoA[ua + 3] = key, s, at
                    ua = ua + 3
                    if kind == 4 then
                      s = others.logCopy(s)
                      state[key] = s
                    end
                  end
                elseif seen[key] ~= g then
                  seen[key] = g
                  undo[u + 1], undo[u + 2], undo[u + 3] = key, s, at
                  u = u + 3
                  if kind == 4 then
                    s = others.logCopy(s)
                    state[key] = s
                  end
                end
                if pen then
                  local ps = state[pen]
                  local ps2
                  s, allowed, remaining, reset, retry, limit, ps2 = penalize(packed, penAt, ps, kind, r, burst, p, cost, s)
                  if ps2 then
                    -- Kept whatever the outcome; the old state, should the
                    -- group fail.
                    state[pen] = ps2
                    if not pundo then pundo = {} end
                    pundo[#pundo + 1], pundo[#pundo + 2] = pen, ps
                  end
                  pen = nil
                else
                  s, allowed, remaining, reset, retry, limit = decide(kind, r, burst, p, cost, s, always)
                end
                if cost ~= 0 and s and (allowed == 1 or always) then
                  state[key] = s
                  if single then
                    if not dirty[key] then
                      dirty[key] = at
                      written[#written + 1] = key
                    end
                  elseif always then
                    changedA[key] = g
                  else
                    changed[key] = g
                  end
                end
                if allowed ~= 1 and (flags == 0 or flags == 2) then
                  rejected = true
                end
              end
            end
            res[o + 1], res[o + 2], res[o + 3], res[o + 4], res[o + 5] = allowed, remaining, reset, retry, limit
          end
          o = o + 5
        end
        phase = phase + 1
      end

      if err then
        -- A failed group changes nothing: penalties, phase 2, then phase
        -- 1, undone.
        if pundo then
          for x = #pundo - 1, 1, -2 do
            state[pundo[x]] = pundo[x + 1]
          end
        end
        for x = 1, u, 3 do
          state[undo[x]] = undo[x + 1]
        end
        for x = 1, ua, 3 do
          state[undoA[x]] = undoA[x + 1]
        end
      else
        for x = 1, pundo and #pundo or 0, 2 do
          local key = pundo[x]
          if not dirty[key] then
            dirty[key] = -1
            written[#written + 1] = key
          end
        end
        for x = 1, ua, 3 do
          local key = undoA[x]
          if changedA[key] == g and not dirty[key] then
            dirty[key] = undoA[x + 2]
            written[#written + 1] = key
          end
        end
        if rejected then
          for x = 1, u, 3 do
            state[undo[x]] = undo[x + 1]
          end
        else
          for x = 1, u, 3 do
            local key = undo[x]
            if changed[key] == g and not dirty[key] then
              dirty[key] = undo[x + 2]
              written[#written + 1] = key
            end
          end
        end
      end
      if err then
        out[#out + 1], out[#out + 2] = g, err
      elseif rejected then
        -- Nothing else is charged: each admitted hit that is not charged
        -- always reports its counter as it stands.
        for i = first + 1, last do
          local x = o0 + (i - first - 1) * 5
          if res[x + 1] == 1 then
            local kind, r, burst, p, _, flags = sunpack(HIT, packed, start + (i - first - 1) * HIT_SIZE)
            if flags < 2 then
              -- A check (cost 0) changes no state, not even a log view.
              local _, _, remaining, reset, _, limit = decide(kind, r, burst, p, 0, state[keys[i]])
              res[x + 2], res[x + 3], res[x + 4], res[x + 5] = remaining, reset, 0, limit
            end
          end
        end
      end
      first = last
    end
  end

  -- Write each changed counter once; the order is deterministic, and so are
  -- the commands replicated.
  for x = 1, #written do
    local key = written[x]
    if dirty[key] == -1 then
      penaltyWrite(key, state[key])
    else
      local kind, _, _, p = sunpack(HIT, packed, dirty[key])
      write(key, kind, p, state[key])
    end
  end

  -- Pack the results, at most 1000 at a time: unpack is bounded by Lua's
  -- stack, so by a few thousand values.
  if o == 5 then
    out[2] = spack(RESULT1, res[1], res[2], res[3], res[4], res[5])
  elseif o <= 1000 then
    out[2] = spack('<' .. string.rep('i8', o), unpack(res, 1, o))
  else
    local chunks = {}
    for x = 1, o, 1000 do
      local y = min(x + 999, o)
      chunks[#chunks + 1] = spack('<' .. string.rep('i8', y - x + 1), unpack(res, x, y))
    end
    out[2] = table.concat(chunks)
  end
  return out
end
