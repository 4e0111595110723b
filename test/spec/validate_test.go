package spec

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// specPath is the one spec: the file httpapi serves and documents.
var specPath = filepath.Join("..", "..", "httpapi", "openapi.json")

const (
	problemMediaType = "application/problem+json"
	sseMediaType     = "text/event-stream"
)

// listener says which of the sidecar's two listeners answered: the same
// path means different things on each (/healthz is a 404 on the lock API).
type listener int

const (
	lockAPI listener = iota
	adminAPI
)

// answer is one documented response: an operation and a status.
type answer struct {
	path, method string
	status       int
}

func (a answer) String() string { return fmt.Sprintf("%s %s %d", a.method, a.path, a.status) }

// checker validates every answer of the sidecar against the spec and
// remembers what it saw, for the coverage checks at the end. Failures from
// stream readers (other goroutines) are collected and reported by the
// test's goroutine.
type checker struct {
	doc *openapi3.T

	mu      sync.Mutex
	seen    map[answer]int
	outside map[answer]int // 404 and 405 of routes the spec has no operation for
	codes   map[string]int
	events  map[streamEvent]int
	// undocumentedEvents: events seen that the spec does not describe, with why.
	undocumentedEvents map[streamEvent]string
	failures           []string
}

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(specPath)
	if err != nil {
		t.Fatalf("loading %s: %v", specPath, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document (kin-openapi): %v", specPath, err)
	}
	return doc
}

func newChecker(t *testing.T) *checker {
	return &checker{doc: loadSpec(t), seen: map[answer]int{}, outside: map[answer]int{}, codes: map[string]int{}, events: map[streamEvent]int{},
		undocumentedEvents: map[streamEvent]string{}}
}

func (c *checker) failf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, fmt.Sprintf(format, args...))
}

// report fails t with every failure collected so far.
func (c *checker) report(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.failures {
		t.Error(f)
	}
	c.failures = nil
}

// namedPrefixes are the lock API's paths that name a lock, a semaphore,
// a read/write lock or a lock set (httpapi/kinds.go).
var namedPrefixes = []string{"/locks", "/semaphores", "/rwlocks", "/locksets"}

// pathParam is the spec's parameter for the rest of a path after prefix:
// a lock set's names, or one name.
func pathParam(prefix string) string {
	if prefix == "/locksets" {
		return "names"
	}
	return "name"
}

// route finds the spec's operation for a request the way the sidecar's
// router does (httpapi/routes.go): a name of any kind may hold '/', so it
// is the rest of the path after /locks/, /semaphores/ or /rwlocks/ (a lock
// set's names after /locksets/), and a GET whose last segment is "events"
// is the event stream. The admin listener's paths are exact.
func (c *checker) route(l listener, r *http.Request) (tmpl string, params map[string]string) {
	path := r.URL.EscapedPath()
	if l == adminAPI {
		return path, nil
	}
	for _, prefix := range namedPrefixes {
		rest, ok := strings.CutPrefix(path, prefix+"/")
		param := pathParam(prefix)
		switch {
		case !ok:
			continue
		case r.Method == http.MethodGet && strings.HasSuffix(rest, "/events"):
			return prefix + "/{" + param + "}/events", map[string]string{param: strings.TrimSuffix(rest, "/events")}
		default:
			return prefix + "/{" + param + "}", map[string]string{param: rest}
		}
	}
	return path, nil
}

// check validates one answer (status, headers, body) and records it. For
// an event stream, body is nil: its events are checked as they are read
// (sseTap).
func (c *checker) check(l listener, r *http.Request, status int, header http.Header, body []byte) {
	where := fmt.Sprintf("%s %s → %d", r.Method, r.URL.RequestURI(), status)
	tmpl, params := c.route(l, r)
	item := c.doc.Paths.Find(tmpl)
	var op *openapi3.Operation
	if item != nil && c.listenerOf(item) != l {
		item = nil // the other listener's path: a 404 here
	}
	if item != nil {
		op = item.GetOperation(r.Method)
	}
	if op == nil {
		c.checkOutside(where, tmpl, item != nil, r.Method, status, header, body)
		return
	}
	c.record(answer{tmpl, r.Method, status}, c.seen)
	isStream := mediaType(header) == sseMediaType
	route := &routers.Route{Spec: c.doc, Path: tmpl, PathItem: item, Method: r.Method, Operation: op}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: isStream},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		c.failf("%s: does not match the spec: %v", where, err)
		return
	}
	response := op.Responses.Status(status).Value
	c.checkBodyIsDocumented(where, response, header, body, isStream)
	c.checkProblem(where, status, header, body)
	if !isStream && mediaType(header) != "" && len(body) > 0 {
		if media := response.Content.Get(header.Get("Content-Type")); media != nil && media.Schema != nil {
			c.checkNoUndocumentedFields(where, media.Schema, body)
		}
	}
}

// checkOutside checks an answer to a path or method the spec has no
// operation for: it must be the router's own refusal, 404 not_found or 405
// method_not_allowed, as a problem.
func (c *checker) checkOutside(where, tmpl string, pathKnown bool, method string, status int, header http.Header, body []byte) {
	want := http.StatusNotFound
	if pathKnown {
		want = http.StatusMethodNotAllowed
	}
	if status != want {
		c.failf("%s: no operation in the spec, and not the router's %d", where, want)
	}
	c.record(answer{tmpl, method, status}, c.outside)
	if mediaType(header) != problemMediaType {
		c.failf("%s: Content-Type %q, want %s", where, header.Get("Content-Type"), problemMediaType)
		return
	}
	c.checkProblem(where, status, header, body)
	if schema := c.doc.Components.Schemas["Problem"]; schema != nil {
		c.checkAgainst(where, schema, body)
	}
}

// listenerOf says which listener serves a path of the spec: a path (or
// an operation of it) that names servers of its own, other than the
// document's, is the admin listener's; every other path is the lock API's.
func (c *checker) listenerOf(item *openapi3.PathItem) listener {
	servers := item.Servers
	for _, op := range item.Operations() {
		if op.Servers != nil {
			servers = append(servers, *op.Servers...)
		}
	}
	for _, s := range servers {
		if !slices.ContainsFunc(c.doc.Servers, func(d *openapi3.Server) bool { return d.URL == s.URL }) {
			return adminAPI
		}
	}
	return lockAPI
}

func (c *checker) record(a answer, in map[answer]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in[a]++
}

// checkBodyIsDocumented catches what kin-openapi lets through: a body
// where the spec documents none (a 204's), and a media type the response
// does not list even when kin-openapi skipped the body.
func (c *checker) checkBodyIsDocumented(where string, response *openapi3.Response, header http.Header, body []byte, isStream bool) {
	if len(response.Content) == 0 {
		if len(body) > 0 || isStream {
			c.failf("%s: the spec documents no body, the sidecar sent %q", where, truncate(body))
		}
		return
	}
	if response.Content.Get(header.Get("Content-Type")) == nil {
		c.failf("%s: Content-Type %q is not one the spec lists (%v)", where, header.Get("Content-Type"), slices.Sorted(maps.Keys(response.Content)))
	}
}

// checkProblem: a problem's status member is the HTTP status (RFC 9457
// §3.1.2), and its code is remembered for the enum coverage.
func (c *checker) checkProblem(where string, status int, header http.Header, body []byte) {
	if mediaType(header) != problemMediaType {
		return
	}
	var p struct {
		Code   string `json:"code"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		c.failf("%s: problem body: %v", where, err)
		return
	}
	if p.Status != status {
		c.failf("%s: problem status member %d differs from the HTTP status", where, p.Status)
	}
	c.mu.Lock()
	c.codes[p.Code]++
	c.mu.Unlock()
}

// checkAgainst validates a JSON body against one schema of the spec.
func (c *checker) checkAgainst(where string, schema *openapi3.SchemaRef, body []byte) {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		c.failf("%s: not JSON: %v (%q)", where, err, truncate(body))
		return
	}
	if err := schema.Value.VisitJSON(v, openapi3.MultiErrors(), openapi3.VisitAsResponse()); err != nil {
		c.failf("%s: does not match %s: %v", where, schemaName(schema), err)
		return
	}
	c.checkNoUndocumentedFields(where, schema, body)
}

// checkNoUndocumentedFields reports members of a JSON answer that its
// schema does not name: kin-openapi accepts them (additionalProperties
// defaults to true), but a generated client's types would not know them.
func (c *checker) checkNoUndocumentedFields(where string, schema *openapi3.SchemaRef, body []byte) {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return // reported by the schema check
	}
	for _, field := range undocumentedFields(schema, v, "") {
		c.failf("%s: member %s is not in the spec's schema %s", where, field, schemaName(schema))
	}
}

// undocumentedFields walks a value with its schema and lists the object
// members no property of the schema (or of its allOf/oneOf/anyOf parts)
// describes, where the schema does not allow additional properties
// explicitly.
func undocumentedFields(ref *openapi3.SchemaRef, v any, at string) []string {
	if ref == nil || ref.Value == nil {
		return nil
	}
	s := ref.Value
	switch v := v.(type) {
	case map[string]any:
		props := map[string]*openapi3.SchemaRef{}
		open := s.AdditionalProperties.Has != nil && *s.AdditionalProperties.Has || s.AdditionalProperties.Schema != nil
		collectProperties(s, props, &open)
		var out []string
		for _, k := range slices.Sorted(maps.Keys(v)) {
			p, ok := props[k]
			if !ok && !open && len(props) > 0 {
				out = append(out, at+"."+k)
				continue
			}
			out = append(out, undocumentedFields(p, v[k], at+"."+k)...)
		}
		return out
	case []any:
		var out []string
		for i, e := range v {
			out = append(out, undocumentedFields(s.Items, e, fmt.Sprintf("%s[%d]", at, i))...)
		}
		return out
	}
	return nil
}

// collectProperties gathers the properties of s and of its composed parts.
func collectProperties(s *openapi3.Schema, into map[string]*openapi3.SchemaRef, open *bool) {
	for k, p := range s.Properties {
		into[k] = p
	}
	if s.AdditionalProperties.Schema != nil {
		*open = true
	}
	for _, parts := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf} {
		for _, p := range parts {
			if p.Value != nil {
				collectProperties(p.Value, into, open)
			}
		}
	}
}

func schemaName(s *openapi3.SchemaRef) string {
	if s.Ref != "" {
		return s.Ref
	}
	return "(inline schema)"
}

func mediaType(h http.Header) string {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
