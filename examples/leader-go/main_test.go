package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecartest"
	"github.com/sidelock/sidelock/pkg/client"
)

// startSidecar runs the real sidecar over three real masters.
func startSidecar(t *testing.T) *client.Client {
	t.Helper()
	bin := sidecartest.Build(t)
	masters := redistest.StartN(t, 3, redistest.WithAppendOnly())
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr()
	}
	env := []string{"SIDELOCK_REDIS_ADDRS=" + strings.Join(addrs, ","),
		"SIDELOCK_HEALTH_INTERVAL=100ms", "SIDELOCK_KEY_PREFIX=leader-example:"}
	return client.New(sidecartest.Start(t, bin, env, sidecartest.Options{}).API(), nil)
}

// lineFeed hands what run prints to the test, a line at a time.
type lineFeed chan string

func (f lineFeed) Write(p []byte) (int, error) {
	for l := range strings.SplitSeq(strings.TrimSuffix(string(p), "\n"), "\n") {
		f <- l
	}
	return len(p), nil
}

// await reads lines until one starts with prefix and returns it.
func (f lineFeed) await(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l := <-f:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("no line %q within 10s", prefix)
		}
	}
}

// runCandidate runs one candidate until the returned stop is called,
// which waits for run to return.
func runCandidate(t *testing.T, c *client.Client, id string) (lineFeed, func()) {
	t.Helper()
	out := make(lineFeed, 4096)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, c, candidate{name: "examples/leader", id: id, every: 20 * time.Millisecond}, out)
	}()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: run: %v", id, err)
		}
	}
	t.Cleanup(func() { cancel() })
	return out, stop
}

// The first candidate is elected and works; the standby knows it leads;
// when the leader resigns the standby is elected with a later term.
func TestStandbyTakesOverWhenTheLeaderResigns(t *testing.T) {
	c := startSidecar(t)
	a, stopA := runCandidate(t, c, "a")
	var termA int64
	if _, err := fmt.Sscanf(a.await(t, "a: elected"), "a: elected, term %d", &termA); err != nil {
		t.Fatal(err)
	}
	a.await(t, fmt.Sprintf("a: term %d: working", termA))

	b, stopB := runCandidate(t, c, "b")
	b.await(t, fmt.Sprintf("b: leader is a, term %d", termA))

	stopA()
	var termB int64
	if _, err := fmt.Sscanf(b.await(t, "b: elected"), "b: elected, term %d", &termB); err != nil {
		t.Fatal(err)
	}
	if termB <= termA {
		t.Errorf("b's term %d is not after a's %d", termB, termA)
	}
	b.await(t, fmt.Sprintf("b: term %d: working", termB))
	stopB()
}
