"""The Lua of flow control: each step one atomic script over one group's flow keys.

Every key of a group's flow state shares the group's hash tag (``Keys.flow``), so one
script reads and writes all of it on one Redis or in one cluster slot, and two
workers can never both take a key's last slot. Time is Redis's own (``TIME``): the
workers' clocks may disagree, the leases and buckets are one clock's.

The state, under the group's base:

- ``held:<key>``: sorted set of the key's entries in handling (event id, scored by its
  lease's end in ms); a member past its lease is dropped before the set is read;
- ``wait:<key>``: list of the key's parked entries, oldest first (JSON);
- ``parked``: hash of parked event ids (their key), so an entry parks once;
- ``keys``: list of the keys with parked entries, rotated: each turn releases at most one
  entry of the key at its head, then moves it to the tail (fair turns);
- ``bucket:<key>`` and ``bucket``: token buckets (tokens, last refill ms) of the rates;
- ``released``: hash of entries handed a slot and not yet put back on their stream;
- ``stats``: counters (``deferred``, ``released``).

ARGV of every script: base, lease ms, concurrency (0: none), the key rate's count, ms
and bucket (count 0: none), the total rate's count, ms and bucket; then its own.
"""

from __future__ import annotations

_COMMON = """
local base = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
local conc = tonumber(ARGV[3])
local kn, kms, kburst = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local tn, tms, tburst = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local keys_key = base .. 'keys'

local purged = {}
local function holders(k)
  local h = base .. 'held:' .. k
  if not purged[k] then
    redis.call('ZREMRANGEBYSCORE', h, '-inf', now)
    purged[k] = true
  end
  return h
end

local buckets, dirty = {}, {}
local function tokens(name, n, ms, burst)
  if n == 0 then return 1e18 end
  local have = buckets[name]
  if have == nil then
    local got = redis.call('HMGET', base .. name, 'tokens', 'at')
    if got[1] then
      have = math.min(burst, tonumber(got[1]) + (now - tonumber(got[2])) * n / ms)
    else
      have = burst
    end
    buckets[name] = have
  end
  return have
end

local function spend(name, n, ms, burst)
  if n == 0 then return end
  buckets[name] = tokens(name, n, ms, burst) - 1
  dirty[name] = ms * burst / n
end

local function save_buckets()
  for name, full_ms in pairs(dirty) do
    redis.call('HSET', base .. name, 'tokens', tostring(buckets[name]), 'at', now)
    redis.call('PEXPIRE', base .. name, math.ceil(full_ms) + 1000)
  end
end

-- Whether key k may take one more slot now; else how long until its next token (ms,
-- or false when it waits for a slot).
local counts = {}
local function count(k)
  local n = counts[k]
  if n == nil then
    n = redis.call('ZCARD', holders(k))
    counts[k] = n
  end
  return n
end

local function fits(k)
  if conc > 0 and count(k) >= conc then return false, false end
  local have = tokens('bucket:' .. k, kn, kms, kburst)
  if have < 1 then return false, (1 - have) * kms / kn end
  return true, false
end

local function total_fits()
  local have = tokens('bucket', tn, tms, tburst)
  if have < 1 then return false, (1 - have) * tms / tn end
  return true, false
end

-- New holders, written a key at a time by save_holders (one ZADD per key per run).
local adds = {}
local function hold(k, id)
  holders(k)
  local members = adds[k]
  if members == nil then
    members = {}
    adds[k] = members
  end
  members[#members + 1] = now + lease
  members[#members + 1] = id
  counts[k] = count(k) + 1
  spend('bucket:' .. k, kn, kms, kburst)
  spend('bucket', tn, tms, tburst)
end

local function save_holders()
  for k, members in pairs(adds) do
    local h = base .. 'held:' .. k
    for at = 1, #members, 2000 do
      redis.call('ZADD', h, unpack(members, at, math.min(at + 1999, #members)))
    end
    redis.call('PEXPIRE', h, lease + 60000)
  end
end

local waits = {}
local function waiting(k)
  local n = waits[k]
  if n == nil then
    n = redis.call('LLEN', base .. 'wait:' .. k)
    waits[k] = n
  end
  return n
end

local function park(k, id, entry)
  local w = base .. 'wait:' .. k
  local n = redis.call('RPUSH', w, entry)
  waits[k] = n
  if n == 1 then redis.call('RPUSH', keys_key, k) end
  redis.call('HSET', base .. 'parked', id, k)
  redis.call('HINCRBY', base .. 'stats', 'deferred', 1)
end

-- Turns: release at most one entry per key with waiting entries per rotation, until a
-- rotation releases nothing, the total rate runs dry or cap entries went.
local function pump(cap)
  local out, due, visits = {}, false, cap * 10
  local function soon(ms)
    if ms and (not due or ms < due) then due = ms end
  end
  local dry = false
  while #out < cap and visits > 0 and not dry do
    local n = redis.call('LLEN', keys_key)
    if n == 0 then break end
    local before = #out
    for _ = 1, n do
      if #out >= cap or visits <= 0 then break end
      local ok, wait = total_fits()
      if not ok then soon(wait); dry = true; break end
      visits = visits - 1
      local k = redis.call('LMOVE', keys_key, keys_key, 'LEFT', 'RIGHT')
      local free, later = fits(k)
      local w = base .. 'wait:' .. k
      if free then
        local entry = redis.call('LPOP', w)
        if entry then
          local id = cjson.decode(entry)['id']
          hold(k, id)
          redis.call('HDEL', base .. 'parked', id)
          redis.call('HSET', base .. 'released', id, now .. '|' .. entry)
          out[#out + 1] = entry
        end
      else
        soon(later)
      end
      if redis.call('LLEN', w) == 0 then redis.call('LREM', keys_key, -1, k) end
    end
    if #out == before then break end
  end
  if #out > 0 then redis.call('HINCRBY', base .. 'stats', 'released', #out) end
  save_holders()
  save_buckets()
  local due_ms = -1
  if due then due_ms = math.ceil(due) end
  return {out, due_ms, redis.call('LLEN', keys_key)}
end
"""

# ARGV[10..]: quadruples (event id, key, fresh, entry JSON or ''); fresh '1': read from
# its stream for the first time, so neither a holder nor parked. Returns per entry 1
# (granted), 0 (parked, now or before) or 2 (to park, but its entry was not given: the
# caller asks again with it; most reads park nothing, and need not send their entries).
ACQUIRE = (
    _COMMON
    + """
local out = {}
for i = 10, #ARGV, 4 do
  local id, k, fresh, entry = ARGV[i], ARGV[i + 1], ARGV[i + 2] == '1', ARGV[i + 3]
  local h = holders(k)
  local granted = 0
  if not fresh and redis.call('ZSCORE', h, id) then
    redis.call('ZADD', h, now + lease, id)
    granted = 1
  elseif not fresh and waiting(k) > 0 and redis.call('HEXISTS', base .. 'parked', id) == 1 then
    granted = 0  -- a parked entry's key has waiting entries: it is one of them
  elseif waiting(k) == 0 and fits(k) and total_fits() then
    hold(k, id)
    granted = 1
  elseif entry == '' then
    granted = 2
  else
    park(k, id, entry)
  end
  out[#out + 1] = granted
end
save_holders()
save_buckets()
return out
"""
)

# ARGV[10]: the pump's cap; ARGV[11..]: a key, how many of its entries were settled,
# their event ids; the next key...
RELEASE = (
    _COMMON
    + """
local i = 11
while i <= #ARGV do
  local n = tonumber(ARGV[i + 1])
  redis.call('ZREM', base .. 'held:' .. ARGV[i], unpack(ARGV, i + 2, i + 1 + n))
  i = i + 2 + n
end
return pump(tonumber(ARGV[10]))
"""
)

# ARGV[10..]: pairs (event id, key) still in handling: their leases start again.
KEEP = (
    _COMMON
    + """
local kept = 0
for i = 10, #ARGV, 2 do
  kept = kept + redis.call('ZADD', base .. 'held:' .. ARGV[i + 1], 'XX', 'CH', now + lease, ARGV[i])
end
return kept
"""
)

# ARGV[10]: how old (ms) a released entry is before it is handed out again (its
# releaser died before putting it back on its stream). Returns those entries.
STALE = (
    _COMMON
    + """
local out = {}
local all = redis.call('HGETALL', base .. 'released')
for i = 1, #all, 2 do
  local value = all[i + 1]
  local bar = string.find(value, '|', 1, true)
  if tonumber(string.sub(value, 1, bar - 1)) < now - tonumber(ARGV[10]) then
    local entry = string.sub(value, bar + 1)
    redis.call('HSET', base .. 'released', all[i], now .. '|' .. entry)
    out[#out + 1] = entry
  end
end
return out
"""
)
