package redisnode

import "github.com/redis/go-redis/v9"

// PairScripts are the scripts a Node runs, one call per master, for an
// uncontended acquire of a plain lock and its release, as the sidecar
// sends them (a tenure's: internal/lease/tenure.go): take_tenure.lua
// (KEYS key, fence key, holder record, marks; ARGV value, ttl ms, from,
// fencing mode, proposal, block, retention ms, grant, owner, channel,
// sidecar, arrival µs, mark ttl ms) on any number of masters, and
// release_tenure.lua (KEYS key, holder record, marks; ARGV value, sidecar,
// arrival, mark ttl ms, notify channel). tools/floor sends exactly these,
// so that the platform's floor it measures is the floor of this design.
// (The sidecar sends the release after its linger, off the caller's path:
// tools/floor's HandlerReleasingAfter.)
func PairScripts(_ int) (acquire, release *redis.Script) {
	return takeTenureScript, releaseTenureScript
}
