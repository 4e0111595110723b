-- AcquireProposed: AcquireFenced (see acquire_fenced.lua) that, when the
-- caller holds KEYS[1] afterwards and the proposal ARGV[3] is above the
-- fence floor, also commits it in the same atomic step: the counter at
-- KEYS[2] becomes ARGV[3], with a ttl of ARGV[4] ms. A grant whose
-- majority all committed one proposal needs no commit round (redlock's
-- fence.go). Returns {1, 0, proposal, 1, replaced_counter} when committed,
-- {1, 0, floor, 0, 0} when taken but the floor was not below the proposal
-- (counter untouched), or {0, holder_pttl, 0, 0, 0}.
local key, fence_key, value, ttl = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local proposal, retention = tonumber(ARGV[3]), ARGV[4]

local function propose()
	local floor = fence_floor(fence_key)
	if proposal > floor then
		local prev = redis.call('GET', fence_key) or '0'
		redis.call('SET', fence_key, ARGV[3], 'PX', retention)
		return {1, 0, proposal, 1, tonumber(prev) or 0}
	end
	return {1, 0, floor, 0, 0}
end

if redis.call('SET', key, value, 'NX', 'PX', ttl) then
	return propose()
end

if redis.call('GET', key) == value then
	redis.call('PEXPIRE', key, ttl)
	return propose()
end

local pttl = redis.call('PTTL', key)
if pttl < 0 then
	pttl = 0
end
return {0, pttl, 0, 0, 0}
