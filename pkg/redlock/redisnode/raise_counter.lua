-- raise_counter: raise the fence counter at fence_key to fence (a string,
-- keeping the larger) and let it live retention milliseconds more.
-- Prepended (fence.go, tenure.go) to the scripts that commit a fence
-- while the key is the holder's. Fences stay below 2^53, so Lua's doubles
-- compare them exactly.
local function raise_counter(fence_key, fence, retention)
	local counter = tonumber(redis.call('GET', fence_key) or '0') or 0
	if tonumber(fence) > counter then
		redis.call('SET', fence_key, fence, 'PX', retention)
	else
		redis.call('PEXPIRE', fence_key, retention)
	end
end

