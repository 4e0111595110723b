-- AcquireFenced: Acquire (take_key, prepended) that, when the caller holds
-- KEYS[1] afterwards, also returns the fence floor of KEYS[2]: the larger of
-- the stored counter and this server's clock in microseconds. Reading the
-- floor atomically with taking the key is what makes fences monotonic.
-- Returns {1, 0, floor} or {0, holder_pttl, 0}. Needs Redis 5+ (TIME in a
-- script that writes relies on effects replication).
local held = take_key(KEYS[1], ARGV[1], ARGV[2])
if held >= 0 then
	return {0, held, 0}
end
return {1, 0, (fence_floor(KEYS[2]))}
