package redisnode

import "github.com/redis/go-redis/v9"

// PairScripts are the scripts a Node runs, one call per master, for an
// uncontended fenced acquire over a quorum of the given number of masters
// and for its release: acquire_committed.lua on a single master,
// acquire_proposed.lua on several (both take KEYS key, fence key and ARGV
// value, ttl ms, fence argument, retention ms), and release.lua (KEYS key,
// ARGV value). tools/floor sends exactly these, so that the platform's
// floor it measures is the floor of this design.
func PairScripts(masters int) (acquire, release *redis.Script) {
	if masters == 1 {
		return acquireCommittedScript, releaseScript
	}
	return acquireProposedScript, releaseScript
}
