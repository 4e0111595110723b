package lease_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sidelock/sidelock/internal/lease"
)

// A read/write lock's reader key is excluded by its writer key, its writer
// key by every reader key; locks, semaphore slots, intents and keys of
// another prefix by nothing.
func TestExcludersAreTheOtherSidesKeys(t *testing.T) {
	excluders := lease.Excluders("p:")
	if got := excluders("p:jobs/a#r7"); !slices.Equal(got, []string{"p:jobs/a#w"}) {
		t.Errorf("a reader key's excluders: %q", got)
	}
	readers := excluders("p:jobs/a#w")
	if len(readers) != lease.MaxReaders || readers[0] != "p:jobs/a#r1" || readers[lease.MaxReaders-1] != fmt.Sprintf("p:jobs/a#r%d", lease.MaxReaders) {
		t.Errorf("a writer key's excluders: %d, %q … %q", len(readers), readers[0], readers[len(readers)-1])
	}
	for _, key := range []string{"p:jobs/a", "p:jobs/a#3", "p:jobs/a#i", "p:jobs/a#r0", "p:jobs/a#r65", "p:jobs/a#r07", "q:jobs/a#w", "p:jobs/a#rw"} {
		if got := excluders(key); got != nil {
			t.Errorf("%s: excluders %q, want none", key, got)
		}
	}
}
