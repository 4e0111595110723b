-- Extend: reset the ttl of KEYS[1] to ARGV[2] milliseconds if it holds
-- ARGV[1]. Returns 1 when renewed, 2 when the key is absent (it lapsed, or
-- the master restarted empty: nothing is written, since the lock may have
-- been granted and released meanwhile), 0 when another value holds it.
local key, value, ttl = KEYS[1], ARGV[1], ARGV[2]

local current = redis.call('GET', key)
if current == value then
	redis.call('PEXPIRE', key, ttl)
	return 1
end
if current == false then
	return 2
end
return 0
