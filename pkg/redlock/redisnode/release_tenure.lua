-- ReleaseTenure: Release (see release.lua) of KEYS[1] held by ARGV[1] that
-- also drops its holder record at KEYS[2], and leaves the mark of sidecar
-- ARGV[2] at KEYS[3] (arrival ARGV[3], ttl ARGV[4] ms) or, with a ttl of 0,
-- removes it (none for ''), in the same atomic step (marks.lua prepended):
-- a sidecar that lets a lock go to an older waiter of another sidecar
-- keeps its own next caller's place in line. A deleted key is announced on the key's
-- channel, as release.lua does, and also as 'r <key>' on the channel
-- ARGV[5] (unless ''): the sidecar that asked for it (a "wanted" message's
-- reply channel) hears it on the subscription it always has. Returns 1 if
-- the key was deleted, else 0.
local key, holder_key, marks_key = KEYS[1], KEYS[2], KEYS[3]
local value, sidecar, arrival, mark_ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local notify = ARGV[5]

if mark_ttl > 0 then
	mark_put(marks_key, sidecar, arrival, mark_ttl, server_ms())
elseif sidecar ~= '' then
	redis.call('HDEL', marks_key, sidecar)
end
if redis.call('GET', key) ~= value then
	return 0
end
-- While the key is this value's, its record is this value's or an older
-- tenure's left behind: either goes.
redis.call('DEL', key, holder_key)
redis.pcall('PUBLISH', key, 'released')
if notify ~= '' then
	redis.pcall('PUBLISH', notify, 'r ' .. key)
end
return 1
