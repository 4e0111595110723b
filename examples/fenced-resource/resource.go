// Package fencedresource is a worked example of a resource that checks
// fencing tokens: a tiny key-value store that accepts a write only when its
// fence is at least the highest fence it has seen, so a lock holder that
// was paused past its lease (and lost the lock to someone else) cannot
// overwrite the newer holder's work.
//
// The same rule in SQL, for a row that carries the fence of its last write:
//
//	UPDATE jobs SET state = $2, fence = $3 WHERE id = $1 AND fence <= $3;
//	-- 0 rows updated: a newer holder has written; abandon the work.
//
// Equal fences are accepted: one holder may write several times.
package fencedresource

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
)

// Store is the protected resource. Its zero value is ready to use.
type Store struct {
	mu      sync.Mutex
	highest int64
	value   string
}

// Write stores value if fence is not below the highest fence seen.
func (s *Store) Write(fence int64, value string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.highest {
		return false
	}
	s.highest, s.value = fence, value
	return true
}

// Value returns the last accepted value and its fence.
func (s *Store) Value() (string, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value, s.highest
}

// Handler serves PUT /value with the fence in the Fence header: 204 when
// accepted, 409 when the fence is stale, 400 without a valid fence.
func (s *Store) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		fence, err := strconv.ParseInt(r.Header.Get("Fence"), 10, 64)
		if err != nil {
			http.Error(w, `{"error":"a Fence header with the lock's fence is required"}`, http.StatusBadRequest)
			return
		}
		var body struct{ Value string }
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&body); err != nil {
			http.Error(w, `{"error":"body must be {\"value\": \"...\"}"}`, http.StatusBadRequest)
			return
		}
		if !s.Write(fence, body.Value) {
			http.Error(w, `{"error":"stale fence: a newer lock holder has written"}`, http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
