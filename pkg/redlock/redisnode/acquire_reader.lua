-- AcquireReader: Acquire (see acquire.lua) of a reader's key KEYS[1] for
-- ARGV[1] with a ttl of ARGV[2] milliseconds, refused with nothing written
-- while a writer holds KEYS[2] or has declared its intent at KEYS[3].
-- Returns {1, 0, 0} when the caller holds its key afterwards, else
-- {0, blocker_pttl, taken} (pttl 0 if no expiry), taken 1 when only another
-- reader holding KEYS[1] refused it. One script makes the check and the
-- set atomic, so no reader slips in beside a writer.
local key, writer_key, intent_key = KEYS[1], KEYS[2], KEYS[3]
local value, ttl = ARGV[1], ARGV[2]

local function pttl(k)
	local ms = redis.call('PTTL', k)
	if ms < 0 then
		return 0
	end
	return ms
end

-- A reader already in stays in (and a retried call is idempotent), even
-- when a writer has declared its intent since.
if redis.call('GET', key) == value then
	redis.call('PEXPIRE', key, ttl)
	return {1, 0, 0}
end

for _, blocker in ipairs({writer_key, intent_key}) do
	if redis.call('EXISTS', blocker) == 1 then
		return {0, pttl(blocker), 0}
	end
end

if redis.call('SET', key, value, 'NX', 'PX', ttl) then
	return {1, 0, 0}
end
return {0, pttl(key), 1}
