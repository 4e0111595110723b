package httpapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/watch"
)

func handleAcquire(log *slog.Logger, k kind) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := acquireRequest(r, k)
		if err != nil {
			writeError(w, log, err)
			return
		}
		if req.Hold && isReconnect(r) {
			// An SSE client reconnecting to a held stream: that lease
			// ended with its connection. 204 stops EventSource; taking
			// the lock again would hand the caller a new lease it never
			// learns of, as if it had never lost the old one.
			w.WriteHeader(http.StatusNoContent)
			return
		}
		info, err := k.api.Acquire(r.Context(), req)
		if err != nil {
			writeError(w, log, refusedFor(k.prefix, err))
			return
		}
		if req.Hold {
			serveHold(w, r, k.api, info)
			return
		}
		deliverGrant(w, r, k.api, info)
	})
}

func handleExtend(log *slog.Logger, k kind) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr, err := readTokenRequest(r, k, opExtend)
		if err != nil {
			writeError(w, log, err)
			return
		}
		info, err := k.api.Extend(r.Context(), tr.name, tr.token, tr.ttl)
		if err != nil {
			writeError(w, log, err)
			return
		}
		writeJSON(w, http.StatusOK, leaseJSON(info))
	})
}

func handleRelease(log *slog.Logger, k kind) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr, err := readTokenRequest(r, k, opRelease)
		if err != nil {
			writeError(w, log, err)
			return
		}
		// A DELETE that arrived whole is carried out even if its client
		// hangs up: leaving the lock held until its lease lapses would
		// block everyone else for nobody.
		if err := k.api.Release(context.WithoutCancel(r.Context()), tr.name, tr.token); err != nil {
			writeError(w, log, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// handleInspect reads a lock from the masters, or with watch=true
// streams its holder and every change (package watch).
func handleInspect(log *slog.Logger, leases *lease.Manager, watches *watch.Hub) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := nameIn(r, locks)
		var watching bool
		if err == nil {
			watching, err = watchParam(r.URL.RawQuery)
		}
		if err != nil {
			writeError(w, log, err)
			return
		}
		if watching {
			serveWatch(w, r, log, watches, name)
			return
		}
		st, err := leases.Inspect(r.Context(), name)
		if err != nil {
			writeError(w, log, err)
			return
		}
		writeJSON(w, http.StatusOK, statusJSON(st))
	})
}

// handleInspectSemaphore reads every slot of a semaphore; permits is
// required, as the masters do not know it.
func handleInspectSemaphore(log *slog.Logger, sems lease.Semaphores) http.Handler {
	return handleRead(log, semaphores, func(ctx context.Context, name, rawQuery string) (any, error) {
		permits, err := permitsQuery(rawQuery)
		if err != nil {
			return nil, err
		}
		st, err := sems.Inspect(ctx, name, permits)
		return semaphoreJSON(st), err
	})
}

// handleInspectRWLock reads a read/write lock's writer, readers and
// writer's intent; it takes no parameters.
func handleInspectRWLock(log *slog.Logger, rws lease.RWLocks) http.Handler {
	return handleRead(log, rwlocks, func(ctx context.Context, name, rawQuery string) (any, error) {
		if _, err := strictQuery(rawQuery); err != nil {
			return nil, err
		}
		st, err := rws.Inspect(ctx, name)
		return rwlockJSON(st), err
	})
}

// handleInspectLockSet reads every lock of a set from the masters; it
// takes no parameters.
func handleInspectLockSet(log *slog.Logger, sets lease.LockSets) http.Handler {
	return handleRead(log, locksets, func(ctx context.Context, name, rawQuery string) (any, error) {
		if _, err := strictQuery(rawQuery); err != nil {
			return nil, err
		}
		st, err := sets.Inspect(ctx, name)
		return lockSetJSON(st), err
	})
}

// handleRead answers a read of the masters about the name after prefix:
// read checks the query and returns the body of the answer.
func handleRead(log *slog.Logger, prefix string, read func(ctx context.Context, name, rawQuery string) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := nameIn(r, prefix)
		var body any
		if err == nil {
			body, err = read(r.Context(), name, r.URL.RawQuery)
		}
		if err != nil {
			writeError(w, log, err)
			return
		}
		writeJSON(w, http.StatusOK, body)
	})
}

// handleList lists this sidecar's live leases of one kind, without tokens.
func handleList(field string, list func() []lease.Info) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		infos := list()
		bodies := make([]leaseBody, 0, len(infos))
		for _, in := range infos {
			bodies = append(bodies, leaseJSON(in))
		}
		writeJSON(w, http.StatusOK, map[string][]leaseBody{field: bodies})
	})
}

// deliverGrant answers a grant, releasing it if the caller is already gone
// or the answer cannot be delivered: a lock must not stay held for a caller
// that never learned its token. (A client that vanished without the kernel
// telling the server yet is caught only by its lease ttl.)
func deliverGrant(w http.ResponseWriter, r *http.Request, leases leaseAPI, info lease.Info) {
	release := func() { _ = leases.Release(context.WithoutCancel(r.Context()), info.Name, info.Token) }
	if r.Context().Err() != nil {
		release()
		return
	}
	writeJSON(w, http.StatusOK, leaseJSON(info))
	if err := http.NewResponseController(w).Flush(); err != nil {
		release()
	}
}
