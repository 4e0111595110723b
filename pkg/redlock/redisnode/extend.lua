-- Extend: reset the ttl of KEYS[1] to ARGV[2] milliseconds if it holds
-- ARGV[1]; claim it again if it is absent. Returns 1 when renewed, 2 when
-- reclaimed (the caller must not count it: the key may have lapsed
-- everywhere and been granted to another meanwhile), 0 when another value
-- holds the key.
local key, value, ttl = KEYS[1], ARGV[1], ARGV[2]

local current = redis.call('GET', key)
if current == value then
	redis.call('PEXPIRE', key, ttl)
	return 1
end

-- Absent: the key expired or the master restarted empty. Reclaiming it lets
-- a holder that still owns a quorum repair the lagging minority.
if current == false then
	redis.call('SET', key, value, 'PX', ttl)
	return 2
end

return 0
