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
local r = redis.call('HGETALL', KEYS[3])
local rec = {}
for i = 1, #r, 2 do
	rec[r[i]] = r[i + 1]
end
local left = 0
if rec.s == 'idle' then
	left = tonumber(rec.u) - server_ms()
	if left < 0 then
		left = 0
	end
end
return {value, pttl, counter, rec.v or '', rec.f or '0', rec.g or '', rec.o or '', rec.s or '', left, rec.c or '', rec.n or '0'}
