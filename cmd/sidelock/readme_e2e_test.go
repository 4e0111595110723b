package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/sidecartest"
)

// readmeBlock is the fenced block of lang that follows the first line of the
// README starting with after.
func readmeBlock(t *testing.T, after, lang string) string {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "\n"+after)
	if !ok {
		t.Fatalf("README.md has no line starting %q", after)
	}
	_, rest, ok = strings.Cut(rest, "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("README.md has no ```%s block after %q", lang, after)
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("README.md: the ```%s block after %q does not end", lang, after)
	}
	return block + "\n"
}

// What changes from run to run in an answer: tokens, times, fences, hints.
var readmeVolatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`[0-9a-f]{32}`), "TOKEN"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "TIME"},
	{regexp.MustCompile(`"fence":\d+`), `"fence":N`},
	{regexp.MustCompile(`"retry_after_ms":\d+`), `"retry_after_ms":N`},
}

func readmeShape(s string) string {
	for _, v := range readmeVolatile {
		s = v.re.ReplaceAllString(s, v.with)
	}
	return strings.TrimSpace(s)
}

// runReadmeBlock runs a README block with bash in dir, its own process
// group (killed at the end with anything it left running, such as a
// sidecar stopping in the background), env added, and returns its stdout.
func runReadmeBlock(t *testing.T, dir, block string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", block)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Files, not pipes: a background process still holding them must not
	// keep the block from ending.
	outputs := t.TempDir()
	stdout, stderr := createFile(t, filepath.Join(outputs, "stdout")), createFile(t, filepath.Join(outputs, "stderr"))
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	out, _ := os.ReadFile(stdout.Name())
	if err != nil {
		errOut, _ := os.ReadFile(stderr.Name())
		t.Fatalf("the README's block failed: %v\nstdout:\n%s\nstderr:\n%s\nblock:\n%s", err, out, errOut, block)
	}
	return string(out)
}

func createFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// The README's walkthrough, pasted as it stands into bash against a
// sidecar started as `make run` starts it (-dev), prints the answers the
// README shows, tokens, times and fences aside. A .curlrc sends curl's
// connections to 127.0.0.1:7420 to the sidecar's free port (connect-to),
// so the block runs verbatim and the test never binds 7420.
func TestReadmeWalkthrough(t *testing.T) {
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (make test-unit installs curl)", tool)
		}
	}
	walk := readmeBlock(t, "## A one-minute walkthrough with curl", "sh")
	want := readmeBlock(t, "It prints", "text")
	s := sidecartest.Start(t, os.Args[0], append(os.Environ(), childEnv+"=1"), sidecartest.Options{Args: []string{"-dev"}})
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".curlrc"), []byte(`connect-to = "127.0.0.1:7420:`+s.APIAddr()+`"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := runReadmeBlock(t, t.TempDir(), walk, "CURL_HOME="+home, "HOME="+home)
	gotLines, wantLines := strings.Split(readmeShape(got), "\n"), strings.Split(readmeShape(want), "\n")
	if len(gotLines) != len(wantLines) {
		t.Fatalf("the walkthrough printed %d lines, the README shows %d:\n%s", len(gotLines), len(wantLines), got)
	}
	for i := range wantLines {
		if gotLines[i] != wantLines[i] {
			t.Errorf("line %d of the walkthrough's answers:\n got: %s\nwant: %s", i+1, gotLines[i], wantLines[i])
		}
	}
}

// The README's Unix-socket block starts a second sidecar beside `make run`
// on an admin port of its own (make run's, 7421, would refuse it), then
// locks over the socket with curl and sidelock exec. Run here with its
// port and directory moved to free ones, bin/sidelock this binary.
func TestReadmeUnixSocket(t *testing.T) {
	block := readmeBlock(t, "The same API on a Unix domain socket", "sh")
	const admin, dir = "SIDELOCK_ADMIN_ADDR=127.0.0.1:7431", "/tmp/sidelock"
	if !strings.Contains(block, admin) || !strings.Contains(block, dir) || strings.Contains(block, ":7421") {
		t.Fatalf("the README's Unix-socket block changed; it must give its sidecar an admin port other than make run's 7421 (%s):\n%s", admin, block)
	}
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(os.Args[0], filepath.Join(work, "bin", "sidelock")); err != nil {
		t.Fatal(err)
	}
	sockDir := filepath.Join(t.TempDir(), "sidelock")
	block = strings.NewReplacer(admin, "SIDELOCK_ADMIN_ADDR="+sidecartest.FreeAddr(t), dir, sockDir).Replace(block)
	out := runReadmeBlock(t, work, block, childEnv+"=1", "SIDELOCK_ADDR=", "SIDELOCK_API_TOKEN=")
	if !strings.Contains(out, `"name":"orders/42"`) || !strings.Contains(out, "holding orders/43") {
		t.Errorf("the Unix-socket block printed no lease or no command output:\n%s", out)
	}
}
