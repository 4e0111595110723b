package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sidelock/sidelock/httpapi"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// A DELETE that arrived whole is carried out even when its client hangs up
// before the handler runs: the caller asked to free the lock, and leaving
// it held until the lease lapses would block everyone else for nobody.
func TestReleaseWhoseClientHungUpStillReleases(t *testing.T) {
	nodes := []redlock.Node{memnode.New("a"), memnode.New("b"), memnode.New("c")}
	locker, err := redlock.New(nodes, redlock.Config{Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := lease.NewManager(locker, lease.Config{KeyPrefix: "t:", KeyTTL: 10 * time.Second, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour, MaxWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	h := httpapi.NewServer(discardLogger(), m, nil)

	info, err := m.Acquire(context.Background(), lease.Request{Name: "hung-up"})
	if err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(gone, http.MethodDelete, "/locks/hung-up", nil)
	req.Header.Set("Lock-Token", info.Token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent {
		t.Fatalf("DELETE from a client that hung up: %d %s, want 204", rec.Code, rec.Body)
	}
	if _, err := m.Acquire(context.Background(), lease.Request{Name: "hung-up"}); err != nil {
		t.Fatalf("the lock is still held after the DELETE: %v", err)
	}
}
