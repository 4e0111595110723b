package httpapi

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/watch"
)

// addLockRoutes is every route of the lock API. Lock names may contain "/",
// so a name is the rest of the path after /locks/ (after /semaphores/,
// /rwlocks/ and /locksets/ for the other kinds, each served by
// addKindRoutes; a lock set's "name" is its lock names joined by ",").
// The token check runs inside observe, so refused requests are counted.
func addLockRoutes(r chi.Router, log *slog.Logger, leases *lease.Manager, watches *watch.Hub, obs RequestObserver, o options) {
	r.Use(recoverer(log), observe(obs), refuseAmbiguousFraming(o.ambiguous, log), RequireToken(o.apiToken, log), limitBody(MaxBodyBytes))
	r.NotFound(notFound(log, "the lock API: /locks, /locks/{name}, /semaphores, /semaphores/{name}, /rwlocks, /rwlocks/{name}, /locksets and /locksets/{names}").ServeHTTP)
	r.MethodNotAllowed(methodNotAllowed(log).ServeHTTP)
	// GET /locks/{name} inspects, or watches; a semaphore's inspection
	// needs its permits; a read/write lock's and a lock set's take nothing.
	addKindRoutes(r, log, lockKind(leases), handleInspect(log, leases, watches))
	addKindRoutes(r, log, semaphoreKind(leases), handleInspectSemaphore(log, leases.Semaphores()))
	addKindRoutes(r, log, rwlockKind(leases), handleInspectRWLock(log, leases.RWLocks()))
	addKindRoutes(r, log, locksetKind(leases), handleInspectLockSet(log, leases.LockSets()))
}

// addKindRoutes serves one kind of lease, in a name space of its own:
// GET /locks lists, POST, PUT and DELETE /locks/{name} acquire, extend and
// release, GET /locks/{name}/events is a lease's event stream ("events" is
// a reserved last segment of names) and other GETs go to inspect.
func addKindRoutes(r chi.Router, log *slog.Logger, k kind, inspect http.Handler) {
	r.Method(http.MethodGet, strings.TrimSuffix(k.prefix, "/"), handleList(strings.Trim(k.prefix, "/"), k.list))
	r.Method(http.MethodPost, k.prefix+"*", handleAcquire(log, k))
	r.Method(http.MethodPut, k.prefix+"*", handleExtend(log, k))
	r.Method(http.MethodDelete, k.prefix+"*", handleRelease(log, k))
	r.Method(http.MethodGet, k.prefix+"*", byEventsSuffix(handleEvents(log, k), inspect))
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
