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
	"github.com/sidelock/sidelock/internal/watch"
	"github.com/sidelock/sidelock/pkg/redlock"
)

// problemCode is the stable machine code of a problem. Every code the API
// can answer is declared here, and only here: openapi.json lists exactly
// these in the Problem schema's code enum and docs/api.md has an anchor
// for each (TestProblemCodesMatchTheSpec reads this package's source).
type problemCode string

// The codes, by the status they come with.
const (
	// 400: the request itself.
	codeInvalidName      problemCode = "invalid_name"
	codeInvalidTTL       problemCode = "invalid_ttl"
	codeInvalidWait      problemCode = "invalid_wait"
	codeInvalidMaxHold   problemCode = "invalid_max_hold"
	codeInvalidHold      problemCode = "invalid_hold"
	codeInvalidOwner     problemCode = "invalid_owner"
	codeInvalidPermits   problemCode = "invalid_permits"
	codeInvalidMode      problemCode = "invalid_mode"
	codeInvalidWatch     problemCode = "invalid_watch"
	codeInvalidQuery     problemCode = "invalid_query"
	codeInvalidBody      problemCode = "invalid_body"
	codeInvalidRequest   problemCode = "invalid_request"
	codeMissingToken     problemCode = "missing_token"
	codeInvalidToken     problemCode = "invalid_token"
	codeAmbiguousFraming problemCode = "ambiguous_framing"
	// 401, 404, 405, 413: the request cannot be served as sent.
	codeUnauthorized     problemCode = "unauthorized"
	codeNotFound         problemCode = "not_found"
	codeMethodNotAllowed problemCode = "method_not_allowed"
	codeBodyTooLarge     problemCode = "body_too_large"
	// 409, 410, 422: the lock's state.
	codeLockHeld            problemCode = "lock_held"
	codeLeaseGone           problemCode = "lease_gone"
	codeIdempotencyMismatch problemCode = "idempotency_mismatch"
	codePermitsMismatch     problemCode = "permits_mismatch"
	codeSetChanged          problemCode = "set_changed"
	// 429: this sidecar's limits.
	codeTooManyLocks    problemCode = "too_many_locks"
	codeTooManyWaiters  problemCode = "too_many_waiters"
	codeTooManyWatchers problemCode = "too_many_watchers"
	codeOverloaded      problemCode = "overloaded"
	// 499: recorded (metrics) when the client left first; it never reads it.
	codeClientClosedRequest problemCode = "client_closed_request"
	// 500, 503: the sidecar or its masters.
	codeInternal     problemCode = "internal"
	codeNoQuorum     problemCode = "no_quorum"
	codeShuttingDown problemCode = "shutting_down"
	codeTimeout      problemCode = "timeout"
)

// problemTypeBase begins every problem's type URI; the code completes it.
// A type is an identifier first (RFC 9457 §3.1.1: compared as a string,
// never to be changed), and this one also leads a reader to the code's
// anchor in the API reference.
const problemTypeBase = "https://github.com/sidelock/sidelock/blob/main/docs/api.md#"

// typeURI is the one mapping from a code to its RFC 9457 type.
func (c problemCode) typeURI() string { return problemTypeBase + string(c) }

// paramCode is the code of a request refused for the value of one
// parameter (lease.ParamError): each has its own, invalid_request being
// the code of a parameter without one.
func paramCode(param string) problemCode {
	if p, ok := paramNamed(param); ok {
		return p.code
	}
	return codeInvalidRequest
}

// problem is an RFC 9457 problem details body with a stable machine code.
type problem struct {
	Type         string      `json:"type"`
	Code         problemCode `json:"code"`
	Title        string      `json:"title"`
	Status       int         `json:"status"`
	Detail       string      `json:"detail,omitempty"`
	RetryAfterMS int64       `json:"retry_after_ms,omitempty"`
}

// apiError is an error the edge already knows how to answer.
type apiError struct {
	status int
	code   problemCode
	detail string
}

func (e *apiError) Error() string { return e.detail }

func badRequest(code problemCode, format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, code: code, detail: fmt.Sprintf(format, args...)}
}

// writeJSON is the one place that encodes a success body.
// The body is encoded first so the answer carries a Content-Length and
// goes out in one write, even when the handler flushes it itself.
func writeJSON(w http.ResponseWriter, status int, v any) {
	contentType := "application/json"
	body, err := json.Marshal(v)
	if err != nil {
		status, contentType = http.StatusInternalServerError, problemMediaType
		body, _ = json.Marshal(newProblem(status, codeInternal, "internal error"))
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeError is the one place that maps an error to a status and a code.
func writeError(w http.ResponseWriter, log *slog.Logger, err error) {
	p := problemFor(err)
	if p.Code == codeInternal {
		log.Error("request failed", "err", err)
	}
	if p.RetryAfterMS > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(float64(p.RetryAfterMS)/1000)), 10))
	}
	w.Header().Set("Content-Type", problemMediaType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// problemMediaType is the Content-Type of every problem.
const problemMediaType = "application/problem+json"

func problemFor(err error) problem {
	var api *apiError
	var held *lease.HeldError
	var tooBig *http.MaxBytesError
	var limit *lease.LimitError
	var quorum *redlock.QuorumError
	var overloaded *redlock.OverloadedError
	var param *lease.ParamError
	switch {
	case errors.As(err, &api):
		return newProblem(api.status, api.code, api.detail)
	case errors.As(err, &tooBig):
		return newProblem(http.StatusRequestEntityTooLarge, codeBodyTooLarge, fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit))
	case errors.As(err, &held):
		p := newProblem(http.StatusConflict, codeLockHeld, heldDetail(err))
		p.RetryAfterMS = held.RetryAfter.Milliseconds()
		return p
	case errors.Is(err, lease.ErrPermitsMismatch):
		return newProblem(http.StatusConflict, codePermitsMismatch, err.Error())
	case errors.Is(err, lease.ErrSetChanged):
		// The set's own state, not the masters': none of it is held now,
		// and the same request may be sent again at once.
		return newProblem(http.StatusConflict, codeSetChanged, err.Error()+"; none of its locks is held: try again")
	case errors.Is(err, watch.ErrTooManyStreams):
		p := newProblem(http.StatusTooManyRequests, codeTooManyWatchers, err.Error())
		p.RetryAfterMS = watchRetryAfter.Milliseconds()
		return p
	case errors.Is(err, watch.ErrClosed):
		return newProblem(http.StatusServiceUnavailable, codeShuttingDown, "the sidecar is shutting down")
	case errors.Is(err, lease.ErrIdempotencyMismatch):
		return newProblem(http.StatusUnprocessableEntity, codeIdempotencyMismatch, err.Error())
	case errors.As(err, &param):
		return newProblem(http.StatusBadRequest, paramCode(param.Param), err.Error())
	case errors.Is(err, lease.ErrInvalid):
		return newProblem(http.StatusBadRequest, codeInvalidRequest, err.Error())
	case errors.Is(err, lease.ErrLeaseGone):
		return newProblem(http.StatusGone, codeLeaseGone, "this token does not hold the lock (expired, lost, released or never held)")
	case errors.As(err, &limit):
		p := newProblem(http.StatusTooManyRequests, limitCode(limit.Err), err.Error())
		p.RetryAfterMS = limit.RetryAfter.Milliseconds()
		return p
	case errors.As(err, &overloaded):
		// The sidecar's own overload, not the masters': 429 with a retry
		// hint, so callers back off instead of failing over.
		p := newProblem(http.StatusTooManyRequests, codeOverloaded, err.Error())
		p.RetryAfterMS = max(overloaded.RetryAfter.Milliseconds(), 1)
		return p
	case errors.As(err, &quorum):
		p := newProblem(http.StatusServiceUnavailable, codeNoQuorum, err.Error())
		p.RetryAfterMS = quorum.RetryAfter.Milliseconds()
		return p
	case errors.Is(err, lease.ErrNoQuorum):
		return newProblem(http.StatusServiceUnavailable, codeNoQuorum, err.Error())
	case errors.Is(err, lease.ErrShuttingDown):
		return newProblem(http.StatusServiceUnavailable, codeShuttingDown, "the sidecar is shutting down")
	case errors.Is(err, context.Canceled):
		return newProblem(499, codeClientClosedRequest, "the client went away before its request was carried out; an acquire holds nothing for it, a heartbeat left the lease as it was")
	case errors.Is(err, context.DeadlineExceeded):
		return newProblem(http.StatusServiceUnavailable, codeTimeout, "the masters did not answer in time")
	default:
		return newProblem(http.StatusInternalServerError, codeInternal, "internal error")
	}
}

// kindError is a refusal of an acquisition of one kind of lease: the
// answers whose words depend on the kind (lock_held's) name the kind asked
// for, and that kind alone.
type kindError struct {
	prefix string // the kind's path prefix (kinds.go)
	err    error
}

func (e *kindError) Error() string { return e.err.Error() }
func (e *kindError) Unwrap() error { return e.err }

// refusedFor marks err as the refusal of an acquisition of the kind whose
// paths begin with prefix.
func refusedFor(prefix string, err error) error { return &kindError{prefix: prefix, err: err} }

// heldDetail is lock_held's detail for the kind the request asked for.
func heldDetail(err error) string {
	var kind *kindError
	prefix := locks
	if errors.As(err, &kind) {
		prefix = kind.prefix
	}
	switch prefix {
	case semaphores:
		return "every permit of the semaphore is held"
	case rwlocks:
		return "the read/write lock is held the other way: a writer holds or awaits it, or readers hold it"
	case locksets:
		return "a lock of the set is held by another owner; none of the set was taken"
	default:
		return "the lock is held by another owner"
	}
}

// limitCode is the stable code of a refusal by a sidecar limit.
func limitCode(err error) problemCode {
	if errors.Is(err, lease.ErrTooManyWaiters) {
		return codeTooManyWaiters
	}
	return codeTooManyLocks
}

func newProblem(status int, code problemCode, detail string) problem {
	title := http.StatusText(status)
	if title == "" {
		title = string(code)
	}
	return problem{Type: code.typeURI(), Code: code, Title: title, Status: status, Detail: detail}
}

// watchRetryAfter is the retry hint of a refusal at the cap of watch streams: a
// stream frees its place only when its reader leaves.
const watchRetryAfter = time.Second

// leaseBody is the answer to acquire and extend.
type leaseBody struct {
	Name           string    `json:"name"`
	Token          string    `json:"token,omitempty"`
	Owner          string    `json:"owner"`
	TTL            string    `json:"ttl"`
	AcquiredAt     time.Time `json:"acquired_at"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	ValidUntil     time.Time `json:"valid_until"`
	// Fence is present for every lease that has one of its own (fenceOf).
	Fence *int64 `json:"fence,omitempty"`
	// MaxHoldAt is when the lease ends whatever the caller does.
	MaxHoldAt *time.Time `json:"max_hold_at,omitempty"`
	// Permits and Slot describe a semaphore's permit (absent for a lock).
	Permits int `json:"permits,omitempty"`
	Slot    int `json:"slot,omitempty"` // also a reader's (1..lease.MaxReaders)
	// Mode is a read/write lock's side: shared (a reader) or exclusive.
	Mode lease.Mode `json:"mode,omitempty"`
	// Locks are a lock set's locks, in canonical order (absent otherwise).
	Locks []setLockBody `json:"locks,omitempty"`
}

// setLockBody is one lock of a lock set's lease, with its own fence and
// validity; the set's valid_until is the earliest of them.
type setLockBody struct {
	Name       string    `json:"name"`
	Fence      int64     `json:"fence,omitempty"`
	ValidUntil time.Time `json:"valid_until"`
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
		Fence:          fenceOf(in),
		MaxHoldAt:      optionalTime(in.MaxHoldAt),
		Permits:        in.Permits,
		Slot:           in.Slot,
		Mode:           in.Mode,
		Locks:          setLocksJSON(in.Locks),
	}
}

// fenceOf is a lease's fence, always present for a lease that has one of
// its own, a lock, a permit or a writer (0 with SIDELOCK_FENCING off: the
// spec's FencedGrant requires it); absent for a reader and a lock set,
// which have none (a set's locks carry theirs).
func fenceOf(in lease.Info) *int64 {
	if in.Mode == lease.ModeShared || len(in.Locks) > 0 {
		return nil
	}
	return &in.Fence
}

// setLocksJSON is a lock set's locks (nil for every other lease).
func setLocksJSON(locks []lease.Info) []setLockBody {
	if len(locks) == 0 {
		return nil
	}
	out := make([]setLockBody, len(locks))
	for i, l := range locks {
		out[i] = setLockBody{Name: l.Name, Fence: l.Fence, ValidUntil: l.ValidUntil.UTC()}
	}
	return out
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

// semaphoreBody is the answer to a semaphore's inspection.
type semaphoreBody struct {
	Name    string       `json:"name"`
	Permits int          `json:"permits"`
	Held    int          `json:"held"`
	Holders []holderBody `json:"holders"`
}

// holderBody is one held slot of a semaphore, or one reader or the writer
// of a read/write lock (the writer has no slot).
type holderBody struct {
	Slot       int       `json:"slot,omitempty"`
	Owner      string    `json:"owner"`
	Fence      int64     `json:"fence,omitempty"`
	ValidUntil time.Time `json:"valid_until"`
}

func semaphoreJSON(st lease.SemaphoreStatus) semaphoreBody {
	b := semaphoreBody{Name: st.Name, Permits: st.Permits, Held: len(st.Holders), Holders: make([]holderBody, 0, len(st.Holders))}
	for _, h := range st.Holders {
		b.Holders = append(b.Holders, holderJSON(h))
	}
	return b
}

func holderJSON(h lease.Status) holderBody {
	return holderBody{Slot: h.Slot, Owner: h.Owner, Fence: h.Fence, ValidUntil: h.ValidUntil.UTC()}
}

// rwlockBody is the answer to a read/write lock's inspection.
type rwlockBody struct {
	Name   string      `json:"name"`
	Writer *holderBody `json:"writer"` // null when no writer holds it
	// Readers are the held reader slots, by slot.
	Readers     []holderBody `json:"readers"`
	ReaderCount int          `json:"reader_count"`
	// WriterWaiting: a majority holds a writer's intent, so new readers
	// are refused.
	WriterWaiting bool `json:"writer_waiting"`
}

func rwlockJSON(st lease.RWStatus) rwlockBody {
	b := rwlockBody{Name: st.Name, Readers: make([]holderBody, 0, len(st.Readers)), ReaderCount: len(st.Readers), WriterWaiting: st.WriterWaiting}
	if st.Writer.Held {
		w := holderJSON(st.Writer)
		b.Writer = &w
	}
	for _, r := range st.Readers {
		b.Readers = append(b.Readers, holderJSON(r))
	}
	return b
}

// lockSetBody is the answer to a lock set's inspection: each lock as a
// lock's inspection answers it, in canonical order, and how many are held.
type lockSetBody struct {
	Name  string       `json:"name"`
	Locks []statusBody `json:"locks"`
	Held  int          `json:"held"`
}

func lockSetJSON(st lease.SetStatus) lockSetBody {
	b := lockSetBody{Name: st.Name, Locks: make([]statusBody, 0, len(st.Locks))}
	for _, l := range st.Locks {
		b.Locks = append(b.Locks, statusJSON(l))
		if l.Held {
			b.Held++
		}
	}
	return b
}

// watchBody is the data of a watch stream's events: state and acquired
// name the holder, released says why the name is free, unavailable why
// it cannot be read.
type watchBody struct {
	Name       string     `json:"name"`
	Held       bool       `json:"held"`
	Owner      string     `json:"owner,omitempty"`
	Fence      int64      `json:"fence,omitempty"`
	ValidUntil *time.Time `json:"valid_until,omitempty"`
	Since      *time.Time `json:"since,omitempty"`
	Reason     string     `json:"reason,omitempty"`
	Detail     string     `json:"detail,omitempty"`
}

func watchJSON(name string, c watch.Change) watchBody {
	b := watchBody{Name: name, Held: c.Status.Held, Reason: c.Reason}
	if c.Status.Held {
		b.Owner, b.Fence = c.Status.Owner, c.Status.Fence
		b.ValidUntil, b.Since = optionalTime(c.Status.ValidUntil), optionalTime(c.Since)
	}
	if c.Err != nil {
		b.Detail = c.Err.Error()
	}
	return b
}
