package health_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/health"
	"github.com/sidelock/sidelock/pkg/redistest"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

func redisMasters(t *testing.T, servers []*redistest.Server) []redlock.Node {
	t.Helper()
	nodes := make([]redlock.Node, len(servers))
	for i, s := range servers {
		n := redisnode.New(redisnode.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = n.Close() })
		nodes[i] = n
	}
	return nodes
}

// checkUntil runs rounds every 20ms until cond holds, and returns how long
// that took.
func checkUntil(t *testing.T, c *health.Checker, within time.Duration, what string, cond func(health.Report) bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		r := c.Check(context.Background())
		if cond(r) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("not within %v: %s; last report %+v", within, what, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A real master killed and restarted empty sits out the restart guard,
// measured from its restart, while the other two keep the quorum.
func TestRealMasterRestartIsKeptOutForTheGuard(t *testing.T) {
	const restartGuard = time.Second
	servers := redistest.StartN(t, 3)
	quorum := &quorumView{eligible: map[int]bool{}}
	c, err := health.New(redisMasters(t, servers), 2, health.Config{RestartGuard: restartGuard, SetEligible: quorum.Set, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Fresh servers are on probation too: nothing tells them from restarted ones.
	took := checkUntil(t, c, 5*time.Second, "fresh masters eligible", func(r health.Report) bool { return eligible(r) == "EEE" })
	t.Logf("fresh masters eligible after %v", took)

	before := c.Report().GuardEvents.RestartProbation
	restartBegan := time.Now()
	servers[0].Restart(t)
	r := c.Check(context.Background())
	if eligible(r) != "-EE" || !r.Ready || quorum.Get(0) || !strings.Contains(r.Nodes[0].Problem, "restart probation") ||
		r.Nodes[0].ProbationRemaining <= 0 {
		t.Fatalf("just after the restart: %+v", r.Nodes[0])
	}
	checkUntil(t, c, 5*time.Second, "restarted master eligible", func(r health.Report) bool { return r.Nodes[0].Eligible })
	out := time.Since(restartBegan)
	t.Logf("restarted master kept out for %v (restart guard %v)", out, restartGuard)
	if out < restartGuard {
		t.Fatalf("eligible %v after the restart, before the %v guard", out, restartGuard)
	}
	if r := c.Report(); r.GuardEvents.RestartProbation != before+1 || !quorum.Get(0) {
		t.Fatalf("after the probation: %+v", r)
	}
}
