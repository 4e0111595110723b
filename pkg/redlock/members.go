package redlock

import (
	"context"
	"time"
)

// MemberRecorder is implemented by nodes that keep member-list records, so
// that sidecars running different master lists for one quorum group can
// notice each other. Configuration alone cannot tell them: during a
// rollout old and new sidecars each read only their own list, and the
// masters they share are the only place both lists meet. Both shipped
// nodes implement it; package membership applies the quorum-intersection
// rule to what it returns.
type MemberRecorder interface {
	// RecordMembers, in one atomic step on the master, drops the records
	// at key that have expired, adds members (an opaque string) or
	// refreshes its record to expire ttl from the master's own clock (a
	// record's expiry never moves earlier), and returns every live record
	// at key, members included, in no particular order. The whole key
	// expires with its last record, so an unused one does not linger.
	//
	// key must be used for nothing else: it holds no lock value.
	RecordMembers(ctx context.Context, key, members string, ttl time.Duration) (live []string, err error)
}
