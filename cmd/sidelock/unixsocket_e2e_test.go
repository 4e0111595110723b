package main

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecartest"
)

// unixSidecar is a sidecar process with its lock API on a Unix socket.
type unixSidecar struct {
	cmd    *exec.Cmd
	socket string
	api    *http.Client // over the socket; the URL's host is ignored
	exited chan struct{}
}

// startUnixSidecar runs a sidecar over masters with SIDELOCK_LISTEN_ADDR
// unix://socket and waits until it is ready; the test's end kills it.
func startUnixSidecar(t *testing.T, masters []*redistest.Server, socket string) *unixSidecar {
	t.Helper()
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr()
	}
	admin := sidecartest.FreeAddr(t)
	cmd := sidecarCommand(addrs, "unix://"+socket, admin, nil)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &syncWriter{b: &log}, &syncWriter{b: &log}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &unixSidecar{cmd: cmd, socket: socket, api: unixHTTPClient(socket), exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.exited
		if t.Failed() {
			t.Logf("sidecar log:\n%s", log.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sidecartest.WaitOK(ctx, "http://"+admin+"/readyz", s.exited); err != nil {
		t.Fatalf("sidecar on %s not ready: %v\n%s", socket, err, log.String())
	}
	return s
}

// unixHTTPClient reaches the socket as the CLI does (apiEndpoint).
func unixHTTPClient(socket string) *http.Client {
	_, client := apiEndpoint(config.UnixScheme + socket)
	client.Timeout = 10 * time.Second
	return client
}

// do sends a request over the socket, as curl --unix-socket does, and
// decodes the JSON answer.
func (s *unixSidecar) do(t *testing.T, method, path, token string) (int, map[string]any) {
	t.Helper()
	return doJSON(t, s.api, method, "http://sidelock"+path, token)
}

// A sidecar started over a socket a killed sidecar left behind replaces
// it, serves acquire, extend and release over it (and the CLI through
// SIDELOCK_ADDR=unix://...), contends with a TCP sidecar on the same
// masters, and removes the socket when SIGTERM ends it.
func TestE2EUnixSocketServesTheLockAPI(t *testing.T) {
	masters := durableMasters(t, 3)
	socket := filepath.Join(t.TempDir(), "api.sock")
	sidecartest.LeaveStaleSocket(t, socket)
	s := startUnixSidecar(t, masters, socket)
	other := startSidecar(t, masters)

	code, body := s.do(t, "POST", "/locks/orders/7?owner=unix", "")
	if code != 200 {
		t.Fatalf("acquire over the socket: %d %v", code, body)
	}
	token, _ := body["token"].(string)
	if code, body := other.do(t, "POST", "/locks/orders/7", ""); code != 409 {
		t.Fatalf("TCP sidecar on the same masters: %d %v, want 409", code, body)
	}
	if code, body := s.do(t, "PUT", "/locks/orders/7?ttl=45s", token); code != 200 {
		t.Fatalf("extend over the socket: %d %v", code, body)
	}
	if code, body := s.do(t, "DELETE", "/locks/orders/7", token); code != 204 {
		t.Fatalf("release over the socket: %d %v", code, body)
	}
	if r := runCLI(t, []string{"SIDELOCK_ADDR=unix://" + socket}, "exec", "orders/8", "--", "true"); r.code != 0 {
		t.Fatalf("sidelock exec over the socket: %v", r)
	}

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("no exit within 10s of SIGTERM")
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	if _, err := os.Lstat(socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket after a clean shutdown: %v, want it removed", err)
	}
}

// A regular file at the socket's path is never deleted, and a socket path
// the sidecar could not bind stops it at start-up; each refusal names
// SIDELOCK_LISTEN_ADDR and what is wrong.
func TestE2EUnixSocketRefusals(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.sock")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]string{
		"unix://" + file:                               "is not a socket (a regular file); refusing to replace it",
		"unix://run/sidelock/api.sock":                 "is not an absolute path",
		"unix://" + filepath.Join(dir, "no", "x.sock"): "is the volume mounted there?",
	} {
		out := refusedStart(t, []string{"127.0.0.1:1"}, "SIDELOCK_LISTEN_ADDR="+addr)
		if !strings.Contains(out, "SIDELOCK_LISTEN_ADDR") || !strings.Contains(out, want) {
			t.Errorf("%s: refusal %q does not name SIDELOCK_LISTEN_ADDR and say %q", addr, out, want)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Errorf("the regular file after the refusal: %q, %v", b, err)
	}
}
