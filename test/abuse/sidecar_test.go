//go:build linux

package abuse

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecartest"
)

// binaryEnv names a prebuilt sidecar to measure instead of building
// cmd/sidelock from this tree: how the "before" figures of a fix are
// taken from an older commit (git archive of it, go build, point here).
const binaryEnv = "SIDELOCK_ABUSE_BIN"

// buildSidecar builds cmd/sidelock as the release does (static, stripped),
// or takes the binary named by SIDELOCK_ABUSE_BIN: the figures are those
// of the real binary, as a pod runs it, not of an in-process server.
func buildSidecar(t *testing.T) string {
	t.Helper()
	return sidecartest.PrebuiltOrBuild(t, binaryEnv, "-trimpath", "-ldflags", "-s -w")
}

// startMasters starts three durable masters on tmpfs: durable so that a
// fresh sidecar counts them at once (no restart probation), tmpfs so that
// their fsyncs never overrun the node timeout and pass for overload.
func startMasters(t *testing.T) []string {
	t.Helper()
	servers := redistest.StartN(t, 3, redistest.WithAppendOnly())
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// knobs are the sidecar's documented settings (from its -h output): which
// exist and their defaults, so the harness adapts to a binary with or
// without SIDELOCK_MAX_CONNS.
type knobs map[string]string

// settingColumns splits a row of the settings table in `sidelock -h`: columns are
// padded with spaces (text/tabwriter), or tabs in binaries built before it.
var settingColumns = regexp.MustCompile("\t| {2,}")

// readKnobs parses the settings table `sidelock -h` prints
// ("SIDELOCK_X  Type  default  ...").
func readKnobs(t *testing.T, bin string) knobs {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, "-h")
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // -h may exit non-zero; the table is what matters
	k := knobs{}
	for line := range strings.SplitSeq(out.String(), "\n") {
		fields := settingColumns.Split(strings.TrimSpace(line), -1)
		if len(fields) >= 3 && strings.HasPrefix(fields[0], "SIDELOCK_") {
			k[fields[0]] = strings.TrimSpace(fields[2])
		}
	}
	return k
}

// intKnob is a knob's default as an integer, or 0 when it is missing or
// not a number.
func (k knobs) intKnob(name string) int {
	n, _ := strconv.Atoi(k[name])
	return n
}

// sidecar is one running sidelock process.
type sidecar struct {
	proc       *sidecartest.Process
	pid        int
	api, admin string // http://127.0.0.1:port
	// capRejected: the binary refused SIDELOCK_MAX_CONNS, so this one
	// runs without it.
	capRejected bool
}

// startSidecar runs bin over masters with the given extra environment and
// waits until /readyz is 200. When extra holds SIDELOCK_MAX_CONNS and the
// binary will not start with it (a version without the setting that
// rejects it), it starts again without: the harness measures both kinds.
func startSidecar(t *testing.T, bin string, masters []string, prefix string, extra ...string) *sidecar {
	t.Helper()
	s, err := launchSidecar(t, bin, masters, prefix, extra)
	if err != nil && hasMaxConns(extra) {
		t.Logf("the sidecar did not start with SIDELOCK_MAX_CONNS (%v): starting it without", err)
		s, err = launchSidecar(t, bin, masters, prefix, withoutMaxConns(extra))
		if err == nil {
			s.capRejected = true
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hasMaxConns(env []string) bool { return len(withoutMaxConns(env)) != len(env) }

func withoutMaxConns(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, "SIDELOCK_MAX_CONNS=") {
			out = append(out, e)
		}
	}
	return out
}

// launchSidecar runs bin with only the environment set here: a SIDELOCK_*
// variable of the caller's shell must not change what is measured.
func launchSidecar(t *testing.T, bin string, masters []string, prefix string, extra []string) (*sidecar, error) {
	t.Helper()
	env := append([]string{"SIDELOCK_REDIS_ADDRS=" + strings.Join(masters, ","),
		"SIDELOCK_KEY_PREFIX=" + prefix, "SIDELOCK_LOG_LEVEL=warn", "SIDELOCK_LOG_FORMAT=json"}, extra...)
	p := sidecartest.New(t, bin, sidecartest.Options{})
	if err := p.Launch(env); err != nil {
		return nil, err
	}
	return &sidecar{proc: p, pid: p.Pid(), api: p.API(), admin: p.Admin()}, nil
}

// kill is kill -9, then waiting for the process: nothing outlives a phase.
func (s *sidecar) kill() { s.proc.Kill() }

// procStats is what the kernel says about the sidecar process.
type procStats struct {
	rssKB, hwmKB int // VmRSS, VmHWM (the peak resident set)
	fds          int // open file descriptors
}

// stats reads /proc/<pid>/status and /proc/<pid>/fd (zero when the
// process is gone: the report shows it).
func (s *sidecar) stats() procStats {
	var p procStats
	if f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.pid)); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				p.rssKB = kbField(v)
			} else if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
				p.hwmKB = kbField(v)
			}
		}
		f.Close()
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.pid)); err == nil {
		p.fds = len(ents)
	}
	return p
}

func kbField(v string) int {
	n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
	return n
}

// metric reads one unlabelled sample of /metrics (-1 when unavailable).
func (s *sidecar) metric(name string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.admin+"/metrics", nil)
	res, err := probeClient.Do(req)
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// waitMetric polls a gauge until want(value) or within ends, and reports
// whether it got there.
func (s *sidecar) waitMetric(name string, within time.Duration, want func(float64) bool) bool {
	deadline := time.Now().Add(within)
	for !want(s.metric(name)) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// probeClient opens a fresh connection per request, as the kubelet's
// probes do, so a probe measures whether the listener still accepts.
var probeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// statusOf is the status of GET url within timeout, 0 when it failed.
func statusOf(url string, timeout time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	res, err := probeClient.Do(req)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// raiseNoFile lifts this process's soft RLIMIT_NOFILE towards want (never
// above the hard limit) and returns the soft limit in force: the flood's
// client ends are file descriptors of the test process too.
func raiseNoFile(want uint64) uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	if lim.Cur < want {
		next := lim
		next.Cur = min(want, lim.Max)
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next) == nil {
			lim = next
		}
	}
	return lim.Cur
}

// chartMemoryLimit is sidecar.resources.limits.memory of the Helm chart's
// values.yaml, e.g. "64Mi"; empty when not found. It follows the keys by
// indentation (the file is plain block YAML, and the module has no YAML
// parser outside test/deploy).
func chartMemoryLimit(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	type key struct {
		indent int
		name   string
	}
	var stack []key
	for line := range strings.SplitSeq(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		name, value, ok := strings.Cut(trimmed, ":")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, "-") || !ok {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, key{indent, name})
		if len(stack) == 4 && stack[0].name == "sidecar" && stack[1].name == "resources" && stack[2].name == "limits" && name == "memory" {
			value, _, _ = strings.Cut(value, "#")
			return strings.Trim(strings.TrimSpace(value), `"'`)
		}
	}
	return ""
}

// quantityKB converts a Kubernetes memory quantity ("64Mi", "100M") to
// kB (KiB, as /proc reports), 0 when it is not one of those forms.
func quantityKB(q string) int {
	units := []struct {
		suffix string
		bytes  float64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}}
	for _, u := range units {
		if v, ok := strings.CutSuffix(q, u.suffix); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0
			}
			return int(n * u.bytes / 1024)
		}
	}
	return 0
}
