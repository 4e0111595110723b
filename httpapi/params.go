package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

// param is one parameter a lock request may carry, in the query string or
// a JSON body (not both): its name, what its value may be in a body, the
// operations that take it, the code a bad value is refused with, and the
// field of an acquisition's lease.Request it sets (nil: none).
// lockParamTable is the one list of them: the body's shape, the
// allow-lists, the refusals and the codes are derived from it, so a new
// parameter is one row. Which kinds take permits or mode is lease's to
// say (checkKindFields).
type param struct {
	name  string
	json  jsonType
	takes op
	code  problemCode
	field func(*lease.Request) any
}

var lockParamTable = []param{
	{lease.ParamTTL, jsonDuration, opAcquire | opExtend, codeInvalidTTL, func(r *lease.Request) any { return &r.TTL }},
	{lease.ParamWait, jsonDuration, opAcquire, codeInvalidWait, func(r *lease.Request) any { return &r.Wait }},
	{lease.ParamMaxHold, jsonDuration, opAcquire, codeInvalidMaxHold, func(r *lease.Request) any { return &r.MaxHold }},
	{lease.ParamOwner, jsonString, opAcquire, codeInvalidOwner, func(r *lease.Request) any { return &r.Owner }},
	{paramToken, jsonString, opExtend | opRelease | opEvents, codeInvalidToken, nil},
	{paramHold, jsonBoolean, opAcquire, codeInvalidHold, func(r *lease.Request) any { return &r.Hold }},
	{lease.ParamPermits, jsonInteger, opAcquire, codeInvalidPermits, func(r *lease.Request) any { return &r.Permits }},
	{lease.ParamMode, jsonString, opAcquire, codeInvalidMode, func(r *lease.Request) any { return &r.Mode }},
}

// setIn parses text, p's value, into its field of req.
func (p param) setIn(req *lease.Request, text string) (err error) {
	switch field := p.field(req).(type) {
	case *time.Duration:
		*field, err = duration(p, text)
	case *bool:
		*field, err = boolValue(p, text)
	case *int: // permits, the one integer
		*field, err = permitsValue(text)
	case *string:
		*field = text
	case *lease.Mode:
		*field = lease.Mode(text)
	}
	return err
}

// The parameters that are not a lease.Param (the Manager never refuses
// them by name).
const (
	paramToken = "token"
	paramHold  = "hold"
)

// paramNamed is the row of the parameter name (ok false: none).
func paramNamed(name string) (param, bool) {
	i := slices.IndexFunc(lockParamTable, func(p param) bool { return p.name == name })
	if i < 0 {
		return param{}, false
	}
	return lockParamTable[i], true
}

// paramNames lists the parameters op takes (0: every one), in the table's
// order.
func paramNames(op op) []string {
	var names []string
	for _, p := range lockParamTable {
		if op == 0 || p.takes&op != 0 {
			names = append(names, p.name)
		}
	}
	return names
}

// op is an operation on a lease that takes parameters.
type op uint8

// Operations.
const (
	opAcquire op = 1 << iota // POST
	opExtend                 // PUT
	opRelease                // DELETE
	opEvents                 // GET .../events
)

func (o op) String() string {
	switch o {
	case opAcquire:
		return "acquire"
	case opExtend:
		return "extend"
	case opRelease:
		return "release"
	}
	return "a lease's events"
}

// jsonType is what a parameter's value may be in a JSON body. Its text is
// then what the query string would give: a number as written (so that it
// follows exactly the grammar of its text), a string's value, a boolean's
// "true" or "false".
type jsonType uint8

const (
	jsonDuration jsonType = iota // a string such as "1m30s", or a number of seconds
	jsonString                   // a string
	jsonBoolean                  // true or false (or a string, as in the query)
	jsonInteger                  // an integer (or a string of one)
)

func (t jsonType) String() string {
	switch t {
	case jsonDuration:
		return `duration: a string such as "1m30s" or a number of seconds`
	case jsonBoolean:
		return "boolean"
	case jsonInteger:
		return "integer"
	}
	return "string"
}

// text is the text of a body's value raw for a parameter of type t, or
// why it is refused.
func (t jsonType) text(name string, raw []byte) (string, error) {
	number := len(raw) > 0 && (raw[0] == '-' || '0' <= raw[0] && raw[0] <= '9')
	var b bool
	switch {
	case number && (t == jsonDuration || t == jsonInteger):
		return string(raw), nil
	case t == jsonBoolean && json.Unmarshal(raw, &b) == nil:
		return strconv.FormatBool(b), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%s must be a %s", name, t)
	}
	return s, nil
}

// lockParams are the parameters of a request as sent, by name: the text
// of a query value, or of a body's value (jsonType.text).
type lockParams map[string]string

// maxPermitsDigits bounds the text of permits, well above MaxPermits's.
const maxPermitsDigits = 4

// permitsValue parses permits: 1 to maxPermitsDigits decimal digits (the
// Manager checks the range, with the same code).
func permitsValue(v string) (int, error) {
	if !allDigits(v, 1, maxPermitsDigits) {
		return 0, badRequest(codeInvalidPermits, "permits must be an integer within [1, %d], got %q", lease.MaxPermits, truncate(v))
	}
	n, _ := strconv.Atoi(v)
	return n, nil
}

// boolValue parses a boolean parameter: "true", "false", "1" or "0".
func boolValue(p param, v string) (bool, error) {
	switch v {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, badRequest(p.code, "%s must be true or false, got %q", p.name, truncate(v))
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
// or repeated parameters, so a typo never silently takes a default, and
// those op does not take.
func readParams(r *http.Request, op op) (lockParams, error) {
	fromBody, err := bodyParams(r)
	if err != nil {
		return nil, err
	}
	fromQuery, err := queryParams(r.URL.RawQuery)
	if err != nil {
		return nil, err
	}
	p := make(lockParams, len(fromQuery)+len(fromBody))
	for _, row := range lockParamTable {
		q, inQuery := fromQuery[row.name]
		b, inBody := fromBody[row.name]
		switch {
		case inQuery && inBody:
			return nil, badRequest(codeInvalidRequest, "%s is given both in the query and the body", row.name)
		case inQuery:
			p[row.name] = q
		case inBody:
			p[row.name] = b
		}
	}
	for _, row := range lockParamTable {
		if _, given := p[row.name]; given && row.takes&op == 0 {
			return nil, badRequest(codeInvalidRequest, "%s takes no %s (it takes %s)", op, row.name, strings.Join(paramNames(op), ", "))
		}
	}
	return p, nil
}

func bodyParams(r *http.Request) (lockParams, error) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, err
		}
		return nil, badRequest(codeInvalidBody, "reading the request body: %v", err)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	return strictObject(raw)
}

// bodyShape says what a body may hold.
func bodyShape() string {
	var groups []string
	for t := range jsonInteger + 1 {
		var names []string
		for _, p := range lockParamTable {
			if p.json == t {
				names = append(names, p.name)
			}
		}
		groups = append(groups, fmt.Sprintf("%s (%s)", strings.Join(names, ", "), t))
	}
	return "the body must be a JSON object with fields " + strings.Join(groups, ", ")
}

// strictObject reads exactly one JSON object whose names are known,
// exact-case and not repeated (null, arrays and trailing data refused),
// and whose values have their parameters' types. encoding/json would match
// names case-insensitively and let a repeated name win silently
// ({"ttl":"2s","ttl":"3600s"} took an hour): a body means one thing to
// every reader or is refused.
func strictObject(raw []byte) (lockParams, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, badRequest(codeInvalidBody, "%s", bodyShape())
	}
	p := lockParams{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, badRequest(codeInvalidBody, "%s: %v", bodyShape(), err)
		}
		name, _ := tok.(string)
		row, known := paramNamed(name)
		_, seen := p[name]
		switch {
		case !known:
			return nil, badRequest(codeInvalidBody, "unknown field %q in the body (known, lowercase: %s)", truncate(name), strings.Join(paramNames(0), ", "))
		case seen:
			return nil, badRequest(codeInvalidBody, "field %q is given more than once in the body", name)
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, badRequest(codeInvalidBody, "%s: %v", bodyShape(), err)
		}
		if string(value) == "null" {
			return nil, badRequest(codeInvalidBody, "field %q is null; leave it out for the default", name)
		}
		if p[name], err = row.json.text(name, value); err != nil {
			return nil, badRequest(codeInvalidBody, "%s: %v", bodyShape(), err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, badRequest(codeInvalidBody, "%s: %v", bodyShape(), err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badRequest(codeInvalidBody, "the body must hold exactly one JSON object")
	}
	return p, nil
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
	q, err := strictQuery(rawQuery, paramNames(0)...)
	if err != nil {
		return nil, err
	}
	p := make(lockParams, len(q))
	for key := range q {
		p[key] = q.Get(key)
	}
	return p, nil
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

// duration parses a duration parameter: a Go duration without a sign
// ("30s", "1m30s", "1.5h", "250ms") or a bare number of seconds ("30",
// "1.5"). Anything else, a negative value included, is refused with the
// parameter's code (invalid_ttl...); the Manager checks the range
// (lease.ParamError, the same code).
func duration(p param, s string) (time.Duration, error) {
	d, ok := parseSeconds(s)
	if !ok {
		d, ok = parseGoDuration(s)
	}
	if !ok {
		return 0, badRequest(p.code, "%s must be a duration such as \"30s\" or \"1m30s\", or a number of seconds with at most %d decimals such as 30 or 1.5, got %q", p.name, maxSecondsDecimals, truncate(s))
	}
	if d == 0 && p.name == lease.ParamTTL {
		return 0, badRequest(p.code, "ttl must be positive; leave it out for the default")
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
	param, given := p[paramToken]
	var tok string
	switch {
	case len(header) == 1 && given && header[0] != param:
		return "", badRequest(codeInvalidToken, "the %s header and the token parameter differ", tokenHeader)
	case len(header) == 1:
		tok = header[0]
	case given:
		tok = param
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
	p, err := readParams(r, opAcquire)
	if err != nil {
		return lease.Request{}, err
	}
	keys := r.Header.Values(idempotencyHeader)
	if len(keys) > 1 {
		return lease.Request{}, badRequest(codeInvalidRequest, "the %s header is given more than once", idempotencyHeader)
	}
	req := lease.Request{Name: name, Mode: k.defaultMode}
	if len(keys) == 1 {
		req.IdempotencyKey = keys[0]
	}
	for _, row := range lockParamTable {
		if text, given := p[row.name]; given && row.field != nil {
			if err := row.setIn(&req, text); err != nil {
				return req, err
			}
		}
	}
	return req, nil
}

// tokenRequest is the name, token and optional ttl of a PUT or DELETE.
type tokenRequest struct {
	name  string
	token string
	ttl   time.Duration
}

// readTokenRequest reads the name, token and (for extend) ttl of an
// operation on a held lease.
func readTokenRequest(r *http.Request, k kind, op op) (tokenRequest, error) {
	var tr tokenRequest
	name, err := nameIn(r, k.prefix)
	if err != nil {
		return tr, err
	}
	p, err := readParams(r, op)
	if err != nil {
		return tr, err
	}
	tr.name = name
	if tr.token, err = token(r, p); err != nil {
		return tr, err
	}
	if text, given := p[lease.ParamTTL]; given {
		ttl, _ := paramNamed(lease.ParamTTL)
		tr.ttl, err = duration(ttl, text)
	}
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
	return permitsValue(q.Get("permits"))
}
