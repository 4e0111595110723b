package floor_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
	"github.com/sidelock/sidelock/tools/floor"
)

// TestFloorSendsWhatSidelockSends holds the floor to its definition: for
// an uncontended pair, each master sees from it the very commands (script
// by SHA, number of keys) that sidelock's engine sends, in the same
// number of rounds.
func TestFloorSendsWhatSidelockSends(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("masters=%d", n), func(t *testing.T) {
			servers := redistest.StartN(t, n)
			nodes := make([]redlock.Node, n)
			clients := make([]*redis.Client, n)
			for i, s := range servers {
				nodes[i] = redisnode.New(redisnode.Options{Addr: s.Addr()})
				clients[i] = floor.NewClient(s.Addr())
				t.Cleanup(func() { nodes[i].Close(); clients[i].Close() })
			}
			engine, err := redlock.New(nodes, redlock.Config{Fencing: true, NodeTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			// The sidecar's pair of a plain lock: a take with a block of
			// fences, and (after its linger, off the caller's path) a
			// tenure's release.
			sidelockPair := func(name string) {
				req := redlock.TakeRequest{Key: "floor:" + name, Value: "v-" + name, TTL: 10 * time.Second, Block: 64,
					Mark: redlock.WaiterMark{Sidecar: "s", Arrival: time.Now().UnixMicro()}}
				if _, err := engine.Take(ctx, req); err != nil {
					t.Fatal(err)
				}
				if err := engine.ReleaseTenure(ctx, "floor:"+name, "v-"+name, redlock.WaiterMark{Sidecar: "s"}, ""); err != nil {
					t.Fatal(err)
				}
			}
			l := floor.NewLocker(clients, "floor:")
			floorPair := func(name string) {
				tok, _, err := l.Acquire(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx, name, tok); err != nil {
					t.Fatal(err)
				}
			}
			// Warm up: connections dialled and named, scripts loaded.
			sidelockPair("warm")
			floorPair("warm")
			want := monitored(t, servers, func() { sidelockPair("a") })
			got := monitored(t, servers, func() { floorPair("a") })
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("the floor sent\n%q\nsidelock sent\n%q", got, want)
			}
			if len(want[0]) != 2 {
				t.Errorf("an uncontended pair was %d calls on a master, want 2: %q", len(want[0]), want[0])
			}
		})
	}
}

// monitored runs work and returns, per master, the commands it received
// (name, script SHA and key count; arguments vary by call).
func monitored(t *testing.T, servers []*redistest.Server, work func()) [][]string {
	t.Helper()
	conns := make([]net.Conn, len(servers))
	readers := make([]*bufio.Reader, len(servers))
	for i, s := range servers {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i], readers[i] = c, bufio.NewReader(c)
		fmt.Fprint(c, "MONITOR\r\n")
		if line, _ := readers[i].ReadString('\n'); !strings.HasPrefix(line, "+OK") {
			t.Fatalf("MONITOR: %q", line)
		}
	}
	work()
	out := make([][]string, len(servers))
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		for {
			line, err := readers[i].ReadString('\n')
			if err != nil {
				break
			}
			f := strings.Fields(line)
			if len(f) < 4 || f[2] == "lua]" { // +ts [db addr] "cmd" ...; a script's own calls say lua
				continue
			}
			cmd := strings.Join(f[3:min(len(f), 6)], " ")
			if strings.Contains(cmd, `"ping"`) {
				continue
			}
			out[i] = append(out[i], cmd)
		}
	}
	return out
}

// TestRoutes checks the floor's answers: a grant with a token, 409 while
// held, 204 on release, and the lock free again.
func TestRoutes(t *testing.T) {
	servers := redistest.StartN(t, 3)
	clients := make([]*redis.Client, len(servers))
	for i, s := range servers {
		clients[i] = floor.NewClient(s.Addr())
		t.Cleanup(func() { clients[i].Close() })
	}
	srv := httptest.NewServer(floor.Handler(floor.NewLocker(clients, "floor:")))
	t.Cleanup(srv.Close)
	post := func() (*http.Response, string) {
		res, err := http.Post(srv.URL+"/locks/a/b", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body strings.Builder
		_, _ = bufio.NewReader(res.Body).WriteTo(&body)
		return res, body.String()
	}
	res, body := post()
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `"token":"`) || !strings.Contains(body, `"fence":`) {
		t.Fatalf("acquire: %d %s", res.StatusCode, body)
	}
	if again, _ := post(); again.StatusCode != http.StatusConflict {
		t.Fatalf("second acquire: %d, want 409", again.StatusCode)
	}
	_, tok, _ := strings.Cut(body, `"token":"`)
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/locks/a/b", nil)
	req.Header.Set("Lock-Token", tok[:32])
	del, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	del.Body.Close()
	if del.StatusCode != http.StatusNoContent {
		t.Fatalf("release: %d", del.StatusCode)
	}
	if res, _ := post(); res.StatusCode != http.StatusOK {
		t.Fatalf("acquire after release: %d", res.StatusCode)
	}
}
