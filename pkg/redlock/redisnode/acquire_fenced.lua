-- AcquireFenced: Acquire (see acquire.lua) that, when the caller holds
-- KEYS[1] afterwards, also returns the fence floor of KEYS[2]: the larger of
-- the stored counter and this server's clock in microseconds. Reading the
-- floor atomically with taking the key is what makes fences monotonic.
-- Returns {1, 0, floor} or {0, holder_pttl, 0}. Needs Redis 5+ (TIME in a
-- script that writes relies on effects replication).
local key, fence_key, value, ttl = KEYS[1], KEYS[2], ARGV[1], ARGV[2]

if redis.call('SET', key, value, 'NX', 'PX', ttl) then
	return {1, 0, fence_floor(fence_key)}
end

if redis.call('GET', key) == value then
	redis.call('PEXPIRE', key, ttl)
	return {1, 0, fence_floor(fence_key)}
end

local pttl = redis.call('PTTL', key)
if pttl < 0 then
	pttl = 0
end
return {0, pttl, 0}
