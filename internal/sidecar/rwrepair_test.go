package sidecar_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// The assembled sidecar gives its lockers the read/write excluders
// (lease.Excluders): a reader's renewal that finds its key missing on a
// master where a writer's key sits (a write that landed late) does not put
// it back there, while it still has its quorum elsewhere.
func TestRenewalPutsNoReaderKeyBesideAWriter(t *testing.T) {
	mem := []*memnode.Node{memnode.New("a"), memnode.New("b"), memnode.New("c")}
	core := inprocess.Start(t, inprocess.Options{Nodes: []redlock.Node{mem[0], mem[1], mem[2]}})
	ctx := context.Background()
	rw := core.Leases().RWLocks()
	in, err := rw.Acquire(ctx, lease.Request{Name: "rw", Mode: lease.ModeShared, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	prefix := "sidelock:"
	readerKey := fmt.Sprintf("%srw#r%d", prefix, in.Slot)
	value, _, err := mem[2].Get(ctx, readerKey)
	if err != nil || value == "" {
		t.Fatalf("the reader's key on master c: %q, %v", value, err)
	}
	mem[2].Release(ctx, readerKey, value)
	mem[2].Acquire(ctx, prefix+"rw#w", "a late writer", time.Minute)
	if _, err := rw.Extend(ctx, "rw", in.Token, 0); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := mem[2].Get(ctx, readerKey); v != "" {
		t.Fatalf("the renewal put the reader's key back beside a writer's: %q", v)
	}
	if v, _, _ := mem[0].Get(ctx, readerKey); v != value {
		t.Fatalf("the reader's key on master a: %q, want %q", v, value)
	}
}
