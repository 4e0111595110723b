-- marks: the waiter marks of a lock key and its holder record, for the
-- scripts of a tenure (tenure.go). Prepended (tenure.go) to them.
--
-- The marks are a hash: one field per waiting sidecar, "<arrival> <expiry>",
-- the arrival of its waiting caller in microseconds on that sidecar's clock
-- (the same number goes to every master, so they all order marks alike;
-- ties by sidecar id) and the mark's expiry in milliseconds on this
-- server's clock. The holder record is one string of eight fields, each
-- ended by a newline (which no value, owner or channel holds): v (the
-- key's value it belongs to), f (the holder's fence), g (its grant id), o
-- (its owner), s ('held' or 'idle'), u (an idle record: until when it
-- lingers, ms on this server's clock), c (the channel its sidecar hears
-- "wanted" on) and n (the note's sequence number). One string, not a hash:
-- a record is written with every take, and a SET costs a master less than
-- a hash's three commands.

-- server_ms is this server's clock in ms: of t, a TIME reply, or read now.
local function server_ms(t)
	t = t or redis.call('TIME')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- marks_oldest drops the expired marks and returns the oldest live mark
-- of a sidecar other than self: its arrival (a string), its sidecar and
-- its remaining ms, or nil; and whether any mark (self's too) was there.
local function marks_oldest(marks_key, self, now)
	local all = redis.call('HGETALL', marks_key)
	local best, best_n, best_sc, best_left
	for i = 1, #all, 2 do
		local sc, v = all[i], all[i + 1]
		local arrival, expiry = string.match(v, '^(%d+) (%d+)$')
		local n, e = tonumber(arrival), tonumber(expiry)
		if not n or e <= now then
			redis.call('HDEL', marks_key, sc)
		elseif sc ~= self and (not best_n or n < best_n or (n == best_n and sc < best_sc)) then
			best, best_n, best_sc, best_left = arrival, n, sc, e - now
		end
	end
	return best, best_sc, best_left, #all > 0
end

-- mark_put leaves (or refreshes) sidecar's mark for ttl ms; the hash
-- lives at least as long as its newest mark.
local function mark_put(marks_key, sc, arrival, ttl, now)
	redis.call('HSET', marks_key, sc, arrival .. ' ' .. string.format('%d', now + ttl))
	if redis.call('PTTL', marks_key) < ttl then
		redis.call('PEXPIRE', marks_key, ttl)
	end
end

-- older: whether the mark (a, asc) is older than (b, bsc).
local function older(a, asc, b, bsc)
	local na, nb = tonumber(a), tonumber(b)
	return na < nb or (na == nb and asc < bsc)
end

-- record_fields splits a holder record into its eight fields.
local function record_fields(r)
	local f, i = {}, 1
	for field in string.gmatch(r, '([^\n]*)\n') do
		f[i] = field
		i = i + 1
	end
	return f
end

-- record_of returns key's holder record as a table when it belongs to
-- value, else nil.
local function record_of(holder_key, value)
	local r = redis.call('GET', holder_key)
	if not r then
		return nil
	end
	local f = record_fields(r)
	if f[1] ~= value then
		return nil
	end
	return {v = f[1], f = f[2], g = f[3], o = f[4], s = f[5], u = f[6], c = f[7], n = f[8]}
end

-- record_put writes the holder record of value (every field a string).
local function record_put(holder_key, value, fence, grant, owner, state, until_ms, channel, seq, retention)
	local r = value .. '\n' .. fence .. '\n' .. grant .. '\n' .. owner .. '\n' .. state .. '\n' .. until_ms .. '\n' .. channel .. '\n' .. seq .. '\n'
	redis.call('SET', holder_key, r, 'PX', retention)
end

