-- Acquire: claim KEYS[1] for ARGV[1] with a ttl of ARGV[2] milliseconds.
-- Returns {1, 0} when the caller holds the key afterwards, or
-- {0, holder_pttl} when another value holds it (0 if it has no expiry).
-- One script makes "set if absent, else refresh if mine" atomic.
local key, value, ttl = KEYS[1], ARGV[1], ARGV[2]

if redis.call('SET', key, value, 'NX', 'PX', ttl) then
	return {1, 0}
end

-- A retried Acquire whose first reply was lost must succeed again, and it
-- must refresh the ttl the caller is now counting from.
if redis.call('GET', key) == value then
	redis.call('PEXPIRE', key, ttl)
	return {1, 0}
end

local pttl = redis.call('PTTL', key)
if pttl < 0 then
	pttl = 0
end
return {0, pttl}
