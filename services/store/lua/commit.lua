-- Atomic estimate commit with offset fencing (DESIGN principle 3).
-- KEYS[1]: the consumer's offsets hash; KEYS[2..]: state and summary keys, in ARGV order.
-- ARGV[1]: number of offset fields n; ARGV[2..1+2n]: field, offset pairs; ARGV[2+2n..]: values of KEYS[2..],
-- then one time-to-live in seconds per key of KEYS[2..] (0: the key does not expire).
-- Returns 0, writing nothing, when a stored offset is at or past an offered one; else 1.
local n = tonumber(ARGV[1])
for i = 0, n - 1 do
  local field = ARGV[2 + 2 * i]
  local offered = tonumber(ARGV[3 + 2 * i])
  local stored = redis.call('HGET', KEYS[1], field)
  if stored and tonumber(stored) >= offered then
    return 0
  end
end
for i = 0, n - 1 do
  redis.call('HSET', KEYS[1], ARGV[2 + 2 * i], ARGV[3 + 2 * i])
end
local base = 2 + 2 * n
local ttls = base + #KEYS - 1
for k = 2, #KEYS do
  local ttl = tonumber(ARGV[ttls + k - 2])
  if ttl > 0 then
    redis.call('SET', KEYS[k], ARGV[base + k - 2], 'EX', ttl)
  else
    redis.call('SET', KEYS[k], ARGV[base + k - 2])
  end
end
return 1
