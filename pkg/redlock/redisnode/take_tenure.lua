-- TakeTenure: take KEYS[1] for ARGV[1] (ttl ARGV[2] ms) under the mark rule,
-- reserving a block of ARGV[6] fences, and write the holder record with a
-- committed fence (marks.lua and fence_floor.lua prepended).
-- KEYS: key, fence counter, holder record, marks. ARGV: value, ttl, from
-- (a key held by it counts as free: a hand-over; '' for none), fencing
-- mode (0 none, 1 proposal, 2 at once), proposal (mode 1: the block's top;
-- mode 2: the fence asked to be above), block, retention ms, grant, owner,
-- channel (the taker's: written in the record, and the reply channel of
-- a "wanted" message), sidecar, arrival (µs, on the caller's clock), mark
-- ttl ms (0: no mark on refusal). "wanted" is published on the holder
-- record's channel as 'w <arrival> <mark ttl> <reply channel> <key>'.
-- A grant removes the caller's own mark.
-- Returns {acquired, holder_pttl, fence, committed, prev, idle, idle_ttl,
-- by_mark, oldest_arrival, oldest_ttl, oldest_sidecar}: fence is the
-- committed top, else the floor read.
local key, fence_key, holder_key, marks_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local value, ttl, from = ARGV[1], ARGV[2], ARGV[3]
local mode, proposal, block, retention = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local grant, owner, channel = ARGV[8], ARGV[9], ARGV[10]
local sidecar, arrival, mark_ttl = ARGV[11], ARGV[12], tonumber(ARGV[13])

-- One TIME for the marks and the fence floor.
local clock = redis.call('TIME')
local now = server_ms(clock)
local oldest, oldest_sc, oldest_left, marked = marks_oldest(marks_key, sidecar, now)
local behind = oldest and older(oldest, oldest_sc, arrival, sidecar)
-- A plain take that no older mark holds back claims a free key in one
-- command (the common case: an uncontended acquire); else, or when the key
-- is there, it reads the key as below.
local cur, claimed = nil, false
if from == '' and not behind then
	claimed = redis.call('SET', key, value, 'NX', 'PX', ttl) and true or false
end
if claimed then
	cur = false
else
	cur = redis.call('GET', key)
end
-- A hand-over: the giver's key counts as free, but is replaced only once
-- the taker may have it (a refusal leaves it to the giver to release).
if from ~= '' and cur == from then
	cur = false
end

local function answer(acquired, pttl, fence, committed, prev, idle, idle_ttl, by_mark)
	if not oldest then
		return {acquired, pttl, fence, committed, prev, idle, idle_ttl, by_mark, 0, 0, ''}
	end
	return {acquired, pttl, fence, committed, prev, idle, idle_ttl, by_mark, tonumber(oldest), oldest_left, oldest_sc}
end

local function leave_mark()
	if mark_ttl > 0 then
		mark_put(marks_key, sidecar, arrival, mark_ttl, now)
	end
end

if cur and cur ~= value then
	-- Held by another value: refused. A lingering holder is asked to let go.
	local pttl = redis.call('PTTL', key)
	if pttl < 0 then
		pttl = 0
	end
	local rec = record_of(holder_key, cur)
	local idle, idle_ttl = 0, 0
	if rec and rec.s == 'idle' and tonumber(rec.u) > now then
		idle, idle_ttl = 1, tonumber(rec.u) - now
	end
	leave_mark()
	if rec and rec.c ~= '' and (mark_ttl > 0 or idle == 1) then
		redis.pcall('PUBLISH', rec.c, 'w ' .. arrival .. ' ' .. string.format('%d', mark_ttl) .. ' ' .. channel .. ' ' .. key)
	end
	return answer(0, pttl, 0, 0, 0, idle, idle_ttl, 0)
end

if claimed then
	-- Taken above.
elseif not cur then
	if behind then
		-- Free, but an older waiter of another sidecar is in line.
		leave_mark()
		return answer(0, oldest_left, 0, 0, 0, 0, 0, 1)
	end
	redis.call('SET', key, value, 'PX', ttl) -- replaces the giver's value in a hand-over
else
	redis.call('PEXPIRE', key, ttl) -- a retried take
end
-- Its place in line is taken: a mark left behind would outlive a tenure
-- lost with its sidecar and hold a free key back from others.
if marked then
	redis.call('HDEL', marks_key, sidecar)
end

if mode == 0 then
	record_put(holder_key, value, '0', grant, owner, 'held', '0', channel, '0', retention)
	return answer(1, 0, 0, 0, 0, 0, 0, 0)
end
local floor, counter = fence_floor(fence_key, clock)
if mode == 2 then
	local first = floor
	if proposal > first then
		first = proposal
	end
	first = first + 1
	local top = first + block - 1
	redis.call('SET', fence_key, string.format('%d', top), 'PX', retention)
	record_put(holder_key, value, string.format('%d', first), grant, owner, 'held', '0', channel, '0', retention)
	return answer(1, 0, top, 1, counter, 0, 0, 0)
end
if proposal - block + 1 <= floor then
	return answer(1, 0, floor, 0, 0, 0, 0, 0)
end
redis.call('SET', fence_key, ARGV[5], 'PX', retention)
record_put(holder_key, value, string.format('%d', proposal - block + 1), grant, owner, 'held', '0', channel, '0', retention)
return answer(1, 0, proposal, 1, counter, 0, 0, 0)
