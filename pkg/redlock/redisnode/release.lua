-- Release: delete KEYS[1] only if it holds ARGV[1], so a holder whose lease
-- expired can never delete a newer holder's key. Returns the number of keys
-- deleted (0 or 1).
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('DEL', KEYS[1])
end
return 0
