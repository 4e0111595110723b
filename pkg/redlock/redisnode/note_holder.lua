-- NoteHolder: while KEYS[1] holds ARGV[1], write its holder record at
-- KEYS[2] (fence ARGV[2], grant ARGV[3], owner ARGV[4], idle for ARGV[5] ms
-- or held when 0, channel ARGV[6], sequence ARGV[7]; ttl ARGV[8] ms), unless
-- the record of this value already has a later sequence (a note that
-- landed late), and announce it on the channel named KEYS[2]. Reads the
-- marks at KEYS[3] either way (marks.lua prepended). Returns {written,
-- oldest_arrival, oldest_ttl, oldest_sidecar}; the oldest mark is of a
-- sidecar other than ARGV[9].
local key, holder_key, marks_key = KEYS[1], KEYS[2], KEYS[3]
local value, idle_ms, seq = ARGV[1], tonumber(ARGV[5]), tonumber(ARGV[7])

local now = server_ms()
local oldest, oldest_sc, oldest_left = marks_oldest(marks_key, ARGV[9], now)
local function answer(written)
	if not oldest then
		return {written, 0, 0, ''}
	end
	return {written, tonumber(oldest), oldest_left, oldest_sc}
end

if redis.call('GET', key) ~= value then
	return answer(0)
end
local rec = record_of(holder_key, value)
if rec and tonumber(rec.n) >= seq then
	return answer(0)
end
local state, until_ms = 'held', '0'
if idle_ms > 0 then
	state, until_ms = 'idle', string.format('%d', now + idle_ms)
end
record_put(holder_key, value, ARGV[2], ARGV[3], ARGV[4], state, until_ms, ARGV[6], ARGV[7], ARGV[8])
redis.pcall('PUBLISH', holder_key, 'holder')
return answer(1)
