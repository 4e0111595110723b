-- CommitTenure: while KEYS[1] holds ARGV[1], raise the counter at KEYS[2]
-- to the block's top ARGV[2] (keeping the larger; ttl ARGV[3] ms) and write
-- the holder record at KEYS[3] with the holder's fence ARGV[4], grant
-- ARGV[5], owner ARGV[6] and channel ARGV[7], in one atomic step
-- (marks.lua and raise_counter.lua prepended). Returns 1 when committed, 0 when the key is no
-- longer this holder's.
local key, fence_key, holder_key = KEYS[1], KEYS[2], KEYS[3]
local value, top, retention = ARGV[1], ARGV[2], ARGV[3]

if redis.call('GET', key) ~= value then
	return 0
end
raise_counter(fence_key, top, retention)
record_put(holder_key, value, ARGV[4], ARGV[5], ARGV[6], 'held', '0', ARGV[7], '0', retention)
return 1
