package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

// lockParams are the parameters a lock request may carry, in the query
// string or a JSON body (not both for the same parameter).
type lockParams struct {
	TTL     *durationText `json:"ttl"`
	Wait    *durationText `json:"wait"`
	Owner   *string       `json:"owner"`
	Token   *string       `json:"token"`
	Hold    *jsonBool     `json:"hold"`
	MaxHold *durationText `json:"max_hold"`
	Permits *intText      `json:"permits"`
	Mode    *string       `json:"mode"`
}

// intText is an integer parameter as sent: the text of a query value, of
// a JSON number or of a JSON string, parsed by permitsValue.
type intText string

func (n *intText) UnmarshalJSON(data []byte) error {
	text, err := numberOrString(data, "permits must be an integer")
	*n = intText(text)
	return err
}

// numberOrString is a JSON number as written (so that it follows exactly
// the grammar of its text) or a JSON string's value; anything else is
// refused with why.
func numberOrString(data []byte, why string) (string, error) {
	if len(data) > 0 && (data[0] == '-' || '0' <= data[0] && data[0] <= '9') {
		return string(data), nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return "", errors.New(why)
	}
	return s, nil
}

// maxPermitsDigits bounds the text of permits, well above MaxPermits's.
const maxPermitsDigits = 4

// permitsValue parses permits: 1 to maxPermitsDigits decimal digits (the
// Manager checks the range, with the same code).
func permitsValue(v intText) (int, error) {
	if !allDigits(string(v), 1, maxPermitsDigits) {
		return 0, badRequest(codeInvalidPermits, "permits must be an integer within [1, %d], got %q", lease.MaxPermits, truncate(string(v)))
	}
	n, _ := strconv.Atoi(string(v))
	return n, nil
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

// hold parses the optional hold parameter; absent is false.
func hold(v *jsonBool) (bool, error) {
	if v == nil {
		return false, nil
	}
	switch *v {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, badRequest(codeInvalidHold, "hold must be true or false, got %q", truncate(string(*v)))
}

// durationText is a duration parameter as sent, parsed by duration: the
// text of a query value, of a JSON string or of a JSON number (kept as
// written, so a JSON number follows exactly the grammar of its text).
type durationText string

func (d *durationText) UnmarshalJSON(data []byte) error {
	text, err := numberOrString(data, "ttl, wait and max_hold must be a string or a number of seconds")
	*d = durationText(text)
	return err
}

// tokenHeader carries the lease token (preferred: it stays out of URLs and
// access logs).
const tokenHeader = "Lock-Token"

// idempotencyHeader makes a retried acquire return the lease the first
// attempt obtained, while this sidecar still holds it.
const idempotencyHeader = "Idempotency-Key"

// tokenLen is the length of a token: 128 random bits in hex.
const tokenLen = 32

// nameIn reads and validates the name from the path after prefix (one
// kind's, see kinds.go) as the client
// escaped it, decoded here once and validated after decoding: a '/' that
// a client escaped as %2F (as OpenAPI-generated clients escape a path
// parameter) is the same lock, "orders%2F42" being "orders/42", while a
// second level of escaping ("%252F") leaves a '%' and is refused, as are
// escaped dot segments ("%2E%2E"). (The router's own parameter cannot
// tell those two apart: net/url keeps the escaped form only when it
// differs from the default one.) A lock set's path names its locks (see
// setNameOf).
func nameIn(r *http.Request, prefix string) (string, error) {
	raw := strings.TrimPrefix(r.URL.EscapedPath(), prefix)
	if r.Method == http.MethodGet {
		raw = strings.TrimSuffix(raw, eventsSuffix)
	}
	name, err := url.PathUnescape(raw)
	if err != nil {
		return "", badRequest(codeInvalidName, "lock name: a malformed percent-escape")
	}
	if prefix == locksets {
		return setNameOf(name)
	}
	if err := lease.ValidateName(name); err != nil {
		return "", badRequest(codeInvalidName, "%s", err.Error())
	}
	return name, nil
}

// setNameOf checks the names of a lock set, joined by "," in any order
// (each a lock name, none twice, at most lease.MaxSetLocks), and returns
// the set's canonical name: its names sorted, as every answer and stream
// names the set. A bad set is a bad name, with the lock's code.
func setNameOf(names string) (string, error) {
	sorted, err := lease.SetNames(names)
	if err != nil {
		return "", badRequest(codeInvalidName, "%s", err.Error())
	}
	return strings.Join(sorted, setSeparator), nil
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
		return p, badRequest(codeInvalidBody, "reading the request body: %v", err)
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
		return p, badRequest(codeInvalidBody, "%s: %v", bodyShape, err)
	}
	return p, nil
}

const bodyShape = "the body must be a JSON object with fields ttl, wait, max_hold (durations: strings such as \"1m30s\" or numbers of seconds), owner, token (strings), hold (boolean), for a semaphore permits (integer) and for a read/write lock mode (string)"

// bodyFields are the exact names a body may use. encoding/json matches
// names case-insensitively and lets a repeated name win silently
// ({"ttl":"2s","ttl":"3600s"} took an hour), so the names are checked
// here first: a body means one thing to every reader or is refused.
var bodyFields = map[string]bool{"ttl": true, "wait": true, "owner": true, "token": true, "hold": true, "max_hold": true, "permits": true, "mode": true}

// strictObject accepts exactly one JSON object whose names are known,
// exact-case and not repeated (null, arrays and trailing data refused).
func strictObject(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return badRequest(codeInvalidBody, "%s", bodyShape)
	}
	seen := make(map[string]bool, len(bodyFields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return badRequest(codeInvalidBody, "%s: %v", bodyShape, err)
		}
		name, _ := tok.(string)
		switch {
		case !bodyFields[name]:
			return badRequest(codeInvalidBody, "unknown field %q in the body (known, lowercase: ttl, wait, owner, token, hold, max_hold, permits, mode)", truncate(name))
		case seen[name]:
			return badRequest(codeInvalidBody, "field %q is given more than once in the body", name)
		}
		seen[name] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return badRequest(codeInvalidBody, "%s: %v", bodyShape, err)
		}
		if string(value) == "null" {
			return badRequest(codeInvalidBody, "field %q is null; leave it out for the default", name)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return badRequest(codeInvalidBody, "%s: %v", bodyShape, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest(codeInvalidBody, "the body must hold exactly one JSON object")
	}
	return nil
}

// maxQuoted is how much of the caller's input an error quotes back.
const maxQuoted = 32

// truncate bounds what an error quotes back of the caller's input.
func truncate(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	return s[:maxQuoted] + "..."
}

func queryParams(rawQuery string) (lockParams, error) {
	var p lockParams
	q, err := strictQuery(rawQuery, "ttl", "wait", "owner", "token", "hold", "max_hold", "permits", "mode")
	if err != nil {
		return p, err
	}
	for key := range q {
		v := q.Get(key)
		switch key {
		case "ttl":
			p.TTL = (*durationText)(&v)
		case "wait":
			p.Wait = (*durationText)(&v)
		case "max_hold":
			p.MaxHold = (*durationText)(&v)
		case "hold":
			p.Hold = (*jsonBool)(&v)
		case "owner":
			p.Owner = &v
		case "token":
			p.Token = &v
		case "permits":
			p.Permits = (*intText)(&v)
		case "mode":
			p.Mode = &v
		}
	}
	return p, nil
}

func merge(a, b lockParams) (lockParams, error) {
	var out lockParams
	var errs []error
	out.TTL, errs = pick("ttl", a.TTL, b.TTL, errs)
	out.Wait, errs = pick("wait", a.Wait, b.Wait, errs)
	out.Owner, errs = pick("owner", a.Owner, b.Owner, errs)
	out.MaxHold, errs = pick("max_hold", a.MaxHold, b.MaxHold, errs)
	out.Hold, errs = pick("hold", a.Hold, b.Hold, errs)
	out.Token, errs = pick("token", a.Token, b.Token, errs)
	out.Permits, errs = pick("permits", a.Permits, b.Permits, errs)
	out.Mode, errs = pick("mode", a.Mode, b.Mode, errs)
	if len(errs) > 0 {
		return out, errs[0]
	}
	return out, nil
}

// pick is the one of x (query) and y (body) that is given; both is a
// refusal, appended to errs.
func pick[T any](name string, x, y *T, errs []error) (*T, []error) {
	if x != nil && y != nil {
		return nil, append(errs, badRequest(codeInvalidRequest, "%s is given both in the query and the body", name))
	}
	if x != nil {
		return x, errs
	}
	return y, errs
}

// Bare numbers of seconds: at most maxSecondsDigits digits (999999999 s,
// almost 32 years, is far beyond every range the Manager accepts and far
// below where time.Duration overflows), then at most maxSecondsDecimals
// decimals (milliseconds: nothing finer is meaningful to a lock). The
// spec's Duration pattern says the same; FuzzDurationGrammar keeps them
// in step.
const (
	maxSecondsDigits   = 9
	maxSecondsDecimals = 3
)

// duration parses an optional duration parameter (absent is 0): a Go
// duration without a sign ("30s", "1m30s", "1.5h", "250ms") or a bare
// number of seconds ("30", "1.5"). Anything else, a negative value
// included, is refused with the parameter's code (invalid_ttl...); the
// Manager checks the range (lease.ParamError, the same code).
func duration(param string, v *durationText) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	s := string(*v)
	d, ok := parseSeconds(s)
	if !ok {
		d, ok = parseGoDuration(s)
	}
	if !ok {
		return 0, badRequest(paramCode(param), "%s must be a duration such as \"30s\" or \"1m30s\", or a number of seconds with at most %d decimals such as 30 or 1.5, got %q", param, maxSecondsDecimals, truncate(s))
	}
	if d == 0 && param == lease.ParamTTL {
		return 0, badRequest(codeInvalidTTL, "ttl must be positive; leave it out for the default")
	}
	return d, nil
}

// parseSeconds reads a bare number of seconds: 1 to maxSecondsDigits
// digits, optionally a '.' and 1 to maxSecondsDecimals digits. No sign,
// exponent, spaces or leading '.'.
func parseSeconds(s string) (time.Duration, bool) {
	whole, frac, hasFrac := strings.Cut(s, ".")
	if !allDigits(whole, 1, maxSecondsDigits) || hasFrac && !allDigits(frac, 1, maxSecondsDecimals) {
		return 0, false
	}
	secs, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, false
	}
	ms := int64(0)
	if hasFrac {
		ms, _ = strconv.ParseInt(frac+strings.Repeat("0", maxSecondsDecimals-len(frac)), 10, 64)
	}
	return time.Duration(secs)*time.Second + time.Duration(ms)*time.Millisecond, true
}

// allDigits reports whether s is min to max ASCII digits.
func allDigits(s string, min, max int) bool {
	if len(s) < min || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseGoDuration reads a Go duration that starts with a digit or '.':
// time.ParseDuration also takes a sign, which a length of time never
// needs ("-0s", "+5s").
func parseGoDuration(s string) (time.Duration, bool) {
	if s == "" || (s[0] != '.' && (s[0] < '0' || s[0] > '9')) {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	return d, err == nil && d >= 0
}

// token reads the lease token from the Lock-Token header or the token
// parameter; it must be 32 lowercase hex characters.
func token(r *http.Request, p lockParams) (string, error) {
	header := r.Header.Values(tokenHeader)
	if len(header) > 1 {
		return "", badRequest(codeInvalidToken, "the %s header is given more than once", tokenHeader)
	}
	var tok string
	switch {
	case len(header) == 1 && p.Token != nil && header[0] != *p.Token:
		return "", badRequest(codeInvalidToken, "the %s header and the token parameter differ", tokenHeader)
	case len(header) == 1:
		tok = header[0]
	case p.Token != nil:
		tok = *p.Token
	default:
		return "", badRequest(codeMissingToken, "the lease token is required, in the %s header or the token parameter", tokenHeader)
	}
	if !wellFormedToken(tok) {
		return "", badRequest(codeInvalidToken, "a token is %d lowercase hex characters, as returned by acquire", tokenLen)
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

// acquireRequest builds the lease request of a POST of kind k.
func acquireRequest(r *http.Request, k kind) (lease.Request, error) {
	name, err := nameIn(r, k.prefix)
	if err != nil {
		return lease.Request{}, err
	}
	p, err := readParams(r)
	if err != nil {
		return lease.Request{}, err
	}
	if p.Token != nil {
		return lease.Request{}, badRequest(codeInvalidRequest, "acquire takes no token")
	}
	keys := r.Header.Values(idempotencyHeader)
	if len(keys) > 1 {
		return lease.Request{}, badRequest(codeInvalidRequest, "the %s header is given more than once", idempotencyHeader)
	}
	req := lease.Request{Name: name, Mode: k.defaultMode}
	if p.Permits != nil {
		if req.Permits, err = permitsValue(*p.Permits); err != nil {
			return req, err
		}
	}
	if p.Mode != nil {
		req.Mode = lease.Mode(*p.Mode)
	}
	if len(keys) == 1 {
		req.IdempotencyKey = keys[0]
	}
	if p.Owner != nil {
		req.Owner = *p.Owner
	}
	if req.TTL, err = duration(lease.ParamTTL, p.TTL); err != nil {
		return req, err
	}
	if req.MaxHold, err = duration(lease.ParamMaxHold, p.MaxHold); err != nil {
		return req, err
	}
	if req.Hold, err = hold(p.Hold); err != nil {
		return req, err
	}
	req.Wait, err = duration(lease.ParamWait, p.Wait)
	return req, err
}

// tokenRequest is the name, token and optional ttl of a PUT or DELETE.
type tokenRequest struct {
	name  string
	token string
	ttl   time.Duration
}

func readTokenRequest(r *http.Request, k kind, allowTTL bool) (tokenRequest, error) {
	var tr tokenRequest
	name, err := nameIn(r, k.prefix)
	if err != nil {
		return tr, err
	}
	p, err := readParams(r)
	if err != nil {
		return tr, err
	}
	if p.Wait != nil || p.Owner != nil || p.Hold != nil || p.MaxHold != nil || p.Permits != nil || p.Mode != nil || (p.TTL != nil && !allowTTL) {
		return tr, badRequest(codeInvalidRequest, "only token%s may be given here", map[bool]string{true: " and ttl", false: ""}[allowTTL])
	}
	tr.name = name
	if tr.token, err = token(r, p); err != nil {
		return tr, err
	}
	tr.ttl, err = duration(lease.ParamTTL, p.TTL)
	return tr, err
}

// strictQuery reads a query string that may name only the parameters in
// allowed, each at most once: a typo never silently takes a default.
func strictQuery(rawQuery string, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, badRequest(codeInvalidQuery, "malformed query string: %v", err)
	}
	known := strings.Join(allowed, ", ")
	if known == "" {
		known = "none"
	}
	for key, values := range q {
		if !slices.Contains(allowed, key) {
			return nil, badRequest(codeInvalidQuery, "unknown parameter %q (known: %s)", truncate(key), known)
		}
		if len(values) != 1 {
			return nil, badRequest(codeInvalidQuery, "parameter %q is given more than once", truncate(key))
		}
	}
	return q, nil
}

// watchParam reads a lock inspection's query: nothing, or watch=true to
// stream the holder.
func watchParam(rawQuery string) (bool, error) {
	q, err := strictQuery(rawQuery, "watch")
	if err != nil || !q.Has("watch") {
		return false, err
	}
	switch q.Get("watch") {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, badRequest(codeInvalidWatch, "watch must be true or false, got %q", truncate(q.Get("watch")))
}

// permitsQuery reads a semaphore inspection's query: permits, required.
func permitsQuery(rawQuery string) (int, error) {
	q, err := strictQuery(rawQuery, "permits")
	if err != nil {
		return 0, err
	}
	if !q.Has("permits") {
		return 0, badRequest(codeInvalidPermits, "permits is required: the masters know slots, not how many there are")
	}
	return permitsValue(intText(q.Get("permits")))
}
