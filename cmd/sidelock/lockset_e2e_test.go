package main

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

// setScript is the command of each exec below, as rwScript is: it appends
// "start <ns>" to the file $1, tells the test what exec gave it, waits for
// its stdin to close when $2 is "wait", and appends "end <ns>" last.
const setScript = `echo "start $(date +%s%N)" >> "$1"
echo "name $SIDELOCK_LOCK_NAME fences $SIDELOCK_FENCES fence ${SIDELOCK_FENCE:-none} token ${#SIDELOCK_TOKEN}"
if [ "$2" = wait ]; then read x || true; fi
echo "end $(date +%s%N)" >> "$1"`

// `exec set/b,set/a` and `exec --wait set/c,set/b`, on two sidecars over
// the same masters, never run at once: the second waits (holding nothing:
// set/c stays free meanwhile) and runs once the first ended. Each command
// gets the set's canonical name, SIDELOCK_FENCES with each lock's fence
// as the masters have it, and no SIDELOCK_FENCE, not even one exec
// inherited.
func TestE2EExecLockSetsNeverOverlap(t *testing.T) {
	t.Setenv("SIDELOCK_FENCE", "outer") // as under another exec: must not reach a set's command
	masters := durableMasters(t, 3)
	a, b := startSidecar(t, masters), startSidecar(t, masters)
	dir := t.TempDir()
	startExec := func(s *sidecar, set, file, wait string, flags ...string) *cliChild {
		args := append(append([]string{"exec"}, flags...), set, "--", "sh", "-c", setScript, "sh", filepath.Join(dir, file), wait)
		return startCLI(t, s, args...)
	}

	first := startExec(a, "set/b,set/a", "first", "wait")
	firstFences := assertSetEnv(t, b, commandSaw(t, first), "set/a", "set/b")

	waiters := metricValue(t, b, "sidelock_waiters")
	second := startExec(b, "set/c,set/b", "second", "", "--wait", "10s")
	eventually(t, 5*time.Second, "the second exec waits", func() bool { return metricValue(t, b, "sidelock_waiters") > waiters })
	if r := runCLI(t, apiEnv(a), "exec", "set/c", "--", "true"); r.code != 0 {
		t.Errorf("set/c while the second set waits for set/b: %v", r)
	}
	if r := runCLI(t, apiEnv(b), "exec", "set/x,set/a", "--", "true"); r.code != exitNotAcquired || !strings.Contains(r.stderr, `a lock of lock set "set/x,set/a" is held by another`) {
		t.Errorf("a set that overlaps the held one, without --wait: %v", r)
	}
	second.noLine(t, "the second set ran while the first was held")
	first.stdin.Close()
	if code := first.exit(t); code != 0 {
		t.Fatalf("the first exec: exit %d, %s", code, first.stderr)
	}

	secondFences := assertSetEnv(t, b, commandSaw(t, second), "set/b", "set/c")
	if code := second.exit(t); code != 0 {
		t.Fatalf("the second exec: exit %d, %s", code, second.stderr)
	}
	if secondFences["set/b"] <= firstFences["set/b"] {
		t.Errorf("set/b's fence went from %d to %d", firstFences["set/b"], secondFences["set/b"])
	}
	f, s := ranFrom(t, dir, "first"), ranFrom(t, dir, "second")
	if f.overlaps(s) || s.start < f.end {
		t.Errorf("the second set's command %v overlapped the first's %v", s, f)
	}
}

// fencesRE is SIDELOCK_FENCES: name=fence pairs joined by ",".
var fencesRE = regexp.MustCompile(`^[^=,]+=[1-9][0-9]*(,[^=,]+=[1-9][0-9]*)*$`)

// assertSetEnv checks what setScript printed for the set of names (in
// canonical order) against the masters, read through s, and returns the
// fences by name.
func assertSetEnv(t *testing.T, s *sidecar, env map[string]string, names ...string) map[string]int64 {
	t.Helper()
	if env["name"] != strings.Join(names, ",") || env["fence"] != "none" || env["token"] != "32" || !fencesRE.MatchString(env["fences"]) {
		t.Fatalf("the command of set %v saw %v", names, env)
	}
	fences := map[string]int64{}
	var order []string
	for _, pair := range strings.Split(env["fences"], ",") {
		name, fence, _ := strings.Cut(pair, "=")
		fences[name], _ = strconv.ParseInt(fence, 10, 64)
		order = append(order, name)
	}
	if !slices.Equal(order, names) {
		t.Fatalf("SIDELOCK_FENCES %q: want the locks %v in that order", env["fences"], names)
	}
	c := client.New(s.api, nil)
	for _, name := range names {
		st, err := c.Inspect(context.Background(), name)
		if err != nil || !st.Held || st.Fence != fences[name] {
			t.Errorf("lock %s: %+v, %v; SIDELOCK_FENCES says fence %d", name, st, err, fences[name])
		}
	}
	return fences
}

// When one lock of the set ends (here released with the set's token
// through the lock API), the set ends: the command is stopped, exec exits
// 79 naming the lock set, and the other lock is free.
func TestE2EExecLockSetStopsTheCommandWhenALockEnds(t *testing.T) {
	a := startSidecar(t, durableMasters(t, 3))
	run := startCLI(t, a, "exec", "stop/a,stop/b", "--", "sh", "-c", `echo "token $SIDELOCK_TOKEN"; read x`)
	token := strings.TrimPrefix(run.line(t), "token ")
	c := client.New(a.api, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Release(ctx, "stop/b", token); err != nil {
		t.Fatalf("releasing one lock of the set with its token: %v", err)
	}
	if code := run.exit(t); code != exitLockLost || !strings.Contains(run.stderr.String(), `lock set "stop/a,stop/b"`) {
		t.Fatalf("exec: exit %d, want %d naming the lock set; stderr: %s", code, exitLockLost, run.stderr)
	}
	if st, err := c.Inspect(ctx, "stop/a"); err != nil || st.Held {
		t.Errorf("the set's other lock after its end: %+v, %v", st, err)
	}
}

// A NAME with a "," is a lock set: checked as the sidecar checks one, and
// refused with --permits, --mode or --leader.
func TestExecSetUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--permits", "2", "a,b", "--", "true"},
		{"--mode", "shared", "a,b", "--", "true"},
		{"--leader", "a,b", "--", "true"},
		{"a,b,a", "--", "true"},
		{"a,,b", "--", "true"},
		{"a,b#", "--", "true"},
		{strings.Repeat("n,", 16) + "x", "--", "true"},
	} {
		_, err := parseExec(args, func(string) string { return "" }, nil)
		var ec *exitCode
		if !errors.As(err, &ec) || ec.code != exitUsage {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	o, err := parseExec([]string{"--wait", "5s", "c,a/x,b", "--", "true"}, func(string) string { return "" }, nil)
	if err != nil || !slices.Equal(o.set, []string{"a/x", "b", "c"}) {
		t.Errorf("a set: %+v, %v", o, err)
	}
	if o, err := parseExec([]string{"a", "--", "true"}, func(string) string { return "" }, nil); err != nil || o.set != nil {
		t.Errorf("one lock: %+v, %v", o, err)
	}
}

// The command of a set gets the set's fences; any other lease's command its
// fence; neither inherits a lease variable exec did not set.
func TestExecCommandEnvOfASet(t *testing.T) {
	t.Setenv("SIDELOCK_SLOT", "7")
	t.Setenv("SIDELOCK_FENCES", "outer=1")
	set := commandEnv(client.Lease{Name: "a,b", Token: "t"}, []client.SetLock{{Name: "a", Fence: 3}, {Name: "b", Fence: 4}})
	lock := commandEnv(client.Lease{Name: "a", Token: "t", Fence: 5}, nil)
	for _, c := range []struct {
		env        []string
		want, gone []string
	}{
		{set, []string{"SIDELOCK_LOCK_NAME=a,b", "SIDELOCK_FENCES=a=3,b=4"}, []string{"SIDELOCK_FENCE", "SIDELOCK_SLOT"}},
		{lock, []string{"SIDELOCK_LOCK_NAME=a", "SIDELOCK_FENCE=5"}, []string{"SIDELOCK_FENCES", "SIDELOCK_SLOT"}},
	} {
		for _, kv := range c.want {
			if !slices.Contains(c.env, kv) {
				t.Errorf("no %s in %q", kv, c.env)
			}
		}
		for _, kv := range c.env {
			if k, _, _ := strings.Cut(kv, "="); slices.Contains(c.gone, k) {
				t.Errorf("%s in the environment with %s", kv, c.want[0])
			}
		}
	}
}
