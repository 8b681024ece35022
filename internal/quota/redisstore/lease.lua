-- One pod's lease operation on one SharedQuota, atomic, on the server's clock
-- (the steps of quota.Model; docs/quota.md).
-- KEYS[1] bucket hash {tokens, ts}   KEYS[2] pods hash pod -> "held demand slots seen"
-- KEYS[3] hold (end of the fleet's pacing hold, Unix ms)
-- KEYS[4] credits hash pod -> credit (quota.Entitlement's; apart from KEYS[2],
-- whose format an older script running beside this one during a rollout reads)
-- ARGV: pod, rate/s, burst, concurrency, want, held, demand/s, slots, in use, hold ms, ttl ms, returned,
-- idle ms (quota.IdleInterval: the most time a pod's credit grows for)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pod = ARGV[1]
local rate, burst, conc = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local want, held, demand = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local swant, inuse, hold, ttl = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local returned = tonumber(ARGV[12])
local idle = tonumber(ARGV[13]) or 1000

-- 1. forget pods not seen for ttl; sum what the others hold and want
local othersHeld, othersSlots, fleet, pods = 0, 0, demand, 1
local elapsed, credit = -1, 0 -- a new pod
local all = redis.call('HGETALL', KEYS[2])
local credits = {}
local cs = redis.call('HGETALL', KEYS[4])
for i = 1, #cs, 2 do
  credits[cs[i]] = tonumber(cs[i + 1])
end
for i = 1, #all, 2 do
  local h, d, s, seen = string.match(all[i + 1], '^(%S+) (%S+) (%S+) (%S+)$')
  if all[i] == pod then
    if h ~= nil and now - tonumber(seen) < ttl then
      elapsed, credit = now - tonumber(seen), credits[pod] or 0
    end
  else
    if h == nil or now - tonumber(seen) >= ttl then
      redis.call('HDEL', KEYS[2], all[i])
      redis.call('HDEL', KEYS[4], all[i])
    else
      othersHeld = othersHeld + tonumber(h)
      othersSlots = othersSlots + tonumber(s)
      fleet = fleet + tonumber(d)
      pods = pods + 1
    end
  end
end

-- 2. fill the bucket and take back the returned tokens, at most burst minus
-- every pod's tokens on hand
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(b[1]), tonumber(b[2])
if tokens == nil or ts == nil then
  tokens, ts = burst, now
end
if now > ts then
  tokens = tokens + rate * (now - ts) / 1000
  ts = now
end
tokens = tokens + returned
tokens = math.min(tokens, math.max(burst - othersHeld - held, 0))

-- 3. grant tokens and slots: while the fleet is short, at most the pod's
-- credit, which grows at its share of the rate (quota.Entitlement)
local capped = fleet > rate and elapsed >= 0
if capped then
  local share = rate * demand / fleet
  credit = math.min(credit + share * math.min(elapsed, idle) / 1000, math.max(share * idle / 1000, 1))
else
  credit = 0
end
local granted = math.max(math.min(want, math.floor(tokens)), 0)
if capped then
  -- no more than its credit plus one token it may owe, or the tokens the
  -- other pods' credits leave, whichever is more
  local owed = 0
  for i = 1, #all, 2 do
    local _, d, _, seen = string.match(all[i + 1], '^(%S+) (%S+) (%S+) (%S+)$')
    if all[i] ~= pod and d ~= nil and now - tonumber(seen) < ttl then
      local sh = rate * tonumber(d) / fleet
      owed = owed + math.min((credits[all[i]] or 0) + sh * math.min(now - tonumber(seen), idle) / 1000, math.max(sh * idle / 1000, 1))
    end
  end
  granted = math.min(granted, math.max(math.floor(credit) + 1, math.floor(tokens - owed)))
  credit = math.max(credit - granted, -1)
end
tokens = tokens - granted
-- more than half the burst left: tokens the others did not ask for, which
-- would overflow; this pod may take as much again
local over = math.floor(tokens - burst / 2)
if over > 0 and want > 0 then
  local extra = math.min(over, want)
  granted = granted + extra
  tokens = tokens - extra
end
local slots = 0
if conc > 0 then
  slots = math.max(math.min(swant, conc - othersSlots), 0)
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'ts', string.format('%d', ts))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + ttl)

-- 4. record this pod
redis.call('HSET', KEYS[2], pod, string.format('%d %.3f %d %d', held + granted, demand, math.max(slots, inuse), now))
redis.call('PEXPIRE', KEYS[2], 2 * ttl)
redis.call('HSET', KEYS[4], pod, string.format('%.4f', credit))
redis.call('PEXPIRE', KEYS[4], 2 * ttl)

-- 5. the fleet's hold: the latest one wins
local h = tonumber(redis.call('GET', KEYS[3]) or '0')
if hold > h and hold > now then
  redis.call('SET', KEYS[3], string.format('%d', hold), 'PXAT', string.format('%d', hold))
  h = hold
end
if h <= now then
  h = 0
end
return {granted, slots, string.format('%.3f', fleet), pods, h, now}
