package examples_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
)

// sidecar serves the lock API over in-memory masters, as dev mode does.
func sidecar(t *testing.T) string {
	core := inprocess.Start(t, inprocess.Options{Config: func(c *config.Config) { c.KeyPrefix, c.MaxWait = "ex:", time.Minute }})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: core.Handler()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func runExample(t *testing.T, api string, extraPath string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "SIDELOCK_ADDR="+api, "STEP_SECONDS=0.2")
	if extraPath != "" {
		cmd.Env = append(cmd.Env, "PATH="+extraPath+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func need(t *testing.T, tool string) {
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("%s is not installed", tool)
	}
}

func TestShellHeartbeat(t *testing.T) {
	need(t, "curl")
	out := runExample(t, sidecar(t), "", "sh", "shell/heartbeat.sh", "orders/42")
	if !strings.Contains(out, "holding orders/42 with fence") || !strings.Contains(out, "step 3") {
		t.Fatalf("output:\n%s", out)
	}
}

func TestShellHeld(t *testing.T) {
	need(t, "curl")
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "sidelock"), "../cmd/sidelock")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building sidelock: %v\n%s", err, out)
	}
	out := runExample(t, sidecar(t), bin, "sh", "shell/held.sh")
	if !strings.Contains(out, "fence ") || !strings.Contains(out, "event: acquired") {
		t.Fatalf("output:\n%s", out)
	}
}

func TestPython(t *testing.T) {
	need(t, "python3")
	api := sidecar(t)
	if out := runExample(t, api, "", "python3", "python/lock.py"); !strings.Contains(out, "holding orders/42, fence") {
		t.Fatalf("heartbeat output:\n%s", out)
	}
	if out := runExample(t, api, "", "python3", "python/lock.py", "--hold"); !strings.Contains(out, "holding reports/nightly, fence") || !strings.Contains(out, "released") {
		t.Fatalf("held output:\n%s", out)
	}
	res, err := http.Post(api+"/locks/reports/nightly", "", nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("the held lock was not released when the stream closed: %v %v", res, err)
	}
	res.Body.Close()
}

func TestGo(t *testing.T) {
	out := runExample(t, sidecar(t), "", "go", "run", "./go")
	if !strings.Contains(out, "holding orders/42 with fence") || !strings.Contains(out, "holding reports/nightly with fence") {
		t.Fatalf("output:\n%s", out)
	}
}
