//go:build linux

// Package clients_test runs the official Python and Node clients' own
// tests, every snippet of docs/clients.md, and the leader election examples
// built on them (examples/leader.py, examples/leader.sh) against a real
// sidecar: the binary built from this tree, over three real redis-server
// masters.
package clients_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecartest"
)

// requiredEnv makes a missing python3, node or curl fail the tests instead of
// skipping them; `make clients-test` sets it after installing them.
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

// TestLeaderExamples runs two candidates of examples/leader.py, then two
// of examples/leader.sh: the standby says who leads, and is elected with a
// later term when the leader dies (kill -9) or resigns (SIGTERM).
func TestLeaderExamples(t *testing.T) {
	t.Parallel() // each runs its own sidecar and masters; they mostly wait on timers
	python := need(t, "python3")
	// Renewals, and so a held stream's writes, every 10 s: a resignation
	// left to a stream's next write (a dead reader's curl dies of SIGPIPE
	// then) would miss the bound on the shell's takeover below.
	api := startSidecar(t, "SIDELOCK_KEY_TTL=30s")
	t.Run("python", func(t *testing.T) {
		start := func(id string) *candidate {
			return startCandidate(t, api, python, "../examples/leader.py", "--id", id, "--name", "examples/leader-py", "--every", "0.2")
		}
		a := start("a")
		first := a.term(t, "a: elected, term ")
		b := start("b")
		b.await(t, "b: leader is a")
		a.signal(t, syscall.SIGKILL) // its connection closes: the sidecar frees the lock at once
		if second := b.term(t, "b: elected, term "); second <= first {
			t.Fatalf("b's term %d is not after a's %d", second, first)
		}
		b.await(t, "b: term ") // working
		b.signal(t, syscall.SIGTERM)
		b.await(t, "b: resigning")
		if err := b.exit(t); err != nil {
			t.Fatalf("b exited with %v", err)
		}
	})
	t.Run("shell", func(t *testing.T) {
		need(t, "curl")
		start := func(id string) *candidate {
			return startCandidate(t, api, "sh", "../examples/leader.sh", id, "examples/leader-sh")
		}
		a := start("a")
		first := a.term(t, "a: elected, term ")
		b := start("b")
		b.await(t, "b: leader is a")
		resigned := time.Now()
		a.signal(t, syscall.SIGTERM) // its trap ends the term's curl: a resignation
		a.exit(t)
		if curls := curlsOf(t, a.cmd.Process.Pid); len(curls) > 0 {
			t.Fatalf("a left curl %v running, which would hold the lock until its next write fails", curls)
		}
		if second := b.term(t, "b: elected, term "); second <= first {
			t.Fatalf("b's term %d is not after a's %d", second, first)
		}
		if took := time.Since(resigned); took > 3*time.Second {
			t.Fatalf("b was elected %v after a resigned: not at once", took)
		}
		b.await(t, "b: term ") // working
	})
}

// candidate is one running example program, its output read line by line.
type candidate struct {
	cmd   *exec.Cmd
	lines chan string   // stdout and stderr, closed at their end
	ended chan struct{} // closed once the process was waited for
	err   error         // Wait's, once ended
}

// startCandidate starts name args in a process group of its own (with
// SIDELOCK_ADDR=api, STEP_SECONDS=0.2), which the test's end kills whole:
// a shell's curls and sleeps included.
func startCandidate(t *testing.T, api, name string, args ...string) *candidate {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "SIDELOCK_ADDR="+api, "STEP_SECONDS=0.2", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	w.Close() // the children hold the only write ends: EOF once they all exit
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	c := &candidate{cmd: cmd, lines: make(chan string, 1024), ended: make(chan struct{})}
	go func() {
		defer close(c.ended)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			t.Logf("%s %s", filepath.Base(args[0]), sc.Text())
			c.lines <- sc.Text()
		}
		close(c.lines)
		r.Close()
		c.err = cmd.Wait()
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for range c.lines { // unread lines must not block the reader
		}
		<-c.ended
	})
	return c
}

// await reads lines until one starts with prefix, and returns it; it
// fails the test after 10 s, or when the output ends first.
func (c *candidate) await(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("the output ended without a line %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("no line %q within 10s", prefix)
		}
	}
}

// term awaits a line "<prefix><term>" and returns the term (the fence).
func (c *candidate) term(t *testing.T, prefix string) uint64 {
	t.Helper()
	l := c.await(t, prefix)
	term, err := strconv.ParseUint(strings.TrimPrefix(l, prefix), 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", l, err)
	}
	return term
}

func (c *candidate) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// exit awaits the end of the process and returns how it ended.
func (c *candidate) exit(t *testing.T) error {
	t.Helper()
	for range c.lines {
	}
	select {
	case <-c.ended:
		return c.err
	case <-time.After(10 * time.Second):
		t.Fatal("the candidate did not exit within 10s")
		return nil
	}
}

// curlsOf lists the live curl processes of process group pgid, from /proc.
func curlsOf(t *testing.T, pgid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var curls []int
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		open, close := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(string(b[close+1:]))
		if string(b[open+1:close]) != "curl" || len(fields) < 3 || fields[0] == "Z" || fields[2] != strconv.Itoa(pgid) {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:open])))
		curls = append(curls, pid)
	}
	return curls
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
// its output into the test log, fails the test if it fails, and returns
// the output.
func run(t *testing.T, label, dir string, env []string, name string, args ...string) string {
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
	return string(out)
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

// startSidecar builds cmd/sidelock (or runs $SIDELOCK_BIN: a release's
// binary, for the install test), runs it over three durable masters
// (durable, so they count at once: no restart probation) and returns its
// lock API's URL once /readyz answers 200. Only the settings given here
// (and extraEnv) reach it, whatever the caller's shell has. Nothing
// outlives the test.
func startSidecar(t *testing.T, extraEnv ...string) string {
	t.Helper()
	bin := sidecartest.PrebuiltOrBuild(t, "SIDELOCK_BIN")
	masters := redistest.StartN(t, 3, redistest.WithAppendOnly())
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr()
	}
	env := []string{"SIDELOCK_REDIS_ADDRS=" + strings.Join(addrs, ","),
		"SIDELOCK_HEALTH_INTERVAL=100ms", "SIDELOCK_KEY_PREFIX=clients:", "SIDELOCK_LOG_LEVEL=debug"}
	env = append(env, extraEnv...)
	return sidecartest.Start(t, bin, env, sidecartest.Options{}).API()
}
