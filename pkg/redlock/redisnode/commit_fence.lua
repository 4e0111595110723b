-- CommitFence: while KEYS[1] holds ARGV[1], raise the counter at KEYS[2] to
-- ARGV[2] (keeping the larger) and let it live ARGV[3] milliseconds more.
-- Returns 1 when committed, 0 when the key is no longer this holder's.
-- Fences stay below 2^53, so Lua's doubles compare them exactly.
local key, fence_key, value, fence, retention = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]

if redis.call('GET', key) ~= value then
	return 0
end

local counter = tonumber(redis.call('GET', fence_key) or '0') or 0
if tonumber(fence) > counter then
	redis.call('SET', fence_key, fence, 'PX', retention)
else
	redis.call('PEXPIRE', fence_key, retention)
end
return 1
