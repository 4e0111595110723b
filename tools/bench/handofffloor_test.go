package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// handOffFloor is the thinnest server of the contention workload on this
// platform: the same POST (wait) and DELETE over net/http, with no
// router, no middleware, no masters and no leases; a release hands the
// lock to the oldest waiter's goroutine, which answers its POST. A
// sidecar's hand-off cannot be shorter than this one's in the same run.
type handOffFloor struct {
	mu      sync.Mutex
	holder  string // the holder's token; "" when free
	issued  int
	waiting []chan string
}

func newHandOffFloor(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(&handOffFloor{})
	b.Cleanup(srv.Close)
	return srv
}

func (f *handOffFloor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		f.acquire(w, r)
	case http.MethodDelete:
		f.mu.Lock()
		ok := f.holder != "" && f.holder == r.Header.Get("Lock-Token")
		if ok {
			f.passLocked()
		}
		f.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusGone)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// acquire takes the lock, or waits for it to be handed over.
func (f *handOffFloor) acquire(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	var tok string
	if f.holder == "" {
		tok = f.tokenLocked()
		f.holder = tok
		f.mu.Unlock()
	} else {
		handed := make(chan string, 1)
		f.waiting = append(f.waiting, handed)
		f.mu.Unlock()
		select {
		case tok = <-handed:
		case <-r.Context().Done():
			f.leave(handed)
			return
		}
	}
	body := `{"token":"` + tok + `"}` + "\n"
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write([]byte(body))
}

// passLocked gives the lock to the oldest waiter, or frees it.
func (f *handOffFloor) passLocked() {
	f.holder = ""
	if len(f.waiting) > 0 {
		f.holder = f.tokenLocked()
		f.waiting[0] <- f.holder
		f.waiting = f.waiting[1:]
	}
}

// leave takes a departed waiter out of line, passing on a lock handed to
// it meanwhile.
func (f *handOffFloor) leave(handed chan string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, c := range f.waiting {
		if c == handed {
			f.waiting = append(f.waiting[:i], f.waiting[i+1:]...)
			return
		}
	}
	if tok := <-handed; tok == f.holder {
		f.passLocked()
	}
}

// tokenLocked is a fresh 32-character token, as the benchmark's client
// reads one.
func (f *handOffFloor) tokenLocked() string {
	f.issued++
	return fmt.Sprintf("%032x", f.issued)
}
