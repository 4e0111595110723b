package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leaderScript prints the term once elected, then runs until its stdin
// closes.
const leaderScript = `echo "leader $SIDELOCK_FENCE"; read x || true`

// startCandidate runs `sidelock exec --leader --owner ID elect -- sh -c
// leaderScript` against s.
func startCandidate(t *testing.T, s *sidecar, id string) *cliChild {
	t.Helper()
	return startCLI(t, s, "exec", "--leader", "--owner", id, "elect", "--", "sh", "-c", leaderScript)
}

// elected waits until the candidate's command runs and returns its term.
func elected(t *testing.T, c *cliChild) int64 {
	t.Helper()
	f := strings.Fields(c.line(t))
	if len(f) != 2 || f[0] != "leader" {
		t.Fatalf("the leader's command printed %q", f)
	}
	term, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || term == 0 {
		t.Fatalf("term %q", f[1])
	}
	return term
}

// The first candidate leads (watch --once names it); a standby on another
// sidecar campaigns without running its command until the leader's
// command exits, then leads with a later term; a third takes over when
// the second's exec is killed (kill -9: its guard kills the command and
// the connection closes).
func TestE2EExecLeaderTakesOver(t *testing.T) {
	masters := durableMasters(t, 3)
	a, b := startSidecar(t, masters), startSidecar(t, masters)
	first := startCandidate(t, a, "first")
	term1 := elected(t, first)
	assertLeader(t, a, "first", term1)

	second := startCandidate(t, b, "second")
	eventually(t, 5*time.Second, "the standby campaigns", func() bool { return metricValue(t, b, "sidelock_waiters") == 1 })
	second.noLine(t, "a standby ran its command while another led")

	first.stdin.Close() // the leader's command exits: exec resigns
	if code := first.exit(t); code != 0 {
		t.Fatalf("the first leader's exec: exit %d, %s", code, first.stderr)
	}
	term2 := elected(t, second)
	if term2 <= term1 {
		t.Errorf("second term %d not after the first %d", term2, term1)
	}
	assertLeader(t, b, "second", term2)

	third := startCandidate(t, a, "third")
	eventually(t, 5*time.Second, "the third campaigns", func() bool { return metricValue(t, a, "sidelock_waiters") == 1 })
	if err := second.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	term3 := elected(t, third)
	if term3 <= term2 {
		t.Errorf("third term %d not after the second %d", term3, term2)
	}
	assertLeader(t, a, "third", term3)
	third.stdin.Close()
	if code := third.exit(t); code != 0 {
		t.Errorf("the third leader's exec: exit %d", code)
	}
}

// A campaign that a signal interrupts exits 75, not elected.
func TestE2EExecLeaderInterruptedWhileCampaigning(t *testing.T) {
	a := startSidecar(t, durableMasters(t, 3))
	leader := startCandidate(t, a, "leader")
	elected(t, leader)
	standby := startCandidate(t, a, "standby")
	eventually(t, 5*time.Second, "the standby campaigns", func() bool { return metricValue(t, a, "sidelock_waiters") == 1 })
	if err := standby.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := standby.exit(t); code != exitNotAcquired {
		t.Errorf("interrupted standby: exit %d, %s", code, standby.stderr)
	}
	leader.stdin.Close()
	if code := leader.exit(t); code != 0 {
		t.Errorf("leader: exit %d", code)
	}
}

// assertLeader checks with `sidelock watch --once` who leads.
func assertLeader(t *testing.T, s *sidecar, owner string, term int64) {
	t.Helper()
	r := runCLI(t, apiEnv(s), "watch", "--once", "elect")
	l := watchEvent(t, strings.TrimSpace(r.stdout))
	if r.code != 0 || heldOf(l) != "held" || l.Owner != owner || l.Fence != term {
		t.Errorf("watch --once: %v, want %s leading in term %d", r, owner, term)
	}
}
