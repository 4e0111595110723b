-- GetFenced: {value, pttl, counter} of KEYS[1] and its fence counter at
-- KEYS[2], read in one atomic step; value is "" when the key is absent and
-- counter is "0" when there is none (returned as a string: Lua would round
-- large numbers through a double on the way out otherwise).
local value = redis.call('GET', KEYS[1])
local counter = redis.call('GET', KEYS[2]) or '0'
if value == false then
	return {'', 0, counter}
end

local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
	pttl = 0
end
return {value, pttl, counter}
