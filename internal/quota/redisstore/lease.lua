-- One pod's lease operation on one SharedQuota, atomic, on the server's clock:
-- the steps of quota.Model, in the same order (docs/quota.md). Times are
-- microseconds; numbers kept are written with 17 digits, so they read back
-- exactly as the Model keeps them.
-- KEYS[1] tat: the fleet's next free send time
-- KEYS[2] members hash: pod -> "demand slotwant slotsheld seen v namespace"
-- KEYS[3] hold: the end of the fleet's pacing hold, Unix ms
-- ARGV: pod, namespace, rate/s, burst, concurrency, want, due, demand/s,
-- slots, in use, hold ms; the timings of quota/plan.go: ttl, drawing, lead,
-- catch-up, max ahead, past life, min lateness; max demand; and, from the
-- tests only, now ("": the server's TIME)
local function num(s)
  local n = tonumber(s)
  if n == nil or n ~= n then return 0 end
  return n
end
local pod, ns = ARGV[1], ARGV[2]
local rate, burst, conc = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local want, due, demand = num(ARGV[6]), num(ARGV[7]), num(ARGV[8])
local swant, inuse, hold = num(ARGV[9]), num(ARGV[10]), num(ARGV[11])
local ttl, drawing, lead, catchup = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
local ahead, life, minlate, maxdemand = tonumber(ARGV[16]), tonumber(ARGV[17]), tonumber(ARGV[18]), tonumber(ARGV[19])
local now
if ARGV[20] ~= nil and ARGV[20] ~= '' then
  now = tonumber(ARGV[20])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function fmt(x) return string.format('%.17g', x) end

-- 1. bound what the pod chose; forget pods not seen for ttl
if not (demand >= 0) then demand = 0 end
demand = math.min(demand, maxdemand)
want = math.max(math.min(math.floor(want), math.floor(ahead * rate / 1000000) + 1), 0)
due = math.max(math.min(math.floor(due), want), 0)
swant = math.max(math.min(math.floor(swant), conc), 0)
inuse = math.max(math.min(math.floor(inuse), conc), 0)
local drawn = {{pod = pod, ns = ns, amount = demand}}
local live = {{pod = pod, ns = ns, amount = swant}}
local othersHeld, selfv = 0, nil
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  local d, sw, sh, seen, v, mns = string.match(all[i + 1], '^(%S+) (%S+) (%S+) (%S+) (%S+) (.*)$')
  seen = tonumber(seen)
  if d == nil or seen == nil or now - seen >= ttl then
    redis.call('HDEL', KEYS[2], all[i])
  elseif all[i] == pod then
    selfv = tonumber(v)
  else
    table.insert(live, {pod = all[i], ns = mns, amount = tonumber(sw)})
    othersHeld = othersHeld + tonumber(sh)
    if now - seen < drawing then
      table.insert(drawn, {pod = all[i], ns = mns, amount = tonumber(d)})
    end
  end
end
local function bypod(a, b) return a.pod < b.pod end
table.sort(drawn, bypod)
table.sort(live, bypod)

-- 2. max-min across namespaces, then across the pods of this one: in
-- proportion to their demand for the rate, max-min for the slots
local function divide(capacity, ds)
  table.sort(ds)
  local left = capacity
  for i = 1, #ds do
    local fair = left / (#ds - i + 1)
    if ds[i] > fair then return fair, 0 end
    left = left - ds[i]
  end
  return math.huge, left / #ds
end
local function share(capacity, claims, mine, maxmin)
  local totals, order = {}, {}
  for _, c in ipairs(claims) do
    if totals[c.ns] == nil then
      totals[c.ns] = 0
      table.insert(order, c.ns)
    end
    totals[c.ns] = totals[c.ns] + c.amount
  end
  local ds = {}
  for _, n in ipairs(order) do table.insert(ds, totals[n]) end
  local level, extra = divide(capacity, ds)
  local ours, total = math.min(totals[ns], level) + extra, totals[ns]
  local own = {}
  for _, c in ipairs(claims) do
    if c.ns == ns then table.insert(own, c.amount) end
  end
  if maxmin or total <= ours then
    level, extra = divide(ours, own)
    return math.min(mine, level) + extra
  end
  return ours * mine / total
end
local fleet = 0
for _, c in ipairs(drawn) do fleet = fleet + c.amount end
local r = share(rate, drawn, demand, false)

-- 3. send times: k of them 1/rate apart, from max(TAT, now - the due ones)
local spacing = 1000000 / rate
local late = math.max((burst - 1) * spacing, minlate)
local tol = math.max(late - life, 0)
local v = now
if selfv ~= nil then
  local back = catchup
  if r > 0 then back = math.max(catchup, 1000000 / r) end
  v = math.max(selfv, now - back)
end
local credit = 0
if r > 0 then credit = math.floor((now + lead - v) * r / 1000000) end
local first = now - math.min(tol, math.max(due - 1, 0) * spacing)
local tat = tonumber(redis.call('GET', KEYS[1]))
if tat ~= nil and tat > first then first = tat end
local room = 0
if first <= now + ahead then room = math.floor((now + ahead - first) / spacing) + 1 end
local k = math.max(math.min(want, credit, room), 0)
if k > 0 then
  redis.call('SET', KEYS[1], fmt(first + k * spacing), 'PX', math.ceil((ahead + late + tol + ttl) / 1000))
  v = v + k * 1000000 / r
end

-- 4. concurrency slots, divided max-min by what the pods ask for
local slots = 0
if conc > 0 then
  local fair = share(conc, live, swant, true)
  slots = math.max(math.min(swant, math.ceil(fair - 1e-9), conc - othersHeld), 0)
end

-- 5. record this pod; the fleet's hold: the latest one wins
redis.call('HSET', KEYS[2], pod, string.format('%s %d %d %d %s %s', fmt(demand), swant, math.max(slots, inuse), now, fmt(v), ns))
redis.call('PEXPIRE', KEYS[2], math.ceil(2 * ttl / 1000))
local h = tonumber(redis.call('GET', KEYS[3]) or '0')
if hold > h and hold * 1000 > now then
  redis.call('SET', KEYS[3], string.format('%d', hold), 'PX', math.ceil((hold * 1000 - now) / 1000))
  h = hold
end
if h * 1000 <= now then h = 0 end
local firstOut = 0
if k > 0 then firstOut = first - now end
return {k, fmt(firstOut), fmt(spacing), fmt(late), fmt(r), slots, fmt(fleet), #live, h}
