package httpapi

import (
	"encoding/json"
	"go/types"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
)

// specDoc is openapi.json as generic JSON, for the tests that hold it to
// the code.
type specDoc map[string]any

func loadSpec(t *testing.T) specDoc {
	t.Helper()
	var doc specDoc
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return doc
}

// at walks the document by keys ("components", "schemas", "Problem"...).
func (d specDoc) at(t *testing.T, keys ...string) map[string]any {
	t.Helper()
	var cur any = map[string]any(d)
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("openapi.json: %s is not an object", strings.Join(keys, "."))
		}
		cur = m[k]
	}
	m, ok := cur.(map[string]any)
	if !ok {
		t.Fatalf("openapi.json: no object at %s", strings.Join(keys, "."))
	}
	return m
}

func stringsOf(t *testing.T, v any) []string {
	t.Helper()
	list, ok := v.([]any)
	if !ok {
		t.Fatalf("openapi.json: %v is not a list", v)
	}
	var out []string
	for _, e := range list {
		out = append(out, e.(string))
	}
	slices.Sort(out)
	return out
}

// The Problem schema's code enum lists exactly the codes the server can
// answer: every problemCode some path of this package's source uses
// (read by type-checking it, so a code added to a new refusal, or a code
// left declared that nothing answers any more, fails here), each declared
// in encode.go (a literal or computed code fails), each with its anchor in
// docs/api.md, where its type URI leads.
func TestProblemCodesMatchTheSpec(t *testing.T) {
	src := loadTypedSource(t)
	used, misuses := src.usedCodes()
	for _, m := range misuses {
		t.Error(m)
	}
	declared := slices.Sorted(maps.Values(constantsOf(src.pkg, "problemCode")))
	emitted := slices.Sorted(maps.Keys(used))
	if !slices.Equal(declared, emitted) {
		t.Errorf("declared problem codes that nothing answers: %v", missing(emitted, declared))
	}
	enum := stringsOf(t, loadSpec(t).at(t, "components", "schemas", "Problem", "properties", "code")["enum"])
	if !slices.Equal(enum, emitted) {
		t.Errorf("the spec's code enum and the codes the server answers differ:\n  answered, not in the enum: %v\n  in the enum, never answered: %v",
			missing(enum, emitted), missing(emitted, enum))
	}
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range emitted {
		if !strings.Contains(string(doc), `<a id="`+code+`"></a>`) {
			t.Errorf("docs/api.md has no anchor for %s (its type URI is %s)", code, problemCode(code).typeURI())
		}
	}
}

// Every parameter a lease.ParamError can name (the lease package's Param
// constants) has a code of its own, so a refusal by the Manager says which
// parameter was wrong: a new parameter without its case in paramCode
// fails here.
func TestEveryParamHasItsCode(t *testing.T) {
	leasePkg := importedPackage(t, loadTypedSource(t).pkg, "github.com/sidelock/sidelock/internal/lease")
	params := constantsNamed(leasePkg, "Param")
	if !slices.Contains(params, lease.ParamMode) {
		t.Fatalf("the lease package's parameters %v lack mode", params)
	}
	for _, param := range params {
		if code := paramCode(param); code == codeInvalidRequest {
			t.Errorf("lease.ParamError for %q is answered %s, not a code of its own", param, code)
		}
	}
}

// missing is what of want got lacks.
func missing(got, want []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			out = append(out, w)
		}
	}
	return out
}

// Each problem's type is its code's URI, and the spec says which.
func TestProblemTypeIsOnePerCode(t *testing.T) {
	p := newProblem(409, codeLockHeld, "x")
	if p.Type != problemTypeBase+"lock_held" {
		t.Fatalf("type %q", p.Type)
	}
	desc := loadSpec(t).at(t, "components", "schemas", "Problem", "properties", "type")["description"].(string)
	if !strings.Contains(desc, problemTypeBase+"<code>") {
		t.Fatalf("the spec's type description does not give %s<code>: %q", problemTypeBase, desc)
	}
}

// The event names each stream documents in x-sse-events are the ones the
// code sends: acquired (hold streams only), every lease event kind but
// the end, and released or lost for the end (endEvent), alike for locks,
// semaphores, read/write locks and lock sets; every watch.Kind on a lock's watch stream. The reasons
// of the ended events are every lease.EndReason plus the one of a hold
// that ended unseen, and those of a watch's released every watch.Reason.
func TestStreamEventsMatchTheSpec(t *testing.T) {
	src := loadTypedSource(t)
	leasePkg := importedPackage(t, src.pkg, "github.com/sidelock/sidelock/internal/lease")
	reasons := slices.Sorted(maps.Values(constantsOf(leasePkg, "EndReason")))
	ends := map[string]bool{}
	for _, r := range reasons {
		ends[endEvent(lease.EndReason(r))] = true
	}
	var streamed []string
	for name, kind := range constantsOf(leasePkg, "EventKind") {
		if name != "EventEnded" {
			streamed = append(streamed, kind)
		}
	}
	streamed = append(streamed, slices.Collect(maps.Keys(ends))...)
	slices.Sort(streamed)
	held := slices.Sorted(slices.Values(append([]string{"acquired"}, streamed...)))
	watchPkg := importedPackage(t, src.pkg, "github.com/sidelock/sidelock/internal/watch")
	watched := slices.Sorted(maps.Values(constantsOf(watchPkg, "Kind")))

	spec := loadSpec(t)
	for _, c := range []struct {
		path, method, status string
		want                 []string
	}{
		{"/locks/{name}", "post", "200", held},
		{"/locks/{name}/events", "get", "200", streamed},
		{"/semaphores/{name}", "post", "200", held},
		{"/semaphores/{name}/events", "get", "200", streamed},
		{"/rwlocks/{name}", "post", "200", held},
		{"/rwlocks/{name}/events", "get", "200", streamed},
		{"/locksets/{names}", "post", "200", held},
		{"/locksets/{names}/events", "get", "200", streamed},
		{"/locks/{name}", "get", "200", watched},
	} {
		media := spec.at(t, "paths", c.path, c.method, "responses", c.status, "content", "text/event-stream")
		events, _ := media["x-sse-events"].(map[string]any)
		if got := slices.Sorted(maps.Keys(events)); !slices.Equal(got, c.want) {
			t.Errorf("%s %s: x-sse-events %v, the code sends %v", c.method, c.path, got, c.want)
		}
	}
	gotReasons := stringsOf(t, spec.at(t, "components", "schemas", "EndedEvent", "properties", "reason")["enum"])
	wantReasons := slices.Sorted(slices.Values(append(reasons, reasonEndedUnseen)))
	if !slices.Equal(gotReasons, wantReasons) {
		t.Errorf("EndedEvent reasons %v, the code sends %v", gotReasons, wantReasons)
	}
	gotWatchReasons := stringsOf(t, spec.at(t, "components", "schemas", "WatchEvent", "properties", "reason")["enum"])
	if want := constantsNamed(watchPkg, "Reason"); !slices.Equal(gotWatchReasons, want) {
		t.Errorf("WatchEvent reasons %v, the code sends %v", gotWatchReasons, want)
	}
}

// constantsNamed is the sorted values of pkg's string constants whose
// names start with prefix (for untyped ones, which constantsOf cannot
// find by type).
func constantsNamed(pkg *types.Package, prefix string) []string {
	var out []string
	for _, name := range pkg.Scope().Names() {
		if c, ok := pkg.Scope().Lookup(name).(*types.Const); ok && strings.HasPrefix(name, prefix) && c.Exported() {
			out = append(out, constantString(c))
		}
	}
	slices.Sort(out)
	return out
}

// The spec's schemas name exactly the members the Go types encode, and
// require those that are never omitted: a field added, renamed or made
// optional on one side only fails here.
func TestSchemasMatchTheGoTypes(t *testing.T) {
	spec := loadSpec(t)
	for name, v := range map[string]any{
		"Lease":           leaseBody{},
		"Status":          statusBody{},
		"SemaphoreStatus": semaphoreBody{},
		"Holder":          holderBody{},
		"RWLockStatus":    rwlockBody{},
		"SetLock":         setLockBody{},
		"LockSetStatus":   lockSetBody{},
		"WatchEvent":      watchBody{},
		"Problem":         problem{},
		"ValidityEvent":   renewedData{},
		"EndedEvent":      endedData{},
		"Readiness":       health.Report{},
		"MasterState":     health.NodeState{},
		"GroupState":      health.GroupState{},
		"GuardEvents":     health.GuardEvents{},
	} {
		schema := spec.at(t, "components", "schemas", name)
		props := slices.Sorted(maps.Keys(spec.at(t, "components", "schemas", name, "properties")))
		var required []string
		if r, ok := schema["required"]; ok {
			required = stringsOf(t, r)
		}
		fields, always := jsonFields(reflect.TypeOf(v))
		if !slices.Equal(props, fields) {
			t.Errorf("%s: the spec names %v, the Go type encodes %v", name, props, fields)
		}
		if !slices.Equal(required, always) {
			t.Errorf("%s: the spec requires %v, the Go type always encodes %v", name, required, always)
		}
	}
}

// jsonFields lists the JSON members of a struct type, and those never
// omitted.
func jsonFields(typ reflect.Type) (fields, always []string) {
	for f := range typ.Fields() {
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields = append(fields, name)
		if !strings.Contains(opts, "omitempty") {
			always = append(always, name)
		}
	}
	slices.Sort(fields)
	slices.Sort(always)
	return fields, always
}
