package spec

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// notProvoked lists the documented answers a client cannot provoke from
// outside the sidecar, each with the reason. Keep it short: an entry here
// is a promise of the spec that no test of real answers checks.
var notProvoked = map[answer]string{}

// statusesNotProvoked is notProvoked for a status on every operation.
var statusesNotProvoked = map[int]string{
	http.StatusInternalServerError: "internal: a bug, no request is meant to produce it",
}

// codesNotProvoked lists the documented problem codes no request from
// outside can provoke here, each with the reason.
var codesNotProvoked = map[string]string{
	"internal":              "a bug: no request is meant to produce it",
	"client_closed_request": "499 is logged and counted when the client has gone; no client ever reads it",
	"timeout":               "answered when a request's context passes its deadline (httpapi/encode.go, lease.endedBy); the handlers give requests no deadline of their own, so no request from outside reaches it",
	"overloaded":            "needs a burst beyond what the sidecar serves in time; httpapi's TestBurstOfTryOnceIsOverloadNotNoQuorum (make test-load) provokes it",
}

// documented is every (path, method, status) of the spec.
func (c *checker) documented() []answer {
	var out []answer
	for _, path := range c.doc.Paths.InMatchingOrder() {
		for method, op := range c.doc.Paths.Value(path).Operations() {
			for key := range op.Responses.Map() {
				status, err := strconv.Atoi(key)
				if err != nil {
					continue // "default" or a range such as "5XX": nothing exact to provoke
				}
				out = append(out, answer{path, method, status})
			}
		}
	}
	slices.SortFunc(out, func(a, b answer) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// documentedCodes is the enum of the Problem schema's code: empty while
// the spec does not enumerate them.
func (c *checker) documentedCodes() []string {
	problem := c.doc.Components.Schemas["Problem"]
	if problem == nil || problem.Value == nil || problem.Value.Properties["code"] == nil {
		return nil
	}
	var out []string
	for _, v := range problem.Value.Properties["code"].Value.Enum {
		out = append(out, fmt.Sprint(v))
	}
	return out
}

// streamMedia is every text/event-stream media type the spec lists.
func (c *checker) streamMedia() []*openapi3.MediaType {
	var out []*openapi3.MediaType
	for _, path := range c.doc.Paths.InMatchingOrder() {
		for _, op := range c.doc.Paths.Value(path).Operations() {
			for _, res := range op.Responses.Map() {
				if res.Value == nil {
					continue
				}
				if m := res.Value.Content.Get(sseMediaType); m != nil {
					out = append(out, m)
				}
			}
		}
	}
	return out
}

// sseEventsExtension is where the spec describes a stream's events: an
// extension of the text/event-stream media type mapping each event name to
// {description, schema} (OpenAPI 3.0 has no field for it; 3.2's
// itemSchema would be the standard home).
const sseEventsExtension = "x-sse-events"

// eventSchemas maps each event name the spec documents to the schema of
// its data.
func (c *checker) eventSchemas() (map[string]*openapi3.SchemaRef, error) {
	out := map[string]*openapi3.SchemaRef{}
	for _, m := range c.streamMedia() {
		raw, ok := m.Extensions[sseEventsExtension]
		if !ok {
			continue
		}
		b, err := json.Marshal(raw)
		if err != nil {
			return nil, err
		}
		var events map[string]struct {
			Schema *openapi3.SchemaRef `json:"schema"`
		}
		if err := json.Unmarshal(b, &events); err != nil {
			return nil, fmt.Errorf("%s: %w", sseEventsExtension, err)
		}
		for name, ev := range events {
			schema, err := c.resolve(ev.Schema)
			if err != nil {
				return nil, fmt.Errorf("%s %q: %w", sseEventsExtension, name, err)
			}
			out[name] = schema
		}
	}
	return out, nil
}

// resolve finds the component a schema of an extension refers to (the
// loader resolves references only in the fields OpenAPI defines).
func (c *checker) resolve(s *openapi3.SchemaRef) (*openapi3.SchemaRef, error) {
	if s == nil {
		return nil, fmt.Errorf("no schema")
	}
	if s.Ref == "" {
		return s, nil
	}
	name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/")
	if !ok || c.doc.Components.Schemas[name] == nil {
		return nil, fmt.Errorf("unresolvable $ref %q", s.Ref)
	}
	return c.doc.Components.Schemas[name], nil
}

func (c *checker) documentedEvents() []string {
	schemas, _ := c.eventSchemas()
	return slices.Sorted(maps.Keys(schemas))
}

// eventSchema is the schema of one event's data.
func (c *checker) eventSchema(name string) (*openapi3.SchemaRef, error) {
	schemas, err := c.eventSchemas()
	if err != nil {
		return nil, err
	}
	s, ok := schemas[name]
	if !ok {
		return nil, fmt.Errorf("the spec documents no event %q (documented: %v)", name, slices.Sorted(maps.Keys(schemas)))
	}
	return s, nil
}
