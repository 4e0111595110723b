-- RecordMembers: KEYS[1] is a sorted set of member lists scored by when
-- their record expires, in milliseconds on this server's clock. Drops the
-- expired records, adds ARGV[1] (or moves its expiry later, never earlier)
-- to expire ARGV[2] milliseconds from now, lets the whole key expire with
-- its last record, and returns every live list. A sorted set rather than a
-- hash with HEXPIRE, which needs Redis 7.4; TIME in a script that writes
-- needs Redis 5+ (effects replication).
local key, members, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A record expiring at now has expired, as a key's PX expiry has.
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
redis.call('ZADD', key, 'GT', string.format('%d', now + ttl), members)

-- The last record to expire decides when the key goes.
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', key, string.format('%d', math.floor(tonumber(last[2]))))

return redis.call('ZRANGE', key, 0, -1)
