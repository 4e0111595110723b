-- Release: delete KEYS[1] only if it holds ARGV[1], so a holder whose lease
-- expired can never delete a newer holder's key. Returns the number of keys
-- deleted (0 or 1).
--
-- A successful delete is announced with PUBLISH on the channel named after
-- the key itself (payload 'released'), so sidecars waiting for the key wake
-- at once (see Node.WatchReleases). Channels and keys are separate
-- namespaces, so the names cannot clash. pcall, not call: an ACL user
-- without channel permission (the Redis 7 default for new users) would make
-- PUBLISH raise after the DEL already happened, failing a release that did
-- succeed; the announcement is only best-effort.
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	redis.pcall('PUBLISH', KEYS[1], 'released')
	return 1
end
return 0
