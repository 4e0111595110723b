// Package client is a small Go client of sidelock's HTTP lock API, used by
// `sidelock exec`, the examples and the benchmarks. Applications in any
// language can use the API with plain HTTP; this package only saves Go
// callers the JSON and the server-sent events parsing.
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
	ErrLockHeld  = errors.New("lock held")
	ErrLeaseGone = errors.New("lease gone")
	ErrNoQuorum  = errors.New("no quorum")
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
	}
	return false
}

// Lease is a granted lock.
type Lease struct {
	Name           string    `json:"name"`
	Token          string    `json:"token"`
	Owner          string    `json:"owner"`
	TTL            string    `json:"ttl"`
	AcquiredAt     time.Time `json:"acquired_at"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	ValidUntil     time.Time `json:"valid_until"`
	Fence          int64     `json:"fence"`
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

// Acquire takes a lock, waiting up to opts.Wait while it is held.
func (c *Client) Acquire(ctx context.Context, name string, opts Options) (Lease, error) {
	res, err := c.do(ctx, http.MethodPost, name, opts.query(false), "", opts.IdempotencyKey)
	if err != nil {
		return Lease{}, err
	}
	return decodeLease(res)
}

// Extend is the heartbeat: it pushes the lease out (by ttl when non-zero).
func (c *Client) Extend(ctx context.Context, name, token string, ttl time.Duration) (Lease, error) {
	q := url.Values{}
	if ttl > 0 {
		q.Set("ttl", ttl.String())
	}
	res, err := c.do(ctx, http.MethodPut, name, q, token, "")
	if err != nil {
		return Lease{}, err
	}
	return decodeLease(res)
}

// Release gives the lock up.
func (c *Client) Release(ctx context.Context, name, token string) error {
	res, err := c.do(ctx, http.MethodDelete, name, nil, token, "")
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
	res, err := c.do(ctx, http.MethodGet, name, nil, "", "")
	if err != nil {
		return Status{}, err
	}
	defer res.Body.Close()
	var st Status
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return Status{}, fmt.Errorf("sidelock: decoding the lock's status: %w", err)
	}
	return st, nil
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

// do sends a request and turns a non-2xx answer into an *Error.
func (c *Client) do(ctx context.Context, method, name string, q url.Values, token, idempotencyKey string) (*http.Response, error) {
	u := c.base + "/locks/" + lockPath(name)
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Lock-Token", token)
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
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
