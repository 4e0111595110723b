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

// streamMedia is every text/event-stream media type the spec lists, by
// the answer that carries it.
func (c *checker) streamMedia() map[answer]*openapi3.MediaType {
	out := map[answer]*openapi3.MediaType{}
	for _, path := range c.doc.Paths.InMatchingOrder() {
		for method, op := range c.doc.Paths.Value(path).Operations() {
			for key, res := range op.Responses.Map() {
				status, err := strconv.Atoi(key)
				if err != nil || res.Value == nil {
					continue
				}
				if m := res.Value.Content.Get(sseMediaType); m != nil {
					out[answer{path, method, status}] = m
				}
			}
		}
	}
	return out
}

// streamEvent is one event of one documented stream: the same name means
// different data on different streams (acquired is a Lease on a held
// lock's stream, a WatchAcquired on a watch's).
type streamEvent struct {
	stream answer
	name   string
}

func (e streamEvent) String() string { return fmt.Sprintf("%s: %s", e.stream, e.name) }

// sseEventsExtension is where the spec describes a stream's events: an
// extension of the text/event-stream media type mapping each event name to
// {description, schema} (OpenAPI 3.0 has no field for it; 3.2's
// itemSchema would be the standard home).
const sseEventsExtension = "x-sse-events"

// eventSchemas maps each event the spec documents, by stream, to the
// schema of its data.
func (c *checker) eventSchemas() (map[streamEvent]*openapi3.SchemaRef, error) {
	out := map[streamEvent]*openapi3.SchemaRef{}
	for stream, m := range c.streamMedia() {
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
			return nil, fmt.Errorf("%v: %s: %w", stream, sseEventsExtension, err)
		}
		for name, ev := range events {
			schema, err := c.resolve(ev.Schema)
			if err != nil {
				return nil, fmt.Errorf("%v: %s %q: %w", stream, sseEventsExtension, name, err)
			}
			out[streamEvent{stream, name}] = schema
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

func (c *checker) documentedEvents() []streamEvent {
	schemas, _ := c.eventSchemas()
	return slices.SortedFunc(maps.Keys(schemas), func(a, b streamEvent) int { return strings.Compare(a.String(), b.String()) })
}

// eventSchema is the schema of one event's data on one stream.
func (c *checker) eventSchema(ev streamEvent) (*openapi3.SchemaRef, error) {
	schemas, err := c.eventSchemas()
	if err != nil {
		return nil, err
	}
	s, ok := schemas[ev]
	if !ok {
		var here []string
		for e := range schemas {
			if e.stream == ev.stream {
				here = append(here, e.name)
			}
		}
		slices.Sort(here)
		return nil, fmt.Errorf("the spec documents no event %q on %v (documented there: %v)", ev.name, ev.stream, here)
	}
	return s, nil
}
