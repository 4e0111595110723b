-- AcquireWriter: AcquireFenced (see acquire_fenced.lua) of the writer key
-- KEYS[1] for ARGV[1] with a ttl of ARGV[2] milliseconds, also refused while
-- any reader key KEYS[4..] is held. KEYS[2] is the fence key, KEYS[3] the
-- intent key. Refused, it sets the intent to ARGV[1] so that no new reader
-- is admitted while this writer waits, and returns {0, pttl, 0} with the
-- longest remaining ttl of what refused it (0 if none has an expiry).
-- Granted, it deletes its own intent and returns {1, 0, floor}. Needs
-- Redis 5+ (TIME in a script that writes relies on effects replication).
local writer_key, fence_key, intent_key = KEYS[1], KEYS[2], KEYS[3]
local value, ttl = ARGV[1], ARGV[2]
local reader_keys = {unpack(KEYS, 4)}

-- Another writer's intent stays: it still waits.
local function granted()
	if redis.call('GET', intent_key) == value then
		redis.call('DEL', intent_key)
	end
	return {1, 0, (fence_floor(fence_key))}
end

-- A retried AcquireWriter whose first reply was lost must succeed again
-- and refresh the ttl the caller now counts from.
local holder = redis.call('GET', writer_key)
if holder == value then
	redis.call('PEXPIRE', writer_key, ttl)
	return granted()
end

-- The blockers' longest pttl: the soonest the caller may hope to get in.
local longest, blocked = 0, holder ~= false
if blocked then
	longest = math.max(longest, redis.call('PTTL', writer_key))
end
-- One EXISTS spares a PTTL per reader key in the usual, reader-free case.
if #reader_keys > 0 and redis.call('EXISTS', unpack(reader_keys)) > 0 then
	blocked = true
	for _, k in ipairs(reader_keys) do
		longest = math.max(longest, redis.call('PTTL', k))
	end
end
if blocked then
	redis.call('SET', intent_key, value, 'PX', ttl)
	return {0, longest, 0}
end

redis.call('SET', writer_key, value, 'NX', 'PX', ttl)
return granted()
