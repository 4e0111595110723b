-- fence_floor: the fence floor of a fence key, the larger of its counter
-- and this server's clock in microseconds. Prepended (fence.go) to every
-- script that grants a fenced key, so they all read it alike: reading it
-- in the same atomic step as the grant is what makes fences monotonic.
-- The counter itself (0 when absent) is the second result; a caller that
-- puts the floor last in a table wraps the call in parentheses, or Lua
-- would add the counter to the table too. A script that read TIME already
-- passes its reply as t: one TIME per call, not two.
local function fence_floor(fence_key, t)
	t = t or redis.call('TIME')
	local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
	local counter = tonumber(redis.call('GET', fence_key) or '0') or 0
	if counter > now then
		return counter, counter
	end
	return now, counter
end

