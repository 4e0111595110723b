package main

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecartest"
)

// cliChild is a running sidelock CLI: the test reads its stdout a line at
// a time and holds its stdin (a command under exec that reads stdin waits
// until the test closes it).
type cliChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *strings.Builder
}

// startCLI runs sidelock with args against s; nothing outlives the test.
func startCLI(t *testing.T, s *sidecar, args ...string) *cliChild {
	t.Helper()
	cmd := cliCommand(apiEnv(s), args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &cliChild{cmd: cmd, stdin: stdin, lines: make(chan string, 1024), stderr: &strings.Builder{}}
	cmd.Stdout = &lineSplitter{lines: c.lines}
	cmd.Stderr = &syncWriter{b: c.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return c
}

// line is the child's next line on stdout, within 10s.
func (c *cliChild) line(t *testing.T) string {
	t.Helper()
	select {
	case l := <-c.lines:
		return l
	case <-time.After(10 * time.Second):
		t.Fatalf("%v printed no line within 10s; stderr: %s", c.cmd.Args[1:], c.stderr)
		return ""
	}
}

// noLine fails if the child printed a line (it printed it before now).
func (c *cliChild) noLine(t *testing.T, why string) {
	t.Helper()
	select {
	case l := <-c.lines:
		t.Fatalf("%v printed %q: %s", c.cmd.Args[1:], l, why)
	default:
	}
}

// exit waits for the child's exit code, within 10s.
func (c *cliChild) exit(t *testing.T) int {
	t.Helper()
	return exitCodeOf(t, c.cmd, 10*time.Second)
}

// lineSplitter sends each complete line written to it on lines.
type lineSplitter struct {
	mu    sync.Mutex
	part  string
	lines chan<- string
}

func (s *lineSplitter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.part += string(p)
	for {
		l, rest, ok := strings.Cut(s.part, "\n")
		if !ok {
			return len(p), nil
		}
		s.lines <- l
		s.part = rest
	}
}

// watchEvent decodes one line of `sidelock watch`.
func watchEvent(t *testing.T, line string) watchLine {
	t.Helper()
	var l watchLine
	if err := json.Unmarshal([]byte(line), &l); err != nil {
		t.Fatalf("watch printed %q: %v", line, err)
	}
	return l
}

func heldOf(l watchLine) string {
	if l.Held == nil {
		return "unknown"
	}
	if *l.Held {
		return "held"
	}
	return "free"
}

// `sidelock watch --once` prints the state as one JSON line and exits 0,
// free or held.
func TestE2EWatchOncePrintsTheState(t *testing.T) {
	a := startSidecar(t, durableMasters(t, 3))
	r := runCLI(t, apiEnv(a), "watch", "--once", "jobs/watched")
	if l := watchEvent(t, strings.TrimSpace(r.stdout)); r.code != 0 || l.Event != "state" || heldOf(l) != "free" || l.Name != "jobs/watched" {
		t.Fatalf("free: %v", r)
	}
	a.acquire(t, "/locks/jobs/watched?owner=someone&ttl=30s")
	r = runCLI(t, apiEnv(a), "watch", "--once", "jobs/watched")
	l := watchEvent(t, strings.TrimSpace(r.stdout))
	if r.code != 0 || l.Event != "state" || heldOf(l) != "held" || l.Owner != "someone" || l.Fence == 0 || l.ValidUntil.IsZero() || l.Since.IsZero() {
		t.Fatalf("held: %v", r)
	}
	if strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("more than one line: %q", r.stdout)
	}
}

// `sidelock watch` prints each change as it happens: the state, a holder
// acquiring (on another sidecar), its release; a sidecar that goes away
// and comes back is an "unavailable" line and the state again; SIGTERM
// ends it with 0.
func TestE2EWatchFollowsChangesAndReconnects(t *testing.T) {
	masters := durableMasters(t, 3)
	a, b := startSidecar(t, masters), startSidecar(t, masters)
	w := startCLI(t, a, "watch", "jobs/followed")
	if l := watchEvent(t, w.line(t)); l.Event != "state" || heldOf(l) != "free" {
		t.Fatalf("first line %+v", l)
	}
	token := b.acquire(t, "/locks/jobs/followed?owner=other-pod&ttl=30s")
	acquired := watchEvent(t, w.line(t))
	if acquired.Event != "acquired" || acquired.Owner != "other-pod" || acquired.Fence == 0 || heldOf(acquired) != "held" {
		t.Fatalf("after the acquisition: %+v", acquired)
	}
	if code, _ := b.do(t, "DELETE", "/locks/jobs/followed", token); code != 204 {
		t.Fatalf("release: %d", code)
	}
	if l := watchEvent(t, w.line(t)); l.Event != "released" || l.Reason != "released" || heldOf(l) != "free" {
		t.Fatalf("after the release: %+v", l)
	}

	a.Kill()
	if l := watchEvent(t, w.line(t)); l.Event != "unavailable" || heldOf(l) != "unknown" || l.Detail == "" {
		t.Fatalf("sidecar gone: %+v", l)
	}
	if err := a.Launch(sidecarEnv(masterAddrs(masters), nil)); err != nil {
		t.Fatal(err)
	}
	if l := watchEvent(t, w.line(t)); l.Event != "state" || heldOf(l) != "free" {
		t.Fatalf("after the sidecar came back: %+v", l)
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := w.exit(t); code != 0 {
		t.Errorf("watch after SIGTERM: exit %d, stderr %s", code, w.stderr)
	}
}

// Mistakes and a missing sidecar: 64 before any request, 69 when nothing
// answers.
func TestE2EWatchExitCodes(t *testing.T) {
	for _, args := range [][]string{{"watch"}, {"watch", "a", "b"}, {"watch", "job#1"}, {"watch", "--frob", "x"}} {
		if r := runCLI(t, nil, args...); r.code != exitUsage {
			t.Errorf("%q: %v", args, r)
		}
	}
	dead := "SIDELOCK_ADDR=http://" + sidecartest.FreeAddr(t)
	for _, args := range [][]string{{"watch", "x"}, {"watch", "--once", "x"}} {
		if r := runCLI(t, []string{dead}, args...); r.code != exitUnavailable {
			t.Errorf("%q without a sidecar: %v", args, r)
		}
	}
}

func masterAddrs(masters []*redistest.Server) []string {
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr()
	}
	return addrs
}
