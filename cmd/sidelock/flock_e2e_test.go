package main

import (
	"strings"
	"testing"
	"time"
)

// A lock held by another ends exec and lock with --conflict-exit-code (as
// flock's -E, so that scripts ported from `flock -n`, which exits 1, keep
// their meaning), 75 by default, for a lock, a semaphore's permit and a
// lock set alike; other endings keep their codes, and a code no process can
// exit with is a usage error.
func TestE2EConflictExitCode(t *testing.T) {
	a := startSidecar(t, durableMasters(t, 3))
	a.acquire(t, "/locks/busy")
	a.acquire(t, "/semaphores/busy?permits=1")
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"exec", "busy", "--", "true"}, exitNotAcquired},
		{[]string{"exec", "--conflict-exit-code", "1", "busy", "--", "true"}, 1},
		{[]string{"exec", "--conflict-exit-code", "0", "--wait", "100ms", "busy", "--", "true"}, 0},
		{[]string{"exec", "--conflict-exit-code", "1", "--permits", "1", "busy", "--", "true"}, 1},
		{[]string{"exec", "--conflict-exit-code", "1", "busy,free", "--", "true"}, 1},
		{[]string{"lock", "busy"}, exitNotAcquired},
		{[]string{"lock", "--conflict-exit-code", "1", "busy"}, 1},
		{[]string{"exec", "--conflict-exit-code", "1", "free", "--", "sh", "-c", "exit 3"}, 3},
		{[]string{"exec", "--conflict-exit-code", "256", "busy", "--", "true"}, exitUsage},
		{[]string{"lock", "--conflict-exit-code", "-1", "busy"}, exitUsage},
	} {
		if r := runCLI(t, apiEnv(a), c.args...); r.code != c.want {
			t.Errorf("%v: exit %d, want %d\n%s", c.args, r.code, c.want, r)
		}
	}
}

// An error the sidecar answered is printed with one "sidelock:", the CLI's,
// not the client library's again ("sidelock: sidecar at …: sidelock: 401").
func TestE2ESidecarErrorsSaySidelockOnce(t *testing.T) {
	a := startSidecar(t, durableMasters(t, 3), "SIDELOCK_API_TOKEN="+apiTokenE2E)
	for _, args := range [][]string{{"exec", "job", "--", "true"}, {"lock", "job"}, {"status", "job"}, {"watch", "--once", "job"}} {
		r := runCLI(t, apiEnv(a), args...) // no token: 401
		if r.code != exitUnavailable || !strings.Contains(r.stderr, "401") || strings.Count(r.stderr, "sidelock:") != 1 {
			t.Errorf("%v: want exit %d and one \"sidelock:\" before the 401\n%s", args, exitUnavailable, r)
		}
	}
}

// exec --max-hold ends the command when the lease reaches its max_hold and
// says so in those words, as `sidelock lock` does; exit 79.
func TestE2EExecNamesMaxHold(t *testing.T) {
	a := startSidecar(t, durableMasters(t, 3))
	c, out := runExecChild(t, a.api, "--max-hold", "1s", "capped", "--", "sleep", "20")
	if code := exitCodeOf(t, c, 15*time.Second); code != exitLockLost {
		t.Fatalf("exit %d, want %d: %s", code, exitLockLost, out)
	}
	if text := out.String(); !strings.Contains(text, "max_hold") || strings.Contains(text, "not renewed") {
		t.Errorf("exec did not name max_hold as what ended the lock:\n%s", text)
	}
}
