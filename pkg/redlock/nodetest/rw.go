package nodetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// Ttls the read/write subtests tell apart: a blocker's reported ttl must
// be the longest blocker's, and an intent's the refused writer's own.
const (
	readerTTL     = 3 * time.Second
	longReaderTTL = 6 * time.Second
)

// testReadWrite runs the redlock.RWNode subtests, or skips them all for a
// node that does not implement it. Each subtest has its own keys.
func testReadWrite(t *testing.T, s *suite) {
	s.rwNode(t)
	for _, tc := range []struct {
		name string
		test func(t *testing.T, s *suite, rw rwLock)
	}{
		{"ReaderOnFreeMaster", testReaderOnFreeMaster},
		{"ReadersCoexistOnePerKey", testReadersCoexist},
		{"ReaderRefusedWhileWriterHolds", testReaderRefusedByWriter},
		{"ReaderRefusedWhileIntentHeld", testReaderRefusedByIntent},
		{"ReaderInStaysInDespiteIntent", testReaderRefreshDespiteIntent},
		{"WriterFloorFollowsClockAndCounter", testWriterFloor},
		{"WriterRefusedByReadersDeclaresIntent", testWriterRefusedByReaders},
		{"WriterRefusedByWriterDeclaresIntent", testWriterRefusedByWriter},
		{"WriterGrantedDeletesOnlyOwnIntent", testWriterDeletesOwnIntent},
		{"IntentAndReadersExpire", testIntentAndReadersExpire},
		{"AbsentReaderKeysDoNotBlock", testAbsentReadersDoNotBlock},
		{"WriterRetryRefreshes", testWriterRetryRefreshes},
		{"ReadersAndWriterExcludeConcurrently", testReadersAndWriterRace},
		{"FinishedContextWritesNothing", testRWFinishedContext},
		{"PutBackOnlyWhereTheOtherSideHoldsNothing", testPutBack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sub := &suite{node: s.node, ctx: s.ctx, key: keyFor(t)}
			tc.test(t, sub, sub.rwLock())
		})
	}
}

// rwLock is one read/write lock's keys on the node under test.
type rwLock struct {
	node  redlock.RWNode
	keys  redlock.RWKeys
	fence string
}

// rwNode returns the node as an RWNode, or skips the test.
func (s *suite) rwNode(t *testing.T) redlock.RWNode {
	t.Helper()
	n, ok := s.node.(redlock.RWNode)
	if !ok {
		t.Skip("the node does not implement redlock.RWNode")
	}
	return n
}

func (s *suite) rwLock() rwLock {
	keys := redlock.RWKeys{Writer: s.key + "#w", Intent: s.key + "#i"}
	for i := range 4 {
		keys.Readers = append(keys.Readers, fmt.Sprintf("%s#r%d", s.key, i))
	}
	return rwLock{node: s.node.(redlock.RWNode), keys: keys, fence: redlock.FenceKey(keys.Writer)}
}

// readerResult and writerResult are what one acquisition answered.
type readerResult struct {
	ok        bool
	holderTTL time.Duration
	keyTaken  bool
}

type writerResult struct {
	ok        bool
	holderTTL time.Duration
	floor     int64
}

// reader asks for reader key slot for value.
func (s *suite) reader(t *testing.T, rw rwLock, slot int, value string, ttl time.Duration) readerResult {
	t.Helper()
	ok, holderTTL, taken, err := rw.node.AcquireReader(s.ctx, rw.keys.Readers[slot], value, ttl, rw.keys.Writer, rw.keys.Intent)
	if err != nil {
		t.Fatalf("AcquireReader(slot %d, %q): %v", slot, value, err)
	}
	return readerResult{ok, holderTTL, taken}
}

func (s *suite) mustRead(t *testing.T, rw rwLock, slot int, value string, ttl time.Duration) {
	t.Helper()
	if r := s.reader(t, rw, slot, value, ttl); !r.ok || r.holderTTL != 0 || r.keyTaken {
		t.Fatalf("AcquireReader(slot %d, %q) = %+v, want admitted", slot, value, r)
	}
}

// wantReaderBarred checks a reader is refused by a writer (holding or
// waiting) whose key has a remaining ttl in (minTTL, longTTL], and that
// the refusal wrote nothing.
func (s *suite) wantReaderBarred(t *testing.T, rw rwLock, slot int, value string, minTTL time.Duration) {
	t.Helper()
	before, _ := s.get(t, rw.keys.Readers[slot])
	r := s.reader(t, rw, slot, value, longTTL)
	if r.ok || r.keyTaken || r.holderTTL <= minTTL || r.holderTTL > longTTL {
		t.Fatalf("AcquireReader(slot %d, %q) = %+v, want refused by a writer with ttl in (%v, %v]", slot, value, r, minTTL, longTTL)
	}
	if after, _ := s.get(t, rw.keys.Readers[slot]); after != before {
		t.Fatalf("refused reader changed its key from %q to %q", before, after)
	}
}

// writer asks for the writer key, with every reader key, for value.
func (s *suite) writer(t *testing.T, rw rwLock, value string, ttl time.Duration) writerResult {
	t.Helper()
	ok, holderTTL, floor, err := rw.node.AcquireWriter(s.ctx, rw.keys.Writer, rw.fence, value, ttl, rw.keys.Intent, rw.keys.Readers)
	if err != nil {
		t.Fatalf("AcquireWriter(%q): %v", value, err)
	}
	return writerResult{ok, holderTTL, floor}
}

func (s *suite) mustWrite(t *testing.T, rw rwLock, value string, ttl time.Duration) int64 {
	t.Helper()
	w := s.writer(t, rw, value, ttl)
	if !w.ok || w.holderTTL != 0 || w.floor <= 0 {
		t.Fatalf("AcquireWriter(%q) = %+v, want admitted with a floor", value, w)
	}
	return w.floor
}

// wantWriterRefused checks a writer asking for longTTL is refused with a
// blocker ttl in (minTTL, maxTTL], and that it wrote nothing but its
// intent, with its own ttl (maxTTL < longTTL tells the two apart).
func (s *suite) wantWriterRefused(t *testing.T, rw rwLock, value string, minTTL, maxTTL time.Duration) {
	t.Helper()
	before, _ := s.get(t, rw.keys.Writer)
	w := s.writer(t, rw, value, longTTL)
	if w.ok || w.floor != 0 || w.holderTTL <= minTTL || w.holderTTL > maxTTL {
		t.Fatalf("AcquireWriter(%q) = %+v, want refused with a blocker ttl in (%v, %v]", value, w, minTTL, maxTTL)
	}
	if after, _ := s.get(t, rw.keys.Writer); after != before {
		t.Fatalf("refused writer changed the writer key from %q to %q", before, after)
	}
	s.wantHeld(t, rw.keys.Intent, value, maxTTL)
}

func testReaderOnFreeMaster(t *testing.T, s *suite, rw rwLock) {
	s.mustRead(t, rw, 0, "R1", longTTL)
	s.wantHeld(t, rw.keys.Readers[0], "R1", 0)
	s.wantAbsent(t, rw.keys.Intent)
}

// Readers share the lock, one per reader key; a key another reader holds
// is refused as taken, so the caller may try the next.
func testReadersCoexist(t *testing.T, s *suite, rw rwLock) {
	s.mustRead(t, rw, 0, "R1", longTTL)
	s.mustRead(t, rw, 1, "R2", longTTL)
	r := s.reader(t, rw, 0, "R3", 2*longTTL)
	if r.ok || !r.keyTaken || r.holderTTL <= 0 || r.holderTTL > longTTL {
		t.Fatalf("AcquireReader of R1's key by R3 = %+v, want refused as taken with R1's ttl", r)
	}
	s.wantHeld(t, rw.keys.Readers[0], "R1", 0)
	s.wantHeld(t, rw.keys.Readers[1], "R2", 0)
}

func testReaderRefusedByWriter(t *testing.T, s *suite, rw rwLock) {
	s.mustWrite(t, rw, "W", longTTL)
	s.wantReaderBarred(t, rw, 0, "R1", longTTL/2)
	s.wantAbsent(t, rw.keys.Readers[0])
	s.wantAbsent(t, rw.keys.Intent)
}

// An intent bars new readers, even from a key another reader holds: that
// refusal is the writer's, not the key's.
func testReaderRefusedByIntent(t *testing.T, s *suite, rw rwLock) {
	s.mustRead(t, rw, 0, "R1", readerTTL)
	s.wantWriterRefused(t, rw, "W", 0, readerTTL)
	s.wantReaderBarred(t, rw, 1, "R2", readerTTL)
	s.wantAbsent(t, rw.keys.Readers[1])
	s.wantReaderBarred(t, rw, 0, "R2", readerTTL)
	s.wantHeld(t, rw.keys.Readers[0], "R1", 0)
}

// A retried acquisition by a reader already in succeeds and restarts its
// ttl whatever writers did since.
func testReaderRefreshDespiteIntent(t *testing.T, s *suite, rw rwLock) {
	s.mustRead(t, rw, 0, "R1", readerTTL)
	s.wantWriterRefused(t, rw, "W", 0, readerTTL)
	s.mustRead(t, rw, 0, "R1", longTTL)
	s.wantHeld(t, rw.keys.Readers[0], "R1", readerTTL)
}

// A writer's floor, as AcquireFenced's, is the larger of the node's clock
// and the fence counter.
func testWriterFloor(t *testing.T, s *suite, rw rwLock) {
	floor := s.mustWrite(t, rw, "W1", longTTL)
	if d := time.Duration(floor-time.Now().UnixMicro()) * time.Microsecond; d < -clockTolerance || d > clockTolerance {
		t.Fatalf("floor %d is %v from the clock in µs", floor, d)
	}
	f, ok := s.node.(redlock.Fencer)
	if !ok {
		return // no counter to raise
	}
	future := floor + int64(time.Hour/time.Microsecond)
	if ok, err := f.CommitFence(s.ctx, rw.keys.Writer, rw.fence, "W1", future, longTTL); err != nil || !ok {
		t.Fatalf("CommitFence by the writer = %v, %v", ok, err)
	}
	s.release(t, rw.keys.Writer, "W1")
	if floor := s.mustWrite(t, rw, "W2", longTTL); floor != future {
		t.Fatalf("floor = %d, want the counter %d above the clock", floor, future)
	}
}

// Refused by readers, a writer reports the longest reader's ttl, declares
// its intent for its own ttl, and from then on no new reader gets in.
func testWriterRefusedByReaders(t *testing.T, s *suite, rw rwLock) {
	// The longest in the middle: neither the first nor the last is it.
	s.mustRead(t, rw, 0, "R1", readerTTL)
	s.mustRead(t, rw, 1, "R2", longReaderTTL)
	s.mustRead(t, rw, 2, "R3", readerTTL)
	s.wantWriterRefused(t, rw, "W", readerTTL, longReaderTTL)
	s.wantAbsent(t, rw.keys.Writer)
	s.wantReaderBarred(t, rw, 3, "R4", longReaderTTL)
	s.wantAbsent(t, rw.keys.Readers[3])
}

// A writer refused by another writer declares its intent too, taking the
// intent over from any other waiting writer.
func testWriterRefusedByWriter(t *testing.T, s *suite, rw rwLock) {
	s.mustWrite(t, rw, "W1", readerTTL)
	s.wantWriterRefused(t, rw, "W2", 0, readerTTL)
	s.wantWriterRefused(t, rw, "W3", 0, readerTTL)
	s.wantHeld(t, rw.keys.Writer, "W1", 0)
}

// An intent is its writer's until that writer gets in: another writer
// admitted meanwhile leaves it in place.
func testWriterDeletesOwnIntent(t *testing.T, s *suite, rw rwLock) {
	s.mustRead(t, rw, 0, "R1", readerTTL)
	s.wantWriterRefused(t, rw, "W1", 0, readerTTL)
	s.release(t, rw.keys.Readers[0], "R1")

	s.mustWrite(t, rw, "W2", longTTL)
	s.wantHeld(t, rw.keys.Intent, "W1", 0)
	s.release(t, rw.keys.Writer, "W2")

	s.mustWrite(t, rw, "W1", longTTL)
	s.wantAbsent(t, rw.keys.Intent)
}

// A writer that gives up leaves an intent that lapses with its ttl, and
// readers that vanish leave by expiry: neither blocks the lock for good.
func testIntentAndReadersExpire(t *testing.T, s *suite, rw rwLock) {
	s.mustRead(t, rw, 0, "R1", shortTTL)
	if w := s.writer(t, rw, "W1", shortTTL); w.ok {
		t.Fatalf("AcquireWriter while R1 reads = %+v, want refused", w)
	}
	s.waitAbsent(t, rw.keys.Intent)
	s.waitAbsent(t, rw.keys.Readers[0])

	s.mustRead(t, rw, 1, "R2", longTTL)
	s.release(t, rw.keys.Readers[1], "R2")
	s.mustWrite(t, rw, "W2", longTTL)
}

// Only the reader keys passed block a writer, and only when held.
func testAbsentReadersDoNotBlock(t *testing.T, s *suite, rw rwLock) {
	other := s.key + "#other-lock-reader"
	s.mustAcquire(t, other, "R1", longTTL)
	many := rw
	many.keys.Readers = slices.Clone(rw.keys.Readers)
	for i := range 100 {
		many.keys.Readers = append(many.keys.Readers, fmt.Sprintf("%s#absent%d", s.key, i))
	}
	s.mustWrite(t, many, "W1", longTTL)
	s.release(t, rw.keys.Writer, "W1")

	none := rw
	none.keys.Readers = nil
	s.mustWrite(t, none, "W2", longTTL)
	s.wantAbsent(t, rw.keys.Intent)
}

// A retried writer acquisition whose first reply was lost succeeds again
// and restarts the ttl.
func testWriterRetryRefreshes(t *testing.T, s *suite, rw rwLock) {
	first := s.mustWrite(t, rw, "W", readerTTL)
	if again := s.mustWrite(t, rw, "W", longTTL); again < first {
		t.Fatalf("retry floor %d below the first %d", again, first)
	}
	s.wantHeld(t, rw.keys.Writer, "W", readerTTL)
	s.wantAbsent(t, rw.keys.Intent)
}

// Racing readers and a writer: the writer is admitted exactly when no
// reader is, as one master's atomic steps in any order allow.
func testReadersAndWriterRace(t *testing.T, s *suite, rw rwLock) {
	var (
		wg                  sync.WaitGroup
		readersIn           = make([]bool, len(rw.keys.Readers))
		writerOK, writerErr = false, error(nil)
	)
	for slot, key := range rw.keys.Readers {
		wg.Go(func() {
			ok, _, _, err := rw.node.AcquireReader(s.ctx, key, fmt.Sprintf("R%d", slot), longTTL, rw.keys.Writer, rw.keys.Intent)
			if err != nil {
				t.Errorf("AcquireReader(slot %d): %v", slot, err)
			}
			readersIn[slot] = ok
		})
	}
	wg.Go(func() {
		writerOK, _, _, writerErr = rw.node.AcquireWriter(s.ctx, rw.keys.Writer, rw.fence, "W", longTTL, rw.keys.Intent, rw.keys.Readers)
	})
	wg.Wait()
	if writerErr != nil {
		t.Fatalf("AcquireWriter: %v", writerErr)
	}
	admitted := 0
	for _, in := range readersIn {
		if in {
			admitted++
		}
	}
	if writerOK == (admitted > 0) {
		t.Fatalf("writer admitted = %v with %d readers admitted; want exactly one side in", writerOK, admitted)
	}
}

// Both acquisitions fail promptly with ctx's error and write nothing.
func testRWFinishedContext(t *testing.T, s *suite, rw rwLock) {
	ctx, cancel := context.WithCancel(s.ctx)
	cancel()
	calls := map[string]func() error{
		"AcquireReader": func() error {
			_, _, _, err := rw.node.AcquireReader(ctx, rw.keys.Readers[0], "R", longTTL, rw.keys.Writer, rw.keys.Intent)
			return err
		},
		"AcquireWriter": func() error {
			_, _, _, err := rw.node.AcquireWriter(ctx, rw.keys.Writer, rw.fence, "W", longTTL, rw.keys.Intent, rw.keys.Readers)
			return err
		},
	}
	if g, ok := rw.node.(redlock.GuardedRepairer); ok {
		calls["PutBack"] = func() error {
			_, err := g.PutBack(ctx, rw.keys.Readers[0], "R", longTTL, []string{rw.keys.Writer})
			return err
		}
	}
	for name, call := range calls {
		start := time.Now()
		err := call()
		if took := time.Since(start); took > promptly {
			t.Errorf("%s with a cancelled context took %v, want under %v", name, took, promptly)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: err = %v, want errors.Is(err, context.Canceled)", name, err)
		}
	}
	for _, key := range append([]string{rw.keys.Writer, rw.keys.Intent}, rw.keys.Readers...) {
		s.wantAbsent(t, key)
	}
}

// testPutBack: a renewal's repair of a read/write lock's key
// (redlock.GuardedRepairer) sets it if absent, as an acquisition does, but
// never beside the other side: a reader's key is not put back while the
// writer key is held, a writer's while any reader key is. Refused, it
// writes nothing; the intent, which only bars new readers, does not stop
// it; a key another value holds stays theirs.
func testPutBack(t *testing.T, s *suite, rw rwLock) {
	g, ok := rw.node.(redlock.GuardedRepairer)
	if !ok {
		t.Skip("the node does not implement redlock.GuardedRepairer")
	}
	putBack := func(key, value string, excluders []string) bool {
		t.Helper()
		done, err := g.PutBack(s.ctx, key, value, longTTL, excluders)
		if err != nil {
			t.Fatalf("PutBack(%s, %q): %v", key, value, err)
		}
		return done
	}
	readerExcluders, writerExcluders := []string{rw.keys.Writer}, rw.keys.Readers

	s.mustAcquire(t, rw.keys.Intent, "waiting writer", longTTL)
	if !putBack(rw.keys.Readers[0], "R1", readerExcluders) {
		t.Fatal("a reader key not put back on a master where no writer holds (a writer's intent there)")
	}
	s.wantHeld(t, rw.keys.Readers[0], "R1", readerTTL)
	if putBack(rw.keys.Writer, "W", writerExcluders) {
		t.Fatal("a writer key put back beside a reader")
	}
	s.wantAbsent(t, rw.keys.Writer)
	if putBack(rw.keys.Readers[0], "R2", readerExcluders) {
		t.Fatal("a reader key another reader holds was taken by a put-back")
	}
	s.wantHeld(t, rw.keys.Readers[0], "R1", readerTTL)

	s.release(t, rw.keys.Readers[0], "R1")
	if !putBack(rw.keys.Writer, "W", writerExcluders) {
		t.Fatal("a writer key not put back on a master where no reader holds")
	}
	s.wantHeld(t, rw.keys.Writer, "W", readerTTL)
	if putBack(rw.keys.Readers[1], "R3", readerExcluders) {
		t.Fatal("a reader key put back beside the writer")
	}
	s.wantAbsent(t, rw.keys.Readers[1])
}
