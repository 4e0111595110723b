package fencedresource_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	fencedresource "github.com/sidelock/sidelock/examples/fenced-resource"
	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// sidecar is a lock API over the given real masters.
func sidecar(t *testing.T, addrs []string) *httptest.Server {
	nodes := make([]redlock.Node, len(addrs))
	for i, a := range addrs {
		nodes[i] = redisnode.New(redisnode.Options{Addr: a})
		t.Cleanup(func() { nodes[i].Close() })
	}
	core := inprocess.Start(t, inprocess.Options{Nodes: nodes, Config: func(c *config.Config) {
		c.KeyPrefix, c.KeyTTL, c.MaxWait = "example:", time.Second, time.Minute
	}})
	srv := httptest.NewServer(core.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func acquire(t *testing.T, api, query string) int64 {
	res, err := http.Post(api+"/locks/report"+query, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct{ Fence int64 }
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil || res.StatusCode != 200 || body.Fence == 0 {
		t.Fatalf("acquire: %d %v fence=%d", res.StatusCode, err, body.Fence)
	}
	return body.Fence
}

func write(t *testing.T, url string, fence int64, value string) int {
	req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(fmt.Sprintf(`{"value":%q}`, value)))
	req.Header.Set("Fence", fmt.Sprint(fence))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// A holder whose lease expired while it was paused comes back and writes
// with its old fence: the resource rejects it, because the next holder
// (on another sidecar) got a larger fence and wrote first.
func TestStaleHolderIsRejectedByItsLowerFence(t *testing.T) {
	masters := redistest.StartN(t, 3)
	addrs := []string{masters[0].Addr(), masters[1].Addr(), masters[2].Addr()}
	podA, podB := sidecar(t, addrs), sidecar(t, addrs)
	store := &fencedresource.Store{}
	resource := httptest.NewServer(store.Handler())
	t.Cleanup(resource.Close)

	staleFence := acquire(t, podA.URL, "?ttl=1s")
	if code := write(t, resource.URL, staleFence, "A starts"); code != 204 {
		t.Fatalf("A's first write: %d", code)
	}
	// A pauses (GC, swap) and sends no heartbeat: its 1s lease lapses and B,
	// waiting on another sidecar, gets the lock.
	newFence := acquire(t, podB.URL, "?ttl=10s&wait=5s")
	if newFence <= staleFence {
		t.Fatalf("B's fence %d is not above A's %d", newFence, staleFence)
	}
	if code := write(t, resource.URL, newFence, "B's result"); code != 204 {
		t.Fatalf("B's write: %d", code)
	}
	// A wakes up and writes as if it still held the lock.
	if code := write(t, resource.URL, staleFence, "A's stale result"); code != http.StatusConflict {
		t.Fatalf("A's stale write: %d, want 409", code)
	}
	if v, f := store.Value(); v != "B's result" || f != newFence {
		t.Fatalf("resource holds %q with fence %d", v, f)
	}
}
