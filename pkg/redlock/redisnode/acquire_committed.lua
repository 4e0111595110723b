-- AcquireCommitted: AcquireFenced (see acquire_fenced.lua) that, when the
-- caller holds KEYS[1] afterwards, also commits the fence in the same
-- atomic step: fence = max(floor, ARGV[3]) + 1, written to the counter at
-- KEYS[2] with a ttl of ARGV[4] ms. With a single master this is the
-- whole of both fencing rounds (see redlock's fence.go). Returns
-- {1, 0, fence} or {0, holder_pttl, 0}.
local key, fence_key, value, ttl = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local above, retention = tonumber(ARGV[3]), ARGV[4]

local function commit()
	local fence = fence_floor(fence_key)
	if above > fence then
		fence = above
	end
	fence = fence + 1
	redis.call('SET', fence_key, fence, 'PX', retention)
	return {1, 0, fence}
end

if redis.call('SET', key, value, 'NX', 'PX', ttl) then
	return commit()
end

if redis.call('GET', key) == value then
	redis.call('PEXPIRE', key, ttl)
	return commit()
end

local pttl = redis.call('PTTL', key)
if pttl < 0 then
	pttl = 0
end
return {0, pttl, 0}
