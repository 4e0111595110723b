package container

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecartest"
)

const (
	// imageEnv points at the OCI layout to run (make image-test sets it);
	// refEnv names its entry in index.json (optional with a single entry).
	imageEnv = "SIDELOCK_IMAGE_TEST"
	refEnv   = "SIDELOCK_IMAGE_REF"

	// shutdownTimeout is given to the sidecar (SIDELOCK_SHUTDOWN_TIMEOUT):
	// after SIGTERM it must have exited 0 within it, plus stopSlack for
	// runc to notice the exit on a busy machine.
	shutdownTimeout = 5 * time.Second
	stopSlack       = 10 * time.Second

	// readyTimeout bounds the container's start until /readyz answers 200:
	// generous, the machine's cores are shared.
	readyTimeout = 60 * time.Second

	// startAttempts: the ports are probed free just before the start, and
	// another process may take one in between; such a start is retried.
	startAttempts = 3
)

// The release image runs as a real container with its own entrypoint and
// user, a read-only root, no capabilities: it serves /healthz and /readyz
// over real masters, a lock taken and released from outside the container,
// and it stops with exit 0 on SIGTERM.
func TestImageRunsAsContainer(t *testing.T) {
	dir := os.Getenv(imageEnv)
	if dir == "" {
		t.Skipf("%s is not set: run make image-test", imageEnv)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatalf("%s is set but runc is missing (Debian package runc; make image-test installs it): %v", imageEnv, err)
	}
	img := hostPlatformImage(t, dir, os.Getenv(refEnv))
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	bundle := t.TempDir()
	unpack(t, img, filepath.Join(bundle, "rootfs"))
	// Durable masters: the sidecar counts them at once, where fresh in-memory ones would
	// wait out its restart probation (SIDELOCK_KEY_TTL) before /readyz says 200.
	masters := redistest.StartN(t, 3, redistest.WithAppendOnly())

	c := startReady(t, runc, bundle, cfg.Config, masters)

	checkReady(t, c, masters)
	checkLockFromOutside(t, c)
	checkRunsAsImageUser(t, c, cfg.Config.User)
	checkRootIsReadOnly(t, c)
	checkStopsOnSIGTERM(t, c)
}

// startReady starts the container on fresh loopback ports and waits for
// /readyz; a start that lost a port to another process is retried.
func startReady(t *testing.T, runc, bundle string, cfg v1.Config, masters []*redistest.Server) *container {
	t.Helper()
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr()
	}
	for attempt := 1; ; attempt++ {
		host := randomLoopback()
		api, admin := sidecartest.FreeAddrOn(t, host), sidecartest.FreeAddrOn(t, host)
		writeSpec(t, bundle, cfg, []string{
			"SIDELOCK_REDIS_ADDRS=" + strings.Join(addrs, ","),
			"SIDELOCK_LISTEN_ADDR=" + api,
			"SIDELOCK_ADMIN_ADDR=" + admin,
			"SIDELOCK_SHUTDOWN_TIMEOUT=" + shutdownTimeout.String(),
		})
		c := run(t, runc, bundle, fmt.Sprintf("sidelock-image-test-%d-%d", os.Getpid(), attempt), api, admin)
		err := c.waitReady(readyTimeout)
		if err == nil {
			return c
		}
		c.remove(t)
		if attempt == startAttempts || !strings.Contains(c.output(), "address already in use") {
			t.Fatalf("container not ready: %v\noutput:\n%s", err, c.output())
		}
		t.Logf("attempt %d lost a port, retrying: %v", attempt, err)
	}
}

func checkReady(t *testing.T, c *container, masters []*redistest.Server) {
	t.Helper()
	if code, body := c.get(t, c.admin, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	code, body := c.get(t, c.admin, "/readyz")
	var report readyReport
	if err := json.Unmarshal(body, &report); code != http.StatusOK || err != nil {
		t.Fatalf("/readyz: %d %s (%v)", code, body, err)
	}
	if !report.Ready || report.Up != len(masters) || len(report.Nodes) != len(masters) {
		t.Errorf("/readyz reports %d/%d masters up, ready %v, want all %d: %s", report.Up, len(report.Nodes), report.Ready, len(masters), body)
	}
	for i, n := range report.Nodes {
		if n.Addr != masters[i].Addr() || !n.Up {
			t.Errorf("/readyz master %d: %+v, want %s up", i, n, masters[i].Addr())
		}
	}
}

// checkLockFromOutside acquires and releases a lock with plain HTTP from
// the host, as the app in the pod does.
func checkLockFromOutside(t *testing.T, c *container) {
	t.Helper()
	res, err := http.Post("http://"+c.api+"/locks/orders/42?ttl=30s&owner=image-test", "", nil)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	var grant struct {
		Token string `json:"token"`
	}
	err = json.NewDecoder(res.Body).Decode(&grant)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || err != nil || grant.Token == "" {
		t.Fatalf("acquire: %d, token %q (%v)", res.StatusCode, grant.Token, err)
	}
	req, err := http.NewRequest(http.MethodDelete, "http://"+c.api+"/locks/orders/42", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Lock-Token", grant.Token)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("release: %d, want 204", res.StatusCode)
	}
}

// checkRunsAsImageUser reads the kernel's view of the container's process:
// the image's entrypoint, running as the image's non-root user with no
// capability and no way to gain privileges.
func checkRunsAsImageUser(t *testing.T, c *container, user string) {
	t.Helper()
	pid := c.pid(t)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("container process %d: %q", pid, cmdline)
	status := procStatus(t, pid)
	uid, gid, _ := strings.Cut(user, ":")
	want := map[string]string{
		"Uid":        strings.Repeat(uid+"\t", 3) + uid,
		"Gid":        strings.Repeat(gid+"\t", 3) + gid,
		"CapEff":     "0000000000000000",
		"CapPrm":     "0000000000000000",
		"CapBnd":     "0000000000000000",
		"NoNewPrivs": "1",
	}
	for field, value := range want {
		if status[field] != value {
			t.Errorf("/proc/%d/status %s: %q, want %q", pid, field, status[field], value)
		}
	}
	if uid == "0" || uid == "" {
		t.Errorf("image USER %q: the sidecar must not run as root", user)
	}
}

// checkRootIsReadOnly writes through the container's own root (the
// /proc/PID/root link resolves to its mount): even the host's root is
// refused with EROFS, so only the read-only mount can refuse it.
func checkRootIsReadOnly(t *testing.T, c *container) {
	t.Helper()
	path := fmt.Sprintf("/proc/%d/root/written-by-image-test", c.pid(t))
	err := os.WriteFile(path, []byte("x"), 0o644)
	if err == nil {
		os.Remove(path)
		t.Fatal("wrote to the container's root file system: it is not read-only")
	}
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing to the container's root: %v, want EROFS", err)
	}
}

// checkStopsOnSIGTERM sends SIGTERM as the kubelet does and wants exit 0
// within the drain timeout.
func checkStopsOnSIGTERM(t *testing.T, c *container) {
	t.Helper()
	c.runc(t, "kill", c.id, "TERM")
	select {
	case <-c.exited:
	case <-time.After(shutdownTimeout + stopSlack):
		t.Fatalf("still running %v after SIGTERM\noutput:\n%s", shutdownTimeout+stopSlack, c.output())
	}
	if c.exitErr != nil {
		t.Fatalf("exit after SIGTERM: %v, want status 0\noutput:\n%s", c.exitErr, c.output())
	}
}

// readyReport is the part of /readyz (internal/health.Report, which only
// encodes) that the test reads.
type readyReport struct {
	Ready bool `json:"ready"`
	Up    int  `json:"up"`
	Nodes []struct {
		Addr string `json:"addr"`
		Up   bool   `json:"up"`
	} `json:"masters"`
}

func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	return fields
}

// randomLoopback is an address of 127.0.0.0/8 that no other process binds,
// so the ports probed free on it stay free (see internal/redistest).
func randomLoopback() string {
	return fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(254), rand.IntN(256), 1+rand.IntN(254))
}

// container is one `runc run` in the foreground: runc stays the parent of
// the container's process and exits with its status.
type container struct {
	runcPath, root, id string
	api, admin         string
	cmd                *exec.Cmd
	out                *syncBuffer
	exited             chan struct{} // closed when runc run returns
	exitErr            error         // set before exited is closed
}

func run(t *testing.T, runcPath, bundle, id, api, admin string) *container {
	t.Helper()
	c := &container{runcPath: runcPath, root: t.TempDir(), id: id, api: api, admin: admin,
		out: &syncBuffer{}, exited: make(chan struct{})}
	c.cmd = exec.Command(runcPath, "--root", c.root, "run", "--bundle", bundle, id)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("runc run: %v", err)
	}
	go func() {
		c.exitErr = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() { c.remove(t) })
	return c
}

// remove kills and deletes the container and waits for runc run to end;
// safe to call more than once.
func (c *container) remove(t *testing.T) {
	t.Helper()
	out, err := exec.Command(c.runcPath, "--root", c.root, "delete", "--force", c.id).CombinedOutput()
	select {
	case <-c.exited:
		return
	case <-time.After(stopSlack):
	}
	c.cmd.Process.Kill()
	<-c.exited
	t.Errorf("runc delete --force %s left runc run running: %v %s", c.id, err, out)
}

func (c *container) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := sidecartest.WaitOK(ctx, "http://"+c.admin+"/readyz", c.exited)
	switch {
	case errors.Is(err, sidecartest.ErrExited):
		return fmt.Errorf("exited before ready: %w", c.exitErr)
	case err != nil:
		return fmt.Errorf("/readyz not 200 within %v", timeout)
	}
	return nil
}

func (c *container) get(t *testing.T, addr, path string) (int, []byte) {
	t.Helper()
	client := http.Client{Timeout: 10 * time.Second}
	res, err := client.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	var body bytes.Buffer
	if _, err := body.ReadFrom(res.Body); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return res.StatusCode, body.Bytes()
}

// pid is the container's process as the host sees it (runc state).
func (c *container) pid(t *testing.T) int {
	t.Helper()
	var state struct {
		Pid    int    `json:"pid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(c.runc(t, "state", c.id), &state); err != nil || state.Status != "running" || state.Pid == 0 {
		t.Fatalf("runc state %s: %+v (%v)", c.id, state, err)
	}
	return state.Pid
}

func (c *container) runc(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(c.runcPath, append([]string{"--root", c.root}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("runc %v: %v %s", args, err, stderr.String())
	}
	return out
}

func (c *container) output() string { return c.out.String() }

// syncBuffer collects the container's output, written by runc's copier
// while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
