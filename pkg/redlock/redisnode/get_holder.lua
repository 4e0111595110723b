-- GetHolder: {value, pttl, counter, record...} of KEYS[1], its fence
-- counter at KEYS[2] and its holder record at KEYS[3], read in one atomic
-- step (marks.lua prepended). value is '' when the key is absent; the
-- counter and the record's numbers are strings (Lua would round large
-- numbers through a double otherwise); the record is {v, f, g, o, s,
-- idle_left_ms, c, n}, with v '' when there is none.
local value = redis.call('GET', KEYS[1]) or ''
local counter = redis.call('GET', KEYS[2]) or '0'
local pttl = 0
if value ~= '' then
	pttl = redis.call('PTTL', KEYS[1])
	if pttl < 0 then
		pttl = 0
	end
end
local r = redis.call('GET', KEYS[3])
local f = {}
if r then
	f = record_fields(r)
end
local left = 0
if f[5] == 'idle' then
	left = tonumber(f[6]) - server_ms()
	if left < 0 then
		left = 0
	end
end
return {value, pttl, counter, f[1] or '', f[2] or '0', f[3] or '', f[4] or '', f[5] or '', left, f[7] or '', f[8] or '0'}
