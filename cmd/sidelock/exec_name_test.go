package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

// A name with a character that means something in a URL is refused as a
// usage error before any request: '#' used to cut "?hold=true" off, so
// that exec took the lock "job" without holding it, exited 69, and left
// "job" taken for the default ttl.
func TestE2EExecRefusesANameThatIsNotALockName(t *testing.T) {
	a := startSidecar(t, durableMasters(t, 3))
	ran := filepath.Join(t.TempDir(), "ran")
	before := lockRequests(t, a)
	for _, name := range []string{"job#1", "job?1", "job%1", "job 1", "job%2F1"} {
		c, out := runExecChild(t, a.api, name, "--", "touch", ran)
		if code := exitCodeOf(t, c, 10*time.Second); code != exitUsage || !strings.Contains(out.String(), "lock name may contain only") {
			t.Errorf("exec %q: exit %d, want %d with the naming rule: %s", name, code, exitUsage, out)
		}
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the command ran")
	}
	if after := lockRequests(t, a); after != before {
		t.Errorf("%v lock requests reached the sidecar", after-before)
	}
	a.acquire(t, "/locks/job?ttl=5s") // nothing holds what a cut name would have named
}

// The Go client escapes each segment of a name, so a '#' reaches the
// sidecar, which refuses the name, instead of cutting the URL short and
// taking another lock; '/' still separates segments.
func TestClientEscapesLockNames(t *testing.T) {
	a := startSidecar(t, durableMasters(t, 3))
	c := client.New(a.api, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var apiErr *client.Error
	if l, err := c.Acquire(ctx, "esc#aped", client.Options{TTL: 5 * time.Second}); !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest {
		t.Fatalf("acquire %q: %+v %v, want 400", "esc#aped", l, err)
	}
	a.acquire(t, "/locks/esc?ttl=5s")
	l, err := c.Acquire(ctx, "jobs/nightly:1", client.Options{TTL: 5 * time.Second})
	if err != nil || l.Name != "jobs/nightly:1" {
		t.Fatalf("acquire jobs/nightly:1: %+v %v", l, err)
	}
}

// lockRequests counts the sidecar's answered requests to the lock API.
func lockRequests(t *testing.T, s *sidecar) float64 {
	t.Helper()
	res, err := http.Get(s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "sidelock_http_requests_total{") || !strings.Contains(line, "/locks") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			total += v
		}
	}
	return total
}
