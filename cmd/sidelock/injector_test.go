package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/testcert"

	"github.com/sidelock/sidelock/internal/injector"
)

// lockedBuffer collects a log written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type injectorProc struct {
	addr   string
	log    *lockedBuffer
	cancel context.CancelFunc
	done   chan error
}

func startInjector(t *testing.T, env map[string]string, args ...string) *injectorProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &injectorProc{log: &lockedBuffer{}, cancel: cancel, done: make(chan error, 1)}
	getenv := func(k string) string { return env[k] }
	go func() {
		p.done <- runInjector(ctx, args, getenv, io.Discard, p.log)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for p.addr == "" {
		select {
		case err := <-p.done:
			t.Fatalf("injector exited: %v\n%s", err, p.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("injector did not start:\n%s", p.log)
		}
		sc := bufio.NewScanner(strings.NewReader(p.log.String()))
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "sidelock injector started" {
				p.addr = line.Addr
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			t.Error("injector did not stop")
		}
	})
	return p
}

func injectorEnv(t *testing.T) (env map[string]string, pool *x509.CertPool, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	pool = testcert.WriteSelfSigned(t, certFile, keyFile, 1)
	return map[string]string{
		"SIDELOCK_INJECTOR_LISTEN_ADDR":    "127.0.0.1:0",
		"SIDELOCK_INJECTOR_TLS_CERT_FILE":  certFile,
		"SIDELOCK_INJECTOR_TLS_KEY_FILE":   keyFile,
		"SIDELOCK_INJECTOR_SIDECAR_SPEC":   "../../internal/injector/testdata/sidecar.json",
		"SIDELOCK_INJECTOR_LOG_FORMAT":     "json",
		"SIDELOCK_INJECTOR_SHUTDOWN_DELAY": "0s",
	}, pool, certFile, keyFile
}

func httpsClient(pool *x509.CertPool, maxVersion uint16) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", MaxVersion: maxVersion},
	}}
}

const testReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
	"uid":"7b3f","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},
	"namespace":"shop","operation":"CREATE","userInfo":{"username":"system:serviceaccount:kube-system:replicaset-controller"},
	"object":{"apiVersion":"v1","kind":"Pod","metadata":{"generateName":"web-","labels":{"sidelock.io/inject":"true"}},
	"spec":{"containers":[{"name":"web","image":"web:1"}]}}}}`

func TestInjectorServesTheWebhookOverTLS(t *testing.T) {
	env, pool, _, _ := injectorEnv(t)
	p := startInjector(t, env)
	c := httpsClient(pool, 0)
	base := "https://" + p.addr

	resp, err := c.Post(base+"/mutate", "application/json", strings.NewReader(testReview))
	if err != nil {
		t.Fatal(err)
	}
	var review struct {
		Response struct {
			UID       string
			Allowed   bool
			PatchType string
			Patch     []byte
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&review)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTP %d: %v", resp.StatusCode, err)
	}
	r := review.Response
	if r.UID != "7b3f" || !r.Allowed || r.PatchType != "JSONPatch" || !bytes.Contains(r.Patch, []byte(`"path":"/spec/initContainers"`)) {
		t.Errorf("response %+v, patch %s", r, r.Patch)
	}

	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/mutate": 405, "/other": 404} {
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err = c.Post(base+"/mutate", "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("malformed review: HTTP %d, want 400", resp.StatusCode)
	}

	// TLS 1.2 at least.
	if _, err := httpsClient(pool, tls.VersionTLS11).Get(base + "/healthz"); err == nil {
		t.Error("TLS 1.1 accepted")
	}
	if resp, err := httpsClient(pool, tls.VersionTLS12).Get(base + "/healthz"); err != nil {
		t.Errorf("TLS 1.2 refused: %v", err)
	} else {
		resp.Body.Close()
	}
	if !strings.Contains(p.log.String(), `"msg":"sidecar injected"`) {
		t.Errorf("injection not logged:\n%s", p.log)
	}
}

// The certificate reloader is tested in internal/injector (certs_test.go).

// On SIGTERM the injector fails /readyz but keeps answering for the
// shutdown delay, then stops cleanly.
func TestInjectorDrainsOnShutdown(t *testing.T) {
	env, pool, _, _ := injectorEnv(t)
	env["SIDELOCK_INJECTOR_SHUTDOWN_DELAY"] = "1s"
	p := startInjector(t, env)
	c := httpsClient(pool, 0)
	p.cancel()
	time.Sleep(200 * time.Millisecond)
	resp, err := c.Get("https://" + p.addr + "/readyz")
	if err != nil {
		t.Fatalf("not answering during the shutdown delay: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d while draining, want 503", resp.StatusCode)
	}
	resp, err = c.Post("https://"+p.addr+"/mutate", "application/json", strings.NewReader(testReview))
	if err != nil {
		t.Fatalf("webhook not answering during the shutdown delay: %v", err)
	}
	resp.Body.Close()
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("exit: %v", err)
		}
		p.done <- nil // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("did not stop after the delay")
	}
}

func TestInjectorRejectsBadSettings(t *testing.T) {
	env, _, _, _ := injectorEnv(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no certificate", map[string]string{"SIDELOCK_INJECTOR_TLS_CERT_FILE": ""}, nil, "-tls-cert and -tls-key are required"},
		{"no spec", map[string]string{"SIDELOCK_INJECTOR_SIDECAR_SPEC": ""}, nil, "-sidecar-spec is required"},
		{"missing spec", nil, []string{"-sidecar-spec", "/nonexistent.json"}, "sidecar spec"},
		{"bad spec", nil, []string{"-sidecar-spec", "injector.go"}, "sidecar spec"},
		{"missing key", map[string]string{"SIDELOCK_INJECTOR_TLS_KEY_FILE": "/nonexistent.key"}, nil, "serving certificate"},
		{"bad listen", nil, []string{"-listen", "8443"}, "-listen"},
		{"bad log level", map[string]string{"SIDELOCK_INJECTOR_LOG_LEVEL": "loud"}, nil, "-log-level"},
		{"bad delay", map[string]string{"SIDELOCK_INJECTOR_SHUTDOWN_DELAY": "soon"}, nil, "SHUTDOWN_DELAY"},
		{"arguments", nil, []string{"extra"}, "no arguments"},
		{"unknown flag", nil, []string{"-port", "1"}, "not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := map[string]string{}
			for k, v := range env {
				e[k] = v
			}
			for k, v := range tc.env {
				e[k] = v
			}
			var stderr lockedBuffer
			err := runInjector(context.Background(), tc.args, func(k string) string { return e[k] }, io.Discard, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one about %q", err, tc.want)
			}
		})
	}
	var stdout lockedBuffer
	if err := runInjector(context.Background(), []string{"-h"}, func(string) string { return "" }, &stdout, io.Discard); !errors.Is(err, errHelpShown) || !strings.HasPrefix(stdout.String(), "usage: sidelock injector") {
		t.Errorf("-h: %v\n%s", err, stdout.String())
	}
}

// The injector has no client authentication and a 64Mi memory limit in
// the chart (injector.resources): 8 concurrent reviews of the largest size
// it accepts must leave it well below that. Each shape runs in a fresh
// `sidelock injector` process (the test binary, see TestMain), whose peak
// resident memory (VmHWM) is read from /proc once every review is answered.
func TestInjectorMemoryUnderConcurrentMaximalReviews(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and sends 8 reviews of several MiB per shape")
	}
	if raceBuild() {
		t.Skip("the race detector's shadow memory makes resident sizes meaningless")
	}
	const concurrent = 8
	for _, shape := range maximalReviewShapes() {
		t.Run(shape.name, func(t *testing.T) {
			body := maximalReview(shape.member, maximalReviewBytes)
			p := startInjectorProcess(t)
			statuses := postConcurrently(t, p, body, concurrent)
			peak := p.peakRSS(t)
			t.Logf("%d concurrent %d-byte reviews: HTTP %v, peak RSS %.1f MiB", concurrent, len(body), statuses, float64(peak)/(1<<20))
			if peak > injectorPeakRSSBudget {
				t.Errorf("peak RSS %.1f MiB, want at most %.0f MiB (the chart's limit is 64Mi)", float64(peak)/(1<<20), float64(injectorPeakRSSBudget)/(1<<20))
			}
		})
	}
}

// injectorPeakRSSBudget leaves a quarter of the chart's 64Mi limit free.
const injectorPeakRSSBudget = 48 << 20

// maximalReviewBytes is the size of the reviews the memory test sends: the
// largest body the injector accepts.
const maximalReviewBytes = injector.MaxReviewBytes

func raceBuild() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// reviewShape is a way to fill a review: member(i) is the i-th JSON member
// of the pod's annotations.
type reviewShape struct {
	name   string
	member func(i int) string
}

func maximalReviewShapes() []reviewShape {
	return []reviewShape{
		{"many small annotations", func(i int) string { return fmt.Sprintf(`"k%07d":"v"`, i) }},
		{"many unknown sidelock annotations", func(i int) string { return fmt.Sprintf(`"sidelock.io/x%07d":"v"`, i) }},
		{"one large annotation", func(i int) string {
			if i > 0 {
				return ""
			}
			return `"big":"` + strings.Repeat("x", maximalReviewBytes) + `"`
		}},
	}
}

// maximalReview is an opted-in pod creation review of at most size bytes,
// its annotations filled with members.
func maximalReview(member func(i int) string, size int) []byte {
	head := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"7b3f","kind":{"group":"","version":"v1","kind":"Pod"},` +
		`"resource":{"group":"","version":"v1","resource":"pods"},"namespace":"shop","operation":"CREATE","object":{"apiVersion":"v1","kind":"Pod",` +
		`"metadata":{"generateName":"web-","labels":{"sidelock.io/inject":"true"},"annotations":{`
	tail := `}},"spec":{"containers":[{"name":"web","image":"web:1"}]}}}}`
	b := bytes.NewBufferString(head)
	for i := 0; ; i++ {
		m := member(i)
		if m == "" {
			break
		}
		if i > 0 {
			m = "," + m
		}
		if b.Len()+len(m)+len(tail) > size {
			if i == 0 { // one member: cut its value to fit
				m = m[:size-len(tail)-b.Len()-1] + `"`
			} else {
				break
			}
		}
		b.WriteString(m)
	}
	b.WriteString(tail)
	return b.Bytes()
}

// injectorProcess is `sidelock injector` running in a child process.
type injectorProcess struct {
	cmd    *exec.Cmd
	addr   string
	client *http.Client
}

func startInjectorProcess(t *testing.T) *injectorProcess {
	t.Helper()
	env, pool, _, _ := injectorEnv(t)
	cmd := exec.Command(os.Args[0], "injector")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &injectorProcess{cmd: cmd, client: httpsClient(pool, 0)}
	p.client.Timeout = 30 * time.Second
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<30)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "sidelock injector started" {
				addr <- line.Addr
			}
		}
	}()
	select {
	case p.addr = <-addr:
	case <-time.After(10 * time.Second):
		t.Fatal("injector process did not start")
	}
	return p
}

// postConcurrently sends body n times at once and returns the statuses.
func postConcurrently(t *testing.T, p *injectorProcess, body []byte, n int) []int {
	t.Helper()
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := p.client.Post("https://"+p.addr+"/mutate", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	return statuses
}

// peakRSS is the process's peak resident memory (VmHWM).
func (p *injectorProcess) peakRSS(t *testing.T) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q", v)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}
