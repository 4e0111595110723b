package httpapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/sidelock/sidelock/internal/lease"
)

func handleAcquire(log *slog.Logger, leases *lease.Manager) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := acquireRequest(r)
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
		info, err := leases.Acquire(r.Context(), req)
		if err != nil {
			writeError(w, log, err)
			return
		}
		if req.Hold {
			serveHold(w, r, leases, info)
			return
		}
		deliverGrant(w, r, leases, info)
	})
}

func handleExtend(log *slog.Logger, leases *lease.Manager) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr, err := readTokenRequest(r, true)
		if err != nil {
			writeError(w, log, err)
			return
		}
		info, err := leases.Extend(r.Context(), tr.name, tr.token, tr.ttl)
		if err != nil {
			writeError(w, log, err)
			return
		}
		writeJSON(w, http.StatusOK, leaseJSON(info))
	})
}

func handleRelease(log *slog.Logger, leases *lease.Manager) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr, err := readTokenRequest(r, false)
		if err != nil {
			writeError(w, log, err)
			return
		}
		// A DELETE that arrived whole is carried out even if its client
		// hangs up: leaving the lock held until its lease lapses would
		// block everyone else for nobody.
		if err := leases.Release(context.WithoutCancel(r.Context()), tr.name, tr.token); err != nil {
			writeError(w, log, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

func handleInspect(log *slog.Logger, leases *lease.Manager) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := lockName(r)
		if err == nil && r.URL.RawQuery != "" {
			err = badRequest(codeInvalidQuery, "inspect takes no parameters")
		}
		if err != nil {
			writeError(w, log, err)
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

func handleList(leases *lease.Manager) http.Handler {
	type listBody struct {
		Locks []leaseBody `json:"locks"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		infos := leases.List()
		body := listBody{Locks: make([]leaseBody, 0, len(infos))}
		for _, in := range infos {
			body.Locks = append(body.Locks, leaseJSON(in))
		}
		writeJSON(w, http.StatusOK, body)
	})
}

// deliverGrant answers a grant, releasing it if the caller is already gone
// or the answer cannot be delivered: a lock must not stay held for a caller
// that never learned its token. (A client that vanished without the kernel
// telling the server yet is caught only by its lease ttl.)
func deliverGrant(w http.ResponseWriter, r *http.Request, leases *lease.Manager, info lease.Info) {
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
