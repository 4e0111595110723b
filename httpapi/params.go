package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

// lockParams are the parameters a lock request may carry, in the query
// string or a JSON body (not both for the same parameter).
type lockParams struct {
	TTL     *string   `json:"ttl"`
	Wait    *string   `json:"wait"`
	Owner   *string   `json:"owner"`
	Token   *string   `json:"token"`
	Hold    *jsonBool `json:"hold"`
	MaxHold *string   `json:"max_hold"`
}

// jsonBool is a boolean parameter: JSON true/false, or in the query (and
// as a JSON string) "true", "false", "1" or "0".
type jsonBool string

func (b *jsonBool) UnmarshalJSON(data []byte) error {
	var v bool
	if err := json.Unmarshal(data, &v); err == nil {
		*b = jsonBool(strconv.FormatBool(v))
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return errors.New("hold must be true or false")
	}
	*b = jsonBool(s)
	return nil
}

// boolean parses an optional boolean parameter; absent is false.
func boolean(name string, v *jsonBool) (bool, error) {
	if v == nil {
		return false, nil
	}
	switch *v {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, badRequest("invalid_"+name, "%s must be true or false, got %q", name, string(*v))
}

// lockPathPrefix begins every path that names a lock (routes.go).
const lockPathPrefix = "/locks/"

// tokenHeader carries the lease token (preferred: it stays out of URLs and
// access logs).
const tokenHeader = "Lock-Token"

// idempotencyHeader makes a retried acquire return the lease the first
// attempt obtained, while this sidecar still holds it.
const idempotencyHeader = "Idempotency-Key"

// tokenLen is the length of a token: 128 random bits in hex.
const tokenLen = 32

// lockName reads and validates the name from the path as the client
// escaped it, decoded here once and validated after decoding: a '/' that
// a client escaped as %2F (as OpenAPI-generated clients escape a path
// parameter) is the same lock, "orders%2F42" being "orders/42", while a
// second level of escaping ("%252F") leaves a '%' and is refused, as are
// escaped dot segments ("%2E%2E"). (The router's own parameter cannot
// tell those two apart: net/url keeps the escaped form only when it
// differs from the default one.)
func lockName(r *http.Request) (string, error) {
	raw := strings.TrimPrefix(r.URL.EscapedPath(), lockPathPrefix)
	if r.Method == http.MethodGet {
		raw = strings.TrimSuffix(raw, eventsSuffix)
	}
	name, err := url.PathUnescape(raw)
	if err != nil {
		return "", badRequest("invalid_name", "lock name: a malformed percent-escape")
	}
	if err := lease.ValidateName(name); err != nil {
		return "", badRequest("invalid_name", "%s", err.Error())
	}
	return name, nil
}

// readParams merges the query string and the JSON body, rejecting unknown
// or repeated parameters so a typo never silently takes a default.
func readParams(r *http.Request) (lockParams, error) {
	fromBody, err := bodyParams(r)
	if err != nil {
		return lockParams{}, err
	}
	fromQuery, err := queryParams(r.URL.RawQuery)
	if err != nil {
		return lockParams{}, err
	}
	return merge(fromQuery, fromBody)
}

func bodyParams(r *http.Request) (lockParams, error) {
	var p lockParams
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return p, err
		}
		return p, badRequest("invalid_body", "reading the request body: %v", err)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return p, nil
	}
	if err := strictObject(raw); err != nil {
		return p, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, badRequest("invalid_body", "%s: %v", bodyShape, err)
	}
	return p, nil
}

const bodyShape = "the body must be a JSON object with fields ttl, wait, owner, token, max_hold (strings) and hold (boolean)"

// bodyFields are the exact names a body may use. encoding/json matches
// names case-insensitively and lets a repeated name win silently
// ({"ttl":"2s","ttl":"3600s"} took an hour), so the names are checked
// here first: a body means one thing to every reader or is refused.
var bodyFields = map[string]bool{"ttl": true, "wait": true, "owner": true, "token": true, "hold": true, "max_hold": true}

// strictObject accepts exactly one JSON object whose names are known,
// exact-case and not repeated (null, arrays and trailing data refused).
func strictObject(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return badRequest("invalid_body", "%s", bodyShape)
	}
	seen := make(map[string]bool, len(bodyFields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return badRequest("invalid_body", "%s: %v", bodyShape, err)
		}
		name, _ := tok.(string)
		switch {
		case !bodyFields[name]:
			return badRequest("invalid_body", "unknown field %q in the body (known, lowercase: ttl, wait, owner, token, hold, max_hold)", truncate(name, 32))
		case seen[name]:
			return badRequest("invalid_body", "field %q is given more than once in the body", name)
		}
		seen[name] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return badRequest("invalid_body", "%s: %v", bodyShape, err)
		}
		if string(value) == "null" {
			return badRequest("invalid_body", "field %q is null; leave it out for the default", name)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return badRequest("invalid_body", "%s: %v", bodyShape, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("invalid_body", "the body must hold exactly one JSON object")
	}
	return nil
}

// truncate bounds what an error quotes back of the caller's input.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func queryParams(rawQuery string) (lockParams, error) {
	var p lockParams
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return p, badRequest("invalid_query", "malformed query string: %v", err)
	}
	fields := map[string]**string{"ttl": &p.TTL, "wait": &p.Wait, "owner": &p.Owner, "token": &p.Token, "max_hold": &p.MaxHold}
	for key, values := range q {
		if len(values) != 1 {
			return p, badRequest("invalid_query", "parameter %q is given more than once", key)
		}
		if key == "hold" {
			p.Hold = (*jsonBool)(&values[0])
			continue
		}
		field, ok := fields[key]
		if !ok {
			return p, badRequest("invalid_query", "unknown parameter %q (known: ttl, wait, owner, token, hold, max_hold)", key)
		}
		*field = &values[0]
	}
	return p, nil
}

func merge(a, b lockParams) (lockParams, error) {
	pick := func(name string, x, y *string) (*string, error) {
		if x != nil && y != nil {
			return nil, badRequest("invalid_request", "%s is given both in the query and the body", name)
		}
		if x != nil {
			return x, nil
		}
		return y, nil
	}
	var out lockParams
	var err error
	if out.TTL, err = pick("ttl", a.TTL, b.TTL); err != nil {
		return out, err
	}
	if out.Wait, err = pick("wait", a.Wait, b.Wait); err != nil {
		return out, err
	}
	if out.Owner, err = pick("owner", a.Owner, b.Owner); err != nil {
		return out, err
	}
	if out.MaxHold, err = pick("max_hold", a.MaxHold, b.MaxHold); err != nil {
		return out, err
	}
	if a.Hold != nil && b.Hold != nil {
		return out, badRequest("invalid_request", "hold is given both in the query and the body")
	}
	out.Hold = a.Hold
	if out.Hold == nil {
		out.Hold = b.Hold
	}
	out.Token, err = pick("token", a.Token, b.Token)
	return out, err
}

// duration parses an optional Go duration; absent is 0.
func duration(name string, v *string) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	d, err := time.ParseDuration(*v)
	if err != nil || d < 0 {
		return 0, badRequest("invalid_"+name, "%s must be a non-negative Go duration such as \"30s\" or \"1m30s\", got %q", name, *v)
	}
	if d == 0 && name == "ttl" {
		return 0, badRequest("invalid_ttl", "ttl must be positive; leave it out for the default")
	}
	return d, nil
}

// token reads the lease token from the Lock-Token header or the token
// parameter; it must be 32 lowercase hex characters.
func token(r *http.Request, p lockParams) (string, error) {
	header := r.Header.Values(tokenHeader)
	if len(header) > 1 {
		return "", badRequest("invalid_token", "the %s header is given more than once", tokenHeader)
	}
	var tok string
	switch {
	case len(header) == 1 && p.Token != nil && header[0] != *p.Token:
		return "", badRequest("invalid_token", "the %s header and the token parameter differ", tokenHeader)
	case len(header) == 1:
		tok = header[0]
	case p.Token != nil:
		tok = *p.Token
	default:
		return "", badRequest("missing_token", "the lease token is required, in the %s header or the token parameter", tokenHeader)
	}
	if !wellFormedToken(tok) {
		return "", badRequest("invalid_token", "a token is %d lowercase hex characters, as returned by acquire", tokenLen)
	}
	return tok, nil
}

func wellFormedToken(tok string) bool {
	if len(tok) != tokenLen {
		return false
	}
	for i := 0; i < len(tok); i++ {
		if !isLowerHex(tok[i]) {
			return false
		}
	}
	return true
}

func isLowerHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

// acquireRequest builds the lease request of a POST.
func acquireRequest(r *http.Request) (lease.Request, error) {
	name, err := lockName(r)
	if err != nil {
		return lease.Request{}, err
	}
	p, err := readParams(r)
	if err != nil {
		return lease.Request{}, err
	}
	if p.Token != nil {
		return lease.Request{}, badRequest("invalid_request", "acquire takes no token")
	}
	keys := r.Header.Values(idempotencyHeader)
	if len(keys) > 1 {
		return lease.Request{}, badRequest("invalid_request", "the %s header is given more than once", idempotencyHeader)
	}
	req := lease.Request{Name: name}
	if len(keys) == 1 {
		req.IdempotencyKey = keys[0]
	}
	if p.Owner != nil {
		req.Owner = *p.Owner
	}
	if req.TTL, err = duration("ttl", p.TTL); err != nil {
		return req, err
	}
	if req.MaxHold, err = duration("max_hold", p.MaxHold); err != nil {
		return req, err
	}
	if req.Hold, err = boolean("hold", p.Hold); err != nil {
		return req, err
	}
	req.Wait, err = duration("wait", p.Wait)
	return req, err
}

// tokenRequest is the name, token and optional ttl of a PUT or DELETE.
type tokenRequest struct {
	name  string
	token string
	ttl   time.Duration
}

func readTokenRequest(r *http.Request, allowTTL bool) (tokenRequest, error) {
	var tr tokenRequest
	name, err := lockName(r)
	if err != nil {
		return tr, err
	}
	p, err := readParams(r)
	if err != nil {
		return tr, err
	}
	if p.Wait != nil || p.Owner != nil || p.Hold != nil || p.MaxHold != nil || (p.TTL != nil && !allowTTL) {
		return tr, badRequest("invalid_request", "only token%s may be given here", map[bool]string{true: " and ttl", false: ""}[allowTTL])
	}
	tr.name = name
	if tr.token, err = token(r, p); err != nil {
		return tr, err
	}
	tr.ttl, err = duration("ttl", p.TTL)
	return tr, err
}
