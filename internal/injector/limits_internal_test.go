package injector

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// While the reviews in progress hold the memory budget, another waits
// reviewBudgetWait, then gets 429 with Retry-After, which the API server
// retries; once they are done, it is answered.
func TestReviewBudgetFullAnswers429(t *testing.T) {
	inj := &Injector{spec: &Spec{name: "sidelock"}, log: slog.New(slog.DiscardHandler), budget: newReviewBudget(reviewBudgetBytes)}
	if !inj.budget.acquire(t.Context(), reviewBudgetBytes, 0) {
		t.Fatal("budget not free")
	}
	serve := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/mutate", strings.NewReader("{}"))
		r.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		inj.ServeHTTP(rec, r)
		return rec
	}
	start := time.Now()
	rec := serve()
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("HTTP %d, Retry-After %q, want 429 and 1", rec.Code, rec.Header().Get("Retry-After"))
	}
	if waited := time.Since(start); waited < reviewBudgetWait {
		t.Errorf("answered after %v, want a wait of %v first", waited, reviewBudgetWait)
	}
	inj.budget.release(reviewBudgetBytes)
	if rec := serve(); rec.Code != http.StatusBadRequest { // {} is not a review
		t.Errorf("HTTP %d once the budget is free, want 400", rec.Code)
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{strings.Repeat("a", 40), 20, "aaaaaaa…(40 bytes)"},
		{strings.Repeat("é", 20), 20, "ééé…(40 bytes)"}, // not cut inside a rune
	} {
		if got := clip(tc.in, tc.limit); got != tc.want || len(got) > tc.limit {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
	}
}
