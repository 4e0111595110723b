package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// unsendable is a master this sidecar could not get a call to in time:
// every call fails as local overload, as redisnode's pipeliner fails a
// call that never left its queue.
type unsendable struct{ redlock.Node }

func (unsendable) Acquire(context.Context, string, string, time.Duration) (bool, time.Duration, error) {
	return false, 0, fmt.Errorf("queue: %w", redlock.ErrOverloaded)
}

// down is a master that refuses every call.
type down struct{ redlock.Node }

func (down) Acquire(context.Context, string, string, time.Duration) (bool, time.Duration, error) {
	return false, 0, errors.New("connection refused")
}

func TestARoundSpoiledByLocalOverloadIsNotNoQuorum(t *testing.T) {
	cases := []struct {
		name       string
		nodes      []redlock.Node
		overloaded bool
	}{
		// One master answered; the one that could not be asked would have
		// made the majority: the masters are not at fault.
		{"overload decides", []redlock.Node{memnode.New("a"), unsendable{memnode.New("b")}, down{memnode.New("c")}}, true},
		// Two masters are down: no quorum whatever the third did.
		{"masters decide", []redlock.Node{down{memnode.New("a")}, unsendable{memnode.New("b")}, down{memnode.New("c")}}, false},
	}
	for _, c := range cases {
		l, err := redlock.New(c.nodes, redlock.Config{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.Acquire(context.Background(), "k", "v", time.Second)
		var ov *redlock.OverloadedError
		if got := errors.As(err, &ov); got != c.overloaded || errors.Is(err, redlock.ErrNoQuorum) == c.overloaded {
			t.Errorf("%s: %v; want overloaded %v", c.name, err, c.overloaded)
		}
	}
}
