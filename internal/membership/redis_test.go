package membership_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/membership"
	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// sidecar opens a sidecar's own connections to the given masters and runs
// Check with their addresses as its list of group "east".
func sidecar(t *testing.T, recordTTL time.Duration, servers ...*redistest.Server) (membership.Result, error) {
	t.Helper()
	nodes := make([]redlock.Node, len(servers))
	addrs := make([]string, len(servers))
	for i, s := range servers {
		n := redisnode.New(redisnode.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = n.Close() })
		nodes[i], addrs[i] = n, s.Addr()
	}
	return membership.Check(t.Context(), prefix, group, addrs, nodes, recordTTL, timeout)
}

// Replacing a master in one step is caught by the real masters' records,
// removing one is not, and the records vanish from the masters ttl after
// their last refresh.
func TestRealMasters(t *testing.T) {
	srv := redistest.StartN(t, 4)
	const recordTTL = 500 * time.Millisecond

	if _, err := sidecar(t, recordTTL, srv[0], srv[1], srv[2]); err != nil {
		t.Fatalf("old list: %v", err)
	}
	if _, err := sidecar(t, recordTTL, srv[0], srv[1]); err != nil {
		t.Fatalf("old list without a master: %v", err)
	}
	res, err := sidecar(t, recordTTL, srv[0], srv[1], srv[3])
	if !errors.Is(err, membership.ErrSplitMembership) {
		t.Fatalf("one master replaced while the old list is live: err = %v, want ErrSplitMembership", err)
	}
	t.Log(err)
	old := membership.Canonical([]string{srv[0].Addr(), srv[1].Addr(), srv[2].Addr()})
	if len(res.Incompatible) != 1 || res.Incompatible[0] != old || len(res.Lists[old]) != 2 || len(res.Answered) != 3 {
		t.Errorf("result %+v, want the old list seen on the two shared masters", res)
	}

	// The records carry the masters' expiry: the key goes with the last.
	raw := redis.NewClient(&redis.Options{Addr: srv[0].Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = raw.Close() })
	key := membership.Key(prefix, group)
	if pttl, err := raw.PTTL(t.Context(), key).Result(); err != nil || pttl <= 0 || pttl > recordTTL {
		t.Errorf("PTTL(%q) = %v, %v; want in (0, %v]", key, pttl, err, recordTTL)
	}
	if n, err := raw.ZCard(t.Context(), key).Result(); err != nil || n != 3 {
		t.Errorf("ZCARD(%q) = %d, %v; want the 3 lists", key, n, err)
	}

	// Once every record lapsed the replacement is accepted.
	deadline := time.Now().Add(5 * time.Second)
	for raw.Exists(t.Context(), key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%q still on the master long after its records' ttl", key)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := sidecar(t, recordTTL, srv[0], srv[1], srv[3]); err != nil {
		t.Fatalf("new list after the old one expired: %v", err)
	}
}
