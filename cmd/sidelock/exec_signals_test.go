//go:build linux

package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// groupScript is a command with a grandchild that ignores HUP, QUIT and
// TERM, so that only a SIGKILL stops it, as a job that started a worker
// which does not listen would. It writes "GRANDCHILD SHELL" to the pidfile
// (%[1]s), through a rename, so that the file is never seen half written.
const groupScript = `ulimit -c 0
(trap '' HUP QUIT TERM; exec sleep 60) &
echo "$! $$" > %[1]s.tmp && mv %[1]s.tmp %[1]s
wait`

// However `sidelock exec` ends — SIGKILL, or SIGHUP/SIGQUIT, which used to
// end it at once — the lock goes to the next holder only after every
// process of the command (the shell and the grandchild that ignores
// signals) is dead. A waiter is queued before exec is signalled, so it is
// granted the lock the moment the sidecar frees it, and it looks at the
// command's processes at once.
func TestE2EExecEndingNeverLeavesTheCommandRunningWithoutTheLock(t *testing.T) {
	a := startSidecar(t, durableMasters(t, 3))
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		code int // exec's exit code; -1: exec itself was killed
	}{
		{"SIGKILL", syscall.SIGKILL, -1},
		{"SIGHUP", syscall.SIGHUP, 128 + int(syscall.SIGHUP)},    // forwarded: the shell died of it
		{"SIGQUIT", syscall.SIGQUIT, 128 + int(syscall.SIGQUIT)}, // forwarded: no goroutine dump, no orphan
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "jobs/signalled:" + strconv.Itoa(int(tc.sig))
			c, out, pids := startGroupCommand(t, a, name)
			granted := queueWaiter(t, a, name, pids)
			if err := c.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			if code := exitCodeOf(t, c, 20*time.Second); code != tc.code {
				t.Errorf("exec exited %d, want %d: %s", code, tc.code, out())
			}
			select {
			case alive := <-granted:
				if alive != "" {
					t.Fatalf("the lock was granted again while the first command still ran: %s alive\nexec said: %s", alive, out())
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("the lock was not granted again within 20s: %s", out())
			}
		})
	}
}

// startGroupCommand runs `sidelock exec NAME -- sh -c groupScript` and
// waits until the command wrote its pids. Its output goes to a file, not
// a pipe, so that waiting for exec does not wait for the processes it
// left behind.
func startGroupCommand(t *testing.T, s *sidecar, name string) (c *exec.Cmd, out func() string, pids []int) {
	t.Helper()
	dir := t.TempDir()
	pidfile, outfile := filepath.Join(dir, "pids"), filepath.Join(dir, "out")
	f, err := os.Create(outfile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c = exec.Command(os.Args[0], "exec", name, "--", "sh", "-c", fmt.Sprintf(groupScript, pidfile))
	c.Env = append(os.Environ(), childEnv+"=1", "SIDELOCK_ADDR="+s.api)
	c.Stdout, c.Stderr = f, f
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill() })
	eventually(t, 10*time.Second, "the command wrote its pids", func() bool {
		raw, err := os.ReadFile(pidfile)
		if err != nil {
			return false
		}
		pids = parsePids(t, raw)
		return true
	})
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	out = func() string {
		raw, _ := os.ReadFile(outfile)
		return string(raw)
	}
	return c, out, pids
}

func parsePids(t *testing.T, raw []byte) []int {
	t.Helper()
	var pids []int
	for _, field := range strings.Fields(string(raw)) {
		pid, err := strconv.Atoi(field)
		if err != nil {
			t.Fatalf("pidfile %q", raw)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 2 {
		t.Fatalf("pidfile %q", raw)
	}
	return pids
}

// queueWaiter queues an acquisition of name on the sidecar and waits until
// it waits. Once granted, it reports which of pids are still running ("":
// none), or why it was not granted.
func queueWaiter(t *testing.T, s *sidecar, name string, pids []int) <-chan string {
	t.Helper()
	waiters := metricValue(t, s, "sidelock_waiters")
	granted := make(chan string, 1)
	go func() {
		res, err := http.Post(s.api+"/locks/"+name+"?wait=30s&ttl=5s", "", nil)
		if err != nil {
			granted <- err.Error()
			return
		}
		res.Body.Close()
		alive := stillRunning(pids)
		if res.StatusCode != http.StatusOK {
			alive = fmt.Sprintf("(no grant: %d)", res.StatusCode)
		}
		granted <- alive
	}()
	eventually(t, 10*time.Second, "the waiter is queued", func() bool {
		return metricValue(t, s, "sidelock_waiters") > waiters
	})
	return granted
}

// stillRunning lists the pids that are neither gone nor zombies.
func stillRunning(pids []int) string {
	var running []string
	for _, pid := range pids {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue // gone
		}
		// "pid (comm) state ...": the state follows the last ')'.
		if rest := raw[bytes.LastIndexByte(raw, ')')+1:]; !bytes.HasPrefix(bytes.TrimSpace(rest), []byte("Z")) {
			running = append(running, "pid "+strconv.Itoa(pid))
		}
	}
	return strings.Join(running, ", ")
}

// When renewals keep failing, exec hears "expiring" before the lock's
// validity ends and stops the command: SIGTERM at once and, for what
// ignores it (the command's grandchild), SIGKILL before valid_until, well
// inside the default 10s grace. It exits 79. The key ttl leaves "expiring"
// (a third of it before valid_until) a second ahead of exec's own watchdog
// (100ms before): with a 1s ttl, a loaded machine once delivered it after
// the watchdog had fired, and exec never said "expiring". The promise is
// judged on the command's processes, never seen alive at or after
// valid_until (exec's own exit comes later: it reaps and sweeps first).
func TestE2EExecStopsTheCommandWhenTheLockIsLost(t *testing.T) {
	masters := durableMasters(t, 3)
	a := startSidecar(t, masters, "SIDELOCK_KEY_TTL=3s")
	c, out, pids := startGroupCommand(t, a, "fragile")
	alive := watchAlive(pids)
	masters[0].Kill()
	masters[1].Kill()
	if code := exitCodeOf(t, c, 10*time.Second); code != exitLockLost {
		t.Fatalf("exit %d, want %d: %s", code, exitLockLost, out())
	}
	text := out()
	_, after, found := strings.Cut(text, "valid until ")
	if !found || !strings.Contains(text, "expiring") {
		t.Fatalf("no word of the expiring lock and its valid_until: %s", text)
	}
	valid, err := time.Parse(time.RFC3339Nano, strings.Fields(after)[0])
	if err != nil {
		t.Fatal(err)
	}
	alive.wantDeadBy(t, valid)
}

// Issue 32: a stopped exec (SIGSTOP, a debugger) hears none of the lock's
// events and cannot kill the command, while the sidecar still sees its
// connection open. The guard keeps the deadline too: exec sent it every
// valid_until it heard, and it kills the command 100ms before the last
// one. Here exec is stopped, then two of three masters are frozen, so the
// lock is lost at the valid_until the sidecar last published (read from
// GET /locks, which the sidecar answers without the masters): the command,
// a shell with a grandchild that ignores every signal but SIGKILL, must be
// dead by then. Without the guard's deadline it ran on until exec was
// resumed.
func TestE2EStoppedExecStillHasTheCommandDeadByValidUntil(t *testing.T) {
	masters := durableMasters(t, 3)
	a := startSidecar(t, masters, "SIDELOCK_KEY_TTL=1s")
	const name = "jobs/stopped-exec"
	c, out, pids := startGroupCommand(t, a, name)
	if err := c.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Signal(syscall.SIGCONT) })
	alive := watchAlive(pids)
	for _, m := range masters[:2] {
		m.Stop()
		t.Cleanup(m.Cont)
	}
	valid := lastValidUntil(t, a, name, 10*time.Second)
	select {
	case <-alive.dead:
	case <-time.After(time.Until(valid.Add(time.Second))):
		t.Fatalf("the command still ran 1s after the lock's valid_until %v, exec stopped: %s", valid.Format(time.RFC3339Nano), out())
	}
	alive.wantDeadBy(t, valid)
}

// liveness follows processes, every 2ms, until all are dead (gone, or
// zombies).
type liveness struct {
	dead chan struct{} // closed once all are dead
	mu   sync.Mutex
	last time.Time // the latest look that found one alive began then
}

func watchAlive(pids []int) *liveness {
	l := &liveness{dead: make(chan struct{})}
	go func() {
		defer close(l.dead)
		for {
			look := time.Now()
			alive := false
			for _, pid := range pids {
				if _, state, ok := procGroupAndState(pid); ok && state != 'Z' && state != 'X' {
					alive = true
				}
			}
			if !alive {
				return
			}
			l.mu.Lock()
			l.last = look
			l.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return l
}

// wantDeadBy waits until the processes are dead and fails the test if any
// was seen alive at or after valid. A look that found one alive began
// before it read /proc, so it proves the process ran at that time or
// later; a starved test that looked late proves less, never too much.
func (l *liveness) wantDeadBy(t *testing.T, valid time.Time) {
	t.Helper()
	select {
	case <-l.dead:
	case <-time.After(10 * time.Second):
		t.Fatal("the command's processes still ran 10s later")
	}
	l.mu.Lock()
	last := l.last
	l.mu.Unlock()
	if !last.Before(valid) {
		t.Fatalf("the command was seen alive %v after the lock's valid_until %v", last.Sub(valid), valid.Format(time.RFC3339Nano))
	}
	t.Logf("last seen alive %v before valid_until", valid.Sub(last).Round(time.Millisecond))
}

// lastValidUntil follows the sidecar's own list of its leases (GET /locks,
// answered without the masters) until name's lease is gone from it, and
// returns the last valid_until it published for it.
func lastValidUntil(t *testing.T, s *sidecar, name string, within time.Duration) time.Time {
	t.Helper()
	var valid time.Time
	eventually(t, within, "the sidecar dropped the lost lease", func() bool {
		code, body := s.do(t, http.MethodGet, "/locks", "")
		if code != http.StatusOK {
			t.Fatalf("GET /locks: %d %v", code, body)
		}
		locks, _ := body["locks"].([]any)
		for _, l := range locks {
			if l := l.(map[string]any); l["name"] == name {
				v, err := time.Parse(time.RFC3339Nano, fmt.Sprint(l["valid_until"]))
				if err != nil {
					t.Fatalf("valid_until %v: %v", l["valid_until"], err)
				}
				valid = v
				return false
			}
		}
		return true
	})
	if valid.IsZero() {
		t.Fatalf("no lease %q was listed", name)
	}
	return valid
}
