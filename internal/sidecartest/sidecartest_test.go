//go:build linux

package sidecartest

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bin is the sidecar these tests run, built once by TestMain (read-only
// afterwards).
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sidecartest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "sidelock")
	code := 1
	if err := BuildTo(bin); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// devMode runs the sidecar over 3 in-memory masters: these tests are about
// the process, not the masters.
func devMode() Options { return Options{Args: []string{"-dev"}} }

// A started sidecar answers on the ports it was given and, on SIGTERM,
// exits with status 0 within the bound.
func TestStartServesThenStopExitsZero(t *testing.T) {
	p := Start(t, bin, nil, devMode())
	if code := get(t, p.Admin()+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after Start: %d", code)
	}
	if code := get(t, p.API()+"/locks/sidecartest"); code != http.StatusOK {
		t.Fatalf("GET /locks/sidecartest: %d", code)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if p.Running() {
		t.Fatal("running after Stop")
	}
}

// A sidecar that refuses to start is reported at once, with its log, not
// after the whole readiness wait.
func TestLaunchReportsAnExitAtStartAtOnce(t *testing.T) {
	p := New(t, bin, Options{ReadyWithin: time.Minute})
	start := time.Now()
	err := p.Launch([]string{"SIDELOCK_REDIS_ADDRS="}) // no master, no dev mode: refuses
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "exited at start") {
		t.Fatalf("Launch without masters: %v", err)
	}
	if took > 20*time.Second {
		t.Fatalf("the exit was reported after %v, want at once", took)
	}
	if !strings.Contains(err.Error(), p.LogTail()) || p.LogTail() == "" {
		t.Fatalf("the error does not end with the log's tail %q: %v", p.LogTail(), err)
	}
}

// Ready means a 200 from the path asked for: with its only master down, a
// sidecar serves /healthz but its /readyz answers 503 until the bound.
func TestReadyMeansA200FromTheReadyPath(t *testing.T) {
	env := []string{"SIDELOCK_REDIS_ADDRS=" + FreeAddr(t)} // nobody listens there
	Start(t, bin, env, Options{ReadyPath: "/healthz"})
	err := New(t, bin, Options{ReadyWithin: 2 * time.Second}).Launch(env)
	if err == nil || !strings.Contains(err.Error(), "/readyz not 200 within 2s") {
		t.Fatalf("Launch waiting for /readyz with no master: %v", err)
	}
}

// The process ends with the test that started it.
func TestNothingOutlivesTheTest(t *testing.T) {
	var pid int
	t.Run("starts", func(t *testing.T) { pid = Start(t, bin, nil, devMode()).Pid() })
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("process %d after its test ended: %v, want no such process", pid, err)
	}
}

// A process that does not exit on SIGTERM is killed after the bound and
// reported with ErrNoExit: a stopped (SIGSTOP) sidecar cannot act on it.
func TestStopKillsWhatOutlivesSIGTERM(t *testing.T) {
	p := Start(t, bin, nil, devMode())
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	err := p.Stop(500 * time.Millisecond)
	if !errors.Is(err, ErrNoExit) {
		t.Fatalf("Stop of a stopped process: %v, want ErrNoExit", err)
	}
	if p.Running() {
		t.Fatal("still running after Stop gave up")
	}
}

// A later Launch is a restart: the same addresses, the log appended to.
func TestRelaunchKeepsTheAddressesAndTheLog(t *testing.T) {
	p := Start(t, bin, nil, devMode())
	api, admin, firstLog := p.APIAddr(), p.AdminAddr(), p.Log()
	p.Kill()
	if err := p.Launch(nil); err != nil {
		t.Fatal(err)
	}
	if p.APIAddr() != api || p.AdminAddr() != admin {
		t.Fatalf("restarted on %s and %s, want %s and %s", p.APIAddr(), p.AdminAddr(), api, admin)
	}
	if log := p.Log(); !strings.HasPrefix(log, firstLog) || len(log) <= len(firstLog) {
		t.Fatalf("the restart's log does not follow the first one's:\n%s", log)
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}
