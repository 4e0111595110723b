package watch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/redistest"
	assembly "github.com/sidelock/sidelock/internal/sidecar"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
	"github.com/sidelock/sidelock/internal/watch"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// sidecar is a lease Manager over the masters, with a Hub wired as the
// sidecar assembly wires it (the Manager tells the Hub of its own leases).
type sidecar struct {
	m   *lease.Manager
	hub *watch.Hub
}

func newSidecar(t *testing.T, servers []*redistest.Server, keyTTL, poll time.Duration) *sidecar {
	t.Helper()
	return newSidecarWith(t, servers, keyTTL, watch.Config{Poll: poll})
}

// newSidecarWith is newSidecar with the Hub's config (its Source is set).
func newSidecarWith(t *testing.T, servers []*redistest.Server, keyTTL time.Duration, cfg watch.Config) *sidecar {
	t.Helper()
	nodes := make([]redlock.Node, len(servers))
	for i, s := range servers {
		n := redisnode.New(redisnode.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = n.Close() })
		nodes[i] = n
	}
	core := inprocess.Start(t, inprocess.Options{Nodes: nodes, Config: func(c *config.Config) {
		c.KeyPrefix, c.KeyTTL, c.NodeTimeout, c.MaxWait = "t:", keyTTL, 100*time.Millisecond, 5*time.Second
		if cfg.MaxStreams > 0 {
			c.MaxWatchers = cfg.MaxStreams
		}
	}, Sidecar: []assembly.Option{assembly.WithWatchPoll(cfg.Poll)}})
	return &sidecar{m: core.Leases(), hub: core.Watches()}
}

func next(t *testing.T, ch <-chan watch.Change, within time.Duration) watch.Change {
	t.Helper()
	select {
	case c, ok := <-ch:
		if !ok {
			t.Fatal("the stream ended")
		}
		return c
	case <-time.After(within):
		t.Fatalf("no change within %v", within)
	}
	return watch.Change{}
}

// awaitHolder reads until owner is reported holding with a fence above
// floor. A read between a grant's two rounds may report the holder first
// with the fence before it (see the package doc): only such a report of
// the same owner may come first.
func awaitHolder(t *testing.T, ch <-chan watch.Change, owner string, floor int64, within time.Duration) watch.Change {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c := next(t, ch, time.Until(deadline))
		if c.Kind != watch.KindAcquired || c.Status.Owner != owner || c.Since.IsZero() {
			t.Fatalf("waiting for %s to hold: %+v", owner, c)
		}
		if c.Status.Fence > floor {
			return c
		}
	}
}

// nextAfterHolder is the next change that is not a report of owner holding.
func nextAfterHolder(t *testing.T, ch <-chan watch.Change, owner string, within time.Duration) watch.Change {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c := next(t, ch, time.Until(deadline))
		if c.Kind != watch.KindAcquired || c.Status.Owner != owner {
			return c
		}
	}
}

func expect(t *testing.T, c watch.Change, kind watch.Kind, held bool) {
	t.Helper()
	if c.Kind != kind || c.Status.Held != held {
		t.Fatalf("got %s (held %v, %+v), want %s (held %v)", c.Kind, c.Status.Held, c, kind, held)
	}
}

// A watcher sees the state, then every holder and release: its own
// sidecar's at once, another sidecar's acquisition by the poll, its
// release by the masters' announcement, and a dead holder's keys lapsing
// as an expiry.
func TestWatchReportsEveryChange(t *testing.T) {
	servers := redistest.StartN(t, 3)
	// A poll far longer than the waits for what must come at once (this
	// sidecar's own changes, announced releases).
	const keyTTL, poll = 1500 * time.Millisecond, 2 * time.Second
	here := newSidecar(t, servers, keyTTL, poll)
	there := newSidecar(t, servers, keyTTL, poll)
	ctx := context.Background()

	ch, cancel, err := here.hub.Subscribe("leader")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	expect(t, next(t, ch, time.Second), watch.KindState, false)

	in, err := here.m.Acquire(ctx, lease.Request{Name: "leader", Owner: "pod-a"})
	if err != nil {
		t.Fatal(err)
	}
	// Told by its own Manager: no poll needed.
	if c := awaitHolder(t, ch, "pod-a", in.Fence-1, 500*time.Millisecond); c.Status.Fence != in.Fence {
		t.Fatalf("acquired %+v, want fence %d", c, in.Fence)
	}
	if err := here.m.Release(ctx, "leader", in.Token); err != nil {
		t.Fatal(err)
	}
	if c := nextAfterHolder(t, ch, "pod-a", 500*time.Millisecond); c.Kind != watch.KindReleased || c.Reason != watch.ReasonReleased {
		t.Fatalf("after a release: %+v", c)
	}

	other, err := there.m.Acquire(ctx, lease.Request{Name: "leader", Owner: "pod-b"})
	if err != nil {
		t.Fatal(err)
	}
	if c := awaitHolder(t, ch, "pod-b", in.Fence, poll+time.Second); c.Status.Fence != other.Fence {
		t.Fatalf("another sidecar's holder: %+v, want fence %d", c, other.Fence)
	}
	if err := there.m.Release(ctx, "leader", other.Token); err != nil {
		t.Fatal(err)
	}
	if c := nextAfterHolder(t, ch, "pod-b", poll); c.Kind != watch.KindReleased || c.Reason != watch.ReasonReleased {
		t.Fatalf("another sidecar's release, announced by the masters: %+v", c)
	}

	last, err := there.m.Acquire(ctx, lease.Request{Name: "leader", Owner: "pod-c"})
	if err != nil {
		t.Fatal(err)
	}
	awaitHolder(t, ch, "pod-c", last.Fence-1, poll+time.Second)
	_ = there.m.Close(ctx) // a sidecar that stops leaves its keys to lapse
	if c := nextAfterHolder(t, ch, "pod-c", keyTTL+poll+time.Second); c.Kind != watch.KindReleased || c.Reason != watch.ReasonExpired {
		t.Fatalf("a holder's keys lapsing: %+v", c)
	}
}

// Masters that cannot be read are reported as such, once, and the state
// is sent again when they can; a new stream on a name already watched
// starts with its state too.
func TestWatchUnavailableThenStateAgain(t *testing.T) {
	servers := redistest.StartN(t, 3)
	here := newSidecar(t, servers, 2*time.Second, 200*time.Millisecond)
	ch, cancel, err := here.hub.Subscribe("x")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	expect(t, next(t, ch, time.Second), watch.KindState, false)
	servers[0].Stop()
	servers[1].Stop()
	if c := next(t, ch, 2*time.Second); c.Kind != watch.KindUnavailable || !errors.Is(c.Err, lease.ErrNoQuorum) {
		t.Fatalf("two of three masters paused: %+v", c)
	}
	servers[0].Cont()
	servers[1].Cont()
	expect(t, next(t, ch, 2*time.Second), watch.KindState, false)

	second, cancel2, err := here.hub.Subscribe("x")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel2()
	expect(t, next(t, second, time.Second), watch.KindState, false)
}

// Streams are bounded, a reader that falls behind is cut off rather than
// holding up the others, and Close ends every stream.
func TestWatchBounds(t *testing.T) {
	s := newSidecarWith(t, redistest.StartN(t, 3), 2*time.Second, watch.Config{MaxStreams: 2})
	hub := s.hub

	slow, _, err := hub.Subscribe("a")
	if err != nil {
		t.Fatal(err)
	}
	fast, _, err := hub.Subscribe("b")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := hub.Subscribe("c"); !errors.Is(err, watch.ErrTooManyStreams) {
		t.Fatalf("a third stream over a cap of 2: %v", err)
	}
	if _, _, err := hub.Subscribe("bad name!"); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("an invalid name: %v", err)
	}
	ctx := context.Background()
	for i := 0; i < 200 && hub.Streams() == 2; i++ { // changes of "a", never read
		in, err := s.m.Acquire(ctx, lease.Request{Name: "a", Owner: "x"})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(80 * time.Millisecond) // held past a new holder's second read
		if err := s.m.Release(ctx, "a", in.Token); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	deadline := time.After(5 * time.Second)
	for ended := false; !ended; {
		select {
		case _, ok := <-slow:
			ended = !ok
		case <-deadline:
			t.Fatal("a reader far behind was not cut off")
		}
	}
	if hub.Streams() != 1 {
		t.Fatalf("%d streams open, want the fast one only", hub.Streams())
	}
	expect(t, next(t, fast, time.Second), watch.KindState, false)
	hub.Close()
	if _, ok := <-fast; ok {
		t.Fatal("Close left a stream open")
	}
	if _, _, err := hub.Subscribe("b"); !errors.Is(err, watch.ErrClosed) {
		t.Fatalf("subscribe after Close: %v", err)
	}
}
