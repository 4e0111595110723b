package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// ExtendMany gives each item the verdict Extend would, across every subset
// of failed masters, and says when another value holds an item.
func TestExtendManyMatchesExtend(t *testing.T) {
	for _, down := range subsets(3) {
		mem, nodes := masters(3)
		l := newLocker(t, nodes)
		var items []redlock.ExtendItem
		for i := range 5 {
			key := fmt.Sprintf("k%d", i)
			if _, err := l.Acquire(context.Background(), key, "v", ttl); err != nil {
				t.Fatal(err)
			}
			items = append(items, redlock.ExtendItem{Key: key, Value: "v", TTL: ttl})
		}
		// k4 was taken over by another value on every master.
		for _, m := range mem {
			m.Release(context.Background(), "k4", "v")
			m.Acquire(context.Background(), "k4", "thief", ttl)
		}
		for _, i := range members(down, 3) {
			mem[i].SetDown(true)
		}
		grants, errs := l.ExtendMany(context.Background(), items)
		quorum := 3-len(members(down, 3)) >= 2
		for i := range items {
			wantOK := quorum && i < 4
			if wantOK != (errs[i] == nil) || (wantOK && !grants[i].ValidUntil.After(time.Now())) {
				t.Errorf("down %v item %d: %v", members(down, 3), i, errs[i])
			}
		}
		if len(members(down, 3)) == 0 && !errors.Is(errs[4], redlock.ErrNotHeld) {
			t.Errorf("taken-over item: %v, want ErrNotHeld", errs[4])
		}
	}
}

func TestExtendManySplitsLargeBatches(t *testing.T) {
	mem, nodes := masters(3)
	l := newLocker(t, nodes)
	items := make([]redlock.ExtendItem, 2500)
	for i := range items {
		items[i] = redlock.ExtendItem{Key: fmt.Sprintf("big/%d", i), Value: "v", TTL: ttl}
		for _, m := range mem {
			m.Acquire(context.Background(), items[i].Key, "v", ttl)
		}
	}
	_, errs := l.ExtendMany(context.Background(), items)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
	}
}

// A batch renewal that finds its keys gone does not count them or write
// them back: the lock may have been free and granted meanwhile.
func TestExtendManyNeverRevivesMissingKeys(t *testing.T) {
	mem, nodes := masters(3)
	l := newLocker(t, nodes)
	items := []redlock.ExtendItem{{Key: "lapsed", Value: "v", TTL: ttl}, {Key: "one-left", Value: "v", TTL: ttl}}
	mem[0].Acquire(context.Background(), "one-left", "v", ttl)
	_, errs := l.ExtendMany(context.Background(), items)
	for i, err := range errs {
		if !errors.Is(err, redlock.ErrNoQuorum) {
			t.Errorf("item %d: %v, want ErrNoQuorum (missing keys do not count)", i, err)
		}
	}
	for i, m := range mem {
		if v := keyOn(t, m, "lapsed"); v != "" {
			t.Errorf("master %d: the lapsed key came back", i)
		}
	}
}
