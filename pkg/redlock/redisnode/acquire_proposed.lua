-- AcquireProposed: AcquireFenced (see acquire_fenced.lua) that, when the
-- caller holds KEYS[1] afterwards and the proposal ARGV[3] is above the
-- fence floor, also commits it in the same atomic step: the counter at
-- KEYS[2] becomes ARGV[3], with a ttl of ARGV[4] ms. A grant whose
-- majority all committed one proposal needs no commit round (redlock's
-- fence.go). Returns {1, 0, proposal, 1, replaced_counter} when committed,
-- {1, 0, floor, 0, 0} when taken but the floor was not below the proposal
-- (counter untouched), or {0, holder_pttl, 0, 0, 0}.
local fence_key, proposal, retention = KEYS[2], tonumber(ARGV[3]), ARGV[4]

local held = take_key(KEYS[1], ARGV[1], ARGV[2])
if held >= 0 then
	return {0, held, 0, 0, 0}
end
local floor, counter = fence_floor(fence_key)
if proposal <= floor then
	return {1, 0, floor, 0, 0}
end
redis.call('SET', fence_key, ARGV[3], 'PX', retention)
return {1, 0, proposal, 1, counter}
