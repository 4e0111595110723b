-- PutBack: take_key (see take_key.lua) of KEYS[1] for ARGV[1] with a ttl of
-- ARGV[2] milliseconds, refused with nothing written while any of KEYS[2..]
-- (the excluders: a reader key's writer key, a writer key's reader keys)
-- holds any value. A renewal puts a read/write lock's key back with it
-- where it found the key missing: the check and the set are one atomic
-- step, as in the acquire scripts, so a key put back late never lands
-- beside the other side's. Returns 1 when ARGV[1] holds KEYS[1] afterwards,
-- else 0.
local key, value, ttl = KEYS[1], ARGV[1], ARGV[2]
if #KEYS > 1 and redis.call('EXISTS', unpack(KEYS, 2)) > 0 then
	return 0
end
if take_key(key, value, ttl) == -1 then
	return 1
end
return 0
