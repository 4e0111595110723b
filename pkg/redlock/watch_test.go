package redlock_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// plainNode hides memnode's WatchReleases: a master that announces nothing.
type plainNode struct{ redlock.Node }

func TestLockerWatchReleases(t *testing.T) {
	mem, nodes := masters(3)
	nodes = append(nodes, plainNode{memnode.New("plain-1")}, plainNode{memnode.New("plain-2")})
	l := newLocker(t, nodes)
	ctx := t.Context()

	var fired, firedOther atomic.Int64
	cancel := l.WatchReleases("k", func() { fired.Add(1) })
	defer l.WatchReleases("other", func() { firedOther.Add(1) })()

	if _, err := l.Acquire(ctx, "k", "A", ttl); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "k", "A"); err != nil {
		t.Fatal(err)
	}
	// memnode announces before Release returns: once per watching master
	// that held the key, none from the masters that cannot announce.
	if got := fired.Load(); got != int64(len(mem)) {
		t.Fatalf("notify fired %d times for one release over %d announcing masters, want %d", got, len(mem), len(mem))
	}
	if got := firedOther.Load(); got != 0 {
		t.Fatalf("watcher of another key fired %d times", got)
	}

	// A release that deletes nothing announces nothing.
	if err := l.Release(ctx, "k", "A"); err != nil {
		t.Fatal(err)
	}
	if got := fired.Load(); got != int64(len(mem)) {
		t.Fatalf("notify fired for a release of an absent key: %d times in all", got)
	}

	// One cancel ends the watch on every master, and may be repeated.
	cancel()
	cancel()
	if _, err := l.Acquire(ctx, "k", "B", ttl); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "k", "B"); err != nil {
		t.Fatal(err)
	}
	if got := fired.Load(); got != int64(len(mem)) {
		t.Fatalf("notify fired after cancel: %d times in all", got)
	}
}

// TestLockerWatchReleasesCoalesced shows the documented use: a waiter woken
// by the holder's release, however many masters announce it, with a poll
// timer as the fallback.
func TestLockerWatchReleasesCoalesced(t *testing.T) {
	_, nodes := masters(5)
	l := newLocker(t, nodes)
	ctx := t.Context()
	if _, err := l.Acquire(ctx, "k", "holder", ttl); err != nil {
		t.Fatal(err)
	}

	wake := make(chan struct{}, 1)
	defer l.WatchReleases("k", func() {
		select {
		case wake <- struct{}{}:
		default: // a wake-up is already pending: coalesce
		}
	})()

	go func() {
		time.Sleep(10 * time.Millisecond)
		_ = l.Release(ctx, "k", "holder")
	}()
	for {
		if _, err := l.Acquire(ctx, "k", "waiter", ttl); err == nil {
			break
		}
		select {
		case <-wake:
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter was not woken by the release")
		}
	}
}
