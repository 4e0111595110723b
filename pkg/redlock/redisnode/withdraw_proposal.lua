-- WithdrawProposal: Release (see release.lua) of a failed grant that also
-- takes back the fence proposal it committed (acquire_proposed.lua): when
-- KEYS[1] held ARGV[1] and the counter at KEYS[2] is still the proposal
-- ARGV[2], the counter goes back to ARGV[3] (ttl ARGV[4] ms; '0' deletes
-- it). Nothing else moves the counter while the key is this grant's, and
-- the proposal was never a final fence, so putting back what it replaced
-- is safe; left there, it would show as the next holder's fence wherever
-- that holder's key is put back. Returns 1 if the key was deleted, else 0.
local key, fence_key, value = KEYS[1], KEYS[2], ARGV[1]
local proposal, prev, retention = ARGV[2], ARGV[3], ARGV[4]

if redis.call('GET', key) ~= value then
	return 0
end
redis.call('DEL', key)
redis.pcall('PUBLISH', key, 'released')
if redis.call('GET', fence_key) == proposal then
	if prev == '0' then
		redis.call('DEL', fence_key)
	else
		redis.call('SET', fence_key, prev, 'PX', retention)
	end
end
return 1
