-- take_key: claim key for value with a ttl of ttl milliseconds, or refresh
-- the ttl when value holds it already: a retried acquire whose first reply
-- was lost must succeed again, and refresh the ttl the caller is now
-- counting from. Returns -1 when value holds key afterwards, else the
-- holder's remaining pttl (0 if it has no expiry). Prepended (redisnode.go,
-- fence.go) to every script that grants a lock key, so they all take it
-- alike.
local function take_key(key, value, ttl)
	if redis.call('SET', key, value, 'NX', 'PX', ttl) then
		return -1
	end
	if redis.call('GET', key) == value then
		redis.call('PEXPIRE', key, ttl)
		return -1
	end
	local pttl = redis.call('PTTL', key)
	if pttl < 0 then
		return 0
	end
	return pttl
end

