-- HandOver: the step that makes AcquireProposed (acquire_proposed.lua,
-- which follows it in the same script) a hand-over: a key still held by
-- the giver's value ARGV[5] is the giver's to give, so it counts as free
-- and the taker's value ARGV[1] replaces it in one atomic step. Nothing is
-- announced: the lock was never free.
if redis.call('GET', KEYS[1]) == ARGV[5] then
	redis.call('DEL', KEYS[1])
end
