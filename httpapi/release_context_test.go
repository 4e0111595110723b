package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sidelock/sidelock/httpapi"
	"github.com/sidelock/sidelock/internal/lease"
)

// A DELETE that arrived whole is carried out even when its client hangs up
// before the handler runs: the caller asked to free the lock, and leaving
// it held until the lease lapses would block everyone else for nobody.
func TestReleaseWhoseClientHungUpStillReleases(t *testing.T) {
	m := newManager(t)
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
