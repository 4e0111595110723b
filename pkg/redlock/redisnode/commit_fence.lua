-- CommitFence: while KEYS[1] holds ARGV[1], raise the counter at KEYS[2] to
-- ARGV[2] (keeping the larger) and let it live ARGV[3] milliseconds more
-- (raise_counter.lua, prepended). Returns 1 when committed, 0 when the key
-- is no longer this holder's.
local key, fence_key, value, fence, retention = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]

if redis.call('GET', key) ~= value then
	return 0
end
raise_counter(fence_key, fence, retention)
return 1
