package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sidelock/sidelock/pkg/redlock"
)

func rwKeys() redlock.RWKeys {
	return redlock.RWKeys{Writer: "k#w", Intent: "k#i", Readers: []string{"k#r1", "k#r2"}}
}

// Every pair of subsets of failed masters, on 5: a reader granted while
// the masters of one subset were down and a writer asking while those of
// another were down are never both granted, and each is granted exactly
// when a majority answered and nobody conflicting held a majority. The
// reader's keys stay where they were written; the writer meets them on
// every majority it can reach.
func TestReaderAndWriterEveryPairOfFailedSubsets(t *testing.T) {
	const n = 5
	ctx := context.Background()
	for _, readDown := range subsets(n) {
		for _, writeDown := range subsets(n) {
			mem, nodes := masters(n)
			l := newLocker(t, nodes)
			setDown := func(mask int) {
				for i, m := range mem {
					m.SetDown(mask&(1<<i) != 0)
				}
			}
			setDown(readDown)
			_, readErr := l.AcquireReader(ctx, "k#r1", "reader", ttl, rwKeys())
			setDown(writeDown)
			_, writeErr := l.AcquireWriter(ctx, "writer", ttl, rwKeys())
			readUp, writeUp := n-len(members(readDown, n)), n-len(members(writeDown, n))
			name := fmt.Sprintf("reader down=%v, writer down=%v", members(readDown, n), members(writeDown, n))
			if (readErr == nil) != (readUp >= 3) {
				t.Fatalf("%s: reader %v", name, readErr)
			}
			if readErr == nil && writeErr == nil {
				t.Fatalf("%s: reader and writer both granted", name)
			}
			if readErr != nil && (writeErr == nil) != (writeUp >= 3) {
				t.Fatalf("%s: with no reader, writer %v", name, writeErr)
			}
			if readErr == nil && writeUp >= 3 && !errors.Is(writeErr, redlock.ErrLockHeld) {
				t.Fatalf("%s: writer %v, want held by the reader", name, writeErr)
			}
		}
	}
}

// A writer that holds keeps readers out; one refused by readers keeps new
// readers out (its intent) until it is granted; readers refused only by
// other readers of the key they asked for are told so, so they can try
// another key.
func TestReaderRefusals(t *testing.T) {
	ctx := context.Background()
	_, nodes := masters(3)
	l := newLocker(t, nodes)
	rw := rwKeys()
	if _, err := l.AcquireReader(ctx, "k#r1", "r1", ttl, rw); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AcquireReader(ctx, "k#r1", "r2", ttl, rw); !errors.Is(err, redlock.ErrReaderKeyHeld) || !errors.Is(err, redlock.ErrLockHeld) {
		t.Fatalf("a reader on a taken key: %v, want ErrReaderKeyHeld (and held)", err)
	}
	if _, err := l.AcquireWriter(ctx, "w", ttl, rw); !errors.Is(err, redlock.ErrLockHeld) {
		t.Fatalf("a writer while a reader holds: %v, want held", err)
	}
	_, err := l.AcquireReader(ctx, "k#r2", "r2", ttl, rw)
	if !errors.Is(err, redlock.ErrLockHeld) || errors.Is(err, redlock.ErrReaderKeyHeld) {
		t.Fatalf("a new reader while a writer waits: %v, want held by the writer", err)
	}
	if err := l.Release(ctx, "k#r1", "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AcquireWriter(ctx, "w", ttl, rw); err != nil {
		t.Fatalf("the writer once the reader left: %v", err)
	}
	if _, err := l.AcquireReader(ctx, "k#r2", "r2", ttl, rw); !errors.Is(err, redlock.ErrLockHeld) || errors.Is(err, redlock.ErrReaderKeyHeld) {
		t.Fatalf("a reader while the writer holds: %v, want held by the writer", err)
	}
}
