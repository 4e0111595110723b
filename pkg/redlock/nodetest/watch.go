package nodetest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// Release announcements are asynchronous on a real master: a watch becomes
// active a round trip after WatchReleases returns, and a release made
// before that is lost. So the watch tests first prime each watcher,
// releasing until it has fired once, and only then count exactly.
const (
	// primeAttempt is how long priming waits for an announcement before
	// releasing again.
	primeAttempt = 200 * time.Millisecond

	// notifyDeadline bounds how late an announcement to an active watch may
	// be; the slack is for loaded machines running -race.
	notifyDeadline = 5 * time.Second

	// settle is how long the tests wait for announcements that must not
	// come, or for stragglers before taking a baseline. On loopback an
	// announcement takes well under a millisecond.
	settle = 100 * time.Millisecond
)

// counter counts one watcher's notify calls.
type counter struct {
	n          atomic.Int64
	stop       atomic.Pointer[func()] // the cancel WatchReleases returned
	selfCancel bool                   // notify cancels the watch (a one-shot)
}

func (c *counter) notify() {
	c.n.Add(1)
	if c.selfCancel {
		c.cancel()
	}
}

func (c *counter) count() int64 { return c.n.Load() }

func (c *counter) cancel() {
	if stop := c.stop.Load(); stop != nil {
		(*stop)()
	}
}

// releaseWatcher returns the node as a ReleaseWatcher, or skips the test.
func (s *suite) releaseWatcher(t *testing.T) redlock.ReleaseWatcher {
	t.Helper()
	w, ok := s.node.(redlock.ReleaseWatcher)
	if !ok {
		t.Skip("the node does not implement redlock.ReleaseWatcher")
	}
	return w
}

// watch registers a counting watcher on key, cancelled when the test ends.
func (s *suite) watch(t *testing.T, key string) *counter {
	t.Helper()
	return s.watchCounter(t, key, &counter{})
}

func (s *suite) watchCounter(t *testing.T, key string, c *counter) *counter {
	t.Helper()
	stop := s.releaseWatcher(t).WatchReleases(key, c.notify)
	c.stop.Store(&stop)
	t.Cleanup(stop)
	return c
}

// acquireRelease takes key for value and releases it, which must succeed.
func (s *suite) acquireRelease(t *testing.T, key, value string) {
	t.Helper()
	s.mustAcquire(t, key, value, longTTL)
	if !s.release(t, key, value) {
		t.Fatalf("Release(%q, %q) = false, want true", key, value)
	}
}

// prime releases key until every watcher in cs has fired at least once, so
// their watches are active, then lets stragglers arrive.
func (s *suite) prime(t *testing.T, key string, cs ...*counter) {
	t.Helper()
	deadline := time.Now().Add(notifyDeadline)
	for {
		s.acquireRelease(t, key, "primer")
		if waitFor(primeAttempt, func() bool { return allFired(cs) }) {
			time.Sleep(settle)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no release announcement of %q within %v", key, notifyDeadline)
		}
	}
}

func allFired(cs []*counter) bool {
	for _, c := range cs {
		if c.count() == 0 {
			return false
		}
	}
	return true
}

// waitCount waits until c has fired want times, then checks that it does
// not fire again within settle.
func waitCount(t *testing.T, name string, c *counter, want int64) {
	t.Helper()
	if !waitFor(notifyDeadline, func() bool { return c.count() >= want }) {
		t.Fatalf("%s fired %d times, want %d within %v", name, c.count(), want, notifyDeadline)
	}
	time.Sleep(settle)
	if got := c.count(); got != want {
		t.Fatalf("%s fired %d times, want exactly %d", name, got, want)
	}
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func testWatchNotifies(t *testing.T, s *suite) {
	w := s.watch(t, s.key)
	s.prime(t, s.key, w)

	// Any holder's release is announced, exactly once per release.
	base := w.count()
	s.acquireRelease(t, s.key, "A")
	waitCount(t, "watcher", w, base+1)
	s.acquireRelease(t, s.key, "B")
	s.acquireRelease(t, s.key, "C")
	waitCount(t, "watcher", w, base+3)
}

func testWatchIgnoresOtherKeys(t *testing.T, s *suite) {
	other := s.key + ":other"
	w := s.watch(t, s.key) // s.key is never released in this test
	o := s.watch(t, other)
	s.prime(t, other, o)

	base := o.count()
	for range 3 {
		s.acquireRelease(t, other, "A")
	}
	// o proves the announcements arrived; none of them is for w.
	waitCount(t, "watcher of the other key", o, base+3)
	if got := w.count(); got != 0 {
		t.Fatalf("watcher of %q fired %d times for releases of %q", s.key, got, other)
	}
}

func testWatchIgnoresNonReleases(t *testing.T, s *suite) {
	w := s.watch(t, s.key)
	s.prime(t, s.key, w)
	base := w.count()

	// An expiry is not a release.
	s.mustAcquire(t, s.key, "E", shortTTL)
	s.waitAbsent(t, s.key)
	// Releases that delete nothing: a wrong value, then an absent key.
	s.mustAcquire(t, s.key, "A", longTTL)
	if s.release(t, s.key, "wrong") {
		t.Fatal("Release with a wrong value = true, want false")
	}
	if !s.release(t, s.key, "A") {
		t.Fatal("Release by the holder = false, want true")
	}
	if s.release(t, s.key, "A") {
		t.Fatal("Release of an absent key = true, want false")
	}
	// Only the one real release may have fired.
	waitCount(t, "watcher", w, base+1)
}

func testWatchersAndCancel(t *testing.T, s *suite) {
	a, b := s.watch(t, s.key), s.watch(t, s.key)
	s.prime(t, s.key, a, b)

	// Both watchers of one key fire for each release.
	baseA, baseB := a.count(), b.count()
	s.acquireRelease(t, s.key, "A")
	waitCount(t, "first watcher", a, baseA+1)
	waitCount(t, "second watcher", b, baseB+1)

	// Cancelling one (twice: cancel is idempotent) keeps the other.
	a.cancel()
	a.cancel()
	s.acquireRelease(t, s.key, "B")
	waitCount(t, "remaining watcher", b, baseB+2)
	if got := a.count(); got != baseA+1 {
		t.Fatalf("cancelled watcher fired %d times, want %d", got, baseA+1)
	}

	// A watcher may cancel itself from notify (a one-shot wake-up).
	once := s.watchCounter(t, s.key, &counter{selfCancel: true})
	s.acquireRelease(t, s.key, "C")
	waitCount(t, "remaining watcher", b, baseB+3)
	waitCount(t, "self-cancelling watcher", once, 1)
	s.acquireRelease(t, s.key, "D")
	waitCount(t, "remaining watcher", b, baseB+4)
	if got := once.count(); got != 1 {
		t.Fatalf("self-cancelled watcher fired %d times, want 1", got)
	}

	// After the last watcher of the key goes, a new one works again.
	b.cancel()
	c := s.watch(t, s.key)
	s.prime(t, s.key, c)
	if got := a.count(); got != baseA+1 {
		t.Fatalf("cancelled watcher fired %d times, want %d", got, baseA+1)
	}
	if got := b.count(); got != baseB+4 {
		t.Fatalf("cancelled watcher fired %d times, want %d", got, baseB+4)
	}
}
