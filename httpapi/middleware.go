package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
)

// notFound answers a path the listener does not serve; routes says which
// it does.
func notFound(log *slog.Logger, routes string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, log, &apiError{status: http.StatusNotFound, code: codeNotFound, detail: "no such route; this listener serves " + routes})
	})
}

func methodNotAllowed(log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, log, &apiError{status: http.StatusMethodNotAllowed, code: codeMethodNotAllowed, detail: fmt.Sprintf("%s is not allowed on this route", r.Method)})
	})
}

// RequireToken guards the lock API with a bearer token: every request must
// carry "Authorization: Bearer <token>", or it is answered 401 before any
// route runs. An empty token lets every request through (the API is then
// reachable from the pod only; see SIDELOCK_API_TOKEN). The token is never
// logged or echoed.
func RequireToken(token string, log *slog.Logger) func(http.Handler) http.Handler {
	if token == "" {
		return func(next http.Handler) http.Handler { return next }
	}
	want := sha256.Sum256([]byte(token))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := checkBearer(r.Header.Values("Authorization"), want); err != nil {
				log.Debug("unauthorized lock API request", "method", r.Method, "remote", r.RemoteAddr, "reason", err.detail)
				w.Header().Set("WWW-Authenticate", `Bearer realm="sidelock"`)
				writeError(w, log, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// checkBearer accepts exactly one "Bearer <token>" header whose token
// hashes to want. Comparing fixed-size hashes in constant time leaks
// neither the token's bytes nor its length through the answer's timing.
func checkBearer(headers []string, want [sha256.Size]byte) *apiError {
	unauthorized := func(detail string) *apiError {
		return &apiError{status: http.StatusUnauthorized, code: codeUnauthorized, detail: detail}
	}
	if len(headers) != 1 {
		return unauthorized("the lock API needs exactly one Authorization: Bearer <SIDELOCK_API_TOKEN> header")
	}
	scheme, credential, _ := strings.Cut(headers[0], " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return unauthorized("the Authorization header must use the Bearer scheme")
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(credential)))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return unauthorized("the bearer token is not this sidecar's API token")
	}
	return nil
}

// refuseAmbiguousFraming answers 400 and closes the connection when it
// sent a request with both Content-Length and Transfer-Encoding: the
// server took the body as chunked, but another parser on the path may not
// have (request smuggling, RFC 9112 §6.3), so nothing more on that
// connection is trusted.
func refuseAmbiguousFraming(ambiguous func(remoteAddr string) bool, log *slog.Logger) func(http.Handler) http.Handler {
	if ambiguous == nil {
		return func(next http.Handler) http.Handler { return next }
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !ambiguous(r.RemoteAddr) {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Connection", "close")
			writeError(w, log, badRequest(codeAmbiguousFraming, "a request on this connection carried both Content-Length and Transfer-Encoding; the connection is closed"))
		})
	}
}

// limitBody caps request bodies; reading past the cap yields a 413.
func limitBody(n int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, n)
			next.ServeHTTP(w, r)
		})
	}
}

// recoverer turns a panic into a JSON 500 and a log line (never expected).
func recoverer(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
						panic(v)
					}
					writeError(w, log, fmt.Errorf("panic: %v", v))
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// observe reports each request by route pattern, never by raw path (which
// holds the lock name) or query (which may hold a token).
func observe(obs RequestObserver) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if obs == nil {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, r)
			route := "unmatched"
			if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
				route = rc.RoutePattern()
			}
			obs.Request(route, methodLabel(r.Method), sw.status, time.Since(start))
		})
	}
}

type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the underlying writer
// (flushing for streams).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// methodLabel bounds the method label: clients may send any token.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions:
		return m
	}
	return "other"
}
