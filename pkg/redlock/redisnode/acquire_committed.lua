-- AcquireCommitted: AcquireFenced (see acquire_fenced.lua) that, when the
-- caller holds KEYS[1] afterwards, also commits the fence in the same
-- atomic step: fence = max(floor, ARGV[3]) + 1, written to the counter at
-- KEYS[2] with a ttl of ARGV[4] ms. With a single master this is the
-- whole of both fencing rounds (see redlock's fence.go). Returns
-- {1, 0, fence} or {0, holder_pttl, 0}.
local fence_key, above, retention = KEYS[2], tonumber(ARGV[3]), ARGV[4]

local held = take_key(KEYS[1], ARGV[1], ARGV[2])
if held >= 0 then
	return {0, held, 0}
end
local fence = fence_floor(fence_key)
if above > fence then
	fence = above
end
fence = fence + 1
redis.call('SET', fence_key, fence, 'PX', retention)
return {1, 0, fence}
