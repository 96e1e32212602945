-- Compare-and-set of a policy document on its version (DESIGN principle 7).
-- KEYS[1]: current document key; KEYS[2]: history list key.
-- ARGV[1]: version; ARGV[2]: document JSON; ARGV[3]: history cap; ARGV[4]: channel; ARGV[5]: announcement.
-- Returns 0 when the stored version is >= the offered one (nothing written); else 1.
-- A stored value that is not a JSON object with a numeric version cannot be compared: it counts as
-- absent and is overwritten, so one malformed key never blocks its scope (issue 19).
local current = redis.call('GET', KEYS[1])
if current then
  local ok, stored = pcall(cjson.decode, current)
  local version = ok and type(stored) == 'table' and tonumber(stored['version']) or nil
  if version and version >= tonumber(ARGV[1]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
