package httpapi

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/watch"
)

// addLockRoutes is every route of the lock API. Lock names may contain "/",
// so a name is the rest of the path after /locks/.
// The token check runs inside observe, so refused requests are counted.
func addLockRoutes(r chi.Router, log *slog.Logger, leases *lease.Manager, watches *watch.Hub, obs RequestObserver, o options) {
	r.Use(recoverer(log), observe(obs), refuseAmbiguousFraming(o.ambiguous, log), RequireToken(o.apiToken, log), limitBody(MaxBodyBytes))
	r.NotFound(notFound(log, "the lock API: /locks, /locks/{name}, /semaphores and /semaphores/{name}").ServeHTTP)
	r.MethodNotAllowed(methodNotAllowed(log).ServeHTTP)
	lock, sem := lockKind(leases), semaphoreKind(leases)
	r.Method(http.MethodGet, "/locks", handleList("locks", leases.List))
	r.Method(http.MethodPost, locks+"*", handleAcquire(log, lock))
	r.Method(http.MethodPut, locks+"*", handleExtend(log, lock))
	r.Method(http.MethodDelete, locks+"*", handleRelease(log, lock))
	// GET /locks/{name}/events is a lease's event stream ("events" is a
	// reserved last segment of names); other GETs inspect, or watch.
	r.Method(http.MethodGet, locks+"*", byEventsSuffix(handleEvents(log, lock), handleInspect(log, leases, watches)))
	// Semaphores: the same routes for permits, in a space of their own.
	r.Method(http.MethodGet, "/semaphores", handleList("semaphores", leases.Semaphores().List))
	r.Method(http.MethodPost, semaphores+"*", handleAcquire(log, sem))
	r.Method(http.MethodPut, semaphores+"*", handleExtend(log, sem))
	r.Method(http.MethodDelete, semaphores+"*", handleRelease(log, sem))
	r.Method(http.MethodGet, semaphores+"*", byEventsSuffix(handleEvents(log, sem), handleInspectSemaphore(log, leases.Semaphores())))
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
