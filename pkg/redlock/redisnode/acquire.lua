-- Acquire: claim KEYS[1] for ARGV[1] with a ttl of ARGV[2] milliseconds
-- (take_key, prepended). Returns {1, 0} when the caller holds the key
-- afterwards, or {0, holder_pttl} when another value holds it (0 if it has
-- no expiry). One script makes "set if absent, else refresh if mine" atomic.
local held = take_key(KEYS[1], ARGV[1], ARGV[2])
if held >= 0 then
	return {0, held}
end
return {1, 0}
