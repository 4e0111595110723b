package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/tools/floor"
)

// The floor (issue 30): package floor's thinnest sidecar of this design on
// the same platform, which sends the same scripts as sidelock for an
// uncontended pair and does nothing else, measured beside sidelock and
// redsync in the same runs; and below it the platform alone: the same HTTP
// exchange with no Redis (nethttp), and the same scripts through go-redis
// with no HTTP (goredis).

// floorClients are go-redis clients of the floor to the masters.
func floorClients(b *testing.B, nodes []redlock.Node) []*redis.Client {
	clients := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		clients[i] = floor.NewClient(n.Addr())
		b.Cleanup(func() { clients[i].Close() })
	}
	return clients
}

// newFloor serves the floor over nodes, in this process (as newSidecar
// serves sidelock).
func newFloor(b *testing.B, nodes []redlock.Node) *httptest.Server {
	srv := httptest.NewServer(floor.Handler(floor.NewLocker(floorClients(b, nodes), "floor:")))
	b.Cleanup(srv.Close)
	return srv
}

// newFloorReleasingAfter is newFloor whose DELETE answers before its
// release round (issue 30, item 2: what a release off the caller's path
// can gain at the floor).
func newFloorReleasingAfter(b *testing.B, nodes []redlock.Node) *httptest.Server {
	srv := httptest.NewServer(floor.HandlerReleasingAfter(floor.NewLocker(floorClients(b, nodes), "floor-ra:")))
	b.Cleanup(srv.Close)
	return srv
}

// newHTTPOnly serves the floor's routes with no Redis.
func newHTTPOnly(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(floor.HTTPOnly())
	b.Cleanup(srv.Close)
	return srv
}

// goredisPairs is the floor's pair with no HTTP: the scripts through
// go-redis, in this process.
func goredisPairs(b *testing.B, nodes []redlock.Node) {
	l := floor.NewLocker(floorClients(b, nodes), "goredis:")
	ctx := context.Background()
	lat := make(latencies, 0, b.N)
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("%d", i%1024)
		start := time.Now()
		tok, _, err := l.Acquire(ctx, name)
		if err == nil {
			err = l.Release(ctx, name, tok)
		}
		if err != nil {
			countError(b, "goredis pair %s: %v", name, err)
			continue
		}
		lat = append(lat, time.Since(start))
	}
	lat.report(b)
	reportErrors(b)
}

var floorBuild struct {
	sync.Mutex
	bin string
}

// floorBinary builds cmd/floor once per run.
func floorBinary(b *testing.B) string {
	floorBuild.Lock()
	defer floorBuild.Unlock()
	if floorBuild.bin != "" {
		return floorBuild.bin
	}
	bin := filepath.Join(b.TempDir(), "floor")
	out, err := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "../floor/cmd/floor").CombinedOutput()
	if err != nil {
		b.Fatalf("building the floor: %v\n%s", err, out)
	}
	floorBuild.bin = bin // b.TempDir is removed with b: rebuilt (from the cache) by the next
	b.Cleanup(func() { floorBuild.Lock(); floorBuild.bin = ""; floorBuild.Unlock() })
	return bin
}

// startFloor runs the floor binary (with -http-only when masters is
// empty) and returns its pid and base URL.
func startFloor(b *testing.B, masters []string) (int, string) {
	args := []string{"-http-only"}
	if len(masters) > 0 {
		args = []string{"-masters", strings.Join(masters, ",")}
	}
	cmd := exec.Command(floorBinary(b), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		b.Fatalf("floor did not start: %q %v", line, err)
	}
	return cmd.Process.Pid, base
}
