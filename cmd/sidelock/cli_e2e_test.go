package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/sidecartest"
	"github.com/sidelock/sidelock/pkg/client"
)

// cliCommand runs sidelock (this test binary, see TestMain) with args,
// pointed at nothing unless env says otherwise. Under the race detector
// a process that exits 0 sleeps a second first (atexit_sleep_ms), which
// the help test's forty runs need not wait for.
func cliCommand(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"=1", "SIDELOCK_ADDR=", "SIDELOCK_ADMIN_ADDR=", "SIDELOCK_API_TOKEN=",
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// cliResult is how one run of the CLI ended.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs sidelock to its end, within 20s.
func runCLI(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	cmd := cliCommand(env, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &syncWriter{b: &stdout}, &syncWriter{b: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	code := exitCodeOf(t, cmd, 20*time.Second)
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// apiEnv points the client verbs at a sidecar.
func apiEnv(s *sidecar) []string {
	return []string{"SIDELOCK_ADDR=" + s.api, "SIDELOCK_ADMIN_ADDR=" + strings.TrimPrefix(s.admin, "http://")}
}

// Help is on stdout with exit 0, from `sidelock help [VERB]`, `-h`,
// `-help` and `--help` alike: aligned (no tab), the settings table
// without envconfig's preamble, every verb's usage line.
func TestCLIHelpExitsZeroOnStdout(t *testing.T) {
	overview := [][]string{{"help"}, {"-h"}, {"--help"}, {"-help"}}
	for _, args := range overview {
		r := runCLI(t, nil, args...)
		assertHelp(t, args, r, "usage: sidelock [VERB]")
		assertSettingsTable(t, args, r.stdout)
		for _, v := range verbs() {
			if !strings.Contains(r.stdout, "\n  "+v.name+" ") {
				t.Errorf("%q does not list the verb %s", args, v.name)
			}
		}
	}
	for _, v := range verbs() {
		want := "usage: sidelock " + v.name
		for _, args := range [][]string{{"help", v.name}, {v.name, "-h"}, {v.name, "--help"}} {
			r := runCLI(t, nil, args...)
			assertHelp(t, args, r, want)
			if v.exits != nil && !strings.Contains(r.stdout, "exit codes:") {
				t.Errorf("%q: no exit codes:\n%s", args, r.stdout)
			}
		}
	}
	assertSettingsTable(t, []string{"help", "serve"}, runCLI(t, nil, "help", "serve").stdout)
}

func assertHelp(t *testing.T, args []string, r cliResult, want string) {
	t.Helper()
	switch {
	case r.code != 0 || r.stderr != "":
		t.Errorf("%q: %v", args, r)
	case !strings.HasPrefix(r.stdout, want) && !strings.Contains(r.stdout, "\n\n"+want):
		t.Errorf("%q does not show %q:\n%s", args, want, r.stdout)
	case strings.Contains(r.stdout, "\t"):
		t.Errorf("%q: raw tabs, not aligned:\n%s", args, r.stdout)
	case strings.Contains(r.stdout, "flag: help requested"):
		t.Errorf("%q: the flag package's message:\n%s", args, r.stdout)
	}
}

// assertSettingsTable checks that every setting has its row, default in
// the third column, aligned with the header's columns, and that
// envconfig's preamble is gone.
func assertSettingsTable(t *testing.T, args []string, out string) {
	t.Helper()
	if strings.Contains(out, "This application is configured via the environment") {
		t.Errorf("%q: envconfig's preamble", args)
	}
	lines := strings.Split(out, "\n")
	header := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "VARIABLE ") {
			header = i
		}
	}
	if header < 0 {
		t.Fatalf("%q: no settings table:\n%s", args, out)
	}
	defaultCol, meaningCol := strings.Index(lines[header], "DEFAULT"), strings.Index(lines[header], "MEANING")
	rows := map[string]string{}
	for _, l := range lines[header+1:] {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "SIDELOCK_") {
			rows[f[0]] = l
		}
	}
	for _, s := range config.Settings() {
		row, ok := rows[s.Env]
		switch {
		case !ok:
			t.Errorf("%q: no row for %s", args, s.Env)
		case len(row) < meaningCol:
			t.Errorf("%q: row of %s shorter than the header: %q", args, s.Env, row)
		case strings.TrimSpace(row[defaultCol:meaningCol]) != config.FormatValue(s.Default):
			t.Errorf("%q: %s default column %q, want %q", args, s.Env, row[defaultCol:meaningCol], config.FormatValue(s.Default))
		}
	}
}

// Mistakes exit 64 with a short message naming the help to read, never
// the flag list; an invalid lock name is refused before any request.
func TestE2ECLIUsageErrorsExit64(t *testing.T) {
	a := startSidecar(t, durableMasters(t, 3))
	before := lockRequests(t, a)
	for _, c := range []struct {
		args []string
		help string
	}{
		{[]string{"frobnicate"}, "sidelock help"},
		{[]string{"-frobnicate"}, "sidelock help serve"},
		{[]string{"serve", "extra"}, "sidelock help serve"},
		{[]string{"exec", "-x"}, "sidelock help exec"},
		{[]string{"exec", "job"}, "sidelock help exec"},
		{[]string{"exec", "job#1", "--", "true"}, "sidelock help exec"},
		{[]string{"lock"}, "sidelock help lock"},
		{[]string{"lock", "-frob", "job"}, "sidelock help lock"},
		{[]string{"lock", "a", "b"}, "sidelock help lock"},
		{[]string{"lock", "job?1"}, "sidelock help lock"},
		{[]string{"lock", "job 1"}, "sidelock help lock"},
		{[]string{"lock", "--ttl", "10ms", "job"}, "sidelock help lock"}, // the sidecar refuses it: 400
		{[]string{"status", "-x"}, "sidelock help status"},
		{[]string{"status", "a", "b"}, "sidelock help status"},
		{[]string{"status", "job%2F1"}, "sidelock help status"},
		{[]string{"version", "x"}, "sidelock help version"},
		{[]string{"help", "nope"}, "sidelock help"},
		{[]string{"injector", "-x"}, "sidelock help injector"},
	} {
		r := runCLI(t, apiEnv(a), c.args...)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		switch {
		case r.code != exitUsage:
			t.Errorf("%q: exit %d, want %d\n%v", c.args, r.code, exitUsage, r)
		case !strings.HasSuffix(r.stderr, "run '"+c.help+"'\n"):
			t.Errorf("%q does not end with run '%s':\n%s", c.args, c.help, r.stderr)
		case len(lines) > 3 || r.stdout != "":
			t.Errorf("%q: more than a short message:\n%v", c.args, r)
		}
	}
	// One request reached the sidecar: the ttl it refused.
	if after := lockRequests(t, a); after != before+1 {
		t.Errorf("%v lock requests reached the sidecar, want 1 (the refused ttl)", after-before)
	}
}

func TestCLIVersion(t *testing.T) {
	want := fmt.Sprintf("sidelock dev %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, args := range [][]string{{"version"}, {"-version"}} {
		if r := runCLI(t, nil, args...); r.code != 0 || r.stdout != want || r.stderr != "" {
			t.Errorf("%q: %v, want %q", args, r, want)
		}
	}
}

// heldLock is a `sidelock lock` process that printed its lease.
type heldLock struct {
	cmd    *exec.Cmd
	lease  client.Lease
	stderr *strings.Builder
}

// startLock runs `sidelock lock` and waits for the lease it prints.
func startLock(t *testing.T, s *sidecar, args ...string) *heldLock {
	t.Helper()
	cmd := cliCommand(apiEnv(s), append([]string{"lock"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h := &heldLock{cmd: cmd, stderr: &strings.Builder{}}
	cmd.Stderr = &syncWriter{b: h.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		l, _ := r.ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, r) // nothing more is printed
	}()
	select {
	case l := <-line:
		if err := json.Unmarshal([]byte(l), &h.lease); err != nil || h.lease.Token == "" {
			t.Fatalf("lock printed %q (%v); stderr: %s", l, err, h.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("lock printed no lease within 10s; stderr: %s", h.stderr)
	}
	return h
}

// `sidelock lock` holds the lock until SIGTERM or SIGINT, then releases
// it at once (not left to lapse) and exits 0; meanwhile status NAME says
// who holds it and another lock of the name is not acquired (75). The
// sidecar's debug log has the acquisition, the refusal and the release,
// and never the token the CLI printed.
func TestE2ELockHoldsUntilSignalledAndStatusShowsIt(t *testing.T) {
	a := startSidecar(t, durableMasters(t, 3))
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		name := "jobs/cli-" + strings.ToLower(sig.String()[:4])
		h := startLock(t, a, "--owner", "cli-test", name)
		if h.lease.Name != name || h.lease.Owner != "cli-test" || h.lease.Fence == 0 || h.lease.ValidUntil.IsZero() {
			t.Fatalf("lease %+v", h.lease)
		}
		if r := runCLI(t, apiEnv(a), "status", name); r.code != 0 || !strings.HasPrefix(r.stdout, name+": held by cli-test, valid until ") {
			t.Errorf("status of a held lock: %v", r)
		}
		if r := runCLI(t, apiEnv(a), "lock", "--wait", "300ms", "--owner", "second", name); r.code != exitNotAcquired {
			t.Errorf("a second lock of %s: %v", name, r)
		}
		assertSignalEndsTheWait(t, a, name, sig)
		if err := h.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if code := exitCodeOf(t, h.cmd, 10*time.Second); code != 0 || !strings.Contains(h.stderr.String(), "released") {
			t.Errorf("lock after %v: exit %d, stderr %q", sig, code, h.stderr)
		}
		// The release is sent as lock exits (its held stream closes) and
		// lands a round trip later: free well within the key ttl (10s) that
		// a lapse would take.
		eventually(t, 2*time.Second, "status free after the release", func() bool {
			r := runCLI(t, apiEnv(a), "status", name)
			return r.code == exitNo && r.stdout == name+": free\n"
		})
		for _, want := range [][]string{
			{"lock acquired", "name=" + name, "owner=cli-test", "outcome=acquired"},
			{"held by another", "name=" + name, "owner=second", "outcome=held"},
			{"lock released", "name=" + name, "owner=cli-test"},
		} {
			// The sidecar logs a release after its keys are deleted, and
			// its stderr reaches the test through a pipe: allow a moment.
			eventually(t, 5*time.Second, fmt.Sprintf("a log line with %q", want), func() bool { return anyLineHasAll(a.Log(), want) })
		}
		assertNoSecrets(t, a, h.lease.Token)
	}
}

// assertSignalEndsTheWait signals a lock waiting for name: it stops
// waiting at once and exits 75, not acquired.
func assertSignalEndsTheWait(t *testing.T, s *sidecar, name string, sig syscall.Signal) {
	t.Helper()
	waiter := cliCommand(apiEnv(s), "lock", "--wait", "30s", name)
	var stderr strings.Builder
	waiter.Stderr = &syncWriter{b: &stderr}
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the waiter queued", func() bool { return metricValue(t, s, "sidelock_waiters") == 1 })
	if err := waiter.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if code := exitCodeOf(t, waiter, 5*time.Second); code != exitNotAcquired || !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("a waiting lock after %v: exit %d, stderr %q", sig, code, stderr.String())
	}
}

func anyLineHasAll(text string, words []string) bool {
	for line := range strings.SplitSeq(text, "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}

// A lock that ends without being asked to — its max_hold reached, or lost
// when two of three masters go away — ends `sidelock lock` with 79 and
// says why.
func TestE2ELockEndsWith79WhenTheLockEnds(t *testing.T) {
	masters := durableMasters(t, 3)
	a := startSidecar(t, masters, "SIDELOCK_KEY_TTL=1s")
	capped := startLock(t, a, "--max-hold", "1s", "capped")
	if code := exitCodeOf(t, capped.cmd, 10*time.Second); code != exitLockLost || !strings.Contains(capped.stderr.String(), "max_hold") {
		t.Errorf("max_hold: exit %d, stderr %q", code, capped.stderr)
	}
	lost := startLock(t, a, "fragile")
	masters[0].Kill()
	masters[1].Kill()
	if code := exitCodeOf(t, lost.cmd, 15*time.Second); code != exitLockLost {
		t.Errorf("lost: exit %d, stderr %q", code, lost.stderr)
	}
	if !strings.Contains(lost.stderr.String(), "expiring") {
		t.Errorf("no warning before the loss: %q", lost.stderr)
	}
}

// status without NAME is the sidecar's readiness: 0 and every master
// while ready, 1 once a quorum is gone, 69 when nothing answers; status
// NAME without a quorum cannot answer (69).
func TestE2EStatusReadiness(t *testing.T) {
	masters := durableMasters(t, 3)
	a := startSidecar(t, masters)
	eventually(t, 5*time.Second, "ready", func() bool { return a.readyz(t) == 200 })
	r := runCLI(t, apiEnv(a), "status")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ready: 3 of 3 masters up, 3 counted, quorum 2\n") {
		t.Errorf("ready: %v", r)
	}
	for _, m := range masters {
		if !anyLineHasAll(r.stdout, []string{m.Addr(), "yes"}) {
			t.Errorf("status does not show master %s: %s", m.Addr(), r.stdout)
		}
	}
	masters[0].Kill()
	masters[1].Kill()
	eventually(t, 5*time.Second, "not ready", func() bool { return a.readyz(t) == 503 })
	r = runCLI(t, apiEnv(a), "status")
	if r.code != exitNo || !strings.HasPrefix(r.stdout, "not ready: 1 of 3 masters up") || !anyLineHasAll(r.stdout, []string{masters[0].Addr(), "no"}) {
		t.Errorf("not ready: %v", r)
	}
	if r := runCLI(t, apiEnv(a), "status", "somelock"); r.code != exitUnavailable {
		t.Errorf("status NAME without a quorum: %v", r)
	}
	nowhere := []string{"SIDELOCK_ADDR=http://" + sidecartest.FreeAddr(t), "SIDELOCK_ADMIN_ADDR=" + sidecartest.FreeAddr(t)}
	for _, args := range [][]string{{"status"}, {"status", "x"}, {"lock", "x"}, {"exec", "x", "--", "true"}} {
		if r := runCLI(t, nowhere, args...); r.code != exitUnavailable {
			t.Errorf("%q with no sidecar: %v", args, r)
		}
	}
}

// A freshly started sidecar exports every metric family that
// docs/api.md lists with a fixed set of label values, each value at 0,
// and those without labels: rate() sees the first increase and absent()
// tells a missing sidecar from a quiet one. sidelock_build_info carries
// the version.
func TestE2EMetricsStartWithEveryDocumentedSeries(t *testing.T) {
	a := startSidecar(t, durableMasters(t, 3))
	series := scrapeSeries(t, a)
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, row := range documentedMetrics(string(doc)) {
		name := row.name
		if row.typ == "histogram" {
			name += "_count"
		}
		if len(row.values) == 0 {
			if row.unlabelled && len(series[name]) == 0 {
				t.Errorf("%s is not exported at start", row.name)
			}
			continue
		}
		for label, values := range row.values {
			for _, v := range values {
				if !slices.ContainsFunc(series[name], func(labels string) bool { return strings.Contains(labels, label+`="`+v+`"`) }) {
					t.Errorf("%s{%s=%q} is not exported at start (documented in docs/api.md)", row.name, label, v)
				}
				checked++
			}
		}
	}
	documented := map[string]bool{}
	for _, row := range documentedMetrics(string(doc)) {
		documented[row.name] = true
	}
	for name := range series {
		family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(name, "sidelock_") && !documented[name] && !documented[family] {
			t.Errorf("%s is exported but has no row in docs/api.md's metrics table", name)
		}
	}
	t.Logf("checked %d documented label values", checked)
	if checked < 20 {
		t.Errorf("only %d documented label values found: has the table in docs/api.md changed shape?", checked)
	}
	if b := series["sidelock_build_info"]; len(b) != 1 || !strings.Contains(b[0], `version="dev"`) || !strings.Contains(b[0], `goversion="`+runtime.Version()+`"`) {
		t.Errorf("sidelock_build_info: %q", b)
	}
}

// scrapeSeries reads /metrics as series name -> label sets.
func scrapeSeries(t *testing.T, s *sidecar) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for line := range strings.SplitSeq(s.get(t, "/metrics"), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels, _ := strings.Cut(strings.Fields(line)[0], "{")
		out[name] = append(out[name], labels)
	}
	return out
}

// documentedMetric is one row of the metrics table in docs/api.md.
type documentedMetric struct {
	name, typ  string
	unlabelled bool                // its labels cell is "—"
	values     map[string][]string // label -> the values the row lists
}

// documentedMetrics reads the rows "| `name` | type | labels |", where
// labels lists values as "`label`: a, b (comment), c".
func documentedMetrics(doc string) []documentedMetric {
	var out []documentedMetric
	for line := range strings.SplitSeq(doc, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`sidelock_") {
			continue
		}
		m := documentedMetric{
			name: strings.Trim(strings.TrimSpace(cells[1]), "`"), typ: strings.TrimSpace(cells[2]),
			unlabelled: strings.HasPrefix(strings.TrimSpace(cells[3]), "—"), values: map[string][]string{},
		}
		labels := cells[3]
		for {
			before, after, found := strings.Cut(labels, "`: ")
			if !found {
				break
			}
			label := before[strings.LastIndex(before, "`")+1:]
			for _, item := range splitOutsideParens(after) {
				if f := strings.Fields(item); len(f) > 0 && strings.Trim(f[0], "abcdefghijklmnopqrstuvwxyz_") == "" {
					m.values[label] = append(m.values[label], f[0])
				}
			}
			labels = after
		}
		out = append(out, m)
	}
	return out
}

// splitOutsideParens splits s at the commas that are not inside
// parentheses.
func splitOutsideParens(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// status finds the admin listener from the sidecar's own setting, on
// loopback when it listens on every address.
func TestAdminURLFollowsTheSidecarsSetting(t *testing.T) {
	for setting, want := range map[string]string{
		"": "http://127.0.0.1:7421", ":7421": "http://127.0.0.1:7421", "0.0.0.0:9000": "http://127.0.0.1:9000",
		"[::]:9000": "http://127.0.0.1:9000", "10.0.0.5:7421": "http://10.0.0.5:7421", "[::1]:7421": "http://[::1]:7421",
	} {
		if got := adminURL(func(string) string { return setting }); got != want {
			t.Errorf("SIDELOCK_ADMIN_ADDR=%q: %s, want %s", setting, got, want)
		}
	}
}
