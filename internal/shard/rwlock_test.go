package shard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// The keys of one read/write lock must share their masters, or a reader
// and a writer would be admitted by different quorums.
func TestKeysDerivedFromANameRouteWithIt(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var groups []*redlock.Locker
	for i := range 4 {
		g, _ := memGroup(t, fmt.Sprintf("g%d", i), now)
		groups = append(groups, g)
	}
	r := router(t, groups, nil)
	spread := map[string]bool{}
	for i := range 200 {
		key := fmt.Sprintf("sidelock:name-%d", i)
		home, _ := r.GroupOf(key)
		spread[home] = true
		for _, derived := range []string{key + "#w", key + "#i", key + "#r1", key + "#r64", key + "#3"} {
			if got, _ := r.GroupOf(derived); got != home {
				t.Fatalf("%s routes to %s, %s to %s", derived, got, key, home)
			}
		}
	}
	if len(spread) != len(groups) {
		t.Errorf("200 names used %d of %d groups", len(spread), len(groups))
	}
}

func rwKeys(key string) redlock.RWKeys {
	return redlock.RWKeys{Writer: key + "#w", Intent: key + "#i", Readers: []string{key + "#r1", key + "#r2"}}
}

// A writer holding a moving read/write lock through the migration phase
// excludes readers on the old list and on the new list alone.
func TestMovingRWLockExcludesReadersOfNeighbouringPhases(t *testing.T) {
	ctx := context.Background()
	m := newMigration(t)
	rw := rwKeys(m.key)
	w, err := m.migrating.AcquireWriter(ctx, "writer", ttl, rw)
	if err != nil {
		t.Fatal(err)
	}
	if w.Fence == 0 {
		t.Error("the writer's grant has no fence")
	}
	for name, r := range map[string]interface {
		AcquireReader(context.Context, string, string, time.Duration, redlock.RWKeys) (redlock.Grant, error)
	}{"old": m.old, "new": m.new} {
		if _, err := r.AcquireReader(ctx, rw.Readers[0], "reader-"+name, ttl, rw); !errors.Is(err, redlock.ErrLockHeld) {
			t.Errorf("a reader on the %s list: %v, want held", name, err)
		}
	}
	if err := m.migrating.Release(ctx, rw.Writer, "writer"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.migrating.AcquireReader(ctx, rw.Readers[1], "reader", ttl, rw); err != nil {
		t.Fatalf("a reader once the writer left: %v", err)
	}
	if _, err := m.new.AcquireWriter(ctx, "writer-2", ttl, rw); !errors.Is(err, redlock.ErrLockHeld) {
		t.Errorf("a writer on the new list while a migrating reader holds: %v, want held", err)
	}
}
