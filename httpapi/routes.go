package httpapi

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/sidelock/sidelock/internal/lease"
)

// addLockRoutes is every route of the lock API. Lock names may contain "/",
// so a name is the rest of the path after /locks/.
// The token check runs inside observe, so refused requests are counted.
func addLockRoutes(r chi.Router, log *slog.Logger, leases *lease.Manager, obs RequestObserver, o options) {
	r.Use(recoverer(log), observe(obs), refuseAmbiguousFraming(o.ambiguous, log), RequireToken(o.apiToken, log), limitBody(MaxBodyBytes))
	r.NotFound(notFound(log, "the lock API: /locks and /locks/{name}").ServeHTTP)
	r.MethodNotAllowed(methodNotAllowed(log).ServeHTTP)
	r.Method(http.MethodGet, "/locks", handleList(leases))
	r.Method(http.MethodPost, "/locks/*", handleAcquire(log, leases))
	r.Method(http.MethodPut, "/locks/*", handleExtend(log, leases))
	r.Method(http.MethodDelete, "/locks/*", handleRelease(log, leases))
	// GET /locks/{name}/events is a lease's event stream ("events" is a
	// reserved last segment of lock names); other GETs inspect.
	r.Method(http.MethodGet, "/locks/*", byEventsSuffix(handleEvents(log, leases), handleInspect(log, leases)))
}

// addAdminRoutes is every route of the admin listener.
func addAdminRoutes(r chi.Router, log *slog.Logger, ready Readiness, metrics http.Handler) {
	r.Use(recoverer(log))
	r.NotFound(notFound(log, "/healthz, /readyz and /metrics").ServeHTTP)
	r.MethodNotAllowed(methodNotAllowed(log).ServeHTTP)
	r.Method(http.MethodGet, "/healthz", handleHealthz())
	r.Method(http.MethodGet, "/readyz", handleReadyz(ready))
	r.Method(http.MethodGet, "/metrics", metrics)
}
