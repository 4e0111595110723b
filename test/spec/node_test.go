package spec

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// jsDir is the npm project of the harness (package.json, package-lock.json).
var jsDir = filepath.Join(".", "js")

// nodeTimeout bounds the npm tests; the eventsource test alone watches a
// stream for about 8 s.
const nodeTimeout = 3 * time.Minute

// runNode runs `node --test` on js/*.test.mjs, and on the TypeScript
// programs tsc compiled into js/gen/ (make spec-types), with SIDELOCK_URL
// set to the lock API to use. Its dependencies come from `npm ci` (make
// spec-test); without them the test fails and says so.
func runNode(t *testing.T, url string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: run `make spec-test`, which installs Debian's nodejs and npm")
	}
	if _, err := os.Stat(filepath.Join(jsDir, "node_modules", "openapi-fetch")); err != nil {
		t.Fatal("test/spec/js/node_modules is missing: run `make spec-test` (or `npm ci` in test/spec/js)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	written, _ := filepath.Glob(filepath.Join(jsDir, "*.test.mjs"))
	compiled, _ := filepath.Glob(filepath.Join(jsDir, "gen", "*.test.mjs"))
	if len(compiled) == 0 {
		t.Fatal("test/spec/js/gen/typed.test.mjs is missing: run `make spec-types` (tsc compiles typed.test.mts)")
	}
	var tests []string
	for _, f := range append(written, compiled...) {
		rel, _ := filepath.Rel(jsDir, f)
		tests = append(tests, rel)
	}
	cmd := exec.CommandContext(ctx, node, append([]string{"--test"}, tests...)...)
	cmd.Dir = jsDir
	cmd.Env = append(os.Environ(), "SIDELOCK_URL="+url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	t.Logf("node --test:\n%s", out)
}
