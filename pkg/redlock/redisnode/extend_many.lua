-- ExtendMany: Extend (see extend.lua) for many keys in one call. KEYS are
-- the keys; ARGV holds, for key i, its value at 2i-1 and its ttl in
-- milliseconds at 2i. Returns one answer per key, in order: 1 renewed,
-- 2 absent (nothing written), 0 another value holds it.
local out = {}
for i, key in ipairs(KEYS) do
	local value, ttl = ARGV[2 * i - 1], ARGV[2 * i]
	local current = redis.call('GET', key)
	if current == value then
		redis.call('PEXPIRE', key, ttl)
		out[i] = 1
	elseif current == false then
		out[i] = 2
	else
		out[i] = 0
	end
end
return out
