-- Get: return {value, pttl} of KEYS[1] (pttl 0 when it has no expiry), or a
-- nil reply when the key is absent. A script reads both in one atomic step.
local value = redis.call('GET', KEYS[1])
if value == false then
	return false
end

local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
	pttl = 0
end
return {value, pttl}
