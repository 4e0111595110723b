//go:build linux

// Package clients_test runs the official Python and Node clients' own
// tests, and every snippet of docs/clients.md, against a real sidecar: the
// binary built from this tree, over three real redis-server masters.
package clients_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecartest"
)

// requiredEnv makes a missing python3 or node fail the tests instead of
// skipping them; `make clients-test` sets it after installing both.
const requiredEnv = "SIDELOCK_CLIENTS_REQUIRED"

// runTimeout bounds one client test suite or snippet; they take seconds.
const runTimeout = 3 * time.Minute

// TestPythonClient runs clients/python/tests with python3 -m unittest.
func TestPythonClient(t *testing.T) {
	t.Parallel() // each runs its own sidecar and masters; they mostly wait on timers
	python := need(t, "python3")
	api := startSidecar(t)
	run(t, "python", "python", []string{"PYTHONPATH=src", "SIDELOCK_ADDR=" + api},
		python, "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
}

// TestNodeClient runs clients/node/test with node --test; the files are
// named one by one, which node 18, 20 and later all read the same way.
func TestNodeClient(t *testing.T) {
	t.Parallel() // each runs its own sidecar and masters; they mostly wait on timers
	node := need(t, "node")
	files, err := filepath.Glob(filepath.Join("node", "test", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no node tests found: %v", err)
	}
	for i, f := range files {
		files[i] = strings.TrimPrefix(f, "node"+string(filepath.Separator))
	}
	api := startSidecar(t)
	run(t, "node", "node", []string{"SIDELOCK_ADDR=" + api}, node, append([]string{"--test"}, files...)...)
}

// TestDocsSnippets runs every python and js block of docs/clients.md as a
// program of its own, so what the page shows is what was run.
func TestDocsSnippets(t *testing.T) {
	t.Parallel() // each runs its own sidecar and masters; they mostly wait on timers
	snippets := docSnippets(t, filepath.Join("..", "docs", "clients.md"))
	python, node := need(t, "python3"), need(t, "node")
	src, err := filepath.Abs(filepath.Join("python", "src"))
	if err != nil {
		t.Fatal(err)
	}
	api := startSidecar(t)
	for _, s := range snippets {
		t.Run(s.id(), func(t *testing.T) {
			switch s.lang {
			case "python":
				file := writeFile(t, t.TempDir(), "snippet.py", s.code)
				run(t, "snippet", ".", []string{"PYTHONPATH=" + src, "SIDELOCK_ADDR=" + api}, python, file)
			case "js":
				file := writeFile(t, nodeProject(t), "snippet.mjs", s.code)
				run(t, "snippet", filepath.Dir(file), []string{"SIDELOCK_ADDR=" + api}, node, file)
			}
		})
	}
}

// need returns the path of tool, or skips the test without it (fails
// when requiredEnv is 1).
func need(t *testing.T, tool string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err == nil {
		return path
	}
	if os.Getenv(requiredEnv) == "1" {
		t.Fatalf("%s is not installed and %s=1: install it (make clients-test does)", tool, requiredEnv)
	}
	t.Skipf("%s is not installed: the client tests need it (make clients-test installs it; %s=1 fails instead of skipping)", tool, requiredEnv)
	return ""
}

// run runs one command in dir (relative to clients/) with env added, logs
// its output into the test log, and fails the test if it fails.
func run(t *testing.T, label, dir string, env []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	// No bytecode or caches written into the tree; no colour codes in logs.
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "NO_COLOR=1", "NODE_DISABLE_COLORS=1")
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s: %s %s (%v)\n%s", label, name, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("%s failed: %v", label, err)
	}
}

// snippet is one fenced code block of a page.
type snippet struct {
	lang string
	line int
	code string
}

func (s snippet) id() string { return fmt.Sprintf("%s_line_%d", s.lang, s.line) }

// docSnippets reads the ```python and ```js blocks of a Markdown page;
// other blocks (sh, text) are not programs.
func docSnippets(t *testing.T, page string) []snippet {
	t.Helper()
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []snippet
	var cur *snippet
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && (line == "```python" || line == "```js"):
			cur = &snippet{lang: strings.TrimPrefix(line, "```"), line: n}
		case cur != nil && line == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.code += line + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil || len(out) == 0 {
		t.Fatalf("%s: an unclosed block, or no python/js block at all", page)
	}
	return out
}

// nodeProject is a directory where `import ... from "sidelock"` resolves
// to clients/node through node_modules, as for an installed package.
func nodeProject(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	pkg, err := filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "node_modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(pkg, filepath.Join(dir, "node_modules", "sidelock")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startSidecar builds cmd/sidelock, runs it over three durable masters
// (durable, so they count at once: no restart probation) and returns its
// lock API's URL once /readyz answers 200. Only the settings given here
// reach it, whatever the caller's shell has. Nothing outlives the test.
func startSidecar(t *testing.T) string {
	t.Helper()
	bin := sidecartest.Build(t)
	masters := redistest.StartN(t, 3, redistest.WithAppendOnly())
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr()
	}
	env := []string{"SIDELOCK_REDIS_ADDRS=" + strings.Join(addrs, ","),
		"SIDELOCK_HEALTH_INTERVAL=100ms", "SIDELOCK_KEY_PREFIX=clients:", "SIDELOCK_LOG_LEVEL=debug"}
	return sidecartest.Start(t, bin, env, sidecartest.Options{}).API()
}
