//go:build linux

package spec

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
)

// binaryEnv names a prebuilt sidecar to check instead of building
// cmd/sidelock from this tree: how the spec is checked against another
// commit's binary (git archive of it, go build, point here).
const binaryEnv = "SIDELOCK_SPEC_BIN"

// buildSidecar builds cmd/sidelock into a temporary directory: the answers
// checked against the spec are those of the binary a pod runs. It builds
// in the product's module (the repository root), with the product's
// go.mod and go.sum, not this harness's.
func buildSidecar(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv(binaryEnv); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "sidelock")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/sidelock/sidelock/cmd/sidelock")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the sidecar: %v\n%s", err, out)
	}
	return bin
}

// startMasters starts three durable masters: durable so that a fresh
// sidecar counts them at once (no restart probation).
func startMasters(t *testing.T) []*redistest.Server {
	t.Helper()
	return redistest.StartN(t, 3, redistest.WithAppendOnly())
}

// sidecar is one running sidelock process.
type sidecar struct {
	api, admin string // http://127.0.0.1:port
	cmd        *exec.Cmd
	logPath    string
	exit       chan struct{}
}

// startSidecar runs bin over masters with only the environment given here
// (a SIDELOCK_* variable of the caller's shell must not change what is
// checked) and waits until /readyz answers 200.
func startSidecar(t *testing.T, bin string, masters []*redistest.Server, extra ...string) *sidecar {
	t.Helper()
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr()
	}
	api, admin := freeAddr(t), freeAddr(t)
	s := &sidecar{api: "http://" + api, admin: "http://" + admin, logPath: filepath.Join(t.TempDir(), "sidelock.log"), exit: make(chan struct{})}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin)
	s.cmd.Env = append([]string{"SIDELOCK_REDIS_ADDRS=" + strings.Join(addrs, ","), "SIDELOCK_LISTEN_ADDR=" + api,
		"SIDELOCK_ADMIN_ADDR=" + admin, "SIDELOCK_LOG_FORMAT=json", "SIDELOCK_LOG_LEVEL=info"}, extra...)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); logFile.Close(); close(s.exit) }()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("sidecar %s log tail:\n%s", s.api, s.logTail())
		}
	})
	if err := s.waitReady(20 * time.Second); err != nil {
		t.Fatalf("sidecar: %v\n%s", err, s.logTail())
	}
	return s
}

// waitReady polls /readyz until 200, the process exits, or within ends.
func (s *sidecar) waitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	for statusOf(s.admin+"/readyz") != http.StatusOK {
		select {
		case <-s.exit:
			return fmt.Errorf("exited at start")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/readyz not 200 within %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// kill is kill -9, then waiting for the process: nothing outlives the test.
func (s *sidecar) kill() {
	select {
	case <-s.exit:
	default:
		_ = s.cmd.Process.Kill()
		<-s.exit
	}
}

func (s *sidecar) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4<<10 {
		b = b[len(b)-4<<10:]
	}
	return string(b)
}

// statusOf is the status of GET url, 0 when it failed: for polling only,
// outside the spec checks.
func statusOf(url string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
