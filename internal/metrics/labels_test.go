package metrics

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sidelock/sidelock/internal/health"
)

// Every constant the lease package declares of a type that becomes a
// label is in the list its series start from: a new outcome, wake-up
// source or end reason must be exported at 0 from start like the others.
func TestEveryLabelValueIsListed(t *testing.T) {
	declared := leaseConstants(t)
	for typ, listed := range map[string][]string{
		"Outcome":    stringsOf(acquireOutcomes),
		"WakeSource": stringsOf(wakeSources),
		"EndReason":  stringsOf(endReasons),
	} {
		if len(declared[typ]) == 0 {
			t.Errorf("no constants of lease.%s found: has the type moved?", typ)
		}
		for _, v := range declared[typ] {
			if !slices.Contains(listed, v) {
				t.Errorf("lease.%s %q is not in the metrics' list, so its series is absent until first used", typ, v)
			}
		}
	}
	for _, o := range waitOutcomes {
		if !slices.Contains(acquireOutcomes, o) {
			t.Errorf("wait outcome %q is not an acquisition outcome", o)
		}
	}
}

// Right after New, every series of the closed label sets is there at 0,
// and sidelock_build_info says which build runs.
func TestSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg, Sources{Version: "v9.9.9", LocksHeld: func() int { return 0 }, Waiters: func() int { return 0 }, Health: func() health.Report { return health.Report{} }})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string][]string{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			byName[f.GetName()] = append(byName[f.GetName()], strings.Join(labels, ","))
		}
	}
	for name, want := range map[string][]string{
		"sidelock_acquire_duration_seconds": prefixed("outcome=", stringsOf(acquireOutcomes)),
		"sidelock_wait_duration_seconds":    prefixed("outcome=", stringsOf(waitOutcomes)),
		"sidelock_wakeups_total":            prefixed("source=", stringsOf(wakeSources)),
		"sidelock_releases_total":           prefixed("reason=", stringsOf(endReasons)),
		"sidelock_renewals_total":           prefixed("outcome=", renewalOutcomes),
	} {
		slices.Sort(want)
		got := slices.Sorted(slices.Values(byName[name]))
		if !slices.Equal(got, want) {
			t.Errorf("%s: series %v, want %v", name, got, want)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sidelock_build_info Always 1; the labels say which build runs: version (the release, or dev) and goversion (the Go toolchain that built it).
# TYPE sidelock_build_info gauge
sidelock_build_info{goversion="`+runtime.Version()+`",version="v9.9.9"} 1
`), "sidelock_build_info"); err != nil {
		t.Fatal(err)
	}
}

// leaseConstants reads the lease package's source for its constants by
// declared type name.
func leaseConstants(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "lease", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				typ, ok := vs.Type.(*ast.Ident)
				if !ok {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						out[typ.Name] = append(out[typ.Name], s)
					}
				}
			}
		}
	}
	return out
}

func stringsOf[S ~string](values []S) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

func prefixed(prefix string, values []string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = prefix + v
	}
	return out
}
