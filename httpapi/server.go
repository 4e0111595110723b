// Package httpapi is the sidecar's HTTP layer: it serves sidelock's lock
// API on loopback and its admin endpoints (health, readiness, metrics).
// Every route is in routes.go; every error becomes a status and a JSON
// problem in encode.go.
//
// It is not a client library: it takes the sidecar's internal types (the
// lease Manager, the health checker, the watch hub), which no other module
// can build. The Go client of this API is pkg/client.
package httpapi

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/watch"
)

// MaxBodyBytes caps every request body.
const MaxBodyBytes = 64 << 10

// RequestObserver records finished requests (for metrics).
type RequestObserver interface {
	Request(route, method string, code int, elapsed time.Duration)
}

// Readiness reports whether a quorum of masters answers.
type Readiness interface {
	Report() health.Report
}

// Option configures the lock API handler.
type Option func(*options)

type options struct {
	apiToken  string
	ambiguous func(remoteAddr string) bool
	watches   *watch.Hub
}

// WithWatches serves lock watches (GET /locks/{name}?watch=true) from
// hub, which the caller closes at shutdown to end the streams. Without
// it, NewServer makes a Hub of its own over the Manager, which learns of
// the Manager's own leases by the masters' announcements and its poll
// only, and whose streams end only with their readers (tests only).
func WithWatches(hub *watch.Hub) Option { return func(o *options) { o.watches = hub } }

// WithAPIToken makes every request carry "Authorization: Bearer <token>"
// (see RequireToken); refusals are counted like every other answer.
func WithAPIToken(token string) Option { return func(o *options) { o.apiToken = token } }

// WithFramingCheck refuses every request of a connection for which
// ambiguous(r.RemoteAddr) is true (one that sent a request with both
// Content-Length and Transfer-Encoding; see internal/framing), and closes
// it.
func WithFramingCheck(ambiguous func(remoteAddr string) bool) Option {
	return func(o *options) { o.ambiguous = ambiguous }
}

// NewServer returns the lock API handler.
func NewServer(log *slog.Logger, leases *lease.Manager, obs RequestObserver, opts ...Option) http.Handler {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.watches == nil {
		o.watches = watch.New(watch.Config{Source: leases})
	}
	r := chi.NewRouter()
	addLockRoutes(r, log, leases, o.watches, obs, o)
	return r
}

// NewAdminServer returns the admin handler: /healthz, /readyz, /metrics.
func NewAdminServer(log *slog.Logger, ready Readiness, metrics http.Handler) http.Handler {
	r := chi.NewRouter()
	addAdminRoutes(r, log, ready, metrics)
	return r
}
