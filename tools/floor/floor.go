// Package floor is the thinnest lock sidecar sidelock's design allows on its
// platform (chi on net/http, go-redis v9): POST /locks/{name} takes the
// lock and DELETE /locks/{name} (Lock-Token header) releases it, with the
// same Redis commands sidelock sends for an uncontended pair — one script
// call per master per round, one round each, the very scripts
// (redisnode.PairScripts) — and nothing else: no lease, queue, renewal,
// admission, metrics, events or logging. The value on the masters is the
// token itself, so no state is kept between requests.
//
// It is the limit of this design, measured beside sidelock in `make bench`
// (tools/bench): what sidelock costs above it is sidelock's; what it costs
// is the platform's. HTTPOnly goes one step lower still: the same routes
// and bodies with no Redis at all. It is a measuring tool, not a lock
// service: a grant whose fence proposal a majority did not commit (clocks
// apart) is refused rather than given its commit round.
package floor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// Settings of every grant: sidelock's defaults (key ttl 10 s, fence
// retention 1 h, a proposal 1 s ahead of the clock, blocks of 64 fences).
const (
	keyTTL       = 10 * time.Second
	retention    = time.Hour
	proposalLead = time.Second
	block        = 64
)

// Errors of a pair.
var (
	ErrHeld     = errors.New("held by another value")
	ErrNoQuorum = errors.New("no quorum")
)

// NewClient is a go-redis client to one master with go-redis's defaults,
// but for RESP2 and no CLIENT SETINFO (as sidelock: they only add a round
// per dial).
func NewClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
}

// Locker takes and releases keys on its masters with sidelock's scripts.
type Locker struct {
	masters          []*redis.Client
	acquire, release *redis.Script
	prefix           string
}

// NewLocker returns a Locker over masters whose keys begin with prefix.
func NewLocker(masters []*redis.Client, prefix string) *Locker {
	acquire, release := redisnode.PairScripts(len(masters))
	return &Locker{masters: masters, acquire: acquire, release: release, prefix: prefix}
}

// Acquire takes name on a majority in one round and returns the token (the
// value on the masters) and the fence.
func (l *Locker) Acquire(ctx context.Context, name string) (string, int64, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	key := l.prefix + name
	start := time.Now()
	// One master commits a block above its floor at once; several commit
	// the proposed block's top (take_tenure.lua's fencing modes).
	mode, proposal := redlock.FenceAtOnce, int64(0)
	if len(l.masters) > 1 {
		mode, proposal = redlock.FenceProposed, start.Add(proposalLead).UnixMicro()+block-1
	}
	keys := redlock.TenureKeysOf(key)
	replies := make([][]any, len(l.masters))
	l.each(func(i int, c *redis.Client) {
		replies[i], _ = l.acquire.Run(ctx, c, []string{keys.Key, keys.Fence, keys.Holder, keys.Marks},
			token, keyTTL.Milliseconds(), "", mode, proposal, block, retention.Milliseconds(),
			token, "", "", "floor", start.UnixMicro(), 0).Slice()
	})
	fence, err := l.judge(replies)
	if err == nil && time.Since(start) >= keyTTL {
		err = ErrNoQuorum
	}
	if err != nil {
		_ = l.Release(ctx, name, token)
		return "", 0, err
	}
	return token, fence, nil
}

// judge counts the masters that took the key (and committed the block);
// the grant's fence is the block's first.
func (l *Locker) judge(replies [][]any) (int64, error) {
	took, held, fence := 0, 0, int64(0)
	for _, r := range replies {
		if len(r) != 11 {
			continue
		}
		acquired, _ := r[0].(int64)
		top, _ := r[2].(int64)
		committed, _ := r[3].(int64)
		switch {
		case acquired == 1 && committed == 1:
			took++
			fence = max(fence, top-block+1)
		case acquired == 0:
			held++
		}
	}
	quorum := len(l.masters)/2 + 1
	switch {
	case took >= quorum:
		return fence, nil
	case held > 0:
		return 0, ErrHeld
	}
	return 0, ErrNoQuorum
}

// Release deletes name where token holds it, in one round.
func (l *Locker) Release(ctx context.Context, name, token string) error {
	k := redlock.TenureKeysOf(l.prefix + name)
	keys := []string{k.Key, k.Holder, k.Marks}
	answered := make([]bool, len(l.masters))
	l.each(func(i int, c *redis.Client) {
		answered[i] = l.release.Run(ctx, c, keys, token, "floor", 0, 0, "").Err() == nil
	})
	n := 0
	for _, a := range answered {
		if a {
			n++
		}
	}
	if n < len(l.masters)/2+1 {
		return ErrNoQuorum
	}
	return nil
}

// each calls every master in parallel, the first on this goroutine (as
// sidelock's fan-out does), and waits for all.
func (l *Locker) each(call func(i int, c *redis.Client)) {
	var wg sync.WaitGroup
	for i, c := range l.masters[1:] {
		wg.Go(func() { call(i+1, c) })
	}
	call(0, l.masters[0])
	wg.Wait()
}

// grantBody is the answer to an acquire: what a caller needs of sidelock's.
type grantBody struct {
	Name       string    `json:"name"`
	Token      string    `json:"token"`
	Fence      int64     `json:"fence,omitempty"`
	ValidUntil time.Time `json:"valid_until"`
}

// Handler serves the two routes over l.
func Handler(l *Locker) http.Handler {
	return routes(
		func(r *http.Request, name string) (string, int64, error) { return l.Acquire(r.Context(), name) },
		func(r *http.Request, name, token string) error { return l.Release(r.Context(), name, token) })
}

// HandlerReleasingAfter is Handler whose DELETE answers before its
// release round, which then runs on a goroutine of its own: the floor of
// a "release off the caller's path" (issue 30, item 2), for the question
// of what that can gain on this platform.
func HandlerReleasingAfter(l *Locker) http.Handler {
	return routes(
		func(r *http.Request, name string) (string, int64, error) { return l.Acquire(r.Context(), name) },
		func(_ *http.Request, name, token string) error {
			go func() { _ = l.Release(context.Background(), name, token) }()
			return nil
		})
}

// HTTPOnly serves the same routes and bodies with no Redis: the floor of
// the HTTP exchange alone.
func HTTPOnly() http.Handler {
	return routes(
		func(*http.Request, string) (string, int64, error) {
			var b [16]byte
			_, _ = rand.Read(b[:])
			return hex.EncodeToString(b[:]), 1, nil
		},
		func(*http.Request, string, string) error { return nil })
}

func routes(acquire func(*http.Request, string) (string, int64, error), release func(*http.Request, string, string) error) http.Handler {
	r := chi.NewRouter()
	r.Post("/locks/*", func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "*")
		token, fence, err := acquire(r, name)
		if err != nil {
			fail(w, err)
			return
		}
		body, _ := json.Marshal(grantBody{Name: name, Token: token, Fence: fence, ValidUntil: time.Now().Add(keyTTL).UTC()})
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
	r.Delete("/locks/*", func(w http.ResponseWriter, r *http.Request) {
		if err := release(r, chi.URLParam(r, "*"), r.Header.Get("Lock-Token")); err != nil {
			fail(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return r
}

func fail(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrHeld) {
		w.WriteHeader(http.StatusConflict)
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
}
