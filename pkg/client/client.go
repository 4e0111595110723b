// Package client is a small Go client of sidelock's HTTP lock API, used by
// `sidelock exec`, the examples and the benchmarks: locks, semaphores,
// read/write locks, watching a lock and leader election. Applications in any language can
// use the API with plain HTTP; this package only saves Go callers the
// JSON and the server-sent events parsing.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultAddr is where the sidecar's lock API listens in a pod.
const DefaultAddr = "http://127.0.0.1:7420"

// Errors the API answers with; match them with errors.Is. The *Error
// carries the details.
var (
	// ErrLockHeld: the lock is held; for a semaphore, all its permits
	// are; for a read/write lock, the other side holds it (or a writer
	// waits, for a reader).
	ErrLockHeld  = errors.New("lock held")
	ErrLeaseGone = errors.New("lease gone")
	ErrNoQuorum  = errors.New("no quorum")
	// ErrPermitsMismatch: this sidecar has holders or waiters of the
	// semaphore that asked for another number of permits; every caller of
	// a semaphore must agree on it.
	ErrPermitsMismatch = errors.New("permits mismatch")
)

// Error is an API error: its HTTP status and problem details.
type Error struct {
	Status     int
	Code       string
	Detail     string
	RetryAfter time.Duration
}

func (e *Error) Error() string { return fmt.Sprintf("sidelock: %d %s: %s", e.Status, e.Code, e.Detail) }

// Is maps the stable codes to the sentinel errors.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrLockHeld:
		return e.Code == "lock_held"
	case ErrLeaseGone:
		return e.Code == "lease_gone"
	case ErrNoQuorum:
		return e.Code == "no_quorum"
	case ErrPermitsMismatch:
		return e.Code == "permits_mismatch"
	}
	return false
}

// Lease is a granted lock, a semaphore's permit, or a read/write lock's
// read or write.
type Lease struct {
	Name           string    `json:"name"`
	Token          string    `json:"token"`
	Owner          string    `json:"owner"`
	TTL            string    `json:"ttl"`
	AcquiredAt     time.Time `json:"acquired_at"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	ValidUntil     time.Time `json:"valid_until"`
	Fence          int64     `json:"fence"`
	// MaxHoldAt is when the lease ends whatever the caller does (its
	// max_hold); zero when uncapped.
	MaxHoldAt time.Time `json:"max_hold_at"`
	// Permits and Slot are a semaphore permit's: the semaphore's number of
	// permits and which of its slots (1..Permits) this lease holds. The
	// fence orders the holders of one slot only.
	// A reader of a read/write lock has a Slot too (which of the reader
	// slots it holds) and no fence.
	Permits int `json:"permits,omitempty"`
	Slot    int `json:"slot,omitempty"`
	// Mode is a read/write lock's side: Shared or Exclusive ("" else).
	Mode Mode `json:"mode,omitempty"`
	// Locks are a lock set's locks, each with its fence (nil else).
	Locks []SetLock `json:"locks,omitempty"`
}

// Options tune an acquisition; zero values take the sidecar's defaults.
type Options struct {
	TTL     time.Duration
	Wait    time.Duration
	MaxHold time.Duration
	Owner   string
	// IdempotencyKey makes a retried Acquire return the lease the first
	// attempt got. Acquire only: the sidecar refuses it with Hold (400
	// invalid_request), as a held lease ends with its connection and a
	// retry is a new acquisition.
	IdempotencyKey string
}

// Client talks to one sidecar.
type Client struct {
	base   string
	http   *http.Client
	bearer string // the sidecar's API token, when it requires one
}

// WithToken returns a client that sends the sidecar's API token
// (SIDELOCK_API_TOKEN) as a bearer token on every request.
func (c *Client) WithToken(token string) *Client {
	cc := *c
	cc.bearer = token
	return &cc
}

// New returns a client of the sidecar at base (e.g. DefaultAddr). A nil
// httpClient uses one without a timeout: acquisitions may wait and held
// locks stream for as long as they are held; bound calls with ctx.
func New(base string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	return &Client{base: strings.TrimRight(base, "/"), http: httpClient}
}

// keyspace is where names live in the API: the lock "x", the semaphore
// "x" and the read/write lock "x" are unrelated. Every request of each
// goes through do with one of them.
type keyspace string

const (
	locks      keyspace = "/locks/"
	semaphores keyspace = "/semaphores/"
	rwlocks    keyspace = "/rwlocks/"
)

// path is name's resource in the keyspace.
func (k keyspace) path(name string) string { return string(k) + lockPath(name) }

// Acquire takes a lock, waiting up to opts.Wait while it is held.
func (c *Client) Acquire(ctx context.Context, name string, opts Options) (Lease, error) {
	return c.acquire(ctx, locks.path(name), opts.query(false), opts.IdempotencyKey)
}

// Extend is the heartbeat: it pushes the lease out (by ttl when non-zero).
func (c *Client) Extend(ctx context.Context, name, token string, ttl time.Duration) (Lease, error) {
	return c.extend(ctx, locks.path(name), token, ttl)
}

// Release gives the lock up.
func (c *Client) Release(ctx context.Context, name, token string) error {
	return c.release(ctx, locks.path(name), token)
}

func (c *Client) acquire(ctx context.Context, path string, q url.Values, idempotencyKey string) (Lease, error) {
	res, err := c.do(ctx, http.MethodPost, path, q, "", idempotencyKey)
	if err != nil {
		return Lease{}, err
	}
	return decodeLease(res)
}

func (c *Client) extend(ctx context.Context, path, token string, ttl time.Duration) (Lease, error) {
	q := url.Values{}
	if ttl > 0 {
		q.Set("ttl", ttl.String())
	}
	res, err := c.do(ctx, http.MethodPut, path, q, token, "")
	if err != nil {
		return Lease{}, err
	}
	return decodeLease(res)
}

func (c *Client) release(ctx context.Context, path, token string) error {
	res, err := c.do(ctx, http.MethodDelete, path, nil, token, "")
	if err != nil {
		return err
	}
	return res.Body.Close()
}

// Status is what the masters say about a lock (GET /locks/{name}).
type Status struct {
	Name       string    `json:"name"`
	Held       bool      `json:"held"`
	Owner      string    `json:"owner"`       // when held
	ValidUntil time.Time `json:"valid_until"` // when held
	Fence      int64     `json:"fence"`       // when held and fencing is on
}

// Inspect asks the masters who holds name, if anyone.
func (c *Client) Inspect(ctx context.Context, name string) (Status, error) {
	var st Status
	err := c.getJSON(ctx, locks.path(name), nil, "the lock's status", &st)
	return st, err
}

// getJSON GETs path and decodes its JSON answer into v; what names the
// answer in a decoding error.
func (c *Client) getJSON(ctx context.Context, path string, q url.Values, what string, v any) error {
	res, err := c.do(ctx, http.MethodGet, path, q, "", "")
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		return fmt.Errorf("sidelock: decoding %s: %w", what, err)
	}
	return nil
}

func (o Options) query(hold bool) url.Values {
	q := url.Values{}
	for k, d := range map[string]time.Duration{"ttl": o.TTL, "wait": o.Wait, "max_hold": o.MaxHold} {
		if d > 0 {
			q.Set(k, d.String())
		}
	}
	if o.Owner != "" {
		q.Set("owner", o.Owner)
	}
	if hold {
		q.Set("hold", "true")
	}
	return q
}

// do sends a request to path (a keyspace's path of a name) and turns a
// non-2xx answer into an *Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, token, idempotencyKey string) (*http.Response, error) {
	return c.send(ctx, method, path, q, http.Header{"Lock-Token": nonEmpty(token), "Idempotency-Key": nonEmpty(idempotencyKey)})
}

// send is do with any headers (an empty list sends none).
func (c *Client) send(ctx context.Context, method, path string, q url.Values, header http.Header) (*http.Response, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode >= 300 {
		defer res.Body.Close()
		return nil, decodeError(res)
	}
	return res, nil
}

func nonEmpty(v string) []string {
	if v == "" {
		return nil
	}
	return []string{v}
}

// lockPath escapes each '/'-separated segment of a lock name on its own:
// '/' stays the separator that lock names use, and anything else that
// means something in a URL ('#', '?', '%', a space) reaches the sidecar as
// part of the name, which refuses it, instead of cutting the query off or
// naming another lock.
func lockPath(name string) string {
	segments := strings.Split(name, "/")
	for i, s := range segments {
		segments[i] = url.PathEscape(s)
	}
	return strings.Join(segments, "/")
}

func decodeLease(res *http.Response) (Lease, error) {
	defer res.Body.Close()
	var l Lease
	if err := json.NewDecoder(res.Body).Decode(&l); err != nil {
		return Lease{}, fmt.Errorf("sidelock: decoding the lease: %w", err)
	}
	return l, nil
}

func decodeError(res *http.Response) error {
	var p struct {
		Code         string `json:"code"`
		Detail       string `json:"detail"`
		RetryAfterMS int64  `json:"retry_after_ms"`
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if json.Unmarshal(body, &p) != nil || p.Code == "" {
		p.Code, p.Detail = "http_error", strings.TrimSpace(string(body))
	}
	return &Error{Status: res.StatusCode, Code: p.Code, Detail: p.Detail, RetryAfter: time.Duration(p.RetryAfterMS) * time.Millisecond}
}
