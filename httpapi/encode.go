package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/pkg/redlock"
)

// problem is an RFC 9457 problem details body with a stable machine code.
type problem struct {
	Code         string `json:"code"`
	Title        string `json:"title"`
	Status       int    `json:"status"`
	Detail       string `json:"detail,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

// apiError is an error the edge already knows how to answer.
type apiError struct {
	status int
	code   string
	detail string
}

func (e *apiError) Error() string { return e.detail }

func badRequest(code, format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, code: code, detail: fmt.Sprintf(format, args...)}
}

// writeJSON is the one place that encodes a success body.
// The body is encoded first so the answer carries a Content-Length and
// goes out in one write, even when the handler flushes it itself.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"code":"internal","title":"Internal Server Error","status":500}`)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeError is the one place that maps an error to a status and a code.
func writeError(w http.ResponseWriter, log *slog.Logger, err error) {
	p := problemFor(err)
	if p.Status >= http.StatusInternalServerError && p.Code == "internal" {
		log.Error("request failed", "err", err)
	}
	if p.RetryAfterMS > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(float64(p.RetryAfterMS)/1000)), 10))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func problemFor(err error) problem {
	var api *apiError
	var held *lease.HeldError
	var tooBig *http.MaxBytesError
	var limit *lease.LimitError
	var quorum *redlock.QuorumError
	var overloaded *redlock.OverloadedError
	switch {
	case errors.As(err, &api):
		return newProblem(api.status, api.code, api.detail)
	case errors.As(err, &tooBig):
		return newProblem(http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit))
	case errors.As(err, &held):
		p := newProblem(http.StatusConflict, "lock_held", "the lock is held by another owner")
		p.RetryAfterMS = held.RetryAfter.Milliseconds()
		return p
	case errors.Is(err, lease.ErrIdempotencyMismatch):
		return newProblem(http.StatusUnprocessableEntity, "idempotency_mismatch", err.Error())
	case errors.Is(err, lease.ErrInvalid):
		return newProblem(http.StatusBadRequest, "invalid_request", err.Error())
	case errors.Is(err, lease.ErrLeaseGone):
		return newProblem(http.StatusGone, "lease_gone", "this token does not hold the lock (expired, lost, released or never held)")
	case errors.As(err, &limit):
		p := newProblem(http.StatusTooManyRequests, limitCode(limit.Err), err.Error())
		p.RetryAfterMS = limit.RetryAfter.Milliseconds()
		return p
	case errors.As(err, &overloaded):
		// The sidecar's own overload, not the masters': 429 with a retry
		// hint, so callers back off instead of failing over.
		p := newProblem(http.StatusTooManyRequests, "overloaded", err.Error())
		p.RetryAfterMS = max(overloaded.RetryAfter.Milliseconds(), 1)
		return p
	case errors.As(err, &quorum):
		p := newProblem(http.StatusServiceUnavailable, "no_quorum", err.Error())
		p.RetryAfterMS = quorum.RetryAfter.Milliseconds()
		return p
	case errors.Is(err, lease.ErrNoQuorum):
		return newProblem(http.StatusServiceUnavailable, "no_quorum", err.Error())
	case errors.Is(err, lease.ErrShuttingDown):
		return newProblem(http.StatusServiceUnavailable, "shutting_down", "the sidecar is shutting down")
	case errors.Is(err, context.Canceled):
		return newProblem(499, "client_closed_request", "the client went away before its request was carried out; an acquire holds nothing for it, a heartbeat left the lease as it was")
	case errors.Is(err, context.DeadlineExceeded):
		return newProblem(http.StatusServiceUnavailable, "timeout", "the masters did not answer in time")
	default:
		return newProblem(http.StatusInternalServerError, "internal", "internal error")
	}
}

// limitCode is the stable code of a refusal by a sidecar limit.
func limitCode(err error) string {
	if errors.Is(err, lease.ErrTooManyWaiters) {
		return "too_many_waiters"
	}
	return "too_many_locks"
}

func newProblem(status int, code, detail string) problem {
	title := http.StatusText(status)
	if title == "" {
		title = code
	}
	return problem{Code: code, Title: title, Status: status, Detail: detail}
}

// leaseBody is the answer to acquire and extend.
type leaseBody struct {
	Name           string    `json:"name"`
	Token          string    `json:"token,omitempty"`
	Owner          string    `json:"owner"`
	TTL            string    `json:"ttl"`
	AcquiredAt     time.Time `json:"acquired_at"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	ValidUntil     time.Time `json:"valid_until"`
	Fence          int64     `json:"fence,omitempty"`
	// MaxHoldAt is when the lease ends whatever the caller does.
	MaxHoldAt *time.Time `json:"max_hold_at,omitempty"`
}

func leaseJSON(in lease.Info) leaseBody {
	return leaseBody{
		Name:           in.Name,
		Token:          in.Token,
		Owner:          in.Owner,
		TTL:            in.TTL.String(),
		AcquiredAt:     in.AcquiredAt.UTC(),
		LeaseExpiresAt: in.LeaseExpiresAt.UTC(),
		ValidUntil:     in.ValidUntil.UTC(),
		Fence:          in.Fence,
		MaxHoldAt:      optionalTime(in.MaxHoldAt),
	}
}

// optionalTime is t in UTC, or nil for the zero time (omitted in JSON).
func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// statusBody is the answer to an inspection.
type statusBody struct {
	Name       string     `json:"name"`
	Held       bool       `json:"held"`
	Owner      string     `json:"owner,omitempty"`
	ValidUntil *time.Time `json:"valid_until,omitempty"`
	Fence      int64      `json:"fence,omitempty"`
}

func statusJSON(st lease.Status) statusBody {
	b := statusBody{Name: st.Name, Held: st.Held, Owner: st.Owner, Fence: st.Fence}
	if st.Held {
		b.ValidUntil = optionalTime(st.ValidUntil)
	}
	return b
}
