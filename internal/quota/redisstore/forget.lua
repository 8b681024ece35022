-- Drops every pod of one namespace from one SharedQuota (quota.Model's
-- Forget): the namespace was revoked, and its share goes to the others.
-- KEYS[1] members hash: pod -> "demand slotwant slotsheld seen v namespace"
-- ARGV[1] namespace
local all = redis.call('HGETALL', KEYS[1])
local n = 0
for i = 1, #all, 2 do
  if string.match(all[i + 1], '^%S+ %S+ %S+ %S+ %S+ (.*)$') == ARGV[1] then
    redis.call('HDEL', KEYS[1], all[i])
    n = n + 1
  end
end
return n
