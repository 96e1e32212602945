-- Compare-and-set of a policy document on its version (DESIGN principle 7).
-- KEYS[1]: current document key; KEYS[2]: history list key.
-- ARGV[1]: version; ARGV[2]: document JSON; ARGV[3]: history cap; ARGV[4]: channel; ARGV[5]: announcement;
-- ARGV[6]: the version bound (versions are integers 0 <= v < bound; 2^53, below which Lua numbers are exact).
-- Returns 0 when the stored version is >= the offered one (nothing written); else 1.
-- An offered version outside the bound is refused with an error: the caller checks it first.
-- A stored value that is not a string, not a JSON object, or whose version is not a number inside the
-- bound cannot be compared: it counts as absent and is overwritten, so one malformed key never blocks its
-- scope and a huge version (2^62, which doubles cannot tell from its neighbours) cannot freeze it.
-- A history key of another type than a list is replaced the same way.
local bound = tonumber(ARGV[6])
local offered = tonumber(ARGV[1])
if not offered or offered ~= math.floor(offered) or offered < 0 or offered >= bound then
  return redis.error_reply('version out of bounds: ' .. tostring(ARGV[1]))
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'string' then
  local ok, stored = pcall(cjson.decode, redis.call('GET', KEYS[1]))
  local version = ok and type(stored) == 'table' and tonumber(stored['version']) or nil
  if version and version >= 0 and version < bound and math.floor(version) >= offered then
    return 0
  end
elseif kind ~= 'none' then
  redis.call('DEL', KEYS[1])
end
local history = redis.call('TYPE', KEYS[2])['ok']
if history ~= 'list' and history ~= 'none' then
  redis.call('DEL', KEYS[2])
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
